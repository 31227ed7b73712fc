"""Datasets of the paper's tasks, each point an integer index (replayable with --point N).

A task has a vocabulary (the embedding order: token vocab[t] is one-hot row t), classes (the
classifier's output order), a sequence length, an exact size, `point(i)` decoding index i into
(tokens, label), and `batches()` streaming token ids in bounded memory.

Sizes (paper section 4):
  sc    all M^L sequences over an alphabet of M tokens (or a seeded sample of N of them),
        each followed by the CLS token, with pairwise distinct labels (a seeded permutation).
  icqa  A(n_q,k) * A(n_a,k) * k: an ordered choice of k distinct questions, an ordered choice of
        k distinct answers, and the query index c; sequence q_0 = a_0 ... q_{k-1} = a_{k-1} q_c =,
        length 3k+2, label a_c.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from math import perm
from typing import Iterator, Sequence

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints

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
        """(indices, orbit sizes): one point per orbit of symmetry_groups(), or None."""
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


class ICQA(Task):
    """In-context QA (paper section 4.2)."""

    name = "icqa"
    theorem = "Theorem 3 (two-layer copy-matching)"

    def __init__(self, k: int = 3, n_questions: int | None = None, n_answers: int | None = None):
        self.k = _check_int("k", k)
        n_q = self.k + 2 if n_questions is None else n_questions
        n_a = self.k + 2 if n_answers is None else n_answers
        self.n_q = _check_int("n-questions", n_q)
        self.n_a = _check_int("n-answers", n_a)
        if self.k > self.n_q:
            raise BadInput(f"--k {self.k} is larger than the number of question tokens ({self.n_q})")
        if self.k > self.n_a:
            raise BadInput(f"--k {self.k} is larger than the number of answer tokens ({self.n_a})")
        qperm, aperm = bounded_perm(self.n_q, self.k), bounded_perm(self.n_a, self.k)
        if qperm is None or aperm is None or bounded_product((qperm, aperm, self.k)) is None:
            raise TooManyPoints(
                f"icqa with --k {self.k} --n-questions {self.n_q} --n-answers {self.n_a} has more than 2^62 "
                "points (dataset indices are 64-bit); use smaller sizes"
            )
        self.questions = tuple(f"q{i}" for i in range(self.n_q))
        self.answers = tuple(f"a{i}" for i in range(self.n_a))
        self.vocab = self.questions + (RESPONSE,) + self.answers
        self.classes = self.answers
        self.length = 3 * self.k + 2
        self.n_qperm = perm(self.n_q, self.k)
        self.n_aperm = perm(self.n_a, self.k)
        self.size = self.n_qperm * self.n_aperm * self.k
        self.params = {"k": self.k, "n_questions": self.n_q, "n_answers": self.n_a}

    @property
    def size_formula(self) -> str:
        return f"A({self.n_q},{self.k}) * A({self.n_a},{self.k}) * {self.k}"

    def symmetry_groups(self):
        return (self.questions, self.answers)

    def orbit_representatives(self):
        """Under Sym(questions) x Sym(answers) the orbit of a point is fixed by its query
        index c alone: rank 0 (questions q0..q_{k-1}, answers a0..a_{k-1}) with each c,
        i.e. indices 0..k-1, each orbit of size A(n_q,k) * A(n_a,k)."""
        idx = np.arange(self.k, dtype=np.int64)
        return idx, np.full(self.k, self.n_qperm * self.n_aperm, dtype=object)

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        c = index % self.k
        rest = index // self.k
        arank = rest % self.n_aperm
        qrank = rest // self.n_aperm
        qs = decode_partial_permutations(qrank, self.n_q, self.k)
        ans = decode_partial_permutations(arank, self.n_a, self.k)
        B = len(index)
        ids = np.empty((B, self.length), dtype=np.int64)
        r = self.n_q
        ids[:, 0 : 3 * self.k : 3] = qs
        ids[:, 1 : 3 * self.k : 3] = r
        ids[:, 2 : 3 * self.k : 3] = ans + self.n_q + 1
        ids[:, -2] = qs[np.arange(B), c]
        ids[:, -1] = r
        return ids, ans[np.arange(B), c]


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


TASK_ALIASES = {
    "sc": "sc",
    "classification": "sc",
    "sequence-classification": "sc",
    "icqa": "icqa",
    "ic-qa": "icqa",
    "qa": "icqa",
    "tm": "tm",
    "template": "tm",
    "template-matching": "tm",
    "ictm": "ictm",
    "ic-tm": "ictm",
    "multihop": "multihop",
    "multi-hop": "multihop",
    "parity": "parity",
    "mod-count": "mod-count",
    "modcount": "mod-count",
    "word-problem": "word-problem",
    "wordproblem": "word-problem",
    "word": "word-problem",
    "reachability": "reachability",
    "connectivity": "reachability",
    "composition": "composition",
    "compose": "composition",
    "max-of-k": "max-of-k",
    "maxofk": "max-of-k",
    "max": "max-of-k",
}
# Tasks defined in their own modules: task -> module of depthcert.checkers with make(key, take)
TASK_MODULES = {
    "parity": "logdepth_tasks",
    "mod-count": "logdepth_tasks",
    "word-problem": "logdepth_tasks",
    "reachability": "logdepth_tasks",
    "composition": "composition_task",
    "max-of-k": "max_of_k_task",
}


def canonical_task(name: str) -> str:
    key = str(name).strip().lower()
    if key not in TASK_ALIASES:
        known = ", ".join(dict.fromkeys(TASK_ALIASES.values()))
        raise BadInput(f"unknown task {name!r}; known: {known}")
    return TASK_ALIASES[key]


def make_task(name: str, **options) -> Task:
    """Build a task by name (aliases allowed) from the options a user gave (None = default)."""
    key = canonical_task(name)
    opts = {k: v for k, v in options.items() if v is not None}

    def take(*allowed):
        extra = sorted(set(opts) - set(allowed))
        if extra:
            raise BadInput(f"option --{extra[0].replace('_', '-')} does not apply to task {key}")
        return {k: opts[k] for k in allowed if k in opts}

    if key == "sc":
        return SequenceClassification(**take("length", "alphabet", "seed", "n_points"))
    if key == "icqa":
        return ICQA(**take("k", "n_questions", "n_answers"))
    if key in ("tm", "ictm"):
        from depthcert.checkers import template_tasks

        return template_tasks.make(key, take)
    if key == "multihop":
        from depthcert.checkers import multihop_task

        return multihop_task.make(take)
    if key in TASK_MODULES:
        import importlib

        module = f"depthcert.checkers.{TASK_MODULES[key]}"
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            raise BadInput(f"task {key} is not available in this build") from None
        return mod.make(key, take)
    raise BadInput(f"unknown task {name!r}")
