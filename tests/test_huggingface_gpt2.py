"""Hugging Face GPT-2 folders (GPT2LMHeadModel.save_pretrained: config.json + model.safetensors)
decided by verify-model (depthcert/interop/huggingface.py), checked three ways:

  * against transformers itself: tiny random GPT2LMHeadModel checkpoints in float64, saved with
    save_pretrained; transformers' own float64 logits at the last position (eager attention, eval
    mode) lie inside the certified enclosures: the float64-interval enclosure of every input's margin
    (best logit minus second best, the label being transformers' argmax) and arb's enclosure of
    every logit on a spread of inputs, up to transformers' own float64 rounding (1e-12 relative);
  * against an independent evaluator (tests/tl_oracle.py: Fractions and mpmath, importing nothing of
    depthcert) fed by TransformerLens's own GPT-2 conversion (convert_gpt2_weights) of the live
    transformers model, not by depthcert's reader: every verdict of 330 random tiny checkpoints
    agrees (30 in the default suite, 300 more marked slow), among them planted near-ties of 1e-12
    down to 1e-30 and exact ties (never certified correct; wrong or undecided with the reason);
  * a folder written by hand with numpy (no torch) is read, and config.json fields are read,
    refused in one line naming the field and value (exit 2), or listed as without effect; an
    unknown key is named in one warning line, --strict-config refuses it.

The tests that build models with transformers skip (with the reason) where it is not importable.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import types
import warnings

import mpmath
import numpy as np
import pytest

from depthcert.checkers.accuracy import decide_all
from depthcert.checkers.tasks import make_task
from depthcert.interop import huggingface as hf

sys.path.insert(0, os.path.dirname(__file__))
from tl_oracle import TIE, TLOracle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# activation_function -> the name tl_oracle evaluates (transformers' ACT2FN: the same real functions)
ORACLE_ACT = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_pytorch_tanh", "gelu_python_tanh": "gelu_new",
              "gelu": "gelu", "gelu_python": "gelu", "gelu_fast": "gelu_fast", "relu": "relu", "silu": "silu",
              "swish": "silu"}
KINDS = ("plain", "near", "tiny", "tie", "eps", "constant")


def _transformers():
    """(torch, transformers) or a skip saying why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
            import transformers
    except ImportError as exc:
        pytest.skip(f"transformers is not importable here ({exc}); it comes with the interop extra "
                    "(transformer-lens depends on it)")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return torch, transformers


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main

    code = run_main(_main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def random_gpt2(rng, vocab: int = 2, n_pos: int = 2, kind: str = "plain", **change):
    """A live float64 GPT2LMHeadModel (eval mode) with random weights, and one of the hard cases in
    its logits 0 and 1: near (lm rows 0 and 1 differ by 1e-12 .. 2^-60 times a random vector),
    tiny (they differ in one coordinate only, by 1e-20 .. 1e-30: a logit gap of that size times
    one ln_f output), tie (equal rows: logits 0 and 1 equal at every input), eps (embeddings
    1e-4 small, eps up to 100), constant (token 0 embeds as a constant vector, positions as 0)."""
    torch, transformers = _transformers()
    act = str(rng.choice(sorted(ORACLE_ACT)))
    cfg = dict(vocab_size=vocab, n_positions=n_pos, n_embd=4, n_layer=int(rng.choice([1, 1, 2])),
               n_head=int(rng.choice([1, 2])), n_inner=None if rng.integers(6) == 0 else 3,
               activation_function=act, layer_norm_epsilon=float(rng.choice([1e-5, 1e-3, 0.25, 7.0])),
               scale_attn_weights=bool(rng.integers(5) != 0), tie_word_embeddings=bool(rng.integers(2)),
               scale_attn_by_inverse_layer_idx=bool(rng.integers(4) == 0),
               bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    cfg.update(change)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # (a tied lm_head is wte: listed once)
            a = rng.standard_normal(tuple(p.shape)) * 0.7 + (1.0 if name.endswith(("ln_1.weight", "ln_2.weight",
                                                                                    "ln_f.weight")) else 0.0)
            if rng.integers(3) == 0:
                a = a.astype(np.float32).astype(np.float64)  # float32 weights, stored as their float64 values
            p.copy_(torch.from_numpy(a))
        W = model.lm_head.weight  # wte when tied: the planted rows then also embed tokens 0 and 1
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
            model.transformer.wte.weight.mul_(1e-4)
            model.transformer.wpe.weight.mul_(1e-4)
            model.config.layer_norm_epsilon = float(rng.choice([1e-5, 1.0, 100.0]))
            for m in model.modules():
                if isinstance(m, torch.nn.LayerNorm):
                    m.eps = model.config.layer_norm_epsilon
        elif kind == "constant":
            model.transformer.wte.weight[0] = float(rng.choice([0.0, 0.5, -1.25]))
            model.transformer.wpe.weight.zero_()
    return model


def oracle_of(model) -> TLOracle:
    """tl_oracle's evaluator of a live GPT2LMHeadModel, through TransformerLens's own conversion
    (transformer_lens.pretrained.weight_conversions.convert_gpt2_weights), not depthcert's."""
    pytest.importorskip("transformer_lens", reason="the oracle reads TransformerLens's own GPT-2 conversion")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    c = model.config
    cfg = {"n_layers": c.n_layer, "d_model": c.n_embd, "n_heads": c.n_head, "d_head": c.n_embd // c.n_head,
           "n_ctx": c.n_positions, "normalization_type": "LN", "eps": c.layer_norm_epsilon,
           "attention_dir": "causal", "use_attn_scale": c.scale_attn_weights, "attn_only": False,
           "act_fn": ORACLE_ACT[c.activation_function]}
    sd = convert_gpt2_weights(model, types.SimpleNamespace(**cfg))
    sd = {k: v.detach().double().numpy().copy() for k, v in sd.items()}
    if c.scale_attn_by_inverse_layer_idx:  # layer L's scores times 1/(L+1): folded into W_Q, b_Q, exactly
        for li in range(c.n_layer):
            assert (li + 1) & li == 0, "the oracle folds 1/(L+1) exactly only for L+1 a power of 2"
            for key in (f"blocks.{li}.attn.W_Q", f"blocks.{li}.attn.b_Q"):
                sd[key] = sd[key] / (li + 1)
    sd["unembed.b_U"] = np.zeros(c.vocab_size)  # GPT-2's lm_head has no bias
    return TLOracle(cfg, sd)


def check_against_oracle(model, folder, task) -> tuple[int, int, int]:
    """Save `model` with save_pretrained, decide the folder (depthcert's reader), and compare every
    point's verdict and the margin enclosure with the oracle; returns (correct, wrong, undecided)."""
    model.save_pretrained(folder)
    ours = hf.load_model(str(folder))
    v = decide_all(ours, task)
    oracle = oracle_of(model)
    wrong, undecided = {int(i) for i in v.wrong}, {int(i) for i in v.undecided}
    least = None
    for i in range(task.size):
        pt = task.point(i)
        m = oracle.margin([int(t) for t in pt.tokens], int(pt.label))
        where = f"point {i} {pt.tokens} of {model.config.to_diff_dict()} (oracle margin {mpmath.nstr(m, 5)})"
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


def _many(n: int, seed: int, tmp_path) -> np.ndarray:
    rng = np.random.default_rng(seed)
    totals = np.zeros(3, dtype=int)
    for i in range(n):
        vocab, n_pos = (3, 3) if i % 10 == 9 else (2, 2)
        model = random_gpt2(rng, vocab, n_pos, KINDS[i % len(KINDS)])
        totals += check_against_oracle(model, tmp_path / f"m{i}", make_task("max-of-k", vocab=vocab, k=n_pos))
    return totals


def test_30_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(30, 43, tmp_path)
    assert correct > 20 and wrong > 20  # both verdicts exercised (ties count as wrong)


@pytest.mark.slow
def test_300_more_random_checkpoints_agree_with_the_independent_evaluator(tmp_path):
    correct, wrong, undecided = _many(300, 4300, tmp_path)
    assert correct > 300 and wrong > 200


def test_exact_and_tiny_ties_are_never_certified_correct(tmp_path):
    """lm rows 0 and 1 equal: logits 0 and 1 tie at every input, so no point labelled 0 or 1 is
    correct (the read-out's difference row is exactly 0: proven wrong, not undecided); a gap of 1e-30
    in one coordinate is decided both ways, as the oracle says."""
    rng = np.random.default_rng(5)
    task = make_task("max-of-k", vocab=2, k=2)
    model = random_gpt2(rng, kind="tie", tie_word_embeddings=False)
    correct, wrong, undecided = check_against_oracle(model, tmp_path / "tie", task)
    assert correct == 0 and wrong + undecided == task.size
    model = random_gpt2(rng, kind="tiny", tie_word_embeddings=False)
    check_against_oracle(model, tmp_path / "tiny", task)


def test_a_tie_made_by_ln_f_is_undecided_with_the_reason(tmp_path, capsys):
    """lm row 1 = row 0 + 0.5 (all ones) and ln_f's gain 1, bias 0: ln_f's output sums to exactly 0,
    so logits 0 and 1 are exactly equal, but the difference row is not 0 and the values pass a
    square root: undecided at the precision cap with the reason, never correct."""
    torch, _ = _transformers()
    rng = np.random.default_rng(8)
    model = random_gpt2(rng, kind="plain", tie_word_embeddings=False, n_layer=1)
    with torch.no_grad():
        model.transformer.ln_f.weight.fill_(1.0)
        model.transformer.ln_f.bias.zero_()
        W = model.lm_head.weight
        W.copy_(torch.round(W * 1024) / 1024)
        W[1] = W[0] + 0.5
    model.save_pretrained(tmp_path / "lnf-tie")
    code, out, err = _run([str(tmp_path / "lnf-tie"), "--task", "max-of-k", "--vocab", "2", "--k", "2",
                           "--max-precision", "128", "--json"], capsys)
    d = json.loads(out)
    assert code in (1, 3) and d["correct"] + d["wrong"] + d["undecided_points"] == 4
    assert d["undecided_points"] >= 1 and d["correct"] <= 4 - d["undecided_points"]
    assert all("square roots" in u["limit"] for u in d["undecided_limits"])
    oracle = oracle_of(model)
    task = make_task("max-of-k", vocab=2, k=2)
    for i in d["first_undecided"]:
        pt = task.point(i)
        assert abs(oracle.margin([int(t) for t in pt.tokens], int(pt.label))) <= TIE


# ------------------------------------------------------------------ transformers' own float64 logits

LIVE = [dict(), dict(activation_function="gelu", tie_word_embeddings=False), dict(activation_function="relu"),
        dict(scale_attn_by_inverse_layer_idx=True, n_layer=3),
        dict(scale_attn_by_inverse_layer_idx=True, scale_attn_weights=False, activation_function="gelu"),
        dict(activation_function="gelu_fast", scale_attn_weights=False), dict(activation_function="silu", n_inner=None),
        dict(activation_function="gelu_pytorch_tanh", layer_norm_epsilon=0.5, n_head=1)]


@pytest.mark.parametrize("change", LIVE, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_certified_enclosures_contain_transformers_float64_logits(change, tmp_path):
    """What is compared: GPT2LMHeadModel(config).double().eval() (eager attention) with random float64
    weights, its logits at the last position of all 64 max-of-k inputs (vocab 4, length 3), against
    depthcert's decision of the folder save_pretrained writes: each input's float64-interval margin
    enclosure holds transformers' best-minus-second logit (label = transformers' argmax), and arb's
    enclosure of each logit (every 5th input) holds transformers' logit, both up to 1e-12 relative
    (transformers' own float64 rounding)."""
    torch, _ = _transformers()
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.softmax_intervals import IntervalForward

    base = dict(n_layer=2, n_head=2, n_inner=5, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                scale_attn_weights=True, tie_word_embeddings=True)
    model = random_gpt2(np.random.default_rng(11), vocab=4, n_pos=3, **{**base, **change})
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
    slack = 1e-12 * (1 + np.abs(ref).max())
    ok = status == 1
    assert ok.mean() > 0.9
    assert ((lo[ok] <= margin[ok] + slack) & (margin[ok] <= hi[ok] + slack)).all()
    for i in range(0, len(ids), 5):
        d = dec.decide(H[i], den, [(ids.shape[1] - 1, int(labels[i, -1]))], logits=True)
        for c, (a, b) in enumerate(d.logits):
            assert float(a) - slack <= ref[i, c] <= float(b) + slack, (i, c, float(a), ref[i, c], float(b))


@pytest.mark.parametrize("inverse", [False, True], ids=["plain", "scale_attn_by_inverse_layer_idx"])
def test_compare_float_is_transformers_float64_forward(tmp_path, capsys, inverse):
    """--compare-float's float64 forward of a GPT-2 folder is a plain float64 numpy forward: its
    logits equal transformers' float64 logits to 1e-12, and it agrees with every certified verdict."""
    torch, _ = _transformers()
    from depthcert.interop.float_forward import FloatForward

    model = random_gpt2(np.random.default_rng(12), vocab=4, n_pos=3, n_layer=3 if inverse else 2,
                        tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=inverse)
    model.save_pretrained(tmp_path / "f")
    task = make_task("max-of-k", vocab=4, k=3)
    ids = task.decode(np.arange(task.size))[0]
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits[:, -1].numpy()
    got = FloatForward(*hf.read_tl(str(tmp_path / "f")), np.float64).last_logits(ids)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    code, out, err = _run([str(tmp_path / "f"), "--task", "max-of-k", "--vocab", "4", "--k", "3", "--compare-float",
                           "--json"], capsys)
    d = json.loads(out)
    assert d["float_comparison"]["float64"]["disagreements"] == 0
    assert d["float_comparison"]["float64"]["correct"] == d["correct"] == int((ref.argmax(1) == ids.max(1)).sum())


# ------------------------------------------------------------------ by hand with numpy, and config.json

def hand_written(folder, rng, tied: bool = False, **change) -> tuple[dict, dict]:
    """A GPT-2 folder written with numpy alone (no torch): config.json + model.safetensors (float32)."""
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 3, "n_positions": 3,
           "n_embd": 4, "n_layer": 1, "n_head": 2, "n_inner": 6, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "scale_attn_weights": True, "tie_word_embeddings": tied}
    cfg.update(change)
    c = hf.config_from_dict(cfg)
    sd = {k: rng.standard_normal(s).astype(np.float32) + (1 if k.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
                                                          else 0) for k, s in hf.expected_shapes(c).items()}
    hf.write_folder(str(folder), cfg, sd)
    return cfg, sd


@pytest.mark.parametrize("writer", ["depthcert", "safetensors.numpy"])
def test_a_folder_written_with_numpy_is_read_without_torch(tmp_path, writer):
    """A folder written with numpy alone (depthcert's writer, or the safetensors package's numpy
    save_file): the reader imports no torch (checked in a fresh interpreter), and where transformers
    is importable, GPT2LMHeadModel.from_pretrained reads the same folder to the same float64 logits."""
    folder = tmp_path / "by-hand"
    cfg, sd = hand_written(folder, np.random.default_rng(1))
    if writer == "safetensors.numpy":
        st = pytest.importorskip("safetensors.numpy", reason="the safetensors package is not installed")
        os.remove(folder / "model.safetensors")
        st.save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    code = ("import sys; from depthcert.interop.huggingface import load_model; "
            f"m = load_model({str(folder)!r}); assert 'torch' not in sys.modules, 'torch imported'; print(m.kinds())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "softmax+causal+mlp+gelu_new+layernorm+constant-row"
    torch, transformers = _transformers()
    from depthcert.interop.float_forward import FloatForward

    live = transformers.GPT2LMHeadModel.from_pretrained(str(folder), dtype=torch.float64).eval()
    task = make_task("max-of-k", vocab=3, k=3)
    ids = task.decode(np.arange(task.size))[0]
    with torch.no_grad():
        ref = live(torch.tensor(ids)).logits[:, -1].numpy()
    np.testing.assert_allclose(FloatForward(*hf.read_tl(str(folder)), np.float64).last_logits(ids), ref,
                               rtol=1e-12, atol=1e-12)


def test_the_live_object_is_the_folder(tmp_path):
    """model_from_gpt2(live) and load_model(save_pretrained folder) are the same exact model."""
    model = random_gpt2(np.random.default_rng(2), vocab=3, n_pos=3, tie_word_embeddings=False)
    model.save_pretrained(tmp_path / "same")
    a, b = hf.model_from_gpt2(model), hf.load_model(str(tmp_path / "same"))
    assert a.layers == b.layers and (a.W_O == b.W_O).all() and a.norm_final == b.norm_final


def test_every_gpt2config_field_is_read_refused_or_without_effect():
    """Every key of the installed transformers' GPT2Config().to_dict() (a new release's new field
    is noticed here), and each key docs/trained-models.md's GPT-2 table names is one of the three."""
    _, transformers = _transformers()
    fields = set(transformers.GPT2Config().to_dict())
    known = hf.READ_FIELDS | set(hf.REFUSED) | hf.NO_EFFECT
    assert fields <= known, sorted(fields - known)
    assert not (hf.READ_FIELDS & set(hf.REFUSED)) and not (hf.READ_FIELDS & hf.NO_EFFECT)
    assert not (set(hf.REFUSED) & hf.NO_EFFECT)
    doc = open(os.path.join(ROOT, "docs", "trained-models.md")).read()
    table = doc.split("### GPT-2 config.json: every field")[1].split("\n\n")[2]
    named = []
    for line in table.splitlines()[2:]:
        named += re.findall(r"`(\w+)`", line.split(" | ")[0])
    assert len(named) == len(set(named)) and set(named) == known, (sorted(known - set(named)), sorted(set(named) - known))


@pytest.mark.parametrize("change,needle", [
    ({"scale_attn_by_inverse_layer_idx": 1}, "scale_attn_by_inverse_layer_idx must be true or false, got 1"),
    ({"add_cross_attention": True}, "add_cross_attention=true is refused"),
    ({"pruned_heads": {"0": [1]}}, "pruned_heads={\"0\": [1]} is refused"),
    ({"is_encoder_decoder": True}, "is_encoder_decoder=true is refused"),
    ({"activation_function": "quick_gelu"}, "activation_function \"quick_gelu\" is not supported"),
    ({"model_type": "falcon"}, "model_type \"falcon\" is not supported"),
    ({"architectures": ["GPT2ForSequenceClassification"]}, "architectures [\"GPT2ForSequenceClassification\"]"),
    ({"layer_norm_epsilon": 0}, "layer_norm_epsilon must be a positive finite number, got 0"),
    ({"n_head": 3}, "n_embd 4 is not a multiple of n_head 3"),
    ({"scale_attn_weights": "yes"}, "scale_attn_weights must be true or false, got \"yes\""),
    ({"n_inner": 7}, "transformer.h.0.mlp.c_fc.weight has shape (4, 6), expected (4, 7) from config.json"),
    ({"tie_word_embeddings": False}, "lacks lm_head.weight (tie_word_embeddings is false)"),
])
def test_a_field_that_changes_the_model_is_refused_in_one_line(tmp_path, capsys, change, needle):
    folder = tmp_path / "gpt2"
    cfg, _ = hand_written(folder, np.random.default_rng(3), tied=True)
    with open(folder / "config.json", "w") as fh:
        json.dump({**cfg, **change}, fh)
    code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "3", "--k", "3"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_unknown_keys_are_named_in_one_warning_line_and_strict_config_refuses_them(tmp_path, capsys):
    folder = tmp_path / "gpt2"
    cfg, _ = hand_written(folder, np.random.default_rng(4))
    argv = [str(folder), "--task", "max-of-k", "--vocab", "3", "--k", "3", "--json"]
    code, out, err = _run(argv, capsys)
    assert err == "" and json.loads(out)["ignored_config_keys"] == []
    with open(folder / "config.json", "w") as fh:  # a typo (layer_norm_eps) and a made-up key
        json.dump({**cfg, "layer_norm_eps": 0.1, "use_cache": True, "my_note": "x"}, fh)
    code2, out, err = _run(argv, capsys)
    assert code2 == code and err.count("\n") == 1 and err.startswith("warning: ignored Hugging Face GPT-2 config keys")
    assert "layer_norm_eps, my_note" in err and "use_cache" not in err
    assert json.loads(out)["ignored_config_keys"] == ["layer_norm_eps", "my_note"]
    code, out, err = _run(argv + ["--strict-config"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--strict-config" in err and "layer_norm_eps" in err


@pytest.mark.parametrize("damage,needle", [
    ("no-config", "a folder without config.json"), ("no-weights", "no model.safetensors"),
    ("bad-json", "config.json: not JSON"), ("nan", "has a NaN or infinite entry"),
    ("extra", "unexpected entry 'transformer.h.0.attn.q_attn.weight'"),
    ("untied-lm-head", "lm_head.weight differs from transformer.wte.weight"), ("config-flag", "--config applies"),
    ("sharded", "a sharded checkpoint (*.index.json) is not supported"), ("int", "is not a float tensor")])
def test_a_damaged_folder_is_refused_in_one_line(tmp_path, capsys, damage, needle):
    from depthcert.interop import checkpoint_files as cf

    folder = tmp_path / "gpt2"
    cfg, sd = hand_written(folder, np.random.default_rng(6), tied=True)
    extra = []
    if damage == "no-config":
        os.remove(folder / "config.json")
    elif damage == "no-weights":
        os.remove(folder / "model.safetensors")
    elif damage == "bad-json":
        (folder / "config.json").write_text("{")
    elif damage == "sharded":
        os.rename(folder / "model.safetensors", folder / "model-00001-of-00001.safetensors")
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    elif damage in ("nan", "extra", "untied-lm-head", "int"):
        sd = dict(sd)
        if damage == "int":
            sd["transformer.wpe.weight"] = np.zeros((3, 4), np.int64)
        elif damage == "nan":
            sd["transformer.h.0.ln_1.bias"] = sd["transformer.h.0.ln_1.bias"].copy()
            sd["transformer.h.0.ln_1.bias"][0] = np.nan
        elif damage == "extra":
            sd["transformer.h.0.attn.q_attn.weight"] = np.zeros((4, 4), np.float32)
        else:
            sd["lm_head.weight"] = sd["transformer.wte.weight"] + 1
        cf.write_safetensors(str(folder / "model.safetensors"), sd)
    else:
        extra = ["--config", str(folder / "config.json")]
    code, out, err = _run([str(folder), "--task", "max-of-k", "--vocab", "3", "--k", "3"] + extra, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_a_tied_lm_head_stored_equal_to_wte_and_old_mask_buffers_are_read(tmp_path):
    """Older transformers wrote lm_head.weight (equal to wte) and the attention mask buffers
    (attn.bias, attn.masked_bias): the same model as without them."""
    from depthcert.interop import checkpoint_files as cf

    folder = tmp_path / "old"
    cfg, sd = hand_written(folder, np.random.default_rng(7), tied=True)
    plain = hf.load_model(str(folder))
    sd = {**sd, "lm_head.weight": sd["transformer.wte.weight"],
          "transformer.h.0.attn.bias": np.tril(np.ones((3, 3), np.float32))[None, None],
          "transformer.h.0.attn.masked_bias": np.array(-1e4, np.float32)}
    cf.write_safetensors(str(folder / "model.safetensors"), sd)
    old = hf.load_model(str(folder))
    assert old.layers == plain.layers and (old.W_O == plain.W_O).all()


def test_a_pytorch_model_bin_folder_is_read_as_the_safetensors_one(tmp_path):
    """save_pretrained(safe_serialization=False) wrote pytorch_model.bin (read with torch,
    weights_only=True): the same exact model as the safetensors folder."""
    torch, _ = _transformers()
    cfg, sd = hand_written(tmp_path / "st", np.random.default_rng(10))
    os.makedirs(tmp_path / "bin")
    (tmp_path / "bin" / "config.json").write_text(json.dumps(cfg))
    torch.save({k: torch.from_numpy(v) for k, v in sd.items()}, tmp_path / "bin" / "pytorch_model.bin")
    a, b = hf.load_model(str(tmp_path / "st")), hf.load_model(str(tmp_path / "bin"))
    assert a.layers == b.layers and (a.W_O == b.W_O).all()


def test_every_position_is_read_when_the_dataset_labels_every_position(tmp_path, capsys):
    """A dataset labelling every position: GPT-2 computes logits at each, and the folder is read
    there.  Sequence 0 is labelled with transformers' own argmax at each position (correct unless a
    logit ties), sequence 1 with labels that differ from it at position 0 (wrong)."""
    torch, transformers = _transformers()
    folder = tmp_path / "gpt2"
    hand_written(folder, np.random.default_rng(9))
    seqs = [["0", "1", "2"], ["2", "2", "1"]]
    live = transformers.GPT2LMHeadModel.from_pretrained(str(folder), dtype=torch.float64).eval()
    with torch.no_grad():
        top = live(torch.tensor([[int(t) for t in s] for s in seqs])).logits.numpy().argmax(-1)
    labels = [[str(int(t)) for t in top[0]], [str((int(top[1][0]) + 1) % 3)] + [str(int(t)) for t in top[1][1:]]]
    data = {"format": "depthcert.dataset", "version": 2, "sequences": seqs, "labels": labels}
    (tmp_path / "d.json").write_text(json.dumps(data))
    code, out, err = _run([str(folder), "--dataset", str(tmp_path / "d.json"), "--json"], capsys)
    d = json.loads(out)
    assert code == 1 and d["points"] == 2 and d["undecided_points"] == 0, err
    assert d["correct"] == 1 and d["first_wrong"] == [1]


# ------------------------------------------------------------------ the documented example

def _doc_section() -> str:
    doc = open(os.path.join(ROOT, "docs", "trained-models.md")).read()
    return doc.split("## GPT-2 (Hugging Face) in")[1].split("\n## ")[0]


def test_documented_example(tmp_path):
    """docs/trained-models.md's GPT-2 example: the Python block run as written (in a temporary
    folder), then each `$ verify-model` line of the output block below it prints what the block says
    (times masked)."""
    _transformers()
    section = _doc_section()
    code = section.split("```python\n")[1].split("```")[0]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    block = section.split("<!-- test: tests/test_huggingface_gpt2.py::test_documented_example -->\n```\n")[1]
    block = block.split("```")[0].splitlines()
    cmds = [(i, line[2:]) for i, line in enumerate(block) if line.startswith("$ ")]
    from cli_in_process import run_command

    for n, (i, cmd) in enumerate(cmds):
        end = cmds[n + 1][0] if n + 1 < len(cmds) else len(block)
        expected = block[i + 1:end]
        want_code = 0
        if expected and re.fullmatch(r"\(exit \d+\)", expected[-1]):
            want_code, expected = int(expected[-1][6:-1]), expected[:-1]
        got_code, out, err = run_command(shlex.split(cmd), cwd=str(tmp_path))
        mask = lambda t: re.sub(r"\d+\.\d+ s", "<t> s", t)  # noqa: E731
        assert got_code == want_code, (cmd, got_code, err)
        assert mask(out.rstrip("\n")) == mask("\n".join(expected)), f"`{cmd}` prints\n{out}"
