"""Max-of-K (Gross et al., "Compact Proofs of Model Performance via Mechanistic Interpretability",
NeurIPS 2024): K tokens from the vocabulary [V] = {0, ..., V-1}; the label is the largest token.

The vocabulary is written "0", "1", ..., "V-1" and the classes are the same V names (class c is
token c).  Size = V^K: every sequence exactly once, repeats allowed.  Index order: point i is
the sequence whose tokens are the base-V digits of i, most significant first (point 0 is
"0 0 ... 0", the last point "V-1 ... V-1").  Sizes above 2^62 points are refused (BadInput)
before anything is allocated.

Symmetry: none is declared.  A token permutation that maps the labelled dataset onto itself must
commute with max on every pair, i.e. be order-preserving, and the only order-preserving
permutation of [V] is the identity.
"""
from __future__ import annotations

import numpy as np

from depthcert.checkers.errors import TooManyPoints
from depthcert.checkers.tasks.base import point_indices, INDEX_LIMIT, Task, _check_int, bounded_pow

MAX_VOCAB = 1 << 16
MAX_K = 4096


class MaxOfK(Task):
    """All V^K sequences of K tokens over [V], labelled with their largest token."""

    name = "max-of-k"
    theorem = "Gross et al. (NeurIPS 2024): Max-of-K"

    def __init__(self, vocab: int = 64, k: int = 4):
        self.V = _check_int("vocab", vocab, low=2, high=MAX_VOCAB)
        self.K = _check_int("k", k, low=1, high=MAX_K)
        size = bounded_pow(self.V, self.K, INDEX_LIMIT)
        if size is None:
            raise TooManyPoints(f"max-of-k with --vocab {self.V} --k {self.K} has {self.V}^{self.K} > 2^62 points "
                                "(dataset indices are 64-bit); use smaller sizes")
        self.length = self.K
        self.size = size
        self.vocab = tuple(str(i) for i in range(self.V))
        self.classes = self.vocab
        self.params = {"vocab": self.V, "k": self.K}

    @property
    def size_formula(self) -> str:
        return f"{self.V}^{self.K}"

    def decode(self, index):
        index = point_indices(index, self.size)
        ids = np.empty((len(index), self.K), dtype=np.int64)
        r = index.copy()
        for pos in range(self.K - 1, -1, -1):
            ids[:, pos] = r % self.V
            r //= self.V
        return ids, ids.max(axis=1)


def make(key: str, take) -> MaxOfK:
    """Build from CLI options: --vocab (default 64), --k (default 4)."""
    return MaxOfK(**take("vocab", "k"))
