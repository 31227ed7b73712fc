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


def _fr(rows):
    return np.array([[Fraction(v) for v in r] for r in rows], dtype=object)


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
