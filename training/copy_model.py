"""A standard softmax transformer (GPT-style, pre-LayerNorm, MLP) for the copy task, in PyTorch.

    h_0   = E[token] + P[position]                      (learned token and position embeddings)
    h    <- h + MHA(LN(h))      causal softmax attention, H heads of size d / H, output W_o
    h    <- h + MLP(LN(h))      d -> 4d -> d, GELU
    logits = W_out LN(h)        at every position (the labelled ones are scored)

Every head has a gate (a buffer, 1 by default): `ablate(layer, head)` sets it to 0, which
removes exactly that head's contribution to W_o (the per-head ablation of the redundancy study).
This is *not* depthcert's model class: LayerNorm divides by a square root of the inputs'
variance and GELU is transcendental; depthcert's exact checker supports neither, so trained
models of this class are only OBSERVED (training/copy_exact.py has the exact construction).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from depthcert.checkers.errors import BadInput


@dataclass(frozen=True)
class CopyShape:
    vocab_size: int
    n_classes: int
    seq_len: int
    width: int = 64
    layers: int = 2
    heads: int = 4
    mlp_ratio: int = 4

    def __post_init__(self):
        for name in ("width", "layers", "heads", "mlp_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BadInput(f"--{name.replace('_', '-')} must be an integer >= 1, got {v!r}")
        if self.width % self.heads:
            raise BadInput(f"--width {self.width} is not a multiple of --heads {self.heads}")


class Block(nn.Module):
    def __init__(self, s: CopyShape):
        super().__init__()
        d, h = s.width, s.heads
        self.h, self.dk = h, d // h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, s.mlp_ratio * d), nn.GELU(), nn.Linear(s.mlp_ratio * d, d))
        self.register_buffer("gate", torch.ones(h))
        mask = torch.ones(s.seq_len, s.seq_len, dtype=torch.bool).tril()
        self.register_buffer("mask", mask, persistent=False)

    def attend(self, x: torch.Tensor, return_attention: bool = False):
        B, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(B, n, self.h, self.dk).transpose(1, 2) for t in (q, k, v))  # (B, h, n, dk)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dk)
        s = s.masked_fill(~self.mask[:n, :n], float("-inf"))
        a = torch.softmax(s, dim=-1)  # (B, h, n_query, n_key)
        o = (a @ v) * self.gate.view(1, -1, 1, 1)
        o = o.transpose(1, 2).reshape(B, n, d)
        return self.proj(o), (a if return_attention else None)

    def forward(self, x, return_attention: bool = False):
        o, a = self.attend(self.ln1(x), return_attention)
        x = x + o
        x = x + self.mlp(self.ln2(x))
        return x, a


class CopyTransformer(nn.Module):
    def __init__(self, shape: CopyShape):
        super().__init__()
        self.shape = shape
        d = shape.width
        self.tok = nn.Embedding(shape.vocab_size, d)
        self.pos = nn.Embedding(shape.seq_len, d)
        self.blocks = nn.ModuleList([Block(shape) for _ in range(shape.layers)])
        self.ln_f = nn.LayerNorm(d)
        self.out = nn.Linear(d, shape.n_classes)

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """GPT-2 style: normal(0, std) weights (residual projections scaled by 1/sqrt(2L)), zero biases."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    scale = std / math.sqrt(2 * self.shape.layers) if name.endswith(("proj.weight", "mlp.2.weight")) else std
                    p.copy_(torch.randn(p.shape, generator=generator) * scale)

    def forward(self, ids: torch.Tensor, return_attention: bool = False):
        B, n = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(n))
        maps = []
        for blk in self.blocks:
            x, a = blk(x, return_attention)
            maps.append(a)
        logits = self.out(self.ln_f(x))
        return (logits, maps) if return_attention else logits

    # -- per-head access ------------------------------------------------------------------------

    def head_grad_norms(self) -> list[list[float]]:
        """Per layer, per head: the L2 norm of the gradient of the head's own parameters (its rows
        of W_q, W_k, W_v and their biases, and its columns of W_o), the study's activity signal."""
        out = []
        for blk in self.blocks:
            d, dk = self.shape.width, blk.dk
            gw, gb, gp = blk.qkv.weight.grad, blk.qkv.bias.grad, blk.proj.weight.grad
            norms = []
            for h in range(blk.h):
                sq = 0.0
                for part in range(3):
                    rows = slice(part * d + h * dk, part * d + (h + 1) * dk)
                    sq += float(gw[rows].pow(2).sum()) + float(gb[rows].pow(2).sum())
                sq += float(gp[:, h * dk:(h + 1) * dk].pow(2).sum())
                norms.append(math.sqrt(sq))
            out.append(norms)
        return out

    def set_gate(self, layer: int, head: int, value: float) -> None:
        with torch.no_grad():
            self.blocks[layer].gate[head] = value

    def reset_gates(self) -> None:
        with torch.no_grad():
            for blk in self.blocks:
                blk.gate.fill_(1.0)
