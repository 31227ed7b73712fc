"""Realise a candidate of R(L, H) as a hardmax transformer with bilinear scores (docs/depth.md).

The residual stream is the vector of proofs/check_depth.py laid out in rows: token one-hots, position
one-hots, then per layer l and head h a block that copies the whole stream of layer l-1 (W_V is a
copy times the head count, undoing the layer's 1/m).  For each head the facts of the candidate
("these keys tie, those are strictly below") are linear constraints on W_QK:
(h_a - h_b)^T W_QK h_q = 0 or >= 1.  HiGHS finds W_QK; the tie equations are then solved exactly
(python-flint rref: pivot entries from the rounded free entries) and every constraint is checked
exactly.  The realised attention is run on EVERY dataset point in exact rationals, the read-out is
an LP over all points' last vectors, rounded and checked exactly, and the finished weights file
is verified by checkers.exhaustive.verify (the code behind `verify-construction --weights`).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from depthcert.proofs import check_depth as cd


@dataclass(frozen=True)
class Realised:
    """A weights object (depthcert.weights v2) whose attention reproduces the candidate."""

    weights: dict
    rows: int


@dataclass(frozen=True)
class NotRealised:
    reason: str
    grow: tuple[int, ...] = ()  # dataset points whose last vectors the read-out cannot separate


class Layout:
    def __init__(self, vocab, max_length, layers, heads):
        self.V, self.n, self.layers, self.heads = len(vocab), max_length, layers, heads
        self.vocab = tuple(vocab)
        self.tok = {t: i for i, t in enumerate(vocab)}
        self.d = [self.V + max_length]
        for _ in range(layers):
            self.d.append(self.d[-1] * (1 + heads))

    def offset(self, l, h):
        return self.d[l - 1] * (1 + h)

    def row(self, c):
        if c[0] == "t":
            return self.tok[c[1]]
        if c[0] == "p":
            return self.V + c[1]
        l, h, inner = c
        return self.offset(l, h) + self.row(inner)

    def rows_of(self, vec):
        return {self.row(c): v for c, v in vec.items()}

    def describe(self, r):
        """(path of (layer, head) blocks, "t" or "p", token or position) of row r."""
        path = []
        while r >= self.d[0]:
            l = next(l for l in range(1, self.layers + 1) if r < self.d[l])
            h = (r - self.d[l - 1]) // self.d[l - 1]
            path.append((l, h))
            r -= self.offset(l, h)
        if r < self.V:
            return tuple(path), "t", self.vocab[r]
        return tuple(path), "p", r - self.V


class Orbits:
    """Variables of an equivariant model: a weight indexed by (row, row) or (class, row) is shared
    by its orbit under the task's token groups (each group's full symmetric group; a class that is
    a token moves with it).  An equivariant model is right on a permuted point iff it is right on
    the point, which `verify --symmetry auto` proves again on the weights."""

    def __init__(self, layout, groups):
        self.layout = layout
        self.group_of = {t: g for g, toks in enumerate(groups) for t in toks}
        self.desc = {}

    def _d(self, r):
        got = self.desc.get(r)
        if got is None:
            got = self.desc[r] = self.layout.describe(r)
        return got

    def key(self, *items):
        """items: ("row", r) or ("class", c); the canonical pattern of the tuple."""
        seen = {}
        out = []
        for kind, v in items:
            if kind == "row":
                path, what, val = self._d(v)
            else:
                path, what, val = (), "c", v
            if what in ("t", "c") and val in self.group_of:
                g = self.group_of[val]
                idx = seen.setdefault((g, val), sum(1 for (gg, _) in seen if gg == g))
                val = ("g", g, idx)
            out.append((kind, path, "t" if what == "c" else what, val))
        return tuple(out)


def _to_fraction(x: float, den: int = 1 << 12) -> Fraction:
    return Fraction(round(x * den), den)


def _solve_exact(eq_rows, ge_rows, nvar, bound=64.0):
    """An exact w with every eq row . w = 0 and every ge row . w > 0, or None.
    Rows are {var: Fraction}."""
    from depthcert.proofs.dependence import _run_lp

    if nvar == 0:
        return [] if not ge_rows else None
    rows, cols, vals = [], [], []
    for r, row in enumerate(eq_rows + ge_rows):
        for c, v in row.items():
            rows.append(r)
            cols.append(c)
            vals.append(float(v))
    m = len(eq_rows) + len(ge_rows)
    A = sp.csc_matrix((vals, (rows, cols)), shape=(m, nvar))
    lo = np.array([0.0] * len(eq_rows) + [1.0] * len(ge_rows))
    hi = np.array([0.0] * len(eq_rows) + [np.inf] * len(ge_rows))
    st, x = _run_lp(np.zeros(nvar), A, lo, hi, np.full(nvar, -bound), np.full(nvar, bound))
    if st != "optimal":
        return None
    w = [_to_fraction(v) for v in x]
    if eq_rows:
        import flint

        used = sorted({c for row in eq_rows for c in row})
        ucol = {c: k for k, c in enumerate(used)}
        M = flint.fmpq_mat(len(eq_rows), len(used))
        for r, row in enumerate(eq_rows):
            for c, v in row.items():
                M[r, ucol[c]] = flint.fmpq(v.numerator, v.denominator)
        R, rank = M.rref()
        for r in range(rank):
            piv = next(k for k in range(len(used)) if R[r, k] != 0)
            val = Fraction(0)
            for k in range(piv + 1, len(used)):
                if R[r, k] != 0:
                    q = R[r, k]
                    val -= Fraction(int(q.p), int(q.q)) * w[used[k]]
            w[used[piv]] = val
    for row in eq_rows:
        if sum(v * w[c] for c, v in row.items()) != 0:
            return None
    for row in ge_rows:
        if sum(v * w[c] for c, v in row.items()) <= 0:
            return None
    return w


def _head_rows(facts, layout, memo, l, h, orbits=None):
    """(variables, tie rows, strict rows) of head h of layer l, or None if a strict fact has
    equal key vectors."""
    var = {}
    eq, ge = [], []
    for key, edges in facts.edges.items():
        if key[0] != l or key[1] != h:
            continue
        q = layout.rows_of(cd.vector(key[2], memo))
        seen = set()
        for a, b, strict in cd.sorted_edges(edges):
            if not strict and ((b, a) in seen):
                continue
            seen.add((a, b))
            va, vb = layout.rows_of(cd.vector(a, memo)), layout.rows_of(cd.vector(b, memo))
            diff = {r: va.get(r, 0) - vb.get(r, 0) for r in set(va) | set(vb)}
            row = {}
            # sorted: the variables' numbering (and so the LP's vertex) must not follow the order in
            # which a vector's dict was filled, which for version-2 nodes follows string hashing
            for r, dv in sorted(diff.items()):
                if not dv:
                    continue
                for s, qv in sorted(q.items()):
                    k = var.setdefault(orbits.key(("row", r), ("row", s)) if orbits else (r, s), len(var))
                    row[k] = row.get(k, 0) + dv * qv
            row = {k: v for k, v in row.items() if v}
            if strict:
                if not row:
                    return None
                ge.append(row)
            elif row:
                eq.append(row)
    return var, eq, ge


def head_feasible(facts, layout, memo, l, h, orbits=None) -> bool:
    """Whether HiGHS finds a W_QK for the facts of head h of layer l (a search filter only)."""
    from depthcert.proofs.dependence import _run_lp

    got = _head_rows(facts, layout, memo, l, h, orbits)
    if got is None:
        return False
    var, eq, ge = got
    if not var:
        return not ge
    rows, cols, vals = [], [], []
    for r, row in enumerate(eq + ge):
        for c, v in row.items():
            rows.append(r)
            cols.append(c)
            vals.append(float(v))
    m = len(eq) + len(ge)
    A = sp.csc_matrix((vals, (rows, cols)), shape=(m, len(var)))
    lo = np.array([0.0] * len(eq) + [1.0] * len(ge))
    hi = np.array([0.0] * len(eq) + [np.inf] * len(ge))
    st, _ = _run_lp(np.zeros(len(var)), A, lo, hi, np.full(len(var), -64.0), np.full(len(var), 64.0))
    return st == "optimal"


def _head_matrix(facts, layout, memo, l, h, orbits=None):
    """W_QK of head h of layer l (dict (key row, query row) -> Fraction) from the facts, or None."""
    got = _head_rows(facts, layout, memo, l, h, orbits)
    if got is None:
        return None
    var, eq, ge = got
    w = _solve_exact(eq, ge, len(var))
    if w is None:
        return None
    if orbits is None:
        return {rs: w[k] for rs, k in var.items() if w[k]}
    d = layout.d[l - 1]
    out = {}
    for r in range(d):
        for s in range(d):
            k = var.get(orbits.key(("row", r), ("row", s)))
            if k is not None and w[k]:
                out[(r, s)] = w[k]
    return out


def run_attention(tokens, Ws, layout, layers, heads, causal):
    """Exact residual columns (dict row -> Fraction) of every position after the attention layers."""
    n = len(tokens)
    H = [{layout.tok[t]: Fraction(1), layout.V + j: Fraction(1)} for j, t in enumerate(tokens)]
    for l in range(1, layers + 1):
        new = [dict(col) for col in H]
        for h in range(heads):
            W = Ws[(l, h)]
            by_s = {}
            for (r, s), v in W.items():
                by_s.setdefault(s, []).append((r, v))
            for i in range(n):
                keys = range(i + 1) if causal else range(n)
                u = {}
                for s, qv in H[i].items():
                    for r, v in by_s.get(s, ()):
                        u[r] = u.get(r, 0) + qv * v
                scores = [sum(u.get(r, 0) * kv for r, kv in H[k].items()) for k in keys]
                top = max(scores)
                sel = [k for k, sc in zip(keys, scores) if sc == top]
                off = layout.offset(l, h)
                share = Fraction(1, len(sel))
                for k in sel:
                    for r, v in H[k].items():
                        new[i][off + r] = new[i].get(off + r, 0) + share * v
        H = new
    return H


def readout(feats, labels, classes, nrows, orbits=None, exact=True):
    """W_O rows (dict class -> {row: Fraction}) with every margin > 0 exactly, or None."""
    from depthcert.proofs.dependence import _run_lp

    cls = list(classes)
    used = sorted({r for f in feats for r in f})
    if orbits is None:
        col = {(c, r): k for k, (c, r) in enumerate((c, r) for c in cls for r in used)}
    else:
        keys = {}
        col = {(c, r): keys.setdefault(orbits.key(("class", c), ("row", r)), len(keys)) for c in cls for r in used}
    rows, cols, vals = [], [], []
    nr = 0
    for f, y in zip(feats, labels):
        for c in cls:
            if c == y:
                continue
            for r, v in f.items():
                rows += [nr, nr]
                cols += [col[(y, r)], col[(c, r)]]
                vals += [float(v), -float(v)]
            nr += 1
    nv = max(col.values()) + 1
    A = sp.csc_matrix((vals, (rows, cols)), shape=(nr, nv))
    A.sum_duplicates()
    st, x = _run_lp(np.zeros(nv), A, np.ones(nr), np.full(nr, np.inf), np.full(nv, -1e4), np.full(nv, 1e4))
    if st != "optimal":
        return None
    if not exact:
        return {}
    W = {c: {r: _to_fraction(x[col[(c, r)]]) for r in used} for c in cls}
    for f, y in zip(feats, labels):
        sy = sum(W[y].get(r, 0) * v for r, v in f.items())
        for c in cls:
            if c != y and sum(W[c].get(r, 0) * v for r, v in f.items()) >= sy:
                return None
    return W


def _fmt(v: Fraction):
    return int(v) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def realise(facts, all_points, layers, heads, causal, vocab, classes, max_length, outputs="last", name="find-depth",
            groups=()):
    """Realised(weights) or NotRealised(reason, grow).  groups: the task's token symmetry groups
    (the model is then built equivariant)."""
    from depthcert.proofs.depth_search import exact_farkas

    layout = Layout(vocab, max_length, layers, heads)
    orbits = Orbits(layout, groups) if groups else None
    memo = {}
    Ws = {}
    for l in range(1, layers + 1):
        for h in range(heads):
            W = _head_matrix(facts, layout, memo, l, h, orbits)
            if W is None:
                return NotRealised(f"the orderings of layer {l} head {h + 1} have no bilinear score "
                                   "(the tie equations and strict inequalities on W_QK are infeasible)")
            Ws[(l, h)] = W
    feats = []
    for toks, _ in all_points:
        feats.append(run_attention(toks, Ws, layout, layers, heads, causal)[-1])
    labels = [y for _, y in all_points]
    W_O = readout(feats, labels, classes, layout.d[-1], orbits)
    if W_O is None:
        mu = exact_farkas([{("r", r): v for r, v in f.items()} for f in feats], labels) if len(feats) <= 5000 else None
        grow = tuple(sorted({i for i, _ in mu})) if mu else ()
        return NotRealised("the realised attention's last vectors are not linearly separable on the dataset", grow)
    d = layout.d[-1]
    layer_objs = []
    for l in range(1, layers + 1):
        hs = []
        for h in range(heads):
            QK = [[0] * d for _ in range(d)]
            for (r, s), v in Ws[(l, h)].items():
                QK[r][s] = _fmt(v)
            Vm = [[0] * d for _ in range(d)]
            off = layout.offset(l, h)
            for r in range(layout.d[l - 1]):
                Vm[off + r][r] = heads
            hs.append({"W_QK": QK, "W_V": Vm, "attention": "hardmax"})
        layer_objs.append({"heads": hs, "causal": causal})
    WO = [[_fmt(W_O[c].get(r, Fraction(0))) for r in range(d)] for c in classes]
    obj = {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab),
           "max_length": max_length, "classes": list(classes), "layers": layer_objs, "W_O": WO}
    if outputs != "last":
        obj["outputs"] = outputs
    return Realised(obj, d)
