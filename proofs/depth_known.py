"""Known hardmax models that find-depth tries before it searches (upper bounds; docs/depth.md).

Each builder returns a weights object (depthcert.weights version 2, hardmax) for a task at any size
it takes, or None; find-depth verifies it on every point like a searched model, so a builder is a
proposal, never a claim.

copy (training/copy_task.py): one layer of one head at every length n.  The query at the labelled
position n + i puts key position i strictly on top (W_QK[pos i, pos n + i] = 1, every other score
0), W_V copies the stream into a block, and the read-out reads that block's token rows: the label
x_i with margin 1.
"""
from __future__ import annotations

from depthcert.proofs.depth_realize import Layout


def copy_one_layer(vocab, classes, length: int, name: str = "copy-one-layer") -> dict:
    """The copy task's one-layer, one-head hardmax model (module docstring)."""
    n = length
    layout = Layout(vocab, 2 * n, 1, 1)
    d = layout.d[-1]
    qk = [[0] * d for _ in range(d)]
    for i in range(n):
        qk[layout.row(("p", i))][layout.row(("p", n + i))] = 1
    wv = [[0] * d for _ in range(d)]
    for r in range(layout.d[0]):
        wv[layout.offset(1, 0) + r][r] = 1
    wo = [[0] * d for _ in classes]
    for c, t in enumerate(classes):
        wo[c][layout.row((1, 0, ("t", t)))] = 1
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": 2 * n,
            "classes": list(classes), "layers": [{"heads": [{"W_QK": qk, "W_V": wv, "attention": "hardmax"}],
                                                  "causal": True}],
            "W_O": wo, "outputs": "all"}


def known_models(problem, layers: int):
    """(description, weights with one head per layer) of the known models with `layers` layers."""
    if problem.name == "copy" and layers == 1:
        yield ("copy: position n + i attends position i (one head, any length)",
               copy_one_layer(problem.vocab, problem.classes, problem.params["length"]))
