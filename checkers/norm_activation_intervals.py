"""Certified float64 intervals for LayerNorm / RMSNorm and the smooth MLP activations (gelu with erf,
gelu_new / gelu_fast with tanh, silu), the components TransformerLens checkpoints add to the
softmax forward of checkers/softmax_intervals.py (docs/trained-models.md, "How LayerNorm and GELU
are decided").

Claim.  For an interval stream X (|x - m| <= r entrywise), `normalize(X, NormMatrices(N))` and
`activation(X, kind)` return intervals that contain the exact N(x) and act(x) of checkers/model.py.
Notation as in softmax_intervals: u = 2^-53, eta = 2^-1074, gamma_k = k u / (1 - k u); `_lo`/`_hi`
turn the correctly rounded result of one IEEE operation (numpy's +, -, *, /, sqrt) into a lower /
upper bound of its exact value.

Normalization, for the vector x = P h of every position (k entries):
  1. c = Pc h with Pc = (I - 11^T/k) P exact (layernorm) or P (rmsnorm): one `lin` (Higham's
     gamma bound, softmax_intervals.lin).
  2. |c_i| lies in [a_i, b_i] (a_i = 0 when c_i's interval holds 0); c_i^2 in [_lo(a_i a_i), _hi(b_i b_i)].
  3. S = sum_i c_i^2: a float sum of k non-negative floats errs by at most gamma_k S, so
     S >= fl(sum lo) (1 - 2 gamma_k) and S <= fl(sum hi) F_k (the constants of softmax_intervals);
     var = S / k by one division each way; + eps (eps enclosed by the floats next to it); sqrt
     (correctly rounded) each way: sqrt(var + eps) in [s_lo, s_hi], s_lo > 0 whenever eps is
     above 2^-1074 (eps > 0 is required by the model).
  4. n_i = c_i / s: c_i's lower end divided by s_hi when it is >= 0, by s_lo otherwise (and the
     mirror for the upper end), each rounded outward; clipped to |n_i| <= sqrt(k) (exactly:
     c_i^2 <= sum c^2 < k (var + eps)).
  The first normalization reads the exact stream: there `normalize_exact` computes each distinct
  row from exact rationals instead (c and var exact, sqrt(var + eps) enclosed by exact comparison
  of squares), so a zero-variance row (every entry of x equal, c = 0 exactly) gives n = 0 with
  radius 0: the output is exactly the bias.  A later norm's constant row is an interval about 0 of
  the rounding's width, and n a tiny interval about 0 (exactly 0 in the arb stage when its input
  is exact, checkers/norm_activation_balls.py).  An infinite
  or NaN end anywhere makes n infinite or NaN, which makes the point unsure (stage 2).

Activations act(x) = x g(x) with g increasing and 0 <= g <= 1:
  gelu       g = Phi(x) = erfc(-x / sqrt 2) / 2
  gelu_new   g = sigma(2 sqrt(2/pi) (x + 0.044715 x^3))        (TransformerLens's constants, as reals)
  gelu_fast  g = sigma(2 * 0.7978845608 x (1 + 0.044715 x^2))
  silu       g = sigma(x)
  g is increasing, so g(x) lies in [lower bound of g(lo), upper bound of g(hi)], and x g(x) in the
  interval product of [lo, hi] and that (every product rounded outward).  sigma(t) = 1/(1 + e^-t)
  for t >= 0 and e^t/(1 + e^t) for t < 0: exp is only called on arguments <= 0, bounded as
  softmax_intervals.exp_bounds bounds it (its EXP_REL assumption on [-700, 5], checked by the tests).
  erfc: scipy.special.erfc is assumed accurate to ERFC_REL relative error on [ERFC_LOW, ERFC_HIGH]
  (checked against arb by tests/test_trained_components.py); below ERFC_LOW erfc lies in
  [2 - 2^-51, 2], above ERFC_HIGH in [0, 2^-980] (erfc(26) < 5.7e-296 < 2^-980).
"""
from __future__ import annotations

import math
import threading
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Norm
from depthcert.checkers.softmax_intervals import (EXP_HI_FACTOR, EXP_LO_FACTOR, EXP_LOW, EXP_TINY, INF, ExactMatrix,
                                                   Interval, _factor, _float_dn, _float_up, _hi, _lo, gamma, lin)

ERFC_REL = 2.0 ** -40  # assumed relative accuracy of scipy.special.erfc on [ERFC_LOW, ERFC_HIGH] (tests check)
ERFC_LOW = -6.0
ERFC_HIGH = 26.0
ERFC_TINY = 2.0 ** -980  # >= erfc(x) for every x >= ERFC_HIGH
TWO_LOW = 2.0 - 2.0 ** -51  # <= erfc(x) for every x <= ERFC_LOW (erfc(-6) = 2 - 2.2e-17)

SMOOTH = ("gelu", "gelu_new", "gelu_fast", "silu")


def _const(value) -> tuple[float, float]:
    """Floats lo <= value <= hi for a Fraction, or for an arb ball (from python-flint)."""
    if isinstance(value, Fraction):
        return _float_dn(value), _float_up(value)
    lo, hi = value.lower(), value.upper()  # arb: exact dyadic ends
    return _float_dn(Fraction(*_ratio(lo))), _float_up(Fraction(*_ratio(hi)))


def _ratio(x):
    man, exp = x.mid().man_exp()
    man, exp = int(man), int(exp)
    return (man << exp, 1) if exp >= 0 else (man, 1 << -exp)


def _arb_constants():
    import flint

    old = flint.ctx.prec
    flint.ctx.prec = 256
    try:
        root_2_over_pi = (flint.arb(2) / flint.arb.pi()).sqrt()
        return {"inv_sqrt2": _const(1 / flint.arb(2).sqrt()),
                "gelu_new": _const(2 * root_2_over_pi),
                "gelu_fast": _const(Fraction(2 * 7978845608, 10**10)),
                "cubic": _const(Fraction(44715, 10**6))}
    finally:
        flint.ctx.prec = old


_CONSTANTS: dict = {}


def constants() -> dict:
    if not _CONSTANTS:
        _CONSTANTS.update(_arb_constants())
    return _CONSTANTS


def mul_bounds(alo, ahi, blo, bhi):
    """Floats [lo, hi] containing every product a b with a in [alo, ahi], b in [blo, bhi] (the
    extreme products rounded outward; NaN from 0 * inf becomes the whole line)."""
    p = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    lo = _lo(np.minimum(np.minimum(p[0], p[1]), np.minimum(p[2], p[3])))
    hi = _hi(np.maximum(np.maximum(p[0], p[1]), np.maximum(p[2], p[3])))
    bad = np.isnan(lo) | np.isnan(hi)
    if np.any(bad):
        lo = np.where(bad, -INF, lo)
        hi = np.where(bad, INF, hi)
    return lo, hi


class NormMatrices:
    """A Norm's floats: Pc (centered for layernorm) as ExactMatrix.right(), 1/k, eps, sqrt(k)."""

    def __init__(self, N: Norm, constant: int, dim: int):
        P = N.centered_P()
        k = P.shape[0]
        self.Pc = P  # exact Fractions, for normalize_exact
        self.eps_exact = N.eps
        self.exact_rows: dict = {}  # distinct exact input rows -> (n midpoints, radii), across batches
        self.pc_flint = None  # (support, Pc^T on it as an fmpq_mat): normalize_exact, built on first use
        self.lock = threading.Lock()  # normalize_exact: one thread computes new rows, another waits for them
        self.finite, self.P = _p_floats(P)
        self.k = k
        self.eps = _const(N.eps)
        self.root_k = float(np.nextafter(np.sqrt(float(k)), INF))  # sqrt correctly rounded, one step up
        self.offset, self.constant, self.dim = N.offset, constant, dim
        self.low_sum = _float_dn(1 - 2 * gamma(k))
        self.high_sum = _factor(k)


_P_FLOATS: list = []  # [(P, finite, ExactMatrix(P).right())]: the last few, found by identity


def _p_floats(P):
    """(finite, ExactMatrix(P).right()), computed once for one P object: a model's norms of the
    same stream share their P (a Llama's every RMSNorm reads x = E h), and P is read-only.  The
    cache holds P itself, so an identity match is that very array (speed only)."""
    for Q, finite, right in _P_FLOATS:
        if Q is P and not P.flags.writeable:
            return finite, right
    M = ExactMatrix(P)
    right = M.right()
    for a in right:
        a.flags.writeable = False  # shared by the norms of one P
    got = (M.finite, right)
    if not P.flags.writeable:
        _P_FLOATS.insert(0, (P,) + got)
        del _P_FLOATS[4:]
    return got


def normalize(X: Interval, nm: NormMatrices) -> Interval:
    """N(X) (module docstring, steps 1-4), in the d'-wide layout of checkers/model.py: n at rows
    offset.., 1 at the constant row, exact 0 elsewhere."""
    C = lin(X, nm.P, radius_product=True)  # (..., k): radii entry by entry
    clo, chi = C.bounds()
    alo, ahi = np.abs(clo), np.abs(chi)
    a = np.where((clo <= 0) & (chi >= 0), 0.0, np.minimum(alo, ahi))
    b = np.maximum(alo, ahi)
    a *= a
    sq_lo = np.maximum(_lo(a), 0.0)
    b *= b
    sq_hi = _hi(b)
    S_lo = sq_lo.sum(axis=-1, keepdims=True) * nm.low_sum  # (1 - 2 gamma_k)(1 + u) <= 1 - gamma_k
    S_hi = sq_hi.sum(axis=-1, keepdims=True) * nm.high_sum  # F_k (1 - u) >= 1 / (1 - gamma_k)
    k = float(nm.k)
    v_lo = np.maximum(_lo(_lo(S_lo / k) + nm.eps[0]), 0.0)
    v_hi = _hi(_hi(S_hi / k) + nm.eps[1])
    s_lo = np.maximum(_lo(np.sqrt(v_lo)), 0.0)
    s_hi = _hi(np.sqrt(v_hi))
    # n_lo = _lo(c_lo / s_hi) where c_lo >= 0, _lo(c_lo / s_lo) elsewhere (one division by the chosen
    # divisor: the same quotients); the mirror for n_hi
    n_lo = _lo(clo / np.where(clo >= 0, s_hi, s_lo))
    n_hi = _hi(chi / np.where(chi >= 0, s_lo, s_hi))
    # |n_i| < sqrt(k) exactly; NaN (an overflowed c or s) stays NaN (np.maximum / np.minimum carry
    # it), so the point stays unsure
    np.maximum(n_lo, -nm.root_k, out=n_lo)
    np.minimum(n_hi, nm.root_k, out=n_hi)
    n = Interval.from_bounds(n_lo, n_hi)
    if not (np.isfinite(n.r).all() and (s_lo > 0).all()):  # r is finite iff both ends are
        bad = ~(np.isfinite(n_lo) & np.isfinite(n_hi) & (s_lo > 0))
        n.m = np.where(bad, np.nan, n.m)
    shape = n.m.shape[:-1] + (nm.dim,)
    m = np.zeros(shape)
    r = np.zeros(shape)
    m[..., nm.offset:nm.offset + nm.k] = n.m
    r[..., nm.offset:nm.offset + nm.k] = n.r
    m[..., nm.constant] = 1.0
    return Interval(m, r)


EXACT_ROWS_CACHE = 1 << 16  # distinct exact rows remembered per norm


def _sqrt_bounds(q: Fraction):
    """Floats 0 < lo <= sqrt(q) <= hi (exact comparisons of squares), or None when q is outside
    the normal float range (compared exactly first: float(q) of a variance above float64's
    largest number, say 1e400 from embeddings of 1e200, raises OverflowError)."""
    if not Fraction(1, 2**1000) < q < 2**1000:
        return None
    lo = hi = math.sqrt(float(q))
    while Fraction(lo) ** 2 > q:
        lo = float(np.nextafter(lo, 0.0))
    while Fraction(hi) ** 2 < q:
        hi = float(np.nextafter(hi, INF))
    return (lo, hi) if lo > 0 else None


def _pc_transposed(nm: "NormMatrices"):
    """(support, Pc^T restricted to it): the columns j of Pc with some non-zero entry (the only
    entries of an input row that c = Pc h reads) and the (len(support), k) python-flint fmpq_mat of
    those columns, built on first use and kept (a racing second build in another thread stores an
    equal pair)."""
    got = nm.pc_flint
    if got is None:
        import flint

        P = nm.Pc
        nonzero = P != 0
        support = np.nonzero(nonzero.any(axis=0))[0]
        M = flint.fmpq_mat(len(support), P.shape[0])
        for jj, j in enumerate(support):
            for i in np.nonzero(nonzero[:, j])[0]:
                v = P[i, j]
                M[jj, int(i)] = flint.fmpq(v.numerator, v.denominator)
        got = nm.pc_flint = (support, M)
    return got


def _dn(num: int, den: int) -> float:
    """The largest float <= num / den (den > 0; the quotient within the float range): python's
    int / int is the correctly rounded quotient f, and f > num / den (compared exactly, in
    integers) moves it one float down."""
    f = num / den
    fn, fd = f.as_integer_ratio()
    return math.nextafter(f, -INF) if fn * den > num * fd else f


def _up(num: int, den: int) -> float:
    """The smallest float >= num / den (den > 0), as _dn."""
    f = num / den
    fn, fd = f.as_integer_ratio()
    return math.nextafter(f, INF) if fn * den < num * fd else f


def _up_difference(x, y):
    """The smallest floats >= x - y, exactly, for float arrays x, y with finite differences: s =
    fl(x - y) and its exact error e = (x - y) - s (Knuth's TwoSum, exact in binary64 without
    overflow); s itself when e <= 0, else the next float up (|e| is at most half a gap of s)."""
    s = x - y
    b = s - x
    e = (x - (s - b)) + (-y - b)
    return np.where(e > 0, np.nextafter(s, INF), s)


def _exact_rows(nm: "NormMatrices", rows: np.ndarray, den: int):
    """(midpoints, radii), each (len(rows), k), of n = c / sqrt(mean(c^2) + eps) for the exact input
    rows / den (each row given on Pc's support only, _pc_transposed), or None when some row's root
    is outside the normal float range:
      * c = rows Pc^T / den and var + eps = sum c^2 / k + eps are exact rationals (one python-flint
        matrix product for every row, then fmpq arithmetic);
      * sqrt(var + eps) lies in [s_lo, s_hi], floats with s_lo^2 <= var + eps <= s_hi^2 (exact
        comparisons, _sqrt_bounds), s_lo > 0;
      * n_i = c_i / s lies between the exact quotients c_i / s_hi and c_i / s_lo (in the order of
        c_i's sign); f_lo is the largest float <= the lower one and f_hi the smallest float >= the
        upper one (_dn, _up: exact integer comparisons);
      * m = fl((f_lo + f_hi) / 2) and r the smallest float >= max(f_hi - m, m - f_lo), exactly
        (_up_difference); c_i = 0 gives exactly <0, 0>, a zero-variance row exactly the bias.
    (Speed: one flint product and integer arithmetic per entry instead of Fractions; the same
    floats as the Fraction computation.)"""
    import flint

    k = nm.k
    C = flint.fmpq_mat(len(rows), rows.shape[1], rows.ravel().tolist()) * _pc_transposed(nm)[1]
    if den != 1:
        C = C / den
    entries = C.entries()
    zero = flint.fmpq(0)
    eps = flint.fmpq(nm.eps_exact.numerator, nm.eps_exact.denominator)
    f_lo = np.zeros((len(rows), k))
    f_hi = np.zeros((len(rows), k))
    for i in range(len(rows)):
        cs = entries[i * k:(i + 1) * k]
        var = sum((x * x for x in cs), zero) / k + eps
        bounds = _sqrt_bounds(Fraction(int(var.p), int(var.q)))
        if bounds is None:
            return None
        ln, ld = bounds[0].as_integer_ratio()
        hn, hd = bounds[1].as_integer_ratio()
        for j, x in enumerate(cs):
            p = int(x.p)
            if p == 0:
                continue
            q = int(x.q)
            if p > 0:  # c / s_hi <= c / s <= c / s_lo
                f_lo[i, j], f_hi[i, j] = _dn(p * hd, q * hn), _up(p * ld, q * ln)
            else:
                f_lo[i, j], f_hi[i, j] = _dn(p * ld, q * ln), _up(p * hd, q * hn)
    m = 0.5 * (f_lo + f_hi)
    r = np.maximum(_up_difference(f_hi, m), _up_difference(m, f_lo))
    return m, r


def _distinct_rows(flat: np.ndarray):
    """(distinct rows, index of each row's distinct row), exactly.  Columns equal in every row are
    left out of the comparison; when the others hold small non-negative integers (one-hot
    inputs) each row packs injectively into one int64 (value j at bits w j .. w j + w - 1), and
    the distinct keys are found by a 1-D unique; otherwise np.unique over rows."""
    if not len(flat):
        return flat, np.zeros(0, dtype=np.int64)
    vary = np.nonzero((flat != flat[0]).any(axis=0))[0]
    sub = flat[:, vary]
    if sub.size and sub.min() >= 0:
        w = max(int(sub.max()).bit_length(), 1)
        if w * len(vary) <= 62:
            key = (sub << (w * np.arange(len(vary), dtype=np.int64))).sum(axis=1)  # disjoint bit fields
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
            return flat[first], inv
    _, first, inv = np.unique(sub, axis=0, return_index=True, return_inverse=True)
    return flat[first], inv


def normalize_exact(Hnum: np.ndarray, den: int, nm: "NormMatrices") -> Interval | None:
    """N(X) for the exact stream X = Hnum / den (the input of the first non-rational layer), each
    distinct row computed once from exact rationals (_exact_rows) and remembered across batches: a
    zero-variance row (x - mean = 0 exactly) reads exactly the bias, with radius 0, and every other
    entry is within a few ulp.  None (the caller takes `normalize`) when Hnum is not int64 or some
    row's root is outside the float range."""
    if Hnum.dtype != np.int64 or not isinstance(den, int) or den <= 0:
        return None
    shape = Hnum.shape
    if nm.pc_flint is None:
        with nm.lock:
            _pc_transposed(nm)
    support = nm.pc_flint[0]  # the entries c = Pc h reads: rows equal there give one n
    uniq, inv = _distinct_rows(np.ascontiguousarray(Hnum.reshape(-1, shape[-1])))
    uniq, inv_support = _distinct_rows(np.ascontiguousarray(uniq[:, support]))  # equal on the support
    inv = inv_support.reshape(-1)[inv.reshape(-1)]
    M = np.empty((len(uniq), nm.k))
    R = np.empty((len(uniq), nm.k))
    keys = [(row.tobytes(), den) for row in uniq]
    todo = []
    for i, key in enumerate(keys):
        got = nm.exact_rows.get(key)
        if got is None:
            todo.append(i)
        else:
            M[i], R[i] = got
    if todo:
        with nm.lock:  # a worker thread deciding another chunk may be computing the same rows: wait for them
            still = []
            for i in todo:
                got = nm.exact_rows.get(keys[i])
                if got is None:
                    still.append(i)
                else:
                    M[i], R[i] = got
            if still:
                got = _exact_rows(nm, uniq[still], den)
                if got is None:
                    return None
                M[still], R[still] = got
                for j, i in enumerate(still):
                    if len(nm.exact_rows) < EXACT_ROWS_CACHE:
                        nm.exact_rows[keys[i]] = (got[0][j], got[1][j])
    TM = np.zeros((len(uniq), nm.dim))  # the distinct rows of the output, then one gather
    TR = np.zeros((len(uniq), nm.dim))
    TM[:, nm.offset:nm.offset + nm.k] = M
    TR[:, nm.offset:nm.offset + nm.k] = R
    TM[:, nm.constant] = 1.0
    return Interval(TM[inv].reshape(shape[:-1] + (nm.dim,)), TR[inv].reshape(shape[:-1] + (nm.dim,)))


def _exp_at(x):
    """softmax_intervals.exp_bounds(x, x) for float arguments x <= 0 (or NaN), with one np.exp per
    entry instead of two (its two ends are the same float here): E_lo <= exp(x) <= E_hi, [0,
    EXP_TINY] below EXP_LOW, else np.exp's value e times (1 -+ 2 EXP_REL) (exp_bounds' docstring);
    a NaN x gives NaN ends."""
    e = np.exp(np.maximum(x, EXP_LOW))  # x <= 0 < EXP_HIGH: only the lower clip applies
    low = x < EXP_LOW
    return np.where(low, 0.0, e * EXP_LO_FACTOR), np.where(low, EXP_TINY, e * EXP_HI_FACTOR)


def _sigmoid_bounds(t_lo, t_hi):
    """Floats [g_lo, g_hi] with g_lo <= sigma(t_lo) and sigma(t_hi) <= g_hi (sigma increasing),
    from exp of arguments <= 0 only: e = exp(-|t|) (-|t| is exact) in [E_lo, E_hi] (_exp_at, one
    exp per entry); a NaN end gives [0, 1]."""
    def lower(t):
        neg = t < 0
        E_lo, E_hi = _exp_at(np.where(neg, t, -t))  # e^{-|t|}
        # t >= 0: 1 / (1 + e^-t) >= 1 / (1 + E_hi); t < 0: e/(1+e) increasing in e: >= E_lo / (1 + E_lo)
        return np.where(neg, _lo(E_lo / _hi(1.0 + E_lo)), _lo(1.0 / _hi(1.0 + E_hi)))

    def upper(t):
        neg = t < 0
        E_lo, E_hi = _exp_at(np.where(neg, t, -t))
        return np.where(neg, _hi(E_hi / _lo(1.0 + E_hi)), _hi(1.0 / _lo(1.0 + E_lo)))

    g_lo = np.clip(lower(t_lo), 0.0, 1.0)
    g_hi = np.clip(upper(t_hi), 0.0, 1.0)
    g_lo = np.where(np.isnan(g_lo) | np.isnan(t_lo), 0.0, g_lo)
    g_hi = np.where(np.isnan(g_hi) | np.isnan(t_hi), 1.0, g_hi)
    return g_lo, g_hi


def _erfc_lower(w):
    """A float <= erfc(w) (w a float)."""
    from scipy.special import erfc

    e = erfc(np.clip(w, ERFC_LOW, ERFC_HIGH))
    out = np.where(w > ERFC_HIGH, 0.0, _lo(e * (1.0 - 2 * ERFC_REL)))
    return np.where(w < ERFC_LOW, TWO_LOW, out)


def _erfc_upper(w):
    from scipy.special import erfc

    e = erfc(np.clip(w, ERFC_LOW, ERFC_HIGH))
    out = np.where(w > ERFC_HIGH, ERFC_TINY, _hi(e * (1.0 + 2 * ERFC_REL)))
    return np.where(w < ERFC_LOW, 2.0, out)


def _g_bounds(kind: str, lo, hi):
    """[g_lo, g_hi] with g_lo <= g(lo) and g(hi) <= g_hi for the increasing g of act(x) = x g(x)."""
    cst = constants()
    if kind == "silu":
        return _sigmoid_bounds(lo, hi)
    if kind == "gelu":
        c_lo, c_hi = cst["inv_sqrt2"]
        # Phi(x) = erfc(-x c) / 2 (c = 1/sqrt 2), erfc decreasing: the largest argument gives the lower end
        # w = -x c with 0 < c_lo <= c <= c_hi: its largest value at x = lo, its smallest at x = hi
        w_lo_end = _hi(-lo * np.where(lo < 0, c_hi, c_lo))
        w_hi_end = _lo(-hi * np.where(hi < 0, c_lo, c_hi))
        g_lo = _lo(_erfc_lower(w_lo_end) * 0.5)
        g_hi = _hi(_erfc_upper(w_hi_end) * 0.5)
        g_lo = np.where(np.isnan(g_lo), 0.0, np.clip(g_lo, 0.0, 1.0))
        g_hi = np.where(np.isnan(g_hi), 1.0, np.clip(g_hi, 0.0, 1.0))
        return g_lo, g_hi
    k_lo, k_hi = cst[kind]
    a_lo, a_hi = cst["cubic"]

    def t_bounds(x):
        """[t_lo, t_hi] containing t(x) = k x (1 + a x^2) for the float x."""
        x2_lo, x2_hi = np.maximum(_lo(x * x), 0.0), _hi(x * x)
        q_lo, q_hi = mul_bounds(x2_lo, x2_hi, a_lo, a_hi)
        q_lo, q_hi = _lo(q_lo + 1.0), _hi(q_hi + 1.0)
        p_lo, p_hi = mul_bounds(x, x, q_lo, q_hi)
        return mul_bounds(p_lo, p_hi, k_lo, k_hi)

    return _sigmoid_bounds(t_bounds(lo)[0], t_bounds(hi)[1])


def _times_nonnegative(lo, hi, g_lo, g_hi):
    """Floats [f_lo, f_hi] containing x g for x in [lo, hi], g in [g_lo, g_hi] with 0 <= g_lo: the
    extreme products are lo g_hi (lo < 0) or lo g_lo, and hi g_hi (hi > 0) or hi g_lo, rounded
    outward (two products instead of four)."""
    f_lo = _lo(lo * np.where(lo < 0, g_hi, g_lo))
    f_hi = _hi(hi * np.where(hi > 0, g_hi, g_lo))
    return f_lo, f_hi


SILU_REL = 2.0 ** -47  # _silu_midrad's relative rounding term of the midpoint (see there)
SILU_NARROW = 2.0 ** -20  # _silu_midrad's largest input radius


def _silu_midrad(X: Interval) -> Interval | None:
    """silu(X) in midpoint-radius form with one exp per entry, or None (the caller takes the
    bounds of `activation`) unless every midpoint m has |m| <= 700 and every radius r <= 2^-20 (a
    wide input keeps the monotone bounds).  u = 2^-53, eta = 2^-1074, E = EXP_REL = 2^-50.
    Midpoint: s = fl(m g), g = fl(1 / fl(1 + e)) for m >= 0 and fl(e / fl(1 + e)) for m < 0,
    e = np.exp(-|m|) (-|m| exact, in [EXP_LOW, 0], so |e - exp(-|m|)| <= E exp(-|m|), and
    e >= e^-700 is normal, as are 1 + e and g >= e / 2):
      1 + e = (1 + exp(-|m|))(1 + t1) with |t1| <= E + u + E u; g = sigma(m)(1 + t2) with
      |t2| <= (1 + E)(1 + u) / (1 - E - u - E u) - 1 < 2E + 3u < 2^-48 (the m < 0 case; m >= 0 has
      one E less); s = m g (1 + t3) + d3 (|t3| <= u, |d3| <= eta/2 when subnormal).  So
      |s - silu(m)| <= rho |silu(m)| + eta/2 with rho < 2E + 4u < 2^-48, and since
      |silu(m)| <= (|s| + eta/2) / (1 - rho): |s - silu(m)| <= 2^-47 |s| + eta.
    Slope: silu'(x) = sigma(x) (1 + x (1 - sigma(x))), evaluated as d = fl(g fl(1 + fl(m fl(1 - g)))):
      fl(1 - g) = 1 - sigma(m) + e1, |e1| <= 2^-48 + u; fl(m fl(1 - g)) = m (1 - sigma(m)) + e2,
      |e2| <= |m| 2^-46 + eta; fl(1 + that) = 1 + m (1 - sigma(m)) + e3, |e3| <= (|m| + 1) 2^-45.5;
      d = silu'(m)(1 + t2)(1 + t4) + sigma(m) e3 (1 + t2)(1 + t4), |t4| <= u: with |silu'| < 1.1,
      |d - silu'(m)| <= (|m| + 2) 2^-45.  |silu''| <= 1/2 (its maximum, at 0), so for every x with
      |x - m| <= r: |silu'(x)| <= S := |d| + (|m| + 2) 2^-45 + r / 2, and |silu(x) - silu(m)| <= S r
      (the mean value theorem).
    Radius: T = S r + 2^-47 |s| + eta.  Its float evaluation (a product losing at most a factor
    1 - u and eta/2, a sum a factor 1 - u; the scalings by powers of 2 exact but for eta/2) gives
    S_f = fl(fl(|d| + fl(fl(|m| + 2) 2^-45)) + fl(r / 2)) >= S (1 - u)^3 - eta and
    f = fl(fl(S_f r) + fl(2^-47 |s|)) >= T0 (1 - u)^5 - 2 eta with T0 = T - eta (eta r <= eta / 2);
    fl(f (1 + 2^-45)) >= T0 (1 - u)^6 (1 + 2^-45) - 3 eta, and the radius fl(that + 64 eta) >=
    T0 (1 - u)^7 (1 + 2^-45) + 60 eta >= T ((1 - u)^7 (1 + 2^-45) >= 1).  Every value is finite:
    |m| <= 700, r <= 2^-20."""
    from depthcert.checkers.softmax_intervals import ETA, EXP_LOW as LOW

    m = X.m
    a = np.abs(m)
    if not (a.max(initial=0.0) <= -LOW):  # also False for a NaN midpoint
        return None
    r = 0.0 if X.r is None else X.r
    if X.r is not None and not (r.max(initial=0.0) <= SILU_NARROW):  # also None for a NaN radius
        return None
    e = np.exp(-a)
    g = 1.0 + e
    g = np.where(m >= 0, 1.0 / g, e / g)
    s = m * g
    slope = g * (1.0 + m * (1.0 - g))  # d
    np.abs(slope, out=slope)
    slope += (a + 2.0) * 2.0 ** -45
    slope += 0.5 * r  # S_f
    f = slope * r
    f += SILU_REL * np.abs(s)
    f *= 1.0 + 2.0 ** -45
    f += 64 * ETA
    return Interval(s, f)


def activation(X: Interval, kind: str) -> Interval:
    """act(X) elementwise for kind in SMOOTH (module docstring; silu with narrow finite inputs in
    midpoint-radius form, _silu_midrad)."""
    if kind == "silu":
        out = _silu_midrad(X)
        if out is not None:
            return out
    lo, hi = X.bounds()
    g_lo, g_hi = _g_bounds(kind, lo, hi)
    f_lo, f_hi = _times_nonnegative(lo, hi, g_lo, g_hi)
    out = Interval.from_bounds(f_lo, f_hi)
    bad = ~(np.isfinite(lo) & np.isfinite(hi) & np.isfinite(f_lo) & np.isfinite(f_hi))
    if np.any(bad):
        out.m = np.where(bad, np.nan, out.m)
    return out


__all__ = ["NormMatrices", "normalize", "normalize_exact", "activation", "layer_extras", "SMOOTH", "ERFC_REL", "ERFC_LOW", "ERFC_HIGH"]


def layer_extras(layer, model):
    """(NormMatrices of norm_attn or None, of norm_mlp or None, the MLP activation) of one layer."""
    def nm(N):
        return None if N is None else NormMatrices(N, model.constant_index, model.dim)

    return nm(layer.norm_attn), nm(layer.norm_mlp), layer.mlp.activation if layer.mlp is not None else "relu"
