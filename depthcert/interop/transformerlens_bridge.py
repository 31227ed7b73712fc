"""TransformerLens 4 TransformerBridge objects in: the exact Model of the Hugging Face model a bridge
wraps, decided as huggingface.model_from_pretrained decides that model (docs/trained-models.md,
"TransformerLens 4 bridges").

TransformerLens 4.x removed HookedTransformer; its TransformerBridge (`TransformerBridge.boot_transformers`)
wraps a transformers PreTrainedModel, `bridge.original_model`, and by default keeps its weights as they
are: the bridge's forward computes the Hugging Face model's function (TransformerLens re-implements
the attention of GPT-2 and GPT-NeoX from split Q/K/V weights, and calls the Hugging Face modules for
everything else).  So a bridge is read as the model it wraps:

    config   bridge.original_model.config (the config the Hugging Face modules use)
    weights  every parameter and persistent buffer of the Hugging Face module tree, under transformers'
             own names: booting replaces each module by a bridge component holding the original as
             `_original_component`, so the tree is walked through those; the bridge's aliases of the
             same tensors (ln1, attn.q / k / v / o, mlp.in / out, ...) are not read twice

and handed to huggingface.model_from_pretrained (the same reading as a live PreTrainedModel and its
save_pretrained folder: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM,
GPTNeoXForCausalLM).

Refused in one line (BadInput), because the bridge then computes something the wrapped model's config
and weights do not say:

  * weights processed by `enable_compatibility_mode()` / `process_weights()` (fold_ln,
    center_writing_weights, center_unembed, fold_value_biases: TransformerLens's defaults there): the
    weights are rewritten in float32 and the logits shifted (`enable_compatibility_mode(no_processing=True)`
    changes no weight and is read);
  * hooks attached to the bridge or the model it wraps (`add_hook`, a torch forward hook) other than
    the bridge's own capture hooks and transformers' output recorders: a hook may change any
    activation; `bridge.reset_hooks()` removes TransformerLens's;
  * Q/K/V weights of a fused-QKV attention (GPT-2's c_attn, GPT-NeoX's query_key_value) that differ
    from a fresh split of the fused weight: the bridge's attention reads its split copies (GPT-NeoX's
    are copies, made at boot), so editing either one after boot makes the two disagree;
  * a non-zero `lm_head.bias`: the bridge gives a bias-free unembedding a zero bias buffer (b_U), read
    as without effect while it is exactly zero;
  * a parameter the bridge holds outside the Hugging Face tree;
  * a bridge config (n_heads, d_head, n_key_value_heads, scale_attn_by_inverse_layer_idx) that differs
    from the wrapped model's config (hf_config_overrides with hf_model=...): the re-implemented attention
    reads the bridge's config;
  * GPT-2 with scale_attn_weights false: TransformerLens 4.3's GPT-2 attention
    (JointQKVAttentionBridge._reconstruct_attention) scales the scores by 1/sqrt(d_head) whatever the
    config says, so the bridge does not compute the Hugging Face model;
  * any wrapped class other than the five above, bridges without a local torch module (vLLM,
    Inspect drivers), and bridges of a TransformerLens other than 4.x (3.9's TransformerBridge lays
    out the unembedding bias differently and is not tested here; its HookedTransformer is read by
    transformerlens.model_from_hooked_transformer).

Like a live PreTrainedModel, the model is the eval-mode function (dropout is without effect).
"""
from __future__ import annotations

from depthcert.checkers.errors import BadInput

SUPPORTED = ("GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "GPTNeoXForCausalLM")


def _named(obj, name: str) -> bool:
    return any(c.__name__ == name for c in type(obj).__mro__)


def is_bridge(obj) -> bool:
    """A TransformerLens 4 bridge (TransformerBridge, or its framework-agnostic parent BridgeCore)."""
    return _named(obj, "TransformerBridge") or _named(obj, "BridgeCore")


def _version() -> str:
    """The installed transformer-lens release ("" when the package has no metadata)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("transformer-lens")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _wrapped(bridge):
    """The wrapped Hugging Face model of a torch-backed bridge; BadInput for the rest."""
    version = _version()
    if not version.split(".")[0].isdigit() or int(version.split(".")[0]) != 4:
        raise BadInput(f"a TransformerBridge of transformer-lens {version or '(version unknown)'} is not supported: "
                       "bridges are read as TransformerLens 4.x builds them (for 3.9, a HookedTransformer: "
                       "transformerlens.model_from_hooked_transformer)")
    try:
        model = bridge.original_model
    except AttributeError:
        model = None
    if model is None or not callable(getattr(model, "named_modules", None)):
        raise BadInput(f"a {type(bridge).__name__} without a local torch module (a vLLM or Inspect driver) "
                       "cannot be read: boot it with TransformerBridge.boot_transformers")
    name = type(model).__name__
    if name not in SUPPORTED:
        adapter = type(getattr(bridge, "adapter", None)).__name__
        raise BadInput(f"a TransformerBridge of {name} ({adapter}) is not supported: only {', '.join(SUPPORTED)}")
    return model


def _recorder(fn) -> bool:
    """transformers' output-capturing hook (installed at a model's first forward; it appends outputs to
    a collector when output_attentions / output_hidden_states ask for them and returns None)."""
    return getattr(fn, "__module__", None) == "transformers.utils.output_capturing" and \
        getattr(fn, "__name__", None) == "output_capturing_hook"


def _hooks(bridge, model) -> list[str]:
    """The names of the modules (of the bridge and of the wrapped model) with forward hooks attached,
    other than the bridge's own capture hooks (installed by its blocks at the first forward and kept in
    their `_capture_hook_handles`: they pass activations through hook_mlp_in and hook_attn_out, which
    change nothing while those hook points have no hook) and transformers' output recorders."""
    mods = {}
    for root in (bridge, model):
        for name, mod in root.named_modules():
            mods.setdefault(id(mod), (name or type(mod).__name__, mod))
    own = {h.id for _, mod in mods.values() for h in getattr(mod, "_capture_hook_handles", None) or ()}
    return [name for name, mod in mods.values()
            if any(k not in own and not _recorder(f) for k, f in (*mod._forward_hooks.items(),
                                                                  *mod._forward_pre_hooks.items()))]


def hf_state_dict(bridge) -> dict:
    """The wrapped model's parameters and persistent buffers under transformers' own names (the tensors
    themselves), walking each bridge component through its `_original_component`; the bridge's zero
    `lm_head.bias` buffer left out (module docstring).  BadInput for what cannot be accounted for."""
    model = _wrapped(bridge)
    out: dict = {}
    own: list[str] = []
    lm_bias: list = []

    def walk(mod, path: str) -> None:
        if _named(mod, "GeneralizedComponent"):
            own.extend(path + n for n, p in mod._parameters.items() if p is not None)
            inner = mod._modules.get("_original_component")
            if inner is not None:
                walk(inner, path)
            return
        for n, p in mod._parameters.items():
            if p is not None:
                out.setdefault(path + n, p)
        for n, b in mod._buffers.items():
            if b is None or n in mod._non_persistent_buffers_set:
                continue
            if path + n == "lm_head.bias" and "weight" in mod._parameters:  # the bridge's synthetic b_U
                lm_bias.append(b)
                continue
            out.setdefault(path + n, b)
        for n, child in mod._modules.items():
            if child is not None:
                walk(child, path + n + ".")

    walk(model, "")
    if own:
        raise BadInput(f"the TransformerBridge holds parameter{'s' if len(own) != 1 else ''} of its own outside the "
                       f"Hugging Face model ({', '.join(own[:3])}{', ...' if len(own) > 3 else ''}): not read")
    if lm_bias and bool((lm_bias[0].detach() != 0).any()):
        raise BadInput("the TransformerBridge's lm_head.bias (b_U, a zero buffer it adds to a bias-free unembedding) "
                       "is not zero: the Hugging Face model has no such bias")
    return out


def _check_split_qkv(bridge) -> None:
    """Every fused-QKV attention's split Q/K/V weights equal a fresh split of the fused weight."""
    import torch

    for name, mod in bridge.named_modules():
        split = getattr(mod, "split_qkv_matrix", None)
        inner = getattr(mod, "original_component", None)
        if not callable(split) or inner is None or not all(hasattr(mod, s) for s in "qkv"):
            continue
        with torch.no_grad():
            fresh = split(inner)
        for s, lin in zip("qkv", fresh):
            held = getattr(mod, s).original_component
            for attr in ("weight", "bias"):
                a, b = getattr(held, attr, None), getattr(lin, attr, None)
                if (a is None) != (b is None) or a is not None and (a.shape != b.shape or not torch.equal(a, b)):
                    raise BadInput(f"the TransformerBridge's {name}.{s}.{attr} differs from its split of the Hugging "
                                   "Face fused QKV weight (one was changed after boot); boot the bridge again")


def _check_config(bridge, cfg: dict) -> None:
    """The bridge config fields its own attention reads equal the wrapped model's config."""
    mt = cfg.get("model_type")
    if mt == "gpt2":
        heads, dm = cfg.get("n_head"), cfg.get("n_embd")
        want = {"n_heads": heads, "d_head": dm // heads if isinstance(dm, int) and isinstance(heads, int) and heads else None,
                "scale_attn_by_inverse_layer_idx": bool(cfg.get("scale_attn_by_inverse_layer_idx", False))}
        if cfg.get("scale_attn_weights", True) is False:
            raise BadInput("a TransformerBridge of a GPT-2 with scale_attn_weights=false is refused: TransformerLens 4's "
                           "GPT-2 attention scales the scores by 1/sqrt(d_head) anyway, so it does not compute that model")
    else:
        heads, dm = cfg.get("num_attention_heads"), cfg.get("hidden_size")
        dh = cfg.get("head_dim") or (dm // heads if isinstance(dm, int) and isinstance(heads, int) and heads else None)
        want = {"n_heads": heads, "d_head": dh}
        if mt != "gpt_neox":
            want["n_key_value_heads"] = cfg.get("num_key_value_heads") or heads
    bcfg = getattr(bridge, "cfg", None)
    for key, value in want.items():
        have = getattr(bcfg, key, None)
        if key == "n_key_value_heads" and have is None:
            have = getattr(bcfg, "n_heads", None)
        if key == "scale_attn_by_inverse_layer_idx":
            have = bool(have)
        if have != value:
            raise BadInput(f"the TransformerBridge's config has {key}={have!r} where the Hugging Face model it wraps has "
                           f"{value!r} (hf_config_overrides?): its attention would not compute that model")


class _Unwrapped:
    """What huggingface.model_from_pretrained reads of a PreTrainedModel: its config and state dict."""

    def __init__(self, config, state: dict):
        self.config = config
        self._state = state

    def state_dict(self) -> dict:
        return dict(self._state)


def unwrap(bridge) -> _Unwrapped:
    """The wrapped model's (config, state dict) as an object model_from_pretrained reads; every check of
    the module docstring applied first."""
    if not is_bridge(bridge):
        raise BadInput(f"expected a TransformerLens 4 TransformerBridge, got {type(bridge).__name__}")
    model = _wrapped(bridge)
    if getattr(bridge, "_weights_processed", False):
        raise BadInput("a TransformerBridge with processed weights (enable_compatibility_mode / process_weights: "
                       "fold_ln, center_writing_weights, center_unembed, fold_value_biases) is refused: they rewrite the "
                       "weights, rounded to floats, and shift the logits; boot it again, or use "
                       "enable_compatibility_mode(no_processing=True)")
    hooked = _hooks(bridge, model)
    if hooked:
        raise BadInput(f"the TransformerBridge has hooks attached ({len(hooked)} module{'s' if len(hooked) != 1 else ''}, "
                       f"e.g. {hooked[0]}): they may change what it computes; remove them with bridge.reset_hooks()")
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(config, "to_dict", None)):
        raise BadInput(f"the TransformerBridge's {type(model).__name__} has no transformers config")
    state = hf_state_dict(bridge)
    _check_split_qkv(bridge)
    _check_config(bridge, config.to_dict())
    return _Unwrapped(config, state)


def model_from_bridge(bridge, task=None, vocab=None, classes=None, strict_config: bool = False,
                      every_position: bool | None = None):
    """The exact Model of a TransformerLens 4 TransformerBridge: huggingface.model_from_pretrained of the
    Hugging Face model it wraps (same arguments, same naming by the task); BadInput, one line, for what
    the module docstring refuses."""
    from depthcert.interop.huggingface import model_from_pretrained

    return model_from_pretrained(unwrap(bridge), task, vocab, classes, strict_config=strict_config,
                                 every_position=every_position)


__all__ = ["SUPPORTED", "is_bridge", "hf_state_dict", "unwrap", "model_from_bridge"]
