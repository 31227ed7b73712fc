"""The max-margin read-out's cost is bounded by design (proofs/readout.py lp_caps) and its cheap
fallback is exact: small sizes, seconds."""
from __future__ import annotations

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry
from depthcert.proofs import dependence
from depthcert.proofs import readout as ro


def test_lp_caps_grow_with_the_points_and_are_bounded():
    sizes = [1, 64, 3_125, 46_656, 823_543, 10**9]
    caps = [ro.lp_caps(n) for n in sizes]
    for (a1, t1), (a2, t2) in zip(caps, caps[1:]):
        assert a1 <= a2 and t1 <= t2
    assert caps[-1] == (ro.MAX_LP_ROWS, ro.LP_TOTAL_MAX)
    assert all(per <= total for per, total in caps)


def _counting_lp(monkeypatch):
    rows = []
    real = dependence._run_lp

    def run(cost, A, *args, **kw):
        rows.append(A.shape[0])
        return real(cost, A, *args, **kw)

    monkeypatch.setattr(dependence, "_run_lp", run)
    return rows


def test_a_smaller_dataset_never_gets_more_lp_work(monkeypatch):
    task = make_task("tm", l=4, alphabet=4)
    model = registry.build(task, "heads", lemma3=False).model
    hv = ro.hidden_vectors(model, task)
    monkeypatch.setattr(ro, "LP_ROWS_MIN", 40)
    monkeypatch.setattr(ro, "LP_TOTAL_MIN", 60)
    solved = {}
    for points in (10, 400, 100_000):
        rows = _counting_lp(monkeypatch)
        ro.fit_max_margin(hv, len(model.classes), points)
        solved[points] = sum(rows)
        per_lp, total = ro.lp_caps(points)
        assert all(r <= per_lp for r in rows) and sum(rows) <= total
    assert solved[10] <= solved[400] <= solved[100_000] and solved[10] < solved[100_000]


@pytest.mark.parametrize("variant", ["heads", "ternary"])
def test_the_cheap_fallback_is_verified_exactly(monkeypatch, variant):
    # no LP at all (a cap of one pair): the better of the lifting and cosine read-outs is fitted,
    # separates every vector, and its margin is what the exact verification of every point finds
    monkeypatch.setattr(ro, "MAX_LP_ROWS", 1)
    task = make_task("tm", l=4, alphabet=4)
    rows = _counting_lp(monkeypatch)
    fitted, fit, _ = ro.with_max_margin_readout(registry.build(task, variant, lemma3=False).model, task)
    assert rows == [] and "was not solved" in fit.note and fit.vector_margin > 0
    v = verify(fitted, task, symmetry="off")
    assert v.verified and ro.normalized_margin(v.min_margin, fitted.W_O) == fit.vector_margin


def test_cosine_readout_separates_distinct_directions():
    rng = np.random.default_rng(1)
    X = rng.integers(1, 9, size=(12, 5)).astype(np.float64)
    y = np.arange(12)
    W = ro._cosine(X, y, 12)
    S = X @ W.T
    own = S[y, y]
    S[y, y] = -np.inf
    assert (own > S.max(axis=1)).all()
    assert ro._cosine(np.zeros((2, 3)), np.arange(2), 2) is None
