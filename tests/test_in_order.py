"""evaluate.in_order: batches two at a time in worker threads give the one-thread results, in order;
the evaluator's counts are exact; the process's BLAS thread limit is what it was before, also after
an early stop (a counterexample) and an error in a batch."""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from depthcert import constructions
from depthcert.checkers.evaluate import Evaluator, in_order
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task


def _blas_threads():
    return [m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"]


@pytest.fixture
def model_task():
    task = make_task("tm", l=4, alphabet=4)
    return constructions.build(task, "ternary", lemma3=False).model, task


def test_results_in_order_and_counts(model_task):
    model, task = model_task
    batches = list(task.batches(37))  # 7 batches: several in flight
    one = Evaluator(model)
    want = [one.hidden_last(b.ids)[0] for b in batches]
    ev = Evaluator(model)
    before = _blas_threads()
    got = [(b.index[0], h) for b, (h, _) in in_order(ev, lambda b: ev.hidden_last(b.ids), batches, threads=2)]
    assert [i for i, _ in got] == [b.index[0] for b in batches]
    assert all(np.array_equal(h, w) for (_, h), w in zip(got, want))
    assert ev.batches["float"] == len(batches) and _blas_threads() == before


def test_early_stop_and_errors_restore_the_blas_limit(model_task):
    model, task = model_task
    ev = Evaluator(model)
    before = _blas_threads()
    for k, (_, _) in enumerate(in_order(ev, lambda b: ev.hidden_last(b.ids), task.batches(16), threads=2)):
        if k == 2:
            break
    assert _blas_threads() == before and not ev._blas_held

    def fails(b):
        if b.index[0] >= 32:
            raise ValueError("batch failed")
        return ev.hidden_last(b.ids)

    with pytest.raises(ValueError, match="batch failed"):
        for _ in in_order(ev, fails, task.batches(16), threads=2):
            pass
    assert _blas_threads() == before and not ev._blas_held


@pytest.mark.parametrize("threads", [1, 2])
def test_verify_is_the_same_with_one_or_two_threads(model_task, threads, monkeypatch):
    # a refuted model (its first counterexample must be the one-thread one) and a verified one
    from dataclasses import replace

    from depthcert.checkers import evaluate

    model, task = model_task
    monkeypatch.setattr(evaluate, "THREADS", threads)
    broken = replace(model, W_O=model.W_O[::-1].copy())
    for m in (model, broken):
        v = verify(m, task, symmetry="off", batch_size=19, progress=False)
        monkeypatch.setattr(evaluate, "THREADS", 1)
        ref = verify(m, task, symmetry="off", batch_size=19, progress=False)
        monkeypatch.setattr(evaluate, "THREADS", threads)
        assert (v.verdict, v.min_margin, v.points_checked) == (ref.verdict, ref.min_margin, ref.points_checked)
        assert (v.counterexample is None) == (ref.counterexample is None)
        if v.counterexample is not None:
            assert v.counterexample.index == ref.counterexample.index


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_a_forked_worker_gets_its_own_interval_thread_pool():
    # softmax_intervals keeps a thread pool for the process; a worker forked after the parent used it
    # (checkers/shards.py forks) has none of its threads and would wait forever on the inherited one
    import os

    from depthcert.checkers import softmax_intervals as si

    assert si._pool().submit(lambda: 1).result(timeout=10) == 1
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if si._pool().submit(lambda: 42).result(timeout=10) == 42 else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_balanced_batch_sizes(model_task):
    from depthcert.checkers.evaluate import balanced_batch

    model, _ = model_task
    ev = Evaluator(model)
    assert balanced_batch(ev, 3125, 2048, threads=2) == 1563
    assert balanced_batch(ev, 6561, 2048, threads=2) == 1641
    assert balanced_batch(ev, 3125, 2048, threads=1) == 2048
    assert balanced_batch(Evaluator(model, force_exact=True), 3125, 2048, threads=2) == 2048
    assert balanced_batch(ev, 2000, 2048, threads=2) == 2048  # one batch: left whole
    for n in (1, 2, 3, 7, 100, 4097, 823_543):
        for size in (1, 5, 2048):
            b = balanced_batch(ev, n, size, threads=2)
            rounds = -(-(-(-n // size)) // 2)  # rounds of two batches at the given size
            assert 1 <= b <= size and -(-n // b) <= 2 * rounds  # never more rounds, the batches evened out
