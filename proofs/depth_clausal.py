"""Clausal refutations of B(L, H): a SAT solver over score comparisons, with Farkas lemmas (untrusted).

The search behind version-3 certificates (proofs/check_clausal.py has the semantics and the
check).  The atoms are score comparisons g(l, h, p, i, a, b) (layer-1 ones shared between points
through their (token, position) pairs, so comparisons repeat across points) and maximal-set
memberships s(l, h, p, i, j); the base clauses say what a preorder and its maximal set are.
CaDiCaL (python-sat) proposes a complete assignment; HiGHS then looks, head by head (first per
layer-1 query type and per point, then the whole head) and for the read-out, for a Farkas vector
of the linear facts the assignment implies.  Each one found is re-solved exactly on its support
(python-flint) and added as a lemma: the clause "not all of these facts", with its vector.  When
the solver finds no assignment, a fresh solver re-derives UNSAT from the base clauses and the
lemmas with proof logging; its DRUP steps are the certificate's steps.  The certificate is
re-checked by proofs/check_depth.py before it is returned.

An assignment that every LP accepts is a float model of the listed points' selections: the search
then adds the next points in the fixed order (ds.order_points) and goes on.  Budgets are work:
rounds (one solver call and its LPs).  Seconds are only a safety stop.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations, permutations

import numpy as np
import scipy.sparse as sp

from depthcert.proofs import check_depth as cd
from depthcert.proofs import depth_exact as dx
from depthcert.proofs import depth_search as ds

FIRST_POINTS = 8  # points in the first round; each round whose assignment survives adds as many more
MAX_CLAUSES = 2_000_000  # base clauses; a search that would pass it stops ("too large") before adding the point


@dataclass
class ClausalWork:
    rounds: int = 0
    lps: int = 0
    lemmas: int = 0
    points: int = 0
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class ClausalOutcome:
    status: str  # "refuted" | "budget" | "safety stop" | "too large" | "fits" (every point's selections fit: not realised)
    certificate: dict | None
    work: ClausalWork
    check_message: str = ""
    selections: dict | None = None  # "fits": (layer, head, tokens, query position) -> the maximal set


class _Encoding:
    """Atoms (stable ids as points are added) and base clauses of B(L, H) on a list of points."""

    def __init__(self, layers, heads, causal):
        self.layers, self.heads, self.causal = layers, heads, causal
        self.points = []
        self.ids = {}  # atom name -> id
        self.json = []  # id - 1 -> the certificate's atom
        self.clauses = []

    def _atom(self, name, as_json):
        got = self.ids.get(name)
        if got is None:
            got = self.ids[name] = len(self.json) + 1
            self.json.append(as_json)
        return got

    def keys(self, p, i):
        n = len(self.points[p][0])
        return list(range(i + 1)) if self.causal else list(range(n))

    def queries(self, p, l):
        n = len(self.points[p][0])
        return range(n) if l < self.layers else [n - 1]

    def g(self, l, h, p, i, a, b):
        toks = self.points[p][0]
        if l == 1:  # a layer-1 score is a function of the three (token, position) pairs
            name = ("g", l, h, (toks[i], i), (toks[a], a), (toks[b], b))
        else:
            name = ("g", l, h, p, i, a, b)
        return self._atom(name, ["g", l, h, p, i, a, b])

    def s(self, l, h, p, i, j):
        return self._atom(("s", l, h, p, i, j), ["s", l, h, p, i, j])

    def add_point(self, point):
        p = len(self.points)
        self.points.append(point)
        seen = set()
        for l in range(1, self.layers + 1):
            for h in range(self.heads):
                for i in self.queries(p, l):
                    K = self.keys(p, i)
                    g = {(a, b): self.g(l, h, p, i, a, b) for a in K for b in K if a != b}
                    out = []
                    for j in K:
                        sj = self.s(l, h, p, i, j)
                        others = [g[j, b] for b in K if b != j]
                        out += [[-sj, x] for x in others]
                        out.append([sj] + [-x for x in others])
                    out.append([self.s(l, h, p, i, j) for j in K])
                    out += [[g[a, b], g[b, a]] for a, b in combinations(K, 2)]
                    out += [[-g[a, b], -g[b, c], g[a, c]] for a, b, c in permutations(K, 3)]
                    for cl in out:
                        t = tuple(sorted(cl))
                        if t not in seen:
                            seen.add(t)
                            self.clauses.append(cl)
        return p


class _Theory:
    """The linear facts of one complete assignment, and the Farkas lemmas they contradict."""

    def __init__(self, enc, model, work):
        self.enc, self.work = enc, work
        self.true = model
        self.sets = {}
        for name, k in enc.ids.items():
            if name[0] == "s" and k in model:
                self.sets.setdefault(name[1:5], []).append(name[5])
        self.vmemo, self.dmemo = {}, {}

    def vector(self, l, p, i):
        got = self.vmemo.get((l, p, i))
        if got is None:
            if l == 0:
                tok = self.enc.points[p][0][i]
                got = {("t", tok): Fraction(1), ("p", i): Fraction(1)}
            else:
                got = dict(self.vector(l - 1, p, i))
                for h in range(self.enc.heads):
                    S = sorted(self.sets[(l, h, p, i)])
                    for j in S:
                        for c, x in self.vector(l - 1, p, j).items():
                            got[(l, h) + c] = got.get((l, h) + c, 0) + x / len(S)
            self.vmemo[(l, p, i)] = got
        return got

    def deps(self, l, p, i):
        """The "s" literals that determine position i's vector after layer l."""
        got = self.dmemo.get((l, p, i))
        if got is None:
            got = set()
            if l > 0:
                got |= self.deps(l - 1, p, i)
                for h in range(self.enc.heads):
                    S = self.sets[(l, h, p, i)]
                    for j in self.enc.keys(p, i):
                        k = self.enc.ids[("s", l, h, p, i, j)]
                        got.add(k if j in S else -k)
                    for j in S:
                        got |= self.deps(l - 1, p, j)
            self.dmemo[(l, p, i)] = frozenset(got)
        return got

    def head_facts(self, l, h):
        """[(group, row, rhs, fact literal, dependency literals)] of head (l, h)."""
        out = []
        for name, k in self.enc.ids.items():
            if name[0] != "g" or name[1] != l or name[2] != h:
                continue
            _, _, _, p, i, a, b = self.enc.json[k - 1]
            fact = k if k in self.true else -k
            if fact < 0:
                a, b = b, a
            vq, va, vb = self.vector(l - 1, p, i), self.vector(l - 1, p, a), self.vector(l - 1, p, b)
            row = {}
            for c in sorted(set(va) | set(vb), key=repr):  # a fixed order: the LP's columns follow it
                d = va.get(c, 0) - vb.get(c, 0)
                if d:
                    for cq, xq in vq.items():
                        row[(c, cq)] = row.get((c, cq), 0) + d * xq
            deps = frozenset() if l == 1 else self.deps(l - 1, p, i) | self.deps(l - 1, p, a) | self.deps(l - 1, p, b)
            group = name[3] if l == 1 else p  # the query type at layer 1, the point above
            out.append((group, row, Fraction(0 if fact > 0 else 1), fact, deps))
        return out

    def readout_facts(self):
        labels = sorted({lab for _, lab in self.enc.points})
        L = self.enc.layers
        out = []
        for p, (toks, lab) in enumerate(self.enc.points):
            q = len(toks) - 1
            z = self.vector(L, p, q)
            deps = self.deps(L, p, q)
            for c in labels:
                if c != lab:
                    row = {}
                    for coord, x in z.items():
                        row[(lab, coord)] = x
                        row[(c, coord)] = -x
                    out.append(((p, c), row, Fraction(1), None, deps))
        return out

    def farkas(self, facts):
        """An exact Farkas vector {fact index: y} of the facts, or None (HiGHS finds none)."""
        if not any(f[2] for f in facts):
            return None
        coords = {}
        for f in facts:
            for c in f[1]:
                coords.setdefault(c, len(coords))
        I, J, V = [], [], []
        for k, f in enumerate(facts):
            for c, x in f[1].items():
                I.append(coords[c]); J.append(k); V.append(float(x))
            if f[2]:
                I.append(len(coords)); J.append(k); V.append(float(f[2]))
        A = sp.csc_matrix((V, (I, J)), shape=(len(coords) + 1, len(facts)))
        b = np.zeros(len(coords) + 1)
        b[-1] = 1.0
        self.work.lps += 1
        x = ds._feasible_point(A, b)
        if x is None:
            return None
        support = [k for k in range(len(facts)) if x[k] > 1e-9]
        sol = dx._exact_solve([(facts[k][1], 1, bool(facts[k][2])) for k in support], list(coords))
        if sol is None:
            return None
        y = {k: v for k, v in zip(support, sol) if v}
        total, pos = {}, Fraction(0)
        for k, v in y.items():
            pos += v * facts[k][2]
            for c, x_ in facts[k][1].items():
                total[c] = total.get(c, 0) + v * x_
        if pos <= 0 or any(total.values()):
            return None
        return y


def _weight(*key):
    """A fixed pseudo-random weight in [-1, 1) for a matrix entry (the same in every process)."""
    return zlib.crc32(repr(key).encode()) / 2 ** 31 - 1


def _phases(enc):
    """The atoms' values under one fixed generic model (pseudo-random score matrices): the
    solver's preferred polarities, so that its first assignments are realisable ones.  Only a
    search heuristic: nothing is claimed of this model."""
    vec = enc.__dict__.setdefault("_phase_vectors", {})  # kept between calls: the model is fixed
    value = enc.__dict__.setdefault("_phase_values", {})

    def vector(l, p, i):
        got = vec.get((l, p, i))
        if got is None:
            if l == 0:
                got = {("t", enc.points[p][0][i]): 1.0, ("p", i): 1.0}
            else:
                got = dict(vector(l - 1, p, i))
                for h in range(enc.heads):
                    S = sel(l, h, p, i)
                    for j in S:
                        for c, x in vector(l - 1, p, j).items():
                            got[(l, h) + c] = got.get((l, h) + c, 0.0) + x / len(S)
            vec[(l, p, i)] = got
        return got

    def score(l, h, p, i, j):
        vq, vk = vector(l - 1, p, i), vector(l - 1, p, j)
        return sum(xk * xq * _weight(l, h, ck, cq) for ck, xk in sorted(vk.items(), key=repr)
                   for cq, xq in sorted(vq.items(), key=repr))

    def sel(l, h, p, i):
        sc = {j: score(l, h, p, i, j) for j in enc.keys(p, i)}
        top = max(sc.values())
        return [j for j in sorted(sc) if sc[j] == top]

    for name, k in enc.ids.items():
        if k in value:
            continue
        if name[0] == "s":
            _, l, h, p, i, j = name
            value[k] = k if j in sel(l, h, p, i) else -k
        else:
            _, l, h, p, i, a, b = enc.json[k - 1]
            value[k] = k if score(l, h, p, i, a) >= score(l, h, p, i, b) else -k
    return [value[k] for k in enc.ids.values()]


def _lemma_head(l, h, facts, y):
    lits = []
    for k in sorted(y):
        lits.append(facts[k][3])
    extra = sorted({d for k in y for d in facts[k][4]} - set(lits), key=abs)
    clause = [-x for x in lits] + [-d for d in extra]
    ys = [[n, ds._q(y[k])] for n, k in enumerate(sorted(y))]
    return {"clause": clause, "head": {"layer": l, "head": h, "y": ys}}


def _lemma_readout(facts, y):
    deps = sorted({d for k in y for d in facts[k][4]}, key=abs)
    return {"clause": [-d for d in deps],
            "readout": [[facts[k][0][0], facts[k][0][1], ds._q(y[k])] for k in sorted(y)]}


def _conflicts(enc, model, work):
    """The lemmas one complete assignment violates (an empty list: every LP is feasible)."""
    th = _Theory(enc, model, work)
    for l in range(1, enc.layers + 1):
        for h in range(enc.heads):
            facts = th.head_facts(l, h)
            groups = {}
            for k, f in enumerate(facts):
                groups.setdefault(f[0], []).append(k)
            found = []
            for g in sorted(groups, key=repr):
                sub = [facts[k] for k in groups[g]]
                y = th.farkas(sub)
                if y is not None:
                    found.append(_lemma_head(l, h, sub, y))
            if not found:
                y = th.farkas(facts)
                if y is not None:
                    found.append(_lemma_head(l, h, facts, y))
            if found:
                return found
    facts = th.readout_facts()
    y = th.farkas(facts)
    return [] if y is None else [_lemma_readout(facts, y)]


def refute(points, layers, heads, causal, task, max_rounds, max_seconds=None, clock=time.perf_counter,
           first=FIRST_POINTS):
    """Search a version-3 certificate that no model of B(layers, heads) classifies the points."""
    from pysat.solvers import Solver

    work = ClausalWork()
    order = [points[k] for k in ds.order_points(points)]
    enc = _Encoding(layers, heads, causal)
    lemmas = []
    t0 = clock()
    added = 0
    solver = Solver(name="cadical195")

    def add_points(m):
        """Add up to m points; False if the encoding would pass MAX_CLAUSES (nothing is added then)."""
        nonlocal added
        pts = order[added:added + m]
        if pts and len(enc.clauses) + sum(_clause_bound(layers, heads, len(t)) for t, _ in pts) > MAX_CLAUSES:
            return False
        start = len(enc.clauses)
        for pt in pts:
            enc.add_point(pt)
        added += len(pts)
        work.points = added
        for cl in enc.clauses[start:]:
            solver.add_clause(cl)
        solver.set_phases(_phases(enc))
        return True

    try:
        if not add_points(first):
            return ClausalOutcome("too large", None, work)
        while True:
            if work.rounds >= max_rounds:
                return ClausalOutcome("budget", None, work)
            if max_seconds is not None and clock() - t0 > max_seconds:
                return ClausalOutcome("safety stop", None, work)
            work.rounds += 1
            if not solver.solve():
                cert, msg = _certificate(enc, lemmas, task)
                return ClausalOutcome("refuted", cert, work, msg)
            model = {x for x in solver.get_model() if x > 0}
            found = _conflicts(enc, model, work)
            if not found:
                if added >= len(order):
                    sel = {}
                    for name, k in enc.ids.items():
                        if name[0] == "s" and k in model:
                            _, l, h, p, i, j = name
                            sel.setdefault((l, h, enc.points[p][0], i), []).append(j)
                    return ClausalOutcome("fits", None, work, selections={k: sorted(v) for k, v in sel.items()})
                if not add_points(first):
                    return ClausalOutcome("too large", None, work)
                continue
            for lem in found:
                lemmas.append(lem)
                solver.add_clause(lem["clause"])
            work.lemmas = len(lemmas)
    finally:
        solver.delete()


def _clause_bound(layers, heads, n):
    """An upper bound on one point's base clauses (before sharing): per query, n^2 definitions,
    one non-empty clause, n^2 totality and n^3 transitivity clauses."""
    return layers * heads * n * (2 * n * n + 1 + n ** 3)


def _certificate(enc, lemmas, task):
    from pysat.solvers import Solver

    with Solver(name="cadical195", with_proof=True, bootstrap_with=enc.clauses + [l["clause"] for l in lemmas]) as s:
        if s.solve():
            raise RuntimeError("the clauses and lemmas are satisfiable: the search's UNSAT did not replay")
        raw = s.get_proof()
    steps = []
    for line in raw:
        parts = line.split()
        if not parts or parts[0] == "d":
            continue
        nums = [int(x) for x in parts]
        if nums[-1] != 0:
            raise RuntimeError("a proof line without its closing 0")
        steps.append(nums[:-1])
    if not steps or steps[-1] != []:
        steps.append([])
    cert = {"format": cd.FORMAT, "version": 3,
            "task": task, "layers": enc.layers, "heads": enc.heads, "causal": enc.causal,
            "points": [{"tokens": list(t), "label": lab} for t, lab in enc.points],
            "proof": {"atoms": enc.json, "lemmas": lemmas, "steps": steps}}
    ok, msg = cd.check(cert)
    if not ok:
        raise RuntimeError("the clausal certificate does not re-check: " + msg)
    return cert, msg
