"""The grokked modular-addition model (Nanda et al., "Progress measures for grokking via mechanistic
interpretability", ICLR 2023), trained on CPU with the published recipe.

Model: a one-layer HookedTransformer without LayerNorm: 4 heads, d_model 128, d_head 32, ReLU MLP
d_mlp 512, causal attention; input "a b =" (3 tokens; token p is "="; d_vocab p + 1, d_vocab_out
p), read out at the last position; label (a + b) mod p, p = 113.  The attention biases and the
unembedding bias stay at zero and are not trained (the paper's model has none; the TransformerLens
demo of the paper freezes them); the MLP biases are trained.  TransformerLens's "gpt2" init
(weights N(0, 0.8/sqrt(d_model)), training/tl_forward.py).

Recipe: 30% of the p^2 pairs are the training set (a seeded permutation), full batch, AdamW
(learning rate 1e-3, weight decay 1.0, betas (0.9, 0.98)), cross-entropy of the last position
in float64, seeded, one thread (bit-for-bit reproducible on one machine).

The forward is the model's own, computed in fewer operations: the query is the same for every
input (the last token is always "="), and positions 0 and 1 hold a and b, so keys, values and
their W_O images are tables of p rows per position; each input gathers its rows, takes the
softmax of 3 scores per head and runs the MLP and the unembedding at the last position only
(the only position read).  `test_training_grokking` checks it against the full forward of
training/tl_forward.py.  About 12x fewer operations than the full forward.

    python -m depthcert.cli.train_grokking --out-dir training/checkpoints

(the command lives in depthcert/cli/: training does not import the checkpoint writer of interop/)
"""
from __future__ import annotations

import math
import sys

import numpy as np

P = 113
CONFIG = {"n_layers": 1, "d_model": 128, "n_heads": 4, "d_head": 32, "d_mlp": 512, "d_vocab": P + 1,
          "d_vocab_out": P, "n_ctx": 3, "act_fn": "relu", "attn_only": False, "normalization_type": None,
          "attention_dir": "causal", "positional_embedding_type": "standard", "use_attn_scale": True,
          "default_prepend_bos": False, "model_name": "grokking-modadd-p113"}
FROZEN = ("b_Q", "b_K", "b_V", "b_O", "b_U")  # stay 0 (not trained)


def split(p: int = P, frac_train: float = 0.3, seed: int = 598) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) point indices i = a * p + b of the p^2 pairs (the task modular-addition's
    index order): a seeded permutation, the first floor(frac_train * p^2) train."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(p * p, generator=gen).numpy()
    n = int(frac_train * p * p)
    return np.sort(perm[:n]), np.sort(perm[n:])


def last_logits(model, a, b, p: int):
    """The logits at the last position of "a b =" for token tensors a, b (the table forward of
    the module docstring); `model` a TLTransformer with this module's config."""
    import torch

    c = model.cfg
    at, blk = model.blocks[0].attn, model.blocks[0]
    x_tok = model.embed.W_E[:p]  # (p, dm)
    x0 = x_tok + model.pos_embed.W_pos[0]
    x1 = x_tok + model.pos_embed.W_pos[1]
    x2 = model.embed.W_E[p] + model.pos_embed.W_pos[2]  # "=" at position 2: the query
    scale = math.sqrt(c["d_head"]) if c.get("use_attn_scale", True) else 1.0
    q = torch.einsum("m,hmd->hd", x2, at.W_Q) + at.b_Q  # (H, dh)

    def key_value(x):
        k = torch.einsum("...m,hmd->...hd", x, at.W_K) + at.b_K
        v = torch.einsum("...m,hmd->...hd", x, at.W_V) + at.b_V
        return (k * q).sum(-1) / scale, v  # scores (..., H), values (..., H, dh)

    s0, v0 = key_value(x0)  # (p, H), (p, H, dh)
    s1, v1 = key_value(x1)
    s2, v2 = key_value(x2)  # (H,), (H, dh)
    s = torch.stack([s0[a], s1[b], s2.expand(len(a), -1)], dim=-1)  # (B, H, 3)
    w = s.softmax(dim=-1)[..., None]
    z = w[:, :, 0] * v0[a] + w[:, :, 1] * v1[b] + w[:, :, 2] * v2  # (B, H, dh)
    attn = z.reshape(len(a), -1) @ at.W_O.reshape(-1, at.W_O.shape[-1]) + at.b_O  # (B, dm)
    resid = x2 + attn
    m = blk.mlp
    resid = resid + torch.relu(resid @ m.W_in + m.b_in) @ m.W_out + m.b_out
    return resid @ model.unembed.W_U + model.unembed.b_U


def accuracy_and_loss(logits, labels) -> tuple[float, float]:
    import torch

    lg = logits.to(torch.float64)
    return float((lg.argmax(-1) == labels).double().mean()), float(torch.nn.functional.cross_entropy(lg, labels))


def config(p: int = P, seed: int = 999, data_seed: int = 598, frac_train: float = 0.3, lr: float = 1e-3,
           weight_decay: float = 1.0, betas=(0.9, 0.98)) -> dict:
    """The HookedTransformerConfig dict of the model, with the recipe's settings recorded."""
    return dict(CONFIG, d_vocab=p + 1, d_vocab_out=p, model_name=f"grokking-modadd-p{p}", seed=seed,
                data_seed=data_seed, frac_train=frac_train, lr=lr, weight_decay=weight_decay, betas=list(betas))


def train(steps: int = 20000, on_snapshot=None, snapshot_steps=(), stop_at_test_accuracy: float | None = None,
          p: int = P, frac_train: float = 0.3, lr: float = 1e-3, weight_decay: float = 1.0, betas=(0.9, 0.98),
          seed: int = 999, data_seed: int = 598, check_every: int = 100, progress: bool = False, threads: int = 1):
    """Train for `steps` full-batch steps, or until the accuracy on the held-out pairs reaches
    `stop_at_test_accuracy` (checked every `check_every` steps).  `on_snapshot(step, state, stats, last)`
    is called at every step of `snapshot_steps` and at the last step (last = True), with a state dict of float32
    numpy arrays and the train/test accuracy and loss (float64) at that step.  Returns
    (config dict, log: the stats every `check_every` steps)."""
    import torch

    from depthcert.training.tl_forward import TLTransformer

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = config(p, seed, data_seed, frac_train, lr, weight_decay, betas)
    model = TLTransformer(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    trainable = []
    for name, prm in model.named_parameters():
        if name.split(".")[-1] in FROZEN:
            prm.requires_grad_(False)
        else:
            trainable.append(prm)
    tr, te = split(p, frac_train, data_seed)
    every = torch.arange(p * p)
    A, B, Y = every // p, every % p, (every // p + every % p) % p
    tr_t, te_t = torch.from_numpy(tr), torch.from_numpy(te)
    opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, betas=tuple(betas))
    want = set(int(s) for s in snapshot_steps)
    log = []

    def stats(step):
        with torch.no_grad():
            lg = last_logits(model, A, B, p)
        acc_tr, loss_tr = accuracy_and_loss(lg[tr_t], Y[tr_t])
        acc_te, loss_te = accuracy_and_loss(lg[te_t], Y[te_t])
        return {"step": step, "train_accuracy": round(acc_tr, 6), "train_loss": float(f"{loss_tr:.6g}"),
                "test_accuracy": round(acc_te, 6), "test_loss": float(f"{loss_te:.6g}")}

    def snapshot(st, last):
        if on_snapshot is not None:
            state = {n: t.detach().numpy().astype(np.float32).copy() for n, t in model.state_dict().items()}
            on_snapshot(st["step"], state, st, last)

    for step in range(steps + 1):
        st = None
        if step % check_every == 0 or step in want or step == steps:
            st = stats(step)
            if step % check_every == 0:
                log.append(st)
                if progress:
                    print(f"step {step:>6}  train acc {st['train_accuracy']:.4f} loss {st['train_loss']:.3g}  "
                          f"test acc {st['test_accuracy']:.4f} loss {st['test_loss']:.3g}", file=sys.stderr, flush=True)
            done = step == steps or (stop_at_test_accuracy is not None and step % check_every == 0
                                     and st["test_accuracy"] >= stop_at_test_accuracy)
            if step in want or done:
                snapshot(st, done)
            if done:
                break
        logits = last_logits(model, A[tr_t], B[tr_t], p)
        loss = torch.nn.functional.cross_entropy(logits.to(torch.float64), Y[tr_t])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return cfg, log
