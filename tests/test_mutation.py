"""Mutation testing: one weight entry changed at a time, verify() against an independent oracle.

For every construction the registry offers (every task, variant, printed and fixed, at the small
sizes of tests/mutation_cases.py) a few dozen seeded single-entry mutations (+-1/7, +-1, sign
flip, zeroing, x2, x1/2; mostly non-zero entries and entries in used blocks, some anywhere) are
checked by `checkers.exhaustive.verify` and by tests/independent_oracle.py (paper eq. 1-3 in
Fractions, point by point).  Both must agree on the verdict, the exact minimum margin (up to and
including the first failure) and the index of the first counterexample.

The same is done for hand-built models outside the paper's class (mutation_cases.wider_models:
hardmax, softmax, causal masks, MLPs, a constant row, per-position outputs), mutating MLP
weights and biases too.  Rational models must agree exactly (also on the first failing
position); softmax models are cross-checked against the oracle's mpmath evaluation: every point
verify decides (alone, and the counterexample of the whole run) is decided the same way, and a
point whose mpmath margin is an exact tie is never verified.
"""
from __future__ import annotations

import inspect
import random
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import SequenceClassification
from depthcert.constructions import registry
from independent_oracle import Oracle, oracle_verdict, oracle_verdict_positions, softmax_cross_check
from mutation_cases import (PER_CASE, PER_CASE_TASK, SMALL, WIDER_PER_CASE, WIDER_PER_CASE_SOFTMAX, constructions,
                            mutations, wider_models)

CASES = constructions()


HAS_SYMMETRY = "symmetry" in inspect.signature(verify).parameters


_MUTANTS: dict = {}  # label -> [(name, where, old, kind, new, mutant, oracle verdict)], built once per run


def oracle_checked_mutants(label, task, model):
    """The case's seeded single-entry mutants with the oracle's verdict of each (the oracle is by
    far the slowest part; test_single_entry_mutations_agree_with_oracle and
    test_parallel_chunks_agree_with_oracle check the same mutants against it)."""
    if label not in _MUTANTS:
        _MUTANTS[label] = [
            (name, where, old, kind, new, mutant, oracle_verdict(mutant, task))
            for name, where, old, kind, new in mutations(label, model, PER_CASE_TASK.get(task.name, PER_CASE))
            for mutant in [model.with_weight(where, new)]]
    return _MUTANTS[label]


def _verify_triple(model, task, batch_size=2048, **kw):
    v = verify(model, task, batch_size=batch_size, progress=False, **kw)
    ce = v.counterexample
    return v.verdict, v.min_margin, None if ce is None else ce.index


def test_every_registered_task_has_a_small_size():
    assert set(registry.all_variants()) <= set(SMALL)
    assert len(CASES) >= 4  # sc and icqa at least, printed and fixed


@pytest.mark.parametrize("label,task,construction", CASES, ids=[c[0] for c in CASES])
def test_unmutated_construction_agrees_with_oracle(label, task, construction):
    assert _verify_triple(construction.model, task) == oracle_verdict(construction.model, task)


@pytest.mark.parametrize("label,task,construction", CASES, ids=[c[0] for c in CASES])
def test_single_entry_mutations_agree_with_oracle(label, task, construction):
    model = construction.model
    rng = random.Random(label)
    mismatches = []
    for name, where, old, kind, new, mutant, want in oracle_checked_mutants(label, task, model):
        # vary the batch size: the verdict, margin and counterexample must not depend on it
        bs = rng.choice((1, 3, 7, 2048))
        got = _verify_triple(mutant, task, bs)
        if got != want:
            mismatches.append((name, where, f"{old} -> {new} ({kind})", bs, got, want))
        if HAS_SYMMETRY:
            # symmetry reduction (used only when equivariance is proven on the mutant's weights)
            # must reach the same verdict, margin and first counterexample as every point
            got = _verify_triple(mutant, task, bs, symmetry="auto")
            if got != want:
                mismatches.append((name, where, f"{old} -> {new} ({kind})", bs, "symmetry", got, want))
    assert not mismatches, mismatches[:3]


@pytest.mark.parametrize("label,task,construction", CASES, ids=[c[0] for c in CASES])
def test_computed_killer_mutation_is_refuted_at_point_0_with_margin_minus_1(label, task, construction):
    """A mutation built to break point 0 exactly: raise W_O[c, f] for the best wrong class c
    and a non-zero feature f of point 0's last column, so that c beats the label by exactly 1.
    verify must refute at index 0 with min margin -1 (this test fails if verify misses it)."""
    model = construction.model
    orc = Oracle(model)
    p = task.point(0)
    h = orc.hidden_last(p.tokens)
    o = orc.logits(p.tokens)
    y = model.classes.index(p.label)
    c = max((i for i in range(len(o)) if i != y), key=lambda i: o[i])
    f = next(i for i, v in enumerate(h) if v != 0)
    delta = (o[y] - o[c] + 1) / h[f]
    mutant = model.with_weight(("W_O", c, f), model.W_O[c, f] + delta)
    assert oracle_verdict(mutant, task) == ("refuted", Fraction(-1), 0)
    assert _verify_triple(mutant, task, 5) == ("refuted", Fraction(-1), 0)


def test_oracle_by_hand_one_layer():
    """A 1-layer, 1-head model small enough to evaluate on paper: the oracle itself is checked."""
    # vocab (a, b), 2 positions, d' = 5: rows a, b, p0, p1, s
    lay = Layout.of(("token", 2), ("position", 2), ("scratch", 1))
    Z = lambda: np.full((5, 5), Fraction(0), dtype=object)
    W_QK, W_V = Z(), Z()
    W_QK[0, 3] = Fraction(2)  # key has token a, query at position 1: score 2
    W_V[4, 2] = Fraction(3)  # value: 3 * (key at position 0) into scratch
    W_V[4, 0] = Fraction(-1, 2)  # value: -1/2 * (key token a) into scratch
    W_O = np.full((2, 5), Fraction(0), dtype=object)
    W_O[0, 4] = Fraction(1)
    W_O[1, 1] = Fraction(1, 3)
    model = Model(("a", "b"), 2, ("x", "y"), lay, ((Head(W_QK, W_V),),), W_O)
    orc = Oracle(model)
    # "a b": query h1 = b + p1.  key 0 (a, p0): score 2 -> 2 * (3 - 1/2) = 5 into s;
    # key 1 (b, p1): score 0.  h1 = (0, 1, 0, 1, 5): logits x = 5, y = 1/3
    assert orc.logits(["a", "b"]) == [Fraction(5), Fraction(1, 3)]
    # "b a": key 0 (b, p0) score 0; key 1 (a, p1) score 2, value 2 * (0 - 1/2) = -1: s = -1
    assert orc.logits(["b", "a"]) == [Fraction(-1), Fraction(0)]
    assert orc.margin(["b", "a"], "x")[0] == Fraction(-1)
    assert orc.margin(["b", "a"], "y")[0] == Fraction(1)
    # a tie is a failure, with margin 0
    W_O2 = W_O.copy()
    W_O2[1, 1] = Fraction(5)
    tie = Model(("a", "b"), 2, ("x", "y"), lay, ((Head(W_QK, W_V),),), W_O2)
    assert Oracle(tie).margin(["a", "b"], "x")[0] == 0


def test_oracle_two_layers_by_hand():
    """Second layer reads what the first wrote: checks layer composition and the 1/m factor."""
    lay = Layout.of(("token", 1), ("position", 2), ("s", 1), ("t", 1))
    Z = lambda: np.full((5, 5), Fraction(0), dtype=object)
    qk1, v1 = Z(), Z()
    qk1[1, 2] = Fraction(1)  # key at position 0, query at position 1
    v1[3, 0] = Fraction(4)  # s += 4 * token
    qk2, v2 = Z(), Z()
    qk2[3, 2] = Fraction(1)  # key with s, query p1
    v2[4, 3] = Fraction(1)  # t += s of the key
    # two heads in layer 2, the second all zero: 1/m = 1/2 halves the first head's update
    layers = ((Head(qk1, v1),), (Head(qk2, v2), Head(Z(), Z())))
    W_O = np.full((2, 5), Fraction(0), dtype=object)
    W_O[0, 4] = Fraction(1)
    W_O[1, 3] = Fraction(1)
    model = Model(("a",), 2, ("t", "s"), lay, layers, W_O)
    # layer 1: h1 gets s = 4 (key 0 scores 1 on query 1); h0 unchanged (score of (j, 0) = 0).
    # layer 2, query 1: key 1 has s = 4, score relu(4 * 1) = 4; value t += 4; 1/2 * 4 * 4 = 8.
    assert Oracle(model).logits(["a", "a"]) == [Fraction(8), Fraction(4)]


def test_margin_does_not_depend_on_batch_size():
    """Regression: a refuted run used to report the minimum over the whole failing batch,
    so --batch-size changed the printed margin."""
    task = SequenceClassification(length=2, alphabet=3)
    model = registry.build(task).model
    mutant = model.with_weight(("W_O", 0, 5), 7)
    orc = Oracle(mutant)
    margins = [orc.margin(p.tokens, p.label)[0] for p in (task.point(i) for i in range(task.size))]
    first = next(i for i, m in enumerate(margins) if m <= 0)
    assert min(margins) < margins[first]  # a later point fails worse: the case that went wrong
    results = {bs: _verify_triple(mutant, task, bs) for bs in (1, 2, 5, 2048)}
    assert set(results.values()) == {("refuted", margins[first], first)}, results
    assert results[1] == oracle_verdict(mutant, task)


HAS_WORKERS = "workers" in inspect.signature(verify).parameters


@pytest.mark.skipif(not HAS_WORKERS, reason="verify has no parallel workers")
@pytest.mark.parametrize("label,task,construction", CASES, ids=[c[0] for c in CASES])
def test_parallel_chunks_agree_with_oracle(label, task, construction, monkeypatch):
    """verify(workers=2) on many tiny chunks (the parallel path, normally only from 400k points)
    reports the same verdict, margin and first counterexample as the oracle, for one mutant that
    the oracle refutes and one it verifies."""
    from depthcert.checkers import exhaustive

    monkeypatch.setattr(exhaustive, "PARALLEL_MIN_POINTS", 1)
    model = construction.model
    picked = {}
    for name, where, old, kind, new, mutant, want in oracle_checked_mutants(label, task, model):
        picked.setdefault(want[0], (mutant, want))
        if len(picked) == 2:
            break
    for mutant, want in picked.values():
        assert _verify_triple(mutant, task, 2, workers=2) == want


# ---- models outside the paper's class

WIDER = wider_models()
BALLS = {"max_precision": 256}  # a near-tie that needs more bits stops at the cap: keep it low


def _verify_quad(model, task, batch_size=2048, **kw):
    v = verify(model, task, batch_size=batch_size, progress=False, **kw)
    ce = v.counterexample
    return v.verdict, v.min_margin, None if ce is None else ce.index, None if ce is None else ce.position


def test_wider_models_cover_the_new_classes():
    models = [m for _, _, m in WIDER]
    kinds = {h.attention for m in models for L in m.layers for h in L}
    assert {"relu", "hardmax", "softmax"} <= kinds
    assert any(L.causal for m in models for L in m.layers)
    assert any(L.mlp is not None and len(L) > 0 for m in models for L in m.layers)
    assert any(L.mlp is not None and len(L) == 0 for m in models for L in m.layers)
    assert any(m.constant_row for m in models)
    assert {m.outputs for m in models} == {"last", "all"}
    # MLP weights and biases are all mutated somewhere
    touched = {where[2] for label, _, m in WIDER for _, where, *_ in mutations(label, m, WIDER_PER_CASE)
               if where[1] == "mlp"}
    assert touched == {"W1", "b1", "W2", "b2"}


@pytest.mark.parametrize("label,task,model", WIDER, ids=[c[0] for c in WIDER])
def test_wider_unmutated_model_is_verified_and_agrees_with_oracle(label, task, model):
    if model.has_softmax:
        v = verify(model, task, progress=False, balls=BALLS)
        assert v.verdict == "verified"
        assert softmax_cross_check(model, task, v, balls=BALLS) == []
    else:
        want = oracle_verdict_positions(model, task)
        assert want[0] == "verified"
        for bs in (1, 5, 2048):
            assert _verify_quad(model, task, bs) == want
        assert _verify_quad(model, task, 7, force_exact=True) == want


@pytest.mark.parametrize("label,task,model", WIDER, ids=[c[0] for c in WIDER])
def test_wider_single_entry_mutations_agree_with_oracle(label, task, model):
    rng = random.Random(label)
    mismatches = []
    count = WIDER_PER_CASE_SOFTMAX if model.has_softmax else WIDER_PER_CASE
    verdicts = set()
    for name, where, old, kind, new in mutations(label, model, count):
        mutant = model.with_weight(where, new)
        bs = rng.choice((1, 3, 7, 2048))
        what = (name, where, f"{old} -> {new} ({kind})", bs)
        if model.has_softmax:
            v = verify(mutant, task, batch_size=bs, progress=False, balls=BALLS)
            verdicts.add(v.verdict)
            problems = softmax_cross_check(mutant, task, v, balls=BALLS)
            if problems:
                mismatches.append(what + (v.verdict, problems[:3]))
            continue
        want = oracle_verdict_positions(mutant, task)
        verdicts.add(want[0])
        got = _verify_quad(mutant, task, bs)
        if got != want:
            mismatches.append(what + (got, want))
        got = _verify_quad(mutant, task, bs, force_exact=True)
        if got != want:
            mismatches.append(what + ("force_exact", got, want))
    assert not mismatches, mismatches[:3]
    assert "refuted" in verdicts  # the mutations do break the model sometimes
