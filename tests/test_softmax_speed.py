"""Work counts and verdict comparisons for the fast softmax paths (no timing assertions)."""
from __future__ import annotations

import json

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
