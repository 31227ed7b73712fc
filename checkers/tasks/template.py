"""Template matching (TM, paper section 4.3) and in-context template matching (ICTM, section 4.4).

A template of length l is an equality pattern: a string of wildcards up to renaming, written in
canonical first-occurrence form ("ABA", "AAB", ...; restricted growth strings, Bell(l) of them).
A substitution is an injection wildcards -> alphabet, so a template with b distinct wildcards has
N(b) = m!/(m-b)! sequences over an alphabet of m tokens, and every sequence over the alphabet
belongs to exactly one template (its canonical pattern).

Templates with more wildcards than the alphabet has tokens (b > m) have no sequences.  They are
left out of the template set: for TM they would be classes that no point carries; for ICTM any
choice of context templates containing one has no points, so leaving them out changes only the
check that there are at least k templates (k <= number of realizable templates).
"""
from __future__ import annotations

from math import factorial, perm

import numpy as np

from depthcert.checkers.budget import progress_wanted
from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.layout import MAX_DIM
from depthcert.checkers.tasks.base import (CLS, RESPONSE, Task, _check_int, bounded_pow, check_vocabulary,
                                      decode_partial_permutations)

MAX_TEMPLATES = 200_000
MAX_TUPLES = 2_000_000
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def stirling2(n: int, k: int) -> int:
    """Stirling number of the second kind S(n, k): set partitions of n items into k blocks."""
    row = [1] + [0] * k  # S(0, j)
    for i in range(1, n + 1):
        new = [0] * (k + 1)
        for j in range(1, min(i, k) + 1):
            new[j] = j * row[j] + row[j - 1]
        row = new
    return row[k]


def bell(n: int) -> int:
    return sum(stirling2(n, k) for k in range(n + 1))


def count_templates(l: int, m: int) -> int:
    """Realizable templates of length l over m tokens: sum_{b <= min(l, m)} S(l, b) (= Bell(l) if m >= l)."""
    return sum(stirling2(l, b) for b in range(1, min(l, m) + 1))


def enumerate_patterns(l: int, max_blocks: int) -> np.ndarray:
    """All restricted growth strings of length l with at most max_blocks values, lexicographic."""
    out: list[tuple[int, ...]] = []

    def rec(prefix: list[int], top: int):
        if len(prefix) == l:
            out.append(tuple(prefix))
            return
        for v in range(min(top + 1, max_blocks - 1) + 1):
            prefix.append(v)
            rec(prefix, max(top, v))
            prefix.pop()

    rec([0], 0)
    return np.array(out, dtype=np.int64).reshape(len(out), l)


def pattern_name(p) -> str:
    if len(p) and max(p) < len(_LETTERS):
        return "".join(_LETTERS[v] for v in p)
    return ".".join(str(int(v)) for v in p)


def canonical_patterns(seqs: np.ndarray) -> np.ndarray:
    """(B, l) token ids -> (B, l) canonical first-occurrence pattern of each row."""
    B, l = seqs.shape
    pat = np.zeros((B, l), dtype=np.int64)
    nxt = np.zeros(B, dtype=np.int64)
    rows = np.arange(B)
    for j in range(l):
        if j == 0:
            pat[:, 0] = 0
            nxt[:] = 1
            continue
        eq = seqs[:, :j] == seqs[:, j : j + 1]
        has = eq.any(axis=1)
        first = np.argmax(eq, axis=1)
        pat[:, j] = np.where(has, pat[rows, first], nxt)
        nxt = nxt + (~has)
    return pat


class _Templates:
    """The realizable templates of length l over m tokens, with a vectorized pattern -> id lookup."""

    def __init__(self, l: int, m: int):
        total = count_templates(l, m)
        if total > MAX_TEMPLATES:
            raise BadInput(f"--l {l} gives {total} templates (limit {MAX_TEMPLATES}); use a smaller --l")
        self.l, self.m = l, m
        self.patterns = enumerate_patterns(l, min(l, m))
        self.blocks = self.patterns.max(axis=1) + 1
        self.names = tuple(pattern_name(p) for p in self.patterns)
        self.n_seqs = tuple(perm(m, int(b)) for b in self.blocks)  # N(t) = m!/(m-b)!
        base = max(2, min(l, m))  # every pattern digit is < base
        if base**l >= 2**62:
            raise BadInput(f"--l {l} is too long for the pattern index")
        self._weights = np.array([base ** (l - 1 - j) for j in range(l)], dtype=np.int64)
        self._codes = self.patterns @ self._weights  # ascending: lexicographic order of digits

    def ids_of(self, seqs: np.ndarray) -> np.ndarray:
        codes = canonical_patterns(seqs) @ self._weights
        return np.searchsorted(self._codes, codes)


class TemplateMatching(Task):
    """Template matching (paper 4.3, Theorems 4-5): all m^l sequences over an alphabet of m tokens,
    each followed by the CLS token (length l+1), labelled by its template (canonical equality
    pattern); one class per realizable template, sum_{b<=min(l,m)} S(l,b) classes (Bell(l) when
    m >= l).  Size m^l: point i is the sequence whose base-m digits are i (first token most
    significant)."""

    name = "tm"
    theorem = "Theorem 5 (two-layer parsing-mapping)"

    def __init__(self, l: int = 3, alphabet: int | None = None):
        self.l = _check_int("l", l)
        self.m = _check_int("alphabet", self.l if alphabet is None else alphabet)
        if bounded_pow(self.m, self.l) is None:  # without computing m**l (--l 1000000)
            raise TooManyPoints(f"--alphabet {self.m} --l {self.l} gives more than 2^62 points")
        if self.l + 1 > MAX_DIM:  # --alphabet 1: one point, but templates are enumerated recursively
            raise BadInput(f"tm --l {self.l} has sequences of length {self.l + 1}, more positions than any model "
                           f"may have (d' limit {MAX_DIM})")
        self.templates = _Templates(self.l, self.m)
        check_vocabulary(self.m + 1, f"tm with alphabet {self.m}")
        self.tokens = tuple(f"t{i}" for i in range(self.m))
        self.vocab = self.tokens + (CLS,)
        self.classes = self.templates.names
        self.length = self.l + 1
        self.size = self.m**self.l
        self.params = {"l": self.l, "alphabet": self.m}

    def sequences(self, index: np.ndarray) -> np.ndarray:
        s = np.asarray(index, dtype=np.int64).copy()
        out = np.empty((len(s), self.l), dtype=np.int64)
        for j in range(self.l - 1, -1, -1):
            out[:, j] = s % self.m
            s //= self.m
        return out

    def decode(self, index):
        seqs = self.sequences(index)
        ids = np.empty((len(seqs), self.length), dtype=np.int64)
        ids[:, : self.l] = seqs
        ids[:, -1] = self.m
        return ids, self.templates.ids_of(seqs)

    @property
    def size_formula(self) -> str:
        return f"{self.m}^{self.l}"

    def symmetry_groups(self):
        return (self.tokens,)

    def orbit_enumeration(self):
        """Under Sym(alphabet) the orbit of a sequence is its template: one representative per
        template (wildcard j -> token j), orbit size m!/(m-b)! for b wildcards."""
        pats = self.templates.patterns
        idx = pats @ np.array([self.m ** (self.l - 1 - j) for j in range(self.l)], dtype=np.int64)
        return idx.astype(np.int64), np.array(self.templates.n_seqs, dtype=object)

    def representative(self, template: int) -> tuple[int, ...]:
        """Token ids of one sequence of the template (wildcard j -> token j), CLS appended."""
        return tuple(int(v) for v in self.templates.patterns[template]) + (self.m,)


def ictm_size(l: int, m: int, k: int, n_answers: int, query: str = "any") -> int:
    """A(n_a, k) * k! * sum over k-subsets S of templates of (prod_{t in S} N(t)) * (sum_{t in S} N(t)),
    computed from the template counts S(l, b) by generating polynomials (independent of decode).
    query="new" (the query differs from its context question): sum N(t) - k in place of sum N(t)."""
    # poly[j][s] = sum over j-subsets of (prod N) with s = 0 (plain) or s = 1 (times sum N)
    plain = [1] + [0] * k
    marked = [0] * (k + 1)
    for b in range(1, min(l, m) + 1):
        N = perm(m, b)
        for _ in range(stirling2(l, b)):
            for j in range(k, 0, -1):
                marked[j] += N * marked[j - 1] + N * N * plain[j - 1]
                plain[j] += N * plain[j - 1]
    total = marked[k] - (k * plain[k] if query == "new" else 0)
    return perm(n_answers, k) * factorial(k) * total


class InContextTemplateMatching(Task):
    """In-context template matching (paper 4.4, Theorem 6).  Layout X_0 = a_0 ... X_{k-1} = a_{k-1} X_c =,
    length n = k(l+2)+l+1: k distinct templates (ordered) t_0..t_{k-1}, each context question X_i
    any sequence of t_i, k distinct answers (ordered) from n_answers tokens, a query index c and a
    query X_c of template t_c; the label is a_c.  The paper (section 4.4) has the query use "a new
    mapping function"; its words admit two readings, both offered (`query`):

      "any"  (default) the query is any sequence of t_c, its context question's included
      "new"  the query differs from its context question (another substitution of t_c)

    With T the realizable templates and N(t) = m!/(m-b(t))! the sequences of a template with b(t)
    wildcards, the size is

        A(n_answers, k) * sum over ordered k-tuples of distinct templates (t_0..t_{k-1}) of
                          (N(t_0) * ... * N(t_{k-1})) * (Q(t_0) + ... + Q(t_{k-1})),

    Q(t) = N(t) for "any", N(t) - 1 for "new".  "any" is the default: it contains "new", so a
    construction verified on it is verified on both (a certificate is needed for each).

    Index order: answers fastest, then context questions, then (c, query), then the template tuple."""

    name = "ictm"
    theorem = "Theorem 6 (three-layer parsing-copying-matching)"

    def __init__(self, k: int = 2, l: int = 2, alphabet: int | None = None, n_answers: int | None = None,
                 query: str = "any"):
        if query not in ("any", "new"):
            raise BadInput(f"--query must be any or new, got {query!r}")
        self.query = query
        self.k = _check_int("k", k)
        self.l = _check_int("l", l)
        self.m = _check_int("alphabet", self.l if alphabet is None else alphabet)
        self.n_a = _check_int("n-answers", self.k + 2 if n_answers is None else n_answers)
        if self.k > self.n_a:
            raise BadInput(f"--k {self.k} is larger than the number of answer tokens ({self.n_a})")
        length = self.k * (self.l + 2) + self.l + 1
        if length > MAX_DIM:  # checked before counting templates, which is quadratic in l
            raise BadInput(
                f"ictm --k {self.k} --l {self.l} has sequences of length {length}, more positions than "
                f"any model may have (d' limit {MAX_DIM})"
            )
        n_t = count_templates(self.l, self.m)
        if self.k > n_t:
            raise BadInput(
                f"--k {self.k} needs {self.k} distinct templates but length {self.l} over "
                f"{self.m} tokens has only {n_t}"
            )
        tuples = perm(n_t, self.k)
        if tuples > MAX_TUPLES:
            shown = str(tuples) if tuples < 10 ** 18 else f"more than 10^{len(str(tuples)) - 1}"
            raise BadInput(f"{shown} ordered template choices (limit {MAX_TUPLES}); use smaller --k/--l")
        if self.m + 1 + self.n_a > MAX_DIM:  # before naming a token: no model could embed them
            raise BadInput(f"ictm with {self.m} question tokens and {self.n_a} answers has a vocabulary of "
                           f"{self.m + 1 + self.n_a} tokens, more rows than any model may have (d' limit {MAX_DIM})")
        self.templates = _Templates(self.l, self.m)
        self.tokens = tuple(f"x{i}" for i in range(self.m))
        self.answers = tuple(f"a{i}" for i in range(self.n_a))
        self.vocab = self.tokens + (RESPONSE,) + self.answers
        self.classes = self.answers
        self.length = self.k * (self.l + 2) + self.l + 1
        self.n_aperm = perm(self.n_a, self.k)
        N = np.array(self.templates.n_seqs, dtype=object)
        tuples = decode_partial_permutations(np.arange(perm(n_t, self.k), dtype=np.int64), n_t, self.k)
        self._tuples = tuples
        prods = np.array([int(np.prod(N[t])) for t in tuples], dtype=object)
        q_off = 1 if query == "new" else 0  # "new": the query avoids its context question's sequence
        sums = np.array([int(sum(N[t])) - q_off * self.k for t in tuples], dtype=object)
        self._ctx = prods  # context questions per tuple
        self._weight = prods * sums  # (query, c, contexts) per tuple
        cum = np.cumsum(np.concatenate([[0], self._weight]).astype(object))
        self.size = int(cum[-1]) * self.n_aperm
        if self.size >= 2**62:
            raise TooManyPoints("in-context template matching dataset larger than 2^62 points")
        self._cum = cum.astype(np.int64)
        self._N = np.array(self.templates.n_seqs, dtype=np.int64)
        self._bmax = int(min(self.l, self.m))
        self.params = {"k": self.k, "l": self.l, "alphabet": self.m, "n_answers": self.n_a}
        if query != "any":
            self.params["query"] = query

    @property
    def size_formula(self) -> str:
        q = "(N(t_i) - 1)" if self.query == "new" else "N(t_i)"
        return (f"A({self.n_a},{self.k}) * sum over ordered distinct (t_0..t_{self.k - 1}) of "
                f"prod N(t_i) * sum {q}, N(t) = A({self.m}, wildcards of t)")

    def symmetry_groups(self):
        return (self.tokens, self.answers)

    def orbit_scan_points(self) -> int:
        return int(self._cum[-1])

    def orbit_enumeration(self):
        """Under Sym(alphabet) x Sym(answers): answers a_0..a_{k-1} in order, and the question
        tokens of the whole sequence in first-occurrence order (x0 first, then x1, ...); the orbit
        of such a point has A(n_answers, k) * m!/(m-u)! points, u its distinct question tokens."""
        qpos = np.array([j for j in range(self.length) if j % (self.l + 2) < self.l], dtype=np.int64)
        reps, sizes = [], []
        total = int(self._cum[-1])
        chunks = range(0, total, 1 << 15)
        if progress_wanted(total / 2e6):  # ~2 million points decoded per second
            import sys

            from tqdm import tqdm

            chunks = tqdm(chunks, desc="orbit representatives", unit="chunk", leave=False, file=sys.stderr)
        for lo in chunks:
            rest = np.arange(lo, min(total, lo + (1 << 15)), dtype=np.int64)
            ids, _ = self.decode(rest * self.n_aperm)
            q = ids[:, qpos]
            canon = canonical_patterns(q)
            ok = (canon == q).all(axis=1)
            u = q.max(axis=1) + 1
            reps.append(rest[ok] * self.n_aperm)
            sizes.extend(perm(self.m, int(x)) * self.n_aperm for x in u[ok])
        return np.concatenate(reps), np.array(sizes, dtype=object)

    def _substitute(self, template: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Sequence (B, l) of template ids under the injective substitution of lexicographic rank."""
        b = self.templates.blocks[template]
        scale = np.array([perm(self.m - int(x), self._bmax - int(x)) for x in b], dtype=np.int64)
        full = decode_partial_permutations(rank * scale, self.m, self._bmax)  # first b entries = the map
        pats = self.templates.patterns[template]
        return np.take_along_axis(full, pats, axis=1)

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        B = len(index)
        arank = index % self.n_aperm
        rest = index // self.n_aperm
        tup = np.searchsorted(self._cum, rest, side="right") - 1
        off = rest - self._cum[tup]
        temps = self._tuples[tup]  # (B, k)
        ctx_total = np.array([int(v) for v in self._ctx], dtype=np.int64)[tup]
        ctx = off % ctx_total
        qpart = off // ctx_total
        Ns = self._N[temps]  # (B, k)
        Qs = Ns - (1 if self.query == "new" else 0)  # query choices per context question
        cumQ = np.cumsum(Qs, axis=1)
        c = (qpart[:, None] >= cumQ).sum(axis=1)
        qrank = qpart - (cumQ[np.arange(B), c] - Qs[np.arange(B), c])
        ans = decode_partial_permutations(arank, self.n_a, self.k)
        ids = np.empty((B, self.length), dtype=np.int64)
        r = self.m
        step = self.l + 2
        ranks = np.empty((B, self.k), dtype=np.int64)
        for i in range(self.k):
            ranks[:, i] = ctx % Ns[:, i]
            ctx = ctx // Ns[:, i]
        if self.query == "new":  # skip the context question's own rank
            qrank = qrank + (qrank >= ranks[np.arange(B), c])
        for i in range(self.k):
            rank_i = ranks[:, i]
            ids[:, i * step : i * step + self.l] = self._substitute(temps[:, i], rank_i)
            ids[:, i * step + self.l] = r
            ids[:, i * step + self.l + 1] = ans[:, i] + self.m + 1
        ids[:, self.k * step : self.k * step + self.l] = self._substitute(temps[np.arange(B), c], qrank)
        ids[:, -1] = r
        return ids, ans[np.arange(B), c]


def make(key: str, take) -> Task:
    """Build TM or ICTM from the user's options (checkers.tasks.make_task)."""
    if key == "tm":
        return TemplateMatching(**take("l", "alphabet"))
    if key == "ictm":
        return InContextTemplateMatching(**take("k", "l", "alphabet", "n_answers", "query"))
    raise BadInput(f"unknown template task {key!r}")
