"""The construction for every size, from the builder itself: run the builder the finite check runs
(`registry.build`) on a task whose sizes are symbolic, and read its one symbolic model.

Claim.  When the builder returns without raising, it is written with set-indexed blocks
(constructions/indexed.py) and decided every comparison of a size over the whole parameter
range, so its output is one table per matrix with polynomial entries; the finite build at any
size is that object instantiated (the same builder call, `SymbolicModel.instantiate`).  So the
tables below are the construction at every size, not a reading at sample sizes.  A builder that
branches on a size (an `if k >= 7`, a `range(k)`, a shape) raises `SizeBranch`, which names its
file and line: the proof stops there (exit 3).
"""
from __future__ import annotations

import os
import traceback
from fractions import Fraction

from depthcert.constructions.indexed import Size, SizeBranch, SymbolicModel
from depthcert.proofs.all_sizes_families import Tables, View
from depthcert.proofs.all_sizes_lumped import Family, Ring, Space


class NotSymbolic(Exception):
    """The builder did not produce one symbolic model for every size (the reason names the line)."""


def _builder_frame(exc: BaseException) -> str:
    """file:line: source of the innermost frame of project code (not sympy, numpy or indexed.py)."""
    frames = traceback.extract_tb(exc.__traceback__)
    skip = (os.sep + "sympy" + os.sep, os.sep + "numpy" + os.sep, "indexed.py", "all_sizes_symbolic.py")
    for fr in reversed(frames):
        if not any(s in fr.filename for s in skip):
            rel = os.path.relpath(fr.filename)
            return f"{fr.filename if rel.startswith('..') else rel}:{fr.lineno}: {fr.line}"
    return "<unknown>"


def run_symbolic(construct, sym_task) -> SymbolicModel:
    """The builder's output on the symbolic task, or NotSymbolic naming why and where."""
    try:
        c = construct(sym_task)
    except SizeBranch as exc:
        raise NotSymbolic(f"the builder branches on a size at {exc.where} ({exc.what})") from None
    except Exception as exc:  # noqa: BLE001 - any failure on symbolic sizes: named, never a proof
        raise NotSymbolic(f"the builder does not run with symbolic sizes: {type(exc).__name__}: {exc} at "
                          f"{_builder_frame(exc)}") from None
    sym = getattr(c, "symbolic", None) if c is not None else None
    if not isinstance(sym, SymbolicModel):
        raise NotSymbolic("the builder returned no symbolic model (it is not written with set-indexed blocks, "
                          "constructions/indexed.py)")
    if sym.range is not sym_task.range:
        raise NotSymbolic("the builder's symbolic model is over another size range than the task's")
    return sym


def as_poly(ring_: Ring, v):
    """A weight (int, Fraction, Size) as a polynomial of the proof's ring.  A size parameter the ring
    does not have (a repeat count such as the hops) must not occur in a weight."""
    if isinstance(v, Size):
        names = [p.name for p in ring_.params]
        out = ring_.zero
        for mono, c in v.terms.items():
            term = ring_.const(c)
            for name, e in zip(v.range.names, mono):
                if not e:
                    continue
                if name not in names:
                    raise NotSymbolic(f"a weight depends on {name} ({v}): the proof is symbolic in "
                                      f"{', '.join(names)} only")
                term = term * ring_.gen[name] ** e
            out = out + term
        return out
    return ring_.const(Fraction(v))


def layer_tables(layer, ring_: Ring) -> Tables:
    """One layer's heads as Tables (W_O left empty)."""
    t = Tables([len(layer)])
    for hi, head in enumerate(layer):
        t.qk[(0, hi)] = {key: as_poly(ring_, v) for key, v in head.W_QK.table.items()}
        t.v[(0, hi)] = {key: as_poly(ring_, v) for key, v in head.W_V.table.items()}
    return t


def spaces(sym: SymbolicModel) -> tuple[Space, Space, Space]:
    def space(lay):
        return Space(tuple(Family(f, s) for f, s in lay.families.items()))

    return space(sym.stream), space(sym.positions), space(sym.classes)


def tables(sym: SymbolicModel, ring_: Ring) -> Tables:
    """Every weight matrix as its table {(row family, col family, pattern): polynomial}."""
    def tab(M):
        return {key: as_poly(ring_, v) for key, v in M.table.items()}

    from depthcert.constructions.indexed import Repeat

    if any(isinstance(layer, Repeat) for layer in sym.layers):
        raise NotSymbolic("the model repeats a layer a symbolic number of times: not a fixed stack of layers")
    t = Tables([len(layer) for layer in sym.layers])
    for li, layer in enumerate(sym.layers):
        for hi, head in enumerate(layer):
            t.qk[(li, hi)] = tab(head.W_QK)
            t.v[(li, hi)] = tab(head.W_V)
    t.o = tab(sym.W_O)
    return t


def set_sizes(sym: SymbolicModel, ring_: Ring) -> dict:
    """Every set of the stream, positions and classes with its size polynomial."""
    out = {}
    for lay in (sym.stream, sym.positions, sym.classes):
        for name, size in lay.sets.items():
            out[name] = as_poly(ring_, size)
    return out


def concrete_view(sym: SymbolicModel, task, values: dict) -> View:
    """The families of every concrete row, position and class at these sizes (the instantiation map)."""
    rows, cols, classes = spaces(sym)

    def of(space, lay):
        return tuple((space.index(f), e) for f, e in lay.rows(values))

    sort_sizes = {}
    for lay in (sym.stream, sym.positions, sym.classes):
        sort_sizes.update(lay.set_sizes(values))
    return View(rows, of(rows, sym.stream), cols, of(cols, sym.positions), classes, of(classes, sym.classes),
                sort_sizes, tuple(task.classes))


def table_count(t: Tables) -> int:
    return sum(1 for tab in list(t.qk.values()) + list(t.v.values()) + [t.o] for v in tab.values() if v)


def non_constant(t: Tables) -> list[str]:
    """Entries whose value depends on the sizes (shown in the family step)."""
    out = []
    for name, tab in ([(f"layer {li + 1} head {hi} W_QK", x) for (li, hi), x in t.qk.items()]
                      + [(f"layer {li + 1} head {hi} W_V", x) for (li, hi), x in t.v.items()] + [("W_O", t.o)]):
        for (r, c, p), v in tab.items():
            if not v.is_ground:
                out.append(f"{name} ({r}, {c}{', ' + p if p else ''}) = {v.as_expr()}")
    return out
