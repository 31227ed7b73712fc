"""Paper Lemma 3: an exact linear classifier for pairwise non-parallel vectors with distinct labels.

Claim (Lemma 3): if every two of x_0..x_{N-1} are linearly independent and the labels are
distinct, some W gives (x_i W)[y_i] > (x_i W)[j] for all j != y_i.  The proof is incremental and
is followed literally here, in Fractions: add x_k; let i_k be the column of the current W that
scores x_k highest; give x_k's class the column w_{i_k} + dw / M where x_{i_k} . dw = -1,
x_k . dw = 1 (the minimum-norm solution, in span{x_{i_k}, x_k}), and M is large enough that no
other point's ranking moves (x_i . dw / M < eps, eps the smallest margin against column i_k).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import numpy as np

from depthcert.checkers.errors import BadInput


def _dot(a: Sequence[Fraction], b: Sequence[Fraction]) -> Fraction:
    return sum((x * y for x, y in zip(a, b) if x and y), Fraction(0))


def lemma3_classifier(vectors: Sequence[Sequence], labels: Sequence[int], n_classes: int | None = None) -> np.ndarray:
    """W_O (n_classes x d, Fractions) with row y_i scoring x_i strictly highest.

    Raises BadInput if two vectors are parallel (the lemma's hypothesis) or labels repeat.
    """
    xs = [[Fraction(v) for v in x] for x in vectors]
    if not xs:
        raise BadInput("Lemma 3 needs at least one vector")
    d = len(xs[0])
    if any(len(x) != d for x in xs):
        raise BadInput("Lemma 3 vectors must have equal length")
    if len(set(labels)) != len(labels):
        raise BadInput("Lemma 3 needs distinct labels")
    C = (max(labels) + 1) if n_classes is None else n_classes
    cols: list[list[Fraction]] = [[Fraction(0)] * d]  # column of the first point's class
    col_of = [0]  # point i -> its column
    scores = [[Fraction(0)]]  # scores[i][c] = x_i . cols[c]
    for k in range(1, len(xs)):
        xk = xs[k]
        ok = [_dot(xk, w) for w in cols]
        ik = max(range(len(cols)), key=lambda c: ok[c])
        pk = col_of.index(ik)
        a, b = xs[pk], xk
        aa, ab, bb = _dot(a, a), _dot(a, b), _dot(b, b)
        det = aa * bb - ab * ab
        if det == 0:
            raise BadInput(f"Lemma 3 hypothesis fails: vectors {pk} and {k} are parallel")
        # dw = alpha a + beta b with [aa ab; ab bb] [alpha; beta] = [-1; 1]
        alpha = (-bb - ab) / det
        beta = (ab + aa) / det
        dw = [alpha * u + beta * v for u, v in zip(a, b)]
        deltas = [_dot(xs[i], dw) for i in range(k)]
        eps = [scores[i][col_of[i]] - scores[i][ik] for i in range(k) if i != pk]
        worst = max([deltas[i] for i in range(k) if i != pk] + [Fraction(0)])
        M = Fraction(1)
        if eps and worst > 0:
            M = max(M, 2 * worst / min(eps))
        new = [w + u / M for w, u in zip(cols[ik], dw)]
        cols.append(new)
        col_of.append(len(cols) - 1)
        for i in range(k):
            scores[i].append(scores[i][ik] + deltas[i] / M)
        scores.append(ok + [ok[ik] + Fraction(1) / M])
    W = np.full((C, d), Fraction(0), dtype=object)
    for i, y in enumerate(labels):
        if not 0 <= y < C:
            raise BadInput(f"label {y} outside 0..{C - 1}")
        W[y, :] = cols[col_of[i]]
    W.flags.writeable = False
    return W
