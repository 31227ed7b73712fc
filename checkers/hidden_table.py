"""One exact evaluation pass shared by a fitted read-out and its verdict (LCF style).

A model read at the last position with no final norm computes logits = W_O h (checkers/model.py),
h the final residual stream at the last column.  `hidden_table(model, task, plan)` evaluates the
layers exactly (checkers/evaluate.py on the model with W_O = I) at exactly the points of `plan`
(exhaustive.plan_points: every point, or one per orbit with a proven symmetry) and returns a frozen,
read-only HiddenTable: the distinct (hidden vector, label) rows, for each the first point (in the
plan's order) that has it and how many points have it, and each point's row.

A search may read the table (proofs/readout.py fits W_O on its rows: the table is only data).
`decide(model, table, task, plan)` then decides a model from the same table: the exact margin of
every distinct row (W_O h, integers) is the margin of every point that has it, so the minimum margin
over the points up to the first failing one (the first in the plan's order) and the counts are the
ones exhaustive.verify finds point by point; the Verdict is the same.  decide refuses (TableMismatch)
unless the model is the table's model with only W_O changed (every other field equal, exactly),
read at the last position with no final norm and no softmax, the task is the table's task object,
and the plan covers exactly the table's points.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, fields, replace
from fractions import Fraction

import numpy as np

from depthcert.checkers.budget import charge_seconds, over_budget, seconds_limit
from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import FLOAT_EXACT_LIMIT, Evaluator, _int64_or_none, _int_parts
from depthcert.checkers.model import Model, _same

INT64_LIMIT = 2**63
SCORE_CHUNK = 1 << 22  # rows x classes of exact scores held at once by decide


class TableMismatch(ValueError):
    """decide() was given a model, task or plan the table does not speak for."""


@dataclass(frozen=True)
class HiddenTable:
    """The distinct (final hidden vector, label) rows of a model's layers over a plan's points.

    X           (N, d') exact numerators over `den` (int64, or object ints past int64), read-only
    labels      (N,) model class rows
    first       (N,) the plan position of the first point with this row (plan order)
    first_point (N,) that point's dataset index (replay with --point)
    counts      (N,) how many of the plan's points have this row
    row_of      (n_eval,) each plan position's row (positions in the order the task's batches give them)
    point_at    (n_eval,) each plan position's dataset index
    indices     the plan's point indices (None: every point in index order); n_eval, covered: its counts
    path        the arithmetic the layers were evaluated in; seconds: wall time of the pass
    """

    model: Model
    task: object
    indices: np.ndarray | None
    n_eval: int
    covered: int
    note: str
    X: np.ndarray
    den: int
    labels: np.ndarray
    first: np.ndarray
    first_point: np.ndarray
    counts: np.ndarray
    row_of: np.ndarray
    point_at: np.ndarray
    path: str
    seconds: float

    def rows_of_points(self, points) -> np.ndarray | None:
        """The rows of these dataset points (in their order), or None when some point is not one of
        the table's."""
        points = np.asarray(points, dtype=np.int64).reshape(-1)
        if self.indices is None and np.array_equal(self.point_at, np.arange(self.n_eval)):  # every point in order
            if len(points) and (points.min() < 0 or points.max() >= self.n_eval):
                return None
            return self.row_of[points]
        order = np.argsort(self.point_at, kind="stable")
        ordered = self.point_at[order]
        at = np.searchsorted(ordered, points)
        if len(points) and (at.max() >= len(ordered) or not np.array_equal(ordered[at], points)):
            return None
        return self.row_of[order[at]]


def readable(model: Model) -> str | None:
    """Why the logits are not W_O h at the last column (None: they are)."""
    if type(model) is not Model:
        return f"a {type(model).__name__}, not a Model"
    if model.outputs != "last":
        return "the model is read at every position (outputs \"all\")"
    if model.norm_final is not None:
        return "the classifier reads a final norm N(h), not h"
    if model.has_softmax:
        return "softmax heads (decided in ball arithmetic)"
    if not model.is_rational:
        return "LayerNorm/RMSNorm or gelu/silu layers (not rational)"
    return None


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.flags.writeable = False
    return a


def _probe(model: Model) -> Model:
    """The model with W_O = I: its logits are the final hidden vector at the last column."""
    from depthcert.checkers.layout import eye

    d = model.dim
    return replace(model, classes=tuple(f"h{r}" for r in range(d)), W_O=eye(d), name="probe")


def _row_key(row, y: int):
    """One canonical key per (vector, label): int64 bytes when every entry fits, else a tuple."""
    vals = [int(v) for v in row]
    if all(-INT64_LIMIT < v < INT64_LIMIT for v in vals):
        return np.array(vals + [y], dtype=np.int64).tobytes()
    return tuple(vals) + (y,)


def _row_groups(both: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first row of each group, each row's group) of an int64 (B, c) array's rows grouped by
    equality, as np.unique(rows, return_index=True, return_inverse=True) groups them (the groups' order
    may differ: only which rows are equal, and each group's first row, are read).  When the columns'
    ranges multiply to less than 2^63, each row is coded as one int64, its mixed-radix number (entry
    minus its column's minimum, digit base the column's range: every partial sum of these
    non-negative terms is below the product, no wrap), equal exactly when the rows are, and those are
    grouped (several times faster than the rows' bytes); else the rows' bytes are."""
    B, c = both.shape
    keys = None
    if B and c:
        lo, hi = both.min(axis=0), both.max(axis=0)
        span, strides = 1, []
        for a, b in zip(lo.tolist(), hi.tolist()):
            strides.append(span)
            span *= b - a + 1  # Python ints: no wrap
        if span < 2**63:
            keys = (both - lo) @ np.array(strides, dtype=np.int64)
    if keys is None:
        keys = both.view(np.dtype((np.void, both.dtype.itemsize * c))).ravel()
    _, where, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return where, np.asarray(inverse).reshape(-1)


def hidden_table(model: Model, task, plan, batch_size: int = 2048, progress: bool | None = None) -> HiddenTable:
    """Evaluate the layers of `model` exactly at the points of `plan` (every point of `task` when
    plan.indices is None, else those, in that order) and collect the distinct rows.  The same
    resource guards as exhaustive.verify (estimated seconds, refused before any point)."""
    from depthcert.checkers.exhaustive import (CHECKED_OPS_PER_SECOND, EXACT_OPS_PER_SECOND, FLOAT_OPS_PER_SECOND,
                                               check_compatible, forward_ops, token_rows)

    why = readable(model)
    if why is not None:
        raise BadInput(f"a hidden-vector table needs logits W_O h at the last position: {why}")
    if getattr(task, "outputs", "last") == "all":
        raise BadInput(f"task {task.name} labels every position: a hidden-vector table reads the last one")
    t0 = time.perf_counter()
    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    limit = seconds_limit()
    ev = Evaluator(_probe(model),
                   deadline=None if limit is None else (t0 + limit, limit, "bounding the model's exact numbers"))
    ev.expect_points(plan.n_eval)
    rate = FLOAT_OPS_PER_SECOND if ev.use_float else (CHECKED_OPS_PER_SECOND if ev.checked else EXACT_OPS_PER_SECOND)
    what = (f"evaluating {plan.n_eval} points ({ev.path}, {model.n_layers} layer{'s' if model.n_layers != 1 else ''}, "
            f"d' = {model.dim})")
    estimate = plan.n_eval * forward_ops(model, task.length) / rate
    if over_budget(estimate) and plan.n_eval > 2 * batch_size:
        # the a-priori rate is a floor: time one batch before refusing
        charge_seconds(estimate * batch_size / plan.n_eval, f"a sample of {batch_size} of {plan.n_eval} points")
        lo = (plan.n_eval - batch_size) // 2
        sample = (task.batches(batch_size, lo, lo + batch_size) if plan.indices is None else
                  task.batches_of([int(i) for i in plan.indices[lo: lo + batch_size]], batch_size))
        ts = time.perf_counter()
        for batch in sample:
            ev.hidden_last(batch.ids if tokens is None else tokens[batch.ids])
        per_point = (time.perf_counter() - ts) / batch_size
        charge_seconds(per_point * plan.n_eval, what, f"measured on a batch of {batch_size} of them")
    else:
        charge_seconds(estimate, what)
    if limit is not None and not ev.use_float:
        ev.stop_after(limit, what, start=t0)
    from depthcert.checkers.evaluate import balanced_batch

    step = balanced_batch(ev, plan.n_eval, batch_size)  # batches even across in_order's threads
    batches = task.batches(step) if plan.indices is None else task.batches_of(plan.indices, step)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=plan.n_eval, unit="pt", desc=f"evaluate {task.name}", leave=False, file=sys.stderr)
    seen: dict = {}
    rows, labels, first = [], [], []
    row_of = np.empty(plan.n_eval, dtype=np.int64)
    point_at = np.empty(plan.n_eval, dtype=np.int64)
    pos = 0
    den = ev.stream_denominator
    timed = False
    from depthcert.checkers.evaluate import in_order

    t_batch = time.perf_counter()
    # batches two at a time in worker threads where the evaluation is on float64, in order (in_order)
    for batch, (H, den) in in_order(ev, lambda b: ev.hidden_last(b.ids if tokens is None else tokens[b.ids]), batches,
                                    count=-(-plan.n_eval // step)):
        if batch.labels.ndim != 1:
            raise BadInput(f"task {task.name} labels every position: a hidden-vector table reads the last one")
        ys = class_rows[batch.labels]
        B = len(ys)

        def row_index(key, j):  # the table row of (H[j], ys[j]), added at its first point
            g = seen.get(key)
            if g is None:
                g = seen[key] = len(rows)
                rows.append(H[j])
                labels.append(int(ys[j]))
                first.append(pos + j)
            return g
        if pos + B > plan.n_eval:
            raise RuntimeError(f"the task gave more than the plan's {plan.n_eval} points")
        point_at[pos:pos + B] = batch.index
        if H.dtype != object:
            # the batch's distinct rows in one numpy pass, then the dictionary once per distinct row
            both = np.ascontiguousarray(np.concatenate([H, ys[:, None]], axis=1))
            where, inverse = _row_groups(both)
            gid = np.empty(len(where), dtype=np.int64)
            order = np.argsort(where, kind="stable")
            js = where[order]
            w = both.itemsize * both.shape[1]
            blob = both[js].tobytes()  # row t's key (both[js[t]].tobytes()) is blob[t w: (t + 1) w]
            for t, (u, j) in enumerate(zip(order.tolist(), js.tolist())):
                gid[u] = row_index(blob[t * w:(t + 1) * w], j)
            row_of[pos:pos + B] = gid[inverse]
        else:
            for j in range(B):
                row_of[pos + j] = row_index(_row_key(H[j], int(ys[j])), j)
        pos += B
        if not timed and B < plan.n_eval:  # the a-priori rate may be far off: re-estimate
            timed = True
            charge_seconds((time.perf_counter() - t_batch) / B * (plan.n_eval - B), what, "measured on its first batch")
        if bar is not None:
            bar.update(B)
    if bar is not None:
        bar.close()
    if pos != plan.n_eval:
        raise RuntimeError(f"the task gave {pos} of the plan's {plan.n_eval} points")
    N, d = len(rows), model.dim
    small = all(r.dtype != object for r in rows) or all(
        -INT64_LIMIT < int(v) < INT64_LIMIT for r in rows for v in r)
    if N and all(r.dtype == np.int64 for r in rows):
        X = np.stack(rows)  # (N, d) int64, the rows in order
    else:
        X = np.empty((N, d), dtype=np.int64 if small else object)
        for i, r in enumerate(rows):
            X[i, :] = r if small or r.dtype == object else [int(v) for v in r]
    first_arr = np.asarray(first, dtype=np.int64)
    first_point = point_at[first_arr]
    indices = None if plan.indices is None else _frozen(np.array(plan.indices, dtype=np.int64))
    return HiddenTable(model, task, indices, plan.n_eval, plan.covered, plan.note, _frozen(X), int(den),
                       _frozen(np.asarray(labels, dtype=np.int64)), _frozen(first_arr),
                       _frozen(np.array(first_point, dtype=np.int64)),
                       _frozen(np.bincount(row_of, minlength=N).astype(np.int64)), _frozen(row_of), _frozen(point_at), ev.path,
                       time.perf_counter() - t0)


def _same_value(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return _same(a, b)


def _check_same(model: Model, table: HiddenTable, task, plan) -> None:
    why = readable(model)
    if why is not None:
        raise TableMismatch(f"the model's logits are not W_O h: {why}")
    if task is not table.task:
        raise TableMismatch("the table was evaluated on another task object")
    if not getattr(task, "index_ordered", True):
        raise TableMismatch("the task's batches are not in index order (decided point by point)")
    if model.W_O.shape != table.model.W_O.shape:
        raise TableMismatch(f"W_O has shape {model.W_O.shape}, the table's model {table.model.W_O.shape}")
    # every field but W_O (and the name) equal, weights entry by entry: the same layers, vocabulary,
    # positions, classes, layout, outputs, constant row and final norm (the same frozen object, with
    # read-only weights, is equal without a look at its entries)
    for f in fields(Model):
        if f.compare and f.name not in ("W_O", "name") and not _same_value(getattr(model, f.name),
                                                                         getattr(table.model, f.name)):
            raise TableMismatch(f"the model differs from the table's model in more than W_O ({f.name})")
    if plan.n_eval != table.n_eval or plan.covered != table.covered:
        raise TableMismatch(f"the plan evaluates {plan.n_eval} points covering {plan.covered}, the table "
                            f"{table.n_eval} covering {table.covered}")
    if (plan.indices is None) != (table.indices is None) or (
            plan.indices is not None and not np.array_equal(np.asarray(plan.indices, dtype=np.int64), table.indices)):
        raise TableMismatch("the plan's points are not the table's")


def _scores(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """X (N, d) ints @ C^T (d, K) ints, exactly: float64 when every partial sum is proven below
    2^53 (|X| row sums times max |C|), else python-flint integers."""
    N, d = X.shape
    if X.dtype != object and C.dtype != object:
        # max |X| first: an int64 row sum of |X| may wrap past 2^63 (then it is not taken)
        xa = int(np.abs(X).max()) if X.size else 0
        xs = int(np.abs(X).sum(axis=1).max()) if N and xa * d < INT64_LIMIT else xa * d
        cm = int(np.abs(C).max()) if C.size else 0
        if 0 <= xa and 0 <= cm and xs * cm < FLOAT_EXACT_LIMIT:
            return (X.astype(np.float64) @ C.T.astype(np.float64)).astype(np.int64)
    import flint

    P = flint.fmpz_mat([[int(v) for v in row] for row in X]) * flint.fmpz_mat([[int(v) for v in row] for row in C.T])
    return np.array([[int(P[i, j]) for j in range(P.ncols())] for i in range(P.nrows())], dtype=object).reshape(N, -1)


def _int_classifier(W_O: np.ndarray) -> tuple[np.ndarray, int]:
    """(C, c) with W_O = C / c: C int64 when every entry has |v| < 2^63, else Python ints (object)."""
    num, which, c = _int_parts(W_O)
    C64 = _int64_or_none(num, which, np.shape(W_O))
    return (num[which].reshape(np.shape(W_O)), c) if C64 is None else (C64, c)


def decide(model: Model, table: HiddenTable, task, plan):
    """The Verdict exhaustive.verify gives for `model` on `plan`, from the table (TableMismatch when
    the table does not speak for this model, task and plan)."""
    from depthcert.checkers.exhaustive import Counterexample, Verdict

    t0 = time.perf_counter()
    _check_same(model, table, task, plan)
    C, c = _int_classifier(model.W_O)
    den = c * table.den
    N = len(table.labels)
    K = len(model.classes)
    margins = None
    if K > 1:
        margins = np.empty(N, dtype=object)
        step = max(1, SCORE_CHUNK // K)
        for lo in range(0, N, step):
            S = _scores(table.X[lo:lo + step], C)
            y = table.labels[lo:lo + step]
            ar = np.arange(len(y))
            own = S[ar, y].copy()
            if S.dtype == object:
                S[ar, y] = None
                best = [max(v for v in r if v is not None) for r in S]
                margins[lo:lo + step] = [int(a) - int(b) for a, b in zip(own, best)]
            else:
                S[ar, y] = np.iinfo(np.int64).min
                margins[lo:lo + step] = (own - S.max(axis=1)).tolist()
    counter = None
    checked = table.n_eval
    min_margin = None
    if margins is not None:
        failing = np.nonzero(np.asarray(margins <= 0, dtype=bool))[0]
        if len(failing):
            bad = int(failing[np.argmin(table.first[failing])])
            checked = int(table.first[bad]) + 1
            counter = _counterexample(model, task, table, bad, C, den, Counterexample)
        upto = np.nonzero(table.first < checked)[0]  # the rows met up to and including the first failure
        if len(upto):
            min_margin = Fraction(int(min(margins[upto])), den)
    cov = table.covered if counter is None else checked
    return Verdict(task.name, task.size, checked, cov, min_margin, counter, table.path,
                   table.seconds + (time.perf_counter() - t0), (plan.note,))


def _counterexample(model, task, table, r: int, C, den, Counterexample):
    """Row r's first point as exhaustive.verify reports it (logits W_O h over den)."""
    h = [int(v) for v in table.X[r]]
    row = [sum(int(C[k, f]) * h[f] for f in range(len(h)) if h[f]) for k in range(C.shape[0])]
    exp_row = int(table.labels[r])
    pred = max((i for i in range(len(row)) if i != exp_row), key=lambda i: row[i])
    p = task.point(int(table.first_point[r]))
    return Counterexample(p.index, p.tokens, model.classes[exp_row], model.classes[pred], tuple(Fraction(v, den) for v in row),
                          row[pred] == row[exp_row], tuple(model.classes), None)
