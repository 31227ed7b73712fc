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

Runners (where a chunk runs) are pluggable: `ProcessRunner` (this machine, forked processes;
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


@dataclass(frozen=True)
class Spec:
    """Everything a worker needs to run chunks (picklable: shipped to processes or a cluster)."""

    model: object
    task: object
    class_rows: np.ndarray
    force_exact: bool
    indices: np.ndarray | None  # the plan's index list (symmetry), or None for every index


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


def run_chunk(spec: Spec, job: Job) -> ChunkResult:
    """Check points lo..hi-1 of the plan in index order, stopping at the first failure."""
    from depthcert.checkers.exhaustive import check_batch

    ev, tokens = _evaluator(spec)
    before = (ev.batches["checked"], ev.batches["exact"])
    task = spec.task
    batches = (task.batches(job.batch_size, job.lo, job.hi) if spec.indices is None
               else task.batches_of(spec.indices[job.lo:job.hi], job.batch_size))
    checked, min_num = 0, None
    for batch in batches:
        margins, _, bad, _, _ = check_batch(ev, batch, spec.class_rows, tokens, need_logits=False)
        if len(margins) and margins[0] is not None:
            m = int(min(margins[: bad + 1] if bad >= 0 else margins))
            min_num = m if min_num is None else min(min_num, m)
        if bad >= 0:
            return ChunkResult(job.lo, job.hi, checked + bad + 1, min_num, int(batch.index[bad]), _delta(ev, before))
        checked += len(batch.index)
    return ChunkResult(job.lo, job.hi, checked, min_num, -1, _delta(ev, before))


def _delta(ev, before) -> tuple:
    return (ev.batches["checked"] - before[0], ev.batches["exact"] - before[1])


def jobs_for(n_points: int, batch_size: int, chunk: int | None = None) -> list[Job]:
    chunk = chunk or CHUNK_POINTS
    return [Job(lo, min(n_points, lo + chunk), batch_size) for lo in range(0, n_points, chunk)]


_SPEC: list = []


def _init(spec: Spec) -> None:
    _SPEC[:] = [spec]


def _run_local(job: Job) -> ChunkResult:
    return run_chunk(_SPEC[0], job)


class InProcessRunner:
    """Chunks one after the other in this process (a journal with one worker)."""

    def run(self, spec: Spec, jobs: list[Job]) -> Iterator[ChunkResult]:
        for job in jobs:
            yield run_chunk(spec, job)

    def describe(self) -> str:
        return ""


class ProcessRunner:
    """Chunks on `workers` forked processes of this machine, results yielded in job order."""

    def __init__(self, workers: int):
        self.workers = workers

    def describe(self) -> str:
        return f"{self.workers} processes"

    def run(self, spec: Spec, jobs: list[Job]) -> Iterator[ChunkResult]:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        ctx = mp.get_context("fork")
        with ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init, initargs=(spec,)) as pool:
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
