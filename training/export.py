"""A trained model as exact rationals, and its accuracy decided on every point.

A trained network is OBSERVED to work on sampled points.  Its float32 weights are dyadic
rationals (Fraction(float) is exact), so `to_exact(model, task)` is the very network that was
trained, as a `checkers.model.Model`, and `exact_accuracy` decides its accuracy on *every* point
of a finite dataset (checkers/accuracy.py): an exact statement about the trained network itself,
not about training in general.  `bits=B` instead rounds every weight to a multiple of 2^-B (the
older, smaller-denominator check of a nearby network).
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


def _rounded(M, bits: int | None) -> np.ndarray:
    """bits None: every float weight as the exact rational it is; else rounded to a multiple of 2^-bits."""
    M = np.asarray(M, dtype=np.float64)
    out = np.empty(M.shape, dtype=object)
    if bits is None:
        if not np.isfinite(M).all():
            raise BadInput("the trained weights have a NaN or infinite entry")
        for idx, v in np.ndenumerate(M):
            out[idx] = Fraction(float(v))
    else:
        q = 1 << bits
        A = np.rint(M * q).astype(np.int64)
        for idx, v in np.ndenumerate(A):
            out[idx] = Fraction(int(v), q)
    out.flags.writeable = False
    return out


def to_exact(model, task, bits: int | None = None) -> Model:
    """The trained model (ReLU or softmax attention) with exact weights: its float32 weights as they are (bits None),
    or every weight rounded to the nearest multiple of 2^-bits.

    `task` needs vocab, classes and a sequence length (`length`, or `seq_len` for the copy task);
    a model with outputs "all" or a causal mask becomes the checker's widened class."""
    attention = model.shape.attention  # relu (the paper's) or softmax: weights exp(score), no scale
    if attention not in ("relu", "softmax"):
        raise BadInput(f"attention {attention!r} has no exact counterpart (relu or softmax)")
    V, d = len(task.vocab), model.shape.dim
    n = getattr(task, "seq_len", None) or task.length
    layout = Layout.of(("token", V), ("position", n)).padded(d)
    layers = []
    for Wqk, Wv in zip(model.W_QK, model.W_V):
        Wqk, Wv = Wqk.detach().double().numpy(), Wv.detach().double().numpy()
        heads = tuple(Head(_rounded(Wqk[h], bits), _rounded(Wv[h], bits), attention=attention) for h in range(Wqk.shape[0]))
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
    bits: int | None  # None: the float32 weights as trained
    wrong: tuple[int, ...] = ()  # indices of the wrong points (ties count as wrong)

    @property
    def accuracy(self) -> float:
        return self.correct / self.points


def exact_accuracy(exact: Model, task: Task, batch: int = 2048, bits: int | None = None) -> ExactCheck:
    """Exact accuracy of the exact model on every point of the task (a point counts as correct only
    if its label's logit is strictly larger than every other logit), by checkers.accuracy."""
    from depthcert.checkers.accuracy import decide_all

    if task.size > MAX_EXACT_POINTS:
        raise BadInput(f"task has {task.size} points; exact checking is limited to {MAX_EXACT_POINTS}")
    v = decide_all(exact, task, batch_size=batch)
    return ExactCheck(task.size, v.correct, v.path, bits, tuple(int(i) for i in v.wrong))
