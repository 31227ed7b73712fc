"""Properties of the builders: paper Lemma 1 and Lemma 2 (constructions/attention.py), Lemma 3
(constructions/classifier.py) and the named-block layout (checkers/layout.py).

  Lemma 1  instructive_attention realizes any non-negative position map alpha exactly: on every
           input sequence of every length m <= n, relu(H^T W_QK H) = alpha[:m, :m]; W_QK is zero
           outside the (position, position) block; a negative alpha is refused.
  Lemma 2  constrained_attention leaves every allowed (key, query) score of the content W_QK
           untouched and adds the concrete mask value to every disallowed one, on every input;
           a disallowed weight is relu(content score + mask), so it is 0 whenever the mask
           outweighs the largest content score, and it is what the concrete value gives
           otherwise (the checker never assumes "large enough"); the content argument is left
           unchanged; a non-negative mask or a mask of the wrong shape is refused.
  Lemma 3  lemma3_classifier separates any pairwise linearly independent set with distinct
           labels (strictly, against every row of W, used by a label or not), and refuses a set
           with a linearly dependent pair (parallel or antiparallel, or a zero vector), whatever
           the order of the vectors.
  Layout   a matrix built block by block (non-square blocks, two different layouts for rows and
           columns) reads back block by block; untouched blocks are zero; offsets, slices and
           indices agree; to_json round-trips; wrong shapes are refused.

The scores are computed in the test from the definition (H0 = [X; P; 0], s_jk = h_j^T W h_k,
two ones per column), and cross-checked with the kernel's trace (checkers/trace.py).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout, zeros
from depthcert.checkers.model import Head, Model
from depthcert.checkers.trace import trace
from depthcert.constructions.attention import constrained_attention, instructive_attention
from depthcert.constructions.classifier import lemma3_classifier
from proptools import prop

NONNEG = (0, 1, 2, 3, Fraction(1, 2), Fraction(3, 7), 5)
VALUES = (1, -1, 2, -2, Fraction(1, 2), 3, Fraction(-1, 3), Fraction(5, 4))
MASKS = (-1, -2, Fraction(-1, 2), -100, Fraction(-7, 3), Fraction(-1, 1000))


# ---- shared: a layout with the token rows split into named blocks, positions, scratch


@st.composite
def input_layouts(draw, max_len=4):
    """(layout, V, n): tokens rows 0..V-1 in one or two named blocks, the position block
    (rows V..V+n-1, as H0 puts them), then optional scratch blocks."""
    V = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_len))
    split = draw(st.integers(0, V))
    blocks = [b for b in (("words", split), ("marks", V - split)) if b[1] > 0]
    blocks.append(("position", n))
    for name in ("scratch", "extra"):
        size = draw(st.integers(0, 2))
        if size:
            blocks.append((name, size))
    return Layout.of(*blocks), V, n


def scores(W, tokens, V: int) -> list[list[Fraction]]:
    """s[j][k] = h_j^T W h_k for H0 of the sequence: column j has ones at row tokens[j] and row V + j."""
    rows = [(t, V + j) for j, t in enumerate(tokens)]
    return [[sum((W[a, b] for a in rj for b in rk), Fraction(0)) for rk in rows] for rj in rows]


def block_of(lay: Layout, row: int) -> tuple[str, int]:
    """(block name, direction) of a row of the stream."""
    for b in lay.blocks:
        if row < lay.offset(b.name) + b.size:
            return b.name, row - lay.offset(b.name)
    raise IndexError(row)


def relu(x):
    return max(Fraction(0), x)


def sequences(V: int, n: int):
    """Every sequence over V tokens of every length 1..n."""
    for m in range(1, n + 1):
        yield from itertools.product(range(V), repeat=m)


def kernel_map(lay: Layout, V: int, n: int, W, tokens):
    """The attention map the kernel computes for one head W_QK (trace of a one-head model)."""
    d = lay.dim
    model = Model(tuple(f"w{i}" for i in range(V)), n, ("y",), lay, ((Head(W, zeros(d, d)),),), zeros(1, d))
    return trace(model, list(tokens)).attention[0][0]


# ---- Lemma 1


@pytest.mark.slow
@prop(80)
@given(input_layouts(), st.data())
def test_lemma1_realizes_any_nonnegative_position_map_on_every_input(lay_vn, data):
    lay, V, n = lay_vn
    entries = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from(NONNEG)),
                                 max_size=2 * n))
    alpha = zeros(n, n)
    for j, k, v in entries:
        alpha[j, k] = Fraction(v)
    W = instructive_attention(lay, alpha)
    assert W.shape == (lay.dim, lay.dim)
    pos = lay.slice("position")
    outside = W.copy()
    outside[pos, pos] = Fraction(0)
    assert not outside.any(), "Lemma 1 writes only the (position, position) block"
    for toks in sequences(V, n):
        m = len(toks)
        s = scores(W, toks, V)
        assert [[relu(v) for v in row] for row in s] == [[alpha[j, k] for k in range(m)] for j in range(m)], toks
    toks = data.draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=n))
    A = kernel_map(lay, V, n, W, toks)
    assert [[A[j, k] for k in range(len(toks))] for j in range(len(toks))] == \
        [[alpha[j, k] for k in range(len(toks))] for j in range(len(toks))]


@prop(20)
@given(input_layouts(), st.data())
def test_lemma1_refuses_a_negative_entry(lay_vn, data):
    lay, V, n = lay_vn
    alpha = zeros(n, n)
    alpha[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))] = Fraction(
        data.draw(st.sampled_from(MASKS)))
    with pytest.raises(ValueError, match="non-negative"):
        instructive_attention(lay, alpha)


# ---- Lemma 2


@pytest.mark.slow
@prop(80)
@given(input_layouts(), st.data())
def test_lemma2_masks_disallowed_pairs_with_the_concrete_value(lay_vn, data):
    lay, V, n = lay_vn
    d = lay.dim
    content = BlockMatrix(lay, lay)
    for i, j, v in data.draw(st.lists(st.tuples(st.integers(0, d - 1), st.integers(0, d - 1), st.sampled_from(VALUES)),
                                      max_size=2 * d)):
        content.entry(*block_of(lay, i), *block_of(lay, j), v)  # any entry, position block included
    before = content.build()
    allowed = np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=n, max_size=n)),
                       dtype=bool)
    mask = Fraction(data.draw(st.sampled_from(MASKS)))
    W = constrained_attention(lay, content, allowed, mask)
    assert (content.build() == before).all(), "constrained_attention changed its content argument"
    assert (constrained_attention(lay, content, allowed, mask) == W).all(), "a second call gives another matrix"
    # the largest content score over all inputs and pairs decides whether the mask is "large enough"
    worst = max(max(max(row) for row in scores(before, toks, V)) for toks in sequences(V, n))
    masked_somewhere = False
    for toks in sequences(V, n):
        m = len(toks)
        s_content = scores(before, toks, V)
        s = scores(W, toks, V)
        for j in range(m):
            for k in range(m):
                if allowed[j, k]:
                    assert s[j][k] == s_content[j][k], (toks, j, k)
                else:
                    assert s[j][k] == s_content[j][k] + mask, (toks, j, k)
                    if worst + mask <= 0:
                        assert relu(s[j][k]) == 0, (toks, j, k)
                    masked_somewhere |= relu(s[j][k]) > 0
    event("the mask outweighs every content score" if worst + mask <= 0 else
          ("some disallowed pair keeps a positive weight" if masked_somewhere else "mask small but never reached"))
    toks = data.draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=n))
    A = kernel_map(lay, V, n, W, toks)
    s_content = scores(before, toks, V)
    for j in range(len(toks)):
        for k in range(len(toks)):
            want = s_content[j][k] + (0 if allowed[j, k] else mask)
            assert A[j, k] == relu(want)


def test_lemma2_regression_content_is_not_changed():
    """The shrunk failure: one token, one position, the pair (0, 0) disallowed, mask -1.
    constrained_attention used to add the mask into the caller's BlockMatrix, so a second head
    built from the same content got -2 (and the content itself carried the mask)."""
    lay = Layout.of(("marks", 1), ("position", 1))
    content = BlockMatrix(lay, lay)
    first = constrained_attention(lay, content, [[False]], -1)
    second = constrained_attention(lay, content, [[False]], -1)
    assert first[1, 1] == second[1, 1] == -1
    assert content.build()[1, 1] == 0


@prop(20)
@given(input_layouts(), st.data())
def test_lemma2_refuses_a_nonnegative_mask_or_a_wrong_shape(lay_vn, data):
    lay, V, n = lay_vn
    allowed = np.ones((n, n), dtype=bool)
    with pytest.raises(ValueError, match="negative"):
        constrained_attention(lay, BlockMatrix(lay, lay), allowed, data.draw(st.sampled_from((0, 1, Fraction(1, 3)))))
    bad = np.ones((n + 1, n), dtype=bool)
    with pytest.raises(ValueError, match="mask is"):
        constrained_attention(lay, BlockMatrix(lay, lay), bad, -1)


# ---- Lemma 3

COORD = st.sampled_from((0, 0, 1, -1, 2, -2, 3, Fraction(1, 2), Fraction(-2, 3)))


def dependent(u, v) -> bool:
    """u and v are linearly dependent (parallel, antiparallel, or one of them zero)."""
    return all(u[i] * v[j] == u[j] * v[i] for i in range(len(u)) for j in range(len(u)))


def separates(W, vectors, labels) -> bool:
    for x, y in zip(vectors, labels):
        s = [sum((Fraction(a) * Fraction(b) for a, b in zip(x, W[c])), Fraction(0)) for c in range(W.shape[0])]
        if not all(s[y] > v for c, v in enumerate(s) if c != y):
            return False
    return True


@st.composite
def independent_sets(draw):
    """(vectors, labels, n_classes): pairwise linearly independent vectors, distinct labels in
    0..n_classes-1 (n_classes may exceed the number of vectors: unused classes)."""
    d = draw(st.integers(1, 4))
    raw = draw(st.lists(st.lists(COORD, min_size=d, max_size=d), min_size=1, max_size=7))
    vecs = []
    for v in raw:
        if not any(dependent(v, u) for u in vecs) and (any(v) or not vecs):
            vecs.append(v)
    if len(vecs) > 1:
        vecs = [v for v in vecs if any(v)]
    extra = draw(st.integers(0, 2))
    n_classes = len(vecs) + extra
    labels = draw(st.permutations(range(n_classes)))[: len(vecs)]
    return vecs, list(labels), n_classes


@prop(150)
@given(independent_sets(), st.booleans())
@example(([[1, 0], [0, 1]], [0, 1], 3), True)  # regression: an unused class tied with point 0
@example(([[1, 2]], [1], 2), True)  # regression: one vector, label 1 of 2 classes: a tie with class 0
def test_lemma3_separates_pairwise_independent_vectors_with_distinct_labels(case, explicit):
    vecs, labels, C = case
    assume(len(vecs) > 1 or any(vecs[0]) or C == 1)  # a lone zero vector scores 0 in every class
    W = lemma3_classifier(vecs, labels, C if explicit else None)
    assert W.shape == ((C if explicit else max(labels) + 1), len(vecs[0]))
    assert separates(W, vecs, labels)
    event("unused classes" if W.shape[0] > len(vecs) else "every class used")


@prop(100)
@given(independent_sets(), st.data())
def test_lemma3_refuses_a_linearly_dependent_pair_in_any_position(case, data):
    vecs, labels, C = case
    src = data.draw(st.integers(0, len(vecs) - 1))
    factor = data.draw(st.sampled_from((1, 2, -1, -3, Fraction(1, 2), Fraction(-5, 2), 0)))
    copy = [Fraction(factor) * Fraction(v) for v in vecs[src]]
    at = data.draw(st.integers(0, len(vecs)))
    vecs = vecs[:at] + [copy] + vecs[at:]
    C = max(C, len(vecs))
    labels = list(data.draw(st.permutations(range(C))))[: len(vecs)]
    event("parallel" if factor > 0 else ("antiparallel" if factor < 0 else "zero vector"))
    with pytest.raises(BadInput, match="parallel|dependent"):
        lemma3_classifier(vecs, labels, C)


def test_lemma3_regression_antiparallel_pair_met_late():
    """x3 = -x0 after two other vectors: the incremental proof compares x3 with the point
    whose class scores it highest (x2), never with x0, and used to return a classifier for a
    set outside the lemma's hypothesis (while [x0, -x0] alone was refused)."""
    with pytest.raises(BadInput, match="parallel|dependent"):
        lemma3_classifier([[1, 0], [0, 1], [3, 1], [-1, 0]], [0, 1, 2, 3])
    with pytest.raises(BadInput, match="parallel|dependent"):
        lemma3_classifier([[1, 0], [-1, 0]], [0, 1])


def test_lemma3_refuses_repeated_labels():
    with pytest.raises(BadInput, match="distinct labels"):
        lemma3_classifier([[1, 0], [0, 1]], [0, 0])


# ---- the named-block layout

NAMES = ("alpha", "beta", "gamma", "delta", "eps")


@st.composite
def layouts(draw):
    k = draw(st.integers(1, 4))
    names = draw(st.permutations(NAMES))[:k]
    return Layout.of(*[(name, draw(st.integers(0, 3))) for name in names])


@prop(100)
@given(layouts(), layouts(), st.data())
def test_block_matrix_round_trips_by_name_with_non_square_blocks(rows, cols, data):
    assume(rows.dim > 0 and cols.dim > 0)
    # offsets, slices and indices agree with the block sizes
    start = 0
    for b in rows.blocks:
        assert rows.offset(b.name) == start and rows.slice(b.name) == slice(start, start + b.size)
        assert [rows.index(b.name, i) for i in range(b.size)] == list(range(start, start + b.size))
        start += b.size
    assert start == rows.dim
    assert Layout.of(*[(e["name"], e["size"]) for e in rows.to_json()]) == rows
    # write some blocks (set, then add on top of some), read every block back
    M = BlockMatrix(rows, cols)
    written = {}
    for _ in range(data.draw(st.integers(0, 6))):
        rb = data.draw(st.sampled_from(rows.names))
        cb = data.draw(st.sampled_from(cols.names))
        shape = (rows.size(rb), cols.size(cb))
        value = np.array(data.draw(st.lists(st.lists(st.sampled_from(VALUES), min_size=shape[1], max_size=shape[1]),
                                            min_size=shape[0], max_size=shape[0])), dtype=object).reshape(shape)
        if (rb, cb) in written and data.draw(st.booleans()):
            M.add(rb, cb, value)
            written[(rb, cb)] = written[(rb, cb)] + value
        else:
            M.set(rb, cb, value)
            written[(rb, cb)] = value
    built = M.build()
    assert built.shape == (rows.dim, cols.dim)
    assert not built.flags.writeable
    for rb in rows.names:
        for cb in cols.names:
            block = built[rows.slice(rb), cols.slice(cb)]
            want = written.get((rb, cb), np.zeros((rows.size(rb), cols.size(cb)), dtype=object))
            assert block.shape == want.shape
            assert all(Fraction(a) == Fraction(b) for a, b in zip(block.flat, want.flat)), (rb, cb)
            assert all(isinstance(v, Fraction) for v in block.flat)
    # a single entry by (block, direction) lands on (offset + i, offset + j)
    rb = data.draw(st.sampled_from([b.name for b in rows.blocks if b.size]))
    cb = data.draw(st.sampled_from([b.name for b in cols.blocks if b.size]))
    i = data.draw(st.integers(0, rows.size(rb) - 1))
    j = data.draw(st.integers(0, cols.size(cb) - 1))
    E = BlockMatrix(rows, cols).entry(rb, i, cb, j, Fraction(7, 3)).build()
    assert E[rows.offset(rb) + i, cols.offset(cb) + j] == Fraction(7, 3)
    assert sum(1 for v in E.flat if v) == 1
    # a value of the wrong shape is refused, naming the block
    shape = (rows.size(rb), cols.size(cb) + 1)
    with pytest.raises(ValueError, match=rf"block \({rb}, {cb}\)"):
        BlockMatrix(rows, cols).set(rb, cb, np.ones(shape, dtype=object))
    if rows.size(rb) != cols.size(cb):
        with pytest.raises(ValueError, match="scalar"):
            BlockMatrix(rows, cols).set(rb, cb, 1)
