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

from depthcert.checkers.budget import charge_seconds, charge_weights, progress_wanted
from depthcert.checkers.errors import BadInput


def _dot(a: Sequence[Fraction], b: Sequence[Fraction]) -> Fraction:
    return sum((x * y for x, y in zip(a, b) if x and y), Fraction(0))


def _direction(x: Sequence[Fraction]) -> tuple[Fraction, ...] | None:
    """x divided by its first non-zero entry (None for the zero vector): two non-zero vectors are
    linearly dependent (parallel or antiparallel) iff their directions are equal."""
    for v in x:
        if v:
            return tuple(u / v for u in x)
    return None


def _check_independent(xs: list[list[Fraction]]) -> None:
    """The lemma's hypothesis, checked up front for every pair (the incremental proof only ever
    compares a new vector with one earlier vector, so a dependent pair could slip through)."""
    if len(xs) < 2:
        return
    seen: dict = {}
    for i, x in enumerate(xs):
        key = _direction(x)
        if key is None:
            raise BadInput(f"Lemma 3 hypothesis fails: vector {i} is zero (parallel to every other vector)")
        if key in seen:
            raise BadInput(f"Lemma 3 hypothesis fails: vectors {seen[key]} and {i} are parallel (linearly dependent)")
        seen[key] = i


def lemma3_seconds(n_vectors: int, d: int) -> float:
    """Estimated time of lemma3_classifier: every new vector meets every earlier column, about
    C^2/2 exact dot products of length d at ~2 microseconds per multiply-add (measured here)."""
    return n_vectors * n_vectors / 2 * d * 2e-6


def lemma3_guard(n_vectors: int, d: int) -> None:
    """Charge the resource budget for Lemma 3 on n_vectors vectors of length d; builders call it
    before computing the vectors, which costs as much again."""
    charge_weights(n_vectors * d, f"Lemma 3 classifier, {n_vectors} classes x {d}")
    charge_seconds(lemma3_seconds(n_vectors, d), f"Lemma 3's classifier for {n_vectors} classes (d' = {d})")


def lemma3_classifier(vectors: Sequence[Sequence], labels: Sequence[int], n_classes: int | None = None) -> np.ndarray:
    """W_O (n_classes x d, Fractions) with row y_i scoring x_i strictly highest.

    Raises BadInput if two vectors are linearly dependent (parallel, antiparallel or zero: the
    lemma's hypothesis) or labels repeat.  Rows of classes that label no vector score every
    vector strictly below its own class (they are not in the lemma, but they are rows of W).
    """
    C0 = len(vectors)
    d0 = len(vectors[0]) if C0 else 0
    lemma3_guard(C0, d0)
    xs = [[Fraction(v) for v in x] for x in vectors]
    if not xs:
        raise BadInput("Lemma 3 needs at least one vector")
    d = len(xs[0])
    if any(len(x) != d for x in xs):
        raise BadInput("Lemma 3 vectors must have equal length")
    if len(set(labels)) != len(labels):
        raise BadInput("Lemma 3 needs distinct labels")
    _check_independent(xs)
    C = (max(labels) + 1) if n_classes is None else n_classes
    cols: list[list[Fraction]] = [[Fraction(0)] * d]  # column of the first point's class
    col_of = [0]  # point i -> its column
    scores = [[Fraction(0)]]  # scores[i][c] = x_i . cols[c]
    steps = range(1, len(xs))
    if progress_wanted(lemma3_seconds(C0, d0)):
        import sys

        from tqdm import tqdm

        steps = tqdm(steps, desc="Lemma 3 classifier", unit="class", leave=False, file=sys.stderr)
    for k in steps:
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
    unused = sorted(set(range(C)) - set(labels))
    if unused:
        W[unused, :] = _below_every_point(xs, cols, col_of, scores)
    W.flags.writeable = False
    return W


def _below_every_point(xs, cols, col_of, scores) -> list[Fraction]:
    """A row w with x_i . w < x_i . w_(y_i) for every i, for the classes no vector carries (a zero
    row would tie with the first point, whose column is 0): the first point's column minus
    x_0 / (|x_0|^2 M), with M so large that no other point's margin against that column is used up."""
    x0 = xs[0]
    norm = _dot(x0, x0)
    if norm == 0:
        raise BadInput("Lemma 3: a zero vector scores 0 in every class and cannot beat another class")
    dw = [u / norm for u in x0]  # x_0 . dw = 1
    own = col_of[0]
    M = Fraction(1)
    for i in range(1, len(xs)):
        eps = scores[i][col_of[i]] - scores[i][own]  # > 0: point i's own column scores it highest
        shift = abs(_dot(xs[i], dw))
        if shift:
            M = max(M, 2 * shift / eps)
    return [w - u / M for w, u in zip(cols[own], dw)]
