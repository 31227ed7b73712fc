"""The exact attention-only transformer of paper eq. 1-3.

    H0 = [X; P; 0]   X one-hot tokens (rows 0..V-1, in the model's vocabulary order),
                     P one-hot positions (rows V..V+P-1), zero padding up to d'
    H  <- H + (1/m) sum_i W_Vi H sigma(H^T W_QKi H)      entry (j, k): key j, query k
    o  =  W_O h_last                                     one logit per class

sigma is ReLU.  Weights are Fractions, inputs are 0/1, so every value is rational; this
module only holds and validates the weights.  Evaluation lives in `checkers.evaluate`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Layout


@dataclass(frozen=True)
class Head:
    W_QK: np.ndarray  # (d', d') Fractions
    W_V: np.ndarray  # (d', d') Fractions


@dataclass(frozen=True)
class Model:
    """An attention-only transformer with exact weights.

    vocab:      token names; token vocab[t] embeds as the one-hot row t.
    max_length: size of the one-hot position block (sequences of length <= max_length).
    classes:    output names; row c of W_O scores class classes[c].
    layout:     named blocks covering all d' rows (documentation and block access).
    layers:     a tuple of layers, each a tuple of heads.
    """

    vocab: tuple[str, ...]
    max_length: int
    classes: tuple[str, ...]
    layout: Layout
    layers: tuple[tuple[Head, ...], ...]
    W_O: np.ndarray  # (C, d') Fractions
    name: str = ""
    notes: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        d = self.layout.dim
        if len(set(self.vocab)) != len(self.vocab):
            raise BadInput("model vocabulary has duplicate tokens")
        if len(set(self.classes)) != len(self.classes):
            raise BadInput("model classes have duplicates")
        if self.max_length < 1:
            raise BadInput(f"max_length must be >= 1, got {self.max_length}")
        if len(self.vocab) + self.max_length > d:
            raise BadInput(
                f"d' = {d} is smaller than vocabulary ({len(self.vocab)}) + positions ({self.max_length})"
            )
        for li, layer in enumerate(self.layers):
            if len(layer) == 0:
                raise BadInput(f"layers[{li}] has no heads")
            for hi, head in enumerate(layer):
                for key in ("W_QK", "W_V"):
                    m = getattr(head, key)
                    if m.shape != (d, d):
                        raise BadInput(f"layers[{li}][{hi}].{key} has shape {m.shape}, expected ({d}, {d})")
        if self.W_O.shape != (len(self.classes), d):
            raise BadInput(f"W_O has shape {self.W_O.shape}, expected ({len(self.classes)}, {d})")

    @property
    def dim(self) -> int:
        return self.layout.dim

    @property
    def heads(self) -> tuple[int, ...]:
        return tuple(len(layer) for layer in self.layers)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def with_weight(self, where: tuple, value) -> "Model":
        """A copy with one entry changed: where = ("W_O", i, j) or (layer, head, "W_QK"|"W_V", i, j)."""
        value = Fraction(value)
        if where[0] == "W_O":
            W = self.W_O.copy()
            W[where[1], where[2]] = value
            W.flags.writeable = False
            return _replace(self, W_O=W)
        li, hi, key, i, j = where
        layers = [list(layer) for layer in self.layers]
        head = layers[li][hi]
        M = getattr(head, key).copy()
        M[i, j] = value
        M.flags.writeable = False
        layers[li][hi] = Head(**{**head.__dict__, key: M})
        return _replace(self, layers=tuple(tuple(layer) for layer in layers))


def _replace(model: Model, **changes) -> Model:
    from dataclasses import replace

    return replace(model, **changes)


def embed_exact(model: Model, token_ids) -> list[list[Fraction]]:
    """H0 for one sequence as a d' x n list of Fractions (the reference embedding)."""
    n = len(token_ids)
    V = len(model.vocab)
    H = [[Fraction(0)] * n for _ in range(model.dim)]
    for pos, t in enumerate(token_ids):
        H[t][pos] = Fraction(1)
        H[V + pos][pos] = Fraction(1)
    return H
