"""Rotary position embeddings and gated MLPs in certified arithmetic (checkers/model.py states the
semantics: `Rotary`, `MLP.W_gate`).

Claim.  `angle_balls(rot, n, prec)` returns arb balls containing cos(a_pi) and sin(a_pi) of the real
angles a_pi = p theta^(-2i/r) (p < n, i < r/2; theta the exact rational of the model, the power
exp(-(2i/r) log theta) in arb); `angle_floats(rot, n)` returns floats lo <= cos, sin <= hi (from
those balls at 128 bits, rounded outward); `rotate_interval` / `rotate_ball` enclose R_p x for
every x in the given enclosures, and `gated_interval` encloses act(gate) * up entry by entry.
No float cos/sin is ever trusted: the tables come from arb.

Exact ties through a rotary head are not decided (the scores are sums of products with cos and sin
of real angles, transcendental for a rational angle other than 0); such points stay undecided with
that reason (norm_activation_balls.tie_reason).
"""
from __future__ import annotations

import threading
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Rotary

_FLOATS: dict = {}  # (theta, dim) -> (cos lo, cos hi, sin lo, sin hi), each (n, dim/2) for the largest n asked
_BALLS: dict = {}  # (theta, dim, n, prec) -> (cos rows, sin rows): lists of lists of arb
_LOCK = threading.Lock()  # angle_balls sets flint's (process-wide) precision: one table at a time


def _fmpq(v: Fraction):
    import flint

    return flint.fmpq(v.numerator, v.denominator)


def angle_balls(rot: Rotary, n: int, prec: int):
    """(C, S): C[p][i] and S[p][i] arb balls containing cos and sin of p theta^(-2i/dim), p < n,
    i < dim/2, computed at `prec` bits (cached per theta, dim, n, prec)."""
    import flint

    key = (rot.theta, rot.dim, n, prec)
    if key in _BALLS:
        return _BALLS[key]
    with _LOCK:
        if key in _BALLS:
            return _BALLS[key]
        old = flint.ctx.prec
        flint.ctx.prec = prec + 32
        try:
            half = rot.dim // 2
            log_theta = flint.arb(_fmpq(rot.theta)).log()
            freqs = [(flint.arb(_fmpq(Fraction(-2 * i, rot.dim))) * log_theta).exp() if i else flint.arb(1)
                     for i in range(half)]
            C, S = [], []
            for p in range(n):
                row_c, row_s = [], []
                for i in range(half):
                    if p == 0:  # the angle is exactly 0
                        row_c.append(flint.arb(1))
                        row_s.append(flint.arb(0))
                        continue
                    a = freqs[i] * p
                    row_c.append(a.cos())
                    row_s.append(a.sin())
                C.append(row_c)
                S.append(row_s)
            _BALLS[key] = (C, S)
        finally:
            flint.ctx.prec = old
    return _BALLS[key]


def _ends(ball) -> tuple[float, float]:
    """Floats lo <= ball <= hi (the ball's exact dyadic ends, rounded outward)."""
    from depthcert.checkers.softmax_intervals import _float_dn, _float_up

    def q(x):
        man, exp = x.mid().man_exp()
        man, exp = int(man), int(exp)
        return Fraction(man << exp) if exp >= 0 else Fraction(man, 1 << -exp)

    return _float_dn(q(ball.lower())), _float_up(q(ball.upper()))


def angle_floats(rot: Rotary, n: int):
    """(cos_lo, cos_hi, sin_lo, sin_hi), float arrays (n, dim/2) enclosing cos and sin of the real
    angles (from angle_balls at 128 bits, each end rounded outward; |ends| clipped to 1).  A table
    for more positions serves fewer (its first n rows); IntervalForward builds the model's table
    before its worker threads start."""
    key = (rot.theta, rot.dim)
    got = _FLOATS.get(key)
    if got is None or got[0].shape[0] < n:
        C, S = angle_balls(rot, n, 128)
        half = rot.dim // 2
        out = [np.empty((n, half)) for _ in range(4)]
        for p in range(n):
            for i in range(half):
                out[0][p, i], out[1][p, i] = _ends(C[p][i])
                out[2][p, i], out[3][p, i] = _ends(S[p][i])
        out = [np.clip(a, -1.0, 1.0) for a in out]
        for a in out:
            a.flags.writeable = False
        _FLOATS[key] = got = tuple(out)
    return tuple(a[:n] for a in got)


_MR: dict = {}  # (theta, dim) -> (cm, cr, ca, sm, sr, sa), each (n, dim), from angle_floats


def angle_midrad(rot: Rotary, n: int):
    """(cm, cr, ca, sm, sr, sa), float arrays (n, dim), the half-width tables written twice ([t, t],
    as coordinates i and i + dim/2 use the same angle): |cos - cm| <= cr and |sin - sm| <= sr for
    the real angles (Interval.from_bounds of angle_floats' ends: cr, sr about 1 ulp), ca >= |cm| + cr
    and sa >= |sm| + sr (rounded up, at most 1: |cos|, |sin| <= 1 themselves)."""
    from depthcert.checkers.softmax_intervals import Interval, _hi

    key = (rot.theta, rot.dim)
    got = _MR.get(key)
    if got is None or got[0].shape[0] < n:
        c_lo, c_hi, s_lo, s_hi = angle_floats(rot, n)
        C, S = Interval.from_bounds(c_lo, c_hi), Interval.from_bounds(s_lo, s_hi)
        out = [C.m, C.r, np.minimum(_hi(np.abs(C.m) + C.r), 1.0), S.m, S.r, np.minimum(_hi(np.abs(S.m) + S.r), 1.0)]
        out = [np.concatenate([a, a], axis=-1) for a in out]
        for a in out:
            a.flags.writeable = False
        _MR[key] = got = tuple(out)
    return tuple(a[:n] for a in got)


_RAD_UP = 1.0 + 2.0 ** -46  # exactly representable


def rotate_interval(X, rot: Rotary, positions: np.ndarray):
    """R_p x for an Interval X of shape (B, q, d_head) whose row k sits at position positions[k], in
    midpoint-radius form, as R_p x = x cos + rot_half(x) sin with rot_half(x) = [-x_j, x_i] (x_i the
    first dim/2 coordinates, x_j the next).  With x in <a, ra>, rot_half(x) in <b, rb> (the same
    numbers, swapped, b's first half negated), cos in <cm, cr>, sin in <sm, sr> (angle_midrad), each
    coordinate gets the midpoint mid = fl(fl(a cm) + fl(b sm)) and a radius at least

        T = ra ca + |a| cr + rb sa + |b| sr + u (|fl(a cm)| + |fl(b sm)| + |mid|) + eta

    (|x cos - a cm| <= |x - a| |cos| + |a| |cos - cm|; each of the three roundings errs by at most
    u times its result, the two products by eta/2 more when subnormal).  T's own float sum f (11
    operations on non-negative terms, each losing at most a factor 1 - u and eta/2) has
    T <= (f + 6 eta)(1 + 2^-48) + eta; the radius fl(fl(f (1 + 2^-46)) + 32 eta) is above that.
    Coordinates dim.. are returned as they are.  A non-finite midpoint or radius makes the entry's
    midpoint NaN (no decision from it)."""
    from depthcert.checkers.softmax_intervals import ETA, U, Interval

    n = int(positions.max()) + 1 if len(positions) else 1
    cm, cr, ca, sm, sr, sa = _tables_at(rot, n, positions)  # (1, q, dim)
    h, d = rot.dim // 2, X.m.shape[-1]
    m = X.m
    r = np.zeros(m.shape) if X.r is None else np.broadcast_to(X.r, m.shape)
    a, ra = m[..., :2 * h], r[..., :2 * h]
    b = np.concatenate([-m[..., h:2 * h], m[..., :h]], axis=-1)  # rot_half
    rb = np.concatenate([r[..., h:2 * h], r[..., :h]], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        p1 = a * cm
        p2 = b * sm
        mid = p1 + p2
        # f = ra ca + |a| cr + rb sa + |b| sr + U (|p1| + |p2| + |mid|), summed left to right, in place
        f = ra * ca
        t = np.abs(a)
        t *= cr
        f += t
        np.multiply(rb, sa, out=t)
        f += t
        np.abs(b, out=t)
        t *= sr
        f += t
        np.abs(p1, out=t)
        t += np.abs(p2)
        t += np.abs(mid)
        t *= U
        f += t
        f *= _RAD_UP
        f += 32 * ETA
    if 2 * h < d:  # partial rotary: the rest passes through
        mid = np.concatenate([mid, m[..., 2 * h:]], axis=-1)
        f = np.concatenate([f, r[..., 2 * h:]], axis=-1)
        bad = ~(np.isfinite(mid) & np.isfinite(f))
        if np.any(bad):
            mid = np.where(bad, np.nan, mid)
    elif not np.isfinite(f).all():  # f >= U |mid|: a finite f has a finite mid
        mid = np.where(np.isfinite(f), mid, np.nan)
    return Interval(mid, f)


_AT: dict = {}  # (theta, dim, n, positions) -> angle_midrad's rows at those positions, (1, q, dim) each


def _tables_at(rot: Rotary, n: int, positions: np.ndarray):
    """angle_midrad(rot, n)'s six tables at `positions`, each (1, len(positions), dim) (kept: the
    interval forward asks for the same few positions in every chunk)."""
    key = (rot.theta, rot.dim, n, positions.tobytes())
    got = _AT.get(key)
    if got is None:
        got = tuple(t[positions][None] for t in angle_midrad(rot, n))
        if len(_AT) < 256:
            _AT[key] = got
    return got


def rotate_ball(M, rot: Rotary, positions: list[int], prec: int):
    """R_p x for an arb_mat M (d_head x q) whose column k sits at position positions[k]."""
    import flint

    C, S = angle_balls(rot, max(positions) + 1, prec)
    h = rot.dim // 2
    rows = [[M[r, k] for k in range(M.ncols())] for r in range(M.nrows())]
    out = [list(r) for r in rows]
    for k, p in enumerate(positions):
        for i in range(h):
            x, y = rows[i][k], rows[i + h][k]
            out[i][k] = x * C[p][i] - y * S[p][i]
            out[i + h][k] = y * C[p][i] + x * S[p][i]
    return flint.arb_mat(out)


def gated_interval(gate, up, act: str):
    """act(gate) * up entry by entry, both Intervals (norm_activation_intervals.activation gives
    act(gate) in <am, ar>; up is <um, ur>), in midpoint-radius form: the midpoint fl(am um) and a
    radius at least |am| ur + ar (|um| + ur) + u |fl(am um)| + eta/2 (|a u - am um| <= |am| |u - um|
    + |a - am| |u|; the product's rounding), its float sum f (6 operations on non-negative terms)
    raised to fl(fl(f (1 + 2^-46)) + 32 eta) as in rotate_interval.  A non-finite midpoint or
    radius makes the entry's midpoint NaN."""
    from depthcert.checkers.norm_activation_intervals import activation
    from depthcert.checkers.softmax_intervals import ETA, U, Interval

    A = activation(gate, act)
    am, um = A.m, up.m
    shape = np.broadcast_shapes(am.shape, um.shape)
    ar = np.zeros(shape) if A.r is None else A.r
    ur = np.zeros(shape) if up.r is None else up.r
    with np.errstate(over="ignore", invalid="ignore"):
        mid = am * um
        f = np.abs(am) * ur + ar * (np.abs(um) + ur) + U * np.abs(mid)
        f = np.broadcast_to(f, shape) * _RAD_UP
        f += 32 * ETA
    bad = ~(np.isfinite(mid) & np.isfinite(f))
    if np.any(bad):
        mid = np.where(bad, np.nan, mid)
    return Interval(mid, f)


__all__ = ["angle_balls", "angle_floats", "angle_midrad", "rotate_interval", "rotate_ball", "gated_interval"]
