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
from depthcert.constructions.indexed import precheck_weights

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


def encoding_dim(group: Group) -> int:
    """D = the number of state rows (= selectors) of encoding(group), known before it is built."""
    return group.order if group.order <= group.degree ** 2 else group.degree ** 2


def encoding(group: Group) -> Encoding:
    """The cheaper one: element (|G| rows, |G| selectors) unless the permutation rows are fewer.
    Its selector tables (D matrices of D x D) are refused by the weight budget before they are made."""
    D = encoding_dim(group)
    precheck_weights(D * D * D, f"the {group.name} encoding's {D} selector tables of {D} x {D}")
    enc = element_encoding(group) if group.order <= group.degree ** 2 else rows_encoding(group)
    check_encoding(group, enc)
    return enc


def check_encoding(group: Group, e: Encoding) -> None:
    """(*) for every pair (a, b), distinct codes, and every read set R_q summing to 1.  Vectorized
    over the key a: for each query b, the selectors q it has, and L_q enc(a) + c_q for every a from
    the nonzero entries of L_q (exact integer arithmetic)."""
    mul = np.asarray(group.mul)
    enc = np.asarray(e.enc, dtype=np.int64)
    G = group.order
    if len({tuple(r) for r in enc}) != G:
        raise RuntimeError(f"internal: the {e.kind} encoding of {group.name} is not injective")
    nonzero = [np.nonzero(np.asarray(Lq)) for Lq in e.L]
    for q in range(len(e.selectors)):
        R = np.unique(nonzero[q][1])
        if not (enc[:, R].sum(axis=1) == 1).all():
            raise RuntimeError(f"internal: selector {q} reads rows that do not sum to 1")

    def applied(q: int) -> np.ndarray:
        """(G, D): row a = L_q enc(a) + c_q."""
        rows, cols = nonzero[q]
        out_t = np.zeros((e.dim, G), dtype=np.int64)
        np.add.at(out_t, rows, (enc[:, cols] * np.asarray(e.L[q])[rows, cols]).T)
        return out_t.T + np.asarray(e.c[q], dtype=np.int64)

    has = enc[:, list(e.selectors)]  # (G, Q): [b has selector q] weights
    for b in range(G):
        got = np.zeros((G, e.dim), dtype=np.int64)
        for q in np.nonzero(has[b])[0]:
            got += has[b, q] * applied(int(q))
        bad = np.nonzero((got != enc[mul[:, b]] - enc[b]).any(axis=1))[0]
        if len(bad):
            raise RuntimeError(f"internal: the {e.kind} encoding does not compose {int(bad[0])} * {b}")


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
    T, D = levels(n), encoding_dim(g)
    d = V + n + D
    heads = (V if tree_pairs(n, 0) else 0) + int(needs_lift(n)) + D * (T - 1)
    precheck_weights(2 * heads * d * d, f"{heads} heads of two {d} x {d} matrices")
    e = encoding(g)
    lay = Layout.of(("token", V), ("position", n), ("state", e.dim))
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
                        f"binary-tree composition, {e.kind} encoding ({e.dim} rows): {T} layer{'s' if T != 1 else ''} = ceil(log2 {n})",
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
    D = encoding_dim(g)
    d = 2 * V + n + 2 * D
    units1 = (V * V if tree_pairs(n, 0) else 0) + (V if needs_lift(n) else 0)
    precheck_weights(2 * units1 * d, f"a ReLU MLP of {units1} hidden units on a {d}-row stream")
    e = encoding(g)
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
                        f"binary-tree composition with ReLU MLPs, {e.kind} encoding ({D} rows): {T} layer{'s' if T != 1 else ''}",
                        _printed_note(as_printed))


def _vec(values) -> np.ndarray:
    out = np.array([Fraction(v) for v in values], dtype=object)
    out.flags.writeable = False
    return out


# ----------------------------------------------------------------------------------- counting

@dataclass(frozen=True)
class KeyRules:
    """One head's W_QK and W_V as the union over keys j < count of the rules key(j) (HeadRules of
    constructions/head_family.py; entries add up): the builder's own function of the key."""

    count: object
    key: object  # j -> HeadRules
    qk: tuple = ()  # rules of the head not tied to a key
    v: tuple = ()


class CountSpec:
    """The count construction for every n (at a given p): layer 1 and layer 2 each one head stated
    key by key, the read-out as rules (class rows x stream).  Stream: [token (2); position (n);
    count (1); residue (p)].  A finite build instantiates this object at the task's n."""

    def __init__(self, n, p: int, vocab: tuple, layer1: KeyRules, layer2: KeyRules, readout: tuple):
        self.n, self.p, self.vocab = n, p, vocab
        self.layer1, self.layer2, self.readout = layer1, layer2, readout

    def layout(self) -> Layout:
        return Layout.of(("token", len(self.vocab)), ("position", int(self.n)), ("count", 1), ("residue", self.p))

    def instantiate(self, task, name: str) -> Model:
        from depthcert.constructions.head_family import _int, _num, rules_matrix

        lay = self.layout()
        out = Layout.of(("class", self.p))
        layers = []
        for fam in (self.layer1, self.layer2):
            rules = [fam.key(j) for j in range(_int(fam.count, "keys"))]  # key(0), ..., key(n - 1)
            qk = rules_matrix(fam.qk + tuple(r for k in rules for r in k.qk), lay)
            v = rules_matrix(fam.v + tuple(r for k in rules for r in k.v), lay)
            layers.append(Layer((Head(qk, v),)))
        W = BlockMatrix(out, lay).build().copy()
        for e in self.readout:
            W[out.index(e.row_block, _int(e.row, "class")), lay.index(e.col_block, _int(e.col, "column"))] += _num(e.value)
        W.flags.writeable = False
        return _model(task, lay, layers, W, name)


def count_target(c, r: int, p: int) -> int:
    """f_r(c) = [c = r mod p]: the one-hot of the count mod p (c an int or a size)."""
    return 1 if c % p == r else 0


def count_weight(j, r: int, p: int) -> int:
    """w_j[r]: the second difference of f_r at j (j >= 1), f_r(1) - f_r(0) at j = 0, so that
    sum_{j<c} (c - j) w_j = f(c) - f(0) for every c."""
    if j >= 1:
        return count_target(j + 1, r, p) - 2 * count_target(j, r, p) + count_target(j - 1, r, p)
    return count_target(1, r, p) - count_target(0, r, p)


def count_rules(n, p: int, vocab: tuple) -> CountSpec:
    """The count construction stated once for every n: layer 1 the last column sums key j's token
    "1" (score 1 at (position j, position n - 1)); layer 2 key j scores c - j (c the query's count)
    and writes w_j into the residue rows; read-out: class r reads residue r and f_r(0)."""
    from depthcert.constructions.head_family import Entry, HeadRules

    one = vocab.index("1")

    def key1(j):
        return HeadRules(qk=(Entry("position", j, "position", n - 1, 1),), v=())

    def key2(j):
        return HeadRules(qk=(Entry("position", j, "count", 0, 1), Entry("position", j, "position", n - 1, -j)),
                         v=tuple(Entry("residue", r, "position", j, count_weight(j, r, p)) for r in range(p)))

    readout = tuple(e for r in range(p) for e in (Entry("class", r, "residue", r, 1),
                                                  Entry("class", r, "position", n - 1, count_target(0, r, p))))
    layer1 = KeyRules(n, key1, v=(Entry("count", 0, "token", one, 1),))
    return CountSpec(n, p, vocab, layer1, KeyRules(n, key2), readout)


def count_spec(task, rules=count_rules) -> CountSpec:
    """The construction for every n (a symbolic task: sizes n, p, vocab) or at the task's n (the builder run
    with n a size held there, as every finite build of a symbolic builder)."""
    from depthcert.constructions.indexed import SizeRange, SymbolicTask, is_symbolic

    if not is_symbolic(task):  # a finite build: the same builder with n a size held at the task's n
        task = SymbolicTask(task.name, SizeRange.of(("n", 1)).at({"n": task.n}),
                            fixed={"p": task.group.order, "vocab": tuple(task.vocab)})
    return rules(task.n, task.p, tuple(task.vocab))


def build_count(task, as_printed: bool = False, rules=count_rules) -> Construction:
    """Parity / mod-count in 2 layers of the paper's class (constant depth, width ~ n).  With a
    symbolic task (proofs/all_sizes_count.py) the object for every n, no model."""
    from depthcert.constructions.indexed import is_symbolic

    if is_symbolic(task):
        if task.name not in ("parity", "mod-count"):
            raise BadInput(f"the count construction is for parity and mod-count, not {task.name}")
        s = count_spec(task, rules)
        return Construction(task.name, "count", "constant depth: counting (2 layers)", None, as_printed,
                            f"count the 1s, then the piecewise-linear one-hot of the count mod {task.p}: 2 layers",
                            _printed_note(as_printed), symbolic=s)
    task = _check(task)
    if task.name not in ("parity", "mod-count"):
        raise BadInput(f"the count construction is for parity and mod-count, not {task.name}")
    from depthcert.constructions.closed import NotClosed, instantiate

    p = task.group.order
    try:
        value = closed_count_value(task.name, p, rules)  # the builder run with symbols only, once per (p, rules)
        model = instantiate(value, {"n": task.n}, task)
    except NotClosed:  # rules that make no closed value: built at the task's n, finite only
        value, model = None, count_spec(task, rules).instantiate(task, f"{task.name}-count")
    return Construction(task.name, "count", "constant depth: counting (2 layers)", model, as_printed,
                        f"count the 1s, then the piecewise-linear one-hot of the count mod {p}: 2 layers",
                        _printed_note(as_printed), symbolic=value)


_COUNT_VALUES: dict = {}


def closed_count_value(name: str, p: int, rules=count_rules):
    """The count construction's closed value at p (constructions/closed.ClosedCount): build_count run
    with symbols only (n; and (q, t) per residue case of the key)."""
    from depthcert.constructions.closed import NotClosed, close_count

    key = (name, p, rules)
    if key not in _COUNT_VALUES:
        try:
            _COUNT_VALUES[key] = close_count(lambda t: build_count(t, False, rules), name, p)
        except NotClosed as exc:
            _COUNT_VALUES[key] = exc
    out = _COUNT_VALUES[key]
    if isinstance(out, NotClosed):
        raise out
    return out


BUILDERS = {
    "parity": {"tree": build_tree, "tree-mlp": build_tree_mlp, "count": build_count},
    "mod-count": {"tree": build_tree, "tree-mlp": build_tree_mlp, "count": build_count},
    "word-problem": {"tree": build_tree, "tree-mlp": build_tree_mlp},
}
