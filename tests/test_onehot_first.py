"""The proven float64 pass on every query of a one-hot first layer (evaluate._attention_onehot with
last=False: the token rows gathered, the position and constant rows added once per position): the
hidden vectors, logits and margins of two-layer models are the big-integer pass's at every point, at
the largest value weights whose a-priori bound still proves float64 exact."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import Evaluator, integerize
from depthcert.checkers.exhaustive import token_rows
from depthcert.checkers.model import Head, Layer
from depthcert.checkers.tasks import make_task

from test_onehot_last import _fr, _largest_float_scale, _same


@pytest.fixture
def every_query_calls(monkeypatch):
    """How often the every-query one-hot path ran (so a test cannot pass on another path)."""
    calls = []
    real = evaluate._attention_onehot

    def counted(X, token_ids, model, fw, L, last):
        if not last:
            calls.append(1)
        return real(X, token_ids, model, fw, L, last)

    monkeypatch.setattr(evaluate, "_attention_onehot", counted)
    return calls


def _same_all(model, ids) -> None:
    """Logits at every position (the every-query pass of the last layer too) equal the big-integer pass's."""
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.use_float and not exact.use_float
    a, da = fast.logits_all(ids)
    b, db = exact.logits_all(ids)
    assert da == db and [int(x) for x in a.flat] == [int(x) for x in b.flat]


def _random_layer(rng, d, m, causal):
    kinds = [("relu", "hardmax")[int(rng.integers(0, 2))] for _ in range(m)]
    As = [rng.integers(-2, 3, (d, d)) for _ in range(m)]
    Bs = [rng.integers(-3, 4, (d, d)).astype(object) for _ in range(m)]
    dens = [int(rng.integers(1, 4)) for _ in range(m)]

    def layer(s, scale_den=1):
        return Layer(tuple(Head(_fr(A), _fr(B * s, q * scale_den), attention=k)
                           for A, B, q, k in zip(As, Bs, dens, kinds)), causal=causal)
    return layer


def _task_ids(rng, seed, base, task):
    tokens = token_rows(base, task)
    ids = next(task.batches(task.size)).ids
    ids = ids if tokens is None else tokens[ids]
    return ids[:, ::-1].copy() if seed == 2 else ids  # another order of the same tokens


@pytest.mark.parametrize("seed", range(6))
def test_random_one_layer_models_at_the_float_limit_every_position(seed, every_query_calls):
    """One layer of 1..5 relu/hardmax heads (causal or not, with or without the constant row) read at
    every position, its value weights scaled to the largest factor the a-priori bound admits, a third
    of it, and 1 (where the every-query path is allowed: entries of coef_i B_i below 2^53 / 3)."""
    rng = np.random.default_rng(100 + seed)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    if seed % 2:
        base = replace(base, constant_row=True)
    base = replace(base, W_O=_fr(rng.integers(-1, 2, base.W_O.shape)))
    layer = _random_layer(rng, base.dim, [1, 5, 2, 3, int(rng.integers(1, 6)), int(rng.integers(1, 6))][seed],
                          bool(rng.integers(0, 2)))

    def make(s):
        return replace(base, layers=(layer(s),))

    top = _largest_float_scale(make)
    assert integerize(make(top)).bound >= 2**50
    ids_all = _task_ids(rng, seed, base, task)
    ran = 0
    for s in (top, max(1, top // 3), 1):
        model = make(s)
        if not evaluate._fused_weights(integerize(model).layers[0])[3]:
            continue  # past 2^53 / 3: the every-query one-hot path is not taken
        for length in (base.max_length, base.max_length - 1):
            before = len(every_query_calls)
            _same_all(model, ids_all[:, :length].copy())
            assert len(every_query_calls) > before
            ran += 1
    assert ran


@pytest.mark.parametrize("name,sizes,variant", [
    ("tm", dict(l=4, alphabet=4), "heads"), ("tm", dict(l=4, alphabet=4), "ternary"),
    ("tm", dict(l=5, alphabet=5), "ternary"), ("icqa", dict(k=2, n_questions=3, n_answers=3), None),
    ("multihop", dict(hops=2, k=3, n_entities=3), "linear"), ("composition", dict(n_functions=2, domain=3), "linear")])
def test_constructions(name, sizes, variant, every_query_calls):
    """Constructions of two and more layers: every point's last-position logits, margins and hidden
    vectors as the big-integer pass gives them (where the proven float path runs)."""
    task = make_task(name, **sizes)
    model = constructions.build(task, variant, lemma3=False).model
    if not Evaluator(model).use_float:
        pytest.skip("not on the proven float path")
    ids = next(task.batches(task.size)).ids
    tokens = token_rows(model, task)
    _same(model, ids if tokens is None else tokens[ids])
    assert every_query_calls


def _same_checked(model, ids) -> bool:
    """The checked float64 pass (its proven first layer fused) gives the big-integer pass's logits,
    margins and last hidden vectors; True when every batch stayed on float64 (none redone exactly)."""
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.checked and not fast.use_float and fast._fused_first is not None
    a, da = fast.logits(ids)
    b, db = exact.logits(ids)
    assert da == db and [int(x) for x in a.flat] == [int(x) for x in b.flat]
    ha, ga = fast.hidden_last(ids)
    hb, gb = exact.hidden_last(ids)
    assert ga == gb and [int(x) for x in ha.flat] == [int(x) for x in hb.flat]
    rows = np.arange(len(ids)) % len(model.classes)
    ma, _, _ = fast.margins_last(ids, rows)
    mb, _, _ = exact.margins_last(ids, rows)
    assert [int(x) for x in ma] == [int(x) for x in mb]
    fa, fb = fast.logits_all(ids), exact.logits_all(ids)
    assert fa[1] == fb[1] and [int(x) for x in fa[0].flat] == [int(x) for x in fb[0].flat]
    return fast.batches["exact"] == 0 and fast.batches["checked"] > 0


@pytest.mark.parametrize("name,sizes,variant", [
    ("parity", dict(n=8), "tree"), ("multihop", dict(hops=3, k=3, n_entities=3), "linear"),
    ("multihop", dict(hops=3, k=3, n_entities=3), "relu-and"), ("ictm", dict(k=2, l=2, alphabet=3, n_answers=2), None)])
def test_checked_path_constructions(name, sizes, variant, every_query_calls):
    """Constructions on the checked float64 path (the a-priori bound fails past the first layers):
    their proven first layer runs fused from the token ids, the rest checked, and every point's
    numbers are the big-integer pass's."""
    task = make_task(name, **sizes)
    model = constructions.build(task, variant, lemma3=False).model
    ids = next(task.batches(task.size)).ids
    tokens = token_rows(model, task)
    assert _same_checked(model, ids if tokens is None else tokens[ids])
    assert every_query_calls
