"""Multi-hop in-context QA: the "nested in-context QA" of the paper's section 7 discussion.

The paper (section 7) sketches chains such as ``a > b  b > c  c > d  a >`` answered ``d`` and
suggests a 6-layer transformer doing "copy-matching" 3 times.  This module fixes a precise
dataset for that task; docs/multihop.md states it with its size formula.
"""
from __future__ import annotations

from math import perm

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.tasks.base import (INDEX_LIMIT, Task, _check_int, check_vocabulary, bounded_perm, bounded_pow, bounded_product,
                            decode_partial_permutations)

RELATION = ">"


def entity_names(n: int) -> tuple[str, ...]:
    """a, b, c, ... for up to 26 entities, e0, e1, ... beyond."""
    if n <= 26:
        return tuple(chr(ord("a") + i) for i in range(n))
    return tuple(f"e{i}" for i in range(n))


class MultiHop(Task):
    """Multi-hop in-context QA with h hops over a functional graph (paper section 7).

    Vocabulary (embedding order): N entities (a, b, c, ...; e0, e1, ... beyond 26), then the
    relation sign ``>``.  Classes: the N entities.

    A point is (x, f, c):
      x = (x_0, ..., x_{k-1})  k distinct entities in order (the sources of the pairs),
      f: {x_0..x_{k-1}} -> {x_0..x_{k-1}}  any function (a functional graph on the k sources,
                               so every entity that occurs has exactly one outgoing pair and
                               every hop is defined; cycles and self-loops allowed),
      c in [k]                 the query starts at s = x_c.
    Sequence (length 3k + 2):  x_0 > f(x_0)  x_1 > f(x_1) ... x_{k-1} > f(x_{k-1})  s >
    Label: f^h(s), the entity reached after h hops.

    Size = A(N, k) * k^k * k  (ordered distinct sources, a target for each, a query).
    Index order: i = (source_rank * k^k + target_rank) * k + c, source_rank lexicographic over
    k-permutations of the N entities, target_rank the base-k number t_0 t_1 ... t_{k-1}
    (most significant first) with f(x_i) = x_{t_i}.
    """

    name = "multihop"
    theorem = "Section 7 (nested in-context QA, h-fold copy-matching)"

    def __init__(self, hops: int = 2, k: int = 3, n_entities: int | None = None):
        self.hops = _check_int("hops", hops)
        self.k = _check_int("k", k)
        n = self.k if n_entities is None else n_entities
        self.n_entities = _check_int("n-entities", n)
        if self.k > self.n_entities:
            raise BadInput(f"--k {self.k} is larger than the number of entities ({self.n_entities})")
        if bounded_product((bounded_perm(self.n_entities, self.k) or INDEX_LIMIT + 1,
                            bounded_pow(self.k, self.k) or INDEX_LIMIT + 1, self.k)) is None:
            raise TooManyPoints(
                f"multihop with --k {self.k} --n-entities {self.n_entities} has more than 2^62 points "
                "(dataset indices are 64-bit); use smaller sizes"
            )
        check_vocabulary(self.n_entities + 1, f"multihop with {self.n_entities} entities")
        self.entities = entity_names(self.n_entities)
        self.vocab = self.entities + (RELATION,)
        self.classes = self.entities
        self.length = 3 * self.k + 2
        self.n_sources = perm(self.n_entities, self.k)
        self.n_targets = self.k**self.k
        self.size = multihop_size(self.n_entities, self.k)
        self.params = {"hops": self.hops, "k": self.k, "n_entities": self.n_entities}

    @property
    def size_formula(self) -> str:
        return f"A({self.n_entities},{self.k}) * {self.k}^{self.k} * {self.k}"

    def symmetry_groups(self):
        return (self.entities,)

    def orbit_enumeration(self):
        """Sym(entities) acts on the sources only (targets are indices into the sources, and c
        is an index), transitively on the A(N, k) source tuples: one orbit per (targets, c),
        represented by source rank 0, i.e. indices 0 .. k^k * k - 1."""
        m = self.n_targets * self.k
        return np.arange(m, dtype=np.int64), np.full(m, self.n_sources, dtype=object)

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        k = self.k
        c = index % k
        rest = index // k
        trank = rest % self.n_targets
        srank = rest // self.n_targets
        src = decode_partial_permutations(srank, self.n_entities, k)  # (B, k) entity ids
        tgt = np.empty_like(src)  # (B, k) indices into the sources
        r = trank.copy()
        for i in range(k - 1, -1, -1):
            tgt[:, i] = r % k
            r = r // k
        B = len(index)
        rows = np.arange(B)
        ids = np.empty((B, self.length), dtype=np.int64)
        rel = self.n_entities
        ids[:, 0 : 3 * k : 3] = src
        ids[:, 1 : 3 * k : 3] = rel
        ids[:, 2 : 3 * k : 3] = src[rows[:, None], tgt]
        ids[:, -2] = src[rows, c]
        ids[:, -1] = rel
        return ids, src[rows, function_power(tgt, self.hops)[rows, c]]


def function_power(f: np.ndarray, h: int) -> np.ndarray:
    """f^h for a batch of maps f (B, k) of {0..k-1} to itself, by repeated squaring: O(log h)
    compositions, so --hops 10^30 decodes as fast as --hops 3.  Powers of one map commute."""
    B, k = f.shape
    rows = np.arange(B)[:, None]
    out = np.tile(np.arange(k), (B, 1))
    base = f.copy()
    while h:
        if h & 1:
            out = base[rows, out]
        base = base[rows, base]
        h >>= 1
    return out


def multihop_size(n_entities: int, k: int) -> int:
    """A(N, k) * k^k * k."""
    return perm(n_entities, k) * k**k * k


def make(take) -> MultiHop:
    """Build from CLI options: --hops, --k, --n-entities (alias --alphabet)."""
    opts = take("hops", "k", "n_entities", "alphabet")
    if "alphabet" in opts:
        alpha = opts.pop("alphabet")
        if "n_entities" in opts and opts["n_entities"] != alpha:
            raise BadInput("--alphabet and --n-entities both given with different values (they are the same option)")
        opts["n_entities"] = alpha
    return MultiHop(**opts)
