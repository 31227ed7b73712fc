"""The exact model's build from checkpoints, made faster: transformerlens._fractions (fmpq_mat -> Fractions
without a gcd per entry) gives the Fractions the plain constructor gives, and a rotary head's check
W_QK = W_K^T W_Q (now compared in python-flint) still refuses a W_QK that differs in one entry by
1e-30."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Head, Rotary
from depthcert.interop import transformerlens as tl


def test_fractions_equal_the_plain_constructor():
    import flint

    rng = np.random.default_rng(3)
    vals = [[(int(rng.integers(-10**6, 10**6)) * (rng.random() < 0.6), int(rng.integers(1, 10**6)))
             for _ in range(7)] for _ in range(5)]
    vals[0][0] = (-(2**90) + 1, 2**70 * 3)
    vals[0][1] = (4, 6)  # fmpq reduces it
    M = flint.fmpq_mat([[flint.fmpq(p, q) for p, q in row] for row in vals])
    got = tl._fractions(M)
    want = np.array([[Fraction(p, q) for p, q in row] for row in vals], dtype=object)
    assert got.shape == (5, 7) and not got.flags.writeable
    for g, w in zip(got.ravel(), want.ravel()):
        assert type(g) is Fraction and g == w and hash(g) == hash(w)
        assert (g.numerator, g.denominator) == (w.numerator, w.denominator)
    assert tl._fractions(flint.fmpq_mat(0, 3)).shape == (0, 3)
    assert tl._CANONICAL_OK


def _rotary_head(dim: int, change: Fraction = Fraction(0)) -> Head:
    rng = np.random.default_rng(dim)
    d = dim + 3

    def frac(shape):
        return np.array([Fraction(int(v), 1 << 20) for v in rng.integers(-2**22, 2**22, shape).ravel()],
                        dtype=object).reshape(shape)

    WQ, WK = frac((dim, d)), frac((dim, d))
    QK = WK.T.dot(WQ)
    QK[1, 2] += change
    return Head(QK, np.full((d, d), Fraction(0), dtype=object), attention="softmax",
                rotary=Rotary(WQ, WK, dim, Fraction(10000)))


def test_a_rotary_head_needs_w_qk_equal_to_w_k_transposed_times_w_q():
    assert _rotary_head(4).rotary is not None
    with pytest.raises(BadInput, match=r"W_QK must equal W_K\^T W_Q"):
        _rotary_head(4, Fraction(1, 10**30))
