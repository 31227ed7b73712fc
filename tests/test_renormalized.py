"""The checked float64 path renormalizes every batch before every layer (checkers/evaluate.py,
_run_renormalized): deep models with rational weights, whose static common denominator grows
threefold per ReLU layer, run on float64 with the exact verdict, margin and counterexample."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry
from independent_oracle import oracle_verdict


def _triple(v):
    ce = v.counterexample
    return v.verdict, v.min_margin, None if ce is None else ce.index


def test_parity_tree_runs_checked_with_the_exact_verdict():
    task = make_task("parity", n=10)
    model = registry.build(task).model
    ev = Evaluator(model)
    assert not ev.use_float and ev.checked and ev.im.layers[-1].g_out > 2**30  # static g is large
    fast = verify(model, task, progress=False)
    assert fast.path == "float64, checked < 2^53 per batch"  # no batch handed to big integers
    assert _triple(fast) == _triple(verify(model, task, progress=False, force_exact=True))


def test_renormalized_logits_equal_the_exact_ones_entry_by_entry():
    task = make_task("word-problem", group="a5", n=8)
    model = registry.build(task).model
    ids, _ = task.decode(np.arange(64, dtype=np.int64))
    a, da = Evaluator(model).logits(ids)
    b, db = Evaluator(model, force_exact=True).logits(ids)
    assert da == db and [[int(x) for x in r] for r in a] == [[int(x) for x in r] for r in b]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_deep_rational_models_agree_with_exact_and_oracle(data):
    """3-4 relu layers, weights in {-2..2}/{1,2,3}: static denominators explode, values do not."""
    V, n, depth = 2, 3, data.draw(st.integers(3, 4))
    lay = Layout.of(("token", V), ("position", n), ("work", 2))
    d = lay.dim

    def mat():
        M = np.empty((d, d), dtype=object)
        for i in range(d):
            for j in range(d):
                M[i, j] = Fraction(data.draw(st.integers(-2, 2)), data.draw(st.sampled_from([1, 2, 3])))
        return M

    layers = tuple((Head(mat(), mat()),) for _ in range(depth))
    W_O = np.empty((2, d), dtype=object)
    for i in range(2):
        for j in range(d):
            W_O[i, j] = Fraction(data.draw(st.integers(-2, 2)))
    model = Model(("a", "b"), n, ("x", "y"), lay, layers, W_O)
    seqs = [[a, b, c] for a in "ab" for b in "ab" for c in "ab"]
    labels = [data.draw(st.sampled_from(["x", "y"])) for _ in seqs]
    task = DatasetTask(seqs, labels)
    fast, exact = verify(model, task, progress=False), verify(model, task, progress=False, force_exact=True)
    assert _triple(fast) == _triple(exact) == oracle_verdict(model, task)


def test_exact_sub_batches_follow_the_memory_budget(monkeypatch):
    """The big-integer path splits a batch to stay within EXACT_MEMORY_BYTES; results are the same."""
    import depthcert.checkers.evaluate as evaluate

    task = make_task("multihop", hops=2, k=3, n_entities=3)
    model = registry.build(task, "linear").model
    want = _triple(verify(model, task, progress=False, force_exact=True))
    monkeypatch.setattr(evaluate, "EXACT_MEMORY_BYTES", 1)  # one point per sub-batch
    assert Evaluator(model, force_exact=True).exact_batch_points(task.length) == 1
    assert _triple(verify(model, task, progress=False, force_exact=True, batch_size=64)) == want
