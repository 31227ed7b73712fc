"""Paper Theorem 5 (section 14.2): two layers solve template matching by parsing-mapping.

Stream blocks, as in the H^(0) of section 14.2: token (the m alphabet tokens), response (the CLS
row), position (n = l+1 one-hot positions), then padding.

Layer 1 (parsing, one head): W_QK = I on (token, token), so position i attends exactly the
positions holding its token; W_V = -I on (token, response) and I from the positions into the
position block.  Column i's position block becomes p_i + p'_i, p'_i = sum of p_j over x_j = x_i:
a 0/1/2 matrix that depends only on the template.
Layer 2 (mapping), two variants the paper gives:
  "ternary": one head, Lemma 1 attention from the CLS position to position i with weight
             3^(l-1-i), W_V = I: the CLS column gets every row of the template matrix as a
             ternary number;
  "heads":   Lemma 4 with n = l+1 heads: head i copies the template column of position i into
             slot i, the last head cancels the residual.
The classifier is Lemma 3 applied to the last column of one representative per template.

Printed errors (docs/errata.md), fixed unless as_printed:
  * W_V^(1) reads its "I_{n x n}" from the first n coordinates of the stream (the printed column
    split is n | d'-n), i.e. from the token rows, not from the position block;
  * layer 1 does not cancel the token rows: position i attends c_i >= 1 equal tokens, so its token
    part is (1 - c_i) x_i, not 0; with W_V^(2) = I this residue reaches the CLS column and depends
    on the substitution.  Fix: W_V^(2) = I on the position block only (ternary);
  * "heads": Lemma 4 verbatim copies the token rows, which after layer 1 hold only the residue
    (1 - c_i) x_i (zero for a template without repeats, so Lemma 3 cannot apply); the fix copies
    the position block, where the template is.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import CLS
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.layout import BlockMatrix, Layout, eye
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks.template import TemplateMatching
from depthcert.constructions.classifier import lemma3_classifier, lemma3_guard
from depthcert.constructions.indexed import (IndexedHead, IndexedLayout, IndexedMatrix, IndexSet, Segment, SizeBranch,
                                             SizeRange, SymbolicModel, SymbolicTask, finite_build, is_symbolic,
                                             precheck_weights)
from depthcert.constructions.memorization import lemma4_heads
from depthcert.constructions.construction import Construction

THEOREM = "Theorem 5 (two-layer parsing-mapping)"


def base_layout(task: TemplateMatching) -> Layout:
    """[token; response; position] of section 14.2 (d' = d + n with d = m + 1 counting the CLS row)."""
    return Layout.of(("token", task.m), ("response", 1), ("position", task.length))


def parsing_layer(lay: Layout, n: int, as_printed: bool) -> Head:
    """Layer 1 of section 14.2 (one head); as_printed reads the value from the first n rows."""
    qk = BlockMatrix(lay, lay).set("token", "token", 1).build()
    v = BlockMatrix(lay, lay).set("token", "token", -1).set("response", "response", -1)
    if as_printed:
        # printed: rows of the position block <- I_{n x n} in the first n columns of the stream
        lead = Layout.of(("first_n", n)).padded(lay.dim, "rest")
        extra = BlockMatrix(lay, lead).set("position", "first_n", 1).build()
        v = v.build() + extra
        v.flags.writeable = False
    else:
        v = v.set("position", "position", 1).build()
    return Head(qk, v)


def last_columns(task, lay: Layout, layers, ids) -> list[list[Fraction]]:
    """Exact last column h^(L)_{n-1} of each token-id sequence (a probe model with W_O = I)."""
    probe = Model(task.vocab, task.length, tuple(f"h{r}" for r in range(lay.dim)), lay, layers,
                  eye(lay.dim), name="probe")
    num, den = Evaluator(probe).logits(np.asarray(ids, dtype=np.int64))
    return [[Fraction(int(v), den) for v in row] for row in num]


def classifier(task: TemplateMatching, lay: Layout, layers, notes: list[str], lemma3: bool = True) -> np.ndarray:
    """Lemma 3 on the last column of one representative sequence per template (lemma3=False:
    W_O = 0, for a fitted read-out)."""
    if not lemma3:
        return np.full((len(task.classes), lay.dim), Fraction(0), dtype=object)
    lemma3_guard(len(task.classes), lay.dim)  # before the probe evaluates one sequence per class
    reps = [task.representative(t) for t in range(len(task.classes))]
    vectors = last_columns(task, lay, layers, reps)
    if len(vectors) == 1:
        return np.full((1, lay.dim), Fraction(0), dtype=object)
    try:
        return lemma3_classifier(vectors, list(range(len(vectors))), n_classes=len(task.classes))
    except BadInput as exc:
        notes.append(f"Lemma 3 does not apply to these weights ({exc}); W_O = 0 (every logit ties)")
        return np.full((len(task.classes), lay.dim), Fraction(0), dtype=object)


def _model(task, lay, layers, name, notes, lemma3: bool = True) -> Model:
    W_O = classifier(task, lay, layers, notes, lemma3)
    W_O.flags.writeable = False
    return Model(task.vocab, task.length, task.classes, lay, layers, W_O, name=name)


ALL_FIXES = frozenset({"value-columns", "layer2-source"})


def build_ternary(task: TemplateMatching, as_printed: bool = False, lemma3: bool = True) -> Construction:
    """Theorem 5, one head per layer, d' = d + n: layer 2 encodes each template row in ternary."""
    return build_ternary_with(task, frozenset() if as_printed else ALL_FIXES, lemma3)


def build_heads(task: TemplateMatching, as_printed: bool = False, lemma3: bool = True) -> Construction:
    """Theorem 5 with layer 2 = Lemma 4 memorization (n = l+1 heads), d' = max(l * s, d + n)."""
    return build_heads_with(task, frozenset() if as_printed else ALL_FIXES, lemma3)


def symbolic_task(l: int, point: dict | None = None) -> SymbolicTask:
    """Template matching with a symbolic alphabet m at a fixed l: m >= l for a proof for every size
    (every template occurs), or held at any m >= 1 for a finite build."""
    rng = SizeRange.of(("m", l)) if point is None else SizeRange.of(("m", 1)).at(point)
    return SymbolicTask("tm", rng, fixed={"l": l, "length": l + 1})


def _stream(task):
    n = task.length
    return IndexedLayout(Segment("token", IndexSet("m", task.m), ("tok:m",)), Segment("response", None, (f"tok:{CLS}",)),
                         Segment("position", None, tuple(f"pos{j}" for j in range(n))))


def _parsing(task, stream, as_printed: bool) -> IndexedHead:
    """Layer 1 (one head) on the set-indexed stream; as_printed reads the value from the first n rows
    (one entry per member: a finite build only)."""
    qk = IndexedMatrix(stream, stream).same("tok:m", "tok:m", same=1)
    v = IndexedMatrix(stream, stream).same("tok:m", "tok:m", same=-1).set(f"tok:{CLS}", f"tok:{CLS}", -1)
    n = task.length
    if as_printed:
        rows = [("tok:m", i) for i in range(task.m)] + [(f"tok:{CLS}", 0)] + [(f"pos{j}", 0) for j in range(n)]
        for i in range(n):
            v.member(f"pos{i}", 0, rows[i][0], rows[i][1], 1)
    else:
        for j in range(n):
            v.set(f"pos{j}", f"pos{j}", 1)
    return IndexedHead(qk, v)


def _indexed_classifier(task, stream, classes, layers, notes) -> IndexedMatrix:
    """Lemma 3 on the last column of one representative per template, computed at the alphabet
    m0 = l (the representatives use at most l tokens), or at m itself when m < l (fewer templates);
    written as a table when a class weighs every alphabet token alike.  Otherwise the read-out is not
    set-indexed: a finite build computes it at its own m, one entry per member; a run for every
    size stops (SizeBranch)."""
    from depthcert.checkers.tasks.template import TemplateMatching as TM

    def fit(m0: int):
        values0 = {"m": m0}
        layers0 = tuple(tuple(Head(h.W_QK.instantiate(values0), h.W_V.instantiate(values0)) for h in layer)
                        for layer in layers)
        here: list[str] = []
        W0 = classifier(TM(task.l, m0), stream.layout(values0), layers0, here)
        return W0, stream.rows(values0), classes.rows(values0), here

    per_member = any(h.W_QK.members or h.W_V.members for layer in layers for h in layer)
    m0 = int(task.m) if per_member or task.m < task.l else task.l  # per-member entries: a finite build at m
    W0, rows0, crows, here = fit(m0)
    invariant = all(len({W0[ci, r] for r, (f, _) in enumerate(rows0) if f == "tok:m"}) <= 1 for ci in range(len(crows)))
    if not invariant:
        if task.range.point is None:
            raise SizeBranch("the Lemma 3 classifier weighs the alphabet tokens differently: not set-indexed",
                             "constructions/parsing_mapping.py: _indexed_classifier")
        if m0 != task.range.point["m"]:
            W0, rows0, crows, here = fit(task.range.point["m"])
    notes.extend(here)
    W = IndexedMatrix(classes, stream)
    for ci, (cf, _) in enumerate(crows):
        for r, (f, e) in enumerate(rows0):
            if f != "tok:m":
                W.set(cf, f, W0[ci, r])
            elif invariant:
                W.set(cf, f, W0[ci, r])
            else:
                W.member(cf, 0, f, e, W0[ci, r])
    return W


def _closed_args(fixes: frozenset, lemma3: bool, l: int):
    return (("tm", "ternary", fixes, lemma3, l), (lambda s: build_ternary_with(s, fixes, lemma3)),
            (lambda: symbolic_task(l)))


def closed_value(l: int, as_printed: bool = False, lemma3: bool = True):
    """The ternary variant's closed value at l: the builder run once with symbolic m >= l (NotClosed
    as printed, or when the read-out weighs the alphabet tokens differently)."""
    from depthcert.constructions.closed import cached_value

    return cached_value(*_closed_args(frozenset() if as_printed else ALL_FIXES, lemma3, l))


def build_ternary_with(task, fixes: frozenset, lemma3: bool = True) -> Construction:
    """The ternary variant with a chosen subset of ALL_FIXES (frozenset() = as printed)."""
    as_printed = not fixes
    if not is_symbolic(task):
        lay = base_layout(task)
        precheck_weights(5 * lay.dim * lay.dim, f"2 layers of {lay.dim} x {lay.dim} matrices")
        from depthcert.constructions.closed import build_or_finite

        # the closed value (m >= l) instantiated; m < l, or a read-out / as-printed value with entries of
        # one member: the builder held at the task's m (finite only)
        return build_or_finite(
            *_closed_args(fixes, lemma3, task.l), task, {"m": task.m},
            lambda: finite_build(lambda t, _ap: build_ternary_with(t, fixes, lemma3), task,
                                 lambda pt: symbolic_task(task.l, pt), {"m": task.m}, as_printed))
    stream = _stream(task)
    n, l = task.length, task.l
    qk2 = IndexedMatrix(stream, stream)
    for i in range(l):
        qk2.set(f"pos{i}", f"pos{n - 1}", 3 ** (l - 1 - i))
    v2 = IndexedMatrix(stream, stream)
    if "layer2-source" not in fixes:
        v2.identity()  # W_V^(2) = I
    else:
        for j in range(n):
            v2.set(f"pos{j}", f"pos{j}", 1)  # the template lives here; token rows keep a residue
    layers = ((_parsing(task, stream, "value-columns" not in fixes),), (IndexedHead(qk2, v2),))
    from depthcert.checkers.tasks.template import TemplateMatching as TM

    names = TM(l, int(task.m) if task.m < l else l).classes
    classes = IndexedLayout(Segment("class", None, tuple(f"cls:{c}" for c in names)))
    positions = IndexedLayout(Segment("position", None, tuple(f"col{j}" for j in range(n))))
    notes: list[str] = []
    W_O = _indexed_classifier(task, stream, classes, layers, notes) if lemma3 else IndexedMatrix(classes, stream)
    sym = SymbolicModel("parsing-mapping-ternary", stream, positions, classes, layers, W_O, task.range)
    return Construction("tm", "ternary", THEOREM, None, as_printed,
                        "layer 1 parses the sequence into its template matrix; layer 2 (one head) "
                        "writes each row as a ternary number into the CLS column; "
                        + ("Lemma 3 classifier" if lemma3 else "fitted read-out"),
                        tuple(notes), "lemma3" if lemma3 else "none", symbolic=sym)


def build_heads_with(task: TemplateMatching, fixes: frozenset, lemma3: bool = True) -> Construction:
    """The heads variant with a chosen subset of ALL_FIXES (frozenset() = as printed)."""
    as_printed = not fixes
    base = base_layout(task)
    n, l = task.length, task.l
    src = "position" if "layer2-source" in fixes else "token"  # Lemma 4 verbatim copies the token rows
    s = base.size(src)
    dim = max(l * s, base.dim)
    lay = base.padded(dim, "pad")
    slots = Layout.of(*[(f"slot{i}", s) for i in range(l)]).padded(dim, "pad")
    heads = lemma4_heads(lay, slots, n, src, l)
    layers = ((parsing_layer(lay, n, "value-columns" not in fixes),), tuple(heads))
    notes: list[str] = []
    model = _model(task, lay, layers, "parsing-mapping-heads", notes, lemma3)
    return Construction("tm", "heads", THEOREM, model, as_printed,
                        "layer 1 parses the sequence into its template matrix; layer 2 (Lemma 4, "
                        f"{n} heads) copies each template column into its own slot; Lemma 3 classifier",
                        tuple(notes), "lemma3" if lemma3 else "none")


BUILDERS = {"tm": {"heads": build_heads, "ternary": build_ternary}}
