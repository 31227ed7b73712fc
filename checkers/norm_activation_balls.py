"""LayerNorm / RMSNorm and the smooth MLP activations in arb balls (python-flint), for the per-point
stage of checkers/softmax_balls.py; the float64 stage is checkers/norm_activation_intervals.py.

arb bounds every operation rigorously (sqrt, division, erfc, tanh, exp included), so a ball of
N(x) or act(x) contains the exact value.  Where the stream is still exact (the first non-rational
layer reads the exact rational stream), the centered vector c and the variance are computed as
exact rationals and only sqrt(var + eps) is a ball: a zero-variance row has c = 0 exactly, so its
normalized vector is exactly 0 and the layer reads exactly the bias (eps > 0 decides it).

Exact ties stop here: after a LayerNorm/RMSNorm the scores are algebraic (rationals over square
roots of rational variances) and the Lindemann-Weierstrass decision of checkers/softmax_ties.py,
which needs rational scores, is not extended to them; after erf, tanh or the sigmoid of silu the
values are transcendental.  A point whose balls still overlap at the cap is undecided, with that
reason (`TIE_REASON`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model, Norm


def tie_reason(model: Model) -> str | None:
    """Why the exact tie decision does not apply to `model` (None: it may)."""
    norms = model.norm_final is not None or any(L.norm_attn is not None or L.norm_mlp is not None for L in model.layers)
    acts = sorted({L.mlp.activation for L in model.layers if L.mlp is not None} - {"relu"})
    if model.has_parallel:
        return ("exact tie decision not applicable: a parallel layer (attention and MLP reading one stream) "
                "is evaluated only in certified intervals and balls")
    if model.has_rotary:
        return ("exact tie decision not applicable: rotary positions multiply queries and keys by cos and sin of "
                "real angles (transcendental scores inside exp; the decision needs rational scores)")
    if acts:
        return (f"exact tie decision not applicable: the {'/'.join(acts)} MLP applies erf/tanh/exp to the stream, "
                "so the values are transcendental")
    if norms:
        return ("exact tie decision not applicable: LayerNorm/RMSNorm divides by square roots of the stream's "
                "variance (algebraic scores inside exp; the decision needs rational scores)")
    return None


def _fmpq(v):
    import flint

    v = Fraction(v)
    return flint.fmpq(v.numerator, v.denominator)


class NormBall:
    """A Norm's exact matrices (fmpq and arb at one precision): Pc, eps, placement."""

    def __init__(self, N: Norm, constant: int, dim: int):
        import flint

        P = N.centered_P()
        k = P.shape[0]
        self.Pq = flint.fmpq_mat([[_fmpq(v) for v in row] for row in P])
        self.Parb = None  # arb copies per precision: at()
        self.k, self.eps, self.offset, self.constant, self.dim = k, _fmpq(N.eps), N.offset, constant, dim

    def at(self, prec: int) -> "NormBall":
        """This norm with its arb matrix built at `prec` bits."""
        import copy

        import flint

        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            out = copy.copy(self)
            out.Parb = flint.arb_mat(self.Pq)
            out.eps_arb = flint.arb(self.eps)
            return out
        finally:
            flint.ctx.prec = old

    def _place(self, n_cols, value):
        """The d' x q arb matrix G: value(i, j) at rows offset + i, 1 at the constant row, 0 elsewhere."""
        import flint

        rows = [[flint.arb(0)] * n_cols for _ in range(self.dim)]
        for j in range(n_cols):
            rows[self.constant][j] = flint.arb(1)
        for i in range(self.k):
            rows[self.offset + i] = [value(i, j) for j in range(n_cols)]
        return flint.arb_mat(rows)

    def exact(self, Hq):
        """G from the exact stream Hq (fmpq_mat d' x q): c and var exact, one sqrt ball per column."""
        import flint

        C = self.Pq * Hq
        q = Hq.ncols()
        s = []
        for j in range(q):
            var = sum((C[i, j] * C[i, j] for i in range(self.k)), flint.fmpq(0)) / self.k
            s.append((flint.arb(var + self.eps)).sqrt())
        return self._place(q, lambda i, j: flint.arb(0) if C[i, j] == 0 else flint.arb(C[i, j]) / s[j])

    def ball(self, H):
        """G from an arb stream H (d' x q)."""
        C = self.Parb * H
        q = H.ncols()
        s = []
        for j in range(q):
            total = C[0, j] * C[0, j]
            for i in range(1, self.k):
                total += C[i, j] * C[i, j]
            s.append((total.nonnegative_part() / self.k + self.eps_arb).sqrt())
        return self._place(q, lambda i, j: C[i, j] / s[j])


class Activation:
    """act(x) for one MLP activation as a function of an arb ball (module constants at one precision)."""

    def __init__(self, kind: str, prec: int):
        import flint

        arb = flint.arb
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            self.kind = kind
            self.half = arb(1) / 2  # exact
            self.inv_sqrt2 = 1 / arb(2).sqrt()
            self.cubic = arb(_fmpq(Fraction(44715, 10**6)))
            self.k = (arb(2) / arb.pi()).sqrt() if kind == "gelu_new" else arb(_fmpq(Fraction(7978845608, 10**10)))
        finally:
            flint.ctx.prec = old

    def __call__(self, x, zero):
        if self.kind == "relu":
            if x <= 0:
                return zero
            if x >= 0:
                return x
            return x.nonnegative_part()
        if self.kind == "gelu":  # x Phi(x) = x erfc(-x / sqrt 2) / 2
            return x * (-x * self.inv_sqrt2).erfc() * self.half
        if self.kind == "silu":  # x / (1 + e^-x)
            return x / (1 + (-x).exp())
        # gelu_new / gelu_fast: x (1 + tanh(k (x + a x^3))) / 2
        return x * (1 + (self.k * x * (1 + self.cubic * x * x)).tanh()) * self.half


__all__ = ["NormBall", "Activation", "tie_reason"]
