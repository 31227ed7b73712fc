"""The log-depth tasks: parity, mod-count, word problems of finite groups, graph reachability.

Related work (../shared/paper/related/log-depth-transformers-review.txt): transformers whose depth
grows like log n recognise regular languages (a group word problem is the hardest kind: A5's is
NC1-complete) and decide graph connectivity; fixed depth cannot (under standard conjectures).
docs/logdepth.md states every sequence format with its size.  Each point is an integer index;
`decode(index array) -> (token ids (B, n), labels (B,))`, indices in [0, size).

  parity        all 2^n strings over {0, 1}; label: the number of 1s mod 2 (class "0" or "1").
  mod-count     all 2^n strings over {0, 1}; label: the number of 1s mod p (classes "0" .. "p-1").
  word-problem  all |T|^n words over the group's generating set T; label: the product
                g_1 g_2 ... g_n (permutations act on the right: apply g_1 first).
  reachability  all 2^(V^2) directed graphs on V vertices as a V x V adjacency bit matrix
                (row-major, bit (u, w) = 1 iff the edge u -> w), then a source s and a target t
                (vertex tokens); label "yes" iff t is reachable from s (a path of length >= 0,
                so s = t is always "yes"; self-loops are bits like any other).

Index order (most significant first): parity / mod-count / word-problem: the base-2 (base-|T|)
numeral t_0 t_1 ... t_{n-1}; reachability: i = (graph * V + s) * V + t with graph the base-2
numeral of the V^2 bits in row-major order.

Symmetry: none is declared, so every point is evaluated.  Swapping the tokens 0 and 1 flips the
parity for odd n (and for even n fixes the labels, while checkers/symmetry.py would move the
classes "0", "1" with the token names); no automorphism of A5 or S5 exchanges the two generators
(their orders differ); a vertex relabelling of the reachability task moves bit positions, which is
not a token permutation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.tasks.base import INDEX_LIMIT, Task, _check_int, bounded_pow, bounded_product

MAX_SEQUENCE = 1024  # longest sequence accepted (a construction needs one position row per token)
MAX_GROUP_ORDER = 720  # s6 / a6; the constructions' width grows with the group


# ------------------------------------------------------------------------------------ groups

def _cycles(img: tuple[int, ...]) -> str:
    """Cycle notation without spaces, "e" for the identity: (0 1 2) -> "(012)" (digits < 10),
    "(0,1,10)" style when some point is >= 10."""
    seen, out = set(), []
    sep = "" if len(img) <= 10 else ","
    for x in range(len(img)):
        if x in seen or img[x] == x:
            seen.add(x)
            continue
        cyc, y = [], x
        while y not in seen:
            seen.add(y)
            cyc.append(y)
            y = img[y]
        out.append("(" + sep.join(str(c) for c in cyc) + ")")
    return "".join(out) or "e"


def compose(g: tuple[int, ...], h: tuple[int, ...]) -> tuple[int, ...]:
    """The product gh: apply g first, then h (x^(gh) = (x^g)^h)."""
    return tuple(h[g[x]] for x in range(len(g)))


@dataclass(frozen=True)
class Group:
    """A finite permutation group: its elements (images on `degree` points, element 0 the identity,
    the rest in lexicographic order of their images), their names, the generating set whose
    elements are the tokens, and the multiplication table mul[i, j] = index of (element i)(element j)."""

    name: str
    degree: int
    elements: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]
    token_names: tuple[str, ...]
    token_elements: tuple[int, ...]  # element index of each token
    cyclic: bool = False  # element r is the rotation x -> x + r (mod k), named "r"

    @property
    def order(self) -> int:
        return len(self.elements)

    @cached_property
    def mul(self) -> np.ndarray:
        """mul[i, j] = index of compose(element i, element j), computed once (read-only).  Row i at
        once: compose(g, h)[x] = h[g[x]] is column g[x] of the element table, looked up by its bytes."""
        E = np.array(self.elements, dtype=np.int64).reshape(self.order, self.degree)
        index = {row.tobytes(): i for i, row in enumerate(E)}
        out = np.empty((self.order, self.order), dtype=np.int64)
        for i, g in enumerate(E):
            out[i] = [index[row.tobytes()] for row in E[:, g]]
        out.flags.writeable = False
        return out


def _closure(gens: list[tuple[int, ...]], degree: int) -> list[tuple[int, ...]]:
    ident = tuple(range(degree))
    seen = {ident}
    frontier = [ident]
    while frontier:
        nxt = []
        for g in frontier:
            for s in gens:
                h = compose(g, s)
                if h not in seen:
                    seen.add(h)
                    nxt.append(h)
        frontier = nxt
    return sorted(seen)  # the identity is the lexicographically smallest image tuple


def _cycle_perm(degree: int, *cycles) -> tuple[int, ...]:
    img = list(range(degree))
    for cyc in cycles:
        for a, b in zip(cyc, cyc[1:] + cyc[:1]):
            img[a] = b
    return tuple(img)


GROUP_HELP = "c<k> (cyclic, k >= 2, tokens: all k residues), s<m> (m = 3..6), a<m> (m = 4..6)"


def make_group(spec) -> Group:
    """c<k>: Z_k, every residue a token; s<m>: Sym(m) generated by (0 1) and (0 1 ... m-1);
    a<m>: Alt(m) generated by (0 1 2) and (0 1 ... m-1) for odd m, (0 1 2) and (1 2 ... m-1) for
    even m.  The order of the generated group is checked against the known one."""
    if not isinstance(spec, str):
        raise BadInput(f"--group must be a name such as a5, s5, c3; got {spec!r}")
    key = spec.strip().lower()
    m = re.fullmatch(r"([csa])(\d{1,4})", key)
    if not m:
        raise BadInput(f"unknown --group {spec!r}; known: {GROUP_HELP}")
    kind, k = m.group(1), int(m.group(2))
    if kind == "c":
        if not 2 <= k <= MAX_GROUP_ORDER:
            raise BadInput(f"--group c<k> needs 2 <= k <= {MAX_GROUP_ORDER}, got {spec!r}")
        elements = tuple(tuple((x + r) % k for x in range(k)) for r in range(k))
        names = tuple(str(r) for r in range(k))
        return Group(key, k, elements, names, names, tuple(range(k)), cyclic=True)
    low = 3 if kind == "s" else 4
    if not low <= k <= 6:
        raise BadInput(f"--group {kind}<m> needs {low} <= m <= 6, got {spec!r}")
    if kind == "s":
        gens = [_cycle_perm(k, [0, 1]), _cycle_perm(k, list(range(k)))]
        want = 1
        for i in range(2, k + 1):
            want *= i
    else:
        gens = [_cycle_perm(k, [0, 1, 2]), _cycle_perm(k, list(range(k)) if k % 2 else list(range(1, k)))]
        want = 1
        for i in range(3, k + 1):
            want *= i
    elements = tuple(_closure(gens, k))
    if len(elements) != want:  # a wrong generating set must never define a dataset silently
        raise RuntimeError(f"internal: generators of {key} give {len(elements)} elements, not {want}")
    names = tuple(_cycles(g) for g in elements)
    index = {g: i for i, g in enumerate(elements)}
    return Group(key, k, elements, names, tuple(_cycles(g) for g in gens), tuple(index[g] for g in gens))


def counting_group(p: int) -> Group:
    """Z_p with tokens "0" (the identity) and "1" (the generator): mod-count and parity as word
    problems (the constructions read them this way)."""
    g = make_group(f"c{p}")
    return Group(g.name, g.degree, g.elements, g.names, ("0", "1"), (0, 1), cyclic=True)


# ------------------------------------------------------------------------------------ tasks

def _digits(index: np.ndarray, base: int, n: int) -> np.ndarray:
    """(B, n) base-`base` digits of each index, most significant first."""
    out = np.empty((len(index), n), dtype=np.int64)
    r = index.copy()
    for j in range(n - 1, -1, -1):
        out[:, j] = r % base
        r = r // base
    return out


def _length(n) -> int:
    n = _check_int("n", n)
    if n > MAX_SEQUENCE:
        raise BadInput(f"--n {n} is above the longest sequence accepted ({MAX_SEQUENCE})")
    return n


class GroupWord(Task):
    """Words over a group's generating set; label: their product.  Base class of all three
    word-like tasks (parity and mod-count are Z_2 / Z_p with tokens 0 = identity, 1 = generator).

    Size = |T|^n.  Index i: the base-|T| numeral of the token indices, most significant first."""

    theorem = "log-depth transformers (related work): regular languages"

    def __init__(self, group: Group, n: int, name: str, params: dict):
        self.group = group
        self.n = _length(n)
        base = len(group.token_names)
        total = bounded_pow(base, self.n)
        if total is None:
            opts = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in params.items())
            raise TooManyPoints(f"{name} with {opts} has {base}^{self.n} points, more than 2^62 (dataset indices are "
                           "64-bit); use a smaller --n")
        self.name = name
        self.vocab = tuple(group.token_names)
        self.classes = tuple(group.names)
        self.length = self.n
        self.size = total
        self.params = params
        self._tok = np.array(group.token_elements, dtype=np.int64)
        self._mul = group.mul

    @property
    def size_formula(self) -> str:
        return f"{len(self.vocab)}^{self.n}"

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        ids = _digits(index, len(self.vocab), self.n)
        cur = np.zeros(len(index), dtype=np.int64)  # element 0 is the identity
        elem = self._tok[ids]
        for j in range(self.n):
            cur = self._mul[cur, elem[:, j]]
        return ids, cur


class Parity(GroupWord):
    """All 2^n strings over {0, 1}; label: the number of 1s mod 2."""

    def __init__(self, n: int = 8):
        super().__init__(counting_group(2), n, "parity", {"n": n})


class ModCount(GroupWord):
    """All 2^n strings over {0, 1}; label: the number of 1s mod p (classes "0" .. "p-1")."""

    def __init__(self, n: int = 8, modulus: int = 3):
        p = _check_int("modulus", modulus, low=2, high=MAX_GROUP_ORDER)
        super().__init__(counting_group(p), n, "mod-count", {"n": n, "modulus": p})
        self.modulus = p


class WordProblem(GroupWord):
    """All |T|^n words over the generating set T of a finite group; label: the product."""

    def __init__(self, group: str = "a5", n: int = 8):
        g = make_group(group)
        super().__init__(g, n, "word-problem", {"group": g.name, "n": n})


MAX_VERTICES = 7  # 2^(7*7) * 49 < 2^62; V = 8 has 2^64 * 64 points


class Reachability(Task):
    """Directed reachability.  Vocabulary (embedding order): "0", "1" (adjacency bits), then the
    vertex tokens v0 .. v{V-1}.  Sequence, length V^2 + 2: the V x V adjacency bits row-major
    (position u V + w holds bit (u, w), 1 iff the edge u -> w), the source s, the target t.
    Label: "yes" iff t is reachable from s by a directed path of length >= 0, else "no".

    Size = 2^(V^2) * V * V.  Index i = (graph * V + s) * V + t, graph = the base-2 numeral of the
    bits in row-major order (bit (0, 0) most significant)."""

    name = "reachability"
    theorem = "log-depth transformers (related work): graph connectivity"

    def __init__(self, vertices: int = 3):
        self.V = _check_int("vertices", vertices, low=1)
        if self.V > MAX_VERTICES:
            raise TooManyPoints(f"reachability with --vertices {self.V} has 2^{self.V * self.V} * {self.V * self.V} "
                           f"points, more than 2^62 (dataset indices are 64-bit); use --vertices <= {MAX_VERTICES}")
        V = self.V
        self.vertices = tuple(f"v{i}" for i in range(V))
        self.vocab = ("0", "1") + self.vertices
        self.classes = ("no", "yes")
        self.length = V * V + 2
        self.n_graphs = 2 ** (V * V)
        size = bounded_product((self.n_graphs, V, V))
        if size is None or size > INDEX_LIMIT:  # unreachable for V <= 7; kept as the stated guard
            raise TooManyPoints(f"reachability with --vertices {V} has more than 2^62 points")
        self.size = size
        self.params = {"vertices": V}

    @property
    def size_formula(self) -> str:
        return f"2^{self.V * self.V} * {self.V} * {self.V}"

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        V = self.V
        t = index % V
        s = (index // V) % V
        graph = index // (V * V)
        bits = _digits(graph, 2, V * V)  # (B, V^2)
        B = len(index)
        ids = np.empty((B, self.length), dtype=np.int64)
        ids[:, : V * V] = bits
        ids[:, -2] = 2 + s
        ids[:, -1] = 2 + t
        reach = bits.reshape(B, V, V).astype(bool) | np.eye(V, dtype=bool)[None]
        for _ in range(max(0, (V - 1).bit_length())):  # paths of length <= 2^k >= V - 1
            reach = reach | (np.matmul(reach.astype(np.int64), reach.astype(np.int64)) > 0)
        rows = np.arange(B)
        return ids, reach[rows, s, t].astype(np.int64)


def make(key: str, take) -> Task:
    """Build a task from CLI options: parity --n; mod-count --n --modulus (--p); word-problem
    --group --n; reachability --vertices."""
    if key == "parity":
        return Parity(**take("n"))
    if key == "mod-count":
        return ModCount(**take("n", "modulus"))
    if key == "word-problem":
        return WordProblem(**take("group", "n"))
    if key == "reachability":
        return Reachability(**take("vertices"))
    raise BadInput(f"unknown task {key!r}")
