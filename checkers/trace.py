"""An exact trace of one forward pass: every layer's H and every head's attention map.

Same semantics as checkers/model.py: H0 = [X; P; 1?; 0];
H <- H + (1/m) sum_i W_Vi H A_i(H), entry (j, k) of A_i = weight of key j for query k
(relu(H^T W_QKi H), or the hardmax weights, with the layer's causal mask); then the optional MLP
H <- H + W2 relu(W1 H + b1) + b2; logits = W_O h_k.  All values are Fractions (never floats);
softmax is not rational and is refused here (checkers/softmax_balls.py decides it).  The final
logits equal the batched evaluator's (tests/test_pictures.py, tests/test_model_classes.py).
Used by depthcert/cli/show_construction.py to draw attention maps like the paper's Figure 3.
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
    attention: tuple[tuple[np.ndarray, ...], ...]  # [layer][head] (n, n) weights A_i: key j, query k
    logits: tuple[Fraction, ...]  # one per model class, at the last position
    logits_all: tuple[tuple[Fraction, ...], ...] = ()  # [position][class]

    @property
    def predicted(self) -> int:
        """Index of the largest logit at the last position (the first of them on a tie)."""
        best = max(self.logits)
        return self.logits.index(best)

    def predicted_at(self, position: int) -> int:
        """Index of the largest logit at `position` (the first of them on a tie)."""
        row = self.logits_all[position]
        return row.index(max(row))


def _relu(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    for idx, v in np.ndenumerate(x):
        if v < 0:
            out[idx] = Fraction(0)
    return out


def trace(model: Model, tokens: Sequence) -> Trace:
    """Run `model` on one sequence, keeping everything.  `tokens`: token ids (indices into
    model.vocab) or token names (strings, as in a counterexample)."""
    index = {t: i for i, t in enumerate(model.vocab)}
    ids = []
    for t in tokens:
        if isinstance(t, str):
            if t not in index:
                raise BadInput(f"token {t!r} is not in the model vocabulary")
            ids.append(index[t])
        elif isinstance(t, (int, np.integer)) and not isinstance(t, bool):
            ids.append(int(t))
        else:
            raise BadInput(f"a token is an id (int) or a name (str), got {t!r}")
    if not ids:
        raise BadInput("cannot trace an empty sequence")
    if len(ids) > model.max_length:
        raise BadInput(f"sequence length {len(ids)} exceeds the model's {model.max_length} positions")
    bad = [t for t in ids if not 0 <= t < len(model.vocab)]
    if bad:
        raise BadInput(f"token id {bad[0]} is outside the model vocabulary (0 .. {len(model.vocab) - 1})")
    if model.has_softmax:
        raise BadInput("softmax attention is not rational: an exact trace does not exist (see docs/semantics.md)")
    if model.has_norm_or_smooth:
        raise BadInput("LayerNorm/RMSNorm, gelu/silu and gated MLPs are not rational: an exact trace does not exist")
    H = np.array(embed_exact(model, ids), dtype=object)
    n = len(ids)
    Hs = [H]
    maps = []
    for layer in model.layers:
        m = len(layer)
        new = H.copy()
        heads = []
        for head in layer:
            S = H.T.dot(head.W_QK).dot(H)  # (n, n): key j, query k
            A = _weights(S, head.attention, layer.causal)
            heads.append(A)
            new = new + head.W_V.dot(H).dot(A) * Fraction(1, m)
        H = new
        if layer.mlp is not None:
            mlp = layer.mlp
            Z = _relu(mlp.W1.dot(H) + np.outer(mlp.b1, np.ones(n, dtype=object)))
            H = H + mlp.W2.dot(Z) + np.outer(mlp.b2, np.ones(n, dtype=object))
        Hs.append(H)
        maps.append(tuple(heads))
    out = model.W_O.dot(H)  # (C, n)
    logits_all = tuple(tuple(Fraction(v) for v in out[:, k]) for k in range(n))
    tokens = tuple(model.vocab[t] for t in ids)
    return Trace(tokens, tuple(Hs), tuple(maps), logits_all[-1], logits_all)


def _weights(S: np.ndarray, kind: str, causal: bool) -> np.ndarray:
    """Attention weights from exact scores S (key j, query k), per checkers/model.py."""
    n = S.shape[0]
    A = np.full(S.shape, Fraction(0), dtype=object)
    for k in range(n):
        keys = range(k + 1) if causal else range(n)
        if kind == "relu":
            for j in keys:
                A[j, k] = max(Fraction(0), Fraction(S[j, k]))
        else:  # hardmax: uniform over the keys reaching the maximum
            top = max(S[j, k] for j in keys)
            winners = [j for j in keys if S[j, k] == top]
            for j in winners:
                A[j, k] = Fraction(1, len(winners))
    return A
