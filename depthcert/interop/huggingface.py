"""Hugging Face GPT-2 checkpoints in: a folder written by transformers' GPT2LMHeadModel.save_pretrained
(config.json + model.safetensors) as the exact depthcert `Model` (docs/trained-models.md, "GPT-2
(Hugging Face) in").  Read with numpy alone (checkpoint_files.read_safetensors); torch only for a
folder that holds pytorch_model.bin instead.

transformers computes, for tokens t_0..t_{n-1} (GPT2LMHeadModel in eval mode, modeling_gpt2.py):

    x_k = wte[t_k] + wpe[k]
    per block:  y = ln_1(x);  [q | k | v] = y c_attn.weight + c_attn.bias   (Conv1D: x W + b, W stored
                (in, out), the transpose of nn.Linear's); heads split q, k, v into n_head slices of d_head
                A[h] = softmax over keys <= query of (q_h . k_h) * s,  s = 1/sqrt(d_head) if scale_attn_weights
                else 1, times 1/(layer + 1) in layer 0, 1, ... if scale_attn_by_inverse_layer_idx;
                x <- x + concat_h(A[h] v_h) attn.c_proj.weight + attn.c_proj.bias
                x <- x + act(ln_2(x) c_fc.weight + c_fc.bias) mlp.c_proj.weight + mlp.c_proj.bias
    logits = ln_f(x) lm_head.weight^T            (no bias; lm_head.weight = wte when tied)

LayerNorm with the config's layer_norm_epsilon (read as the float64 it is), act one of
activation_function's gelu_new / gelu_pytorch_tanh / gelu_python_tanh (tanh, sqrt(2/pi)), gelu /
gelu_python (erf), gelu_fast (tanh, 0.7978845608), relu, silu / swish; MLP width n_inner, or
4 n_embd when null.  This is TransformerLens's GPT-2 (its convert_gpt2_weights), so the folder is
mapped onto a TransformerLens config and state dict and decided by transformerlens.model_from_state_dict:

    W_E = wte, W_pos = wpe, W_Q[h] = c_attn.weight[:, h d_head : (h+1) d_head] (K, V: the next
    n_embd columns), b_Q/b_K/b_V likewise, W_O[h] = attn.c_proj.weight[h d_head : (h+1) d_head, :],
    b_O = attn.c_proj.bias, W_in = c_fc.weight, W_out = mlp.c_proj.weight, W_U = lm_head.weight^T,
    b_U = 0 (exactly), ln1/ln2/ln_final = ln_1/ln_2/ln_f; with scale_attn_by_inverse_layer_idx each head of
    layer L gets the exact scale 1/(L+1) on top (Head.scale; TransformerLens's config has no such field).

Every config.json key is read (READ_FIELDS), refused when it changes the model in a way not decided
here (REFUSED: add_cross_attention, is_encoder_decoder, pruned_heads), or listed as without effect
on the logits (NO_EFFECT); any other key is named by unknown_config_keys (verify-model warns in one
line; --strict-config refuses).  A field absent from config.json takes GPT2Config's
default, as from_pretrained does (GPT2_DEFAULTS).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from depthcert.checkers.errors import BadInput

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
ARCHITECTURE = "GPT2LMHeadModel"

# GPT2Config's defaults (transformers 4.x and 5.x) for the fields that decide the model: what
# from_pretrained uses when config.json lacks the key
GPT2_DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                 "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                 "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "tie_word_embeddings": True}
# activation_function -> TransformerLens act_fn (transformers' ACT2FN: gelu_python is nn.functional.gelu's
# erf written out, gelu_python_tanh gelu_pytorch_tanh's tanh written out, swish is nn.SiLU)
ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu_python_tanh": "gelu_new",
               "gelu": "gelu", "gelu_python": "gelu", "gelu_fast": "gelu_fast", "relu": "relu", "silu": "silu",
               "swish": "silu"}

READ_FIELDS = frozenset(("model_type", "architectures", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                         "n_inner", "activation_function", "layer_norm_epsilon", "scale_attn_weights",
                         "scale_attn_by_inverse_layer_idx", "tie_word_embeddings"))
# keys whose value decides something this reader does not: refused unless the value is one of these
REFUSED = {"add_cross_attention": (False, None),
           "is_encoder_decoder": (False, None), "pruned_heads": ({}, None)}
REFUSED_WHY = {"add_cross_attention": "cross-attention (an encoder's states) is not supported",
               "is_encoder_decoder": "an encoder-decoder is not a GPT2LMHeadModel",
               "pruned_heads": "pruned heads are not supported"}
# keys that do not change the logits of GPT2LMHeadModel in eval mode on a sequence of token ids
NO_EFFECT = frozenset((
    # dropout (eval mode) and initialization
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout", "initializer_range",
    # GPT2DoubleHeadsModel's multiple-choice head only
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    # the same real function computed another way (float precision, attention kernel, chunking)
    "reorder_and_upcast_attn", "_attn_implementation", "attn_implementation", "_attn_implementation_autoset",
    "chunk_size_feed_forward", "torchscript", "use_bfloat16", "dtype", "torch_dtype",
    # an old field (the causal-mask buffer's size); transformers sizes it by n_positions
    "n_ctx",
    # decoder flags GPT-2 does not read
    "is_decoder", "tie_encoder_decoder", "cross_attention_hidden_size",
    # outputs and caching
    "use_cache", "output_hidden_states", "output_attentions", "return_dict", "output_past", "use_return_dict",
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
MAX_SIZE = 4096  # vocab_size + n_positions + 1 + n_embd: depthcert's stream (transformerlens.MAX_SIZE)


def unknown_config_keys(cfg) -> list[str]:
    """The config.json keys that are neither read, refused, nor without effect (sorted)."""
    if not isinstance(cfg, dict):
        return []
    return sorted(str(k) for k in cfg if k not in READ_FIELDS and k not in REFUSED and k not in NO_EFFECT)


def config_warning(cfg) -> tuple[list[str], str]:
    """(unknown keys, the sentence verify-model prints about them); a Llama-family config.json is
    judged by huggingface_llama's fields."""
    from depthcert.interop import huggingface_llama as llama
    from depthcert.interop import huggingface_neox as neox

    if llama.family(cfg) is not None:
        return llama.config_warning(cfg)
    if neox.is_neox(cfg):
        return neox.config_warning(cfg)
    keys = unknown_config_keys(cfg)
    many = len(keys) != 1
    return keys, (f"Hugging Face GPT-2 config key{'s' if many else ''} that {'are' if many else 'is'} not "
                  f"{'GPT2Config fields' if many else 'a GPT2Config field'} this reader knows: {', '.join(keys)}")


def _int(cfg: dict, key: str, low: int = 1, high: int = MAX_SIZE) -> int:
    v = cfg.get(key, GPT2_DEFAULTS.get(key))
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise BadInput(f"GPT-2 config: {key} must be an integer in {low} .. {high}, got {_short(v)}"
                       + ("" if key in cfg else " (GPT2Config's default: config.json does not set it)"))
    return v


def _bool(cfg: dict, key: str) -> bool:
    v = cfg.get(key, GPT2_DEFAULTS[key])
    if not isinstance(v, bool):
        raise BadInput(f"GPT-2 config: {key} must be true or false, got {_short(v)}")
    return v


def _short(v) -> str:
    text = json.dumps(v) if isinstance(v, (bool, type(None), int, float, str, list, dict)) else repr(v)
    return text if len(text) <= 40 else text[:30] + "..."


@dataclass(frozen=True)
class GPT2Config:
    """The fields of a GPT2Config that decide what GPT2LMHeadModel computes."""

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    n_inner: int  # the MLP width (4 n_embd when config.json says null)
    activation: str  # TransformerLens act_fn
    eps: float  # layer_norm_epsilon, the float64 it is
    scaled: bool  # scale_attn_weights: scores times 1/sqrt(d_head)
    tied: bool  # tie_word_embeddings: lm_head.weight is wte
    inverse_layer: bool = False  # scale_attn_by_inverse_layer_idx: layer L's scores also times 1/(L+1)

    @property
    def d_head(self) -> int:
        return self.n_embd // self.n_head

    def tl_config(self) -> dict:
        """The TransformerLens config of the same model (what convert_gpt2_weights's model has)."""
        return {"n_layers": self.n_layer, "d_model": self.n_embd, "n_heads": self.n_head, "d_head": self.d_head,
                "d_vocab": self.vocab_size, "d_vocab_out": self.vocab_size, "n_ctx": self.n_positions,
                "d_mlp": self.n_inner, "act_fn": self.activation, "attn_only": False, "normalization_type": "LN",
                "eps": self.eps, "final_rms": False, "positional_embedding_type": "standard",
                "attention_dir": "causal", "use_attn_scale": self.scaled, "original_architecture": ARCHITECTURE,
                "tie_word_embeddings": self.tied}


def config_from_dict(cfg) -> GPT2Config:
    """A config.json dict as a GPT2Config; one line (BadInput) naming the first field refused."""
    if not isinstance(cfg, dict):
        raise BadInput("GPT-2 config: config.json is not a JSON object")
    mt = cfg.get("model_type")
    if mt != "gpt2":
        raise BadInput(f"Hugging Face config: model_type {_short(mt)} is not supported (\"gpt2\": GPT2LMHeadModel; "
                       "\"gpt_neox\": GPTNeoXForCausalLM; \"llama\", \"qwen2\", \"mistral\": their ForCausalLM)")
    arch = cfg.get("architectures")
    if arch is not None and arch != [ARCHITECTURE]:
        raise BadInput(f"GPT-2 config: architectures {_short(arch)} is not supported (only [\"{ARCHITECTURE}\"], "
                       "whose logits are lm_head's)")
    for key, allowed in REFUSED.items():
        if key in cfg and not any(cfg[key] == a and type(cfg[key]) is type(a) for a in allowed):
            raise BadInput(f"GPT-2 config: {key}={_short(cfg[key])} is refused: {REFUSED_WHY[key]}")
    act = cfg.get("activation_function", GPT2_DEFAULTS["activation_function"])
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise BadInput(f"GPT-2 config: activation_function {_short(act)} is not supported "
                       f"({', '.join(ACTIVATIONS)})")
    eps = cfg.get("layer_norm_epsilon", GPT2_DEFAULTS["layer_norm_epsilon"])
    finite = isinstance(eps, float) and math.isfinite(eps) or \
        isinstance(eps, int) and not isinstance(eps, bool) and abs(eps) <= int(np.finfo(np.float64).max)
    if not finite or eps <= 0:
        raise BadInput(f"GPT-2 config: layer_norm_epsilon must be a positive finite number, got {_short(eps)}")
    V, n, dm = _int(cfg, "vocab_size"), _int(cfg, "n_positions"), _int(cfg, "n_embd")
    heads = _int(cfg, "n_head", high=256)
    if dm % heads:
        raise BadInput(f"GPT-2 config: n_embd {dm} is not a multiple of n_head {heads}")
    inner = cfg.get("n_inner", None)
    inner = 4 * dm if inner is None else _int(cfg, "n_inner", high=1 << 14)
    if V + n + 1 + dm > MAX_SIZE:
        raise BadInput(f"GPT-2 config: vocab_size + n_positions + 1 + n_embd = {V + n + 1 + dm} exceeds depthcert's "
                       f"residual limit {MAX_SIZE}")
    return GPT2Config(V, n, dm, _int(cfg, "n_layer", high=256), heads, inner, ACTIVATIONS[act], float(eps),
                      _bool(cfg, "scale_attn_weights"), _bool(cfg, "tie_word_embeddings"),
                      _bool(cfg, "scale_attn_by_inverse_layer_idx"))


def _buffer(name: str) -> bool:
    """The causal-mask buffers older transformers saved (attn.bias, attn.masked_bias): not parameters."""
    parts = name.split(".")
    return len(parts) == 5 and parts[:2] == ["transformer", "h"] and parts[2].isdigit() and \
        parts[3] == "attn" and parts[4] in ("bias", "masked_bias")


def expected_shapes(c: GPT2Config) -> dict[str, tuple[int, ...]]:
    """Every parameter GPT2LMHeadModel.save_pretrained writes, and its shape (lm_head only when untied)."""
    dm = c.n_embd
    shapes = {"transformer.wte.weight": (c.vocab_size, dm), "transformer.wpe.weight": (c.n_positions, dm),
              "transformer.ln_f.weight": (dm,), "transformer.ln_f.bias": (dm,)}
    for li in range(c.n_layer):
        p = f"transformer.h.{li}."
        shapes.update({p + "ln_1.weight": (dm,), p + "ln_1.bias": (dm,), p + "ln_2.weight": (dm,), p + "ln_2.bias": (dm,),
                       p + "attn.c_attn.weight": (dm, 3 * dm), p + "attn.c_attn.bias": (3 * dm,),
                       p + "attn.c_proj.weight": (dm, dm), p + "attn.c_proj.bias": (dm,),
                       p + "mlp.c_fc.weight": (dm, c.n_inner), p + "mlp.c_fc.bias": (c.n_inner,),
                       p + "mlp.c_proj.weight": (c.n_inner, dm), p + "mlp.c_proj.bias": (dm,)})
    if not c.tied:
        shapes["lm_head.weight"] = (c.vocab_size, dm)
    return shapes


def check_state_dict(c: GPT2Config, sd: dict) -> dict[str, np.ndarray]:
    """The parameters as float64 arrays of the right shapes, every value finite; a tied lm_head.weight
    must equal wte (from_pretrained ties it); old mask buffers dropped; any other entry refused."""
    from depthcert.interop.checkpoint_files import float_parameters

    return float_parameters(sd, expected_shapes(c), "GPT-2", tied=c.tied, embed="transformer.wte.weight",
                            embed_short="wte", is_buffer=_buffer,
                            unexpected=lambda key: "not a GPT2LMHeadModel parameter of this config")


def tl_state_dict(c: GPT2Config, sd: dict) -> dict[str, np.ndarray]:
    """The TransformerLens state dict of a GPT-2 state dict (module docstring): the same numbers, re-indexed."""
    p = check_state_dict(c, sd)
    dm, H, dh = c.n_embd, c.n_head, c.d_head
    out = {"embed.W_E": p["transformer.wte.weight"], "pos_embed.W_pos": p["transformer.wpe.weight"],
           "ln_final.w": p["transformer.ln_f.weight"], "ln_final.b": p["transformer.ln_f.bias"],
           "unembed.W_U": (p["transformer.wte.weight"] if c.tied else p["lm_head.weight"]).T.copy(),
           "unembed.b_U": np.zeros(c.vocab_size)}
    for li in range(c.n_layer):
        g, t = f"transformer.h.{li}.", f"blocks.{li}."
        W, b = p[g + "attn.c_attn.weight"], p[g + "attn.c_attn.bias"]
        for j, name in enumerate("QKV"):
            out[t + "attn.W_" + name] = W[:, j * dm:(j + 1) * dm].reshape(dm, H, dh).transpose(1, 0, 2).copy()
            out[t + "attn.b_" + name] = b[j * dm:(j + 1) * dm].reshape(H, dh).copy()
        out[t + "attn.W_O"] = p[g + "attn.c_proj.weight"].reshape(H, dh, dm).copy()
        out[t + "attn.b_O"] = p[g + "attn.c_proj.bias"]
        out.update({t + "ln1.w": p[g + "ln_1.weight"], t + "ln1.b": p[g + "ln_1.bias"],
                    t + "ln2.w": p[g + "ln_2.weight"], t + "ln2.b": p[g + "ln_2.bias"],
                    t + "mlp.W_in": p[g + "mlp.c_fc.weight"], t + "mlp.b_in": p[g + "mlp.c_fc.bias"],
                    t + "mlp.W_out": p[g + "mlp.c_proj.weight"], t + "mlp.b_out": p[g + "mlp.c_proj.bias"]})
    return out


def read_folder(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json as a dict, the state dict as float64 arrays) of a save_pretrained folder."""
    cfg_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(cfg_path):
        raise BadInput(f"{path}: a folder without {CONFIG_FILE} (expected a Hugging Face save_pretrained folder)")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except OSError as exc:
        raise BadInput(f"cannot read {cfg_path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise BadInput(f"{cfg_path}: not JSON") from None
    from depthcert.interop import checkpoint_files as cf

    if os.path.isfile(os.path.join(path, WEIGHT_FILES[0])):
        sd = cf.read_safetensors(os.path.join(path, WEIGHT_FILES[0]))[0]
    elif os.path.isfile(os.path.join(path, WEIGHT_FILES[1])):
        sd = cf.read_torch(os.path.join(path, WEIGHT_FILES[1]))
        if not isinstance(sd, dict):
            raise BadInput(f"{os.path.join(path, WEIGHT_FILES[1])}: not a state dict")
    elif any(f.endswith(".index.json") for f in os.listdir(path)):
        raise BadInput(f"{path}: a sharded checkpoint (*.index.json) is not supported; save it with a larger "
                       "max_shard_size")
    else:
        raise BadInput(f"{path}: no {WEIGHT_FILES[0]} (or {WEIGHT_FILES[1]}) beside {CONFIG_FILE}")
    return cfg, sd


def read_tl(path: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(TransformerLens config dict, TransformerLens state dict) of a GPT-2 folder for --compare-float's
    float forward (float_forward.FloatForward).  With scale_attn_by_inverse_layer_idx, layer L's W_Q
    and b_Q are multiplied by 1/(L+1) in float64 (exact when L+1 is a power of 2, else one rounding
    per weight: a float forward, as transformers' own float scaling is); the exact model keeps the
    weights as stored and the scale 1/(L+1) exact (model_from_config_and_state_dict)."""
    cfg, sd = read_folder(path)
    from depthcert.interop.huggingface_llama import NAMES, family

    if family(cfg) is not None:
        raise BadInput(f"{path}: a {NAMES[family(cfg)]}-family folder has no TransformerLens form (its float forward: "
                       "huggingface_llama.read_float)")
    from depthcert.interop.huggingface_neox import is_neox

    if is_neox(cfg):
        raise BadInput(f"{path}: a GPT-NeoX folder has no TransformerLens form here (its float forward: "
                       "huggingface_neox.read_float)")
    c = config_from_dict(cfg)
    tl = tl_state_dict(c, sd)
    if c.inverse_layer:
        for li in range(c.n_layer):
            for key in (f"blocks.{li}.attn.W_Q", f"blocks.{li}.attn.b_Q"):
                tl[key] = tl[key] / (li + 1)
    return c.tl_config(), tl


def model_from_config_and_state_dict(cfg: dict, sd: dict, vocab=None, classes=None, name: str = "gpt2",
                                     outputs: str = "last"):
    """The exact Model of a GPT2LMHeadModel given its config dict and state dict (numpy or torch)."""
    from depthcert.interop.transformerlens import _numpy, model_from_state_dict

    from dataclasses import replace
    from fractions import Fraction

    c = config_from_dict(cfg)
    model = model_from_state_dict(c.tl_config(), tl_state_dict(c, {k: _numpy(v) for k, v in sd.items()}), vocab,
                                  classes, name=name, outputs=outputs)
    if c.inverse_layer:  # layer L's scores times 1/(L+1) besides 1/sqrt(d_head), exactly
        model = replace(model, layers=tuple(
            replace(L, heads=tuple(replace(h, scale=h.scale * Fraction(1, li + 1)) for h in L.heads))
            for li, L in enumerate(model.layers)))
    return replace(model, notes={**model.notes, "source": "huggingface-gpt2",
                                 "scale_attn_by_inverse_layer_idx": c.inverse_layer})


def load_model(path: str, vocab=None, classes=None, config_seen: list | None = None, every_position: bool = False):
    """The exact Model of a save_pretrained GPT-2 folder (a Llama, Qwen2 or Mistral one: by
    huggingface_llama; a GPT-NeoX one: by huggingface_neox; dispatched on config.json's model_type /
    architectures); config_seen: a list config.json's dict is appended to; every_position: classify
    every position (GPT-2 computes logits at each)."""
    cfg, sd = read_folder(path)
    if config_seen is not None:
        config_seen.append(cfg)
    from depthcert.interop import huggingface_llama as llama

    if llama.family(cfg) is not None:  # LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM
        return llama.load_model(path, cfg, sd, vocab, classes, every_position)
    from depthcert.interop import huggingface_neox as neox

    if neox.is_neox(cfg):  # GPTNeoXForCausalLM
        return neox.load_model(path, cfg, sd, vocab, classes, every_position)
    return model_from_config_and_state_dict(cfg, sd, vocab, classes, name=os.path.basename(os.path.normpath(path)),
                                            outputs="all" if every_position else "last")


def model_from_gpt2(hf_model, vocab=None, classes=None):
    """The exact Model of a live transformers GPT2LMHeadModel (its config and state dict)."""
    cfg = hf_model.config.to_dict()
    return model_from_config_and_state_dict(cfg, hf_model.state_dict(), vocab, classes,
                                            name=str(cfg.get("_name_or_path") or "gpt2"))


def model_from_pretrained(hf_model, task=None, vocab=None, classes=None, strict_config: bool = False,
                          every_position: bool | None = None):
    """The exact Model verify-model decides for a live transformers PreTrainedModel (GPT2LMHeadModel,
    LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM, GPTNeoXForCausalLM) or a TransformerLens 4
    TransformerBridge wrapping one: obj.config and
    obj.state_dict() (tensors read as numpy float64) through the same mapping as the folder its
    save_pretrained writes, so both give the same Model.  config.json holds the config's numbers as
    JSON text; here the dict's floats are read as that text too (rope_theta 0.1 is 1/10 in both).
    task: names tokens and classes as verify-model does (the task's names when the sizes agree; the
    logits by the task's tokens when its classes are some of them) and reads every position when it
    labels every position; unknown config keys: a warning (UserWarning) naming them, BadInput
    with strict_config (--strict-config).  A TransformerLens 4 TransformerBridge is read as the
    Hugging Face model it wraps (transformerlens_bridge.unwrap: what it refuses, and why)."""
    import warnings
    from dataclasses import replace
    from decimal import Decimal

    from depthcert.interop import huggingface_llama as llama
    from depthcert.interop import huggingface_neox as neox
    from depthcert.interop import transformerlens_bridge as bridge
    from depthcert.interop.transformerlens import _numpy

    if bridge.is_bridge(hf_model):
        hf_model = bridge.unwrap(hf_model)
    config = getattr(hf_model, "config", None)
    if config is None or not callable(getattr(config, "to_dict", None)) or not callable(
            getattr(hf_model, "state_dict", None)):
        raise BadInput(f"model_from_pretrained takes a transformers PreTrainedModel, got {type(hf_model).__name__}")
    cfg = config.to_dict()
    try:
        exact = json.loads(json.dumps(cfg, default=str), parse_float=Decimal)  # the text save_pretrained writes
    except (TypeError, ValueError):
        exact = None
    unknown, what = config_warning(cfg)
    if unknown and strict_config:
        raise BadInput(f"strict_config: {what}; rename or remove {'them' if len(unknown) != 1 else 'it'}")
    if unknown:
        warnings.warn(f"ignored {what} (docs/trained-models.md)", UserWarning, stacklevel=2)
    every = (task is not None and getattr(task, "outputs", "last") == "all") if every_position is None else every_position
    outputs = "all" if every else "last"
    sd = {k: _numpy(v) for k, v in hf_model.state_dict().items()}  # float tensors as float64, exactly
    name = str(cfg.get("_name_or_path") or cfg.get("model_type") or "model")
    if llama.family(cfg) is not None:
        model = llama.model_from_config_and_state_dict(cfg, sd, vocab, classes, name=name, outputs=outputs, exact=exact)
    elif neox.is_neox(cfg):
        model = neox.model_from_config_and_state_dict(cfg, sd, vocab, classes, name=name, outputs=outputs, exact=exact)
    else:
        model = model_from_config_and_state_dict(cfg, sd, vocab, classes, name=name, outputs=outputs)
    if task is not None and vocab is None and classes is None:  # as verify-model names them (load_any_model)
        tv, tc = tuple(task.vocab), tuple(task.classes)
        if len(tv) == len(model.vocab) and len(tc) == len(model.classes):
            model = replace(model, vocab=tv, classes=tc)
        elif len(tv) == len(model.vocab) == len(model.classes) and set(tc) <= set(tv):  # logits named as tokens
            model = replace(model, vocab=tv, classes=tv)
    return model


def write_folder(path: str, cfg: dict, state: dict[str, np.ndarray], dtype=np.float32) -> None:
    """A folder that GPT2LMHeadModel.from_pretrained (and read_folder) reads: config.json and
    model.safetensors written with numpy (no torch)."""
    from depthcert.interop import checkpoint_files as cf

    os.makedirs(path, exist_ok=True)
    cf.write_safetensors(os.path.join(path, WEIGHT_FILES[0]), {k: np.asarray(v, dtype=dtype) for k, v in state.items()},
                         {"format": "pt"})
    with open(os.path.join(path, CONFIG_FILE), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")


__all__ = ["GPT2Config", "config_from_dict", "unknown_config_keys", "read_folder", "read_tl", "load_model",
           "model_from_gpt2", "model_from_pretrained", "model_from_config_and_state_dict", "write_folder"]
