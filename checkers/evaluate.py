"""Exact batched evaluation of a `Model` whose every value is rational (relu and hardmax
attention, causal masks, MLPs, a constant row; softmax models go to checkers/softmax_balls.py).

The model is put over a common denominator layer by layer, so that the whole forward pass
runs on integers.  With H = G/g (g an int fixed by the weights, never by the input):

  attention, m heads, integer A_i = a_i W_QKi and B_i = b_i W_Vi.  Head i's weights are
  N_i / alpha_i with an integer matrix N_i:
      relu     N_i = relu(G^T A_i G) (masked),  alpha_i = g^2 a_i   (relu is homogeneous)
      hardmax  N_i[j, k] = Lam / |M_k| on the argmax set M_k,  alpha_i = Lam = lcm(1..max_length)
               (the argmax of G^T A_i G is the argmax of the true scores: g^2 a_i > 0)
  With Q = lcm_i(alpha_i b_i):   G' = m Q G + sum_i (Q / (alpha_i b_i)) B_i G N_i,   g' = m g Q.
  For relu heads Q = g^2 lcm_i(a_i b_i), i.e. g' = D g^3 with D = m lcm_i(a_i b_i).

  MLP, integer P1 = q1 W1, beta1 = q1 b1, P2 = q2 W2, beta2 = q2 b2 (q1, q2 common denominators):
      Z = relu(P1 G + g beta1 1^T),   G' = q1 q2 G + P2 Z + q1 g beta2 1^T,   g' = q1 q2 g.

The logits are C G'_k / (c g') at the last column k (or every column).

Fast path: before any point is evaluated, `magnitude_bound` carries a per-row bound on |G|
through every product using |A|, |B|, |P|, |beta|, |C| (inputs are 0/1 with one token, one
position and the optional constant per column).  Every partial sum of every dot product is
bounded by the same sum of absolute values, so if the bound is below 2^53 every float64
operation is an exact integer operation, and comparisons (relu signs, hardmax maxima) are
exact.  Otherwise the pass runs on Python integers (numpy object arrays): slower, always exact.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from math import gcd, lcm

import numpy as np

from depthcert.checkers.model import Model

FLOAT_EXACT_LIMIT = 2**53
MAX_DENOMINATOR_BITS = 2**24  # 16 million bits (2 MB) per number: deeper models are refused
EXACT_MEMORY_BYTES = 256 * 2**20  # big integers in flight per sub-batch of the exact path
# Models whose values grow doubly exponentially in depth (a relu layer can cube them): a layer's
# products take time growing as bits^1.6 (one point of a layer at 1.7 million bits: seconds; at 5
# million: a minute).  magnitude_bound gives up once its bound passes MAX_STREAM_BITS // 3 bits
# before a layer and returns BOUND_UNKNOWN (no layer from there on is proven below 2^53); the
# exact path then checks its actual numbers before every layer (_run) and ends the run with one
# line (BadInput) when one passes MAX_STREAM_BITS // 3 bits.
MAX_STREAM_BITS = 2**22
BOUND_UNKNOWN = 1 << (MAX_STREAM_BITS + 1)


def _int_matrix(M: np.ndarray) -> tuple[np.ndarray, int]:
    """(integer object array N, denominator q) with M = N / q (any shape; entries ints or
    Fractions, read through .numerator / .denominator without building new Fractions).  Entries
    that are the same object (a builder's shared zero, one Fraction per distinct value) are
    converted once: the entries are grouped by `_same_objects`, with no Python call per entry."""
    num, which, q = _int_parts(M)
    return num[which].reshape(np.shape(M)), q


def _int_parts(M: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(numerators of the distinct entry objects (object array), each entry's index into them (flat),
    q): `_int_matrix`'s N is num[which] reshaped to M's shape."""
    flat = np.ascontiguousarray(M, dtype=object).ravel()
    if not flat.size:
        return np.empty(0, dtype=object), np.zeros(0, dtype=np.intp), 1
    first, which = _same_objects(flat)
    objs = flat[first].tolist()
    num = np.empty(len(objs), dtype=object)
    if set(map(type, objs)) <= {int, Fraction}:
        nums = [v.numerator for v in objs]
        dens = [v.denominator for v in objs]
        if set(map(type, nums)) | set(map(type, dens)) <= {int}:  # (a Fraction of numpy ints holds numpy ints)
            q = lcm(*set(dens))
            num[:] = [n * (q // d) for n, d in zip(nums, dens)]
            return num, which, q
    distinct = [v if isinstance(v, (int, Fraction)) else Fraction(v) for v in objs]
    q = lcm(*{int(v.denominator) for v in distinct})
    num[:] = [int(v.numerator) * (q // int(v.denominator)) for v in distinct]  # int(): a numpy int's Fraction
    return num, which, q


def _int64_or_none(num: np.ndarray, which: np.ndarray, shape) -> np.ndarray | None:
    """`_int_matrix`'s N as int64 (from its parts, one gather) when every entry has |v| < 2^63, else None."""
    vals = num.tolist()
    if vals and not (max(vals) < 2**63 and min(vals) > -(2**63)):
        return None
    return np.array(vals, dtype=np.int64)[which].reshape(shape)


def _int_matrix64(M: np.ndarray) -> tuple[np.ndarray, int, np.ndarray | None]:
    """`_int_matrix` and its N as int64 (`_int64_or_none`: None past int64), from one conversion."""
    num, which, q = _int_parts(M)
    return num[which].reshape(np.shape(M)), q, _int64_or_none(num, which, np.shape(M))


def _below(M: np.ndarray, M64: np.ndarray | None, limit: int) -> bool:
    """Every entry of the integer matrix M has |v| < limit, read from its int64 form M64 (the same
    integers, each |v| < 2^63, so abs does not wrap) when given."""
    if M64 is None:
        return _all_below([M], limit)
    return not M64.size or int(np.abs(M64).max()) < limit


def _same_objects(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of one entry per distinct object, each entry's group) of a contiguous 1-D object array,
    entries grouped by identity.  An object array is a table of object pointers (numpy's layout; the
    array holds a reference to each, so none moves or dies meanwhile): two entries hold the same
    object exactly when their pointers are equal, so the table, read as unsigned integers, is
    grouped by sorting instead of one id() call and one dict look-up per entry.  A few distinct
    objects (a builder's shared zero and a handful of values) are then found by one equality pass
    each; more by the sorting permutation."""
    table = (ctypes.c_size_t * flat.size).from_address(flat.ctypes.data)
    pointers = np.frombuffer(table, dtype=np.uintp).copy()
    ordered = np.sort(pointers)
    starts = np.empty(len(ordered), dtype=bool)  # where a new pointer begins in sorted order
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    distinct = ordered[starts]
    if len(distinct) <= _FEW_OBJECTS:
        which = np.zeros(len(pointers), dtype=np.intp)
        first = np.empty(len(distinct), dtype=np.intp)
        for k, ptr in enumerate(distinct):
            hit = pointers == ptr
            if k:
                which[hit] = k
            first[k] = int(hit.argmax())
        return first, which
    order = np.argsort(pointers)
    which = np.empty(len(pointers), dtype=np.intp)
    which[order] = np.cumsum(starts) - 1
    return order[starts], which


_FEW_OBJECTS = 8  # up to this many distinct objects, one equality pass each (SC's read-out: 2)


def _all_below(mats, limit: int) -> bool:
    """Every entry of these integer object arrays has |v| < limit (max and min in C, no abs per entry)."""
    for M in mats:
        flat = np.asarray(M, dtype=object).ravel().tolist()
        if flat and not (max(flat) < limit and -min(flat) < limit):
            return False
    return True


def hardmax_lcm(max_length: int) -> int:
    """Lam = lcm(1..max_length): Lam / |M_k| is an integer for every possible argmax count."""
    return lcm(*range(1, max_length + 1))


@dataclass(frozen=True)
class IntMLP:
    P1: np.ndarray  # (d_ff, d') integer object matrix
    beta1g: np.ndarray  # (d_ff,) g * beta1, g the denominator entering the MLP
    P2: np.ndarray  # (d', d_ff)
    beta2g: np.ndarray  # (d',) q1 * g * beta2
    x_scale: int  # q1 * q2
    beta1: np.ndarray = None  # (d_ff,) q1 * b1, before the factor g (renormalized runs rescale it)
    beta2: np.ndarray = None  # (d',) q2 * b2
    q1: int = 1


@dataclass(frozen=True)
class IntLayer:
    A: tuple[np.ndarray, ...]  # integer object matrices, one per head
    B: tuple[np.ndarray, ...]
    coef: tuple[int, ...]  # Q / (alpha_i b_i)
    D: int  # m * lcm_i(a_i b_i): for relu-only layers g' = D g^3
    kinds: tuple[str, ...] = ()  # relu | hardmax per head
    causal: bool = False
    x_scale: int = 1  # m Q = g_attention_out / g_in
    lam: int = 1  # hardmax weight denominator
    mlp: IntMLP | None = None
    g_out: int = 1  # denominator after the whole layer
    dens: tuple[tuple[int, int], ...] = ()  # (a_i, b_i) per head: W_QK = A / a, W_V = B / b
    # A and B as int64 (the same integers), per head, where every entry has |v| < 2^63 (else None);
    # empty: not known
    A64: tuple = ()
    B64: tuple = ()


@dataclass(frozen=True)
class IntegerModel:
    """The model over common denominators, ready for integer evaluation."""

    model: Model
    layers: tuple[IntLayer, ...]
    C: np.ndarray
    c: int
    bound: int  # proven bound on every intermediate magnitude of the integer pass (or BOUND_UNKNOWN)
    use_float: bool
    proven_layers: int = 0  # the first layers whose values are all proven below 2^53 a priori
    C64: np.ndarray | None = None  # C as int64 when every entry has |v| < 2^63 (the same integers)

    @property
    def classifier_below_2_53(self) -> bool:
        """Every entry of C has |v| < 2^53 (float64 holds it exactly)."""
        if self.C64 is None:
            return False if self.C.size else True
        return not self.C64.size or int(np.abs(self.C64).max()) < FLOAT_EXACT_LIMIT

    @property
    def bounded(self) -> bool:
        """The a-priori bound was computed (not given up at BOUND_UNKNOWN)."""
        return self.bound < BOUND_UNKNOWN

    def as_float(self, M: np.ndarray) -> np.ndarray:
        return np.array(M, dtype=np.float64)


def integerize(model: Model, deadline: tuple | None = None) -> IntegerModel:
    """The integer model; deadline (perf_counter time, seconds, what): the a-priori bound stops
    (BadInput) once it has passed (--max-seconds: weights of thousands of digits make it slow)."""
    if model.has_softmax:
        raise ValueError("softmax attention is not rational: evaluate with checkers.softmax_balls")
    if not model.is_rational:
        raise ValueError("LayerNorm/RMSNorm and gelu/silu are not rational: decide with checkers.accuracy")
    lam = hardmax_lcm(model.max_length)
    layers = []
    g = 1
    for li, layer in enumerate(model.layers):
        if g.bit_length() > MAX_DENOMINATOR_BITS // 3:  # the next layer cubes it
            from depthcert.checkers.errors import BadInput

            raise BadInput(f"exact evaluation would need a common denominator of more than {MAX_DENOMINATOR_BITS:,} bits "
                           f"from layer {li + 1} on (denominators grow threefold per ReLU layer with rational weights); "
                           "use fewer layers")
        m = len(layer)
        As, Bs, abs_, alphas_b, dens = [], [], [], [], []
        A64s, B64s = [], []
        for head in layer:
            A, a, A64 = _int_matrix64(head.W_QK)
            B, b, B64 = _int_matrix64(head.W_V)
            As.append(A)
            Bs.append(B)
            A64s.append(A64)
            B64s.append(B64)
            abs_.append(a * b)
            dens.append((a, b))
            alphas_b.append(g * g * a * b if head.attention == "relu" else lam * b)
        if m:
            D = m * lcm(*abs_)
            Q = lcm(*alphas_b)
            coef = tuple(Q // ab for ab in alphas_b)
            x_scale = m * Q
        else:
            D, coef, x_scale = 1, (), 1
        g = g * x_scale
        mlp = None
        if layer.mlp is not None:
            P1, q1 = _int_matrix(np.concatenate([layer.mlp.W1, layer.mlp.b1[:, None]], axis=1))
            P2, q2 = _int_matrix(np.concatenate([layer.mlp.W2, layer.mlp.b2[:, None]], axis=1))
            mlp = IntMLP(P1[:, :-1], P1[:, -1] * g, P2[:, :-1], P2[:, -1] * (q1 * g), q1 * q2,
                         P1[:, -1], P2[:, -1], q1)
            g = g * q1 * q2
        layers.append(IntLayer(tuple(As), tuple(Bs), coef, D, tuple(h.attention for h in layer),
                               layer.causal, x_scale, lam, mlp, g, tuple(dens), tuple(A64s), tuple(B64s)))
    num, which, c = _int_parts(model.W_O)
    C = num[which].reshape(model.W_O.shape)
    C64 = _int64_or_none(num, which, model.W_O.shape)
    per_layer: list = []
    bound = magnitude_bound(model, layers, C, per_layer, deadline, C64)
    # The bound skips weights that only ever meet exact zeros (rows or columns no input reaches),
    # which is sound only while such weights stay finite in float64: 0 * inf is NaN (a weight
    # pair of 2^1023 in an unreached row gave a wrong verdict), and ints >= 2^1024 do not convert.
    # Every integer weight below 2^53 keeps each unbounded product finite and each zero exact.
    mats = [M for L in layers if L.mlp for M in (L.mlp.P1, L.mlp.beta1g, L.mlp.P2, L.mlp.beta2g)]
    im = IntegerModel(model, tuple(layers), C, c, bound, False, 0, C64)
    small = im.classifier_below_2_53 and all(_below(M, M64, FLOAT_EXACT_LIMIT) for L in layers
                                             for M, M64 in zip(L.A + L.B, L.A64 + L.B64))
    small = small and _all_below(mats, FLOAT_EXACT_LIMIT)
    small = small and (lam < FLOAT_EXACT_LIMIT or not any("hardmax" in L.kinds for L in layers))
    # layers whose every value is proven below 2^53 a priori: a checked run needs no abs pass there
    proven = 0
    while proven < len(per_layer) and per_layer[proven] < FLOAT_EXACT_LIMIT:
        proven += 1
    return replace(im, use_float=bound < FLOAT_EXACT_LIMIT and small, proven_layers=proven)


def _absmat(M: np.ndarray) -> np.ndarray:
    """|M| entry by entry, exact (an object array stays one: numpy calls abs on each entry in C)."""
    return np.abs(M if M.dtype == object else M.astype(object))


def _vmax(v) -> int:
    return int(max(v, default=0))


def _check_deadline(deadline: tuple | None) -> None:
    if deadline is not None and time.perf_counter() > deadline[0]:
        from depthcert.checkers.budget import time_limit_passed

        raise time_limit_passed(deadline[2], deadline[1])


def magnitude_bound(model: Model, layers, C: np.ndarray, per_layer: list | None = None,
                    deadline: tuple | None = None, C64: np.ndarray | None = None) -> int:
    """An upper bound on |every partial sum| in the integer forward pass, for any input, or
    BOUND_UNKNOWN once the bound passes MAX_STREAM_BITS // 3 bits before a layer (that
    layer and every later one: BOUND_UNKNOWN in per_layer).

    hb[f] bounds |G[f, j]| over all columns j and all inputs; n = max_length columns.
    per_layer, if given, receives the running bound after each layer (the stream alone).
    deadline (perf_counter time, seconds, what): checked before every head and MLP (BadInput).
    C64: C as int64 (`IntegerModel.C64`), if known: the logits' bound is then taken in int64.
    """
    n = model.max_length
    hb = np.zeros(model.dim, dtype=object)
    hb[: model.input_rows] = 1
    worst = 1
    for li, layer in enumerate(layers):
        if worst.bit_length() > MAX_STREAM_BITS // 3:  # the next layer can cube it
            if per_layer is not None:
                per_layer.extend([BOUND_UNKNOWN] * (len(layers) - li))
            return BOUND_UNKNOWN
        if layer.A:
            new = hb * layer.x_scale
            none = (None,) * len(layer.A)
            hs = hb.tolist()
            for A, B, coef, kind, A64, B64 in zip(layer.A, layer.B, layer.coef, layer.kinds or ("relu",) * len(layer.A),
                                                  layer.A64 or none, layer.B64 or none):
                _check_deadline(deadline)
                smax = _abs_form(A, A64, hb, hs)  # |h_j^T A h_k| and all its partial sums
                vb = _abs_image(B, B64, hb, hs)  # |B h_j| per row
                # relu: sum_j relu(s_jk) |h_j| <= n smax hb; hardmax: sum_j N[j, k] = lam
                mass = n * smax if kind == "relu" else layer.lam
                new = new + vb * (coef * mass)
                worst = max(worst, smax, _vmax(vb) * mass * coef, mass)
            hb = new
            worst = max(worst, _vmax(hb))
        if layer.mlp is not None:
            _check_deadline(deadline)
            mlp = layer.mlp
            zb = _absmat(mlp.P1) @ hb + _absmat(mlp.beta1g)  # pre-activation, all partial sums
            hb = hb * mlp.x_scale + _absmat(mlp.P2) @ zb + _absmat(mlp.beta2g)
            worst = max(worst, _vmax(zb), _vmax(hb))
        if per_layer is not None:
            per_layer.append(worst)
    return max(worst, _abs_matvec_max(C, hb, C64))


def _abs_form(A: np.ndarray, A64: np.ndarray | None, hb: np.ndarray, hs: list) -> int:
    """hb^T |A| hb exactly (hb >= 0, hs its entries as a list): in int64 when A64 (A as int64) is given
    and max|A| sum(hb)^2 < 2^63 (every partial sum of these non-negative terms is below it: no wrap),
    else on Python integers."""
    if A64 is not None and A64.size:
        total, top = sum(hs), int(np.abs(A64).max())
        if top == 0:
            return 0
        if top * total * total < 2**63:  # (top >= 1: every hb entry is below 2^63 too)
            h = np.array(hs, dtype=np.int64)
            return int(h @ np.abs(A64) @ h)
    return int(hb @ _absmat(A) @ hb)


def _abs_image(B: np.ndarray, B64: np.ndarray | None, hb: np.ndarray, hs: list) -> np.ndarray:
    """|B| hb exactly, as an object array of Python ints (hb >= 0, hs its entries as a list): in int64
    when B64 (B as int64) is given and max|B| sum(hb) < 2^63 (no partial sum wraps), else on Python
    integers."""
    if B64 is not None and B64.size:
        top = int(np.abs(B64).max())
        if top == 0 or top * sum(hs) < 2**63:  # (top >= 1: every hb entry is below 2^63 too)
            out = np.empty(B64.shape[0], dtype=object)
            if top == 0:
                out[:] = 0
                return out
            out[:] = (np.abs(B64) @ np.array(hs, dtype=np.int64)).tolist()
            return out
    return _absmat(B) @ hb


def _abs_matvec_max(C: np.ndarray, hb: np.ndarray, C64: np.ndarray | None) -> int:
    """max of |C| @ hb (hb >= 0), exactly: in int64 when C64 (C as int64) is given and
    max|C| sum(hb) < 2^63 (every partial sum of these non-negative terms is below it: no wrap),
    else on Python integers."""
    if C64 is not None and C64.size and len(hb):
        top = int(np.abs(C64).max())
        if top == 0:
            return 0
        if top * int(sum(hb.tolist())) < 2**63:
            return int((np.abs(C64) @ np.array(hb.tolist(), dtype=np.int64)).max())
    return _vmax(_absmat(C) @ hb)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) if x.dtype != object else np.where(x > 0, x, 0)


def embed_batch(model: Model, token_ids: np.ndarray, dtype) -> np.ndarray:
    """G0 of shape (B, d', n): one-hot tokens then one-hot positions (the paper's H0 per point)."""
    return embed_rows(model, token_ids, dtype).transpose(0, 2, 1)


def embed_rows(model: Model, token_ids: np.ndarray, dtype) -> np.ndarray:
    """X0 = H0^T of shape (B, n, d'): row j is token j's one-hot plus position j's one-hot
    (plus the constant direction when the model has one)."""
    B, n = token_ids.shape
    V = len(model.vocab)
    X = np.zeros((B, n, model.dim), dtype=np.float64 if dtype == np.float64 else np.int64)
    b = np.repeat(np.arange(B), n)
    pos = np.tile(np.arange(n), B)
    X[b, pos, token_ids.reshape(-1)] = 1
    X[b, pos, V + pos] = 1
    if model.constant_row:
        X[:, :, model.constant_index] = 1
    return X if dtype != object else X.astype(object)


def _rowmul(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """X @ M for X of shape (B, n, d), stacked (measured here: several times faster for these
    small d than one (B*n, d) x (d, e) BLAS call, which is also at the mercy of BLAS threads)."""
    if X.dtype == object:
        return np.dot(X, M)
    return np.matmul(X, M)


def causal_mask(n_keys: int, queries: np.ndarray) -> np.ndarray:
    """(n_keys, len(queries)) booleans: key j is visible to query k iff j <= k."""
    return np.arange(n_keys)[:, None] <= np.asarray(queries)[None, :]


def hardmax_weights(S: np.ndarray, visible: np.ndarray | None, lam: int) -> np.ndarray:
    """S (B, n_keys, n_queries) exact scores -> integer weights lam/|M_k| on each argmax set M_k
    (over the visible keys), 0 elsewhere; every column sums to lam."""
    if visible is not None:
        low = (S.min() - 1 if S.size else 0) if S.dtype == object else -np.inf
        S = np.where(visible[None, :, :], S, low)
    top = S.max(axis=1, keepdims=True)  # (B, 1, n_q)
    at_max = S == top
    if visible is not None:
        at_max &= visible[None, :, :]
    count = at_max.sum(axis=1, keepdims=True)  # >= 1: every query sees at least itself / one key
    if S.dtype == object:
        share = np.vectorize(lambda c: lam // int(c), otypes=[object])(count)
        return np.where(at_max, share, 0)
    return np.where(at_max, np.floor_divide(lam, count), 0).astype(S.dtype)


class _Exceeded(Exception):
    """A checked float64 batch met a value whose magnitude may reach 2^53: redo it exactly."""


def _limit(Xa) -> None:
    # `not <`: a NaN maximum (an inf * 0 somewhere) must not pass as small
    if Xa is not None and Xa.size and not float(Xa.max()) < FLOAT_EXACT_LIMIT:
        raise _Exceeded


def _float(M):
    """M as C-ordered float64 (a transposed operand in F order makes matmul ~10x slower)."""
    return np.array(M, dtype=np.float64, order="C")


_BLAS = []  # a threadpoolctl controller, made on first use


def _one_blas_thread():
    """A context in which BLAS runs one thread: the float products here are small (rows of a few dozen
    entries), where a second BLAS thread mostly waits, and on a loaded machine waits long (tm heads
    l = 6: 2.0-3.4 s on one thread, 4.1-5.3 s on two, same machine, alternating).  Speed only."""
    if not _BLAS:
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


# batches evaluated at a time (in_order): two where this process may use two CPUs
THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def in_order(ev: "Evaluator", fn, items, threads: int | None = None, count: int | None = None):
    """(item, fn(item)) for each item, in the items' order, with up to `threads` (THREADS by default)
    items' fn running at once in worker threads when ev runs on float64 (numpy releases the GIL in
    its loops; big-integer batches hold it, so they run one at a time).  Speed only: each batch is
    evaluated on its own (the Evaluator's shared state is its counts, taken under a lock, and
    read-only weights) and the results come back in order, so every caller sees the one-thread
    sequence; the one-BLAS-thread limit is held once around the whole loop.  A consumer that stops
    early (a counterexample) waits for at most `threads` batches in flight.  count: how many items
    there are, when known (one item: no thread is started)."""
    threads = THREADS if threads is None else threads
    if threads < 2 or (count is not None and count < 2) or not (getattr(ev, "use_float", False)
                                                                or getattr(ev, "checked", False)):
        for item in items:
            yield item, fn(item)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    limit = _one_blas_thread()
    limit.__enter__()
    ev._blas_held = True
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="depthcert-batches")
    pending: deque = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(fn, item)))
            if len(pending) >= threads:
                first, fut = pending.popleft()
                yield first, fut.result()
        while pending:
            first, fut = pending.popleft()
            yield first, fut.result()
    finally:
        for _, fut in pending:
            fut.cancel()
        pool.shutdown(wait=True)  # no worker runs past this point: then the limit is left
        ev._blas_held = False
        limit.__exit__(None, None, None)


def balanced_batch(ev: "Evaluator", n_points: int, batch_size: int, threads: int | None = None) -> int:
    """A batch size of at most batch_size that splits n_points (more than one batch of them) into a
    multiple of `threads` batches of near-equal size where in_order runs them in threads (the last round's threads all busy: 3,125
    points in two batches of 1,563 rather than 2,048 and 1,077); batch_size otherwise.  Verdicts do
    not depend on the batch size."""
    threads = THREADS if threads is None else threads
    if threads < 2 or n_points <= batch_size or batch_size < 1 or not (getattr(ev, "use_float", False)
                                                                       or getattr(ev, "checked", False)):
        return batch_size  # (one batch: no threads, whose start costs more than small runs take)
    n_batches = -(-n_points // batch_size)
    n_batches = -(-n_batches // threads) * threads
    return max(1, -(-n_points // n_batches))


class Evaluator:
    """Batched exact logits of one model.  `logits(ids)` -> (numerators (B, C) int, denominator)
    at the last position; `logits_all(ids)` -> (numerators (B, n, C), denominator);
    `margins_last(ids, label rows)` -> (margin numerators (B,), denominator, numerators or None).

    Works on X = H^T (B, n, d'), so that every product with a weight matrix is a single large
    matrix product: scores S = (X A) X^T, and since W_V is linear, sum_j w_jk W_V x_j =
    W_V (sum_j w_jk x_j), i.e. out^T = (W^T X) B^T.  For last-position logits the last layer
    only computes the last query.

    Three ways to run a batch, every one exact:
      float     the a-priori `magnitude_bound` is below 2^53: float64 throughout (proven before
                any point is seen);
      checked   the a-priori bound fails but every integer weight is below 2^53: float64, and
                alongside, the same products on absolute values (|X|, |A|, ...).  Every abs
                result bounds every partial sum of the signed products (in any order), and a
                float sum of non-negative exact integers that reaches 2^53 stays >= 2^53 under
                rounding; so if every abs result of the batch is below 2^53, every float value
                was an exact integer.  Otherwise this batch alone is redone on big integers.
                Before each layer the batch is renormalized (`_run_renormalized`): stream and
                denominator divided by their gcd, so deep models with rational weights, whose
                static denominator grows threefold per layer, stay small;
      exact     Python integers (numpy object arrays).
    A classifier with entries of 2^53 or more (Lemma 3's can have thousand-bit denominators) is
    applied exactly, once per distinct hidden vector (`margins_last`), keeping only what a
    margin needs, so no batch holds B x C thousand-bit logits.
    """

    def __init__(self, model: Model, force_exact: bool = False, deadline: tuple | None = None):
        self.im = integerize(model, deadline)
        self.model = model
        self.use_float = self.im.use_float and not force_exact
        self.checked = not self.use_float and not force_exact and _checkable(self.im)
        self.batches = {"float": 0, "checked": 0, "exact": 0}
        self._lock = threading.Lock()  # the counts above, from worker threads (in_order)
        self._blas_held = False  # in_order holds the one-BLAS-thread limit for the whole loop
        self._fused_first = None  # the checked path's proven first layer, fused (below)
        self._deadline = None  # stop_after
        self._exact_w = self._weights(lambda M: M)
        # The MLP's static bias terms (b * g, g the model's denominator) are proven below 2^53 on the
        # float path only; the checked path recomputes them per batch (`layer_constants`, checked
        # there) and never reads the static ones, which can pass any float (a deep model's g has
        # thousands of bits): they are not converted.
        if self.use_float:
            self._float_w = self._weights(_float, conv64=_float)
            self._fused = [_fused_weights(L) for L in self.im.layers]
            # a later layer's products on the columns its input stream can reach (`_stream_supports`)
            for li, sup in enumerate(_stream_supports(model, self.im.layers)):
                if li and sup is not None and self._fused[li] is not None:
                    self._fused[li] = _on_support(self._fused[li], sup, model.dim)
        elif self.checked:
            self._float_w = self._weights(_float, static=False, conv64=_float)
            self._abs_w = self._weights(lambda M: _float(_absmat(M)), static=False, conv64=lambda M: _float(np.abs(M)))
            # the first layer, when the a-priori bound proves it (the stream is then the one-hot
            # embedding over g = 1, its scalars the static ones): fused as on the proven path
            self._fused_first = _fused_weights(self.im.layers[0]) if self.im.proven_layers >= 1 else None
        C = self.im.C
        self.big_classifier = not self.im.classifier_below_2_53
        self._CT = C.T
        CT = C.T if self.im.C64 is None else self.im.C64.T  # the same integers (int64: a C-level conversion)
        self._CTf = None if self.big_classifier else _float(CT)
        # |C^T| only where the logits are checked per batch (the proven path's a-priori bound covers them)
        self._CTa = None if self.big_classifier or self.use_float else _float(_absmat(CT))
        self._rows_cache: dict = {}
        self.denominator = self.im.c * (self.im.layers[-1].g_out if self.im.layers else 1)

    def _weights(self, conv, static: bool = True, conv64=None):
        """Per layer: (A^T per head, B^T per head, coef, IntLayer, MLP pieces or None), converted;
        static=False leaves the MLP's static bias terms out (None).  conv64, if given, converts a
        head's int64 form (`IntLayer.A64`, `B64`: the same integers) in its place where it has one."""
        out = []
        for L in self.im.layers:
            mlp = None
            if L.mlp is not None:
                b1, b2 = (conv(L.mlp.beta1g), conv(L.mlp.beta2g)) if static else (None, None)
                mlp = (conv(L.mlp.P1.T), b1, conv(L.mlp.P2.T), b2, L.mlp.x_scale)
            none = (None,) * len(L.A)

            def one(M, M64):
                return conv(M.T) if conv64 is None or M64 is None else conv64(M64.T)
            out.append(([one(A, A64) for A, A64 in zip(L.A, L.A64 or none)],
                        [one(B, B64) for B, B64 in zip(L.B, L.B64 or none)], L.coef, L, mlp))
        return out

    def _count(self, kind: str) -> None:
        with self._lock:
            self.batches[kind] += 1

    def _blas(self):
        """One BLAS thread for this batch's products (in_order sets it once for all its threads:
        threadpoolctl's limit is process-wide, entered and left here per batch it would be restored
        by one thread while another still runs)."""
        return contextlib.nullcontext() if self._blas_held else _one_blas_thread()

    @property
    def path(self) -> str:
        if self.use_float:
            return "float64 (proven < 2^53)"
        if self.checked:
            n, e = self.batches["checked"], self.batches["exact"]
            text = "float64, checked < 2^53 per batch"
            return text + (f" ({e} of {n + e} batches on big integers)" if e else "")
        return "exact big integers"

    # ---------------------------------------------------------------- the stream

    def _stream(self, token_ids: np.ndarray, last_only: bool) -> tuple[np.ndarray, int]:
        """(X, k): the final residual stream X (B, n or 1, d'), exact (float64 holding exact
        integers, or object arrays of Python ints), over the denominator g_final / k: a checked
        batch is renormalized layer by layer (`_run_renormalized`), so its denominator divides
        the model's, and numerators over the model's denominator are X times the integer k."""
        token_ids = np.asarray(token_ids)
        if token_ids.ndim != 2:
            raise ValueError("token_ids must be (batch, length)")
        if token_ids.shape[1] > self.model.max_length:
            raise ValueError(f"sequence length {token_ids.shape[1]} exceeds max_length {self.model.max_length}")
        V = len(self.model.vocab)
        if token_ids.size and (int(token_ids.min()) < 0 or int(token_ids.max()) >= V):
            # an id outside the vocabulary has no one-hot row (-1 would index the last column)
            raise ValueError(f"token ids must lie in 0 .. {V - 1} (the model's vocabulary), got "
                             f"{int(token_ids.min())} .. {int(token_ids.max())}")
        if self.use_float:
            self._count("float")
            with self._blas():
                return _run(self.model, token_ids, last_only, self._float_w, None, np.float64, fused=self._fused), 1
        if self.checked:
            try:
                with self._blas():
                    X, g = _run_renormalized(self.model, token_ids, last_only, self._float_w, self._abs_w, self.im,
                                             self._fused_first)
                self._count("checked")
                g_final = self.im.layers[-1].g_out if self.im.layers else 1
                return X, g_final // g
            except _Exceeded:
                pass
        self._count("exact")
        step = self.exact_batch_points(token_ids.shape[1])
        # no a-priori bound: sizes (and a time limit, if set) checked per layer
        cap = None if self.im.bounded else MAX_STREAM_BITS
        deadline = self._deadline
        if len(token_ids) <= step:
            return _run(self.model, token_ids, last_only, self._exact_w, None, object, max_bits=cap,
                        deadline=deadline), 1
        # big integers in flight: sub-batches sized to the memory budget, results joined
        parts = [_run(self.model, token_ids[lo:lo + step], last_only, self._exact_w, None, object, max_bits=cap,
                      deadline=deadline)
                 for lo in range(0, len(token_ids), step)]
        return np.concatenate(parts, axis=0), 1

    def expect_points(self, count: int) -> None:
        """The run will evaluate about `count` points (speed only: sizes the first layer's pair table)."""
        for fw in (self._fused[0] if self.use_float and self._fused else None, self._fused_first):
            if fw is not None and len(fw) > 4:
                fw[4].horizon = int(count)

    def stop_after(self, seconds: float, what: str, start: float | None = None) -> None:
        """From now on, the big-integer pass stops (BadInput) before a layer (of any sub-batch) once
        `seconds` have passed since `start` (perf_counter; default now): a run past --max-seconds
        (checkers/budget.py)."""
        self._deadline = ((time.perf_counter() if start is None else start) + seconds, seconds, what)

    def exact_batch_points(self, n: int) -> int:
        """Points per big-integer sub-batch: about EXACT_MEMORY_BYTES of integers in flight, from
        the a-priori bound's size (n x d' values, a few arrays alive at once, Python int overhead)."""
        bits = min(self.im.bound.bit_length(), MAX_DENOMINATOR_BITS)
        per_point = 6 * n * self.model.dim * (36 + bits // 8)
        return max(1, EXACT_MEMORY_BYTES // per_point)

    def _forward(self, token_ids: np.ndarray, last_only: bool) -> np.ndarray:
        """The final stream over the model's common denominator (tests and debugging)."""
        X, k = self._stream(token_ids, last_only)
        return X if k == 1 else _to_int_objects(X) * k

    # ---------------------------------------------------------------- the classifier

    def _classify(self, h: np.ndarray) -> np.ndarray:
        """h (..., d') exact stream rows -> exact logit numerators (..., C)."""
        f = self._classify_float(h)
        if f is not None:
            return f.astype(np.int64)
        return _rowmul_any(_to_int_objects(h), self._CT)

    def _classify_float(self, h: np.ndarray) -> np.ndarray | None:
        """h (..., d') -> the logit numerators as float64 when every one is proven an integer
        below 2^53 (so each is exact), else None (the caller classifies in big integers)."""
        if h.dtype == object or self._CTf is None:
            return None
        if self.use_float:  # the a-priori bound covers the logits too (magnitude_bound): exact
            return _rowmul_any(h, self._CTf)
        ha = np.abs(h)
        try:
            # one row of column maxima dominates every row's |h| @ |C^T| (nonnegative sums):
            # when it stays below 2^53 no per-row absolute pass is needed
            top = ha.reshape(-1, ha.shape[-1]).max(axis=0, initial=0.0)
            try:
                _limit(top[None, :] @ self._CTa)
            except _Exceeded:
                _limit(_rowmul_any(ha, self._CTa))
            return _rowmul_any(h, self._CTf)
        except _Exceeded:
            return None

    @property
    def stream_denominator(self) -> int:
        """The common denominator of the final residual stream (the logits' is c times it)."""
        return self.im.layers[-1].g_out if self.im.layers else 1

    def hidden_last(self, token_ids: np.ndarray) -> tuple[np.ndarray, int]:
        """(numerators (B, d') of the final stream at the last position, `stream_denominator`):
        exact (int64, or object ints when a value passes int64), without the classifier."""
        X, k = self._stream(token_ids, last_only=True)
        h = X[:, -1, :]
        if h.dtype != object:
            h = h.astype(np.int64)  # exact integers below 2^53 (proven or checked)
        return _scaled(h, k), self.stream_denominator

    def logits(self, token_ids: np.ndarray) -> tuple[np.ndarray, int]:
        X, k = self._stream(token_ids, last_only=True)
        return _scaled(self._classify(X[:, -1, :]), k), self.denominator

    def logits_all(self, token_ids: np.ndarray) -> tuple[np.ndarray, int]:
        X, k = self._stream(token_ids, last_only=False)
        return _scaled(self._classify(X), k), self.denominator

    def margins_last(self, token_ids: np.ndarray, rows: np.ndarray):
        """(margin numerators (B,) label minus best other, denominator, logits (B, C) or None).

        With a small classifier the logits are computed (returned only when they needed big
        integers: float64 logits proven below 2^53 give the margins directly); with a big one each
        distinct hidden vector is classified once (cached across batches as its best class,
        best and second-best logit) and the logits are not returned (None)."""
        X, k = self._stream(token_ids, last_only=True)
        h = X[:, -1, :]
        if not self.big_classifier:
            f = self._classify_float(h)
            if f is not None:  # exact float logits: only the two logits per point become integers
                return _scaled(_margins_from_float_logits(f, rows), k), self.denominator, None
            num = _scaled(self._classify(h), k)
            return _margins_from_logits(num, rows), self.denominator, num
        keys = _row_keys(h)
        margins = np.empty(len(rows), dtype=object)
        for i, (key, y) in enumerate(zip(keys, rows)):
            best_idx, best, second = self._summary((k, key), h[i])
            if best_idx == y:
                margins[i] = (best - second) * k
            else:  # the label is not the strict argmax: its own logit minus the best
                margins[i] = (self._logit(h[i], int(y)) - best) * k
        return margins, self.denominator, None

    def _summary(self, key, row):
        got = self._rows_cache.get(key)
        if got is None:
            vals = _rowmul_any(_to_int_objects(row[None, :]), self._CT)[0]
            order = sorted(range(len(vals)), key=lambda c: vals[c], reverse=True)
            best = order[0]
            second = vals[order[1]] if len(order) > 1 else None
            got = (best, vals[best], second)
            if len(self._rows_cache) < 100_000:
                self._rows_cache[key] = got
        return got

    def _logit(self, row, c: int):
        v = _to_int_objects(row[None, :])[0]
        return sum(int(self._CT[f, c]) * int(v[f]) for f in range(len(v)) if v[f])


def _scaled(num: np.ndarray, k: int) -> np.ndarray:
    """Numerators over a batch denominator, times k: numerators over the model's denominator."""
    if k == 1:
        return num
    if num.dtype != object and k < FLOAT_EXACT_LIMIT and (num.size == 0 or int(np.abs(num).max()) * k < 2**62):
        return num * k
    return num.astype(object) * k


def layer_constants(L: IntLayer, g: int):
    """(x_scale, coefs, MLP pieces or None, g_out) of layer L for a stream over denominator g
    (the module docstring's formulas; integerize uses them with its static g)."""
    if L.A:
        alphas_b = [g * g * a * b if kind == "relu" else L.lam * b for (a, b), kind in zip(L.dens, L.kinds)]
        Q = lcm(*alphas_b)
        coefs, x_scale = tuple(Q // x for x in alphas_b), len(L.A) * Q
    else:
        coefs, x_scale = (), 1
    g_att = g * x_scale
    if L.mlp is None:
        return x_scale, coefs, None, g_att
    m = L.mlp
    return x_scale, coefs, (m.beta1 * g_att, m.beta2 * (m.q1 * g_att), m.x_scale), g_att * m.x_scale


def _run_renormalized(model: Model, token_ids: np.ndarray, last_only: bool, W, Wa, im: IntegerModel,
                      fused_first=None):
    """The checked float64 pass with per-batch denominators: before each layer the stream and
    its denominator g are divided by their gcd over the batch (exact: the quotients are
    integers), and the layer's scalars are recomputed for that g.  Every value is the static
    pass's value times g_batch / g_static <= 1 (g_batch divides g_static: lcm of divisors divides
    the lcm), so the a-priori proven prefix stays proven; from there every product is checked
    on absolute values.  fused_first: `_fused_weights` of the first layer when it is in the proven
    prefix; its attention then runs as on the proven path (`_attention_onehot`, from the token ids:
    the stream is the one-hot embedding, g = 1, and the layer's scalars are the static ones, which
    is checked here).  Returns (X, g_batch)."""
    onehot = bool(fused_first is not None and fused_first[3] and W and W[0][0] and W[0][4] is None
                  and im.proven_layers >= 1)
    if onehot:
        x_scale, coefs, _, g_first = layer_constants(W[0][3], 1)
        onehot = (x_scale, coefs) == (W[0][3].x_scale, W[0][3].coef)
    X = np.zeros((len(token_ids), token_ids.shape[1], model.dim)) if onehot else embed_rows(model, token_ids, np.float64)
    Xa = None
    g = 1
    nl = len(W)
    for li, (ATs, BTs, _, L, mlp) in enumerate(W):
        last = last_only and li == nl - 1
        if li == 0 and onehot:  # the proven first layer (no MLP) as on the proven path
            X = _attention_onehot(X, token_ids, model, fused_first, L, last)
            g = g_first
            continue
        if g > 1 and X.size:
            gam = gcd(g, int(np.gcd.reduce(np.abs(X).astype(np.int64).ravel())))
            if gam > 1:
                X = X / gam
                g //= gam
                if Xa is not None:
                    Xa = np.abs(X)
        x_scale, coefs, mlpc, g_out = layer_constants(L, g)
        if max((x_scale,) + coefs, default=0) >= FLOAT_EXACT_LIMIT:
            raise _Exceeded
        absw = Wa[li] if li >= im.proven_layers else None
        if absw is not None and Xa is None:
            Xa = np.abs(X)
        if ATs:
            X, Xa = _attention(X, Xa, ATs, BTs, coefs, L, last, absw, x_scale=x_scale)
        if mlp is not None:
            P1T, _, P2T, _, _ = mlp
            b1g, b2g, xs = mlpc
            if max(abs(v) for v in list(b1g) + list(b2g)) >= FLOAT_EXACT_LIMIT or xs >= FLOAT_EXACT_LIMIT:
                raise _Exceeded
            b1, b2 = _float(b1g), _float(b2g)
            P = _rowmul(X, P1T) + b1
            if Xa is not None:
                P1Ta, _, P2Ta, _, _ = absw[4]
                Pa = _rowmul(Xa, P1Ta) + np.abs(b1)
                _limit(Pa)
            Q = _rowmul(_relu(P), P2T)
            X = X * xs + Q + b2
            if Xa is not None:
                Qa = _rowmul(Pa, P2Ta)
                _limit(Qa)
                Xa = Xa * xs + Qa + np.abs(b2)
                _limit(Xa)
        g = g_out
    return X, g


def _checkable(im: IntegerModel) -> bool:
    """The checked float64 path needs every weight matrix of the stream to be exact in float64
    (integers below 2^53); its per-layer scalars are recomputed per batch and checked there."""
    for L in im.layers:
        mats = list(L.A) + list(L.B)
        if L.mlp is not None:
            mats += [L.mlp.P1, L.mlp.beta1, L.mlp.P2, L.mlp.beta2]
        if not _all_below(mats, FLOAT_EXACT_LIMIT):
            return False
        if "hardmax" in L.kinds and L.lam >= FLOAT_EXACT_LIMIT:
            return False
    return True


def _to_int_objects(h: np.ndarray) -> np.ndarray:
    if h.dtype == object:
        return h
    return h.astype(np.int64).astype(object)


def _rowmul_any(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """X (..., d) @ M (d, e) for any leading shape."""
    if X.dtype == object or M.dtype == object:
        return np.dot(X.astype(object) if X.dtype != object else X, M)
    return np.matmul(X, M)


def _row_keys(h: np.ndarray) -> list:
    if h.dtype == object:
        return [tuple(int(v) for v in row) for row in h]
    hi = h.astype(np.int64)
    return [row.tobytes() for row in hi]


def _margins_from_logits(num: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    """num (B, C), rows (B,) -> label minus best other logit, or None for a single class."""
    B = len(rows)
    if num.shape[1] == 1:
        return None
    ar = np.arange(B)
    correct = num[ar, rows]
    if num.dtype == object:
        other = num.copy()
        other[ar, rows] = None
        best_other = np.array([max(v for v in r if v is not None) for r in other], dtype=object)
    else:  # the label's entry masked in place and restored: no copy of the (B, C) logits
        num[ar, rows] = np.iinfo(num.dtype).min if num.dtype.kind in "iu" else -np.inf
        best_other = num.max(axis=1)
        num[ar, rows] = correct
    return correct - best_other


def _margins_from_float_logits(f: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """f (B, C) float64 logits, each an integer below 2^53 (so exact), rows (B,) -> int64 label
    minus best other.  The label's and the best other's logits are converted to integers before
    subtracting (their float difference could round), never the whole (B, C) matrix."""
    ar = np.arange(len(rows))
    correct = f[ar, rows].copy()
    f[ar, rows] = -np.inf  # masked in place and restored: no copy of the logits
    best_other = f.max(axis=1)
    f[ar, rows] = correct
    return correct.astype(np.int64) - best_other.astype(np.int64)


def _run(model: Model, token_ids: np.ndarray, last_only: bool, W, Wa, dtype, proven: int = 0,
         max_bits: int | None = None, deadline: tuple | None = None, fused: list | None = None) -> np.ndarray:
    """The integer forward pass (module docstring) with weights W; with Wa (abs weights, float64)
    every product is repeated on absolute values and checked below 2^53 (raises _Exceeded),
    from layer `proven` on (the layers before it are proven exact a priori).  max_bits (big
    integers of a model without an a-priori bound): a stream number past it before a layer ends
    the run (BadInput), since that layer could cube it; deadline (perf_counter time, seconds,
    what): a layer that would start after it ends the run too (BadInput)."""
    # the first layer's fused heads read the one-hot embedding through the token ids (no X0 built); the
    # last query of a one-layer model needs no 2^53 / 3 bound on coef_i B_i (`_attention_onehot_last`)
    onehot = bool(fused and fused[0] is not None and W[0][0] and (fused[0][3] or (last_only and len(W) == 1)))
    X = np.zeros((len(token_ids), token_ids.shape[1], model.dim)) if onehot else embed_rows(model, token_ids, dtype)
    Xa = None
    nl = len(W)
    for li, (ATs, BTs, coefs, L, mlp) in enumerate(W):
        if deadline is not None and time.perf_counter() > deadline[0]:
            from depthcert.checkers.budget import time_limit_passed

            raise time_limit_passed(deadline[2], deadline[1])
        if max_bits is not None and X.size and max(int(v).bit_length() for v in X.flat) > max_bits // 3:
            from depthcert.checkers.errors import BadInput

            raise BadInput(f"exact evaluation would need numbers of more than {max_bits:,} bits from layer {li + 1} "
                           "on (this model's values grow about threefold in bits per layer); use fewer layers "
                           "or smaller weights")
        last = last_only and li == nl - 1
        absw = Wa[li] if Wa is not None and li >= proven else None
        if absw is not None and Xa is None:
            Xa = np.abs(X)  # exact values so far (proven or checked): their magnitudes
        if ATs:
            if fused is not None and fused[li] is not None and Xa is None and X.dtype == np.float64:
                if li == 0 and onehot:  # the stream is still the one-hot embedding (X is a placeholder)
                    X = _attention_onehot(X, token_ids, model, fused[li], L, last)
                else:
                    X = _attention_fused(X, fused[li], L, last)
            else:
                X, Xa = _attention(X, Xa, ATs, BTs, coefs, L, last, absw)
        if mlp is not None:
            P1T, b1, P2T, b2, xs = mlp
            P = _rowmul(X, P1T) + b1  # (B, n, d_ff)
            if Xa is not None:
                P1Ta, b1a, P2Ta, b2a, _ = absw[4]
                Pa = _rowmul(Xa, P1Ta) + b1a
                _limit(Pa)
            Z = _relu(P)
            Q = _rowmul(Z, P2T)
            X = X * xs + Q + b2
            if Xa is not None:
                Qa = _rowmul(Pa, P2Ta)  # |relu(p)| <= |p| <= Pa
                _limit(Qa)
                Xa = Xa * xs + Qa + b2a
                _limit(Xa)
    return X


def _fused_weights(L: IntLayer):
    """The float64 weights of `_attention_fused` for layer L: (A_i^T side by side (d, m d), coef_i B_i^T
    stacked (m d, d), relu per head, whether `_attention_onehot` may run every query, the pair tables of
    a first layer (`_PairTables`, built on first use)), or None when some entry is not an integer below
    2^53 (then the heads run one by one).  Only for the proven float path (`magnitude_bound` below 2^53)."""
    if not L.A:
        return None
    if "hardmax" in L.kinds and L.lam >= FLOAT_EXACT_LIMIT:
        return None
    # the int64 forms where every A_i, B_i has one and coef_i max|B_i| < 2^63 (coef_i B_i then does not
    # wrap): the same integers, checked and converted in C; else the object matrices
    fast = len(L.A64) == len(L.A) and len(L.B64) == len(L.B) and not any(
        M is None for M in L.A64 + L.B64) and all(
        c < 2**63 and (not B.size or int(np.abs(B).max()) * c < 2**63) for B, c in zip(L.B64, L.coef))
    if fast:
        scaled = [B * c for B, c in zip(L.B64, L.coef)]
        if not all(_below(M, M, FLOAT_EXACT_LIMIT) for M in list(L.A64) + scaled):
            return None
        AT = _float(np.concatenate([A.T for A in L.A64], axis=1))
        BT = _float(np.concatenate([M.T for M in scaled], axis=0))
        onehot = all(_below(M, M, FLOAT_EXACT_LIMIT // 3) for M in scaled)
    else:
        scaled = [B * c for B, c in zip(L.B, L.coef)]
        if not _all_below(list(L.A) + scaled, FLOAT_EXACT_LIMIT):
            return None
        AT = _float(np.concatenate([A.T for A in L.A], axis=1))
        BT = _float(np.concatenate([M.T for M in scaled], axis=0))
        # _attention_onehot adds up to three rows of coef_i B_i^T (token, position, constant) before any
        # bound applies: below 2^53 when every entry is below 2^53 / 3
        onehot = _all_below(scaled, FLOAT_EXACT_LIMIT // 3)
    return AT, BT, np.array([k == "relu" for k in L.kinds], dtype=bool), onehot, _PairTables()


def _stream_supports(model: Model, layers) -> list:
    """Per layer, the columns of its input stream that can be non-zero at all (for any input), or None
    for every column: the input rows before the first layer; an attention layer adds every column e
    with B_i[e, f] != 0 for some head i and some such column f (x_scale x_k, and every value row
    coef_i B_i x_j, is zero elsewhere, exactly); after an MLP every column."""
    sup = np.zeros(model.dim, dtype=bool)
    sup[: model.input_rows] = True
    out = []
    for L in layers:
        out.append(None if sup.all() else np.flatnonzero(sup))
        if L.mlp is not None:
            sup[:] = True
            continue
        for B, B64 in zip(L.B, L.B64 or (None,) * len(L.B)):
            M = B if B64 is None else B64
            sup = sup | np.asarray(M[:, sup] != 0, dtype=bool).any(axis=1)
    return out


def _on_support(fw, sup: np.ndarray, d: int):
    """fw (`_fused_weights`) with the products of `_attention_fused` restricted to the input columns
    `sup` (`_stream_supports`): A_i^T's rows and columns there, coef_i B_i^T's rows there."""
    AT, BT, relu = fw[:3]
    m, s = len(relu), len(sup)
    ATs = np.ascontiguousarray(AT.reshape(d, m, d)[sup][:, :, sup].reshape(s, m * s))
    BTs = np.ascontiguousarray(BT.reshape(m, d, d)[:, sup, :].reshape(m * s, d))
    return tuple(fw[:5]) + ((sup, ATs, BTs),)


def _attention_fused(X: np.ndarray, fw, L: IntLayer, last: bool) -> np.ndarray:
    """`_attention` on the proven float path with every head in the same few products: U = Q [A_1^T
    ... A_m^T] (every query against every head), scores U X^T, weights, V = weights X, and
    [V_1 ... V_m] [coef_1 B_1^T; ...; coef_m B_m^T].  Each product is a sum of the same terms as the
    head-by-head pass, whose every partial sum `magnitude_bound` bounds (the layer's new stream
    bound covers the sum over heads, the entries coef_i B_i are below 2^53): exact in any order.
    With a support (`_on_support`) the products run on the columns the stream can reach: the terms
    left out are exact zeros for every input (`_stream_supports`), so every sum keeps the same
    non-zero terms and the same bounds."""
    AT, BT, relu = fw[:3]
    B, n, d = X.shape
    m = len(relu)
    Q = X[:, -1:, :] if last else X
    q = Q.shape[1]
    Xs = X
    if len(fw) > 5:
        sup, AT, BT = fw[5]
        Xs = X[:, :, sup]
    e = Xs.shape[2]
    Qs = Xs[:, -1:, :] if last else Xs
    U = (Qs.reshape(B * q, e) @ AT).reshape(B, q * m, e)  # row (k, i): (A_i x_k)^T
    S = np.matmul(U, Xs.transpose(0, 2, 1)).reshape(B, q, m, n)  # (query k, head i, key j)
    Wt = _fused_weights_of_scores(S, relu, L, last)
    V = np.matmul(Wt.reshape(B, q * m, n), Xs)  # (B, q m, e): sum_j w_j x_j per query and head
    return Q * L.x_scale + (V.reshape(B * q, m * e) @ BT).reshape(B, q, d)


def _attention_onehot(X: np.ndarray, token_ids: np.ndarray, model: Model, fw, L: IntLayer, last: bool) -> np.ndarray:
    """`_attention_fused` on the embedding itself (the first layer): every row x_j of X0 is the sum of
    the one-hot rows of its token, its position and the constant, so each product with X0 is the sum of
    two or three gathered rows of the other operand, with no product at all.  The sums are the same
    terms as the dense products' (the others are exact zeros) and so bounded the same way, in any
    grouping (the position and constant rows are added first, once per position: every partial sum is
    a sum of some of those terms), except the
    rows x_j coef_i B_i^T, whose entries are each below 2^53 / 3 (`_fused_weights`); where a head's
    weights are all zero such a row may be inexact, but it is finite and meets only zeros.  Every query
    (q = n); the last query alone (a last layer) goes to `_attention_onehot_last`.  With relu heads
    only and a batch large enough to pay for one, the output is read from the layer's pair table
    instead (`_pair_table`, `_attention_pairs`: the same exact numbers)."""
    if last:
        return _attention_onehot_last(token_ids, model, fw, L)
    AT, BT, relu = fw[:3]
    B, n, d = X.shape
    m = len(relu)
    V = len(model.vocab)
    const = model.constant_index if model.constant_row else None
    ids = np.asarray(token_ids, dtype=np.int64)
    if len(fw) > 4 and relu.all() and B and n:
        table = fw[4].get(model, fw, L, n, B)
        if table is not None and ids.min() >= 0 and ids.max() < V:  # (every table row index in range)
            return _attention_pairs(ids, table, L, d)
    qk = np.arange(n)  # the queries' positions
    q = len(qk)
    # the rows of the position (and constant) one-hots are the same for every point: added once per
    # position, then to the gathered token rows (np.take: a gather along one axis, in place after)
    pos_U = AT[V + qk]  # (q, m d)
    if const is not None:
        pos_U = pos_U + AT[const]
    U = np.take(AT, ids, axis=0)
    U += pos_U  # (B, q, m d): row k is x_k [A_1^T ... A_m^T]
    U = U.reshape(B, q * m, d)
    S = np.take_along_axis(U, ids[:, None, :], axis=2)
    S += U[:, :, V:V + n]  # (B, q m, n): x_j . (A_i x_k)
    if const is not None:
        S += U[:, :, const:const + 1]
    Wt = _fused_weights_of_scores(S.reshape(B, q, m, n), relu, L, False)
    BT3 = BT.reshape(m, d, d)  # head i's coef_i B_i^T
    pos_B = BT3[:, V:V + n]  # (m, n, d)
    if const is not None:
        pos_B = pos_B + BT3[:, const][:, None, :]
    XB = np.take(BT3, ids, axis=1)
    XB += pos_B[:, None]  # (m, B, n, d): x_j coef_i B_i^T
    XB = XB.transpose(1, 0, 2, 3).reshape(B, m * n, d)
    out = np.matmul(Wt.reshape(B, q, m * n), XB)  # (B, q, d): sum over heads and keys
    b = np.arange(B)[:, None]
    k = np.arange(q)[None, :]
    out[b, k, ids[:, qk]] += L.x_scale  # the residual x_k x_scale, its one-hot entries
    out[:, np.arange(q), V + qk] += L.x_scale
    if const is not None:
        out[:, :, const] += L.x_scale
    return out


PAIR_TABLE_ENTRIES = 1 << 20  # the largest first-layer pair table (float64 entries) `_PairTables` builds
PAIR_TABLE_SHARE = 4  # ... and at most 1/4 of the entries one batch would gather key by key (its build pays)
PAIR_TABLE_KEYS = 4  # keys per table row at most
# the keys per row: the fewest estimated costs, in units of one float64 gathered, of building the table
# (per entry) and of gathering it over the points the run expects (per row gathered: its entries and
# the index); measured on tm, icqa, reachability tables
PAIR_BUILD_COST = 15
PAIR_INDEX_COST = 8


class _PairTables:
    """The first layer's pair tables (`_pair_table`), one per sequence length, built on first use by a
    batch large enough to pay for one (later batches of any size reuse it) and shared by the threads of
    in_order (built under a lock).  Speed only: the table path and the gathering path give the same
    exact numbers."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tables: dict = {}
        self.horizon = 0  # points the run is expected to evaluate (Evaluator.expect_points), if more than a batch

    def get(self, model: Model, fw, L: IntLayer, n: int, points: int):
        key = (n, len(model.vocab), model.input_rows, model.dim)
        got = self._tables.get(key)
        if got is not None:
            return got
        if points < PAIR_TABLE_SHARE * len(model.vocab) ** 2:
            return None  # even one key per row: more entries than 1/PAIR_TABLE_SHARE of the batch's gather
        with self._lock:
            if key not in self._tables:
                got = _pair_table(model, fw, L, n, points, max(points, self.horizon))
                if got is None:
                    return None  # a larger batch may pay for it
                self._tables[key] = got
            return self._tables[key]


def _pair_table(model: Model, fw, L: IntLayer, n: int, points: int = 0, horizon: int = 0):
    """(T, cols, groups, V): the first layer's output at every query as a sum of one table row per group
    of keys, for relu heads on the one-hot embedding of n positions; None when no table of at most
    PAIR_TABLE_ENTRIES entries and 1/PAIR_TABLE_SHARE of what `points` points (a batch) gather key by
    key exists (or, never on the proven path, an entry is not below 2^53).  Of the tables within
    these limits, the one of the fewest estimated costs of building and gathering over `horizon`
    points (at least the batch) is built (PAIR_BUILD_COST, PAIR_INDEX_COST).

    With x_p the one-hot input row of (token t, position p) (plus the constant) and relu heads only,
    query k's output is  sum_j c(k, t_k, j, t_j) with
        c(k, t, j, t') = sum_i relu(x_j^T A_i x_k) x_j coef_i B_i^T  (0 for j > k under a causal mask)
                         + [j = k] x_scale x_k,
    a function of the two (position, token) pairs alone (a hardmax head's weights depend on every
    key: not tabulated).  The keys are split into consecutive groups of g (up to PAIR_TABLE_KEYS,
    chosen as above); group G's block holds, for every query (k, t_k) and
    every tokens (t_j)_{j in G}, the sum over j in G of c(k, t_k, j, t_j), on `cols` (the input rows,
    where the residual lands, and every column some coef_i B_i^T input row reaches; the others are
    exact zeros), at row off_G + (k V + t_k) V^|G| + the tokens as base-V digits.  groups: (first key,
    keys, off_G, V^|G|) per group.

    Built exactly in int64 from the float64 weights of `_fused_weights` (integers below 2^53):
    x_j^T A_i x_k and x_j coef_i B_i^T are sums of at most nine and three such entries (below 2^57);
    relu(s) <= smax (`magnitude_bound`: s is a sum of some of the terms of hb^T |A_i| hb, hb = 1 on the
    input rows) and |x_j coef_i B_i^T|[e] <= coef_i vb_i[e], so a product with relu(s) > 0 is at most
    n smax coef_i vb_i[e], and every partial sum of these terms, over any heads and keys in any order
    (an entry, a group's sum, the sum over groups) is at most sum_i coef_i n smax vb_i[e] + x_scale
    hb[e], the layer's new stream bound, below 2^53 on the proven path (a product with relu(s) = 0 is
    an exact 0, however large the row).  So every entry is exact in float64 (each is checked below
    2^53 before conversion all the same), and `_attention_pairs`'s float64 sums over groups are exact
    in any grouping."""
    AT, BT, relu = fw[:3]
    d, m, V, R = model.dim, len(relu), len(model.vocab), model.input_rows
    const = model.constant_index if model.constant_row else None
    if n > model.max_length or n < 1 or not relu.all():
        return None
    Bv = BT.reshape(m, d, d)[:, :R, :]  # head i's coef_i B_i^T, its input rows
    reached = np.any(Bv != 0, axis=(0, 1))
    reached[:R] = True
    cols = np.flatnonzero(reached)
    c = len(cols)
    limit = min(PAIR_TABLE_ENTRIES, points * n * n * c // PAIR_TABLE_SHARE)

    def entries(g):  # n V^(1 + |G|) c per group
        return sum(n * V ** (1 + min(g, n - j0)) * c for j0 in range(0, n, g))
    fits = [g for g in range(1, min(n, PAIR_TABLE_KEYS) + 1) if entries(g) <= limit]
    if not fits:
        return None
    horizon = max(points, horizon)
    g = min(fits, key=lambda g: entries(g) * PAIR_BUILD_COST + horizon * n * -(-n // g) * (c + PAIR_INDEX_COST))
    E = np.zeros((n, V, R), dtype=np.int64)  # row (p, t): the one-hot input row of token t at position p
    E[:, np.arange(V), np.arange(V)] = 1
    E[np.arange(n), :, V + np.arange(n)] = 1
    if const is not None:
        E[:, :, const] = 1
    E = E.reshape(n * V, R)
    pos = np.repeat(np.arange(n), V)
    ATi = AT.astype(np.int64).reshape(d, m, d)[:R, :, :R]  # ATi[b, i, a] = A_i[a, b]
    Bvi = Bv[:, :, cols].astype(np.int64)  # (m, R, c)
    T = np.zeros((n * V, n * V, c), dtype=np.int64)  # (query pair, key pair, column): c(k, t_k, j, t_j)
    for i in range(m):
        S = (E @ ATi[:, i, :]) @ E.T  # (query pair, key pair): x_j^T A_i x_k
        W = np.maximum(S, 0)
        if L.causal:
            W[pos[:, None] < pos[None, :]] = 0  # key j after query k
        T += W[:, :, None] * (E @ Bvi[i])[None, :, :]
    diag = np.arange(n * V)
    T[diag, diag, :R] += L.x_scale * E  # the residual: cols begins with the R input rows
    T = T.reshape(n * V, n, V, c)  # (query pair, key j, t_j, column)
    table = np.empty((entries(g) // c, c), dtype=np.int64)
    groups, off = [], 0
    for j0 in range(0, n, g):
        size = min(g, n - j0)
        rows = n * V * V ** size
        blk = table[off:off + rows].reshape((n * V,) + (V,) * size + (c,))
        for a in range(size):
            shape = [n * V] + [1] * size + [c]
            shape[1 + a] = V
            part = T[:, j0 + a].reshape(shape)  # key j0 + a's token is digit a
            if a:
                blk += part
            else:
                blk[...] = part
        groups.append((j0, size, off, V ** size))
        off += rows
    if table.size and not (int(table.max()) < FLOAT_EXACT_LIMIT and int(table.min()) > -FLOAT_EXACT_LIMIT):
        return None
    return table.astype(np.float64), cols, tuple(groups), V


def _attention_pairs(ids: np.ndarray, table, L: IntLayer, d: int) -> np.ndarray:
    """`_attention_onehot` (every query, relu heads) from the pair table (`_pair_table`): query k's
    output is the sum over key groups of one gathered row, added group by group (exact in any
    grouping: every partial sum is a sum of some of the layer's bounded terms, `_pair_table`)."""
    T, cols, groups, V = table
    B, n = ids.shape
    acc = np.empty((B, n, len(cols)))
    buf = None
    query = ids + np.arange(n) * V  # (B, n): k V + t_k
    for j0, size, off, span in groups:
        key = ids[:, j0]
        for j in range(j0 + 1, j0 + size):
            key = key * V + ids[:, j]
        # every index is in range (tokens below V): mode="clip" changes none, and lets take write to
        # `out` unbuffered
        if not j0:  # the first group reaches every query: written, not added
            np.take(T, query * span + (key + off)[:, None], axis=0, out=acc, mode="clip")
            continue
        if L.causal:  # keys j0.. reach queries k >= j0 only
            acc[:, j0:] += np.take(T, query[:, j0:] * span + (key + off)[:, None], axis=0, mode="clip")
            continue
        if buf is None:
            buf = np.empty_like(acc)
        np.take(T, query * span + (key + off)[:, None], axis=0, out=buf, mode="clip")
        acc += buf
    if len(cols) == d:
        return acc
    out = np.zeros((B, n, d))
    out[:, :, cols] = acc
    return out


def _attention_onehot_last(token_ids: np.ndarray, model: Model, fw, L: IntLayer) -> np.ndarray:
    """`_attention_onehot` for the last query only (a last layer read at the last position): (B, 1, d).

    Only the R = model.input_rows rows of X0 (tokens, positions, constant) can be non-zero, so every
    product is taken on them alone (the others' terms are exact zeros).  Scores as in
    `_attention_onehot`: U = x_k [A_1^T ... A_m^T] (its R input columns per head) is the sum of the rows
    of the query's token, position and constant, and s_ij = x_j . (A_i x_k) the sum of U's entries at
    key j's token, position and constant: sums of terms of the score's dot product, bounded by
    `magnitude_bound`'s smax.  The values then follow `_attention_fused` instead of gathering a row
    x_j coef_i B_i^T per key and head (m n rows per point, several times the work of the rest):
    V_i = sum_j w_ij x_j on the input rows (a (B, m, n) x (B, n, R) product with the one-hot rows),
    then [V_1 ... V_m] [coef_1 B_1^T; ...; coef_m B_m^T] (its input rows) plus the residual
    x_k x_scale.  Exact in float64, the a-priori bound being below 2^53 (`magnitude_bound`, whose hb
    is 1 on the input rows):
      V_i[f] is a sum of the non-negative terms w_ij x_j[f] (relu and hardmax weights are >= 0, x_j is
        0/1), so every partial sum is at most sum_j w_ij <= mass (n smax for relu, lam for hardmax),
        which the bound covers (`worst`);
      out[e] = sum_i sum_f V_i[f] coef_i B_i[e, f] + x_scale x_k[e]: every partial sum, in any order,
        is at most sum_i coef_i mass (|B_i| hb)[e] + x_scale hb[e], the layer's new stream bound.
    The rows x_j coef_i B_i^T are never formed, so this path needs no 2^53 / 3 bound on coef_i B_i."""
    AT, BT, relu = fw[:3]
    ids = np.asarray(token_ids, dtype=np.int64)
    B, n = ids.shape
    d, m, V, R = model.dim, len(relu), len(model.vocab), model.input_rows
    const = model.constant_index if model.constant_row else None
    ATr = AT.reshape(d, m, d)[:, :, :R]  # (d, m, R): head i's A_i^T, its input columns
    U = ATr[ids[:, n - 1]] + ATr[V + n - 1]  # (B, m, R): x_k [A_1^T ... A_m^T], k the last position
    if const is not None:
        U += ATr[const]
    # s_ij = U[i, token_j] + U[i, V + j] (+ U[i, const]): the tokens' entries by one flat gather
    S = np.take(U, (np.arange(B * m) * R).reshape(B, m, 1) + ids[:, None, :]) + U[:, :, V:V + n]
    if const is not None:
        S += U[:, :, const:const + 1]
    Wt = _fused_weights_of_scores(S.reshape(B, 1, m, n), relu, L, True).reshape(B, m, n)
    X0 = np.zeros((B, n, R))  # the one-hot rows x_j on the input rows
    X0[np.arange(B)[:, None], np.arange(n)[None, :], ids] = 1
    X0[:, np.arange(n), V + np.arange(n)] = 1
    if const is not None:
        X0[:, :, const] = 1
    BTr = BT.reshape(m, d, d)[:, :R, :].reshape(m * R, d)  # coef_i B_i^T, its input rows
    out = np.matmul(Wt, X0).reshape(B, m * R) @ BTr  # (B, d): sum over heads and keys
    out[:, :R] += X0[:, -1, :] * L.x_scale  # the residual
    return out[:, None, :]


def _fused_weights_of_scores(S: np.ndarray, relu: np.ndarray, L: IntLayer, last: bool) -> np.ndarray:
    """S (B, q, m, n) exact scores (query, head, key) -> the heads' exact weights: relu, or lam / |M| on
    each argmax set (hardmax), over the visible keys (a causal mask; the last query sees every key)."""
    n = S.shape[3]
    visible = None if (last or not L.causal) else causal_mask(n, np.arange(n)).T[None, :, None, :]  # (1, q, 1, n)
    if relu.all():
        Wt = np.maximum(S, 0)
        if visible is not None:
            Wt = np.where(visible, Wt, 0.0)
    else:
        Wt = np.empty_like(S)
        if relu.any():
            R = np.maximum(S[:, :, relu], 0)
            Wt[:, :, relu] = np.where(visible, R, 0.0) if visible is not None else R
        H = S[:, :, ~relu]
        if visible is not None:
            H = np.where(visible, H, -np.inf)
        at_max = H == H.max(axis=3, keepdims=True)
        if visible is not None:
            at_max &= visible
        Wt[:, :, ~relu] = np.where(at_max, np.floor_divide(L.lam, at_max.sum(axis=3, keepdims=True)), 0)
    return Wt


def _attention(X, Xa, ATs, BTs, coefs, L: IntLayer, last: bool, absw, x_scale: int | None = None):
    """One attention sublayer on X (and, when checking, the abs bounds Xa); x_scale and coefs
    default to the static ones of L."""
    n = X.shape[1]
    x_scale = L.x_scale if x_scale is None else x_scale
    ATas, BTas = (absw[0], absw[1]) if absw is not None else ([None] * len(ATs), [None] * len(BTs))
    if last:
        # only the last query reaches the classifier; it sees every key, masked or not
        x_last = X[:, -1, :]  # (B, d)
        out = x_last * x_scale
        outa = Xa[:, -1, :] * x_scale if Xa is not None else None
        for AT, BT, coef, kind, ATa, BTa in zip(ATs, BTs, coefs, L.kinds, ATas, BTas):
            u = _rowmul(x_last[:, None, :], AT)[:, 0, :]  # (B, d) = (A x_last)^T
            s = np.matmul(X, u[:, :, None])  # (B, n, 1): key j, query last
            if Xa is not None:
                ua = _rowmul(Xa[:, -1, :][:, None, :], ATa)[:, 0, :]
                _limit(ua)
                sa = np.matmul(Xa, ua[:, :, None])
                _limit(sa)
            w = _relu(s) if kind == "relu" else hardmax_weights(s, None, L.lam)
            v = np.matmul(w[:, :, 0][:, None, :], X)[:, 0, :]  # (B, d) = sum_j w_j x_j
            upd = _rowmul(v[:, None, :], BT)[:, 0, :]
            out = out + (upd * coef if coef != 1 else upd)
            if Xa is not None:
                wa = sa if kind == "relu" else w  # |relu(s)| <= |s| <= sa; hardmax weights are exact
                va = np.matmul(wa[:, :, 0][:, None, :], Xa)[:, 0, :]
                _limit(va)
                upda = _rowmul(va[:, None, :], BTa)[:, 0, :] * coef
                _limit(upda)
                outa = outa + upda
        if outa is not None:
            _limit(outa)
            outa = outa[:, None, :]
        return out[:, None, :], outa
    visible = causal_mask(n, np.arange(n)) if L.causal else None
    out = X * x_scale
    outa = Xa * x_scale if Xa is not None else None
    for AT, BT, coef, kind, ATa, BTa in zip(ATs, BTs, coefs, L.kinds, ATas, BTas):
        S = np.matmul(X, _rowmul(X, AT).transpose(0, 2, 1))  # (B, n_key, n_query)
        if Xa is not None:
            Ua = _rowmul(Xa, ATa)
            _limit(Ua)
            Sa = np.matmul(Xa, Ua.transpose(0, 2, 1))
            _limit(Sa)
        if kind == "relu":
            Wt = _relu(S)
            if visible is not None:
                Wt = np.where(visible[None, :, :], Wt, 0)
        else:
            Wt = hardmax_weights(S, visible, L.lam)
        upd = _rowmul(np.matmul(Wt.transpose(0, 2, 1), X), BT)  # (B, n_query, d)
        out = out + (upd * coef if coef != 1 else upd)
        if Xa is not None:
            Wa_ = (np.where(visible[None, :, :], Sa, 0) if visible is not None else Sa) if kind == "relu" else Wt
            Va = np.matmul(Wa_.transpose(0, 2, 1), Xa)
            _limit(Va)
            upda = _rowmul(Va, BTa) * coef
            _limit(upda)
            outa = outa + upda
    if outa is not None:
        _limit(outa)
    return out, outa


def logits_fraction_reference(model: Model, token_ids) -> list[Fraction]:
    """Per-point evaluation of the paper's class (eq. 1-3) in Fractions: slow, obviously correct.
    The wider classes have their own reference in checkers/trace.py."""
    from depthcert.checkers.model import embed_exact

    if not model.is_plain:
        from depthcert.checkers.trace import trace

        return list(trace(model, token_ids).logits)
    H = embed_exact(model, token_ids)
    d, n = model.dim, len(token_ids)
    for layer in model.layers:
        m = len(layer)
        new = [row[:] for row in H]
        for head in layer:
            W, Wv = head.W_QK, head.W_V
            WH = [[sum(W[a, b] * H[b][k] for b in range(d) if H[b][k]) for k in range(n)] for a in range(d)]
            S = [[max(Fraction(0), sum(H[a][j] * WH[a][k] for a in range(d) if H[a][j])) for k in range(n)] for j in range(n)]
            VH = [[sum(Wv[a, b] * H[b][j] for b in range(d) if H[b][j]) for j in range(n)] for a in range(d)]
            for a in range(d):
                for k in range(n):
                    new[a][k] += sum(VH[a][j] * S[j][k] for j in range(n)) / m
        H = new
    h = [H[a][n - 1] for a in range(d)]
    return [sum(model.W_O[c, a] * h[a] for a in range(d) if h[a]) for c in range(len(model.classes))]
