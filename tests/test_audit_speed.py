"""Audit of the speed changes (one exact pass for a fitted read-out, fused heads, float64 intervals,
the weights-file parse cache): each test is an attack on a fast path that must give the exact
verdict, margin and counterexample of the slow one."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers.exhaustive import plan_points, verify
from depthcert.checkers.hidden_table import decide, hidden_table
from depthcert.checkers.model import MLP, Head, Layer
from depthcert.checkers.tasks import make_task


def _fr(rows, den=1):
    return np.array([[Fraction(int(v), den) for v in r] for r in rows], dtype=object)


def _same_verdict(a, b) -> None:
    assert (a.verdict, a.min_margin, a.points_checked, a.points_covered, a.points_total) == \
           (b.verdict, b.min_margin, b.points_checked, b.points_covered, b.points_total)
    assert a.counterexample == b.counterexample


def _with_bias_layer(model, column):
    """`model` plus a layer whose MLP adds `column` to every column of the stream (W1 = 0, b1 = 1)."""
    d = model.dim
    zero = _fr(np.zeros((d, d), dtype=np.int64).tolist())
    mlp = MLP(_fr([[0] * d]), np.array([Fraction(1)], dtype=object), _fr([[v] for v in column]),
              np.array([Fraction(0)] * d, dtype=object))
    return replace(model, layers=model.layers + (Layer((Head(zero, zero),), mlp=mlp),))


def test_decide_scores_when_the_int64_row_sums_of_the_table_wrap():
    """Hidden vectors in int64 whose |row| sums pass 2^63: decide's 2^53 test must not read a
    wrapped (small) sum and take float64 scores (it reported point 0 as a counterexample with margin
    0 while point 0's exact margin is 1; the first failure is point 1, margin -4)."""
    task = make_task("tm", l=2, alphabet=2)
    base = constructions.build(task, "heads", False).model
    d = base.dim
    probe = _with_bias_layer(base, [0] * d)
    den = hidden_table(probe, task, plan_points(probe, task, "off"), progress=False).den
    v = 2**62 // den + 1  # numerators just above 2^62 in four rows: each fits int64, their sum wraps
    model = _with_bias_layer(base, [v if i < 4 else 0 for i in range(d)])
    W_O = np.full(base.W_O.shape, Fraction(0), dtype=object)
    W_O[0, 0], W_O[0, 1] = Fraction(1), Fraction(-1)
    model = replace(model, W_O=W_O)
    zero = replace(model, W_O=np.full(W_O.shape, Fraction(0), dtype=object))
    plan = plan_points(zero, task, "off")
    table = hidden_table(model, task, plan, progress=False)
    assert table.X.dtype == np.int64
    assert sum(abs(int(x)) for x in table.X[0]) >= 2**63
    _same_verdict(decide(model, table, task, plan), verify(model, task, plan=plan, progress=False))


@pytest.mark.parametrize("seed", [0, 1])
def test_decide_is_verify_on_random_layers_and_read_outs(seed):
    """A random extra layer (relu/hardmax heads, causal or not, an MLP or not, weights scaled to take
    the proven float64, the checked and the big-integer paths) and random, fitted and scaled fitted
    read-outs: decide from the table gives exhaustive.verify's verdict field by field."""
    from depthcert.proofs import readout as ro

    rng = np.random.default_rng(seed)
    task = make_task("tm", l=3, alphabet=2)
    base = constructions.build(task, "heads", False).model
    d, C = base.dim, base.W_O.shape[0]
    kinds = set()
    for _ in range(4):
        big = [1, 2**40, 2**70][int(rng.integers(0, 3))]
        heads = tuple(Head(_fr(rng.integers(-2, 3, (d, d))), _fr(rng.integers(-2, 3, (d, d)).astype(object) * big, 3),
                           attention=("relu", "hardmax")[int(rng.integers(0, 2))]) for _ in range(int(rng.integers(1, 4))))
        f = int(rng.integers(1, 4))
        mlp = MLP(_fr(rng.integers(-2, 3, (f, d))), np.array([Fraction(int(v)) for v in rng.integers(-2, 3, f)], dtype=object),
                  _fr(rng.integers(-2, 3, (d, f)).astype(object) * big),
                  np.array([Fraction(int(v)) for v in rng.integers(-2, 3, d)], dtype=object)) if rng.integers(0, 2) else None
        model = replace(base, layers=base.layers + (Layer(heads, causal=bool(rng.integers(0, 2)), mlp=mlp),))
        plan = plan_points(replace(model, W_O=np.full(base.W_O.shape, Fraction(0), dtype=object)), task, "off")
        table = hidden_table(model, task, plan, batch_size=int(rng.integers(1, 20)), progress=False)
        fit = ro.fit_max_margin(ro.hidden_vectors(model, task, "auto", table=table), C, task.size).W_O
        outs = [_fr(rng.integers(-3, 4, (C, d)).astype(object) * s, 2) for s in (1, 2**50, 2**80)]
        for W in outs + [fit, np.array(fit * 2**70, dtype=object)]:
            m = replace(model, W_O=W)
            one = decide(m, table, task, plan)
            _same_verdict(one, verify(m, task, plan=plan, batch_size=7, progress=False))
            kinds.add(one.verdict)
    assert kinds == {"verified", "refuted"}


@pytest.mark.parametrize("exponent", [-1060, 1000, 1100])
def test_softmax_interval_decisions_at_extreme_read_out_scales(exponent):
    """A random 2-layer softmax + MLP model whose first class row of W_O is scaled by 2^exponent (the
    others zero): margins near 1e-300, subnormal, near and past float64's range.  Every point the
    float64 intervals decide agrees with mpmath, and its enclosure holds the margin."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from independent_oracle import oracle_scan
    from test_softmax_speed import _interval_decisions, _random_model

    task, model = _random_model(seed=0, l=3, alphabet=3)
    eps = Fraction(2) ** exponent
    W = np.full(model.W_O.shape, Fraction(0), dtype=object)
    W[0] = [v * eps for v in model.W_O[0]]
    model = replace(model, W_O=W)
    margins = {i: r.margin for i, r in oracle_scan(model, task, stop=False).points}
    for i, status, lo, hi in _interval_decisions(model, task):
        if status == 1:
            assert 0 < lo <= margins[i] <= hi, (i, lo, hi)
        elif status == -1:
            assert margins[i] <= 0, i


def test_the_fit_note_never_claims_no_read_out_separates_separable_vectors():
    """Hidden vectors near 2^51 that differ in their last bits: the float64 LP's optimum rounds to 0,
    but a read-out with a positive exact margin exists (the fit's own W_O here).  The note said "the
    LP found no positive margin (no linear read-out separates these vectors)": a claim of
    non-existence resting on floating point, false here."""
    from depthcert.proofs import readout as ro

    N = 2**51
    X = np.array([[N + 1, N, N + 2, N - 1], [N + 1, N + 1, N + 3, N + 1], [N + 1, N, N - 3, N - 1]], dtype=object)
    hv = ro.HiddenVectors(X, 1, np.array([0, 1, 0]), (), 3, "test")
    fit = ro.fit_max_margin(hv, 3, 3)
    assert fit.vector_margin > 0  # the fitted read-out separates them, exactly
    assert "no linear read-out separates" not in fit.note


def test_fused_heads_at_the_largest_weights_the_float_proof_admits():
    """A layer of 2..8 relu/hardmax heads (causal or not; first, or after a layer: the fused pass on
    the one-hot embedding and on a stream) whose value weights are scaled to the largest
    factor for which the a-priori bound still proves float64 exact (and a third of it): the fused
    float64 pass (every head in the same products) gives the big-integer pass's hidden vectors and
    logits at every point."""
    from depthcert.checkers.evaluate import Evaluator, integerize
    from depthcert.checkers.exhaustive import token_rows

    rng = np.random.default_rng(3)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    d = base.dim
    tokens = token_rows(base, task)
    batch = next(task.batches(task.size))
    ids = batch.ids if tokens is None else tokens[batch.ids]
    compared = 0
    for _ in range(6):
        m = int(rng.integers(2, 9))
        kinds = [("relu", "hardmax")[int(rng.integers(0, 2))] for _ in range(m)]
        causal = bool(rng.integers(0, 2))
        As = [rng.integers(-1, 2, (d, d)) for _ in range(m)]
        Bs = [rng.integers(-3, 4, (d, d)).astype(object) for _ in range(m)]
        first = () if _ % 2 else (Layer((Head(_fr(np.eye(d, dtype=np.int64)), _fr(np.eye(d, dtype=np.int64))),)),)

        def make(s):
            heads = tuple(Head(_fr(A), _fr(B * s), attention=k) for A, B, k in zip(As, Bs, kinds))
            return replace(base, layers=first + (Layer(heads, causal=causal),))

        lo, hi = 1, 2**60
        while hi - lo > 1:  # the largest scale whose a-priori bound is below 2^53
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if integerize(make(mid)).use_float else (lo, mid)
        for s in (lo, max(1, lo // 3)):
            model = make(s)
            fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
            if not fast.use_float:
                continue
            compared += 1
            a, da = fast.logits(ids)
            b, db = exact.logits(ids)
            assert [Fraction(int(x), da) for x in a.flat] == [Fraction(int(x), db) for x in b.flat]
            assert [int(x) for x in fast.hidden_last(ids)[0].flat] == [int(x) for x in exact.hidden_last(ids)[0].flat]
    assert compared >= 4


def test_a_fit_out_of_budget_is_refused_before_the_one_pass_evaluates(monkeypatch):
    """The fit's guard (proofs/readout.guard_fit) refuses before any point is evaluated; the one-pass
    table must not evaluate every point (time, memory) and only then meet that refusal."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from cli_in_process import run_command

    from depthcert.checkers import hidden_table as ht

    evaluated = []
    real = ht.hidden_table
    monkeypatch.setattr(ht, "hidden_table", lambda *a, **k: evaluated.append(1) or real(*a, **k))
    for symmetry in ("auto", "off"):  # sc declares no symmetry: under off too the fit evaluates every point
        code, _, err = run_command(["verify-construction", "sc", "--length", "9", "--alphabet", "3", "--readout",
                                    "max-margin", "--max-points", "100000", "--symmetry", symmetry])
        assert code == 2 and "max-margin read-out LP" in err and len(err.strip().splitlines()) == 1, err
        assert not evaluated
