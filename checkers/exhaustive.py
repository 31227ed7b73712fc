"""verify(model, task): check every dataset point exactly; strict argmax, ties fail.

A point is correct iff its label's logit is strictly above every other logit (for tasks that
label every position: at every labelled position).  The verdict carries the exact minimum
margin (correct logit minus best other logit) over all points and labelled positions, and the
first failing point in index order as a replayable counterexample naming the failing position.

Softmax models are decided point by point in certified ball arithmetic
(checkers/softmax_balls.py): a point is correct or wrong only when the balls separate; a point
they cannot separate at the precision cap makes the verdict "undecided", never a guess.
"""
from __future__ import annotations


import sys
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from depthcert.checkers.budget import charge_seconds, over_budget, seconds_limit
from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.model import Model
from depthcert.checkers.softmax_intervals import IntervalForward
from depthcert.checkers.tasks.base import Batch, Task


@dataclass(frozen=True)
class Counterexample:
    """The first dataset point (smallest index) where the label's logit is not strictly above
    every other logit.  `index` replays it: `verify-construction ... --point INDEX`.

    tokens     the point's sequence; expected its label; predicted the best other class
    logits     exact logits in the model's class order (`classes`), at the failing position
    tie        True when the best other logit equals the label's (a tie is a failure)
    position   tasks that label every position (outputs "all"): the 0-based position that
               fails first; None for last-position classification
    logit_bounds  softmax models: certified enclosures [lo, hi] of the logits instead of values
    """

    index: int
    tokens: tuple[str, ...]
    expected: str
    predicted: str  # the best other class: its logit is >= the expected one's
    logits: tuple[Fraction, ...]  # in the model's class order (`classes`)
    tie: bool  # the best other logit equals the expected one
    classes: tuple[str, ...] = ()
    position: int | None = None  # tasks labelling every position: where it fails
    logit_bounds: tuple[tuple[Fraction, Fraction], ...] | None = None  # softmax: certified enclosures


@dataclass(frozen=True)
class UndecidedPoint:
    """The first point certified ball arithmetic could not decide (softmax models)."""

    index: int
    tokens: tuple[str, ...]
    expected: str
    position: int | None
    other: str  # the class the label could not be separated from
    margin: tuple[Fraction, Fraction] | None  # the margin lies in this interval (containing 0);
    # None: unknown (a hardmax argmax after a softmax layer could not be settled)
    precision: int  # bits reached (the cap)
    logit_bounds: tuple[tuple[Fraction, Fraction], ...] = ()
    classes: tuple[str, ...] = ()
    limit: str = ""  # which limit left it undecided: the precision cap, the exact decision's time or
    # term limit, or a model shape outside the exact decision (checkers/softmax_ties.py)


@dataclass(frozen=True)
class Verdict:
    """What `verify(model, task)` found, over every point of the task's dataset.

    verdict           (property) "verified" (every point correct, strict argmax), "refuted" (a
                      counterexample) or "undecided" (softmax: certified arithmetic could not
                      separate some point's logits at the precision cap); `verified` is the bool
    task              the task's name
    points_total      points in the dataset; points_covered: points the run speaks for
                      (evaluated, or covered by a proven symmetry); points_checked: evaluated
    min_margin        exact minimum over covered points of (label logit - best other logit); a
                      refuted run stops at its counterexample, so the minimum is over the points
                      evaluated up to it; None for a one-class model (no margin) and for softmax
                      models, whose margin is an enclosure (margin_enclosure)
    margin_enclosure  softmax models: (lo, hi), exact rationals, the minimum margin lies in [lo, hi]
    counterexample    the first failing point (Counterexample) or None
    undecided         softmax models: the first undecided point (UndecidedPoint) or None;
                      undecided_count: how many evaluated points were undecided
    path              the arithmetic used (e.g. "float64 (proven < 2^53)", "exact big integers")
    seconds           wall time of the evaluation
    notes             what else the run established (symmetry proof, shards, journal)
    journal           with a --journal: a checkers.journal.JournalUse (chunks taken from it)
    """

    task: str
    points_total: int
    points_checked: int
    points_covered: int
    min_margin: Fraction | None
    counterexample: Counterexample | None
    path: str
    seconds: float
    notes: tuple[str, ...] = field(default=())
    undecided: UndecidedPoint | None = None  # softmax only: the first undecided point
    undecided_count: int = 0
    margin_enclosure: tuple[Fraction, Fraction] | None = None  # softmax: min margin lies in here
    journal: object = None  # checkers.journal.JournalUse: how many chunks came from a journal

    @property
    def verified(self) -> bool:
        return self.counterexample is None and self.undecided is None and self.points_covered == self.points_total

    @property
    def verdict(self) -> str:
        if self.verified:
            return "verified"
        return "undecided" if self.counterexample is None and self.undecided is not None else "refuted"


def check_compatible(model: Model, task: Task) -> dict[int, int]:
    """The model must embed every task token and score every task label; returns task class ->
    model row.  The model's vocabulary may list the tokens in its own order (see token_rows)."""
    known = set(model.vocab)
    missing = [t for t in task.vocab if t not in known]
    if missing:
        raise BadInput(
            f"model vocabulary lacks {len(missing)} token{'s' if len(missing) != 1 else ''} of task {task.name}: "
            f"{', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}"
        )
    if model.max_length < task.length:
        raise BadInput(f"model has {model.max_length} positions but task {task.name} needs {task.length}")
    if getattr(task, "outputs", "last") == "all" and model.outputs != "all":
        raise BadInput(f"task {task.name} labels every position, but the model's outputs are \"last\" "
                       "(give it outputs \"all\")")
    rows = {c: i for i, c in enumerate(model.classes)}
    missing = [c for c in task.classes if c not in rows]
    if missing:
        raise BadInput(f"model classes lack task labels {missing[:5]}")
    return {ti: rows[c] for ti, c in enumerate(task.classes)}


def token_rows(model: Model, task: Task) -> np.ndarray | None:
    """task token id -> model embedding row, or None when the orders agree."""
    if tuple(model.vocab[: len(task.vocab)]) == tuple(task.vocab):
        return None
    index = {t: i for i, t in enumerate(model.vocab)}
    return np.array([index[t] for t in task.vocab], dtype=np.int64)


def _margins_last(num: np.ndarray, rows: np.ndarray):
    """num (B, C) logit numerators, rows (B,) label rows -> (margins (B,) or None, None)."""
    from depthcert.checkers.evaluate import _margins_from_logits

    return _margins_from_logits(num, rows), None


def check_batch(ev: Evaluator, batch: Batch, class_rows: np.ndarray, tokens: np.ndarray | None = None,
                need_logits: bool = True):
    """(margins numerators (B,), denominator, first failing row or -1, numerators, positions).

    Last-position tasks: numerators (B, C) (None when need_logits is False and the evaluator
    gives the margins without them: Evaluator.margins_last), positions None.  Tasks
    labelling every position: numerators (B, n, C); a point's margin is its minimum over
    labelled positions, and positions (B,) holds, per point, its first failing position (else
    its smallest margin's)."""
    ids = batch.ids if tokens is None else tokens[batch.ids]
    if batch.labels.ndim == 1:
        if not need_logits and hasattr(ev, "margins_last") and len(ev.model.classes) > 1:
            margins, den, num = ev.margins_last(ids, class_rows[batch.labels])
            bad = np.nonzero(np.asarray(margins <= 0, dtype=bool))[0]
            return margins, den, (int(bad[0]) if len(bad) else -1), num, None
        num, den = ev.logits(ids)
        margins, _ = _margins_last(num, class_rows[batch.labels])
        if margins is None:
            return np.array([None] * len(batch.labels), dtype=object), den, -1, num, None
        bad = np.nonzero(margins <= 0)[0]
        return margins, den, (int(bad[0]) if len(bad) else -1), num, None
    num, den = ev.logits_all(ids)  # (B, n, C)
    B, n = batch.labels.shape
    if num.shape[2] == 1:
        return np.array([None] * B, dtype=object), den, -1, num, np.full(B, n - 1)
    exact = num.dtype == object
    M = np.full((B, n), float("inf"), dtype=object) if exact else np.full((B, n), np.iinfo(np.int64).max)
    for k in range(n):
        lab = batch.labels[:, k]
        sel = np.nonzero(lab >= 0)[0]
        if len(sel):
            M[sel, k], _ = _margins_last(num[sel, k, :], class_rows[lab[sel]])
    labelled = batch.labels >= 0
    if not labelled.any(axis=1).all():
        raise BadInput("a point of the task labels no position")
    fail = np.asarray(M <= 0, dtype=bool)  # the sentinel never fails
    failed = fail.any(axis=1)
    point_margin = M.min(axis=1)
    position = np.where(failed, fail.argmax(axis=1), np.argmin(M, axis=1) if not exact else
                        np.array([min(range(n), key=lambda k: M[i, k]) for i in range(B)], dtype=np.int64))
    bad = np.nonzero(failed)[0]
    return point_margin, den, (int(bad[0]) if len(bad) else -1), num, position


@dataclass(frozen=True)
class Plan:
    """Which points to evaluate: all of them, or one per orbit with a checked equivariance."""

    indices: np.ndarray | None  # None = every index in order
    n_eval: int
    covered: int
    note: str


def plan_points(model: Model, task: Task, symmetry: str = "auto", max_scan: int | None = None) -> Plan:
    """symmetry = "auto": use orbit representatives when the model's equivariance under the
    task's symmetry group is proven on the weights (checkers.symmetry); otherwise every point.
    max_scan: refuse (BadInput, naming --max-points) a representative search that decodes more
    points than this."""
    if symmetry not in ("auto", "off"):
        raise BadInput(f"--symmetry must be auto or off, got {symmetry!r}")
    if symmetry == "auto":
        from depthcert.checkers.symmetry import check_equivariance, checked_orbits

        scan = task.orbit_scan_points()
        if max_scan is not None and scan > max_scan:
            raise BadInput(f"{task.describe()}: finding the orbit representatives decodes {scan} points, above the "
                           f"limit {max_scan}; raise it with --max-points {scan}, or use smaller sizes")
        groups = task.symmetry_groups()
        reps = checked_orbits(task) if groups else None  # EnumerationError (exit 4) on a faulty enumerator
        if reps is None:
            return Plan(None, task.size, task.size, "symmetry: none declared for this task; every point evaluated")
        report = check_equivariance(model, groups)
        if report.ok:
            idx, covered = reps.indices, sum(reps.sizes)
            return Plan(np.asarray(idx, dtype=np.int64), len(idx), covered,
                        f"symmetry: equivariance proven ({report.reason}); {len(idx)} orbit representative{'s' if len(idx) != 1 else ''} cover{'' if len(idx) != 1 else 's'} "
                        f"{covered} point{'s' if covered != 1 else ''} (checked: distinct orbits, orbit sizes"
                        + (" and labels" if reps.labels_rederived else "") + " re-derived)")
        return Plan(None, task.size, task.size, f"symmetry: not used, {report.reason}; every point evaluated")
    return Plan(None, task.size, task.size, "symmetry: off; every point evaluated")


PARALLEL_MIN_POINTS = 400_000

# Throughput of the evaluators in multiply-adds per second, measured on this 2-core machine
# (benchmarks/bench_exact.py and bench_model_classes.py) and rounded down: for the time guard.
FLOAT_OPS_PER_SECOND = 1e9
EXACT_OPS_PER_SECOND = 4e7
CHECKED_OPS_PER_SECOND = 1e9  # float64 and its abs pass; batches redone exactly are slower (re-estimated
# after the first batch)
BALL_OPS_PER_SECOND = 1e7
INTERVAL_OPS_PER_SECOND = 2e8  # softmax models: float64 intervals (several products per product), balls
# for the points they leave (re-estimated by nothing: a floor for the time guard)


def forward_ops(model: Model, n: int) -> int:
    """Multiply-adds of one forward pass on a sequence of length n (dense products)."""
    d, total = model.dim, 0
    for li, layer in enumerate(model.layers):
        q = 1 if (li == model.n_layers - 1 and model.outputs == "last") else n
        total += len(layer) * (2 * q * d * d + 2 * n * q * d)
        if layer.mlp is not None:
            total += 2 * q * d * layer.mlp.width
    return total + len(model.classes) * d * (n if model.outputs == "all" else 1)


def _seconds_per_point(ev, task: Task, plan: Plan, batch_size: int, class_rows, tokens) -> float:
    """Seconds per point of check_batch on one batch of `batch_size` points from the middle of the
    plan, decoded as the run decodes them (a contiguous index range, or the plan's representatives)."""
    lo = (plan.n_eval - batch_size) // 2
    if plan.indices is None:
        batches = task.batches(batch_size, lo, lo + batch_size)
    else:
        batches = task.batches_of([int(i) for i in plan.indices[lo: lo + batch_size]], batch_size)
    t = time.perf_counter()
    for batch in batches:
        check_batch(ev, batch, class_rows, tokens, need_logits=False)
    return (time.perf_counter() - t) / batch_size


def verify(
    model: Model,
    task: Task,
    batch_size: int = 2048,
    progress: bool | None = None,
    force_exact: bool = False,
    symmetry: str = "off",
    plan: Plan | None = None,
    workers: int = 1,
    balls: dict | None = None,
    runner=None,
    journal: str | None = None,
    chunk_points: int | None = None,
) -> Verdict:
    """Evaluate every point of `task`, or one point per orbit when `symmetry="auto"` and the
    model's equivariance is proven (then the verdict covers every point).  Softmax models are
    decided in ball arithmetic; `balls` may set start_precision / max_precision (bits).

    Sharded runs (checkers/shards.py) give the same verdict: `workers` > 1 processes (from
    PARALLEL_MIN_POINTS points), a `runner` (depthcert/cli/cluster.py: Dask), and/or a `journal` file
    that records finished chunks so that a re-run after a crash resumes."""
    t0 = time.perf_counter()
    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    plan = plan or plan_points(model, task, symmetry)
    if model.has_softmax:
        charge_seconds(plan.n_eval * forward_ops(model, task.length) / INTERVAL_OPS_PER_SECOND,
                       f"deciding {plan.n_eval} softmax points (float64 intervals, balls where they overlap)")
        if runner is not None or journal is not None or (workers > 1 and plan.n_eval >= PARALLEL_MIN_POINTS):
            if not getattr(task, "index_ordered", True):
                raise BadInput("this dataset is not batched in index order (mixed lengths): it runs in one process, "
                               "without --dask or --journal")
            return _verify_balls_sharded(model, task, plan, class_rows, tokens, force_exact, batch_size, workers,
                                         runner, journal, progress, t0, chunk_points, balls)
        return _verify_balls(model, task, plan, class_map, class_rows, tokens, batch_size, progress,
                             force_exact, t0, **(balls or {}))
    limit = seconds_limit()
    # the a-priori bound of a model with big integers is slow too (weights of thousands of digits)
    ev = Evaluator(model, force_exact=force_exact,
                   deadline=None if limit is None else (t0 + limit, limit, "bounding the model's exact numbers"))
    rate = FLOAT_OPS_PER_SECOND if ev.use_float else (CHECKED_OPS_PER_SECOND if ev.checked else EXACT_OPS_PER_SECOND)
    what = f"evaluating {plan.n_eval} points ({ev.path}, {model.n_layers} layer{'s' if model.n_layers != 1 else ''}, d' = {model.dim})"
    estimate = plan.n_eval * forward_ops(model, task.length) / rate
    if over_budget(estimate) and plan.n_eval > 2 * batch_size:
        # the a-priori rate is a floor: time one batch before refusing
        charge_seconds(estimate * batch_size / plan.n_eval, f"a sample of {batch_size} of {plan.n_eval} points")
        per_point = _seconds_per_point(ev, task, plan, batch_size, class_rows, tokens)
        charge_seconds(per_point * plan.n_eval, what, f"measured on a batch of {batch_size} of them")
    else:
        charge_seconds(estimate, what)
    if limit is not None and not ev.use_float:
        # big integers: with no a-priori bound the numbers can grow doubly exponentially in depth,
        # and with one the a-priori rate still ignores their size (weights of thousands of digits),
        # so no estimate bounds the time: the big-integer pass checks --max-seconds before every layer
        ev.stop_after(limit, what, start=t0)
    from depthcert.checkers.evaluate import balanced_batch

    step = balanced_batch(ev, plan.n_eval, batch_size)  # batches even across in_order's threads
    if plan.indices is None:
        batches = task.batches(step)
    else:
        batches = task.batches_of(plan.indices, step)
    n_eval = plan.n_eval
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_eval, unit="pt", desc=f"verify {task.name}", leave=False, file=sys.stderr)
    ordered = getattr(task, "index_ordered", True)
    if not ordered:
        if runner is not None or journal is not None:
            raise BadInput("this dataset is not batched in index order (mixed lengths): it runs in one process, "
                           "without --dask or --journal")
        return _verify_unordered(ev, model, task, plan, batches, class_map, class_rows, tokens, bar, t0)
    if runner is not None or journal is not None or (workers > 1 and plan.n_eval >= PARALLEL_MIN_POINTS):
        return _verify_sharded(ev, model, task, plan, class_map, class_rows, tokens, force_exact, batch_size,
                               workers, runner, journal, bar, t0, chunk_points)
    checked = 0
    min_num = None
    counter = None
    first = True
    from depthcert.checkers.evaluate import in_order

    t_batch = time.perf_counter()
    # batches two at a time in worker threads where the evaluation is on float64, in order (in_order)
    for batch, result in in_order(ev, lambda b: check_batch(ev, b, class_rows, tokens, need_logits=False), batches,
                                  count=-(-plan.n_eval // step)):
        margins, den, bad, num, positions = result
        if first and len(batch.index) < plan.n_eval:  # the a-priori rate may be far off: re-estimate
            first = False
            per_point = (time.perf_counter() - t_batch) / len(batch.index)
            charge_seconds(per_point * (plan.n_eval - len(batch.index)), what, "measured on its first batch")
        checked += len(batch.index) if bad < 0 else bad + 1
        if bar is not None:
            bar.update(len(batch.index))
        if len(margins) and margins[0] is not None:
            # up to and including the first failure only: points after it in the same batch
            # must not count, or the reported margin would depend on --batch-size
            m = int(min(margins[: bad + 1] if bad >= 0 else margins))
            min_num = m if min_num is None else min(min_num, m)
        if bad >= 0:
            counter = _counterexample(model, task, class_map, batch, bad, num, den, positions, ev, tokens)
            break
    if bar is not None:
        bar.close()
    min_margin = None if min_num is None else Fraction(min_num, ev.denominator)
    cov = plan.covered if (counter is None and checked == plan.n_eval) else checked
    return Verdict(task.name, task.size, checked, cov, min_margin, counter, ev.path,
                   time.perf_counter() - t0, (plan.note,))


def _verify_sharded(ev, model, task, plan, class_map, class_rows, tokens, force_exact, batch_size, workers, runner,
                    journal_path, bar, t0, chunk_points=None) -> Verdict:
    """The plan's points in chunks (checkers/shards.py), merged in index order."""
    from depthcert.checkers import shards

    chunk = chunk_points or shards.CHUNK_POINTS
    spec = shards.Spec(model, task, class_rows, force_exact, plan.indices)
    jobs = shards.jobs_for(plan.n_eval, batch_size, chunk)
    journal = None
    if journal_path is not None:
        from depthcert.checkers.journal import Journal

        journal = Journal(journal_path, model, task, plan.indices, plan.n_eval, chunk)
    done = journal.done if journal is not None else {}
    journalled = set(done)  # chunks read back from the journal (record() adds the fresh ones to done)
    missing = [j for j in jobs if (j.lo, j.hi) not in done]
    n_done = len(jobs) - len(missing)
    if runner is None:
        runner = shards.ProcessRunner(workers) if workers > 1 else shards.InProcessRunner()
    fresh = runner.run(spec, missing)
    results = shards.in_order(jobs, done, fresh, journal.record if journal is not None else None)
    counts = [0, 0]
    from_journal = []  # the journalled chunk results the merge used

    def seen(r):
        counts[0] += r.batches[0]
        counts[1] += r.batches[1]
        if (r.lo, r.hi) in journalled:
            from_journal.append(r)
        if bar is not None:
            bar.update(r.checked)

    try:
        checked, min_num, bad_index = shards.merge(results, seen)
    finally:
        results.close()
        fresh.close()
        if bar is not None:
            bar.close()
    if bad_index < 0 and checked != plan.n_eval:  # a verdict is verified or has a counterexample
        raise RuntimeError(f"the chunks checked {checked} of {plan.n_eval} points without a failure")
    re_evaluated = _recheck_journalled(ev, task, class_rows, tokens, journal, from_journal)
    counter = None
    if bad_index >= 0:  # rebuild the counterexample here, from that one point
        batch = next(task.batches_of([bad_index]))
        _, den, bad, num, positions = check_batch(ev, batch, class_rows, tokens)
        if bad != 0:  # a fresh chunk's failure that does not fail again: never print it as one
            raise RuntimeError(f"point {bad_index} failed in its chunk but not when re-evaluated")
        counter = _counterexample(model, task, class_map, batch, bad, num, den, positions, ev, tokens)
    min_margin = None if min_num is None else Fraction(min_num, ev.denominator)
    cov = plan.covered if (counter is None and checked == plan.n_eval) else checked
    use = None
    if journal is not None:
        from depthcert.checkers.journal import JournalUse

        use = JournalUse(journal_path, len(jobs), n_done, re_evaluated)
    notes = (plan.note,) + ((use.note(),) if use is not None else ())
    if ev.checked:
        path = "float64, checked < 2^53 per batch" + (
            f" ({counts[1]} of {counts[0] + counts[1]} batches on big integers)" if counts[1] else "")
    else:
        path = ev.path
    where = runner.describe()
    return Verdict(task.name, task.size, checked, cov, min_margin, counter, path + (f"; {where}" if where else ""),
                   time.perf_counter() - t0, notes, journal=use)


def _recheck_journalled(ev, task, class_rows, tokens, journal, results) -> int:
    """Re-evaluate the recorded minimum-margin point of every journalled chunk the verdict uses
    (a failing chunk's is its counterexample): each must have exactly the recorded margin, or the
    run stops with one line naming the journal line (BadInput).  Returns how many were re-evaluated."""
    wanted = [r for r in results if r.min_index >= 0]
    if not wanted:
        return 0
    points = sorted({r.min_index for r in wanted})
    got = {}
    for batch in task.batches_of(points, len(points)):
        margins, _, _, _, _ = check_batch(ev, batch, class_rows, tokens, need_logits=False)
        got.update((int(i), m) for i, m in zip(batch.index, margins))
    for r in wanted:
        what = "counterexample" if r.bad_index >= 0 else "minimum-margin point"
        journal.check_point((r.lo, r.hi), what, r.min_index, r.min_num, got.get(r.min_index))
    return len(points)


def _counterexample(model, task, class_map, batch, bad, num, den, positions, ev=None, tokens=None) -> Counterexample:
    """Row `bad` of a checked batch as a replayable counterexample (its first failing position)."""
    pos = None if positions is None else int(positions[bad])
    label = batch.labels[bad] if pos is None else batch.labels[bad, pos]
    if num is None:  # margins came without logits (distinct hidden vectors): this point's, in full
        ids = batch.ids[bad:bad + 1] if tokens is None else tokens[batch.ids[bad:bad + 1]]
        one, den = ev.logits(ids)
        row = [int(v) for v in one[0]]
    else:
        row = [int(v) for v in (num[bad] if pos is None else num[bad, pos])]
    exp_row = class_map[int(label)]
    pred = max((i for i in range(len(row)) if i != exp_row), key=lambda i: row[i])
    p = task.point(int(batch.index[bad]))
    return Counterexample(
        p.index, p.tokens, task.classes[int(label)], model.classes[pred],
        tuple(Fraction(v, den) for v in row), row[pred] == row[exp_row], tuple(model.classes), pos,
    )


def _verify_unordered(ev, model, task, plan, batches, class_map, class_rows, tokens, bar, t0) -> Verdict:
    """Tasks whose batches do not come in index order (user datasets of mixed lengths are batched
    by length): every point is evaluated, then the verdict is taken in index order, exactly as
    for ordered tasks: the first failing index, and the minimum margin over the points up to
    and including it."""
    idx_parts, margin_parts = [], []
    den = ev.denominator
    for batch in batches:
        margins, den, _, _, _ = check_batch(ev, batch, class_rows, tokens, need_logits=False)
        idx_parts.append(batch.index)
        margin_parts.append(margins)
        if bar is not None:
            bar.update(len(batch.index))
    if bar is not None:
        bar.close()
    idx = np.concatenate(idx_parts)
    margins = np.concatenate([np.asarray(m, dtype=object) for m in margin_parts])
    counter, keep = None, np.ones(len(idx), dtype=bool)
    if len(margins) and margins[0] is not None:
        failing = idx[np.asarray(margins <= 0, dtype=bool)]
        if len(failing):
            first = int(failing.min())
            keep = idx <= first
            batch = next(task.batches_of([first]))
            _, den, bad, num, positions = check_batch(ev, batch, class_rows, tokens)
            counter = _counterexample(model, task, class_map, batch, bad, num, den, positions)
        min_margin = Fraction(int(min(margins[keep])), ev.denominator)
    else:
        min_margin = None
    checked = int(keep.sum())
    cov = plan.covered if counter is None else checked
    return Verdict(task.name, task.size, checked, cov, min_margin, counter, ev.path,
                   time.perf_counter() - t0, (plan.note,))


def _ball_labels(labels_row, class_rows: np.ndarray, n: int) -> list[tuple[int, int]]:
    """[(position, model class row)] a point asks to be checked."""
    if np.ndim(labels_row) == 0:
        return [(n - 1, int(class_rows[int(labels_row)]))]
    return [(k, int(class_rows[int(y)])) for k, y in enumerate(labels_row) if y >= 0]


class BallRun:
    """The deciders of a softmax run: the exact prefix, the float64 intervals, the balls (and,
    inside them, the exact tie decision).  `run(batches)` decides points in batch order."""

    def __init__(self, model, class_rows, tokens, force_exact=False, start_precision=None, max_precision=None):
        from depthcert.checkers import softmax_balls as sb

        self.model, self.class_rows, self.tokens = model, class_rows, tokens
        self.decider = sb.SoftmaxDecider(model, start_precision or sb.START_PRECISION,
                                         max_precision or sb.MAX_PRECISION)
        self.prefix = Evaluator(self.decider.prefix_model(), force_exact=force_exact)
        self.intervals = IntervalForward(model, self.decider.first)

    def path(self) -> str:
        return _ball_path(self.decider, self.intervals)

    def run(self, batches, ordered: bool = True, bar=None):
        """(summary, checked, first wrong index or None).  Ordered batches stop at the first
        wrong point; unordered ones are all decided, then summarised in index order up to and
        including the first wrong point."""
        model, class_rows, decider, intervals = self.model, self.class_rows, self.decider, self.intervals
        summary = _BallSummary()
        stored = []  # unordered tasks only: (index, decision) of every point, filtered at the end
        stored_fast = []  # unordered tasks only: (indices, lows, highs) of the interval-certified points
        checked, first_wrong = 0, None
        for batch in batches:
            ids = batch.ids if self.tokens is None else self.tokens[batch.ids]
            Hnum, den = self.prefix.logits_all(ids)  # (B, n, d'): the exact stream entering the first softmax layer
            n = ids.shape[1]
            status, lo, hi, pos = _interval_decisions(intervals, Hnum, den, batch.labels, class_rows, n)
            rest = np.nonzero(status != 1)[0]  # points the float64 intervals did not certify correct
            stop = len(batch.index)
            for i in rest:
                d = decider.decide(Hnum[i], den, _ball_labels(batch.labels[i], class_rows, n))
                index = int(batch.index[i])
                if status[i] == -1 and d.status == "correct":  # both certified: they must agree
                    from depthcert.checkers.softmax_balls import PathsDisagree

                    raise PathsDisagree(f"point {index}", "float64 intervals", "wrong", "arb balls",
                                        PathsDisagree.correct(d.margin))
                if ordered:
                    summary.add(index, d)
                else:
                    stored.append((index, d if d.status != "correct" else _margin_only(d)))
                if d.status == "wrong" and (first_wrong is None or index < first_wrong):
                    first_wrong = index
                if ordered and first_wrong is not None:
                    stop = int(i) + 1
                    break
            fast = np.nonzero(status[:stop] == 1)[0]  # certified correct, up to the first wrong point
            intervals.decided += len(fast)
            if len(fast):
                if len(model.classes) > 1:  # enclosures wider than 2^-10 of the margin: re-decided in balls
                    loose = (hi[fast] - lo[fast]) > np.abs(lo[fast]) * LOOSE_ENCLOSURE
                    for j in fast[loose]:
                        d = _refined(decider, Hnum[j], den, _ball_labels(batch.labels[j], class_rows, n), lo[j], hi[j],
                                     int(batch.index[j]))
                        if ordered:
                            summary.add(int(batch.index[j]), d)
                        else:
                            stored.append((int(batch.index[j]), d))
                    fast = fast[~loose]
                summary.add_correct(lo[fast], hi[fast], len(model.classes) == 1, batch.index[fast])
                if not ordered and len(fast):
                    stored_fast.append((batch.index[fast], lo[fast], hi[fast]))
            checked += stop
            if bar is not None:
                bar.update(len(batch.index))
            if ordered and first_wrong is not None:
                break
        if not ordered:  # the verdict in index order: the points up to and including the first wrong one
            checked = 0
            summary = _BallSummary()
            for index, d in stored:
                if first_wrong is None or index <= first_wrong:
                    summary.add(index, d)
                    checked += 1
            for idx, lows, highs in stored_fast:
                keep = np.ones(len(idx), dtype=bool) if first_wrong is None else np.asarray(idx) <= first_wrong
                if keep.any():
                    summary.add_correct(lows[keep], highs[keep], len(model.classes) == 1, np.asarray(idx)[keep])
                    checked += int(keep.sum())
        return summary, checked, first_wrong

    def enclosure_of(self, task, index: int):
        """The margin enclosure (low, high) of one point decided again, or None (no margin known)."""
        summary, _, _ = self.run(task.batches_of([index]))
        return None if summary.low is None else (summary.low, summary.high)

    def decide_one(self, task, index: int):
        """One point's decision (rebuilding a sharded run's counterexample or undecided point)."""
        summary, _, _ = self.run(task.batches_of([index]))
        for d in (summary.wrong, summary.undecided):
            if d is not None:
                return d[1]
        raise RuntimeError(f"internal: point {index} was reported wrong or undecided by a chunk, but not here")


def _verify_balls(model, task, plan, class_map, class_rows, tokens, batch_size, progress, force_exact, t0,
                  start_precision: int | None = None, max_precision: int | None = None) -> Verdict:
    """Softmax models: every planned point decided (float64 intervals, balls, exact ties).  The
    first certified wrong point refutes (and stops); undecided points are counted and the first
    one is reported; the margin enclosure covers the points up to and including the first wrong one."""
    runner = BallRun(model, class_rows, tokens, force_exact, start_precision, max_precision)
    batches = task.batches(batch_size) if plan.indices is None else task.batches_of(plan.indices, batch_size)
    bar = None
    if progress if progress is not None else sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=plan.n_eval, unit="pt", desc=f"verify {task.name} (softmax)", leave=False, file=sys.stderr)
    summary, checked, _ = runner.run(batches, getattr(task, "index_ordered", True), bar)
    if bar is not None:
        bar.close()
    return _ball_verdict(model, task, plan, summary, checked, runner.path(), t0)


def _ball_verdict(model, task, plan, summary, checked, path, t0, notes=()) -> Verdict:
    wrong = summary.wrong
    per_position = task.outputs == "all"

    def parts(index, d):
        p = task.point(index)
        if per_position:
            return p, d.position, p.labels[d.position]
        return p, None, p.label

    counter = undecided = None
    if wrong is not None:
        index, d = wrong
        p, pos, expected = parts(index, d)
        counter = Counterexample(p.index, p.tokens, expected, model.classes[d.other], (), d.tie,
                                 tuple(model.classes), pos, d.logits)
    if summary.undecided is not None:
        index, d = summary.undecided
        p, pos, expected = parts(index, d)
        other = model.classes[d.other] if d.other >= 0 else "unknown (an argmax after a softmax layer)"
        undecided = UndecidedPoint(p.index, p.tokens, expected, pos, other, d.margin, d.precision, d.logits,
                                   tuple(model.classes), d.limit)
    n_undecided = summary.n_undecided
    low, high = (None, None) if summary.unknown or summary.low is None else (summary.low, summary.high)
    cov = plan.covered if (counter is None and checked == plan.n_eval) else checked
    enclosure = None if low is None else (low, high)
    return Verdict(task.name, task.size, checked, cov, None, counter, path, time.perf_counter() - t0,
                   (plan.note,) + tuple(notes), undecided, n_undecided, enclosure)


def _verify_balls_sharded(model, task, plan, class_rows, tokens, force_exact, batch_size, workers, runner,
                          journal_path, progress, t0, chunk_points=None, balls=None) -> Verdict:
    """Softmax models in chunks (checkers/shards.py): each chunk returns its summary (points
    checked, margin enclosure, first wrong index, undecided count and first undecided index);
    merged in index order as the exact runs are.  The counterexample and the first undecided
    point are decided again here, from their one point; so are the points a journalled chunk names
    for its enclosure ends (Journal.check_enclosure)."""
    from depthcert.checkers import shards

    chunk = chunk_points or shards.CHUNK_POINTS
    spec = shards.Spec(model, task, class_rows, force_exact, plan.indices, balls or {})
    jobs = shards.jobs_for(plan.n_eval, batch_size, chunk)
    journal = None
    if journal_path is not None:
        from depthcert.checkers.journal import Journal

        journal = Journal(journal_path, model, task, plan.indices, plan.n_eval, chunk, options=balls or {})
    done = journal.done if journal is not None else {}
    journal_keys = set(done)  # chunks read back from the journal (record() adds the fresh ones to done)
    missing = [j for j in jobs if (j.lo, j.hi) not in done]
    n_done = len(jobs) - len(missing)
    if runner is None:
        runner = shards.ProcessRunner(workers) if workers > 1 else shards.InProcessRunner()
    bar = None
    if progress if progress is not None else sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=plan.n_eval, unit="pt", desc=f"verify {task.name} (softmax)", leave=False, file=sys.stderr)
    fresh = runner.run(spec, missing)
    results = shards.in_order(jobs, done, fresh, journal.record if journal is not None else None)
    used = []  # the chunk results the merge used, in index order

    def on_result(r):
        used.append(r)
        if bar is not None:
            bar.update(r.checked)

    try:
        merged = shards.merge_balls(results, on_result)
    finally:
        results.close()
        fresh.close()
        if bar is not None:
            bar.close()
    checked, low, high, unknown, bad_index, n_undecided, undecided_index = merged
    local = BallRun(model, class_rows, tokens, force_exact, **(balls or {}))
    summary = _BallSummary()
    summary.low, summary.high, summary.unknown, summary.n_undecided = low, high, unknown, n_undecided
    journalled = {key for key in done if key in journal_keys} if journal is not None else set()
    re_decided = set()  # the journal-named points decided again
    for index, slot, what in ((bad_index, "wrong", "counterexample"), (undecided_index, "undecided", "undecided point")):
        if index < 0:
            continue
        key = next(((j.lo, j.hi) for j in jobs if _chunk_has(plan, j, index)), None)
        if key in journalled:  # a point a journal line names: decided again, it must be what the line says
            one, _, _ = local.run(task.batches_of([index]))
            journal.check_decided(key, what, index, getattr(one, slot) is not None)
            re_decided.add(index)
        setattr(summary, slot, (index, local.decide_one(task, index)))
    boxes = {}  # the enclosure ends' points of the journalled chunks the merge used, decided again
    for r in used:
        if (r.lo, r.hi) in journalled and r.low is not None:
            for index in (r.low_index, r.high_index):
                if index not in boxes:
                    boxes[index] = local.enclosure_of(task, index)
            journal.check_enclosure((r.lo, r.hi), r, boxes[r.low_index], boxes[r.high_index])
    re_decided |= set(boxes)
    notes, use = (), None
    if journal is not None:
        from depthcert.checkers.journal import JournalUse

        use = JournalUse(journal_path, len(jobs), n_done, len(re_decided))
        notes = (use.note(),)
    where = runner.describe()
    path = "certified float64 intervals, arb balls and exact ties, in chunks" + (f"; {where}" if where else "")
    v = _ball_verdict(model, task, plan, summary, checked, path, t0, notes)
    return replace(v, journal=use) if use is not None else v


def _chunk_has(plan, job, index: int) -> bool:
    """Does the chunk job.lo..job.hi-1 of the plan hold dataset point `index`?"""
    if plan.indices is None:
        return job.lo <= index < job.hi
    return bool(np.any(np.asarray(plan.indices[job.lo:job.hi]) == index))


def _ball_path(decider, intervals) -> str:
    """How the softmax points were decided, e.g. "float64 intervals (10795 points); certified
    balls (arb, 64-128 bits: 5 points)"."""
    parts = []
    if intervals is not None and intervals.decided:
        parts.append(f"certified float64 intervals ({_points(intervals.decided)})")
    bits = sorted(decider.precisions_used)
    if bits:
        count = sum(decider.precisions_used.values())
        parts.append(f"certified balls (arb, {bits[0]}" + (f"-{bits[-1]}" if len(bits) > 1 else "") + f" bits: {_points(count)})")
    if decider.exact_decisions:
        parts.append(f"exact tie decision ({_points(decider.exact_decisions)})")
    return "; ".join(parts) or "certified balls (arb)"


def _points(n: int) -> str:
    return f"{n} point" if n == 1 else f"{n} points"


LOOSE_ENCLOSURE = 2.0 ** -10  # a float64-interval margin enclosure wider than this fraction of the
# margin is re-decided in balls (tight enclosures for tiny margins; per point, so independent of batching)


def _refined(decider, H, den, labels, lo: float, hi: float, index: int = -1):
    """A point the float64 intervals certified correct, re-decided in balls for a tighter margin
    enclosure (the intersection of both; not counted as a ball-decided point).  Both paths are
    certified: balls that call the point wrong, or a margin enclosure disjoint from the
    intervals', is an internal error (PathsDisagree), never resolved silently."""
    from depthcert.checkers.softmax_balls import PathsDisagree, PointDecision

    used = dict(decider.precisions_used)
    d = decider.decide(H, den, labels)
    decider.precisions_used = used
    lo_q, hi_q = Fraction(float(lo)), Fraction(float(hi))
    said = PathsDisagree.correct((lo_q, hi_q))
    if d.status == "wrong":
        raise PathsDisagree(f"point {index}", "float64 intervals", said, "arb balls", "wrong")
    if d.status == "correct" and d.margin is not None and (d.margin[0] > hi_q or d.margin[1] < lo_q):
        raise PathsDisagree(f"point {index}", "float64 intervals", said, "arb balls", PathsDisagree.correct(d.margin))
    if d.status != "correct" or d.margin is None:  # balls that do not separate add nothing
        return PointDecision("correct", (lo_q, hi_q), d.position, -1, (), 53)
    return PointDecision("correct", (max(lo_q, d.margin[0]), min(hi_q, d.margin[1])), d.position, d.other, (),
                         d.precision)


def _interval_decisions(intervals, Hnum, den, labels, class_rows, n):
    """(status, lo, hi, position) per point of a batch from the certified float64 intervals
    (checkers/softmax_intervals.py): status 1 = certified correct with its margin in [lo, hi];
    every other point (0 = unsure, -1 = wrong) is decided in balls."""
    B = Hnum.shape[0]
    if intervals is None or not intervals.usable:
        return np.zeros(B, dtype=np.int8), None, None, None
    if labels.ndim == 1:
        rows = np.full((B, n), -1, dtype=np.int64)
        rows[:, n - 1] = class_rows[labels]
    else:
        rows = np.where(labels >= 0, class_rows[np.maximum(labels, 0)], -1)
    return intervals.decide(Hnum, den, rows)


def _margin_only(d):
    """A correct point's decision as stored until the end of an unordered run: its margin."""
    from depthcert.checkers.softmax_balls import PointDecision

    return PointDecision(d.status, d.margin, d.position, d.other, (), d.precision)


class _BallSummary:
    """What the verdict keeps of the decided points, fed in index order: the margin enclosure
    (None when some point's margin is unknown), the first undecided point and their count, and
    the first wrong point."""

    def __init__(self):
        self.low = self.high = None
        self.low_index = self.high_index = -1  # the points whose enclosures give low and high
        self.unknown = False
        self.undecided = None
        self.n_undecided = 0
        self.wrong = None

    def add_correct(self, lows, highs, one_class: bool = False, indices=None) -> None:
        """Points certified correct by the float64 intervals (dataset `indices`), their margins in
        [lows, highs] (float64 ends, exact as dyadic rationals)."""
        if one_class or len(lows) == 0:
            return
        a, b = int(np.argmin(lows)), int(np.argmin(highs))
        self._low(Fraction(float(lows[a])), -1 if indices is None else int(indices[a]))
        self._high(Fraction(float(highs[b])), -1 if indices is None else int(indices[b]))

    def _low(self, value, index: int) -> None:
        if self.low is None or value < self.low:
            self.low, self.low_index = value, index

    def _high(self, value, index: int) -> None:
        if self.high is None or value < self.high:
            self.high, self.high_index = value, index

    def add(self, index: int, d) -> None:
        if d.margin is None:
            self.unknown = self.unknown or d.status != "correct"  # a single class has no margin
        else:
            self._low(d.margin[0], index)
            self._high(d.margin[1], index)
        if d.status == "undecided":
            self.n_undecided += 1
            if self.undecided is None or index < self.undecided[0]:
                self.undecided = (index, d)
        if d.status == "wrong" and (self.wrong is None or index < self.wrong[0]):
            self.wrong = (index, d)
