"""integerize's int64 forms of the head matrices (IntLayer.A64 / B64) are read by magnitude_bound,
_fused_weights and the Evaluator's float weights in place of the object matrices: the same bound, the
same float64 weights and the same verdict-relevant flags as from the object matrices alone, with
weights from 0 to past 2^63 (where the forms are None or the int64 products would wrap)."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import integerize, magnitude_bound
from depthcert.checkers.model import Head, Layer
from depthcert.checkers.tasks import make_task


def _without_forms(im):
    return tuple(replace(L, A64=(), B64=()) for L in im.layers)


def _fr(M, den=1):
    return np.array([[Fraction(int(v), den) for v in r] for r in M], dtype=object)


@pytest.mark.parametrize("seed", range(10))
def test_same_bound_and_fused_weights(seed):
    rng = np.random.default_rng(seed)
    task = make_task("tm", l=3, alphabet=3)
    base = constructions.build(task, "heads", False).model
    d = base.dim
    scale = [0, 1, 7, 2**20, 2**40, 2**52, 2**60, 2**62, 2**64, 2**80][seed]
    layers = []
    for _ in range(int(rng.integers(1, 4))):
        heads = []
        for _ in range(int(rng.integers(1, 4))):
            A = rng.integers(-2, 3, (d, d)).astype(object) * (scale if rng.random() < 0.5 else 1)
            B = rng.integers(-2, 3, (d, d)).astype(object) * (scale if rng.random() < 0.5 else 1)
            heads.append(Head(_fr(A, int(rng.integers(1, 4))), _fr(B, int(rng.integers(1, 4))),
                              attention=("relu", "hardmax")[int(rng.integers(0, 2))]))
        layers.append(Layer(tuple(heads), causal=bool(rng.integers(0, 2))))
    model = replace(base, layers=tuple(layers), constant_row=bool(seed % 2))
    im = integerize(model)
    plain = _without_forms(im)
    want = magnitude_bound(model, plain, im.C, C64=im.C64)
    assert im.bound == want
    for L, P in zip(im.layers, plain):
        for M, M64 in zip(L.A + L.B, L.A64 + L.B64):
            assert M64 is None or [int(v) for v in M64.flat] == [int(v) for v in M.flat]
        a, b = evaluate._fused_weights(L), evaluate._fused_weights(P)
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
            assert a[3] == b[3]


def _reference(M):
    vals = [Fraction(v) if not isinstance(v, Fraction) else v for v in np.asarray(M, dtype=object).flat]
    q = 1
    for v in vals:
        q = q * int(v.denominator) // np.gcd(q, int(v.denominator))
    return [int(v * q) for v in vals], q


@pytest.mark.parametrize("kind", ["fractions", "ints", "numpy", "bools", "mixed", "huge"])
def test_int_parts_and_the_classifier(kind):
    """_int_parts' plain path (ints and Fractions of ints) and its general one (numpy ints, Fractions of
    numpy ints, bools) give M = N / q with the reference's N and q; the classifier is int64 exactly
    when every entry is below 2^63."""
    from depthcert.checkers.evaluate import _int_matrix
    from depthcert.checkers.hidden_table import _int_classifier

    rng = np.random.default_rng(len(kind))
    raw = rng.integers(-50, 50, (7, 5))
    make = {"fractions": lambda v: Fraction(int(v), 2**20), "ints": int, "numpy": lambda v: np.int64(v),
            "bools": lambda v: bool(v % 2), "mixed": lambda v: (Fraction(np.int64(v), 3) if v % 3 else int(v)),
            "huge": lambda v: Fraction(int(v) * 2**70, 7)}[kind]
    M = np.array([[make(v) for v in r] for r in raw], dtype=object)
    N, q = _int_matrix(M)
    want, wq = _reference(M)
    assert q == wq and [int(v) for v in N.flat] == want and all(type(v) is int for v in N.flat)
    C, c = _int_classifier(M)
    assert c == wq and [int(v) for v in C.flat] == want
    assert (C.dtype == np.int64) == (max(abs(v) for v in want) < 2**63)
