"""The residual stream as a direct sum of named blocks, and matrices built block by block.

A construction names what each block of the residual stream holds ("question", "response",
"answer", "position", "slot0", ...) and writes its weights the way the paper does: "the
(answer, answer) block is the identity", never by hand-computed offsets (compare tracr's
craft/bases.py).  Every block assignment checks its shape and raises on a mismatch.

Two layouts of the same dimension may partition the stream differently (paper Lemma 4 reads
the output of one head in "slots" of size d that overlap the token and position blocks);
`BlockMatrix` therefore takes a row layout and a column layout.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

import numpy as np

from depthcert.checkers.budget import charge_weights
from depthcert.checkers.errors import BadInput


# Largest residual stream accepted: a d' x d' matrix of Fractions is 8 d'^2 bytes of pointers
# per head (134 MB at 4096), and the position block alone needs d' >= sequence length.
MAX_DIM = 4096


@dataclass(frozen=True)
class Block:
    name: str
    size: int

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise BadInput(f"block name must be a non-empty string, got {self.name!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise BadInput(f"block {self.name!r}: size must be a non-negative int, got {self.size!r}")


@dataclass(frozen=True)
class Layout:
    """Ordered named blocks; block i occupies rows offset(i) .. offset(i)+size-1."""

    blocks: tuple[Block, ...]

    def __post_init__(self):
        dim = sum(b.size for b in self.blocks)
        if dim > MAX_DIM:  # refuse before anyone allocates d' x d' object matrices
            raise BadInput(f"residual stream of d' = {dim} rows is larger than the limit {MAX_DIM}; use smaller sizes")
        names = [b.name for b in self.blocks]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise BadInput(f"layout has duplicate block names: {sorted(dup)}")

    @classmethod
    def of(cls, *blocks: tuple[str, int]) -> "Layout":
        """Layout.of(("question", 3), ("response", 1), ...)."""
        return cls(tuple(Block(n, s) for n, s in blocks))

    @property
    def dim(self) -> int:
        return sum(b.size for b in self.blocks)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.blocks)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def size(self, name: str) -> int:
        return self._find(name)[1].size

    def offset(self, name: str) -> int:
        return self._find(name)[0]

    def slice(self, name: str) -> slice:
        start, block = self._find(name)
        return slice(start, start + block.size)

    def index(self, name: str, i: int) -> int:
        """Row of direction i inside block `name`."""
        start, block = self._find(name)
        if not 0 <= i < block.size:
            raise BadInput(f"direction {i} outside block {name!r} of size {block.size}")
        return start + i

    def padded(self, dim: int, name: str = "scratch") -> "Layout":
        """This layout followed by a zero block filling up to `dim` rows."""
        if dim < self.dim:
            raise BadInput(f"layout needs {self.dim} rows but the model has d' = {dim}")
        return self if dim == self.dim else Layout(self.blocks + (Block(name, dim - self.dim),))

    def to_json(self) -> list[dict]:
        return [{"name": b.name, "size": b.size} for b in self.blocks]

    def _find(self, name: str) -> tuple[int, Block]:
        start = 0
        for b in self.blocks:
            if b.name == name:
                return start, b
            start += b.size
        raise BadInput(f"no block named {name!r} in layout {self.names}")


def exact_number(v, where: str) -> Fraction:
    """v as a Fraction if it is an exact number (int, Fraction, numpy integer); BadInput naming
    `where` otherwise.  Floats are refused: 0.1 would silently become 3602879701896397/2^55."""
    if isinstance(v, Fraction):
        return v
    if isinstance(v, (bool, np.bool_)) or isinstance(v, (float, complex, np.floating, np.complexfloating)):
        raise BadInput(f"{where}: {v!r} is not exact (use int or Fraction, e.g. Fraction(1, 10) for 0.1)")
    if isinstance(v, (int, np.integer)):
        return Fraction(int(v))
    raise BadInput(f"{where}: {v!r} is not an exact number (use int or Fraction)")


def _as_fraction_array(value, shape: tuple[int, int], where: str) -> np.ndarray:
    """A scalar (times identity if square), or a 2-D array-like of exact numbers."""
    arr = np.empty(shape, dtype=object)
    if np.isscalar(value) or isinstance(value, Fraction):
        if shape[0] != shape[1]:
            raise BadInput(f"{where}: a scalar means scalar * identity, but the block is {shape[0]}x{shape[1]}")
        scalar = exact_number(value, where)
        arr[:] = Fraction(0)
        for i in range(shape[0]):
            arr[i, i] = scalar
        return arr
    src = np.asarray(value, dtype=object)
    if src.ndim == 1 and 1 in shape:
        src = src.reshape(shape)
    if src.shape != shape:
        raise BadInput(f"{where}: value has shape {src.shape}, the block is {shape}")
    flat = src.ravel().tolist()
    kinds = set(map(type, flat))
    if kinds <= {Fraction, int}:  # the common case: ints become Fractions (one per distinct value)
        if int in kinds:
            as_fraction = {v: Fraction(v) for v in {v for v in flat if type(v) is int}}
            flat = [v if type(v) is Fraction else as_fraction[v] for v in flat]
        arr.ravel()[:] = flat
        return arr
    for idx, v in np.ndenumerate(src):  # other kinds: each entry checked (a float is named and refused)
        arr[idx] = exact_number(v, f"{where}[{idx[0]}][{idx[1]}]")
    return arr


def _add_nonzero(target: np.ndarray, value: np.ndarray) -> None:
    """target += value (object arrays of Fractions, same shape), entry by entry where value is
    non-zero (x + 0 = x), and a Fraction addition only where target is non-zero too (0 + v = v):
    the same sums, without an addition per entry of a mostly zero block."""
    flat = value.ravel().tolist()
    cols = value.shape[1]
    for k in [k for k, v in enumerate(flat) if v]:
        i, j = divmod(k, cols)
        t = target[i, j]
        target[i, j] = t + flat[k] if t else flat[k]


class BlockMatrix:
    """A d_rows x d_cols exact matrix assembled from named blocks.

    `m.set("answer", "answer", 1)` puts the identity in the (answer, answer) block;
    `m.set("slot2", "token", eye)` copies the token block into slot 2.  Shapes are checked.
    """

    def __init__(self, rows: Layout, cols: Layout):
        self.rows, self.cols = rows, cols
        charge_weights(rows.dim * cols.dim, f"a {rows.dim} x {cols.dim} block matrix")
        self._m = np.full((rows.dim, cols.dim), Fraction(0), dtype=object)

    def set(self, row_block: str, col_block: str, value) -> "BlockMatrix":
        r, c = self.rows.slice(row_block), self.cols.slice(col_block)
        shape = (r.stop - r.start, c.stop - c.start)
        self._m[r, c] = _as_fraction_array(value, shape, f"block ({row_block}, {col_block})")
        return self

    def add(self, row_block: str, col_block: str, value) -> "BlockMatrix":
        r, c = self.rows.slice(row_block), self.cols.slice(col_block)
        shape = (r.stop - r.start, c.stop - c.start)
        _add_nonzero(self._m[r, c], _as_fraction_array(value, shape, f"block ({row_block}, {col_block})"))
        return self

    def entry(self, row_block: str, i: int, col_block: str, j: int, value) -> "BlockMatrix":
        where = f"entry ({row_block}[{i}], {col_block}[{j}])"
        self._m[self.rows.index(row_block, i), self.cols.index(col_block, j)] = exact_number(value, where)
        return self

    def build(self) -> np.ndarray:
        out = self._m.copy()
        out.flags.writeable = False
        return out


def eye(n: int, scale=1) -> np.ndarray:
    charge_weights(n * n, f"a {n} x {n} identity")
    scale = exact_number(scale, "eye(scale)")
    out = np.full((n, n), Fraction(0), dtype=object)
    for i in range(n):
        out[i, i] = scale
    return out


def zeros(rows: int, cols: int) -> np.ndarray:
    charge_weights(rows * cols, f"a {rows} x {cols} matrix")
    return np.full((rows, cols), Fraction(0), dtype=object)


def exact_matrix(rows: Iterable[Iterable], where: str = "matrix") -> np.ndarray:
    """A read-only object array of Fractions from nested ints/Fractions (floats refused)."""
    arr = np.array([[v for v in row] for row in rows], dtype=object)
    if arr.ndim != 2:
        raise BadInput(f"{where}: not a rectangular matrix")
    for idx, v in np.ndenumerate(arr):
        if isinstance(v, (float, bool)) or not isinstance(v, (int, Fraction)):
            raise BadInput(f"{where}[{idx[0]}][{idx[1]}]: not an exact number: {v!r}")
        arr[idx] = Fraction(v)
    arr.flags.writeable = False
    return arr
