"""The columns a layer's input stream can reach (evaluate._stream_supports) and _attention_fused on them
(_on_support): every column left out is exactly zero at every point of the big-integer pass, and the
proven float pass restricted to the support gives the big-integer pass's hidden vectors, logits and
margins, on random models of sparse value weights (partial supports) and on constructions."""
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

from test_onehot_last import _fr
from test_pair_table import _equal, _same


def _ids(model, task):
    tokens = token_rows(model, task)
    ids = next(task.batches(task.size)).ids
    return ids if tokens is None else tokens[ids]


def _check(model, ids):
    sups = evaluate._stream_supports(model, integerize(model).layers)
    for li in range(1, len(model.layers)):  # the stream entering layer li, exactly, at every position
        prefix = replace(model, layers=model.layers[:li])
        X = Evaluator(prefix, force_exact=True)._forward(ids, last_only=False)
        if sups[li] is not None:
            off = np.setdiff1d(np.arange(model.dim), sups[li])
            assert all(int(v) == 0 for v in X[:, :, off].flat)
    fast = Evaluator(model)
    if not fast.use_float:
        return False
    _same(model, ids, every_position=False)  # hidden vectors, logits, margins (and a Fraction forward)
    _same(model, ids, every_position=True)
    return any(fw is not None and len(fw) > 5 for fw in fast._fused)


@pytest.mark.parametrize("seed", range(8))
def test_random_sparse_models(seed):
    rng = np.random.default_rng(500 + seed)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    base = replace(base, W_O=_fr(rng.integers(-1, 2, base.W_O.shape)), constant_row=bool(seed % 2))
    d = base.dim
    layers = []
    for _ in range(int(rng.integers(2, 4))):
        heads = tuple(Head(_fr(rng.integers(-1, 2, (d, d)) * (rng.random((d, d)) < 0.3)),
                           _fr(rng.integers(-1, 2, (d, d)) * (rng.random((d, d)) < 0.04)),
                           attention=("relu", "hardmax")[int(rng.integers(0, 2))])
                      for _ in range(int(rng.integers(1, 4))))
        layers.append(Layer(heads, causal=bool(rng.integers(0, 2))))
    model = replace(base, layers=tuple(layers))
    _check(model, _ids(model, task))


@pytest.mark.parametrize("name,sizes,variant,stride", [
    ("tm", dict(l=4, alphabet=4), "heads", 1), ("tm", dict(l=5, alphabet=5), "heads", 5),
    ("multihop", dict(hops=2, k=3, n_entities=3), "linear", 1), ("composition", dict(n_functions=2, domain=3), "doubling", 1)])
def test_constructions(name, sizes, variant, stride):
    """Every point (every 5th of tm l = 5's 3,125: the big-integer pass over all of them takes most of
    the test's time, and l = 4 covers every point of the same construction)."""
    task = make_task(name, **sizes)
    model = constructions.build(task, variant, lemma3=False).model
    ran = _check(model, _ids(model, task)[::stride].copy())
    if (name, variant) == ("tm", "heads"):
        assert ran  # its second layer runs on the first one's 2 l + 2 columns


def test_token_ids_outside_the_vocabulary_are_refused():
    """An id with no one-hot row (-1 would index the last column, V the first position's) is refused
    on every path, never evaluated (the supports assume a stream of input rows)."""
    task = make_task("tm", l=3, alphabet=3)
    model = constructions.build(task, "heads", False).model
    ids = _ids(model, task)[:4].copy()
    for bad in (-1, len(model.vocab)):
        wrong = ids.copy()
        wrong[1, 0] = bad
        for ev in (Evaluator(model), Evaluator(model, force_exact=True)):
            with pytest.raises(ValueError, match="token ids must lie in"):
                ev.hidden_last(wrong)
            with pytest.raises(ValueError, match="token ids must lie in"):
                ev.logits_all(wrong)
    assert _equal(Evaluator(model).logits(ids)[0], Evaluator(model, force_exact=True).logits(ids)[0])
