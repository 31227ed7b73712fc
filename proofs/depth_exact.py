"""The exact class: minimal depth of bilinear hardmax attention, searched with head Farkas leaves.

The class B(L, H) (docs/depth.md, section 1): hardmax attention-only transformers with L layers of H
heads, one-hot [X; P] inputs, linear values, a linear read-out at the last position, any width.
Given the maximal sets selected so far, every stream vector is a linear image of the "vector" of
proofs/check_depth.py, so head (l, h)'s score is v_k^T M v_q for one matrix M per head, and the facts
on a path are linear in M: (v_a - v_b)^T M v_q > 0 for a key strictly below, = 0 for keys that tie.
Facts are keyed by vectors (equal query vectors share M's rows; equal key vectors tie).

The search is the case split of proofs/depth_search.py on the exact Evaluator (version-2
certificates), with one more kind of leaf: after a split adds facts to head (l, h), HiGHS looks for
a Farkas combination of that head's facts; an exact re-solve of its support (python-flint) that
cancels exactly closes the branch with a `head_farkas` leaf.  A branch on which every point of the
subset is completed, every head is feasible (by HiGHS: a search answer) and the read-out separates
is a candidate, realised and verified on every point by the caller (proofs/depth.py).

Budgets are work: nodes and LPs (`WorkLimit`).  Seconds are only a safety stop (`TimeStop`), and
an outcome it ends says that it depends on the machine.  Every certificate is re-checked by
proofs/check_depth.py before it is returned.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from depthcert.proofs import check_depth as cd
from depthcert.proofs import depth_search as ds


WorkLimit = ds.WorkLimit  # the node budget: a deterministic stop
TimeStop = ds.TimeStop  # the safety stop in seconds: an outcome it ends depends on the machine


@dataclass
class Work:
    """Work units spent: search nodes and LPs."""

    nodes: int = 0
    lps: int = 0
    head_leaves: int = 0
    readout_leaves: int = 0


@dataclass(frozen=True)
class Candidate:
    facts: cd.Facts


_ROWS = {}  # (query node, key a, key b) -> the row (v_a - v_b) (x) v_q: nodes are interned vectors


def _row(vq_node, a, b):
    k = (vq_node, a, b)
    got = _ROWS.get(k)
    if got is None:
        if len(_ROWS) > 1_000_000:
            _ROWS.clear()
        vq, va, vb = dict(vq_node), dict(a), dict(b)
        row = {}
        for c in set(va) | set(vb):
            d = va.get(c, 0) - vb.get(c, 0)
            if d:
                for cq, x in vq.items():
                    row[(c, cq)] = row.get((c, cq), 0) + d * x
        got = _ROWS[k] = {kk: v for kk, v in row.items() if v}
    return got


def _rows_of_head(facts, prov, l, h):
    """The linear rows of head (l, h): [(coefficient vector {(key coord, query coord): value},
    strict, provenance)] from the edges of the facts (a tie is one "=" row per pair)."""
    out = []
    for key, edges in facts.edges.items():
        if key[0] != l or key[1] != h:
            continue
        seen = set()
        for a, b, strict in cd.sorted_edges(edges):
            if not strict:
                if (b, a) in seen or (b, a, False) not in edges:
                    continue
                seen.add((a, b))
            where = prov.get((key, a, b, strict))
            if where is None:
                continue
            out.append((_row(key[2], a, b), strict, where))
    return out


def head_farkas(facts, prov, l, h, work: Work):
    """Rows [point, query position, key a, key b, relation, coefficient] of an exact Farkas
    combination of head (l, h)'s facts, or None (the head is feasible as far as HiGHS can tell)."""
    rows = _rows_of_head(facts, prov, l, h)
    strict_rows = [r for r in rows if r[1]]
    if not strict_rows:
        return None
    for k, (row, strict, where) in enumerate(rows):  # a strict fact between equal vectors
        if strict and not row:
            return [_leaf_row(where, ">", Fraction(1))]
    coords = sorted({c for row, _, _ in rows for c in row}, key=repr)
    cidx = {c: i for i, c in enumerate(coords)}
    cols = []  # (row index, sign): y_r >= 0 for strict rows, z = z+ - z- for ties
    for k, (row, strict, _) in enumerate(rows):
        cols.append((k, 1))
        if not strict:
            cols.append((k, -1))
    R = len(coords) + 1
    r_idx, c_idx, vals = [], [], []
    for j, (k, s) in enumerate(cols):
        row, strict, _ = rows[k]
        for c, v in row.items():
            r_idx.append(cidx[c])
            c_idx.append(j)
            vals.append(s * float(v))
        if strict:
            r_idx.append(len(coords))
            c_idx.append(j)
            vals.append(1.0)
    A = sp.csc_matrix((vals, (r_idx, c_idx)), shape=(R, len(cols)))
    b = np.zeros(R)
    b[-1] = 1.0
    work.lps += 1
    x = ds._feasible_point(A, b)
    if x is None:
        return None
    support = [j for j in range(len(cols)) if x[j] > 1e-9]
    sol = _exact_solve([(rows[cols[j][0]][0], cols[j][1], rows[cols[j][0]][1]) for j in support], coords)
    if sol is None:
        return None
    coef = {}
    for j, v in zip(support, sol):
        k, s = cols[j]
        coef[k] = coef.get(k, 0) + s * v
    # exact check (the checker does it again)
    total = {}
    pos = Fraction(0)
    for k, v in coef.items():
        row, strict, _ = rows[k]
        if strict:
            if v < 0:
                return None
            pos += v
        for c, x_ in row.items():
            total[c] = total.get(c, 0) + v * x_
    if pos <= 0 or any(total.values()):
        return None
    return [_leaf_row(rows[k][2], ">" if rows[k][1] else "=", v) for k, v in sorted(coef.items()) if v]


def _leaf_row(where, rel, v):
    p, i, ja, jb = where
    return [p, i, ja, jb, rel, ds._q(v)]


def _exact_solve(columns, coords):
    """The exact solution x of sum_j x_j s_j c_j = 0, sum_(strict j) x_j = 1 on the given columns
    (unique at a simplex vertex), or None."""
    import flint

    cidx = {c: i for i, c in enumerate(coords)}
    n = len(columns)
    R = len(coords) + 1
    M = [[Fraction(0)] * (n + 1) for _ in range(R)]
    for j, (row, s, strict) in enumerate(columns):
        for c, v in row.items():
            M[cidx[c]][j] += s * v
        if strict:
            M[-1][j] = Fraction(1)
    M[-1][-1] = Fraction(1)
    rows = [r for r in M if any(r)]
    fm = flint.fmpq_mat(len(rows), n + 1, [flint.fmpq(v.numerator, v.denominator) for r in rows for v in r])
    rref, rank = fm.rref()
    sol = [Fraction(0)] * n
    for r in range(rank):
        piv = next(c for c in range(n + 1) if rref[r, c] != 0)
        if piv == n:
            return None
        if any(rref[r, c] != 0 for c in range(piv + 1, n)):
            return None
        q = rref[r, n]
        sol[piv] = Fraction(int(q.p), int(q.q))
    if any(v < 0 for v in sol):
        return None
    return sol


class ExactSearch:
    """Decide B(layers, heads) on the given points: ("refuted", tree) or ("candidate", Candidate)
    or ("unrealised", count).  accept(candidate) -> bool realises and verifies a candidate."""

    def __init__(self, points, layers, heads, causal, max_nodes, max_seconds=None, accept=None, progress=None,
                 window=3, clock=time.perf_counter, branch="maxset"):
        self.points = list(points)
        self.ev = cd.Evaluator(self.points, layers, heads, causal, exact=True)
        self.layers, self.heads, self.causal = layers, heads, causal
        self.max_nodes, self.max_seconds, self.clock = max_nodes, max_seconds, clock
        self.accept, self.progress, self.window = accept, progress, window
        self.branch = branch  # "compare" (three children per comparison) or "maxset" (one per maximal set)
        self.work = Work()
        self.order = ds.order_points(self.points)
        self.found = None
        self.rejected = 0

    def run(self):
        self.t0 = self.clock()
        tree = self._dfs(cd.Facts(), {}, [])
        if self.found is not None:
            return "candidate", self.found
        if tree is None:
            return "unrealised", self.rejected
        return "refuted", tree

    def _tick(self):
        ds.tick(self.work, self.max_nodes, self.max_seconds, self.t0, self.clock, self.progress)

    def _dfs(self, facts, prov, done):
        self._tick()
        sc = ds.scan(self.ev, self.order, self.points, facts, done, self.window)
        self.work.lps += sc.lps
        if sc.leaf is not None:
            self.work.readout_leaves += 1
            return sc.leaf
        done, best, looked = sc.done, sc.best, sc.looked
        if best is None:
            cand = Candidate(facts)
            if self.accept is None or self.accept(cand):
                self.found = cand
            else:
                self.rejected += 1
            return None
        p, l, h, i, subs, key, keyreps = best
        if self.branch == "compare":
            return self._compare(facts, prov, done, p, l, h, i, key, keyreps)
        if len(subs) > 1 or looked > 1:
            subs = list(cd.possible_maxsets(facts, key, keyreps))
        subs.sort(key=lambda sub: (len(sub), any(j >= i for j in sub), max(abs(i - j) for j in sub), sub))
        children = []
        open_branch = False
        for sub in subs:
            f2, prov2 = _add_maxset(facts, prov, key, keyreps, sub, p, i)
            fk = head_farkas(f2, prov2, l, h, self.work)
            if fk is not None:
                self.work.head_leaves += 1
                children.append({"max": sub, "node": {"head_farkas": {"layer": l, "head": h, "rows": fk}}})
                continue
            node = self._dfs(f2, prov2, done)
            if self.found is not None:
                return None
            if node is None:
                open_branch = True
                continue
            children.append({"max": sub, "node": node})
        if open_branch:
            return None
        return {"split": {"layer": l, "head": h, "point": p, "position": i}, "children": children}


    def _compare(self, facts, prov, done, p, l, h, i, key, keyreps):
        """A comparison split: two keys of the open selection that the facts neither order nor tie
        (the nearest to the query first); children >, =, < (docs/depth.md)."""
        ge, gt = facts.closure(key)
        nodes = list(keyreps.values())
        free = [j for j in sorted(keyreps, key=lambda j: (abs(i - j), j))
                if not any(keyreps[j] in gt.get(b, ()) for b in nodes)]
        pair = None
        for x in range(len(free)):
            for y in range(x + 1, len(free)):
                a, b = keyreps[free[x]], keyreps[free[y]]
                if not (b in ge.get(a, ()) and a in ge.get(b, ())):
                    pair = (free[x], free[y])
                    break
            if pair:
                break
        ja, jb = pair
        a, b = keyreps[ja], keyreps[jb]
        children = {}
        for rel in cd.RELATIONS:
            f2 = facts.relate(key, a, b, rel)
            prov2 = dict(prov)
            for e in ((a, b, True),) if rel == ">" else ((b, a, True),) if rel == "<" else ((a, b, False), (b, a, False)):
                prov2.setdefault((key,) + e, (p, i, ja, jb) if e[0] == a else (p, i, jb, ja))
            fk = head_farkas(f2, prov2, l, h, self.work)
            if fk is not None:
                self.work.head_leaves += 1
                children[rel] = {"head_farkas": {"layer": l, "head": h, "rows": fk}}
                continue
            node = self._dfs(f2, prov2, done)
            if self.found is not None or node is None:
                return None
            children[rel] = node
        return {"compare": {"layer": l, "head": h, "point": p, "position": i, "keys": [ja, jb]},
                "children": children}


def _add_maxset(facts, prov, key, keyreps, sub, p, i):
    """Facts of "positions `sub` are the maximal set" (proofs/check_depth.py Facts.add) and the
    provenance of each new edge: (point, query position, key position a, key position b)."""
    nodes = [keyreps[j] for j in sorted(sub)]
    f2 = facts.add(key, nodes, list(keyreps.values()))
    prov2 = dict(prov)
    pos = {}
    for j, node in keyreps.items():
        pos.setdefault(node, j)
    for a, b, strict in f2.edges[key]:
        k = (key, a, b, strict)
        if k not in prov2:
            prov2[k] = (p, i, pos[a], pos[b])
    return f2, prov2
