"""Paper Theorem 1 / Lemma 4: one layer, n heads, d' = max(n d, d + n) memorizes any
sequence-classification dataset with distinct labels.

Heads 0..n-2 (Lemma 1 instructive attention from the CLS position to position i) copy token i
into slot i with W_V = n * (slot_i <- token); head n-1 attends to itself with W_V = -n I and
cancels the residual.  The last column becomes the concatenation [x_0; ...; x_{n-2}; 0], and
the Lemma 3 classifier separates these pairwise non-parallel vectors.  The slots overlap the
token and position blocks, as in the paper (that is why d' = max(nd, d+n)); they are a second
named partition of the same stream.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import SequenceClassification
from depthcert.constructions.attention import instructive_attention, position_map
from depthcert.constructions.classifier import lemma3_classifier, lemma3_guard
from depthcert.constructions.construction import Construction

THEOREM = "Theorem 1 / Lemma 4 (one-layer memorization, n heads)"


def layouts(d: int, n: int) -> tuple[Layout, Layout]:
    """(input partition [token; position; pad], slot partition [slot_0..slot_{n-1}; pad])."""
    dim = max(n * d, d + n)
    inp = Layout.of(("token", d), ("position", n)).padded(dim, "pad")
    slots = Layout.of(*[(f"slot{i}", d) for i in range(n)]).padded(dim, "pad")
    return inp, slots


def lemma4_heads(lay: Layout, slots: Layout, n: int, source: str, copies: int) -> list[Head]:
    """Lemma 4's heads: head i (i < copies) attends from the last position to position i and
    writes n * (block `source` of that column) into slot i; the last head cancels the residual."""
    heads = []
    for i in range(copies):
        qk = instructive_attention(lay, position_map(n, [(i, n - 1)]))
        heads.append(Head(qk, BlockMatrix(slots, lay).set(f"slot{i}", source, n).build()))
    neutral_v = BlockMatrix(lay, lay)
    for b in lay.names:
        neutral_v.set(b, b, -n)
    heads.append(Head(instructive_attention(lay, position_map(n, [(j, j) for j in range(n)])), neutral_v.build()))
    return heads


def _check_dataset_shape(task) -> None:
    if isinstance(task, SequenceClassification):
        return
    lengths, last, labels = set(), set(), []
    for batch in task.batches(4096):
        lengths.add(batch.ids.shape[1])
        last.update(int(t) for t in batch.ids[:, -1])
        labels.extend(int(y) for y in batch.labels)
    if len(lengths) > 1:
        raise BadInput(f"Theorem 1's construction needs sequences of one length; the dataset has lengths {sorted(lengths)}")
    if len(last) > 1:
        raise BadInput("Theorem 1's construction reads positions 0..n-2 from the last one: every sequence must end "
                       "with the same token (the paper appends a CLS token)")
    if len(set(labels)) != len(labels):
        raise BadInput("Theorem 1 (Lemma 3) needs pairwise distinct labels; the dataset repeats a label")


def build(task: SequenceClassification, as_printed: bool = False, lemma3: bool = True) -> Construction:
    """Also accepts a user dataset (checkers.dataset_file.DatasetTask) of equal-length sequences
    sharing their last token (the CLS) with pairwise distinct labels.  lemma3=False: W_O = 0,
    for a fitted read-out (proofs/readout.py)."""
    _check_dataset_shape(task)
    d, n = len(task.vocab), task.length
    inp, slots = layouts(d, n)
    heads = lemma4_heads(inp, slots, n, "token", n - 1)

    if not lemma3:
        W_O = np.full((len(task.classes), inp.dim), Fraction(0), dtype=object)
        W_O.flags.writeable = False
        model = Model(task.vocab, n, task.classes, inp, (tuple(heads),), W_O, name="memorization")
        return Construction("sc", "heads", THEOREM, model, as_printed,
                            "copy token i into slot i (n-1 heads), cancel the residual (1 head), fitted read-out",
                            (), "none")
    lemma3_guard(task.size, inp.dim)  # before the probe: it costs as much as the classifier's input
    # Read the layer's actual last column on every point (W_O = I), then apply Lemma 3 to
    # those exact vectors: the classifier rests on what the layer computes, not on the lemma.
    probe_out = BlockMatrix(inp, inp)
    for b in inp.names:
        probe_out.set(b, b, 1)
    probe = Model(task.vocab, n, tuple(f"h{r}" for r in range(inp.dim)), inp, (tuple(heads),), probe_out.build())
    ev = Evaluator(probe)
    vectors, labels = [], []
    for batch in task.batches(4096):
        num, den = ev.logits(batch.ids)
        for row, y in zip(num, batch.labels):
            vectors.append([Fraction(int(v), den) for v in row])
            labels.append(int(y))
    W_O = lemma3_classifier(vectors, labels, n_classes=len(task.classes))
    model = Model(task.vocab, n, task.classes, inp, (tuple(heads),), W_O, name="memorization")
    return Construction("sc", "heads", THEOREM, model, as_printed,
                        "copy token i into slot i (n-1 heads), cancel the residual (1 head), Lemma 3 classifier",
                        (), "lemma3")
