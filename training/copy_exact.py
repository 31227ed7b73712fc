"""An exact one-layer construction for the copy task (paper Lemma 1, instructive attention),
built with depthcert's Python API and checked on every input.  No PyTorch needed.

Layout: token (m + 1 rows: the alphabet, then "|"), position (2n), out (m).  One head:

  W_QK  (position, position) block = alpha with alpha[j, k] = 1 iff k >= n and j = k - n
        (row = key, column = query): Lemma 1's position-only score, the query at n + i
        scores the key at i with 1 and every other key with 0, whatever the tokens are;
  W_V   (out, token) block = [I_m | 0]: the attended key's alphabet token is written to `out`;
  W_O   (class, out) block = I_m.

The mask is causal by default, as for a model trained to generate the copy (without it, the
teacher-forced second half would show position n + i the answer x_i at position n + i + 1).
With ReLU attention (the paper's activation) or hardmax, query n + i puts weight 1 on key i and
0 elsewhere, so every labelled position reads exactly e_{x_i}: margin 1 on every point.  With
`causal=False` and ReLU this is the paper's class but for the per-position outputs (the paper
classifies the last column only).  With softmax (scale c, causal mask), query n + i also gives
weight 1 / (e^c + n + i) to each of its n + i other visible keys;
the worst point has the n - 1 + i other alphabet keys all holding one wrong token, so every
point is correct iff e^c > 2n - 2 (margin (e^c - 2n + 2) / (e^c + 2n - 1) at i = n - 1).

Depth: one layer, one head, for every n and m (d' = 3m + 1 + 2n).  See docs/experiments.md for
the depth gradient training needed.
"""
from __future__ import annotations

import math
from fractions import Fraction

from depthcert.checkers.errors import BadInput
from depthcert.training.copy_task import CopyTask

ATTENTIONS = ("relu", "hardmax", "softmax")


def copy_construction(length: int, alphabet: int, attention: str = "relu", scale=None, causal: bool | None = None):
    """The one-layer copy model (a `depthcert.Model`, outputs at every position)."""
    from depthcert import BlockMatrix, Head, Layer, Layout, Model

    if attention not in ATTENTIONS:
        raise BadInput(f"unknown attention {attention!r}; known: {', '.join(ATTENTIONS)}")
    task = CopyTask(length, alphabet)
    n, m = length, alphabet
    N = task.seq_len
    lay = Layout.of(("token", m + 1), ("position", N), ("out", m))
    alpha = [[1 if (k >= n and j == k - n) else 0 for k in range(N)] for j in range(N)]
    W_QK = BlockMatrix(lay, lay).set("position", "position", alpha).build()
    copy_rows = [[1 if r == c else 0 for c in range(m + 1)] for r in range(m)]  # [I_m | 0]
    W_V = BlockMatrix(lay, lay).set("out", "token", copy_rows).build()
    W_O = BlockMatrix(Layout.of(("class", m)), lay).set("class", "out", 1).build()
    causal = True if causal is None else causal
    if attention == "softmax":
        if scale is None:
            scale = softmax_scale_needed(length)
        head = Head(W_QK, W_V, attention="softmax", scale=Fraction(scale))
    else:
        head = Head(W_QK, W_V, attention=attention)
    return Model(task.vocab, N, task.classes, lay, (Layer((head,), causal=causal),), W_O,
                 name=f"copy-lemma1-{attention}", outputs="all")


def softmax_scale_needed(length: int) -> Fraction:
    """A rational scale c with e^c > 2n - 2 (the closed-form condition), rounded up to 1/4."""
    need = math.log(max(2 * length - 2, 1))
    return Fraction(math.floor(need * 4) + 1, 4)


def verify_copy(length: int, alphabet: int, attention: str = "relu", scale=None, causal: bool | None = None):
    """depthcert.verify of the construction on every clean input of the copy task."""
    from depthcert import verify

    model = copy_construction(length, alphabet, attention, scale, causal)
    return model, verify(model, CopyTask(length, alphabet).dataset())


def verify_weights(model, length: int, alphabet: int):
    """depthcert.verify of any exact model (e.g. rounded trained weights) on the copy task."""
    from depthcert import verify

    return verify(model, CopyTask(length, alphabet).dataset())
