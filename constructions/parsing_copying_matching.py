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
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks.template import InContextTemplateMatching
from depthcert.constructions.attention import constrained_attention, instructive_attention
from depthcert.constructions.construction import Construction

THEOREM = "Theorem 6 (three-layer parsing-copying-matching)"
ALL_FIXES = frozenset({"qk1-stray-block", "layer3-rows", "final-answers", "final-self-mask"})


def layout(task: InContextTemplateMatching) -> Layout:
    return Layout.of(("question", task.m), ("response", 1), ("answer", task.n_a),
                     ("position", task.length), ("template", task.l + 2))


def position_blocks(task: InContextTemplateMatching) -> Layout:
    """The n positions as blocks: ctx0..ctx{k-1} (l+2 each) and query (l+1)."""
    return Layout.of(*[(f"ctx{b}", task.l + 2) for b in range(task.k)], ("query", task.l + 1))


def rect_eye(rows: int, cols: int) -> np.ndarray:
    """The paper's I_{rows x cols}: ones on the main diagonal of a rectangle."""
    out = zeros(rows, cols)
    for i in range(min(rows, cols)):
        out[i, i] = Fraction(1)
    return out


def mask_value(W: np.ndarray, lay: Layout) -> Fraction:
    """A concrete Lemma 2 mask: -(1 + the largest content score h_j^T W h_k can reach).

    On H^(0) each column is one token row plus one position row, so the content part of a score is
    W[tok_j, tok_k] + W[pos_j, tok_k] + W[tok_j, pos_k]; each term is bounded by its block's maximum.
    """
    tok = slice(0, lay.offset("position"))
    pos = lay.slice("position")
    parts = [W[tok, tok], W[pos, tok], W[tok, pos]]
    bound = sum(max(Fraction(0), max(p.flat, default=Fraction(0))) for p in parts)
    return -(bound + 1)


def layer1(task, lay: Layout, fixes: frozenset) -> Head:
    """Parsing: token matches within each (question, =, answer) block and within the query block."""
    d1 = task.m
    split = Layout.of(("question", d1), ("after_question", lay.dim - d1))
    content = BlockMatrix(split, split).set("question", "question", 1)
    if "qk1-stray-block" not in fixes:
        content.set("after_question", "question", rect_eye(lay.dim - d1, d1))  # printed I_{(d'-d1) x d1}
    W = content.build()
    pb = position_blocks(task)
    allowed = np.zeros((task.length, task.length), dtype=bool)
    for b in pb.names:
        s = pb.slice(b)
        allowed[s, s] = True
    # Lemma 2: W_pp = 0 inside each block, a concrete negative value (the printed -infinity) outside
    mask = constrained_attention(lay, BlockMatrix(lay, lay), allowed, mask_value(W, lay))
    qk = W + mask
    qk.flags.writeable = False
    cols = Layout.of(("tokens", lay.offset("position")), *[(f"pos_{b}", pb.size(b)) for b in pb.names],
                     ("template", task.l + 2))
    v = BlockMatrix(lay, cols)
    for b in range(task.k):
        v.set("template", f"pos_ctx{b}", 1)  # I_{(l+2) x (l+2)}, k times
    v.set("template", "pos_query", rect_eye(task.l + 2, task.l + 1))  # I_{(l+2) x (l+1)}
    return Head(qk, v.build())


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


def layer2(task, lay: Layout, fixes: frozenset) -> Head:
    qk = instructive_attention(lay, alpha2(task, fixes))
    v = BlockMatrix(lay, lay)
    for b in ("question", "response", "answer"):
        v.set(b, b, 1)  # I_d
    for b in ("position", "template"):
        v.set(b, b, -1)  # -I_{d'-d}
    return Head(qk, v.build())


def layer3(task, lay: Layout, fixes: frozenset) -> tuple[Head, ...]:
    l = task.l
    if "layer3-rows" in fixes:
        sub = Layout.of(("front", lay.offset("template")), ("template_q", l), ("template_ra", 2))
        where = "template_q"
    else:
        sub = Layout.of(("front", lay.dim - l), ("last_l", l))  # printed: the last l rows of d'
        where = "last_l"
    value = BlockMatrix(lay, lay)
    for b in lay.names:
        value.set(b, b, -1)
    value = value.build()
    heads = []
    for i in range(2 * l):
        Mi = zeros(l, l)
        Mi[i % l, i % l] = Fraction(1 if i < l else -1)
        qk = BlockMatrix(sub, sub).set(where, where, Mi).build()
        if "final-self-mask" in fixes:
            qk = qk.copy()
            qk[lay.index("response", 0), lay.index("response", 0)] = Fraction(-(l * l))
            qk.flags.writeable = False
        heads.append(Head(qk, value))
    return tuple(heads)


def build(task: InContextTemplateMatching, as_printed: bool = False) -> Construction:
    """Theorem 6 as printed, or with the smallest fixes (module docstring)."""
    return build_with(task, frozenset() if as_printed else ALL_FIXES)


def build_with(task: InContextTemplateMatching, fixes: frozenset) -> Construction:
    """Theorem 6 with a chosen subset of ALL_FIXES (frozenset() = as printed)."""
    lay = layout(task)
    layers = ((layer1(task, lay, fixes),), (layer2(task, lay, fixes),), layer3(task, lay, fixes))
    W_O = BlockMatrix(Layout.of(("answer", task.n_a)), lay).set("answer", "answer", 1).build()
    model = Model(task.vocab, task.length, task.classes, lay, layers, W_O, name="parsing-copying-matching")
    return Construction("ictm", "parsing-copying-matching", THEOREM, model, not fixes,
                        "layer 1 parses each question into its template; layer 2 copies answers and "
                        "subtracts the query's template; layer 3 (2l heads) subtracts the answers of "
                        "mismatched blocks from the final =",
                        (f"fixes: {', '.join(sorted(fixes))}",) if fixes else ())


BUILDERS = {"ictm": {"parsing-copying-matching": build}}
