"""Certified float64 decisions for one-layer attention-only softmax models, from exact tables.

Scope (`reason_not_applicable` says why a model is outside it): one layer, every head softmax,
no MLP, the classifier on the last position.  Then the logits of a sequence t_0..t_{n-1} are

    logit = D[t_q] + sum_h sum_j A_h[j] OV_h[j, t_j],     A_h = softmax_j(c_h S_h[j, t_j, t_q])

with q = n - 1 the query, h_{p,t} = e_t + e_{V+p} (+ e_one) the input column of token t at
position p, and the exact rational tables
    S_h[j, t, t']   = h_{j,t}^T W_QK_h h_{q,t'}      the score of key (j, t) for query token t'
    OV_h[j, t, :]   = W_O W_V_h h_{j,t} / m           what key (j, t) writes into the logits
    D[t', :]        = W_O h_{q,t'}                    the direct path
(every key j <= q is visible to the last query, causal or not).  The weights are taken relative
to the query's own key (j = q, t = t'), which every sequence contains:
    E_h[j, t, t'] = exp(c_h (S_h[j, t, t'] - S_h[q, t', t'])),   Z = sum_j E_h[j, t_j, t_q] >= 1.
E is computed once per table entry in arb (128 bits) and rounded to float64: |E^ - E| <= 3u E,
or E^ = 0 with E < e^-690 < 2^-995 where c (S - S_self) < -690.  A table with c (S - S_self) > 690
(float64 overflow of exp) is refused (not applicable; the caller decides in arb).

The per-point forward is float64 in a fixed order: Z = sum_j E^_j, A^_j = E^_j / Z, then
logit^ = D^ + sum_{h,j} A^_hj * OV^_hj, with D^, OV^ the correctly rounded tables (|err| <= u|x|).
Bound (Higham, Accuracy and Stability, ch. 3; u = 2^-53, gamma_k = k u / (1 - k u)):
    |A^_j - A_j| <= gamma_{n+8} A_j + (n + 2) eta       (Z >= 1; eta covers a flushed E and its share of Z)
    |logit^_c - logit_c| <= gamma_{n+T+12} L + 2 (n + 2) n H eta OVmax + T 2^-1074 + 4 eta =: eps,
with T = H n + 1 terms, L = Dmax + H OVmax (so |D| + sum A |OV| <= L), eta = 2^-995 >= e^-690
(every E^_j is within 3u E_j + eta of E_j).  The computed margin m^ = logit^_y - logit^_c is within 2 eps + 4 u (L + eps) =: tau of the true one (one more
rounding).  The bound holds only when no operation overflowed: an overflowed partial sum is inf
(or NaN) from then on, whatever the true value.  So a point is decided here only when every
logit^ is finite and |m^| < 2^1023 (then m^ -+ tau rounded outward stay finite; a table whose tau
is not below 2^1022 is refused).  Such a point is certified correct when m^ > tau for every
c != y, certified wrong when m^ < -tau for some c; every other point is left to the caller (arb).  tau is computed in exact
rationals and rounded up.  No float decides a point that lies within tau of a tie.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model

U = Fraction(1, 2**53)
ETA = Fraction(1, 2**1000)  # eta = 32 ETA = 2^-995 below
EXP_LIMIT = 690  # |c (S - S_self)| beyond this: flushed to 0 (below) or refused (above)
TABLE_PRECISION = 128
MARGIN_LIMIT = 2.0 ** 1023  # a margin at or above this (or inf/NaN) decides nothing here, and a table
TAU_LIMIT = 2.0 ** 1022  # whose tau is not below this is refused: then |m^| + tau < 1.5 2^1023, so
# m^ -+ tau and one float further out stay finite (float64's largest number is about 2^1024)


def reason_not_applicable(model: Model) -> str | None:
    """None when the model is in this module's scope, else why not (one phrase)."""
    if model.n_layers != 1:
        return f"{model.n_layers} layers (tables need exactly one)"
    layer = model.layers[0]
    if layer.mlp is not None:
        return "an MLP"
    if len(layer) == 0:
        return "no attention heads"
    if any(h.attention != "softmax" for h in layer):
        return "non-softmax heads"
    if model.has_rotary:
        return "rotary heads (scores depend on both positions through cos/sin)"
    if model.outputs != "last":
        return "outputs at every position"
    return None


def _gamma(k: int) -> Fraction:
    return k * U / (1 - k * U)


def _float_up(x: Fraction) -> float:
    f = float(x)
    return float(np.nextafter(f, np.inf)) if Fraction(f) < x else f


def _fmpq_mat(M: np.ndarray):
    import flint

    return flint.fmpq_mat([[flint.fmpq(Fraction(v).numerator, Fraction(v).denominator) for v in row] for row in M])


def _column_sums(M, cols: list[list[int]]) -> list[list[Fraction]]:
    """For each index list, the sum of those columns of fmpq_mat M, as lists of Fractions."""
    out = []
    for idx in cols:
        col = []
        for r in range(M.nrows()):
            s = sum((M[r, i] for i in idx), start=0 * M[r, idx[0]])
            col.append(Fraction(int(s.p), int(s.q)))
        out.append(col)
    return out


class OneLayerTables:
    """Exact tables of a one-layer softmax model for sequences of length n, and the certified
    float64 forward `decide(ids, label_rows)` (module docstring)."""

    def __init__(self, model: Model, n: int):
        import flint

        why = reason_not_applicable(model)
        if why is not None:
            raise ValueError(f"not a one-layer attention-only softmax model: {why}")
        if not 1 <= n <= model.max_length:
            raise ValueError(f"sequence length {n} outside 1 .. {model.max_length}")
        self.model, self.n = model, n
        V, C, q = len(model.vocab), len(model.classes), n - 1
        heads = model.layers[0].heads
        H = len(heads)
        one = [model.constant_index] if model.constant_row else []

        def column(t: int, p: int) -> list[int]:
            return [t, V + p] + one

        key_cols = [column(t, j) for j in range(n) for t in range(V)]  # (j, t) row-major
        query_cols = [column(t, q) for t in range(V)]
        WO = _fmpq_mat(model.W_O)
        D = _column_sums(WO, query_cols)  # D[t'] = W_O h_{q,t'}
        self.D = np.array([[float(x) for x in row] for row in D])  # (V, C), correctly rounded
        d_max = max((abs(x) for row in D for x in row), default=Fraction(0))
        OV = np.empty((H, n, V, C))
        E = np.empty((H, n, V, V))
        ov_max = Fraction(0)
        self.flushed = 0
        old = flint.ctx.prec
        flint.ctx.prec = TABLE_PRECISION
        try:
            for h, head in enumerate(heads):
                WV = _fmpq_mat(head.W_V)
                M = (WO * WV) * flint.fmpq(1, H)
                ov = _column_sums(M, key_cols)  # (n V) x C
                ov_max = max(ov_max, max((abs(x) for row in ov for x in row), default=Fraction(0)))
                OV[h] = np.array([[float(x) for x in row] for row in ov]).reshape(n, V, C)
                WQK = _fmpq_mat(head.W_QK)
                G = _column_sums(WQK, query_cols)  # G[t'] = W_QK h_{q,t'}, as row t' of Gm
                Gm = flint.fmpq_mat([[flint.fmpq(x.numerator, x.denominator) for x in row] for row in G])  # V x d'
                S = _column_sums(Gm, key_cols)  # [(j,t)][t'] = h_{j,t}^T W_QK h_{q,t'}
                c = (flint.arb(flint.fmpq(head.scale.numerator, head.scale.denominator))
                     / flint.arb(flint.fmpq(head.scale_sqrt_divisor.numerator, head.scale_sqrt_divisor.denominator)).sqrt())
                self_row = [S[q * V + t][t] for t in range(V)]
                for k, (j, t) in enumerate((j, t) for j in range(n) for t in range(V)):
                    for tq in range(V):
                        x = c * flint.arb(flint.fmpq(*_pq(S[k][tq] - self_row[tq])))
                        if not x < EXP_LIMIT:  # exp could overflow float64: out of scope
                            raise OverflowError("attention scores too far apart for float64 exp")
                        if x < -EXP_LIMIT:  # exp < e^-690 < 2^-995: flushed, covered by the eta terms
                            E[h, j, t, tq] = 0.0
                            self.flushed += 1
                            continue
                        e = x.exp()
                        mid = float(e.mid())
                        if not e.rad() <= abs(flint.arb(mid)) * flint.arb(2) ** -60:
                            raise ArithmeticError("exp ball too wide at table precision")
                        E[h, j, t, tq] = mid
        finally:
            flint.ctx.prec = old
        self.E, self.OV = E, OV
        T = H * n + 1
        L = d_max + H * ov_max
        # a flushed entry is below e^-690 < 2^-995 < 32 eta; the eta terms below carry 32 eta
        eta = 32 * ETA
        eps = _gamma(n + T + 12) * L + 2 * (n + 2) * n * H * eta * ov_max + T * Fraction(1, 2**1074) + 4 * eta
        tau = 2 * eps + 4 * U * (L + eps)
        if not tau < TAU_LIMIT:  # the bound itself is near float64's largest number: arb decides every point
            raise OverflowError("certified table error bound beyond float64's range")
        self.tau = _float_up(tau)
        self.tau_exact = tau
        self.heads = H

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """float64 logits (B, C) in the fixed order of the error bound."""
        ids = np.asarray(ids)
        n, H = self.n, self.heads
        tq = ids[:, n - 1]
        logits = self.D[tq].copy()
        for h in range(H):
            Ej = [self.E[h, j, ids[:, j], tq] for j in range(n)]
            Z = Ej[0].copy()
            for j in range(1, n):
                Z += Ej[j]
            for j in range(n):
                A = Ej[j] / Z
                logits += A[:, None] * self.OV[h, j, ids[:, j]]
        return logits

    def decide(self, ids: np.ndarray, label_rows: np.ndarray):
        """(status (B,) int8: 1 certified correct, 0 certified wrong, -1 not decided here;
        margin^ (B,) float64: logit^_label - max other logit^, within tau of the true margin of
        every decided point; NaN for a single-class model, which has no margin)."""
        B = len(label_rows)
        if len(self.model.classes) == 1:  # nothing to compare: every point correct, no margin
            return np.ones(B, dtype=np.int8), np.full(B, np.nan)
        with np.errstate(all="ignore"):  # an overflow leaves the point to arb; numpy need not warn
            logits = self.forward(ids)
            rows = np.arange(B)
            # the error bound assumes no operation overflowed: a logit that did (inf, or NaN from
            # inf - inf) may be any real number, even after later terms brought it back (they
            # cannot: inf stays inf), so every logit of a decided point must be finite, and so
            # must its margin and the margin's enclosure m^ -+ tau (the caller rounds those ends)
            finite = np.isfinite(logits).all(axis=1)
            lab = logits[rows, label_rows].copy()
            logits[rows, label_rows] = -np.inf
            best = logits.max(axis=1)
            margin = lab - best
            finite &= np.abs(margin) < MARGIN_LIMIT
        status = np.full(B, -1, dtype=np.int8)
        status[finite & (margin > self.tau)] = 1
        status[finite & (margin < -self.tau)] = 0
        return status, margin


def _pq(x: Fraction) -> tuple[int, int]:
    return x.numerator, x.denominator
