"""Sequential function composition (checkers/tasks/composition.py): decoder and encoder
constructions, and a one-layer chain-of-thought model.

Sequence: table i at positions (i-1)N .. iN-1 (position (i-1)N + a holds f_i(a)), the query x
last (position LN); label f_L(...f_1(x)).  Every head is a ReLU head with a Lemma 2 position
mask of -1 (content scores are 0/1, so -1 silences every pair that is not allowed) and its
W_V multiplied by the number of heads of its layer (the heads of a layer are averaged).
Residual stream (named blocks): value (N: the token one-hots; the encoder overwrites a table
entry's value with a composed value) | position (n) | pre (N, preimage sets) | cur (N, the
last column's pointer; the doubling variants use one block cur1..curT per layer).

Four kinds of head (`_head` builds each from a key feature, a query feature and a value map):
* lookup: the last column, holding v, attends to the entry (J, v) (key argument == v) and
  reads its value.  In place (linear): W_V = (cur <- value) - (cur <- argument), so cur
  goes from e_v to e_{f_J(v)}.
* preimage (decoder-friendly: looks BACK one table): at layer 1 the entry (j, c) attends to
  every (j-1, a) with f_{j-1}(a) = c and sums their arguments: pre(j, c) = {a : f_{j-1}(a) = c}.
  At layer t >= 2 (doubling) the entry (j, c) attends to the entries (j-m, b), b in pre(j, c),
  m = 2^(t-2), and replaces pre by the union of theirs (W_V = (pre <- pre) - (pre <- argument);
  the arguments of the attended keys add up to the old set): pre(j, c) becomes the preimage of
  c under f_{j-1} o ... o f_{j-2m}.  Preimages of distinct points are disjoint, so pre stays 0/1.
* jump: the last column, holding v (an argument of table k+1), attends to the entry (J, c) of
  table J = k+1+m whose pre (a preimage under f_{J-1} o ... o f_{k+1}) contains v, and reads
  its value: m+1 functions (more in the encoder) in one layer.
* forward (encoder only: looks AHEAD): the entry (j, a) holding g attends to (j+2^(t-1), g) and
  takes its value, in place: value(j, a) becomes f_{j+2^t-1} o ... o f_j (a) (truncated at L).

Variants (causal = every layer has the causal mask; encoder = no mask):
  linear            causal   L layers, 1 head each: one lookup per layer, d' = 2N + n
  doubling          causal   fewest layers found with lookups, preimage doubling and jumps:
                             T with k_T >= L, k_1 = 1, k_s = k_{s-1} + 2^(s-2) + 1 (L = 1: 1,
                             2-3: 2, 4-6: 3, 7-11: 4, 12-20: 5)
  encoder-linear    encoder  the linear weights without the mask (the mask costs nothing here)
  encoder-doubling  encoder  adds forward doubling: k_s = k_{s-1} + 2^(s-2) + 2^(s-1) (L = 1: 1,
                             2-4: 2, 5-10: 3, 11-22: 4)
The causal mask forbids the forward heads (a table entry cannot see the tables after it): that
is the depth the mask costs here.  The one-layer chain-of-thought model is in COT_BUILDERS
(depthcert/cli/cot.py, `verify-construction composition --cot`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthcert.checkers.tasks.composition import Composition
from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Layer, Model
from depthcert.constructions.attention import constrained_attention
from depthcert.constructions.construction import Construction

THEOREM = "Sequential function composition (Chen, Peng & Wu, arXiv 2412.02975)"
MASK = -1
NO_PRINTED = "no printed construction exists; --as-printed builds the same weights"


def _check(task) -> Composition:
    if not isinstance(task, Composition):
        raise BadInput(f"the composition constructions need the composition task, got {getattr(task, 'name', task)!r}")
    return task


# ------------------------------------------------------------------ features and heads

@dataclass(frozen=True)
class Feature:
    """A one-hot-like feature of a column with N components: a block of the stream ("value",
    "pre", "cur", ...) or the argument of a table entry ("arg": position (i-1)N + a -> a)."""

    block: str

    def rows(self, task: Composition, lay: Layout) -> list[tuple[str, int, int]]:
        """[(block, index inside the block, component)]."""
        if self.block == "arg":
            return [("position", task.table_position(i, a), a) for i in range(1, task.L + 1) for a in range(task.N)]
        return [(self.block, a, a) for a in range(task.N)]


ARG = Feature("arg")


def _head(task: Composition, lay: Layout, key: Feature, query: Feature, pairs, values, m: int) -> Head:
    """A ReLU head scoring <key feature of key j, query feature of query k> on the allowed
    (key, query) position pairs (mask -1 elsewhere); W_V = m * sum of (block <- feature, coef)."""
    n = lay.size("position")
    content = BlockMatrix(lay, lay)
    for kb, ki, a in key.rows(task, lay):
        for qb, qi, b in query.rows(task, lay):
            if a == b:
                content.entry(kb, ki, qb, qi, 1)
    allowed = np.zeros((n, n), dtype=bool)
    for j, k in pairs:
        allowed[j, k] = True
    qk = constrained_attention(lay, content, allowed, MASK)
    value = BlockMatrix(lay, lay)
    for block, feature, coef in values:
        for fb, fi, a in feature.rows(task, lay):
            value.entry(block, a, fb, fi, coef * m)
    return Head(qk, value.build())


def _table(task: Composition, i: int) -> list[int]:
    return [task.table_position(i, a) for a in range(task.N)]


# ------------------------------------------------------------------ plans

@dataclass(frozen=True)
class Jump:
    layer: int  # 2.. (layer 1 is always the lookup in table 1)
    table: int  # J: the table whose entry is read
    pre: int  # m: the entry's preimage covers f_{J-m} .. f_{J-1} (0: a plain lookup by argument)
    reach: int  # functions composed by the last column after this layer


def plan(L: int, forward: bool) -> list[Jump]:
    """The fewest layers T (and a schedule) for the last column to compose exactly L functions.

    Layer 1: lookup in table 1 (reach 1).  Layer s >= 2 from reach k: a plain lookup (J = k+1)
    or a jump through a preimage of m = 2^(s-2) functions (J = k+1+m); the entry read holds
    c = 1 function (decoder) or min(2^(s-1), L-J+1) (encoder, forward doubling), so the reach
    becomes J + c - 1.  Breadth-first over layers; among the shortest plans, fewest jumps."""
    best = {1: []}  # reach -> jumps so far
    s = 1
    while L not in best:
        s += 1
        nxt: dict[int, list[Jump]] = {}
        for k, jumps in sorted(best.items()):
            for m in (0, 2 ** (s - 2)):
                J = k + 1 + m
                if J > L:
                    continue
                c = min(2 ** (s - 1), L - J + 1) if forward else 1
                reach = J + c - 1
                cand = jumps + [Jump(s, J, m, reach)]
                old = nxt.get(reach)
                if old is None or sum(j.pre > 0 for j in cand) < sum(j.pre > 0 for j in old):
                    nxt[reach] = cand
        best = nxt
    return best[L]


def layers_needed(L: int, forward: bool) -> int:
    return 1 + len(plan(L, forward))


def _needs(task: Composition, jumps: list[Jump], forward: bool):
    """(pre_need, fwd_need): pre_need[t] = tables whose pre must cover 2^(t-1) functions after
    layer t; fwd_need[t] = tables whose value must cover min(2^t, L-j+1) functions after layer t."""
    T = 1 + len(jumps)
    pre_need = {t: set() for t in range(1, T + 1)}
    fwd_need = {t: set() for t in range(0, T + 1)}
    for jp in jumps:
        if jp.pre:
            pre_need[jp.layer - 1].add(jp.table)
        if forward:
            fwd_need[jp.layer - 1].add(jp.table)
    for t in range(T, 1, -1):
        for J in pre_need[t]:
            pre_need[t - 1].add(J)
            if J - 1 > 2 ** (t - 2):  # J grows at layer t from the table m = 2^(t-2) before it
                pre_need[t - 1].add(J - 2 ** (t - 2))
    for t in range(T, 0, -1):
        for J in fwd_need[t]:
            fwd_need[t - 1].add(J)
            if J + 2 ** (t - 1) <= task.L:
                fwd_need[t - 1].add(J + 2 ** (t - 1))
    return pre_need, fwd_need


# ------------------------------------------------------------------ builders

def _model(task: Composition, lay: Layout, layers, read: str, name: str, causal: bool, **kw) -> Model:
    out = Layout.of(("class", task.N))
    W_O = BlockMatrix(out, lay).set("class", read, 1).build()
    tags = {lay.index(b, a): (b, task.vocab[a]) for b in lay.names if b not in ("value", "position")
            for a in range(lay.size(b))}
    return Model(task.vocab, kw.pop("max_length", task.length), task.classes, lay,
                 tuple(Layer(tuple(h), causal=causal) for h in layers), W_O, name=name,
                 notes={"row_tokens": tags}, **kw)


def build_linear(task, as_printed: bool = False, causal: bool = True) -> Construction:
    """L layers, one head each: layer i moves the last column's pointer from v_{i-1} to
    v_i = f_i(v_{i-1}) (layer 1 reads x from the value block).  d' = 2N + n."""
    task = _check(task)
    N, n, last = task.N, task.length, task.query_position
    lay = Layout.of(("value", N), ("position", n), ("cur", N))
    layers = []
    for i in range(1, task.L + 1):
        pairs = [(j, last) for j in _table(task, i)]
        if i == 1:
            head = _head(task, lay, ARG, Feature("value"), pairs, [("cur", Feature("value"), 1)], 1)
        else:
            head = _head(task, lay, ARG, Feature("cur"), pairs, [("cur", Feature("value"), 1), ("cur", ARG, -1)], 1)
        layers.append([head])
    variant = "linear" if causal else "encoder-linear"
    model = _model(task, lay, layers, "cur", f"composition-{variant}", causal)
    mask = "causal" if causal else "no mask (encoder)"
    return Construction("composition", variant, THEOREM, model, as_printed,
                        f"{task.L} lookups of the last column, one per layer, {mask}: {task.L} layers",
                        (NO_PRINTED,) if as_printed else ())


def build_encoder_linear(task, as_printed: bool = False) -> Construction:
    return build_linear(task, as_printed, causal=False)


def build_doubling(task, as_printed: bool = False, forward: bool = False) -> Construction:
    """The fewest layers found: lookups, preimage doubling and jumps (+ forward doubling in the
    encoder); see `plan`.  Heads per layer: the last column's head, a preimage head and (encoder)
    a forward head where some table needs them."""
    task = _check(task)
    N, n, L, last = task.N, task.length, task.L, task.query_position
    jumps = plan(L, forward)
    T = 1 + len(jumps)
    pre_need, fwd_need = _needs(task, jumps, forward)
    uses_pre = any(pre_need[t] for t in pre_need)
    curs = [f"cur{s}" for s in range(1, T + 1)]
    lay = Layout.of(("value", N), ("position", n), *((("pre", N),) if uses_pre else ()), *[(c, N) for c in curs])
    by_layer = {jp.layer: jp for jp in jumps}
    layers = []
    for s in range(1, T + 1):
        specs = []  # (key, query, pairs, values) before the head count is known
        if s == 1:
            specs.append((ARG, Feature("value"), [(j, last) for j in _table(task, 1)], [("cur1", Feature("value"), 1)]))
        else:
            jp = by_layer[s]
            key = Feature("pre") if jp.pre else ARG
            specs.append((key, Feature(curs[s - 2]), [(j, last) for j in _table(task, jp.table)],
                          [(curs[s - 1], Feature("value"), 1)]))
        if s < T and pre_need[s]:
            if s == 1:  # pre(j, c) = {a : f_{j-1}(a) = c}
                pairs = [(jk, jq) for J in sorted(pre_need[1]) for jq in _table(task, J) for jk in _table(task, J - 1)]
                specs.append((Feature("value"), ARG, pairs, [("pre", ARG, 1)]))
            else:  # pre(J, c) <- union of pre(J - m, b) over b in pre(J, c)
                m = 2 ** (s - 2)
                grow = [J for J in sorted(pre_need[s]) if J - 1 > m]  # the others cover f_1 .. f_{J-1}
                pairs = [(jk, jq) for J in grow for jq in _table(task, J) for jk in _table(task, J - m)]
                if pairs:
                    specs.append((ARG, Feature("pre"), pairs, [("pre", Feature("pre"), 1), ("pre", ARG, -1)]))
        if forward and s < T:
            step = 2 ** (s - 1)
            grow = [J for J in sorted(fwd_need[s]) if J + step <= L]
            pairs = [(jk, jq) for J in grow for jq in _table(task, J) for jk in _table(task, J + step)]
            if pairs:
                specs.append((ARG, Feature("value"), pairs, [("value", Feature("value"), 1), ("value", ARG, -1)]))
        m_heads = len(specs)
        layers.append([_head(task, lay, k, q, p, v, m_heads) for k, q, p, v in specs])
    variant = "encoder-doubling" if forward else "doubling"
    model = _model(task, lay, layers, curs[-1], f"composition-{variant}", not forward)
    sched = ", ".join(f"layer {jp.layer}: {'jump via pre of' if jp.pre else 'lookup in'} table {jp.table} -> "
                      f"{jp.reach}" for jp in jumps)
    desc = f"{T} layer(s): layer 1 looks up f_1(x)" + (f"; {sched}" if sched else "")
    return Construction("composition", variant, THEOREM, model, as_printed, desc,
                        (NO_PRINTED,) if as_printed else ())


def build_encoder_doubling(task, as_printed: bool = False) -> Construction:
    return build_doubling(task, as_printed, forward=True)


# ------------------------------------------------------------------ chain of thought

def build_cot(task, as_printed: bool = False) -> Construction:
    """One causal layer, one head, generating v_1 .. v_L: the column holding v_{i-1} (x at the last
    prompt position, then each generated token) attends to the entry (i, v_{i-1}) of table i
    (key argument == its own value; the table is fixed by the query's position) and copies its
    value f_i(v_{i-1}) into `out`.  Positions: the prompt's n plus L - 1 generated tokens."""
    task = _check(task)
    N, L, P = task.N, task.L, task.length
    n = P + L - 1
    lay = Layout.of(("value", N), ("position", n), ("out", N))
    pairs = [(j, P - 1 + i) for i in range(L) for j in _table(task, i + 1)]
    head = _head(task, lay, ARG, Feature("value"), pairs, [("out", Feature("value"), 1)], 1)
    model = _model(task, lay, [[head]], "out", "composition-cot", True, max_length=n, outputs="all")
    return Construction("composition", "cot", THEOREM + ", chain of thought", model, as_printed,
                        f"one causal layer: the token at position {P - 1} + i looks up f_(i+1) of itself "
                        f"({L} generated tokens)")


BUILDERS = {"composition": {"linear": build_linear, "doubling": build_doubling,
                            "encoder-linear": build_encoder_linear, "encoder-doubling": build_encoder_doubling}}
# Chain-of-thought models (depthcert/cli/cot.py): the model generates the steps task.cot_steps.
COT_BUILDERS = {"composition": {"cot": build_cot}}
