"""checkers/softmax_intervals.py's softmax_relative (one exp per entry, relative radii) against
mpmath at 80 digits: every exact weight for every score within the given radii lies in the
returned enclosure.  The worst cases are taken exactly: the weight of key j is increasing in
t_j and decreasing in every other t_l, so its extremes are at the corners (t_j = m_j +- r_j,
t_l = m_l -+ r_l), each evaluated in mpmath from the floats' exact values."""
from __future__ import annotations

import mpmath
import numpy as np
import pytest

from depthcert.checkers import softmax_intervals as si

mpmath.mp.dps = 80


def _extremes(m, r, allowed, j):
    """(min, max) of the exact softmax weight of key j over |t - m| <= r, allowed keys only."""
    keys = [k for k in range(len(m)) if allowed[k]]
    if not allowed[j]:
        return mpmath.mpf(0), mpmath.mpf(0)
    out = []
    for sign in (-1, 1):  # sign +1: t_j up, others down (the maximum)
        t = {k: mpmath.mpf(float(m[k])) + (sign if k == j else -sign) * mpmath.mpf(float(r[k])) for k in keys}
        top = max(t.values())
        z = mpmath.fsum(mpmath.exp(t[k] - top) for k in keys)
        out.append(mpmath.exp(t[j] - top) / z)
    return out[0], out[1]


def _check(T: si.Interval, mask) -> bool:
    """True when softmax_relative gave an enclosure (asserted), False when it declined."""
    with np.errstate(all="ignore"):
        A = si.softmax_relative(T, mask)
    if A is None:
        return False
    B, q, n = T.m.shape
    r = np.zeros_like(T.m) if T.r is None else np.broadcast_to(T.r, T.m.shape)
    allowed = np.ones((q, n), dtype=bool) if mask is None else np.broadcast_to(mask, (q, n))
    assert np.isfinite(A.m).all() and np.isfinite(A.r).all() and (A.r >= 0).all()
    for b in range(B):
        for k in range(q):
            for j in range(n):
                lo, hi = _extremes(T.m[b, k], r[b, k], allowed[k], j)
                c, rad = mpmath.mpf(float(A.m[b, k, j])), mpmath.mpf(float(A.r[b, k, j]))
                assert c - rad <= lo and hi <= c + rad, (b, k, j, float(lo), float(hi), c, rad)
    return True


@pytest.mark.parametrize("seed", range(6))
def test_weights_enclose_mpmath_on_random_scores(seed):
    rng = np.random.default_rng(seed)
    B, q, n = 6, 3, 5
    scale = [1e-3, 1.0, 30.0, 300.0, 1e4, 1e-300][seed]
    m = rng.normal(size=(B, q, n)) * scale
    rel = [0.0, 1e-16, 1e-12, 1e-7, 1e-9, 1e-3][seed]
    r = np.abs(m) * rel * rng.random((B, q, n)) + rng.random((B, q, n)) * [0, 1e-15, 1e-10, 1e-5, 0, 0][seed]
    assert _check(si.Interval(m, r if seed else None), None)
    assert _check(si.Interval(m, r), np.tril(np.ones((n, n), dtype=bool))[n - q:])


def test_dominant_key_and_ties_and_tiny_weights():
    m = np.array([[[0.0, -1e-300, 5e-324, -40.0, -699.9, -700.1, -1e5, -1.7e308]],
                  [[1.7e308, -1.7e308, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]],
                  [[3.0, 3.0, 3.0, 3.0, 2.0, 1.0, 0.0, 2.0 ** -1074]]])
    r = np.full(m.shape, 1e-6)
    r[1] = 0.0
    r[2, 0, :3] = [5e-324, 0.0, 2.0 ** -1000]
    assert _check(si.Interval(m, r), None)
    assert _check(si.Interval(m, None), None)


def test_radius_limit_and_non_finite_values_decline():
    m = np.zeros((1, 1, 3))
    assert si.softmax_relative(si.Interval(m, np.full(m.shape, si.RHO_MAX * 2)), None) is None
    assert _check(si.Interval(m, np.full(m.shape, si.RHO_MAX / 2)), None)
    for bad in (np.inf, -np.inf, np.nan):
        with np.errstate(all="ignore"):
            assert si.softmax_relative(si.Interval(np.array([[[0.0, bad, 1.0]]]), None), None) is None
            if bad == bad and bad > 0:  # radii are never negative
                assert si.softmax_relative(si.Interval(m, np.array([[[0.0, bad, 0.0]]])), None) is None
            if bad != bad:
                assert si.softmax_relative(si.Interval(m, np.array([[[0.0, bad, 0.0]]])), None) is None


def test_softmax_uses_the_bounds_path_beyond_the_limit():
    """softmax falls back to softmax_bounds (same enclosure claim) where the relative path declines."""
    m = np.array([[[0.0, 1.0, 2.0]]])
    r = np.full(m.shape, 0.5)
    A, B = si.softmax(si.Interval(m, r), None), si.softmax_bounds(si.Interval(m, r), None)
    assert (A.m == B.m).all() and (A.r == B.r).all()


def test_nudges_are_monotone_so_the_ends_of_a_minimum_are_the_minimum_of_the_ends():
    """IntervalForward._decide takes _lo of the smallest lo end (and _hi of the largest hi end for
    the finiteness test) instead of every entry's: that rests on _lo and _hi being non-decreasing,
    checked here on neighbouring floats across the whole range (subnormal, normal, near overflow)."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-1, 1, 2000) * 10.0 ** rng.uniform(-320, 308, 2000),
                        np.arange(-40, 40) * 2.0 ** -1074, [0.0, -0.0, 2.0 ** -1022, 2.0 ** -1021, 1.7e308, -1.7e308]])
    x = np.sort(x)
    nxt = np.nextafter(x, np.inf)
    with np.errstate(over="ignore"):
        for f in (si._lo, si._hi):
            a, b = f(x), f(nxt)
            assert (a <= b).all()
            assert (f(np.sort(x)[1:]) >= f(np.sort(x)[:-1])).all()


def test_exact_matrix_fast_conversion_equals_the_entry_by_entry_one():
    """ExactMatrix converts small numerators and denominators (< 2^53) as float arrays: the same
    floats and radii as _slow's correctly rounded int / int, on dyadic and other entries."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    vals = [Fraction(int(a), int(b)) for a, b in zip(rng.integers(-2**52, 2**52, 300), rng.integers(1, 2**52, 300))]
    vals += [Fraction(int(a), 2 ** int(k)) for a, k in zip(rng.integers(-2**52, 2**52, 100), rng.integers(0, 52, 100))]
    vals += [Fraction(0), Fraction(1, 3), Fraction(-5, 8), Fraction(2**53 - 1, 2**52 - 1), Fraction(1, 2**52)]
    M = np.array(vals, dtype=object).reshape(-1, 5)
    W = si.ExactMatrix(M)
    m, r, inexact = si.ExactMatrix._slow(list(M.ravel()))
    r[inexact] = np.abs(m[inexact]) * si.U + si.ETA
    assert (W.m.ravel() == m).all() and (W.r.ravel() == r).all()
    assert all(float(Fraction(float(a)) - a) == 0 or W.r.ravel()[i] >= abs(Fraction(float(a)) - a)
               for i, a in enumerate(M.ravel()))
    big = si.ExactMatrix(np.array([[Fraction(2**60 + 1, 3), Fraction(1, 2**1100)]], dtype=object))
    assert big.r[0, 0] > 0 and big.r[0, 1] > 0


def _exact_range_of_products(xm, xr, ym, yr):
    """The exact range of sum_j x_j y_ji over the boxes |x - xm| <= xr, |y - ym| <= yr (each term's
    range from its four corners, in Fractions; the terms are independent)."""
    from fractions import Fraction

    k, n = ym.shape
    out = []
    for i in range(n):
        lo = hi = Fraction(0)
        for j in range(k):
            xs = [Fraction(float(xm[j])) + s * Fraction(float(xr[j])) for s in (-1, 1)]
            ys = [Fraction(float(ym[j, i])) + s * Fraction(float(yr[j, i])) for s in (-1, 1)]
            c = [a * b for a in xs for b in ys]
            lo, hi = lo + min(c), hi + max(c)
        out.append((lo, hi))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_one_row_products_enclose_the_exact_range(seed):
    """mul with one row of X (the last layer's query or weights): the two-product radius encloses
    every exact product of the enclosed operands (radii full, None, subnormal, huge)."""
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    B, k, n = 3, 6, 4
    sx, sy = [(1, 1), (1e-160, 1e-160), (1e150, 1e-150), (1e3, 1e3), (1, 1e-300), (1e-3, 1e5), (1, 1), (7, 3)][seed]
    xm, ym = rng.normal(size=(B, 1, k)) * sx, rng.normal(size=(B, k, n)) * sy
    if seed == 6:
        xm[..., :2] = 0.0
        ym[:, :2] = 5e-324
    xr = np.abs(xm) * 10.0 ** rng.uniform(-16, -2, xm.shape) + (seed % 2) * 1e-310
    yr = np.abs(ym) * 10.0 ** rng.uniform(-16, -2, ym.shape)
    for X_r, Y_r in ((xr, yr), (None, yr), (xr, None), (None, None)):
        with np.errstate(all="ignore"):
            P = si.mul(si.Interval(xm, X_r), si.Interval(ym, Y_r))
        assert P.r.shape == P.m.shape
        for b in range(B):
            rng_ = _exact_range_of_products(xm[b, 0], np.zeros(k) if X_r is None else X_r[b, 0], ym[b],
                                            np.zeros((k, n)) if Y_r is None else Y_r[b])
            for i, (lo, hi) in enumerate(rng_):
                c, r = Fraction(float(P.m[b, 0, i])), Fraction(float(P.r[b, 0, i]))
                assert c - r <= lo and hi <= c + r, (seed, b, i)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("radius_product", [False, True])
def test_lin_with_a_folded_bias_encloses_the_exact_affine_map(seed, radius_product):
    """lin(X, W.right(b)): X @ W^T + b with the bias folded into the dot product (gamma_{k+1}),
    against the exact range in Fractions (rational W and b, some not floats; subnormal and large X)."""
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    B, n, k, e = 2, 3, 5, 4
    W = np.array([[Fraction(int(a), int(d)) for a, d in zip(rng.integers(-9, 10, k), rng.integers(1, 12, k))]
                  for _ in range(e)], dtype=object)
    b = np.array([Fraction(int(a), int(d)) for a, d in zip(rng.integers(-9, 10, e), rng.integers(1, 12, e))],
                 dtype=object)
    scale = [1.0, 1e-300, 1e200, 1e-3, 3.0, 1e5][seed]
    xm = rng.normal(size=(B, n, k)) * scale
    xr = np.abs(xm) * 10.0 ** rng.uniform(-16, -3, xm.shape)
    Wf = si.ExactMatrix(W).right(si.ExactMatrix(b.reshape(1, -1)))
    for X_r in (xr, None):
        with np.errstate(all="ignore"):
            P = si.lin(si.Interval(xm, X_r), Wf, radius_product=radius_product)
        R = np.broadcast_to(P.r, P.m.shape)
        for i0 in range(B):
            for i1 in range(n):
                for i in range(e):
                    lo = hi = b[i]
                    for j in range(k):
                        xs = [Fraction(float(xm[i0, i1, j])) + s * Fraction(0 if X_r is None else float(X_r[i0, i1, j]))
                              for s in (-1, 1)]
                        c = [x * W[i, j] for x in xs]
                        lo, hi = lo + min(c), hi + max(c)
                    mid, rad = Fraction(float(P.m[i0, i1, i])), Fraction(float(R[i0, i1, i]))
                    assert mid - rad <= lo and hi <= mid + rad, (seed, i0, i1, i)


def test_relu_settles_only_finite_sure_signs():
    """relu: an entry is passed on (x >= 0 surely) or set to 0 (x <= 0 surely) only on finite
    evidence; an overflowed midpoint or radius never becomes an exact 0 (the point stays unsure)."""
    m = np.array([[[2.0, -2.0, 0.5, -np.inf, np.inf, np.nan, 1.0, -1.0, 0.0]]])
    r = np.array([[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, np.inf, np.inf, 0.0]]])
    with np.errstate(all="ignore"):
        A = si.relu(si.Interval(m, r))
    assert (A.m[0, 0, :2] == [2.0, 0.0]).all() and (A.r[0, 0, :2] == [1.0, 0.0]).all()
    assert A.m[0, 0, 2] - A.r[0, 0, 2] <= 0 and A.m[0, 0, 2] + A.r[0, 0, 2] >= 1.5  # straddles: [0, 1.5]
    for j in (3, 4, 5, 6, 7):  # overflowed entries: inf or NaN in the result
        assert not (np.isfinite(A.m[0, 0, j]) and np.isfinite(A.r[0, 0, j])), j
    assert A.m[0, 0, 8] == 0.0 and A.r[0, 0, 8] == 0.0


def test_short_row_helpers_equal_numpy_reductions():
    """_maxalong is numpy's max exactly (NaN included); _lastsum and _lastdot are float sums in
    some order, within gamma_n of the exact sums (the only property the bounds use)."""
    from fractions import Fraction

    rng = np.random.default_rng(5)
    A = rng.normal(size=(4, 3, 7)) * 10.0 ** rng.integers(-300, 300, (4, 3, 7))
    A[0, 0, 3] = np.nan
    for axis in (-1, -2):
        assert np.array_equal(si._maxalong(A, axis), A.max(axis=axis, keepdims=True), equal_nan=True)
    P = np.abs(rng.normal(size=(4, 3, 7)))
    Q = np.abs(rng.normal(size=(4, 3, 7)))
    g = si.gamma(7)
    for got, terms in ((si._lastsum(P), P), (si._lastdot(P, Q), None)):
        for i in np.ndindex(4, 3):
            if terms is not None:
                exact = sum(Fraction(float(v)) for v in P[i])
            else:
                exact = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(P[i], Q[i]))
            assert abs(Fraction(float(got[i][0])) - exact) <= g * exact


@pytest.mark.parametrize("seed", range(5))
def test_attention_products_with_shared_value_radii_enclose_the_exact_range(seed):
    """mul(A, V, radius_product=True) with V's radius shared by its rows (the first layer's values)
    and lin(X, W, radius_product=True) (the read-out): one augmented product each, checked
    against the exact range of the products in Fractions."""
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    B, q, k, n = 2, 3, 5, 4
    sa, sv = [(1, 1), (1, 1e-300), (1e-3, 1e200), (1, 30.0), (1e-200, 1e100)][seed]
    am = np.abs(rng.normal(size=(B, q, k))) * sa
    ar = am * 10.0 ** rng.uniform(-16, -4, am.shape)
    vm = rng.normal(size=(B, k, n)) * sv
    vr = np.abs(vm).max(axis=1, keepdims=True) * 10.0 ** rng.uniform(-16, -4, (B, 1, n))
    for V_r in (vr, None):
        with np.errstate(all="ignore"):
            P = si.mul(si.Interval(am, ar), si.Interval(vm, V_r), radius_product=True)
        for b in range(B):
            for row in range(q):
                yr = np.zeros((k, n)) if V_r is None else np.broadcast_to(V_r[b], (k, n))
                for i, (lo, hi) in enumerate(_exact_range_of_products(am[b, row], ar[b, row], vm[b], yr)):
                    c, r = Fraction(float(P.m[b, row, i])), Fraction(float(P.r[b, row, i]))
                    assert c - r <= lo and hi <= c + r, (seed, b, row, i)
    W = np.array([[Fraction(int(a), int(d)) for a, d in zip(rng.integers(-9, 10, k), rng.integers(1, 12, k))]
                  for _ in range(n)], dtype=object)
    Wf = si.ExactMatrix(W).right()
    with np.errstate(all="ignore"):
        L = si.lin(si.Interval(am[:, :1].copy(), ar[:, :1].copy()), Wf, radius_product=True)
    for b in range(B):
        for i in range(n):
            lo = hi = Fraction(0)
            for j in range(k):
                xs = [Fraction(float(am[b, 0, j])) + s * Fraction(float(ar[b, 0, j])) for s in (-1, 1)]
                c = [x * W[i, j] for x in xs]
                lo, hi = lo + min(c), hi + max(c)
            mid, rad = Fraction(float(L.m[b, 0, i])), Fraction(float(L.r[b, 0, i]))
            assert mid - rad <= lo and hi <= mid + rad


def test_chunks_decided_in_threads_equal_one_thread(monkeypatch, recwarn):
    """IntervalForward.decide's worker threads give exactly the one-thread result (chunk order,
    every output), and warn about nothing (numpy's error state is set in each worker)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_all

    from depthcert import constructions
    from depthcert.checkers.accuracy import PointDecider
    from depthcert.checkers.tasks import make_task

    task = make_task("tm", l=4, alphabet=4)
    model = bench_all._random_softmax_mlp(constructions.build(task, lemma3=False).model, seed=1)
    dec = PointDecider(model, task, method="intervals")
    batch = next(iter(task.batches(4096)))
    Hnum, den = dec._stream_in(batch.ids, floats=True)
    n = batch.ids.shape[1]
    lab = np.full((len(batch.ids), n), -1, dtype=np.int64)
    lab[:, n - 1] = dec.class_rows[batch.labels]
    fw = dec._interval_forward()
    monkeypatch.setattr(fw, "CHUNK", 37)  # many chunks, the last one short
    monkeypatch.setattr(si, "THREADS", 1)
    one = fw.decide(Hnum, den, lab)
    monkeypatch.setattr(si, "THREADS", 2)
    two = fw.decide(Hnum, den, lab)
    assert len(batch.ids) > 37 * 4
    for a, b in zip(one, two):
        assert np.array_equal(a, b, equal_nan=True)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
