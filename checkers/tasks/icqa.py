"""In-context question answering (ICQA, paper section 4.2).

Size A(n_q,k) * A(n_a,k) * k: an ordered choice of k distinct questions, an ordered choice of
k distinct answers, and the query index c; sequence q_0 = a_0 ... q_{k-1} = a_{k-1} q_c =,
length 3k+2, label a_c.
"""
from __future__ import annotations

from math import perm

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.tasks.base import (RESPONSE, Task, _check_int, bounded_perm, bounded_product,
                                           decode_partial_permutations)


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

    def orbit_enumeration(self):
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
