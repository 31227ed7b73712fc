"""verify(model, task): check every dataset point exactly; strict argmax, ties fail.

A point is correct iff its label's logit is strictly above every other logit.  The verdict
carries the exact minimum margin (correct logit minus best other logit) over all points, and
the first failing point in index order as a replayable counterexample.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.model import Model
from depthcert.checkers.tasks import Batch, Task


@dataclass(frozen=True)
class Counterexample:
    index: int
    tokens: tuple[str, ...]
    expected: str
    predicted: str  # the best other class: its logit is >= the expected one's
    logits: tuple[Fraction, ...]  # in the model's class order (`classes`)
    tie: bool  # the best other logit equals the expected one
    classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    task: str
    points_total: int
    points_checked: int
    points_covered: int
    min_margin: Fraction | None
    counterexample: Counterexample | None
    path: str
    seconds: float
    notes: tuple[str, ...] = field(default=())

    @property
    def verified(self) -> bool:
        return self.counterexample is None and self.points_covered == self.points_total

    @property
    def verdict(self) -> str:
        return "verified" if self.verified else "refuted"


def check_compatible(model: Model, task: Task) -> dict[int, int]:
    """The model must embed every task token and score every task label; returns task class ->
    model row.  The model's vocabulary may list the tokens in its own order (see token_rows)."""
    known = set(model.vocab)
    missing = [t for t in task.vocab if t not in known]
    if missing:
        raise BadInput(
            f"model vocabulary lacks {len(missing)} token(s) of task {task.name}: "
            f"{', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}"
        )
    if model.max_length < task.length:
        raise BadInput(f"model has {model.max_length} positions but task {task.name} needs {task.length}")
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


def check_batch(ev: Evaluator, batch: Batch, class_rows: np.ndarray, tokens: np.ndarray | None = None):
    """(margins numerators (B,), denominator, first failing position or -1, numerators (B,C))."""
    num, den = ev.logits(batch.ids if tokens is None else tokens[batch.ids])
    rows = class_rows[batch.labels]
    B = len(rows)
    correct = num[np.arange(B), rows]
    other = num.copy()
    if other.dtype == object:
        other[np.arange(B), rows] = None
        best_other = np.array([max(v for v in r if v is not None) if len(r) > 1 else None for r in other], dtype=object)
    else:
        other[np.arange(B), rows] = np.iinfo(np.int64).min
        best_other = other.max(axis=1)
    if num.shape[1] == 1:
        margins = np.array([None] * B, dtype=object)
        return margins, den, -1, num
    margins = correct - best_other
    bad = np.nonzero(margins <= 0)[0]
    return margins, den, (int(bad[0]) if len(bad) else -1), num


@dataclass(frozen=True)
class Plan:
    """Which points to evaluate: all of them, or one per orbit with a checked equivariance."""

    indices: np.ndarray | None  # None = every index in order
    n_eval: int
    covered: int
    note: str


def plan_points(model: Model, task: Task, symmetry: str = "auto") -> Plan:
    """symmetry = "auto": use orbit representatives when the model's equivariance under the
    task's symmetry group is proven on the weights (checkers.symmetry); otherwise every point."""
    if symmetry not in ("auto", "off"):
        raise BadInput(f"--symmetry must be auto or off, got {symmetry!r}")
    if symmetry == "auto":
        from depthcert.checkers.symmetry import check_equivariance

        groups = task.symmetry_groups()
        reps = task.orbit_representatives() if groups else None
        if reps is None:
            return Plan(None, task.size, task.size, "symmetry: none declared for this task; every point evaluated")
        report = check_equivariance(model, groups)
        if report.ok:
            idx, sizes = reps
            covered = int(sum(int(s) for s in sizes))
            if covered != task.size:
                raise RuntimeError(f"orbit sizes add up to {covered}, not {task.size}: task enumeration bug")
            return Plan(np.asarray(idx, dtype=np.int64), len(idx), covered,
                        f"symmetry: equivariance proven ({report.reason}); {len(idx)} orbit representatives cover {covered} points")
        return Plan(None, task.size, task.size, f"symmetry: not used, {report.reason}; every point evaluated")
    return Plan(None, task.size, task.size, "symmetry: off; every point evaluated")


PARALLEL_MIN_POINTS = 400_000


@dataclass(frozen=True)
class _ChunkResult:
    checked: int
    min_num: int | None
    bad_index: int  # dataset index of the first failure in the chunk, or -1


_WORKER = {}


def _worker_init(model, task, class_rows, force_exact):
    _WORKER.update(ev=Evaluator(model, force_exact=force_exact), task=task, rows=class_rows,
                   tokens=token_rows(model, task))


def _worker_chunk(args) -> _ChunkResult:
    lo, hi, batch_size = args
    ev, task, rows = _WORKER["ev"], _WORKER["task"], _WORKER["rows"]
    checked, min_num = 0, None
    for batch in task.batches(batch_size, lo, hi):
        margins, _, bad, _ = check_batch(ev, batch, rows, _WORKER["tokens"])
        if len(margins) and margins[0] is not None:
            m = int(min(margins[: bad + 1] if bad >= 0 else margins))
            min_num = m if min_num is None else min(min_num, m)
        if bad >= 0:
            return _ChunkResult(checked + bad, min_num, int(batch.index[bad]))
        checked += len(batch.index)
    return _ChunkResult(checked, min_num, -1)


def _parallel_batches(model, task, class_rows, force_exact, batch_size, workers, bar):
    """Chunks of the index range on `workers` processes, yielded in index order (so the first
    failure reported is the first in index order); stops at the first failing chunk."""
    import multiprocessing as mp

    chunk = max(batch_size, min(200_000, task.size // (8 * workers) + 1))
    jobs = [(lo, min(task.size, lo + chunk), batch_size) for lo in range(0, task.size, chunk)]
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, _worker_init, (model, task, class_rows, force_exact)) as pool:
        for res in pool.imap(_worker_chunk, jobs):
            if bar is not None:
                bar.update(res.checked)
            yield res
            if res.bad_index >= 0:
                pool.terminate()
                break
    if bar is not None:
        bar.close()


def verify(
    model: Model,
    task: Task,
    batch_size: int = 2048,
    progress: bool | None = None,
    force_exact: bool = False,
    symmetry: str = "off",
    plan: Plan | None = None,
    workers: int = 1,
) -> Verdict:
    """Evaluate every point of `task`, or one point per orbit when `symmetry="auto"` and the
    model's equivariance is proven (then the verdict covers every point)."""
    t0 = time.perf_counter()
    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    ev = Evaluator(model, force_exact=force_exact)
    plan = plan or plan_points(model, task, symmetry)
    if plan.indices is None:
        batches = task.batches(batch_size)
    else:
        batches = task.batches_of(plan.indices, batch_size)
    n_eval = plan.n_eval
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_eval, unit="pt", desc=f"verify {task.name}", leave=False, file=sys.stderr)
    if workers > 1 and plan.indices is None and plan.n_eval >= PARALLEL_MIN_POINTS:
        batches = _parallel_batches(model, task, class_rows, force_exact, batch_size, workers, bar)
        bar = None
    checked = 0
    min_num = None
    counter = None
    for batch in batches:
        if isinstance(batch, _ChunkResult):
            checked += batch.checked
            if batch.min_num is not None:
                min_num = batch.min_num if min_num is None else min(min_num, batch.min_num)
            if batch.bad_index < 0:
                continue
            # re-run the failing point's batch here to build the counterexample
            batch = next(task.batches_of([batch.bad_index]))
        margins, den, bad, num = check_batch(ev, batch, class_rows, tokens)
        checked += len(batch.index) if bad < 0 else bad + 1
        if bar is not None:
            bar.update(len(batch.index))
        if len(margins) and margins[0] is not None:
            # up to and including the first failure only: points after it in the same batch
            # must not count, or the reported margin would depend on --batch-size
            m = int(min(margins[: bad + 1] if bad >= 0 else margins))
            min_num = m if min_num is None else min(min_num, m)
        if bad >= 0:
            row = [int(v) for v in num[bad]]
            exp_row = class_map[int(batch.labels[bad])]
            pred = max((i for i in range(len(row)) if i != exp_row), key=lambda i: row[i])
            p = task.point(int(batch.index[bad]))
            counter = Counterexample(
                p.index, p.tokens, p.label, model.classes[pred],
                tuple(Fraction(v, den) for v in row), row[pred] == row[exp_row], tuple(model.classes),
            )
            break
    if bar is not None:
        bar.close()
    min_margin = None if min_num is None else Fraction(min_num, ev.denominator)
    cov = plan.covered if (counter is None and checked == plan.n_eval) else checked
    return Verdict(task.name, task.size, checked, cov, min_margin, counter, ev.path,
                   time.perf_counter() - t0, (plan.note,))
