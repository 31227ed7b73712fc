"""Properties of the symmetry reduction (checkers/symmetry.py, exhaustive.plan_points) on the
paper's enumerated tasks (icqa, tm, ictm, multihop), whose symmetry groups are full symmetric
groups of token sets.

  recognized and exact   a random model made equivariant by construction (every weight matrix
                         constant on the orbits of index pairs under the groups: the general
                         Sym-equivariant linear map, with scratch blocks and MLP hidden blocks
                         that carry a copy of a token group) passes check_equivariance; every
                         point's margin equals the margins of its whole orbit (orbits by brute
                         force over every group element); verify gives the same verdict and
                         minimum margin with and without the reduction.  Half the models are a
                         paper construction plus a random equivariant perturbation, so that
                         verified verdicts occur.
  perturbations          a random single-entry change of such a model either makes
                         check_equivariance fail (then verify falls back to every point), or
                         leaves every point's margin equal to its orbit's (the reduction stays
                         exact).  A change of an attention or classifier entry whose orbit has
                         more than one entry is always caught.

tests/test_model_classes.py checks the same on user datasets under a swap of two tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import task_reference as ref
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.exhaustive import check_batch, check_compatible, verify
from depthcert.checkers.layout import Layout, zeros
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.checkers.symmetry import check_equivariance
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry
from proptools import prop

VALUES = (1, -1, 2, -2, Fraction(1, 2), 3, Fraction(-1, 3))
SMALL = (Fraction(1, 1000), Fraction(-1, 1000), Fraction(1, 500), Fraction(-1, 300), 1)  # 1: sometimes refuted

TASKS = (
    ("icqa", (("k", 1), ("n_questions", 3), ("n_answers", 2))),
    ("icqa", (("k", 2), ("n_questions", 3), ("n_answers", 3))),
    ("icqa", (("k", 2), ("n_questions", 4), ("n_answers", 3))),
    ("tm", (("l", 2), ("alphabet", 3))),
    ("tm", (("l", 3), ("alphabet", 3))),
    ("ictm", (("k", 2), ("l", 2), ("alphabet", 2), ("n_answers", 2))),
    ("ictm", (("k", 1), ("l", 2), ("alphabet", 3), ("n_answers", 3))),
    ("multihop", (("hops", 2), ("k", 2), ("n_entities", 3))),
    ("multihop", (("hops", 3), ("k", 3), ("n_entities", 3))),
)
VARIANTS = {"icqa": "copy-matching", "tm": "ternary", "ictm": "parsing-copying-matching", "multihop": "linear"}


@lru_cache(maxsize=None)
def load(i: int):
    """(task, points, orbits, construction model) of TASKS[i]."""
    name, opts = TASKS[i]
    task = make_task(name, **dict(opts))
    points = ref.all_points(task)
    orbits = ref.orbits(points, task.symmetry_groups())
    base = registry.build(task, VARIANTS[name]).model
    assert check_equivariance(base, task.symmetry_groups()).ok, (name, "construction not equivariant")
    return task, points, orbits, base


# ---- the orbit structure of index pairs


def row_types(vocab, dim: int, tags: dict, groups) -> list:
    """Per row of the stream: None (fixed by every group element) or (group, block, token index):
    token rows of a group's tokens, and rows tagged (block, token) with a group's token."""
    where = {t: (g, i) for g, grp in enumerate(groups) for i, t in enumerate(grp)}
    out: list = [None] * dim
    for r, t in enumerate(vocab):
        if t in where:
            out[r] = (where[t][0], "token", where[t][1])
    for r, (blk, tok) in tags.items():
        if tok in where:
            out[r] = (where[tok][0], blk, where[tok][1])
    return out


def pair_key(ti, tj, i: int, j: int):
    """The orbit of the index pair (i, j) under the groups, from the rows' types."""
    if ti is None and tj is None:
        return ("fixed", i, j)
    if tj is None:
        return ("row moved", ti[0], ti[1], j)
    if ti is None:
        return ("col moved", i, tj[0], tj[1])
    if ti[0] == tj[0]:
        return ("same group", ti[0], ti[1], tj[1], ti[2] == tj[2])
    return ("two groups", ti[0], ti[1], tj[0], tj[1])


def vec_key(t, i: int):
    return ("fixed", i) if t is None else ("moved", t[0], t[1])


def equivariant_matrix(rtypes, ctypes, entries) -> np.ndarray:
    """The matrix that is `v` on the whole orbit of (i, j) for each entry (i, j, v), else 0."""
    val = {}
    for i, j, v in entries:
        val[pair_key(rtypes[i], ctypes[j], i, j)] = Fraction(v)
    M = zeros(len(rtypes), len(ctypes))
    for i, ti in enumerate(rtypes):
        for j, tj in enumerate(ctypes):
            M[i, j] = val.get(pair_key(ti, tj, i, j), Fraction(0))
    return M


def equivariant_vector(types, entries) -> np.ndarray:
    val = {}
    for i, v in entries:
        val[vec_key(types[i], i)] = Fraction(v)
    return np.array([val.get(vec_key(t, i), Fraction(0)) for i, t in enumerate(types)], dtype=object)


def orbit_size(rtypes, ctypes, i: int, j: int) -> int:
    key = pair_key(rtypes[i], ctypes[j], i, j)
    return sum(1 for a, ta in enumerate(rtypes) for b, tb in enumerate(ctypes) if pair_key(ta, tb, a, b) == key)


# ---- specs: plain integers, so that a shrunk failure reads as a small model


@dataclass(frozen=True)
class HeadSpec:
    kind: str
    qk: tuple  # ((row, col, value), ...): the value on the row's and col's whole orbit
    v: tuple


@dataclass(frozen=True)
class MLPSpec:
    carried: tuple  # group of each carried hidden block (|group| units each)
    fixed: int  # hidden units fixed by every group element
    W1: tuple
    b1: tuple
    W2: tuple
    b2: tuple


@dataclass(frozen=True)
class LayerSpec:
    heads: tuple
    causal: bool
    mlp: MLPSpec | None


@dataclass(frozen=True)
class EqSpec:
    task: int  # index into TASKS
    on_construction: bool  # the paper construction + a small equivariant perturbation
    carried: tuple  # group of each scratch block carrying a copy of a token group
    free: int  # fixed scratch rows
    const: bool
    layers: tuple
    W_O: tuple


def _entries(draw, rows: int, cols: int, max_size: int, values) -> tuple:
    return tuple(draw(st.lists(st.tuples(st.integers(0, rows - 1), st.integers(0, cols - 1), st.sampled_from(values)),
                               max_size=max_size)))


@st.composite
def eq_specs(draw):
    t = draw(st.integers(0, len(TASKS) - 1))
    task, _, _, base = load(t)
    groups = task.symmetry_groups()
    on_construction = draw(st.booleans())
    if on_construction:
        d = base.dim
        layers = tuple(LayerSpec(tuple(HeadSpec(h.attention, _entries(draw, d, d, 3, SMALL), _entries(draw, d, d, 3, SMALL))
                                       for h in L), L.causal, None) for L in base.layers)
        return EqSpec(t, True, (), 0, False, layers, _entries(draw, len(base.classes), d, 3, SMALL))
    carried = tuple(draw(st.lists(st.integers(0, len(groups) - 1), max_size=2)))
    free = draw(st.integers(0, 2))
    const = draw(st.booleans())
    d = len(task.vocab) + task.length + int(const) + sum(len(groups[g]) for g in carried) + free
    layers = []
    for _ in range(draw(st.integers(1, 2))):
        mlp = None
        if draw(st.booleans()):
            hc = tuple(draw(st.lists(st.integers(0, len(groups) - 1), max_size=1)))
            fixed = draw(st.integers(0 if hc else 1, 2))
            f = fixed + sum(len(groups[g]) for g in hc)
            mlp = MLPSpec(hc, fixed, _entries(draw, f, d, 4, VALUES), tuple(draw(st.lists(st.tuples(
                st.integers(0, f - 1), st.sampled_from(VALUES)), max_size=2))), _entries(draw, d, f, 4, VALUES),
                tuple(draw(st.lists(st.tuples(st.integers(0, d - 1), st.sampled_from(VALUES)), max_size=2))))
        heads = tuple(HeadSpec(draw(st.sampled_from(("relu", "hardmax"))), _entries(draw, d, d, 6, VALUES),
                               _entries(draw, d, d, 6, VALUES))
                      for _ in range(draw(st.integers(0 if mlp else 1, 2))))
        layers.append(LayerSpec(heads, draw(st.booleans()), mlp))
    return EqSpec(t, False, carried, free, const, tuple(layers), _entries(draw, len(task.classes), d, 8, VALUES))


def build(spec: EqSpec) -> tuple:
    """(task, model, row types, class types)."""
    task, _, _, base = load(spec.task)
    groups = task.symmetry_groups()
    where = {t: (g, i) for g, grp in enumerate(groups) for i, t in enumerate(grp)}
    ctypes = [(where[c][0], "class", where[c][1]) if c in where else None for c in task.classes]
    if spec.on_construction:
        rtypes = row_types(base.vocab, base.dim, base.notes.get("row_tokens", {}), groups)
        layers = []
        for L, LS in zip(base.layers, spec.layers):
            heads = tuple(Head(h.W_QK + equivariant_matrix(rtypes, rtypes, hs.qk),
                               h.W_V + equivariant_matrix(rtypes, rtypes, hs.v), attention=h.attention)
                          for h, hs in zip(L.heads, LS.heads))
            layers.append(Layer(heads, causal=L.causal, mlp=L.mlp))
        W_O = base.W_O + equivariant_matrix(ctypes, rtypes, spec.W_O)
        model = Model(base.vocab, base.max_length, base.classes, base.layout, tuple(layers), W_O,
                      notes=dict(base.notes))
        return task, model, rtypes, ctypes
    V, n = len(task.vocab), task.length
    blocks = [("token", V), ("position", n)] + [("one", 1)] * spec.const
    tags = {}
    row = V + n + int(spec.const)
    for b, g in enumerate(spec.carried):
        blocks.append((f"copy{b}", len(groups[g])))
        for i, tok in enumerate(groups[g]):
            tags[row + i] = (f"copy{b}", tok)
        row += len(groups[g])
    if spec.free:
        blocks.append(("free", spec.free))
    lay = Layout.of(*blocks)
    d = lay.dim
    rtypes = row_types(task.vocab, d, tags, groups)
    layers = []
    for LS in spec.layers:
        heads = tuple(Head(equivariant_matrix(rtypes, rtypes, h.qk), equivariant_matrix(rtypes, rtypes, h.v),
                           attention=h.kind) for h in LS.heads)
        mlp = None
        if LS.mlp is not None:
            htypes = _hidden_types(LS.mlp, groups)
            mlp = MLP(equivariant_matrix(htypes, rtypes, LS.mlp.W1), equivariant_vector(htypes, LS.mlp.b1),
                      equivariant_matrix(rtypes, htypes, LS.mlp.W2), equivariant_vector(rtypes, LS.mlp.b2))
        layers.append(Layer(heads, causal=LS.causal, mlp=mlp))
    model = Model(task.vocab, n, task.classes, lay, tuple(layers), equivariant_matrix(ctypes, rtypes, spec.W_O),
                  constant_row=spec.const, notes={"row_tokens": tags})
    return task, model, rtypes, ctypes


def _hidden_types(mlp: MLPSpec, groups) -> list:
    out = [None] * mlp.fixed
    for b, g in enumerate(mlp.carried):
        out += [(g, f"hidden{b}", i) for i in range(len(groups[g]))]
    return out


# ---- margins of every point, and the reduction


def all_margins(model, task) -> list:
    """Every point's exact margin, in index order (the kernel's batched evaluation)."""
    cmap = check_compatible(model, task)
    rows = np.array([cmap[i] for i in range(len(task.classes))], dtype=np.int64)
    ev = Evaluator(model)
    out = []
    for b in task.batches(4096):
        m, den, _, _, _ = check_batch(ev, b, rows)
        out += [Fraction(int(x), den) for x in m]
    return out


def assert_reduction_exact(model, task, orbits, margins):
    for orbit in orbits:
        vals = {margins[i] for i in orbit}
        assert len(vals) == 1, f"margins differ inside the orbit of point {orbit[0]}: {sorted(vals)[:4]}"
    off = verify(model, task, progress=False, symmetry="off")
    auto = verify(model, task, progress=False, symmetry="auto")
    assert any("equivariance proven" in note for note in auto.notes), auto.notes
    assert auto.verdict == off.verdict
    reps = [int(i) for i in task.orbit_representatives()[0]]
    assert min(margins[i] for i in reps) == min(margins)
    if off.verified:
        assert auto.min_margin == off.min_margin == min(margins)
        assert auto.points_checked == len(reps) and auto.points_covered == task.size
    else:
        assert margins[auto.counterexample.index] <= 0
    return off


@prop(50)
@given(eq_specs())
def test_equivariant_models_are_recognized_and_reduce_exactly(spec):
    task, model, _, _ = build(spec)
    _, _, orbits, _ = load(spec.task)
    report = check_equivariance(model, task.symmetry_groups())
    assert report.ok, report.reason
    margins = all_margins(model, task)
    off = assert_reduction_exact(model, task, orbits, margins)
    event(f"{task.name}{' (construction + perturbation)' if spec.on_construction else ''}: {off.verdict}")


@pytest.mark.slow
@prop(50)
@given(eq_specs(), st.data())
def test_single_entry_perturbations_are_caught_or_keep_the_reduction_exact(spec, data):
    task, model, rtypes, ctypes = build(spec)
    _, _, orbits, _ = load(spec.task)
    groups = task.symmetry_groups()
    d = model.dim
    where_choices = [("W_O",)] + [(li, hi, key) for li, L in enumerate(model.layers) for hi in range(len(L))
                                  for key in ("W_QK", "W_V")]
    where_choices += [(li, "mlp", key) for li, L in enumerate(model.layers) if L.mlp is not None
                      for key in ("W1", "W2", "b1", "b2")]
    where = data.draw(st.sampled_from(where_choices))
    value = Fraction(data.draw(st.sampled_from(VALUES + (0, 5))))
    if where[0] == "W_O":
        i, j = data.draw(st.integers(0, len(model.classes) - 1)), data.draw(st.integers(0, d - 1))
        old, size = model.W_O[i, j], orbit_size(ctypes, rtypes, i, j)
        loc = ("W_O", i, j)
    elif where[1] == "mlp":
        M = getattr(model.layers[where[0]].mlp, where[2])
        idx = tuple(data.draw(st.integers(0, s - 1)) for s in M.shape)
        old, size = M[idx], None  # hidden units may be re-matched: no claim that the check fails
        loc = where + idx
    else:
        i, j = data.draw(st.integers(0, d - 1)), data.draw(st.integers(0, d - 1))
        old = getattr(model.layers[where[0]][where[1]], where[2])[i, j]
        size = orbit_size(rtypes, rtypes, i, j)
        loc = where + (i, j)
    changed = model.with_weight(loc, value)
    report = check_equivariance(changed, groups)
    if size is not None and size > 1 and value != old:
        assert not report.ok, f"{loc}: {old} -> {value} breaks an orbit of {size} entries, but the check passed"
    if report.ok:
        event("perturbation kept the equivariance")
        assert_reduction_exact(changed, task, orbits, all_margins(changed, task))
    else:
        event("perturbation caught")
        v = verify(changed, task, progress=False, symmetry="auto")
        assert any("not used" in note for note in v.notes), v.notes
        off = verify(changed, task, progress=False, symmetry="off")
        assert (v.verdict, v.min_margin, v.points_checked) == (off.verdict, off.min_margin, off.points_checked)
