"""TransformerLens 4 TransformerBridge objects through the live-object API
(huggingface.model_from_pretrained, depthcert/interop/transformerlens_bridge.py).

Every model here is a tiny random Hugging Face model (GPT-2, Llama with grouped-query heads, Qwen2,
Mistral, GPT-NeoX with partial rotary and parallel attention and MLP) written with save_pretrained
beside a word-level tokenizer made here, so TransformerBridge.boot_transformers boots it offline.
What is checked:

  * the bridge decides as the model it wraps: the exact Model of the bridge equals the Model of the
    live PreTrainedModel and of its save_pretrained folder (what verify-model reads);
  * the bridge's own float64 forward (boot_transformers(dtype=torch.float64); TransformerLens's
    attention for GPT-2 and GPT-NeoX, the Hugging Face modules for the rest, transformers' rotary table
    in float32) lies inside the certified enclosures on every input of max-of-k (vocabulary 4, 3
    positions, 64 inputs): each input's float64-interval margin enclosure holds the bridge's
    best-minus-second logit and arb's enclosure of each logit holds the bridge's logit, up to 1e-12
    relative for GPT-2 and 1e-5 for the rest (transformers' float32 rotary table and the Llama family's
    float32 RMSNorm); and the bridge's argmax agrees with the certified verdict on every input;
  * what the bridge changes and cannot be accounted for is refused in one line (module docstring of
    transformerlens_bridge), each refusal next to a run showing that the bridge then computes
    something else.

Skipped (with the reason) without TransformerLens 4 (the main job installs 3.9.0, whose
HookedTransformer tests are tests/test_trained_*.py); .ci/run's "tl4" job runs this file.
"""
from __future__ import annotations

import importlib.metadata
import warnings
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("transformer_lens")
_TL = importlib.metadata.version("transformer-lens")
if int(_TL.split(".")[0]) < 4:
    pytest.skip(f"transformer-lens {_TL} installed; TransformerBridge is tested with 4.x (.ci/run's tl4 job)",
                allow_module_level=True)
from transformer_lens.model_bridge import TransformerBridge  # noqa: E402

from depthcert.checkers.accuracy import decide_all  # noqa: E402
from depthcert.checkers.errors import BadInput  # noqa: E402
from depthcert.checkers.tasks import make_task  # noqa: E402
from depthcert.interop import huggingface as hf  # noqa: E402
from depthcert.interop import transformerlens_bridge as tlb  # noqa: E402

VOCAB, K = 4, 3
TASK = make_task("max-of-k", vocab=VOCAB, k=K)
OPTS = {"max_precision": 256}


def _tokenizer():
    """A word-level tokenizer for the tokens "0" .. "VOCAB-1" (boot_transformers loads one from the folder)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({str(i): i for i in range(VOCAB)}, unk_token="0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="0", bos_token="0", eos_token="0",
                                                pad_token="0")


def _hf_model(family: str, seed: int, **change):
    """A tiny float32 ForCausalLM with seeded standard-normal weights."""
    T = transformers
    if family == "gpt2":
        cfg = T.GPT2Config(**{**dict(vocab_size=VOCAB, n_positions=K, n_embd=8, n_layer=2, n_head=2,
                                     activation_function="gelu_new", tie_word_embeddings=False), **change})
        model = T.GPT2LMHeadModel(cfg)
    elif family == "llama":
        cfg = T.LlamaConfig(**{**dict(vocab_size=VOCAB, max_position_embeddings=K, hidden_size=8, intermediate_size=16,
                                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                      rms_norm_eps=1e-5, hidden_act="silu"), **change})
        model = T.LlamaForCausalLM(cfg)
    elif family in ("qwen2", "mistral"):  # Llama's mathematics; Qwen2 with q/k/v biases
        Config, Model = ((T.Qwen2Config, T.Qwen2ForCausalLM) if family == "qwen2" else
                         (T.MistralConfig, T.MistralForCausalLM))
        cfg = Config(**{**dict(vocab_size=VOCAB, max_position_embeddings=K, hidden_size=8, intermediate_size=16,
                               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-5,
                               hidden_act="silu"), **change})
        model = Model(cfg)
    elif family == "gpt_neox":
        cfg = T.GPTNeoXConfig(**{**dict(vocab_size=VOCAB, max_position_embeddings=K, hidden_size=8, intermediate_size=16,
                                        num_hidden_layers=2, num_attention_heads=2, hidden_act="gelu",
                                        use_parallel_residual=True, tie_word_embeddings=False,
                                        rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                                         "rope_type": "default"}), **change})
        model = T.GPTNeoXForCausalLM(cfg)
    else:
        raise ValueError(family)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
    return model.eval()


def _folder(tmp_path, family: str, seed: int, **change) -> str:
    folder = tmp_path / f"{family}-{seed}"
    _hf_model(family, seed, **change).save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    return str(folder)


def _boot(folder: str, dtype=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerBridge.boot_transformers(folder, device="cpu", **({} if dtype is None else {"dtype": dtype}))


def _ids() -> np.ndarray:
    return TASK.decode(np.arange(TASK.size))[0]


def _bridge_logits(bridge) -> np.ndarray:
    with torch.no_grad():
        return bridge(torch.tensor(_ids())).double().numpy()[:, -1]


def _hf_logits(folder: str, **kw) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kw).eval()
    with torch.no_grad():
        return model(torch.tensor(_ids())).logits.double().numpy()[:, -1]


FAMILIES = [("gpt2", {}), ("llama", {}), ("gpt_neox", {}), ("gpt_neox", {"use_parallel_residual": False}),
            ("gpt2", {"scale_attn_by_inverse_layer_idx": True, "tie_word_embeddings": True}), ("qwen2", {}),
            ("mistral", {})]
IDS = ["gpt2", "llama-gqa", "neox-parallel", "neox-sequential", "gpt2-inverse-layer-tied", "qwen2", "mistral"]
# how far the float64 bridge may be from the real function: GPT-2's bridge computes everything in float64
# (measured: 6e-16 relative); the others use transformers' rotary table, computed in float32 even in a
# float64 model, and the Llama family's RMSNorm in float32 (measured: at most 7e-7 for Llama, Qwen2 and
# Mistral, 5e-8 for GPT-NeoX)
REL = {"gpt2": 1e-12, "llama": 1e-5, "qwen2": 1e-5, "mistral": 1e-5, "gpt_neox": 1e-5}


@pytest.mark.parametrize("family,change", FAMILIES, ids=IDS)
def test_a_bridge_decides_as_the_model_it_wraps_and_its_float64_forward_lies_in_the_enclosures(
        tmp_path, family, change):
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.softmax_intervals import IntervalForward
    from depthcert.cli.verify_model import load_any_model

    folder = _folder(tmp_path, family, 7 + FAMILIES.index((family, change)), **change)
    bridge = _boot(folder)
    assert type(bridge.original_model).__name__ in tlb.SUPPORTED
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unknown-config-key warning: booting adds only known keys
        exact = hf.model_from_pretrained(bridge, TASK)
    # the same exact model as the live PreTrainedModel and as verify-model's reading of the folder
    live = hf.model_from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(folder), TASK)
    assert replace(exact, name="x") == replace(live, name="x") == replace(load_any_model(folder, None, TASK), name="x")
    assert replace(tlb.model_from_bridge(bridge, TASK), name="x") == replace(exact, name="x")

    v = decide_all(exact, TASK, **OPTS)
    assert len(v.undecided) == 0 and v.correct + len(v.wrong) == TASK.size == 64

    # the bridge's own forward, in float64 (its weights: the same float32 numbers)
    b64 = _boot(folder, torch.float64)
    ref = _bridge_logits(b64)
    assert np.abs(ref - _bridge_logits(bridge)).max() < 1e-3  # the float32 bridge: the same function
    ids = _ids()
    labels = TASK.decode(np.arange(TASK.size))[1]
    # its argmax agrees with the certified verdict on every input (a strict maximum at the label)
    srt = np.sort(ref, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    slack = REL[family] * (1 + np.abs(ref).max())
    assert (gap > slack).all(), "a near-tie in the float forward: pick another seed"
    float_correct = ref.argmax(axis=1) == labels
    certified_correct = np.ones(TASK.size, dtype=bool)
    certified_correct[v.wrong] = False
    assert (float_correct == certified_correct).all()
    assert 0 < v.correct < TASK.size  # random weights: some inputs right, some wrong
    if v.correct:
        assert float(v.margin[0]) - slack <= gap[float_correct].min() <= float(v.margin[1]) + slack

    # every input's float64-interval margin enclosure holds the bridge's best-minus-second logit ...
    dec = SoftmaxDecider(exact)
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    lab = np.full(ids.shape, -1)
    lab[:, -1] = ref.argmax(axis=1)
    status, lo, hi, _ = IntervalForward(exact, dec.first).decide(H, den, lab)
    ok = status == 1
    assert ok.all()
    assert ((lo <= gap + slack) & (gap <= hi + slack)).all()
    # ... and arb's enclosure of every logit of every input holds the bridge's logit
    for i in range(len(ids)):
        d = dec.decide(H[i], den, [(ids.shape[1] - 1, int(lab[i, -1]))], logits=True)
        assert len(d.logits) == VOCAB
        for c, (a, b) in enumerate(d.logits):
            assert float(a) - slack <= ref[i, c] <= float(b) + slack, (i, c, float(a), ref[i, c], float(b))


def test_a_bridge_in_compatibility_mode_without_processing_is_read_and_one_with_processing_is_refused(tmp_path):
    folder = _folder(tmp_path, "gpt_neox", 3)
    plain = hf.model_from_pretrained(_boot(folder), TASK)
    compat = _boot(folder)
    compat.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    assert hf.model_from_pretrained(compat, TASK) == plain
    processed = _boot(folder)
    before = _bridge_logits(processed)
    processed.enable_compatibility_mode(disable_warnings=True)  # TransformerLens's defaults: fold_ln, centring
    after = _bridge_logits(processed)
    assert np.abs(after - before).max() > 1e-3  # the logits move (centred unembedding) ...
    assert (after.argmax(axis=1) == before.argmax(axis=1)).all()  # ... though not their order
    with pytest.raises(BadInput, match=r"^a TransformerBridge with processed weights .*fold_ln") as exc:
        hf.model_from_pretrained(processed, TASK)
    assert "\n" not in str(exc.value)


def test_a_bridge_with_hooks_attached_is_refused_until_they_are_removed(tmp_path):
    folder = _folder(tmp_path, "llama", 4)
    bridge = _boot(folder)
    plain = hf.model_from_pretrained(bridge, TASK)
    before = _bridge_logits(bridge)
    bridge.add_hook("blocks.0.hook_resid_pre", lambda t, hook: 2 * t)
    assert np.abs(_bridge_logits(bridge) - before).max() > 1e-3  # the hook changes what it computes
    with pytest.raises(BadInput, match=r"^the TransformerBridge has hooks attached \(\d+ modules?, e\.g\. .*reset_hooks"):
        hf.model_from_pretrained(bridge, TASK)
    bridge.reset_hooks()
    assert hf.model_from_pretrained(bridge, TASK) == plain


def test_a_gpt2_bridge_without_attention_scaling_is_refused_because_it_scales_anyway(tmp_path):
    folder = _folder(tmp_path, "gpt2", 5, scale_attn_weights=False)
    bridge = _boot(folder, torch.float64)
    # what TransformerLens 4 computes is not the Hugging Face model
    assert np.abs(_bridge_logits(bridge) - _hf_logits(folder, dtype=torch.float64)).max() > 1e-3
    with pytest.raises(BadInput, match=r"^a TransformerBridge of a GPT-2 with scale_attn_weights=false is refused"):
        hf.model_from_pretrained(bridge, TASK)
    # the Hugging Face model itself is read (the folder and the live object)
    assert hf.model_from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(folder), TASK) is not None


def test_split_qkv_weights_changed_after_boot_are_refused(tmp_path):
    folder = _folder(tmp_path, "gpt_neox", 6)
    bridge = _boot(folder)
    before = _bridge_logits(bridge)
    attn = bridge.blocks[0].attn
    with torch.no_grad():
        attn.q.original_component.weight.mul_(3.0)  # the bridge's copy; query_key_value keeps its numbers
    assert np.abs(_bridge_logits(bridge) - before).max() > 1e-3
    with pytest.raises(BadInput, match=r"^the TransformerBridge's .*\.q\.weight differs from its split"):
        hf.model_from_pretrained(bridge, TASK)


def test_a_nonzero_unembedding_bias_and_a_changed_bridge_config_are_refused(tmp_path):
    folder = _folder(tmp_path, "gpt2", 8)
    bridge = _boot(folder)
    before = _bridge_logits(bridge)
    lm_head = bridge.original_model.lm_head.original_component
    assert "bias" in lm_head._buffers and not lm_head.bias.any()  # the bridge's zero b_U
    with torch.no_grad():
        lm_head.bias[1] = 0.5
    assert np.abs(_bridge_logits(bridge) - before).max() == pytest.approx(0.5)
    with pytest.raises(BadInput, match=r"^the TransformerBridge's lm_head\.bias .* is not zero"):
        hf.model_from_pretrained(bridge, TASK)
    other = _boot(folder)
    other.cfg.scale_attn_by_inverse_layer_idx = True  # its attention reads this; the GPT-2 config says false
    assert np.abs(_bridge_logits(other) - before).max() > 1e-3
    with pytest.raises(BadInput, match=r"^the TransformerBridge's config has scale_attn_by_inverse_layer_idx=True"):
        hf.model_from_pretrained(other, TASK)


def test_a_bridge_of_an_unsupported_kind_is_refused_in_one_line(tmp_path, capsys):
    cfg = transformers.OPTConfig(vocab_size=VOCAB, max_position_embeddings=K, hidden_size=8, ffn_dim=16,
                                 num_hidden_layers=1, num_attention_heads=2, word_embed_proj_dim=8)
    folder = tmp_path / "opt"
    transformers.OPTForCausalLM(cfg).save_pretrained(folder)
    _tokenizer().save_pretrained(folder)
    bridge = _boot(str(folder))
    with pytest.raises(BadInput) as exc:
        hf.model_from_pretrained(bridge, TASK)
    assert str(exc.value) == ("a TransformerBridge of OPTForCausalLM (OptArchitectureAdapter) is not supported: only "
                              "GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, GPTNeoXForCausalLM")
    with pytest.raises(BadInput, match=r"^expected a TransformerLens 4 TransformerBridge, got dict$"):
        tlb.model_from_bridge({})


def test_a_bridge_of_another_transformerlens_major_version_is_refused(tmp_path, monkeypatch):
    """TransformerLens 3.9's TransformerBridge gives the unembedding a bias Parameter (4.x: a zero buffer)
    and is not tested against its forward: refused by version, in one line."""
    bridge = _boot(_folder(tmp_path, "gpt2", 9))
    assert hf.model_from_pretrained(bridge, TASK) is not None
    monkeypatch.setattr(tlb, "_version", lambda: "3.9.0")
    with pytest.raises(BadInput, match=r"^a TransformerBridge of transformer-lens 3\.9\.0 is not supported: .*"
                                       r"model_from_hooked_transformer\)$"):
        hf.model_from_pretrained(bridge, TASK)


def test_documented_example(tmp_path):
    """docs/trained-models.md's bridge example: the GPT-NeoX section's training block writes the folder
    (in a temporary folder), then the bridge block prints what its output block says."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "trained-models.md"), encoding="utf-8") as fh:
        page = fh.read()
    neox = page.split("## GPT-NeoX (Hugging Face) in")[1].split("\n## ")[0]
    ours = page.split("## TransformerLens 4 bridges (Python)")[1].split("\n## ")[0]
    train = neox.split("```python\n")[1].split("```")[0]
    api = ours.split("```python\n")[1].split("```")[0]
    marker = "<!-- test: tests/test_transformerlens_bridge.py::test_documented_example -->\n```\n"
    shown = ours.split(marker)[1].split("```")[0].rstrip("\n")
    for code in (train, api):
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") == shown, (r.stdout, r.stderr)
    assert len(shown.splitlines()) == 2 and shown.splitlines()[0].startswith("64 0 0 ")
