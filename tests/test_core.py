"""Core: layout, exact evaluation (fast path == big integers == Fractions), tasks, Lemma 3."""
from fractions import Fraction
from itertools import permutations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator, logits_fraction_reference
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import ICQA, SequenceClassification, make_task
from depthcert.constructions import registry
from depthcert.constructions.classifier import lemma3_classifier


def test_block_matrix_places_blocks_by_name_non_square():
    rows = Layout.of(("a", 2), ("b", 3))
    cols = Layout.of(("x", 1), ("y", 4))
    M = BlockMatrix(rows, cols).set("b", "y", [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]).build()
    assert M.shape == (5, 5)
    assert M[2, 1] == 1 and M[4, 4] == 12 and M[0, 0] == 0
    with pytest.raises(ValueError, match=r"block \(b, y\)"):
        BlockMatrix(rows, cols).set("b", "y", [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    with pytest.raises(ValueError, match="scalar"):
        BlockMatrix(rows, cols).set("a", "y", 1)
    with pytest.raises(BadInput, match="no block named 'nope'"):
        rows.slice("nope")
    with pytest.raises(BadInput, match=r"block \(a, x\)\[0\]\[0\]: 0.5 is not exact"):
        BlockMatrix(rows, cols).set("a", "x", [[0.5], [1]])
    with pytest.raises(BadInput, match=r"block \(a, a\): 0.1 is not exact"):
        BlockMatrix(rows, rows).set("a", "a", 0.1)
    with pytest.raises(BadInput, match="not exact"):
        BlockMatrix(rows, cols).entry("a", 0, "x", 0, np.float64(0.25))


def test_layout_rejects_duplicates_and_negative_sizes():
    with pytest.raises(BadInput):
        Layout.of(("a", 1), ("a", 2))
    with pytest.raises(BadInput):
        Layout.of(("a", -1))


def _random_model(draw_ints, V, P, extra, layers, heads, C):
    d = V + P + extra
    lay = Layout.of(("token", V), ("position", P)).padded(d)

    def mat(r, c):
        M = np.empty((r, c), dtype=object)
        for i in range(r):
            for j in range(c):
                M[i, j] = Fraction(next(draw_ints), 1 + abs(next(draw_ints)) % 3)
        return M

    ls = tuple(tuple(Head(mat(d, d), mat(d, d)) for _ in range(heads)) for _ in range(layers))
    return Model(tuple(f"t{i}" for i in range(V)), P, tuple(f"c{i}" for i in range(C)), lay, ls, mat(C, d))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(-3, 3), min_size=64, max_size=64),
    st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.integers(1, 2), st.integers(1, 2), st.integers(1, 3),
    st.data(),
)
def test_fast_path_equals_big_integers_equals_fractions(pool, V, P, extra, layers, heads, C, data):
    it = iter(pool * 400)
    model = _random_model(it, V, P, extra, layers, heads, C)
    n = data.draw(st.integers(1, P))
    ids = np.array(data.draw(st.lists(st.lists(st.integers(0, V - 1), min_size=n, max_size=n), min_size=1, max_size=4)))
    fast = Evaluator(model)
    exact = Evaluator(model, force_exact=True)
    nf, df = fast.logits(ids)
    ne, de = exact.logits(ids)
    assert df == de
    assert [[int(v) for v in r] for r in nf] == [[int(v) for v in r] for r in ne]
    for row, seq in zip(ne, ids):
        assert [Fraction(int(v), de) for v in row] == logits_fraction_reference(model, list(seq))


def test_large_weights_leave_the_float_path_with_the_same_answer():
    task = ICQA(k=2, n_questions=3, n_answers=3)
    model = registry.build(task).model
    big = model.with_weight((1, 0, "W_QK", 0, 0), 2**40)
    big = big.with_weight((0, 0, "W_V", 0, 0), 2**30)
    assert Evaluator(model).use_float and not Evaluator(big).use_float
    a = verify(big, task)
    b = verify(big, task, force_exact=True)
    assert (a.verdict, a.min_margin, a.points_checked) == (b.verdict, b.min_margin, b.points_checked)


@pytest.mark.parametrize("k,nq,na", [(1, 1, 1), (1, 3, 2), (2, 2, 3), (2, 4, 3), (3, 3, 4)])
def test_icqa_enumeration_matches_brute_force(k, nq, na):
    task = ICQA(k=k, n_questions=nq, n_answers=na)
    brute = set()
    for qs in permutations(range(nq), k):
        for ans in permutations(range(na), k):
            for c in range(k):
                toks = []
                for q, a in zip(qs, ans):
                    toks += [f"q{q}", "=", f"a{a}"]
                brute.add((tuple(toks + [f"q{qs[c]}", "="]), f"a{ans[c]}"))
    seen = {(p.tokens, p.label) for p in (task.point(i) for i in range(task.size))}
    assert len(brute) == task.size == len(seen)
    assert seen == brute


def test_sc_labels_distinct_and_sequences_cover_alphabet():
    task = SequenceClassification(length=2, alphabet=3, seed=5)
    pts = [task.point(i) for i in range(task.size)]
    assert task.size == 9 and len({p.label for p in pts}) == 9 and len({p.tokens for p in pts}) == 9
    assert all(p.tokens[-1] == "<cls>" for p in pts)


@pytest.mark.parametrize("k,nq,na", [(1, 2, 2), (2, 3, 3), (3, 5, 5), (3, 3, 6), (4, 5, 4)])
def test_copy_matching_verifies_with_margin_3(k, nq, na):
    task = ICQA(k=k, n_questions=nq, n_answers=na)
    v = verify(registry.build(task).model, task)
    assert v.verified and v.points_checked == task.size and v.min_margin == 3


@pytest.mark.parametrize("L,M,seed", [(1, 4, 0), (2, 3, 1), (3, 3, 0), (3, 2, 7)])
def test_memorization_verifies(L, M, seed):
    task = SequenceClassification(length=L, alphabet=M, seed=seed)
    c = registry.build(task)
    v = verify(c.model, task)
    assert v.verified and v.min_margin > 0
    assert c.model.heads == (L + 1,) and c.model.dim == max((L + 1) * (M + 1), M + 1 + L + 1)


def test_one_entry_change_is_refuted_with_replayable_counterexample():
    task = ICQA(k=2, n_questions=3, n_answers=3)
    model = registry.build(task).model
    lay = model.layout
    broken = model.with_weight((1, 0, "W_QK", lay.index("question", 1), lay.index("question", 1)), 0)
    v = verify(broken, task)
    assert v.verdict == "refuted"
    ce = v.counterexample
    p = task.point(ce.index)
    assert p.tokens == ce.tokens and "q1" in p.tokens[-2]
    assert ce.logits[broken.classes.index(ce.predicted)] >= ce.logits[broken.classes.index(ce.expected)]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.lists(st.lists(st.integers(-3, 3), min_size=5, max_size=5), min_size=1, max_size=8), st.data())
def test_lemma3_separates_pairwise_nonparallel_vectors(d, raw, data):
    vecs = []
    for v in (r[:d] for r in raw):
        parallel = any(all(v[i] * u[j] == v[j] * u[i] for i in range(d) for j in range(d)) for u in vecs)
        if any(v) and not parallel:
            vecs.append(v)
    if not vecs:
        vecs = [[1] + [0] * (d - 1)]
    labels = data.draw(st.permutations(list(range(len(vecs)))))
    W = lemma3_classifier(vecs, labels)
    for x, y in zip(vecs, labels):
        scores = [sum(Fraction(a) * b for a, b in zip(x, W[c])) for c in range(W.shape[0])]
        assert all(scores[y] > s for c, s in enumerate(scores) if c != y)


def test_lemma3_rejects_parallel_vectors():
    with pytest.raises(BadInput, match="parallel"):
        lemma3_classifier([[1, 2], [2, 4]], [0, 1])


def test_make_task_rejects_bad_sizes():
    with pytest.raises(BadInput, match="larger than"):
        make_task("icqa", k=4, n_questions=3)
    with pytest.raises(BadInput, match=">= 1"):
        make_task("icqa", k=0)
    with pytest.raises(BadInput, match="unknown task"):
        make_task("nonsense")
    with pytest.raises(BadInput, match="does not apply"):
        make_task("icqa", alphabet=3)


def test_model_api_refuses_floats_naming_the_entry():
    """Floats are not exact: Head, MLP and Model refuse them (BadInput, the entry named)."""
    lay = Layout.of(("token", 2), ("position", 2))
    Z = BlockMatrix(lay, lay).build()
    W = Z.copy()
    W[1, 0] = 0.5
    with pytest.raises(BadInput, match=r"head W_QK\[1\]\[0\]"):
        Head(W, Z)
    with pytest.raises(BadInput, match="float array"):
        Head(np.zeros((4, 4)), Z)
    WO = np.full((2, 4), Fraction(0), dtype=object)
    WO[0, 3] = 1.0
    with pytest.raises(BadInput, match=r"W_O\[0\]\[3\]"):
        Model(("a", "b"), 2, ("x", "y"), lay, ((Head(Z, Z),),), WO)
    ok = Head([[0] * 4] * 4, Z)  # nested ints are exact: accepted, stored as Fractions
    assert all(type(v) is Fraction for v in ok.W_QK.flat)
