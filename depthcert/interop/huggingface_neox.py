"""Hugging Face GPT-NeoX checkpoints in: a folder written by GPTNeoXForCausalLM.save_pretrained
(config.json + model.safetensors) as the exact depthcert `Model` (docs/trained-models.md, "GPT-NeoX
(Hugging Face) in").  Read with numpy alone.

transformers computes, for tokens t_0..t_{n-1} at positions p = 0..n-1 (modeling_gpt_neox.py, eval mode):

    x_p = embed_in[t_p]                                        (no absolute position embedding)
    per layer:  y = LN_in(x)   (LayerNorm with weight and bias, layer_norm_eps)
                qkv = query_key_value(y), viewed per head as [q_h; k_h; v_h] (3 head_size rows each:
                    rows 3 h s .. 3 h s + s - 1 of the weight are q_h, the next s k_h, the next s v_h)
                A[h] = softmax over keys j <= p of (R_p q_h) . (R_j k_h) / sqrt(head_size)
                a = dense(concat_h A[h] v_h)
                use_parallel_residual:   x <- x + a + mlp(LN_post(x))          (both read the old x)
                otherwise:               x <- x + a;  x <- x + mlp(LN_post(x))
                mlp(z) = dense_4h_to_h(act(dense_h_to_4h(z)))                  (biases always)
    logits = lm_head(LN_final(x))      (lm_head.weight = embed_in.weight when tie_word_embeddings;
                                        older transformers named it embed_out)

head_size = hidden_size / num_attention_heads.  R_p rotates the first r = int(head_size *
partial_rotary_factor) coordinates of each head (rotate_half: pairs (i, i + r/2) turned by the angle
p theta^(-2i/r)); coordinates r.. pass through.  r is what transformers computes (the float product,
truncated), and must be even and at least 2.  theta and the factor come from rope_parameters
(transformers 5.x) or rotary_emb_base / rotary_pct (older configs; transformers 5.x reads them when
rope_parameters lacks the key); where both are written they must agree; where neither is, the folder is
refused (GPTNeoXConfig's defaults, 10000 and 0.25, are never assumed).  A top-level rope_theta or
partial_rotary_factor, which GPTNeoXConfig does not read, is refused unless it agrees.  The exact model
is the real function with theta the decimal written, cos/sin of the real angles in arb
(checkers/rotary.py); transformers computes the angles and cos/sin in float32 (also under model.double()).

The parallel residual is `Layer.parallel` (checkers/model.py), decided by the certified interval and
ball stages only.  Every config.json key is read (READ_FIELDS), refused when its value changes the
model in a way not decided here, or listed as without effect (NO_EFFECT); any other key is named by
unknown_config_keys (verify-model warns; --strict-config refuses).  A read field absent from
config.json takes GPTNeoXConfig's default (NEOX_DEFAULTS) as from_pretrained does, except the rotary
settings and the sizes, which must be written.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.interop.huggingface_llama import NO_EFFECT as _LLAMA_NO_EFFECT
from depthcert.interop.huggingface_llama import _bool, _exact_number, _int, _short

NAME = "GPT-NeoX"
ARCHITECTURE = "GPTNeoXForCausalLM"
MODEL_TYPE = "gpt_neox"
MAX_SIZE = 4096  # vocab_size + max_position_embeddings + 1 + hidden_size: depthcert's stream
# GPTNeoXConfig's defaults (transformers 4.x and 5.x) for the fields taken when config.json lacks them
NEOX_DEFAULTS = {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "tie_word_embeddings": False,
                 "use_parallel_residual": True, "attention_bias": True}
# hidden_act -> depthcert's MLP activation (transformers' ACT2FN: the same real functions)
ACTIVATIONS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
               "gelu_python_tanh": "gelu_new", "gelu_fast": "gelu_fast", "relu": "relu", "silu": "silu",
               "swish": "silu"}
ROPE_KEYS = frozenset(("rope_theta", "rope_type", "partial_rotary_factor"))

READ_FIELDS = frozenset((
    "model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "hidden_act", "max_position_embeddings", "layer_norm_eps", "tie_word_embeddings",
    "use_parallel_residual", "attention_bias", "rope_parameters", "rope_scaling", "rotary_pct", "rotary_emb_base",
    "rope_theta", "partial_rotary_factor", "head_dim", "is_encoder_decoder", "add_cross_attention", "pruned_heads"))
NO_EFFECT = _LLAMA_NO_EFFECT | frozenset((
    "hidden_dropout", "classifier_dropout",  # dropout (eval mode); the sequence-classification head
    "use_memory_efficient_attention",  # an old kernel switch: the same real function
))


def is_neox(cfg) -> bool:
    """config.json names GPTNeoXForCausalLM (model_type or architectures)."""
    if not isinstance(cfg, dict):
        return False
    arch = cfg.get("architectures")
    return cfg.get("model_type") == MODEL_TYPE or (isinstance(arch, list) and arch == [ARCHITECTURE])


def unknown_config_keys(cfg) -> list[str]:
    """The config.json keys that are neither read nor without effect (sorted)."""
    if not isinstance(cfg, dict):
        return []
    return sorted(str(k) for k in cfg if k not in READ_FIELDS and k not in NO_EFFECT)


def config_warning(cfg) -> tuple[list[str], str]:
    """(unknown keys, the sentence verify-model prints about them)."""
    keys = unknown_config_keys(cfg)
    many = len(keys) != 1
    return keys, (f"Hugging Face {NAME} config key{'s' if many else ''} that {'are' if many else 'is'} not "
                  f"GPTNeoXConfig field{'s' if many else ''} this reader knows: {', '.join(keys)}")


@dataclass(frozen=True)
class NeoXConfig:
    """The fields of a GPTNeoXConfig that decide what GPTNeoXForCausalLM computes."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    activation: str  # depthcert's MLP activation
    max_positions: int
    eps: Fraction  # layer_norm_eps, the float64 it is
    tied: bool
    parallel: bool  # use_parallel_residual
    bias: bool  # attention_bias: query_key_value and dense
    theta: Fraction  # the rotary base, the decimal written, exactly
    rotary_dim: int  # int(head_size * partial_rotary_factor), as transformers computes it

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def _rope(cfg: dict, exact: dict, head_size: int) -> tuple[Fraction, int]:
    """(theta exactly, the rotated dimension) from rope_parameters and / or rotary_emb_base and
    rotary_pct (module docstring); every other RoPE setting refused."""
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        raise BadInput(f"{NAME} config: rope_scaling {_short(scaling)} is refused (only the default rotary embedding "
                       "is decided)")
    params = cfg.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise BadInput(f"{NAME} config: rope_parameters must be an object, got {_short(params)}")
        extra = sorted(set(params) - ROPE_KEYS)
        if extra:
            raise BadInput(f"{NAME} config: rope_parameters key {extra[0]} is refused (only rope_theta, rope_type "
                           "\"default\" and partial_rotary_factor are decided)")
        kind = params.get("rope_type", "default")
        if kind != "default":
            raise BadInput(f"{NAME} config: rope_type {_short(kind)} is refused (only \"default\": scaled, dynamic, "
                           "YaRN, LongRoPE and Llama 3 RoPE change the angles)")
    params = params or {}
    ex_params = exact.get("rope_parameters") if isinstance(exact.get("rope_parameters"), dict) else {}

    def one(key_new: str, key_old: str, what: str):
        """The value transformers uses: rope_parameters[key_new], else the old top-level key_old;
        (value, its exact form or None, where it was read)."""
        new, old = params.get(key_new), cfg.get(key_old)
        if new is None and old is None:
            raise BadInput(f"{NAME} config: no {what} (rope_parameters.{key_new} or {key_old}); refused rather than "
                           "assume GPTNeoXConfig's default")
        if new is not None and old is not None and _exact_number(ex_params.get(key_new, new), key_new, NAME) != \
                _exact_number(exact.get(key_old, old), key_old, NAME):
            raise BadInput(f"{NAME} config: rope_parameters.{key_new} {_short(new)} differs from {key_old} "
                           f"{_short(old)}")
        if new is not None:
            return new, ex_params.get(key_new, new), f"rope_parameters.{key_new}"
        return old, exact.get(key_old, old), key_old

    _, theta_x, theta_at = one("rope_theta", "rotary_emb_base", "rotary base")
    theta = _exact_number(theta_x, theta_at, NAME)
    factor, factor_x, factor_at = one("partial_rotary_factor", "rotary_pct", "partial rotary factor")
    f_exact = _exact_number(factor_x, factor_at, NAME)
    if f_exact > 1:
        raise BadInput(f"{NAME} config: {factor_at} {_short(factor)} is above 1")
    for key, value in (("rope_theta", theta), ("partial_rotary_factor", f_exact)):
        if key in cfg and cfg[key] is not None:  # GPTNeoXConfig does not read them: agree or refuse
            if _exact_number(exact.get(key, cfg[key]), key, NAME) != value:
                raise BadInput(f"{NAME} config: top-level {key} {_short(cfg[key])} is not what GPTNeoXConfig reads "
                               f"({_short(float(value))} from rope_parameters / rotary_emb_base / rotary_pct); refused")
    dim = int(head_size * float(factor))  # GPTNeoXAttention.rotary_ndims, the float product truncated
    if dim < 2 or dim % 2:
        raise BadInput(f"{NAME} config: the rotary dimension int(head_size {head_size} * {factor_at} {_short(factor)}) "
                       f"= {dim} is {'below 2' if dim < 2 else 'odd'} (rotary pairs need an even dimension >= 2)")
    return theta, dim


def config_from_dict(cfg, exact: dict | None = None) -> NeoXConfig:
    """A config.json dict as a NeoXConfig; one line (BadInput) naming the first field refused.
    `exact`: the same config.json read with its decimals as Decimals (theta and the factor taken from it)."""
    if not isinstance(cfg, dict):
        raise BadInput(f"{NAME} config: config.json is not a JSON object")
    if not is_neox(cfg) or cfg.get("model_type") not in (None, MODEL_TYPE):
        raise BadInput(f"{NAME} config: model_type {_short(cfg.get('model_type'))} is not \"{MODEL_TYPE}\"")
    arch = cfg.get("architectures")
    if arch is not None and arch != [ARCHITECTURE]:
        raise BadInput(f"{NAME} config: architectures {_short(arch)} is not supported (only [\"{ARCHITECTURE}\"], "
                       "whose logits are lm_head's)")
    for key, ok in (("is_encoder_decoder", (False, None)), ("add_cross_attention", (False, None)),
                    ("pruned_heads", ({}, None))):
        if key in cfg and not any(cfg[key] == a and type(cfg[key]) is type(a) for a in ok):
            raise BadInput(f"{NAME} config: {key}={_short(cfg[key])} is refused (not a {ARCHITECTURE})")
    act = cfg.get("hidden_act", NEOX_DEFAULTS["hidden_act"])
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise BadInput(f"{NAME} config: hidden_act {_short(act)} is not supported ({', '.join(ACTIVATIONS)})")
    eps = cfg.get("layer_norm_eps", NEOX_DEFAULTS["layer_norm_eps"])
    finite = isinstance(eps, float) and math.isfinite(eps) or \
        isinstance(eps, int) and not isinstance(eps, bool) and abs(eps) <= int(np.finfo(np.float64).max)
    if not finite or eps <= 0:
        raise BadInput(f"{NAME} config: layer_norm_eps must be a positive finite number, got {_short(eps)}")
    V, n, dm = _int(cfg, "vocab_size", NAME), _int(cfg, "max_position_embeddings", NAME), _int(cfg, "hidden_size", NAME)
    heads = _int(cfg, "num_attention_heads", NAME, high=256)
    if dm % heads:
        raise BadInput(f"{NAME} config: hidden_size {dm} is not a multiple of num_attention_heads {heads}")
    dh = dm // heads
    if "head_dim" in cfg and cfg["head_dim"] is not None and cfg["head_dim"] != dh:
        raise BadInput(f"{NAME} config: head_dim {_short(cfg['head_dim'])} is refused (GPTNeoXAttention uses "
                       f"hidden_size / num_attention_heads = {dh}, the rotary table head_dim)")
    theta, rdim = _rope(cfg, exact or {}, dh)
    if V + n + 1 + dm > MAX_SIZE:
        raise BadInput(f"{NAME} config: vocab_size + max_position_embeddings + 1 + hidden_size = {V + n + 1 + dm} "
                       f"exceeds depthcert's residual limit {MAX_SIZE}")
    return NeoXConfig(V, dm, _int(cfg, "intermediate_size", NAME, high=1 << 14),
                      _int(cfg, "num_hidden_layers", NAME, high=256), heads, ACTIVATIONS[act], n, Fraction(float(eps)),
                      _bool(cfg, "tie_word_embeddings", NAME, NEOX_DEFAULTS["tie_word_embeddings"]),
                      _bool(cfg, "use_parallel_residual", NAME, NEOX_DEFAULTS["use_parallel_residual"]),
                      _bool(cfg, "attention_bias", NAME, NEOX_DEFAULTS["attention_bias"]), theta, rdim)


def expected_shapes(c: NeoXConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter save_pretrained writes, and its shape (lm_head only when untied)."""
    dm, ff = c.hidden_size, c.intermediate_size
    shapes = {"gpt_neox.embed_in.weight": (c.vocab_size, dm), "gpt_neox.final_layer_norm.weight": (dm,),
              "gpt_neox.final_layer_norm.bias": (dm,)}
    for li in range(c.num_layers):
        p = f"gpt_neox.layers.{li}."
        shapes.update({p + "input_layernorm.weight": (dm,), p + "input_layernorm.bias": (dm,),
                       p + "post_attention_layernorm.weight": (dm,), p + "post_attention_layernorm.bias": (dm,),
                       p + "attention.query_key_value.weight": (3 * dm, dm), p + "attention.dense.weight": (dm, dm),
                       p + "mlp.dense_h_to_4h.weight": (ff, dm), p + "mlp.dense_h_to_4h.bias": (ff,),
                       p + "mlp.dense_4h_to_h.weight": (dm, ff), p + "mlp.dense_4h_to_h.bias": (dm,)})
        if c.bias:
            shapes.update({p + "attention.query_key_value.bias": (3 * dm,), p + "attention.dense.bias": (dm,)})
    if not c.tied:
        shapes["lm_head.weight"] = (c.vocab_size, dm)
    return shapes


def _buffer(name: str) -> bool:
    """Buffers older transformers saved (the causal mask attention.bias / masked_bias, rotary inv_freq):
    not parameters (transformers ignores them on load)."""
    parts = name.split(".")
    return name.endswith("rotary_emb.inv_freq") or (
        len(parts) == 5 and parts[:2] == ["gpt_neox", "layers"] and parts[2].isdigit() and parts[3] == "attention"
        and parts[4] in ("bias", "masked_bias"))


def check_state_dict(c: NeoXConfig, sd: dict) -> dict[str, np.ndarray]:
    """The parameters as float64 arrays of the right shapes, every value finite; embed_out.weight (the
    older name) read as lm_head.weight; a tied lm_head must equal embed_in; buffers dropped; any other
    entry refused."""
    if "embed_out.weight" in sd:
        if "lm_head.weight" in sd:
            raise BadInput(f"{NAME} state dict holds both embed_out.weight and lm_head.weight")
        sd = {("lm_head.weight" if k == "embed_out.weight" else k): v for k, v in sd.items()}
    from depthcert.interop.checkpoint_files import float_parameters

    bias = ("query_key_value.bias", "dense.bias")
    return float_parameters(sd, expected_shapes(c), NAME, tied=c.tied, embed="gpt_neox.embed_in.weight",
                            embed_short="embed_in", is_buffer=_buffer,
                            unexpected=lambda key: f"not a {ARCHITECTURE} parameter of this config"
                            + (": attention_bias is false" if key.endswith(bias) else ""))


def model_from_config_and_state_dict(cfg: dict, sd: dict, vocab=None, classes=None, name: str = "gpt_neox",
                                     outputs: str = "last", exact: dict | None = None):
    """The exact Model of a GPTNeoXForCausalLM given its config dict and state dict (module docstring).

    depthcert's stream is [token (V) | position (max_position_embeddings) | one | resid (hidden_size)],
    x = E h with E = [embed_in^T | 0 | 0 | I].  A LayerNorm is Norm("layernorm", E, eps): its output G
    holds the normalized x at the resid rows and 1 at the constant row, and E_y G = LN(x) with
    E_y = [0 | 0 | bias | diag(weight)].  Head h: W_Q = qkv[3hs : 3hs+s] E_y + b e_one^T, W_K the next
    s rows, W_V the next; W_QK = W_K^T W_Q, Rotary(W_Q, W_K, r, theta), scale 1/sqrt(s); the value map
    m R dense[:, hs : (h+1)s] W_V (m heads averaged; dense's bias on head 0's constant column).  MLP:
    W1 = dense_h_to_4h E_z, b1 its bias, W2 = R dense_4h_to_h, b2 = R bias; the layer is parallel when
    use_parallel_residual is."""
    import flint

    from depthcert.checkers.layout import Layout
    from depthcert.checkers.model import MLP, Head, Layer, Model, Norm, Rotary
    from depthcert.interop.transformerlens import _fmpq_mat, _fractions, _numpy, _vector

    c = config_from_dict(cfg, exact)
    p = check_state_dict(c, {k: _numpy(v) for k, v in sd.items()})
    V, n, dm, dh = c.vocab_size, c.max_positions, c.hidden_size, c.head_dim
    vocab = tuple(str(i) for i in range(V)) if vocab is None else tuple(vocab)
    classes = tuple(str(i) for i in range(V)) if classes is None else tuple(classes)
    if len(vocab) != V or len(classes) != V:
        raise BadInput(f"{NAME} model has vocab_size {V}, given {len(vocab)} token names and {len(classes)} "
                       "class names")
    layout = Layout.of(("token", V), ("position", n), ("one", 1), ("resid", dm))
    d = layout.dim
    one, r0 = V + n, V + n + 1
    WE = _fmpq_mat(p["gpt_neox.embed_in.weight"])
    E = flint.fmpq_mat(dm, d)
    for i in range(dm):
        for t in range(V):
            E[i, t] = WE[t, i]
        E[i, r0 + i] = 1
    R = flint.fmpq_mat(d, dm)
    for i in range(dm):
        R[r0 + i, i] = 1
    P_norm = _fractions(E)

    def layernorm(prefix):
        """(Norm of x = E h, E_y: the map from its output G to LN(x) = weight * n + bias)."""
        w = _fmpq_mat(p[prefix + ".weight"].reshape(1, -1))
        b = _fmpq_mat(p[prefix + ".bias"].reshape(1, -1))
        Ey = flint.fmpq_mat(dm, d)
        for i in range(dm):
            Ey[i, r0 + i] = w[0, i]
            Ey[i, one] = b[0, i]
        return Norm("layernorm", P_norm, c.eps, r0), Ey

    def affine(W, b, Ein):
        """W Ein + b e_one^T (W: rows = outputs)."""
        M = _fmpq_mat(W) * Ein
        if b is not None:
            bq = _fmpq_mat(np.asarray(b).reshape(1, -1))
            for i in range(M.nrows()):
                M[i, one] += bq[0, i]
        return M

    m = c.num_heads
    layers = []
    for li in range(c.num_layers):
        pre = f"gpt_neox.layers.{li}."
        norm_attn, Ea = layernorm(pre + "input_layernorm")
        a = pre + "attention."
        qkv, dense = p[a + "query_key_value.weight"], p[a + "dense.weight"]
        qkv_b = p[a + "query_key_value.bias"] if c.bias else None
        heads = []
        for h in range(m):
            base = 3 * h * dh  # the view (..., heads, 3 head_size): head h's rows are [q_h; k_h; v_h]
            rows = [slice(base + j * dh, base + (j + 1) * dh) for j in range(3)]
            Q, K, Vh = (affine(qkv[sl], None if qkv_b is None else qkv_b[sl], Ea) for sl in rows)
            OV = (R * _fmpq_mat(dense[:, h * dh:(h + 1) * dh]) * Vh) * m
            if h == 0 and c.bias:
                bO = _fmpq_mat(p[a + "dense.bias"].reshape(1, -1))
                for i in range(dm):
                    OV[r0 + i, one] += bO[0, i] * m
            WQ, WK = _fractions(Q), _fractions(K)
            heads.append(Head(_fractions(K.transpose() * Q), _fractions(OV), attention="softmax", scale=Fraction(1),
                              scale_sqrt_divisor=Fraction(dh), rotary=Rotary(WQ, WK, c.rotary_dim, c.theta)))
        norm_mlp, Em = layernorm(pre + "post_attention_layernorm")
        pm = pre + "mlp."
        W1 = _fractions(_fmpq_mat(p[pm + "dense_h_to_4h.weight"]) * Em)
        b1 = _vector(_fmpq_mat(p[pm + "dense_h_to_4h.bias"].reshape(-1, 1)))
        W2 = _fractions(R * _fmpq_mat(p[pm + "dense_4h_to_h.weight"]))
        b2 = _vector(R * _fmpq_mat(p[pm + "dense_4h_to_h.bias"].reshape(-1, 1)))
        mlp = MLP(W1, b1, W2, b2, activation=c.activation)
        layers.append(Layer(tuple(heads), causal=True, mlp=mlp, norm_attn=norm_attn, norm_mlp=norm_mlp,
                            parallel=c.parallel))
    norm_final, Ef = layernorm("gpt_neox.final_layer_norm")
    lm = p["gpt_neox.embed_in.weight"] if c.tied else p["lm_head.weight"]
    W_O = _fmpq_mat(lm) * Ef
    return Model(vocab, n, classes, layout, tuple(layers), _fractions(W_O), name=name,
                 notes={"source": "huggingface-gpt_neox", "rope_theta": str(c.theta), "rotary_dim": c.rotary_dim,
                        "use_parallel_residual": c.parallel}, constant_row=True, outputs=outputs,
                 norm_final=norm_final)


class NeoXFloatForward:
    """A plain numpy float forward (float32 or a true float64) of a GPT-NeoX folder, written as
    modeling_gpt_neox.py computes (module docstring) with every operation in the one dtype (the
    rotary table and softmax too, which transformers keeps in float32).  It certifies nothing
    (verify-model --compare-float sets it beside the certified decision)."""

    def __init__(self, cfg: dict, sd: dict, dtype):
        c = config_from_dict(cfg)
        self.c, self.dt = c, np.dtype(dtype).type
        self.p = {k: np.asarray(v, dtype=self.dt) for k, v in check_state_dict(c, sd).items()}
        self.theta = float(c.theta)

    def _ln(self, x, key):
        dt = self.dt
        mu = x.mean(-1, keepdims=True)
        v = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(v + dt(float(self.c.eps))) * self.p[key + ".weight"] + self.p[key + ".bias"]

    def _lin(self, x, key):
        y = x @ self.p[key + ".weight"].T
        return y + self.p[key + ".bias"] if key + ".bias" in self.p else y

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        """(B, n) token ids -> (B, vocab_size) logits at the last position."""
        from depthcert.interop.float_forward import _act

        c, p, dt = self.c, self.p, self.dt
        B, n = ids.shape
        H, dh, r = c.num_heads, c.head_dim, c.rotary_dim
        inv = dt(1) / (dt(self.theta) ** (np.arange(0, r, 2, dtype=dt) / dt(r)))
        emb = np.concatenate([np.arange(n, dtype=dt)[:, None] * inv] * 2, axis=-1)  # (n, r)
        cos, sin = np.cos(emb), np.sin(emb)

        def rope(t):  # (B, heads, n, dh): the first r coordinates turned, the rest passed through
            x, rest = t[..., :r], t[..., r:]
            half = np.concatenate([-x[..., r // 2:], x[..., :r // 2]], axis=-1)
            return np.concatenate([x * cos + half * sin, rest], axis=-1)

        mask = np.triu(np.ones((n, n), dtype=bool), 1)
        x = p["gpt_neox.embed_in.weight"][ids]
        for li in range(c.num_layers):
            pre = f"gpt_neox.layers.{li}."
            y = self._ln(x, pre + "input_layernorm")
            qkv = self._lin(y, pre + "attention.query_key_value").reshape(B, n, H, 3 * dh).transpose(0, 2, 1, 3)
            q, k, v = rope(qkv[..., :dh]), rope(qkv[..., dh:2 * dh]), qkv[..., 2 * dh:]
            s = np.matmul(q, k.transpose(0, 1, 3, 2)) * dt(dh ** -0.5)
            s = np.where(mask, dt(-np.inf), s)
            s = np.exp(s - s.max(-1, keepdims=True))
            z = np.matmul(s / s.sum(-1, keepdims=True), v).transpose(0, 2, 1, 3).reshape(B, n, H * dh)
            att = self._lin(z, pre + "attention.dense")

            def mlp(u):
                hid = _act(self._lin(u, pre + "mlp.dense_h_to_4h"), c.activation, dt)
                return self._lin(hid, pre + "mlp.dense_4h_to_h")

            if c.parallel:
                x = x + att + mlp(self._ln(x, pre + "post_attention_layernorm"))
            else:
                x = x + att
                x = x + mlp(self._ln(x, pre + "post_attention_layernorm"))
        last = self._ln(x[:, -1], "gpt_neox.final_layer_norm")
        return last @ (p["gpt_neox.embed_in.weight"] if c.tied else p["lm_head.weight"]).T


def read_float(path: str) -> tuple[dict, dict]:
    """(sizes for compare_with_verdict's batches and the config itself under "neox_config"; the state
    dict) of a folder: float_forward.compare_with_verdict(*read_float(path), ..., forward=neox_forward)."""
    from depthcert.interop.huggingface import read_folder

    cfg, sd = read_folder(path)
    c = config_from_dict(cfg)
    return ({"d_model": c.hidden_size, "n_heads": c.num_heads, "d_head": c.head_dim,
             "d_mlp": c.intermediate_size, "neox_config": cfg}, sd)


def neox_forward(sizes: dict, sd: dict, dtype) -> NeoXFloatForward:
    """The forward compare_with_verdict builds per dtype, from read_float's pair."""
    return NeoXFloatForward(sizes["neox_config"], sd, dtype)


def folder_is_neox(path: str) -> bool:
    """is_neox() of a folder's config.json (False when it is absent or unreadable)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            return is_neox(json.load(fh))
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def load_model(path: str, cfg: dict, sd: dict, vocab=None, classes=None, every_position: bool = False):
    """The exact Model of a save_pretrained GPT-NeoX folder (config and state dict already read by
    huggingface.read_folder; theta and the rotary factor re-read as the decimals written)."""
    from depthcert.interop.huggingface_llama import read_exact_config

    try:
        exact = read_exact_config(path)
    except (OSError, ValueError, UnicodeDecodeError):
        exact = None
    return model_from_config_and_state_dict(cfg, sd, vocab, classes, name=os.path.basename(os.path.normpath(path)),
                                            outputs="all" if every_position else "last",
                                            exact=exact if isinstance(exact, dict) else None)


__all__ = ["NeoXConfig", "config_from_dict", "unknown_config_keys", "config_warning", "is_neox",
           "model_from_config_and_state_dict", "load_model", "NeoXFloatForward", "read_float"]
