"""Heads written once for every size as entry rules: a family of heads indexed by a position.

Lemma 4 has one copy head per position, so its heads are not one set-indexed table
(constructions/indexed.py) but a *family*: head(h) for h = 0, ..., count - 1.  A builder states a
head by rules whose indices and values are sizes (ints, Fractions, or indexed.Size polynomials):

  Entry(row_block, row, col_block, col, value)  one entry of W_QK (or W_V)
  Copy(dst, src_block, value)                   value * identity from the rows of src_block into
                                                the stream rows dst, dst + 1, ...
  Scaled(block, value)                          value * identity on one block (None: every row)

`HeadFamily(count, head)` keeps the builder's own function `head`: a run for every size calls it
once with a symbolic index h (the comparisons it makes are decided over the range or raise
SizeBranch), a finite build calls it with h = 0, ..., count - 1 and fills the matrices here.
`Template(count, at)` is a read-out stated the same way: the class of sequence s has, for each
position h < count, the weight w at stream row offset + s_h, where (offset, w) = at(h).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from depthcert.checkers.layout import Layout, zeros
from depthcert.constructions.indexed import Size, SizeBranch


@dataclass(frozen=True)
class Entry:
    row_block: str
    row: object
    col_block: str
    col: object
    value: object


@dataclass(frozen=True)
class Copy:
    dst: object
    src_block: str
    value: object


@dataclass(frozen=True)
class Scaled:
    block: str | None
    value: object


@dataclass(frozen=True)
class HeadRules:
    qk: tuple
    v: tuple


@dataclass(frozen=True)
class HeadFamily:
    """The heads head(0), ..., head(count - 1); `head` is the builder's function of the index."""

    count: object
    head: Callable[[object], HeadRules]


@dataclass(frozen=True)
class Template:
    """Read-out: for each position h < count, (offset, w) = at(h); the class of sequence s gets w at
    stream row offset + s_h."""

    count: object
    at: Callable[[object], tuple]


def _num(v) -> Fraction:
    """A rule's number at a finite size: an int, a Fraction, or a Size held at a point."""
    if isinstance(v, Size):
        if v.range.point is None:
            raise SizeBranch(f"uses the size {v} as a number outside a finite build", "constructions/head_family.py")
        return v.at(v.range.point)
    return Fraction(int(v)) if isinstance(v, np.integer) else Fraction(v)


def _int(v, what: str) -> int:
    f = _num(v)
    if f.denominator != 1:
        raise ValueError(f"{what} {f} is not an integer")
    return int(f)


def rules_matrix(rules: tuple, layout: Layout) -> np.ndarray:
    """The d' x d' Fraction matrix of a tuple of rules (entries add up)."""
    dim = layout.dim
    W = zeros(dim, dim)
    for r in rules:
        if isinstance(r, Entry):
            i = layout.index(r.row_block, _int(r.row, "row"))
            j = layout.index(r.col_block, _int(r.col, "column"))
            W[i, j] += _num(r.value)
        elif isinstance(r, Copy):
            src = layout.slice(r.src_block)
            dst = _int(r.dst, "destination row")
            width = src.stop - src.start
            if dst < 0 or dst + width > dim:
                raise ValueError(f"a copy into rows {dst}..{dst + width - 1} of a stream of {dim} rows")
            for t in range(width):
                W[dst + t, src.start + t] += _num(r.value)
        elif isinstance(r, Scaled):
            rows = range(dim) if r.block is None else range(layout.slice(r.block).start, layout.slice(r.block).stop)
            for i in rows:
                W[i, i] += _num(r.value)
        else:
            raise TypeError(f"not a head rule: {r!r}")
    W.flags.writeable = False
    return W


def family_heads(family: HeadFamily) -> list[HeadRules]:
    """head(0), ..., head(count - 1) at a finite size."""
    return [family.head(h) for h in range(_int(family.count, "head count"))]


def template_readout(template: Template, task, dim: int) -> np.ndarray:
    """W_O (classes x d'): for every point (sequence s, label y) and h < count, row y gets w at
    offset(h) + s_h (the labels are distinct, so rows do not collide)."""
    W = zeros(len(task.classes), dim)
    count = _int(template.count, "read-out positions")
    at = [(_int(offset, "read-out row"), _num(w)) for offset, w in (template.at(h) for h in range(count))]
    # how often each (row, column) gets each distinct weight, counted in integers; the entries are
    # then the exact sums (one Fraction per distinct entry value), not one Fraction addition per hit
    weights = list(dict.fromkeys(w for _, w in at))
    hits = np.zeros((len(weights), len(task.classes) * dim), dtype=np.int64)  # (weight, row * dim + column)
    for batch in task.batches(4096):
        ids, labels = np.asarray(batch.ids), np.asarray(batch.labels)
        flat = [[] for _ in weights]  # per distinct weight: the flat (row, column) index of every hit
        for h, (offset, w) in enumerate(at):
            cols = offset + ids[:, h]
            if len(cols) and (cols.min() < 0 or cols.max() >= dim):
                raise ValueError(f"a read-out row outside the stream of {dim} rows")
            flat[weights.index(w)].append(labels * dim + cols)
        for k, idx in enumerate(flat):
            if idx:
                hits[k] += np.bincount(np.concatenate(idx), minlength=hits.shape[1])
    hits = hits.reshape(len(weights), len(task.classes), dim)
    rows, cols = np.nonzero(hits.any(axis=0))
    if len(rows):
        per_entry = hits[:, rows, cols].T  # (entries, distinct weights)
        if len(weights) == 1:  # a 1-D unique (the row-wise one sorts far slower)
            counts, which = np.unique(per_entry[:, 0], return_inverse=True)
            counts = counts[:, None]
        else:
            counts, which = np.unique(per_entry, axis=0, return_inverse=True)
        values = np.empty(len(counts), dtype=object)
        values[:] = [sum((k * w for k, w in zip(n, weights) if k), Fraction(0)) for n in counts.tolist()]
        W[rows, cols] = values[np.asarray(which).ravel()]
    W.flags.writeable = False
    return W
