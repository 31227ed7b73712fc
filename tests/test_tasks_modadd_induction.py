"""The enumerators of modular-addition and induction against their definitions written out by
brute force (every sequence over the alphabet, kept and labelled by the rule), and their size
guards."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import make_task


def _decoded(task) -> dict:
    ids, labels = task.decode(np.arange(task.size))
    return {tuple(task.vocab[t] for t in row): task.classes[y] for row, y in zip(ids, labels)}


@pytest.mark.parametrize("p", [2, 3, 7, 13])
def test_modular_addition_is_every_pair(p):
    task = make_task("modadd", modulus=p)
    want = {(str(a), str(b), "="): str((a + b) % p) for a in range(p) for b in range(p)}
    got = _decoded(task)
    assert got == want and task.size == p * p == len(got)
    assert task.point(p + 1).tokens == ("1", "1", "=")  # point a * p + b


def _induction_reference(V: int, n: int) -> dict:
    out = {}
    for s in itertools.product(range(V), repeat=n):
        t = s[-1]
        earlier = [j for j in range(n - 2) if s[j] == t]
        if len(earlier) == 1 and s[n - 2] != t:
            out[tuple(map(str, s))] = str(s[earlier[0] + 1])
    return out


@pytest.mark.parametrize("V,n", [(2, 3), (2, 6), (3, 4), (3, 6), (4, 5), (5, 5)])
def test_induction_is_its_definition(V, n):
    task = make_task("induction", vocab=V, n=n)
    got = _decoded(task)
    assert got == _induction_reference(V, n)
    assert task.size == len(got) == V * (n - 2) * (V - 1) ** (n - 2)
    assert all(label != toks[-1] for toks, label in got.items())


@pytest.mark.parametrize("name,opts,msg", [
    ("modadd", {"modulus": 1}, "--p must be >= 2"),
    ("modadd", {"modulus": 5000}, "--p must be <= 4096"),
    ("induction", {"vocab": 1}, "--vocab must be >= 2"),
    ("induction", {"vocab": 5, "n": 2}, "--n must be >= 3"),
    ("induction", {"vocab": 5000, "n": 3}, "d' limit"),
    ("induction", {"vocab": 50, "n": 40}, "2^62"),
    ("modadd", {"k": 3}, "does not apply"),
])
def test_bad_sizes_refused(name, opts, msg):
    with pytest.raises(BadInput, match=msg.replace("^", r"\^")):
        make_task(name, **opts)
