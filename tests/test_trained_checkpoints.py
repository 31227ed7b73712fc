"""The shipped grokked modular-addition checkpoints and the LayerNorm induction checkpoint:
their configs are what the training scripts write, the training forwards are TransformerLens's,
and verify-model decides them (a slice of each dataset here; docs/trained-models.md has the
whole runs), with every decision checked against an independent float64 forward wherever the
float margin is clear of rounding."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from depthcert.checkers.accuracy import PointDecider
from depthcert.checkers.tasks import make_task
from depthcert.cli.verify_model import load_any_model
from depthcert.interop.float_forward import FloatForward
from depthcert.interop.transformerlens import read_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CKPT = os.path.join(ROOT, "training", "checkpoints")
GROK = {kind: os.path.join(CKPT, f"grokking_p113_{kind}.safetensors") for kind in ("before", "after")}
INDUCTION = os.path.join(CKPT, "induction_v5_n8_ln.safetensors")
ARCHITECTURE = ("n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx", "act_fn",
                "attn_only", "normalization_type", "attention_dir", "positional_embedding_type", "use_attn_scale")


def _float_margins(path, task, lo, hi):
    """float64 margins (label logit minus the best other) of points lo..hi-1 by the numpy forward."""
    fwd = FloatForward(*read_checkpoint(path), np.float64)
    ids, labels = task.decode(np.arange(lo, hi))
    lg = fwd.last_logits(ids)
    rows = np.arange(len(ids))
    own = lg[rows, labels].copy()
    lg[rows, labels] = -np.inf
    return own - lg.max(axis=1)


def _check_slice(path, task, lo, hi):
    """verify-model's decisions of points lo..hi-1 against the float64 forward: where the float
    margin is farther than 1e-6 from 0 the decision must be the same; the certified margin
    enclosure must hold the float minimum over the certified-correct points (to 1e-6)."""
    model = load_any_model(path, None, task)
    res = PointDecider(model, task).chunk(lo, hi, 4096)
    m = _float_margins(path, task, lo, hi)
    wrong = np.zeros(hi - lo, dtype=bool)
    wrong[np.asarray(res.wrong, dtype=np.int64) - lo] = True
    undecided = np.zeros(hi - lo, dtype=bool)
    undecided[np.asarray(res.undecided, dtype=np.int64) - lo] = True
    assert res.correct + len(res.wrong) + len(res.undecided) == hi - lo
    clear = np.abs(m) > 1e-6
    assert not (clear & undecided).any()
    assert not (clear & (m > 0) & wrong).any() and not (clear & (m < 0) & ~wrong & ~undecided).any()
    correct = ~wrong & ~undecided
    if correct.any():
        low, high = res.margin
        assert float(low) - 1e-6 <= m[correct].min() <= float(high) + 1e-6
    return res, m


@pytest.mark.parametrize("kind", ["before", "after"])
def test_grokking_checkpoint_is_what_the_script_writes(kind):
    from depthcert.training.grokking import CONFIG, FROZEN, config

    cfg, sd = read_checkpoint(GROK[kind])
    want = config(113, cfg["seed"], cfg["data_seed"], lr=cfg["lr"])
    assert {k: cfg.get(k) for k in ARCHITECTURE} == {k: CONFIG.get(k) for k in ARCHITECTURE}
    assert {k: cfg[k] for k in want} == want
    assert cfg["frac_train"] == 0.3 and cfg["weight_decay"] == 1.0 and cfg["betas"] == [0.9, 0.98]
    for name, arr in sd.items():
        if name.split(".")[-1] in FROZEN:
            assert not np.any(arr), name  # never trained
    assert os.path.getsize(GROK[kind]) < 2_000_000


def test_grokking_stats_recorded_tell_before_from_after():
    before, _ = read_checkpoint(GROK["before"])
    after, _ = read_checkpoint(GROK["after"])
    assert before["at_train_accuracy"] == 1.0 and before["at_test_accuracy"] < 0.5
    assert after["at_test_accuracy"] > 0.99 and after["at_step"] > before["at_step"]


def test_induction_checkpoint_is_what_the_script_writes():
    from depthcert.training.induction import CONFIG, config

    cfg, sd = read_checkpoint(INDUCTION)
    assert {k: cfg.get(k) for k in ARCHITECTURE} == {k: CONFIG.get(k) for k in ARCHITECTURE}
    assert cfg["normalization_type"] == "LN" and cfg["attn_only"] is True and cfg["eps"] == 1e-5
    want = config(cfg["d_vocab"], cfg["n_ctx"], cfg["seed"])
    assert {k: cfg[k] for k in want} == want
    assert {"blocks.0.ln1.w", "blocks.1.ln1.b", "ln_final.w", "ln_final.b"} <= set(sd)


def test_grokking_table_forward_is_the_full_forward():
    torch = pytest.importorskip("torch")
    from depthcert.training.grokking import last_logits
    from depthcert.training.tl_forward import TLTransformer

    cfg, sd = read_checkpoint(GROK["after"])
    model = TLTransformer(cfg, dtype=torch.float64)
    model.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    with torch.no_grad():  # random biases too: the table forward must carry them
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith("b_"):
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1), dtype=p.dtype))
        a, b = torch.arange(0, 113, 7), torch.arange(5, 118, 7) % 113
        full = model(torch.stack([a, b, torch.full_like(a, 113)], 1))[:, -1]
        fast = last_logits(model, a, b, 113)
    np.testing.assert_allclose(fast.numpy(), full.numpy(), rtol=1e-12, atol=1e-10)


def test_induction_forward_is_hooked_transformers():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformer_lens")
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from depthcert.training.induction import make_model

    cfg, sd = read_checkpoint(INDUCTION)
    keys = set(HookedTransformerConfig.__dataclass_fields__)
    ht = HookedTransformer(HookedTransformerConfig(**{k: v for k, v in cfg.items() if k in keys}))
    ht.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in sd.items()}, strict=False)
    ht = ht.double()
    ours = make_model(cfg, dtype=torch.float64)
    ours.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    task = make_task("induction", vocab=cfg["d_vocab"], n=cfg["n_ctx"])
    ids = torch.from_numpy(task.decode(np.arange(0, task.size, 997))[0])
    with torch.no_grad():
        want = ht(ids)[:, -1].numpy()
        got = ours(ids)[:, -1].numpy()
    # HookedTransformer.double() keeps part of its arithmetic at float32 precision (differences about
    # 5e-7 on logits near 10); a wrong LayerNorm placement or scale would differ by whole units
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(FloatForward(cfg, sd, np.float64).last_logits(ids.numpy()), got, rtol=1e-12, atol=1e-11)


@pytest.mark.parametrize("kind", ["before", "after"])
def test_grokking_slice_decided(kind):
    """Points a = 0..2 (339 of the 12,769) decided and checked against the float64 forward."""
    task = make_task("modular-addition", modulus=113)
    res, m = _check_slice(GROK[kind], task, 0, 3 * 113)
    if kind == "after":
        assert res.correct == 339  # grokked: every point of the slice (the whole run: all 12,769)
    else:
        assert res.correct < 200  # memorized: about the 30% training pairs and a few more


def test_induction_slice_decided():
    """The first 2,000 of the 122,880 induction points, against the float64 forward."""
    task = make_task("induction", vocab=5, n=8)
    res, _ = _check_slice(INDUCTION, task, 0, 2000)
    assert res.correct > 1800


def test_verify_model_compare_float_json():
    """The command with --compare-float --json (the induction model on its 960 sequences of length
    5): both dtypes, their counts add up, and each float count is the certified one up to its
    disagreements."""
    out = subprocess.run([sys.executable, "-m", "depthcert.cli.verify_model", INDUCTION, "--task", "induction",
                          "--vocab", "5", "--n", "5", "--compare-float", "--json"], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == (1 if json.loads(out.stdout)["verdict"] == "refuted" else 0), out.stderr
    d = json.loads(out.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    from depthcert.schema import output_schema

    jsonschema.validate(d, output_schema())
    assert d["points"] == 960 and d["correct"] + d["wrong"] + d["undecided_points"] == 960
    assert 0 < d["wrong"] < 960
    for name in ("float32", "float64"):
        f = d["float_comparison"][name]
        assert f["correct"] + f["wrong"] == 960
        assert f["disagreements"] == f["float_correct_certified_wrong"] + f["float_wrong_certified_correct"]
        assert f["correct"] - f["float_correct_certified_wrong"] + f["float_wrong_certified_correct"] \
            - f["undecided_float_correct"] == d["correct"]


def test_compare_float_refuses_what_it_cannot_run(tmp_path):
    """A depthcert weights file has no float forward here: exit 2, one line, before any run."""
    out = subprocess.run([sys.executable, "-m", "depthcert.cli.verify_model", "docs/examples/prev-token-softmax-1.json",
                          "--dataset", "docs/examples/prev-token-data.json", "--compare-float"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "--compare-float" in out.stderr


def test_compare_float_finds_a_float32_rounding(tmp_path):
    """A logit gap of 2^-23 on top of 1000: float32 rounds both logits to 1001 (a tie, wrong), the
    certified run proves the label ahead, float64 agrees with it.  --compare-float must report
    exactly that one float32 disagreement."""
    from depthcert.interop.transformerlens import write_checkpoint

    cfg = {"n_layers": 1, "d_model": 1, "n_heads": 1, "d_head": 1, "d_vocab": 2, "d_vocab_out": 2, "n_ctx": 1,
           "attn_only": True, "normalization_type": None, "act_fn": None, "attention_dir": "causal"}
    z = np.zeros
    sd = {"embed.W_E": np.array([[1000.0], [-1000.0]]), "pos_embed.W_pos": z((1, 1)),
          "blocks.0.attn.W_Q": z((1, 1, 1)), "blocks.0.attn.W_K": z((1, 1, 1)), "blocks.0.attn.W_V": z((1, 1, 1)),
          "blocks.0.attn.W_O": z((1, 1, 1)), "blocks.0.attn.b_Q": z((1, 1)), "blocks.0.attn.b_K": z((1, 1)),
          "blocks.0.attn.b_V": z((1, 1)), "blocks.0.attn.b_O": z(1),
          "unembed.W_U": np.array([[1.0, 1.0]]), "unembed.b_U": np.array([1.0, 1.0 - 2.0**-23])}
    path = str(tmp_path / "near-tie.safetensors")
    write_checkpoint(path, cfg, sd)
    out = subprocess.run([sys.executable, "-m", "depthcert.cli.verify_model", path, "--task", "max-of-k", "--vocab", "2",
                          "--k", "1", "--compare-float", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == (1 if json.loads(out.stdout)["verdict"] == "refuted" else 0), out.stderr
    d = json.loads(out.stdout)
    assert d["correct"] == 1 and d["first_wrong"] == [1]  # "0" certainly right (margin 2^-23), "1" wrong
    m = d["min_margin"]  # exact, or an enclosure of 2^-23
    assert m.get("exact") == "1/8388608" or float(m["lower"]) <= 2.0**-23 <= float(m["upper"])
    f32, f64 = d["float_comparison"]["float32"], d["float_comparison"]["float64"]
    assert f32["disagreements"] == f32["float_wrong_certified_correct"] == 1 and f32["correct"] == 0
    assert f32["first_disagreements"] == [{"point": 0, "certified": "correct", "float": "wrong"}]
    assert f64["disagreements"] == 0 and f64["correct"] == 1


def test_compare_float_maps_tokens_by_name(tmp_path):
    """A dataset over the tokens "2", "3", "10" of the Max-of-K checkpoint: the task's token ids
    (sorted names: "10" first) are not the model's rows; the float forward must read the rows the
    certified run reads (by name), so it agrees with the certified decision on every point."""
    import itertools

    toks = ["2", "3", "10"]
    seqs = [list(s) for s in itertools.product(toks, repeat=4)]
    data = {"format": "depthcert.dataset", "version": 1, "sequences": seqs,
            "labels": [max(s, key=int) for s in seqs]}
    path = tmp_path / "max-of-3-tokens.json"
    path.write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-m", "depthcert.cli.verify_model",
                          os.path.join(CKPT, "max_of_k_v64_k4.safetensors"), "--dataset", str(path),
                          "--compare-float", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == (1 if json.loads(out.stdout)["verdict"] == "refuted" else 0), out.stderr
    d = json.loads(out.stdout)
    assert d["points"] == 81 and d["correct"] > 60
    for name in ("float32", "float64"):
        f = d["float_comparison"][name]
        assert f["disagreements"] == 0 and f["correct"] == d["correct"], (name, f)
