"""Round a trained model to exact rationals and check it with the exact evaluator.

A trained network is OBSERVED to work on sampled points; rounding every weight to a multiple of
1/2^bits gives a `checkers.model.Model` whose accuracy on *every* point of a finite dataset the
exact evaluator decides.  That turns "the trained model looks right" into an exact statement
about one specific (rounded) network, not about training in general.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Layout
from depthcert.checkers.model import Head, Layer, Model
from depthcert.checkers.tasks import Task

MAX_EXACT_POINTS = 200_000


def _rounded(M, bits: int) -> np.ndarray:
    q = 1 << bits
    A = np.rint(np.asarray(M, dtype=np.float64) * q).astype(np.int64)
    out = np.empty(A.shape, dtype=object)
    for idx, v in np.ndenumerate(A):
        out[idx] = Fraction(int(v), q)
    out.flags.writeable = False
    return out


def to_exact(model, task, bits: int = 12) -> Model:
    """The trained ReLU model with every weight rounded to the nearest multiple of 2^-bits.

    `task` needs vocab, classes and a sequence length (`length`, or `seq_len` for the copy task);
    a model with outputs "all" or a causal mask becomes the checker's widened class."""
    if model.shape.attention != "relu":
        raise BadInput("only ReLU-attention models match the verifier's model class")
    V, d = len(task.vocab), model.shape.dim
    n = getattr(task, "seq_len", None) or task.length
    layout = Layout.of(("token", V), ("position", n)).padded(d)
    layers = []
    for Wqk, Wv in zip(model.W_QK, model.W_V):
        Wqk, Wv = Wqk.detach().double().numpy(), Wv.detach().double().numpy()
        heads = tuple(Head(_rounded(Wqk[h], bits), _rounded(Wv[h], bits)) for h in range(Wqk.shape[0]))
        layers.append(Layer(heads, causal=bool(getattr(model.shape, "causal", False))))
    return Model(
        vocab=tuple(task.vocab),
        max_length=n,
        classes=tuple(task.classes),
        layout=layout,
        layers=tuple(layers),
        W_O=_rounded(model.W_O.detach().double().numpy(), bits),
        name=f"trained-{task.name}",
        outputs=getattr(model.shape, "outputs", "last"),
    )


@dataclass(frozen=True)
class ExactCheck:
    points: int
    correct: int
    path: str  # evaluator path (float64 proven exact, or big integers)
    bits: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.points


def exact_accuracy(exact: Model, task: Task, batch: int = 2048, bits: int = 12) -> ExactCheck:
    """Exact accuracy of a rounded model on every point of the task (a point counts as correct only
    if its label's logit is strictly larger than every other logit)."""
    from depthcert.checkers.evaluate import Evaluator

    if task.size > MAX_EXACT_POINTS:
        raise BadInput(f"task has {task.size} points; exact checking is limited to {MAX_EXACT_POINTS}")
    ev = Evaluator(exact)
    correct = 0
    for b in task.batches(batch):
        num, _ = ev.logits(b.ids)
        num = np.asarray(num)
        rows = np.arange(len(b.labels))
        own = num[rows, b.labels]
        other = num.copy()
        other[rows, b.labels] = num.min(axis=1) - 1 if num.dtype != object else None
        if num.dtype == object:
            ok = [all(num[r, c] < own[r] for c in range(num.shape[1]) if c != b.labels[r]) for r in rows]
            correct += int(sum(ok))
        else:
            correct += int((own > other.max(axis=1)).sum())
    return ExactCheck(task.size, correct, ev.path, bits)
