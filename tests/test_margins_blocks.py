"""Evaluator.margins_last takes float64 logits a block of points at a time (LOGIT_BLOCK_BYTES): with
blocks of a few points, on the proven float path and the checked one (where a block whose logits
may pass 2^53 sends the whole batch to big integers), the margins are the big-integer pass's."""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.exhaustive import check_compatible, token_rows, verify
from depthcert.checkers.tasks import make_task


def _sc(length=4, alphabet=3):
    """(task, model, token ids of every point, their label rows in W_O)."""
    task = make_task("sc", length=length, alphabet=alphabet)
    model = constructions.build(task, None, False).model
    batch = next(task.batches(task.size))
    tokens = token_rows(model, task)
    class_map = check_compatible(model, task)
    rows = np.array([class_map[int(y)] for y in batch.labels], dtype=np.int64)
    return task, model, batch.ids if tokens is None else tokens[batch.ids], rows


@pytest.mark.parametrize("rows_per_block", [1, 3, 7, 10_000])
def test_blocks_give_the_exact_margins(rows_per_block, monkeypatch):
    task, model, ids, labels = _sc()
    C = len(model.classes)
    monkeypatch.setattr(evaluate, "LOGIT_BLOCK_BYTES", 8 * C * rows_per_block)
    rng = np.random.default_rng(rows_per_block)
    wrong = rng.random(len(ids)) < 0.3
    labels = np.where(wrong, rng.integers(0, C, len(ids)), labels)  # some wrong labels: negative margins
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.use_float
    got, den, num = fast.margins_last(ids, labels)
    want, wden, _ = exact.margins_last(ids, labels)
    assert num is None and got.dtype == np.int64 and den == wden
    assert got.tolist() == [int(v) for v in want]
    assert min(got) < 0 < max(got)
    empty, _, _ = fast.margins_last(ids[:0], labels[:0])
    assert len(empty) == 0


def test_a_checked_block_over_2_53_sends_the_batch_to_big_integers(monkeypatch):
    """A read-out whose row for class 0 is scaled so that its logits pass 2^53 only for some points:
    the checked path's blocks containing those points are refused, and the margins are still exact."""
    task, model, ids, labels = _sc(3, 3)
    W = np.array(model.W_O, dtype=object)
    W[0] = [v * 2**52 for v in W[0]]
    model = replace(model, W_O=np.array([[Fraction(v) for v in r] for r in W], dtype=object))
    C = len(model.classes)
    monkeypatch.setattr(evaluate, "LOGIT_BLOCK_BYTES", 8 * C * 2)
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    assert fast.checked and not fast.use_float and not fast.big_classifier
    got, _, _ = fast.margins_last(ids, labels)
    want, _, _ = exact.margins_last(ids, labels)
    assert [int(v) for v in got] == [int(v) for v in want]
    assert fast._margins_float(fast.hidden_last(ids)[0].astype(np.float64), labels) is None
    v = verify(model, task, batch_size=5, progress=False)
    w = verify(model, task, batch_size=5, progress=False, force_exact=True)
    assert (v.verdict, v.min_margin, v.points_checked) == (w.verdict, w.min_margin, w.points_checked)
