"""Hugging Face Llama-family folders (LlamaForCausalLM / Qwen2ForCausalLM save_pretrained) decided by
verify-model (depthcert/interop/huggingface_llama.py; rotary heads and gated MLPs: checkers/rotary.py),
checked three ways:

  * against an independent evaluator (tests/llama_oracle.py: Fractions and mpmath, written from
    transformers' modeling_llama.py, importing nothing of depthcert, reading config.json and the
    safetensors under transformers' names): every verdict and the minimum-margin enclosure of 330
    random tiny float64 checkpoints agree (30 in the default suite, 300 more marked slow; one in five
    is a Qwen2ForCausalLM, one in ten a MistralForCausalLM without a sliding window), among them planted near-ties of 1e-12 down to 1e-30, exact ties (never
    certified correct) and exact ties the balls cannot see (undecided, with the rotary reason);
  * against transformers itself: the certified enclosures (float64 intervals of every input's margin,
    arb balls of every logit on a spread of inputs) contain the live model's float64 logits, (a) to
    1e-11 relative when transformers' float32 parts (the rotary inv_freq/cos/sin table, RMSNorm and the
    eager attention's softmax, which it computes in float32 even after model.double()) are replaced by
    the same code in float64, and (b) to 1e-5 relative with transformers as it is (those float32
    parts: ~1e-7 relative differences, amplified by the layers);
  * partial rotary (the first r < head_dim coordinates rotated), a component the Llama reader refuses
    but the exact model has, against the oracle with the same r; config.json fields read, refused in
    one line (exit 2) or without effect; unknown keys warned, --strict-config refuses them; --compare-float's
    float64 forward is transformers' forward with its float32 parts in float64.

The tests that build models with transformers skip (with the reason) where it is not importable.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import replace
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from depthcert.checkers.accuracy import decide_all
from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import make_task
from depthcert.interop import huggingface as hf
from depthcert.interop import huggingface_llama as hl
from depthcert.interop.checkpoint_files import read_safetensors

sys.path.insert(0, os.path.dirname(__file__))
from llama_oracle import TIE, LlamaOracle  # noqa: E402

KINDS = ("plain", "near", "tiny", "tie", "eps", "plain", "hidden")
ACTS = ("silu", "silu", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast")
OPTS = {"max_precision": 256}  # 1e-30 gaps separate at 128 bits; the hidden ties stop at the cap sooner


def _transformers():
    """(torch, transformers) or a skip saying why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
            import transformers
    except ImportError as exc:
        pytest.skip(f"transformers is not importable here ({exc}); it comes with the interop extra")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return torch, transformers


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main

    code = run_main(_main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def random_llama(rng, vocab: int = 2, n_pos: int = 2, kind: str = "plain", family: str = "llama", **change):
    """A live float64 LlamaForCausalLM / Qwen2ForCausalLM (eval mode, eager attention) with random
    weights and one of the hard cases in logits 0 and 1: near (lm rows differ by 1e-12 .. 2^-60 times
    a random vector), tiny (in one coordinate only, by 1e-20 .. 1e-30), tie (equal rows), eps
    (embeddings 1e-4 small, rms_norm_eps up to 100), hidden (the rows differ only in two stream
    coordinates that are equal for every input: a tie the balls carry as two equal balls, undecided)."""
    torch, transformers = _transformers()
    heads = int(rng.choice([1, 2, 4]))
    kv = int(rng.choice([h for h in (1, 2, 4) if heads % h == 0]))
    cfg = dict(vocab_size=vocab, hidden_size=8, intermediate_size=int(rng.choice([3, 6])),
               num_hidden_layers=int(rng.choice([1, 1, 2])), num_attention_heads=heads, num_key_value_heads=kv,
               max_position_embeddings=n_pos, hidden_act=str(rng.choice(ACTS)),
               rms_norm_eps=float(rng.choice([1e-6, 1e-3, 0.25, 7.0])), tie_word_embeddings=bool(rng.integers(2)),
               rope_parameters={"rope_theta": float(rng.choice([10000.0, 500000.0, 3.7, 1.5, 123.25])),
                                "rope_type": "default"},
               attn_implementation="eager", bos_token_id=0, eos_token_id=0)
    if family in ("llama", "mistral"):
        cfg["head_dim"] = int(rng.choice([2, 4, 6])) if heads > 1 else 8
    if family == "llama":
        cfg["attention_bias"] = bool(rng.integers(3) == 0)
        cfg["mlp_bias"] = bool(rng.integers(3) == 0)
    cfg.update(change)
    if family == "mistral":
        cfg["sliding_window"] = None
    C = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
         "mistral": transformers.MistralConfig}[family]
    model = transformers.AutoModelForCausalLM.from_config(C(**cfg)).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            a = rng.standard_normal(tuple(p.shape)) * 0.7 + (1.0 if name.endswith("norm.weight") else 0.0)
            if rng.integers(3) == 0:
                a = a.astype(np.float32).astype(np.float64)
            p.copy_(torch.from_numpy(a))
        W = model.lm_head.weight  # embed_tokens when tied
        if kind == "near":
            W[1] = W[0] + float(rng.choice([1e-12, 1e-14, 2.0 ** -60])) * torch.randn(W.shape[1], dtype=W.dtype)
        elif kind == "tiny":
            W[1] = W[0]
            j = int(rng.integers(W.shape[1]))
            W[0, j] = 0.0
            W[1, j] = float(rng.choice([1e-20, -1e-25, 1e-30]))
        elif kind == "tie":
            W[1] = W[0]
        elif kind == "eps":
            model.model.embed_tokens.weight.mul_(1e-4)
            eps = float(rng.choice([1e-6, 1.0, 100.0]))
            model.config.rms_norm_eps = eps
            for mod in model.modules():
                if hasattr(mod, "variance_epsilon"):
                    mod.variance_epsilon = eps
        elif kind == "hidden":  # stream coordinates 0 and 1 equal at every input: equal embedding columns,
            # o_proj and down_proj rows and final-norm gains; lm rows 0 and 1 differ by t (e_0 - e_1)
            model.config.tie_word_embeddings = False
            E = model.model.embed_tokens.weight
            E[:, 1] = E[:, 0]
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight[1] = layer.self_attn.o_proj.weight[0]
                layer.mlp.down_proj.weight[1] = layer.mlp.down_proj.weight[0]
                for b in (layer.self_attn.o_proj.bias, layer.mlp.down_proj.bias):
                    if b is not None:
                        b[1] = b[0]
            model.model.norm.weight[1] = model.model.norm.weight[0]
            if model.lm_head.weight is E:
                pytest.skip("a tied lm_head cannot carry the hidden tie")
            W[0] = torch.round(W[0] * 1024) / 1024  # so that +- 0.5 is exact
            W[1] = W[0]
            W[1, 0] += 0.5
            W[1, 1] -= 0.5
    return model


def _patched_float64(monkeypatch, torch):
    """transformers' float32 parts (rotary inv_freq / cos / sin, RMSNorm, the eager attention's softmax) in
    float64, the same code."""
    from transformers.models.llama import modeling_llama as ml
    from transformers.models.mistral import modeling_mistral as mm
    from transformers.models.qwen2 import modeling_qwen2 as mq

    def rope(self, x, position_ids):
        cfg = self.config
        base = cfg.rope_parameters["rope_theta"]
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        emb = torch.cat([position_ids[..., None].double() * inv] * 2, dim=-1)
        return emb.cos(), emb.sin()

    def rms(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        k, v = ml.repeat_kv(key, module.num_key_value_groups), ml.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, k.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1, dtype=query.dtype)
        return torch.matmul(w, v).transpose(1, 2).contiguous(), w

    for mod, prefix in ((ml, "Llama"), (mq, "Qwen2"), (mm, "Mistral")):
        monkeypatch.setattr(getattr(mod, prefix + "RotaryEmbedding"), "forward", rope)
        monkeypatch.setattr(getattr(mod, prefix + "RMSNorm"), "forward", rms)
        monkeypatch.setattr(mod, "eager_attention_forward", eager)


def oracle_of(folder, rotary_dim=None) -> LlamaOracle:
    """tests/llama_oracle.py's evaluator of a save_pretrained folder (its config.json and safetensors)."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    return LlamaOracle(cfg, read_safetensors(os.path.join(folder, "model.safetensors"))[0], rotary_dim)


def compare(ours, oracle, task) -> tuple[int, int, int]:
    """Every point's verdict and the minimum-margin enclosure of `ours` against the oracle."""
    v = decide_all(ours, task, **OPTS)
    wrong, undecided = {int(i) for i in v.wrong}, {int(i) for i in v.undecided}
    least = None
    for i in range(task.size):
        pt = task.point(i)
        m = oracle.margin([int(t) for t in pt.tokens], int(pt.label))
        where = f"point {i} {pt.tokens} (oracle margin {mpmath.nstr(m, 5)})"
        if abs(m) <= TIE:  # an exact tie (to the oracle's 1e-40): never certified correct
            assert i in wrong or i in undecided, "a tie certified correct: " + where
        elif m > 0:
            assert i not in wrong and i not in undecided, "a correct point not certified correct: " + where
            least = m if least is None else min(least, m)
        else:
            assert i in wrong, "a wrong point not certified wrong: " + where
    assert v.correct + len(wrong) + len(undecided) == task.size
    if least is not None and v.margin is not None:
        lo, hi = (mpmath.mpf(x.numerator) / x.denominator for x in v.margin)
        assert lo - TIE <= least <= hi + TIE, f"min margin {least} outside [{lo}, {hi}]"
    return v.correct, len(wrong), len(undecided)


def check_against_oracle(model, folder, task) -> tuple[int, int, int]:
    model.save_pretrained(folder)
    return compare(hf.load_model(str(folder)), oracle_of(folder), task)


def _many(n: int, seed: int, tmp_path) -> np.ndarray:
    rng = np.random.default_rng(seed)
    totals = np.zeros(3, dtype=int)
    for i in range(n):
        vocab, n_pos = (3, 3) if i % 10 == 9 else (2, 2)
        family = "qwen2" if i % 5 == 4 else "mistral" if i % 10 == 7 else "llama"
        kind = KINDS[i % len(KINDS)]
        model = random_llama(rng, vocab, n_pos, kind, family, **({"tie_word_embeddings": False} if kind == "hidden"
                                                                 else {}))
        totals += check_against_oracle(model, tmp_path / f"m{i}", make_task("max-of-k", vocab=vocab, k=n_pos))
    return totals


def test_30_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(30, 43, tmp_path)
    assert correct > 20 and wrong > 20 and undecided > 0  # every verdict exercised


@pytest.mark.slow
def test_300_more_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(300, 4300, tmp_path)
    assert correct > 300 and wrong > 200 and undecided > 0


def test_ties_are_never_certified_correct_and_hidden_ones_are_undecided_with_the_reason(tmp_path, capsys):
    """Equal lm rows: logits 0 and 1 tie at every input, and the read-out's difference row is exactly 0:
    proven wrong.  The hidden tie (rows differing only in two stream coordinates that are equal at
    every input) is a tie no ball can prove: undecided at the precision cap, with the reason that the
    exact tie decision does not apply to rotary heads; never correct."""
    rng = np.random.default_rng(5)
    task = make_task("max-of-k", vocab=2, k=2)
    correct, wrong, undecided = check_against_oracle(random_llama(rng, kind="tie", tie_word_embeddings=False),
                                                     tmp_path / "tie", task)
    assert correct == 0 and wrong == task.size
    model = random_llama(rng, kind="hidden", tie_word_embeddings=False)
    model.save_pretrained(tmp_path / "hidden")
    code, out, err = _run([str(tmp_path / "hidden"), "--task", "max-of-k", "--vocab", "2", "--k", "2",
                           "--max-precision", "128", "--json"], capsys)
    d = json.loads(out)
    assert code in (1, 3) and d["correct"] + d["wrong"] + d["undecided_points"] == 4
    assert d["undecided_points"] >= 1 and d["correct"] <= 4 - d["undecided_points"]
    assert all("rotary positions" in u["limit"] for u in d["undecided_limits"])
    oracle = oracle_of(tmp_path / "hidden")
    for i in d["first_undecided"]:
        pt = task.point(i)
        assert abs(oracle.margin([int(t) for t in pt.tokens], int(pt.label))) <= TIE


@pytest.mark.parametrize("rotary_dim", [2, 4])
def test_partial_rotary_agrees_with_the_independent_evaluator(tmp_path, rotary_dim):
    """The exact model's partial rotary (the first r of head_dim = 6 coordinates of every head rotated,
    angles p theta^(-2i/r), the rest as they are) against the oracle with the same r, on random models."""
    rng = np.random.default_rng(20 + rotary_dim)
    task = make_task("max-of-k", vocab=3, k=3)
    totals = np.zeros(3, dtype=int)
    for i in range(4):
        model = random_llama(rng, 3, 3, KINDS[i], num_attention_heads=2, num_key_value_heads=1, head_dim=6)
        model.save_pretrained(tmp_path / f"p{i}")
        ours = hf.load_model(str(tmp_path / f"p{i}"))
        ours = replace(ours, layers=tuple(replace(L, heads=tuple(replace(h, rotary=replace(h.rotary, dim=rotary_dim))
                                                                  for h in L.heads)) for L in ours.layers))
        totals += compare(ours, oracle_of(tmp_path / f"p{i}", rotary_dim), task)
    assert totals[0] > 10 and totals[1] > 10


# ------------------------------------------------------------------ transformers' own float64 logits

LIVE = [dict(), dict(family="qwen2"), dict(family="mistral"), dict(hidden_act="gelu", num_key_value_heads=1),
        dict(num_hidden_layers=3, attention_bias=True, mlp_bias=True),
        dict(hidden_act="gelu_pytorch_tanh", rope_parameters={"rope_theta": 2.5, "rope_type": "default"})]


def _live_check(change, tmp_path, rel):
    torch, _ = _transformers()
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.softmax_intervals import IntervalForward

    change = dict(change)
    family = change.pop("family", "llama")
    base = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                rms_norm_eps=1e-6, tie_word_embeddings=False)
    model = random_llama(np.random.default_rng(11), 4, 3, "plain", family, **{**base, **change})
    model.save_pretrained(tmp_path / "live")
    task = make_task("max-of-k", vocab=4, k=3)
    ids = task.decode(np.arange(task.size))[0]
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits[:, -1].numpy()
    ours = hf.load_model(str(tmp_path / "live"))
    dec = SoftmaxDecider(ours)
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    labels = np.full(ids.shape, -1)
    labels[:, -1] = ref.argmax(axis=1)
    status, lo, hi, _ = IntervalForward(ours, dec.first).decide(H, den, labels)
    srt = np.sort(ref, axis=1)
    margin = srt[:, -1] - srt[:, -2]
    slack = rel * (1 + np.abs(ref).max())
    ok = status == 1
    assert ok.mean() > 0.9
    assert ((lo[ok] <= margin[ok] + slack) & (margin[ok] <= hi[ok] + slack)).all()
    for i in range(0, len(ids), 5):
        d = dec.decide(H[i], den, [(ids.shape[1] - 1, int(labels[i, -1]))], logits=True)
        for c, (a, b) in enumerate(d.logits):
            assert float(a) - slack <= ref[i, c] <= float(b) + slack, (i, c, float(a), ref[i, c], float(b))


@pytest.mark.parametrize("change", LIVE, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_certified_enclosures_contain_transformers_float64_logits_with_its_float32_parts_in_float64(
        change, tmp_path, monkeypatch):
    """What is compared: LlamaForCausalLM / Qwen2ForCausalLM(config).double().eval() (eager attention) with
    random float64 weights, whose rotary table (inv_freq, cos, sin), RMSNorm and attention softmax are
    replaced by the same code in float64 (transformers computes them in float32 even after .double()), on all 64 max-of-k
    inputs (vocab 4, length 3) at the last position: each input's float64-interval margin enclosure
    holds transformers' best-minus-second logit, and arb's enclosure of each logit (every 5th input)
    holds transformers' logit, up to 1e-11 relative (float64 rounding, and the float64 power theta^x)."""
    torch, _ = _transformers()
    _patched_float64(monkeypatch, torch)
    _live_check(change, tmp_path, 1e-11)


@pytest.mark.parametrize("change", LIVE[:2], ids=["llama", "qwen2"])
def test_certified_enclosures_contain_transformers_float64_logits_up_to_its_float32_table(change, tmp_path):
    """The same with transformers as it is: its float32 rotary table, RMSNorm and softmax move its logits
    by float32 roundings (about 1e-7 relative each, amplified by the layers); allowed: 1e-5 relative."""
    _live_check(change, tmp_path, 1e-5)


# ------------------------------------------------------------------ config.json

def test_every_llama_qwen2_mistral_config_field_is_read_or_without_effect():
    _, transformers = _transformers()
    for C in (transformers.LlamaConfig, transformers.Qwen2Config, transformers.MistralConfig):
        keys = set(C().to_dict())
        assert not keys - hl.READ_FIELDS - hl.NO_EFFECT, (C.__name__, sorted(keys - hl.READ_FIELDS - hl.NO_EFFECT))


def _config(**change) -> dict:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 2, "hidden_size": 4,
           "intermediate_size": 3, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
           "max_position_embeddings": 2, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": True,
           "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    cfg.update(change)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.mark.parametrize("change,needle", [
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0}), "rope_parameters key factor"),
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "yarn"}), "rope_type \"yarn\" is refused"),
    (dict(rope_parameters={"rope_type": "default"}), "sets no rope_theta"),
    (dict(rope_parameters=None), "no rope_theta"),
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "default", "partial_rotary_factor": 0.5}),
     "partial_rotary_factor 0.5 is refused"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_scaling"),
    (dict(rope_theta=500.0), "differs from rope_parameters.rope_theta"),
    (dict(hidden_act="relu"), "hidden_act \"relu\" is not supported"),
    (dict(num_key_value_heads=3), "not a multiple of num_key_value_heads"),
    (dict(sliding_window=1), "LlamaForCausalLM has none"),
    (dict(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=1), "sliding_window 1 is below"),
    (dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=True, sliding_window=1),
     "sliding_window 1 is below"),
    (dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], attention_bias=True), "attention_bias is not a"),
    (dict(architectures=["LlamaForSequenceClassification"]), "architectures [\"LlamaForSequenceClassification\"]"),
    (dict(rms_norm_eps=0), "rms_norm_eps must be a positive"),
    (dict(head_dim=3), "head_dim 3 is odd"),
])
def test_a_field_that_changes_the_model_is_refused_in_one_line(tmp_path, capsys, change, needle):
    folder = tmp_path / "f"
    write_folder(folder, _config(**change), np.random.default_rng(1))
    code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "2", "--k", "2"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def write_folder(folder, cfg: dict, rng) -> None:
    """A save_pretrained-shaped folder written with numpy (no torch), weights to the config's shapes."""
    try:
        c = hl.config_from_dict(cfg)
        shapes = hl.expected_shapes(c)
    except BadInput:  # a refused config: the weights of the plain one (the config is what is refused)
        shapes = hl.expected_shapes(hl.config_from_dict(_config()))
    hf.write_folder(str(folder), cfg, {k: rng.standard_normal(s) for k, s in shapes.items()})


def test_a_folder_written_with_numpy_is_read_and_mistral_without_a_biting_window_is_decided(tmp_path, capsys):
    rng = np.random.default_rng(2)
    for name, cfg in (("llama", _config()), ("mistral", _config(model_type="mistral", architectures=["MistralForCausalLM"],
                                                                sliding_window=4096))):
        write_folder(tmp_path / name, cfg, rng)
        code, out, err = _run([str(tmp_path / name), "--task", "max-of-k", "--vocab", "2", "--k", "2", "--json"], capsys)
        assert code in (0, 1) and err == "", err
        d = json.loads(out)
        assert d["correct"] + d["wrong"] == 4


def test_unknown_keys_are_named_in_one_warning_line_and_strict_config_refuses_them(tmp_path, capsys):
    write_folder(tmp_path / "u", _config(rope_thetta=5.0), np.random.default_rng(3))
    argv = [str(tmp_path / "u"), "--task", "max-of-k", "--vocab", "2", "--k", "2"]
    code, out, err = _run(argv, capsys)
    assert code in (0, 1) and err.count("\n") == 1 and "rope_thetta" in err and "Llama" in err, err
    code, out, err = _run(argv + ["--strict-config"], capsys)
    assert code == 2 and out == "" and "rope_thetta" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_compare_float_is_a_true_float64_forward(tmp_path, capsys, monkeypatch, family):
    """--compare-float's float64 forward of a Llama-family folder (huggingface_llama.LlamaFloatForward)
    computes everything in float64: its logits equal transformers' float64 logits to 1e-12 once
    transformers' float32 parts (rotary table, RMSNorm, softmax) are float64 too, and it agrees with
    every certified verdict."""
    torch, _ = _transformers()
    _patched_float64(monkeypatch, torch)
    model = random_llama(np.random.default_rng(12), 4, 3, "plain", family, num_hidden_layers=2,
                         tie_word_embeddings=False, num_attention_heads=4, num_key_value_heads=2)
    model.save_pretrained(tmp_path / "f")
    task = make_task("max-of-k", vocab=4, k=3)
    ids = task.decode(np.arange(task.size))[0]
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits[:, -1].numpy()
    sizes, sd = hl.read_float(str(tmp_path / "f"))
    got = hl.llama_forward(sizes, sd, np.float64).last_logits(ids)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    code, out, err = _run([str(tmp_path / "f"), "--task", "max-of-k", "--vocab", "4", "--k", "3", "--compare-float",
                           "--json"], capsys)
    d = json.loads(out)
    assert d["float_comparison"]["float64"]["disagreements"] == 0
    assert d["float_comparison"]["float64"]["correct"] == d["correct"] == int((ref.argmax(1) == ids.max(1)).sum())


def test_rope_theta_is_the_decimal_written():
    """config.json's text 0.1 is the rational 1/10 (not the float64 nearest it)."""
    import decimal

    exact = json.loads('{"rope_parameters": {"rope_theta": 0.1, "rope_type": "default"}}', parse_float=decimal.Decimal)
    c = hl.config_from_dict(_config(rope_parameters={"rope_theta": 0.1, "rope_type": "default"}), exact)
    assert c.theta == Fraction(1, 10)
    assert hl.config_from_dict(_config(rope_parameters={"rope_theta": 0.1, "rope_type": "default"})).theta == Fraction(0.1)


def test_the_exact_model_refuses_inconsistent_rotary_and_gated_heads():
    from depthcert.checkers.model import MLP, Head, Rotary

    WQ = np.array([[Fraction(1), Fraction(0)], [Fraction(0), Fraction(2)]], dtype=object)
    WK = np.array([[Fraction(0), Fraction(1)], [Fraction(3), Fraction(0)]], dtype=object)
    good = WK.T.dot(WQ)
    R = Rotary(WQ, WK, 2, Fraction(10000))
    Head(good, good, attention="softmax", rotary=R)
    with pytest.raises(BadInput, match="W_K\\^T W_Q"):
        Head(good + 1, good, attention="softmax", rotary=R)
    with pytest.raises(BadInput, match="softmax heads only"):
        Head(good, good, attention="relu", rotary=R)
    with pytest.raises(BadInput, match="even integer"):
        Rotary(WQ, WK, 1, Fraction(10000))
    with pytest.raises(BadInput, match="positive"):
        Rotary(WQ, WK, 2, Fraction(0))
    z = np.zeros((2, 2), dtype=int)
    with pytest.raises(BadInput, match="gated mlp's activation"):
        MLP(z, [0, 0], z, [0, 0], activation="relu", W_gate=z)


def _doc_section() -> str:
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "trained-models.md"),
              encoding="utf-8") as fh:
        return fh.read().split("## Llama (Hugging Face) in")[1].split("\n## ")[0]


def test_documented_example(tmp_path):
    """docs/trained-models.md's Llama example: the Python block run as written (in a temporary folder),
    then each `$ verify-model` line of the output block below it prints what the block says (times
    masked), with the exit code a trailing "(exit N)" line names."""
    import re
    import shlex
    import subprocess

    _transformers()
    section = _doc_section()
    code = section.split("```python\n")[1].split("```")[0]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    block = section.split("<!-- test: tests/test_huggingface_llama.py::test_documented_example -->\n```\n")[1]
    block = block.split("```")[0].splitlines()
    cmds = [(i, line[2:]) for i, line in enumerate(block) if line.startswith("$ ")]
    from cli_in_process import run_command

    assert len(cmds) == 1
    for n, (i, cmd) in enumerate(cmds):
        end = cmds[n + 1][0] if n + 1 < len(cmds) else len(block)
        expected = block[i + 1:end]
        want_code = 0
        if expected and re.fullmatch(r"\(exit \d+\)", expected[-1]):
            want_code, expected = int(expected[-1][6:-1]), expected[:-1]
        got_code, out, err = run_command(shlex.split(cmd), cwd=str(tmp_path))
        mask = lambda t: re.sub(r"\d+\.\d+ s", "<t> s", t)  # noqa: E731
        assert got_code == want_code, (cmd, got_code, err)
        shown = out if want_code == 0 else err
        assert mask(shown.rstrip("\n")) == mask("\n".join(expected)), f"`{cmd}` prints\n{shown}"
