"""The proven float64 pass on the last query of a one-hot first layer (evaluate._attention_onehot_last,
V_i = sum_j w_ij x_j and then [V_1 ... V_m] [coef_i B_i^T]): the hidden vectors and logits are the
big-integer pass's at every point, on random one-layer models at the largest weights whose a-priori
bound still proves float64 exact, and on the SC construction (Theorem 1) at several sizes."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import Evaluator, integerize
from depthcert.checkers.exhaustive import token_rows
from depthcert.checkers.model import Head, Layer
from depthcert.checkers.tasks import make_task


def _fr(rows, den=1):
    return np.array([[Fraction(int(v), den) for v in r] for r in rows], dtype=object)


@pytest.fixture
def last_calls(monkeypatch):
    """How often the last-query one-hot path ran (so a test cannot pass on another path)."""
    calls = []
    real = evaluate._attention_onehot_last

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(evaluate, "_attention_onehot_last", counted)
    return calls


def _same(model, ids) -> None:
    """Logits, margins and last hidden vectors of the proven float pass equal the big-integer pass's."""
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.use_float and not exact.use_float
    a, da = fast.logits(ids)
    b, db = exact.logits(ids)
    assert a.dtype != object and b.dtype == object
    assert da == db and [int(x) for x in a.flat] == [int(x) for x in b.flat]
    ha, ga = fast.hidden_last(ids)
    hb, gb = exact.hidden_last(ids)
    assert ga == gb and [int(x) for x in ha.flat] == [int(x) for x in hb.flat]
    rows = np.arange(len(ids)) % len(model.classes)
    ma, _, _ = fast.margins_last(ids, rows)
    mb, _, _ = exact.margins_last(ids, rows)
    assert [int(x) for x in ma] == [int(x) for x in mb]


def _largest_float_scale(make) -> int:
    """The largest s with make(s)'s a-priori bound below 2^53 (the bound grows with s)."""
    lo, hi = 1, 2**60
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if integerize(make(mid)).use_float else (lo, mid)
    return lo


@pytest.mark.parametrize("seed", range(4))
def test_random_one_layer_models_at_the_float_limit(seed, last_calls):
    """One layer of 1..9 relu/hardmax heads (causal or not, with or without the constant row, inputs
    of every length up to max_length, a token order differing from the model's) with value weights
    scaled to the largest factor the a-priori bound admits, a third of it, and 1: the last-query
    path gives the big-integer pass's numbers."""
    rng = np.random.default_rng(seed)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    if seed % 2:
        base = replace(base, constant_row=True)
    d = base.dim
    # a small integer read-out: the a-priori bound is then the stream's, not the classifier's denominator
    base = replace(base, W_O=_fr(rng.integers(-1, 2, base.W_O.shape)))
    tokens = token_rows(base, task)
    ids_all = next(task.batches(task.size)).ids
    ids_all = ids_all if tokens is None else tokens[ids_all]
    ids_all = ids_all[:, ::-1].copy() if seed == 2 else ids_all  # another order of the same tokens
    m = [1, 9, int(rng.integers(2, 9)), int(rng.integers(2, 9))][seed]
    kinds = [("relu", "hardmax")[int(rng.integers(0, 2))] for _ in range(m)]
    causal = bool(rng.integers(0, 2))
    As = [rng.integers(-2, 3, (d, d)) for _ in range(m)]
    Bs = [rng.integers(-3, 4, (d, d)).astype(object) for _ in range(m)]
    dens = [int(rng.integers(1, 4)) for _ in range(m)]

    def make(s):
        heads = tuple(Head(_fr(A), _fr(B * s, q), attention=k) for A, B, q, k in zip(As, Bs, dens, kinds))
        return replace(base, layers=(Layer(heads, causal=causal),))

    top = _largest_float_scale(make)
    assert integerize(make(top)).bound >= 2**50  # near the limit (denominators make it jump with s)
    for s in (top, max(1, top // 3), 1):
        model = make(s)
        for length in (base.max_length, base.max_length - 1):
            before = len(last_calls)
            _same(model, ids_all[:, :length].copy())
            assert len(last_calls) > before


@pytest.mark.parametrize("length,alphabet,n_points", [(2, 2, None), (3, 3, None), (4, 2, None), (5, 4, 300)])
def test_sc_construction(length, alphabet, n_points, last_calls):
    """Theorem 1's construction for SC: every point's logits, margin and hidden vector as the
    big-integer pass gives them, and the verdict is verified on the fast path."""
    from depthcert.checkers.exhaustive import verify

    task = make_task("sc", length=length, alphabet=alphabet, n_points=n_points)
    model = constructions.build(task, None, False).model
    ids = next(task.batches(task.size)).ids
    tokens = token_rows(model, task)
    _same(model, ids if tokens is None else tokens[ids])
    assert last_calls
    v = verify(model, task, progress=False)
    assert v.verified and v.path.startswith("float64")


def test_sc_construction_with_scaled_value_weights(last_calls):
    """The SC construction with its value weights times the largest factor the a-priori bound admits
    (and minus that factor: negative values, relu weights zero on every key): the big-integer pass's
    logits and margins at every point."""
    task = make_task("sc", length=3, alphabet=3)
    base = constructions.build(task, None, False).model
    (layer,) = base.layers

    def make(s):
        return replace(base, layers=(Layer(tuple(replace(h, W_V=h.W_V * s) for h in layer), layer.causal, layer.mlp),))

    top = _largest_float_scale(make)
    assert top > 1
    ids = next(task.batches(task.size)).ids
    tokens = token_rows(base, task)
    ids = ids if tokens is None else tokens[ids]
    for s in (top, -top, 3):
        _same(make(s), ids)
    assert last_calls


@pytest.mark.parametrize("den", [1, 2])
def test_value_weights_past_a_third_of_2_53_on_a_head_with_zero_scores(den, last_calls):
    """A relu head whose scores are all zero (so its weights are; the a-priori bound does not grow with
    its value weights) with coef_i B_i entries just below 2^53, past the 2^53 / 3 the every-query
    one-hot path needs (it would add three such rows before any weight applies), beside a working
    relu head whose value weights have denominator den (the idle head's coef is then den): the
    last-query path is taken (it never forms those rows) and is exact."""
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    d = base.dim
    rng = np.random.default_rng(7 + den)
    eye = np.eye(d, dtype=np.int64)
    work = Head(_fr(rng.integers(0, 2, (d, d))), _fr(rng.integers(-2, 3, (d, d)), den))
    idle = Head(_fr(np.zeros((d, d), dtype=np.int64)), _fr(eye * ((2**53 - 1) // den)))
    model = replace(base, layers=(Layer((idle, work)),))
    layer = integerize(model).layers[0]
    assert layer.coef[0] == den
    fw = evaluate._fused_weights(layer)
    assert fw is not None and not fw[3]  # past 2^53 / 3: the every-query path is not allowed
    ids = next(task.batches(task.size)).ids
    tokens = token_rows(base, task)
    _same(model, ids if tokens is None else tokens[ids])
    assert last_calls
