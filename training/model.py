"""The verifier's attention-only transformer (checkers/model.py) as a PyTorch module.

    H0 = [one-hot tokens (task vocab order); one-hot positions; zeros up to d']
    H  <- H + (1/m) sum_i W_Vi H sigma(H^T W_QKi H)     entry (j, k): key j, query k
    logits = W_O h_last

sigma is ReLU (the paper's model) or, as an option, a softmax over the keys j.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch
from torch import nn

from depthcert.checkers.errors import BadInput

ATTENTIONS = ("relu", "softmax")
QK_INITS = ("uniform", "normal", "zero", "construction", "parsing")
V_INITS = ("ones", "identity", "normal", "zero")
O_INITS = ("uniform", "normal", "zero")


@dataclass(frozen=True)
class ModelShape:
    """Sizes of a model: vocabulary V, positions n, width d' >= V + n, heads per layer, classes C."""

    vocab_size: int
    max_length: int
    dim: int
    heads: tuple[int, ...]
    n_classes: int
    attention: str = "relu"
    outputs: str = "last"  # "last" (the paper: classifier on the last column) or "all" (every column)
    causal: bool = False  # query k sees keys j <= k only (masked scores: 0 for relu, -inf for softmax)

    def __post_init__(self):
        if self.outputs not in ("last", "all"):
            raise BadInput(f"outputs must be \"last\" or \"all\", got {self.outputs!r}")
        if self.dim < self.vocab_size + self.max_length:
            raise BadInput(
                f"--width {self.dim} is smaller than vocabulary ({self.vocab_size}) + positions ({self.max_length})"
            )
        if not self.heads or any(h < 1 for h in self.heads):
            raise BadInput("every layer needs at least one head")
        if self.attention not in ATTENTIONS:
            raise BadInput(f"unknown --attention {self.attention!r}; known: {', '.join(ATTENTIONS)}")


class AttentionOnly(nn.Module):
    """Attention-only transformer of paper eq. 1-3 (float64 or float32 weights)."""

    def __init__(self, shape: ModelShape, dtype=torch.float32):
        super().__init__()
        self.shape = shape
        d = shape.dim
        self.W_QK = nn.ParameterList([nn.Parameter(torch.zeros(m, d, d, dtype=dtype)) for m in shape.heads])
        self.W_V = nn.ParameterList([nn.Parameter(torch.zeros(m, d, d, dtype=dtype)) for m in shape.heads])
        self.W_O = nn.Parameter(torch.zeros(shape.n_classes, d, dtype=dtype))

    @property
    def dtype(self):
        return self.W_O.dtype

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """H0 of shape (B, d', n) for token ids (B, n)."""
        B, n = ids.shape
        if n > self.shape.max_length:
            raise BadInput(f"sequence length {n} exceeds the model's {self.shape.max_length} positions")
        H = torch.zeros(B, self.shape.dim, n, dtype=self.dtype)
        H.scatter_(1, ids.unsqueeze(1), 1.0)
        pos = torch.arange(n)
        H[:, self.shape.vocab_size + pos, pos] = 1.0
        return H

    def scores(self, H: torch.Tensor, layer: int) -> torch.Tensor:
        """sigma(H^T W_QK H) per head: (B, m, n_keys, n_queries)."""
        Q = torch.matmul(H.transpose(1, 2).unsqueeze(1), self.W_QK[layer])  # (B, m, n, d') = H^T W_QK
        S = torch.matmul(Q, H.unsqueeze(1))  # (B, m, n_keys, n_queries)
        if self.shape.causal:
            n = S.shape[-1]
            visible = torch.ones(n, n, dtype=torch.bool).triu()  # key j <= query k
            S = S.masked_fill(~visible, 0.0 if self.shape.attention == "relu" else float("-inf"))
        if self.shape.attention == "relu":
            return torch.relu(S)
        return torch.softmax(S, dim=2)

    def forward(self, ids: torch.Tensor, return_attention: bool = False):
        """Logits (B, C); with return_attention also the list of per-layer attention maps."""
        H = self.embed(ids)
        maps = []
        for li in range(len(self.shape.heads)):
            S = self.scores(H, li)
            VH = torch.matmul(self.W_V[li], H.unsqueeze(1))  # (B, m, d', n)
            H = H + torch.matmul(VH, S).mean(dim=1)
            if return_attention:
                maps.append(S.detach())
        if self.shape.outputs == "all":
            logits = H.transpose(1, 2) @ self.W_O.T  # (B, n, C)
        else:
            logits = H[:, :, -1] @ self.W_O.T
        return (logits, maps) if return_attention else logits


def initialize(
    model: AttentionOnly,
    generator: torch.Generator,
    qk: str = "normal",
    v: str = "identity",
    out: str = "normal",
    scale: float = 0.02,
    first_qk: np.ndarray | None = None,
) -> None:
    """Paper appendix 9.1 choices: W_QK uniform [0,1) (or normal*scale, zero, or layer 1 from a
    construction), W_V all ones (or identity, normal*scale, zero), W_O uniform [0,1) (or normal*scale)."""
    if qk not in QK_INITS:
        raise BadInput(f"unknown --qk-init {qk!r}; known: {', '.join(QK_INITS)}")
    if v not in V_INITS:
        raise BadInput(f"unknown --v-init {v!r}; known: {', '.join(V_INITS)}")
    if out not in O_INITS:
        raise BadInput(f"unknown --out-init {out!r}; known: {', '.join(O_INITS)}")
    if qk in ("construction", "parsing") and first_qk is None:
        raise BadInput(f"--qk-init {qk} needs a construction for this task")

    def fill(p: torch.Tensor, how: str):
        if how == "uniform":
            p.copy_(torch.rand(p.shape, generator=generator, dtype=p.dtype))
        elif how == "normal":
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * scale)
        elif how == "ones":
            p.fill_(1.0)
        elif how == "identity":
            p.copy_(torch.eye(p.shape[-1], dtype=p.dtype).expand_as(p))
        else:
            p.zero_()

    with torch.no_grad():
        for li, (Wqk, Wv) in enumerate(zip(model.W_QK, model.W_V)):
            if qk in ("construction", "parsing"):
                # layer 1 from the construction (every head); deeper layers small random
                fill(Wqk, "normal")
                if li == 0:
                    Wqk.copy_(torch.as_tensor(first_qk, dtype=Wqk.dtype).expand_as(Wqk))
            else:
                fill(Wqk, qk)
            fill(Wv, v)
        fill(model.W_O, out)


def _to_float(M) -> np.ndarray:
    return np.array([[float(Fraction(x)) for x in row] for row in np.asarray(M)], dtype=np.float64)


def construction_qk(exact_model, dim: int) -> np.ndarray:
    """Layer-1 head-1 W_QK of an exact construction as floats, zero-padded (or cut) to dim.

    The token and position blocks keep their places because the trainer uses the same vocabulary
    order and positions; only scratch rows beyond the vocabulary and positions are cut or padded.
    """
    W = _to_float(exact_model.layers[0][0].W_QK)
    d = W.shape[0]
    out = np.zeros((dim, dim))
    k = min(d, dim)
    out[:k, :k] = W[:k, :k]
    return out


def from_exact(exact_model, attention: str = "relu", dtype=torch.float64) -> AttentionOnly:
    """A torch copy of a `checkers.model.Model` (Fraction weights converted to floats)."""
    shape = ModelShape(
        vocab_size=len(exact_model.vocab),
        max_length=exact_model.max_length,
        dim=exact_model.dim,
        heads=exact_model.heads,
        n_classes=len(exact_model.classes),
        attention=attention,
    )
    tm = AttentionOnly(shape, dtype=dtype)
    with torch.no_grad():
        for li, layer in enumerate(exact_model.layers):
            for hi, head in enumerate(layer):
                tm.W_QK[li][hi].copy_(torch.as_tensor(_to_float(head.W_QK)))
                tm.W_V[li][hi].copy_(torch.as_tensor(_to_float(head.W_V)))
        tm.W_O.copy_(torch.as_tensor(_to_float(exact_model.W_O)))
    return tm


def parsing_qk(task, dim: int, mask: float = 2.0) -> np.ndarray:
    """Float layer-1 W_QK of the paper's parsing step (sections 14.2 and 15), for tm and ictm.

    Score(key j, query k) = [token_j == token_k, a word token] - mask * [j, k in different
    question blocks], so after ReLU each question position attends to the positions of its own
    question that hold the same token (the template's equality pattern).  This is only an
    initialization for training (paper appendix 9.1); it is not a verified construction.
    """
    V, n = len(task.vocab), task.length
    W = np.zeros((dim, dim))
    words = getattr(task, "tokens", None)
    if task.name not in ("tm", "ictm") or words is None:
        raise BadInput(f"--qk-init parsing applies to tm and ictm, not {task.name}")
    for t in range(len(words)):
        W[t, t] = 1.0
    block = np.full(n, -1)
    if task.name == "tm":
        block[: task.l] = 0
    else:
        step = task.l + 2
        for i in range(task.k + 1):
            block[i * step : i * step + task.l] = i
    for j in range(n):
        for k in range(n):
            if block[j] < 0 or block[k] < 0 or block[j] != block[k]:
                W[V + j, V + k] = -mask
    return W
