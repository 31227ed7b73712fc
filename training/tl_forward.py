"""HookedTransformer's forward in plain torch, parameters named as its state dict (no transformer-lens).

The subset depthcert reads exactly (depthcert/interop/transformerlens.py): standard token and
position embeddings, softmax attention scaled by 1/sqrt(d_head) with an optional causal mask,
ReLU MLPs or attention-only blocks, no LayerNorm, unembedding with bias.  Used to train the
reference Max-of-K model and as the float32/float64 forward of the benchmarks; tests compare it
with transformer-lens's HookedTransformer when the `interop` extra is installed.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class _Box(nn.Module):
    pass


class TLTransformer(nn.Module):
    """state_dict() keys and shapes are HookedTransformer's: embed.W_E, pos_embed.W_pos,
    blocks.{l}.attn.W_Q/W_K/W_V/W_O/b_Q/b_K/b_V/b_O, blocks.{l}.mlp.W_in/b_in/W_out/b_out, unembed.W_U/b_U."""

    def __init__(self, cfg: dict, dtype=torch.float32):
        super().__init__()
        self.cfg = dict(cfg)
        c = self.cfg
        dm, H, dh, V = c["d_model"], c["n_heads"], c["d_head"], c["d_vocab"]
        Vout = c.get("d_vocab_out", -1)
        Vout = V if Vout in (None, -1) else Vout
        z = lambda *s: nn.Parameter(torch.zeros(*s, dtype=dtype))  # noqa: E731
        self.embed, self.pos_embed, self.unembed = _Box(), _Box(), _Box()
        self.embed.W_E = z(V, dm)
        self.pos_embed.W_pos = z(c["n_ctx"], dm)
        self.blocks = nn.ModuleList()
        for _ in range(c["n_layers"]):
            b = _Box()
            b.attn = _Box()
            for w in ("W_Q", "W_K", "W_V"):
                setattr(b.attn, w, z(H, dm, dh))
            for w in ("b_Q", "b_K", "b_V"):
                setattr(b.attn, w, z(H, dh))
            b.attn.W_O = z(H, dh, dm)
            b.attn.b_O = z(dm)
            if not c.get("attn_only", False):
                b.mlp = _Box()
                b.mlp.W_in, b.mlp.b_in = z(dm, c["d_mlp"]), z(c["d_mlp"])
                b.mlp.W_out, b.mlp.b_out = z(c["d_mlp"], dm), z(dm)
            self.blocks.append(b)
        self.unembed.W_U = z(dm, Vout)
        self.unembed.b_U = z(Vout)

    def init_weights(self, generator: torch.Generator) -> None:
        """HookedTransformer's "gpt2" init: weights N(0, 0.8/sqrt(d_model)), biases 0."""
        std = 0.8 / math.sqrt(self.cfg["d_model"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.split(".")[-1].startswith("W_"):
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)
                else:
                    p.zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, n) token ids -> (B, n, d_vocab_out) logits."""
        n = tokens.shape[1]
        x = self.embed.W_E[tokens] + self.pos_embed.W_pos[:n][None]
        causal = self.cfg.get("attention_dir", "causal") == "causal"
        scale = math.sqrt(self.cfg["d_head"]) if self.cfg.get("use_attn_scale", True) else 1.0
        for b in self.blocks:
            a = b.attn
            q = torch.einsum("bpm,hmd->bphd", x, a.W_Q) + a.b_Q
            k = torch.einsum("bpm,hmd->bphd", x, a.W_K) + a.b_K
            v = torch.einsum("bpm,hmd->bphd", x, a.W_V) + a.b_V
            s = torch.einsum("bqhd,bkhd->bhqk", q, k) / scale
            if causal:
                mask = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
                s = s.masked_fill(mask, float("-inf"))
            pattern = s.softmax(dim=-1)
            z = torch.einsum("bhqk,bkhd->bqhd", pattern, v)
            x = x + torch.einsum("bqhd,hdm->bqm", z, a.W_O) + a.b_O
            if hasattr(b, "mlp"):
                m = b.mlp
                x = x + torch.relu(x @ m.W_in + m.b_in) @ m.W_out + m.b_out
        return x @ self.unembed.W_U + self.unembed.b_U
