"""Hugging Face Llama-family checkpoints in: a folder written by save_pretrained of LlamaForCausalLM,
Qwen2ForCausalLM or MistralForCausalLM (config.json + model.safetensors) as the exact depthcert
`Model` (docs/trained-models.md, "Llama (Hugging Face) in").  Read with numpy alone.

transformers computes, for tokens t_0..t_{n-1} at positions p = 0..n-1 (modeling_llama.py, eval mode):

    x_p = embed_tokens[t_p]                                   (no absolute position embedding)
    per layer:  y = RMS(x) * input_layernorm.weight,  RMS(x) = x / sqrt(mean(x^2) + rms_norm_eps)
                q_h = q_proj(y)[h],  k_g = k_proj(y)[g],  v_g = v_proj(y)[g]   (head_dim rows each; biases
                    when attention_bias: Llama; q, k, v always and o never: Qwen2; none: Mistral)
                query head h reads key/value head g = h // (num_attention_heads / num_key_value_heads)
                A[h] = softmax over keys j <= p of (R_p q_h) . (R_j k_g) / sqrt(head_dim)
                x <- x + o_proj(concat_h A[h] v)
                x <- x + down_proj(act(gate_proj(z)) * up_proj(z)),  z = RMS(x) * post_attention_layernorm.weight
    logits = lm_head(RMS(x) * norm.weight)          (lm_head.weight = embed_tokens.weight when tied)

R_p is the rotary embedding (rotate_half convention: the pairs (i, i + head_dim/2) turned by the
angle p theta^(-2i/head_dim)), with theta = rope_theta.  The exact model is this real function:
theta is the number written in config.json (its decimal text, exactly), every angle and its cos/sin
a real number enclosed in arb (checkers/rotary.py).  transformers computes inv_freq, the angles and
cos/sin in float32 (also under model.double()), and RMSNorm in float32: its float forward differs
from this real model by about 1e-7 relative.  rms_norm_eps is read as the float64 it is.

Grouped-query attention is mapped at import: each query head gets its group's K and V matrices
(a head of depthcert's model has its own W_Q, W_K, W_V; the shared ones are copied).

Every config.json key is read (READ_FIELDS), refused when its value changes the model in a way not
decided here (rope_type other than "default", rope scaling, a partial_rotary_factor other than 1,
which transformers' Llama would ignore, a sliding window that could bite, pretraining_tp other
than 1 is accepted: the same mathematics), or listed as without effect (NO_EFFECT); any other key is
named by unknown_config_keys (verify-model warns; --strict-config refuses).  A read field absent from
config.json takes the config class's default where transformers' default is the same model for every
value (num_key_value_heads = num_attention_heads, head_dim = hidden_size // num_attention_heads,
biases false); rope_theta is never defaulted.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
NAMES = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}
# hidden_act -> depthcert's gated activation (transformers' ACT2FN: the same real functions)
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new",
               "gelu_pytorch_tanh": "gelu_new", "gelu_python_tanh": "gelu_new", "gelu_fast": "gelu_fast"}
ROPE_KEYS = frozenset(("rope_theta", "rope_type", "partial_rotary_factor"))
MAX_SIZE = 4096  # vocab_size + max_position_embeddings + 1 + hidden_size: depthcert's stream

READ_FIELDS = frozenset((
    "model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings",
    "rms_norm_eps", "tie_word_embeddings", "rope_parameters", "rope_theta", "rope_scaling", "partial_rotary_factor",
    "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "pretraining_tp", "is_encoder_decoder", "add_cross_attention", "pruned_heads"))
NO_EFFECT = frozenset((
    # dropout (eval mode) and initialization
    "attention_dropout", "initializer_range",
    # the same real function computed another way (precision, kernels, tensor-parallel splits)
    "_attn_implementation", "attn_implementation", "_attn_implementation_autoset", "chunk_size_feed_forward",
    "torchscript", "use_bfloat16", "dtype", "torch_dtype", "base_model_tp_plan", "base_model_pp_plan",
    # decoder flags these models do not read
    "is_decoder", "tie_encoder_decoder", "cross_attention_hidden_size",
    # outputs and caching
    "use_cache", "output_hidden_states", "output_attentions", "return_dict", "use_return_dict",
    "gradient_checkpointing",
    # tokens, tokenizer, task heads, names
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class",
    "prefix", "task_specific_params", "finetuning_task", "id2label", "label2id", "num_labels", "problem_type",
    "transformers_version", "_name_or_path", "name_or_path", "_commit_hash", "tf_legacy_loss",
    # generation settings stored in old configs (generate() only)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
))


def family(cfg) -> str | None:
    """"llama", "qwen2" or "mistral" when config.json names one of them (model_type or architectures)."""
    if not isinstance(cfg, dict):
        return None
    mt = cfg.get("model_type")
    if mt in ARCHITECTURES:
        return mt
    arch = cfg.get("architectures")
    if isinstance(arch, list) and len(arch) == 1:
        return next((k for k, v in ARCHITECTURES.items() if v == arch[0]), None)
    return None


def unknown_config_keys(cfg) -> list[str]:
    """The config.json keys that are neither read nor without effect (sorted)."""
    if not isinstance(cfg, dict):
        return []
    return sorted(str(k) for k in cfg if k not in READ_FIELDS and k not in NO_EFFECT)


def config_warning(cfg) -> tuple[list[str], str]:
    """(unknown keys, the sentence verify-model prints about them)."""
    keys = unknown_config_keys(cfg)
    many = len(keys) != 1
    name = NAMES.get(family(cfg) or "llama")
    return keys, (f"Hugging Face {name} config key{'s' if many else ''} that {'are' if many else 'is'} not "
                  f"{name}Config field{'s' if many else ''} this reader knows: {', '.join(keys)}")


def _short(v) -> str:
    text = json.dumps(v, default=str) if isinstance(v, (bool, type(None), int, float, str, list, dict)) else str(v)
    return text if len(text) <= 40 else text[:30] + "..."


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a Llama / Qwen2 / Mistral config that decide what the CausalLM computes."""

    family: str  # llama | qwen2 | mistral
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    activation: str  # depthcert's gated activation
    max_positions: int
    eps: Fraction  # rms_norm_eps, the float64 it is
    tied: bool
    theta: Fraction  # rope_theta, the decimal written, exactly
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool

    @property
    def rotary_dim(self) -> int:
        return self.head_dim


def _int(cfg: dict, key: str, name: str, default=None, low: int = 1, high: int = MAX_SIZE) -> int:
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise BadInput(f"{name} config: {key} must be an integer in {low} .. {high}, got {_short(v)}")
    return v


def _bool(cfg: dict, key: str, name: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if not isinstance(v, bool):
        raise BadInput(f"{name} config: {key} must be true or false, got {_short(v)}")
    return v


def _exact_number(v, what: str, name: str) -> Fraction:
    """A JSON number (int, float, or the Decimal of its text) as an exact positive Fraction."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        raise BadInput(f"{name} config: {what} must be a positive number, got {_short(v)}")
    try:
        q = Fraction(v)
    except (ValueError, OverflowError, InvalidOperation):
        raise BadInput(f"{name} config: {what} must be a positive finite number, got {_short(v)}") from None
    if q <= 0 or q > 2**1000 or q < Fraction(1, 2**1000):
        raise BadInput(f"{name} config: {what} must be a positive number in 2^-1000 .. 2^1000, got {_short(v)}")
    return q


def _rope(cfg: dict, exact: dict, name: str) -> Fraction:
    """rope_theta, exactly, from rope_parameters (transformers 5.x) or the top level (older configs);
    every other RoPE setting refused unless it leaves the default rotary embedding."""
    params = cfg.get("rope_parameters")
    top = cfg.get("rope_theta")
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind != "default" or not isinstance(scaling, dict) or set(scaling) - {"rope_type", "type", "rope_theta"}:
            raise BadInput(f"{name} config: rope_scaling {_short(scaling)} is refused (only the default rotary "
                           "embedding is decided)")
    theta = None
    if params is not None:
        if not isinstance(params, dict):
            raise BadInput(f"{name} config: rope_parameters must be an object, got {_short(params)}")
        extra = sorted(set(params) - ROPE_KEYS)
        if extra:
            raise BadInput(f"{name} config: rope_parameters key {extra[0]} is refused (only rope_theta, rope_type "
                           "\"default\" and partial_rotary_factor 1 are decided)")
        kind = params.get("rope_type")
        if kind != "default":
            raise BadInput(f"{name} config: rope_type {_short(kind)} is refused (only \"default\": scaled, dynamic, "
                           "YaRN, LongRoPE and Llama 3 RoPE change the angles)")
        if "rope_theta" not in params:
            raise BadInput(f"{name} config: rope_parameters sets no rope_theta (refused rather than assume a default)")
        theta = _exact_number((exact.get("rope_parameters") or {}).get("rope_theta", params["rope_theta"]),
                              "rope_parameters.rope_theta", name)
    if top is not None:
        top_q = _exact_number(exact.get("rope_theta", top), "rope_theta", name)
        if theta is not None and top_q != theta:
            raise BadInput(f"{name} config: rope_theta {_short(top)} differs from rope_parameters.rope_theta "
                           f"{_short(params['rope_theta'])}")
        theta = top_q
    if theta is None:
        raise BadInput(f"{name} config: no rope_theta (in rope_parameters or at the top level); refused rather than "
                       "assume the config class's default")
    for where, value in (("rope_parameters.partial_rotary_factor", (params or {}).get("partial_rotary_factor")),
                         ("partial_rotary_factor", cfg.get("partial_rotary_factor"))):
        if value is not None and (isinstance(value, bool) or value != 1):
            raise BadInput(f"{name} config: {where} {_short(value)} is refused: transformers' {name} rotates all "
                           "of head_dim and ignores it, so the model is not the partial rotary one it names")
    return theta


def config_from_dict(cfg, exact: dict | None = None) -> LlamaConfig:
    """A config.json dict as a LlamaConfig; one line (BadInput) naming the first field refused.
    `exact`: the same config.json read with its decimals as Decimals (rope_theta taken from it)."""
    if not isinstance(cfg, dict):
        raise BadInput("Hugging Face config: config.json is not a JSON object")
    fam = family(cfg)
    if fam is None:
        raise BadInput(f"Hugging Face config: model_type {_short(cfg.get('model_type'))} is not a Llama-family model")
    name = NAMES[fam]
    if cfg.get("model_type") not in (None, fam):
        raise BadInput(f"{name} config: model_type {_short(cfg.get('model_type'))} does not match architectures")
    arch = cfg.get("architectures")
    if arch is not None and arch != [ARCHITECTURES[fam]]:
        raise BadInput(f"{name} config: architectures {_short(arch)} is not supported (only "
                       f"[\"{ARCHITECTURES[fam]}\"], whose logits are lm_head's)")
    for key, ok in (("is_encoder_decoder", (False, None)), ("add_cross_attention", (False, None)),
                    ("pruned_heads", ({}, None))):
        if key in cfg and not any(cfg[key] == a and type(cfg[key]) is type(a) for a in ok):
            raise BadInput(f"{name} config: {key}={_short(cfg[key])} is refused (not a {ARCHITECTURES[fam]})")
    tp = cfg.get("pretraining_tp", 1)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise BadInput(f"{name} config: pretraining_tp must be a positive integer, got {_short(tp)}")
    act = cfg.get("hidden_act", "silu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise BadInput(f"{name} config: hidden_act {_short(act)} is not supported (gated MLPs with "
                       f"{', '.join(ACTIVATIONS)})")
    eps = cfg.get("rms_norm_eps", 1e-6)
    finite = isinstance(eps, float) and math.isfinite(eps) or \
        isinstance(eps, int) and not isinstance(eps, bool) and abs(eps) <= int(np.finfo(np.float64).max)
    if not finite or eps <= 0:
        raise BadInput(f"{name} config: rms_norm_eps must be a positive finite number, got {_short(eps)}")
    theta = _rope(cfg, exact or {}, name)
    V, n, dm = _int(cfg, "vocab_size", name), _int(cfg, "max_position_embeddings", name), _int(cfg, "hidden_size", name)
    heads = _int(cfg, "num_attention_heads", name, high=256)
    kv = cfg.get("num_key_value_heads")
    kv = heads if kv is None else _int(cfg, "num_key_value_heads", name, high=256)
    if heads % kv:
        raise BadInput(f"{name} config: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    dh = cfg.get("head_dim")
    if dh is None:
        if dm % heads:
            raise BadInput(f"{name} config: hidden_size {dm} is not a multiple of num_attention_heads {heads} "
                           "(and head_dim is not set)")
        dh = dm // heads
    else:
        dh = _int(cfg, "head_dim", name, high=1 << 14)
    if dh % 2:
        raise BadInput(f"{name} config: head_dim {dh} is odd (rotary pairs need an even head_dim)")
    if V + n + 1 + dm > MAX_SIZE:
        raise BadInput(f"{name} config: vocab_size + max_position_embeddings + 1 + hidden_size = {V + n + 1 + dm} "
                       f"exceeds depthcert's residual limit {MAX_SIZE}")
    # sliding windows: key j is visible from query p when p - j < sliding_window; with sequences of up
    # to max_position_embeddings tokens a window below that could hide keys
    window = cfg.get("sliding_window")
    sliding = False
    if fam == "mistral":
        sliding = window is not None
    elif fam == "qwen2":
        types = cfg.get("layer_types")
        if types is not None:
            if not isinstance(types, list) or not all(t in ("full_attention", "sliding_attention") for t in types):
                raise BadInput(f"{name} config: layer_types {_short(types)} is not a list of full_attention / "
                               "sliding_attention")
            sliding = "sliding_attention" in types
        else:
            sliding = bool(cfg.get("use_sliding_window", False))
    elif window is not None:
        raise BadInput(f"{name} config: sliding_window {_short(window)} is refused (LlamaForCausalLM has none)")
    if sliding and window is not None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise BadInput(f"{name} config: sliding_window must be a positive integer, got {_short(window)}")
        if window < n:
            raise BadInput(f"{name} config: sliding_window {window} is below max_position_embeddings {n}, so it could "
                           "hide keys; refused (sliding-window attention is not decided)")
    if fam == "llama":
        qkv_bias = o_bias = _bool(cfg, "attention_bias", name, False)
        mlp_bias = _bool(cfg, "mlp_bias", name, False)
    else:
        for key in ("attention_bias", "mlp_bias"):
            if key in cfg:
                raise BadInput(f"{name} config: {key} is not a {name}Config field (its biases are fixed)")
        qkv_bias, o_bias, mlp_bias = fam == "qwen2", False, False
    return LlamaConfig(fam, V, dm, _int(cfg, "intermediate_size", name, high=1 << 14),
                       _int(cfg, "num_hidden_layers", name, high=256), heads, kv, dh, ACTIVATIONS[act], n,
                       Fraction(float(eps)), _bool(cfg, "tie_word_embeddings", name, False),
                       theta, qkv_bias, o_bias, mlp_bias)


def expected_shapes(c: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter save_pretrained writes, and its shape (lm_head only when untied)."""
    dm, dh, ff = c.hidden_size, c.head_dim, c.intermediate_size
    shapes = {"model.embed_tokens.weight": (c.vocab_size, dm), "model.norm.weight": (dm,)}
    for li in range(c.num_layers):
        p = f"model.layers.{li}."
        shapes.update({p + "input_layernorm.weight": (dm,), p + "post_attention_layernorm.weight": (dm,),
                       p + "self_attn.q_proj.weight": (c.num_heads * dh, dm),
                       p + "self_attn.k_proj.weight": (c.num_kv_heads * dh, dm),
                       p + "self_attn.v_proj.weight": (c.num_kv_heads * dh, dm),
                       p + "self_attn.o_proj.weight": (dm, c.num_heads * dh),
                       p + "mlp.gate_proj.weight": (ff, dm), p + "mlp.up_proj.weight": (ff, dm),
                       p + "mlp.down_proj.weight": (dm, ff)})
        if c.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (c.num_heads * dh,),
                           p + "self_attn.k_proj.bias": (c.num_kv_heads * dh,),
                           p + "self_attn.v_proj.bias": (c.num_kv_heads * dh,)})
        if c.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (dm,)
        if c.mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (ff,), p + "mlp.up_proj.bias": (ff,), p + "mlp.down_proj.bias": (dm,)})
    if not c.tied:
        shapes["lm_head.weight"] = (c.vocab_size, dm)
    return shapes


def _buffer(name: str) -> bool:
    """rotary_emb.inv_freq, which older transformers saved (float32 frequencies: not parameters; the
    exact model computes the real ones from rope_theta)."""
    return name.endswith("rotary_emb.inv_freq")


def check_state_dict(c: LlamaConfig, sd: dict) -> dict[str, np.ndarray]:
    """The parameters as float64 arrays of the right shapes, every value finite; a tied lm_head.weight
    must equal embed_tokens; inv_freq buffers dropped; any other entry refused."""
    from depthcert.interop.checkpoint_files import float_parameters

    return float_parameters(sd, expected_shapes(c), NAMES[c.family], tied=c.tied, embed="model.embed_tokens.weight",
                            embed_short="embed_tokens", is_buffer=_buffer,
                            unexpected=lambda key: f"not a {ARCHITECTURES[c.family]} parameter of this config")


def model_from_config_and_state_dict(cfg: dict, sd: dict, vocab=None, classes=None, name: str = "llama",
                                     outputs: str = "last", exact: dict | None = None):
    """The exact Model of a Llama-family CausalLM given its config dict and state dict (module docstring).

    depthcert's stream is [token (V) | position (max_position_embeddings) | one | resid (hidden_size)],
    x = E h with E = [embed_tokens^T | 0 | 0 | I] (no position embedding: positions enter through the
    rotary heads only).  Per query head h of group g: W_Q = q_proj[h] E_y + b_q e_one^T, W_K = k_proj[g]
    E_y + ..., W_QK = W_K^T W_Q, Rotary(W_Q, W_K, head_dim, theta), scale 1/sqrt(head_dim);
    W_V = m R o_proj[:, h] (v_proj[g] E_y + b_v e_one^T) (m heads averaged; o_proj's bias on head 0's
    constant column).  E_y folds the RMSNorm gain.  The MLP is gated: W_gate = gate_proj E_z, W1 =
    up_proj E_z, W2 = R down_proj."""
    import flint

    from depthcert.checkers.layout import Layout
    from depthcert.checkers.model import MLP, Head, Layer, Model, Norm, Rotary
    from depthcert.interop.transformerlens import _ZERO, _fmpq_mat, _fractions, _numpy, _vector

    c = config_from_dict(cfg, exact)
    p = check_state_dict(c, {k: _numpy(v) for k, v in sd.items()})
    V, n, dm, dh = c.vocab_size, c.max_positions, c.hidden_size, c.head_dim
    vocab = tuple(str(i) for i in range(V)) if vocab is None else tuple(vocab)
    classes = tuple(str(i) for i in range(V)) if classes is None else tuple(classes)
    if len(vocab) != V or len(classes) != V:
        raise BadInput(f"{NAMES[c.family]} model has vocab_size {V}, given {len(vocab)} token names and "
                       f"{len(classes)} class names")
    layout = Layout.of(("token", V), ("position", n), ("one", 1), ("resid", dm))
    d = layout.dim
    one, r0 = V + n, V + n + 1
    resid = list(range(r0, r0 + dm))
    # Every matrix below reads the stream through E_y (the resid block, plus the constant row for a
    # bias) and writes through R (the resid block), so each is computed as its block of non-zero
    # rows and columns in python-flint and placed into a matrix of exact zeros (speed: the zeros
    # are never converted; the same exact matrices as the products written in the docstring).

    def place(block, shape, rows, cols):
        """The read-only Fraction matrix of `shape` holding the fmpq_mat `block` at rows x cols, 0 elsewhere."""
        out = np.full(shape, _ZERO, dtype=object)
        out[np.ix_(rows, cols)] = _fractions(block)
        out.flags.writeable = False
        return out

    P = np.full((dm, d), _ZERO, dtype=object)  # E = [embed_tokens^T | 0 | 0 | I]
    P[:, :V] = _fractions(_fmpq_mat(p["model.embed_tokens.weight"]).transpose())
    P[np.arange(dm), np.arange(r0, r0 + dm)] = Fraction(1)
    P.flags.writeable = False
    eps = c.eps

    def rms(weight_key):
        """(Norm of x = E h, D: the (dm + 1)-square diagonal fmpq_mat diag(weight, 1)): the block of
        E_y on the resid columns and the constant column."""
        w = _fmpq_mat(p[weight_key].reshape(1, -1))
        D = flint.fmpq_mat(dm + 1, dm + 1)
        for i in range(dm):
            D[i, i] = w[0, i]
        D[dm, dm] = 1
        return Norm("rmsnorm", P, eps, r0), D

    def affine(W, b, D):
        """W E_y + b e_one^T as (block, its columns): [W | b] D on the resid columns and the constant
        column (b = 0 when None)."""
        Wb = np.concatenate([W, np.zeros((W.shape[0], 1)) if b is None else np.asarray(b).reshape(-1, 1)], axis=1)
        return _fmpq_mat(Wb) * D, resid + [one]

    def gained(W, D):
        """W E_y (no bias) as a read-only Fraction matrix: the block W diag(weight) on the resid columns."""
        block, cols = affine(W, None, D)
        return place(block, (W.shape[0], d), list(range(W.shape[0])), cols)

    m, group = c.num_heads, c.num_heads // c.num_kv_heads
    layers = []
    for li in range(c.num_layers):
        pre = f"model.layers.{li}."
        norm_attn, Da = rms(pre + "input_layernorm.weight")
        a = pre + "self_attn."
        qw, kw, vw, ow = (p[a + x + "_proj.weight"] for x in "qkvo")
        qb, kb, vb = ((p[a + x + "_proj.bias"] if c.qkv_bias else None) for x in "qkv")
        Ks, Vs, WKs = {}, {}, {}
        heads = []
        for h in range(m):
            g = h // group  # repeat_kv: query head h reads key/value head h // group
            if g not in Ks:
                sl = slice(g * dh, (g + 1) * dh)
                Ks[g] = affine(kw[sl], None if kb is None else kb[sl], Da)
                Vs[g] = affine(vw[sl], None if vb is None else vb[sl], Da)
                WKs[g] = place(Ks[g][0], (dh, d), list(range(dh)), Ks[g][1])  # shared by the group's heads
            sl = slice(h * dh, (h + 1) * dh)
            (Q, qcols), (K, kcols), (Vb, vcols) = affine(qw[sl], None if qb is None else qb[sl], Da), Ks[g], Vs[g]
            OV = (_fmpq_mat(ow[:, sl]) * Vb) * m  # rows: the resid block (R)
            if h == 0 and c.o_bias:  # o_proj's bias on the constant column of head 0
                bO = _fmpq_mat(p[a + "o_proj.bias"].reshape(-1, 1))
                for i in range(dm):
                    OV[i, dm] += bO[i, 0] * m
            WQ = place(Q, (dh, d), list(range(dh)), qcols)
            heads.append(Head(place(K.transpose() * Q, (d, d), kcols, qcols), place(OV, (d, d), resid, vcols),
                              attention="softmax", scale=Fraction(1), scale_sqrt_divisor=Fraction(dh),
                              rotary=Rotary(WQ, WKs[g], c.rotary_dim, c.theta)))
        norm_mlp, Dm = rms(pre + "post_attention_layernorm.weight")
        pm = pre + "mlp."
        ff = c.intermediate_size

        def bias(key, size):
            return _vector(_fmpq_mat(p[key].reshape(-1, 1))) if c.mlp_bias else np.full(size, Fraction(0), dtype=object)

        W_gate = gained(p[pm + "gate_proj.weight"], Dm)
        W1 = gained(p[pm + "up_proj.weight"], Dm)
        W2 = place(_fmpq_mat(p[pm + "down_proj.weight"]), (d, ff), resid, list(range(ff)))
        if c.mlp_bias:
            b2 = np.full(d, _ZERO, dtype=object)
            b2[r0:r0 + dm] = _vector(_fmpq_mat(p[pm + "down_proj.bias"].reshape(-1, 1)))
        else:
            b2 = np.full(d, Fraction(0), dtype=object)
        mlp = MLP(W1, bias(pm + "up_proj.bias", ff), W2, b2, activation=c.activation,
                  W_gate=W_gate, b_gate=bias(pm + "gate_proj.bias", ff))
        layers.append(Layer(tuple(heads), causal=True, mlp=mlp, norm_attn=norm_attn, norm_mlp=norm_mlp))
    norm_final, Df = rms("model.norm.weight")
    lm = p["model.embed_tokens.weight"] if c.tied else p["lm_head.weight"]
    W_O = gained(lm, Df)
    return Model(vocab, n, classes, layout, tuple(layers), W_O, name=name,
                 notes={"source": f"huggingface-{c.family}", "rope_theta": str(c.theta)}, constant_row=True,
                 outputs=outputs, norm_final=norm_final)


class LlamaFloatForward:
    """A plain numpy float forward (float32 or a true float64) of a Llama-family folder, what a user
    runs without depthcert, written as modeling_llama.py computes (module docstring) with every
    operation in the one dtype: inv_freq = 1 / theta^(arange(0, head_dim, 2) / head_dim), the angles
    and their cos / sin, RMSNorm and softmax too (transformers keeps the first three and softmax in
    float32 even after model.double(); here float64 means float64 throughout).  It certifies nothing
    (verify-model --compare-float sets it beside the certified decision)."""

    def __init__(self, cfg: dict, sd: dict, dtype):
        c = config_from_dict(cfg)
        self.c, self.dt = c, np.dtype(dtype).type
        self.p = {k: np.asarray(v, dtype=self.dt) for k, v in check_state_dict(c, sd).items()}
        rope = cfg.get("rope_parameters") or {}
        self.theta = float(rope.get("rope_theta", cfg.get("rope_theta")))

    def _rms(self, x, w):
        dt = self.dt
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + dt(float(self.c.eps))))

    def _lin(self, x, key):
        y = x @ self.p[key + ".weight"].T
        return y + self.p[key + ".bias"] if key + ".bias" in self.p else y

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        """(B, n) token ids -> (B, vocab_size) logits at the last position."""
        from depthcert.interop.float_forward import _act

        c, p, dt = self.c, self.p, self.dt
        B, n = ids.shape
        H, G, dh = c.num_heads, c.num_kv_heads, c.head_dim
        inv = dt(1) / (dt(self.theta) ** (np.arange(0, dh, 2, dtype=dt) / dt(dh)))
        emb = np.concatenate([np.arange(n, dtype=dt)[:, None] * inv] * 2, axis=-1)  # (n, dh)
        cos, sin = np.cos(emb), np.sin(emb)

        def rope(t):  # (B, heads, n, dh)
            half = np.concatenate([-t[..., dh // 2:], t[..., :dh // 2]], axis=-1)
            return t * cos + half * sin

        mask = np.triu(np.ones((n, n), dtype=bool), 1)
        x = p["model.embed_tokens.weight"][ids]
        for li in range(c.num_layers):
            pre = f"model.layers.{li}."
            y = self._rms(x, p[pre + "input_layernorm.weight"])
            q = rope(self._lin(y, pre + "self_attn.q_proj").reshape(B, n, H, dh).transpose(0, 2, 1, 3))
            k = rope(self._lin(y, pre + "self_attn.k_proj").reshape(B, n, G, dh).transpose(0, 2, 1, 3))
            v = self._lin(y, pre + "self_attn.v_proj").reshape(B, n, G, dh).transpose(0, 2, 1, 3)
            k, v = np.repeat(k, H // G, axis=1), np.repeat(v, H // G, axis=1)  # repeat_kv
            s = np.matmul(q, k.transpose(0, 1, 3, 2)) * dt(dh ** -0.5)
            s = np.where(mask, dt(-np.inf), s)
            s = np.exp(s - s.max(-1, keepdims=True))
            z = np.matmul(s / s.sum(-1, keepdims=True), v).transpose(0, 2, 1, 3).reshape(B, n, H * dh)
            x = x + self._lin(z, pre + "self_attn.o_proj")
            y = self._rms(x, p[pre + "post_attention_layernorm.weight"])
            hid = _act(self._lin(y, pre + "mlp.gate_proj"), c.activation, dt) * self._lin(y, pre + "mlp.up_proj")
            x = x + self._lin(hid, pre + "mlp.down_proj")
        last = self._rms(x[:, -1], p["model.norm.weight"])
        return last @ (p["model.embed_tokens.weight"] if c.tied else p["lm_head.weight"]).T


def read_float(path: str) -> tuple[dict, dict]:
    """(sizes for compare_with_verdict's batches, TransformerLens names, and the config itself under
    "llama_config"; the state dict) of a folder: float_forward.compare_with_verdict(*read_float(path),
    ..., forward=llama_forward)."""
    from depthcert.interop.huggingface import read_folder

    cfg, sd = read_folder(path)
    c = config_from_dict(cfg)
    return ({"d_model": c.hidden_size, "n_heads": c.num_heads, "d_head": c.head_dim,
             "d_mlp": 2 * c.intermediate_size, "llama_config": cfg}, sd)


def llama_forward(sizes: dict, sd: dict, dtype) -> LlamaFloatForward:
    """The forward compare_with_verdict builds per dtype, from read_float's pair."""
    return LlamaFloatForward(sizes["llama_config"], sd, dtype)


def folder_family(path: str) -> str | None:
    """family() of a folder's config.json (None when it is absent, unreadable or another model)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            return family(json.load(fh))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def read_exact_config(path: str) -> dict:
    """config.json of a folder with every decimal number as a Decimal (its text, exactly)."""
    with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def load_model(path: str, cfg: dict, sd: dict, vocab=None, classes=None, every_position: bool = False):
    """The exact Model of a save_pretrained Llama-family folder (config and state dict already read by
    huggingface.read_folder; rope_theta re-read as the decimal written)."""
    try:
        exact = read_exact_config(path)
    except (OSError, ValueError, UnicodeDecodeError):
        exact = None
    return model_from_config_and_state_dict(cfg, sd, vocab, classes, name=os.path.basename(os.path.normpath(path)),
                                            outputs="all" if every_position else "last",
                                            exact=exact if isinstance(exact, dict) else None)


__all__ = ["LlamaConfig", "config_from_dict", "unknown_config_keys", "config_warning", "family",
           "model_from_config_and_state_dict", "load_model", "LlamaFloatForward", "read_float"]
