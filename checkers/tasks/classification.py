"""Sequence classification (SC, paper section 4.1).

All M^L sequences over an alphabet of M tokens (or a seeded sample of N of them), each followed
by the CLS token, with pairwise distinct labels (a seeded permutation).
"""
from __future__ import annotations

import random

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.tasks.base import CLS, Task, _check_int, bounded_pow


class SequenceClassification(Task):
    """Sequence classification (paper section 4.1): distinct labels, CLS appended."""

    name = "sc"
    theorem = "Theorem 1 / Lemma 4 (one-layer memorization)"
    MAX_POINTS = 200_000

    def __init__(self, length: int = 3, alphabet: int = 3, seed: int = 0, n_points: int | None = None):
        self.L = _check_int("length", length)
        self.M = _check_int("alphabet", alphabet)
        total = bounded_pow(self.M, self.L)
        if total is None:
            raise TooManyPoints(
                f"--alphabet {self.M} --length {self.L} gives more than 2^62 sequences "
                "(dataset indices are 64-bit); use smaller sizes"
            )
        self.seed = _check_int("seed", seed, low=0)
        n = total if n_points is None else _check_int("n-points", n_points, high=total)
        if n > self.MAX_POINTS:
            raise BadInput(
                f"sequence classification with {n} distinct labels is too large (limit {self.MAX_POINTS}); "
                "use --n-points"
            )
        rng = random.Random(self.seed)
        seqs = list(range(total)) if n == total else sorted(rng.sample(range(total), n))
        labels = list(range(n))
        rng.shuffle(labels)
        self._seq = np.array(seqs, dtype=np.int64)
        self._label = np.array(labels, dtype=np.int64)
        self.vocab = tuple(f"t{i}" for i in range(self.M)) + (CLS,)
        self.classes = tuple(f"y{i}" for i in range(n))
        self.length = self.L + 1
        self.size = n
        self.params = {"length": self.L, "alphabet": self.M, "seed": self.seed, "n_points": n}

    @property
    def size_formula(self) -> str:
        total = self.M**self.L
        return f"{self.M}^{self.L}" if self.size == total else f"{self.size} of {self.M}^{self.L}"

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        s = self._seq[index]
        ids = np.empty((len(index), self.length), dtype=np.int64)
        for j in range(self.L - 1, -1, -1):
            ids[:, j] = s % self.M
            s = s // self.M
        ids[:, -1] = self.M
        return ids, self._label[index]
