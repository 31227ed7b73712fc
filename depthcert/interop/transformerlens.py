"""TransformerLens checkpoints in: a HookedTransformer's config and state dict as an exact depthcert
`Model` (docs/trained-models.md).  Needs numpy and python-flint only (torch for `.pt` files).

Every float32 / float16 / bfloat16 parameter is read as the dyadic rational it is, and the config's
eps as the float64 it is.  TransformerLens computes, for tokens t_0..t_{n-1} (standard positional
embedding):

    x_k = W_E[t_k] + W_pos[k]
    per layer:  y = ln1(x)   (identity without normalization)
                q = y W_Q[h] + b_Q[h],  k = y W_K[h] + b_K[h],  v = y W_V[h] + b_V[h]
                A[h] = softmax over visible keys of (q . k) / sqrt(d_head)   (causal: keys <= query)
                x <- x + sum_h (A[h] v) W_O[h] + b_O
                x <- x + act(ln2(x) W_in + b_in) W_out + b_out               (when not attn_only)
    logits = ln_final(x) W_U + b_U

with LN(x) = w * (x - mean x) / sqrt(mean((x - mean x)^2) + eps) + b (LNPre: w = 1, b = 0, what
fold_ln leaves), RMS(x) = w * x / sqrt(mean(x^2) + eps) (RMSPre: w = 1), act relu, gelu (erf),
gelu_new / gelu_pytorch_tanh / gelu_fast (tanh; TransformerLens's constants sqrt(2/pi), 0.7978845608
and 0.044715 taken as the real numbers they name) or silu.

depthcert's residual stream keeps its one-hot input and carries the TransformerLens stream in a
block of its own: rows [token (d_vocab) | position (n_ctx) | one (1) | resid (d_model)], so
x = E h with E = [W_E^T | W_pos^T | 0 | I], and every affine map of x is a linear map of h (the
biases sit on the constant row).  Then, exactly:

    W_QK[h] = K^T Q   with Q = W_Q[h]^T E + b_Q[h] e_one^T, K likewise, scale 1/sqrt(d_head)
    W_V[h]  = n_heads * R (W_O[h]^T (W_V[h]^T E + b_V[h] e_one^T))   (+ n_heads R b_O e_one^T, head 0)
    MLP     W1 = W_in^T E, b1 = b_in, W2 = R W_out^T, b2 = R b_out
    W_O     = W_U^T E + b_U e_one^T

A normalization is depthcert's Norm (checkers/model.py) of x = E h: its output G has the
normalized vector in the resid block and 1 at the constant row, and the gain and bias fold into
the matrices reading it: E is replaced by E_y with E_y[i, resid i] = w_i and E_y[i, one] = b_i.

R writes into the resid block.  depthcert averages the heads of a layer (1/n_heads), hence the
factor n_heads; b_O rides on head 0's value of the constant row, which adds exactly b_O because
the attention weights of a query add up to exactly 1.  The exact model's scale is the real number
1/sqrt(d_head), of which TransformerLens divides by a float64 rounding.

Refused, with one line each: activations other than the above (solu, relu2, xielu), gated or
parallel MLPs, post-norm architectures, a normalization inside attention (use_qk_norm) or after the
embedding or around each sublayer, rotary / shortformer / ALiBi positions,
grouped-query heads, local attention, soft caps, a custom attention scale, and state dict
entries this reader does not know.
"""
from __future__ import annotations

import json
import os
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Layout
from depthcert.checkers.model import MLP, Head, Layer, Model, Norm

MAX_SIZE = 4096  # d_vocab + n_ctx + 1 + d_model must fit checkers.layout.MAX_DIM
MAX_HIDDEN = 1 << 14  # d_head, d_mlp


@dataclass(frozen=True)
class TLConfig:
    """The parts of a HookedTransformerConfig that decide what the model computes."""

    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_vocab: int
    d_vocab_out: int
    n_ctx: int
    d_mlp: int | None  # None: attention-only
    causal: bool
    scaled: bool  # scores divided by sqrt(d_head) (use_attn_scale)
    normalization: str | None = None  # None | "LN" | "LNPre" | "RMS" | "RMSPre"
    eps: float = 1e-5  # read as the exact float64 it is
    act_fn: str = "relu"  # MLP activation (when d_mlp)
    final_rms: bool = False  # the final normalization is RMS (RMSPre under LNPre)

    def to_dict(self) -> dict:
        """A HookedTransformerConfig dict that TransformerLens reads back (from_dict / HookedTransformer(cfg))."""
        return {"n_layers": self.n_layers, "d_model": self.d_model, "n_heads": self.n_heads, "d_head": self.d_head,
                "d_vocab": self.d_vocab, "d_vocab_out": self.d_vocab_out, "n_ctx": self.n_ctx,
                "d_mlp": self.d_mlp, "act_fn": self.act_fn if self.d_mlp else None, "attn_only": self.d_mlp is None,
                "normalization_type": self.normalization, "eps": self.eps, "final_rms": self.final_rms,
                "positional_embedding_type": "standard",
                "attention_dir": "causal" if self.causal else "bidirectional", "use_attn_scale": self.scaled,
                "default_prepend_bos": False}


NORMALIZATIONS = (None, "LN", "LNPre", "RMS", "RMSPre")
# TransformerLens act_fn -> depthcert's MLP activation (gelu_pytorch_tanh is gelu_new's function)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
               "gelu_fast": "gelu_fast", "silu": "silu"}
POST_NORM = ("Olmo2ForCausalLM", "Olmo3ForCausalLM")  # TransformerLens's POST_NORM_ARCHITECTURES


# HookedTransformerConfig's fields in TransformerLens 3.9.0 (the `interop` extra's pin;
# tests/test_hole_verify_model.py compares them with the installed class): a config key outside
# them is refused by HookedTransformerConfig.from_dict (a typo such as normalisation_type), ignored by this
# reader, and named by verify-model in one warning line (--strict-config: refused)
TL_VERSION = "3.9.0"
TL_FIELDS = frozenset((
    "NTK_by_parts_factor", "NTK_by_parts_high_freq_factor", "NTK_by_parts_low_freq_factor",
    "NTK_original_ctx_len", "act_fn", "attention_dir", "attn_only", "attn_scale", "attn_scores_soft_cap",
    "attn_types", "checkpoint_index", "checkpoint_label_type", "checkpoint_value", "clip_qkv", "d_head",
    "d_mlp", "d_model", "d_vocab", "d_vocab_out", "decoder_start_token_id", "default_prepend_bos", "device",
    "dtype", "eps", "experts_per_token", "final_rms", "from_checkpoint", "gated_mlp", "init_mode",
    "init_weights", "initializer_range", "layer_norm_folding", "load_in_4bit", "model_name", "n_ctx",
    "n_devices", "n_heads", "n_key_value_heads", "n_layers", "n_params", "norm_topk_prob",
    "normalization_type", "num_experts", "original_architecture", "output_logits_soft_cap",
    "parallel_attn_mlp", "positional_embedding_type", "post_embedding_ln", "quantization_method",
    "relative_attention_max_distance", "relative_attention_num_buckets", "rotary_adjacent_pairs",
    "rotary_base", "rotary_base_local", "rotary_dim", "rotary_scaling_factor",
    "scale_attn_by_inverse_layer_idx", "seed", "tie_word_embeddings", "tokenizer_name",
    "tokenizer_prepends_bos", "train_seq_length", "trust_remote_code", "ungroup_grouped_query_attention",
    "use_NTK_by_parts_rope", "use_attention_sinks", "use_attn_in", "use_attn_result", "use_attn_scale",
    "use_dynamic_ntk_rope", "use_hook_mlp_in", "use_hook_tokens", "use_local_attn", "use_logn_attn",
    "use_normalization_before_and_after", "use_qk_norm", "use_split_qkv_input", "use_yarn_rope",
    "uses_rms_norm", "window_size", "yarn_attention_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_factor",
    "yarn_global_attn_only", "yarn_original_max_position_embeddings", "yarn_truncate",
))


# what depthcert's own trainers record next to the config in a checkpoint they write (training/grokking.py,
# training/induction.py, depthcert/cli/train_max_of_k.py): the run that made it, not a model field
RECORD_KEYS = frozenset(("at_step", "at_test_accuracy", "at_test_loss", "at_train_accuracy", "at_train_loss", "betas",
                         "data_seed", "epochs", "final_loss", "frac_train", "lr", "n_train", "sampled_accuracy", "steps",
                         "weight_decay"))


def unknown_config_keys(cfg) -> list[str]:
    """The keys of a config dict that are neither HookedTransformerConfig fields (TL_FIELDS) nor the
    training records depthcert's trainers write (RECORD_KEYS), sorted.  HookedTransformerConfig.from_dict
    refuses such a key (TypeError); this reader ignores it, and verify-model says so."""
    return sorted(str(k) for k in cfg if k not in TL_FIELDS and k not in RECORD_KEYS) if isinstance(cfg, dict) else []


def _norm_params(kind: str | None) -> tuple[str, ...]:
    """The state dict parameters of one normalization module."""
    return {"LN": ("w", "b"), "RMS": ("w",)}.get(kind, ())


def final_norm(c: "TLConfig") -> str | None:
    """ln_final's kind: RMS (RMSPre under LNPre) when final_rms, else the blocks' kind."""
    if c.normalization in ("LN", "LNPre") and c.final_rms:
        return "RMS" if c.normalization == "LN" else "RMSPre"
    return c.normalization


def _int(cfg: dict, key: str, default=None, low: int = 1, high: int = MAX_SIZE) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"TransformerLens config: {key} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise BadInput(f"TransformerLens config: {key} = {value} is outside {low} .. {high}")
    return value


def _falsy(cfg: dict, key: str, what: str) -> None:
    v = cfg.get(key)
    if v not in (None, False, 0, 0.0, -1, -1.0, "", []):
        raise BadInput(f"TransformerLens config: {what} ({key} = {v!r}) is not supported")


def config_from_dict(cfg) -> TLConfig:
    """Validate a HookedTransformerConfig dict (cfg.to_dict() or the JSON of it); refuse with one
    line what the exact model cannot express."""
    if not isinstance(cfg, dict):
        raise BadInput("TransformerLens config must be a JSON object (HookedTransformerConfig.to_dict())")
    missing = [k for k in ("n_layers", "d_model", "n_heads", "d_head", "d_vocab", "n_ctx") if k not in cfg]
    if missing:
        raise BadInput(f"TransformerLens config lacks {', '.join(missing)} (HookedTransformerConfig.to_dict() has them)")
    norm = cfg.get("normalization_type")
    if norm == "None":
        norm = None
    if norm not in NORMALIZATIONS:
        raise BadInput(f"TransformerLens config: normalization_type {norm!r} is not supported (None, LN, LNPre, RMS "
                       "or RMSPre)")
    eps = cfg.get("eps", 1e-5)
    if norm is not None:
        # an integer eps beyond float64 (JSON allows 10**400) is not finite either: float() would
        # raise OverflowError, and math.isfinite does the same on such an int
        finite = isinstance(eps, float) and math.isfinite(eps) or \
            isinstance(eps, int) and not isinstance(eps, bool) and abs(eps) <= int(np.finfo(np.float64).max)
        if not finite or eps <= 0:
            shown = repr(eps) if len(repr(eps)) <= 40 else repr(eps)[:20] + "..."
            raise BadInput(f"TransformerLens config: eps must be a positive finite number, got {shown} (a "
                           "zero-variance stream divides by sqrt(eps))")
    final_rms = cfg.get("final_rms", False)
    if not isinstance(final_rms, bool):
        raise BadInput(f"TransformerLens config: final_rms must be true or false, got {final_rms!r}")
    arch = cfg.get("original_architecture")
    if arch in POST_NORM:
        raise BadInput(f"TransformerLens config: original_architecture {arch!r} is post-norm (the norm after each "
                       "sublayer), which is not supported")
    pos = cfg.get("positional_embedding_type", "standard")
    if pos != "standard":
        raise BadInput(f"TransformerLens config: positional_embedding_type {pos!r} is not supported (only \"standard\")")
    attn_only = cfg.get("attn_only", False)
    if not isinstance(attn_only, bool):
        raise BadInput(f"TransformerLens config: attn_only must be true or false, got {attn_only!r}")
    d_mlp = None
    act = "relu"
    if not attn_only:
        act = cfg.get("act_fn")
        if act not in ACTIVATIONS:
            raise BadInput(f"TransformerLens config: act_fn {act!r} is not supported (relu, gelu, gelu_new, "
                           "gelu_pytorch_tanh, gelu_fast or silu; or set attn_only)")
        act = ACTIVATIONS[act]
        d_mlp = _int(cfg, "d_mlp", high=MAX_HIDDEN)
        _falsy(cfg, "gated_mlp", "a gated MLP")
    _falsy(cfg, "parallel_attn_mlp", "parallel attention and MLP")
    _falsy(cfg, "n_key_value_heads", "grouped-query attention")
    _falsy(cfg, "use_qk_norm", "QK normalization")
    _falsy(cfg, "post_embedding_ln", "a post-embedding LayerNorm")
    _falsy(cfg, "use_normalization_before_and_after", "normalization before and after")
    _falsy(cfg, "attn_scores_soft_cap", "an attention soft cap")
    _falsy(cfg, "output_logits_soft_cap", "an output soft cap")
    _falsy(cfg, "num_experts", "mixture of experts")
    _falsy(cfg, "clip_qkv", "clipped Q/K/V")
    _falsy(cfg, "use_logn_attn", "log-n attention scaling")
    _falsy(cfg, "scale_attn_by_inverse_layer_idx", "attention scaled by the inverse layer index")
    _falsy(cfg, "use_local_attn", "local attention")
    _falsy(cfg, "use_attention_sinks", "attention sinks")
    _falsy(cfg, "relative_attention_num_buckets", "relative attention (T5)")
    types = cfg.get("attn_types")
    if types and any(t != "global" for t in types):
        raise BadInput(f"TransformerLens config: attn_types {types!r} is not supported (global attention only)")
    direction = cfg.get("attention_dir", "causal")
    if direction not in ("causal", "bidirectional"):
        raise BadInput(f"TransformerLens config: attention_dir {direction!r} is not causal or bidirectional")
    d_head = _int(cfg, "d_head", high=MAX_HIDDEN)
    scaled = cfg.get("use_attn_scale", True)
    if not isinstance(scaled, bool):
        raise BadInput(f"TransformerLens config: use_attn_scale must be true or false, got {scaled!r}")
    if scaled:
        scale = cfg.get("attn_scale", -1.0)
        if scale not in (None, -1, -1.0) and scale != float(np.sqrt(d_head)):
            raise BadInput(f"TransformerLens config: attn_scale {scale!r} is not sqrt(d_head) = {np.sqrt(d_head)!r}; "
                           "only the standard scale is supported")
    d_vocab = _int(cfg, "d_vocab")
    out = cfg.get("d_vocab_out", -1)
    d_vocab_out = d_vocab if out in (None, -1) else _int(cfg, "d_vocab_out")
    n_ctx = _int(cfg, "n_ctx")
    d_model = _int(cfg, "d_model")
    if d_vocab + n_ctx + 1 + d_model > MAX_SIZE:
        raise BadInput(f"TransformerLens config: d_vocab + n_ctx + 1 + d_model = {d_vocab + n_ctx + 1 + d_model} "
                       f"exceeds depthcert's residual limit {MAX_SIZE}")
    return TLConfig(_int(cfg, "n_layers", high=256), d_model, _int(cfg, "n_heads", high=256), d_head, d_vocab,
                    d_vocab_out, n_ctx, d_mlp, direction == "causal", scaled, norm,
                    float(eps) if norm is not None else 1e-5, act, final_rms and norm is not None)


def expected_shapes(c: TLConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the state dict and its shape."""
    shapes = {"embed.W_E": (c.d_vocab, c.d_model), "pos_embed.W_pos": (c.n_ctx, c.d_model),
              "unembed.W_U": (c.d_model, c.d_vocab_out), "unembed.b_U": (c.d_vocab_out,)}
    for li in range(c.n_layers):
        p = f"blocks.{li}."
        for w in ("W_Q", "W_K", "W_V"):
            shapes[p + "attn." + w] = (c.n_heads, c.d_model, c.d_head)
        for b in ("b_Q", "b_K", "b_V"):
            shapes[p + "attn." + b] = (c.n_heads, c.d_head)
        shapes[p + "attn.W_O"] = (c.n_heads, c.d_head, c.d_model)
        shapes[p + "attn.b_O"] = (c.d_model,)
        if c.d_mlp is not None:
            shapes.update({p + "mlp.W_in": (c.d_model, c.d_mlp), p + "mlp.b_in": (c.d_mlp,),
                           p + "mlp.W_out": (c.d_mlp, c.d_model), p + "mlp.b_out": (c.d_model,)})
        for ln in ("ln1", "ln2") if c.d_mlp is not None else ("ln1",):
            shapes.update({f"{p}{ln}.{w}": (c.d_model,) for w in _norm_params(c.normalization)})
    shapes.update({f"ln_final.{w}": (c.d_model,) for w in _norm_params(final_norm(c))})
    return shapes


_BUFFERS = (".attn.mask", ".attn.IGNORE", ".attn.rotary_sin", ".attn.rotary_cos")


def check_state_dict(c: TLConfig, sd: dict) -> dict[str, np.ndarray]:
    """The parameters as float64 arrays of the right shapes, every value finite; buffers
    (causal mask, IGNORE) dropped; any other entry refused."""
    if not isinstance(sd, dict):
        raise BadInput("TransformerLens state dict must be a mapping of names to tensors")
    shapes = expected_shapes(c)
    out = {}
    for key, value in sd.items():
        if key in shapes:
            continue
        if key.endswith(_BUFFERS) and not key.endswith((".rotary_sin", ".rotary_cos")):
            continue
        if ".ln" in key or key.startswith("ln_final"):
            raise BadInput(f"TransformerLens state dict has normalization weights ({key}) that normalization_type "
                           f"{c.normalization!r} does not have")
        raise BadInput(f"TransformerLens state dict: unexpected entry {key!r} for this config")
    from depthcert.interop.checkpoint_files import float_arrays

    out.update(float_arrays(sd, shapes, "TransformerLens"))
    return out


def _fmpq_mat(arr: np.ndarray):
    """A float64 array (rows x cols) as an exact flint fmpq_mat (every entry the rational the float
    is).  Speed: when the entries share a denominator 2^e with every numerator below 2^62
    (_dyadic_integers: float32 weights of a checkpoint, whose exponents span a few dozen binades)
    the matrix is built from one list of integers and divided by 2^e in flint; otherwise entry by
    entry (float.as_integer_ratio).  The same matrix either way."""
    import flint

    a = np.atleast_2d(arr)
    ints = _dyadic_integers(a)
    if ints is not None:
        nums, e = ints
        M = flint.fmpq_mat(flint.fmpz_mat(a.shape[0], a.shape[1], nums.ravel().tolist()))
        return M / (1 << e) if e else M
    return flint.fmpq_mat([[flint.fmpq(*float(v).as_integer_ratio()) for v in row] for row in a])


def _dyadic_integers(a: np.ndarray):
    """(N, e) with a == N / 2^e exactly, N int64 with |N| < 2^62, e >= 0; or None (a not a finite
    float array, or the entries' binades too far apart for int64).  frexp splits each float
    exactly as a = m 2^x with |m| in [1/2, 1) (or m = 0); m 2^53 is an integer I (a float64 has at
    most 53 significant bits, subnormals fewer), so a = I 2^(x - 53) exactly; I's trailing zero bits
    t (from its lowest set bit I & -I, a power of 2 and so a float exactly) give a = o 2^g with o
    = I >> t odd and g = x - 53 + t.  With e = max(0, -min g), N = o << (g + e) is exact when o's
    bit length plus g + e stays at most 62 (checked; otherwise None)."""
    if a.dtype.kind != "f" or a.dtype.itemsize > 8:
        return None
    a = a.astype(np.float64, copy=False)  # float16/32 values are float64 values exactly
    if not np.isfinite(a).all():
        return None
    mant, x = np.frexp(a)
    I = (mant * 2.0 ** 53).astype(np.int64)  # exact: an integer below 2^53 in magnitude
    nz = I != 0
    if not nz.any():
        return np.zeros(a.shape, dtype=np.int64), 0
    low = np.where(nz, I & -I, 1)
    t = np.frexp(low.astype(np.float64))[1] - 1  # low = 2^t exactly
    o = np.where(nz, I >> t, 0)  # exact: I is a multiple of 2^t
    g = x.astype(np.int64) - 53 + t
    e = max(0, -int(g[nz].min()))
    shift = np.where(nz, g + e, 0)
    obits = np.frexp(np.abs(o).astype(np.float64))[1]  # bit length of |o| (< 2^53, exact as a float)
    if int((obits + shift)[nz].max()) > 62:
        return None
    return o << shift, e


_ZERO = Fraction(0)  # one shared object for the (many) zero entries: Fractions are immutable


def _from_coprime(p: int, q: int) -> Fraction:
    """Fraction(p, q) for coprime p and q > 0, as fmpq keeps them, without Fraction's gcd (about
    half of the conversion's time): the instance is made as Fraction makes a normalized one, its two
    slots set.  _CANONICAL_OK checks at import that the result equals Fraction(p, q), including
    hash and arithmetic; if this Python's Fraction differs, the plain constructor is used."""
    f = object.__new__(Fraction)
    f._numerator, f._denominator = p, q
    return f


def _canonical_ok() -> bool:
    try:
        for p, q in ((3, 4), (-7, 1), (2**80 + 1, 2**70), (0, 1)):
            f, g = _from_coprime(p, q), Fraction(p, q)
            if not (type(f) is Fraction and f == g and hash(f) == hash(g) and f + 1 == g + 1
                    and (f.numerator, f.denominator) == (p, q) and str(f) == str(g)):
                return False
        return True
    except (AttributeError, TypeError):
        return False


_CANONICAL_OK = _canonical_ok()


def _fractions(M) -> np.ndarray:
    """An fmpq_mat as a read-only numpy object array of Fractions (flint keeps every entry in lowest
    terms with a positive denominator, so each is built without a gcd, as _from_coprime builds it,
    inline here: the call was a third of the time; zeros share one object)."""
    if _CANONICAL_OK:
        new = object.__new__
        vals = []
        put = vals.append
        for q in M.entries():
            p = int(q.p)
            if p:
                f = new(Fraction)
                f._numerator, f._denominator = p, int(q.q)  # _from_coprime(p, q.q)
                put(f)
            else:
                put(_ZERO)
    else:
        vals = [_ZERO if q == 0 else Fraction(int(q.p), int(q.q)) for q in M.entries()]
    out = np.empty(len(vals), dtype=object)
    out[:] = vals
    out = out.reshape(M.nrows(), M.ncols())
    out.flags.writeable = False
    return out


def _vector(M) -> np.ndarray:
    v = _fractions(M).reshape(-1).copy()
    v.flags.writeable = False
    return v


def model_from_state_dict(cfg, sd: dict, vocab=None, classes=None, name: str = "transformerlens",
                          outputs: str = "last") -> Model:
    """The exact depthcert Model of a HookedTransformer (module docstring): `cfg` a config dict or
    TLConfig, `sd` its state dict (tensors or numpy arrays).  vocab/classes name the input tokens
    and output rows (default "0", "1", ...); outputs "last" classifies the last position (as
    Max-of-K reads it), "all" every position (TransformerLens computes logits at every position)."""
    import flint

    c = cfg if isinstance(cfg, TLConfig) else config_from_dict(cfg)
    p = check_state_dict(c, {k: _numpy(v) for k, v in sd.items()})
    V, n, dm = c.d_vocab, c.n_ctx, c.d_model
    vocab = tuple(str(i) for i in range(V)) if vocab is None else tuple(vocab)
    classes = tuple(str(i) for i in range(c.d_vocab_out)) if classes is None else tuple(classes)
    if len(vocab) != V or len(classes) != c.d_vocab_out:
        raise BadInput(f"TransformerLens model has d_vocab {V} and d_vocab_out {c.d_vocab_out}, "
                       f"given {len(vocab)} token names and {len(classes)} class names")
    layout = Layout.of(("token", V), ("position", n), ("one", 1), ("resid", dm))
    d = layout.dim
    one = V + n
    r0 = one + 1
    E = flint.fmpq_mat(dm, d)  # x = E h
    WE, Wpos = _fmpq_mat(p["embed.W_E"]), _fmpq_mat(p["pos_embed.W_pos"])
    for i in range(dm):
        for t in range(V):
            E[i, t] = WE[t, i]
        for k in range(n):
            E[i, V + k] = Wpos[k, i]
        E[i, r0 + i] = 1
    R = flint.fmpq_mat(d, dm)  # writes into the resid block
    for i in range(dm):
        R[r0 + i, i] = 1

    def affine(W, b, Ein=E):
        """(W^T Ein + b e_one^T): rows = outputs."""
        M = _fmpq_mat(W).transpose() * Ein
        bq = _fmpq_mat(np.asarray(b).reshape(1, -1))
        for i in range(M.nrows()):
            M[i, one] += bq[0, i]
        return M

    eps = Fraction(c.eps)  # the float64 in the config, exactly
    P_norm = _fractions(E)

    def norm(kind: str | None, prefix: str):
        """(Norm of x = E h, E_y: the map from its output G to TransformerLens's ln(x)) or (None, E)."""
        if kind is None:
            return None, E
        w = p.get(prefix + "w", np.ones(dm))
        b = p.get(prefix + "b", np.zeros(dm))
        wq, bq = _fmpq_mat(w.reshape(1, -1)), _fmpq_mat(b.reshape(1, -1))
        Ey = flint.fmpq_mat(dm, d)
        for i in range(dm):
            Ey[i, r0 + i] = wq[0, i]
            Ey[i, one] = bq[0, i]
        return Norm("layernorm" if kind.startswith("LN") else "rmsnorm", P_norm, eps, r0), Ey

    m = c.n_heads
    layers = []
    for li in range(c.n_layers):
        pre = f"blocks.{li}.attn."
        norm_attn, Ea = norm(c.normalization, f"blocks.{li}.ln1.")
        heads = []
        for h in range(m):
            Q = affine(p[pre + "W_Q"][h], p[pre + "b_Q"][h], Ea)
            K = affine(p[pre + "W_K"][h], p[pre + "b_K"][h], Ea)
            Vm = affine(p[pre + "W_V"][h], p[pre + "b_V"][h], Ea)
            OV = (R * _fmpq_mat(p[pre + "W_O"][h]).transpose() * Vm) * m
            if h == 0:
                bO = _fmpq_mat(p[pre + "b_O"].reshape(1, -1))
                for i in range(dm):
                    OV[r0 + i, one] += bO[0, i] * m
            heads.append(Head(_fractions(K.transpose() * Q), _fractions(OV), attention="softmax",
                              scale=Fraction(1), scale_sqrt_divisor=Fraction(c.d_head if c.scaled else 1)))
        mlp, norm_mlp = None, None
        if c.d_mlp is not None:
            pm = f"blocks.{li}.mlp."
            norm_mlp, Em = norm(c.normalization, f"blocks.{li}.ln2.")
            W1 = _fmpq_mat(p[pm + "W_in"]).transpose() * Em  # Em's constant column carries W_in^T b
            W2 = R * _fmpq_mat(p[pm + "W_out"]).transpose()
            b2 = R * _fmpq_mat(p[pm + "b_out"].reshape(-1, 1))
            mlp = MLP(_fractions(W1), _vector(_fmpq_mat(p[pm + "b_in"].reshape(-1, 1))), _fractions(W2), _vector(b2),
                      activation=c.act_fn)
        layers.append(Layer(tuple(heads), causal=c.causal, mlp=mlp, norm_attn=norm_attn, norm_mlp=norm_mlp))
    norm_final, Ef = norm(final_norm(c), "ln_final.")
    W_O = affine(p["unembed.W_U"], p["unembed.b_U"], Ef)
    return Model(vocab, n, classes, layout, tuple(layers), _fractions(W_O), name=name,
                 notes={"source": "transformerlens", "tl_config": c.to_dict()}, constant_row=True, outputs=outputs,
                 norm_final=norm_final)


def _numpy(x):
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # a torch tensor: float16/bfloat16/float32 are exact in float64
        t = x.detach().cpu()
        return t.double().numpy() if t.is_floating_point() else t.numpy()
    return np.asarray(x)


CONFIG_KEY = "transformerlens_config"


def read_checkpoint(path: str, config_path: str | None = None) -> tuple[dict, dict]:
    """(config dict, state dict of float64 arrays) from a checkpoint as TransformerLens users save it:

    .safetensors  the state dict; the config in the metadata entry "transformerlens_config"
                  (JSON), or in a JSON file given as config_path
    .pt / .pth    torch.save({"config": cfg.to_dict(), "state_dict": model.state_dict()}), or a
                  bare state dict with the config in config_path
    """
    if not os.path.exists(path):
        raise BadInput(f"cannot read {path}: No such file or directory")
    from depthcert.interop import checkpoint_files as cf

    cfg = None
    if path.endswith(".safetensors"):
        sd, meta = cf.read_safetensors(path)
        if CONFIG_KEY in meta:
            try:
                cfg = json.loads(meta[CONFIG_KEY])
            except ValueError:
                raise BadInput(f"{path}: metadata {CONFIG_KEY} is not JSON") from None
    else:
        obj = cf.read_torch(path)
        if not isinstance(obj, dict):
            raise BadInput(f"{path}: not a state dict or a {{config, state_dict}} checkpoint")
        if "state_dict" in obj:
            sd, cfg = obj["state_dict"], obj.get("config")
        else:
            sd = obj
    if config_path is not None:
        try:
            with open(config_path, encoding="utf-8") as fh:
                cfg = json.load(fh)
        except OSError as exc:
            raise BadInput(f"cannot read {config_path}: {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError):
            raise BadInput(f"{config_path}: not a JSON config") from None
    if cfg is None:
        raise BadInput(f"{path}: no TransformerLens config inside; give it with --config FILE (cfg.to_dict() as JSON)")
    if not isinstance(sd, dict):
        raise BadInput(f"{path}: the state dict is not a mapping of names to tensors")
    return cfg, sd


NAMES_KEY = "depthcert_names"  # safetensors metadata written by export_checkpoint: vocab, classes, outputs


def load_model(path: str, config_path: str | None = None, vocab=None, classes=None, config_seen: list | None = None,
               every_position: bool = False) -> Model:
    """The exact Model of a saved HookedTransformer checkpoint (see read_checkpoint).  A checkpoint
    written by export_checkpoint carries depthcert's token and class names and output kind.
    config_seen: a list the config dict read is appended to; every_position: classify every position
    (outputs "all", whatever the checkpoint says: TransformerLens computes logits at each of them)."""
    cfg, sd = read_checkpoint(path, config_path)
    if config_seen is not None:
        config_seen.append(cfg)
    outputs = "last"
    if path.endswith(".safetensors"):
        from depthcert.interop.checkpoint_files import read_safetensors

        meta = read_safetensors(path)[1]
        if NAMES_KEY in meta:
            try:
                names = json.loads(meta[NAMES_KEY])
                vocab = tuple(names["vocab"]) if vocab is None else vocab
                classes = tuple(names["classes"]) if classes is None else classes
                outputs = names.get("outputs", "last")
            except (ValueError, KeyError, TypeError):
                raise BadInput(f"{path}: metadata {NAMES_KEY} is malformed") from None
    return model_from_state_dict(cfg, sd, vocab, classes, name=os.path.basename(path),
                                 outputs="all" if every_position else outputs)


def model_from_hooked_transformer(ht, vocab=None, classes=None) -> Model:
    """The exact Model of a live HookedTransformer (needs the `interop` extra only to make one)."""
    cfg = ht.cfg.to_dict() if hasattr(ht.cfg, "to_dict") else dict(vars(ht.cfg))
    return model_from_state_dict(_plain(cfg), ht.state_dict(), vocab, classes, name=getattr(ht.cfg, "model_name", ""))


def _plain(cfg: dict) -> dict:
    """A config dict with torch dtypes/devices turned into strings (JSON-safe)."""
    out = {}
    for k, v in cfg.items():
        out[k] = v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v)
    return out


def write_checkpoint(path: str, cfg: dict, state: dict[str, np.ndarray], dtype=np.float32, names: dict | None = None) -> None:
    """A safetensors checkpoint that read_checkpoint (and safetensors.torch.load_file + the config) reads."""
    from depthcert.interop import checkpoint_files as cf

    meta = {CONFIG_KEY: json.dumps(_plain(cfg), sort_keys=True), "format": "pt"}
    if names is not None:
        meta[NAMES_KEY] = json.dumps(names)
    cf.write_safetensors(path, {k: np.asarray(v, dtype=dtype) for k, v in state.items()}, meta)


__all__ = ["TLConfig", "config_from_dict", "model_from_state_dict", "model_from_hooked_transformer",
           "read_checkpoint", "load_model", "write_checkpoint"]


# ---------------------------------------------------------------------------------------------
# TransformerLens out

def export_state_dict(model: Model, dtype=np.float32) -> tuple[dict, dict[str, np.ndarray]]:
    """(HookedTransformerConfig dict, state dict) computing `model`'s logits at every position.

    d_model = d' (depthcert's stream is TransformerLens's residual stream): W_E[t] = e_t (+ e_one),
    W_pos[p] = e_{V+p}; per head W_K = I, W_Q = k W_QK^T with k = scale * sqrt(d'/scale_sqrt_divisor)
    (TransformerLens divides by sqrt(d_head) = sqrt(d')), W_V = (W_V / m)^T, W_O = I, biases 0;
    MLP W_in = W1^T, b_in = b1, W_out = W2^T, b_out = b2; W_U = W_O^T.  Layers with fewer heads
    get zero heads, layers without an MLP a zero MLP (both add exactly 0).  The weights are rounded
    to `dtype` (round to nearest): the exported model is a float approximation of the exact one.
    Refused (one line): relu or hardmax attention, causal and non-causal layers mixed."""
    if model.has_norm_or_smooth:
        raise BadInput("cannot export to TransformerLens: exporting LayerNorm/RMSNorm or gelu/silu models is not "
                       "supported (read them from their own TransformerLens checkpoint)")
    kinds = {h.attention for L in model.layers for h in L}
    if kinds - {"softmax"}:
        bad = sorted(kinds - {"softmax"})[0]
        raise BadInput(f"cannot export to TransformerLens: it has only softmax attention, this model has {bad} heads")
    causal = {L.causal for L in model.layers if len(L)}
    if len(causal) > 1:
        raise BadInput("cannot export to TransformerLens: causal and non-causal layers are mixed "
                       "(TransformerLens sets attention_dir for the whole model)")
    d, V, n, C = model.dim, len(model.vocab), model.max_length, len(model.classes)
    H = max([len(L) for L in model.layers] + [1])
    widths = [L.mlp.width for L in model.layers if L.mlp is not None]
    d_mlp = max(widths) if widths else None
    def f(M) -> np.ndarray:
        try:
            return np.array([[float(x) for x in row] for row in np.atleast_2d(M)], dtype=np.float64)
        except OverflowError:
            raise BadInput("cannot export to TransformerLens: a weight is too large for a float "
                           f"(above {np.finfo(dtype).max:.3g} in {np.dtype(dtype).name})") from None

    W_E = np.zeros((V, d))
    W_E[np.arange(V), np.arange(V)] = 1
    if model.constant_row:
        W_E[:, model.constant_index] = 1
    W_pos = np.zeros((n, d))
    W_pos[np.arange(n), V + np.arange(n)] = 1
    sd = {"embed.W_E": W_E, "pos_embed.W_pos": W_pos, "unembed.W_U": f(model.W_O).T.copy(), "unembed.b_U": np.zeros(C)}
    for li, L in enumerate(model.layers):
        p = f"blocks.{li}."
        WQ, WK, WV, WO = (np.zeros((H, d, d)) for _ in range(4))
        m = len(L)
        for hi, head in enumerate(L):
            try:
                k = float(head.scale) * math.sqrt(d / float(head.scale_sqrt_divisor))
            except (OverflowError, ZeroDivisionError):
                k = math.inf
            if not math.isfinite(k):
                raise BadInput(f"cannot export to TransformerLens: layers[{li}].heads[{hi}].scale (times "
                               "sqrt(d' / scale_sqrt_divisor)) is too large for a float")
            WQ[hi] = f(head.W_QK).T * k
            WK[hi] = np.eye(d)
            WV[hi] = f(head.W_V).T / m
            WO[hi] = np.eye(d)
        sd.update({p + "attn.W_Q": WQ, p + "attn.W_K": WK, p + "attn.W_V": WV, p + "attn.W_O": WO,
                   p + "attn.b_Q": np.zeros((H, d)), p + "attn.b_K": np.zeros((H, d)), p + "attn.b_V": np.zeros((H, d)),
                   p + "attn.b_O": np.zeros(d)})
        if d_mlp is not None:
            W_in, b_in, W_out, b_out = np.zeros((d, d_mlp)), np.zeros(d_mlp), np.zeros((d_mlp, d)), np.zeros(d)
            if L.mlp is not None:
                w = L.mlp.width
                W_in[:, :w] = f(L.mlp.W1).T
                b_in[:w] = f(L.mlp.b1).reshape(-1)
                W_out[:w, :] = f(L.mlp.W2).T
                b_out[:] = f(L.mlp.b2).reshape(-1)
            sd.update({p + "mlp.W_in": W_in, p + "mlp.b_in": b_in, p + "mlp.W_out": W_out, p + "mlp.b_out": b_out})
    cfg = TLConfig(model.n_layers, d, H, d, V, C, n, d_mlp, causal == {True}, True).to_dict()
    cfg["model_name"] = model.name or "depthcert-export"
    out = {}
    with np.errstate(over="ignore"):
        for key, v in sd.items():
            out[key] = np.asarray(v, dtype=dtype)
            if not np.isfinite(out[key]).all():
                raise BadInput(f"cannot export to TransformerLens: {key} has a weight beyond the range of "
                               f"{np.dtype(dtype).name} (largest {np.finfo(dtype).max:.3g})")
    return cfg, out


def export_checkpoint(model: Model, path: str, dtype=np.float32) -> dict:
    """Write `model` as a TransformerLens safetensors checkpoint (config in the metadata); returns the config."""
    cfg, sd = export_state_dict(model, dtype)
    write_checkpoint(path, cfg, sd, dtype, {"vocab": list(model.vocab), "classes": list(model.classes),
                                             "outputs": model.outputs})
    return cfg


def to_hooked_transformer(model: Model, dtype=None):
    """A live transformer_lens.HookedTransformer (the `interop` extra) computing `model`."""
    try:
        import torch
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:
        raise BadInput('a live HookedTransformer needs the interop extra: pip install -e ".[interop]"') from None
    dtype = dtype or torch.float32
    cfg, sd = export_state_dict(model, np.float64)
    ht = HookedTransformer(HookedTransformerConfig(**{**cfg, "dtype": dtype, "device": "cpu"}))
    ht.load_state_dict({k: torch.tensor(v, dtype=dtype) for k, v in sd.items()}, strict=False)
    return ht
