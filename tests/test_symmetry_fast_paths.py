"""The numpy paths of checkers/symmetry.py against the definitions they replace.

  forms and sizes    _Forms (first-occurrence form rows, orbit sizes of many points at once)
                     is equal exactly where first_occurrence_form is equal and gives orbit_size,
                     on random rows over several groups (a token in two groups, class names
                     equal to tokens, unlabelled positions).
  check_orbits       the same result or the same EnumerationError as the point-by-point
                     reference below (the check as written before _Forms), on random correct
                     and faulty representatives, also where a piece is read point by point.
  matrices           _Objects.invariant is the entry-by-entry comparison, and
                     hidden_permutation matches hidden units as the exact (W1 row, b1, W2
                     column) signatures do, on matrices mixing shared objects, equal but
                     distinct objects, and ints equal to Fractions.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from depthcert.checkers import symmetry as S
from depthcert.checkers.label_rules import RuleViolation, rule_for
from depthcert.checkers.tasks import make_task
from proptools import prop


def reference_check_orbits(task, indices, sizes):
    """check_orbits point by point, with first_occurrence_form and orbit_size (the definition)."""
    groups = tuple(tuple(g) for g in task.symmetry_groups())
    idx = np.asarray(indices, dtype=np.int64)
    given_ = [int(s) for s in sizes]
    where = f"{task.describe()}: orbit representatives"
    if idx.ndim != 1 or len(idx) != len(given_) or len(idx) == 0:
        raise S.EnumerationError(f"{where}: {len(idx)} indices and {len(given_)} orbit sizes")
    if int(idx.min()) < 0 or int(idx.max()) >= task.size:
        raise S.EnumerationError(f"{where}: an index outside the dataset (0 .. {task.size - 1})")
    rule = rule_for(task)
    forms: dict = {}
    derived = []
    for part, ids, labels in S._decoded(task, idx):
        for i, row, y in zip(part.tolist(), ids.tolist(), labels):
            toks = [task.vocab[t] for t in row]
            labs = S._labels_as_tokens(task, y)
            if rule is not None:
                try:
                    want = rule(toks)
                except RuleViolation as exc:
                    raise S.EnumerationError(f"{where}: point {i} ({' '.join(toks)}) is not a point of the task: "
                                             f"{exc}") from None
                if want != labs[0]:
                    raise S.EnumerationError(f"{where}: point {i} ({' '.join(toks)}) is labelled {labs[0]}, the "
                                             f"task's rule gives {want}")
            form = S.first_occurrence_form(toks + labs, groups)
            if form in forms:
                raise S.EnumerationError(f"{where}: points {forms[form]} and {i} are in one orbit (equal "
                                         "first-occurrence forms): a duplicate representative")
            forms[form] = i
            derived.append(S.orbit_size(toks + [t for t in labs if t is not None], groups))
    for i, (mine, theirs) in enumerate(zip(derived, given_)):
        if mine != theirs:
            raise S.EnumerationError(f"{where}: point {int(idx[i])} has an orbit of {mine} points (prod A(|g|, used)), "
                                     f"the enumerator says {theirs}")
    total = sum(derived)
    if total != task.size:
        raise S.EnumerationError(f"{where}: the orbits of the {len(idx)} representatives add up to {total} points, "
                                 f"the dataset has {task.size}")
    return idx.tolist(), tuple(derived)


def _outcome(f):
    try:
        got = f()
    except S.EnumerationError as exc:
        return ("error", str(exc))
    return ("ok", got)


class _Toy:
    """Just what _Forms reads of a task."""

    def __init__(self, vocab, classes, outputs):
        self.vocab, self.classes, self.outputs = tuple(vocab), tuple(classes), outputs


@prop(60)
@given(st.data())
def test_form_rows_equal_exactly_where_the_forms_are(data):
    vocab = ["a", "b", "c", "d", "x", "y", "="]
    per_position = data.draw(st.booleans())
    classes = data.draw(st.sampled_from([["a", "b", "c"], ["p", "q"], ["x", "a", "z"]]))
    pool = vocab + ["zz"]
    groups = tuple(tuple(data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4)))
                   for _ in range(data.draw(st.integers(0, 3))))
    task = _Toy(vocab, classes, "all" if per_position else "last")
    forms = S._Forms(task, groups)
    n, B = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 12))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    ids = rng.integers(0, len(vocab), size=(B, n))
    labels = rng.integers(-1, len(classes), size=(B, n)) if per_position else rng.integers(-len(classes), len(classes), size=B)
    if per_position and n == 0:
        labels = labels.reshape(B, 0)
    got = forms.rows(B, ids, labels)
    assert got is not None
    toks, labs, keys, sizes = got
    ref_forms = []
    for b in range(B):
        want_toks = [vocab[t] for t in ids[b].tolist()]
        want_labs = S._labels_as_tokens(task, labels[b])
        assert toks[b] == want_toks and labs[b] == want_labs
        ref_forms.append(S.first_occurrence_form(want_toks + want_labs, groups))
        assert sizes[b] == S.orbit_size(want_toks + [t for t in want_labs if t is not None], groups)
        assert forms.of_values(want_toks + want_labs) == (keys[b], sizes[b])
    for a in range(B):
        for b in range(B):
            assert (keys[a] == keys[b]) == (ref_forms[a] == ref_forms[b])


FAMILIES = [
    ("tm", dict(l=3, alphabet=3)), ("tm", dict(l=4, alphabet=2)), ("tm", dict(l=2, alphabet=1)),
    ("icqa", dict(k=2, n_questions=3, n_answers=3)), ("multihop", dict(k=2, hops=3, n_entities=3)),
    ("ictm", dict(k=2, l=2, alphabet=2, n_answers=2)), ("ictm", dict(k=1, l=2, alphabet=3, n_answers=2, query="new")),
]


@prop(60)
@given(st.sampled_from(FAMILIES), st.integers(0, 2**32 - 1), st.sampled_from(["none", "points", "sizes", "labels", "ids"]))
def test_check_orbits_agrees_with_the_point_by_point_check(family, seed, fault):
    name, opts = family
    task = make_task(name, **opts)
    idx, sizes = (np.asarray(x).copy() for x in task.orbit_enumeration())
    rng = np.random.default_rng(seed)
    sizes = np.array([int(s) for s in sizes], dtype=object)
    if fault == "points":  # some representatives replaced by random points (often of another's orbit)
        for _ in range(int(rng.integers(1, 3))):
            idx[int(rng.integers(len(idx)))] = int(rng.integers(task.size))
    elif fault == "sizes":
        sizes[int(rng.integers(len(sizes)))] += int(rng.integers(-1, 2))
    cls = type(task)
    decode = cls.decode
    if fault == "labels":  # one point's label moved: the rule disagrees there
        target = int(idx[int(rng.integers(len(idx)))])

        def decode(self, index, _d=cls.decode):
            ids, labels = _d(self, index)
            return ids, np.where(np.asarray(index) == target, (labels + 1) % len(self.classes), labels)
    elif fault == "ids":  # token ids written as negative numbers (Python's indexing reads them
        # the same): the piece is read point by point

        def decode(self, index, _d=cls.decode):
            ids, labels = _d(self, index)
            return ids - len(self.vocab), labels
    faulty = object.__new__(type("Faulty" + cls.__name__, (cls,), {"decode": decode}))
    faulty.__dict__.update(task.__dict__)
    want = _outcome(lambda: reference_check_orbits(faulty, idx, sizes))
    got = _outcome(lambda: (lambda c: (c.indices.tolist(), c.sizes))(S.check_orbits(faulty, idx, sizes)))
    assert got == want
    if fault == "none":
        assert got[0] == "ok"


def test_pieces_of_several_lengths_and_per_position_labels():
    """A dataset with sequences of several lengths and per-position labels (None where unlabelled):
    check_orbits and the reference agree on the true orbits and on faulty ones."""
    import itertools

    from depthcert.checkers.tasks.dataset_file import DatasetTask

    class Sym(DatasetTask):
        def symmetry_groups(self):
            return (("a", "b", "c"),)

    seqs = [list(p) for n in (1, 2, 3) for p in itertools.product("abc", repeat=n)]
    labels = [[s[0] if j % 2 == 0 else None for j in range(len(s))] for s in seqs]
    task = Sym(seqs, labels, "mixed", per_position=True)
    canon, reps, sizes = {}, [], []
    for i, s in enumerate(seqs):
        names: dict = {}
        key = tuple(names.setdefault(x, len(names)) for x in s)
        if key not in canon:
            canon[key] = len(reps)
            reps.append(i)
            sizes.append(0)
        sizes[canon[key]] += 1
    idx, sz = np.array(reps), np.array(sizes)
    for i, s in [(idx, sz), (idx[::-1].copy(), sz[::-1].copy()), (np.r_[idx[:-1], idx[1]], sz),
                 (idx, sz + (np.arange(len(sz)) == 2)), (idx[1:], sz[1:])]:
        want = _outcome(lambda: reference_check_orbits(task, i, s))
        got = _outcome(lambda: (lambda c: (c.indices.tolist(), c.sizes))(S.check_orbits(task, i, s)))
        assert got == want
    assert _outcome(lambda: S.check_orbits(task, idx, sz))[0] == "ok"


def _matrix(rng, shape, shared):
    """Entries from a small pool of values, as one shared object per value or as fresh objects
    (ints and equal Fractions mixed)."""
    values = [0, 1, -1, Fraction(1, 2), Fraction(-7, 3), 2**70]
    objs = [Fraction(v) for v in values]
    W = np.empty(shape, dtype=object)
    for ix in np.ndindex(*shape):
        k = int(rng.integers(len(values)))
        W[ix] = objs[k] if shared else (values[k] if rng.random() < 0.3 else Fraction(values[k]))
    return W


@prop(60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 6), st.booleans(), st.booleans())
def test_object_invariance_is_the_entrywise_comparison(seed, r, c, shared, symmetric):
    rng = np.random.default_rng(seed)
    W = _matrix(rng, (r, c), shared)
    rows, cols = rng.permutation(r), rng.permutation(c)
    if symmetric:  # constant on the orbits of (rows, cols): invariant
        for i in range(r):
            for j in range(c):
                W[rows[i], cols[j]] = W[i, j]
    want = all(W[rows[i], cols[j]] == W[i, j] for i in range(r) for j in range(c))
    assert S._Objects(W).invariant(rows, cols) == want
    assert S._invariant(S._value_codes(W), rows, cols) == want


def _reference_hidden_permutation(mlp, pi):
    """Units matched by their exact (W1 row, b1, W2 column) signatures (the definition)."""
    inv = np.empty_like(pi)
    inv[pi] = np.arange(len(pi))

    def signature(a, perm):
        return (tuple(mlp.W1[a, perm]), mlp.b1[a], tuple(mlp.W2[perm, a]))

    ident = np.arange(len(pi))
    pool: dict = {}
    for a in range(mlp.W1.shape[0]):
        pool.setdefault(signature(a, ident), []).append(a)
    q = np.empty(mlp.W1.shape[0], dtype=np.int64)
    for a in range(mlp.W1.shape[0]):
        free = pool.get(signature(a, inv))
        if not free:
            return None
        q[a] = free.pop()
    return q


@prop(60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 6), st.booleans(), st.booleans())
def test_hidden_units_are_matched_as_by_their_signatures(seed, d, f, shared, equivariant):
    from depthcert.checkers.model import MLP

    rng = np.random.default_rng(seed)
    pi = rng.permutation(d)
    W1, W2 = _matrix(rng, (f, d), shared), _matrix(rng, (d, f), shared)
    b1, b2 = _matrix(rng, (f,), shared), _matrix(rng, (d,), shared)
    if equivariant and f >= 1:  # units in pairs moved into each other by pi (some will match)
        q = rng.permutation(f)
        for a in range(f):
            for r in range(d):
                W1[q[a], pi[r]] = W1[a, r]
                W2[pi[r], q[a]] = W2[r, a]
            b1[q[a]] = b1[a]
    mlp = MLP(W1, b1, W2, b2)
    want, got = _reference_hidden_permutation(mlp, pi), S.hidden_permutation(mlp, pi)
    assert (want is None and got is None) or (want is not None and got is not None and want.tolist() == got.tolist())
