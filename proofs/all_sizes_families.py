"""From the construction code to lumped tables: which rows form families, and reading the
weights of built models into one table per matrix, checked exactly at every size built.

A *view* of a concrete model names, for every row of the stream, every position and every
class, its family and its element: token rows of a symmetric token group (the task's
`symmetry_groups`) form one family indexed by the group; rows tagged with a token
(`Model.notes["row_tokens"]`) form one family per tagged block; position rows and columns are
single rows, except where a structure indexes them by a set (ICQA: the k (q, =, a) triples);
every other row is a single row named by its layout block.  `read_table` reads a matrix into its
table and *checks* that every entry of a class is the same (the matrix is invariant); `merge`
checks that the tables of models built at different sizes agree wherever both sizes have the
class.  The merged tables are the parametric family the lumped proof runs on: a construction
whose weights change with the size in any other way (a value, a pattern) is refused, and one
that changes at a size not built is outside what any finite check can see (docs/all-sizes.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model, embed_exact
from depthcert.proofs.all_sizes_lumped import Family, LMatrix, Ring, Space, patterns


class NotAFamily(Exception):
    """The built weights are not one invariant table (at some size, or across sizes)."""


@dataclass(frozen=True)
class View:
    """Families of one concrete model (or point): rows, columns, classes, with the concrete
    (family index, element) of every row / position / class and the concrete set sizes."""

    rows: Space
    row_of: tuple[tuple[int, int], ...]
    cols: Space
    col_of: tuple[tuple[int, int], ...]
    classes: Space
    class_of: tuple[tuple[int, int], ...]
    sort_sizes: dict
    class_names: tuple[str, ...] = ()


def _key(fa: Family, ea: int, fb: Family, eb: int) -> str:
    if fa.sort is not None and fa.sort == fb.sort:
        return "eq" if ea == eb else "ne"
    return ""


def read_table(M: np.ndarray, rows: Space, row_of, cols: Space, col_of, where: str) -> dict:
    """{(row family, col family, pattern): value} for every class that occurs in M; raises
    NotAFamily naming two entries of one class that differ."""
    out: dict = {}
    first: dict = {}
    for i, (fr, er) in enumerate(row_of):
        Fr = rows.families[fr]
        for j, (fc, ec) in enumerate(col_of):
            Fc = cols.families[fc]
            key = (fr, fc, _key(Fr, er, Fc, ec))
            v = Fraction(M[i, j])
            if key not in out:
                out[key] = v
                first[key] = (i, j)
            elif out[key] != v:
                a = first[key]
                raise NotAFamily(f"{where}: entries ({a[0]}, {a[1]}) = {out[key]} and ({i}, {j}) = {v} are in one "
                                 f"class ({Fr.name}, {Fc.name}, {key[2] or 'single'}) but differ: not invariant")
    return out


@dataclass
class Tables:
    """The weights of one model as tables, keyed by family names (so sizes can be compared)."""

    heads: list  # per layer: number of heads
    qk: dict = field(default_factory=dict)  # (layer, head) -> table
    v: dict = field(default_factory=dict)
    o: dict = field(default_factory=dict)


def _named(table: dict, rows: Space, cols: Space) -> dict:
    return {(rows.families[r].name, cols.families[c].name, p): v for (r, c, p), v in table.items()}


def model_tables(model: Model, view: View, where: str) -> Tables:
    if not model.is_plain:
        raise NotAFamily(f"{where}: the lumped proof covers the paper's model class only (relu heads, no mask, "
                         f"no MLP); this model is {model.kinds()}")
    t = Tables([len(L) for L in model.layers])
    for li, layer in enumerate(model.layers):
        for hi, head in enumerate(layer):
            w = f"{where} layer {li + 1} head {hi + 1}"
            t.qk[(li, hi)] = _named(read_table(head.W_QK, view.rows, view.row_of, view.rows, view.row_of, w + " W_QK"),
                                    view.rows, view.rows)
            t.v[(li, hi)] = _named(read_table(head.W_V, view.rows, view.row_of, view.rows, view.row_of, w + " W_V"),
                                   view.rows, view.rows)
    t.o = _named(read_table(model.W_O, view.classes, view.class_of, view.rows, view.row_of, f"{where} W_O"),
                 view.classes, view.rows)
    return t


def _merge_table(a: dict, b: dict, what: str, sa: str, sb: str) -> dict:
    out = dict(a)
    for key, v in b.items():
        if key in out and out[key] != v:
            r, c, p = key
            raise NotAFamily(f"{what} ({r}, {c}{', ' + p if p else ''}) is {out[key]} at {sa} but {v} at {sb}: "
                             "the weights are not one parametric family")
        out[key] = v
    return out


def merge(tables: list[tuple[str, Tables]]) -> Tables:
    """One family from the tables at several sizes (every class that occurs at two sizes agrees)."""
    name0, t0 = tables[0]
    out = Tables(list(t0.heads), dict(t0.qk), dict(t0.v), dict(t0.o))
    for name, t in tables[1:]:
        if t.heads != out.heads:
            raise NotAFamily(f"heads per layer {t.heads} at {name} but {out.heads} at {name0}")
        for li_hi in t.qk:
            out.qk[li_hi] = _merge_table(out.qk[li_hi], t.qk[li_hi], f"W_QK layer {li_hi[0] + 1} head {li_hi[1] + 1}", name0, name)
            out.v[li_hi] = _merge_table(out.v[li_hi], t.v[li_hi], f"W_V layer {li_hi[0] + 1} head {li_hi[1] + 1}", name0, name)
        out.o = _merge_table(out.o, t.o, "W_O", name0, name)
    return out


def missing_classes(t: Tables, rows: Space, classes: Space) -> list[str]:
    """Classes of the tables that no size built showed (the family would be guessed there)."""
    want = set()
    for a in rows.families:
        for b in rows.families:
            for p in patterns(a, b):
                want.add((a.name, b.name, p))
    missing = []
    for li_hi, tab in list(t.qk.items()) + list(t.v.items()):
        for key in want - set(tab):
            missing.append(f"layer {li_hi[0] + 1} head {li_hi[1] + 1} {key}")
    wo = {(c.name, r.name, p) for c in classes.families for r in rows.families for p in patterns(c, r)}
    missing += [f"W_O {key}" for key in wo - set(t.o)]
    return missing


# ----------------------------------------------------------------------------- point level


@dataclass(frozen=True)
class PointFamily:
    """A family of the point-level view: a part of a model family.  spec ('fixed', label) is one
    element (the same label = the same element across model families), ('sort', S) one element
    per element of the point set S (the same S-element = the same element across families)."""

    name: str
    model: str
    spec: tuple

    @property
    def family(self) -> Family:
        return Family(self.name, self.spec[1] if self.spec[0] == "sort" else None)


@dataclass(frozen=True)
class PointView:
    """Point-level families (rows, columns, classes) with the set sizes as polynomial texts."""

    rows: tuple[PointFamily, ...]
    cols: tuple[PointFamily, ...]
    classes: tuple[PointFamily, ...]
    sorts: dict  # point set -> polynomial text in the parameters
    last: str  # column family read by the classifier
    label: str  # class family of the label
    # concrete: model (family name, element) -> (point family name, point element)
    row_map: dict
    col_map: dict
    class_map: dict

    def spaces(self) -> tuple[Space, Space, Space]:
        return (Space(tuple(f.family for f in self.rows)), Space(tuple(f.family for f in self.cols)),
                Space(tuple(f.family for f in self.classes)))


def _model_pattern(pa: PointFamily, pb: PointFamily, ppat: str, model_sort) -> str:
    if model_sort is None:
        return ""
    if pa.spec == pb.spec and (pa.spec[0] == "fixed" or ppat == "eq"):
        return "eq"
    return "ne"


def refine(table: dict, model_rows: Space, model_cols: Space, prow: tuple[PointFamily, ...],
           pcol: tuple[PointFamily, ...], ring_: Ring) -> LMatrix:
    """The point-level table of a model-level invariant matrix (exact, for every size): the
    value of a point class is the value of the model class its elements fall in."""
    rsort = {f.name: f.sort for f in model_rows.families}
    csort = {f.name: f.sort for f in model_cols.families}
    rfams = tuple(f.family for f in prow)
    cfams = tuple(f.family for f in pcol)
    data = {}
    consts: dict = {}
    for i, pa in enumerate(prow):
        ra = rsort[pa.model]
        for j, pb in enumerate(pcol):
            ms = ra if ra is not None and ra == csort[pb.model] else None
            for pp in patterns(rfams[i], cfams[j]):
                v = table.get((pa.model, pb.model, _model_pattern(pa, pb, pp, ms)))
                if v:
                    if hasattr(v, "ring"):  # already a polynomial (a symbolic build's weight)
                        data[(i, j, pp)] = v
                        continue
                    if v not in consts:
                        consts[v] = ring_.const(v)
                    data[(i, j, pp)] = consts[v]
    return LMatrix(Space(rfams), Space(cfams), data)


def point_h0(model: Model, tokens_ids, view: View, pv: PointView, where: str) -> dict:
    """The point-level table of H0 for one concrete point (read and checked invariant)."""
    H = np.array(embed_exact(model, list(tokens_ids)), dtype=object)
    rows, cols, _ = pv.spaces()
    row_of = [_point_of(pv.row_map, view.rows, fr, e, rows, where) for fr, e in view.row_of]
    col_of = [_point_of(pv.col_map, view.cols, fc, e, cols, where) for fc, e in view.col_of]
    table = read_table(H, rows, row_of, cols, col_of, where + " H0")
    return {(rows.families[r].name, cols.families[c].name, p): v for (r, c, p), v in table.items()}


def _point_of(mapping: dict, model_space: Space, f: int, e: int, pspace: Space, where: str):
    name = model_space.families[f].name
    pf, pe = mapping[(name, e)]
    return pspace.index(pf), pe


def check_point_sizes(pv: PointView, view: View, ring_: Ring, values: dict, where: str) -> None:
    """Every point set has the size its polynomial says, at this concrete size."""
    counts: dict = {}
    for (name, e), (pf, pe) in list(pv.row_map.items()) + list(pv.col_map.items()) + list(pv.class_map.items()):
        fam = next(f for f in pv.rows + pv.cols + pv.classes if f.name == pf)
        if fam.spec[0] == "sort":
            counts.setdefault(fam.spec[1], set()).add(pe)
    for s, text in pv.sorts.items():
        want = ring_.parse(text).compose([(ring_.gen[n], ring_.const(v)) for n, v in values.items()])
        want = int(want.LC) if not want.is_zero else 0
        got = len(counts.get(s, ()))
        if got != want:
            raise NotAFamily(f"{where}: point set {s} has {got} elements, its size formula {text} says {want}")
