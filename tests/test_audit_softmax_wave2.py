"""Independent audit of the float-interval speed-ups of checkers/softmax_intervals.py (softmax by
midpoints with a relative radius, nudged extreme ends, fast ExactMatrix conversion, folded MLP
bias, one-row and augmented products, relu in fewer passes, einsum sums, chunks in two threads)
and of the weights file's one-pass row lookups.

Every check compares against an independent reference: mpmath at 80 digits (softmax weights at
the corners of the score box: the weight of key j is increasing in t_j and decreasing in every
other t_l), exact Fractions (products, affine maps, relu, differences: each term's range from its
corners) or arb balls at 1024 bits (whole models), and holds on inputs chosen to be hostile:
near-ties, scores at the exp range edges, huge, tiny and subnormal entries, cancellations of
+-1e300, radii on both sides of softmax_relative's 2^-10 switch, causal masks, a sum order that
realises the worst rounding of the weights' normaliser."""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from depthcert.checkers import softmax_intervals as si

mpmath.mp.dps = 80


# ---- softmax_relative against mpmath


def _corner_weights(m, r, allowed, j):
    """(min, max) of the exact weight of key j over |t - m| <= r (allowed keys only)."""
    if not allowed[j]:
        return mpmath.mpf(0), mpmath.mpf(0)
    keys = [k for k in range(len(m)) if allowed[k]]
    out = []
    for sign in (-1, 1):
        t = {k: mpmath.mpf(float(m[k])) + (sign if k == j else -sign) * mpmath.mpf(float(r[k])) for k in keys}
        top = max(t.values())
        out.append(mpmath.exp(t[j] - top) / mpmath.fsum(mpmath.exp(t[k] - top) for k in keys))
    return out


def _excess(T, mask, keys=None) -> float:
    """max over keys of |exact weight - w| / radius at the corners (< 1: enclosed); -1 when the
    relative path declined."""
    with np.errstate(all="ignore"):
        A = si.softmax_relative(T, mask)
    if A is None:
        return -1.0
    B, q, n = T.m.shape
    r = np.zeros_like(T.m) if T.r is None else np.broadcast_to(T.r, T.m.shape)
    allowed = np.ones((q, n), dtype=bool) if mask is None else np.broadcast_to(mask, (q, n))
    assert np.isfinite(A.m).all() and np.isfinite(A.r).all() and (A.r >= 0).all()
    worst = 0.0
    for b in range(B):
        for k in range(q):
            for j in (range(n) if keys is None else keys):
                c, rad = mpmath.mpf(float(A.m[b, k, j])), mpmath.mpf(float(A.r[b, k, j]))
                for w in _corner_weights(T.m[b, k], r[b, k], allowed[k], j):
                    worst = max(worst, float(abs(w - c) / rad))
    return worst


def _hostile_scores(rng, kind, shape):
    if kind == 0:  # at the exp range's edges, relative to the row's top
        return rng.choice([-709.0, 709.0, -700.0, 700.0, -699.99, -745.0, 0.0], size=shape) + rng.normal(size=shape) * 1e-3
    if kind == 1:  # all equal
        return np.full(shape, rng.normal() * 10 ** rng.uniform(-300, 300))
    if kind == 2:  # near-ties 1e-8 .. 1e-300
        return rng.normal() + rng.normal(size=shape) * 10.0 ** -rng.integers(8, 300)
    if kind == 3:  # huge, finite
        return rng.choice([1.7e308, -1.7e308, 1e300, -1e300, 0.0], size=shape)
    if kind == 4:  # subnormal
        return rng.choice([5e-324, -5e-324, 2.0 ** -1022, 0.0, -1e-310], size=shape)
    if kind == 5:  # the top key and the rest clustered at the small-key threshold -700
        m = -700.0 + rng.normal(size=shape) * 0.5
        m[..., 0] = 0.0
        return m
    return rng.normal(size=shape) * 10 ** rng.uniform(-3, 3)


def _hostile_radii(rng, kind, m):
    if kind == 0:
        return None
    if kind == 1:  # on both sides of the 2^-10 switch
        return np.full(m.shape, si.RHO_MAX) * rng.choice([0.999, 1.0, 1.001, 0.5], size=m.shape)
    if kind == 2:
        return np.abs(m) * 1e-16 * rng.random(m.shape)
    if kind == 3:
        return rng.choice([0.0, 5e-324, 2.0 ** -1000, si.RHO_MAX - 1400 * si.U, 2.0 ** -11], size=m.shape)
    return rng.random(m.shape) * 10.0 ** -rng.integers(3, 20)


@pytest.mark.parametrize("seed", range(3))
def test_relative_softmax_encloses_mpmath_on_hostile_scores(seed):
    rng = np.random.default_rng(1000 + seed)
    used = 0
    for it in range(70):
        q, n = int(rng.integers(1, 4)), int(rng.integers(1, 7))
        m = _hostile_scores(rng, it % 7, (2, q, n))
        r = _hostile_radii(rng, it % 5, m)
        mask = np.tril(np.ones((n, n), dtype=bool))[n - q:] if q <= n and rng.random() < 0.5 else None
        e = _excess(si.Interval(m, r), mask)
        assert e < 1.0, (seed, it, e)
        used += e >= 0
    assert used >= 40  # most cases take the relative path (the rest: a radius above 2^-10 or non-finite)


@pytest.mark.parametrize("n, rho, every_key", [(2000, si.RHO_MAX * 0.999, False), (2000, 0.0, False),
                                                (300, si.RHO_MAX / 3, False), (20000, 2.0 ** -11 * (1 + 2.0 ** -40), True)])
def test_relative_softmax_holds_for_a_sum_order_with_the_worst_rounding(monkeypatch, n, rho, every_key):
    """The docstring allows the normaliser (and p) to be summed in any order.  Left to right, with
    one key of weight ~1 and n - 1 keys whose weights lie just below u, every addition after the
    first is absorbed: fl(Z) = 1 while Z = 1 + (n - 1) x, a relative error close to gamma_n.  The
    enclosure must still hold (it is within 2% of failing: c0 must keep its gamma_n)."""
    monkeypatch.setattr(si, "_lastsum", lambda A: np.cumsum(A, axis=-1)[..., -1:])
    monkeypatch.setattr(si, "_lastdot", lambda A, B: np.cumsum(A * B, axis=-1)[..., -1:])
    x = float(np.nextafter(2.0 ** -53, 0)) * 0.99999
    m = np.full((1, 1, n), float(np.log(x)))
    m[..., 0] = 0.0
    # every key with a radius just above a power of 2: p's own sum absorbs the other keys' terms too
    # (p must then be rounded up by _bound: without it the corners exceed the radius by 4e-5)
    r = np.full(m.shape, rho if every_key else 0.0)
    r[..., 0] = rho
    e = _excess(si.Interval(m, r), None, keys=[0, 1, n - 1])
    assert 0.9 < e < 1.0, e  # the order does realise (most of) the worst case, and it is covered


def test_softmax_switch_at_two_to_the_minus_ten_is_sound_on_both_sides():
    """Radii just below the switch take the relative path, just above the bounds path: both
    enclose the exact weights (the fallback through softmax())."""
    m = np.array([[[0.0, -1e-9, 3.0, -2.0, -699.5]]])
    for f, relative in ((1 - 2.0 ** -40, True), (1 + 2.0 ** -40, False)):
        r = np.full(m.shape, si.RHO_MAX * f) - 700 * si.U  # rho = r + u |d| straddles RHO_MAX
        r[..., 0] = si.RHO_MAX * f
        assert (si.softmax_relative(si.Interval(m, r), None) is not None) == relative
        A = si.softmax(si.Interval(m, r), None)
        for j in range(5):
            lo, hi = _corner_weights(m[0, 0], r[0, 0], [True] * 5, j)
            c, rad = mpmath.mpf(float(A.m[0, 0, j])), mpmath.mpf(float(A.r[0, 0, j]))
            assert c - rad <= lo and hi <= c + rad


# ---- products, affine maps, relu, differences against exact Fractions

_MAGS = [1.0, 1e-300, 1e300, 1e150, 1e-160, 5e-324, 2.0 ** -1022, 1e16, 1e-8, 3.0]


def _arr(rng, shape):
    m = rng.normal(size=shape) * rng.choice(_MAGS, size=shape)
    m[rng.random(shape) < 0.15] = 0.0
    if rng.random() < 0.3:  # a cancellation of +-1e300 around small terms
        m.flat[0], m.flat[-1] = 1e300, -1e300
    return m


def _rad(rng, m, shared=False):
    c = rng.integers(0, 4)
    if c == 0:
        return None
    r = np.abs(m) * 10.0 ** rng.uniform(-17, -2, m.shape)
    if c == 2:
        r = r + rng.choice([0.0, 5e-324, 1e-310, 2.0 ** -10], size=m.shape)
    if c == 3:
        r = rng.choice([0.0, 5e-324, 1e-300, 1e-5, 1e290], size=m.shape)
    return r.max(axis=-2, keepdims=True) if shared else r


def _box(m, r, idx):
    c = Fraction(float(m[idx]))
    e = Fraction(0) if r is None else Fraction(float(np.broadcast_to(r, m.shape)[idx]))
    return c - e, c + e


def _encloses(P, idx, lo, hi) -> bool:
    """A finite enclosure contains [lo, hi] (a non-finite one decides nothing: fine)."""
    m = P.m[idx]
    r = 0.0 if P.r is None else np.broadcast_to(P.r, P.m.shape)[idx]
    if not (np.isfinite(m) and np.isfinite(r)):
        return True
    c, e = Fraction(float(m)), Fraction(float(r))
    return c - e <= lo and hi <= c + e


def _random_weight(rng, shape, exps=(0, 0, 100, -100, 300, -300)):
    return np.array([Fraction(int(rng.integers(-9, 10)), int(rng.integers(1, 12))) * Fraction(10) ** int(rng.choice(exps))
                     for _ in range(int(np.prod(shape)))], dtype=object).reshape(shape)


@pytest.mark.parametrize("seed", range(2))
def test_interval_operations_enclose_exact_values_on_mixed_magnitudes(seed):
    rng = np.random.default_rng(2000 + seed)
    checked = 0
    with np.errstate(all="ignore"):
        for it in range(240):
            q, k, e = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
            op = it % 4
            if op < 2:  # mul: the one-row, shared-radius (augmented) and general branches
                xm, ym = _arr(rng, (1, q, k)), _arr(rng, (1, k, e))
                if op == 1:
                    xm = np.abs(xm)  # attention weights
                xr, yr = _rad(rng, xm), _rad(rng, ym, shared=rng.random() < 0.5)
                P = si.mul(si.Interval(xm, xr), si.Interval(ym, yr), radius_product=bool(rng.random() < 0.5))
                for a in range(q):
                    for i in range(e):
                        lo = hi = Fraction(0)
                        for j in range(k):
                            xs, ys = _box(xm, xr, (0, a, j)), _box(ym, yr, (0, j, i))
                            c = [u * v for u in xs for v in ys]
                            lo, hi = lo + min(c), hi + max(c)
                        assert _encloses(P, (0, a, i), lo, hi), ("mul", seed, it)
                        checked += 1
            elif op == 2:  # lin: the folded bias, plain, shared radii, radius products
                W, b = _random_weight(rng, (e, k)), _random_weight(rng, (e,), (0, 200, -200))
                xm = _arr(rng, (1, q, k))
                xr = _rad(rng, xm, shared=rng.random() < 0.3)
                bias = rng.random() < 0.7
                Wf = si.ExactMatrix(W).right(si.ExactMatrix(b.reshape(1, -1)) if bias else None)
                P = si.lin(si.Interval(xm, xr), Wf, radius_product=bool(rng.random() < 0.5))
                for a in range(q):
                    for i in range(e):
                        lo = hi = b[i] if bias else Fraction(0)
                        for j in range(k):
                            c = [u * W[i, j] for u in _box(xm, xr, (0, a, j))]
                            lo, hi = lo + min(c), hi + max(c)
                        assert _encloses(P, (0, a, i), lo, hi), ("lin", seed, it)
                        checked += 1
            else:  # relu and the decision's difference
                xm, ym = _arr(rng, (1, q, k)), _arr(rng, (1, q, k))
                xr, yr = _rad(rng, xm, shared=rng.random() < 0.3), _rad(rng, ym)
                P, D = si.relu(si.Interval(xm, xr)), si.sub(si.Interval(xm, xr), si.Interval(ym, yr))
                for a in range(q):
                    for j in range(k):
                        (xl, xh), (yl, yh) = _box(xm, xr, (0, a, j)), _box(ym, yr, (0, a, j))
                        assert _encloses(P, (0, a, j), max(xl, Fraction(0)), max(xh, Fraction(0))), ("relu", seed, it)
                        assert _encloses(D, (0, a, j), xl - yh, xh - yl), ("sub", seed, it)
                        checked += 2
    assert checked > 600


def test_exact_matrix_fast_conversion_at_its_limits():
    """Numerators/denominators just below and at 2^53 (fast path / entry by entry), powers of 2
    (exact), thirds (inexact): the radius covers the exact entry and is 0 exactly when exact."""
    fast = [Fraction(2**53 - 1, 3), Fraction(1, 2**53 - 1), Fraction(2**53 - 1, 2**52), Fraction(5, 2**52),
            Fraction(-(2**53 - 1), 2**53 - 2), Fraction(0), Fraction(-7, 2**40), Fraction(1, 3)]
    for entries in (fast, fast + [Fraction(2**53, 3), Fraction(2**53 + 1)]):  # fast path; entry by entry
        M = si.ExactMatrix(np.array(entries, dtype=object).reshape(1, -1))
        for v, m, r in zip(entries, M.m.ravel(), M.r.ravel()):
            assert abs(v - Fraction(float(m))) <= Fraction(float(r))
            assert (r == 0) == (Fraction(float(m)) == v)


def test_nudges_are_non_decreasing_across_binade_and_subnormal_boundaries():
    """e72fed7 takes _lo of the smallest end and _hi of the largest: exact only if both are
    non-decreasing.  20,000 consecutive floats centred on each boundary, both signs."""
    with np.errstate(all="ignore"):
        for c in (0.0, 2.0 ** -1022, 2.0 ** -1021, 2.0 ** -971, 2.0 ** -972, 1.0, 2.0 ** 1023):
            for sgn in (1.0, -1.0):
                x = np.empty(20000)
                x[0] = sgn * c
                for _ in range(10000):  # centred on the boundary
                    x[0] = np.nextafter(x[0], -np.inf)
                for i in range(1, len(x)):
                    x[i] = np.nextafter(x[i - 1], np.inf)
                for f in (si._lo, si._hi):
                    assert (np.diff(f(x)) >= 0).all(), (f.__name__, c, sgn)


# ---- whole models: the interval forward against arb, two threads against one


def _random_model(rng, mag):
    from depthcert.checkers.layout import Layout
    from depthcert.checkers.model import MLP, Head, Layer, Model

    lay = Layout.of(("token", 3), ("position", 3), ("x", 2))
    d = lay.dim
    vals = [Fraction(v) for v in (1, -1, 2, -3)] + [Fraction(1, 3), Fraction(-5, 7)]
    if mag:
        vals += [Fraction(10**mag), Fraction(-10**mag), Fraction(1, 10**mag), Fraction(3**mag + 1, 3**mag)]

    def mat(r, c, density=0.3):
        M = np.array([[Fraction(0)] * c for _ in range(r)], dtype=object)
        for i in range(r):
            for j in range(c):
                if rng.random() < density:
                    M[i, j] = vals[rng.integers(len(vals))]
        return M

    scales = [Fraction(1), Fraction(64), Fraction(1, 3), Fraction(10**6), Fraction(1, 10**6), Fraction(10**12)]
    layers = []
    for _ in range(int(rng.integers(1, 3))):
        kinds = list(rng.choice(["softmax", "softmax", "relu", "hardmax"], size=rng.integers(1, 3)))
        kinds[0] = "softmax"
        heads = tuple(Head(mat(d, d), mat(d, d), attention=k,
                           scale=scales[rng.integers(len(scales))] if k == "softmax" else Fraction(1),
                           scale_sqrt_divisor=Fraction(int(rng.choice([1, 2, 3, 16]))) if k == "softmax" else Fraction(1))
                      for k in kinds)
        mlp = None
        if rng.random() < 0.6:
            f = int(rng.integers(1, 5))
            mlp = MLP(mat(f, d, 0.5), mat(1, f, 0.5)[0], mat(d, f, 0.5), mat(1, d, 0.5)[0])
        layers.append(Layer(heads, causal=bool(rng.random() < 0.4), mlp=mlp))
    return Model(("a", "b", "c"), 3, ("p", "q", "r"), lay, tuple(layers), mat(3, d, 0.6), outputs="all")


def test_interval_forward_never_contradicts_arb_and_threads_equal_one_thread(monkeypatch):
    """Random 1-2 layer models (softmax with relu/hardmax heads, relu MLPs with biases, causal or
    not, entries up to 10^40 and down to 10^-40, scales 10^-6 .. 10^12), every length-3 sequence,
    labels at the last or at random positions: a `correct` point has arb margin > 0 inside
    [lo, hi], a `wrong` one is not correct for arb; two worker threads give the one-thread result."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider

    ids = np.array([[a, b, c] for a in range(3) for b in range(3) for c in range(3)], dtype=np.int64)
    decided = 0
    for seed in range(24):
        rng = np.random.default_rng(3000 + seed)
        model = _random_model(rng, [0, 0, 3, 6, 13, 40][seed % 6])
        dec = SoftmaxDecider(model, 512, 512, exact_after=512)
        fwd = si.IntervalForward(model, dec.first)
        fwd.CHUNK = 5
        H, den = Evaluator(dec.prefix_model()).logits_all(ids)
        labels = rng.integers(-1, 3, size=ids.shape)
        labels[:, 2] = rng.integers(0, 3, size=len(ids))
        if seed % 2:
            labels[:, :2] = -1
        monkeypatch.setattr(si, "THREADS", 1)
        one = fwd.decide(H, den, labels)
        monkeypatch.setattr(si, "THREADS", 2)
        two = fwd.decide(H, den, labels)
        for a, b in zip(one, two):
            assert np.array_equal(a, b, equal_nan=True), seed
        status, lo, hi, _ = one
        for i in np.nonzero(status)[0]:
            lab = [(k, int(y)) for k, y in enumerate(labels[i]) if y >= 0]
            d = dec._attempt(H[i], den, lab, 1024)
            decided += 1
            if status[i] == 1:
                assert d.status != "wrong", (seed, i)
                if d.status == "correct":
                    assert Fraction(float(lo[i])) <= d.margin[0] and d.margin[1] <= Fraction(float(hi[i])), (seed, i)
            else:
                assert d.status != "correct", (seed, i)
    assert decided >= 150


# ---- the weights file's cached row lookups


@pytest.mark.parametrize("bad", [True, 1.0, -0.0, float("inf"), float("nan"), [1], None, "1.0"])
def test_cached_rows_never_let_a_look_alike_of_a_cached_entry_through(bad):
    """A row after rows that cached 1, "1" and "-0": True, 1.0, -0.0, inf, NaN, a list (unhashable),
    null and "1.0" are refused, naming their own position (not accepted from the cache)."""
    from depthcert.checkers.model import BadInput
    from depthcert.checkers.weights_file import _matrix

    with pytest.raises(BadInput, match=r"W\[2\]\[1\]"):
        _matrix([[1, "1", "-0", 0], [1, "1", "-0", 0], [1, bad, "1", 1]], "W", (3, 4))
    M = _matrix([[1, "1", "-0", "2/4"], ["1/2", 1, 0, "-0"]], "W", (2, 4))
    assert [[Fraction(v) for v in row] for row in M] == [[1, 1, 0, Fraction(1, 2)], [Fraction(1, 2), 1, 0, 0]]
