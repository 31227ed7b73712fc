"""Decide R(L, H) on a dataset: a lower-bound certificate or a verified hardmax model (docs/depth.md).

The search (proofs/depth_search.py) runs on a growing subset S of the dataset's points.  A
refutation of S is a certificate for the dataset (a model fitting every point fits S).  A candidate
for S is realised with bilinear scores on every point (proofs/depth_realize.py) and verified; when
its read-out cannot separate the dataset, the points of that Farkas vector join S and the search
restarts; when its orderings have no bilinear score, the search goes on to the next candidate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from depthcert.proofs import depth_search as ds
from depthcert.proofs.depth_realize import Layout, Orbits, Realised, head_feasible, readout, realise


class _Grow(Exception):
    def __init__(self, points):
        self.points = points


@dataclass(frozen=True)
class DepthOutcome:
    """One depth L: kind in {"impossible", "model", "open"}."""

    layers: int
    kind: str
    certificate: dict | None = None
    check_message: str = ""
    weights: dict | None = None
    margin: object = None
    reason: str = ""
    subset: int = 0
    nodes: int = 0
    leaves: int = 0
    seconds: float = 0.0
    candidates: int = 0
    unrealised: int = 0
    padded_from: int = 0  # a model found with this many heads per layer, padded with zero-value heads
    notes: tuple = field(default_factory=tuple)


def initial_subset(points, size: int) -> list[int]:
    order = ds.order_points(points)
    return sorted(order[:size])


def decide(problem, layers: int, heads: int, max_nodes: int, deadline: float, progress=None,
           verify_model=None) -> DepthOutcome:
    """Upper bound first (the search pruned to orderings with bilinear scores, on a larger subset),
    then, if no model came out, the lower-bound search of R(L, H) itself."""
    t0 = time.perf_counter()
    if heads > 1:
        # a model with fewer heads is a model with `heads` heads (pad_heads); verified again padded
        fewer, fewer_reasons = _fewer_heads(problem, layers, heads, max_nodes // 4, t0 + min((deadline - t0) / 6, 45.0),
                                            progress, verify_model)
        if fewer is not None:
            return fewer
    else:
        fewer_reasons = []
    half = time.perf_counter() + min((deadline - time.perf_counter()) / 4, 60.0)
    up = _upper(problem, layers, heads, max_nodes // 2, half, progress, verify_model)
    if up.kind == "model":
        return up
    sq = _squares_first(problem, layers, heads, max_nodes - up.nodes, deadline - (deadline - t0) / 8, progress)
    if sq is not None:
        return sq
    low = _decide(problem, layers, heads, max_nodes - up.nodes, deadline, start=4, progress=progress,
                  verify_model=verify_model)
    if low.kind != "open":
        return low
    padded = "".join(f"; padded search with {r}" for r in fewer_reasons)
    return DepthOutcome(layers, "open", reason=f"upper-bound search: {up.reason}; lower-bound search: {low.reason}"
                                               f"{padded}",
                        subset=low.subset, nodes=up.nodes + low.nodes, seconds=time.perf_counter() - t0,
                        candidates=up.candidates + low.candidates, unrealised=up.unrealised + low.unrealised)


def _upper(problem, layers: int, heads: int, max_nodes: int, deadline: float, progress, verify_model) -> DepthOutcome:
    """The upper-bound search: R(L, H) pruned to orderings with bilinear scores and read-outs."""
    layout = Layout(problem.vocab, problem.max_length, layers, heads)
    orbits = Orbits(layout, problem.groups) if problem.groups else None
    memo = {}
    cache = {}

    def bilinear(facts, l, h):
        sig = (l, h, frozenset((k, e) for k, e in facts.edges.items() if k[0] == l and k[1] == h))
        if sig not in cache:
            cache[sig] = head_feasible(facts, layout, memo, l, h, orbits)
        return cache[sig]

    def separable(done):
        feats = [layout.rows_of(f) for _, f in done]
        return readout(feats, [pt[1] for pt, _ in done], problem.classes, layout.d[-1], orbits,
                       exact=False) is not None

    return _decide(problem, layers, heads, max_nodes, deadline, start=8, progress=progress, verify_model=verify_model,
                   filter=bilinear, first=problem.representatives, separable=separable)


def pad_heads(weights: dict, heads: int) -> dict:
    """The same hardmax model with `heads` heads per layer.  A layer adds (1/m) sum_i W_Vi (head i's
    average) for its m heads (checkers/model.py), so each W_V is scaled by heads/m and the added heads
    have W_QK = 0 (they attend uniformly) and W_V = 0 (they add nothing): a model with fewer heads
    per layer is a model with more."""
    from fractions import Fraction

    from depthcert.proofs.depth_realize import _fmt

    def scaled(M, f):
        return [[_fmt(Fraction(v) * f) for v in row] for row in M]

    out = dict(weights)
    layers = []
    for layer in weights["layers"]:
        hs = layer["heads"]
        m = len(hs)
        if m > heads:
            raise ValueError(f"pad_heads: a layer has {m} heads, more than {heads}")
        d = len(hs[0]["W_QK"])
        zero = [[0] * d for _ in range(d)]
        new = [dict(h, W_V=scaled(h["W_V"], Fraction(heads, m))) for h in hs]
        new += [{"W_QK": [row[:] for row in zero], "W_V": [row[:] for row in zero], "attention": "hardmax"}
                for _ in range(heads - m)]
        layers.append(dict(layer, heads=new))
    out["layers"] = layers
    return out


def _fewer_heads(problem, layers, heads, max_nodes, deadline, progress, verify_model):
    """(a verified model with `heads` heads per layer made from one with fewer (pad_heads) or None,
    the reasons of the searches that found none)."""
    reasons = []
    for fewer in range(1, heads):
        t0 = time.perf_counter()
        share = t0 + (deadline - t0) / (heads - fewer)
        if share - t0 <= 0:
            break
        got = _upper(problem, layers, fewer, max_nodes, share, progress, verify_model)
        if got.kind != "model":
            reasons.append(f"{fewer} head{'s' if fewer > 1 else ''}: {got.reason}")
            continue
        padded = pad_heads(got.weights, heads)
        ok, margin = verify_model(padded)
        if ok:
            return DepthOutcome(layers, "model", weights=padded, margin=margin, subset=got.subset, nodes=got.nodes,
                                seconds=time.perf_counter() - t0, candidates=got.candidates,
                                unrealised=got.unrealised, padded_from=fewer), reasons
        reasons.append(f"{fewer} head{'s' if fewer > 1 else ''}: the padded model failed verification")
    return None, reasons


def _decide(problem, layers: int, heads: int, max_nodes: int, deadline: float, start: int = 4,
            max_rounds: int = 12, progress=None, verify_model=None, filter=None, first=None,
            separable=None, grow_by: int = 2) -> DepthOutcome:
    """problem: .points (all dataset points), .causal, .vocab, .classes, .max_length, .outputs,
    .task_ref (the certificate's task field).  verify_model(weights) -> (ok, margin) runs the
    project's exhaustive verifier on every point."""
    pts = problem.points
    subset = sorted(first) if first else initial_subset(pts, min(start, len(pts)))
    t0 = time.perf_counter()
    nodes = cands = unreal = 0
    reasons = []
    for _ in range(max_rounds):
        sub_pts = [pts[i] for i in subset]
        state = {}

        def accept(cand):
            if filter is None and len(subset) < len(pts):
                # lower-bound search: a candidate means the subset is too small
                raise _Grow(_next_points(pts, subset, grow_by))
            r = realise(cand.facts, pts, layers, heads, problem.causal, problem.vocab, problem.classes,
                        problem.max_length, problem.outputs, name=f"find-depth-L{layers}-H{heads}",
                        groups=problem.groups)
            if isinstance(r, Realised):
                ok, margin = verify_model(r.weights)
                if ok:
                    state["model"] = (r.weights, margin)
                    return True
                reasons.append("a realised model failed verification")
                return False
            if r.grow:
                raise _Grow(list(r.grow))
            reasons.append(r.reason)
            return False

        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        search = ds.DepthSearch(sub_pts, layers, heads, problem.causal, max_nodes - nodes, remaining, accept=accept,
                                progress=progress, filter=filter, separable=separable)
        try:
            kind, res = search.run()
        except _Grow as g:
            nodes += search.stats.nodes
            cands += search.stats.candidates
            new = [i for i in g.points if i not in subset]
            if not new:
                return _open(layers, "a candidate's read-out failed on points already searched", subset, nodes, cands,
                             unreal, t0)
            subset = sorted(set(subset) | set(new))
            continue
        except ds.SearchLimit as exc:
            nodes += search.stats.nodes
            return _open(layers, f"{exc} (on {len(subset)} of {len(pts)} points)", subset, nodes,
                         cands + search.stats.candidates, unreal + search.rejected, t0)
        nodes += search.stats.nodes
        cands += search.stats.candidates
        unreal += search.rejected
        if kind == "candidate":
            weights, margin = state["model"]
            return DepthOutcome(layers, "model", weights=weights, margin=margin, subset=len(subset), nodes=nodes,
                                seconds=time.perf_counter() - t0, candidates=cands, unrealised=unreal)
        if kind == "refuted" and filter is None:
            cert = ds.certificate(sub_pts, res, layers, heads, problem.causal, problem.task_ref)
            msg = ds.check_or_fail(cert)
            n_nodes, n_leaves = ds.tree_size(cert["tree"])
            return DepthOutcome(layers, "impossible", certificate=cert, check_message=msg, subset=len(cert["points"]),
                                nodes=n_nodes, leaves=n_leaves, seconds=time.perf_counter() - t0, candidates=cands,
                                unrealised=unreal)
        if kind == "refuted" or res == 0:
            return _open(layers, f"the search found no ordering with bilinear scores that fits {len(subset)} points "
                                 "(pruned by floating-point LPs: a search result, not a proof)", subset, nodes, cands,
                         unreal, t0)
        # every candidate on the subset had orderings without bilinear scores
        why = reasons[-1] if reasons else "no candidate was realisable"
        if len(subset) == len(pts):
            return _open(layers, f"the search fitted R({layers}, {heads}) to all {len(pts)} points ({res} "
                                 f"candidate{'' if res == 1 else 's'}; separability by floating-point LPs, not checked "
                                 f"exactly: no "
                                 f"certificate was found at this depth), but none is realisable with bilinear "
                                 f"scores ({why})", subset, nodes, cands, unreal, t0)
        return _open(layers, f"{res} candidate{' fits' if res == 1 else 's fit'} the relaxed class on {len(subset)} points "
                             f"(floating-point LPs) "
                             f"but none is "
                             f"realisable with bilinear scores ({why})", subset, nodes, cands, unreal, t0)
    return _open(layers, f"the search/realisation loop stopped after {max_rounds} rounds or the time limit "
                         f"({len(subset)} of {len(pts)} points)", subset, nodes, cands, unreal, t0)


def squares(points, limit: int = 64, groups=()):
    """4-point subsets {X, X+a, X+b, X+a+b}: two local changes a, b (disjoint positions) of a point X
    that change its label, and their combination, all in the dataset (the shape of the paper's
    dependences, E0 + E1 = E2 + E3).  Smallest changes first."""
    index = {pt[0]: i for i, pt in enumerate(points)}
    out, seen = [], set()
    for x in ds.order_points(points)[:8]:
        tx, yx = points[x]
        moves = []
        for j, (ty, yy) in enumerate(points):
            if len(ty) != len(tx) or yy == yx:
                continue
            diff = tuple(k for k in range(len(tx)) if tx[k] != ty[k])
            if 0 < len(diff) <= 3:
                moves.append((len(diff), diff, j))
        moves.sort()
        for a in range(len(moves)):
            for b in range(a + 1, len(moves)):
                da, db = moves[a][1], moves[b][1]
                if set(da) & set(db):
                    continue
                ta, tb = points[moves[a][2]][0], points[moves[b][2]][0]
                both = tuple(tb[k] if k in db else ta[k] for k in range(len(tx)))
                c = index.get(both)
                if c is None:
                    continue
                quad = tuple(sorted({x, moves[a][2], moves[b][2], c}))
                if len(quad) == 4 and quad not in seen:
                    seen.add(quad)
                    tokens = {t for i in quad for t in points[i][0]}
                    out.append((len(tokens), len(da) + len(db), quad))
    out.sort()  # fewest distinct tokens first (a smaller alphabet's sub-dataset), then smallest changes
    if groups:
        kept, seen_keys = [], set()
        for item in out:
            key = _orbit_key([points[i] for i in item[2]], groups)
            if key not in seen_keys:
                seen_keys.add(key)
                kept.append(item)
        out = kept
    return [q for _, _, q in out[:limit]]


def _orbit_key(pts, groups):
    """The same key for two point sets that a permutation of each token group maps onto each other
    (minimum over the relabellings of the tokens that occur; a search shortcut only)."""
    from itertools import permutations, product

    used = [sorted({t for toks, _ in pts for t in toks if t in g} | {y for _, y in pts if y in g}) for g in groups]
    choices = [list(permutations(u)) for u in used]
    total = 1
    for c in choices:
        total *= len(c)
    if total > 2000:
        return tuple(sorted(pts))
    best = None
    for combo in product(*choices):
        ren = {}
        for u, perm in zip(used, combo):
            ren.update({t: f"#{k}" for k, t in enumerate(perm)})
        key = tuple(sorted((tuple(ren.get(t, t) for t in toks), ren.get(y, y)) for toks, y in pts))
        if best is None or key < best:
            best = key
    return best


def _squares_first(problem, layers, heads, max_nodes, deadline, progress):
    """Try the small squares with a share of the budget each; an impossibility outcome or None."""
    pts = problem.points
    quads = squares(pts, limit=400, groups=problem.groups)
    pass_one_end = time.perf_counter() + (deadline - time.perf_counter()) / 5
    t0 = time.perf_counter()
    hard = []
    # first pass: a fittable square shows a candidate within a few hundred nodes; the others are
    # kept for the second pass, in the same order, with the rest of the budget
    for rnd, pool in ((0, quads), (1, hard)):
        for n, quad in enumerate(pool):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return None
            if rnd == 0 and time.perf_counter() > pass_one_end:
                hard.extend(pool[n:])
                break
            share = min(remaining, 2.0) if rnd == 0 else remaining / max(1, min(2, len(pool) - n))
            nodes = min(max_nodes, 3000) if rnd == 0 else max_nodes
            sub = [pts[i] for i in quad]
            search = ds.DepthSearch(sub, layers, heads, problem.causal, nodes, share, progress=progress)
            try:
                kind, res = search.run()
            except ds.SearchLimit:
                if rnd == 0:
                    hard.append(quad)
                continue
            if kind != "refuted":
                continue
            cert = ds.certificate(sub, res, layers, heads, problem.causal, problem.task_ref)
            msg = ds.check_or_fail(cert)
            n_nodes, n_leaves = ds.tree_size(cert["tree"])
            return DepthOutcome(layers, "impossible", certificate=cert, check_message=msg, subset=len(cert["points"]),
                                nodes=n_nodes, leaves=n_leaves, seconds=time.perf_counter() - t0)
    return None


def _next_points(points, subset, count):
    """The `count` points nearest (Hamming) to the subset, a label not in it first."""
    have = set(subset)
    labels = {points[i][1] for i in subset}

    def dist(a, b):
        ta, tb = points[a][0], points[b][0]
        return sum(x != y for x, y in zip(ta, tb)) + abs(len(ta) - len(tb))

    rest = [j for j in range(len(points)) if j not in have]
    rest.sort(key=lambda j: (min(dist(j, i) for i in subset), points[j][1] in labels, j))
    return rest[:count]


def _open(layers, reason, subset, nodes, cands, unreal, t0):
    return DepthOutcome(layers, "open", reason=reason, subset=len(subset), nodes=nodes,
                        seconds=time.perf_counter() - t0, candidates=cands, unrealised=unreal)
