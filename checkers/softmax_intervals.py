"""Certified float64 intervals for softmax models, over whole batches (docs/softmax.md, "Float
intervals", is the line-by-line error analysis).

Claim.  For every point of a batch, `IntervalForward.decide` returns intervals [lo, hi] of
float64 numbers that contain every exact logit difference (label minus class) of the model
from its first softmax layer on, given the exact rational stream entering that layer.  A point
is `correct` when every difference at every labelled position has lo > 0, `wrong` when some
difference has hi < 0, and `unsure` otherwise (overlap, a hardmax argmax the intervals cannot
settle, any inf/NaN in a value, a radius or an enclosure end, an exponent outside exp's checked
range): unsure points go to arb balls
(checkers/softmax_balls.py), and so do wrong ones (for their certified details).

How every operation is bounded (u = 2^-53, eta = 2^-1074, gamma_k = k u / (1 - k u)):
  * values are midpoint-radius pairs <m, r> of float64 arrays: the exact value x has |x - m| <= r;
  * a single IEEE operation (numpy's +, -, *, / on float64 are correctly rounded) is followed by
    `_hi` / `_lo` (or `_up1` for non-negative results) where an upper / lower bound of the exact
    result is needed;
  * a dot product of length k in any order, with or without FMA, errs by at most
    gamma_k sum |x_i y_i| + k eta (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
    ed., eq. 3.5, plus eta per product for underflow), provided its float result is finite (a
    partial sum that overflowed stays inf or NaN, and such entries are never settled); a float
    sum of non-negative products is bounded above by `_bound`;
  * sums of non-negative terms (np.sum, any order) err by at most gamma_n times the sum;
  * exp: numpy's exp is assumed accurate to EXP_REL (2^-50, i.e. 4 ulp) relative error for
    arguments in [EXP_LOW, EXP_HIGH] = [-700, 5]; the test suite checks that assumption against
    arb on random and extreme arguments of that whole range
    (tests/test_softmax_certified.py::test_numpy_exp_is_within_exp_rel_of_arb).  Above EXP_HIGH
    (an exponent's upper end there needs a score radius above 5) no exp is trusted: [0, inf].
    Below EXP_LOW = -700 the result is replaced by the interval [0, 2^-1000] without calling exp
    (exp(-700) < 2^-1000), so subnormal results never need an accuracy claim;
  * softmax weights: softmax_relative (one exp per entry at the midpoints, a relative radius
    from the mean value theorem, its docstring) where every score radius is small and every
    value finite, else softmax_bounds (the weights' ends from the scores' ends).
"""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model

U = 2.0 ** -53
ETA = 2.0 ** -1074
EXP_REL = 2.0 ** -50  # assumed relative accuracy of np.exp on [EXP_LOW, EXP_HIGH] (checked by tests)
EXP_LOW = -700.0
EXP_HIGH = 5.0  # np.exp is called on [EXP_LOW, EXP_HIGH] only: the range the EXP_REL test covers
EXP_TINY = 2.0 ** -1000  # >= exp(x) for every x <= EXP_LOW
INF = np.inf


def _nudge(z):
    """|z| 2^-51 + 2 eta: the amount _hi/_lo move a value by."""
    a = np.abs(z)
    a *= 2.0 ** -51
    a += 2 * ETA
    return a


def _hi(z):
    """For z the correctly rounded result of one operation (exact value t): a float >= t.
    |t - z| <= u |z| (or <= eta/2 where the result is tiny); z + (|z| 2^-51 + 2 eta), rounded,
    is >= z + 3u |z| - eta/2 - rounding >= z + u |z| for |z| >= 2^-1021, and below that every
    operation involved is exact up to eta, leaving >= z + eta >= t."""
    return z + _nudge(z)


def _lo(z):
    """The mirror image of _hi: a float <= the exact result z was rounded from.  _lo and _hi are
    non-decreasing in z: for |z| >= 2^-1021 the nudge |z| 2^-51 is exact, so between neighbours
    z1 < z2 the sum moves by (z2 - z1)(1 -+ 2^-51) >= 0 before its (monotone) rounding; in the
    subnormal range the nudge's rounded part moves by at most eta while z moves by eta."""
    return z - _nudge(z)


UP = 1.0 + 4 * U  # exactly representable


def _up1(x):
    """For x >= 0 the correctly rounded result of one operation on exact non-negative reals
    (true value t <= x (1 + u) + eta/2): a float >= t.  Normal x >= 2^-1021: fl(x UP) >=
    x (1 + 4u)(1 - u) >= x (1 + 2u) and fl(y + eta) >= y, so the result >= x (1 + u) + u x >= t.
    Smaller x: fl(x UP) >= x - eta/2 and the addition of eta is exact there: >= x + eta/2 >= t."""
    x = x * UP
    x += ETA
    return x


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


_GAMMAS: dict = {}


def _gamma_up(k: int) -> float:
    """The smallest float >= gamma_k (cached: a Fraction per call showed in profiles)."""
    if k not in _GAMMAS:
        _GAMMAS[k] = _float_up(gamma(k))
    return _GAMMAS[k]


_FACTORS: dict = {}


def _factor(k: int) -> float:
    """F_k: a float >= (1 + 2^-50) / (1 - gamma_k)."""
    if k not in _FACTORS:
        _FACTORS[k] = _float_up((1 + Fraction(1, 2**50)) / (1 - gamma(k)))
    return _FACTORS[k]


def _bound(R, k: int, extra: int = 0):
    """An upper bound of a non-negative quantity t whose float evaluation R (a sum of at most k
    products of non-negative floats, in any order, FMA or not) satisfies
    t <= (R + k eta) / (1 - gamma_k) + extra eta  (Higham eq. 3.5 plus eta per product for
    underflow, plus `extra` eta added by the caller's own error terms).  Returns
    fl(fl(R F_k) + 2 (k + extra + 2) eta): fl(R F_k) >= R (1 + 2u) / (1 - gamma_k) - eta/2, and the
    final addition loses at most u of the sum (or nothing, in the subnormal range).  In place."""
    R *= _factor(k)
    R += 2 * (k + extra + 2) * ETA
    return R


class Interval:
    """<m, r>: the exact values x satisfy |x - m| <= r, elementwise (r None: exactly m; r may
    have shape (B, 1, d), one radius for every row of a point, broadcast)."""

    __slots__ = ("m", "r")

    def __init__(self, m, r):
        self.m, self.r = m, r

    def bounds(self):
        """Floats lo <= x <= hi."""
        if self.r is None:
            return self.m, self.m
        return _lo(self.m - self.r), _hi(self.m + self.r)

    @staticmethod
    def from_bounds(lo, hi) -> "Interval":
        """<m, r> enclosing [lo, hi]: m any float, r >= max(hi - m, m - lo) (one rounding each)."""
        m = 0.5 * (lo + hi)
        return Interval(m, _hi(np.maximum(hi - m, m - lo)))


def _is_dyadic(q: Fraction) -> bool:
    """q is a float64 exactly (a numerator of <= 53 bits over a power of 2, in the normal range)."""
    d = q.denominator
    return d & (d - 1) == 0 and abs(q.numerator).bit_length() <= 53 and d.bit_length() <= 1000


def _slots_ok() -> bool:
    """Fraction keeps its numerator and denominator in the slots _numerator and _denominator (as
    CPython's fractions.py does); checked here, else ExactMatrix reads the public properties."""
    try:
        return all((f._numerator, f._denominator) == (f.numerator, f.denominator)
                   for f in (Fraction(3, 4), Fraction(-2**80 - 1, 6), Fraction(0)))
    except AttributeError:
        return False


_SLOTS_OK = _slots_ok()


class ExactMatrix:
    """A rational weight matrix W as floats: Wm = fl(W), Wr >= |W - Wm|, and the derived
    non-negative matrices a product needs (|Wm| + Wr, Wr + gamma_k |Wm|, transposed)."""

    def __init__(self, M):
        M = np.asarray(M, dtype=object)
        self.shape = M.shape
        flat = [v if type(v) is Fraction else Fraction(v) for v in M.ravel()]
        if _SLOTS_OK:  # the same integers without a property call per entry (speed)
            nums = [v._numerator for v in flat]
            dens = [v._denominator for v in flat]
        else:
            nums = [v.numerator for v in flat]
            dens = [v.denominator for v in flat]
        if max(map(abs, nums), default=0) < 2**53 and max(dens, default=1) < 2**53:
            # every numerator and denominator is a float64 exactly, so the float division is the
            # correctly rounded quotient (as int / int below); a denominator below 2^53 has at most
            # 53 bits and a numerator below 2^53 too: inexact iff the denominator is no power of 2
            d = np.array(dens, dtype=np.int64)
            m = np.array(nums, dtype=np.float64) / d.astype(np.float64)
            inexact = (d & (d - 1)) != 0
            r = np.zeros(len(flat))
        else:
            m, r, inexact = self._wide(flat, nums, dens)
        # a correctly rounded m errs by at most u |m| (at most eta/2 when subnormal): u |m| is exact
        # unless subnormal, so u |m| + eta bounds the error (as for the stream, _stream); an
        # infinite m (an overflow) keeps r = inf.  One vector operation instead of a Fraction per entry.
        r[inexact] = np.abs(m[inexact]) * U + ETA
        r[inexact & ~np.isfinite(m)] = INF
        self.m = m.reshape(M.shape)
        self.r = r.reshape(M.shape)
        self.finite = bool(np.isfinite(self.m).all() and np.isfinite(self.r).all())

    @staticmethod
    def _wide(flat, nums, dens):
        """(m, r, inexact) exactly as _slow gives them, for numerators or denominators of 2^53 and
        more, with vector operations where they give the same floats (speed: the products of
        float32 weights a checkpoint's exact model holds have denominators beyond 2^53).
        p and q convert to the floats pf = fl(p), qf = fl(q) (int -> float64 through
        PyLong_AsDouble: correctly rounded; OverflowError beyond float64, then _slow entry by
        entry).  Rounding is monotone and 2^53, 2^1000 are floats, so |p| >= 2^53 iff |pf| >= 2^53
        and q >= 2^1000 iff qf >= 2^1000; q is a power of 2 iff q == qf exactly (an exact
        int-float comparison; every power of 2 below 2^1024 is a float) and qf's frexp mantissa is
        1/2: _slow's `inexact` as vectors.  m = fl(pf / qf) is the correctly rounded p / q (what
        _slow's int / int gives) where (a) |p| < 2^53 and q < 2^53 (both exact: one IEEE division),
        (b) q is a power of 2 below 2^1000 and |m| > 2^-1022 (then the exact pf / q is above 2^-1022,
        rounding being monotone, so the division by the power of 2 is exact and fl(p) / q =
        fl(p / q)), or (c) p = 0; every other entry takes _slow's int / int."""
        P = np.array(nums, dtype=object)
        Q = np.array(dens, dtype=object)
        try:
            pf = P.astype(np.float64)
            qf = Q.astype(np.float64)
        except OverflowError:
            return ExactMatrix._slow(flat)
        pow2 = (Q == qf.astype(object)) & (np.frexp(qf)[0] == 0.5)
        big_p = np.abs(pf) >= 2.0 ** 53
        big_q = qf >= 2.0 ** 1000
        inexact = ~pow2 | big_p | big_q
        m = pf / qf
        good = (~big_p & (qf < 2.0 ** 53)) | (pow2 & ~big_q & (np.abs(m) > 2.0 ** -1022)) | (pf == 0)
        r = np.zeros(len(flat))
        for i in np.nonzero(~good)[0]:
            m[i] = nums[i] / dens[i]  # int / int: correctly rounded (finite: |p / q| <= |p| < 2^1024)
        return m, r, inexact

    @staticmethod
    def _slow(flat):
        """(m, r, inexact) entry by entry, for numerators or denominators of 2^53 and more."""
        m = np.empty(len(flat))
        r = np.zeros(len(flat))
        inexact = np.zeros(len(flat), dtype=bool)
        for i, v in enumerate(flat):
            try:
                m[i] = v.numerator / v.denominator  # int / int: correctly rounded
            except OverflowError:
                m[i], r[i] = INF, INF
                continue
            d = v.denominator
            if d & (d - 1) or abs(v.numerator).bit_length() > 53 or d.bit_length() > 1000:
                inexact[i] = True
        return m, r, inexact

    def right(self, bias: "ExactMatrix | None" = None):
        """For X @ W.T (a contraction of length k = W's columns): (Wm^T, A^T = (|Wm| + Wr)^T
        rounded up, and per row i of W upper bounds cs_i >= sum_j (Wr + gamma_k |Wm|)_ij and
        as_i >= sum_j A_ij).  With a bias b (one row): X @ W.T + b, a dot product of length
        k + 1 (the last term 1 b_i, exact), so gamma_{k+1} in cs and two more entries: bm and
        bb_i >= gamma_{k+1} |bm_i| + br_i (lin)."""
        g = _float_up(gamma(self.shape[1] + (bias is not None)))
        absm = np.abs(self.m)
        with np.errstate(over="ignore", invalid="ignore"):  # inf bounds make every point unsure; no warning
            C = _up1(self.r + _up1(g * absm))
            A = _up1(absm + self.r)
            cs = _bound(C.sum(axis=1), self.shape[1])  # a sum of k non-negative floats (products by 1)
            as_ = _bound(A.sum(axis=1), self.shape[1])
            out = (np.ascontiguousarray(self.m.T), np.ascontiguousarray(A.T), cs, as_)
            if bias is None:
                return out
            bm, br = bias.m.reshape(-1), bias.r.reshape(-1)
            return out + (bm, _up1(br + _up1(g * np.abs(bm))))


def _rowmax(A):
    """An upper bound of max_j A[..., j] for every row: the maximum over each point's whole array
    (one contiguous reduction per point, much faster than numpy's short-row reductions; a
    maximum over more entries is still an upper bound)."""
    B = A.shape[0]
    return A.reshape(B, -1).max(axis=1).reshape((B,) + (1,) * (A.ndim - 1))


def _lastsum(A):
    """A.sum(axis=-1, keepdims=True) as einsum: numpy's reductions along short rows (a few keys)
    ran about four times slower.  A float sum in some order; every bound on it here holds for
    any order of the terms."""
    return np.einsum("...j->...", A)[..., None]


def _lastdot(A, B):
    """(A * B).sum(axis=-1, keepdims=True) as einsum: a float sum of the products A_j B_j in some
    order (with or without FMA), as _bound allows."""
    return np.einsum("...j,...j->...", A, B)[..., None]


def _maxalong(A, axis: int):
    """A.max(axis=axis, keepdims=True), exact (NaN propagates as in max): a loop of elementwise
    maxima over a short axis, which ran several times faster than numpy's short-row reduction."""
    n = A.shape[axis]
    if n > 64:
        return A.max(axis=axis, keepdims=True)
    idx = [slice(None)] * A.ndim
    idx[axis] = slice(0, 1)
    out = A[tuple(idx)].copy()
    for j in range(1, n):
        idx[axis] = slice(j, j + 1)
        np.maximum(out, A[tuple(idx)], out=out)
    return out


def _absmax(A):
    """Per point (first axis), max |A| over everything else, shaped to broadcast; exact."""
    B = A.shape[0]
    flat = A.reshape(B, -1)
    out = np.maximum(flat.max(axis=1), -flat.min(axis=1))
    return out.reshape((B,) + (1,) * (A.ndim - 1))


def lin(X: Interval, W, bias: Interval | None = None, radius_product: bool = False) -> Interval:
    """X @ W^T for an exact matrix W given as ExactMatrix.right() = (Wm^T, A^T, cs):
    |exact - fl(Xm Wm^T)|_i <= gamma_k sum_j |x_j||W_ij| + k eta + sum_j |x_j| Wr_ij
                               + sum_j xr_j (|W_ij| + Wr_ij)
                            <= max_j |x_j| cs_i + max_j xr_j as_i + k eta       (Holder)
    or, with radius_product, the last sum as the product (Xr A^T)_i itself (the read-out: a
    large radius of one row does not leak into a logit that does not read it); fl of these is
    a float sum of at most k + 1 non-negative products (_bound).
    bias <bm, br>: m = fl(fl(Xm Wm^T) + bm) adds br + u |m| (two more terms of the sum).
    W given as ExactMatrix.right(b) (X @ W^T + b): m = fl(fl(Xm Wm^T) + bm) is a dot product of
    length k + 1 (the term 1 bm_i exact), so the rounding term is gamma_{k+1} (sum_j |x_j||Wm_ij|
    + |bm_i|) + (k + 1) eta, and the bound gains bb_i >= gamma_{k+1} |bm_i| + br_i (cs with
    gamma_{k+1}): a float sum of at most k + 2 non-negative products, plus (k + 1) eta."""
    if len(W) == 6:
        Wm_T, A_T, cs, as_, bm, bb = W
    else:
        Wm_T, A_T, cs, as_ = W
        bm = None
    k = Wm_T.shape[0]
    m = _matmul(X.m, Wm_T)
    if radius_product:
        if X.r is None:
            R = np.empty_like(m)
            np.multiply(_absmax(X.m), cs, out=R)
        else:  # max|x| cs_i + (Xr A^T)_i as one product of [Xr | max|x|] with [A^T ; cs]: the same
            # float sum of k + 1 non-negative products (a broadcast product over the output cost
            # as much as the product itself)
            Xaug = np.empty(X.m.shape[:-1] + (k + 1,))
            Xaug[..., :k] = X.r
            Xaug[..., k:] = _absmax(X.m)
            R = _matmul(Xaug, np.vstack([A_T, cs]))
    else:  # the same bound for every row of a point: a radius array of shape (B, 1, d_out)
        R = _absmax(X.m) * cs
        if X.r is not None:  # Holder again: sum_j xr_j A_ij <= max_j xr_j as_i, one more product
            R += _rowmax(X.r) * as_
    if bm is not None:
        m += bm
        R += bb
        return Interval(m, _bound(R, k + 2, extra=k + 1))
    if bias is None:
        return Interval(m, _bound(R, k + 1, extra=k))
    m += bias.m
    R = R + _absmax(m) * U  # u |fl(m)| <= u max |fl(m)| over the point
    R += bias.r
    return Interval(m, _bound(R, k + 3, extra=k + 1))


def _matmul(Xm, Wm_T):
    """Xm @ Wm_T for Xm of shape (..., k): one (rows, k) x (k, e) product (a stacked product runs
    one small BLAS call per point, about twice as slow here; a sparse product of the one-hot
    first stream was slower still).  Higham's bound for length k (gamma_k, k eta) covers any
    order of each dot product's terms, any blocking and FMA, so BLAS's order is covered."""
    if Xm.ndim <= 2:
        return Xm @ Wm_T
    flat = Xm.reshape(-1, Xm.shape[-1])
    return (flat @ Wm_T).reshape(Xm.shape[:-1] + (Wm_T.shape[1],))


_HEAP_WARMED = []  # set once the allocator's mmap threshold has been raised (_warm_allocator)


def _warm_allocator():
    """Speed only, once per process.  glibc's malloc serves every block above its mmap threshold
    (128 KB at first) by a fresh mapping from the kernel and unmaps it on free, so each ~1 MB
    temporary of a 512-point chunk was page-faulted in anew: a first run measured 0.7-0.8 s
    against 0.45 s for the same work once warm.  Freeing one mapped block raises the threshold to
    its size (and the trim threshold to twice it; glibc stops at 32 MB), after which such
    temporaries come from the heap and stay mapped.  The 24 MB block is never touched (no page
    is faulted in); elsewhere it is an allocation and a free."""
    if not _HEAP_WARMED:
        np.empty(24 << 20, dtype=np.uint8)
        _HEAP_WARMED.append(True)


# chunks decided at a time (IntervalForward.decide): two where this process may use two CPUs
THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
_POOL = []  # the thread pool, made on first use
if hasattr(os, "register_at_fork"):  # a forked worker (checkers/shards.py) has none of the parent's threads:
    os.register_at_fork(after_in_child=_POOL.clear)  # its own pool then (the inherited one would never run)


def _pool():
    """Two worker threads for IntervalForward.decide's chunks.  Speed only: every chunk is decided
    on its own (no shared mutable state but the constant caches here, whose racing writes store
    equal values) and the parts are put back in chunk order, so the result is the one-thread
    result.  numpy releases the GIL in its loops and BLAS runs one thread per call
    (_one_blas_thread limits the whole process): on an idle 2-core machine a run took about 0.75
    of its one-thread time, on a loaded one about the same as one thread."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="depthcert-intervals"))
    return _POOL[0]


_BLAS = []  # a threadpoolctl controller, made on first use


def _one_blas_thread():
    """A context in which BLAS runs one thread: the products here are small (rows of a few dozen
    entries), where a second BLAS thread only waits, and on a loaded machine waits long (a
    (3584, 42) x (42, 42) product measured 0.5 ms on one thread, 8 ms on two).  Speed only."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def mul(X: Interval, Y: Interval, radius_product: bool = False) -> Interval:
    """X @ Y (batched), both intervals, contraction length k:
    |exact - fl(Xm Ym)|_ki <= gamma_k sum_j |x_kj||y_ji| + k eta + sum_j |x_kj| yr_ji
                              + sum_j xr_kj (|y_ji| + yr_ji)
                           <= ||x_k||_1 max_j (yr_ji + gamma_k |y_ji|) + ||xr_k||_1 max_j (|y_ji| + yr_ji) + k eta
                           <= ||x_k||_1 (max_j yr_ji + gamma_k max_j |y_ji|) + ||xr_k||_1 (max_j |y_ji| + max_j yr_ji) + k eta
    (Holder, then the maxima of each column taken apart), the l1 norms and maxima taken of floats
    rounded up (_bound, _up1); fl of the
    two products and their sum is a float sum of 2 non-negative products (_bound).
    radius_product: the second term as the product Xr (|Ym| + Yr) itself (tighter where a few
    large radii of X meet small entries of Y: attention weights times values)."""
    k = X.m.shape[-1]
    g = _gamma_up(k)
    m = X.m @ Y.m
    if X.m.shape[-2] == 1 and Y.m.ndim == 3 and (Y.r is None or Y.r.shape == Y.m.shape):
        # one row of X (the last layer read at the last position): the bound's sums themselves,
        # as two products with X's row, cheaper than the column maxima of Y (and never larger):
        #   gamma_k sum_j |x_j||y_ji| + sum_j |x_j| yr_ji + sum_j xr_j (|y_ji| + yr_ji)
        #     = sum_j (|x_j| + xr_j) yr_ji + sum_j (gamma_k |x_j| + xr_j) |y_ji|,
        # the coefficients rounded up (_up1); R is a float sum of 2k non-negative products
        # (_bound for 2k, plus the k eta of the rounding term)
        absY = np.abs(Y.m)
        absX = np.abs(X.m)
        b = _up1(g * absX)
        if X.r is not None:
            b = _up1(b + X.r)
        R = b @ absY
        if Y.r is not None:
            R += (absX if X.r is None else _up1(absX + X.r)) @ Y.r
        return Interval(m, _bound(R, 2 * k, extra=k))
    if radius_product and X.r is not None and Y.m.ndim == 3 and (Y.r is None or Y.r.shape[-2] == 1):
        # the same bound with fewer passes over Y when Y's radius is shared by its rows j
        # (yr_ji = yr_i): the rounding term's max_j |y_ji| by the point's max over all of |Y|
        # (larger, so still a bound: it is only multiplied by gamma_k), and
        # sum_j xr_kj (|y_ji| + yr_i) = sum_j xr_kj |y_ji| + (sum_j xr_kj) yr_i, the second term
        # bounded with the first term's ||x_k||_1 cmax_i below; R is then a float sum of k + 1
        # non-negative products (the k of Xr |Ym|, one outer product), bounded by _bound
        # (B, 1, 1); with yr, cmax >= yr_i, so ||x_k||_1 cmax_i + (sum_j xr_kj) yr_i is at most
        # (||x_k||_1 + sum_j xr_kj) cmax_i: one outer product (one float product in the sum)
        # R = Xr |Ym| + norms cmax as one product of [Xr | norms] with [|Ym| ; cmax] (a numpy
        # outer product broadcast over (B, q, d) cost as much as the product): the same float sum
        # of k + 1 non-negative products, in another order
        Yaug = np.empty(Y.m.shape[:-2] + (k + 1, Y.m.shape[-1]))
        absY = np.abs(Y.m, out=Yaug[..., :k, :])
        ypt = _rowmax(absY)
        cmax = _up1(g * ypt) if Y.r is None else _up1(Y.r + _up1(g * ypt))
        if Y.r is None:
            norms = _bound(_lastsum(np.abs(X.m)), k)  # >= ||x_k||_1
        else:  # >= ||x_k||_1 + sum_j xr_kj: a float sum of the 2k non-negative terms (pairs first)
            norms = _bound(_lastsum(np.abs(X.m) + X.r), 2 * k)
        Yaug[..., k:, :] = cmax
        Xaug = np.empty(np.broadcast_shapes(X.m.shape, X.r.shape)[:-1] + (k + 1,))
        Xaug[..., :k] = X.r
        Xaug[..., k:] = norms
        R = Xaug @ Yaug
        return Interval(m, _bound(R, k + 1, extra=k))
    # per column i: max_j (yr_ji + gamma_k |y_ji|) <= max_j yr_ji + gamma_k max_j |y_ji| (equal when
    # the radius is shared by every row j); _up1, + and * by g >= 0 are monotone, so rounding the
    # maxima up bounds the maximum of the rounded terms
    absY = np.abs(Y.m)
    ymax = _maxalong(absY, -2)
    rmax = None if Y.r is None else (Y.r if Y.r.shape[-2] == 1 else _maxalong(Y.r, -2))
    cmax = _up1(g * ymax) if rmax is None else _up1(rmax + _up1(g * ymax))
    R = _bound(_lastsum(np.abs(X.m)), k) * cmax
    if X.r is not None:
        if radius_product:  # sum_j xr_kj (|y_ji| + yr_ji) itself: k more products in the float sum
            ay = absY if Y.r is None else _up1(absY + Y.r)
            R += X.r @ ay
            return Interval(m, _bound(R, k + 1, extra=k))
        aymax = ymax if rmax is None else _up1(ymax + rmax)  # >= max_j (|y_ji| + yr_ji), rounded up
        R += _bound(_lastsum(X.r), k) * aymax
    return Interval(m, _bound(R, 2, extra=k))


def add(X: Interval, Y: Interval) -> Interval:
    """X + Y: |x + y - fl(xm + ym)| <= xr + yr + u |fl(xm + ym)| (additions do not underflow);
    that sum of three non-negative terms is bounded by _bound."""
    return _summed(X.m + Y.m, X, Y)


def sub(X: Interval, Y: Interval) -> Interval:
    """X - Y: fl(xm - ym) = fl(xm + (-ym)) (negation is exact), so add's bound holds as it is."""
    return _summed(X.m - Y.m, X, Y)


def _summed(m: np.ndarray, X: Interval, Y: Interval) -> Interval:
    """<m, bound of xr + yr + u |m|>: m = fl(xm +- ym) (add and sub)."""
    R = np.abs(m)
    R *= U
    if X.r is not None:
        R += X.r
    if Y.r is not None:
        R += Y.r
    return Interval(m, _bound(R, 3, extra=1))


def scale(X: Interval, c: tuple[float, float]) -> Interval:
    """c X for a real c enclosed by <cm, cr>: |cx - fl(cm xm)| <= |cm| xr + cr (|xm| + xr)
    + u |fl(cm xm)| + eta/2, a sum of at most 4 products of non-negative floats (_bound)."""
    cm, cr = c
    if cm == 1.0 and cr == 0.0:
        return X
    m = cm * X.m
    R = np.abs(m)
    R *= U
    if X.r is not None:
        R += abs(cm) * X.r
    if cr:
        R += cr * (np.abs(X.m) if X.r is None else np.abs(X.m) + X.r)
    return Interval(m, _bound(R, 6, extra=1))


def relu(X: Interval) -> Interval:
    """relu elementwise: unchanged where m >= r (x >= 0 surely), 0 where m <= -r (x <= 0
    surely; both exact float comparisons of finite floats), else <h/2, h/2 + eta> with
    h >= m + r (covers [0, h]); an entry with an infinite or NaN m or r (an overflow: the
    enclosure says nothing) goes to the last case, where h/2 is inf or NaN."""
    if X.r is None:
        return Interval(np.maximum(X.m, 0.0), None)
    # a non-finite m or r (an overflow, possibly mid-sum: the exact value may have either sign)
    # never settles to 0: NaN fails both comparisons, r = inf passes neither unless m = +-inf,
    # and m = -inf is excluded by hand; m = +inf passes as "positive", an inf value (as the
    # straddling branch would make it), which makes the point unsure just the same
    pos = X.m >= X.r
    settled = X.m <= -X.r
    settled &= X.m > -INF
    settled |= pos
    # settled: m where x >= 0 surely (m >= r >= 0, so max(m, 0) = m), else 0 (m <= -r <= 0)
    m = np.maximum(X.m, 0.0)
    r = np.where(pos, X.r, 0.0)
    if not settled.all():  # the straddling entries only (usually few)
        idx = np.nonzero(~settled)
        half = _hi(X.m[idx] + np.broadcast_to(X.r, X.m.shape)[idx]) * 0.5
        m[idx] = half
        r[idx] = half + ETA
    return Interval(m, r)


EXP_LO_FACTOR = 1.0 - 2 * EXP_REL  # fl(e * this) <= exp(x) when |e - exp(x)| <= EXP_REL exp(x)
EXP_HI_FACTOR = 1.0 + 2 * EXP_REL


def exp_bounds(lo, hi):
    """Floats E_lo <= exp(t) <= E_hi for every real t in [lo, hi]: below EXP_LOW the result is
    [0, EXP_TINY]; above EXP_HIGH (outside the range the EXP_REL assumption is checked on) the
    upper end is inf and the lower end 0; elsewhere np.exp's value e (relative error <= EXP_REL,
    results >= 1e-304 are normal) times (1 -+ 2 EXP_REL): e (1 - 2E)(1 + u) <= exp(t)(1 + E)(1 - 2E)
    (1 + u) < exp(t), and the mirror inequality above.  A NaN end stays NaN (the caller makes
    such weights [0, 1])."""
    el = np.exp(np.clip(lo, EXP_LOW, EXP_HIGH))
    eh = np.exp(np.clip(hi, EXP_LOW, EXP_HIGH))
    E_lo = np.where((lo < EXP_LOW) | (lo > EXP_HIGH), 0.0, el * EXP_LO_FACTOR)
    E_hi = np.where(hi < EXP_LOW, EXP_TINY, np.where(hi > EXP_HIGH, INF, eh * EXP_HI_FACTOR))
    return E_lo, E_hi


_LOW_SUMS: dict = {}  # n -> a float <= 1 - 2 gamma_n


RHO_MAX = 2.0 ** -10  # softmax_relative's limit on rho_j (larger score radii: softmax_bounds)
REL_C1 = 1.03  # softmax_relative's factor (>= 1.02 with the roundings of delta)
REL_ABS = 2.0 ** -990  # softmax_relative's absolute radius: weights below 2^-998, subnormal roundings
_REL_C0: dict = {}  # n -> softmax_relative's c0


def _rel_c0(n: int) -> float:
    """c0 for n keys: a float >= (max(K, K') (1 + tau)^2 - 1)(1 + 2^-48 + 2^-7) + 2^-54 with E = EXP_REL,
    g = gamma_n, K = (1 + E)(1 + g) / ((1 - E)(1 - u)), K' = (1 + E)(1 + u) / ((1 - E)(1 - g)),
    tau = 4 n 2^-1000 (softmax_relative; the 2^-7 part covers replacing pi by w in Delta_j)."""
    if n not in _REL_C0:
        E, g, u = Fraction(1, 2**50), gamma(n), Fraction(1, 2**53)
        K = (1 + E) * (1 + g) / ((1 - E) * (1 - u))
        K2 = (1 + E) * (1 + u) / ((1 - E) * (1 - g))
        tau = Fraction(4 * n, 2**1000)
        _REL_C0[n] = _float_up((max(K, K2) * (1 + tau) ** 2 - 1) * (1 + Fraction(1, 2**48) + Fraction(1, 2**7))
                               + Fraction(1, 2**54))
    return _REL_C0[n]


def softmax_relative(T: Interval, mask) -> Interval | None:
    """The softmax weights over the last axis as <w_j, w_j delta_j + 2^-990>, one exp per entry;
    None (the caller uses softmax_bounds) when a midpoint is not finite (or their float sum is
    not) or some rho_j below is not <= RHO_MAX (a large score radius, an inf or NaN radius).

    Shift and keys.  s = the row's largest allowed midpoint (exact); d_j = fl(m_j - s), clipped
    below at EXP_LOW (masked keys: -inf, clipped); |d_j - (m_j - s)| <= u |d_j| (a float
    difference is exact when subnormal).  rho_j = fl(fl(-u d_j) + r_j) >= (r_j + u |d_j|)(1 - u)
    - eta, so for a "large" key (d_j >= EXP_LOW) the exact t_j - s = d_j + theta_j with
    |theta_j| <= rho'_j = rho_j (1 + 2u) + eta.  A "small" key (d_j < EXP_LOW, or masked) has
    t_j - s < -699 (r_j <= rho_j <= RHO_MAX): exp(t_j - s) < 2^-1000 (0 when masked).

    Perturbation.  Over the large keys, F(theta) = log softmax_j(d + theta) has dF/dtheta_j =
    1 - pi_j, dF/dtheta_l = -pi_l (pi = softmax(d + theta)); by the mean value theorem on the
    segment to theta, |F(theta) - F(0)| <= sum_{l != j} pi_l(xi) (rho'_j + rho'_l), and
    pi_l(xi) <= pi_l(0) e^(2 RHO_MAX'), so |F(theta) - F(0)| <= Delta_j =
    e^(2 RHO_MAX') (rho'_j + p' - 2 pi_j rho'_j) with pi = pi(0), p' = sum_l pi_l rho'_l.
    Small keys multiply the exact weight by a factor in [1 / (1 + tau), 1] (tau = 4 n 2^-1000:
    their exact terms and their e_j sum to at most n 2^-1000 <= tau S / 2 below).

    Floats.  e_j = np.exp(d_j) on [EXP_LOW, 0] errs by at most E = EXP_REL relatively (a small
    key's e_j <= exp(-700)(1 + E) < 2^-1000); S = sum_j e_j >= e at the maximum (d = 0) >= 1/2;
    Z = fl(S) in S [1 - g, 1 + g] (g = gamma_n, non-negative terms, any order); w_j = fl(e_j / Z)
    = (e_j / Z)(1 + beta), |beta| <= u (a subnormal quotient errs by eta/2).  Hence pi_j / w_j
    lies in [1 / (K' (1 + tau)), K (1 + tau)] (K, K' of _rel_c0), and the exact weight W_j
    satisfies W_j / w_j in [e^-Delta_j / (K' (1 + tau)^2), e^Delta_j K (1 + tau)]:
    |W_j - w_j| <= w_j (max(K, K')(1 + tau)^2 - 1 + 1.01 Delta_j) (Delta_j <= 4 RHO_MAX, e^x - 1
    <= 1.003 x there).  Replacing pi by w and rho' by rho in Delta_j changes it by at most
    2^-7.9 (Kh - 1) + 2^-57, Kh = max(K, K')(1 + tau): pi_l = w_l (1 + eps_l) with |eps_l| <= Kh - 1,
    rho' = rho (1 + 2u) + eta, so the change is at most e^(2 RHO_MAX') (3 (Kh - 1 + 2u) RHO_MAX + 2u
    RHO_MAX) plus eta-terms (p, w_j rho_j <= RHO_MAX = 2^-10); the first part grows with n (Kh - 1 is
    about gamma_n) and is in c0 (its 2^-7 (Kh - 1) term), the second in c0's 2^-54; so with
    p_hat = _bound(fl(sum_l w_l rho_l), n) >= sum_l w_l rho_l (n non-negative products) and
    x_j = fl(fl(rho_j - 2 fl(w_j rho_j)) + p_hat) (within 2^-59 of its exact value:
    |terms| <= 3 RHO_MAX), delta_j = fl(fl(REL_C1 x_j) + c0) >= (max(K, K')(1 + tau)^2 - 1) +
    1.01 e^(2 RHO_MAX') (1 + 2^-40) (rho'_j + p' - 2 pi_j rho'_j) + the absolute slips, and
    fl(fl(w_j delta_j) + 2^-990) >= w_j delta_j (1 - u) - eta + 2^-991 covers |W_j - w_j| (the
    (1 - u) roundings are within the 2^-48 of c0 and REL_C1 = 1.03 >= 1.02 (1 + 2^-40); a small
    key's W_j and w_j both lie in [0, 2^-998]).  First order, delta_j is
    (1 - w_j) rho_j + sum_{l != j} w_l rho_l: a key holding nearly all the weight is nearly exact."""
    if not np.isfinite(T.m.sum()):  # an inf or NaN midpoint (an overflowing sum of finite ones: only slower)
        return None
    mid = T.m if mask is None else np.where(mask, T.m, -INF)
    d = mid - _maxalong(mid, -1)  # <= 0
    np.maximum(d, EXP_LOW, out=d)
    rho = d * -U
    if T.r is not None:
        rho += T.r
    if not rho.max() <= RHO_MAX:  # NaN or inf fails this too
        return None
    w = np.exp(d, out=d)
    w /= _lastsum(w)
    n = T.m.shape[-1]
    p = _bound(_lastdot(w, rho), n)
    x = w * rho
    x *= -2.0
    x += rho
    x += p
    x *= REL_C1
    x += _rel_c0(n)
    x *= w
    x += REL_ABS
    return Interval(w, x)


def softmax(T: Interval, mask) -> Interval:
    """Weights over the last axis (keys) of scaled scores T (..., q, j); mask: keys allowed
    (broadcastable) or None: softmax_relative where it applies (finite, small score radii),
    else softmax_bounds."""
    A = softmax_relative(T, mask)
    return softmax_bounds(T, mask) if A is None else A


def softmax_bounds(T: Interval, mask) -> Interval:
    """Weights over the last axis (keys) of scaled scores T (..., q, j); mask: keys allowed
    (broadcastable) or None.  With any shift s (the largest midpoint; softmax is shift-invariant
    in real arithmetic), E_j in [exp(lo_j - s), exp(hi_j - s)], Z = sum E_j, and the weight
    E_j / Z in [E_lo_j / Z_hi, E_hi_j / Z_lo] (clipped to [0, 1])."""
    lo, hi = T.bounds()
    mid = T.m if mask is None else np.where(mask, T.m, -INF)
    s = _maxalong(mid, -1)
    E_lo, E_hi = exp_bounds(_lo(lo - s), _hi(hi - s))
    if mask is not None:
        E_lo = np.where(mask, E_lo, 0.0)
        E_hi = np.where(mask, E_hi, 0.0)
    n = T.m.shape[-1]
    if n not in _LOW_SUMS:
        _LOW_SUMS[n] = _float_dn(1 - 2 * gamma(n))
    # |fl(sum) - sum| <= gamma_n sum for non-negative terms: sum >= fl (1 - gamma), <= fl / (1 - gamma)
    Z_lo = _lastsum(E_lo) * _LOW_SUMS[n]  # (1 - 2g)(1 + u) <= 1 - g
    Z_hi = _lastsum(E_hi) * _factor(n)  # F_n (1 - u) >= 1 / (1 - g)
    A_lo = np.maximum(_lo(E_lo / Z_hi), 0.0)
    A_hi = np.minimum(_hi(E_hi / Z_lo), 1.0)
    A_lo = np.where(np.isnan(A_lo), 0.0, A_lo)
    A_hi = np.where(np.isnan(A_hi), 1.0, A_hi)
    return Interval.from_bounds(A_lo, A_hi)


def hardmax(S: Interval, mask):
    """(weights, settled): keys certainly at the maximum, equal weights 1/count; `settled` is
    False (per batch row and query) where some key may or may not reach it, or where some
    allowed key's score bounds are infinite or NaN (an overflow says nothing about the score)."""
    lo, hi = S.bounds()
    finite = np.isfinite(lo) & np.isfinite(hi)  # an overflowed score (inf/NaN) may be the maximum
    if mask is not None:
        lo = np.where(mask, lo, -INF)
        hi = np.where(mask, hi, -INF)
        finite |= ~mask
    best_lo = lo.max(axis=-1, keepdims=True)
    cand = hi >= best_lo
    if mask is not None:
        cand &= mask
    count = cand.sum(axis=-1, keepdims=True)
    settled = ((count == 1) & finite.all(axis=-1, keepdims=True)).all(axis=-1)
    w = np.where(cand, 1.0 / np.maximum(count, 1), 0.0)
    return Interval(w, _up1(U * w)), settled  # 1/count is correctly rounded: error <= u |w|


class IntervalForward:
    """The model from its first softmax layer on, over batches, in certified float64 intervals."""

    def __init__(self, model: Model, first: int):
        from depthcert.checkers.norm_activation_intervals import NormMatrices, layer_extras

        self.model, self.first = model, first
        self.layers, self.extras, self.parallel = [], [], []
        ok = True
        for layer in model.layers[first:]:
            heads = []
            keys = []  # (Rotary, its W_K.right()) of this layer's rotary heads so far
            for h in layer:
                # a rotary head's scores come from its rotated queries and keys only: no W_QK floats
                qk, v = None if h.rotary is not None else ExactMatrix(h.W_QK), ExactMatrix(h.W_V)
                ok &= (qk is None or qk.finite) and v.finite
                c = None
                if h.attention == "softmax":
                    c = _scale_interval(h.scale, h.scale_sqrt_divisor)
                    ok &= c is not None
                rot = None
                if h.rotary is not None:  # queries and keys apart, rotated (checkers/rotary.py)
                    from depthcert.checkers.rotary import angle_floats

                    angle_floats(h.rotary, model.max_length)  # the cos/sin table, before any worker thread
                    # grouped-query heads share their keys: a head whose W_K, rotary dim and theta equal an
                    # earlier head's (exactly) reads that head's rotated keys (share: its index in keys)
                    share = next((i for i, (R, _) in enumerate(keys) if R.dim == h.rotary.dim
                                  and R.theta == h.rotary.theta and R.W_K.shape == h.rotary.W_K.shape
                                  and bool((R.W_K == h.rotary.W_K).all())), None)
                    WQ = ExactMatrix(h.rotary.W_Q)
                    ok &= WQ.finite
                    if share is None:
                        WK = ExactMatrix(h.rotary.W_K)
                        ok &= WK.finite
                        share = len(keys)
                        keys.append((h.rotary, WK.right()))
                    rot = (WQ.right(), keys[share][1], h.rotary, share)
                heads.append((None if qk is None else qk.right(), v.right(), h.attention, c, rot))
            mlp = None
            if layer.mlp is not None:
                W1, W2 = ExactMatrix(layer.mlp.W1), ExactMatrix(layer.mlp.W2)
                b1, b2 = ExactMatrix(np.asarray(layer.mlp.b1).reshape(1, -1)), ExactMatrix(np.asarray(layer.mlp.b2).reshape(1, -1))
                ok &= W1.finite and W2.finite and b1.finite and b2.finite
                gate = None
                if layer.mlp.gated:  # act(W_gate G + b_gate) * (W1 G + b1)
                    Wg = ExactMatrix(layer.mlp.W_gate)
                    bg = ExactMatrix(np.asarray(layer.mlp.b_gate).reshape(1, -1))
                    ok &= Wg.finite and bg.finite
                    gate = Wg.right(bg)
                mlp = (W1.right(b1), gate, W2.right(b2), None)  # the biases folded in (lin)
            inv_m = _const_interval(Fraction(1, len(layer))) if len(layer) else None
            self.layers.append((heads, layer.causal, mlp, inv_m))
            self.parallel.append(layer.parallel)  # the MLP reads the stream before the heads' update
            extra = layer_extras(layer, model)  # LayerNorm/RMSNorm, MLP activation (norm_activation_intervals)
            ok &= all(nm is None or nm.finite for nm in extra[:2])
            self.extras.append(extra)
        self.norm_final = None if model.norm_final is None else NormMatrices(model.norm_final, model.constant_index, model.dim)
        ok &= self.norm_final is None or self.norm_final.finite
        self.first_int = ([None if h.rotary is not None else _integer_form(h.W_QK) for h in model.layers[first]]
                          if first < len(model.layers) else [])
        WO = ExactMatrix(model.W_O)
        ok &= WO.finite
        self.W_O = WO.right()
        self.usable = ok
        self.decided = 0  # points certified correct so far (read by the verdict's path line)
        self._masks = {}  # n -> the causal mask

    def _exact_scores(self, li: int, hi: int, nums, den: int, q: int) -> Interval | None:
        """The first softmax layer's scores from the exact stream: W_QK = W_int 2^-e with integer
        W_int, so s = h_j^T W_int h_k 2^-e / den^2 with integer numerators `nums` = (Hf, max|H|)
        (`_numerators`: Hf holds them exactly).  When max|H|^2 sum|W_int| < 2^53 every partial
        sum of the float64 products is an integer below 2^53, hence exact; the scaling by 2^-e is
        exact and the one division by den^2 is correctly rounded (error <= u |s| + eta/2).  None
        when the form or the bound fails."""
        form = self.first_int[hi]
        if form is None or nums is None or den * den >= 2**53:
            return None
        W_int, e, total = form
        Hf, M = nums
        if M * M * total >= 2.0 ** 53:
            return None
        Qf = Hf[:, Hf.shape[1] - q:]
        S = _matmul(Qf, W_int.T) @ Hf.transpose(0, 2, 1)  # exact integers (B, q, j)
        S *= 2.0 ** -e
        if den != 1:
            S /= float(den * den)
            R = np.abs(S)
            R *= U
            R += ETA
            return Interval(S, R)
        return Interval(S, None) if 2.0 ** -e >= 2.0 ** -1000 else None

    CHUNK = 512  # points per pass: every bound is per point, and arrays this small stay in cache

    def decide(self, Hnum: np.ndarray, den: int, labels: np.ndarray):
        _warm_allocator()
        with np.errstate(all="ignore"), _one_blas_thread():  # inf/NaN make a point unsure; numpy need not warn
            B = Hnum.shape[0]
            if B <= self.CHUNK:
                return self._decide(Hnum, den, labels)
            starts = range(0, B, self.CHUNK)
            if THREADS > 1:  # chunks are independent: two at a time (results in chunk order)
                parts = list(_pool().map(lambda i: self._decide_quietly(Hnum[i:i + self.CHUNK], den,
                                                                        labels[i:i + self.CHUNK]), starts))
            else:
                parts = [self._decide(Hnum[i:i + self.CHUNK], den, labels[i:i + self.CHUNK]) for i in starts]
            return tuple(np.concatenate([p[j] for p in parts]) for j in range(4))

    def _decide_quietly(self, Hnum, den, labels):
        """_decide in a worker thread: numpy's error state is per thread (a new thread warns)."""
        with np.errstate(all="ignore"):
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
        if Hnum.dtype == object and max((abs(int(v)) for v in Hnum.flat), default=0) < 2**53:
            Hnum = Hnum.astype(np.int64)  # the big-integer prefix's numbers, as the float64 prefix gives them
        nums = _numerators(Hnum)
        X = _stream(Hnum, den, nums)
        if X is None:
            return status, lo_out, hi_out, pos_out
        ok = np.ones(B, dtype=bool)
        labelled = labels >= 0
        last_only = not labelled[:, : n - 1].any()
        if n not in self._masks:
            self._masks[n] = np.tril(np.ones((n, n), dtype=bool))
            self._masks[n].flags.writeable = False
        causal_mask = self._masks[n]  # [query k, key j]: j <= k (read only)
        # with a norm or a smooth MLP, radii entry by entry (a second product with |W|): the
        # shared Holder radius, amplified by every norm's 1/s, left most points to arb
        rp = self.model.has_norm_or_smooth
        from depthcert.checkers.norm_activation_intervals import activation, normalize, normalize_exact
        for li, (heads, causal, mlp, inv_m) in enumerate(self.layers):
            last = li == len(self.layers) - 1
            Q = X if not (last_only and last) else Interval(X.m[:, n - 1:], _last_rows(X.r, n))
            q0 = n - Q.m.shape[1]
            mask = causal_mask[q0:] if causal else None
            norm_attn, norm_mlp, act = self.extras[li]
            G, GQ = X, Q  # what the heads read: N(X) under a LayerNorm/RMSNorm
            if norm_attn is not None:
                G = normalize_exact(Hnum, den, norm_attn) if li == 0 else None  # from exact rationals
                if G is None:
                    G = normalize(X, norm_attn)
                GQ = Interval(G.m[:, q0:], G.r[:, q0:])
            Q_in = Q  # a parallel layer's MLP reads it (Layer.parallel)
            if heads:
                upd = None
                rotated_keys = {}  # share index -> R_j W_K g_j (rot[3]: heads with equal keys compute them once)
                for hi_, (qk, v, kind, c, rot) in enumerate(heads):
                    S = None
                    if rot is not None:  # (R_k W_Q g_k) . (R_j W_K g_j): the rotated queries and keys
                        from depthcert.checkers.rotary import rotate_interval

                        Wq_rot = rotate_interval(lin(GQ, rot[0], radius_product=rp), rot[2], np.arange(q0, n))
                        K_rot = rotated_keys.get(rot[3])
                        if K_rot is None:
                            K_rot = rotated_keys[rot[3]] = rotate_interval(lin(G, rot[1], radius_product=rp), rot[2],
                                                                           np.arange(n))
                        S = mul(Wq_rot, _transpose(K_rot), radius_product=rp)  # (B, q, j)
                    elif li == 0 and norm_attn is None:
                        S = self._exact_scores(li, hi_, nums, den, Q.m.shape[1])
                    if S is None:
                        Wq = lin(GQ, qk, radius_product=rp)  # rows: queries k, (W_QK h_k)^T
                        S = mul(Wq, _transpose(G), radius_product=rp)  # (B, q, j): score of key j for query k
                    if kind == "softmax":
                        A = softmax(scale(S, c), mask)
                    elif kind == "relu":
                        A = relu(S)
                        if mask is not None:
                            A = Interval(np.where(mask, A.m, 0.0), None if A.r is None else np.where(mask, A.r, 0.0))
                    else:
                        A, settled = hardmax(S, mask)
                        ok &= settled.all(axis=-1)
                    if A.m.shape[-2] < G.m.shape[-2]:
                        # fewer queries than keys (the last layer read at the last position): the
                        # weighted sum first, (A G) W_V^T, as the float forward does.  Real
                        # products associate, and mul and lin each enclose their exact product
                        # for every value of their enclosed operands, so the enclosure holds
                        # just as for A (G W_V^T), with the value products on q rows, not n.
                        term = lin(mul(A, G, radius_product=True), v, radius_product=True)
                    else:
                        term = mul(A, lin(G, v, radius_product=rp), radius_product=True)  # (B, q, d')
                    upd = term if upd is None else add(upd, term)
                Q = add(Q, scale(upd, inv_m))
            if mlp is not None:
                W1, gate, W2, b2 = mlp
                M_in = Q_in if self.parallel[li] else Q
                N = M_in if norm_mlp is None else normalize(M_in, norm_mlp)
                P = lin(N, W1, radius_product=rp)
                if gate is not None:  # a gated MLP: act(gate) * up (checkers/rotary.py)
                    from depthcert.checkers.rotary import gated_interval

                    P = gated_interval(lin(N, gate, radius_product=rp), P, act)
                else:
                    P = relu(P) if act == "relu" else activation(P, act)
                Q = add(Q, lin(P, W2, b2, radius_product=rp))
            X = Q
            ok &= _finite_points(X.m) & (X.r is None or _finite_points(X.r))
        if self.norm_final is not None:
            X = normalize(X, self.norm_final)
        L = lin(X, self.W_O, radius_product=True)  # (B, q, C) logits: radii kept apart per row
        q0 = n - L.m.shape[1]
        lab = labels[:, q0:]
        y = np.maximum(lab, 0)[..., None]  # (B, q, 1): the label's class row (0 where unlabelled)
        Ly = Interval(np.take_along_axis(L.m, y, axis=-1), np.take_along_axis(L.r, y, axis=-1))  # lin gives r
        D = sub(Ly, L)  # label minus every class (the label's own entry is 0)
        C = L.m.shape[-1]
        use = lab >= 0
        if C == 1:
            ok &= (np.isfinite(D.m) & np.isfinite(D.r)).all(axis=(1, 2))
            status[ok] = 1
            return status, lo_out, hi_out, pos_out
        # the ends before their last nudge: lo_e = fl(m - r), hi_e = fl(m + r); every end _lo(lo_e)
        # and _hi(hi_e) is finite iff _lo of the smallest lo_e and _hi of the largest hi_e are
        # (min/max propagate NaN; an inf m or r makes lo_e = -inf or hi_e = +inf or NaN; _lo and
        # _hi are non-decreasing: see _lo), as the ends were tested one by one before
        lo_e = D.m - D.r
        hi_e = D.m + D.r
        if use.all():
            lo_u, hi_u = lo_e, hi_e
        else:  # m and r finite everywhere, the ends at labelled positions
            ok &= _finite_points(D.m) & _finite_points(D.r)
            lo_u, hi_u = np.where(use[..., None], lo_e, 0.0), np.where(use[..., None], hi_e, 0.0)
        ok &= np.isfinite(_lo(lo_u.reshape(B, -1).min(axis=1))) & np.isfinite(_hi(hi_u.reshape(B, -1).max(axis=1)))
        # x > 0 surely iff m > r iff fl(m - r) > 0 (two distinct floats differ by at least eta, and a
        # positive difference rounds to a positive float), x < 0 surely iff fl(m + r) < 0; the
        # label's own entry (index y) is left out of each test (set to inf in place)
        np.put_along_axis(lo_e, y, INF, axis=-1)
        np.put_along_axis(hi_e, y, INF, axis=-1)
        pos_correct = (lo_e > 0).all(axis=-1)
        pos_wrong = (hi_e < 0).any(axis=-1)
        correct = ok & np.where(use, pos_correct, True).all(axis=1)
        wrong = ok & np.where(use, pos_wrong, False).any(axis=1)
        status[correct] = 1
        status[wrong & ~correct] = -1
        # the smallest difference's ends: min_c _lo(lo_e_c) = _lo(min_c lo_e_c) (non-decreasing)
        p_lo = _lo(lo_e.min(axis=-1))
        p_hi = _hi(hi_e.min(axis=-1))
        lo_all = np.where(use, p_lo, INF)
        lo_out = lo_all.min(axis=1)
        hi_out = np.where(use, p_hi, INF).min(axis=1)
        pos_out = q0 + lo_all.argmin(axis=1)
        return status, lo_out, hi_out, pos_out


def _integer_form(M):
    """(W_int as float64, e, sum |W_int|) with M = W_int 2^-e, W_int integers below 2^53, or None."""
    vals = [v if type(v) is Fraction else Fraction(v) for v in np.asarray(M, dtype=object).ravel()]
    e = 0
    for v in vals:
        d = v.denominator
        if d & (d - 1):
            return None
        e = max(e, d.bit_length() - 1)
    if e > 900:
        return None
    ints = []
    for v in vals:  # v 2^e = numerator 2^(e - log2 denominator), exactly; stop at the first too large
        x = v.numerator << (e - v.denominator.bit_length() + 1)
        if abs(x) >= 2**53:
            return None
        ints.append(x)
    total = sum(abs(x) for x in ints)
    return np.array(ints, dtype=np.float64).reshape(np.shape(M)), e, float(total)


def _finite_points(A):
    """Per point (first axis): every entry finite.  One reduction: a sum over finite floats is
    finite or overflows to inf; an inf or NaN entry makes it inf or NaN.  An overflowing sum
    only marks the point unsure (sound)."""
    return np.isfinite(A.reshape(A.shape[0], -1).sum(axis=1))


def _last_rows(r, n):
    """The radius of the last position (radii may be shared by every row: shape (B, 1, d))."""
    if r is None or r.shape[1] == 1:
        return r
    return r[:, n - 1:]


def _transpose(X: Interval) -> Interval:
    return Interval(np.swapaxes(X.m, -1, -2), None if X.r is None else np.swapaxes(X.r, -1, -2))


def _broadcast(b: Interval, shape) -> Interval:
    return Interval(np.broadcast_to(b.m, shape + b.m.shape), np.broadcast_to(b.r, shape + b.r.shape))


def _numerators(Hnum: np.ndarray):
    """(Hf, top): integer numerators as float64 and max |Hnum|, or None when some |value| >= 2^53
    (or the array is of big integers).  Every |v| < 2^53 converts exactly; for int64 entries
    conversion rounds monotonically and 2^53 is a float, so |fl(v)| >= 2^53 exactly when
    |v| >= 2^53: testing the converted array decides the bound (a NaN fails it too)."""
    if Hnum.dtype == object:
        if max((abs(int(v)) for v in Hnum.flat), default=0) >= 2**53:
            return None
        Hnum = Hnum.astype(np.int64)
    Hf = Hnum.astype(np.float64, copy=False)  # float64 input: integers already (the prefix's float path)
    top = float(max(Hf.max(), -Hf.min())) if Hf.size else 0.0
    return (Hf, top) if top < 2.0 ** 53 else None


def _stream(Hnum: np.ndarray, den: int, nums=False) -> Interval | None:
    """The exact stream Hnum / den as an interval (None when it does not fit float64 safely).
    Integer numerators below 2^53 (numpy int64 or Python ints) go through the same division, so
    the float64 and big-integer prefixes give the same interval.  `nums`: `_numerators(Hnum)`
    when the caller has it."""
    if nums is False:
        nums = _numerators(Hnum)
    if nums is not None and abs(den) < 2**53:
        Hf = nums[0]
        if den == 1:
            return Interval(Hf, None)  # integers below 2^53: exact
        M = Hf / float(den)  # one correctly rounded division per entry: finite (|Hf| < 2^53, den >= 1)
    else:
        if Hnum.dtype != object and (Hnum.size and np.abs(Hnum).max() >= 2**53):
            return None
        try:
            M = np.vectorize(lambda v: float(Fraction(int(v), den)), otypes=[np.float64])(Hnum)
        except OverflowError:
            return None
        if not np.isfinite(M).all():
            return None
    # a correctly rounded quotient errs by at most u |M| (at most eta/2 if it is subnormal); U |M|
    # is exact unless it is subnormal (then it loses at most eta/2): U |M| + eta covers both
    R = np.abs(M)
    R *= U
    R += ETA
    return Interval(M, R)


def _const_interval(q: Fraction) -> tuple[float, float]:
    m = float(q)
    return m, _float_up(abs(q - Fraction(m)))


def _scale_interval(scale: Fraction, divisor: Fraction) -> tuple[float, float] | None:
    """<cm, cr> enclosing c = scale / sqrt(divisor): exact comparisons of squares.  None when c
    (or scale, or divisor) is beyond float64's range, say 10^400 (the balls take every point)."""
    c2 = scale * scale / divisor  # c^2, c > 0
    if not Fraction(1, 2**1000) <= c2 <= 2**1000 or not Fraction(1, 2**1000) <= divisor <= 2**1000 \
            or scale > 2**1000:
        return None
    cm = float(scale) / float(np.sqrt(float(divisor)))
    lo, hi = cm, cm
    while lo > 0 and Fraction(lo) ** 2 > c2:
        lo = float(np.nextafter(lo, 0.0))
    while Fraction(hi) ** 2 < c2:
        hi = float(np.nextafter(hi, INF))
    return cm, _float_up(max(Fraction(hi) - Fraction(cm), Fraction(cm) - Fraction(lo)))
