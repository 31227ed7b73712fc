"""The max-margin read-out's cost is bounded by design (proofs/readout.py lp_budget) and its cheap
fallback is exact: small sizes, seconds."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry
from depthcert.proofs import readout as ro


def test_lp_budget_grows_with_the_points_and_the_width_and_is_bounded():
    sizes = [0, 1, 64, 3_125, 46_656, 823_543, 10**9]
    for dim in (1, 14, 56):
        budgets = [ro.lp_budget(n, dim) for n in sizes]
        assert budgets == sorted(budgets)
        assert budgets[0] == ro.LP_WORK_MIN and budgets[-1] == ro.LP_WORK_MAX
    assert all(ro.lp_budget(n, 14) <= ro.lp_budget(n, 56) for n in sizes)
    # the offset (a run's fixed costs) comes off once the points x width pass it, never below the minimum
    grown = ro.LP_WORK_PER_POINT_DIM * 46_656 * 14
    assert ro.lp_budget(46_656, 14) == grown - ro.LP_WORK_OFFSET > ro.LP_WORK_MIN


def test_a_smaller_dataset_never_gets_more_lp_work(monkeypatch):
    # the work (simplex iterations x LP size, deterministic) never exceeds the budget, and a
    # smaller dataset never spends more of it than a larger one (a small minimum, so that the
    # small sizes stop at their budgets: the fitted read-out then still verifies exactly)
    monkeypatch.setattr(ro, "LP_WORK_MIN", 500)
    monkeypatch.setattr(ro, "LP_WORK_OFFSET", 0)
    monkeypatch.setattr(ro, "ROUND_WORK", 50)
    task = make_task("tm", l=4, alphabet=4)
    model = registry.build(task, "heads", lemma3=False).model
    hv = ro.hidden_vectors(model, task)
    work = {}
    for points in (10, 400, 4_000, 100_000):
        fit = ro.fit_max_margin(hv, len(model.classes), points)
        assert fit.lp_budget == ro.lp_budget(points, hv.X.shape[1]) and 0 < fit.lp_work <= fit.lp_budget
        work[points] = fit.lp_work
        v = verify(replace(model, W_O=fit.W_O), task, symmetry="off")
        assert v.verified == (fit.vector_margin > 0)
        if v.verified:
            assert ro.normalized_margin(v.min_margin, fit.W_O) == fit.vector_margin
    assert work[10] <= work[400] <= work[4_000] <= work[100_000] and work[10] < work[100_000]


@pytest.mark.parametrize("game", [False, True])
@pytest.mark.parametrize("variant", ["heads", "ternary"])
def test_the_cheap_fallback_is_verified_exactly(monkeypatch, variant, game):
    # no LP at all (a cap of one pair): the better of the lifting and cosine read-outs is fitted (or, with
    # the budget's steps of the multiplicative-weights game, its mix with the game's read-out), separates
    # every vector, and its margin is what the exact verification of every point finds
    monkeypatch.setattr(ro, "MAX_LP_ROWS", 1)
    if not game:  # a game step above any budget: no step
        monkeypatch.setattr(ro, "GAME_STEP_WORK", 10**12)
    task = make_task("tm", l=4, alphabet=4)
    fitted, fit, _ = ro.with_max_margin_readout(registry.build(task, variant, lemma3=False).model, task)
    assert fit.rounds == 0 and "was not solved" in fit.note and fit.vector_margin > 0
    assert (0 < fit.lp_work <= fit.lp_budget) if game else fit.lp_work == 0
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
