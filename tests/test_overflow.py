"""Overflow: magnitudes past 2^53 and 2^63 leave the float64 fast path for exact big integers
with the same verdict and margin as a forced exact run and as the independent Fraction oracle.

Also shows that int64 would have been wrong: the same integer forward pass (written here from
the recurrence documented in checkers/evaluate.py) run in numpy int64 wraps silently, while
the exact run's numbers really exceed 2^63.  And checks `magnitude_bound` against the largest
magnitude the exact pass actually produces.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.evaluate import FLOAT_EXACT_LIMIT, Evaluator, integerize
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import ICQA, make_task
from depthcert.constructions import registry
from independent_oracle import oracle_verdict

I64 = 2**63


def _triple(v):
    return v.verdict, v.min_margin, None if v.counterexample is None else v.counterexample.index


def integer_pass(model, ids: np.ndarray, dtype):
    """Logit numerators of the integer forward pass (checkers/evaluate.py docstring):
        G' = D g^2 G + sum_i coef_i B_i G relu(G^T A_i G),   g' = D g^3,   logits = C G_last
    on H = G / g, every column, with plain numpy in `dtype` (object = exact, int64 = wraps).
    Returns (numerators (B, C), largest |value| seen in any G, score or logit)."""
    im = integerize(model)
    B_, n = ids.shape
    V = len(model.vocab)
    G = np.zeros((B_, model.dim, n), dtype=dtype)
    for b in range(B_):
        for p in range(n):
            G[b, ids[b, p], p] = 1
            G[b, V + p, p] = 1
    biggest = 1
    g = 1
    with np.errstate(over="ignore"):
        for L in im.layers:
            new = G * dtype(L.D * g * g) if dtype is np.int64 else G * (L.D * g * g)
            for A, Bm, coef in zip(L.A, L.B, L.coef):
                A_ = A.astype(dtype)
                B2 = Bm.astype(dtype)
                S = np.matmul(G.transpose(0, 2, 1), np.matmul(A_, G))
                S = np.where(S > 0, S, 0).astype(dtype)
                upd = np.matmul(np.matmul(B2, G), S)
                new = new + upd * (dtype(coef) if dtype is np.int64 else coef)
                if dtype is object:
                    biggest = max(biggest, max(abs(int(x)) for x in S.flat), max(abs(int(x)) for x in upd.flat))
            G = new
            g = L.D * g**3
            if dtype is object:
                biggest = max(biggest, max(abs(int(x)) for x in G.flat))
        C = im.C.astype(dtype)
        num = np.matmul(G[:, :, -1], C.T)
    if dtype is object:
        biggest = max(biggest, max(abs(int(x)) for x in num.flat))
    return num, biggest


def _scale_w_o(model, factor):
    for i in range(model.W_O.shape[0]):
        for j in range(model.dim):
            if model.W_O[i, j] != 0:
                model = model.with_weight(("W_O", i, j), model.W_O[i, j] * factor)
    return model


# (name, task, model, whether the exact run's own numbers pass 2^63: without that flag only the
# proven a-priori bound passes 2^53, which is enough to force the hand-over)
def _cases():
    icqa = ICQA(k=2, n_questions=2, n_answers=3)
    base = registry.build(icqa).model
    lay = base.layout
    q = lay.index("question", 0)
    big_qk = base.with_weight((1, 0, "W_QK", q, q), 2**40)
    big_qk_v = big_qk.with_weight((0, 0, "W_V", lay.index("answer", 0), lay.index("answer", 0)), 2**30)
    # and broken: a huge entry pointing the wrong way (question 0 matches question 1)
    wrong_40 = base.with_weight((1, 0, "W_QK", q, lay.index("question", 1)), 2**40)
    wrong_70 = base.with_weight((1, 0, "W_QK", q, lay.index("question", 1)), 2**70)
    mh = make_task("multihop", hops=3, k=2, n_entities=2)
    deep = registry.build(mh, "paper", True).model  # 6 layers of Theorem 3's printed layers
    deep_big = _scale_w_o(registry.build(mh, "paper").model, Fraction(2**61, 3))
    return [
        ("icqa W_QK 2^40", icqa, big_qk, False),
        ("icqa W_QK 2^40 and W_V 2^30", icqa, big_qk_v, True),
        ("icqa W_QK 2^40 misdirected", icqa, wrong_40, False),
        ("icqa W_QK 2^70 misdirected", icqa, wrong_70, True),
        ("multihop 6 printed layers", mh, deep, True),
        ("multihop 6 fixed layers, W_O 2^61/3", mh, deep_big, False),
    ]


CASES = _cases()
BIG = [c for c in CASES if c[3]]


@pytest.mark.parametrize("name,task,model,_", CASES, ids=[c[0] for c in CASES])
def test_big_models_leave_the_float_path_with_exact_verdicts(name, task, model, _):
    ev = Evaluator(model)
    assert not ev.use_float and ev.im.bound >= FLOAT_EXACT_LIMIT
    fast = verify(model, task, progress=False)
    exact = verify(model, task, progress=False, force_exact=True)
    assert exact.path == "exact big integers"
    # above the a-priori bound the run is float64 checked per batch, or big integers throughout
    assert fast.path == "exact big integers" or fast.path.startswith("float64, checked < 2^53 per batch")
    if _ and fast.path.startswith("float64, checked"):  # its own numbers pass 2^63: batches handed over
        assert "on big integers" in fast.path, fast.path
    assert _triple(fast) == _triple(exact) == oracle_verdict(model, task)


@pytest.mark.parametrize("name,task,model,_", BIG, ids=[c[0] for c in BIG])
def test_exact_run_really_exceeds_int64_and_int64_wraps(name, task, model, _):
    ids, _ = task.decode(np.arange(min(task.size, 24), dtype=np.int64))
    exact_num, biggest = integer_pass(model, ids, object)
    # the recurrence written here agrees with the evaluator's exact path
    ev_num, _ = Evaluator(model, force_exact=True).logits(ids)
    assert [[int(x) for x in r] for r in exact_num] == [[int(x) for x in r] for r in ev_num]
    assert biggest >= I64, f"{name}: largest magnitude {biggest} fits int64; the case proves nothing"
    if max(abs(int(v)) for M in _int_weights(model) for v in M.flat) >= I64:
        with pytest.raises(OverflowError):  # int64 cannot even hold the weights
            integer_pass(model, ids, np.int64)
        return
    wrapped, _ = integer_pass(model, ids, np.int64)  # numpy int64 matmul wraps without a word
    assert [[int(x) for x in r] for r in wrapped] != [[int(x) for x in r] for r in exact_num]


def _int_weights(model):
    im = integerize(model)
    return [M for L in im.layers for M in L.A + L.B] + [im.C]


@pytest.mark.parametrize("name,task,model,_", CASES, ids=[c[0] for c in CASES])
def test_magnitude_bound_covers_the_actual_magnitudes(name, task, model, _):
    ids, _ = task.decode(np.arange(task.size, dtype=np.int64))
    _, biggest = integer_pass(model, ids, object)
    assert biggest <= integerize(model).bound


def test_scaling_w_o_by_2_62_scales_the_margin_exactly_across_paths():
    """Float path for the original, exact path for W_O * 2^62: margins differ by exactly 2^62."""
    task = ICQA(k=2, n_questions=3, n_answers=3)
    model = registry.build(task).model
    assert Evaluator(model).use_float
    big = _scale_w_o(model, 2**62)
    assert not Evaluator(big).use_float
    a, b = verify(model, task, progress=False), verify(big, task, progress=False)
    assert a.verified and b.verified and b.min_margin == a.min_margin * 2**62 and b.min_margin > I64


def test_both_sides_of_the_float_limit_agree_with_the_oracle():
    """Scale one W_O entry until the proven bound crosses 2^53: the last float run and the first
    exact run both match the oracle (and the float one really ran in float64)."""
    task = ICQA(k=2, n_questions=2, n_answers=3)
    model = registry.build(task).model
    i, j = next((i, j) for i in range(model.W_O.shape[0]) for j in range(model.dim) if model.W_O[i, j] != 0)
    lo, hi = 0, 60
    while hi - lo > 1:  # largest 2^e keeping the float path
        mid = (lo + hi) // 2
        if Evaluator(model.with_weight(("W_O", i, j), 2**mid)).use_float:
            lo = mid
        else:
            hi = mid
    for e, expect_float in ((lo, True), (hi, False)):
        m = model.with_weight(("W_O", i, j), 2**e - 1)
        m = m.with_weight(("W_O", i, j), 2**e)
        assert Evaluator(m).use_float is expect_float
        v = verify(m, task, progress=False)
        assert v.path.startswith("float64 (proven") is expect_float
        assert _triple(v) == _triple(verify(m, task, progress=False, force_exact=True)) == oracle_verdict(m, task)


def test_huge_weights_in_unreached_rows_do_not_poison_the_float_path():
    """Regression: the bound ignores rows no input reaches, but 2^1023 + 2^1023 there made
    A x = inf and 0 * inf = NaN in float64, and verify() refuted a model that verifies."""
    task = make_task("multihop", hops=2, k=2, n_entities=2)
    model = registry.build(task, "linear").model
    f = model.layout.offset("dst")  # written only by layer 0: nothing in it when layer 0 reads
    m = model.with_weight((0, 0, "W_QK", f, 0), 2**1023).with_weight((0, 0, "W_QK", f, len(model.vocab)), 2**1023)
    assert integerize(m).bound < FLOAT_EXACT_LIMIT  # the bound alone would pick float64
    assert not Evaluator(m).use_float
    assert _triple(verify(m, task, progress=False)) == oracle_verdict(m, task) == ("verified", Fraction(1), None)
    m2 = model.with_weight((0, 0, "W_QK", f, 0), 2**1100)  # does not even convert to float64
    assert _triple(verify(m2, task, progress=False)) == oracle_verdict(m2, task)
