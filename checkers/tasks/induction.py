"""Induction (Olsson et al., "In-context learning and induction heads", 2022): a sequence whose
last token occurred exactly once before; the label is the token that followed that occurrence.

Points: every sequence x_0 .. x_{n-1} over [V] = {0, ..., V-1} in which the last token
t = x_{n-1} occurs exactly once among x_0 .. x_{n-3} (at position j) and x_{n-2} != t; the label
is x_{j+1} (never t).  A fixed-offset lookup cannot answer it (j varies): the model must find the
earlier t and copy its successor, what an induction head does.  The vocabulary and the classes
are "0", ..., "V-1" (class c is token c).  Size = V (n-2) (V-1)^(n-2).

Index order: point i = (t (n-2) + j) (V-1)^(n-2) + r, where the base-(V-1) digits of r (most
significant first) fill the positions 0 .. n-2 other than j, digit d standing for token d when
d < t and d + 1 otherwise.  Point 0 is "0 1 1 ... 1 0" (label 1).

Symmetry: none is declared.
"""
from __future__ import annotations

import numpy as np

from depthcert.checkers.errors import TooManyPoints
from depthcert.checkers.tasks.base import point_indices, INDEX_LIMIT, Task, _check_int, bounded_product, check_vocabulary

MAX_LENGTH = 4096


class Induction(Task):
    """All length-n sequences over [V] whose last token occurred exactly once (not just before it),
    labelled with the token after that occurrence."""

    name = "induction"
    theorem = "Olsson et al. (2022): induction heads"

    def __init__(self, vocab: int = 5, n: int = 8):
        self.V = _check_int("vocab", vocab, low=2)
        self.n = _check_int("n", n, low=3, high=MAX_LENGTH)
        check_vocabulary(self.V, f"induction with --vocab {self.V}")
        self.rest = bounded_product((self.V - 1 for _ in range(self.n - 2)), INDEX_LIMIT)
        size = None if self.rest is None else bounded_product((self.V, self.n - 2, self.rest), INDEX_LIMIT)
        if size is None:
            raise TooManyPoints(f"induction with --vocab {self.V} --n {self.n} has {self.V} * {self.n - 2} * "
                                f"{self.V - 1}^{self.n - 2} > 2^62 points (dataset indices are 64-bit); use smaller sizes")
        self.length = self.n
        self.size = size
        self.vocab = tuple(str(i) for i in range(self.V))
        self.classes = self.vocab
        self.params = {"vocab": self.V, "n": self.n}

    @property
    def size_formula(self) -> str:
        return f"{self.V} * {self.n - 2} * {self.V - 1}^{self.n - 2}"

    def decode(self, index):
        index = point_indices(index, self.size)
        n, W = self.n, self.V - 1
        head, r = index // self.rest, index % self.rest
        t, j = head // (n - 2), head % (n - 2)
        ids = np.empty((len(index), n), dtype=np.int64)
        ids[:, n - 1] = t
        # the n-2 free positions (0 .. n-2 without j), filled from the last digit of r
        for slot in range(n - 3, -1, -1):
            pos = np.where(slot < j, slot, slot + 1)  # the slot-th free position
            d = r % W if W > 0 else np.zeros_like(r)
            r = r // W if W > 0 else r
            ids[np.arange(len(index)), pos] = d + (d >= t)
        ids[np.arange(len(index)), j] = t
        return ids, ids[np.arange(len(index)), j + 1]


def make(key: str, take) -> Induction:
    """Build from CLI options: --vocab (default 5), --n (default 8)."""
    return Induction(**take("vocab", "n"))
