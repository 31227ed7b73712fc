"""Directed reachability in ceil(log2(V - 1)) + 2 layers by repeated squaring (pointer doubling on
the whole graph), one ReLU head per layer: the paper's class (no mask, no MLP, last column).

Sequence (checkers/tasks/logdepth.py): the V x V adjacency bits row-major (position p(u, w) =
uV + w holds bit (u, w)), the source s at position S = V^2, the target t at the last position
L = V^2 + 1.  Vertex v's column is the diagonal bit position c(v) = p(v, v); the last column acts
as the column of t.

Residual stream: [bit (2) | vertex (V) | position (n) | reach (V) | src (V) | yes (1)]; the token
rows are the blocks "bit" ("0", "1") and "vertex" (v0 .. v{V-1}).  Column c(v) holds, in "reach",
a count vector C_v with C_v[u] > 0 iff u reaches v within the current number of steps
(the transposed closure: column v collects its in-neighbours).

* gather (layer 1): query c(v) attends every key p(u, v) of its bit column with weight [bit = 1]
  (+1 on the diagonal p(v, v), so C_v[v] >= 1: paths of length 0), value e_u into "reach".  The
  last column (token t) does the same for column t (the key's position against the query's vertex
  token) and also attends the source position S with weight 1, value (src <- vertex): it now holds
  C_t and e_s.  Every other (key, query) pair scores <= 0 (masks -1 / -3 on the position block).
* square (layers 2 .. T + 1): query k attends key c(v) with weight C_k[v] (the key's position
  against the query's reach row v), value (reach <- reach) = I:  C_k <- C_k + sum_v C_k[v] C_v,
  positive exactly where u reaches k within twice the steps.  No threshold: the counts grow, only
  their positivity is read.  T = ceil(log2(V - 1)) squarings cover every path (length <= V - 1).
* read (layer T + 2): the last column attends itself with score sum_u src_u reach_u = C_t[s]
  (the key's src row against the query's reach row; no other column has src), value 1 into "yes".
  W_O: logit(yes) = 2 yes, logit(no) = 1 (the last column's position row): margin >= 1.

Variant "squaring-mlp" (ReLU MLP sublayers, one head per layer, integer weights, 0/1 rows): the
gather writes e_u into block slot_w (so column c(w) holds its row in its *own* slot, every
other slot 0), the MLP thresholds min(1, x) = x - relu(x - 1).  Per squaring two layers:
(a) a Lemma 1 head broadcasts every vertex column's slot into "all" of every vertex column and
of the last column; the MLP counts acc[u] = sum_v relu(own[v] + all_v[u] - 1) (own = the sum of
the column's slots) and clears "all"; (b) an MLP-only layer writes min(1, slot + acc) into the
own slot (own = its diagonal entry: relu(x + V own - V) - relu(x + V own - V - 1)) and clears
"acc".  The last MLP reads [x_s >= 1] into "yes".  1 + 2T layers; attention scores read only
token and position rows, which keeps the proven float64 bound small (docs/logdepth.md).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.tasks.logdepth import Reachability
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.constructions.attention import instructive_attention, position_map
from depthcert.constructions.construction import Construction

THEOREM = "log-depth transformers (related work): graph connectivity by repeated squaring"


def _construction(task, lay, layers, variant: str, as_printed: bool, summary: str) -> Construction:
    """The model with its read-out: class `no` scores 1 (the last position's one-hot), class `yes`
    scores twice the `yes` slot the last layer fills, so `yes` wins iff that slot is at least 1."""
    out = Layout.of(("no", 1), ("yes", 1))
    last_pos = np.zeros((1, task.length), dtype=np.int64)
    last_pos[0, -1] = 1
    W_O = BlockMatrix(out, lay).set("no", "position", last_pos).set("yes", "yes", 2).build()
    model = Model(task.vocab, task.length, task.classes, lay, tuple(layers), W_O, name=f"reachability-{variant}")
    notes = ("no printed weights exist (the related paper gives no matrices); --as-printed builds the same weights",) \
        if as_printed else ()
    return Construction("reachability", variant, THEOREM, model, as_printed, summary, notes)


def _check(task) -> Reachability:
    if not isinstance(task, Reachability):
        raise BadInput(f"the reachability constructions need the reachability task, got {getattr(task, 'name', task)!r}")
    return task


def squarings(V: int) -> int:
    """T = ceil(log2(V - 1)) (0 for V <= 2): 2^T >= V - 1, the longest simple path."""
    return (V - 2).bit_length() if V > 2 else 0


def layout(task: Reachability) -> Layout:
    V = task.V
    return Layout.of(("bit", 2), ("vertex", V), ("position", task.length), ("reach", V), ("src", V), ("yes", 1))


def gather_scores(task: Reachability, lay: Layout) -> np.ndarray:
    """W_QK of the gather: query c(v) scores [key bit = 1] on the keys p(u, v) of its column (+1 on
    the diagonal p(v, v)); the last column (vertex token t) scores the same on column t and 1 on
    the source position S; every other (key, query) pair scores <= 0 (the source column too)."""
    V, n = task.V, task.length
    S, L = V * V, V * V + 1
    p = lambda u, w: u * V + w  # noqa: E731
    qk = BlockMatrix(lay, lay)
    pos = np.zeros((n, n), dtype=np.int64)  # (key position, query position)
    for v in range(V):  # query c(v): [key bit = 1] on column v, +1 on the diagonal, -1 elsewhere
        qk.entry("bit", 1, "position", p(v, v), 1)
        pos[:, p(v, v)] = -1
        for u in range(V):
            pos[p(u, v), p(v, v)] = 1 if u == v else 0
    # a query holding a vertex token w: [key bit = 1] + [key in column w] (+1 on the diagonal)
    key_col = np.zeros((n, V), dtype=np.int64)
    for u in range(V):
        for w in range(V):
            key_col[p(u, w), w] = 2 if u == w else 1
    qk.set("position", "vertex", key_col)
    qk.set("bit", "vertex", np.array([[0] * V, [1] * V], dtype=np.int64))
    pos[: V * V, L] = -1  # query L (target t): bit + [column t] (+1) - 1
    pos[S, L] = 1  # copy the source token
    pos[: V * V, S] = -3  # query S (the source token) scores <= 0 everywhere
    qk.add("position", "position", pos)
    return qk.build()


def gather_head(task: Reachability, lay: Layout) -> Head:
    """Key p(u, w) writes e_u into "reach" (the weight decides which column receives it); the
    source key writes its vertex token into "src"."""
    V = task.V
    reach_of_key = np.zeros((V, task.length), dtype=np.int64)
    for u in range(V):
        for w in range(V):
            reach_of_key[u, u * V + w] = 1
    v = BlockMatrix(lay, lay).set("reach", "position", reach_of_key).set("src", "vertex", 1).build()
    return Head(gather_scores(task, lay), v)


def square_head(task: Reachability, lay: Layout) -> Head:
    V = task.V
    key = np.zeros((task.length, V), dtype=np.int64)
    for v in range(V):
        key[v * V + v, v] = 1  # key c(v) against the query's reach row v
    qk = BlockMatrix(lay, lay).set("position", "reach", key).build()
    return Head(qk, BlockMatrix(lay, lay).set("reach", "reach", 1).build())


def read_head(task: Reachability, lay: Layout) -> Head:
    qk = BlockMatrix(lay, lay).set("src", "reach", 1).build()
    last = np.zeros((1, task.length), dtype=np.int64)
    last[0, -1] = 1
    return Head(qk, BlockMatrix(lay, lay).set("yes", "position", last).build())


def build_squaring(task, as_printed: bool = False) -> Construction:
    task = _check(task)
    lay = layout(task)
    T = squarings(task.V)
    layers = [Layer((gather_head(task, lay),))]
    layers += [Layer((square_head(task, lay),)) for _ in range(T)]
    layers.append(Layer((read_head(task, lay),)))
    return _construction(task, lay, layers, "squaring", as_printed,
                         f"gather, {T} squaring(s) of the reach counts, read: {T + 2} layers")


# ----------------------------------------------------------------------------------- MLP variant

def mlp_layout(task: Reachability) -> Layout:
    V = task.V
    return Layout.of(("bit", 2), ("vertex", V), ("position", task.length), *[(f"slot{v}", V) for v in range(V)],
                     *[(f"all{v}", V) for v in range(V)], ("acc", V), ("src", V), ("yes", 1))


def squaring_mlp_layers(V: int) -> int:
    """1 + 2 T: gather, then (broadcast + AND, threshold) per squaring."""
    return 1 + 2 * squarings(V)


def _gather_into_slots(task: Reachability, lay: Layout) -> Head:
    """Layer 1 of squaring-mlp: the gather scores; the value of key p(u, w) is e_u in block
    slot_w (the key's position names both), the source token goes to "src"."""
    V = task.V
    val = BlockMatrix(lay, lay).set("src", "vertex", 1)
    for u in range(V):
        for w in range(V):
            val.entry(f"slot{w}", u, "position", u * V + w, 1)
    return Head(gather_scores(task, lay), val.build())


def _add_read(W1: BlockMatrix, W2: BlockMatrix, b1: list, block: str, V: int, big: int, with_acc: bool) -> None:
    """Hidden units adding [x_u >= 1 and src_u = 1] into "yes", with x_u = sum_w slot_w[u]
    (+ acc[u]) an integer in [0, big]: relu(x_u + big src_u - big) - relu(x_u + big src_u - big - 1)
    is min(1, x_u) when src_u = 1 and 0 when src_u = 0.  Exactly one src_u is 1."""
    for i, (u, off) in enumerate((u, off) for u in range(V) for off in (0, 1)):
        for w in range(V):
            W1.entry(block, i, f"slot{w}", u, 1)
        if with_acc:
            W1.entry(block, i, "acc", u, 1)
        W1.entry(block, i, "src", u, big)
        b1[W1.rows.index(block, i)] = -big - off
        W2.entry("yes", 0, block, i, 1 if off == 0 else -1)


def build_squaring_mlp(task, as_printed: bool = False) -> Construction:
    """One head + ReLU MLPs (wider class): 1 + 2 ceil(log2(V - 1)) layers, 0/1 reach rows."""
    task = _check(task)
    V = task.V
    lay = mlp_layout(task)
    T = squarings(V)
    zeros_d = _vec([0] * lay.dim)
    # layer 1: gather into the own slot, threshold min(1, x) = x - relu(x - 1) (diagonal: x <= 2)
    hid = Layout.of(("thr", V * V), *((("read", 2 * V),) if T == 0 else ()))
    W1, W2 = BlockMatrix(hid, lay), BlockMatrix(lay, hid)
    b1 = [0] * hid.dim
    for w in range(V):
        for u in range(V):
            i = w * V + u
            W1.entry("thr", i, f"slot{w}", u, 1)
            b1[i] = -1
            W2.entry(f"slot{w}", u, "thr", i, -1)
    if T == 0:
        _add_read(W1, W2, b1, "read", V, 2, with_acc=False)
    layers = [Layer((_gather_into_slots(task, lay),), mlp=MLP(W1.build(), _vec(b1), W2.build(), zeros_d))]
    # broadcast every vertex column's slot into "all" of every vertex column and of the last one
    n, L = task.length, task.length - 1
    cols = [v * V + v for v in range(V)]
    bcast_v = BlockMatrix(lay, lay)
    for v in range(V):
        bcast_v.set(f"all{v}", f"slot{v}", 1)
    bcast = Head(instructive_attention(lay, position_map(n, [(c, q) for c in cols for q in cols + [L]])),
                 bcast_v.build())
    # AND: acc[u] = sum_v relu(own[v] + all_v[u] - 1), own = sum_w slot_w; clear "all"
    hid = Layout.of(("and", V * V), ("clear", V * V))
    W1, W2 = BlockMatrix(hid, lay), BlockMatrix(lay, hid)
    b1 = [0] * hid.dim
    for v in range(V):
        for u in range(V):
            i = v * V + u
            for w in range(V):
                W1.entry("and", i, f"slot{w}", v, 1)
            W1.entry("and", i, f"all{v}", u, 1)
            b1[i] = -1
            W2.entry("acc", u, "and", i, 1)
            W1.entry("clear", i, f"all{v}", u, 1)
            W2.entry(f"all{v}", u, "clear", i, -1)
    and_mlp = MLP(W1.build(), _vec(b1), W2.build(), zeros_d)
    # threshold into the own slot (own = its diagonal entry slot_w[w] = 1); clear "acc"
    big = V  # acc <= V, and a slot that is not the column's own is all 0
    for t in range(T):
        last = t == T - 1
        hid = Layout.of(("hi", V * V), ("lo", V * V), ("old", V * V), ("clear", V), *((("read", 2 * V),) if last else ()))
        W1, W2 = BlockMatrix(hid, lay), BlockMatrix(lay, hid)
        b1 = [0] * hid.dim
        for w in range(V):
            for u in range(V):
                i = w * V + u
                for blk, off, sign in (("hi", 0, 1), ("lo", 1, -1)):
                    W1.entry(blk, i, f"slot{w}", u, 1).entry(blk, i, "acc", u, 1)
                    W1.entry(blk, i, f"slot{w}", w, big + (1 if u == w else 0))  # slot_w[w] read once
                    b1[hid.index(blk, i)] = -big - off
                    W2.entry(f"slot{w}", u, blk, i, sign)
                W1.entry("old", i, f"slot{w}", u, 1)
                W2.entry(f"slot{w}", u, "old", i, -1)
        for u in range(V):
            W1.entry("clear", u, "acc", u, 1)
            W2.entry("acc", u, "clear", u, -1)
        if last:
            _add_read(W1, W2, b1, "read", V, V + 1, with_acc=True)
        layers.append(Layer((bcast,), mlp=and_mlp))
        layers.append(Layer((), mlp=MLP(W1.build(), _vec(b1), W2.build(), zeros_d)))
    return _construction(task, lay, layers, "squaring-mlp", as_printed,
                         f"gather, then {T} x (broadcast + AND, threshold) with ReLU MLPs: {1 + 2 * T} layer(s)")


def _vec(values) -> np.ndarray:
    out = np.array([Fraction(v) for v in values], dtype=object)
    out.flags.writeable = False
    return out


BUILDERS = {"reachability": {"squaring": build_squaring, "squaring-mlp": build_squaring_mlp}}
