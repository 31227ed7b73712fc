"""Fixed per-run costs of the bench_all rows (benchmarks/bench_all.py), guarded without a clock.

A whole run is the build, the read-out, planning and the verification; on rows whose float64
forward takes milliseconds the fixed part is what the ratio measures.  These tests count the
work that made it slow (one Fraction addition per dataset point or per matrix entry) and check
that the fast paths give the same exact matrices as the plain definitions they replace.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.tasks import make_task
from depthcert.constructions.attention import constrained_attention
from depthcert.constructions.head_family import Template, template_readout


class _CountAdditions:
    """Counts Fraction + Fraction (and int + Fraction) while active."""

    def __init__(self, monkeypatch):
        self.n = 0
        add, radd = Fraction.__add__, Fraction.__radd__

        def counted_add(a, b):
            self.n += 1
            return add(a, b)

        def counted_radd(a, b):
            self.n += 1
            return radd(a, b)

        monkeypatch.setattr(Fraction, "__add__", counted_add)
        monkeypatch.setattr(Fraction, "__radd__", counted_radd)


def _build_counting(monkeypatch, task, variant=None):
    constructions.build(task, variant)  # closed values cached outside the count
    with monkeypatch.context() as m:
        count = _CountAdditions(m)
        model = constructions.build(task, variant).model
    return model, count.n


def test_memorization_readout_costs_no_addition_per_point(monkeypatch):
    """Theorem 1's read-out has a row per point: its entries are counted in integers, not summed
    as Fractions point by point (the few additions left are the heads' rules, d per copy head)."""
    small, n_small = _build_counting(monkeypatch, make_task("sc", length=6, alphabet=3))
    large, n_large = _build_counting(monkeypatch, make_task("sc", length=6, alphabet=4))
    assert small.W_O.shape[0] == 729 and large.W_O.shape[0] == 4096
    assert n_small < 729 // 4 and n_large < 4096 // 16  # it was 4,516 at 729 points


def test_dnf_build_adds_per_fact_not_per_entry(monkeypatch):
    """multihop dnf (144 AND heads at h=2, k=3, N=4) adds each fact's column once, and a block
    add touches only non-zero entries: no Fraction addition is left at these sizes."""
    model, n = _build_counting(monkeypatch, make_task("multihop", hops=2, k=3, n_entities=4), "dnf")
    assert model.heads == (7, 144)
    assert n < len(model.layers[1])  # under one per head (it was 2,400 with a 0 + x per entry)


def test_block_matrix_fast_paths_equal_the_plain_sums():
    rng = np.random.default_rng(1)
    lay = Layout.of(("a", 3), ("b", 4))
    plain = np.full((7, 7), Fraction(0), dtype=object)
    m = BlockMatrix(lay, lay)
    for step in range(40):
        rb, cb = rng.choice(["a", "b"], size=2)
        r, c = lay.slice(rb), lay.slice(cb)
        shape = (r.stop - r.start, c.stop - c.start)
        kind = step % 4
        ints = rng.integers(-2, 3, size=shape) * (rng.random(shape) < 0.4)
        if kind == 0:
            value = ints  # an int64 array
        elif kind == 1:
            value = ints.astype(object)  # Python ints
        elif kind == 2:
            value = np.array([[Fraction(int(v), 3) for v in row] for row in ints], dtype=object)
        else:
            value = [[Fraction(int(v), 2) if v % 2 else int(v) for v in row] for row in ints]  # mixed, nested lists
        exact = np.array([[Fraction(v) for v in row] for row in np.asarray(value, dtype=object)], dtype=object)
        if step % 3 == 0:
            m.set(rb, cb, value)
            plain[r, c] = exact
        else:
            m.add(rb, cb, value)
            plain[r, c] = plain[r, c] + exact
    built = m.build()
    assert (built == plain).all()
    assert all(type(v) is Fraction for v in built.flat)


@pytest.mark.parametrize("bad", [0.5, True, np.float64(1.0), "1"])
def test_block_matrix_refuses_inexact_entries_and_names_them(bad):
    lay = Layout.of(("a", 2))
    value = np.array([[0, 1], [bad, 0]], dtype=object)
    for op in ("set", "add"):
        with pytest.raises(BadInput, match=r"\[1\]\[0\]"):
            getattr(BlockMatrix(lay, lay), op)("a", "a", value)


def test_constrained_attention_is_content_plus_mask():
    lay = Layout.of(("x", 2), ("position", 3))
    content = BlockMatrix(lay, lay).set("position", "position", [[1, 0, Fraction(-1, 2)], [0, 0, 2], [0, 3, 0]])
    content.set("x", "position", [[1, 2, 3], [0, 0, 1]])
    allowed = np.array([[True, False, True], [False, False, True], [True, True, False]])
    W = constrained_attention(lay, content, allowed, Fraction(-7, 3))
    plain = content.build().copy()
    plain[2:, 2:] = plain[2:, 2:] + np.where(allowed, Fraction(0), Fraction(-7, 3))
    assert (W == plain).all() and all(type(v) is Fraction for v in W.flat)
    assert not W.flags.writeable


def test_template_readout_equals_point_by_point_sums():
    """Distinct weights, and positions whose rows overlap (offsets 0, 0, 4): the counted entries
    equal the sum over points and positions."""
    task = make_task("sc", length=3, alphabet=3)
    tpl = Template(3, lambda h: (0 if h < 2 else 4, [Fraction(1, 3), 1, Fraction(-5, 7)][h]))
    W = template_readout(tpl, task, 12)
    plain = np.full(W.shape, Fraction(0), dtype=object)
    for batch in task.batches(7):
        for ids, y in zip(batch.ids, batch.labels):
            for h in range(3):
                offset, w = tpl.at(h)
                plain[y, offset + ids[h]] += Fraction(w)
    assert (W == plain).all() and all(type(v) is Fraction for v in W.flat)


def test_integer_matrix_and_abs_of_shared_and_distinct_objects():
    from depthcert.checkers.evaluate import _absmat, _all_below, _int_matrix

    half = Fraction(1, 2)
    M = np.array([[half, Fraction(0), half], [Fraction(-3, 4), Fraction(2**70), Fraction(-1, 6)]], dtype=object)
    N, q = _int_matrix(M)
    assert q == 12 and (N * 1 == np.array([[6, 0, 6], [-9, 12 * 2**70, -2]], dtype=object)).all()
    assert all(type(v) is int for v in N.flat)
    assert (_absmat(N) == np.array([[6, 0, 6], [9, 12 * 2**70, 2]], dtype=object)).all()
    assert _absmat(np.array([-2**62, 3], dtype=np.int64)).dtype == object
    assert _all_below([N[0]], 7) and not _all_below([N[0]], 6)
    assert _all_below([N[1, :1]], 10) and not _all_below([N[1, :1]], 9) and not _all_below([N], 2**53)
    assert _all_below([np.empty((0, 3), dtype=object)], 1)
