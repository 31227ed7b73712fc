"""The copy task (issue 16): data, the exact one-layer construction (no torch), and the trained
models (torch; skipped with a reason when the 'train' extra is not installed)."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.errors import BadInput
from depthcert.training.copy_exact import copy_construction, softmax_scale_needed, verify_copy
from depthcert.training.copy_task import IGNORE, SEP, CopyTask


def test_copy_points_and_labels():
    t = CopyTask(3, 4)
    ids, labels = t.all_points()
    assert ids.shape == (64, 6) and t.size == 64
    i = 27  # base-4 digits 1 2 3
    assert [t.vocab[x] for x in ids[i]] == ["t1", "t2", "t3", SEP, "t1", "t2"]
    assert labels[i].tolist() == [IGNORE, IGNORE, IGNORE, 1, 2, 3]
    ds = t.dataset()
    assert ds.size == 64


def test_noise_flips_inputs_only_at_the_rate():
    t = CopyTask(20, 10, noise=0.1)
    ids, labels, flip = t.sample(np.random.default_rng(0), 2000)
    clean = labels[:, 20:]
    noisy = ids[:, :20]
    assert ((noisy != clean) == flip).all()  # a flip always changes the token
    assert abs(flip.mean() - 0.1) < 0.01
    assert (ids[:, 21:] == clean[:, :-1]).all()  # the teacher-forced half is clean
    assert t.ceiling == pytest.approx(0.9)
    with pytest.raises(BadInput):
        CopyTask(4, 4, noise=1.0)
    with pytest.raises(BadInput):
        CopyTask(0, 4)


@pytest.mark.parametrize("attention,causal", [("relu", True), ("relu", False), ("hardmax", True)])
def test_exact_construction_verified_on_every_input(attention, causal):
    model, v = verify_copy(5, 3, attention, causal=causal)
    assert v.verdict == "verified"
    assert v.points_checked == v.points_total == 3 ** 5
    assert v.min_margin == 1
    assert model.n_layers == 1 and model.heads == (1,)
    kinds = model.kinds()
    assert "all-positions" in kinds and ("causal" in kinds) == causal


def test_exact_construction_softmax_threshold():
    """Softmax copies every input iff e^c > 2n - 2 (docstring); just above it verifies, below refutes."""
    n = 4  # 2n - 2 = 6, ln 6 = 1.79
    assert softmax_scale_needed(n) == Fraction(2)
    _, v = verify_copy(n, 3, "softmax")
    assert v.verdict == "verified"
    lo, hi = v.margin_enclosure
    e2 = float(np.exp(2))
    assert float(hi) - float(lo) < 1e-15  # a tight certified enclosure ...
    assert float(lo) == pytest.approx((e2 - 6) / (e2 + 7), rel=1e-12)  # ... of the closed form
    _, bad = verify_copy(n, 3, "softmax", scale=Fraction(7, 4))
    assert bad.verdict == "refuted"


def test_exact_construction_breaks_when_the_shift_is_wrong():
    """A sanity check that the checker would notice: read position i + 1 instead of i."""
    from depthcert import BlockMatrix, Head, Layer, Model, verify

    good = copy_construction(4, 3)
    lay, N, n = good.layout, 8, 4
    alpha = [[1 if (k >= n and j == k - n + 1) else 0 for k in range(N)] for j in range(N)]
    head = good.layers[0].heads[0]
    W_QK = BlockMatrix(lay, lay).set("position", "position", alpha).build()
    bad = Model(good.vocab, N, good.classes, lay, (Layer((Head(W_QK, head.W_V),), causal=True),), good.W_O,
                outputs="all")
    v = verify(bad, CopyTask(4, 3).dataset())
    assert v.verdict == "refuted" and v.counterexample.position >= n


# ---------------------------------------------------------------------------------------------- torch

torch_needed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None,
    reason="PyTorch is not installed: pip install -e '.[train]' (torch 2.13.0 CPU build, see README)")


@torch_needed
def test_transformer_smoke_and_redundancy_fields():
    from depthcert.training.copy_train import CopyConfig, train_copy

    cfg = CopyConfig(length=4, alphabet=5, noise=0.1, layers=2, heads=2, width=16, steps=6, eval_every=3,
                     eval_size=32)
    result, model = train_copy(cfg)
    assert [e.step for e in result.evals] == [3, 6]
    red = result.redundancy
    assert red["heads_total"] == 4 and len(red["grad_norms"]) == 2 and len(red["ablation_drops"][0]) == 2
    assert 0.0 <= red["ratio_grad"] <= 1.0 and 0.0 <= red["ratio_ablation"] <= 1.0
    json.dumps(result.to_json())
    again, _ = train_copy(cfg)
    assert again.evals == result.evals  # deterministic per seed


@torch_needed
def test_head_gate_zero_removes_exactly_that_head():
    """Ablating head h (gate 0) equals zeroing its columns of the output projection."""
    import torch

    from depthcert.training.copy_train import CopyConfig, build_copy_model
    from depthcert.training.train import seed_everything

    cfg = CopyConfig(length=4, alphabet=5, layers=1, heads=4, width=16)
    model = build_copy_model(cfg, seed_everything(1)).double()
    ids = torch.as_tensor(CopyTask(4, 5).sample(np.random.default_rng(0), 8)[0])
    model.set_gate(0, 2, 0.0)
    gated = model(ids)
    model.reset_gates()
    with torch.no_grad():
        model.blocks[0].proj.weight[:, 8:12] = 0.0
    np.testing.assert_allclose(gated.detach().numpy(), model(ids).detach().numpy(), rtol=0, atol=1e-12)


@torch_needed
def test_trained_attention_only_copy_model_is_decided_exactly(capsys):
    """`train copy --arch attention-only --exact-check`: the rounded trained weights, every input."""
    from depthcert.cli.train import train_main

    rc = train_main(["copy", "--length", "3", "--alphabet", "3", "--arch", "attention-only", "--layers", "1",
                     "--heads", "1", "--width", "16", "--steps", "150", "--lr", "0.01", "--exact-check", "12",
                     "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    chk = out["exact_check"]
    assert chk["points"] == 27 and chk["verdict"] in ("verified", "refuted")
    assert out["final"]["clean_acc"] == 1.0
    assert chk["verdict"] == "verified"  # this seed learns the copy within 150 steps


@torch_needed
def test_exact_check_refused_for_the_layernorm_transformer(capsys):
    from depthcert.cli.train import train_main

    assert train_main(["copy", "--length", "3", "--alphabet", "3", "--exact-check", "12", "--json"]) == 2
    assert "LayerNorm" in capsys.readouterr().err


@torch_needed
def test_reproduce_copy_quick_pipeline(tmp_path):
    pytest.importorskip("matplotlib")
    from depthcert.training.report import write_report
    from depthcert.training.reproduce_copy import run_copy

    data = run_copy(str(tmp_path), 4, None, False, quick=True)
    groups = {r["group"] for r in data["runs"]}
    assert groups == {"grid", "width", "clean", "exact"}
    assert all(c["verdict"] == "verified" for c in data["constructions"])
    for name in ("copy-accuracy.png", "copy-loss.png", "copy-redundancy.png"):
        assert (tmp_path / name).stat().st_size > 0
    doc = tmp_path / "experiments.md"
    write_report(str(tmp_path), str(doc))
    text = doc.read_text()
    assert "## The copy task" in text and "The exact copy construction" in text and "LayerNorm" in text
