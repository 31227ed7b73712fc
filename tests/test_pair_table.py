"""The first layer's pair table (evaluate._pair_table / _attention_pairs: every query's output as a sum
of one tabulated row per group of keys, for relu heads on the one-hot embedding): the hidden vectors,
logits and margins are the big-integer pass's, and an independent Fraction forward's, at every point,
at the largest weights whose a-priori bound still proves float64 exact, with keys grouped one, two
and three to a row."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import FLOAT_EXACT_LIMIT, Evaluator, integerize, logits_fraction_reference
from depthcert.checkers.exhaustive import token_rows
from depthcert.checkers.model import Head, Layer
from depthcert.checkers.tasks import make_task

from test_onehot_last import _fr, _largest_float_scale


@pytest.fixture
def pair_calls(monkeypatch):
    """How often the pair-table path ran; its tables built for any batch (so small test batches take it)."""
    calls = []
    real = evaluate._attention_pairs

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(evaluate, "_attention_pairs", counted)
    monkeypatch.setattr(evaluate, "PAIR_TABLE_SHARE", 1e-9)
    monkeypatch.setattr(evaluate, "PAIR_BUILD_COST", 0)  # the most keys per row PAIR_TABLE_KEYS allows
    return calls


def _equal(a, b) -> bool:
    return [int(x) for x in np.asarray(a).flat] == [int(x) for x in np.asarray(b).flat]


def _same(model, ids, every_position: bool, references: int = 5) -> None:
    """The proven float pass (its first layer from the pair table) gives the big-integer pass's numbers,
    and (last position) `references` of the points an independent Fraction forward's logits."""
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.use_float and not exact.use_float
    if every_position:
        a, da = fast.logits_all(ids)
        b, db = exact.logits_all(ids)
        assert da == db and _equal(a, b)
    else:
        a, da = fast.logits(ids)
        b, db = exact.logits(ids)
        assert da == db and _equal(a, b)
        ha, ga = fast.hidden_last(ids)
        hb, gb = exact.hidden_last(ids)
        assert ga == gb and _equal(ha, hb)
        rows = np.arange(len(ids)) % len(model.classes)
        ma, _, _ = fast.margins_last(ids, rows)
        mb, _, _ = exact.margins_last(ids, rows)
        assert _equal(ma, mb)
        for p in range(0, len(ids), max(1, len(ids) // references)) if references else ():  # a Fraction forward
            ref = logits_fraction_reference(model, [int(t) for t in ids[p]])
            assert [Fraction(int(v), da) for v in a[p]] == ref


def _random_relu_layer(rng, d, m, causal, scale_scores: bool, density: float = 1.0):
    As = [rng.integers(-2, 3, (d, d)) * (rng.random((d, d)) < density) for _ in range(m)]
    Bs = [(rng.integers(-3, 4, (d, d)) * (rng.random((d, d)) < density)).astype(object) for _ in range(m)]
    dens = [int(rng.integers(1, 4)) for _ in range(m)]

    def layer(s):
        if scale_scores:  # large scores, small values
            return Layer(tuple(Head(_fr(np.array(A, dtype=object) * s), _fr(B, q)) for A, B, q in zip(As, Bs, dens)),
                         causal=causal)
        return Layer(tuple(Head(_fr(A), _fr(B * s, q)) for A, B, q in zip(As, Bs, dens)), causal=causal)
    return layer


def _ids(base, task, reverse: bool):
    tokens = token_rows(base, task)
    ids = next(task.batches(task.size)).ids
    ids = ids if tokens is None else tokens[ids]
    return ids[:, ::-1].copy() if reverse else ids


@pytest.mark.parametrize("keys", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))  # 3 x 3 cases, about 2.5 s each (an independent audit ran 2,319 such models once, 2026-11-26)
def test_random_models_at_the_float_limit(seed, keys, pair_calls, monkeypatch):
    """A first layer of 1..5 relu heads (causal or not, with or without the constant row, inputs of
    two lengths, a token order differing from the model's), its value (or score) weights scaled to the
    largest factor the a-priori bound admits, a third of it, and 1: read at every position (one layer),
    and under a random second layer at the last position (two layers)."""
    monkeypatch.setattr(evaluate, "PAIR_TABLE_KEYS", keys)
    real = evaluate._pair_table
    sizes = []

    def recorded(*args):
        got = real(*args)
        sizes.extend(size for _, size, _, _ in (got[2] if got is not None else ()))
        return got
    monkeypatch.setattr(evaluate, "_pair_table", recorded)
    rng = np.random.default_rng(300 + seed)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    if seed % 2:
        base = replace(base, constant_row=True)
    base = replace(base, W_O=_fr(rng.integers(-1, 2, base.W_O.shape)))
    d = base.dim
    m = [1, 5, 2, 3, int(rng.integers(1, 6)), int(rng.integers(1, 6))][seed]
    causal = bool(rng.integers(0, 2))
    firsts = {1: _random_relu_layer(rng, d, m, causal, scale_scores=seed >= 4),  # sparse under a second layer
              2: _random_relu_layer(rng, d, m, causal, scale_scores=seed >= 4, density=0.1)}

    def sparse():  # a second layer small enough for a proven two-layer bound
        return _fr(rng.integers(-1, 2, (d, d)) * (rng.random((d, d)) < 0.1))
    second = Layer(tuple(Head(sparse(), sparse(), attention=("relu", "hardmax")[int(rng.integers(0, 2))])
                         for _ in range(int(rng.integers(1, 3)))), causal=bool(rng.integers(0, 2)))
    ids_all = _ids(base, task, seed == 2)
    ran = {1: 0, 2: 0}
    for depth in (1, 2):
        def make(s):
            first = firsts[depth]
            return replace(base, layers=(first(s),) if depth == 1 else (first(s), second))

        top = _largest_float_scale(make)
        assert integerize(make(top)).use_float
        if depth == 1:
            assert integerize(make(top)).bound >= 2**45  # near the limit (denominators make it jump with s)
        for s in (top, max(1, top // 3), 1):
            model = make(s)
            im = integerize(model)
            if not im.use_float or not evaluate._fused_weights(im.layers[0])[3]:
                continue  # past 2^53 / 3: the every-query one-hot path is not taken
            for length in (base.max_length, base.max_length - 1):
                before = len(pair_calls)
                _same(model, ids_all[:, :length].copy(), every_position=depth == 1)
                assert len(pair_calls) > before
                ran[depth] += 1
    assert ran[1] and ran[2]
    assert max(sizes) == keys  # rows of `keys` keys were built


@pytest.mark.parametrize("name,sizes,variant,stride", [
    ("tm", dict(l=4, alphabet=4), "heads", 1), ("tm", dict(l=5, alphabet=5), "ternary", 1),
    ("icqa", dict(k=2, n_questions=3, n_answers=3), None, 1), ("composition", dict(n_functions=2, domain=3), "linear", 1),
    ("multihop", dict(hops=2, k=3, n_entities=3), "dnf", 3)])
def test_constructions(name, sizes, variant, stride, pair_calls):
    """Constructions: the last-position logits, margins and hidden vectors from the pair table as the
    big-integer pass gives them, at every point (every `stride`-th point of multihop dnf, whose 81-head
    second layer makes the big-integer pass slow: 162 points, above the table's 4 V^2 = 64)."""
    task = make_task(name, **sizes)
    model = constructions.build(task, variant, lemma3=False).model
    if not Evaluator(model).use_float:
        pytest.skip("not on the proven float path")
    # against the big-integer pass only (the Fraction forward of an 81-head layer takes seconds a point;
    # the random models above meet it)
    _same(model, _ids(model, task, False)[::stride].copy(), every_position=False, references=0)
    assert pair_calls


def test_table_entries_are_exact_integers_below_2_53(monkeypatch):
    """Every entry of a table is an integer below 2^53 (float64-exact); past the a-priori bound a
    table whose entries would reach 2^53 is not built (None), and a hardmax head is never tabulated."""
    monkeypatch.setattr(evaluate, "PAIR_TABLE_SHARE", 1e-9)
    rng = np.random.default_rng(7)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    d = base.dim
    layer = _random_relu_layer(rng, d, 2, False, scale_scores=False)
    W_O = _fr(rng.integers(-1, 2, base.W_O.shape))

    def make(s):
        return replace(base, W_O=W_O, layers=(layer(s),))

    top = _largest_float_scale(make)
    for s, proven in ((top, True), (top * 64, False)):
        im = integerize(make(s))
        assert im.use_float == proven
        fw = evaluate._fused_weights(im.layers[0])
        T = evaluate._pair_table(im.model, fw, im.layers[0], base.max_length, 100)
        if proven:
            assert T is not None and np.array_equal(T[0], np.round(T[0])) and np.abs(T[0]).max() < FLOAT_EXACT_LIMIT
        else:
            assert T is None or np.abs(T[0]).max() < FLOAT_EXACT_LIMIT
    hard = replace(base, layers=(Layer((Head(_fr(np.eye(d, dtype=int)), _fr(np.eye(d, dtype=int)), attention="hardmax"),)),))
    im = integerize(hard)
    assert evaluate._pair_table(im.model, evaluate._fused_weights(im.layers[0]), im.layers[0], base.max_length, 100) is None


def test_expected_points_only_size_the_table(monkeypatch):
    """Evaluator.expect_points changes the keys per row (the cost estimate over more points), never a
    number: tm ternary l = 5's hidden vectors for a few horizons."""
    task = make_task("tm", l=5, alphabet=5)
    model = constructions.build(task, "ternary", lemma3=False).model
    ids = _ids(model, task, False)
    seen, results = set(), []
    for horizon in (0, 3125, 10**6):
        ev = Evaluator(model)
        ev.expect_points(horizon)
        h, den = ev.hidden_last(ids)
        results.append((den, [int(v) for v in h.flat]))
        (table,) = ev._fused[0][4]._tables.values()
        seen.add(max(size for _, size, _, _ in table[2]))
    assert all(r == results[0] for r in results) and len(seen) >= 2
