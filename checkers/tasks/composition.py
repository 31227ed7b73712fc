"""Sequential function composition (Chen, Peng & Wu, arXiv 2412.02975): L functions given in
context as tables, then a query x; the label is f_L(...f_2(f_1(x))...).

Token format (docs/composition.md).  The vocabulary is the domain [N] = {0, ..., N-1}, written
"0", "1", ..., "N-1"; the classes are the same N names.  A point is a tuple (f_1, ..., f_L, x)
of L functions [N] -> [N] and a query x in [N], written as the sequence of length n = L N + 1

    f_1(0) f_1(1) ... f_1(N-1)   f_2(0) ... f_2(N-1)   ...   f_L(0) ... f_L(N-1)   x

i.e. table i (1-based) occupies positions (i-1) N .. i N - 1 and position (i-1) N + a holds
f_i(a) (the argument is the position inside the table, the value is the token); x is the last
token.  Label: f_L(...f_1(x)).  The chain-of-thought steps are v_i = f_i(v_{i-1}), v_0 = x,
for i = 1..L (v_L is the label).

Size = N^(L N + 1): every tuple of functions and every query, each exactly once.  Index order:
point i is the sequence whose tokens are the base-N digits of i, most significant first (so
f_1(0) is the leading digit and x the last one).  Sizes above 2^62 points are refused (BadInput)
before anything is allocated, and so are sequences longer than MAX_LENGTH tokens.

Symmetry: none is declared, because none exists (N >= 2).  Claim: no token permutation
sigma != id maps the labelled dataset onto itself with the labels moved by a class
permutation kappa.  Proof: sigma acts on every token, so sigma X encodes g_i = sigma o f_i (the
value at position (i-1) N + a becomes sigma(f_i(a)); the argument a is a position and does not
move) and the query sigma(x).  Take f_1 constant c and f_2 = ... = f_L = id: label(X) = c and
label(sigma X) = sigma^L(c), so kappa = sigma^L.  Take every f_i = id: label(X) = x and
label(sigma X) = sigma^(L+1)(x), so sigma^(L+1) = kappa = sigma^L, i.e. sigma = id.  (Relabelling
the domain would need the positions of the tables to move with it; checkers/symmetry.py fixes
positions, and rightly: the position of a table entry is its argument.)  tests/test_composition.py
checks the claim by brute force on small sizes.
"""
from __future__ import annotations

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.tasks.base import point_indices, INDEX_LIMIT, Task, _check_int, bounded_pow

MAX_LENGTH = 4096  # no model can read longer sequences (checkers/layout.MAX_DIM rows hold the positions)


def domain_names(n: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(n))


class Composition(Task):
    """L-fold sequential function composition over the domain [N] (docstring of the module)."""

    name = "composition"
    theorem = "Chen, Peng & Wu (arXiv 2412.02975): sequential function composition"

    def __init__(self, n_functions: int = 2, domain: int = 3):
        self.L = _check_int("L", n_functions)
        self.N = _check_int("N", domain, low=2)
        length = self.L * self.N + 1 if self.L <= MAX_LENGTH and self.N <= MAX_LENGTH else MAX_LENGTH + 1
        if length > MAX_LENGTH:
            raise BadInput(f"composition with --L {self.L} --N {self.N} has sequences of L*N+1 > {MAX_LENGTH} "
                           "tokens; use smaller sizes")
        size = bounded_pow(self.N, length, INDEX_LIMIT)
        if size is None:
            raise TooManyPoints(f"composition with --L {self.L} --N {self.N} has {self.N}^{length} > 2^62 points "
                           "(dataset indices are 64-bit); use smaller sizes")
        self.length = length
        self.size = size
        self.vocab = domain_names(self.N)
        self.classes = self.vocab
        self.params = {"L": self.L, "N": self.N}

    @property
    def size_formula(self) -> str:
        return f"{self.N}^{self.length}"

    def table_position(self, i: int, a: int) -> int:
        """Position of f_i(a) (i is 1-based)."""
        return (i - 1) * self.N + a

    @property
    def query_position(self) -> int:
        return self.length - 1

    def decode(self, index):
        ids = self._digits(index)
        return ids, self._steps(ids)[:, -1]

    def cot_steps(self, index) -> np.ndarray:
        """(B, L) class ids: v_1 = f_1(x), ..., v_L = f_L(v_{L-1}) (v_L is the label)."""
        return self._steps(self._digits(index))

    def _digits(self, index) -> np.ndarray:
        index = point_indices(index, self.size)
        ids = np.empty((len(index), self.length), dtype=np.int64)
        r = index.copy()
        for pos in range(self.length - 1, -1, -1):
            ids[:, pos] = r % self.N
            r //= self.N
        return ids

    def _steps(self, ids: np.ndarray) -> np.ndarray:
        rows = np.arange(len(ids))
        cur = ids[:, -1].copy()
        out = np.empty((len(ids), self.L), dtype=np.int64)
        for i in range(1, self.L + 1):
            cur = ids[rows, (i - 1) * self.N + cur]
            out[:, i - 1] = cur
        return out

    def render(self, tokens) -> str:
        """f1: 1 0 2 | f2: 2 2 0 | x: 1  (tokens after the prompt: "| then: ...")."""
        tokens = list(tokens)
        N, L = self.N, self.L
        parts = [f"f{i}: " + " ".join(tokens[(i - 1) * N: i * N]) for i in range(1, L + 1)]
        if len(tokens) >= self.length:
            parts.append(f"x: {tokens[self.length - 1]}")
        if len(tokens) > self.length:
            parts.append("then: " + " ".join(tokens[self.length:]))
        return " | ".join(parts)


def make(key: str, take) -> Composition:
    """Build from CLI options: --L (n_functions, default 2), --N (domain, default 3)."""
    return Composition(**take("n_functions", "domain"))
