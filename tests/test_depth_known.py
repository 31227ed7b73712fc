"""Known hardmax models that find-depth proposes before it searches (proofs/depth_known.py):
each is verified on every point by checkers.exhaustive.verify, and a wrong proposal fails."""
from __future__ import annotations

import itertools

import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.checkers.weights_file import model_from_json
from depthcert.proofs.depth_known import count_function, count_two_layers


def _verified(weights, task):
    return verify(model_from_json(weights, task), task, symmetry="off", progress=False).verified


def _points(task):
    out = []
    for b in task.batches():
        for ids, lab in zip(b.ids, b.labels):
            out.append((tuple(str(task.vocab[i]) for i in ids), str(task.classes[lab])))
    return out


@pytest.mark.parametrize("name,params", [("parity", {"n": n}) for n in (1, 2, 3, 5, 7)]
                         + [("mod-count", {"n": 5, "modulus": 3}), ("mod-count", {"n": 4, "modulus": 4})])
def test_a_count_function_has_a_two_layer_one_head_model(name, params):
    task = make_task(name, **params)
    pts = _points(task)
    found = count_function(pts, task.vocab)
    assert found is not None
    token, n, table = found
    assert n == params["n"] and set(table) == set(range(n + 1))
    assert _verified(count_two_layers(task.vocab, task.classes, token, n, table), task)


def test_a_count_function_of_a_three_token_dataset_and_a_wrong_table_fails():
    # label: how many "b" (0, 1, 2 or 3) capped at 2, over {a, b, c}^3; the count of "b" decides it
    seqs = [list(s) for s in itertools.product("abc", repeat=3)]
    labels = [str(min(s.count("b"), 2)) for s in seqs]
    task = DatasetTask(seqs, labels, name="capped-count")
    pts = [(tuple(s), y) for s, y in zip(seqs, labels)]
    token, n, table = count_function(pts, task.vocab)
    assert token == "b" and n == 3
    assert _verified(count_two_layers(task.vocab, task.classes, token, n, table), task)
    wrong = {**table, 2: "0"}  # a wrong label for two b's: the model is then wrong there
    assert not _verified(count_two_layers(task.vocab, task.classes, token, n, wrong), task)


def test_no_count_function_no_proposal():
    task = make_task("tm", l=2, alphabet=2)
    pts = _points(task)
    assert count_function(pts, task.vocab) is not None  # AA iff the count of t0 is 0 or 2
    mixed = [(("a", "b"), "x"), (("b", "a"), "y")]  # equal counts, different labels
    assert count_function(mixed, ("a", "b")) is None
    assert count_function([(("a",), "x"), (("a", "b"), "y")], ("a", "b")) is None  # two lengths
