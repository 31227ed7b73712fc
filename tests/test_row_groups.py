"""hidden_table's grouping of a batch's (hidden vector, label) rows (hidden_table._row_groups): the same
groups and first rows as np.unique on the rows' bytes, with int64 row codes where the columns' ranges
allow them and the bytes where they do not (ranges past 2^63, entries at the ends of int64)."""
from __future__ import annotations

import numpy as np
import pytest

from depthcert.checkers.hidden_table import _row_groups


def _by_bytes(both):
    keys = both.view(np.dtype((np.void, both.dtype.itemsize * both.shape[1]))).ravel()
    _, where, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return where, np.asarray(inverse).reshape(-1)


def _canonical(where, inverse):
    """Groups numbered by their first row (the order hidden_table gives them)."""
    order = np.argsort(where, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return np.sort(where), rank[inverse]


@pytest.mark.parametrize("seed", range(12))
def test_same_groups_as_the_rows_bytes(seed):
    rng = np.random.default_rng(seed)
    B, c = int(rng.integers(1, 400)), int(rng.integers(1, 40))
    scale = [1, 3, 2**20, 2**40, 2**62, 2**63 - 1][seed % 6]
    distinct = rng.integers(-scale, scale, (int(rng.integers(1, 60)), c), dtype=np.int64, endpoint=True)
    if seed % 4 == 3:
        distinct[0, 0] = np.iinfo(np.int64).min  # the ends of int64: a range past 2^63
        distinct[-1, -1] = np.iinfo(np.int64).max
    both = np.ascontiguousarray(distinct[rng.integers(0, len(distinct), B)])
    got, want = _canonical(*_row_groups(both)), _canonical(*_by_bytes(both))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # rows in the same group are equal, rows in different groups are not
    w, inv = _row_groups(both)
    assert np.array_equal(both, both[w][inv])
    assert len({both[j].tobytes() for j in w}) == len(w)


def test_rows_differing_by_one_in_one_column():
    base = np.arange(30, dtype=np.int64).reshape(3, 10) * 1000
    rows = np.concatenate([base, base + np.eye(3, 10, 4, dtype=np.int64), base])
    w, inv = _row_groups(np.ascontiguousarray(rows))
    assert len(w) == 6 and np.array_equal(inv[:3], inv[6:]) and len(set(inv[:6].tolist())) == 6
