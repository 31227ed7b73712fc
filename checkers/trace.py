"""An exact trace of one forward pass: every layer's H and every head's attention map.

Same semantics as checkers/model.py (paper eq. 1-3): H0 = [X; P; 0];
H <- H + (1/m) sum_i W_Vi H relu(H^T W_QKi H), entry (j, k) of the map = key j, query k;
logits = W_O h_last.  All values are Fractions (never floats); the final logits equal
`checkers.evaluate.logits_fraction_reference` (tests/test_pictures.py checks this).
Used by proofs/pictures.py to draw attention maps like the paper's Figure 3.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Model, embed_exact


@dataclass(frozen=True)
class Trace:
    tokens: tuple[str, ...]
    H: tuple[np.ndarray, ...]  # H[0] = input, H[l] = after layer l; each (d', n) Fractions
    attention: tuple[tuple[np.ndarray, ...], ...]  # [layer][head] (n, n): relu(H^T W_QK H), key j, query k
    logits: tuple[Fraction, ...]  # one per model class, at the last position

    @property
    def predicted(self) -> int:
        """Index of the largest logit (the first of them on a tie)."""
        best = max(self.logits)
        return self.logits.index(best)


def _relu(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    for idx, v in np.ndenumerate(x):
        if v < 0:
            out[idx] = Fraction(0)
    return out


def trace(model: Model, token_ids: Sequence[int]) -> Trace:
    """Run `model` on one sequence of token ids (indices into model.vocab), keeping everything."""
    ids = [int(t) for t in token_ids]
    if not ids:
        raise BadInput("cannot trace an empty sequence")
    if len(ids) > model.max_length:
        raise BadInput(f"sequence length {len(ids)} exceeds the model's {model.max_length} positions")
    bad = [t for t in ids if not 0 <= t < len(model.vocab)]
    if bad:
        raise BadInput(f"token id {bad[0]} is outside the model vocabulary (0 .. {len(model.vocab) - 1})")
    H = np.array(embed_exact(model, ids), dtype=object)
    Hs = [H]
    maps = []
    for layer in model.layers:
        m = len(layer)
        new = H.copy()
        heads = []
        for head in layer:
            S = _relu(H.T.dot(head.W_QK).dot(H))  # (n, n): key j, query k
            heads.append(S)
            new = new + head.W_V.dot(H).dot(S) * Fraction(1, m)
        H = new
        Hs.append(H)
        maps.append(tuple(heads))
    logits = tuple(Fraction(v) for v in model.W_O.dot(H[:, -1]))
    tokens = tuple(model.vocab[t] for t in ids)
    return Trace(tokens, tuple(Hs), tuple(maps), logits)
