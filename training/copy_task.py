"""The copy task (with optional input noise), per-position outputs.  Standard library + NumPy only.

A point is a sequence x = x_0 .. x_{n-1} of tokens from an alphabet of m tokens, a delimiter
"|", and then the copy fed back one token behind (teacher forcing, as a causal language model
is trained):

    input   x~_0 .. x~_{n-1}  |  x_0 .. x_{n-2}          (length 2n)
    label   _    .. _         x_0 x_1 .. x_{n-1}         (position n + i is labelled x_i)

x~ is x with noise: each of the n input tokens is, independently with probability `noise`,
replaced by a different token drawn uniformly (the "flipped" tokens of the study in
shared/paper/related).  The labels are the clean x.  A flipped token cannot be recovered from
the input (the other n - 1 tokens are independent of it), so at noise rate p the best possible
expected accuracy on the labelled positions is 1 - p: copying the input is optimal.

With noise 0 the dataset is finite: all m^n sequences (`all_points`), which the exact checker
decides (training/copy_exact.py).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from depthcert.checkers.errors import BadInput

SEP = "|"
IGNORE = -1  # an unlabelled position (the checker's UNLABELLED and torch's ignore_index)
MAX_EXACT_POINTS = 200_000


@dataclass(frozen=True)
class CopyTask:
    length: int = 8  # n: tokens to copy
    alphabet: int = 10  # m: alphabet size
    noise: float = 0.0  # probability that an input token is flipped

    def __post_init__(self):
        for name, low, high in (("length", 1, 512), ("alphabet", 2, 1000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise BadInput(f"copy --{name} must be an integer in {low}..{high}, got {v!r}")
        if not (isinstance(self.noise, (int, float)) and 0.0 <= self.noise < 1.0):
            raise BadInput(f"copy --noise must be a rate in [0, 1), got {self.noise!r}")

    name = "copy"

    @property
    def vocab(self) -> tuple[str, ...]:
        """Alphabet tokens t0 .. t{m-1}, then the delimiter (embedding order)."""
        return tuple(f"t{i}" for i in range(self.alphabet)) + (SEP,)

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(f"t{i}" for i in range(self.alphabet))

    @property
    def seq_len(self) -> int:
        return 2 * self.length

    @property
    def sep_id(self) -> int:
        return self.alphabet

    @property
    def size(self) -> int:
        return self.alphabet ** self.length

    @property
    def ceiling(self) -> float:
        """Best possible expected accuracy on the labelled positions (1 - noise)."""
        return 1.0 - self.noise

    def params(self) -> dict:
        return {"length": self.length, "alphabet": self.alphabet, "noise": self.noise}

    def encode(self, clean: np.ndarray, noisy: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids (B, 2n), labels (B, 2n)) from clean sequences (B, n) and their noisy input copy."""
        clean = np.asarray(clean, dtype=np.int64)
        noisy = clean if noisy is None else np.asarray(noisy, dtype=np.int64)
        B, n = clean.shape
        ids = np.empty((B, 2 * n), dtype=np.int64)
        ids[:, :n] = noisy
        ids[:, n] = self.sep_id
        ids[:, n + 1:] = clean[:, : n - 1]
        labels = np.full((B, 2 * n), IGNORE, dtype=np.int64)
        labels[:, n:] = clean
        return ids, labels

    def sample(self, rng: np.random.Generator, count: int, noise: float | None = None):
        """(ids, labels, flipped (B, n) bool) for `count` random sequences; noise defaults to the task's."""
        p = self.noise if noise is None else noise
        clean = rng.integers(0, self.alphabet, size=(count, self.length), dtype=np.int64)
        flip = rng.random((count, self.length)) < p if p > 0 else np.zeros((count, self.length), dtype=bool)
        # a flipped token becomes one of the m - 1 other tokens, uniformly
        shift = rng.integers(1, self.alphabet, size=(count, self.length), dtype=np.int64)
        noisy = np.where(flip, (clean + shift) % self.alphabet, clean)
        ids, labels = self.encode(clean, noisy)
        return ids, labels, flip

    def all_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every clean point, in lexicographic order (point i = base-m digits of i)."""
        if self.size > MAX_EXACT_POINTS:
            raise BadInput(f"copy task with {self.size} sequences; the exhaustive set is limited to {MAX_EXACT_POINTS}")
        clean = np.array(list(itertools.product(range(self.alphabet), repeat=self.length)), dtype=np.int64)
        return self.encode(clean)

    def dataset(self):
        """The clean task as a per-position `depthcert.Dataset` (every sequence, labels at n .. 2n-1)."""
        from depthcert import Dataset

        ids, labels = self.all_points()
        V, C = self.vocab, self.classes
        seqs = [[V[t] for t in row] for row in ids]
        labs = [[None if y == IGNORE else C[y] for y in row] for row in labels]
        return Dataset(seqs, labs, name=f"copy n={self.length} m={self.alphabet}")
