"""checkers/rotary.py's rotate_interval (midpoint-radius form) encloses R_p x for every x in the given
intervals: checked against mpmath at 300 bits (cos and sin of the real angles p theta^(-2i/dim)) on
random intervals from subnormal to 1e307 magnitudes, exact inputs (radius None), per-entry radii and
one radius per row of a point, at the interval ends and inside; a non-finite result is NaN, never a
bound."""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from depthcert.checkers import rotary
from depthcert.checkers.model import Rotary
from depthcert.checkers.softmax_intervals import Interval


def _rot(dim: int, theta: Fraction) -> Rotary:
    z = np.zeros((dim, dim), dtype=object)
    return Rotary(W_Q=z, W_K=z, dim=dim, theta=theta)


def _violations(rot: Rotary, X: Interval, Y: Interval, offsets: list) -> tuple[int, int]:
    """(entries outside Y, finite entries checked) for each x = X.m + t X.r, t in `offsets` (arrays in
    [-1, 1] shaped like X.m; x in mpmath at 300 bits, so exactly in X: a float m + t r may round out)."""
    h = rot.dim // 2
    bad = checked = 0
    m = X.m
    r = np.zeros(m.shape) if X.r is None else np.broadcast_to(X.r, m.shape)
    with mpmath.workprec(300):
        theta = mpmath.mpf(rot.theta.numerator) / rot.theta.denominator
        for t in offsets:
            B, q, d = m.shape
            x = np.empty(m.shape, dtype=object)
            for idx in np.ndindex(m.shape):
                x[idx] = mpmath.mpf(m[idx]) + mpmath.mpf(r[idx]) * mpmath.mpf(t[idx])
            for k in range(q):
                for i in range(h):
                    ang = k * mpmath.power(theta, mpmath.mpf(-2 * i) / rot.dim)
                    c, s = mpmath.cos(ang), mpmath.sin(ang)
                    for b in range(B):
                        xi, xj = x[b, k, i], x[b, k, i + h]
                        for val, j in ((xi * c - xj * s, i), (xj * c + xi * s, i + h)):
                            if not np.isfinite(Y.m[b, k, j]):
                                continue
                            checked += 1
                            bad += abs(val - mpmath.mpf(Y.m[b, k, j])) > mpmath.mpf(Y.r[b, k, j])
                    for j in range(rot.dim, d):  # passed through unchanged
                        for b in range(B):
                            checked += 1
                            bad += abs(x[b, k, j] - mpmath.mpf(Y.m[b, k, j])) > mpmath.mpf(Y.r[b, k, j])
    return bad, checked


@pytest.mark.parametrize("dim,theta", [(4, Fraction(10000)), (2, Fraction(37, 10)), (6, Fraction(500000))])
def test_rotate_interval_encloses_every_rotated_point(dim, theta):
    rot = _rot(dim, theta)
    rng = np.random.default_rng(dim)
    total = 0
    for trial, scale in enumerate([1.0, 1e-8, 1e30, 1e-310, 5e-324, 1e307, 3.0, 1e-3] * 3):
        B, q, d = 2, 5, dim + 2
        m = rng.standard_normal((B, q, d)) * scale
        kind = trial % 3
        r = None if kind == 0 else np.abs(rng.standard_normal((B, q, d) if kind == 1 else (B, 1, d))) * scale * 1e-6
        X = Interval(m, r)
        Y = rotary.rotate_interval(X, rot, np.arange(q))
        ends = [rng.choice([-1.0, 1.0], m.shape) for _ in range(2)]  # corners
        inside = [rng.uniform(-1, 1, m.shape) for _ in range(2)]
        bad, checked = _violations(rot, X, Y, ends + inside + [np.zeros(m.shape)])
        assert bad == 0, (scale, kind)
        total += checked
    assert total > 1000


def test_rotate_interval_makes_a_non_finite_entry_nan():
    rot = _rot(2, Fraction(10000))
    m = np.array([[[1.0, np.inf, 2.0], [1.0, 1e308, 2.0]]])  # an infinite input; a radius that overflows
    Y = rotary.rotate_interval(Interval(m, np.full(m.shape, 1.5e308)), rot, np.arange(2))
    assert np.isnan(Y.m[0, :, :2]).all()
    assert Y.m[0, 0, 2] == 2.0


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_new", "gelu_fast"])
def test_gated_interval_encloses_act_of_gate_times_up(act):
    """Every act(g) * u with g, u in the given intervals (corners and inside, exact in mpmath at 300
    bits, act from its definition) lies in gated_interval's enclosure."""
    from depthcert.checkers.rotary import gated_interval

    def f(x):
        if act == "silu":
            return x / (1 + mpmath.exp(-x))
        if act == "gelu":  # x (1 + erf(x / sqrt 2)) / 2, without the cancellation of 1 + erf
            return x * mpmath.erfc(-x / mpmath.sqrt(2)) / 2
        if act == "gelu_new":  # 1 + tanh(z) = 2 / (1 + exp(-2 z))
            z = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x ** 3)
        else:
            z = x * mpmath.mpf("0.7978845608") * (1 + mpmath.mpf("0.044715") * x * x)
        return x / (1 + mpmath.exp(-2 * z))

    rng = np.random.default_rng(7)
    checked = 0
    with mpmath.workprec(300):
        for trial, scale in enumerate([1.0, 1e-6, 20.0, 1e-300, 3.0, 1e-3] * 2):
            shape = (2, 3, 4)
            gm, um = rng.standard_normal(shape) * scale, rng.standard_normal(shape) * max(scale, 1e-3)
            gr = None if trial % 3 == 0 else np.abs(rng.standard_normal(shape)) * scale * 1e-5
            ur = None if trial % 2 == 0 else np.abs(rng.standard_normal((2, 1, 4))) * 1e-7
            Y = gated_interval(Interval(gm, gr), Interval(um, ur), act)
            grr = np.zeros(shape) if gr is None else gr
            urr = np.zeros(shape) if ur is None else np.broadcast_to(ur, shape)
            for t in [rng.choice([-1.0, 1.0], (2,) + shape) for _ in range(2)] + [rng.uniform(-1, 1, (2,) + shape)]:
                for idx in np.ndindex(shape):
                    if not np.isfinite(Y.m[idx]):
                        continue
                    g = mpmath.mpf(gm[idx]) + mpmath.mpf(grr[idx]) * mpmath.mpf(t[0][idx])
                    u = mpmath.mpf(um[idx]) + mpmath.mpf(urr[idx]) * mpmath.mpf(t[1][idx])
                    checked += 1
                    assert abs(f(g) * u - mpmath.mpf(Y.m[idx])) <= mpmath.mpf(Y.r[idx]), (scale, idx)
    assert checked > 800
