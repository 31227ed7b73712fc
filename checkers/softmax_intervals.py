"""Certified float64 intervals for softmax models, over whole batches (docs/softmax.md, "Float
intervals", is the line-by-line error analysis).

Claim.  For every point of a batch, `IntervalForward.decide` returns intervals [lo, hi] of
float64 numbers that contain every exact logit difference (label minus class) of the model
from its first softmax layer on, given the exact rational stream entering that layer.  A point
is `correct` when every difference at every labelled position has lo > 0, `wrong` when some
difference has hi < 0, and `unsure` otherwise (overlap, a hardmax argmax the intervals cannot
settle, any inf/NaN, an exponent outside exp's checked range): unsure points go to arb balls
(checkers/softmax_balls.py), and so do wrong ones (for their certified details).

How every operation is bounded (u = 2^-53, eta = 2^-1074, gamma_k = k u / (1 - k u)):
  * values are midpoint-radius pairs <m, r> of float64 arrays: the exact value x has |x - m| <= r;
  * a single IEEE operation (numpy's +, -, *, / on float64 are correctly rounded) is followed by
    `_up` / `_dn` (the next float up / down) where an upper / lower bound of the exact result is
    needed;
  * a dot product of length k in any order, with or without FMA, errs by at most
    gamma_k sum |x_i y_i| + k eta (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
    ed., eq. 3.5, plus eta per product for underflow); a product of non-negative matrices is
    bounded above by `_mm_up`;
  * sums of non-negative terms (np.sum, any order) err by at most gamma_n times the sum;
  * exp: numpy's exp is assumed accurate to EXP_REL (2^-50, i.e. 4 ulp) relative error for
    arguments in [EXP_LOW, 0 + small]; the test suite checks that assumption against arb on
    random and extreme arguments of the whole range used (tests/test_softmax_intervals.py).
    Below EXP_LOW = -700 the result is replaced by the interval [0, 2^-1000] without calling exp
    (exp(-700) < 2^-1000), so subnormal results never need an accuracy claim.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model

U = 2.0 ** -53
ETA = 2.0 ** -1074
EXP_REL = 2.0 ** -50  # assumed relative accuracy of np.exp on [EXP_LOW, 1] (checked by tests)
EXP_LOW = -700.0
EXP_TINY = 2.0 ** -1000  # >= exp(x) for every x <= EXP_LOW
INF = np.inf


def _up(x):
    """The next float up: >= the exact result of the one correctly rounded operation x came from."""
    return np.nextafter(x, INF)


def _dn(x):
    return np.nextafter(x, -INF)


UP = 1.0 + 4 * U  # exactly representable


def _upn(x):
    """For x >= 0 the correctly rounded result of one operation on exact non-negative reals
    (true value t <= x (1 + u) + eta/2): a float >= t, in two cheap operations (np.nextafter is
    several times slower).  Normal x >= 2^-1021: fl(x UP) >= x (1 + 4u)(1 - u) >= x (1 + 2u) and
    fl(y + eta) >= y, so the result >= x (1 + u) + u x >= t.  Smaller x: fl(x UP) >= x - eta/2
    and the addition of eta is exact there, so the result >= x + eta/2 >= t."""
    return x * UP + ETA


def _float_up(q: Fraction) -> float:
    """The smallest float >= q (q a finite Fraction of moderate size)."""
    f = float(q)
    while Fraction(f) < q:
        f = float(np.nextafter(f, INF))
    return f


def _float_dn(q: Fraction) -> float:
    f = float(q)
    while Fraction(f) > q:
        f = float(np.nextafter(f, -INF))
    return f


def gamma(k: int) -> Fraction:
    k = max(k, 2)
    return Fraction(k, 2**53 - k)  # k u / (1 - k u) with u = 2^-53


def _inv_one_minus_gamma(k: int) -> float:
    """A float >= 1 / (1 - gamma_k)."""
    return _float_up(1 / (1 - gamma(k)))


def _mm_up(P, Q):
    """An upper bound of the exact product of non-negative float matrices P @ Q (any batch
    dims): fl(PQ) >= (1 - gamma_k) PQ - k eta, so PQ <= (fl(PQ) + k eta) / (1 - gamma_k)."""
    k = P.shape[-1]
    return _upn(_upn(P @ Q + k * ETA) * _inv_one_minus_gamma(k))


class Interval:
    """<m, r>: the exact values x satisfy |x - m| <= r, elementwise (r None: exactly m)."""

    __slots__ = ("m", "r")

    def __init__(self, m, r):
        self.m, self.r = m, r

    def bounds(self):
        if self.r is None:
            return self.m, self.m
        return _dn(self.m - self.r), _up(self.m + self.r)

    @staticmethod
    def from_bounds(lo, hi) -> "Interval":
        m = 0.5 * (lo + hi)  # any float works as the midpoint
        r = _upn(np.maximum(_up(hi - m), _up(m - lo)))
        return Interval(m, r)


class ExactMatrix:
    """A rational weight matrix W as floats: Wm = fl(W), Wr >= |W - Wm|, and the derived
    non-negative matrices a product needs (|Wm| + Wr, Wr + gamma_k |Wm|, transposed)."""

    def __init__(self, M):
        M = np.asarray(M, dtype=object)
        self.shape = M.shape
        self.m = np.array([[float(Fraction(v)) for v in row] for row in M], dtype=np.float64).reshape(M.shape)
        r = np.zeros(M.shape)
        for idx, v in np.ndenumerate(M):
            err = abs(Fraction(v) - Fraction(self.m[idx])) if np.isfinite(self.m[idx]) else None
            r[idx] = INF if err is None else (_float_up(err) if err else 0.0)
        self.r = r
        self.finite = bool(np.isfinite(self.m).all() and np.isfinite(r).all())
        self.exact = not r.any()

    def right(self, k: int):
        """For X @ W.T (contraction over W's columns, length k): (Wm.T, |Wm|.T + Wr.T,
        (Wr + gamma_k |Wm|).T) as arrays."""
        g = _float_up(gamma(k))
        absm = np.abs(self.m)
        return (np.ascontiguousarray(self.m.T), np.ascontiguousarray(_upn(absm + self.r).T),
                np.ascontiguousarray(_upn(self.r + _upn(g * absm)).T))


def lin(X: Interval, W) -> Interval:
    """X @ W^T for an exact matrix W given as ExactMatrix.right(k) = (Wm^T, A^T, Cc^T):
    |exact - fl(Xm Wm^T)| <= gamma_k |Xm||Wm|^T + k eta + |Xm| Wr^T + Xr (|Wm| + Wr)^T
                          <= |Xm| (Wr + gamma_k |Wm|)^T + Xr (|Wm| + Wr)^T + k eta."""
    Wm_T, A_T, C_T = W
    k = Wm_T.shape[0]
    m = X.m @ Wm_T
    r = _mm_up(np.abs(X.m), C_T)
    if X.r is not None:
        r = _upn(r + _mm_up(X.r, A_T))
    return Interval(m, _upn(r + k * ETA))


def mul(X: Interval, Y: Interval) -> Interval:
    """X @ Y (batched), both intervals: the same bound with Y's midpoint and radius."""
    k = X.m.shape[-1]
    g = _float_up(gamma(k))
    absY = np.abs(Y.m)
    m = X.m @ Y.m
    r = _mm_up(np.abs(X.m), _upn(g * absY) if Y.r is None else _upn(Y.r + _upn(g * absY)))
    if X.r is not None:
        r = _upn(r + _mm_up(X.r, absY if Y.r is None else _upn(absY + Y.r)))
    return Interval(m, _upn(r + k * ETA))


def add(X: Interval, Y: Interval) -> Interval:
    """X + Y: fl(a + b) errs by at most u |fl(a + b)| (additions do not underflow)."""
    m = X.m + Y.m
    r = X.r if Y.r is None else (Y.r if X.r is None else _upn(X.r + Y.r))
    return Interval(m, _upn(U * np.abs(m)) if r is None else _upn(r + _upn(U * np.abs(m))))


def scale(X: Interval, c: tuple[float, float]) -> Interval:
    """c X for a real c enclosed by <cm, cr>: |cx - fl(cm xm)| <= |cm| xr + cr (|xm| + xr)
    + u |fl(cm xm)| + eta."""
    cm, cr = c
    m = cm * X.m
    r = _upn(abs(cm) * X.r) if X.r is not None else 0.0
    if cr:
        r = _upn(r + _upn(cr * _upn(np.abs(X.m) + (X.r if X.r is not None else 0.0))))
    return Interval(m, _upn(_upn(r + _upn(U * np.abs(m))) + ETA))


def relu(X: Interval) -> Interval:
    lo, hi = X.bounds()
    return Interval.from_bounds(np.maximum(lo, 0.0), np.maximum(hi, 0.0))


def exp_bounds(lo, hi):
    """[exp(lo), exp(hi)] enclosed by floats, for lo <= hi <= a few: below EXP_LOW the result is
    [0, EXP_TINY]; elsewhere np.exp's value widened by EXP_REL (plus the rounding of the
    widening product, absorbed by _dn/_up)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        el = np.exp(np.maximum(lo, EXP_LOW))
        eh = np.exp(np.maximum(hi, EXP_LOW))
        E_lo = np.where(lo < EXP_LOW, 0.0, _dn(el * (1.0 - EXP_REL)))
        E_hi = np.where(hi < EXP_LOW, EXP_TINY, _up(eh * (1.0 + EXP_REL)))
    return E_lo, E_hi


def softmax(T: Interval, mask) -> Interval:
    """Weights over the last axis (keys) of scaled scores T (…, q, j); mask: keys allowed
    (broadcastable) or None.  With any shift s (the largest midpoint: exact in real arithmetic,
    softmax is shift-invariant), E_j in [exp(lo_j - s), exp(hi_j - s)], Z = sum E_j, and the
    weight E_j / Z in [E_lo_j / Z_hi, E_hi_j / Z_lo] (clipped to [0, 1])."""
    lo, hi = T.bounds()
    mid = T.m if mask is None else np.where(mask, T.m, -INF)
    s = mid.max(axis=-1, keepdims=True)
    E_lo, E_hi = exp_bounds(_dn(lo - s), _up(hi - s))
    if mask is not None:
        E_lo = np.where(mask, E_lo, 0.0)
        E_hi = np.where(mask, E_hi, 0.0)
    n = T.m.shape[-1]
    g = gamma(n)
    Z_lo = _dn(E_lo.sum(axis=-1, keepdims=True) * _float_dn(1 - g))  # true sum >= fl / (1 + g) >= fl (1 - g)
    Z_hi = _up(E_hi.sum(axis=-1, keepdims=True) * _float_up(1 / (1 - g)))
    with np.errstate(divide="ignore", invalid="ignore"):
        A_lo = np.maximum(_dn(E_lo / Z_hi), 0.0)
        A_hi = np.minimum(_up(E_hi / Z_lo), 1.0)
    A_lo = np.where(np.isnan(A_lo), 0.0, A_lo)
    A_hi = np.where(np.isnan(A_hi), 1.0, A_hi)
    return Interval.from_bounds(A_lo, A_hi)


def hardmax(S: Interval, mask):
    """(weights, settled): keys certainly at the maximum, equal weights 1/count; `settled` is
    False (per batch row and query) where some key may or may not reach it."""
    lo, hi = S.bounds()
    if mask is not None:
        lo = np.where(mask, lo, -INF)
        hi = np.where(mask, hi, -INF)
    best_lo = lo.max(axis=-1, keepdims=True)
    cand = hi >= best_lo
    if mask is not None:
        cand &= mask
    count = cand.sum(axis=-1, keepdims=True)
    exact_eq = (lo == hi) & (lo == best_lo)
    settled = ((count == 1) | (cand <= exact_eq).all(axis=-1, keepdims=True)).all(axis=-1)
    w = np.where(cand, 1.0 / np.maximum(count, 1), 0.0)
    return Interval(w, _upn(U * w)), settled  # 1/count is correctly rounded: error <= u |w|


class IntervalForward:
    """The model from its first softmax layer on, over batches, in certified float64 intervals."""

    def __init__(self, model: Model, first: int):
        self.model, self.first = model, first
        self.layers = []
        ok = True
        for layer in model.layers[first:]:
            heads = []
            for h in layer:
                qk, v = ExactMatrix(h.W_QK), ExactMatrix(h.W_V)
                ok &= qk.finite and v.finite
                c = None
                if h.attention == "softmax":
                    c = _scale_interval(h.scale, h.scale_sqrt_divisor)
                heads.append((qk.right(model.dim), v.right(model.dim), h.attention, c))
            mlp = None
            if layer.mlp is not None:
                W1, W2 = ExactMatrix(layer.mlp.W1), ExactMatrix(layer.mlp.W2)
                b1, b2 = ExactMatrix(np.asarray(layer.mlp.b1).reshape(1, -1)), ExactMatrix(np.asarray(layer.mlp.b2).reshape(1, -1))
                ok &= W1.finite and W2.finite and b1.finite and b2.finite
                mlp = (W1.right(model.dim), Interval(b1.m[0], b1.r[0]), W2.right(W2.shape[1]), Interval(b2.m[0], b2.r[0]))
            inv_m = _const_interval(Fraction(1, len(layer))) if len(layer) else None
            self.layers.append((heads, layer.causal, mlp, inv_m))
        WO = ExactMatrix(model.W_O)
        ok &= WO.finite
        self.W_O = WO.right(model.dim)
        self.usable = ok
        self.decided = 0  # points certified correct so far (read by the verdict's path line)

    def decide(self, Hnum: np.ndarray, den: int, labels: np.ndarray):
        with np.errstate(all="ignore"):  # inf/NaN make a point unsure; numpy need not warn
            return self._decide(Hnum, den, labels)

    def _decide(self, Hnum: np.ndarray, den: int, labels: np.ndarray):
        """Hnum (B, n, d') integer numerators over den of the exact stream entering the first
        softmax layer; labels (B, n) model class rows per position, -1 where unlabelled.
        Returns (status (B,) int8: 1 correct, -1 wrong, 0 unsure; lo, hi (B,) float64: the
        margin (minimum over labelled positions and other classes) lies in [lo, hi] for
        correct points; position (B,) of the smallest lower end)."""
        B, n, d = Hnum.shape
        status = np.zeros(B, dtype=np.int8)
        lo_out = np.full(B, np.nan)
        hi_out = np.full(B, np.nan)
        pos_out = np.full(B, n - 1, dtype=np.int64)
        if not self.usable or B == 0:
            return status, lo_out, hi_out, pos_out
        X = _stream(Hnum, den)
        if X is None:
            return status, lo_out, hi_out, pos_out
        ok = np.ones(B, dtype=bool)
        labelled = labels >= 0
        last_only = not labelled[:, : n - 1].any()
        causal_mask = np.tril(np.ones((n, n), dtype=bool))  # [query k, key j]: j <= k
        for li, (heads, causal, mlp, inv_m) in enumerate(self.layers):
            last = li == len(self.layers) - 1
            Q = X if not (last_only and last) else Interval(X.m[:, n - 1:], None if X.r is None else X.r[:, n - 1:])
            q0 = n - Q.m.shape[1]
            mask = causal_mask[q0:] if causal else None
            if heads:
                upd = None
                for qk, v, kind, c in heads:
                    Wq = lin(Q, qk)  # rows: queries k, (W_QK h_k)^T
                    S = mul(Wq, _transpose(X))  # (B, q, j): score of key j for query k
                    if kind == "softmax":
                        A = softmax(scale(S, c), mask)
                    elif kind == "relu":
                        A = relu(S)
                        if mask is not None:
                            A = Interval(np.where(mask, A.m, 0.0), np.where(mask, A.r, 0.0))
                    else:
                        A, settled = hardmax(S, mask)
                        ok &= settled.all(axis=-1)
                    term = mul(A, lin(X, v))  # (B, q, d')
                    upd = term if upd is None else add(upd, term)
                Q = add(Q, scale(upd, inv_m))
            if mlp is not None:
                W1, b1, W2, b2 = mlp
                P = relu(add(lin(Q, W1), _broadcast(b1, Q.m.shape[:-1])))
                Q = add(Q, add(lin(P, W2), _broadcast(b2, Q.m.shape[:-1])))
            X = Q
            ok &= np.isfinite(X.m).all(axis=(1, 2)) & (X.r is None or np.isfinite(X.r).all(axis=(1, 2)))
        L = lin(X, self.W_O)  # (B, q, C) logits
        q0 = n - L.m.shape[1]
        lab = labels[:, q0:]
        y = np.maximum(lab, 0)
        Ly = Interval(np.take_along_axis(L.m, y[..., None], axis=-1), np.take_along_axis(L.r, y[..., None], axis=-1))  # lin gives r
        D = add(Ly, Interval(-L.m, L.r))  # label minus every class (the label's own entry is 0)
        d_lo, d_hi = D.bounds()
        C = L.m.shape[-1]
        own = np.arange(C)[None, None, :] == y[..., None]
        d_lo = np.where(own, INF, d_lo)
        d_hi = np.where(own, INF, d_hi)
        p_lo = d_lo.min(axis=-1)
        p_hi = d_hi.min(axis=-1)
        use = lab >= 0
        ok &= (np.isfinite(np.where(use, p_lo, 0.0)) & np.isfinite(np.where(use, p_hi, 0.0))).all(axis=1)
        if C == 1:
            status[ok] = 1
            return status, lo_out, hi_out, pos_out
        correct = ok & np.where(use, p_lo > 0, True).all(axis=1)
        wrong = ok & np.where(use, p_hi < 0, False).any(axis=1)
        status[correct] = 1
        status[wrong] = -1
        lo_all = np.where(use, p_lo, INF)
        lo_out = lo_all.min(axis=1)
        hi_out = np.where(use, p_hi, INF).min(axis=1)
        pos_out = q0 + lo_all.argmin(axis=1)
        return status, lo_out, hi_out, pos_out


def _transpose(X: Interval) -> Interval:
    return Interval(np.swapaxes(X.m, -1, -2), None if X.r is None else np.swapaxes(X.r, -1, -2))


def _broadcast(b: Interval, shape) -> Interval:
    return Interval(np.broadcast_to(b.m, shape + b.m.shape), np.broadcast_to(b.r, shape + b.r.shape))


def _stream(Hnum: np.ndarray, den: int) -> Interval | None:
    """The exact stream Hnum / den as an interval (None when it does not fit float64 safely)."""
    if Hnum.dtype == object or abs(den) >= 2**53:
        try:
            M = np.vectorize(lambda v: float(Fraction(int(v), den)))(Hnum).astype(np.float64)
        except OverflowError:
            return None
    else:
        if Hnum.size and np.abs(Hnum).max() >= 2**53:
            return None
        M = Hnum.astype(np.float64) / float(den)  # one correctly rounded division per entry
    if not np.isfinite(M).all():
        return None
    # a correctly rounded quotient errs by at most u |result|, plus eta/2 if it is subnormal
    return Interval(M, _upn(_upn(U * np.abs(M)) + ETA) if den != 1 else None)


def _const_interval(q: Fraction) -> tuple[float, float]:
    m = float(q)
    return m, _float_up(abs(q - Fraction(m)))


def _scale_interval(scale: Fraction, divisor: Fraction) -> tuple[float, float]:
    """<cm, cr> enclosing c = scale / sqrt(divisor): exact comparisons of squares."""
    c2 = scale * scale / divisor  # c^2, c > 0
    cm = float(scale) / float(np.sqrt(float(divisor)))
    lo, hi = cm, cm
    while lo > 0 and Fraction(lo) ** 2 > c2:
        lo = float(np.nextafter(lo, 0.0))
    while Fraction(hi) ** 2 < c2:
        hi = float(np.nextafter(hi, INF))
    return cm, _float_up(max(Fraction(hi) - Fraction(cm), Fraction(cm) - Fraction(lo)))
