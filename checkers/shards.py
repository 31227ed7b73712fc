"""Exhaustive runs split into index ranges: other processes, a Dask cluster, a journal on disk.

Claim.  verify's verdict depends only on the points in index order: the first failing point
(if any), and the minimum margin over the points up to and including it.  Split the points
into consecutive chunks [lo, hi); a chunk returns (points checked up to and including its first
failure, the minimum margin numerator over them, the first failing index or -1).  Merging the
chunks in index order -- stop at the first chunk with a failure, take the minimum of the
margins of it and of every chunk before it -- gives exactly the single-process verdict, margin
and counterexample, whatever ran the chunks and in whatever order they finished.  Chunks after
the first failing one may have been computed; they are ignored.

A chunk's margins are numerators over one denominator that the model alone fixes (every
process builds the same Evaluator), so numerators from different processes compare exactly.

Runners (where a chunk runs) are pluggable: `ProcessRunner` (this machine, forked processes, or a
forkserver's next to JAX;
a worker that dies, e.g. killed for memory, ends the run with one clear line, never a hang) and
any object with the same `run(jobs)` method (depthcert/cli/cluster.py: Dask).  A journal
(checkers/journal.py) records finished chunks, so a re-run after a crash skips them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from depthcert.checkers.errors import BadInput

CHUNK_POINTS = 65_536  # points per chunk of a sharded run (recorded in the journal)


@dataclass(frozen=True)
class Job:
    """Points lo..hi-1 of the plan (dataset indices, or positions in the plan's index list)."""

    lo: int
    hi: int
    batch_size: int


@dataclass(frozen=True)
class ChunkResult:
    lo: int
    hi: int
    checked: int  # points checked, up to and including the first failure
    min_num: int | None  # minimum margin numerator over those points (None: a single class)
    bad_index: int  # dataset index of the chunk's first failure, or -1
    batches: tuple = (0, 0)  # (batches run in checked float64, batches redone on big integers)
    min_index: int = -1  # dataset index of a point with the minimum margin (-1: no margin)


@dataclass(frozen=True)
class Spec:
    """Everything a worker needs to run chunks (picklable: shipped to processes or a cluster)."""

    model: object
    task: object
    class_rows: np.ndarray
    force_exact: bool
    indices: np.ndarray | None  # the plan's index list (symmetry), or None for every index
    balls: dict | None = None  # softmax models: start_precision / max_precision


@dataclass(frozen=True)
class BallChunkResult:
    """A softmax chunk: points checked (up to and including its first wrong point), the margin
    enclosure over them (exact dyadic ends; None when no margin is known), whether some point's
    margin is unknown, the first wrong index, the undecided count and the first undecided index,
    and the points whose enclosures give the chunk's low and high ends (-1 when no margin is known:
    the chunk's enclosure is [least lower end, least upper end], possibly of two points)."""

    lo: int
    hi: int
    checked: int
    low: object  # Fraction | None
    high: object
    unknown: bool
    bad_index: int
    n_undecided: int
    undecided_index: int
    low_index: int = -1
    high_index: int = -1


_CACHE: dict = {}


def _evaluator(spec: Spec):
    """One Evaluator per worker process and spec (built once, reused for every chunk).  The
    cache holds the spec object itself and compares by identity: an id() alone could be reused
    by a new spec after the old one is freed, and hand it the old model's evaluator."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.exhaustive import token_rows

    if _CACHE.get("spec") is not spec:
        _CACHE.clear()
        _CACHE.update(spec=spec, ev=Evaluator(spec.model, force_exact=spec.force_exact),
                      tokens=token_rows(spec.model, spec.task))
    return _CACHE["ev"], _CACHE["tokens"]


def _ball_runner(spec: Spec):
    """One BallRun per worker process and spec (as _evaluator)."""
    from depthcert.checkers.exhaustive import BallRun, token_rows

    if _CACHE.get("spec") is not spec:
        _CACHE.clear()
        _CACHE.update(spec=spec, balls=BallRun(spec.model, spec.class_rows, token_rows(spec.model, spec.task),
                                               spec.force_exact, **(spec.balls or {})))
    return _CACHE["balls"]


def run_ball_chunk(spec: Spec, job: Job) -> BallChunkResult:
    """Decide points lo..hi-1 of a softmax model's plan in index order, stopping at the first wrong one."""
    run = _ball_runner(spec)
    task = spec.task
    batches = (task.batches(job.batch_size, job.lo, job.hi) if spec.indices is None
               else task.batches_of(spec.indices[job.lo:job.hi], job.batch_size))
    summary, checked, first_wrong = run.run(batches)
    return BallChunkResult(job.lo, job.hi, checked, summary.low, summary.high, summary.unknown,
                           -1 if first_wrong is None else first_wrong, summary.n_undecided,
                           -1 if summary.undecided is None else summary.undecided[0], summary.low_index,
                           summary.high_index)


def merge_balls(results: Iterable[BallChunkResult], on_result=None) -> tuple:
    """(checked, low, high, unknown, first wrong index or -1, undecided count, first undecided
    index or -1) from softmax chunk results in index order; stops at the first wrong chunk."""
    checked, low, high, unknown, n_undecided, undecided_index = 0, None, None, False, 0, -1
    for res in results:
        if on_result is not None:
            on_result(res)
        checked += res.checked
        if res.low is not None:
            low = res.low if low is None else min(low, res.low)
            high = res.high if high is None else min(high, res.high)
        unknown = unknown or res.unknown
        n_undecided += res.n_undecided
        if undecided_index < 0 and res.undecided_index >= 0:
            undecided_index = res.undecided_index
        if res.bad_index >= 0:
            return checked, low, high, unknown, res.bad_index, n_undecided, undecided_index
    return checked, low, high, unknown, -1, n_undecided, undecided_index


def run_chunk(spec: Spec, job: Job):
    """Check points lo..hi-1 of the plan in index order, stopping at the first failure."""
    from depthcert.checkers.exhaustive import check_batch

    if spec.model.has_softmax:
        return run_ball_chunk(spec, job)

    ev, tokens = _evaluator(spec)
    before = (ev.batches["checked"], ev.batches["exact"])
    task = spec.task
    batches = (task.batches(job.batch_size, job.lo, job.hi) if spec.indices is None
               else task.batches_of(spec.indices[job.lo:job.hi], job.batch_size))
    checked, min_num, min_index = 0, None, -1
    for batch in batches:
        margins, _, bad, _, _ = check_batch(ev, batch, spec.class_rows, tokens, need_logits=False)
        if len(margins) and margins[0] is not None:
            upto = margins[: bad + 1] if bad >= 0 else margins
            j = int(np.argmin(upto))
            if min_num is None or int(upto[j]) < min_num:
                min_num, min_index = int(upto[j]), int(batch.index[j])
        if bad >= 0:
            return ChunkResult(job.lo, job.hi, checked + bad + 1, min_num, int(batch.index[bad]), _delta(ev, before),
                               min_index)
        checked += len(batch.index)
    return ChunkResult(job.lo, job.hi, checked, min_num, -1, _delta(ev, before), min_index)


def _delta(ev, before) -> tuple:
    return (ev.batches["checked"] - before[0], ev.batches["exact"] - before[1])


def jobs_for(n_points: int, batch_size: int, chunk: int | None = None) -> list[Job]:
    chunk = chunk or CHUNK_POINTS
    return [Job(lo, min(n_points, lo + chunk), batch_size) for lo in range(0, n_points, chunk)]


_SPEC: list = []


def _init(spec: Spec) -> None:
    _SPEC[:] = [spec]
    # One BLAS thread per forked worker: the parent's BLAS pool (one thread per core) in every
    # worker oversubscribes the cores (measured on 2 cores, tm ternary l = 7, 823,543 points on
    # 2 processes: 2.1 s evaluating with the inherited pool, 1.1 s with one thread each).
    # Speed only: no verdict depends on it.
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _run_local(job: Job) -> ChunkResult:
    return run_chunk(_SPEC[0], job)


class InProcessRunner:
    """Chunks one after the other in this process (a journal with one worker)."""

    def run(self, spec: Spec, jobs: list[Job]) -> Iterator[ChunkResult]:
        for job in jobs:
            yield run_chunk(spec, job)

    def describe(self) -> str:
        return ""


def start_method() -> str:
    """How worker processes start: "fork" (no start-up cost) unless JAX is imported in this process
    (verify-tracr), whose threads make os.fork() unsafe (JAX warns that a fork may deadlock):
    then "forkserver", whose server process is started fresh and never had JAX's threads."""
    import multiprocessing as mp
    import sys

    if "jax" in sys.modules or "fork" not in mp.get_all_start_methods():
        return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    return "fork"


def _no_results() -> Iterator[ChunkResult]:
    yield from ()  # a generator (callers close() it), empty


class ProcessRunner:
    """Chunks on `workers` processes of this machine (start_method()), results yielded in job order."""

    def __init__(self, workers: int):
        self.workers = workers
        self.used = None  # processes of the last run: never more than its chunks, 0 when none ran

    def describe(self) -> str:
        if self.used == 0:
            return "no worker process: every chunk from the journal"
        n = self.workers if self.used is None else self.used
        return f"{n} process{'es' if n != 1 else ''}"

    def run(self, spec: Spec, jobs: list[Job]) -> Iterator[ChunkResult]:
        # not a generator itself: the count of processes is known once run() is called, even when
        # every chunk came from a journal and nothing is ever asked of the iterator
        self.used = min(self.workers, len(jobs))  # a pool starts all its processes at once
        return self._results(spec, jobs) if jobs else _no_results()

    def _results(self, spec: Spec, jobs: list[Job]) -> Iterator[ChunkResult]:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        ctx = mp.get_context(start_method())
        if ctx.get_start_method() == "forkserver":  # the server imports these once; its workers fork with them
            ctx.set_forkserver_preload(["numpy", "depthcert.checkers.exhaustive", "depthcert.checkers.shards"])
        with ProcessPoolExecutor(self.used, mp_context=ctx, initializer=_init, initargs=(spec,)) as pool:
            futures = [pool.submit(_run_local, job) for job in jobs]
            try:
                for job, fut in zip(jobs, futures):
                    try:
                        yield fut.result()
                    except BrokenProcessPool:
                        raise BadInput(f"a worker process died while checking points {job.lo}..{job.hi - 1} (killed "
                                       "by the system, most likely out of memory); rerun with --workers 1 or a "
                                       "smaller --batch-size") from None
            finally:
                for fut in futures:
                    fut.cancel()


def merge(results: Iterable[ChunkResult], on_result=None) -> tuple[int, int | None, int]:
    """(checked, min margin numerator, first failing index or -1) from chunk results in index
    order; stops reading at the first failing chunk (the module docstring's claim)."""
    checked, min_num = 0, None
    for res in results:
        if on_result is not None:
            on_result(res)
        checked += res.checked
        if res.min_num is not None:
            min_num = res.min_num if min_num is None else min(min_num, res.min_num)
        if res.bad_index >= 0:
            return checked, min_num, res.bad_index
    return checked, min_num, -1


def in_order(jobs: list[Job], done: dict, fresh: Iterator[ChunkResult], record=None) -> Iterator[ChunkResult]:
    """Results for `jobs` in order: journalled ones from `done` ((lo, hi) -> result), the others
    from `fresh` (which yields the missing jobs' results in order), each recorded as it comes."""
    for job in jobs:
        key = (job.lo, job.hi)
        if key in done:
            yield done[key]
            continue
        res = next(fresh)
        if (res.lo, res.hi) != key:
            raise RuntimeError(f"internal: chunk {res.lo}..{res.hi} arrived for {key}")
        if record is not None:
            record(res)
        yield res
