"""The exact transformer: the paper's attention-only model (eq. 1-3) and its wider classes.

    H0 = [X; P; 1?; 0]  X one-hot tokens (rows 0..V-1, in the model's vocabulary order),
                        P one-hot positions (rows V..V+P-1), an optional constant row of ones
                        (row V+P, `constant_row=True`), zero padding up to d'
    per layer:
      H <- H + (1/m) sum_i W_Vi H A_i(H)        attention sublayer (skipped when m = 0)
      H <- H + W2 relu(W1 H + b1 1^T) + b2 1^T  optional MLP sublayer, column by column
    o_k = W_O h_k                               at the last column, or at every column

A_i(H) is an n x n matrix, entry (j, k) = weight of key j for query k, from the scores
s_jk = h_j^T W_QKi h_k:
    relu     A[j, k] = relu(s_jk)                                  (the paper's, the default)
    hardmax  A[j, k] = 1/|M_k| if j in M_k = argmax_j' s_j'k, else 0  (average-hard)
    softmax  A[j, k] = exp(c s_jk) / sum_j' exp(c s_j'k)            (c = scale / sqrt(scale_sqrt_divisor),
                                                                     both positive rationals)
A causal layer only lets query k see keys j <= k: masked entries are 0 (relu), outside the
argmax (hardmax) and outside the sum (softmax).

Weights are Fractions and inputs 0/1, so relu, hardmax and MLP models compute rationals;
softmax does not (see checkers/softmax_balls.py).  This module only holds and validates the
weights: evaluation lives in `checkers.evaluate` and `checkers.softmax_balls`.

Normalization and smooth activations (TransformerLens checkpoints, docs/trained-models.md): a
layer may normalize the stream its heads read (`norm_attn`) and the stream its MLP reads
(`norm_mlp`), and the classifier may read a normalized stream (`Model.norm_final`):
    G = N(H) column by column:  x = P h,  c = x - mean(x) (layernorm) or x (rmsnorm),
                                n = c / sqrt(mean(c^2) + eps),  G = [0 .. | 1 at the constant row | n at rows offset..]
    H <- H + (1/m) sum_i W_Vi G A_i(G)   (scores g_j^T W_QK g_k),   H <- H + W2 act(W1 G + b1) + b2,   o = W_O G
with act relu, gelu (erf), gelu_new / gelu_fast (tanh forms, constants as written) or silu.
Such models are not rational: checkers.accuracy decides them in certified intervals and arb.

Gated MLPs (SwiGLU, GeGLU; `MLP.W_gate`):  H <- H + W2 (act(W_gate G + b_gate) * (W1 G + b1)) + b2,
the product entry by entry, act one of gelu, gelu_new, gelu_fast, silu (a relu gate is refused).

Rotary heads (`Head.rotary`, softmax heads only): with q_k = W_Q g_k and k_j = W_K g_j (d_head
rows each; biases on the constant row), the score of key j for query k is
    s_jk = (R_k q_k) . (R_j k_j),
R_p rotating, for i < r/2 (r = rotary.dim, even, <= d_head), the pair of coordinates (i, i + r/2)
by the real angle p theta^(-2i/r):  x_i <- x_i cos a - x_{i+r/2} sin a,  x_{i+r/2} <- x_{i+r/2} cos a
+ x_i sin a  (transformers' rotate_half convention, positions p = 0, 1, ...); coordinates r.. are
not rotated.  theta is an exact positive rational, the angles and their cos/sin real numbers
(certified balls, checkers/rotary.py).  W_QK must equal W_K^T W_Q (the form at equal positions),
so a path that reads W_QK alone computes the same scores wherever R_k^T R_j = I.

Parallel layers (`Layer.parallel`, GPT-NeoX's use_parallel_residual): the MLP reads the stream the
heads read, not the stream after them:
    H <- H + (1/m) sum_i W_Vi G A_i(G) + W2 act(W1 N_mlp(H) + b1) + b2     (G = N_attn(H), both of the old H)
Only the certified interval and ball stages evaluate such a layer (it is never `is_rational`); the
exact tie decision, the tables, the symmetry proof, traces, weight balls and the weights file refuse it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Layout

ATTENTION_KINDS = ("relu", "hardmax", "softmax")
NORM_KINDS = ("layernorm", "rmsnorm")
# MLP activations: relu is exact; the others are transcendental (checkers/norm_activation_intervals.py)
ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_fast", "silu")
OUTPUT_KINDS = ("last", "all")


def _exact(value, where: str) -> Fraction:
    """An int, Fraction or "p/q" string as a Fraction; floats and bools are refused."""
    if isinstance(value, str):
        from depthcert.checkers.rational import parse_rational

        return parse_rational(value, where)
    if isinstance(value, (float, bool)) or not isinstance(value, (int, Fraction, np.integer)):
        raise BadInput(f"{where}: not an exact number: {value!r}")
    return Fraction(int(value)) if isinstance(value, np.integer) else Fraction(value)


def _exact_array(m, where: str) -> np.ndarray:
    """m as a read-only object array of Fractions; a float (or any inexact entry) is refused
    with BadInput naming the entry, so the Python API is as exact as the weights file."""
    if not isinstance(m, np.ndarray):
        try:
            m = np.array(m, dtype=object)
        except (ValueError, TypeError):
            raise BadInput(f"{where}: not a rectangular array of exact numbers") from None
    if m.dtype != object or not set(map(type, m.ravel().tolist())) <= {Fraction}:  # one C-level pass
        if m.dtype.kind in "fc":
            raise BadInput(f"{where}: float array ({m.dtype}); weights must be exact (int or Fraction)")
        out = np.empty(m.shape, dtype=object)
        for idx, v in np.ndenumerate(m):
            pos = "".join(f"[{i}]" for i in idx)
            out[idx] = _exact(v, f"{where}{pos}")
        m = out
    if m.flags.writeable:
        m = m.copy()
        m.flags.writeable = False
    return m


def _same(a, b) -> bool:
    """Field equality that compares weight arrays entry by entry."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


class _ExactEq:
    """== compares every field (weights entry by entry); notes are not compared."""

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name))
                   for f in fields(self) if f.compare)

    __hash__ = None


@dataclass(frozen=True, eq=False)
class Norm(_ExactEq):
    """A LayerNorm / RMSNorm of the vector x = P h (P: (k, d') exact), eps > 0 exact:
    n = c / sqrt(mean(c^2) + eps) with c = x - mean(x) (layernorm) or c = x (rmsnorm); its output
    G has n at rows offset .. offset + k - 1, 1 at the constant row, 0 elsewhere (gain and bias
    are folded into the matrices that read G)."""

    kind: str
    P: np.ndarray  # (k, d') Fractions
    eps: Fraction
    offset: int

    def __post_init__(self):
        if self.kind not in NORM_KINDS:
            raise BadInput(f"norm kind must be one of {', '.join(NORM_KINDS)}, got {self.kind!r}")
        eps = _exact(self.eps, "norm eps")
        if eps <= 0:
            raise BadInput(f"norm eps must be positive (a zero-variance stream divides by sqrt(eps)), got {eps}")
        object.__setattr__(self, "eps", eps)
        object.__setattr__(self, "P", _exact_array(self.P, "norm P"))

    @property
    def size(self) -> int:
        return self.P.shape[0]

    def centered_P(self) -> np.ndarray:
        """The exact (k, d') matrix giving c = Pc h: P with its column means subtracted (layernorm),
        P itself (rmsnorm)."""
        P = self.P
        if self.kind != "layernorm":
            return P
        k = P.shape[0]
        mean = [sum(P[:, j], Fraction(0)) / k for j in range(P.shape[1])]
        return np.array([[P[i, j] - mean[j] for j in range(P.shape[1])] for i in range(k)], dtype=object)

    def check(self, d: int, constant: int | None, where: str) -> None:
        if self.P.ndim != 2 or self.P.shape[1] != d or self.P.shape[0] < 1:
            raise BadInput(f"{where} P has shape {self.P.shape}, expected (k >= 1, {d})")
        if constant is None:
            raise BadInput(f"{where} needs the constant row (constant_row=True)")
        if not (0 <= self.offset and self.offset + self.size <= d) or self.offset <= constant < self.offset + self.size:
            raise BadInput(f"{where} writes rows {self.offset}..{self.offset + self.size - 1}, outside 0..{d - 1} "
                           "or over the constant row")


@dataclass(frozen=True, eq=False)
class Rotary(_ExactEq):
    """A head's rotary position embedding (module docstring): queries W_Q g, keys W_K g, the first
    `dim` coordinates rotated pairwise (i, i + dim/2) by the angle p theta^(-2i/dim) at position p."""

    W_Q: np.ndarray  # (d_head, d') Fractions
    W_K: np.ndarray  # (d_head, d') Fractions
    dim: int  # rotated coordinates: even, 2 .. d_head
    theta: Fraction  # the base, exact, > 0

    def __post_init__(self):
        for key in ("W_Q", "W_K"):
            object.__setattr__(self, key, _exact_array(getattr(self, key), f"rotary {key}"))
        theta = _exact(self.theta, "rotary theta")
        if theta <= 0:
            raise BadInput(f"rotary theta must be a positive rational, got {theta}")
        object.__setattr__(self, "theta", theta)
        dh = self.W_Q.shape[0] if self.W_Q.ndim == 2 else 0
        if self.W_Q.ndim != 2 or self.W_K.shape != self.W_Q.shape or dh < 1:
            raise BadInput(f"rotary W_Q and W_K must be two (d_head, d') matrices of one shape, got "
                           f"{self.W_Q.shape} and {self.W_K.shape}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 2 or self.dim % 2 \
                or self.dim > dh:
            raise BadInput(f"rotary dim must be an even integer in 2 .. d_head = {dh}, got {self.dim!r}")

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[0]


@dataclass(frozen=True, eq=False)
class Head(_ExactEq):
    """One attention head: scores h_j^T W_QK h_k, values W_V h_j, and how scores become weights."""

    W_QK: np.ndarray  # (d', d') Fractions
    W_V: np.ndarray  # (d', d') Fractions
    attention: str = "relu"  # relu | hardmax | softmax
    scale: Fraction = Fraction(1)  # softmax only: weights exp(c * score), normalised, with
    scale_sqrt_divisor: Fraction = Fraction(1)  # c = scale / sqrt(scale_sqrt_divisor) (1/sqrt(key_size))
    rotary: Rotary | None = None  # softmax only: scores (R_k W_Q g_k) . (R_j W_K g_j) (module docstring)

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise BadInput(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {self.attention!r}")
        scale = _exact(self.scale, "scale")
        root = _exact(self.scale_sqrt_divisor, "scale_sqrt_divisor")
        if scale <= 0:
            raise BadInput(f"scale must be a positive rational, got {scale}")
        if root <= 0:
            raise BadInput(f"scale_sqrt_divisor must be a positive rational, got {root}")
        if self.attention != "softmax" and (scale != 1 or root != 1):
            raise BadInput(f"scale applies to softmax heads only (this head is {self.attention})")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "scale_sqrt_divisor", root)
        for key in ("W_QK", "W_V"):
            object.__setattr__(self, key, _exact_array(getattr(self, key), f"head {key}"))
        if self.rotary is not None:
            if not isinstance(self.rotary, Rotary):
                raise BadInput(f"head rotary must be a Rotary, got {type(self.rotary).__name__}")
            if self.attention != "softmax":
                raise BadInput(f"rotary positions apply to softmax heads only (this head is {self.attention})")
            R = self.rotary
            if R.W_Q.shape[1] != self.W_QK.shape[1] or not _product_T_equals(R.W_K, R.W_Q, self.W_QK):
                raise BadInput("a rotary head's W_QK must equal W_K^T W_Q exactly (the scores at equal positions)")


def _product_T_equals(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> bool:
    """A^T B == C exactly (Fraction arrays; the product and the comparison in python-flint fmpq_mat,
    no Fraction per entry of the product)."""
    import flint

    def q(M):
        return flint.fmpq_mat(M.shape[0], M.shape[1], [flint.fmpq(v.numerator, v.denominator) for v in M.ravel()])

    if A.shape[0] != B.shape[0] or (A.shape[1], B.shape[1]) != C.shape:
        return False
    return q(A).transpose() * q(B) == q(C)


GATED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "silu")  # SwiGLU (silu), GeGLU (the gelus)


@dataclass(frozen=True, eq=False)
class MLP(_ExactEq):
    """h <- h + W2 act(W1 h + b1) + b2, applied to every column after the attention sublayer; gated
    (W_gate set): h <- h + W2 (act(W_gate h + b_gate) * (W1 h + b1)) + b2, the product entry by entry."""

    W1: np.ndarray  # (d_ff, d') Fractions (gated: the up projection)
    b1: np.ndarray  # (d_ff,)
    W2: np.ndarray  # (d', d_ff)
    b2: np.ndarray  # (d',)
    activation: str = "relu"  # one of ACTIVATIONS (gated: GATED_ACTIVATIONS)
    W_gate: np.ndarray | None = None  # (d_ff, d') Fractions: a gated MLP's gate projection
    b_gate: np.ndarray | None = None  # (d_ff,) (zeros when W_gate is set without it)

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise BadInput(f"mlp activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        for key in ("W1", "b1", "W2", "b2"):
            object.__setattr__(self, key, _exact_array(getattr(self, key), f"mlp {key}"))
        if self.W_gate is None and self.b_gate is not None:
            raise BadInput("mlp b_gate without W_gate")
        if self.W_gate is not None:
            if self.activation not in GATED_ACTIVATIONS:
                raise BadInput(f"a gated mlp's activation must be one of {', '.join(GATED_ACTIVATIONS)}, got "
                               f"{self.activation!r}")
            object.__setattr__(self, "W_gate", _exact_array(self.W_gate, "mlp W_gate"))
            b = np.full(self.W_gate.shape[:1], Fraction(0), dtype=object) if self.b_gate is None else self.b_gate
            object.__setattr__(self, "b_gate", _exact_array(b, "mlp b_gate"))

    @property
    def gated(self) -> bool:
        return self.W_gate is not None

    @property
    def width(self) -> int:
        return self.W1.shape[0]

    def check(self, d: int, where: str) -> None:
        f = self.W1.shape[0] if self.W1.ndim == 2 else -1
        gate = (("W_gate", (f, d)), ("b_gate", (f,))) if self.W_gate is not None else ()
        for key, shape in (("W1", (f, d)), ("b1", (f,)), ("W2", (d, f)), ("b2", (d,))) + gate:
            m = getattr(self, key)
            if not isinstance(m, np.ndarray) or m.shape != shape or f < 1:
                got = getattr(m, "shape", type(m).__name__)
                raise BadInput(f"{where}.mlp.{key} has shape {got}, expected {shape if f >= 1 else '(d_ff >= 1, ...)'}")


@dataclass(frozen=True, eq=False)
class Layer(_ExactEq):
    """Attention heads (averaged, paper eq. 2), an optional causal mask, an optional MLP.

    A layer reads as the tuple of its heads (len, iteration, indexing), as in the paper's class."""

    heads: tuple[Head, ...]
    causal: bool = False
    mlp: MLP | None = None
    norm_attn: Norm | None = None  # the heads read N(H) (scores and values)
    norm_mlp: Norm | None = None  # the MLP reads N(H)
    parallel: bool = False  # the MLP reads the stream before the attention update (module docstring)

    def __post_init__(self):
        object.__setattr__(self, "heads", tuple(self.heads))
        if not isinstance(self.parallel, bool):
            raise BadInput(f"parallel must be true or false, got {self.parallel!r}")
        if self.parallel and (self.mlp is None or not self.heads):
            raise BadInput("a parallel layer needs attention heads and an MLP (it adds both to the same stream)")
        for key in ("norm_attn", "norm_mlp"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), Norm):
                raise BadInput(f"layer {key} must be a Norm, got {type(getattr(self, key)).__name__}")
        if not isinstance(self.causal, bool):
            raise BadInput(f"causal must be true or false, got {self.causal!r}")
        for h in self.heads:
            if not isinstance(h, Head):
                raise BadInput(f"a layer holds Head objects, got {type(h).__name__}")

    def __len__(self) -> int:
        return len(self.heads)

    def __iter__(self):
        return iter(self.heads)

    def __getitem__(self, i):
        return self.heads[i]

    @property
    def is_plain(self) -> bool:
        """The paper's layer: relu heads only, no mask, no MLP."""
        return not self.causal and self.mlp is None and self.is_rational and all(h.attention == "relu" for h in self.heads)

    @property
    def is_rational(self) -> bool:
        """No softmax head, no normalization, relu MLP (if any), not parallel: rational in, rational out
        (a parallel layer is left to the certified stages, which alone evaluate it)."""
        return (not self.parallel and self.norm_attn is None and self.norm_mlp is None and (self.mlp is None or self.mlp.activation == "relu")
                and all(h.attention != "softmax" for h in self.heads))


@dataclass(frozen=True, eq=False)
class Model(_ExactEq):
    """A transformer with exact weights.

    vocab:        token names; token vocab[t] embeds as the one-hot row t.
    max_length:   size of the one-hot position block (sequences of length <= max_length).
    classes:      output names; row c of W_O scores class classes[c].
    layout:       named blocks covering all d' rows (documentation and block access).
    layers:       a tuple of `Layer`s (a plain tuple of heads is read as Layer(heads)).
    outputs:      "last" (the classifier reads the last column) or "all" (every column).
    constant_row: H0 has a row of ones at row V + max_length (a bias direction).
    """

    vocab: tuple[str, ...]
    max_length: int
    classes: tuple[str, ...]
    layout: Layout
    layers: tuple[Layer, ...]
    W_O: np.ndarray  # (C, d') Fractions
    name: str = ""
    notes: dict = field(default_factory=dict, compare=False)
    outputs: str = "last"
    constant_row: bool = False
    norm_final: Norm | None = None  # the classifier reads N(H)

    def __post_init__(self):
        d = self.layout.dim
        object.__setattr__(self, "W_O", _exact_array(self.W_O, "W_O"))
        object.__setattr__(self, "layers", tuple(
            layer if isinstance(layer, Layer) else Layer(tuple(layer)) for layer in self.layers))
        if len(set(self.vocab)) != len(self.vocab):
            raise BadInput("model vocabulary has duplicate tokens")
        if len(set(self.classes)) != len(self.classes):
            raise BadInput("model classes have duplicates")
        if self.max_length < 1:
            raise BadInput(f"max_length must be >= 1, got {self.max_length}")
        if self.outputs not in OUTPUT_KINDS:
            raise BadInput(f"outputs must be \"last\" or \"all\", got {self.outputs!r}")
        if not isinstance(self.constant_row, bool):
            raise BadInput(f"constant_row must be true or false, got {self.constant_row!r}")
        if self.input_rows > d:
            raise BadInput(
                f"d' = {d} is smaller than vocabulary ({len(self.vocab)}) + positions ({self.max_length})"
                + (" + constant row (1)" if self.constant_row else "")
            )
        self._check_layout_names()
        for li, layer in enumerate(self.layers):
            if len(layer) == 0 and layer.mlp is None:
                raise BadInput(f"layers[{li}] has no heads")
            for hi, head in enumerate(layer):
                for key in ("W_QK", "W_V"):
                    m = getattr(head, key)
                    if m.shape != (d, d):
                        raise BadInput(f"layers[{li}][{hi}].{key} has shape {m.shape}, expected ({d}, {d})")
                if head.rotary is not None and head.rotary.W_Q.shape[1] != d:
                    raise BadInput(f"layers[{li}][{hi}].rotary.W_Q has shape {head.rotary.W_Q.shape}, expected "
                                   f"(d_head, {d})")
            if layer.mlp is not None:
                layer.mlp.check(d, f"layers[{li}]")
            for key in ("norm_attn", "norm_mlp"):
                if getattr(layer, key) is not None:
                    getattr(layer, key).check(d, self.constant_index, f"layers[{li}].{key}")
            if layer.norm_mlp is not None and layer.mlp is None:
                raise BadInput(f"layers[{li}].norm_mlp without an MLP")
        if self.norm_final is not None:
            if not isinstance(self.norm_final, Norm):
                raise BadInput(f"norm_final must be a Norm, got {type(self.norm_final).__name__}")
            self.norm_final.check(d, self.constant_index, "norm_final")
        if self.W_O.shape != (len(self.classes), d):
            raise BadInput(f"W_O has shape {self.W_O.shape}, expected ({len(self.classes)}, {d})")

    def _check_layout_names(self) -> None:
        """Blocks named "token", "position" and "one" must sit where H0 puts them (rows 0..V-1,
        V..V+max_length-1, V+max_length): a layout listing them elsewhere would silently read
        the wrong rows.  Other names are free (the paper's constructions name their token rows
        "question", "answer", "entity", ...)."""
        V, n, lay = len(self.vocab), self.max_length, self.layout
        if "token" in lay and not (lay.offset("token") + lay.size("token") <= V):
            raise BadInput(f"layout block \"token\" is rows {lay.offset('token')}..{lay.offset('token') + lay.size('token') - 1}"
                           f", but token one-hots are rows 0..{V - 1}: list the token block first")
        if "position" in lay and (lay.offset("position"), lay.size("position")) != (V, n):
            raise BadInput(f"layout block \"position\" must be rows {V}..{V + n - 1} (after the {V} token rows, "
                           f"{n} rows for max_length {n}), got offset {lay.offset('position')} size {lay.size('position')}")
        if "one" in lay and (not self.constant_row or (lay.offset("one"), lay.size("one")) != (V + n, 1)):
            raise BadInput(f"layout block \"one\" is the constant row: it needs constant_row=True and must be row {V + n}")

    @property
    def dim(self) -> int:
        return self.layout.dim

    @property
    def heads(self) -> tuple[int, ...]:
        return tuple(len(layer) for layer in self.layers)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def constant_index(self) -> int | None:
        """Row of the constant direction, or None."""
        return len(self.vocab) + self.max_length if self.constant_row else None

    @property
    def input_rows(self) -> int:
        """Rows of H0 that can be non-zero: tokens, positions and the constant row."""
        return len(self.vocab) + self.max_length + int(self.constant_row)

    @property
    def is_plain(self) -> bool:
        """The paper's model class: relu attention only, no masks, no MLPs, no constant row,
        the classifier on the last column."""
        return (self.outputs == "last" and not self.constant_row and self.norm_final is None
                and all(L.is_plain for L in self.layers))

    @property
    def has_softmax(self) -> bool:
        return any(h.attention == "softmax" for L in self.layers for h in L)

    @property
    def has_norm_or_smooth(self) -> bool:
        """Some LayerNorm/RMSNorm, a gelu/silu MLP (gated MLPs are), a rotary head or a parallel layer
        (never decided by exact rationals alone)."""
        return self.norm_final is not None or any(
            L.parallel or L.norm_attn is not None or L.norm_mlp is not None or (L.mlp is not None and L.mlp.activation != "relu")
            or any(h.rotary is not None for h in L.heads) for L in self.layers)

    @property
    def has_rotary(self) -> bool:
        return any(h.rotary is not None for L in self.layers for h in L.heads)

    @property
    def has_parallel(self) -> bool:
        return any(L.parallel for L in self.layers)

    @property
    def has_gated_mlp(self) -> bool:
        return any(L.mlp is not None and L.mlp.gated for L in self.layers)

    @property
    def is_rational(self) -> bool:
        """Every logit is a rational function of the weights: exact integers decide it (checkers.evaluate)."""
        return self.norm_final is None and all(L.is_rational for L in self.layers)

    @property
    def first_irrational(self) -> int:
        """The first layer that is not rational (n_layers when only the final norm is, or none)."""
        return next((i for i, L in enumerate(self.layers) if not L.is_rational), len(self.layers))

    def kinds(self) -> str:
        """A short description of the model class, e.g. "relu" or "hardmax+causal+mlp"."""
        parts = sorted({h.attention for L in self.layers for h in L}, key=ATTENTION_KINDS.index)
        if any(L.causal for L in self.layers):
            parts.append("causal")
        if any(L.mlp is not None for L in self.layers):
            parts.append("mlp")
        acts = sorted({L.mlp.activation for L in self.layers if L.mlp is not None} - {"relu"})
        parts += acts
        if self.has_gated_mlp:
            parts.append("gated")
        if self.has_rotary:
            parts.append("rotary")
        if self.has_parallel:
            parts.append("parallel")
        norms = sorted({N.kind for L in self.layers for N in (L.norm_attn, L.norm_mlp) if N is not None}
                       | ({self.norm_final.kind} if self.norm_final is not None else set()))
        parts += norms
        if self.constant_row:
            parts.append("constant-row")
        if self.outputs == "all":
            parts.append("all-positions")
        return "+".join(parts) or "mlp-only"

    def with_weight(self, where: tuple, value) -> "Model":
        """A copy with one entry changed: ("W_O", i, j), (layer, head, "W_QK"|"W_V", i, j),
        or (layer, "mlp", "W1"|"W2", i, j) / (layer, "mlp", "b1"|"b2", i)."""
        value = Fraction(value)
        if where[0] == "W_O":
            W = self.W_O.copy()
            W[where[1], where[2]] = value
            W.flags.writeable = False
            return replace(self, W_O=W)
        layers = list(self.layers)
        li = where[0]
        layer = layers[li]
        if where[1] == "mlp":
            key, idx = where[2], tuple(where[3:])
            M = getattr(layer.mlp, key).copy()
            M[idx] = value
            M.flags.writeable = False
            layers[li] = replace(layer, mlp=replace(layer.mlp, **{key: M}))
        else:
            _, hi, key, i, j = where
            heads = list(layer.heads)
            M = getattr(heads[hi], key).copy()
            M[i, j] = value
            M.flags.writeable = False
            heads[hi] = replace(heads[hi], **{key: M})
            layers[li] = replace(layer, heads=tuple(heads))
        return replace(self, layers=tuple(layers))


def embed_exact(model: Model, token_ids) -> list[list[Fraction]]:
    """H0 for one sequence as a d' x n list of Fractions (the reference embedding)."""
    n = len(token_ids)
    V = len(model.vocab)
    H = [[Fraction(0)] * n for _ in range(model.dim)]
    for pos, t in enumerate(token_ids):
        H[t][pos] = Fraction(1)
        H[V + pos][pos] = Fraction(1)
        if model.constant_row:
            H[model.constant_index][pos] = Fraction(1)
    return H
