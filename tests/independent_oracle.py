"""An independent oracle for verdicts: paper eq. 1-3 evaluated point by point in Fractions.

Written from the paper, not from checkers/evaluate.py, and deliberately plain: Python lists,
`fractions.Fraction`, no numpy arithmetic, no common denominators, no magnitude bounds.  It
reads only the model's public fields (vocab, classes, layers of heads with W_QK / W_V, W_O)
and the task's points (tokens, label) in index order.

    H0 = [X; P; 0]                        one-hot token (vocab order), one-hot position, zeros
    h_k <- h_k + (1/m) sum_i sum_j (W_Vi h_j) relu(h_j^T W_QKi h_k)      (paper eq. 2 / eq. 7)
    o   = W_O h_{n-1}

A point is correct iff o[label] > o[c] for every other class c (ties fail); its margin is
o[label] - max_{c != label} o[c].  `oracle_verdict` scans points in index order and stops at
the first failure, reporting the minimum margin over the points seen up to and including it.

Speed: weight rows are stored sparsely (only non-zero entries), and in the last layer only the
last query column is computed (the classifier reads nothing else).  Both are exact identities.
"""
from __future__ import annotations

from fractions import Fraction

ZERO = Fraction(0)


def _sparse_rows(M) -> list[list[tuple[int, Fraction]]]:
    """Rows of a matrix as lists of (column, non-zero Fraction)."""
    rows = []
    for i in range(M.shape[0]):
        row = []
        for j in range(M.shape[1]):
            v = Fraction(M[i, j])
            if v != 0:
                row.append((j, v))
        rows.append(row)
    return rows


class Oracle:
    def __init__(self, model):
        self.vocab = list(model.vocab)
        self.tok = {t: i for i, t in enumerate(self.vocab)}
        self.classes = list(model.classes)
        self.d = model.dim
        self.max_length = model.max_length
        self.layers = [
            [(_sparse_rows(h.W_QK), _sparse_rows(h.W_V)) for h in layer] for layer in model.layers
        ]
        self.W_O = _sparse_rows(model.W_O)

    @staticmethod
    def _apply(rows, h):
        """W h for sparse rows W and a dense list h."""
        out = []
        for row in rows:
            s = ZERO
            for j, w in row:
                x = h[j]
                if x:
                    s += w * x
            out.append(s)
        return out

    def logits(self, tokens) -> list[Fraction]:
        return self._apply(self.W_O, self.hidden_last(tokens))

    def hidden_last(self, tokens) -> list[Fraction]:
        """The last column of the final H (what the classifier reads)."""
        n = len(tokens)
        assert n <= self.max_length
        V = len(self.vocab)
        H = []
        for p, t in enumerate(tokens):
            col = [ZERO] * self.d
            col[self.tok[t]] = Fraction(1)
            col[V + p] = Fraction(1)
            H.append(col)
        for li, layer in enumerate(self.layers):
            m = len(layer)
            queries = [n - 1] if li == len(self.layers) - 1 else list(range(n))
            new = {k: H[k][:] for k in queries}
            for W_QK, W_V in layer:
                values = [self._apply(W_V, H[j]) for j in range(n)]
                for k in queries:
                    u = self._apply(W_QK, H[k])
                    for j in range(n):
                        hj = H[j]
                        score = ZERO
                        for a in range(self.d):
                            if hj[a] and u[a]:
                                score += hj[a] * u[a]
                        if score > 0:
                            coef = score / m
                            col = new[k]
                            vj = values[j]
                            for a in range(self.d):
                                if vj[a]:
                                    col[a] += coef * vj[a]
            if li == len(self.layers) - 1:
                H = [None] * (n - 1) + [new[n - 1]]
            else:
                H = [new[k] for k in range(n)]
        return H[n - 1]

    def margin(self, tokens, label):
        o = self.logits(tokens)
        y = self.classes.index(label)
        others = [v for c, v in enumerate(o) if c != y]
        if not others:
            return None, o
        return o[y] - max(others), o


def oracle_verdict(model, task, limit: int | None = None):
    """("verified" | "refuted", min margin up to and including the first failure, its index)."""
    orc = Oracle(model)
    best = None
    size = task.size if limit is None else min(limit, task.size)
    for i in range(size):
        p = task.point(i)
        m, _ = orc.margin(p.tokens, p.label)
        if m is None:
            continue
        best = m if best is None else min(best, m)
        if m <= 0:
            return "refuted", best, i
    return "verified", best, None
