"""Multi-hop in-context QA (paper section 7: "copy-matching" repeated once per hop).

Sequence ``x_0 > y_0  x_1 > y_1 ... x_{k-1} > y_{k-1}  s >`` with y_i = f(x_i), label f^h(s)
(checkers/tasks/multihop.py).  Pair i sits at positions 3i (x_i), 3i+1 (>), 3i+2 (y_i); the query
entity s at 3k, the last column 3k+1 holds ``>``.

Residual stream: [entity (N); relation (1); position (n); dst (N)] (the "paper" fix has one
dst block per round).  Every layer has one head.

* copy (Lemma 1): key 3i+2 -> query 3i and key 3k -> query 3k+1 with W_V = (dst <- entity).
  Pair column 3i now holds x_i in its token block and y_i in dst; the last column holds the
  current entity cur = s in dst.
* hop (Lemma 2 mask, content W_QK = (entity key, dst query) = I): a query column whose dst is
  d scores 1 exactly on the pair column 3j with x_j = d; every other (key, query) pair gets a
  -1 mask on top of a content score <= 1.  W_V = (dst <- dst) + (dst <- -entity) writes
  -x_j + dst_j = -d + g(d): dst becomes g(d), still one-hot.  Entries stay in {-1, 0, 1}.

Variants: "paper" h x (copy, hop) = 2h layers (rounds 2..h re-copy into a fresh block, which
the hop of that round reads); as printed, Theorem 3's layers (W_V = I) repeated h times.
"linear" copy + h hops by the last column only = h + 1 layers.  "doubling" copy + one layer
per bit of h: every pair column hops with its own dst (g <- g o g, so after stage t it holds
f^(2^t)) while the last column hops only at the stages of h's set bits =
floor(log2 h) + 2 layers.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks.multihop import MultiHop
from depthcert.constructions.attention import constrained_attention, instructive_attention, position_map
from depthcert.constructions.construction import Construction
from depthcert.constructions.indexed import (IndexedHead, IndexedLayout, IndexedMatrix, IndexSet, Repeat, Segment,
                                             SizeRange, SymbolicModel, SymbolicTask, is_symbolic,
                                             precheck_weights)

THEOREM = "Section 7 (nested in-context QA by repeated copy-matching)"
MASK = -1  # Lemma 2 mask: content scores are 0/1, so -1 already silences a masked pair


def _check(task) -> MultiHop:
    if not isinstance(task, MultiHop):
        raise BadInput(f"the multihop constructions need the multihop task, got {getattr(task, 'name', task)!r}")
    return task


def layout(task: MultiHop, dst_blocks: tuple[str, ...] = ("dst",)) -> Layout:
    N = task.n_entities
    return Layout.of(("entity", N), ("relation", 1), ("position", task.length), *[(b, N) for b in dst_blocks])


def pair_columns(task: MultiHop) -> list[int]:
    return [3 * i for i in range(task.k)]


def copy_head(task: MultiHop, lay: Layout, dst: str, with_query: bool) -> Head:
    """Lemma 1 copy: y_i (key 3i+2) into `dst` of pair column 3i; s (key 3k) into the last column."""
    n, k = task.length, task.k
    pairs = [(3 * i + 2, 3 * i) for i in range(k)]
    if with_query:
        pairs.append((n - 2, n - 1))
    qk = instructive_attention(lay, position_map(n, pairs))
    v = BlockMatrix(lay, lay).set(dst, "entity", 1).build()
    return Head(qk, v)


def hop_head(task: MultiHop, lay: Layout, queries, read: str, cur: str) -> Head:
    """One hop for every query column in `queries`: match the query's `cur` block against the
    pair columns' source entity, replace cur by that pair's `read` block (Lemma 2 mask -1)."""
    n = task.length
    allowed = np.zeros((n, n), dtype=bool)
    for j in pair_columns(task):
        for q in queries:
            allowed[j, q] = True
    content = BlockMatrix(lay, lay).set("entity", cur, 1)
    qk = constrained_attention(lay, content, allowed, MASK)
    v = BlockMatrix(lay, lay).set(cur, read, 1).set(cur, "entity", -1).build()
    return Head(qk, v)


def _model(task: MultiHop, lay: Layout, layers, read_block: str, name: str) -> Model:
    out = Layout.of(("class", task.n_entities))
    W_O = BlockMatrix(out, lay).set("class", read_block, 1).build()
    # Rows of every entity-valued block are tagged with their entity (checkers/symmetry.py).
    tags = {lay.index(b, i): (b, e) for b in lay.names if b.startswith("dst") for i, e in enumerate(task.entities)}
    return Model(task.vocab, task.length, task.classes, lay, tuple((h,) for h in layers), W_O, name=name,
                 notes={"row_tokens": tags})


# ----------------------------------------------------------------------------- set-indexed (every N)
#
# linear, doubling and paper are written once for every number of entities N (and, for linear,
# every number of hops: its hop layer is one layer repeated): the entities are the set E, the
# rows of the entity, dst* and class blocks are indexed by it; k (the pairs) is held fixed.


def symbolic_task(k: int, hops: int | None = None, point: dict | None = None) -> SymbolicTask:
    """Multi-hop with symbolic N >= k (and symbolic hops >= 1 when hops is None), k fixed."""
    params = ((("hops", 1),) if hops is None else ()) + (("N", k),)
    rng = SizeRange.of(*params)
    fixed = {"k": k, "length": 3 * k + 2} | ({"hops": hops} if hops is not None else {})
    return SymbolicTask("multihop", rng if point is None else rng.at(point),
                        derived={"n_entities": lambda sz: sz["N"]}, fixed=fixed)


def _layouts(task, dst_blocks: tuple[str, ...]):
    E = IndexSet("N", task.n_entities)
    n = task.length
    stream = IndexedLayout(Segment("entity", E, ("tok:N",)), Segment("relation", None, ("tok:>",)),
                           Segment("position", None, tuple(f"pos{j}" for j in range(n))),
                           *[Segment(b, E, (b,)) for b in dst_blocks])
    positions = IndexedLayout(Segment("position", None, tuple(f"col{j}" for j in range(n))))
    classes = IndexedLayout(Segment("class", E, ("cls:N",)))
    return stream, positions, classes


def _copy(task, stream, dst: str, with_query: bool) -> IndexedHead:
    """Lemma 1 copy: y_i (key 3i+2) into `dst` of pair column 3i; s (key 3k) into the last column."""
    n, k = task.length, task.k
    qk = IndexedMatrix(stream, stream)
    for i in range(k):
        qk.set(f"pos{3 * i + 2}", f"pos{3 * i}", 1)
    if with_query:
        qk.set(f"pos{n - 2}", f"pos{n - 1}", 1)
    return IndexedHead(qk, IndexedMatrix(stream, stream).same(dst, "tok:N", same=1))


def _hop(task, stream, queries, read: str, cur: str) -> IndexedHead:
    """One hop for every query column in `queries` (Lemma 2 mask -1 on every other position pair)."""
    n = task.length
    allowed = {(3 * i, q) for i in range(task.k) for q in queries}
    qk = IndexedMatrix(stream, stream).same("tok:N", cur, same=1)
    for j in range(n):
        for q in range(n):
            if (j, q) not in allowed:
                qk.set(f"pos{j}", f"pos{q}", MASK)
    v = IndexedMatrix(stream, stream)
    if read == cur:
        v.same(cur, cur, same=1)
    else:
        v.same(cur, read, same=1)
    v.same(cur, "tok:N", same=-1)
    return IndexedHead(qk, v)


def _symbolic(task, name: str, stream, positions, classes, layers, read_block: str) -> SymbolicModel:
    W_O = IndexedMatrix(classes, stream).same("cls:N", read_block, same=1)
    return SymbolicModel(name, stream, positions, classes, tuple(layers), W_O, task.range)


def _row_tags(task):
    def notes(model):
        lay = model.layout
        return {"row_tokens": {lay.index(b, i): (b, e) for b in lay.names if b.startswith("dst")
                               for i, e in enumerate(task.entities)}}

    return notes


def _finite(build, task, as_printed: bool, symbolic_hops: bool, blocks: tuple[str, ...] = ("dst",), layers: int = 1):
    """The finite build: the closed value of `build` (run once with symbolic N, and symbolic hops for
    linear; k and a fixed hops are the structure) instantiated at the task's N (and hops)."""
    from depthcert.constructions.closed import build_closed

    lay = layout(task, blocks)  # refuses a stream over MAX_DIM before any table is made
    precheck_weights((2 * layers + 1) * lay.dim * lay.dim, f"{layers} layers of {lay.dim} x {lay.dim} matrices")
    sizes = {"N": task.n_entities} | ({"hops": task.hops} if symbolic_hops else {})
    hops = None if symbolic_hops else task.hops
    return build_closed(*_closed_args(build, task.k, hops, as_printed), task, sizes, notes=_row_tags(task))


def _closed_args(build, k: int, hops, as_printed: bool):
    return (("multihop", build, k, hops, bool(as_printed)), (lambda s: build(s, as_printed)),
            (lambda: symbolic_task(k, hops)))


def closed_value(variant: str, k: int, hops: int | None, as_printed: bool = False):
    """The closed value of a set-indexed variant (linear: hops symbolic, pass None; doubling, paper:
    at the given hops), the builder run once with symbolic N."""
    from depthcert.constructions.closed import cached_value

    build = {"linear": build_linear, "doubling": build_doubling, "paper": build_paper}[variant]
    return cached_value(*_closed_args(build, k, None if variant == "linear" else hops, as_printed))


def build_linear(task, as_printed: bool = False) -> Construction:
    """Copy once, then h hops of the last column: h + 1 layers, one head each, d' = 2N + 1 + n."""
    if not is_symbolic(task):
        task = _check(task)
        _guard_layers_per_hop(task, "linear", task.hops + 1)
        c = _finite(build_linear, task, as_printed, symbolic_hops=True, layers=task.hops + 1)
        return replace(c, description=_linear_description(task.hops, task.hops + 1))
    stream, positions, classes = _layouts(task, ("dst",))
    last = task.length - 1
    layers = [(_copy(task, stream, "dst", True),), Repeat((_hop(task, stream, [last], "dst", "dst"),), task.hops)]
    sym = _symbolic(task, "multihop-linear", stream, positions, classes, layers, "dst")
    return Construction(
        "multihop", "linear", THEOREM, None, as_printed,
        _linear_description(task.hops, task.hops + 1),
        ("no printed version exists; --as-printed builds the same weights",) if as_printed else (), symbolic=sym,
    )


def _linear_description(hops, layers) -> str:
    """The linear variant's description: the sizes' values when built for one size (the finite
    build runs the symbolic builder, whose hop count is a symbol: no comparison of it here, which a
    run for every size would refuse as a branch on a size)."""
    if not isinstance(hops, int):
        return f"copy (Lemma 1) then hop layers (hops of them) of the last column: {layers} layers"
    hop_layers = "1 hop layer" if hops == 1 else f"{hops} hop layers"
    return f"copy (Lemma 1) then {hop_layers} of the last column: {layers} layers"


def doubling_schedule(hops: int) -> list[tuple[bool, bool]]:
    """Per stage t: (pair columns hop, last column hops).  Pairs double while a later stage needs
    f^(2^(t+1)); the last column hops at the set bits of h."""
    T = hops.bit_length()
    return [(t < T - 1, bool(hops >> t & 1)) for t in range(T)]


def build_doubling(task, as_printed: bool = False) -> Construction:
    """Pointer doubling: copy, then floor(log2 h) + 1 stages; 1 head per layer, d' = 2N + 1 + n."""
    if not is_symbolic(task):
        task = _check(task)
        return _finite(build_doubling, task, as_printed, symbolic_hops=False,
                       layers=len(doubling_schedule(task.hops)) + 1)
    stream, positions, classes = _layouts(task, ("dst",))
    last = task.length - 1
    pairs = [3 * i for i in range(task.k)]
    layers = [(_copy(task, stream, "dst", True),)]
    for pairs_hop, last_hops in doubling_schedule(task.hops):
        queries = (pairs if pairs_hop else []) + ([last] if last_hops else [])
        layers.append((_hop(task, stream, queries, "dst", "dst"),))
    sym = _symbolic(task, "multihop-doubling", stream, positions, classes, layers, "dst")
    return Construction(
        "multihop", "doubling", THEOREM, None, as_printed,
        f"copy then pointer doubling over the bits of h = {task.hops}: {len(layers)} layers",
        ("no printed version exists; --as-printed builds the same weights",) if as_printed else (), symbolic=sym,
    )


def _guard_layers_per_hop(task, variant: str, layers: int) -> None:
    """Variants whose layers (and, for paper, blocks) grow with h: refuse an h no model of d' <=
    MAX_DIM rows could hold, before any list of h items is made (--hops 10^30 must not hang)."""
    from depthcert.checkers.layout import MAX_DIM

    if task.hops > MAX_DIM:
        raise BadInput(f"--variant {variant} needs {layers} layers for --hops {task.hops} (one block or layer per "
                       f"hop; limit {MAX_DIM} hops); --variant doubling needs about log2(h) + 2 layers")


def build_paper(task, as_printed: bool = False) -> Construction:
    """Copy-matching h times: 2h layers.

    as_printed: Theorem 3's printed layers (13.2) repeated h times on [entity; relation;
    position]: layer 1 W_QK = Lemma 1 blockdiag(A_3, ..., A_3, A_2), W_V = I; layer 2 W_QK = I on
    the entity (question) block, W_V = I; W_O reads the entity (answer) block.
    Fixed: round t copies y_i into a fresh block dst_t (round 1 also copies s into dst1 of the
    last column, which holds the current entity from then on) and hops with dst_t.
    """
    if not is_symbolic(task):
        task = _check(task)
        _guard_layers_per_hop(task, "paper", 2 * task.hops)
        blocks = () if as_printed else tuple(f"dst{t + 1}" for t in range(task.hops))
        return _finite(build_paper, task, as_printed, symbolic_hops=False, blocks=blocks, layers=2 * task.hops)
    h, n = task.hops, task.length
    if as_printed:
        stream, positions, classes = _layouts(task, ())
        ident = IndexedMatrix(stream, stream).identity()
        qk = IndexedMatrix(stream, stream)
        groups = [[3 * t, 3 * t + 1, 3 * t + 2] for t in range(task.k)] + [[n - 2, n - 1]]
        for g in groups:
            for j in g:
                for q in g:
                    if j != q:
                        qk.set(f"pos{j}", f"pos{q}", 1)
        copy = IndexedHead(qk, ident)
        match = IndexedHead(IndexedMatrix(stream, stream).same("tok:N", "tok:N", same=1), ident)
        sym = _symbolic(task, "multihop-paper-as-printed", stream, positions, classes, [(copy,), (match,)] * h,
                        "tok:N")
        return Construction(
            "multihop", "paper", THEOREM, None, True,
            f"Theorem 3's printed copy-matching layers repeated {h} times: {2 * h} layers", symbolic=sym,
        )
    blocks = tuple(f"dst{t + 1}" for t in range(h))
    stream, positions, classes = _layouts(task, blocks)
    last = n - 1
    layers = []
    for t, block in enumerate(blocks):
        layers.append((_copy(task, stream, block, t == 0),))
        layers.append((_hop(task, stream, [last], block, "dst1"),))
    sym = _symbolic(task, "multihop-paper", stream, positions, classes, layers, "dst1")
    return Construction(
        "multihop", "paper", THEOREM, None, False,
        f"{h} round{'s' if h != 1 else ''} of copy (into dst_t) + hop: {2 * h} layers",
        ("Theorem 3's W_V = I copy merges x_i and y_i into one entity block; the fix copies y_i into its own block",),
        symbolic=sym,
    )


def relu_and_schedule(hops: int) -> tuple[int, int, int]:
    """(layers L, a2, b) with h = a2 + 3 b, a2 in {0, 1, 2}, b < 2^(L-2), L >= 2 smallest.

    After layer 2 the last column is a2 hops from s and every pair column 3 hops from its x_i;
    layers 3..L double the pair columns (3, 6, 12, ...) and move the last column at b's set bits,
    so L layers reach h <= 3 * 2^(L-2) - 1."""
    L = 2
    while 3 * 2 ** (L - 2) - 1 < hops:
        L += 1
    return L, hops % 3, hops // 3


def relu_and_heads(task: MultiHop, lay: Layout, queries, m: int) -> list[Head]:
    """Layer-2 heads (one per entity v) moving every query column's `cur` two hops at once.

    score_v(key 3j, query q) = relu( sum_c ptr_j[c] slot_c,q[v] + cur_q[v] * (entity sum of key) - 1 )
                             = [f(v) = x_j] AND [cur_q = v]       (bias -1; other pairs -2)
    value = m (cur_j - e_v) = m (y_j - v): cur_q becomes y_j = f(f(cur_q)).
    """
    N, k, n = task.n_entities, task.k, task.length
    allowed = np.zeros((n, n), dtype=bool)
    for j in pair_columns(task):
        for q in queries:
            allowed[j, q] = True
    bias = np.where(allowed, -1, 0).astype(object)
    heads = []
    for v in range(N):
        content = BlockMatrix(lay, lay)
        for c in range(k):
            content.entry("ptr", c, f"slot{c}", v, 1)
        for e in range(N):
            content.entry("entity", e, "cur", v, 1)
        content.add("position", "position", bias)
        qk = constrained_attention(lay, content, allowed, -2)
        value = BlockMatrix(lay, lay).set("cur", "cur", m)
        for e in range(N):
            value.entry("cur", v, "entity", e, -m)
        heads.append(Head(qk, value.build()))
    return heads


def build_relu_and(task, as_printed: bool = False) -> Construction:
    """Two hops per layer where it counts: L layers reach h <= 3 * 2^(L-2) - 1.

    Layer 1 (k + 2 heads, W_V scaled by m = k + 2 against the 1/m): the copy of the other
    variants (y_i -> cur of pair column 3i, s -> cur of the last column); k Lemma 1 heads copy
    every source x_c into slot_c of every pair column and of the last column; one content head
    (Lemma 2 mask -1) gives pair column 3j the predecessor indicator ptr_j[c] = [y_c = x_j].
    Layer 2 (N ReLU-AND heads, see relu_and_heads, plus one plain hop head when h = 1 mod 3):
    pair columns go from f to f^3, the last column moves a2 = h mod 3 hops.
    Layers 3..L: pointer doubling of the pair columns (f^3, f^6, ...) while the last column hops
    at the set bits of b = h div 3.  One-hot throughout, margin 1.
    """
    task = _check(task)
    N, k, n = task.n_entities, task.k, task.length
    last = n - 1
    L, a2, b = relu_and_schedule(task.hops)
    slots = tuple(f"slot{c}" for c in range(k))
    lay = Layout.of(("entity", N), ("relation", 1), ("position", n), *[(sb, N) for sb in slots],
                    ("ptr", k), ("cur", N))
    pairs = pair_columns(task)

    m1 = k + 2
    heads1 = []
    copy = copy_head(task, lay, "cur", True)
    heads1.append(Head(copy.W_QK, BlockMatrix(lay, lay).set("cur", "entity", m1).build()))
    for c in range(k):
        qk = instructive_attention(lay, position_map(n, [(3 * c, q) for q in pairs + [last]]))
        heads1.append(Head(qk, BlockMatrix(lay, lay).set(slots[c], "entity", m1).build()))
    allowed = np.zeros((n, n), dtype=bool)
    for c in range(k):
        for j in pairs:
            allowed[3 * c + 2, j] = True
    qk = constrained_attention(lay, BlockMatrix(lay, lay).set("entity", "entity", 1), allowed, MASK)
    shift = np.zeros((k, n), dtype=object)
    for c in range(k):
        shift[c, 3 * c + 2] = m1
    heads1.append(Head(qk, BlockMatrix(lay, lay).set("ptr", "position", shift).build()))

    and_queries = (pairs if b > 0 else []) + ([last] if a2 == 2 else [])
    m2 = (N if and_queries else 0) + (1 if a2 == 1 else 0)
    heads2 = relu_and_heads(task, lay, and_queries, m2) if and_queries else []
    if a2 == 1:
        plain = hop_head(task, lay, [last], "cur", "cur")
        heads2.append(Head(plain.W_QK, BlockMatrix(lay, lay).set("cur", "cur", m2).set("cur", "entity", -m2).build()))
    layers = [tuple(heads1), tuple(heads2)]
    T = L - 2
    for t in range(T):
        queries = (pairs if b >> (t + 1) else []) + ([last] if b >> t & 1 else [])
        layers.append((hop_head(task, lay, queries, "cur", "cur"),))

    W_O = BlockMatrix(Layout.of(("class", N)), lay).set("class", "cur", 1).build()
    tags = {lay.index(blk, i): (blk, e) for blk in slots + ("cur",) for i, e in enumerate(task.entities)}
    model = Model(task.vocab, n, task.classes, lay, tuple(layers), W_O, name="multihop-relu-and",
                  notes={"row_tokens": tags})
    return Construction(
        "multihop", "relu-and", THEOREM, model, as_printed,
        f"copy + predecessor pointers, ReLU-AND double hop (pairs f -> f^3, last +{a2}), "
        f"{T} doubling stage{'s' if T != 1 else ''} over b = {b}: {L} layer{'s' if L != 1 else ''}",
        ("no printed version exists; --as-printed builds the same weights",) if as_printed else (),
    )

DNF_MAX_HEADS = 5000


def build_dnf(task, as_printed: bool = False) -> Construction:
    """Any h in two layers, paid for with N^h k^h heads (depth is only meaningful per head budget).

    Layer 1 (2k + 1 Lemma 1 heads, W_V scaled by m = 2k + 1): every source x_c, target y_c and s
    is copied into its own slot of the last column (Lemma 4 style).
    Layer 2: one head per value path (v_0..v_{h-1}) in N^h and pair path (c_0..c_{h-1}) in k^h,
    attending from the last column to the key 3c_{h-1}+2 only:
        relu( [s = v_0] + sum_t [x_{c_t} = v_t] + sum_{t<h-1} [y_{c_t} = v_{t+1}] - (2h - 1) )
    is the AND of 2h facts, each a slot entry of the query times the key's entity sum (= 1); it
    fires for exactly one head, whose key holds y_{c_{h-1}} = f^h(s); W_V = m (ans <- entity).
    """
    task = _check(task)
    N, k, n, h = task.n_entities, task.k, task.length, task.hops
    heads2 = N**h * k**h
    if heads2 > DNF_MAX_HEADS:
        raise BadInput(f"--variant dnf needs N^h k^h = {heads2} heads (limit {DNF_MAX_HEADS}); use smaller sizes")
    last = n - 1
    xs = tuple(f"x{c}" for c in range(k))
    ys = tuple(f"y{c}" for c in range(k))
    lay = Layout.of(("entity", N), ("relation", 1), ("position", n), *[(b, N) for b in xs + ys],
                    ("s", N), ("ans", N))
    m1 = 2 * k + 1
    heads1 = []
    for c in range(k):
        for block, pos in ((xs[c], 3 * c), (ys[c], 3 * c + 2)):
            qk = instructive_attention(lay, position_map(n, [(pos, last)]))
            heads1.append(Head(qk, BlockMatrix(lay, lay).set(block, "entity", m1).build()))
    qk = instructive_attention(lay, position_map(n, [(n - 2, last)]))
    heads1.append(Head(qk, BlockMatrix(lay, lay).set("s", "entity", m1).build()))

    value = BlockMatrix(lay, lay).set("ans", "entity", heads2).build()
    heads = []
    import itertools

    for vs in itertools.product(range(N), repeat=h):
        for cs in itertools.product(range(k), repeat=h):
            key = 3 * cs[-1] + 2
            facts = [("s", vs[0])] + [(xs[cs[t]], vs[t]) for t in range(h)]
            facts += [(ys[cs[t]], vs[t + 1]) for t in range(h - 1)]
            content = BlockMatrix(lay, lay)
            for (block, v), times in Counter(facts).items():  # each fact: column v of (entity, block) + 1
                column = np.zeros((N, N), dtype=object)
                column[:, v] = times
                content.add("entity", block, column)
            allowed = np.zeros((n, n), dtype=bool)
            allowed[key, last] = True
            content.add("position", "position", np.where(allowed, -(2 * h - 1), 0).astype(object))
            heads.append(Head(constrained_attention(lay, content, allowed, -2 * h), value))
    W_O = BlockMatrix(Layout.of(("class", N)), lay).set("class", "ans", 1).build()
    tags = {lay.index(b, i): (b, e) for b in xs + ys + ("s", "ans") for i, e in enumerate(task.entities)}
    model = Model(task.vocab, n, task.classes, lay, (tuple(heads1), tuple(heads)), W_O, name="multihop-dnf",
                  notes={"row_tokens": tags})
    return Construction(
        "multihop", "dnf", THEOREM, model, as_printed,
        f"two layers for any h: {m1} slot heads, then {heads2} AND heads (one per value and pair path)",
        ("no printed version exists; --as-printed builds the same weights",) if as_printed else (),
    )


BUILDERS = {"multihop": {"paper": build_paper, "linear": build_linear, "doubling": build_doubling,
                         "relu-and": build_relu_and, "dnf": build_dnf}}
