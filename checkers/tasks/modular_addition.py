"""Modular addition (Nanda et al., "Progress measures for grokking via mechanistic
interpretability", ICLR 2023): the input "a b =" for a, b in [p] = {0, ..., p-1}; the label is
(a + b) mod p.

The vocabulary is "0", ..., "p-1" and "=" (token p, the p+1 tokens of the paper's model), the
classes are "0", ..., "p-1" (class c is the residue c).  Size = p^2: every pair exactly once.
Index order: point i = a * p + b (point 0 is "0 0 =", the last "p-1 p-1 =").

Symmetry: none is declared (swapping a and b is a symmetry of the labels but moves tokens between
positions, not a token permutation).
"""
from __future__ import annotations

import numpy as np

from depthcert.checkers.tasks.base import point_indices, RESPONSE, Task, _check_int, check_vocabulary

MAX_MODULUS = 1 << 12


class ModularAddition(Task):
    """All p^2 inputs "a b =" labelled (a + b) mod p."""

    name = "modular-addition"
    theorem = "Nanda et al. (ICLR 2023): modular addition"

    def __init__(self, modulus: int = 113):
        self.p = _check_int("p", modulus, low=2, high=MAX_MODULUS)
        check_vocabulary(self.p + 1, f"modular-addition with --p {self.p}")
        self.length = 3
        self.size = self.p * self.p
        self.vocab = tuple(str(i) for i in range(self.p)) + (RESPONSE,)
        self.classes = self.vocab[: self.p]
        self.params = {"p": self.p}

    @property
    def size_formula(self) -> str:
        return f"{self.p}^2"

    def decode(self, index):
        index = point_indices(index, self.size)
        a, b = index // self.p, index % self.p
        ids = np.stack([a, b, np.full_like(a, self.p)], axis=1)
        return ids, (a + b) % self.p


def make(key: str, take) -> ModularAddition:
    """Build from CLI options: --p / --modulus (default 113)."""
    return ModularAddition(**take("modulus"))
