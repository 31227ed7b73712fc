"""Paper Theorem 1 / Lemma 4: one layer, n heads, d' = max(n d, d + n) memorizes any
sequence-classification dataset with distinct labels.

Heads 0..n-2 (Lemma 1 instructive attention from the CLS position to position i) copy token i
into slot i with W_V = n * (slot_i <- token); head n-1 attends to itself with W_V = -n I and
cancels the residual.  The last column becomes the concatenation [x_0; ...; x_{n-2}; 0].  The slots
overlap the token and position blocks, as in the paper (that is why d' = max(nd, d+n)); they are a
second named partition of the same stream.

The layer is written once for every size (`lemma4_rules`: copy head h as rules in h, d, n; see
constructions/head_family.py), so `verify-construction sc --all-sizes` reads the same object with
symbolic sizes.  Read-outs: by default the closed form W_O[y(s)] = the concatenation of s's
one-hots (class y(s) scores the number of positions where a sequence agrees with s: margin 1 at
every size); as printed (`--as-printed`), the paper's Lemma 3 incremental classifier applied to the
layer's actual outputs (the paper's existence proof followed literally, fitted point by point).
"""
from __future__ import annotations

from fractions import Fraction

from depthcert.checkers.budget import charge_weights
from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import SequenceClassification
from depthcert.constructions.attention import instructive_attention, position_map
from depthcert.constructions.classifier import lemma3_classifier, lemma3_guard
from depthcert.constructions.construction import Construction
from depthcert.constructions.head_family import (Copy, Entry, HeadFamily, HeadRules, Scaled, Template, family_heads,
                                                 rules_matrix, template_readout)
from depthcert.constructions.indexed import SizeBranch, SizeRange, SymbolicTask, is_symbolic

THEOREM = "Theorem 1 / Lemma 4 (one-layer memorization, n heads)"
# the range of a run for every size: h is the index of a generic copy head, 0 <= h <= L - 1
SIZES = SizeRange.of(("h", 0), ("L", 1, "h"), ("M", 1))


def symbolic_task(point: dict | None = None) -> SymbolicTask:
    """SC with symbolic L (sequence length before CLS), M (alphabet) and a generic head index h."""
    return SymbolicTask("sc", SIZES if point is None else SIZES.at(point),
                        derived={"d": lambda s: s["M"] + 1, "n": lambda s: s["L"] + 1})


def layouts(d: int, n: int) -> tuple[Layout, Layout]:
    """(input partition [token; position; pad], slot partition [slot_0..slot_{n-1}; pad])."""
    dim = max(n * d, d + n)
    inp = Layout.of(("token", d), ("position", n)).padded(dim, "pad")
    slots = Layout.of(*[(f"slot{i}", d) for i in range(n)]).padded(dim, "pad")
    return inp, slots


def lemma4_heads(lay: Layout, slots: Layout, n: int, source: str, copies: int) -> list[Head]:
    """Lemma 4's heads: head i (i < copies) attends from the last position to position i and
    writes n * (block `source` of that column) into slot i; the last head cancels the residual."""
    heads = []
    for i in range(copies):
        qk = instructive_attention(lay, position_map(n, [(i, n - 1)]))
        heads.append(Head(qk, BlockMatrix(slots, lay).set(f"slot{i}", source, n).build()))
    neutral_v = BlockMatrix(lay, lay)
    for b in lay.names:
        neutral_v.set(b, b, -n)
    heads.append(Head(instructive_attention(lay, position_map(n, [(j, j) for j in range(n)])), neutral_v.build()))
    return heads


class Lemma4:
    """Theorem 1's construction for every size: d token rows, n positions, d' rows, the copy heads
    as a family, the cancel head, the read-out (a Template, or None for Lemma 3's)."""

    def __init__(self, d, n, copies: HeadFamily, last: tuple, readout: Template | None):
        self.d, self.n = d, n
        self.dim = n * d if n * d >= d + n else d + n  # max(n d, d + n), decided for every size
        self.copies, self.last, self.readout = copies, last, readout

    def layout(self) -> Layout:
        return Layout.of(("token", int(self.d)), ("position", int(self.n))).padded(int(self.dim), "pad")

    def heads(self, lay: Layout) -> tuple[Head, ...]:
        return tuple(Head(rules_matrix(r.qk, lay), rules_matrix(r.v, lay))
                     for r in family_heads(self.copies) + list(self.last))

    def instantiate(self, task) -> Model:
        """The concrete model for the task's dataset: the rules filled in, the read-out over its points."""
        lay = self.layout()
        heads = self.heads(lay)
        charge_weights(len(task.classes) * lay.dim, f"the read-out, {len(task.classes)} classes x {lay.dim}")
        W_O = template_readout(self.readout, task, lay.dim)
        return Model(task.vocab, task.length, task.classes, lay, (heads,), W_O, name="memorization")


def lemma4_rules(d, n) -> tuple[HeadFamily, tuple]:
    """Lemma 4 for every size: copy head h < n - 1 attends from the last position to position h and
    writes n * token into rows h d ..; the cancel head attends each position to itself, W_V = -n I."""

    def copy_head(h):
        return HeadRules(qk=(Entry("position", h, "position", n - 1, 1),), v=(Copy(h * d, "token", n),))

    cancel = HeadRules(qk=(Scaled("position", 1),), v=(Scaled(None, -n),))
    return HeadFamily(n - 1, copy_head), (cancel,)


def template(d, n) -> Template:
    """The closed-form read-out: the class of s has weight 1 at row h d + s_h of slot h, h < n - 1."""
    return Template(n - 1, lambda h: (h * d, 1))


def _check_dataset_shape(task) -> None:
    if isinstance(task, SequenceClassification):
        return
    lengths, last, labels = set(), set(), []
    for batch in task.batches(4096):
        lengths.add(batch.ids.shape[1])
        last.update(int(t) for t in batch.ids[:, -1])
        labels.extend(int(y) for y in batch.labels)
    if len(lengths) > 1:
        raise BadInput(f"Theorem 1's construction needs sequences of one length; the dataset has lengths {sorted(lengths)}")
    if len(last) > 1:
        raise BadInput("Theorem 1's construction reads positions 0..n-2 from the last one: every sequence must end "
                       "with the same token (the paper appends a CLS token)")
    if len(set(labels)) != len(labels):
        raise BadInput("Theorem 1 (Lemma 3) needs pairwise distinct labels; the dataset repeats a label")


def spec(task, readout: bool = True, rules=lemma4_rules, read=template) -> Lemma4:
    """The construction for every size (a symbolic task) or at the task's sizes (`rules`, `read`:
    the builder's functions, replaceable by a caller who changes the construction)."""
    if is_symbolic(task):
        d, n = task.d, task.n
    else:
        _check_dataset_shape(task)
        d, n = len(task.vocab), task.length
    copies, last = rules(d, n)
    return Lemma4(d, n, copies, last, read(d, n) if readout else None)


def build(task: SequenceClassification, as_printed: bool = False, rules=lemma4_rules,
          read=template) -> Construction:
    """Lemma 4's layer and the closed-form read-out (as printed: the paper's Lemma 3 classifier).  Also
    accepts a user dataset (checkers.tasks.dataset_file.DatasetTask) of equal-length sequences sharing
    their last token (the CLS) with pairwise distinct labels."""
    if as_printed:
        return build_lemma3(task, rules)
    if not is_symbolic(task):  # the closed value (this function run once with symbols) instantiated
        from dataclasses import replace

        from depthcert.constructions.closed import instantiate

        from depthcert.constructions.closed import NotClosed

        _check_dataset_shape(task)
        try:
            value = closed_value(rules, read)
        except NotClosed:  # rules that are no closed value: built at the task's sizes, finite only
            return replace(_construction(as_printed, None), model=spec(task, True, rules, read).instantiate(task))
        model = instantiate(value, {"L": task.length - 1, "M": len(task.vocab) - 1}, task)
        return replace(_construction(as_printed, value), model=model)
    return _construction(as_printed, spec(task, True, rules, read))


def _construction(as_printed: bool, s) -> Construction:
    return Construction("sc", "heads", THEOREM, None, as_printed, "copy token i into slot i (n-1 heads), cancel "
                        "the residual (1 head), read-out: the sequences' one-hots", symbolic=s)


def closed_value(rules=lemma4_rules, read=template):
    """Theorem 1's closed value (constructions/closed.ClosedHeadFamily): the builder run once with
    symbolic h, L, M."""
    from depthcert.constructions.closed import cached_value

    return cached_value(("sc", "heads", rules, read), lambda s: build(s, False, rules, read), symbolic_task)


def build_lemma3(task: SequenceClassification, rules=lemma4_rules) -> Construction:
    """Lemma 4's layer and the paper's Lemma 3 classifier, fitted on the layer's actual outputs."""
    if is_symbolic(task):
        raise SizeBranch("Lemma 3's classifier (as printed) is fitted point by point on the layer's outputs: no "
                         "read-out stated for every size", "constructions/memorization.py: build_lemma3")
    s = spec(task, False, rules)
    inp = s.layout()
    heads = s.heads(inp)
    n = task.length
    lemma3_guard(task.size, inp.dim)  # before the probe: it costs as much as the classifier's input
    # Read the layer's actual last column on every point (W_O = I), then apply Lemma 3 to
    # those exact vectors: the classifier rests on what the layer computes, not on the lemma.
    probe_out = BlockMatrix(inp, inp)
    for b in inp.names:
        probe_out.set(b, b, 1)
    probe = Model(task.vocab, n, tuple(f"h{r}" for r in range(inp.dim)), inp, (tuple(heads),), probe_out.build())
    ev = Evaluator(probe)
    vectors, labels = [], []
    for batch in task.batches(4096):
        num, den = ev.logits(batch.ids)
        for row, y in zip(num, batch.labels):
            vectors.append([Fraction(int(v), den) for v in row])
            labels.append(int(y))
    W_O = lemma3_classifier(vectors, labels, n_classes=len(task.classes))
    model = Model(task.vocab, n, task.classes, inp, (tuple(heads),), W_O, name="memorization")
    return Construction("sc", "heads", THEOREM, model, True,
                        "copy token i into slot i (n-1 heads), cancel the residual (1 head), Lemma 3 classifier",
                        (), "lemma3")
