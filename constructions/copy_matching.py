"""Paper Theorem 3: two layers, one head each, d' = d + n solve in-context QA (copy-matching).

Layer 1 (Lemma 1): attention alpha = blockdiag(A_3, ..., A_3, A_2), A_3 = J_3 - I_3 over each
(question, =, answer) triple and A_2 = J_2 - I_2 over the final (question, =) pair, W_V = I: every
column of a triple becomes the sum of its triple, the last column becomes q_c + r.
Layer 2: W_QK = I on the (question, question) block, W_V = I: the last column attends with
score 1 exactly to the triple whose question equals the query (and to the final pair), adding
its answer three times.  W_O reads the answer block.
"""
from __future__ import annotations

from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import ICQA
from depthcert.constructions.attention import instructive_attention, position_map
from depthcert.constructions.construction import Construction

THEOREM = "Theorem 3 (two-layer copy-matching)"


def layout(task: ICQA) -> Layout:
    return Layout.of(("question", task.n_q), ("response", 1), ("answer", task.n_a), ("position", task.length))


def copy_map(k: int):
    """Lemma 1 map of layer 1: within each triple and within the final pair, every column
    attends to the others (key j, query k)."""
    n = 3 * k + 2
    groups = [list(range(3 * t, 3 * t + 3)) for t in range(k)] + [[n - 2, n - 1]]
    return position_map(n, [(j, q) for g in groups for j in g for q in g if j != q])


def identity(lay: Layout):
    m = BlockMatrix(lay, lay)
    for b in lay.names:
        m.set(b, b, 1)
    return m.build()


def build(task: ICQA, as_printed: bool = False) -> Construction:
    lay = layout(task)
    layer1 = Head(instructive_attention(lay, copy_map(task.k)), identity(lay))
    layer2 = Head(BlockMatrix(lay, lay).set("question", "question", 1).build(), identity(lay))
    W_O = BlockMatrix(Layout.of(("answer", task.n_a)), lay).set("answer", "answer", 1).build()
    model = Model(task.vocab, task.length, task.classes, lay, ((layer1,), (layer2,)), W_O, name="copy-matching")
    return Construction("icqa", "copy-matching", THEOREM, model, as_printed,
                        "layer 1 copies each (q, =, a) triple together; layer 2 matches the query question")
