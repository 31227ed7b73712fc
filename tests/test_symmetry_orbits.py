"""The orbit representatives are checked, not trusted (checkers/symmetry.check_orbits): an
enumerator that returns two points of one orbit, a wrong orbit size, too few orbits, or a labelling
that is not the task's rule is refused (EnumerationError; the commands exit 4 with one line), both
where `verify --symmetry auto` picks its points and where --all-sizes reads the representatives.

The faults are made by a mechanism applied to every task family with a declared symmetry, at
several sizes: a representative replaced by another point of a representative's orbit (found by
moving the point with a group generator), sizes changed, labels moved to another class."""
from __future__ import annotations

import numpy as np
import pytest

from depthcert.checkers.exhaustive import plan_points, verify
from depthcert.checkers.label_rules import function_power_at, rule_for
from depthcert.checkers.symmetry import EnumerationError, check_orbits, checked_orbits, generators
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry

SIZES = [
    ("icqa", dict(k=2, n_questions=3, n_answers=3)),
    ("icqa", dict(k=3, n_questions=3, n_answers=4)),
    ("multihop", dict(k=2, hops=3, n_entities=3)),
    ("multihop", dict(k=3, hops=2, n_entities=4)),
    ("tm", dict(l=3, alphabet=3)),
    ("tm", dict(l=4, alphabet=2)),
    ("ictm", dict(k=2, l=2, alphabet=2, n_answers=2)),
    ("ictm", dict(k=2, l=2, alphabet=3, n_answers=3, query="new")),
]


def _index_of(task) -> dict:
    ids, labels = task.decode(np.arange(task.size, dtype=np.int64))
    return {tuple(r): i for i, r in enumerate(ids.tolist())}


def _orbit_mate(task, index: dict, i: int) -> int | None:
    """Another point of point i's orbit (i moved by one generator of one group), or None."""
    toks = list(task.point(i).tokens)
    for group in task.symmetry_groups():
        for sigma in generators(tuple(group)):
            moved = tuple(task.vocab.index(sigma.get(t, t)) for t in toks)
            j = index[moved]
            if j != i:
                return j
    return None


def _with(task, *, reps=None, decode=None):
    """The same task with its enumerator (and optionally its decode) replaced."""
    cls = type(task)
    attrs = {}
    if reps is not None:
        attrs["orbit_enumeration"] = lambda self: reps
    if decode is not None:
        attrs["decode"] = lambda self, index: decode(cls.decode(self, index))
    out = object.__new__(type("Faulty" + cls.__name__, (cls,), attrs))
    out.__dict__.update(task.__dict__)
    return out


@pytest.mark.parametrize("name, opts", SIZES)
def test_the_enumerators_pass_the_check(name, opts):
    task = make_task(name, **opts)
    checked = checked_orbits(task)
    assert checked is not None and sum(checked.sizes) == task.size and checked.labels_rederived
    idx, sizes = task.orbit_enumeration()
    assert list(checked.sizes) == [int(s) for s in sizes]


@pytest.mark.parametrize("name, opts", SIZES)
def test_a_duplicate_representative_is_refused(name, opts):
    task = make_task(name, **opts)
    idx, sizes = (list(x) for x in task.orbit_enumeration())
    index = _index_of(task)
    tried = 0
    for a in range(len(idx)):
        mate = _orbit_mate(task, index, int(idx[a]))
        if mate is None:
            continue
        for b in range(len(idx)):
            if b == a:
                continue
            # representative b replaced by a second point of a's orbit, with a's orbit size: the sizes
            # may still add up to the dataset (the old check) when the two orbits have one size
            new_idx, new_sizes = list(idx), list(sizes)
            new_idx[b], new_sizes[b] = mate, sizes[a]
            faulty = _with(task, reps=(np.array(new_idx, dtype=np.int64), np.array(new_sizes, dtype=object)))
            with pytest.raises(EnumerationError, match="in one orbit"):
                faulty.orbit_representatives()
            tried += 1
            if tried >= 6:
                return
    assert tried, "no representative with a second point in its orbit"


@pytest.mark.parametrize("name, opts", SIZES)
def test_wrong_orbit_sizes_and_missing_orbits_are_refused(name, opts):
    task = make_task(name, **opts)
    idx, sizes = task.orbit_enumeration()
    bumped = np.array([int(s) for s in sizes], dtype=object)
    bumped[0] += 1
    with pytest.raises(EnumerationError, match="orbit of"):
        check_orbits(task, idx, bumped)
    if len(idx) > 1:
        with pytest.raises(EnumerationError, match="add up to"):
            check_orbits(task, idx[1:], sizes[1:])


@pytest.mark.parametrize("name, opts", SIZES)
def test_a_changed_label_rule_is_refused(name, opts):
    """decode's labels moved to the next class (a changed labelling of the task): the rule disagrees."""
    task = make_task(name, **opts)
    n = len(task.classes)
    faulty = _with(task, decode=lambda out: (out[0], (out[1] + 1) % n))
    with pytest.raises(EnumerationError, match="the task's rule gives"):
        faulty.orbit_representatives()


def test_a_changed_label_at_one_representative_only_is_refused():
    task = make_task("multihop", k=3, hops=2, n_entities=4)
    idx, _ = task.orbit_enumeration()
    target = int(idx[len(idx) // 2])

    def one(self, index):
        ids, labels = type(task).decode(self, index)
        labels = np.where(np.asarray(index) == target, (labels + 1) % len(task.classes), labels)
        return ids, labels

    broken = object.__new__(type("OneLabel", (type(task),), {"decode": one}))
    broken.__dict__.update(task.__dict__)
    with pytest.raises(EnumerationError, match=f"point {target} "):
        broken.orbit_representatives()


def test_verify_with_symmetry_auto_is_not_fooled():
    """A duplicate representative in place of another orbit's: verify refuses to plan (before it
    the orbit-sum line held and VERIFIED covered a point never evaluated)."""
    task = make_task("tm", l=3, alphabet=3)
    model = registry.build(task).model
    idx, sizes = (list(x) for x in task.orbit_enumeration())
    index = _index_of(task)
    # two templates with one orbit size (AAB and ABA: 6 points each): ABA's representative replaced
    a = next(i for i, r in enumerate(idx) if task.point(int(r)).label == "AAB")
    b = next(i for i, r in enumerate(idx) if task.point(int(r)).label == "ABA")
    assert sizes[a] == sizes[b]
    idx[b] = _orbit_mate(task, index, int(idx[a]))
    faulty = _with(task, reps=(np.array(idx, dtype=np.int64), np.array(sizes, dtype=object)))
    assert sum(int(s) for s in sizes) == task.size  # the old orbit-sum check held
    with pytest.raises(EnumerationError, match="in one orbit"):
        plan_points(model, faulty, "auto")
    with pytest.raises(EnumerationError):
        verify(model, faulty, symmetry="auto")
    assert verify(model, faulty, symmetry="off").verified  # the dataset itself is fine


def test_the_command_exits_4_with_one_line(monkeypatch, capsys):
    from depthcert.checkers.tasks.icqa import ICQA
    from depthcert.cli.verify_construction import verify_construction_main

    good = ICQA.orbit_enumeration

    def duplicated(self):
        idx, sizes = good(self)
        idx = idx.copy()
        idx[1] = idx[0] + self.k * self.n_aperm  # point 0 with other questions: the same orbit
        return idx, sizes

    monkeypatch.setattr(ICQA, "orbit_enumeration", duplicated)
    with pytest.raises(SystemExit) as stop:
        verify_construction_main(["icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3"])
    code = stop.value.code
    out, err = capsys.readouterr()
    assert code == 4 and "VERIFIED" not in out
    assert len(err.strip().splitlines()) == 1 and "in one orbit" in err


def test_the_label_rules_on_hand_made_points():
    task = make_task("icqa", k=2, n_questions=3, n_answers=3)
    assert rule_for(task)(("q2", "=", "a0", "q1", "=", "a2", "q1", "=")) == "a2"
    mh = make_task("multihop", k=3, hops=10**30 + 1, n_entities=4)
    # a -> b -> c -> b: after the first hop a 2-cycle, so an odd hop count lands on b, an even one on c
    assert rule_for(mh)(("a", ">", "b", "b", ">", "c", "c", ">", "b", "a", ">")) == "b"
    assert function_power_at({"a": "b", "b": "c", "c": "b"}, "a", 10**30) == "c"
    assert [function_power_at({"a": "b", "b": "c", "c": "b"}, "a", h) for h in range(5)] == list("abcbc")
    tm = make_task("tm", l=4, alphabet=3)
    assert rule_for(tm)(("t2", "t0", "t2", "t1", "<cls>")) == "ABAC"
    ictm = make_task("ictm", k=2, l=2, alphabet=2, n_answers=2)
    assert rule_for(ictm)(("x0", "x1", "=", "a1", "x1", "x1", "=", "a0", "x0", "x0", "=")) == "a0"
    assert rule_for(make_task("mod-count", n=4, modulus=3))(("1", "1", "0", "1")) == "0"


def test_a_dataset_named_like_a_family_keeps_its_own_labels():
    """The rules belong to the task families' classes: a dataset (file, tracr program) named "tm" or
    "icqa" has its labels as data, checked by distinct orbits and orbit sizes only."""
    from depthcert.checkers.tasks.dataset_file import DatasetTask

    for name in ("tm", "icqa", "multihop"):
        task = DatasetTask([["a", "b"], ["b", "a"], ["a", "a"], ["b", "b"]], ["x", "x", "y", "y"], name)
        assert rule_for(task) is None
