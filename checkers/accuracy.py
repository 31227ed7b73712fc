"""Certified accuracy: every point of a dataset decided, for models that need not be correct.

Claim.  `decide_all` reports, for every point, whether the model is certainly correct (the
label's logit strictly above every other logit at every labelled position), certainly wrong (some
other logit >= the label's; a tie is wrong), or undecided (softmax models only: certified balls
still overlap at the precision cap).  `correct + wrong + undecided = points`, every wrong and
undecided point is listed by index, and the smallest margin over the correct points lies in the
reported enclosure (exact, lo == hi, for rational models).

How each point is decided:
  rational models (relu, hardmax, MLP; no softmax)  exact integers (checkers.evaluate), every margin
  one-layer attention-only softmax models           certified float64 tables (checkers.attention_tables);
                                                     the points within the error bound tau of a tie in arb
  other softmax models                               certified float64 intervals over the batch
                                                     (checkers.softmax_intervals), the points they leave
                                                     unsure in arb balls (checkers.softmax_balls)
`method` forces one way for softmax models: "tables", "intervals" or "balls" (arb for every point);
"auto" takes the first that applies.

Points split into index ranges (chunks) that are independent: any process may decide any chunk,
and merging the chunks (counts added, lists joined in index order, margin enclosures' minima)
gives the single-process result exactly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.budget import TimeLimitPassed, time_limit_passed
from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Model


METHODS = ("auto", "tables", "intervals", "balls")
MAX_LIMITS = 100  # undecided points per chunk (and per verdict) whose reason is kept


@dataclass(frozen=True)
class ChunkAccuracy:
    """The decisions of points lo..hi-1."""

    lo: int
    hi: int
    correct: int
    wrong: np.ndarray  # dataset indices (int64, increasing)
    undecided: np.ndarray
    margin: tuple[Fraction, Fraction] | None  # encloses the minimum margin over the correct points
    by_tables: int = 0  # points decided by the certified float64 tables or intervals
    by_balls: int = 0  # points decided (or left undecided) in arb
    low_index: int = -1  # a correct point whose enclosure gives the margin's lower end (-1: no margin)
    high_index: int = -1  # one whose enclosure gives its upper end
    limits: tuple = ()  # (index, why undecided) for the first MAX_LIMITS undecided points (journalled)
    stopped: int = 0  # points not decided because the run reached --max-seconds (never journalled)

    def to_json(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "correct": self.correct, "wrong": [int(i) for i in self.wrong],
                "undecided": [int(i) for i in self.undecided],
                "margin": None if self.margin is None else [str(self.margin[0]), str(self.margin[1])],
                "low_index": self.low_index, "high_index": self.high_index,
                "by_tables": self.by_tables, "by_balls": self.by_balls}


@dataclass(frozen=True)
class AccuracyVerdict:
    task: str
    points: int
    correct: int
    wrong: np.ndarray  # dataset indices, increasing
    undecided: np.ndarray
    margin: tuple[Fraction, Fraction] | None  # min margin over correct points lies in [lo, hi]
    path: str
    seconds: float
    by_tables: int = 0
    by_balls: int = 0
    notes: tuple[str, ...] = field(default=())
    limits: tuple = ()  # (index, why undecided: the limit reached) for the first undecided points known
    stopped: int = 0  # points not decided: the run reached --max-seconds first (counts above: the rest)
    stop: str = ""  # how the run stopped (empty: it decided every point)

    @property
    def decided(self) -> bool:
        return len(self.undecided) == 0 and self.stopped == 0

    @property
    def verdict(self) -> str:
        """verified (every point correct), refuted (some point certainly wrong: also in a stopped run),
        or undecided (points left at a precision limit, or not reached before --max-seconds)."""
        if len(self.wrong):
            return "refuted"
        return "verified" if self.decided and self.correct == self.points else "undecided"


def _indices(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


class _Least:
    """[least lower end, least upper end] of correct points' margin enclosures, and the points
    giving each end."""

    def __init__(self):
        self.margin, self.low_index, self.high_index = None, -1, -1

    def add(self, low, high, low_index: int, high_index: int) -> None:
        if self.margin is None:
            self.margin, self.low_index, self.high_index = (low, high), int(low_index), int(high_index)
            return
        a, b = self.margin
        if low < a:
            a, self.low_index = low, int(low_index)
        if high < b:
            b, self.high_index = high, int(high_index)
        self.margin = (a, b)


def _min_enclosure(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return (min(a[0], b[0]), min(a[1], b[1]))


class PointDecider:
    """Decides index ranges of one (model, task); built once per process."""

    def __init__(self, model: Model, task, start_precision: int | None = None, max_precision: int | None = None,
                 force_exact: bool = False, method: str = "auto", deadline: tuple | None = None):
        from depthcert.checkers import softmax_balls as sb
        from depthcert.checkers.exhaustive import check_compatible, token_rows

        class_map = check_compatible(model, task)
        self.model, self.task = model, task
        self.class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
        self.tokens = token_rows(model, task)
        self.force_exact = force_exact
        self._deadline: tuple | None = None
        self._tables: dict[int, object] = {}
        self.table_reason = None
        if not model.is_rational:  # softmax heads, LayerNorm/RMSNorm or a gelu/silu MLP
            from depthcert.checkers.attention_tables import reason_not_applicable
            from depthcert.checkers.evaluate import Evaluator

            self.decider = sb.SoftmaxDecider(model, start_precision or sb.START_PRECISION,
                                             max_precision or sb.MAX_PRECISION)
            self.prefix = Evaluator(self.decider.prefix_model(), force_exact=force_exact, deadline=deadline)
            if method not in METHODS:
                raise BadInput(f"method must be one of {', '.join(METHODS)}, got {method!r}")
            why = reason_not_applicable(model) if method in ("auto", "tables") else f"method {method}"
            if why is None and model.has_norm_or_smooth:
                why = "LayerNorm/RMSNorm or a gelu/silu MLP (the tables need rational streams)"
            if why is None and task.outputs != "last":
                why = "a task labelling every position"
            if why is not None and method == "tables":
                raise BadInput(f"certified tables do not apply to this model: {why}")
            self.table_reason = why
            self.method = method
            self.intervals = None
            if why is not None and method in ("auto", "intervals"):
                self._interval_forward()
            self.path = ("certified float64 tables + arb" if why is None else
                         "certified float64 intervals + arb" if self.intervals is not None else "certified balls (arb)")
        else:
            from depthcert.checkers.evaluate import Evaluator

            self.ev = Evaluator(model, force_exact=force_exact, deadline=deadline)
            self.path = f"exact ({self.ev.path})"

    def _interval_forward(self):
        """The batch interval forward (auto: also where a table cannot be built), or None."""
        if self.intervals is None and self.method in ("auto", "intervals"):
            from depthcert.checkers.softmax_intervals import IntervalForward

            self.intervals = IntervalForward(self.model, self.decider.first)
        return self.intervals

    def _table(self, n: int):
        if n not in self._tables:
            from depthcert.checkers.attention_tables import OneLayerTables

            try:
                self._tables[n] = OneLayerTables(self.model, n)
            except (OverflowError, ArithmeticError):
                self._tables[n] = None  # scores too far apart for float64: arb decides
        return self._tables[n]

    def stop_after(self, seconds: float, what: str, start: float | None = None) -> None:
        """From now on, deciding stops once `seconds` have passed since `start` (perf_counter;
        default now): checked before a batch, before every point decided in arb, before every
        precision the balls try, inside the exact tie decision's arithmetic, and in the big-integer
        pass before a layer (--max-seconds: no estimate bounds a model's time, its numbers can have
        thousands of digits).  chunk() then raises Stopped with what the chunk decided so far."""
        self._deadline = ((time.perf_counter() if start is None else start) + seconds, seconds, what)
        (self.ev if self.model.is_rational else self.prefix).stop_after(seconds, what, start)
        if not self.model.is_rational:
            self.decider.run_deadline = self._deadline[0]

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.perf_counter() > self._deadline[0]:
            raise time_limit_passed(self._deadline[2], self._deadline[1])

    def chunk(self, lo: int, hi: int, batch_size: int = 8192) -> ChunkAccuracy:
        """The decisions of points lo..hi-1.  Past the deadline (stop_after): Stopped, carrying the
        chunk's points decided so far (the others counted as stopped)."""
        acc = {"correct": 0, "wrong": [], "undecided": [], "by_tables": 0, "by_balls": 0}
        least = _Least()
        limits = []

        def result(stopped: int = 0) -> ChunkAccuracy:
            return ChunkAccuracy(lo, hi, acc["correct"], _indices(sorted(acc["wrong"])),
                                 _indices(sorted(acc["undecided"])), least.margin, acc["by_tables"], acc["by_balls"],
                                 least.low_index, least.high_index, tuple(sorted(limits)[:MAX_LIMITS]), stopped)

        try:
            self._chunk(lo, hi, batch_size, acc, least, limits)
        except TimeLimitPassed as exc:
            if self._deadline is None:
                raise
            done = acc["correct"] + len(acc["wrong"]) + len(acc["undecided"])
            raise Stopped(result(hi - lo - done), str(exc)) from None
        return result()

    def _chunk(self, lo, hi, batch_size, acc, least, limits) -> None:
        for batch in self.task.batches(batch_size, lo, hi):
            self._check_deadline()
            ids = batch.ids if self.tokens is None else self.tokens[batch.ids]
            if self.model.is_rational:
                c, w, m = self._exact_batch(batch, ids)
                acc["correct"] += c
                acc["wrong"].extend(w)
                if m is not None:
                    least.add(m[0], m[0], m[1], m[1])
                continue
            todo = np.arange(len(batch.index))
            tab = self._table(ids.shape[1]) if self.table_reason is None else None
            # the float64 decisions of the batch (counted before its points in arb: a run stopped among
            # those keeps them)
            float_correct, float_wrong, float_least = 0, [], []
            if tab is not None:
                status, mhat = tab.decide(ids, self.class_rows[batch.labels])
                ok = status == 1
                float_correct = int(ok.sum())
                float_wrong = [int(i) for i in batch.index[status == 0]]
                acc["by_tables"] += int((status >= 0).sum())
                if ok.any() and len(self.model.classes) > 1:  # a single class has no margin
                    j = int(np.argmin(mhat[ok]))
                    low, at = float(mhat[ok][j]), int(batch.index[ok][j])
                    # low -/+ tau rounded outward (one rounding, then one float further out)
                    float_least.append((Fraction(float(np.nextafter(low - tab.tau, -np.inf))),
                                        Fraction(float(np.nextafter(low + tab.tau, np.inf))), at, at))
                todo = np.nonzero(status < 0)[0]
            elif self._interval_forward() is not None:
                Hnum, den = self._stream_in(ids, floats=True)
                n = ids.shape[1]
                if batch.labels.ndim == 1:
                    lab = np.full((len(ids), n), -1, dtype=np.int64)
                    lab[:, n - 1] = self.class_rows[batch.labels]
                else:
                    lab = np.where(batch.labels >= 0, self.class_rows[np.maximum(batch.labels, 0)], -1)
                status, lo_m, hi_m, _ = self._interval_forward().decide(Hnum, den, lab)
                ok = status == 1
                float_correct = int(ok.sum())
                float_wrong = batch.index[status == -1].tolist()  # Python ints, as int(i) gave
                acc["by_tables"] += int((status != 0).sum())
                if ok.any() and len(self.model.classes) > 1:  # a single class has no margin (NaN ends)
                    a, b = int(np.argmin(lo_m[ok])), int(np.argmin(hi_m[ok]))
                    float_least.append((Fraction(float(lo_m[ok][a])), Fraction(float(hi_m[ok][b])),
                                        int(batch.index[ok][a]), int(batch.index[ok][b])))
                todo = np.nonzero(status == 0)[0]
            acc["correct"] += float_correct
            acc["wrong"].extend(float_wrong)
            for m in float_least:
                least.add(*m)
            if len(todo):
                self._ball_points(batch, ids, todo, least, limits, acc)

    def _exact_batch(self, batch, ids):
        from depthcert.checkers.exhaustive import check_batch
        from depthcert.checkers.tasks import Batch

        margins, den, _, _, _ = check_batch(self.ev, Batch(batch.index, ids, batch.labels), self.class_rows,
                                            None, need_logits=False)
        if len(margins) and margins[0] is None:  # a single class: every point correct, no margin
            return len(margins), [], None
        bad = np.array([m <= 0 for m in margins], dtype=bool)
        good = [m for m, b in zip(margins, bad) if not b]
        m = None
        if good:
            j = min(range(len(good)), key=lambda k: good[k])
            m = (Fraction(int(good[j]), den), int(batch.index[~bad][j]))
        return int((~bad).sum()), [int(i) for i in batch.index[bad]], m

    def _stream_in(self, ids, floats: bool = False):
        """(Hnum, den): the exact stream entering the first non-rational layer.  With no rational
        layer before it, that is the one-hot embedding itself (built directly: the prefix evaluator
        would multiply it by an identity matrix).  floats (the float64 intervals, no norm): on the
        prefix's float64 path (integers proven below 2^53) its stream itself, float64 holding
        exact integers, instead of the same numbers read out by the identity W_O as int64; with
        no rational layer, the one-hot embedding as float64 (0 and 1, exact)."""
        if self.decider.first:
            ev = self.prefix
            if floats and ev.use_float and not self.model.has_norm_or_smooth \
                    and ev.denominator == ev.stream_denominator:  # W_O = I: logits = stream, c = 1
                X, k = ev._stream(ids, last_only=False)
                if k == 1:
                    return X, ev.denominator
            return ev.logits_all(ids)
        B, n = ids.shape
        V, d = len(self.model.vocab), self.model.dim
        # floats: the float64 intervals take float64 integers as they are (no int64 copy to convert)
        as_float = floats and not self.model.has_norm_or_smooth  # a norm reads exact integers
        H = np.zeros((B, n, d), dtype=np.float64 if as_float else np.int64)
        rows = np.arange(B)[:, None]
        H[rows, np.arange(n)[None, :], ids] = 1
        H[:, np.arange(n), V + np.arange(n)] = 1
        if self.model.constant_row:
            H[:, :, self.model.constant_index] = 1
        return H, 1

    def _ball_points(self, batch, ids, rows, least, limits, acc) -> None:
        """Decide the points `rows` of the batch in arb, one at a time, counting each into acc as it
        is decided (a run stopped at its deadline keeps the points decided before it)."""
        from depthcert.checkers.exhaustive import _ball_labels

        Hnum, den = self._stream_in(ids[rows])
        n = ids.shape[1]
        for k, i in enumerate(rows):
            # a point in arb can take seconds (every precision up to the cap): the time limit is
            # checked before each one (and inside it: SoftmaxDecider.run_deadline), not only before
            # the batch of up to 8,192 points
            self._check_deadline()
            d = self.decider.decide(Hnum[k], den, _ball_labels(batch.labels[i], self.class_rows, n))
            acc["by_balls"] += 1
            if d.status == "correct":
                acc["correct"] += 1
                if d.margin is not None:
                    least.add(d.margin[0], d.margin[1], int(batch.index[i]), int(batch.index[i]))
            elif d.status == "wrong":
                acc["wrong"].append(int(batch.index[i]))
            else:
                acc["undecided"].append(int(batch.index[i]))
                if len(limits) < MAX_LIMITS:
                    limits.append((int(batch.index[i]), d.limit))


class Stopped(TimeLimitPassed):
    """A chunk stopped at the run's deadline: `partial` holds the points it decided (the rest
    counted in partial.stopped), `why` the limit's message.  A caller that does not report partial
    counts sees the one-line BadInput it always saw."""

    def __init__(self, partial: ChunkAccuracy, why: str):
        super().__init__(why)
        self.partial, self.why = partial, why


def merge(task, results, path: str, seconds: float, notes=(), stop: str = "") -> AccuracyVerdict:
    """Chunk results covering 0..size-1 exactly once -> the verdict (order-independent)."""
    results = sorted(results, key=lambda r: r.lo)
    at = 0
    for r in results:
        if r.lo != at:
            raise BadInput(f"chunks do not cover the dataset: a gap or overlap at point {at}")
        at = r.hi
    if at != task.size:
        raise BadInput(f"chunks cover {at} of {task.size} points")
    margin = None
    for r in results:
        margin = _min_enclosure(margin, r.margin)
    wrong = np.concatenate([_indices([])] + [r.wrong for r in results])
    undecided = np.concatenate([_indices([])] + [r.undecided for r in results])
    correct = sum(r.correct for r in results)
    stopped = sum(r.stopped for r in results)
    if correct + len(wrong) + len(undecided) + stopped != task.size:
        raise BadInput("chunk counts do not add up to the dataset size")
    limits = tuple(sorted(x for r in results for x in r.limits)[:MAX_LIMITS])
    return AccuracyVerdict(task.name, task.size, correct, wrong, undecided, margin, path, seconds,
                           sum(r.by_tables for r in results), sum(r.by_balls for r in results), tuple(notes), limits,
                           stopped, stop if stopped else "")


def merge_stopped(task, results, lo_hi_left, path: str, seconds: float, notes, stop: str) -> AccuracyVerdict:
    """The verdict of a run stopped at its deadline: the chunks it finished or stopped in (each
    counting its undecided-by-the-stop points as stopped) and the chunks it never started
    (lo_hi_left: (lo, hi) pairs, all their points stopped).  Every count is of points decided; the
    minimum margin is over the correct points decided (the others may lie below it)."""
    empty = _indices([])
    never = [ChunkAccuracy(lo, hi, 0, empty, empty, None, stopped=hi - lo) for lo, hi in lo_hi_left]
    return merge(task, list(results) + never, path, seconds, notes, stop=stop)


def chunks(size: int, chunk: int) -> list[tuple[int, int]]:
    return [(lo, min(size, lo + chunk)) for lo in range(0, size, chunk)]


def decide_all(model: Model, task, chunk_points: int = 65536, batch_size: int = 8192, **opts) -> AccuracyVerdict:
    """Every point in this process (the reference the sharded runs must equal)."""
    t0 = time.perf_counter()
    dec = PointDecider(model, task, **opts)
    results = [dec.chunk(lo, hi, batch_size) for lo, hi in chunks(task.size, chunk_points)]
    return merge(task, results, dec.path, time.perf_counter() - t0)
