"""Decide B(L, H) on a dataset: a lower-bound certificate or a verified hardmax model (docs/depth.md).

B(L, H) is the exact class: hardmax attention-only transformers with L layers of H heads, any width,
bilinear scores.  `decide` runs the phases of docs/depth.md section 3 (known models, fewer heads,
the equivariant upper-bound search, squares, the exact search on a growing subset), each with a
fixed share of the node budget.  A refutation of a subset is a certificate for the dataset (a model
fitting every point fits the subset); a candidate is realised with bilinear scores on every point
(proofs/depth_realize.py) and verified; when its read-out cannot separate the dataset, the points of
that Farkas vector join the subset and the search restarts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from depthcert.proofs import depth_exact as de
from depthcert.proofs import depth_search as ds
from depthcert.proofs.depth_realize import Layout, Orbits, Realised, head_feasible, readout, realise


SHARES = {"fewer heads": 0.25, "upper": 0.15, "squares": 0.4}  # of a depth's node budget; the exact search: the rest


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
    nodes: int = 0  # search nodes spent (work units: the budget counts these)
    tree_nodes: int = 0  # nodes of the certificate's tree
    leaves: int = 0
    rounds: int = 0  # rounds of the clausal search (work units of its own budget)
    proof_size: tuple = ()  # a version-3 certificate: (atoms, Farkas lemmas, steps)
    lps: int = 0
    work: int = 0  # nodes spent at this depth by every phase
    machine: bool = False  # ended by the safety stop in seconds: the outcome depends on the machine
    seconds: float = 0.0
    candidates: int = 0
    unrealised: int = 0
    padded_from: int = 0  # a model found with this many heads per layer, padded with zero-value heads
    notes: tuple = field(default_factory=tuple)


def initial_subset(points, size: int) -> list[int]:
    order = ds.order_points(points)
    return sorted(order[:size])


def decide(problem, layers: int, heads: int, max_nodes: int, deadline: float | None = None, progress=None,
           verify_model=None, clock=time.perf_counter, max_rounds: int = 0) -> DepthOutcome:
    """One depth of the exact class B(L, H).  The node budget `max_nodes` is shared by the phases
    in fixed shares, so the outcome is the same on every machine; `deadline` (a clock value) is
    only a safety stop, and an outcome it ends says so.  Phases: (with H > 1) models with fewer
    heads, padded; the equivariant upper-bound search (bilinear, on one point per orbit); the
    exact search on 4-point squares; the exact search on a growing subset; then, with `max_rounds`,
    the clausal search of proofs/depth_clausal.py (version-3 certificates; its own budget in
    rounds)."""
    t0 = clock()
    spent = 0
    reasons = []
    stopped = []

    def share(frac):
        return max(1, min(max_nodes - spent, int(max_nodes * frac)))

    def run(phase, fn, nodes):
        nonlocal spent
        if max_nodes - spent <= 0:
            reasons.append(f"{phase}: no budget left")
            return None
        got = fn(nodes)
        spent += got.nodes
        if got.kind in ("model", "impossible"):
            return got
        reasons.append(f"{phase}: {got.reason}")
        if got.machine:
            stopped.append(phase)
        return None

    from depthcert.proofs.depth_known import known_models

    for what, weights in known_models(problem, layers):
        padded = pad_heads(weights, heads) if heads > 1 else weights
        ok, margin = verify_model(padded)
        if ok:
            return DepthOutcome(layers, "model", weights=padded, margin=margin, seconds=clock() - t0,
                                padded_from=1 if heads > 1 else 0, notes=(f"known model: {what}",))
        reasons.append(f"the known model ({what}) failed verification")
    from depthcert.proofs.depth_stored import lifted

    got = lifted(problem, layers, heads)
    if got is not None:
        cert, msg, name = got
        n_nodes, n_leaves = ds.tree_size(cert["tree"])
        return DepthOutcome(layers, "impossible", certificate=cert, check_message=msg, subset=len(cert["points"]),
                            tree_nodes=n_nodes, leaves=n_leaves, seconds=clock() - t0,
                            notes=(f"lifted from the stored certificate proofs/certificates/depth/{name}: its points "
                                   "are points of this dataset with the same labels",))
    if heads > 1:
        for fewer in range(1, heads):
            got = run(f"{fewer} head{'s' if fewer > 1 else ''}, padded",
                      lambda n: _fewer_heads(problem, layers, heads, fewer, n, deadline, progress, verify_model, clock),
                      share(SHARES["fewer heads"]))
            if got is not None:
                return _done(got, spent, t0, clock)
    got = run("upper-bound search", lambda n: _upper(problem, layers, heads, n, deadline, progress, verify_model,
                                                     clock), share(SHARES["upper"]))
    if got is not None:
        return _done(got, spent, t0, clock)
    got = run("squares", lambda n: _squares_first(problem, layers, heads, n, deadline, progress, clock),
              share(SHARES["squares"]))
    if got is not None:
        return _done(got, spent, t0, clock)
    got = run("exact search", lambda n: _decide(problem, layers, heads, n, deadline, start=4, progress=progress,
                                                verify_model=verify_model, clock=clock), max_nodes - spent)
    if got is not None:
        return _done(got, spent, t0, clock)
    rounds = 0
    if max_rounds > 0:
        got = _clausal(problem, layers, heads, max_rounds, deadline, clock, verify_model)
        rounds = got.rounds
        if got.kind in ("impossible", "model"):
            return replace(got, nodes=spent, work=spent, seconds=clock() - t0)
        reasons.append(f"clausal search: {got.reason}")
        if got.machine:
            stopped.append("clausal search")
    return DepthOutcome(layers, "open", reason="; ".join(reasons), nodes=spent, seconds=clock() - t0,
                        machine=bool(stopped), rounds=rounds)


def _realise_selections(problem, layers, heads, selections, verify_model):
    """A model from the clausal search's selections on every point: the facts "these are the
    maximal sets", realised with bilinear scores and verified on every point; (weights, margin)
    or the reason it failed."""
    from depthcert.proofs import check_depth as cd

    pts = problem.points
    ev = cd.Evaluator(pts, layers, heads, problem.causal, exact=True)
    facts = cd.Facts()
    for l in range(1, layers + 1):
        for p, (toks, _) in enumerate(pts):
            for i in (range(len(toks)) if l < layers else [len(toks) - 1]):
                for h in range(heads):
                    got = ev.split(facts, l, h, p, i)
                    if got is None:
                        return None, "the selections leave a query or key of a later layer undetermined"
                    key, keyreps = got
                    S = selections[(l, h, tuple(toks), i)]
                    facts = facts.add(key, [keyreps[j] for j in S], list(keyreps.values()))
    r = realise(facts, pts, layers, heads, problem.causal, problem.vocab, problem.classes, problem.max_length,
                problem.outputs, name=f"find-depth-L{layers}-H{heads}", groups=())
    if not isinstance(r, Realised):
        return None, r.reason
    ok, margin = verify_model(r.weights)
    return ((r.weights, margin), "") if ok else (None, "the realised model failed verification")


def _clausal(problem, layers, heads, max_rounds, deadline, clock, verify_model=None) -> DepthOutcome:
    """The clausal search (proofs/depth_clausal.py) on the dataset: a version-3 certificate, re-checked;
    or, when every point's selections fit, a model realised from them and verified on every point;
    or an open outcome saying what the rounds covered."""
    from depthcert.proofs import depth_clausal as dc

    secs = None if deadline is None else deadline - clock()
    if secs is not None and secs <= 0:
        return DepthOutcome(layers, "open", reason="the safety stop (--max-seconds) was reached: a machine-dependent "
                                                   "stop", machine=True)
    got = dc.refute(problem.points, layers, heads, problem.causal, problem.task_ref, max_rounds, secs, clock=clock)
    w = got.work
    covered = (f"{w.rounds:,} rounds, {w.lemmas:,} Farkas lemmas, {w.lps:,} LPs, on {w.points} of "
               f"{len(problem.points)} points")
    if got.status == "refuted":
        cert, msg = got.certificate, got.check_message  # re-checked by proofs/check_depth.py in refute
        proof = cert["proof"]
        return DepthOutcome(layers, "impossible", certificate=cert, check_message=msg, subset=len(cert["points"]),
                            rounds=w.rounds, lps=w.lps,
                            proof_size=(len(proof["atoms"]), len(proof["lemmas"]), len(proof["steps"])))
    why = ""
    if got.status == "fits" and verify_model is not None:
        model, why = _realise_selections(problem, layers, heads, got.selections, verify_model)
        if model is not None:
            return DepthOutcome(layers, "model", weights=model[0], margin=model[1], rounds=w.rounds, lps=w.lps,
                                notes=(f"realised from the clausal search's selections ({covered})",))
    reason = {"budget": f"the search used its budget of {covered}",
              "fits": f"every point's selections fit the LPs ({covered}), but no model was realised ({why})",
              "too large": f"the encoding reached its limit of {dc.MAX_CLAUSES:,} clauses ({covered})",
              "safety stop": f"the safety stop (--max-seconds) was reached: a machine-dependent stop ({covered})"}
    return DepthOutcome(layers, "open", reason=reason[got.status], rounds=w.rounds, lps=w.lps,
                        machine=got.status == "safety stop")


def _done(got, spent, t0, clock):
    return replace(got, nodes=spent if got.kind == "model" else got.nodes, work=spent, seconds=clock() - t0)


def _upper(problem, layers: int, heads: int, max_nodes: int, deadline, progress, verify_model, clock) -> DepthOutcome:
    """The upper-bound search: orderings with bilinear scores (HiGHS) and a separable read-out, on
    one point per orbit of the task's token symmetry first, realised and verified on every point."""
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
                   filter=bilinear, first=problem.representatives, separable=separable, clock=clock)


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


def _fewer_heads(problem, layers, heads, fewer, max_nodes, deadline, progress, verify_model, clock):
    """A verified model with `heads` heads per layer made from one with `fewer` (pad_heads), or an
    open outcome: the upper-bound search with `fewer` heads (half the nodes), then the exact search
    with `fewer` heads (the rest; only its models are used)."""
    got = _upper(problem, layers, fewer, max_nodes // 2, deadline, progress, verify_model, clock)
    if got.kind != "model":
        ex = _decide(problem, layers, fewer, max_nodes - got.nodes, deadline, start=4, progress=progress,
                     verify_model=verify_model, clock=clock)
        if ex.kind != "model":
            why = ex.reason if ex.kind == "open" else "the exact search refuted a subset with that many heads"
            return replace(got, kind="open", nodes=got.nodes + ex.nodes, reason=f"{got.reason}; then {why}",
                           machine=got.machine or ex.machine, certificate=None)
        got = replace(ex, nodes=got.nodes + ex.nodes)
    padded = pad_heads(got.weights, heads)
    ok, margin = verify_model(padded)
    if ok:
        return replace(got, weights=padded, margin=margin, padded_from=fewer)
    return replace(got, kind="open", weights=None, reason="the padded model failed verification")


def _decide(problem, layers: int, heads: int, max_nodes: int, deadline, start: int = 4,
            max_rounds: int = 64, progress=None, verify_model=None, filter=None, first=None,
            separable=None, grow_by: int = 2, clock=time.perf_counter) -> DepthOutcome:
    """The search on a growing subset.  filter None: the exact search (proofs/depth_exact.py):
    a refutation of the subset is a certificate (version 2), a candidate is realised on every
    point and verified; a candidate whose read-out fails on the dataset adds the points of that
    Farkas vector and the search restarts; a candidate on a strict subset whose realisation
    fails grows the subset by the nearest points; a subset past half the dataset becomes the
    whole dataset.  The node budget bounds the rounds (`max_rounds` is a backstop).  filter given: the upper-bound search of
    proofs/depth_search.py pruned by `filter` (no certificate: pruned branches are not refuted).

    problem: .points (all dataset points), .causal, .vocab, .classes, .max_length, .outputs,
    .task_ref (the certificate's task field).  verify_model(weights) -> (ok, margin) runs the
    project's exhaustive verifier on every point."""
    pts = problem.points
    subset = sorted(first) if first else initial_subset(pts, min(start, len(pts)))
    t0 = clock()
    nodes = cands = unreal = 0
    reasons = []
    for _ in range(max_rounds):
        sub_pts = [pts[i] for i in subset]
        state = {}

        def accept(cand):
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
            if filter is None and len(subset) < len(pts):
                raise _Grow(_next_points(pts, subset, grow_by))
            return False

        left = max_nodes - nodes
        if left <= 0:
            break
        secs = None if deadline is None else deadline - clock()
        if secs is not None and secs <= 0:
            return _open(layers, "the safety stop (--max-seconds) was reached: a machine-dependent stop", subset,
                         nodes, cands, unreal, t0, clock, machine=True)
        if filter is None:
            search = de.ExactSearch(sub_pts, layers, heads, problem.causal, left, secs, accept=accept,
                                    progress=progress, clock=clock)
        else:
            search = ds.DepthSearch(sub_pts, layers, heads, problem.causal, left, secs, accept=accept,
                                    progress=progress, filter=filter, separable=separable)
        stats = search.work if filter is None else search.stats
        try:
            kind, res = search.run()
        except _Grow as g:
            nodes += stats.nodes
            new = [i for i in g.points if i not in subset]
            if not new:
                return _open(layers, "a candidate's read-out failed on points already searched", subset, nodes, cands,
                             unreal, t0, clock)
            subset = sorted(set(subset) | set(new))
            if filter is None and 2 * len(subset) > len(pts):
                subset = list(range(len(pts)))  # past half the dataset, search it whole
            continue
        except ds.SearchLimit as exc:
            nodes += stats.nodes
            return _open(layers, f"{exc} (on {len(subset)} of {len(pts)} points)", subset, nodes,
                         cands, unreal + search.rejected, t0, clock, machine=isinstance(exc, ds.TimeStop))
        nodes += stats.nodes
        unreal += search.rejected
        if kind == "candidate":
            weights, margin = state["model"]
            return DepthOutcome(layers, "model", weights=weights, margin=margin, subset=len(subset), nodes=nodes,
                                seconds=clock() - t0, candidates=cands, unrealised=unreal)
        if kind == "refuted" and filter is None:
            return _impossible(sub_pts, res, layers, heads, problem, nodes, t0, clock, lps=stats.lps)
        if kind == "refuted" or res == 0:
            return _open(layers, f"no ordering with bilinear scores fits {len(subset)} points "
                                 "(pruned by floating-point LPs: a search result, not a proof)", subset, nodes, cands,
                         unreal, t0, clock)
        why = reasons[-1] if reasons else "no candidate was realisable"
        return _open(layers, f"{res} candidate{' fits' if res == 1 else 's fit'} {len(subset)} points by floating-point "
                             f"LPs but none is realised exactly ({why})", subset, nodes, cands, unreal, t0, clock)
    return _open(layers, f"the search/realisation loop stopped after {max_rounds} rounds or its budget "
                         f"({len(subset)} of {len(pts)} points)", subset, nodes, cands, unreal, t0, clock)


def _impossible(sub_pts, tree, layers, heads, problem, nodes, t0, clock, lps=0):
    cert = ds.certificate(sub_pts, tree, layers, heads, problem.causal, problem.task_ref, version=2)
    msg = ds.check_or_fail(cert)
    n_nodes, n_leaves = ds.tree_size(cert["tree"])
    return DepthOutcome(layers, "impossible", certificate=cert, check_message=msg, subset=len(cert["points"]),
                        nodes=nodes, tree_nodes=n_nodes, leaves=n_leaves, lps=lps, seconds=clock() - t0)


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


def _squares_first(problem, layers, heads, max_nodes, deadline, progress, clock):
    """The exact search on the small squares, in order, each with at most half of the nodes left
    (a square that fits is left after a few nodes; a refutable one early in the order gets a large
    share).  An impossibility outcome, or an open one."""
    pts = problem.points
    quads = squares(pts, limit=400, groups=problem.groups)
    t0 = clock()
    nodes = tried = 0
    machine = False
    for quad in quads:
        left = max_nodes - nodes
        if left <= 1:
            break
        secs = None if deadline is None else deadline - clock()
        if secs is not None and secs <= 0:
            machine = True
            break
        sub = [pts[i] for i in quad]
        tried += 1
        search = de.ExactSearch(sub, layers, heads, problem.causal, max(1, left // 2), secs, progress=progress,
                                clock=clock)
        try:
            kind, res = search.run()
        except ds.SearchLimit as exc:
            nodes += search.work.nodes
            machine = machine or isinstance(exc, ds.TimeStop)
            continue
        nodes += search.work.nodes
        if kind == "refuted":
            return _impossible(sub, res, layers, heads, problem, nodes, t0, clock, lps=search.work.lps)
    return DepthOutcome(layers, "open", reason=f"none of {tried} of the {len(quads)} squares is refuted within "
                                               f"{nodes:,} nodes", nodes=nodes, seconds=clock() - t0, machine=machine)


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


def _open(layers, reason, subset, nodes, cands, unreal, t0, clock=time.perf_counter, machine=False):
    return DepthOutcome(layers, "open", reason=reason, subset=len(subset), nodes=nodes,
                        seconds=clock() - t0, candidates=cands, unrealised=unreal, machine=machine)
