"""Work counts and verdict comparisons for the fast softmax paths (no timing assertions)."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers import weights_file
from depthcert.checkers.errors import BadInput


def _weights(W_QK, W_V=None, W_O=None):
    d = len(W_QK)
    eye = [[1 if i == j else 0 for j in range(d)] for i in range(d)]
    return {"format": "depthcert.weights", "version": 1, "vocab": ["a", "b"], "max_length": 2,
            "classes": ["x", "y"], "layers": [[{"W_QK": W_QK, "W_V": W_V or eye}]],
            "W_O": W_O or [[1] + [0] * (d - 1), [0, 1] + [0] * (d - 2)]}


def test_each_distinct_entry_is_parsed_once(monkeypatch):
    calls = []
    real = weights_file.parse_rational
    monkeypatch.setattr(weights_file, "parse_rational", lambda v, where: calls.append(v) or real(v, where))
    W = [[0, 1, "1/2", 0], [1, 0, "1/2", "-3/4"], [0, 0, 0, 0], ["1/2", 1, 0, "-3/4"]]
    m = weights_file.model_from_json(_weights(W))
    assert sorted(map(str, calls[:4])) == ["-3/4", "0", "1", "1/2"]  # W_QK: four distinct entries
    assert [[str(v) for v in row] for row in m.layers[0][0].W_QK] == [[str(weights_file.parse_rational(v, "")) for v in row] for row in W]


@pytest.mark.parametrize("bad", [True, False, 1.0, 0.0, "1.0", [1], None])
def test_a_cached_equal_value_never_admits_a_bool_or_float(bad):
    # 1 and 0 are parsed (and cached) first; True == 1 and 1.0 == 1 must still be refused, naming the entry
    W = [[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, bad]]
    with pytest.raises(BadInput, match=r"W_QK\[3\]\[3\]"):
        weights_file.model_from_json(_weights(W))
    obj = _weights([[1, 0, 0, 0]] * 4) | {"version": 2}
    obj["layers"] = [{"heads": [], "mlp": {"W1": [[1, 0, 0, 0]] * 3, "b1": [1, 0, bad],
                                          "W2": [[1, 0, 0]] * 4, "b2": [0, 0, 0, 0]}}]
    with pytest.raises(BadInput, match=r"b1\[2\]"):
        weights_file.model_from_json(obj)


# ---- the interval forward: every decided point agrees with an independent mpmath evaluation


def _random_model(task_name="tm", seed=0, **sizes):
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_all

    from depthcert import constructions
    from depthcert.checkers.tasks import make_task

    task = make_task(task_name, **sizes)
    return task, bench_all._random_softmax_mlp(constructions.build(task, lemma3=False).model, seed=seed)


def _interval_decisions(model, task):
    from depthcert.checkers.accuracy import PointDecider

    dec = PointDecider(model, task, method="intervals")
    out = []
    for batch in task.batches(4096):
        ids = batch.ids if dec.tokens is None else dec.tokens[batch.ids]
        Hnum, den = dec._stream_in(ids)
        n = ids.shape[1]
        lab = np.full((len(ids), n), -1, dtype=np.int64)
        lab[:, n - 1] = dec.class_rows[batch.labels]
        status, lo, hi, _ = dec._interval_forward().decide(Hnum, den, lab)
        out += [(int(i), int(s), float(a), float(b)) for i, s, a, b in zip(batch.index, status, lo, hi)]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_decisions_agree_with_mpmath(seed):
    from independent_oracle import oracle_scan

    task, model = _random_model(seed=seed, l=3, alphabet=3)
    got = _interval_decisions(model, task)
    margins = {i: r.margin for i, r in oracle_scan(model, task, stop=False).points}
    decided = 0
    for i, status, lo, hi in got:
        m = margins[i]
        if status == 1:  # certified correct: the enclosure holds the true margin, which is positive
            assert 0 < lo <= m <= hi, (i, lo, float(m), hi)
            decided += 1
        elif status == -1:
            assert m <= 0, (i, float(m))
            decided += 1
    assert decided == len(got)  # these models are far from ties: the intervals decide every point


def test_the_last_layer_multiplies_values_on_the_read_rows_only(monkeypatch):
    """The last layer, read at the last position, forms (A G) W_V^T: its value product has one
    row per point, not one per position (counted on every lin call of the run)."""
    from depthcert.checkers import softmax_intervals as si

    task, model = _random_model(l=3, alphabet=3)
    rows = []
    real = si.lin

    def counting(X, W, *a, **k):
        rows.append(X.m.shape[-2])
        return real(X, W, *a, **k)

    monkeypatch.setattr(si, "lin", counting)
    _interval_decisions(model, task)
    n = task.length
    # layer 1: W_V, W1, W2 on all n rows; layer 2: W_QK, W_V, W1, W2 and W_O on the last row only
    assert rows == [n, n, n, 1, 1, 1, 1, 1], rows


@pytest.mark.parametrize("value, exact", [(2**53 - 1, True), (-(2**53 - 1), True), (2**53, False),
                                          (2**53 + 1, False), (-(2**63), False)])
def test_numerators_below_2_53_only(value, exact):
    from depthcert.checkers import softmax_intervals as si

    for H in (np.array([[[value, 1]]], dtype=np.int64), np.array([[[value, 1]]], dtype=object)):
        nums = si._numerators(H)
        assert (nums is not None) == exact
        X = si._stream(H, 1)
        if exact:
            assert X.r is None and X.m[0, 0, 0] == value
        else:  # refused (the point goes to arb), or converted through Fraction with a rounding radius
            assert X is None or (X.r is not None and abs(Fraction(float(X.m[0, 0, 0])) - value) <= X.r[0, 0, 0])
            if H.dtype == object:  # big integers always take the exact conversion
                assert X is not None
