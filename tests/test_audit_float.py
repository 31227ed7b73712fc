"""Red-team regressions at the float64 limits of verify-model's LayerNorm / RMSNorm / GELU paths.

Each test reproduces a finding of an independent audit (its own mpmath/Fraction evaluator; here
tests/tl_oracle.py, which imports nothing of depthcert, gives the true verdicts) and fails on the
code before its fix.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from depthcert.interop import transformerlens as tl

sys.path.insert(0, os.path.dirname(__file__))
from tl_oracle import TLOracle  # noqa: E402


def _state(cfg: dict, rng) -> dict:
    """A random state dict of a one-layer attention-only HookedTransformerConfig (float64)."""
    dm, H, dh, V, n, C = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["d_vocab"], cfg["n_ctx"], cfg["d_vocab_out"]
    shapes = {"embed.W_E": (V, dm), "pos_embed.W_pos": (n, dm), "unembed.W_U": (dm, C), "unembed.b_U": (C,),
              "blocks.0.attn.W_Q": (H, dm, dh), "blocks.0.attn.W_K": (H, dm, dh), "blocks.0.attn.W_V": (H, dm, dh),
              "blocks.0.attn.b_Q": (H, dh), "blocks.0.attn.b_K": (H, dh), "blocks.0.attn.b_V": (H, dh),
              "blocks.0.attn.W_O": (H, dh, dm), "blocks.0.attn.b_O": (dm,)}
    params = {"LN": ("w", "b"), "RMS": ("w",)}.get(cfg["normalization_type"], ())
    shapes.update({f"{m}.{w}": (dm,) for m in ("blocks.0.ln1", "ln_final") for w in params})
    return {k: rng.standard_normal(s) + (1.0 if k.endswith(".w") else 0.0) for k, s in shapes.items()}


@pytest.mark.parametrize("norm", ["LN", "LNPre", "RMS", "RMSPre"])
def test_a_variance_beyond_float64_is_decided_not_an_internal_error(tmp_path, capsys, norm):
    """Embeddings of 1e200 give a first-layer variance of about 1e400: the exact first-layer norm
    (normalize_exact) converted it with float() and the run ended in exit 4 (OverflowError); it now
    falls back to the interval normalization, and every verdict is the independent evaluator's."""
    from depthcert.cli.verify_model import verify_model_main

    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, d_vocab_out=2, n_ctx=2, attn_only=True,
               normalization_type=norm, eps=1e-5, final_rms=False, attention_dir="causal",
               positional_embedding_type="standard")
    sd = _state(cfg, np.random.default_rng(5))
    sd["embed.W_E"] *= 1e200
    path = tmp_path / "huge.safetensors"
    tl.write_checkpoint(str(path), cfg, sd, dtype=np.float64)
    assert verify_model_main([str(path), "--task", "max-of-k", "--vocab", "2", "--k", "2", "--json"]) in (0, 1)  # decided
    out = json.loads(capsys.readouterr().out)
    oracle = TLOracle(cfg, sd)
    truth = [oracle.margin(list(s), max(s)) > 0 for s in ((0, 0), (0, 1), (1, 0), (1, 1))]
    assert out["undecided_points"] == 0
    assert out["correct"] == sum(truth) and out["wrong"] == 4 - sum(truth)


def _symmetric_tie_checkpoint(rng, n_ctx: int = 3):
    """(cfg, sd) of a 1-layer LN + gelu model whose residual coordinates 0 and 1 are equal at every
    position (every weight symmetric under swapping them), read out as logit 0 = y_0, logit 1 = y_1:
    an exact tie at every point that no structural zero reveals (arb keeps a radius: undecided)."""
    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=3, d_vocab_out=2, n_ctx=n_ctx, d_mlp=3,
               attn_only=False, act_fn="gelu", normalization_type="LN", eps=1e-5, final_rms=False,
               attention_dir="causal", positional_embedding_type="standard")
    dm = 3
    sd = _state({**cfg}, rng)
    sd.update({"blocks.0.ln2.w": rng.standard_normal(dm) + 1, "blocks.0.ln2.b": rng.standard_normal(dm),
               "blocks.0.mlp.W_in": rng.standard_normal((dm, 3)), "blocks.0.mlp.b_in": rng.standard_normal(3),
               "blocks.0.mlp.W_out": rng.standard_normal((3, dm)), "blocks.0.mlp.b_out": rng.standard_normal(dm)})
    for key, a in sd.items():
        if key in ("embed.W_E", "pos_embed.W_pos"):
            a[:, 1] = a[:, 0]
        elif key.endswith((".w", ".b", "b_O", "b_out")):
            a[1] = a[0]
        elif key.endswith(("W_Q", "W_K", "W_V")):
            a[:, 1, :] = a[:, 0, :]
        elif key.endswith("W_O"):
            a[:, :, 1] = a[:, :, 0]
        elif key.endswith("W_in"):
            a[1, :] = a[0, :]
        elif key.endswith("W_out"):
            a[:, 1] = a[:, 0]
    sd["unembed.W_U"][:] = 0.0
    sd["unembed.W_U"][0, 0] = sd["unembed.W_U"][1, 1] = 1.0
    sd["unembed.b_U"][:] = 0.0
    return cfg, sd


def test_symmetric_ties_through_layernorm_and_gelu_are_never_correct():
    from depthcert.checkers.accuracy import decide_all
    from depthcert.checkers.tasks.dataset_file import DatasetTask

    cfg, sd = _symmetric_tie_checkpoint(np.random.default_rng(0))
    seqs = [["0", "1", "2"], ["2", "2", "2"], ["1", "0", "0"]]
    oracle = TLOracle(cfg, sd)
    assert all(abs(oracle.margin([int(t) for t in s], 0)) < 1e-40 for s in seqs)  # exact ties
    v = decide_all(tl.model_from_state_dict(cfg, sd), DatasetTask(seqs, ["0"] * 3))
    assert v.correct == 0 and len(v.undecided) + len(v.wrong) == 3


def test_the_time_limit_is_checked_before_every_point_decided_in_arb(monkeypatch):
    """--max-seconds was checked before each batch (8,192 points) only, so a batch of points that
    climb to the precision cap in arb (about 0.1 s each for this tiny model, far more for larger
    ones) ran on long past the limit.  With a clock that advances 1 s per reading, the limit
    passes between the batch check and the first point: no point may be decided after it."""
    from depthcert.checkers import accuracy
    from depthcert.checkers.errors import BadInput
    from depthcert.checkers.tasks.dataset_file import DatasetTask

    cfg, sd = _symmetric_tie_checkpoint(np.random.default_rng(0))
    seqs = [[str(a), str(b), str(c)] for a in range(3) for b in range(3) for c in range(3)]
    dec = accuracy.PointDecider(tl.model_from_state_dict(cfg, sd), DatasetTask(seqs, ["0"] * len(seqs)))
    clock = iter(range(1, 10**6))

    class FakeTime:
        @staticmethod
        def perf_counter():
            return float(next(clock))

    monkeypatch.setattr(accuracy, "time", FakeTime)
    calls = []
    decide = dec.decider.decide
    monkeypatch.setattr(dec.decider, "decide", lambda *a, **k: calls.append(1) or decide(*a, **k))
    dec._deadline = (FakeTime.perf_counter() + 1.5, 1, "deciding 27 points")  # what stop_after sets
    with pytest.raises(BadInput, match="ran past the limit"):
        dec.chunk(0, len(seqs))
    assert calls == []


@pytest.mark.parametrize("eps", [10**400, 2**1024 - 1])
def test_an_integer_eps_beyond_float64_is_bad_input(tmp_path, capsys, eps):
    """JSON allows an integer eps of any size; math.isfinite / float() of one beyond float64 raised
    OverflowError (exit 4).  It is bad input: exit 2, one line."""
    from depthcert.cli.verify_model import verify_model_main
    from depthcert.interop import checkpoint_files as cf

    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, d_vocab_out=2, n_ctx=2, attn_only=True,
               normalization_type="LN", eps=eps, attention_dir="causal", positional_embedding_type="standard")
    sd = _state({**cfg, "eps": 1e-5}, np.random.default_rng(1))
    path = tmp_path / "eps.safetensors"
    cf.write_safetensors(str(path), sd, {tl.CONFIG_KEY: json.dumps(cfg), "format": "pt"})
    assert verify_model_main([str(path), "--task", "max-of-k", "--vocab", "2", "--k", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "eps must be a positive finite number" in err and len(err.splitlines()) == 1 and len(err) < 200
    assert tl.config_from_dict({**cfg, "eps": int(np.finfo(np.float64).max)}).eps == np.finfo(np.float64).max


def _printed_enclosure(out: str):
    from fractions import Fraction

    line = next(x for x in out.splitlines() if x.startswith("min margin"))
    lo, hi = line.split("in [", 1)[1].split("]", 1)[0].split(", ")
    return Fraction(lo), Fraction(hi)


def test_the_printed_margin_enclosure_is_rounded_outward(capsys):
    """verify-model printed the enclosure's ends with float(...):.10g (round to nearest): the
    Max-of-K example's [0.151206217463..., 0.151206217464...] came out as the point
    [0.1512062175, 0.1512062175], which excludes the true margin.  Printed ends now contain it."""
    from depthcert.checkers.accuracy import decide_all
    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_model import load_any_model, verify_model_main

    ckpt = os.path.join(os.path.dirname(__file__), "..", "training", "checkpoints", "max_of_k_v64_k4.safetensors")
    assert verify_model_main([ckpt, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--show", "0"]) == 1  # refuted
    lo, hi = _printed_enclosure(capsys.readouterr().out)
    task = make_task("max-of-k", vocab=64, k=2)
    exact = decide_all(load_any_model(ckpt, None, task), task).margin
    assert lo <= exact[0] <= exact[1] <= hi


def test_a_margin_beyond_float64_is_printed_not_an_internal_error(tmp_path, capsys):
    """Weights of 1e300 give logits and margins of about 1e600 (arb decides them); the human
    output converted the enclosure with float() and ended in exit 4 after half the lines."""
    from depthcert.checkers.accuracy import decide_all
    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_model import verify_model_main

    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, d_vocab_out=2, n_ctx=2, attn_only=True,
               normalization_type=None, attention_dir="causal", positional_embedding_type="standard")
    sd = _state(cfg, np.random.default_rng(3))
    sd["unembed.W_U"] *= 1e300
    sd["embed.W_E"] *= 1e300
    path = tmp_path / "big.safetensors"
    tl.write_checkpoint(str(path), cfg, sd, dtype=np.float64)
    assert verify_model_main([str(path), "--task", "max-of-k", "--vocab", "2", "--k", "2", "--show", "0"]) in (0, 1)
    lo, hi = _printed_enclosure(capsys.readouterr().out)
    exact = decide_all(tl.model_from_state_dict(cfg, sd), make_task("max-of-k", vocab=2, k=2)).margin
    assert lo <= exact[0] <= exact[1] <= hi and exact[0] > 10**500


def test_robustness_does_not_claim_there_is_no_correct_point_when_balls_cannot_bound_them(tmp_path, monkeypatch,
                                                                                          capsys):
    """At weights of 1e300 the unperturbed weight-ball pass bounds no margin (exp of a ball of
    width ~1e580); --robustness then said "no correct point to break" beside 2 correct points,
    and printed "certified >= None"."""
    from depthcert.checkers.accuracy import decide_all
    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_construction import _print_robustness
    from depthcert.proofs import robustness

    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, d_vocab_out=2, n_ctx=2, attn_only=True,
               normalization_type=None, attention_dir="causal", positional_embedding_type="standard")
    sd = _state(cfg, np.random.default_rng(3))
    sd["unembed.W_U"] *= 1e300
    sd["embed.W_E"] *= 1e300
    task = make_task("max-of-k", vocab=2, k=2)
    model = tl.model_from_state_dict(cfg, sd, vocab=task.vocab, classes=task.classes)
    v = decide_all(model, task)
    assert v.correct == 2
    monkeypatch.setattr(robustness, "MAX_HALVINGS", 3)  # every halving fails alike; 3 keep the test fast
    r = robustness.model_linf_radius(model, task, v, {})
    assert r["certified_lower"] is None and r["note"] != "no correct point to break"
    _print_robustness({"linf_radius": r})
    assert "None" not in capsys.readouterr().out
