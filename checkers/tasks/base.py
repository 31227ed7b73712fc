"""Datasets of the paper's tasks, each point an integer index (replayable with --point N).

A task has a vocabulary (the embedding order: token vocab[t] is one-hot row t), classes (the
classifier's output order), a sequence length, an exact size, `point(i)` decoding index i into
(tokens, label), and `batches()` streaming token ids in bounded memory.

The base types every task family module builds on; the families are this package's other modules.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import perm
from typing import Iterator, Sequence

import numpy as np

from depthcert.checkers.errors import BadInput

RESPONSE = "="
CLS = "<cls>"


UNLABELLED = -1  # per-position tasks: a position with no label (not checked)


@dataclass(frozen=True)
class Point:
    index: int
    tokens: tuple[str, ...]
    label: str  # the last position's label; per-position tasks: all labels, "_" = unlabelled
    labels: tuple[str | None, ...] | None = None  # per-position tasks only: one per position


@dataclass(frozen=True)
class Batch:
    index: np.ndarray  # (B,) dataset indices
    ids: np.ndarray  # (B, n) token ids into task.vocab
    labels: np.ndarray  # (B,) class ids into task.classes; (B, n) with UNLABELLED for outputs "all"


class Task:
    """Base class: subclasses set vocab, classes, length, size, params and implement decode."""

    name: str = ""
    theorem: str = ""
    vocab: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    length: int = 0
    size: int = 0
    params: dict = {}
    outputs: str = "last"  # "last": one label per point; "all": a label per position (or UNLABELLED)
    index_ordered: bool = True  # batches() yields indices in increasing order (verify relies on it)

    def decode(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids (B, n), labels (B,) or, for outputs "all", (B, n)) for an array of indices."""
        raise NotImplementedError

    def point(self, i: int) -> Point:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.size:
            raise BadInput(f"point {i} is outside the dataset (0 .. {self.size - 1})")
        ids, labels = self.decode(np.array([i], dtype=np.int64))
        tokens = tuple(self.vocab[t] for t in ids[0])
        if self.outputs == "all":
            labs = tuple(None if y == UNLABELLED else self.classes[y] for y in labels[0])
            return Point(int(i), tokens, " ".join("_" if y is None else y for y in labs), labs)
        return Point(int(i), tokens, self.classes[labels[0]])

    def batches(self, batch_size: int = 4096, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        stop = self.size if stop is None else stop
        for lo in range(start, stop, batch_size):
            idx = np.arange(lo, min(stop, lo + batch_size), dtype=np.int64)
            ids, labels = self.decode(idx)
            yield Batch(idx, ids, labels)

    def batches_of(self, indices: Sequence[int], batch_size: int = 4096) -> Iterator[Batch]:
        indices = np.asarray(indices, dtype=np.int64)
        for lo in range(0, len(indices), batch_size):
            idx = indices[lo : lo + batch_size]
            ids, labels = self.decode(idx)
            yield Batch(idx, ids, labels)

    def render(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)

    def symmetry_groups(self) -> tuple[tuple[str, ...], ...]:
        """Token groups whose full symmetric group maps the labelled dataset onto itself
        (a label that is a permuted token is permuted with it).  () = no symmetry declared."""
        return ()

    def orbit_representatives(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(indices, orbit sizes): one point per orbit of symmetry_groups(), or None.  What the
        family's enumerator (`orbit_enumeration`) returns, checked by checkers/symmetry.check_orbits
        (distinct orbits, orbit sizes re-derived and adding up to the dataset, labels from the
        task's rule); a faulty enumerator raises EnumerationError (an internal error, exit 4)."""
        reps = self.orbit_enumeration()
        if reps is None or not self.symmetry_groups():
            return None
        from depthcert.checkers.symmetry import check_orbits

        checked = check_orbits(self, *reps)
        return checked.indices, np.array(checked.sizes, dtype=object)

    def orbit_enumeration(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The family's own enumerator of orbit representatives (indices, orbit sizes); callers use
        orbit_representatives(), which checks it."""
        return None

    def orbit_scan_points(self) -> int:
        """How many points orbit_representatives() decodes to find the representatives (0 when
        they are written down directly); plan_points refuses scans above its limit."""
        return 0

    @property
    def size_formula(self) -> str:
        """How `size` is counted, e.g. "A(5,3) * A(5,3) * 3"."""
        return str(self.size)

    def describe(self) -> str:
        opts = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name} {opts}".strip()


# Dataset indices are int64 (numpy decode); every enumerated task stays below this many points.
INDEX_LIMIT = 2**62


def bounded_product(factors, limit: int = INDEX_LIMIT) -> int | None:
    """The product of non-negative ints, or None as soon as it exceeds `limit` (never builds
    a huge integer: `--k 1000000` must be refused in microseconds, not after minutes)."""
    out = 1
    for f in factors:
        out *= f
        if out == 0:
            return 0
        if out > limit:
            return None
    return out


def bounded_perm(n: int, k: int, limit: int = INDEX_LIMIT) -> int | None:
    """A(n, k) = n!/(n-k)!, or None when it exceeds `limit`."""
    return bounded_product(range(n, n - k, -1), limit)


def bounded_pow(base: int, exp: int, limit: int = INDEX_LIMIT) -> int | None:
    """base**exp, or None when it exceeds `limit`."""
    if base <= 1:
        return base**min(exp, 1) if base == 0 else 1
    return bounded_product((base for _ in range(exp)), limit)


def point_indices(index, size: int) -> np.ndarray:
    """index as a 1-D int64 array of dataset points 0 .. size-1 (a point outside is bad input)."""
    index = np.asarray(index, dtype=np.int64)
    if index.ndim != 1:
        raise ValueError("index must be a 1-D array")
    if len(index) and (index.min() < 0 or index.max() >= size):
        raise BadInput(f"point index outside the dataset (0 .. {size - 1})")
    return index


def check_vocabulary(size: int, what: str) -> None:
    """Refuse, before any token is named, a vocabulary no model can embed (one row per token)."""
    from depthcert.checkers.layout import MAX_DIM

    if size > MAX_DIM:
        raise BadInput(f"{what} needs {size} token rows, more than any model may have (d' limit {MAX_DIM}); "
                       "use smaller sizes")


def _check_int(name: str, value, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BadInput(f"--{name} must be an integer, got {value!r}")
    if value < low:
        raise BadInput(f"--{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise BadInput(f"--{name} must be <= {high}, got {value}")
    return int(value)


def decode_partial_permutations(rank: np.ndarray, n: int, k: int) -> np.ndarray:
    """Lexicographic k-permutations of range(n): rank in [0, A(n,k)) -> (B, k) element ids."""
    B = len(rank)
    out = np.empty((B, k), dtype=np.int64)
    used = np.zeros((B, n), dtype=bool)
    r = rank.copy()
    for j in range(k):
        block = perm(n - 1 - j, k - 1 - j)
        digit = r // block
        r = r % block
        free_rank = np.cumsum(~used, axis=1) - 1  # rank of each unused element among unused
        choice = np.argmax((free_rank == digit[:, None]) & ~used, axis=1)
        out[:, j] = choice
        used[np.arange(B), choice] = True
    return out
