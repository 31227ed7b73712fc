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
    assert verify_model_main([str(path), "--task", "max-of-k", "--vocab", "2", "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    oracle = TLOracle(cfg, sd)
    truth = [oracle.margin(list(s), max(s)) > 0 for s in ((0, 0), (0, 1), (1, 0), (1, 1))]
    assert out["undecided_points"] == 0
    assert out["correct"] == sum(truth) and out["wrong"] == 4 - sum(truth)
