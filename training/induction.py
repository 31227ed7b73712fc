"""An induction-head model: a two-layer attention-only HookedTransformer with LayerNorm, trained on
CPU on the task `induction` (checkers/tasks/induction.py: the last token occurred exactly once
before; predict the token after that occurrence).

Model: TransformerLens normalization_type "LN" (ln1 before each attention layer, ln_final before
the unembedding, eps 1e-5), attn_only, 2 layers of 2 heads, d_model 32, d_head 16, causal,
standard positions, read at the last position; vocabulary V = 5, n = 8 positions by default.
The two-layer circuit of Olsson et al. (2022): a previous-token head in layer 0 writes x_{k-1}
into position k, an induction head in layer 1 attends from the last token t to the position
whose previous token is t and copies its token.

Training: sequences drawn uniformly from the task's points (seeded random indices decoded by the
enumerator), cross-entropy at the last position, AdamW (learning rate 1e-3, weight decay 0.01),
batch 256, seeded, one thread (bit-for-bit reproducible on one machine).  The forward is
TransformerLens's (training/tl_forward.py plus its LayerNorm: x - mean, divided by
sqrt(mean of squares + eps), times w plus b); a test compares it with HookedTransformer.

    python -m depthcert.cli.train_induction --out training/checkpoints/induction_v5_n8_ln.safetensors

(the command lives in depthcert/cli/: training does not import the checkpoint writer of interop/)
"""
from __future__ import annotations

import math
import sys

import numpy as np

CONFIG = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_head": 16, "d_vocab": 5, "d_vocab_out": 5, "n_ctx": 8,
          "attn_only": True, "normalization_type": "LN", "eps": 1e-5, "act_fn": None, "attention_dir": "causal",
          "positional_embedding_type": "standard", "use_attn_scale": True, "default_prepend_bos": False,
          "model_name": "induction-v5-n8-ln"}


def layer_norm(x, w, b, eps: float):
    """TransformerLens's LayerNorm (normalization_type "LN")."""
    x = x - x.mean(-1, keepdim=True)
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w + b


def make_model(cfg: dict, dtype=None):
    """A TLTransformer with ln1 per block and ln_final (state dict names and shapes of
    HookedTransformer with normalization_type "LN", attn_only)."""
    import torch
    from torch import nn

    from depthcert.training.tl_forward import TLTransformer, _Box

    class LNAttentionOnly(TLTransformer):
        def __init__(self):
            super().__init__(cfg, dtype=dtype or torch.float32)
            dm = cfg["d_model"]
            for b in self.blocks:
                b.ln1 = _Box()
                b.ln1.w = nn.Parameter(torch.ones(dm, dtype=dtype or torch.float32))
                b.ln1.b = nn.Parameter(torch.zeros(dm, dtype=dtype or torch.float32))
            self.ln_final = _Box()
            self.ln_final.w = nn.Parameter(torch.ones(dm, dtype=dtype or torch.float32))
            self.ln_final.b = nn.Parameter(torch.zeros(dm, dtype=dtype or torch.float32))

        def init_weights(self, generator) -> None:
            super().init_weights(generator)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.endswith(".w") and ".ln" in "." + name:
                        p.fill_(1.0)

        def forward(self, tokens):
            n = tokens.shape[1]
            eps = self.cfg["eps"]
            x = self.embed.W_E[tokens] + self.pos_embed.W_pos[:n][None]
            scale = math.sqrt(self.cfg["d_head"]) if self.cfg.get("use_attn_scale", True) else 1.0
            mask = torch.ones(n, n, dtype=torch.bool).triu(1)
            for b in self.blocks:
                a = b.attn
                y = layer_norm(x, b.ln1.w, b.ln1.b, eps)
                q = torch.einsum("bpm,hmd->bphd", y, a.W_Q) + a.b_Q
                k = torch.einsum("bpm,hmd->bphd", y, a.W_K) + a.b_K
                v = torch.einsum("bpm,hmd->bphd", y, a.W_V) + a.b_V
                s = torch.einsum("bqhd,bkhd->bhqk", q, k) / scale
                if self.cfg.get("attention_dir", "causal") == "causal":
                    s = s.masked_fill(mask, float("-inf"))
                z = torch.einsum("bhqk,bkhd->bqhd", s.softmax(dim=-1), v)
                x = x + torch.einsum("bqhd,hdm->bqm", z, a.W_O) + a.b_O
            x = layer_norm(x, self.ln_final.w, self.ln_final.b, eps)
            return x @ self.unembed.W_U + self.unembed.b_U

    return LNAttentionOnly()


def config(vocab: int = 5, n: int = 8, seed: int = 0) -> dict:
    return dict(CONFIG, d_vocab=vocab, d_vocab_out=vocab, n_ctx=n, model_name=f"induction-v{vocab}-n{n}-ln", seed=seed)


def train(vocab: int = 5, n: int = 8, steps: int = 4000, batch: int = 256, lr: float = 1e-3,
          weight_decay: float = 0.01, seed: int = 0, progress: bool = False):
    """(config dict, float32 state dict of numpy arrays, stats: final batch loss and the accuracy on
    4096 random points of the task, a float estimate; verify-model decides every point)."""
    import torch

    from depthcert.checkers.tasks.induction import Induction

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    task = Induction(vocab, n)
    cfg = config(vocab, n, seed)
    gen = torch.Generator().manual_seed(seed)
    model = make_model(cfg)
    model.init_weights(gen)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def sample(count):
        idx = torch.randint(0, task.size, (count,), generator=gen).numpy()
        ids, labels = task.decode(idx)
        return torch.from_numpy(ids), torch.from_numpy(labels)

    loss = None
    for step in range(steps):
        ids, labels = sample(batch)
        loss = torch.nn.functional.cross_entropy(model(ids)[:, -1], labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress and step % 500 == 0:
            print(f"step {step} loss {loss.item():.4f}", file=sys.stderr, flush=True)
    ids, labels = sample(4096)
    with torch.no_grad():
        acc = float((model(ids)[:, -1].argmax(-1) == labels).double().mean())
    state = {name: p.detach().numpy().astype(np.float32).copy() for name, p in model.state_dict().items()}
    return cfg, state, {"final_loss": round(float(loss.detach()), 6), "sampled_accuracy": round(acc, 4)}
