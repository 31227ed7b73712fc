"""The construction for every size as the prover reads it: a closed value (constructions/closed.py).

Claim.  A `ClosedModel` is data: index sets with polynomial sizes, segments, one table of
polynomials per matrix, layers with a repeat count, the read-out.  `read(value)` reads every part
of it -- every head of every layer (both matrices), every entry of every table, every repeat count,
every set, every segment, W_O -- into the lumped tables, and refuses a value with a part it does
not read (validate: an unknown field or type; here: a repeat count the stack being proven cannot
take).  The finite model at any size is `closed.instantiate(value, sizes, task)`, the only route
to it, so the tables read here are the construction checked at every size.
"""
from __future__ import annotations

from fractions import Fraction

from depthcert.constructions.closed import (ClosedModel, NotClosed, poly_at, validate, writer_model)
from depthcert.proofs.all_sizes_families import Tables, View
from depthcert.proofs.all_sizes_lumped import Family, Ring, Space

NotSymbolic = NotClosed  # the name the prover's callers used


def as_poly(ring_: Ring, p: tuple, names: tuple):
    """A value's polynomial (sorted (exponents, Fraction) terms over `names`) in the proof's ring.
    A parameter the ring does not have (a repeat count such as the hops) must not occur."""
    have = [q.name for q in ring_.params]
    out = ring_.zero
    for mono, c in p:
        term = ring_.const(c)
        for name, e in zip(names, mono):
            if not e:
                continue
            if name not in have:
                raise NotClosed(f"a weight depends on {name}: the proof is symbolic in {', '.join(have)} only")
            term = term * ring_.gen[name] ** e
        out = out + term
    return out


def names_of(value: ClosedModel) -> tuple:
    return tuple(p.name for p in value.params)


def _table(t, ring_: Ring, names: tuple) -> dict:
    return {key: as_poly(ring_, p, names) for key, p in t.entries}


def layer_tables(layer, ring_: Ring, names: tuple) -> Tables:
    """One layer's heads (every head, both matrices) as Tables (W_O left empty)."""
    t = Tables([len(layer.heads)])
    for hi, head in enumerate(layer.heads):
        t.qk[(0, hi)] = _table(head.W_QK, ring_, names)
        t.v[(0, hi)] = _table(head.W_V, ring_, names)
    return t


def constant_repeat(layer, names: tuple) -> int | None:
    """The layer's repeat count when it is a constant non-negative integer, else None."""
    zero = (0,) * len(names)
    if any(m != zero for m, _ in layer.repeat):
        return None
    c = dict(layer.repeat).get(zero, Fraction(0))
    return int(c) if c.denominator == 1 and c >= 0 else None


def read(value: ClosedModel, ring_: Ring) -> Tables:
    """Every weight of a fixed stack of layers as tables: a layer repeated a constant number of times
    is that many layers; a symbolic repeat count is refused here (not a fixed stack)."""
    validate(value)
    names = names_of(value)
    heads, qk, v = [], {}, {}
    for li, layer in enumerate(value.layers):
        times = constant_repeat(layer, names)
        if times is None:
            raise NotClosed(f"layer {li + 1} is repeated a symbolic number of times: not a fixed stack of layers "
                            "(only multi-hop linear's hop layer, repeated hops times, is proven that way)")
        one = layer_tables(layer, ring_, names)
        for _ in range(times):
            at = len(heads)
            heads.append(len(layer.heads))
            for hi in range(len(layer.heads)):
                qk[(at, hi)] = one.qk[(0, hi)]
                v[(at, hi)] = one.v[(0, hi)]
    t = Tables(heads, qk, v)
    t.o = _table(value.W_O, ring_, names)
    return t


def spaces(value: ClosedModel) -> tuple[Space, Space, Space]:
    def space(segs):
        return Space(tuple(Family(f, s.over) for s in segs for f in s.families))

    return space(value.stream), space(value.positions), space(value.classes)


def set_sizes(value: ClosedModel, ring_: Ring) -> dict:
    """Every set with its size polynomial."""
    return {name: as_poly(ring_, p, names_of(value)) for name, p in value.sets}


def set_sizes_at(value: ClosedModel, values: dict) -> dict:
    return {name: int(poly_at(p, names_of(value), values)) for name, p in value.sets}


def concrete_view(value: ClosedModel, task, values: dict) -> View:
    """The families of every concrete row, position and class at these sizes (the instantiation map:
    the same writer layouts closed.instantiate fills)."""
    rows, cols, classes = spaces(value)
    sym = writer_model(value)

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
    for name, tab in ([(f"layer {li + 1} head {hi + 1} W_QK", x) for (li, hi), x in t.qk.items()]
                      + [(f"layer {li + 1} head {hi + 1} W_V", x) for (li, hi), x in t.v.items()] + [("W_O", t.o)]):
        for (r, c, p), v in tab.items():
            if not v.is_ground:
                out.append(f"{name} ({r}, {c}{', ' + p if p else ''}) = {v.as_expr()}")
    return out
