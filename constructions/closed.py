"""A construction for every size as a closed value: frozen data, no code.

A `ClosedModel` is the paper's model (relu heads averaged per layer, residual, read-out at the
last column) with every part stated as data over named index sets whose sizes are polynomials in
the size parameters:

  params     the size parameters and their range (k >= 1, n_q >= k, ...)
  fixed      structural sizes held at one value for this value (multi-hop's k, template l)
  sets       set name -> size polynomial
  stream, positions, classes
             segments (block, set or none, families): the rows, the columns and W_O's rows
  layers     each a tuple of heads (W_QK, W_V) and a repeat count (a polynomial: 1, or hops)
  W_O        the read-out
  a table    {(row family, column family, pattern): polynomial}; pattern "eq" / "ne" (same /
             other member) when both families are indexed by one set, "" otherwise

A polynomial is a sorted tuple of (exponents, Fraction) in the parameters' order.  Nothing else
may occur: `validate` walks every field of every part and refuses an unknown field, an unknown
type, a key naming a family that does not exist, or a same/other key across two different sets.

The function that makes a value receives symbols only (constructions/indexed.SymbolicTask, whose
sizes are polynomials with no point to be read at): `value_of(fn, sym_task)` calls it once and
closes what it returns.  `instantiate(value, sizes, task)` is the only way to the finite model
of a value, so what a proof for every size reads is what the finite check runs.
`content_hash(value)` is the sha256 of `canonical_tables(value)`, its canonical serialisation.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import traceback
from dataclasses import dataclass
from fractions import Fraction

from depthcert.checkers.errors import BadInput
from depthcert.constructions.indexed import (IndexedHead, IndexedLayout, IndexedMatrix, IndexSet, Repeat, Segment,
                                             Size, SizeBranch, SizeParam, SizeRange, SymbolicModel, SymbolicTask)

FORMAT = "depthcert.closed-model"
VERSION = 1


class NotClosed(Exception):
    """What a builder returned (or how it failed) is not a closed value; the message says why."""


class NotAValue(NotClosed):
    """The builder returned something of no closed-value kind at all (bad input for --family)."""


# ----------------------------------------------------------------------------- the value's types


@dataclass(frozen=True)
class ClosedSegment:
    """Consecutive rows of layout block `block`: for each member of set `over` (or once if None),
    one row per family in `families`."""

    block: str
    over: str | None
    families: tuple


@dataclass(frozen=True)
class ClosedTable:
    """A set-indexed matrix: entries ((row family, col family, pattern), polynomial), sorted by key,
    no zero polynomial."""

    entries: tuple


@dataclass(frozen=True)
class ClosedHead:
    W_QK: ClosedTable
    W_V: ClosedTable


@dataclass(frozen=True)
class ClosedLayer:
    """The heads of one layer, applied `repeat` times in a row (a polynomial: the constant 1 for one
    layer, the symbol hops for multi-hop's hop layer)."""

    heads: tuple
    repeat: tuple


@dataclass(frozen=True)
class ClosedModel:
    name: str
    params: tuple  # SizeParam, in order
    fixed: tuple  # (name, int), sorted
    sets: tuple  # (set name, polynomial), sorted
    stream: tuple  # ClosedSegment
    positions: tuple
    classes: tuple
    layers: tuple  # ClosedLayer
    W_O: ClosedTable

    @property
    def range(self) -> SizeRange:
        return SizeRange(tuple(self.params))

    def __repr__(self):
        return f"ClosedModel({self.name!r}, {content_hash(self)})"


@dataclass(frozen=True)
class ClosedRule:
    """One rule of a head stated for a generic head index h (constructions/head_family.py):
    kind "entry": value at (row_block[row], col_block[col]); "copy": value * identity from the rows of
    block `src` into stream rows dst, dst + 1, ...; "scaled": value * identity on block `src` (None:
    every row).  Every index and value is a polynomial in the parameters (h among them)."""

    kind: str
    src: str | None  # entry: row block; copy: source block; scaled: the block or None
    col_block: str | None  # entry only
    row: tuple  # entry: row index; copy: destination row; scaled: ()
    col: tuple  # entry: column index; otherwise ()
    value: tuple


@dataclass(frozen=True)
class ClosedRuleHead:
    qk: tuple  # ClosedRule
    v: tuple


@dataclass(frozen=True)
class ClosedHeadFamily:
    """Theorem 1 / Lemma 4 for every size as data: `count` copy heads, head h's rules `copy` as
    polynomials in (h, L, M), then the heads `last`; stream [token (d); position (n)] padded to
    `dim` rows; the read-out: the class of sequence s has `read_weight` at row read_offset + s_h for
    each h < read_count (polynomials in h, L, M)."""

    name: str
    params: tuple  # SizeParam: h, L, M
    d: tuple
    n: tuple
    dim: tuple
    count: tuple
    copy: ClosedRuleHead
    last: tuple  # ClosedRuleHead
    read_count: tuple
    read_offset: tuple
    read_weight: tuple

    @property
    def range(self) -> SizeRange:
        return SizeRange(tuple(self.params))

    def __repr__(self):
        return f"ClosedHeadFamily({self.name!r}, {content_hash(self)})"


@dataclass(frozen=True)
class ClosedKeyCase:
    """The key rules of both count layers for the keys j of one residue case (j = 0; j = p q + s, q >=
    qbase), as polynomials in (q, t) with n = j + 1 + t."""

    text: str
    s: int | None
    qbase: int
    key1: ClosedRuleHead
    key2: ClosedRuleHead


@dataclass(frozen=True)
class ClosedCount:
    """Parity / mod-count `count` for every n at one p as data: per layer the number of keys and the
    rules not tied to a key (polynomials in n), per residue case of the key j its rules, the read-out
    (entry rules, polynomials in n).  Stream [token (2); position (n); count (1); residue (p)]."""

    name: str
    p: int
    vocab: tuple
    params: tuple  # SizeParam n >= 1
    count1: tuple
    count2: tuple
    layer1: ClosedRuleHead
    layer2: ClosedRuleHead
    readout: tuple  # ClosedRule, kind "entry"
    cases: tuple  # ClosedKeyCase

    @property
    def range(self) -> SizeRange:
        return SizeRange(tuple(self.params))

    def __repr__(self):
        return f"ClosedCount({self.name!r}, p={self.p}, {content_hash(self)})"


_FIELDS = {
    ClosedCount: ("name", "p", "vocab", "params", "count1", "count2", "layer1", "layer2", "readout", "cases"),
    ClosedKeyCase: ("text", "s", "qbase", "key1", "key2"),
    ClosedHeadFamily: ("name", "params", "d", "n", "dim", "count", "copy", "last", "read_count", "read_offset",
                       "read_weight"),
    ClosedRuleHead: ("qk", "v"),
    ClosedRule: ("kind", "src", "col_block", "row", "col", "value"),
    ClosedModel: ("name", "params", "fixed", "sets", "stream", "positions", "classes", "layers", "W_O"),
    ClosedLayer: ("heads", "repeat"),
    ClosedHead: ("W_QK", "W_V"),
    ClosedTable: ("entries",),
    ClosedSegment: ("block", "over", "families"),
    SizeParam: ("name", "base", "after"),
}


# ----------------------------------------------------------------------------- polynomials


def _poly_of(v, names: tuple, range_: SizeRange | None, where: str) -> tuple:
    """A weight (int, Fraction or a Size over the value's range, no point) as a canonical polynomial."""
    if isinstance(v, Size):
        if v.range.point is not None:
            raise NotClosed(f"{where}: a size held at one point ({v.range.describe()}), not a symbol")
        if tuple(v.range.names) != names or (range_ is not None and v.range.params != range_.params):
            raise NotClosed(f"{where}: a size in {', '.join(v.range.names)}, not in {', '.join(names)}")
        return tuple(sorted((tuple(int(e) for e in m), Fraction(c)) for m, c in v.terms.items() if c))
    if type(v) is bool or not isinstance(v, (int, Fraction)):
        import numpy as np

        if isinstance(v, np.integer):
            v = int(v)
        else:
            raise NotClosed(f"{where}: {type(v).__name__} {v!r} is not an exact number or a polynomial in the sizes")
    c = Fraction(v)
    return (((0,) * len(names), c),) if c else ()


def poly_at(p: tuple, names: tuple, values: dict) -> Fraction:
    xs = [values[n] for n in names]
    total = Fraction(0)
    for mono, c in p:
        t = c
        for x, e in zip(xs, mono):
            if e:
                t *= Fraction(x) ** e
        total += t
    return total


def poly_size(p: tuple, range_: SizeRange):
    """The polynomial as an indexed.Size over `range_` (or the constant as a Fraction)."""
    zero = (0,) * len(range_.params)
    if all(m == zero for m, _ in p):
        return dict(p).get(zero, Fraction(0))
    return Size(dict(p), range_)


def poly_text(p: tuple, names: tuple) -> str:
    if not p:
        return "0"
    return Size(dict(p), SizeRange(tuple(SizeParam(n, 0) for n in names))).text()


# ----------------------------------------------------------------------------- validation


def _exact(obj, cls, where: str) -> None:
    if type(obj) is not cls:
        raise NotClosed(f"{where}: a {type(obj).__name__}, not a {cls.__name__}")
    want = _FIELDS[cls]
    have = tuple(f.name for f in dataclasses.fields(obj))
    extra = set(getattr(obj, "__dict__", {})) - set(want)
    if have != want or extra:
        raise NotClosed(f"{where}: fields {sorted(set(have) | extra)} are not the fields {list(want)} the prover reads")


def _check_poly(p, n: int, where: str) -> None:
    if type(p) is not tuple:
        raise NotClosed(f"{where}: a polynomial must be a tuple of (exponents, Fraction), not {type(p).__name__}")
    seen = []
    for term in p:
        if type(term) is not tuple or len(term) != 2:
            raise NotClosed(f"{where}: a polynomial term must be (exponents, Fraction)")
        mono, c = term
        if (type(mono) is not tuple or len(mono) != n or any(type(e) is not int or e < 0 for e in mono)):
            raise NotClosed(f"{where}: exponents {mono!r} are not {n} non-negative ints")
        if type(c) is not Fraction or c == 0:
            raise NotClosed(f"{where}: coefficient {c!r} is not a non-zero Fraction")
        seen.append(mono)
    if seen != sorted(set(seen)):
        raise NotClosed(f"{where}: the terms are not sorted and distinct")


def _check_str(s, where: str) -> None:
    if type(s) is not str or not s:
        raise NotClosed(f"{where}: {s!r} is not a non-empty name")


def _layout_families(segs, sets: dict, where: str) -> dict:
    if type(segs) is not tuple or not segs:
        raise NotClosed(f"{where}: not a non-empty tuple of segments")
    fams: dict = {}
    blocks = []
    for i, s in enumerate(segs):
        _exact(s, ClosedSegment, f"{where} segment {i}")
        _check_str(s.block, f"{where} segment {i} block")
        if s.over is not None:
            _check_str(s.over, f"{where} segment {i} set")
            if s.over not in sets:
                raise NotClosed(f"{where} segment {i}: no set {s.over!r}")
        if type(s.families) is not tuple or not s.families:
            raise NotClosed(f"{where} segment {i}: families must be a non-empty tuple")
        for f in s.families:
            _check_str(f, f"{where} segment {i} family")
            if f in fams:
                raise NotClosed(f"{where}: family {f!r} appears twice")
            fams[f] = s.over
        if s.block in blocks and blocks[-1] != s.block:
            raise NotClosed(f"{where}: block {s.block!r} is split by another block")
        blocks.append(s.block)
    return fams


def _check_table(t, rows: dict, cols: dict, n: int, where: str) -> None:
    _exact(t, ClosedTable, where)
    if type(t.entries) is not tuple:
        raise NotClosed(f"{where}: entries must be a tuple")
    keys = []
    for e in t.entries:
        if type(e) is not tuple or len(e) != 2 or type(e[0]) is not tuple or len(e[0]) != 3:
            raise NotClosed(f"{where}: an entry must be ((row family, col family, pattern), polynomial)")
        (rf, cf, pat), p = e
        if type(rf) is not str or rf not in rows:
            raise NotClosed(f"{where}: no row family {rf!r}")
        if type(cf) is not str or cf not in cols:
            raise NotClosed(f"{where}: no column family {cf!r}")
        shared = rows[rf] is not None and rows[rf] == cols[cf]
        if type(pat) is not str or pat not in (("eq", "ne") if shared else ("",)):
            raise NotClosed(f"{where} ({rf}, {cf}): pattern {pat!r}; " + (
                "both are indexed by one set: 'eq' or 'ne'" if shared else "not indexed by one set: ''"))
        _check_poly(p, n, f"{where} ({rf}, {cf}, {pat})")
        if not p:
            raise NotClosed(f"{where} ({rf}, {cf}, {pat}): a zero entry must be left out")
        keys.append((rf, cf, pat))
    if keys != sorted(set(keys)):
        raise NotClosed(f"{where}: the entries are not sorted and distinct")


def validate(value) -> None:
    """Every field of every part is one the prover reads, of the type it reads; else NotClosed."""
    _exact(value, ClosedModel, "the value")
    _check_str(value.name, "name")
    if type(value.params) is not tuple or not value.params:
        raise NotClosed("params: not a non-empty tuple")
    names = []
    for i, p in enumerate(value.params):
        _exact(p, SizeParam, f"param {i}")
        _check_str(p.name, f"param {i}")
        if type(p.base) is not int or (p.after is not None and p.after not in names) or p.name in names:
            raise NotClosed(f"param {p.name}: base must be an int and 'after' an earlier parameter")
        names.append(p.name)
    n = len(names)
    if type(value.fixed) is not tuple or list(value.fixed) != sorted(value.fixed):
        raise NotClosed("fixed: not a sorted tuple")
    for item in value.fixed:
        if type(item) is not tuple or len(item) != 2 or type(item[0]) is not str or type(item[1]) is not int:
            raise NotClosed(f"fixed: {item!r} is not (name, int)")
        if item[0] in names:
            raise NotClosed(f"fixed: {item[0]} is also a symbolic parameter")
    if type(value.sets) is not tuple:
        raise NotClosed("sets: not a tuple")
    sets = {}
    for item in value.sets:
        if type(item) is not tuple or len(item) != 2:
            raise NotClosed(f"sets: {item!r} is not (name, polynomial)")
        _check_str(item[0], "set name")
        _check_poly(item[1], n, f"set {item[0]}")
        if item[0] in sets:
            raise NotClosed(f"set {item[0]} appears twice")
        sets[item[0]] = item[1]
    if list(sets) != sorted(sets):
        raise NotClosed("sets: not sorted")
    stream = _layout_families(value.stream, sets, "stream")
    _layout_families(value.positions, sets, "positions")
    classes = _layout_families(value.classes, sets, "classes")
    used = {s.over for lay in (value.stream, value.positions, value.classes) for s in lay if s.over is not None}
    if used != set(sets):
        raise NotClosed(f"sets {sorted(set(sets) - used)} index no rows")
    if type(value.layers) is not tuple:
        raise NotClosed("layers: not a tuple")
    for li, layer in enumerate(value.layers):
        _exact(layer, ClosedLayer, f"layer {li + 1}")
        if type(layer.heads) is not tuple or not layer.heads:
            raise NotClosed(f"layer {li + 1}: heads must be a non-empty tuple")
        _check_poly(layer.repeat, n, f"layer {li + 1} repeat")
        for hi, head in enumerate(layer.heads):
            _exact(head, ClosedHead, f"layer {li + 1} head {hi}")
            _check_table(head.W_QK, stream, stream, n, f"layer {li + 1} head {hi} W_QK")
            _check_table(head.W_V, stream, stream, n, f"layer {li + 1} head {hi} W_V")
    _check_table(value.W_O, classes, stream, n, "W_O")


_RULE_KINDS = ("entry", "copy", "scaled")


def _check_rule_head(head, n: int, where: str) -> None:
    _exact(head, ClosedRuleHead, where)
    for part in ("qk", "v"):
        rules = getattr(head, part)
        if type(rules) is not tuple:
            raise NotClosed(f"{where} {part}: not a tuple of rules")
        for i, r in enumerate(rules):
            w = f"{where} {part} rule {i}"
            _exact(r, ClosedRule, w)
            if r.kind not in _RULE_KINDS:
                raise NotClosed(f"{w}: kind {r.kind!r} is not one of {', '.join(_RULE_KINDS)}")
            if r.kind == "entry":
                _check_str(r.src, f"{w} row block")
                _check_str(r.col_block, f"{w} column block")
            elif r.kind == "copy":
                _check_str(r.src, f"{w} source block")
                if r.col_block is not None or r.col != ():
                    raise NotClosed(f"{w}: a copy has no column block or column")
            else:
                if r.src is not None:
                    _check_str(r.src, f"{w} block")
                if r.col_block is not None or r.col != () or r.row != ():
                    raise NotClosed(f"{w}: a scaled identity has no row, column block or column")
            for f in ("row", "col", "value"):
                _check_poly(getattr(r, f), n, f"{w} {f}")


def validate_family(value) -> None:
    """Every field of a ClosedHeadFamily is one the Lemma 4 derivation reads; else NotClosed."""
    _exact(value, ClosedHeadFamily, "the value")
    _check_str(value.name, "name")
    if type(value.params) is not tuple or [type(p) for p in value.params] != [SizeParam] * 3 or \
            tuple(p.name for p in value.params) != ("h", "L", "M"):
        raise NotClosed("params: a head family is over h, L, M")
    for p in value.params:
        _exact(p, SizeParam, f"param {p.name}")
    for f in ("d", "n", "dim", "count", "read_count", "read_offset", "read_weight"):
        _check_poly(getattr(value, f), 3, f)
    for f in ("d", "n", "dim"):
        if any(m[0] for m, _ in getattr(value, f)):
            raise NotClosed(f"{f} depends on the head index h")
    _check_rule_head(value.copy, 3, "copy head h")
    if type(value.last) is not tuple:
        raise NotClosed("last: not a tuple of heads")
    for i, head in enumerate(value.last):
        _check_rule_head(head, 3, f"last head {i}")
        for r in head.qk + head.v:
            if any(m[0] for p in (r.row, r.col, r.value) for m, _ in p):
                raise NotClosed(f"last head {i}: a rule depends on the head index h")


def count_cases(p: int) -> list:
    """(text, residue s or None for j = 0, base of q): j = 0; j = p q + s (s = 1..p-1, q >= 0); j = p q
    (q >= 1): every key 0 <= j of every n is in exactly one."""
    out = [("j = 0", None, 0)]
    out += [(f"j = {p} q + {s}, q >= 0", s, 0) for s in range(1, p)]
    out.append((f"j = {p} q, q >= 1", 0, 1))
    return out


def validate_count(value) -> None:
    """Every field of a ClosedCount is one the count derivation reads; else NotClosed."""
    _exact(value, ClosedCount, "the value")
    _check_str(value.name, "name")
    if type(value.p) is not int or value.p < 2:
        raise NotClosed("p: not an int >= 2")
    if type(value.vocab) is not tuple or any(type(v) is not str for v in value.vocab):
        raise NotClosed("vocab: not a tuple of tokens")
    if type(value.params) is not tuple or len(value.params) != 1 or value.params[0] != SizeParam("n", 1):
        raise NotClosed("params: a count value is over n >= 1")
    _exact(value.params[0], SizeParam, "param n")
    for f in ("count1", "count2"):
        _check_poly(getattr(value, f), 1, f)
    _check_rule_head(value.layer1, 1, "layer 1 (rules not tied to a key)")
    _check_rule_head(value.layer2, 1, "layer 2 (rules not tied to a key)")
    if type(value.readout) is not tuple:
        raise NotClosed("readout: not a tuple of rules")
    _check_rule_head(ClosedRuleHead(value.readout, ()), 1, "read-out")
    if any(r.kind != "entry" for r in value.readout):
        raise NotClosed("read-out: only entry rules")
    want = count_cases(value.p)
    if type(value.cases) is not tuple or len(value.cases) != len(want):
        raise NotClosed(f"cases: not the {len(want)} residue cases of the key at p = {value.p}")
    for c, (text, s, qbase) in zip(value.cases, want):
        _exact(c, ClosedKeyCase, f"case {text}")
        if (c.text, c.s, c.qbase) != (text, s, qbase):
            raise NotClosed(f"case {c.text!r}: not the case {text}")
        _check_rule_head(c.key1, 2, f"{text} layer 1 key")
        _check_rule_head(c.key2, 2, f"{text} layer 2 key")


def check(value) -> None:
    """validate, validate_family or validate_count by the value's kind; NotClosed for anything else."""
    if type(value) is ClosedModel:
        validate(value)
    elif type(value) is ClosedHeadFamily:
        validate_family(value)
    elif type(value) is ClosedCount:
        validate_count(value)
    else:
        raise NotClosed(f"a {type(value).__name__} is not a closed value (ClosedModel, ClosedHeadFamily, ClosedCount)")


# ----------------------------------------------------------------------------- closing a builder's output


def _table(M: IndexedMatrix, names: tuple, rng: SizeRange, where: str) -> ClosedTable:
    if type(M) is not IndexedMatrix:
        raise NotClosed(f"{where}: a {type(M).__name__}, not an IndexedMatrix")
    if M.members:
        (rf, i, cf, j), _ = next(iter(M.members.items()))
        raise NotClosed(f"{where}: an entry of one member ({rf}[{i}], {cf}[{j}]) is not set-indexed: not the same "
                        "construction for every size")
    extra = set(vars(M)) - {"rows", "cols", "table", "members"}
    if extra:
        raise NotClosed(f"{where}: attributes {sorted(extra)} the prover does not read")
    entries = []
    for key, v in M.table.items():
        p = _poly_of(v, names, rng, f"{where} {key}")
        if p:
            entries.append((tuple(key), p))
    return ClosedTable(tuple(sorted(entries)))


def _segments(lay: IndexedLayout, names: tuple, rng: SizeRange, sets: dict, where: str) -> tuple:
    if type(lay) is not IndexedLayout:
        raise NotClosed(f"{where}: a {type(lay).__name__}, not an IndexedLayout")
    out = []
    for s in lay.segments:
        if type(s) is not Segment:
            raise NotClosed(f"{where}: a {type(s).__name__}, not a Segment")
        over = None
        if s.over is not None:
            if type(s.over) is not IndexSet:
                raise NotClosed(f"{where}: a {type(s.over).__name__}, not an IndexSet")
            p = _poly_of(s.over.size, names, rng, f"set {s.over.name}")
            if sets.setdefault(s.over.name, p) != p:
                raise NotClosed(f"set {s.over.name} has two sizes")
            over = s.over.name
        out.append(ClosedSegment(s.block, over, tuple(s.families)))
    return tuple(out)


def close(sym: SymbolicModel, fixed: dict | None = None) -> ClosedModel:
    """The closed value of a model written with the set-indexed writer (constructions/indexed.py),
    every part read; NotClosed when a part is not data over the sets (an entry of one member, a
    size held at a point, an unknown object)."""
    if type(sym) is not SymbolicModel:
        raise NotClosed(f"a {type(sym).__name__}, not a SymbolicModel")
    rng = sym.range
    if type(rng) is not SizeRange or rng.point is not None:
        raise NotClosed("the model's range is held at a point (a finite build), not symbolic")
    names = tuple(rng.names)
    sets: dict = {}
    stream = _segments(sym.stream, names, rng, sets, "stream")
    positions = _segments(sym.positions, names, rng, sets, "positions")
    classes = _segments(sym.classes, names, rng, sets, "classes")
    layers = []
    for li, layer in enumerate(sym.layers):
        repeat = (((0,) * len(names), Fraction(1)),)
        if type(layer) is Repeat:
            repeat = _poly_of(layer.count, names, rng, f"layer {li + 1} repeat count")
            layer = layer.layer
        if type(layer) not in (tuple, list):
            raise NotClosed(f"layer {li + 1}: a {type(layer).__name__}, not a tuple of heads")
        heads = []
        for hi, h in enumerate(layer):
            if type(h) is not IndexedHead:
                raise NotClosed(f"layer {li + 1} head {hi}: a {type(h).__name__}, not an IndexedHead")
            heads.append(ClosedHead(_table(h.W_QK, names, rng, f"layer {li + 1} head {hi} W_QK"),
                                    _table(h.W_V, names, rng, f"layer {li + 1} head {hi} W_V")))
        layers.append(ClosedLayer(tuple(heads), repeat))
    fx = tuple(sorted((str(k), int(v)) for k, v in (fixed or {}).items() if k not in names))
    value = ClosedModel(str(sym.name), tuple(rng.params), fx, tuple(sorted(sets.items())), stream, positions, classes,
                        tuple(layers), _table(sym.W_O, names, rng, "W_O"))
    validate(value)
    return value


def _rule(r, names, rng, where: str) -> ClosedRule:
    from depthcert.constructions.head_family import Copy, Entry, Scaled

    if type(r) is Entry:
        return ClosedRule("entry", str(r.row_block), str(r.col_block), _poly_of(r.row, names, rng, where),
                          _poly_of(r.col, names, rng, where), _poly_of(r.value, names, rng, where))
    if type(r) is Copy:
        return ClosedRule("copy", str(r.src_block), None, _poly_of(r.dst, names, rng, where), (),
                          _poly_of(r.value, names, rng, where))
    if type(r) is Scaled:
        return ClosedRule("scaled", None if r.block is None else str(r.block), None, (), (),
                          _poly_of(r.value, names, rng, where))
    raise NotClosed(f"{where}: a {type(r).__name__} is not a head rule (Entry, Copy, Scaled)")


def _rule_head(hr, names, rng, where: str) -> ClosedRuleHead:
    from depthcert.constructions.head_family import HeadRules

    if type(hr) is not HeadRules:
        raise NotClosed(f"{where}: a {type(hr).__name__}, not HeadRules")
    return ClosedRuleHead(tuple(_rule(r, names, rng, f"{where} W_QK") for r in hr.qk),
                          tuple(_rule(r, names, rng, f"{where} W_V") for r in hr.v))


def close_family(spec, sym_task: SymbolicTask) -> ClosedHeadFamily:
    """The closed value of Theorem 1's Lemma4 object made from symbols h, L, M: copy head h's rules read
    once at the symbol h (so every head is the same polynomials in h), the read-out likewise."""
    from depthcert.constructions.head_family import HeadFamily, Template
    from depthcert.constructions.memorization import Lemma4

    if type(spec) is not Lemma4:
        raise NotClosed(f"a {type(spec).__name__}, not the Lemma 4 object")
    rng = sym_task.range
    names = tuple(rng.names)
    if names != ("h", "L", "M"):
        raise NotClosed(f"a head family is made from symbols h, L, M, not {', '.join(names)}")
    if type(spec.copies) is not HeadFamily or (spec.readout is not None and type(spec.readout) is not Template):
        raise NotClosed("the copy heads are not a HeadFamily or the read-out not a Template")
    if spec.readout is None:
        raise NotClosed("no read-out stated for every size")
    h = sym_task.h
    off, w = spec.readout.at(h)
    value = ClosedHeadFamily(
        "memorization", tuple(rng.params), _poly_of(spec.d, names, rng, "d"), _poly_of(spec.n, names, rng, "n"),
        _poly_of(spec.dim, names, rng, "d'"), _poly_of(spec.copies.count, names, rng, "copy head count"),
        _rule_head(spec.copies.head(h), names, rng, "copy head h"),
        tuple(_rule_head(hr, names, rng, f"last head {i}") for i, hr in enumerate(spec.last)),
        _poly_of(spec.readout.count, names, rng, "read-out count"), _poly_of(off, names, rng, "read-out offset"),
        _poly_of(w, names, rng, "read-out weight"))
    validate_family(value)
    return value


def close_count(fn, name: str, p: int) -> ClosedCount:
    """The closed value of a count builder: fn called with symbols only, once with n (the rules not
    tied to a key) and once per residue case with (q, t), the key j = p q + s and n = j + 1 + t (the
    rules of key j): p + 2 calls, each with other symbols, made once per process for (fn, name, p).
    NotClosed when a call fails or returns no count object."""
    return made_once(fn, ("count", name, p), lambda counted: _close_count(counted, name, p))


def _close_count(fn, name: str, p: int) -> ClosedCount:
    from depthcert.constructions.head_family import HeadRules

    vocab = ("0", "1")

    def spec_of(sym_task):
        try:
            out = fn(sym_task)
        except SizeBranch as exc:
            raise NotClosed(f"the builder branches on a size at {exc.where} ({exc.what})") from None
        except NotClosed:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure on symbols: named, never a value
            raise NotClosed(f"the builder does not run with symbolic sizes: {type(exc).__name__}: {exc} at "
                            f"{_frame(exc)}") from None
        spec = getattr(out, "symbolic", out)
        if type(spec).__name__ != "CountSpec" or spec.p != p or tuple(spec.vocab) != vocab:
            raise NotClosed("the builder returned no count object for this p and vocabulary")
        return spec

    rng = SizeRange.of(("n", 1))
    top = spec_of(SymbolicTask(name, rng, fixed={"p": p, "vocab": vocab}))
    names = ("n",)

    def head(qk, v, names_, rng_, where):
        return _rule_head(HeadRules(tuple(qk), tuple(v)), names_, rng_, where)

    cases = []
    for text, s, qbase in count_cases(p):
        crng = SizeRange.of(("q", qbase), ("t", 0))
        jf = (lambda z: 0 * z["q"]) if s is None else (lambda z, s=s: p * z["q"] + s)
        ct = SymbolicTask(name, crng, derived={"j": jf, "n": lambda z, jf=jf: jf(z) + 1 + z["t"]},
                          fixed={"p": p, "vocab": vocab})
        spec = spec_of(ct)
        try:
            k1, k2 = spec.layer1.key(ct.j), spec.layer2.key(ct.j)
        except SizeBranch as exc:
            raise NotClosed(f"the builder branches on a size at {exc.where} ({exc.what}; in the case {text})") from None
        except Exception as exc:  # noqa: BLE001 - the builder's key function on symbols: named, never a value
            raise NotClosed(f"the builder's key rules do not run with symbolic sizes: {type(exc).__name__}: {exc} at "
                            f"{_frame(exc)} (in the case {text})") from None
        cases.append(ClosedKeyCase(text, s, qbase, _rule_head(k1, ("q", "t"), crng, f"{text} layer 1 key j"),
                                   _rule_head(k2, ("q", "t"), crng, f"{text} layer 2 key j")))
    value = ClosedCount(
        name, p, vocab, tuple(rng.params), _poly_of(top.layer1.count, names, rng, "layer 1 keys"),
        _poly_of(top.layer2.count, names, rng, "layer 2 keys"),
        head(top.layer1.qk, top.layer1.v, names, rng, "layer 1"), head(top.layer2.qk, top.layer2.v, names, rng, "layer 2"),
        tuple(_rule(r, names, rng, "read-out") for r in top.readout), tuple(cases))
    validate_count(value)
    return value


def _frame(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    skip = (os.sep + "sympy" + os.sep, os.sep + "numpy" + os.sep, "indexed.py", "closed.py")
    for fr in reversed(frames):
        if not any(s in fr.filename for s in skip):
            rel = os.path.relpath(fr.filename)
            return f"{fr.filename if rel.startswith('..') else rel}:{fr.lineno}: {fr.line}"
    return "<unknown>"


def as_value(out, sym_task: SymbolicTask) -> ClosedModel:
    """A builder's return value as a closed value: a ClosedModel, a SymbolicModel (closed here) or a
    Construction carrying one in `.symbolic`; anything else NotClosed."""
    from depthcert.constructions.construction import Construction

    if type(out) is Construction:
        out = out.symbolic
    if type(out) is SymbolicModel:
        if out.range is not sym_task.range:
            raise NotClosed("the builder's model is over another size range than the symbols it was given")
        return close(out, fixed_of(sym_task))
    if type(out) is ClosedModel or type(out) is ClosedHeadFamily:
        check(out)
        if tuple(out.params) != tuple(sym_task.range.params):
            raise NotClosed("the value's parameters are not the symbols it was given")
        if type(out) is ClosedModel and dict(out.fixed) != fixed_of(sym_task):
            raise NotClosed(f"the value's fixed sizes {dict(out.fixed)} are not the structure it was asked for "
                            f"{fixed_of(sym_task)}")
        return out
    if type(out).__name__ == "Lemma4":
        return close_family(out, sym_task)
    raise NotAValue(f"the builder returned a {type(out).__name__}: a closed value is a ClosedModel (or a model written "
                    "with constructions/indexed.py)")


def fixed_of(sym_task: SymbolicTask) -> dict:
    return {k: v for k, v in sym_task.sizes.items() if type(v) is int}


@dataclass(frozen=True)
class Making:
    """How a function made its closed value in this process: what it was handed on each call (one text
    per call, in order; a count value's function is handed n once and each residue case's (q, t) once),
    and the number of calls.  Every later request for the value gets the one value made then."""

    handed: tuple
    calls: int


_MADE: dict = {}  # (id(function), structure) -> (closed value or NotClosed, Making, function)


def handed_text(sym_task: SymbolicTask) -> str:
    """What a symbolic task hands a function: its symbols and their range, the sizes derived from them,
    the sizes held at one value."""
    rng = sym_task.range
    names = set(rng.names)
    derived = [f"{k} = {v.text()}" for k, v in sym_task.sizes.items() if k not in names and isinstance(v, Size)]
    held = [f"{k} = {v!r}" for k, v in sym_task.sizes.items() if k not in names and not isinstance(v, Size)]
    return (f"a symbolic {sym_task.name} task: the symbols {', '.join(rng.names)} over {rng.describe()}"
            + (f", with {', '.join(derived)}" if derived else "") + (f"; held: {', '.join(held)}" if held else ""))


def _structure(sym_task) -> tuple:
    if type(sym_task) is not SymbolicTask:
        return ("not symbolic", id(sym_task))
    held = tuple(sorted((k, repr(v)) for k, v in sym_task.sizes.items() if not isinstance(v, Size)))
    derived = tuple(sorted((k, v.text()) for k, v in sym_task.sizes.items()
                           if isinstance(v, Size) and k not in sym_task.range.names))
    point = None if sym_task.range.point is None else tuple(sorted(sym_task.range.point.items()))
    return (sym_task.name, tuple(sym_task.range.params), point, held, derived)


def made_once(fn, key: tuple, make):
    """The closed value `make(counted)` makes, where `counted` is fn counting its calls: run at most once
    per process for (fn, key); every later request (the proof, the finite check of the same run, the
    hash printed) gets that one value, or the same NotClosed.  A function that keeps state or counts its
    calls is therefore never run a second time for the same symbols."""
    memo = (id(fn), key)  # by identity (a callable's own __eq__ / __hash__ decide nothing); fn is kept alive below
    if memo not in _MADE or _MADE[memo][2] is not fn:
        handed = []

        def counted(sym_task):
            handed.append(handed_text(sym_task) if type(sym_task) is SymbolicTask else repr(sym_task))
            return fn(sym_task)

        try:
            out = make(counted)
        except NotClosed as exc:
            out = exc
        _MADE[memo] = (out, Making(tuple(handed), len(handed)), fn)
    out = _MADE[memo][0]
    if isinstance(out, NotClosed):
        raise out
    return out


def making(fn) -> Making | None:
    """How fn made its closed value in this process (None: it was never asked for one); with more than one
    structure (another k, l or hops), the calls of all of them."""
    found = [m for (_, m, f) in list(_MADE.values()) if f is fn]
    if not found:
        return None
    return Making(tuple(h for m in found for h in m.handed), sum(m.calls for m in found))


def value_of(fn, sym_task: SymbolicTask) -> ClosedModel:
    """fn called with symbols only, its output closed; NotClosed naming why (and the line).  fn runs once
    per process for these symbols: a second request returns the value the first call made."""
    def make(counted):
        key = ("value_of", object())
        try:
            return cached(key, counted, lambda: sym_task)[1]
        finally:
            _CACHE.pop(key, None)

    return made_once(fn, ("value_of", _structure(sym_task)), make)


_CACHE: dict = {}


def cached(key, fn, make_sym):
    """(what fn returned, its closed value) for fn called once with make_sym()'s symbols, once per
    process and key (a registry builder's value at one structure); NotClosed when it is not one."""
    if key not in _CACHE:
        sym_task = make_sym()
        try:
            if type(sym_task) is not SymbolicTask or sym_task.range.point is not None:
                raise NotClosed("a closed value is made from symbols only (a SymbolicTask over the whole range)")
            try:  # closing calls the builder's functions too (a head family's head(h), a template's at(h))
                out = fn(sym_task)
                _CACHE[key] = (out, as_value(out, sym_task))
            except SizeBranch as exc:
                raise NotClosed(f"the builder branches on a size at {exc.where} ({exc.what})") from None
            except NotClosed:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure on symbols: named, never a value
                raise NotClosed(f"the builder does not run with symbolic sizes: {type(exc).__name__}: {exc} at "
                                f"{_frame(exc)}") from None
        except NotClosed as exc:
            _CACHE[key] = exc
    out = _CACHE[key]
    if isinstance(out, NotClosed):
        raise out
    return out


def cached_value(key, fn, make_sym) -> ClosedModel:
    return cached(key, fn, make_sym)[1]


def build_closed(key, fn, make_sym, task, sizes: dict, notes=None):
    """The finite Construction of a registry builder written for every size: its closed value (fn
    called once with symbols) instantiated at these sizes; `symbolic` is the value.  NotClosed when fn
    makes no closed value (the caller's finite-only route then builds it)."""
    from dataclasses import replace

    from depthcert.constructions.construction import Construction

    out, value = cached(key, fn, make_sym)
    model = instantiate(value, sizes, task)
    if notes is not None:
        model = replace(model, notes=notes(model))
    c = out if type(out) is Construction else Construction(task.name, value.name, "closed value", None, False)
    return replace(c, model=model, symbolic=value)


def build_or_finite(key, fn, make_sym, task, sizes: dict, finite, notes=None):
    """build_closed when fn makes a closed value whose range holds these sizes; otherwise `finite()`
    (a finite-only build: its Construction has no closed value, and no proof for every size covers
    it -- the prover asks value_of itself and says why)."""
    from dataclasses import replace

    try:
        value = cached_value(key, fn, make_sym)
    except NotClosed:
        return replace(finite(), symbolic=None)
    if not value.range.contains({n: int(sizes[n]) for n in value.range.names}):
        return replace(finite(), symbolic=None)
    return build_closed(key, fn, make_sym, task, sizes, notes)


# ----------------------------------------------------------------------------- instantiate


def writer_model(value: ClosedModel) -> SymbolicModel:
    """The value as the writer's SymbolicModel over a fresh range (used by `instantiate` only)."""
    rng = value.range
    sets = {name: IndexSet(name, poly_size(p, rng)) for name, p in value.sets}

    def layout(segs):
        return IndexedLayout(*[Segment(s.block, None if s.over is None else sets[s.over], tuple(s.families))
                               for s in segs])

    stream, positions, classes = layout(value.stream), layout(value.positions), layout(value.classes)

    def matrix(t: ClosedTable, rows, cols):
        M = IndexedMatrix(rows, cols)
        M.table = {key: poly_size(p, rng) for key, p in t.entries}
        return M

    layers = []
    for layer in value.layers:
        heads = tuple(IndexedHead(matrix(h.W_QK, stream, stream), matrix(h.W_V, stream, stream)) for h in layer.heads)
        layers.append(heads if layer.repeat == (((0,) * len(rng.params), Fraction(1)),)
                      else Repeat(heads, poly_size(layer.repeat, rng)))
    return SymbolicModel(value.name, stream, positions, classes, tuple(layers), matrix(value.W_O, classes, stream), rng)


def instantiate(value: ClosedModel, sizes: dict, task=None):
    """The finite Model of a closed value at these sizes (exact Fractions), the only route from a
    closed value to a model.  `task` (the dataset the model is checked on) names the tokens and
    classes; the value's positions and class rows must match it."""
    if type(value) is ClosedHeadFamily:
        return _instantiate_family(value, sizes, task)
    if type(value) is ClosedCount:
        return _instantiate_count(value, sizes, task)
    validate(value)
    names = tuple(p.name for p in value.params)
    missing = [n for n in names if n not in sizes]
    if missing:
        raise BadInput(f"instantiate: no value for {', '.join(missing)}")
    values = {n: int(sizes[n]) for n in names}
    if not value.range.contains(values):
        raise BadInput(f"sizes {values} are outside the construction's range {value.range.describe()}")
    if task is None:
        raise BadInput("instantiate needs the task whose tokens and classes the model reads")
    return writer_model(value).instantiate(task, values)


def _instantiate_family(value: ClosedHeadFamily, sizes: dict, task):
    """Theorem 1's model at L, M: every polynomial evaluated (copy head h's at h = 0 .. count - 1),
    filled by memorization.Lemma4.instantiate (head_family.rules_matrix, template_readout)."""
    from depthcert.constructions.head_family import Copy, Entry, HeadFamily, HeadRules, Scaled, Template
    from depthcert.constructions.memorization import Lemma4

    validate_family(value)
    if task is None:
        raise BadInput("instantiate needs the task whose tokens and classes the model reads")
    names = ("h", "L", "M")
    L, M = int(sizes["L"]), int(sizes["M"])
    if not value.range.contains({"h": 0, "L": L, "M": M}):
        raise BadInput(f"sizes L={L}, M={M} are outside the construction's range L >= 1, M >= 1")

    def at(p, hv=0):
        return poly_at(p, names, {"h": hv, "L": L, "M": M})

    def integer(p, what, hv=0):
        v = at(p, hv)
        if v.denominator != 1:
            raise BadInput(f"the head family's {what} is {v} at L={L}, M={M}: not an integer")
        return int(v)

    def rule(r: ClosedRule, hv: int):
        if r.kind == "entry":
            return Entry(r.src, integer(r.row, "row", hv), r.col_block, integer(r.col, "column", hv), at(r.value, hv))
        if r.kind == "copy":
            return Copy(integer(r.row, "copy row", hv), r.src, at(r.value, hv))
        return Scaled(r.src, at(r.value, hv))

    def head(hr: ClosedRuleHead, hv: int) -> HeadRules:
        return HeadRules(tuple(rule(r, hv) for r in hr.qk), tuple(rule(r, hv) for r in hr.v))

    d, n, dim = integer(value.d, "d"), integer(value.n, "n"), integer(value.dim, "d'")
    copies = HeadFamily(integer(value.count, "copy head count"), lambda hv: head(value.copy, hv))
    last = tuple(head(hr, 0) for hr in value.last)
    tpl = Template(integer(value.read_count, "read-out count"),
                   lambda hv: (integer(value.read_offset, "read-out row", hv), at(value.read_weight, hv)))
    spec = Lemma4(d, n, copies, last, tpl)
    if spec.dim != dim:
        raise BadInput(f"the head family's d' is {dim}, not max(n d, d + n) = {spec.dim}")
    return spec.instantiate(task)


def _evaluated_rule(r: ClosedRule, names: tuple, values: dict, what: str):
    from depthcert.constructions.head_family import Copy, Entry, Scaled

    def integer(p, f):
        v = poly_at(p, names, values)
        if v.denominator != 1:
            raise BadInput(f"{what}: the {f} {v} is not an integer")
        return int(v)

    if r.kind == "entry":
        return Entry(r.src, integer(r.row, "row"), r.col_block, integer(r.col, "column"), poly_at(r.value, names, values))
    if r.kind == "copy":
        return Copy(integer(r.row, "copy row"), r.src, poly_at(r.value, names, values))
    return Scaled(r.src, poly_at(r.value, names, values))


def _instantiate_count(value: ClosedCount, sizes: dict, task):
    """The count model at n: key j's rules from its residue case at q, t = n - 1 - j, the other rules
    at n, filled by group_tree.CountSpec.instantiate."""
    from depthcert.constructions.group_tree import CountSpec, KeyRules
    from depthcert.constructions.head_family import HeadRules

    validate_count(value)
    if task is None:
        raise BadInput("instantiate needs the task whose tokens and classes the model reads")
    n = int(sizes["n"])
    if n < 1:
        raise BadInput(f"n = {n} is outside the construction's range n >= 1")
    group = getattr(task, "group", None)
    if group is None or group.order != value.p or task.name != value.name:
        raise BadInput(f"the count value is for {value.name} at p = {value.p}, not for the task {task.name}")
    at_n = {"n": n}

    def count(p, what):
        v = poly_at(p, ("n",), at_n)
        if v.denominator != 1 or v < 0:
            raise BadInput(f"the count value's {what} is {v} at n = {n}")
        return int(v)

    def rules(rs, names, vals, what):
        return tuple(_evaluated_rule(r, names, vals, what) for r in rs)

    def key(layer: int, j: int) -> HeadRules:
        p = value.p
        c = value.cases[0] if j == 0 else value.cases[1 + (j % p) - 1] if j % p else value.cases[-1]
        q = 0 if j == 0 else (j - (c.s or 0)) // p
        vals = {"q": q, "t": n - 1 - j}
        hr = c.key1 if layer == 1 else c.key2
        return HeadRules(rules(hr.qk, ("q", "t"), vals, f"key {j}"), rules(hr.v, ("q", "t"), vals, f"key {j}"))

    l1 = KeyRules(count(value.count1, "layer 1 keys"), lambda j: key(1, j),
                  rules(value.layer1.qk, ("n",), at_n, "layer 1"), rules(value.layer1.v, ("n",), at_n, "layer 1"))
    l2 = KeyRules(count(value.count2, "layer 2 keys"), lambda j: key(2, j),
                  rules(value.layer2.qk, ("n",), at_n, "layer 2"), rules(value.layer2.v, ("n",), at_n, "layer 2"))
    spec = CountSpec(n, value.p, value.vocab, l1, l2, rules(value.readout, ("n",), at_n, "read-out"))
    return spec.instantiate(task, f"{value.name}-count")


# ----------------------------------------------------------------------------- canonical form, hash


def _terms(p: tuple) -> list:
    return [[list(m), str(c.numerator) if c.denominator == 1 else f"{c.numerator}/{c.denominator}"] for m, c in p]


def canonical_tables(value: ClosedModel) -> dict:
    """The value as plain JSON data (every field, in a fixed order): what `content_hash` hashes and a
    re-checker compares with a certificate's tables."""
    if type(value) is ClosedCount:
        validate_count(value)

        def crules(rs):
            return [[r.kind, r.src, r.col_block, _terms(r.row), _terms(r.col), _terms(r.value)] for r in rs]

        def chead(hr):
            return {"W_QK": crules(hr.qk), "W_V": crules(hr.v)}

        return {"format": FORMAT, "version": VERSION, "kind": "count", "name": value.name, "p": value.p,
                "vocab": list(value.vocab), "params": [[q.name, q.base, q.after] for q in value.params],
                "count1": _terms(value.count1), "count2": _terms(value.count2), "layer1": chead(value.layer1),
                "layer2": chead(value.layer2), "readout": crules(value.readout),
                "cases": [{"text": c.text, "s": c.s, "qbase": c.qbase, "key1": chead(c.key1), "key2": chead(c.key2)}
                          for c in value.cases]}
    if type(value) is ClosedHeadFamily:
        validate_family(value)

        def rules(rs):
            return [[r.kind, r.src, r.col_block, _terms(r.row), _terms(r.col), _terms(r.value)] for r in rs]

        def head(hr):
            return {"W_QK": rules(hr.qk), "W_V": rules(hr.v)}

        return {"format": FORMAT, "version": VERSION, "kind": "head-family", "name": value.name,
                "params": [[p.name, p.base, p.after] for p in value.params],
                **{f: _terms(getattr(value, f)) for f in ("d", "n", "dim", "count", "read_count", "read_offset",
                                                          "read_weight")},
                "copy": head(value.copy), "last": [head(hr) for hr in value.last]}
    validate(value)

    def segs(ss):
        return [[s.block, s.over, list(s.families)] for s in ss]

    def table(t):
        return [[rf, cf, pat, _terms(p)] for (rf, cf, pat), p in t.entries]

    return {
        "format": FORMAT, "version": VERSION, "name": value.name,
        "params": [[p.name, p.base, p.after] for p in value.params],
        "fixed": [[k, v] for k, v in value.fixed],
        "sets": [[name, _terms(p)] for name, p in value.sets],
        "stream": segs(value.stream), "positions": segs(value.positions), "classes": segs(value.classes),
        "layers": [{"heads": [{"W_QK": table(h.W_QK), "W_V": table(h.W_V)} for h in layer.heads],
                    "repeat": _terms(layer.repeat)} for layer in value.layers],
        "W_O": table(value.W_O),
    }


def canonical_bytes(value: ClosedModel) -> bytes:
    return json.dumps(canonical_tables(value), sort_keys=True, separators=(",", ":")).encode()


def content_hash(value: ClosedModel) -> str:
    """'sha256:' + the hex sha256 of the value's canonical serialisation (canonical_tables)."""
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()
