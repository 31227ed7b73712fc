"""Constructions written once for every size: index sets, set-indexed blocks, symbolic sizes.

A builder written with this module names the sets its weights are indexed by (the questions Q,
the answers A, the position triples T, ...) and states each weight per pair of *families* of
rows: one value when the two rows' families are indexed by different sets (or by none), two
values ('eq' / 'ne') when both are indexed by the same set (same member, different members).  A
matrix stated this way is invariant under the product of the sets' symmetric groups by
construction, for every size.

The sizes a builder reads are `Size` objects: polynomials in the task's size parameters (k, n_q,
...) with rational coefficients, over a stated range (k >= 1, n_q >= k, ...).  Weights may be
sizes too (a score 1 - (k-1)/3 is a `Size`).  Every comparison of a size (<, <=, ==, bool, an
`if`) is decided over the whole range, or raises `SizeBranch` naming the builder's file and line;
using a size as a Python int (range(k), a numpy shape) raises it as well.  So a builder that runs
to the end with symbolic sizes computes one table per matrix whose entries are polynomials: the
same construction at every size.

This module is the *writer*: what a builder returns on symbols is closed into a frozen value by
constructions/closed.py (`close`), and every finite model of such a construction is
`closed.instantiate(value, sizes, task)`, which fills Fraction matrices block by block through
`SymbolicModel.instantiate` here (no sympy; polynomials are small dicts of Fractions).  The builder
runs once, on symbols only; it never runs at a concrete size.  `SizeRange.at` and `finite_build`
(the builder run on a task held at one point) remain only for constructions that are no closed
value (entries of one member, a read-out fitted per size): those are finite-only, and no proof for
every size covers them.
"""
from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput

_HERE = os.path.abspath(__file__)


# ----------------------------------------------------------------------------- sizes


class SizeBranch(Exception):
    """A builder compared (or used as an integer) a symbolic size where the parameter range does
    not decide the answer: the builder's output is not one construction for every size."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{where}: {what}")
        self.what = what
        self.where = where


def _caller() -> str:
    """file:line: source of the first frame outside this module (the builder's line)."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename) == _HERE:
        f = f.f_back
    if f is None:
        return "<unknown>"
    path = f.f_code.co_filename
    src = linecache.getline(path, f.f_lineno).strip()
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    if rel.startswith(".."):
        rel = path
    return f"{rel}:{f.f_lineno}: {src}"


@dataclass(frozen=True)
class SizeParam:
    """name >= base (+ the value of the earlier parameter `after`)."""

    name: str
    base: int
    after: str | None = None

    def describe(self) -> str:
        if self.after is None:
            return f"{self.name} >= {self.base}"
        return f"{self.name} >= {self.after}" + (f" + {self.base}" if self.base else "")


class SizeRange:
    """The parameter range a symbolic build is about: p = (after's value or 0) + base + t_p, t_p >= 0."""

    def __init__(self, params: tuple[SizeParam, ...], point: dict | None = None):
        names = [p.name for p in params]
        self.point = None if point is None else {n: int(point[n]) for n in names}
        if self.point is not None and not self.contains(self.point):
            raise BadInput(f"sizes {self.point} are outside the range {SizeRange(params).describe()}")
        for i, p in enumerate(params):
            if p.after is not None and p.after not in names[:i]:
                raise ValueError(f"size parameter {p.name}: 'after' must name an earlier parameter")
        self.params = tuple(params)
        self.names = tuple(names)
        # each parameter as a polynomial in the shift variables t_p (same exponent order)
        n = len(params)
        shifted: list[dict] = []
        for i, p in enumerate(params):
            poly = {(0,) * n: Fraction(p.base)} if p.base else {}
            if p.after is not None:
                poly = _padd(poly, shifted[names.index(p.after)])
            unit = tuple(1 if j == i else 0 for j in range(n))
            poly = _padd(poly, {unit: Fraction(1)})
            shifted.append(poly)
        self._shifted = shifted

    def at(self, values: dict) -> "SizeRange":
        """The same parameters held at one point: a finite build runs the builder over this range (the
        same code, the same Size objects), so its tables are the symbolic ones evaluated there."""
        return SizeRange(self.params, values)

    @classmethod
    def of(cls, *params) -> "SizeRange":
        """SizeRange.of(("k", 1), ("n_q", 0, "k"), ...)."""
        return cls(tuple(SizeParam(*p) for p in params))

    def symbols(self) -> dict:
        n = len(self.params)
        return {p.name: Size({tuple(1 if j == i else 0 for j in range(n)): Fraction(1)}, self)
                for i, p in enumerate(self.params)}

    def describe(self) -> str:
        if self.point is not None:
            return ", ".join(f"{n} = {v}" for n, v in self.point.items())
        return ", ".join(p.describe() for p in self.params)

    def contains(self, values: dict) -> bool:
        if self.point is not None:
            return all(values[n] == v for n, v in self.point.items())
        return all(values[p.name] >= (values[p.after] if p.after else 0) + p.base for p in self.params)

    def sign(self, terms: dict) -> str | None:
        """'pos', 'neg', 'zero', 'nonneg', 'nonpos' for every integer point of the range, or None
        (undecided).  Sound: after substituting p = ... + t_p, a polynomial in t >= 0 whose
        coefficients are all >= 0 is >= 0 (> 0 with a positive constant term)."""
        if not terms:
            return "zero"
        if self.point is not None:
            v = Size(terms, self).at(self.point)
            return "pos" if v > 0 else "neg" if v < 0 else "zero"
        q: dict = {}
        for mono, c in terms.items():
            term = {(0,) * len(self.params): c}
            for i, e in enumerate(mono):
                for _ in range(e):
                    term = _pmul(term, self._shifted[i])
            q = _padd(q, term)
        if not q:
            return "zero"
        const = q.get((0,) * len(self.params), Fraction(0))
        if all(c >= 0 for c in q.values()):
            return "pos" if const > 0 else "nonneg"
        if all(c <= 0 for c in q.values()):
            return "neg" if const < 0 else "nonpos"
        return None


def _padd(a: dict, b: dict) -> dict:
    out = dict(a)
    for m, c in b.items():
        v = out.get(m, Fraction(0)) + c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def _pmul(a: dict, b: dict) -> dict:
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(x + y for x, y in zip(ma, mb))
            v = out.get(m, Fraction(0)) + ca * cb
            if v:
                out[m] = v
            else:
                out.pop(m, None)
    return out


class Size:
    """A polynomial in the size parameters (rational coefficients) over a `SizeRange`."""

    __slots__ = ("terms", "range")

    def __init__(self, terms: dict, range_: SizeRange):
        self.terms = {m: Fraction(c) for m, c in terms.items() if c}
        self.range = range_

    # -- arithmetic (stays a polynomial)
    def _lift(self, other) -> "Size":
        if isinstance(other, Size):
            if other.range is not self.range:
                raise ValueError("sizes of two different symbolic builds")
            return other
        if isinstance(other, (bool, float)) or not isinstance(other, (int, Fraction, np.integer)):
            raise TypeError(f"a size combined with {other!r}: only ints, Fractions and sizes are exact")
        zero = (0,) * len(self.range.params)
        return Size({zero: Fraction(int(other) if isinstance(other, np.integer) else other)}, self.range)

    def __add__(self, other):
        return Size(_padd(self.terms, self._lift(other).terms), self.range)

    __radd__ = __add__

    def __neg__(self):
        return Size({m: -c for m, c in self.terms.items()}, self.range)

    def __pos__(self):
        return self

    def __sub__(self, other):
        return self + (-self._lift(other))

    def __rsub__(self, other):
        return self._lift(other) - self

    def __mul__(self, other):
        return Size(_pmul(self.terms, self._lift(other).terms), self.range)

    __rmul__ = __mul__

    def __truediv__(self, other):
        o = self._lift(other)
        c = o.constant()
        if c is None:
            raise SizeBranch(f"divides by the size {o}: weights must be polynomials in the sizes", _caller())
        if c == 0:
            raise ZeroDivisionError("a size divided by 0")
        return Size({m: v / c for m, v in self.terms.items()}, self.range)

    def __rtruediv__(self, other):
        c = self.constant()
        if c is None:
            raise SizeBranch(f"divides by the size {self}: weights must be polynomials in the sizes", _caller())
        return self._lift(other) / c

    def __pow__(self, e):
        if isinstance(e, Size):
            c = e.constant()
            if c is None or c.denominator != 1 or c < 0:
                raise SizeBranch(f"raises to the power {e}: weights must be polynomials in the sizes", _caller())
            e = int(c)
        if not isinstance(e, int) or isinstance(e, bool) or e < 0:
            raise SizeBranch(f"raises a size to the power {e!r}: weights must be polynomials in the sizes", _caller())
        out = self._lift(1)
        for _ in range(e):
            out = out * self
        return out

    def __floordiv__(self, other):
        raise SizeBranch("integer division of a size (not a polynomial in the sizes)", _caller())

    __rfloordiv__ = __rmod__ = __floordiv__

    def __mod__(self, other):
        """The residue mod a positive integer p, decided for every size when every non-constant
        coefficient is an integer multiple of p and the constant is an integer (the sizes are
        integers, so the polynomial is then its constant mod p); else SizeBranch."""
        if isinstance(other, bool) or not isinstance(other, (int, np.integer)) or int(other) <= 0:
            raise SizeBranch(f"takes the size {self} mod {_text(other)}: only a positive integer modulus is "
                             "decided", _caller())
        p = int(other)
        if self.range.point is not None:
            v = self.at(self.range.point)
            if v.denominator != 1:
                raise SizeBranch(f"takes the size {self} = {v} (not an integer) mod {p}", _caller())
            return int(v) % p
        zero = (0,) * len(self.range.params)
        const = self.terms.get(zero, Fraction(0))
        if const.denominator != 1 or any(m != zero and (c.denominator != 1 or c.numerator % p)
                                         for m, c in self.terms.items()):
            raise SizeBranch(f"takes the size {self} mod {p}, which the range {self.range.describe()} does not "
                             "decide", _caller())
        return int(const) % p

    # -- comparisons: decided over the whole range, or SizeBranch
    def _sign_of(self, other, op: str) -> str:
        diff = self - other
        s = self.range.sign(diff.terms)
        if s is None:
            raise SizeBranch(f"compares {self} {op} {_text(other)}, which the range {self.range.describe()} "
                             "does not decide", _caller())
        return s

    def __lt__(self, other):
        return self._decide(other, "<", {"neg": True, "pos": False, "zero": False, "nonneg": False})

    def __le__(self, other):
        return self._decide(other, "<=", {"neg": True, "zero": True, "nonpos": True, "pos": False})

    def __gt__(self, other):
        return self._decide(other, ">", {"pos": True, "neg": False, "zero": False, "nonpos": False})

    def __ge__(self, other):
        return self._decide(other, ">=", {"pos": True, "zero": True, "nonneg": True, "neg": False})

    def __eq__(self, other):
        if not isinstance(other, (Size, int, Fraction, np.integer)) or isinstance(other, bool):
            return NotImplemented
        return self._decide(other, "==", {"zero": True, "pos": False, "neg": False})

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def _decide(self, other, op: str, table: dict) -> bool:
        diff = self - other
        s = self.range.sign(diff.terms)
        if s in table:
            return table[s]
        raise SizeBranch(f"compares {self} {op} {_text(other)}, which the range {self.range.describe()} "
                         "does not decide", _caller())

    def __bool__(self):
        return self._decide(0, "!=", {"pos": True, "neg": True, "zero": False})

    def __hash__(self):
        return hash(frozenset(self.terms.items()))

    def __index__(self):
        c = self.constant()
        if c is None and self.range.point is not None:
            c = self.at(self.range.point)  # a finite build: the size at its point
        if c is None or c.denominator != 1:
            raise SizeBranch(f"uses the size {self} as a Python integer (range(), a shape, an index): not the "
                             "same construction for every size", _caller())
        return int(c)

    __int__ = __index__

    def __float__(self):
        raise SizeBranch(f"converts the size {self} to a float", _caller())

    # -- values
    def constant(self) -> Fraction | None:
        """The value when the polynomial is constant, else None."""
        zero = (0,) * len(self.range.params)
        if all(m == zero for m in self.terms):
            return self.terms.get(zero, Fraction(0))
        return None

    def at(self, values: dict) -> Fraction:
        """The value at concrete sizes (every parameter named)."""
        xs = [values[n] for n in self.range.names]
        total = Fraction(0)
        for m, c in self.terms.items():
            v = c
            for x, e in zip(xs, m):
                if e:
                    v *= x ** e
            total += v
        return total

    def __repr__(self):
        return self.text()

    def text(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m in sorted(self.terms, key=lambda m: (-sum(m), tuple(-e for e in m))):
            c = self.terms[m]
            mono = "*".join(n if e == 1 else f"{n}**{e}" for n, e in zip(self.range.names, m) if e)
            if not mono:
                parts.append(str(c))
            elif c == 1:
                parts.append(mono)
            elif c == -1:
                parts.append("-" + mono)
            else:
                parts.append(f"{c}*{mono}")
        return " + ".join(parts).replace("+ -", "- ")


def _text(v) -> str:
    return v.text() if isinstance(v, Size) else str(v)


def value_at(v, values: dict) -> Fraction:
    """A weight (int, Fraction or Size) at concrete sizes."""
    return v.at(values) if isinstance(v, Size) else Fraction(v)


def _check_value(v, where: str):
    if isinstance(v, (bool, float)) or not isinstance(v, (int, Fraction, Size, np.integer)):
        raise TypeError(f"{where}: not an exact number or size: {v!r}")
    return int(v) if isinstance(v, np.integer) else v


# ----------------------------------------------------------------------------- symbolic task


class SymbolicTask:
    """A task with symbolic sizes: the builder reads task.name and the size attributes only."""

    def __init__(self, name: str, range_: SizeRange, derived: dict | None = None, fixed: dict | None = None):
        self.name = name
        self.range = range_
        self.sizes = dict(range_.symbols())
        for key, fn in (derived or {}).items():
            self.sizes[key] = fn(self.sizes)
        self.sizes.update(fixed or {})  # structural sizes held at one value (plain ints)

    def __getattr__(self, attr):
        sizes = self.__dict__.get("sizes", {})
        if attr in sizes:
            return sizes[attr]
        raise AttributeError(f"the symbolic {self.__dict__.get('name')} task has sizes {sorted(sizes)} only, "
                             f"not {attr!r} (a builder run for every size reads sizes, not concrete lists)")

    def describe(self) -> str:
        return f"{self.name} for every {self.range.describe()}"


def is_symbolic(task) -> bool:
    return isinstance(task, SymbolicTask)


# ----------------------------------------------------------------------------- set-indexed layouts


@dataclass(frozen=True)
class IndexSet:
    """A set of size `size` (an int or a Size); its members index the rows of a family."""

    name: str
    size: object


@dataclass(frozen=True)
class Segment:
    """Consecutive rows of the concrete layout block `block`: for each member of `over` (or once,
    if None), one row per family in `families`, in that order."""

    block: str
    over: IndexSet | None
    families: tuple[str, ...]


class IndexedLayout:
    """Rows as families indexed by sets; the concrete row order is segment by segment, member-major."""

    def __init__(self, *segments: Segment):
        self.segments = tuple(segments)
        self.families: dict[str, str | None] = {}
        self.sets: dict[str, object] = {}
        for s in self.segments:
            if s.over is not None:
                old = self.sets.get(s.over.name)
                if old is not None and old is not s.over.size and old != s.over.size:
                    raise ValueError(f"set {s.over.name} has two sizes in one layout")
                self.sets[s.over.name] = s.over.size
            for f in s.families:
                if f in self.families:
                    raise ValueError(f"family {f!r} appears twice in one layout")
                self.families[f] = s.over.name if s.over is not None else None
        blocks = [s.block for s in self.segments]
        for i, b in enumerate(blocks):
            if b in blocks[:i] and blocks[i - 1] != b:
                raise ValueError(f"block {b!r} is split by another block")

    def set_sizes(self, values: dict) -> dict[str, int]:
        out = {}
        for name, size in self.sets.items():
            v = value_at(size, values)
            if v.denominator != 1 or v < 0:
                raise BadInput(f"set {name} has size {v} at {values}")
            out[name] = int(v)
        return out

    def rows(self, values: dict) -> list[tuple[str, int]]:
        """(family, member) of every concrete row, in order."""
        sizes = self.set_sizes(values)
        out = []
        for s in self.segments:
            members = range(sizes[s.over.name]) if s.over is not None else (0,)
            for e in members:
                out.extend((f, e) for f in s.families)
        return out

    def layout(self, values: dict):
        """The concrete checkers Layout (one block per block name)."""
        from depthcert.checkers.layout import Layout

        sizes = self.set_sizes(values)
        blocks: list = []
        for s in self.segments:
            n = (sizes[s.over.name] if s.over is not None else 1) * len(s.families)
            if blocks and blocks[-1][0] == s.block:
                blocks[-1] = (s.block, blocks[-1][1] + n)
            else:
                blocks.append((s.block, n))
        return Layout.of(*blocks)


class IndexedMatrix:
    """An invariant matrix as its table {(row family, col family, pattern): value}; pattern 'eq' /
    'ne' when both families are indexed by the same set, else ''.  Missing entries are 0."""

    def __init__(self, rows: IndexedLayout, cols: IndexedLayout):
        self.rows, self.cols = rows, cols
        self.table: dict = {}
        self.members: dict = {}  # (row family, member, col family, member) -> value: finite builds only

    def member(self, rf: str, i: int, cf: str, j: int, value) -> "IndexedMatrix":
        """One entry between member i of family rf and member j of family cf.  Not set-indexed (it
        breaks the sets' symmetry), so only a finite build (sizes held at a point) may use it: in a
        run for every size it raises SizeBranch at the caller's line."""
        for lay in (self.rows, self.cols):
            for size in lay.sets.values():
                if isinstance(size, Size) and size.range.point is None:
                    raise SizeBranch("sets one entry of one member (not set-indexed): not the same "
                                     "construction for every size", _caller())
        if rf not in self.rows.families or cf not in self.cols.families:
            raise KeyError(f"no family {rf!r} / {cf!r}")
        value = _check_value(value, f"({rf}[{i}], {cf}[{j}])")
        self.members[(rf, int(i), cf, int(j))] = value
        return self

    def _key(self, rf: str, cf: str, pat: str):
        if rf not in self.rows.families:
            raise KeyError(f"no row family {rf!r}")
        if cf not in self.cols.families:
            raise KeyError(f"no column family {cf!r}")
        shared = self.rows.families[rf] is not None and self.rows.families[rf] == self.cols.families[cf]
        if shared != (pat != ""):
            raise ValueError(f"({rf}, {cf}): " + ("both are indexed by one set: give same= and other="
                                                  if shared else "not indexed by one set: give one value"))
        return (rf, cf, pat)

    def set(self, rf: str, cf: str, value) -> "IndexedMatrix":
        """Every entry between family rf and family cf (not indexed by one set) is `value`."""
        self._put(self._key(rf, cf, ""), value)
        return self

    def same(self, rf: str, cf: str, same=0, other=0) -> "IndexedMatrix":
        """Families indexed by one set: `same` where the members are equal, `other` where not."""
        self._put(self._key(rf, cf, "eq"), same)
        self._put(self._key(rf, cf, "ne"), other)
        return self

    def identity(self, scale=1) -> "IndexedMatrix":
        """scale * I on a square layout (rows and columns the same families)."""
        for f, s in self.rows.families.items():
            if s is None:
                self.set(f, f, scale)
            else:
                self.same(f, f, same=scale)
        return self

    def _put(self, key, value) -> None:
        value = _check_value(value, f"{key}")
        if isinstance(value, Size) and value.constant() is not None:
            value = value.constant()
        if isinstance(value, Size) or value != 0:
            self.table[key] = value
        else:
            self.table.pop(key, None)

    def get(self, rf: str, cf: str, pat: str = ""):
        return self.table.get((rf, cf, pat), 0)

    def instantiate(self, values: dict) -> np.ndarray:
        """The concrete Fraction matrix at these sizes (read-only)."""
        from depthcert.checkers.layout import zeros

        rrows, crows = self.rows.rows(values), self.cols.rows(values)
        M = zeros(len(rrows), len(crows))
        rix: dict = {}
        for i, (f, e) in enumerate(rrows):
            rix.setdefault(f, {})[e] = i
        cix: dict = {}
        for j, (f, e) in enumerate(crows):
            cix.setdefault(f, {})[e] = j
        zero = Fraction(0)
        # blocks first ('' and 'ne', whose diagonal is cleared), then the 'eq' diagonals
        for (rf, cf, pat), v in sorted(self.table.items(), key=lambda kv: kv[0][2] == "eq"):
            x = value_at(v, values)
            ri, ci = rix.get(rf, {}), cix.get(cf, {})
            if not x or not ri or not ci:
                continue
            if pat == "eq":
                for e, i in ri.items():
                    if e in ci:
                        M[i, ci[e]] = x
                continue
            M[_block_index(list(ri.values()), list(ci.values()))] = x
            if pat == "ne":
                for e, i in ri.items():
                    if e in ci:
                        M[i, ci[e]] = zero
        if self.members:
            rpos = {(f, e): i for i, (f, e) in enumerate(rrows)}
            cpos = {(f, e): j for j, (f, e) in enumerate(crows)}
            for (rf, a, cf, b), v in self.members.items():
                M[rpos[(rf, a)], cpos[(cf, b)]] = value_at(v, values)
        M.flags.writeable = False
        return M


def _block_index(rows: list, cols: list):
    """The index of the block rows x cols of a matrix: slices when both run consecutively (a family's
    rows usually do; basic indexing, no index arrays), else np.ix_."""
    def as_slice(ix):
        return slice(ix[0], ix[-1] + 1) if ix[-1] - ix[0] == len(ix) - 1 and ix == list(range(ix[0], ix[-1] + 1)) else None

    rs, cs = as_slice(rows), as_slice(cols)
    return (rs, cs) if rs is not None and cs is not None else np.ix_(rows, cols)


@dataclass(frozen=True)
class IndexedHead:
    W_QK: IndexedMatrix
    W_V: IndexedMatrix


@dataclass(frozen=True)
class Repeat:
    """One layer (a tuple of heads) applied `count` times in a row (`count` a size, e.g. the hops)."""

    layer: tuple
    count: object


@dataclass(frozen=True)
class SymbolicModel:
    """The paper's model (relu heads, averaged per layer, read-out at the last column) with every
    weight an IndexedMatrix.  stream: the residual rows (token rows first, in the task's vocabulary
    order, then the position rows, then any other rows); positions: the columns; classes: W_O's rows."""

    name: str
    stream: IndexedLayout
    positions: IndexedLayout
    classes: IndexedLayout
    layers: tuple[tuple[IndexedHead, ...], ...]
    W_O: IndexedMatrix
    range: SizeRange

    def instantiate(self, task, values: dict):
        """The concrete Model at these sizes: the same tables, sizes substituted."""
        from depthcert.checkers.model import Head, Model

        if not self.range.contains(values):
            raise BadInput(f"sizes {values} are outside the construction's range {self.range.describe()}")
        stream = self.stream.layout(values)  # refuses a stream over MAX_DIM before any row list or matrix
        self.positions.layout(values)
        layers = []
        for layer in self.layers:
            times = 1
            if isinstance(layer, Repeat):
                times = value_at(layer.count, values)
                if times.denominator != 1 or times < 0:
                    raise BadInput(f"a layer repeated {times} times")
                layer = layer.layer
            heads = tuple(Head(h.W_QK.instantiate(values), h.W_V.instantiate(values)) for h in layer)
            layers.extend([heads] * int(times))
        layers = tuple(layers)
        n_cls = len(self.classes.rows(values))
        if n_cls != len(task.classes):
            raise BadInput(f"the construction has {n_cls} class rows, the task {len(task.classes)} classes")
        if len(self.positions.rows(values)) != task.length:
            raise BadInput(f"the construction has {len(self.positions.rows(values))} positions, the task "
                           f"{task.length}")
        return Model(task.vocab, task.length, task.classes, stream, layers,
                     self.W_O.instantiate(values), name=self.name)


def finite_build(build, task, symbolic_task, sizes: dict, as_printed: bool = False, notes=None):
    """A finite build by the one route: `build` run on the symbolic task held at these sizes (the same
    code and Size objects as the all-sizes run), its symbolic model instantiated at them.  Returns
    the Construction with `model` set.  notes(model) -> Model.notes (hints such as row tags for
    checkers/symmetry.py; not part of the weights)."""
    from dataclasses import replace

    c = build(symbolic_task(sizes), as_printed)
    sym = getattr(c, "symbolic", None)
    if not isinstance(sym, SymbolicModel):
        raise TypeError("a set-indexed builder must return its SymbolicModel in Construction.symbolic")
    model = sym.instantiate(task, sizes)
    if notes is not None:
        model = replace(model, notes=notes(model))
    return replace(c, model=model)


def precheck_weights(entries: int, what: str) -> None:
    """Refuse (the budget's BadInput) before a builder's tables are made when the instantiated model
    would exceed the weight budget; charges nothing (instantiate charges each matrix it fills)."""
    from depthcert.checkers import budget

    active = getattr(budget, "_ACTIVE", None)
    if active and active[-1].used_weights + entries > active[-1].max_weights:
        budget.charge_weights(entries, what)
