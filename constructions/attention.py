"""Reusable attention patterns: paper Lemma 1 (instructive) and Lemma 2 (constrained).

Both act through the one-hot position block P = I_n of H0 = [X; P; 0], for which
H^T W H restricted to the (position, position) block of W is that block itself:
entry (j, k) of sigma(H^T W H) is sigma(W_pp[j, k]) (key j, query k).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.layout import BlockMatrix, Layout


def instructive_attention(layout: Layout, alpha, position_block: str = "position") -> np.ndarray:
    """Lemma 1: W_QK whose attention map on H0 is sigma(alpha) = alpha for any alpha >= 0.

    alpha is n x n (key j, query k).  Only the (position, position) block is non-zero, so
    the map does not depend on the tokens.
    """
    alpha = np.asarray(alpha, dtype=object)
    if (alpha < 0).any():
        raise ValueError("Lemma 1 attention scores must be non-negative")
    return BlockMatrix(layout, layout).set(position_block, position_block, alpha).build()


def constrained_attention(
    layout: Layout,
    content: BlockMatrix,
    allowed,
    mask_value,
    position_block: str = "position",
) -> np.ndarray:
    """Lemma 2: add `mask_value` (a concrete negative rational) to the score of every
    (key j, query k) pair with allowed[j][k] false, on top of a content-based W_QK.

    The verdict is for this concrete value: the checker does not assume it is "large enough".
    """
    mask_value = Fraction(mask_value)
    if mask_value >= 0:
        raise ValueError("the Lemma 2 mask must be negative")
    allowed = np.asarray(allowed, dtype=bool)
    n = layout.size(position_block)
    if allowed.shape != (n, n):
        raise ValueError(f"mask is {allowed.shape}, positions are {n}")
    pp = np.where(allowed, Fraction(0), mask_value).astype(object)
    # on a copy: the caller's `content` must not change (building a second head from the same
    # content used to get the mask twice; tests/test_properties_builders.py)
    r, c = content.rows.slice(position_block), content.cols.slice(position_block)
    W = content.build().copy()
    if W[r, c].shape != pp.shape:
        raise ValueError(f"mask is {pp.shape}, the ({position_block}, {position_block}) block of the content is {W[r, c].shape}")
    # the sum entry by entry, a Fraction addition only where both terms are non-zero
    W[r, c] = np.array([p if not w else w if not p else w + p
                        for w, p in zip(W[r, c].ravel().tolist(), pp.ravel().tolist())], dtype=object).reshape(pp.shape)
    W.flags.writeable = False
    return W


def position_map(n: int, pairs) -> np.ndarray:
    """n x n (key, query) 0/1 matrix with ones at the given (key, query) pairs."""
    out = np.full((n, n), Fraction(0), dtype=object)
    for j, k in pairs:
        out[j, k] = Fraction(1)
    return out
