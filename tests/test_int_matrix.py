"""evaluate._int_matrix (M = N / q, entries grouped by identity through the object array's pointer
table) against the obvious per-entry conversion, on matrices whose entries share objects or not,
ints, Fractions, big numbers, numpy ints, every shape and memory order."""
from __future__ import annotations

from fractions import Fraction
from math import lcm

import numpy as np
import pytest

from depthcert.checkers.evaluate import _int_matrix, _same_objects


def _reference(M):
    flat = [v if isinstance(v, (int, Fraction)) else Fraction(v) for v in np.asarray(M, dtype=object).ravel().tolist()]
    q = lcm(*{int(v.denominator) for v in flat}) if flat else 1
    return [int(v.numerator) * (q // int(v.denominator)) for v in flat], q


def _check(M):
    N, q = _int_matrix(M)
    want, wq = _reference(M)
    assert q == wq and N.shape == np.shape(M) and N.dtype == object
    assert [type(v) for v in N.ravel().tolist()] == [int] * len(want)
    assert N.ravel().tolist() == want


@pytest.mark.parametrize("seed", range(6))
def test_random_matrices_with_shared_and_distinct_entries(seed):
    rng = np.random.default_rng(seed)
    pool = [Fraction(0), Fraction(1), Fraction(-3, 7), Fraction(2**80 + 1, 3), 5, -(2**70), np.int64(-4),
            Fraction(1, 2**60)]
    shape = tuple(int(v) for v in rng.integers(1, 9, int(rng.integers(1, 4))))
    M = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        r = rng.random()
        # a shared object, an equal but distinct object, or a fresh random value
        M[idx] = pool[int(rng.integers(0, len(pool)))] if r < 0.5 else \
            Fraction(int(rng.integers(-5, 6)), int(rng.integers(1, 5))) if r < 0.8 else Fraction(1)
    _check(M)
    _check(M.T)  # not C-contiguous
    _check(np.asfortranarray(M))
    if M.ndim >= 2:
        _check(M[::2, ::-1])


def test_empty_and_one_entry():
    _check(np.empty((0, 3), dtype=object))
    _check(np.empty((0,), dtype=object))
    _check(np.array([[Fraction(5, 6)]], dtype=object))
    _check(np.array([7], dtype=object))


def test_groups_are_identities_not_values():
    """Equal values in distinct objects are separate groups, one object shared everywhere is one."""
    a, b, c = Fraction(1, 3), Fraction(1, 3), Fraction(2)
    flat = np.array([a, b, a, c, c, b], dtype=object)
    first, which = _same_objects(flat)
    groups = {flat[f] is x for f in first for x in (a, b, c)}
    assert len(first) == 3 and groups == {True, False}
    assert [flat[first[w]] is v for w, v in zip(which, flat)] == [True] * 6


def test_the_sc_read_out():
    """The SC construction's W_O (two distinct objects: the builder's shared zero and one value)."""
    from depthcert import constructions
    from depthcert.checkers.tasks import make_task

    W = constructions.build(make_task("sc", length=5, alphabet=3), None, False).model.W_O
    assert len(_same_objects(W.ravel())[0]) <= 3
    _check(W)


@pytest.mark.parametrize("top", [1, 2**53 - 1, 2**53, 2**62, 2**63 - 1, 2**63, 2**80])
def test_the_int64_classifier_and_its_bound(top):
    """integerize's C64 (C as int64 when every |entry| < 2^63): the same integers as C, None past
    int64; classifier_below_2_53 is the entry-by-entry test on C; the a-priori bound taken through
    C64 in int64 equals the bound on Python integers (sums near and past 2^63 fall back)."""
    from dataclasses import replace

    from depthcert import constructions
    from depthcert.checkers.evaluate import _all_below, integerize, magnitude_bound
    from depthcert.checkers.tasks import make_task

    rng = np.random.default_rng(top % 1000)
    base = constructions.build(make_task("sc", length=3, alphabet=2), None, False).model
    shape = base.W_O.shape
    vals = rng.integers(-3, 4, shape).astype(object)
    for sign in (1, -1):
        W = vals.copy()
        W[0, 0] = sign * top
        W[-1, -1] = Fraction(sign * top, 7)  # a denominator: every numerator times 7
        model = replace(base, W_O=np.array([[Fraction(v) for v in row] for row in W], dtype=object))
        im = integerize(model)
        fits = all(abs(int(v)) < 2**63 for v in im.C.flat)
        assert (im.C64 is not None) == fits
        if fits:
            assert im.C64.dtype == np.int64 and im.C64.tolist() == im.C.tolist()
        assert im.classifier_below_2_53 == _all_below([im.C], 2**53)
        assert magnitude_bound(model, im.layers, im.C, C64=im.C64) == magnitude_bound(model, im.layers, im.C)
        assert im.bound == magnitude_bound(model, im.layers, im.C)
