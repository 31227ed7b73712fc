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


def rotate_interval(X, rot: Rotary, positions: np.ndarray):
    """R_p x for an Interval X of shape (B, q, d_head) whose row k sits at position positions[k]:
    each rotated coordinate x_i c - x_j s (or x_j c + x_i s) enclosed from the ends of x and of the
    cos/sin enclosures (mul_bounds: the extreme products rounded outward; the difference's ends
    rounded outward again).  Coordinates dim.. are returned as they are."""
    from depthcert.checkers.norm_activation_intervals import mul_bounds
    from depthcert.checkers.softmax_intervals import Interval, _hi, _lo

    n = int(positions.max()) + 1 if len(positions) else 1
    c_lo, c_hi, s_lo, s_hi = (a[positions][None] for a in angle_floats(rot, n))  # (1, q, half)
    h = rot.dim // 2
    lo, hi = X.bounds()
    lo = np.broadcast_to(lo, X.m.shape)
    hi = np.broadcast_to(hi, X.m.shape)
    a_lo, a_hi = lo[..., :h], hi[..., :h]  # x_i
    b_lo, b_hi = lo[..., h:2 * h], hi[..., h:2 * h]  # x_{i + h}
    ac = mul_bounds(a_lo, a_hi, c_lo, c_hi)
    bs = mul_bounds(b_lo, b_hi, s_lo, s_hi)
    bc = mul_bounds(b_lo, b_hi, c_lo, c_hi)
    as_ = mul_bounds(a_lo, a_hi, s_lo, s_hi)
    new_lo = np.concatenate([_lo(ac[0] - bs[1]), _lo(bc[0] + as_[0]), lo[..., 2 * h:]], axis=-1)
    new_hi = np.concatenate([_hi(ac[1] - bs[0]), _hi(bc[1] + as_[1]), hi[..., 2 * h:]], axis=-1)
    out = Interval.from_bounds(new_lo, new_hi)
    bad = ~(np.isfinite(new_lo) & np.isfinite(new_hi))
    if np.any(bad):
        out.m = np.where(bad, np.nan, out.m)
    return out


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
    """act(gate) * up entry by entry, both Intervals (norm_activation_intervals.activation, then the
    interval product rounded outward)."""
    from depthcert.checkers.norm_activation_intervals import activation, mul_bounds
    from depthcert.checkers.softmax_intervals import Interval

    A = activation(gate, act)
    a_lo, a_hi = A.bounds()
    u_lo, u_hi = up.bounds()
    lo, hi = mul_bounds(a_lo, a_hi, u_lo, u_hi)
    out = Interval.from_bounds(lo, hi)
    bad = ~(np.isfinite(lo) & np.isfinite(hi))
    if np.any(bad):
        out.m = np.where(bad, np.nan, out.m)
    return out


__all__ = ["angle_balls", "angle_floats", "rotate_interval", "rotate_ball", "gated_interval"]
