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


def test_count_lookup_decides_ictm_over_two_tokens_in_two_layers():
    # ICTM, k = 2 templates of length 2 over two tokens: the query matches the first context question's
    # template iff the four tokens at positions 0, 1, 8, 9 hold an even number of x0
    from depthcert.proofs.depth_known import count_lookup, count_lookup_two_layers

    task = make_task("ictm", k=2, l=2, alphabet=2, n_answers=2)
    pts = _points(task)
    token, P, table = count_lookup(pts, task.vocab, task.classes)
    assert (token, P) == ("x0", (0, 1, 8, 9))
    assert {v: w for v, w in table.items()} == {0: ("copy", 3), 1: ("copy", 7), 2: ("copy", 3), 3: ("copy", 7),
                                                4: ("copy", 3)}
    assert _verified(count_lookup_two_layers(task.vocab, task.classes, token, P, table, task.length), task)
    wrong = {**table, 1: ("copy", 3)}  # odd counts read the first answer: wrong on half the points
    assert not _verified(count_lookup_two_layers(task.vocab, task.classes, token, P, wrong, task.length), task)


def test_count_lookup_finds_a_sparse_parity_and_refuses_what_no_count_decides():
    from depthcert.proofs.depth_known import count_lookup, count_lookup_two_layers

    seqs = [list(s) for s in itertools.product("01", repeat=5)]
    labels = ["odd" if (s[1] + s[3]).count("1") % 2 else "even" for s in seqs]
    task = DatasetTask(seqs, labels, name="sparse-parity")
    pts = [(tuple(s), y) for s, y in zip(seqs, labels)]
    token, P, table = count_lookup(pts, task.vocab, task.classes)
    assert P == (1, 3) and all(kind == "class" for kind, _ in table.values())
    assert _verified(count_lookup_two_layers(task.vocab, task.classes, token, P, table, 5), task)
    # the AND of the bits at positions 0 and 1, xor the bit at 2: a count of zeros at 0..2 decides it
    # (3 zeros: 0, 2: copy position 2, ...), so this family reaches further than parity
    labels2 = [str((int(s[0]) & int(s[1])) ^ int(s[2])) for s in seqs]
    pts2 = [(tuple(s), y) for s, y in zip(seqs, labels2)]
    token, P, table = count_lookup(pts2, ("0", "1"), ("0", "1"))
    task2 = DatasetTask(seqs, labels2, name="and-xor")
    assert _verified(count_lookup_two_layers(task2.vocab, task2.classes, token, P, table, 5), task2)
    # equality of two tokens over three: no count of one token decides it (two tokens, none equal)
    tm = make_task("tm", l=2, alphabet=3)
    assert count_lookup(_points(tm), tm.vocab, tm.classes) is None


def _icqa_problem(nq, na, task_ref=True):
    from types import SimpleNamespace

    task = make_task("icqa", k=2, n_questions=nq, n_answers=na)
    ref = {"name": "icqa", "params": dict(task.params)} if task_ref else None
    return SimpleNamespace(points=_points(task), causal=False, task_ref=ref)


@pytest.fixture(scope="module")
def icqa_lifted():
    from depthcert.proofs.depth_stored import lifted

    small = _icqa_problem(2, 2)  # the stored 4 x 4 certificate's 4 points use two questions and two answers
    return small, lifted(small, 1, 1)


def test_a_stored_certificate_of_another_instance_refutes_a_dataset_holding_its_points(icqa_lifted):
    from depthcert.proofs import check_depth as cd
    from depthcert.proofs.depth_stored import lifted

    small, (cert, msg, name) = icqa_lifted
    assert name == "icqa-k2-n_questions4-n_answers4-L1-H1.json" and msg.startswith("valid")
    assert cert["task"] == small.task_ref
    # a dataset file holding the points: the certificate keeps only its listed labelled points
    cert2, _, _ = lifted(_icqa_problem(2, 2, task_ref=False), 1, 1)
    assert "task" not in cert2 and cd.check(cert2)[0]
    # not at another depth, head count or mask; not for the instance itself (its search finds it)
    assert lifted(small, 2, 1) is None and lifted(small, 1, 2) is None
    from types import SimpleNamespace

    assert lifted(SimpleNamespace(**{**vars(small), "causal": True}), 1, 1) is None
    assert lifted(_icqa_problem(4, 4), 1, 1) is None


def test_a_stored_certificate_is_not_lifted_when_a_label_differs(icqa_lifted):
    from types import SimpleNamespace

    from depthcert.proofs.depth_stored import lifted

    small, (cert, _, _) = icqa_lifted
    first = tuple(cert["points"][0]["tokens"])
    other = next(c for c in ("a0", "a1") if c != cert["points"][0]["label"])
    flipped = [(t, other if t == first else y) for t, y in small.points]
    assert lifted(SimpleNamespace(**{**vars(small), "points": flipped}), 1, 1) is None


@pytest.mark.parametrize("L,N", [(2, 2), (3, 2), (2, 3), (2, 4), (3, 3)])
def test_composition_of_two_or_three_functions_has_a_two_layer_one_head_model(L, N):
    from depthcert.proofs.depth_known import composition_two_layers

    task = make_task("composition", n_functions=L, domain=N)
    assert _verified(composition_two_layers(task.vocab, task.classes, L, N), task)


def test_the_composition_model_is_built_for_two_or_three_functions_only():
    """Two lookups reach three functions, not four: L = 4 is refused when built."""
    from depthcert.proofs.depth_known import composition_two_layers

    with pytest.raises(ValueError, match="L must be 2 or 3"):
        composition_two_layers(["0", "1"], ["0", "1"], 4, 2)
