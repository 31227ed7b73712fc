"""Search for depth lower-bound certificates of R(L, H) (docs/depth.md): an untrusted case split.

A depth-first search over the maximal sets that the heads select (proofs/check_depth.py has the
class and the certificate format).  Points are completed one at a time; after each completion the
last-position vectors of the completed points are tested for linear separability (HiGHS on the
Farkas system, then an exact re-solve of its support in python-flint).  An inseparable set closes
the branch with a Farkas leaf; a branch on which every point is completed and the vectors are
separable is a candidate (returned with its facts, for the realisation in proofs/depth_realize.py).

The search is a search: every certificate it returns is re-checked by proofs/check_depth.py before
the tool prints it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from depthcert.checkers.errors import BadInput
from depthcert.proofs import check_depth as cd


class SearchLimit(Exception):
    """The search stopped at a limit; the subclass says which."""


class WorkLimit(SearchLimit):
    """The search used its node budget: a deterministic stop (the same on every machine)."""


class TimeStop(SearchLimit):
    """The safety stop in seconds: an outcome it ends depends on the machine."""


@dataclass(frozen=True)
class Candidate:
    """Facts on a path where every point's last vector is determined and the vectors separate."""

    facts: cd.Facts
    order: tuple[int, ...]


@dataclass
class SearchStats:
    nodes: int = 0
    leaves: int = 0
    lps: int = 0
    candidates: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def exact_farkas(feats: list[dict], labels: list[str]):
    """None if the vectors are linearly separable by label with margin 1 (by HiGHS; a search
    answer), else an exact Farkas vector {(i, class): Fraction >= 0}, checked exactly here."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        return None
    last = len(feats) - 1  # the newest point first meets an equal vector of another label
    for i in range(last):
        if labels[i] != labels[last] and feats[i] == feats[last]:
            return {(i, labels[last]): Fraction(1), (last, labels[i]): Fraction(1)}
    coords = sorted({c for f in feats for c in f}, key=repr)
    cidx = {c: k for k, c in enumerate(coords)}
    kidx = {c: k for k, c in enumerate(classes)}
    D = len(coords)
    cols, rows, vals, names = [], [], [], []
    for i, (f, y) in enumerate(zip(feats, labels)):
        for c in classes:
            if c == y:
                continue
            col = len(names)
            names.append((i, c))
            for coord, v in f.items():
                a = cidx[coord]
                rows += [kidx[y] * D + a, kidx[c] * D + a]
                cols += [col, col]
                vals += [float(v), -float(v)]
            rows.append(len(classes) * D)
            cols.append(col)
            vals.append(1.0)
    R = len(classes) * D + 1
    A = sp.csc_matrix((vals, (rows, cols)), shape=(R, len(names)))
    lo = np.zeros(R)
    lo[-1] = 1.0
    x = _feasible_point(A, lo)
    if x is None:
        return None
    support = [k for k in range(len(names)) if x[k] > 1e-9]
    mu = _exact_support(feats, labels, [names[k] for k in support], classes, coords)
    if mu is None:
        return None
    if not _farkas_holds(feats, labels, mu):
        raise RuntimeError("exact Farkas vector does not cancel")
    return mu


_HIGHS = []


def _feasible_point(A, b):
    """A vertex of {x >= 0 : A x = b} by HiGHS's simplex, or None (infeasible or not solved).
    One Highs object is reused: building one costs more than these small solves."""
    import highspy

    from depthcert.proofs.dependence import _quiet_highs

    if not _HIGHS:
        h = _quiet_highs()
        h.setOptionValue("solver", "simplex")
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("presolve", "off")
        _HIGHS.append(h)
    h = _HIGHS[0]
    A = sp.csc_matrix(A)
    A.sort_indices()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.zeros(A.shape[1])
    lp.col_lower_ = np.zeros(A.shape[1])
    lp.col_upper_ = np.full(A.shape[1], np.inf)
    lp.row_lower_ = np.asarray(b, dtype=np.float64)
    lp.row_upper_ = np.asarray(b, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = A.shape[1], A.shape[0]
    h.clearModel()
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.array(h.getSolution().col_value, dtype=np.float64)


def _exact_support(feats, labels, support, classes, coords):
    """The exact solution of the Farkas equations on the support (unique at a simplex vertex)."""
    import flint

    cidx = {c: k for k, c in enumerate(coords)}
    kidx = {c: k for k, c in enumerate(classes)}
    D = len(coords)
    R = len(classes) * D + 1
    M = [[Fraction(0)] * (len(support) + 1) for _ in range(R)]
    for col, (i, c) in enumerate(support):
        y = labels[i]
        for coord, v in feats[i].items():
            M[kidx[y] * D + cidx[coord]][col] += v
            M[kidx[c] * D + cidx[coord]][col] -= v
        M[-1][col] = Fraction(1)
    M[-1][-1] = Fraction(1)
    rows = [r for r in M if any(r)]
    fm = flint.fmpq_mat(len(rows), len(support) + 1, [flint.fmpq(v.numerator, v.denominator) for r in rows for v in r])
    rref, rank = fm.rref()
    # solve A mu = b: pivots must be unique columns < len(support)
    n = len(support)
    sol = [Fraction(0)] * n
    for r in range(rank):
        piv = next(c for c in range(n + 1) if rref[r, c] != 0)
        if piv == n:
            return None  # inconsistent
        if any(rref[r, c] != 0 for c in range(piv + 1, n)):
            return None  # not unique: not a vertex
        q = rref[r, n]
        sol[piv] = Fraction(int(q.p), int(q.q))
    if any(v < 0 for v in sol) or not any(sol):
        return None
    return {support[k]: sol[k] for k in range(n) if sol[k]}


def _farkas_holds(feats, labels, mu) -> bool:
    total = {}
    for (i, c), v in mu.items():
        if v < 0 or c == labels[i]:
            return False
        for coord, val in feats[i].items():
            for cls, s in ((labels[i], 1), (c, -1)):
                total[(cls, coord)] = total.get((cls, coord), 0) + s * v * val
    return all(v == 0 for v in total.values()) and any(mu.values())


def in_span(vecs: list[dict], v: dict) -> bool:
    """Whether v is a linear combination of vecs (exact ranks in python-flint)."""
    return _rank(vecs + [v]) == _rank(vecs)


def _rank(vecs):
    import flint

    if not vecs:
        return 0
    coords = sorted({c for f in vecs for c in f}, key=repr)
    idx = {c: k for k, c in enumerate(coords)}
    M = flint.fmpq_mat(len(vecs), len(coords))
    for i, f in enumerate(vecs):
        for c, val in f.items():
            M[i, idx[c]] = flint.fmpq(val.numerator, val.denominator)
    return M.rank()


def order_points(points: list[tuple[tuple[str, ...], str]]) -> list[int]:
    """A completion order that meets contradictions early: greedy, each next point the one
    nearest (Hamming, then index) to those chosen, preferring a label not yet chosen."""
    if not points:
        return []
    left = list(range(len(points)))
    order = [left.pop(0)]
    labels = {points[order[0]][1]}

    def dist(a, b):
        ta, tb = points[a][0], points[b][0]
        return sum(x != y for x, y in zip(ta, tb)) + abs(len(ta) - len(tb))

    while left:
        best = min(left, key=lambda j: (points[j][1] in labels, min(dist(j, o) for o in order), j))
        left.remove(best)
        order.append(best)
        labels.add(points[best][1])
    return order


@dataclass
class Scan:
    """What the facts on a path determine (see `scan`)."""

    done: list
    best: tuple | None = None  # (point, layer, head, position, maximal sets so far, key, key reps)
    looked: int = 0
    leaf: dict | None = None  # a read-out Farkas leaf
    pruned: bool = False  # the `separable` hook said no
    lps: int = 0


def scan(ev, order, points, facts, done, window, separable=None) -> Scan:
    """Complete the points the facts determine, in `order`: each completed point's last vector joins
    `done` and the read-out test (a Farkas leaf when the vectors are inseparable; `separable`, when
    given, replaces the test and may prune).  Of the next `window` open selections, `best` is the
    one with the fewest possible maximal sets (fail first)."""
    done = list(done)
    have = {p for p, _ in done}
    out = Scan(done)
    for p in order:
        if p in have:
            continue
        rep = ev.final(facts, p)
        if cd.is_need(rep):
            out.looked += 1
            if out.looked > window:
                continue
            _, l, h, i = rep
            key, keyreps = ev.split(facts, l, h, p, i)
            subs = []
            for sub in cd.possible_maxsets(facts, key, keyreps):
                subs.append(sub)
                if out.best is not None and len(subs) >= len(out.best[4]):
                    break
            if out.best is None or len(subs) < len(out.best[4]):
                out.best = (p, l, h, i, subs, key, keyreps)
            continue
        done.append((p, cd.vector(rep, ev.memo)))
        have.add(p)
        if separable is not None:
            out.lps += 1
            if not separable([(points[q], f) for q, f in done]):
                out.pruned = True
                return out
        elif len(done) >= 2 and in_span([f for _, f in done[:-1]], done[-1][1]):
            # a vector outside the span of the others can take any read-out value: only a
            # vector in their span can make a separable set inseparable
            out.lps += 1
            mu = exact_farkas([f for _, f in done], [points[q][1] for q, _ in done])
            if mu is not None:
                out.leaf = {"farkas": [[done[i][0], c, _q(v)] for (i, c), v in sorted(mu.items())]}
                return out
    return out


def tick(counter, max_nodes, max_seconds, t0, clock, progress) -> None:
    """Count one search node on `counter` (.nodes): WorkLimit past the node budget (the same on
    every machine), TimeStop past the safety stop in seconds (`clock` from `t0`; None: no stop)."""
    if counter.nodes >= max_nodes:
        raise WorkLimit(f"the search used its budget of {max_nodes:,} nodes")
    if max_seconds is not None and clock() - t0 > max_seconds:
        raise TimeStop("the safety stop (--max-seconds) was reached: a machine-dependent stop")
    counter.nodes += 1
    if progress is not None:
        progress.update(1)


class DepthSearch:
    """Decide R(layers, heads) on the given points by the case split of proofs/check_depth.py."""

    def __init__(self, points, layers: int, heads: int, causal: bool, max_nodes: int, max_seconds: float,
                 accept=None, progress=None, window: int = 3, filter=None, separable=None):
        self.points = list(points)
        self.ev = cd.Evaluator(self.points, layers, heads, causal)
        self.layers, self.heads, self.causal = layers, heads, causal
        self.max_nodes, self.max_seconds = max_nodes, max_seconds
        self.accept = accept  # candidate -> bool (realised and verified); None: accept every candidate
        self.progress = progress
        self.window = window
        self.filter = filter  # (facts, layer, head) -> bool: prune branches (upper-bound searches only)
        self.separable = separable  # [(point, vector)] -> bool, replaces the Farkas test (upper bounds)
        self.stats = SearchStats()
        self.order = order_points(self.points)
        self.found: Candidate | None = None
        self.rejected = 0

    def run(self):
        """("refuted", tree) or ("candidate", Candidate) or ("unrealised", count)."""
        t0 = time.perf_counter()
        self.t0 = t0
        try:
            tree = self._dfs(cd.Facts(), [], 0)
        finally:
            self.stats.seconds = time.perf_counter() - t0
        if self.found is not None:
            return "candidate", self.found
        if tree is None:
            return "unrealised", self.rejected
        return "refuted", tree

    def _tick(self):
        tick(self.stats, self.max_nodes, self.max_seconds, self.t0, time.perf_counter, self.progress)

    def _dfs(self, facts, done, k):
        """The refutation subtree (dict) below these facts, or None when a candidate was accepted
        or every open branch below ended in a rejected candidate."""
        self._tick()
        sc = scan(self.ev, self.order, self.points, facts, done, self.window, self.separable)
        self.stats.lps += sc.lps
        if sc.pruned:
            return None  # pruned by the upper-bound search's own read-out test
        if sc.leaf is not None:
            self.stats.leaves += 1
            return sc.leaf
        done, best, looked = sc.done, sc.best, sc.looked
        if best is None:
            self.stats.candidates += 1
            cand = Candidate(facts, tuple(self.order))
            if self.accept is None or self.accept(cand):
                self.found = cand
            else:
                self.rejected += 1
            return None
        p, l, h, i, subs, key, keyreps = best
        if len(subs) > 1 or looked > 1:
            subs = list(cd.possible_maxsets(facts, key, keyreps))
        # nearest keys first (earlier before later): previous-token patterns are found early
        # (the query's own key last among the near ones: the residual already holds it)
        subs.sort(key=lambda sub: (len(sub), any(j >= i for j in sub), max(abs(i - j) for j in sub), sub))
        children = []
        open_branch = False
        for sub in subs:
            f2 = facts.add(key, [keyreps[j] for j in sub], list(keyreps.values()))
            if self.filter is not None and not self.filter(f2, l, h):
                open_branch = True  # pruned by a search filter: this subtree is not refuted
                continue
            node = self._dfs(f2, done, k)
            if self.found is not None:
                return None
            if node is None:
                open_branch = True
                continue
            children.append({"max": sub, "node": node})
        if open_branch:
            return None
        return {"split": {"layer": l, "head": h, "point": p, "position": i}, "children": children}


def _q(v: Fraction):
    return int(v) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _children(node):
    """The child nodes of a split or comparison node."""
    ch = node["children"]
    return [c["node"] for c in ch] if isinstance(ch, list) else [ch[r] for r in cd.RELATIONS]


def prune_points(tree) -> set[int]:
    """The points a certificate tree mentions (splits, comparisons and leaves)."""
    out, stack = set(), [tree]
    while stack:
        node = stack.pop()
        if "farkas" in node:
            out.update(e[0] for e in node["farkas"])
        elif "head_farkas" in node:
            out.update(r[0] for r in node["head_farkas"]["rows"])
        else:
            out.add((node.get("split") or node["compare"])["point"])
            stack.extend(_children(node))
    return out


def renumber(tree, mapping):
    """The tree with point indices renumbered by `mapping` (old -> new)."""
    if "farkas" in tree:
        return {"farkas": [[mapping[p], c, v] for p, c, v in tree["farkas"]]}
    if "head_farkas" in tree:
        hf = tree["head_farkas"]
        return {"head_farkas": dict(hf, rows=[[mapping[r[0]]] + r[1:] for r in hf["rows"]])}
    kind = "split" if "split" in tree else "compare"
    s = dict(tree[kind])
    s["point"] = mapping[s["point"]]
    ch = tree["children"]
    if isinstance(ch, list):
        return {kind: s, "children": [{"max": c["max"], "node": renumber(c["node"], mapping)} for c in ch]}
    return {kind: s, "children": {r: renumber(ch[r], mapping) for r in cd.RELATIONS}}


def tree_size(tree) -> tuple[int, int]:
    nodes = leaves = 0
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes += 1
        if "farkas" in node or "head_farkas" in node:
            leaves += 1
        else:
            stack.extend(_children(node))
    return nodes, leaves


def certificate(points, tree, layers, heads, causal, task=None, version=1) -> dict:
    """The certificate object, restricted to the points the tree uses.  version 1: the relaxed
    class R(L, H); version 2: the exact (bilinear) class, vector-keyed facts."""
    used = sorted(prune_points(tree))
    mapping = {p: k for k, p in enumerate(used)}
    return {"format": cd.FORMAT, "version": version, "task": task, "layers": layers, "heads": heads,
            "causal": causal, "points": [{"tokens": list(points[p][0]), "label": points[p][1]} for p in used],
            "tree": renumber(tree, mapping)}


def check_or_fail(obj) -> str:
    ok, msg = cd.check(obj)
    if not ok:
        raise RuntimeError("the depth certificate the search built is rejected by the checker: " + msg)
    return msg


def guard_points(points, layers, heads, max_keys=cd.MAX_KEYS) -> None:
    longest = max(len(t) for t, _ in points)
    if longest > max_keys:
        raise BadInput(f"sequences of length {longest}: a split over more than {max_keys} keys is refused "
                       "(the checker enumerates 2^keys maximal sets)")
