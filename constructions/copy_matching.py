"""Paper Theorem 3: two layers, one head each, d' = d + n solve in-context QA (copy-matching).

Layer 1 (Lemma 1): attention alpha = blockdiag(A_3, ..., A_3, A_2), A_3 = J_3 - I_3 over each
(question, =, answer) triple and A_2 = J_2 - I_2 over the final (question, =) pair, W_V = I: every
column of a triple becomes the sum of its triple, the last column becomes q_c + r.
Layer 2: W_QK = I on the (question, question) block, W_V = I: the last column attends with
score 1 exactly to the triple whose question equals the query (and to the final pair), adding
its answer three times.  W_O reads the answer block.

Written once for every size (constructions/indexed.py): the rows are the questions Q (n_q), the
response token, the answers A (n_a), the three positions of each triple (indexed by the triples
T, k of them) and the final pair.  On a symbolic task `build` returns the model for every size; on a
concrete task it is that closed value (constructions/closed.py, made once from symbols only)
instantiated at the task's sizes.
"""
from __future__ import annotations

from depthcert.checkers.tasks import ICQA
from depthcert.constructions.attention import position_map
from depthcert.constructions.closed import build_closed, cached_value
from depthcert.constructions.construction import Construction
from depthcert.constructions.indexed import (IndexedHead, IndexedLayout, IndexedMatrix, IndexSet, Segment,
                                             SizeRange, SymbolicModel, SymbolicTask, is_symbolic)

THEOREM = "Theorem 3 (two-layer copy-matching)"
SIZES = SizeRange.of(("k", 1), ("n_q", 0, "k"), ("n_a", 0, "k"))
ROLES = ("0", "1", "2")  # the (question, =, answer) positions of a triple
FINAL = ("F0", "F1")  # the final (question, =) pair


def symbolic_task(point: dict | None = None) -> SymbolicTask:
    """ICQA with symbolic k, n_q, n_a over the whole range, or held at one point (a finite build)."""
    return SymbolicTask("icqa", SIZES if point is None else SIZES.at(point))


def sizes_of(task: ICQA) -> dict:
    return {"k": task.k, "n_q": task.n_q, "n_a": task.n_a}


def layouts(task):
    """(stream rows, positions, classes) as set-indexed layouts."""
    Q, A, T = IndexSet("Q", task.n_q), IndexSet("A", task.n_a), IndexSet("T", task.k)
    stream = IndexedLayout(Segment("question", Q, ("tok:Q",)), Segment("response", None, ("tok:=",)),
                           Segment("answer", A, ("tok:A",)),
                           Segment("position", T, tuple(f"pos{r}" for r in ROLES)),
                           Segment("position", None, tuple(f"pos{r}" for r in FINAL)))
    positions = IndexedLayout(Segment("position", T, tuple(f"col{r}" for r in ROLES)),
                              Segment("position", None, tuple(f"col{r}" for r in FINAL)))
    classes = IndexedLayout(Segment("answer", A, ("cls:A",)))
    return stream, positions, classes


def copy_map(k: int):
    """Lemma 1 map of layer 1 as a concrete n x n (key j, query k) 0/1 matrix (used by multihop)."""
    n = 3 * k + 2
    groups = [list(range(3 * t, 3 * t + 3)) for t in range(k)] + [[n - 2, n - 1]]
    return position_map(n, [(j, q) for g in groups for j in g for q in g if j != q])


def copy_attention(stream: IndexedLayout) -> IndexedMatrix:
    """Lemma 1 on the positions: within each triple and within the final pair, every position
    attends to the others with score 1 (non-negative, so relu keeps it)."""
    qk = IndexedMatrix(stream, stream)
    for a in ROLES:
        for b in ROLES:
            if a != b:
                qk.same(f"pos{a}", f"pos{b}", same=1, other=0)
    qk.set("posF0", "posF1", 1).set("posF1", "posF0", 1)
    return qk


def _closed_args(as_printed: bool):
    return ("icqa", "copy-matching", bool(as_printed)), (lambda s: build(s, as_printed)), symbolic_task


def closed_value(as_printed: bool = False):
    """The closed value (constructions/closed.py): `build` run once with symbolic k, n_q, n_a."""
    return cached_value(*_closed_args(as_printed))


def build(task, as_printed: bool = False) -> Construction:
    if not is_symbolic(task):  # the closed value (this function run once with symbols), instantiated
        return build_closed(*_closed_args(as_printed), task, sizes_of(task))
    stream, positions, classes = layouts(task)
    layer1 = IndexedHead(copy_attention(stream), IndexedMatrix(stream, stream).identity())
    layer2 = IndexedHead(IndexedMatrix(stream, stream).same("tok:Q", "tok:Q", same=1),
                         IndexedMatrix(stream, stream).identity())
    W_O = IndexedMatrix(classes, stream).same("cls:A", "tok:A", same=1)
    sym = SymbolicModel("copy-matching", stream, positions, classes, ((layer1,), (layer2,)), W_O, task.range)
    return Construction("icqa", "copy-matching", THEOREM, None, as_printed,
                        "layer 1 copies each (q, =, a) triple together; layer 2 matches the query question",
                        symbolic=sym)
