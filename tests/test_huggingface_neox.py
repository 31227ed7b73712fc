"""Hugging Face GPT-NeoX folders (GPTNeoXForCausalLM save_pretrained) decided by verify-model
(depthcert/interop/huggingface_neox.py; the parallel residual: Layer.parallel in checkers/model.py and
the interval and ball stages), checked three ways:

  * against an independent evaluator (tests/neox_oracle.py: Fractions and mpmath, written from
    transformers' modeling_gpt_neox.py, importing nothing of depthcert, reading config.json and the
    safetensors under transformers' names): every verdict and the minimum-margin enclosure of 330
    random tiny float64 checkpoints agree (30 in the default suite, 300 more marked slow), with
    parallel and sequential residuals, partial rotary (r = 2 .. head_size), attention biases on and
    off, tied and untied heads, every hidden_act, among them planted near-ties of 1e-12 down to
    1e-30, exact ties (never certified correct) and exact ties the balls cannot see (undecided, with
    the reason);
  * against transformers itself: the certified enclosures (float64 intervals of every input's margin,
    arb balls of every logit on a spread of inputs) contain the live model's float64 logits, (a) to
    1e-11 relative when transformers' float32 parts (the rotary inv_freq/cos/sin table and the eager
    attention's softmax, which it computes in float32 even after model.double()) are replaced by the
    same code in float64, and (b) to 1e-5 relative with transformers as it is;
  * config.json fields read, refused in one line (exit 2) or without effect; unknown keys warned,
    --strict-config refuses them; --compare-float's float64 forward equals transformers' forward with
    its float32 parts in float64; a live PreTrainedModel (GPT-2, Llama, Qwen2, GPT-NeoX) and its
    save_pretrained folder give the same exact model (huggingface.model_from_pretrained).

The tests that build models with transformers skip (with the reason) where it is not importable.
"""
from __future__ import annotations

import json
import os
import re
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
from depthcert.interop import huggingface_neox as hn
from depthcert.interop.checkpoint_files import read_safetensors

sys.path.insert(0, os.path.dirname(__file__))
from neox_oracle import TIE, NeoXOracle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HALF = {"rope_theta": 10000.0, "partial_rotary_factor": 0.5, "rope_type": "default"}  # r = s / 2
KINDS = ("plain", "near", "tiny", "tie", "eps", "plain", "hidden")
ACTS = ("gelu", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu")
FACTORS = {8: (0.25, 0.5, 0.75, 1.0), 4: (0.5, 1.0), 2: (1.0,)}  # head_size -> factors giving an even r >= 2
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


def random_neox(rng, vocab: int = 2, n_pos: int = 2, kind: str = "plain", **change):
    """A live float64 GPTNeoXForCausalLM (eval mode, eager attention) with random weights and one of the
    hard cases in logits 0 and 1: near (lm rows differ by 1e-12 .. 2^-60 times a random vector), tiny
    (in one coordinate only, by 1e-20 .. 1e-30), tie (equal rows), eps (embeddings 1e-4 small,
    layer_norm_eps up to 100), hidden (the rows differ only in two stream coordinates that are equal
    for every input: a tie the balls carry as two equal balls, undecided)."""
    torch, transformers = _transformers()
    heads = int(change.pop("num_attention_heads", rng.choice([1, 2, 4])))
    size = 8 // heads
    cfg = dict(vocab_size=vocab, hidden_size=8, intermediate_size=int(rng.choice([3, 6])),
               num_hidden_layers=int(rng.choice([1, 1, 2])), num_attention_heads=heads,
               max_position_embeddings=n_pos, hidden_act=str(rng.choice(ACTS)),
               layer_norm_eps=float(rng.choice([1e-5, 1e-3, 0.25, 7.0])), tie_word_embeddings=bool(rng.integers(2)),
               use_parallel_residual=bool(rng.integers(2)), attention_bias=bool(rng.integers(3) != 0),
               rope_parameters={"rope_theta": float(rng.choice([10000.0, 500000.0, 3.7, 1.5, 123.25])),
                                "partial_rotary_factor": float(rng.choice(FACTORS[size])), "rope_type": "default"},
               attn_implementation="eager", bos_token_id=0, eos_token_id=0)
    cfg.update(change)
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**cfg)).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            a = rng.standard_normal(tuple(p.shape)) * 0.7 + (1.0 if "norm.weight" in name else 0.0)
            if rng.integers(3) == 0:
                a = a.astype(np.float32).astype(np.float64)
            p.copy_(torch.from_numpy(a))
        W = model.lm_head.weight  # embed_in when tied
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
            model.gpt_neox.embed_in.weight.mul_(1e-4)
            eps = float(rng.choice([1e-5, 1.0, 100.0]))
            model.config.layer_norm_eps = eps
            for mod in model.modules():
                if isinstance(mod, torch.nn.LayerNorm):
                    mod.eps = eps
        elif kind == "hidden":  # stream coordinates 0 and 1 equal at every input: equal embedding columns,
            # dense and dense_4h_to_h rows and biases, final-norm gains and biases; lm rows differ by t (e_0 - e_1)
            E = model.gpt_neox.embed_in.weight
            if W is E or W.data_ptr() == E.data_ptr():
                pytest.skip("a tied lm_head cannot carry the hidden tie")
            E[:, 1] = E[:, 0]
            for layer in model.gpt_neox.layers:
                for lin in (layer.attention.dense, layer.mlp.dense_4h_to_h):
                    lin.weight[1] = lin.weight[0]
                    if lin.bias is not None:
                        lin.bias[1] = lin.bias[0]
            fin = model.gpt_neox.final_layer_norm
            fin.weight[1], fin.bias[1] = fin.weight[0], fin.bias[0]
            W[0] = torch.round(W[0] * 1024) / 1024  # so that +- 0.5 is exact
            W[1] = W[0]
            W[1, 0] += 0.5
            W[1, 1] -= 0.5
    return model


def oracle_of(folder) -> NeoXOracle:
    """tests/neox_oracle.py's evaluator of a save_pretrained folder (its config.json and safetensors)."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    return NeoXOracle(cfg, read_safetensors(os.path.join(folder, "model.safetensors"))[0])


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
        kind = KINDS[i % len(KINDS)]
        model = random_neox(rng, vocab, n_pos, kind, **({"tie_word_embeddings": False} if kind == "hidden" else {}))
        totals += check_against_oracle(model, tmp_path / f"m{i}", make_task("max-of-k", vocab=vocab, k=n_pos))
    return totals


def test_30_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(30, 44, tmp_path)
    assert correct > 20 and wrong > 20 and undecided > 0  # every verdict exercised


@pytest.mark.slow
def test_300_more_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(300, 4400, tmp_path)
    assert correct > 300 and wrong > 200 and undecided > 0


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_and_sequential_residuals_agree_with_the_evaluator_on_larger_models(tmp_path, parallel):
    """Two layers, two heads, r = 2 of head_size 4, vocab 3 at length 3 (27 points per model), with the
    residual form fixed: the parallel layer's MLP reads the stream before the attention update."""
    rng = np.random.default_rng(60 + parallel)
    task = make_task("max-of-k", vocab=3, k=3)
    totals = np.zeros(3, dtype=int)
    for i in range(3):
        model = random_neox(rng, 3, 3, "plain", num_attention_heads=2, num_hidden_layers=2,
                            use_parallel_residual=parallel,
                            rope_parameters=dict(HALF))
        totals += check_against_oracle(model, tmp_path / f"p{i}", task)
        assert hf.load_model(str(tmp_path / f"p{i}")).layers[0].parallel is parallel
    assert totals[0] > 5 and totals[1] > 5


def test_ties_are_never_certified_correct_and_hidden_ones_are_undecided_with_the_reason(tmp_path, capsys):
    """Equal lm rows: logits 0 and 1 tie at every input, and the read-out's difference row is exactly 0:
    proven wrong.  The hidden tie (rows differing only in two stream coordinates that are equal at
    every input) is a tie no ball can prove: undecided at the precision cap with a true reason (the
    exact tie decision does not apply: parallel layers or rotary heads); never correct."""
    rng = np.random.default_rng(5)
    task = make_task("max-of-k", vocab=2, k=2)
    correct, wrong, undecided = check_against_oracle(random_neox(rng, kind="tie", tie_word_embeddings=False),
                                                     tmp_path / "tie", task)
    assert correct == 0 and wrong == task.size
    for parallel in (True, False):
        model = random_neox(rng, kind="hidden", tie_word_embeddings=False, use_parallel_residual=parallel)
        folder = tmp_path / f"hidden{parallel}"
        model.save_pretrained(folder)
        code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "2", "--k", "2",
                               "--max-precision", "128", "--json"], capsys)
        d = json.loads(out)
        assert code in (1, 3) and d["correct"] + d["wrong"] + d["undecided_points"] == 4
        assert d["undecided_points"] >= 1 and d["correct"] <= 4 - d["undecided_points"]
        reason = "a parallel layer" if parallel else "rotary positions"
        assert all(reason in u["limit"] for u in d["undecided_limits"]), d["undecided_limits"]
        oracle = oracle_of(folder)
        for i in d["first_undecided"]:
            pt = task.point(i)
            assert abs(oracle.margin([int(t) for t in pt.tokens], int(pt.label))) <= TIE


# ------------------------------------------------------------------ transformers' own float64 logits

LIVE = [dict(), dict(use_parallel_residual=False), dict(hidden_act="gelu_new", attention_bias=False),
        dict(num_hidden_layers=3, tie_word_embeddings=True),
        dict(rope_parameters={"rope_theta": 2.5, "partial_rotary_factor": 1.0, "rope_type": "default"})]


def _patched_float64(monkeypatch, torch):
    """transformers' float32 parts of GPT-NeoX (rotary inv_freq / cos / sin, the eager attention's softmax)
    in float64, the same code."""
    from transformers.models.gpt_neox import modeling_gpt_neox as mn

    def rope(self, x, position_ids):
        cfg = self.config
        base = cfg.rope_parameters["rope_theta"]
        dim = int(cfg.hidden_size // cfg.num_attention_heads * cfg.rope_parameters["partial_rotary_factor"])
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        emb = torch.cat([position_ids[..., None].double() * inv] * 2, dim=-1)
        return emb.cos(), emb.sin()

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1, dtype=query.dtype)
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    monkeypatch.setattr(mn.GPTNeoXRotaryEmbedding, "forward", rope)
    monkeypatch.setattr(mn, "eager_attention_forward", eager)


def _live_check(change, tmp_path, rel):
    torch, _ = _transformers()
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.softmax_intervals import IntervalForward

    base = dict(num_hidden_layers=2, num_attention_heads=2, hidden_act="gelu", layer_norm_eps=1e-5,
                tie_word_embeddings=False, use_parallel_residual=True, attention_bias=True,
                rope_parameters=dict(HALF))
    model = random_neox(np.random.default_rng(11), 4, 3, "plain", **{**base, **change})
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
    """What is compared: GPTNeoXForCausalLM(config).double().eval() (eager attention) with random float64
    weights, whose rotary table (inv_freq, cos, sin) and attention softmax are replaced by the same code
    in float64 (transformers computes them in float32 even after .double(); its LayerNorm, linear maps and
    GELU run in float64), on all 64 max-of-k inputs (vocab 4, length 3) at the last position: each
    input's float64-interval margin enclosure holds transformers' best-minus-second logit, and arb's
    enclosure of each logit (every 5th input) holds transformers' logit, up to 1e-11 relative (float64
    rounding, and the float64 power theta^x)."""
    torch, _ = _transformers()
    _patched_float64(monkeypatch, torch)
    _live_check(change, tmp_path, 1e-11)


@pytest.mark.parametrize("change", LIVE[:2], ids=["parallel", "sequential"])
def test_certified_enclosures_contain_transformers_float64_logits_up_to_its_float32_table(change, tmp_path):
    """The same with transformers as it is: its float32 rotary table and softmax move its logits by float32
    roundings (about 1e-7 relative each, amplified by the layers); allowed: 1e-5 relative."""
    _live_check(change, tmp_path, 1e-5)


def test_compare_float_is_a_true_float64_forward(tmp_path, capsys, monkeypatch):
    """--compare-float's float64 forward of a GPT-NeoX folder (huggingface_neox.NeoXFloatForward) computes
    everything in float64: its logits equal transformers' float64 logits to 1e-12 once transformers'
    float32 parts (rotary table, softmax) are float64 too, for both residual forms, and it agrees with
    every certified verdict."""
    torch, _ = _transformers()
    _patched_float64(monkeypatch, torch)
    for parallel in (True, False):
        model = random_neox(np.random.default_rng(12), 4, 3, "plain", num_hidden_layers=2, tie_word_embeddings=False,
                            num_attention_heads=2, use_parallel_residual=parallel,
                            rope_parameters=dict(HALF))
        folder = tmp_path / f"f{parallel}"
        model.save_pretrained(folder)
        task = make_task("max-of-k", vocab=4, k=3)
        ids = task.decode(np.arange(task.size))[0]
        with torch.no_grad():
            ref = model(torch.tensor(ids)).logits[:, -1].numpy()
        sizes, sd = hn.read_float(str(folder))
        got = hn.neox_forward(sizes, sd, np.float64).last_logits(ids)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "4", "--k", "3", "--compare-float",
                               "--json"], capsys)
        d = json.loads(out)
        assert d["float_comparison"]["float64"]["disagreements"] == 0
        assert d["float_comparison"]["float64"]["correct"] == d["correct"] == int((ref.argmax(1) == ids.max(1)).sum())


# ------------------------------------------------------------------ the fused query_key_value layout

def test_query_key_value_is_read_per_head_as_q_k_v():
    """transformers views query_key_value's output as (heads, 3 head_size) and chunks each head into
    q, k, v: head h's query rows are 3 h s .. 3 h s + s - 1.  A weight with only head 1's key rows set
    gives head 1 a non-zero score form and head 0 none (read as [all q; all k; all v] it would be head 0's
    query rows)."""
    cfg = _config(num_attention_heads=2, hidden_size=4, attention_bias=False)
    c = hn.config_from_dict(cfg)
    sd = {k: np.ones(s) if k.endswith("norm.weight") else np.zeros(s) for k, s in hn.expected_shapes(c).items()}
    W = sd["gpt_neox.layers.0.attention.query_key_value.weight"]
    s = 2
    W[3 * s + 0: 3 * s + s] = 1.0  # head 1's q
    W[3 * s + s: 3 * s + 2 * s] = np.eye(2, 4)  # head 1's k
    model = hn.model_from_config_and_state_dict(cfg, sd)
    h0, h1 = model.layers[0].heads
    assert all(v == 0 for v in h0.W_QK.flat) and any(v != 0 for v in h1.W_QK.flat)
    assert h1.rotary.dim == 2 and h1.scale_sqrt_divisor == 2


# ------------------------------------------------------------------ config.json

def test_every_gpt_neox_config_field_is_read_or_without_effect():
    _, transformers = _transformers()
    keys = set(transformers.GPTNeoXConfig().to_dict())
    assert not keys - hn.READ_FIELDS - hn.NO_EFFECT, sorted(keys - hn.READ_FIELDS - hn.NO_EFFECT)
    assert not hn.READ_FIELDS & hn.NO_EFFECT


def _config(**change) -> dict:
    cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 2, "hidden_size": 4,
           "intermediate_size": 3, "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 2,
           "layer_norm_eps": 1e-5, "hidden_act": "gelu", "tie_word_embeddings": True, "use_parallel_residual": True,
           "attention_bias": True,
           "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 1.0, "rope_type": "default"}}
    cfg.update(change)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.mark.parametrize("change,needle", [
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 1.0}),
     "rope_parameters key factor"),
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "yarn", "partial_rotary_factor": 1.0}),
     "rope_type \"yarn\" is refused"),
    (dict(rope_parameters={"partial_rotary_factor": 1.0, "rope_type": "default"}), "no rotary base"),
    (dict(rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}), "no partial rotary factor"),
    (dict(rope_parameters=None), "no rotary base"),
    (dict(rope_parameters=None, rotary_emb_base=10000.0), "no partial rotary factor"),
    (dict(rotary_pct=0.5), "differs from rotary_pct"),
    (dict(rotary_emb_base=500), "differs from rotary_emb_base"),
    (dict(rope_theta=500.0), "top-level rope_theta 500.0 is not what GPTNeoXConfig reads"),
    (dict(partial_rotary_factor=0.5), "top-level partial_rotary_factor 0.5 is not what"),
    (dict(rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.25, "rope_type": "default"}),
     "int(head_size 2 * rope_parameters.partial_rotary_factor 0.25) = 0 is below 2"),
    (dict(hidden_size=6, num_attention_heads=1, rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": 0.5,
                                                                  "rope_type": "default"}), "= 3 is odd"),
    (dict(rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 1.5, "rope_type": "default"}), "above 1"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_scaling"),
    (dict(hidden_act="quick_gelu"), "hidden_act \"quick_gelu\" is not supported"),
    (dict(num_attention_heads=3), "not a multiple of num_attention_heads"),
    (dict(head_dim=4), "head_dim 4 is refused"),
    (dict(architectures=["GPTNeoXForSequenceClassification"]), "architectures [\"GPTNeoXForSequenceClassification\"]"),
    (dict(layer_norm_eps=0), "layer_norm_eps must be a positive"),
    (dict(use_parallel_residual=1), "use_parallel_residual must be true or false, got 1"),
    (dict(add_cross_attention=True), "add_cross_attention=true is refused"),
    (dict(vocab_size=None), "vocab_size must be an integer"),
    (dict(model_type="gpt2"), "model_type \"gpt2\" is not \"gpt_neox\""),
])
def test_a_field_that_changes_the_model_is_refused_in_one_line(tmp_path, capsys, change, needle):
    folder = tmp_path / "f"
    write_folder(folder, _config(**change), np.random.default_rng(1))
    code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "2", "--k", "2"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def write_folder(folder, cfg: dict, rng, rename: dict | None = None) -> None:
    """A save_pretrained-shaped folder written with numpy (no torch), weights to the config's shapes."""
    try:
        shapes = hn.expected_shapes(hn.config_from_dict(cfg))
    except BadInput:  # a refused config: the weights of the plain one (the config is what is refused)
        shapes = hn.expected_shapes(hn.config_from_dict(_config()))
    sd = {k: rng.standard_normal(s) for k, s in shapes.items()}
    hf.write_folder(str(folder), cfg, {(rename or {}).get(k, k): v for k, v in sd.items()})


@pytest.mark.parametrize("change,needle", [
    (dict(attention_bias=False), "parameter of this config: attention_bias is false)"),
    (dict(tie_word_embeddings=False), "lacks lm_head.weight (tie_word_embeddings is false)"),
])
def test_weights_that_do_not_match_the_config_are_refused(tmp_path, capsys, change, needle):
    folder = tmp_path / "w"
    rng = np.random.default_rng(2)
    hf.write_folder(str(folder), _config(**change), {k: rng.standard_normal(s) for k, s in
                                                     hn.expected_shapes(hn.config_from_dict(_config())).items()})
    code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "2", "--k", "2"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and needle in err, err


def test_an_older_config_and_embed_out_give_the_same_model(tmp_path):
    """transformers 4.x wrote rotary_pct and rotary_emb_base at the top level and named the head
    embed_out; transformers 5.x reads them (rope_parameters lacking the keys) and renames embed_out to
    lm_head on load: the same exact model as the 5.x form."""
    new = _config(tie_word_embeddings=False, num_attention_heads=1,
                  rope_parameters={"rope_theta": 0.1, "partial_rotary_factor": 0.5, "rope_type": "default"})
    old = {k: v for k, v in new.items() if k != "rope_parameters"}
    old.update(rotary_pct=0.5, rotary_emb_base=0.1, rope_scaling=None)
    write_folder(tmp_path / "new", new, np.random.default_rng(7))
    write_folder(tmp_path / "old", old, np.random.default_rng(7), rename={"lm_head.weight": "embed_out.weight"})
    a, b = hf.load_model(str(tmp_path / "new")), hf.load_model(str(tmp_path / "old"))
    assert a.notes["rope_theta"] == "1/10" and a.layers[0].heads[0].rotary.dim == 2
    assert replace(a, name="x") == replace(b, name="x")


def test_architectures_alone_name_the_model():
    """A config.json without model_type is read by its architectures, as the Llama reader reads one."""
    assert hn.config_from_dict(_config(model_type=None)) == hn.config_from_dict(_config())


def test_unknown_keys_are_named_in_one_warning_line_and_strict_config_refuses_them(tmp_path, capsys):
    write_folder(tmp_path / "u", _config(rotary_pcct=0.5), np.random.default_rng(3))
    argv = [str(tmp_path / "u"), "--task", "max-of-k", "--vocab", "2", "--k", "2"]
    code, out, err = _run(argv, capsys)
    assert code in (0, 1) and err.count("\n") == 1 and "rotary_pcct" in err and "GPT-NeoX" in err, err
    code, out, err = _run(argv + ["--strict-config"], capsys)
    assert code == 2 and out == "" and "rotary_pcct" in err and len(err.strip().splitlines()) == 1


def test_the_rotary_base_and_factor_are_the_decimals_written():
    """config.json's text 0.1 is the rational 1/10 (not the float64 nearest it); the rotated dimension is
    int(head_size * factor) as transformers computes it in floats (0.29 * 100 = 28.999999999999996: 28)."""
    import decimal

    cfg = _config(rope_parameters={"rope_theta": 0.1, "partial_rotary_factor": 1.0, "rope_type": "default"})
    exact = json.loads(json.dumps(cfg), parse_float=decimal.Decimal)
    assert hn.config_from_dict(cfg, exact).theta == Fraction(1, 10)
    assert hn.config_from_dict(cfg).theta == Fraction(0.1)
    big = _config(hidden_size=100, num_attention_heads=1,
                  rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.29, "rope_type": "default"})
    assert hn.config_from_dict(big).rotary_dim == int(100 * 0.29) == 28


# ------------------------------------------------------------------ the parallel layer in the kernel

def test_a_parallel_layer_is_validated_and_refused_where_only_sequential_layers_are_known():
    from depthcert.checkers import journal, weights_file
    from depthcert.checkers.model import Layer
    from depthcert.checkers.norm_activation_balls import tie_reason
    from depthcert.checkers.softmax_ties import TieDecider
    from depthcert.checkers.symmetry import check_equivariance

    model = hn.model_from_config_and_state_dict(_config(), {k: np.random.default_rng(4).standard_normal(s) for k, s in
                                                            hn.expected_shapes(hn.config_from_dict(_config())).items()})
    L = model.layers[0]
    assert L.parallel and not L.is_rational and model.has_parallel and "parallel" in model.kinds()
    seq = replace(model, layers=(replace(L, parallel=False),))
    assert journal.model_fingerprint(seq) != journal.model_fingerprint(model)
    assert "parallel layer" in tie_reason(model)
    with pytest.raises(ValueError, match="parallel"):
        TieDecider(model, 0, 128)
    with pytest.raises(BadInput, match="parallel layer"):
        weights_file.model_to_json(model)
    assert not check_equivariance(model, ()).ok
    with pytest.raises(BadInput, match="needs attention heads and an MLP"):
        Layer((), parallel=True, mlp=L.mlp)
    with pytest.raises(BadInput, match="needs attention heads and an MLP"):
        Layer(L.heads, parallel=True)
    with pytest.raises(BadInput, match="parallel must be true or false"):
        Layer(L.heads, mlp=L.mlp, parallel=1)


# ------------------------------------------------------------------ live objects

LIVE_FAMILIES = ("gpt2", "llama", "qwen2", "gpt_neox")


def _live(family, rng):
    torch, transformers = _transformers()
    if family == "gpt_neox":
        return random_neox(rng, 3, 3, "plain", num_attention_heads=2, num_hidden_layers=2,
                           rope_parameters={"rope_theta": 0.1, "partial_rotary_factor": 0.5, "rope_type": "default"})
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=3, n_positions=3, n_embd=8, n_layer=2, n_head=2)
        model = transformers.GPT2LMHeadModel(cfg).double().eval()
    else:
        from test_huggingface_llama import random_llama

        model = random_llama(rng, 3, 3, "plain", family, rope_parameters={"rope_theta": 0.1, "rope_type": "default"})
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    return model


@pytest.mark.parametrize("family", LIVE_FAMILIES)
def test_a_live_model_and_its_save_pretrained_folder_give_the_same_exact_model(tmp_path, family):
    """huggingface.model_from_pretrained(obj, task) reads obj.config and obj.state_dict() by the folder's
    mapping: the Model equals the one verify-model reads from obj.save_pretrained's folder (names aside),
    rope_theta 0.1 being 1/10 in both, and decides the task the same way."""
    from depthcert.cli.verify_model import load_any_model

    model = _live(family, np.random.default_rng(30 + LIVE_FAMILIES.index(family)))
    task = make_task("max-of-k", vocab=3, k=3)
    live = hf.model_from_pretrained(model, task)
    model.save_pretrained(tmp_path / family)
    folder = load_any_model(str(tmp_path / family), None, task)
    assert replace(live, name="x") == replace(folder, name="x")
    if family != "gpt2":
        assert live.notes["rope_theta"] == folder.notes["rope_theta"] == "1/10"
    a, b = decide_all(live, task, **OPTS), decide_all(folder, task, **OPTS)
    assert (a.correct, list(a.wrong), a.margin) == (b.correct, list(b.wrong), b.margin)


def test_a_live_model_whose_task_classes_are_some_of_its_tokens_is_named_as_verify_model_names_it():
    """The trained Llama (training/checkpoints/llama_modadd_p13: tokens "0" .. "12" and "=", classes the
    residues): from_pretrained's live object, with the task, gives verify-model's model of the folder (every
    logit named as its token, so "=" competes)."""
    from depthcert.cli.verify_model import load_any_model

    _, transformers = _transformers()
    folder = os.path.join(ROOT, "training", "checkpoints", "llama_modadd_p13")
    if not os.path.isdir(folder):
        pytest.skip("the trained Llama folder is not in this checkout")
    task = make_task("modular-addition", modulus=13)
    live = hf.model_from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(folder), task)
    ours = load_any_model(folder, None, task)
    assert live.classes == ours.classes == tuple(task.vocab) and replace(live, name="x") == replace(ours, name="x")


def test_model_from_pretrained_refuses_other_objects_and_warns_of_unknown_keys():
    with pytest.raises(BadInput, match="takes a transformers PreTrainedModel, got dict"):
        hf.model_from_pretrained({})
    model = _live("gpt_neox", np.random.default_rng(3))
    model.config.rotary_pcct = 0.5
    with pytest.warns(UserWarning, match="rotary_pcct"):
        hf.model_from_pretrained(model)
    with pytest.raises(BadInput, match="strict_config: .*rotary_pcct"):
        hf.model_from_pretrained(model, strict_config=True)


# ------------------------------------------------------------------ docs

def _doc_section() -> str:
    with open(os.path.join(ROOT, "docs", "trained-models.md"), encoding="utf-8") as fh:
        return fh.read().split("## GPT-NeoX (Hugging Face) in")[1].split("\n## ")[0]


def test_the_docs_table_names_every_read_field_once_and_no_field_the_reader_does_not_know():
    section = _doc_section()
    table = section.split("### GPT-NeoX config.json: every field")[1].split("\n\n")[2]
    named = []
    for line in table.splitlines()[3:]:
        named += re.findall(r"`(\w+)`", line.split(" | ")[0])
    assert len(named) == len(set(named)) and hn.READ_FIELDS <= set(named) <= hn.READ_FIELDS | hn.NO_EFFECT, (
        sorted(hn.READ_FIELDS - set(named)), sorted(set(named) - hn.READ_FIELDS - hn.NO_EFFECT))


def test_documented_example(tmp_path):
    """docs/trained-models.md's GPT-NeoX example: the training block run as written (in a temporary
    folder), the `$ verify-model` line of the block below it prints what the block says (times masked),
    then the live-object block prints what its output block says."""
    import shlex
    import subprocess

    from cli_in_process import run_command

    _transformers()
    section = _doc_section()
    train, api = (part.split("```")[0] for part in section.split("```python\n")[1:3])
    marker = "<!-- test: tests/test_huggingface_neox.py::test_documented_example -->\n```\n"
    shown_cli, shown_api = (part.split("```")[0].rstrip("\n") for part in section.split(marker)[1:3])
    r = subprocess.run([sys.executable, "-c", train], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = shown_cli.splitlines()
    assert lines[0].startswith("$ verify-model ")
    code, out, err = run_command(shlex.split(lines[0][2:]), cwd=str(tmp_path))
    mask = lambda t: re.sub(r"\d+\.\d+ s", "<t> s", t)  # noqa: E731
    assert code == 0 and mask(out.rstrip("\n")) == mask("\n".join(lines[1:])), f"{lines[0]} prints\n{out}{err}"
    r = subprocess.run([sys.executable, "-c", api], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.rstrip("\n") == shown_api, (r.stdout, r.stderr)
