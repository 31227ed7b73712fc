"""Known hardmax models that find-depth tries before it searches (upper bounds; docs/depth.md).

Each builder returns a weights object (depthcert.weights version 2, hardmax) for a task at any size
it takes, or None; find-depth verifies it on every point like a searched model, so a builder is a
proposal, never a claim.

copy (training/copy_task.py): one layer of one head at every length n.  The query at the labelled
position n + i puts key position i strictly on top (W_QK[pos i, pos n + i] = 1, every other score
0), W_V copies the stream into a block, and the read-out reads that block's token rows: the label
x_i with margin 1.

a function of one token's count (parity, mod-count, or any dataset of one length whose label is a
function of how often some token t occurs): two layers of one head at every length n.  Layer 1
scores every key 0 (uniform), so the last position's layer-1 block holds c/n at t's row (c the
count of t).  Layer 2 scores key position j by 2 j c - j^2 = c^2 - (j - c)^2, which puts position
min(c, n - 1) strictly on top (no ties at integers c).  The read-out reads that position (a large
logit for the label of c = j) and c itself, which separates c = n from c = n - 1 (both select
position n - 1).
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


def count_function(points, vocab):
    """(token t, n, {count: label}) when every point has length n and its label is a function of
    the count of t (the first such token in vocabulary order), else None."""
    lengths = {len(tokens) for tokens, _ in points}
    if len(lengths) != 1:
        return None
    n = lengths.pop()
    for t in vocab:
        table = {}
        if all(table.setdefault(tokens.count(t), label) == label for tokens, label in points):
            return t, n, table
    return None


def count_two_layers(vocab, classes, token, n: int, table: dict, name: str = "count-two-layers") -> dict:
    """The two-layer, one-head model of a label that is a function of `token`'s count (module
    docstring); `table` maps each count that occurs to its label."""
    layout = Layout(vocab, n, 2, 1)
    d = layout.d[-1]
    zero = [[0] * d for _ in range(d)]
    qk2 = [[0] * d for _ in range(d)]
    count_row = layout.row((1, 0, ("t", token)))  # holds c / n at the last position
    for j in range(n):
        qk2[layout.row(("p", j))][count_row] = 2 * j * n
        qk2[layout.row(("p", j))][layout.row(("p", n - 1))] = -j * j
    wv1 = [[0] * d for _ in range(d)]
    for r in range(layout.d[0]):
        wv1[layout.offset(1, 0) + r][r] = 1
    wv2 = [[0] * d for _ in range(d)]
    for r in range(layout.d[1]):
        wv2[layout.offset(2, 0) + r][r] = 1
    wo = [[0] * d for _ in classes]  # logits doubled, so every entry is an integer
    cls = {c: i for i, c in enumerate(classes)}
    for c, label in table.items():
        if c < n - 1:
            wo[cls[label]][layout.row((2, 0, ("p", c)))] += 4 * n
    if n - 1 in table:
        wo[cls[table[n - 1]]][layout.row((2, 0, ("p", n - 1)))] += 2 * n - 1
    if n in table:  # + c on the label of c = n: below n - 1/2 at c = n - 1, above it at c = n
        wo[cls[table[n]]][count_row] += 2 * n
    layer = {"heads": [{"W_QK": zero, "W_V": wv1, "attention": "hardmax"}], "causal": False}
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": n,
            "classes": list(classes),
            "layers": [layer, {"heads": [{"W_QK": qk2, "W_V": wv2, "attention": "hardmax"}], "causal": False}],
            "W_O": wo, "outputs": "all"}


def known_models(problem, layers: int):
    """(description, weights with one head per layer) of the known models with `layers` layers."""
    if problem.name == "copy" and layers == 1:
        yield ("copy: position n + i attends position i (one head, any length)",
               copy_one_layer(problem.vocab, problem.classes, problem.params["length"]))
    if layers == 2 and problem.name != "copy":
        found = count_function(problem.points, problem.vocab)
        if found is not None:
            token, n, table = found
            yield (f"the label is a function of the count of token {token!r}: layer 1 uniform, layer 2 selects "
                   "position min(count, n - 1) (one head, any length)",
                   count_two_layers(problem.vocab, problem.classes, token, n, table))
