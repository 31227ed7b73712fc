"""The max-margin read-out's LP work is deterministic and bounded by lp_budget (proofs/readout.py):
counted in simplex iterations x LP size, never seconds; small sizes, seconds."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry
from depthcert.proofs import readout as ro


def _fit_inputs(variant, l=4, alphabet=4):
    task = make_task("tm", l=l, alphabet=alphabet)
    model = registry.build(task, variant, lemma3=False).model
    return task, model, ro.hidden_vectors(model, task)


def test_budget_is_monotone_in_points_and_width_and_bounded():
    points = sorted({0, 1, 2, 7, 100, 3_125, 46_656, 823_543, 10**7, 10**12})
    for dim in (1, 2, 12, 30, 56, 1_000):
        b = [ro.lp_budget(n, dim) for n in points]
        assert b == sorted(b) and ro.LP_WORK_MIN <= min(b) and max(b) <= ro.LP_WORK_MAX
    for n in points:
        b = [ro.lp_budget(n, dim) for dim in (1, 2, 12, 30, 56, 1_000)]
        assert b == sorted(b)


@pytest.mark.parametrize("variant", ["heads", "ternary"])
def test_work_never_exceeds_the_budget_and_grows_with_the_points(monkeypatch, variant):
    monkeypatch.setattr(ro, "LP_WORK_MIN", 300)
    monkeypatch.setattr(ro, "ROUND_WORK", 50)
    task, model, hv = _fit_inputs(variant)
    work = []
    for points in (4, 40, 400, 4_000, 40_000):
        fit = ro.fit_max_margin(hv, len(model.classes), points)
        assert fit.lp_work <= fit.lp_budget == ro.lp_budget(points, hv.X.shape[1])
        work.append(fit.lp_work)
    assert work == sorted(work) and work[0] < work[-1]


@pytest.mark.parametrize("variant", ["heads", "ternary"])
def test_a_fit_stopped_at_its_budget_verifies_exactly(monkeypatch, variant):
    # a budget of a few simplex iterations: the best candidate (the iteration-limited LP point mixed
    # with the cheap read-out) is rounded, and its margin is what the check of every point finds
    monkeypatch.setattr(ro, "LP_WORK_PER_POINT_DIM", 0)
    task, model, hv = _fit_inputs(variant, l=3, alphabet=4)
    n_var = ro._tied_variables(len(model.classes), hv.X.shape[1], hv.ties)[1]
    monkeypatch.setattr(ro, "LP_WORK_MIN", ro.ROUND_WORK + 5 * (n_var + 1 + 4 * len(hv.labels)))
    fit = ro.fit_max_margin(hv, len(model.classes), task.size)
    assert 0 < fit.lp_work <= fit.lp_budget and "work budget" in fit.note
    v = verify(replace(model, W_O=fit.W_O), task, symmetry="off")
    assert v.verified == (fit.vector_margin > 0)
    if v.verified:
        assert ro.normalized_margin(v.min_margin, fit.W_O) == fit.vector_margin


def test_the_fit_is_deterministic():
    task, model, hv = _fit_inputs("ternary")
    a = ro.fit_max_margin(hv, len(model.classes), 50)
    b = ro.fit_max_margin(hv, len(model.classes), 50)
    assert a.lp_work == b.lp_work and a.note == b.note and a.vector_margin == b.vector_margin
    assert np.array_equal(a.W_O, b.W_O)


def test_a_budget_that_suffices_reaches_the_lp_optimum():
    # tm l = 3: the whole LP fits in the minimum budget; the rounded read-out is within the grid's
    # tolerance of the LP's bound
    task, model, hv = _fit_inputs("heads", l=3, alphabet=3)
    fit = ro.fit_max_margin(hv, len(model.classes), task.size)
    assert "stopped" not in fit.note and fit.lp_work <= fit.lp_budget
    assert float(fit.vector_margin) >= fit.lp_margin * (1 - 2**-7)


def test_coordinates_far_apart_in_scale_leave_a_checked_readout():
    # scaled by 2^63, the second vector's coordinates are below HiGHS's smallest coefficient (it drops
    # them): the LP's answer is only a search, the fit still returns a read-out whose exact margin is
    # the one reported
    X = np.array([[-2**63, 1], [3, 5]], dtype=object)
    y = np.array([0, 1])
    fit = ro.fit_max_margin(ro.HiddenVectors(X, 1, y, (), 2, ""), 2)
    W = fit.W_O
    m = min(sum((W[y[i], r] - W[1 - y[i], r]) * X[i, r] for r in range(2)) for i in range(2))
    assert m > 0 and ro.normalized_margin(m, W) == fit.vector_margin


def test_the_game_only_raises_the_margin_and_verifies_exactly(monkeypatch):
    # the multiplicative-weights game runs on what the LP leaves of the budget; its read-out is mixed in
    # only where it raises the min margin (tm l = 4 heads: the budget-limited LP and cosine mix reach
    # about 6.6, the game about 8, the LP optimum 8.54), and the result is checked like any other
    task, model, hv = _fit_inputs("heads")
    with_game = ro.fit_max_margin(hv, len(model.classes), task.size)
    monkeypatch.setattr(ro, "GAME_STEP_WORK", 10**12)
    without = ro.fit_max_margin(hv, len(model.classes), task.size)
    assert "multiplicative-weights" in with_game.note and "multiplicative-weights" not in without.note
    assert with_game.vector_margin > without.vector_margin > 0
    assert without.lp_work <= with_game.lp_work <= with_game.lp_budget
    v = verify(replace(model, W_O=with_game.W_O), task, symmetry="off")
    assert v.verified and ro.normalized_margin(v.min_margin, with_game.W_O) == with_game.vector_margin


def test_game_readout_is_in_the_box_and_its_margins_are_its_own():
    rng = np.random.default_rng(3)
    Xf = rng.normal(size=(9, 4))
    y = np.arange(9) % 3
    var, n_var = ro._tied_variables(3, 4, ())
    W, M, played = ro._game_readout(Xf, y, 3, var, n_var, 40)
    assert np.abs(W).max() == 1.0
    S = Xf @ W.T
    expect = S[np.arange(9), y][:, None] - S
    expect[np.arange(9), y] = np.inf
    assert np.array_equal(M, expect)


def test_tied_variables_are_the_connected_components_of_the_generators():
    # the label propagation against scipy's connected components (numbered by smallest entry), on
    # random permutations of random shapes and on an n-cycle with a transposition (the longest orbits)
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    def reference(C, d, ties):
        if not ties:
            return np.arange(C * d).reshape(C, d)
        src = np.tile(np.arange(C * d), len(ties))
        dst = np.concatenate([(kappa[:, None] * d + pi[None, :]).ravel() for pi, kappa in ties])
        _, label = connected_components(sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(C * d, C * d)),
                                        directed=True, connection="weak")
        first = np.full(label.max() + 1, C * d)
        np.minimum.at(first, label, np.arange(C * d))
        return np.argsort(np.argsort(first, kind="stable"), kind="stable")[label].reshape(C, d)

    rng = np.random.default_rng(5)
    cases = [(int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(0, 4))) for _ in range(200)]
    for C, d, g in cases:
        ties = tuple((rng.permutation(d), rng.permutation(C)) for _ in range(g))
        var, n_var = ro._tied_variables(C, d, ties)
        assert np.array_equal(var, reference(C, d, ties)) and n_var == int(var.max()) + 1
    for n in (2, 7, 40):
        cycle, swap = np.roll(np.arange(n), 1), np.arange(n)
        swap[[0, 1]] = [1, 0]
        ties = ((cycle, cycle), (swap, np.arange(n)))
        assert np.array_equal(ro._tied_variables(n, n, ties)[0], reference(n, n, ties))
