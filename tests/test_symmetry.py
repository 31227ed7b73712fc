"""Symmetry reduction: the reduced check agrees with the full one, and a model that is not
equivariant is caught by the equivariance check instead of being verified on representatives."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from depthcert.checkers.exhaustive import plan_points, verify
from depthcert.checkers.symmetry import check_equivariance, generators
from depthcert.checkers.tasks import ICQA
from depthcert.constructions import registry


def _agree(model, task):
    full = verify(model, task, symmetry="off")
    red = verify(model, task, symmetry="auto")
    assert red.points_covered == full.points_covered == task.size or red.verdict == full.verdict == "refuted"
    assert red.verdict == full.verdict
    if full.verified:
        assert red.min_margin == full.min_margin
    return full, red


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(0, 2), st.integers(0, 2))
def test_reduced_equals_full_on_enumerable_icqa(k, extra_q, extra_a):
    task = ICQA(k=k, n_questions=k + extra_q, n_answers=k + extra_a)
    model = registry.build(task).model
    full, red = _agree(model, task)
    assert full.verified and red.points_checked == k and red.points_covered == task.size


def test_orbit_representatives_cover_every_point_once():
    task = ICQA(k=2, n_questions=4, n_answers=3)
    idx, sizes = task.orbit_representatives()
    # brute force: canonical form = relabel questions and answers by first occurrence
    def canon(tokens):
        mq, ma, out = {}, {}, []
        for t in tokens:
            if t.startswith("q"):
                out.append(mq.setdefault(t, f"q{len(mq)}"))
            elif t.startswith("a"):
                out.append(ma.setdefault(t, f"a{len(ma)}"))
            else:
                out.append(t)
        return tuple(out)
    orbits = {}
    for i in range(task.size):
        orbits.setdefault(canon(task.point(i).tokens), []).append(i)
    assert sorted(len(v) for v in orbits.values()) == sorted(int(s) for s in sizes)
    assert {canon(task.point(int(i)).tokens) for i in idx} == set(orbits)
    assert all(canon(task.point(int(i)).tokens) == task.point(int(i)).tokens for i in idx)


def test_dataset_labels_follow_the_group():
    task = ICQA(k=2, n_questions=3, n_answers=3)
    pts = {p.tokens: p.label for p in (task.point(i) for i in range(task.size))}
    for group in task.symmetry_groups():
        for sigma in generators(group):
            for toks, lab in pts.items():
                moved = tuple(sigma.get(t, t) for t in toks)
                assert pts[moved] == sigma.get(lab, lab)


def test_broken_equivariance_is_caught_not_verified():
    task = ICQA(k=2, n_questions=4, n_answers=3)
    model = registry.build(task).model
    q3 = model.layout.index("question", 3)
    broken = model.with_weight((1, 0, "W_QK", q3, q3), 0)  # q3 is never used by the representatives
    reps, _ = task.orbit_representatives()
    assert all("q3" not in task.point(int(i)).tokens for i in reps)
    report = check_equivariance(broken, task.symmetry_groups())
    assert not report.ok and "W_QK" in report.reason
    plan = plan_points(broken, task, "auto")
    assert plan.indices is None and "not used" in plan.note
    v = verify(broken, task, symmetry="auto")
    assert v.verdict == "refuted" and "q3" in v.counterexample.tokens


def test_answer_mixing_classifier_is_caught():
    task = ICQA(k=2, n_questions=2, n_answers=3)
    model = registry.build(task).model
    a1 = model.layout.index("answer", 1)
    broken = model.with_weight(("W_O", 0, a1), "1/2")
    assert not check_equivariance(broken, task.symmetry_groups()).ok
    _agree(broken, task)


def test_large_icqa_proof_evaluates_k_points():
    task = ICQA(k=3, n_questions=100, n_answers=100)
    v = verify(registry.build(task).model, task, symmetry="auto")
    assert v.verified and v.points_checked == 3 and v.points_covered == task.size == 2823864120000
    assert v.min_margin == 3


def test_orbit_check_decodes_datasets_with_several_lengths():
    """check_orbits on a dataset file whose sequences have several lengths (verify-tracr's inputs up
    to a length): decoded in pieces of one length, in order."""
    from depthcert.checkers.symmetry import _decoded
    from depthcert.checkers.tasks.dataset_file import dataset_from_json

    task = dataset_from_json({"format": "depthcert.dataset", "version": 1, "name": "mixed",
                              "sequences": [["a"], ["a", "b"], ["b", "a"], ["b"], ["a", "a", "b"]],
                              "labels": ["x", "y", "y", "x", "z"]})
    idx = np.array([4, 0, 3, 1, 2])
    pieces = list(_decoded(task, idx, size=3))
    assert [p.tolist() for p, _, _ in pieces] == [[4], [0, 3], [1, 2]]
    assert [ids.shape[1] for _, ids, _ in pieces] == [3, 1, 2]


def test_value_codes_are_equal_exactly_where_the_entries_are():
    # the equivariance check compares codes: equal codes <=> equal exact values (an int and an equal
    # Fraction alike; shared and distinct objects alike)
    from fractions import Fraction

    from depthcert.checkers.symmetry import _value_codes

    rng = np.random.default_rng(2)
    pool = [0, 1, -1, Fraction(1, 2), Fraction(2, 4), Fraction(-1, 3), 2**70, 2**70 + 1, Fraction(2**70, 1)]
    for _ in range(100):
        W = np.array([[pool[int(i)] if rng.random() < 0.5 else Fraction(pool[int(i)]) for i in row]
                      for row in rng.integers(0, len(pool), size=(3, 5))], dtype=object)
        codes = _value_codes(W)
        flat, cf = W.ravel().tolist(), codes.ravel().tolist()
        assert codes.shape == W.shape
        assert all((a == b) == (ca == cb) for a, ca in zip(flat, cf) for b, cb in zip(flat, cf))
