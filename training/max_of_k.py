"""The reference Max-of-K model: a one-layer attention-only HookedTransformer trained on CPU.

Shapes as Gross et al. (NeurIPS 2024) state them: vocabulary 64, K = 4 positions, one layer, one
head, attention-only, no LayerNorm, d_model = d_head = 32, causal attention, read at the last
position; trained on 384,000 sequences of 4 tokens drawn uniformly (their count).  Optimizer
settings are ours (the paper's text does not fix them): AdamW, learning rate 1e-3, weight decay
0.1, batch 128, `epochs` passes over the same 384,000 sequences, seeded, one thread (bit-for-bit
reproducible on one machine).  The checkpoint is float32 safetensors with the TransformerLens
config in its metadata (depthcert.interop.transformerlens.read_checkpoint).

    python -m depthcert.cli.train_max_of_k --out training/checkpoints/max_of_k_v64_k4.safetensors

(the command lives in depthcert/cli/: training does not import the checkpoint writer of interop/)
"""
from __future__ import annotations

import sys

import numpy as np

CONFIG = {"n_layers": 1, "d_model": 32, "n_heads": 1, "d_head": 32, "d_vocab": 64, "d_vocab_out": 64, "n_ctx": 4,
          "attn_only": True, "normalization_type": None, "act_fn": None, "attention_dir": "causal",
          "positional_embedding_type": "standard", "use_attn_scale": True, "default_prepend_bos": False,
          "model_name": "max-of-k-v64-k4"}


def train(vocab: int = 64, k: int = 4, n_train: int = 384_000, epochs: int = 1, batch: int = 128, lr: float = 1e-3,
          weight_decay: float = 0.1, seed: int = 0, progress: bool = False):
    """(config dict, float32 state dict of numpy arrays, final training loss)."""
    import torch

    from depthcert.training.tl_forward import TLTransformer

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = dict(CONFIG, d_vocab=vocab, d_vocab_out=vocab, n_ctx=k, model_name=f"max-of-k-v{vocab}-k{k}", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    model = TLTransformer(cfg)
    model.init_weights(gen)
    data = torch.randint(0, vocab, (n_train, k), generator=gen)
    labels = data.max(dim=1).values
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss = None
    for epoch in range(epochs):
        order = torch.randperm(n_train, generator=gen)
        for step, lo in enumerate(range(0, n_train, batch)):
            idx = order[lo:lo + batch]
            logits = model(data[idx])[:, -1]
            loss = torch.nn.functional.cross_entropy(logits, labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if progress and step % 500 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", file=sys.stderr)
    state = {name: p.detach().numpy().astype(np.float32) for name, p in model.state_dict().items()}
    return cfg, state, float(loss.detach())
