"""Paper Theorem 6 (section 15): three layers, 2l heads in layer 3, d' = d + n + l + 2 solve
in-context template matching by parsing-copying-matching.

Stream blocks, as in the H^(0) of section 15: question (the m alphabet tokens, d_1), response (1),
answer (d_2 = n_answers), position (n = k(l+2)+l+1), template (l+2 rows, the padding of width
d' - d - n that layer 1 writes into).  Position sub-blocks: ctx0..ctx{k-1} (l+2 each: question,
=, answer) and query (l+1: X_c, =).

Layer 1 (parsing; Lemma 2): W_QK = I on (question, question) plus a W_pp mask that confines
attention to each block; W_V sends position j to template row (j mod block), so question position
r of a block gets the column T[:, r] = ([x_i = x_r])_i of its template.
Layer 2 (copy and pre-match; Lemma 1): each block position receives its block's answer, each
context position r receives the query's position r, and W_V = diag(I_d, -I): the template rows
of a context question become T_b[:, r] - T_c[:, r], zero for every r iff t_b = t_c; the final =
receives -sum_r T_c[:, r] = -(multiplicities of X_c's tokens).
Layer 3 (matching): heads i and l+i score key j against the final = by +-(template row i); the
final = attends, with weight sum_i mult_i |T_b[i, r] - T_c[i, r]|, every question of a context
block whose template differs from the query's, and subtracts (W_V = -I) its answer.
W_O reads the answer block.

Printed errors (docs/errata.md), fixed unless as_printed:
  * W_QK^(1) has a stray rectangular identity I_{(d'-d_1) x d_1} under the (question, question)
    block: a key's position p then matches query token d_2+1+p, corrupting the template;
  * W_QK^(3)_i acts on the last l rows of the stream, which are template rows 2..l+1 (rows l and
    l+1 are always 0), not on template rows 0..l-1 where the template is;
  * the final = never receives the answers (alpha^(2) copies them only inside each context
    block), so a_c's logit is 0 and ties with every answer token not in the context; the fix
    lets the final = attend every answer in layer 2 (the paper's figure shows a_0 + a_1 there)
    and masks the final ='s attention to itself in layer 3 (it would subtract
    sum_i mult_i^2 / (2l) >= 1/2 of that sum again) with the entry -l^2 on (response, response).
Dimension typo read the only consistent way: the second part of alpha^(2) is n x n (printed
"d - (l+1)" zero columns must be n - (l+1)).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.layout import BlockMatrix, Layout, eye, zeros
from depthcert.checkers.tasks.template import InContextTemplateMatching
from depthcert.constructions.construction import Construction
from depthcert.constructions.indexed import (IndexedHead, IndexedLayout, IndexedMatrix, IndexSet, Segment, SizeRange,
                                             SymbolicModel, SymbolicTask, finite_build, is_symbolic, precheck_weights)

THEOREM = "Theorem 6 (three-layer parsing-copying-matching)"
ALL_FIXES = frozenset({"qk1-stray-block", "layer3-rows", "final-answers", "final-self-mask"})


def layout(task: InContextTemplateMatching) -> Layout:
    return Layout.of(("question", task.m), ("response", 1), ("answer", task.n_a),
                     ("position", task.length), ("template", task.l + 2))


def position_blocks(task: InContextTemplateMatching) -> Layout:
    """The n positions as blocks: ctx0..ctx{k-1} (l+2 each) and query (l+1)."""
    return Layout.of(*[(f"ctx{b}", task.l + 2) for b in range(task.k)], ("query", task.l + 1))


def alpha2(task, fixes: frozenset) -> np.ndarray:
    """alpha^(2) = blockdiag(A_{l+2} x k, A_{l+1})^T + [0 B; ...; 0 0]^T (key j, query k)."""
    l, n = task.l, task.length
    pb = position_blocks(task)
    A_ctx = np.hstack([zeros(l + 2, l + 1), np.full((l + 2, 1), Fraction(1), dtype=object)])  # [0 | 1]
    A_q = np.vstack([zeros(l, l + 1), np.full((1, l + 1), Fraction(1), dtype=object)])  # [0 ; 1]
    M = BlockMatrix(pb, pb)
    for b in range(task.k):
        M.set(f"ctx{b}", f"ctx{b}", A_ctx)
    M.set("query", "query", A_q)
    B = np.vstack([eye(l + 1), zeros(1, l + 1)])  # [I_{l+1} ; 0]
    G = BlockMatrix(pb, Layout.of(("front", n - (l + 1)), ("last", l + 1)))
    for b in range(task.k):
        G.set(f"ctx{b}", "last", B)
    alpha = M.build().T + G.build().T
    if "final-answers" in fixes:
        extra = BlockMatrix(pb, pb)
        for b in range(task.k):
            extra.entry(f"ctx{b}", l + 1, "query", l, 1)  # key: answer of block b, query: final =
        alpha = alpha + extra.build()
    return alpha


# ----------------------------------------------------------------------------- set-indexed (every m, n_a)
#
# Written once for every alphabet size m and number of answers n_a at a fixed (k, l): the question
# tokens and the answers are sets; positions and template rows are single rows (k, l fixed).


def smallest_alphabet(k: int, l: int) -> int:
    """The smallest m with at least k templates of length l (the task's own lower bound)."""
    from depthcert.checkers.tasks.template import count_templates

    return next(m for m in range(1, l + 2) if count_templates(l, m) >= k)


def symbolic_task(k: int, l: int, point: dict | None = None) -> SymbolicTask:
    """ICTM with symbolic m >= m0 (enough templates) and n_a >= k, at fixed k, l."""
    rng = SizeRange.of(("m", smallest_alphabet(k, l)), ("n_a", k))
    return SymbolicTask("ictm", rng if point is None else rng.at(point),
                        fixed={"k": k, "l": l, "length": k * (l + 2) + l + 1})


def _layouts(task):
    X, A = IndexSet("m", task.m), IndexSet("n_a", task.n_a)
    n, l = task.length, task.l
    stream = IndexedLayout(Segment("question", X, ("tok:m",)), Segment("response", None, ("tok:=",)),
                           Segment("answer", A, ("tok:n_a",)),
                           Segment("position", None, tuple(f"pos{j}" for j in range(n))),
                           Segment("template", None, tuple(f"template[{i}]" for i in range(l + 2))))
    positions = IndexedLayout(Segment("position", None, tuple(f"col{j}" for j in range(n))))
    classes = IndexedLayout(Segment("answer", A, ("cls:n_a",)))
    return stream, positions, classes


def _after_question_rows(task, stream):
    """The rows after the question block, in order, as (family, member): response, answers,
    positions, template (the rows of the printed stray I_{(d'-d1) x d1})."""
    out = [("tok:=", 0)] + [("tok:n_a", a) for a in range(task.n_a)]
    out += [(f"pos{j}", 0) for j in range(task.length)] + [(f"template[{i}]", 0) for i in range(task.l + 2)]
    return out


def _content_bound(qk: IndexedMatrix, stream) -> Fraction:
    """mask_value's bound on the content score: the largest entry (>= 0) of each of the (token,
    token), (position, token), (token, position) parts, added."""
    tok = [f for f in stream.families if f.startswith("tok:")]
    pos = [f for f in stream.families if f.startswith("pos")]
    parts = {"tt": [Fraction(0)], "pt": [Fraction(0)], "tp": [Fraction(0)]}
    for (rf, cf, _), v in qk.table.items():
        where = ("t" if rf in tok else "p" if rf in pos else "") + ("t" if cf in tok else "p" if cf in pos else "")
        if where in parts:
            parts[where].append(v)
    for (rf, _, cf, _), v in qk.members.items():
        where = ("t" if rf in tok else "p" if rf in pos else "") + ("t" if cf in tok else "p" if cf in pos else "")
        if where in parts:
            parts[where].append(v)
    return sum(max(vs) for vs in parts.values())


def _layer1(task, stream, fixes) -> IndexedHead:
    qk = IndexedMatrix(stream, stream).same("tok:m", "tok:m", same=1)
    if "qk1-stray-block" not in fixes:  # printed I_{(d'-d1) x d1} under the (question, question) block
        rows = _after_question_rows(task, stream)
        for i in range(min(len(rows), task.m)):
            qk.member(rows[i][0], rows[i][1], "tok:m", i, 1)
    mask = -(_content_bound(qk, stream) + 1)
    pb = position_blocks(task)
    block_of = {}
    for b in pb.names:
        for j in range(pb.slice(b).start, pb.slice(b).stop):
            block_of[j] = b
    n = task.length
    for j in range(n):
        for q in range(n):
            if block_of[j] != block_of[q]:
                qk.set(f"pos{j}", f"pos{q}", qk.get(f"pos{j}", f"pos{q}") + mask)
    v = IndexedMatrix(stream, stream)
    l = task.l
    for b in range(task.k):
        start = pb.slice(f"ctx{b}").start
        for r in range(l + 2):
            v.set(f"template[{r}]", f"pos{start + r}", 1)
    start = pb.slice("query").start
    for r in range(l + 1):
        v.set(f"template[{r}]", f"pos{start + r}", 1)
    return IndexedHead(qk, v)


def _layer2(task, stream, fixes) -> IndexedHead:
    alpha = alpha2(task, fixes)
    if (alpha < 0).any():
        raise ValueError("Lemma 1 attention scores must be non-negative")
    qk = IndexedMatrix(stream, stream)
    n = task.length
    for j in range(n):
        for q in range(n):
            if alpha[j, q]:
                qk.set(f"pos{j}", f"pos{q}", alpha[j, q])
    v = IndexedMatrix(stream, stream)
    for f in stream.families:
        sign = 1 if f.startswith("tok:") else -1  # I on question, response, answer; -I on position, template
        if stream.families[f] is None:
            v.set(f, f, sign)
        else:
            v.same(f, f, same=sign)
    return IndexedHead(qk, v)


def _layer3(task, stream, fixes) -> tuple[IndexedHead, ...]:
    l = task.l
    first = 0 if "layer3-rows" in fixes else 2  # printed: the last l rows of d', template rows 2..l+1
    value = IndexedMatrix(stream, stream).identity(-1)
    heads = []
    for i in range(2 * l):
        qk = IndexedMatrix(stream, stream)
        row = f"template[{first + i % l}]"
        qk.set(row, row, 1 if i < l else -1)
        if "final-self-mask" in fixes:
            qk.set("tok:=", "tok:=", -(l * l))
        heads.append(IndexedHead(qk, value))
    return tuple(heads)


def build(task, as_printed: bool = False) -> Construction:
    """Theorem 6 as printed, or with the smallest fixes (module docstring)."""
    return build_with(task, frozenset() if as_printed else ALL_FIXES)


def _closed_args(fixes: frozenset, k: int, l: int):
    return ("ictm", fixes, k, l), (lambda s: build_with(s, fixes)), (lambda: symbolic_task(k, l))


def closed_value(k: int, l: int, as_printed: bool = False):
    """The closed value at (k, l): the builder run once with symbolic m, n_a (NotClosed as printed)."""
    from depthcert.constructions.closed import cached_value

    return cached_value(*_closed_args(frozenset() if as_printed else ALL_FIXES, k, l))


def build_with(task, fixes: frozenset) -> Construction:
    """Theorem 6 with a chosen subset of ALL_FIXES (frozenset() = as printed)."""
    if not is_symbolic(task):
        lay = layout(task)  # refuses a stream over MAX_DIM before any table is made
        precheck_weights((2 * (2 * task.l + 2) + 1) * lay.dim * lay.dim, f"3 layers of {lay.dim} x {lay.dim} matrices")
        from depthcert.constructions.closed import build_or_finite

        sizes = {"m": task.m, "n_a": task.n_a}
        return build_or_finite(  # the closed value instantiated; as printed (entries of one member): finite only
            *_closed_args(fixes, task.k, task.l), task, sizes, lambda: finite_build(lambda t, _ap: build_with(t, fixes), task,
                                              lambda pt: symbolic_task(task.k, task.l, pt), sizes, not fixes))
    stream, positions, classes = _layouts(task)
    layers = ((_layer1(task, stream, fixes),), (_layer2(task, stream, fixes),), _layer3(task, stream, fixes))
    W_O = IndexedMatrix(classes, stream).same("cls:n_a", "tok:n_a", same=1)
    sym = SymbolicModel("parsing-copying-matching", stream, positions, classes, layers, W_O, task.range)
    return Construction("ictm", "parsing-copying-matching", THEOREM, None, not fixes,
                        "layer 1 parses each question into its template; layer 2 copies answers and "
                        "subtracts the query's template; layer 3 (2l heads) subtracts the answers of "
                        "mismatched blocks from the final =",
                        (f"fixes: {', '.join(sorted(fixes))}",) if fixes else (), symbolic=sym)


BUILDERS = {"ictm": {"parsing-copying-matching": build}}
