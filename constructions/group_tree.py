"""Word problems of finite groups in ceil(log2 n) layers by binary-tree composition; parity and
mod-count are the word problems of Z_2 and Z_p (token 0 = the identity, 1 = the generator).
Also the constant-depth counting construction for parity and mod-count (2 layers).

The tree.  Level t (layer t + 1) pairs the blocks of size 2^t into blocks of size 2^(t+1): a
column i that ends the right half of its 2^(t+1) block (or is the last column n - 1 and lies in
a right half) is a *query*; its *partner* j ends the left half.  After level t, every column
ending a complete 2^(t+1) block, and the last column, holds the product of its block (so far),
so after T = ceil(log2 n) levels the last column holds g_1 ... g_n.  When n is odd the last
column starts as a left half of its own; layer 1 then also *lifts* its token into the state.

The state of a column is a 0/1 encoding enc(g) of a group element in the block "state":
  element  one-hot of g (|G| rows): cyclic groups and small groups,
  rows     for a permutation group of degree m: row z is the one-hot of z^(g^-1) (m^2 rows; the
           inverse makes the product of a left key a and a right query b readable from b's rows:
           z^((ab)^-1) = (z^(b^-1))^(a^-1)).
Either way the composition is a sum over *selectors* q (one state row of the query b):
    enc(ab) - enc(b) = sum_q [b has selector q] * (L_q enc(a) + c_q)            (*)
with L_q a 0/1 matrix reading a set R_q of the key's rows that always sums to 1 and c_q a constant
(element: q = h, L_h e_a = e_(ah), c_h = -e_h; rows: q = (z, y), L_q writes the key's row y into
row z, c_q = -e_(z,y)).  (*) is checked exactly for every pair of elements when a model is built.

Variants:
  tree      the paper's class (ReLU attention, heads averaged, no mask, no MLP, classifier on the
            last column).  Layer 1: one head per token t (score [query token = t] on the
            level-0 pairs, Lemma 2 mask -1 elsewhere; W_V = (state <- token) with column a =
            enc(a t)), plus a Lemma 1 lift head when n is odd.  Layers 2..T: one head per
            selector q (score [query state has q] on the level pairs, mask -1 elsewhere; W_V =
            m (L_q on (state <- state) + c_q on (state <- position))): the heads sum to (*) and
            overwrite the query's state in place.  Heads per layer: |T| (+1), then |selectors|.
  tree-mlp  ReLU MLP sublayers (wider class): one Lemma 1 head per layer copies the partner's
            state (layer 1: its token) into a scratch block "left"; the MLP computes (*) with
            one hidden unit relu(b_q + left_f - 1) per (q, f in R_q) and clears "left".
            One head per layer, every weight an integer: the evaluation stays on the proven
            float64 path to larger n than the paper-class tree.
  count     parity and mod-count, constant depth (2 layers, paper's class): layer 1 counts the
            1s into the last column (Lemma 1, all keys), layer 2 attends key j with weight
            relu(c - j) and value w_j (the second differences of [c = r mod p]): the last column
            holds the one-hot of c mod p exactly.

The classifier scores element g by the agreement of the root's state with enc(g) (margin 1 for
element, >= 2 for rows: two distinct permutations differ in at least two points).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.tasks.logdepth import Group, GroupWord
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.constructions.attention import constrained_attention, instructive_attention, position_map
from depthcert.constructions.construction import Construction

THEOREM = "log-depth transformers (related work): word problems by binary-tree composition"
MASK = -1  # content scores are 0/1, so -1 silences a disallowed (key, query) pair


def _check(task) -> GroupWord:
    if not isinstance(task, GroupWord):
        raise BadInput(f"the group-tree constructions need parity, mod-count or word-problem, got "
                       f"{getattr(task, 'name', task)!r}")
    return task


# ----------------------------------------------------------------------------------- the tree

def levels(n: int) -> int:
    """T = ceil(log2 n), at least 1 (n = 1: layer 1 only lifts the token)."""
    return max(1, (n - 1).bit_length())


def tree_pairs(n: int, t: int) -> list[tuple[int, int]]:
    """Level t: [(partner j, query i)], i ending the right half of its 2^(t+1) block (or i = n-1
    in a right half), j = the end of the left half."""
    half = 1 << t
    out = []
    for i in range(n):
        start = (i >> (t + 1)) << (t + 1)
        in_right = i >= start + half
        if in_right and ((i + 1) % (2 * half) == 0 or i == n - 1):
            out.append((start + half - 1, i))
    return out


def needs_lift(n: int) -> bool:
    """The last column is not a level-0 query (n odd): layer 1 writes enc(its token)."""
    return n % 2 == 1


def allowed(n: int, pairs) -> np.ndarray:
    a = np.zeros((n, n), dtype=bool)
    for j, i in pairs:
        a[j, i] = True
    return a


# ----------------------------------------------------------------------------------- encodings

@dataclass(frozen=True)
class Encoding:
    """enc(g) in {0,1}^D per element; composition (*) by selectors (see the module docstring)."""

    kind: str  # element | rows
    features: tuple[str, ...]  # a name per state row
    enc: np.ndarray  # (|G|, D) ints
    selectors: tuple[int, ...]  # state row of each selector q
    L: tuple[np.ndarray, ...]  # (D, D) 0/1 per selector
    c: tuple[np.ndarray, ...]  # (D,) per selector

    @property
    def dim(self) -> int:
        return len(self.features)

    def reads(self, q: int) -> list[int]:
        """R_q: the key rows L_q reads."""
        return [f for f in range(self.dim) if self.L[q][:, f].any()]


def element_encoding(group: Group) -> Encoding:
    G = group.order
    mul = group.mul
    enc = np.eye(G, dtype=np.int64)
    L, c = [], []
    for h in range(G):
        M = np.zeros((G, G), dtype=np.int64)
        for a in range(G):
            M[mul[a, h], a] = 1
        L.append(M)
        c.append(-enc[h])
    return Encoding("element", tuple(group.names), enc, tuple(range(G)), tuple(L), tuple(c))


def rows_encoding(group: Group) -> Encoding:
    m = group.degree
    D = m * m
    feat = [f"{z}^-1={y}" for z in range(m) for y in range(m)]
    enc = np.zeros((group.order, D), dtype=np.int64)
    for gi, g in enumerate(group.elements):
        for y in range(m):
            enc[gi, g[y] * m + y] = 1  # z = y^g  <=>  z^(g^-1) = y
    L, c = [], []
    for z in range(m):
        for y in range(m):
            M = np.zeros((D, D), dtype=np.int64)
            for w in range(m):
                M[z * m + w, y * m + w] = 1  # row y of the key's a^-1 into row z
            L.append(M)
            cq = np.zeros(D, dtype=np.int64)
            cq[z * m + y] = -1
            c.append(cq)
    return Encoding("rows", tuple(feat), enc, tuple(range(D)), tuple(L), tuple(c))


def encoding(group: Group) -> Encoding:
    """The cheaper one: element (|G| rows, |G| selectors) unless the permutation rows are fewer."""
    enc = element_encoding(group) if group.order <= group.degree ** 2 else rows_encoding(group)
    check_encoding(group, enc)
    return enc


def check_encoding(group: Group, e: Encoding) -> None:
    """(*) for every pair (a, b), distinct codes, and every read set R_q summing to 1."""
    mul = group.mul
    if len({tuple(r) for r in e.enc}) != group.order:
        raise RuntimeError(f"internal: the {e.kind} encoding of {group.name} is not injective")
    for q in range(len(e.selectors)):
        R = e.reads(q)
        if not (e.enc[:, R].sum(axis=1) == 1).all():
            raise RuntimeError(f"internal: selector {q} reads rows that do not sum to 1")
    for a in range(group.order):
        for b in range(group.order):
            got = sum(e.enc[b, e.selectors[q]] * (e.L[q] @ e.enc[a] + e.c[q]) for q in range(len(e.selectors)))
            if not (got == e.enc[mul[a, b]] - e.enc[b]).all():
                raise RuntimeError(f"internal: the {e.kind} encoding does not compose {a} * {b}")


# ----------------------------------------------------------------------------------- pieces

def _token_columns(task: GroupWord, e: Encoding, right_token: int | None) -> np.ndarray:
    """(D, V): column a = enc(elem(a) * elem(right_token)), or enc(elem(a)) when None."""
    g = task.group
    mul = g.mul
    out = np.zeros((e.dim, len(task.vocab)), dtype=np.int64)
    for a, ea in enumerate(g.token_elements):
        el = ea if right_token is None else mul[ea, g.token_elements[right_token]]
        out[:, a] = e.enc[el]
    return out


def _classifier(task: GroupWord, e: Encoding, lay: Layout) -> np.ndarray:
    out = Layout.of(("class", len(task.classes)))
    return BlockMatrix(out, lay).set("class", "state", e.enc).build()


def _model(task, lay, layers, W_O, name: str) -> Model:
    return Model(task.vocab, task.length, task.classes, lay, tuple(layers), W_O, name=name)


def build_tree(task, as_printed: bool = False) -> Construction:
    """The paper's class: ceil(log2 n) layers; heads |T| (+1 lift), then one per selector."""
    task = _check(task)
    g, n, V = task.group, task.n, len(task.vocab)
    e = encoding(g)
    lay = Layout.of(("token", V), ("position", n), ("state", e.dim))
    T = levels(n)
    layers = []
    # layer 1: the leaves, by the query's token
    pairs0 = tree_pairs(n, 0)
    ok0 = allowed(n, pairs0)
    m1 = (V if pairs0 else 0) + int(needs_lift(n))
    heads = []
    if pairs0:
        for t in range(V):
            content = BlockMatrix(lay, lay).set("position", "token", _column(n, V, t))
            qk = constrained_attention(lay, content, ok0, MASK)
            v = BlockMatrix(lay, lay).set("state", "token", m1 * _token_columns(task, e, t)).build()
            heads.append(Head(qk, v))
    if needs_lift(n):
        qk = instructive_attention(lay, position_map(n, [(n - 1, n - 1)]))
        v = BlockMatrix(lay, lay).set("state", "token", m1 * _token_columns(task, e, None)).build()
        heads.append(Head(qk, v))
    layers.append(Layer(tuple(heads)))
    # layers 2..T: one head per selector, in place
    for t in range(1, T):
        ok = allowed(n, tree_pairs(n, t))
        m = len(e.selectors)
        heads = []
        for q, f in enumerate(e.selectors):
            content = BlockMatrix(lay, lay).set("position", "state", _column(n, e.dim, f))
            qk = constrained_attention(lay, content, ok, MASK)
            v = (BlockMatrix(lay, lay).set("state", "state", m * e.L[q])
                 .set("state", "position", m * np.repeat(e.c[q][:, None], n, axis=1)).build())
            heads.append(Head(qk, v))
        layers.append(Layer(tuple(heads)))
    model = _model(task, lay, layers, _classifier(task, e, lay), f"{task.name}-tree")
    return Construction(task.name, "tree", THEOREM, model, as_printed,
                        f"binary-tree composition, {e.kind} encoding ({e.dim} rows): {T} layers = ceil(log2 {n})",
                        _printed_note(as_printed))


def _column(rows: int, cols: int, col: int) -> np.ndarray:
    """rows x cols with ones in column `col`: (every key position) x (one query row)."""
    out = np.zeros((rows, cols), dtype=np.int64)
    out[:, col] = 1
    return out


def _printed_note(as_printed: bool) -> tuple[str, ...]:
    return ("no printed weights exist (the related paper gives no matrices); --as-printed builds the same weights",) \
        if as_printed else ()


def build_tree_mlp(task, as_printed: bool = False) -> Construction:
    """One Lemma 1 head + a ReLU MLP per layer: ceil(log2 n) layers, integer weights."""
    task = _check(task)
    g, n, V = task.group, task.n, len(task.vocab)
    e = encoding(g)
    D = e.dim
    lay = Layout.of(("token", V), ("position", n), ("state", D), ("lefttok", V), ("left", D))
    T = levels(n)
    layers = []
    # layer 1: copy the partner leaf's token; the MLP writes enc(a t) (and lifts the last column)
    pairs0 = tree_pairs(n, 0)
    heads = ()
    if pairs0:
        heads = (Head(instructive_attention(lay, position_map(n, pairs0)),
                      BlockMatrix(lay, lay).set("lefttok", "token", 1).build()),)
    units = [("pair", a, b) for a in range(V) for b in range(V)] if pairs0 else []
    units += [("lift", t, None) for t in range(V)] if needs_lift(n) else []
    hid = Layout.of(("unit", len(units)))
    W1, W2 = BlockMatrix(hid, lay), BlockMatrix(lay, hid)
    lift_cols = _token_columns(task, e, None)
    for u, (kind, a, b) in enumerate(units):
        if kind == "pair":  # relu(lefttok_a + token_b - 1) = [partner token a, own token b]
            W1.entry("unit", u, "lefttok", a, 1).entry("unit", u, "token", b, 1)
            col = _token_columns(task, e, b)[:, a]
        else:  # relu(token_a + [position n-1] - 1)
            W1.entry("unit", u, "token", a, 1).entry("unit", u, "position", n - 1, 1)
            col = lift_cols[:, a]
        for f in range(D):
            if col[f]:
                W2.entry("state", f, "unit", u, int(col[f]))
    mlp = MLP(W1.build(), _vec([-1] * len(units)), W2.build(), _vec([0] * lay.dim))
    layers.append(Layer(heads, mlp=mlp))
    # layers 2..T: copy the partner's state into "left"; the MLP computes (*) and clears "left"
    units = [(q, f) for q in range(len(e.selectors)) for f in e.reads(q)]
    hid = Layout.of(("and", len(units)), ("clear", D))
    W1, W2 = BlockMatrix(hid, lay), BlockMatrix(lay, hid)
    for u, (q, f) in enumerate(units):  # relu(b_q + left_f - 1): selector q AND key row f
        W1.entry("and", u, "state", e.selectors[q], 1).entry("and", u, "left", f, 1)
        col = e.L[q][:, f] + e.c[q]
        for r in range(D):
            if col[r]:
                W2.entry("state", r, "and", u, int(col[r]))
    W1.set("clear", "left", 1)
    W2.set("left", "clear", -1)
    b1 = _vec([-1] * len(units) + [0] * D)
    mlp = MLP(W1.build(), b1, W2.build(), _vec([0] * lay.dim))
    for t in range(1, T):
        head = Head(instructive_attention(lay, position_map(n, tree_pairs(n, t))),
                    BlockMatrix(lay, lay).set("left", "state", 1).build())
        layers.append(Layer((head,), mlp=mlp))
    model = _model(task, lay, layers, _classifier(task, e, lay), f"{task.name}-tree-mlp")
    return Construction(task.name, "tree-mlp", THEOREM, model, as_printed,
                        f"binary-tree composition with ReLU MLPs, {e.kind} encoding ({D} rows): {T} layers",
                        _printed_note(as_printed))


def _vec(values) -> np.ndarray:
    out = np.array([Fraction(v) for v in values], dtype=object)
    out.flags.writeable = False
    return out


# ----------------------------------------------------------------------------------- counting

def build_count(task, as_printed: bool = False) -> Construction:
    """Parity / mod-count in 2 layers of the paper's class (constant depth, width ~ n)."""
    task = _check(task)
    if task.name not in ("parity", "mod-count"):
        raise BadInput(f"the count construction is for parity and mod-count, not {task.name}")
    n, V, p = task.n, len(task.vocab), task.group.order
    lay = Layout.of(("token", V), ("position", n), ("count", 1), ("residue", p))
    last = n - 1
    one = task.vocab.index("1")
    # layer 1: the last column sums the 1s of every key (weight 1 each)
    qk1 = instructive_attention(lay, position_map(n, [(j, last) for j in range(n)]))
    v1 = BlockMatrix(lay, lay).entry("count", 0, "token", one, 1).build()
    # layer 2: key j weighs relu(c - j) (c is the query's count), value w_j: sum_j w_j relu(c - j)
    # = f(c) - f(0) for f_r(c) = [c = r mod p] on c = 0..n (w = second differences of f)
    f = np.array([[int(c % p == r) for r in range(p)] for c in range(n + 1)], dtype=np.int64)  # (n+1, p)
    slope = f[1:] - f[:-1]  # (n, p)
    w = slope.copy()
    w[1:] -= slope[:-1]
    bias = np.zeros((n, n), dtype=np.int64)
    bias[:, last] = -np.arange(n)
    qk2 = BlockMatrix(lay, lay).set("position", "count", np.ones((n, 1), dtype=np.int64)) \
        .set("position", "position", bias).build()
    v2 = BlockMatrix(lay, lay).set("residue", "position", w.T).build()
    out = Layout.of(("class", p))
    W_O = BlockMatrix(out, lay).set("class", "residue", 1).set("class", "position", _f0(f[0], n)).build()
    model = _model(task, lay, [Layer((Head(qk1, v1),)), Layer((Head(qk2, v2),))], W_O, f"{task.name}-count")
    return Construction(task.name, "count", "constant depth: counting (2 layers)", model, as_printed,
                        f"count the 1s, then the piecewise-linear one-hot of the count mod {p}: 2 layers",
                        _printed_note(as_printed))


def _f0(f0: np.ndarray, n: int) -> np.ndarray:
    """(p, n): the constant f(0) read off the last column's position row."""
    out = np.zeros((len(f0), n), dtype=np.int64)
    out[:, n - 1] = f0
    return out


BUILDERS = {
    "parity": {"tree": build_tree, "tree-mlp": build_tree_mlp, "count": build_count},
    "mod-count": {"tree": build_tree, "tree-mlp": build_tree_mlp, "count": build_count},
    "word-problem": {"tree": build_tree, "tree-mlp": build_tree_mlp},
}
