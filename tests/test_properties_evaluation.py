"""Properties of exact evaluation (checkers/evaluate.py) and of verify()'s batching and workers
(checkers/exhaustive.py).

  three paths agree   on random models of every rational class (relu, hardmax, causal masks,
                      MLPs, a constant row), weights drawn so that the proven bound lands on
                      both sides of 2^53: the float64 fast path, the big-integer path and a
                      per-point Fraction evaluation (checkers/trace.py, and the independent
                      oracle of tests/independent_oracle.py) give the same logits, exactly;
  the bound is a bound  the integer stream G_l = g_l H_l of every layer is integral and, like
                      every attention score and every logit numerator, at most the proven
                      magnitude bound; the fast path is taken only below 2^53, never above;
  margins do not depend on the batching   every point's margin is the same at any batch size
                      (check_batch), and verify() gives the same verdict, minimum margin,
                      counterexample and counts at any batch size and with workers = 2 (the
                      multiprocessing path, forced on small datasets by lowering
                      exhaustive.PARALLEL_MIN_POINTS), on paper constructions with random
                      single-entry changes (so that some points fail, at random indices).

Random models come from tests/test_model_classes.py's strategies (plain-integer specs that
shrink to a readable model).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from depthcert.checkers import exhaustive
from depthcert.checkers.evaluate import FLOAT_EXACT_LIMIT, Evaluator, integerize
from depthcert.checkers.exhaustive import check_batch, check_compatible, verify
from depthcert.checkers.tasks import make_task
from depthcert.checkers.trace import trace
from depthcert.constructions import registry
from independent_oracle import Oracle
from proptools import prop
from test_model_classes import BIG_VALUES, VALUES, VOCAB, build_model, specs

# weights whose integer forms straddle 2^53 after a layer or two
HUGE_VALUES = (1, -1, 2**26 + 1, -(2**27), Fraction(1, 2**20), 3, Fraction(-7, 5))


def _inputs(spec):
    """The spec's sequences as token-id arrays, grouped by length."""
    by_len: dict[int, list] = {}
    for p in spec.points:
        by_len.setdefault(len(p), []).append([t for t, _, _ in p])
    return {n: np.array(rows, dtype=np.int64) for n, rows in by_len.items()}


@pytest.mark.slow
@prop(100)
@given(st.sampled_from((VALUES, BIG_VALUES, HUGE_VALUES)).flatmap(
    lambda values: specs(kinds=("relu", "hardmax"), values=values)))
def test_float_path_big_integers_and_fractions_agree(spec):
    model = build_model(spec)
    im = integerize(model)
    fast = Evaluator(model)
    exact = Evaluator(model, force_exact=True)
    # the fast path is taken only under a proven bound below 2^53, and never above it
    assert fast.use_float == (im.use_float)
    if fast.use_float:
        assert im.bound < FLOAT_EXACT_LIMIT
    if im.bound >= FLOAT_EXACT_LIMIT:
        assert not fast.use_float
    assert not exact.use_float
    event(f"path: {fast.path}")
    assert fast.denominator == exact.denominator
    den = exact.denominator
    orc = Oracle(model)
    for n, ids in _inputs(spec).items():
        nf, _ = fast.logits_all(ids)
        ne, _ = exact.logits_all(ids)
        assert [[[int(v) for v in r] for r in p] for p in nf] == [[[int(v) for v in r] for r in p] for p in ne]
        lf, _ = fast.logits(ids)
        assert [[int(v) for v in r] for r in lf] == [[int(v) for v in p[-1]] for p in ne]
        for row, point in zip(ids, ne):
            toks = [VOCAB[t] for t in row]
            want = trace(model, list(row)).logits_all
            got = [tuple(Fraction(int(v), den) for v in r) for r in point]
            assert got == list(want), toks
            assert [list(r) for r in got] == orc.logits_all(toks)


@pytest.mark.slow
@prop(60)
@given(st.sampled_from((VALUES, BIG_VALUES, HUGE_VALUES)).flatmap(
    lambda values: specs(kinds=("relu", "hardmax"), values=values)))
def test_the_magnitude_bound_bounds_the_integer_stream(spec):
    """g_l H_l (trace's exact stream times the layer's common denominator) is an integer matrix
    within the bound; so are the integer scores g_in^2 a_i s_jk and the logit numerators."""
    model = build_model(spec)
    im = integerize(model)
    bound = im.bound
    for n, ids in _inputs(spec).items():
        for row in ids:
            tr = trace(model, list(row))
            g_in = 1
            for li, (L, IL) in enumerate(zip(model.layers, im.layers)):
                H_in = tr.H[li]
                for head, A in zip(L.heads, IL.A):
                    a = _denominator(head.W_QK)
                    S = H_in.T.dot(head.W_QK).dot(H_in)
                    for v in S.flat:
                        s_int = Fraction(v) * g_in * g_in * a
                        assert s_int.denominator == 1 and abs(s_int) <= bound, (li, s_int, bound)
                g_in = IL.g_out
                for v in tr.H[li + 1].flat:
                    G = Fraction(v) * g_in
                    assert G.denominator == 1, (li, G)
                    assert abs(G) <= bound, (li, G, bound)
            for logits in tr.logits_all:
                for v in logits:
                    num = Fraction(v) * im.c * g_in
                    assert num.denominator == 1 and abs(num) <= bound
    event("bound < 2^53" if bound < FLOAT_EXACT_LIMIT else "bound >= 2^53")


def _denominator(M) -> int:
    from math import lcm

    q = 1
    for v in M.flat:
        q = lcm(q, Fraction(v).denominator)
    return q


# ---- batching and workers, on paper constructions with random single-entry changes

CONSTRUCTIONS = (
    ("icqa", {"k": 2, "n_questions": 4, "n_answers": 3}, "copy-matching"),
    ("icqa", {"k": 3, "n_questions": 3, "n_answers": 4}, "copy-matching"),
    ("tm", {"l": 3, "alphabet": 4}, "heads"),
    ("tm", {"l": 4, "alphabet": 3}, "ternary"),
    ("multihop", {"hops": 2, "k": 3, "n_entities": 4}, "linear"),
    ("multihop", {"hops": 3, "k": 2, "n_entities": 3}, "doubling"),
    ("ictm", {"k": 2, "l": 2, "alphabet": 2, "n_answers": 2}, "parsing-copying-matching"),  # big integers
    ("ictm", {"k": 1, "l": 2, "alphabet": 3, "n_answers": 2}, "parsing-copying-matching"),
)
_BUILT: dict = {}


def _construction(i):
    if i not in _BUILT:
        name, opts, variant = CONSTRUCTIONS[i]
        task = make_task(name, **opts)
        _BUILT[i] = (task, registry.build(task, variant).model)
    return _BUILT[i]


def _weight_locations(model):
    """Every (where, shape) a single-entry change can address (model.with_weight)."""
    out = [(("W_O",), model.W_O.shape)]
    for li, layer in enumerate(model.layers):
        for hi, _ in enumerate(layer):
            out += [((li, hi, "W_QK"), (model.dim, model.dim)), ((li, hi, "W_V"), (model.dim, model.dim))]
    return out


@st.composite
def changed_constructions(draw):
    """(task, model, changes): a paper construction with 1-3 single entries changed."""
    i = draw(st.integers(0, len(CONSTRUCTIONS) - 1))
    task, model = _construction(i)
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        where, shape = draw(st.sampled_from(_weight_locations(model)))
        M = model.W_O if where == ("W_O",) else getattr(model.layers[where[0]][where[1]], where[2])
        used = [tuple(int(x) for x in rc) for rc in zip(*np.nonzero(M != 0))]
        if used and draw(st.booleans()):  # an entry the construction uses: more refutations
            r, c = draw(st.sampled_from(used))
        else:
            r, c = draw(st.integers(0, shape[0] - 1)), draw(st.integers(0, shape[1] - 1))
        value = draw(st.sampled_from((0, 1, -1, 2, 5, -4, Fraction(1, 2), Fraction(-3, 2))))
        changes.append((where + (r, c), value))
    for where, value in changes:
        model = model.with_weight(where, value)
    return task, model, tuple(changes)


def _summary(v):
    ce = v.counterexample
    return (v.verdict, v.min_margin, v.points_checked, v.points_covered,
            None if ce is None else (ce.index, ce.tokens, ce.expected, ce.predicted, ce.logits, ce.tie))


@pytest.mark.slow
@prop(30)
@given(changed_constructions(), st.integers(1, 97), st.data())
def test_margins_do_not_depend_on_batch_size_or_workers(case, batch_size, data):
    task, model, changes = case
    base = verify(model, task, progress=False)
    event(f"{task.name}: {base.verdict}")
    assert _summary(verify(model, task, batch_size=batch_size, progress=False)) == _summary(base)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exhaustive, "PARALLEL_MIN_POINTS", 1)
        par = verify(model, task, batch_size=batch_size, workers=2, progress=False)
    assert _summary(par) == _summary(base), (changes, batch_size)
    # every point's margin, at two batch sizes, against the Fraction trace on a few points
    cmap = check_compatible(model, task)
    rows = np.array([cmap[i] for i in range(len(task.classes))], dtype=np.int64)
    ev = Evaluator(model)
    margins = {}
    for bs in (batch_size, 4096):
        out = []
        for b in task.batches(bs):
            m, den, _, _, _ = check_batch(ev, b, rows)
            out += [Fraction(int(x), den) for x in m]
        margins[bs] = out
    assert margins[batch_size] == margins[4096]
    for i in data.draw(st.lists(st.integers(0, task.size - 1), min_size=1, max_size=3)):
        p = task.point(i)
        o = trace(model, list(p.tokens)).logits
        y = model.classes.index(p.label)
        assert margins[4096][i] == o[y] - max(v for c, v in enumerate(o) if c != y)


def test_margins_from_float_logits_are_exact_past_2_to_53():
    """Logits below 2^53 are exact in float64, but their difference need not be: 2^52 + 1 minus
    -(2^52 + 2) is 2^53 + 3, which float64 rounds.  The margins are taken in integers, and the
    logits are left as they were."""
    from depthcert.checkers.evaluate import _margins_from_float_logits

    a, b = 2**52 + 1, -(2**52 + 2)
    assert float(a) - float(b) != a - b  # the float difference really rounds
    f = np.array([[float(a), float(b), 0.0], [3.0, 5.0, float(b)]])
    before = f.copy()
    m = _margins_from_float_logits(f, np.array([0, 0]))
    assert m.tolist() == [a - 0, 3 - 5]
    assert m.dtype == np.int64 and np.array_equal(f, before)
    f2 = np.array([[float(a), float(b)]])
    assert _margins_from_float_logits(f2, np.array([0])).tolist() == [a - b]
