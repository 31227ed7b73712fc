"""Properties of the dataset enumerators (checkers/tasks/: base.py, icqa.py, classification.py, template.py, multihop.py,
composition.py, logdepth.py, max_of_k.py).

For every task make_task knows (sc, icqa, tm, ictm, multihop, composition, parity, mod-count,
word-problem, reachability, max-of-k; a task whose module is absent from the build is left out), at random
small sizes:

  index -> sequence -> index is the identity (the inverse is written in tests/task_reference.py
      from the index order each enumerator's docstring states), and sequence -> index ->
      sequence too, for sequences generated from the definition;
  the size equals the formula (the reference's, and the printed `size_formula` evaluated);
  the labelled dataset is exactly the one the paper's definition generates, and every point's
      label is the one the definition reads off the sequence (a separate plain reference);
  orbit representatives: the orbits of the labelled dataset under every element of the declared
      symmetry groups (brute force, not generators) each hold exactly one representative, whose
      reported orbit size is the orbit's size; the sizes add up to the dataset size;
  batches(), batches_of() and point() decode the same points at every batch size.

A task added to make_task later, with no reference here yet, gets the task-independent
properties (injective decode, point() == batches(), the printed size formula, brute-force orbits)
at its default sizes (test_other_tasks_enumerate_consistently).
"""
from __future__ import annotations

import itertools
import re
from functools import lru_cache
from math import perm

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import task_reference as ref
from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import TASK_ALIASES, make_task
from depthcert.checkers.tasks.template import count_templates
from proptools import prop

# tasks with a reference in tests/task_reference.py (those present in this build: KNOWN below)
KNOWN = ("sc", "icqa", "tm", "ictm", "multihop", "composition", "parity", "mod-count", "word-problem", "reachability",
         "max-of-k", "modular-addition", "induction")
OTHERS = tuple(t for t in dict.fromkeys(TASK_ALIASES.values()) if t not in KNOWN)  # no reference yet
MAX_POINTS = 3000  # brute force over the definition and the inverse of every index


# ---- small configurations of every known task


def _ictm_configs():
    out = []
    for k in (1, 2, 3):
        for l in (1, 2, 3):
            for m in (1, 2, 3):
                for na in range(k, k + 2):
                    if k <= count_templates(l, m) and ref.ictm_size(k, l, m, na) <= MAX_POINTS:
                        out.append(("ictm", (("k", k), ("l", l), ("alphabet", m), ("n_answers", na))))
    return out


def _sc(draw):
    L, M = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    total = M**L
    n = draw(st.one_of(st.none(), st.integers(1, total)))
    return ("sc", (("length", L), ("alphabet", M), ("seed", draw(st.integers(0, 3))), ("n_points", n)))


def _icqa(draw):
    k = draw(st.integers(1, 3))
    extra = 2 if k < 3 else 1
    return ("icqa", (("k", k), ("n_questions", k + draw(st.integers(0, extra))),
                     ("n_answers", k + draw(st.integers(0, extra)))))


def _tm(draw):
    return ("tm", (("l", draw(st.integers(1, 4))), ("alphabet", draw(st.integers(1, 4)))))


def _multihop(draw):
    k = draw(st.integers(1, 3))
    return ("multihop", (("hops", draw(st.integers(1, 4))), ("k", k), ("n_entities", k + draw(st.integers(0, 1)))))


def _composition(draw):
    L = draw(st.integers(1, 3))
    N = draw(st.integers(2, {1: 4, 2: 3, 3: 2}[L]))
    return ("composition", (("n_functions", L), ("domain", N)))


def _max_of_k(draw):
    K = draw(st.integers(1, 4))
    return ("max-of-k", (("vocab", draw(st.integers(2, {1: 9, 2: 9, 3: 7, 4: 5}[K]))), ("k", K)))


def _modular_addition(draw):
    return ("modular-addition", (("modulus", draw(st.integers(2, 20))),))


def _induction(draw):
    V = draw(st.integers(2, 5))
    return ("induction", (("vocab", V), ("n", draw(st.integers(3, {2: 8, 3: 7, 4: 6, 5: 5}[V])))))


def _parity(draw):
    return ("parity", (("n", draw(st.integers(1, 8))),))


def _mod_count(draw):
    return ("mod-count", (("n", draw(st.integers(1, 8))), ("modulus", draw(st.integers(2, 5)))))


# generating-set sizes: c<k> has k tokens, the others 2
GROUPS = {"c2": 6, "c3": 5, "c5": 4, "s3": 7, "s4": 7, "a4": 7, "s5": 6, "a5": 6, "a6": 5, "s6": 5}


def _word_problem(draw):
    g = draw(st.sampled_from(sorted(GROUPS)))
    return ("word-problem", (("group", g), ("n", draw(st.integers(1, GROUPS[g])))))


def _reachability(draw):
    return ("reachability", (("vertices", draw(st.integers(1, 3))),))


def generators(group: str) -> list[str]:
    """The generating set of a group (docs/logdepth.md): every residue of c<k>; (0 1) and the
    m-cycle for s<m>; (0 1 2) and (0 1 .. m-1) (odd m) or (1 2 .. m-1) (even m) for a<m>."""
    kind, k = group[0], int(group[1:])
    if kind == "c":
        return [str(r) for r in range(k)]
    if kind == "s":
        return ["(01)", "(" + "".join(str(x) for x in range(k)) + ")"]
    return ["(012)", "(" + "".join(str(x) for x in (range(k) if k % 2 else range(1, k))) + ")"]


def _present(name) -> bool:
    try:
        make_task(name)
        return True
    except BadInput as exc:
        if "not available" in str(exc):
            return False
        raise


KNOWN = tuple(n for n in KNOWN if _present(n))


@st.composite
def configs(draw, names=KNOWN):
    name = draw(st.sampled_from([n for n in names if n in KNOWN]))
    if name == "ictm":
        return draw(st.sampled_from(_ictm_configs()))
    return {"sc": _sc, "icqa": _icqa, "tm": _tm, "multihop": _multihop, "composition": _composition,
            "parity": _parity, "mod-count": _mod_count, "word-problem": _word_problem,
            "reachability": _reachability, "max-of-k": _max_of_k, "modular-addition": _modular_addition,
            "induction": _induction}[name](draw)


@lru_cache(maxsize=256)
def load(name, opts):
    """(task, [(tokens, label)] in index order) for a configuration."""
    task = make_task(name, **dict(opts))
    return task, ref.all_points(task)


# ---- the references, per task


def reference_points(name, o) -> dict | None:
    if name == "icqa":
        return ref.icqa_points(o["k"], o["n_questions"], o["n_answers"])
    if name == "tm":
        return ref.tm_points(o["l"], o["alphabet"])
    if name == "ictm":
        return ref.ictm_points(o["k"], o["l"], o["alphabet"], o["n_answers"])
    if name == "multihop":
        return ref.multihop_points(o["hops"], o["k"], o["n_entities"])
    if name == "composition":
        return ref.composition_points(o["n_functions"], o["domain"])
    if name in ("parity", "mod-count"):
        return ref.count_points(o["n"], o.get("modulus", 2))
    if name == "max-of-k":
        return ref.max_of_k_points(o["vocab"], o["k"])
    if name == "modular-addition":
        return ref.modular_addition_points(o["modulus"])
    if name == "induction":
        return ref.induction_points(o["vocab"], o["n"])
    if name == "word-problem":
        return None  # no closed form of the words: labels by the reference product (below)
    if name == "reachability":
        return ref.reachability_points(o["vertices"])
    return None  # sc: labels are a seeded permutation, checked for distinctness instead


def reference_label(name, o, tokens):
    if name == "icqa":
        return ref.icqa_label(tokens)
    if name == "tm":
        return ref.tm_label(tokens)
    if name == "ictm":
        return ref.ictm_label(tokens, o["k"], o["l"])
    if name == "multihop":
        return ref.multihop_label(tokens, o["hops"])
    if name == "composition":
        return ref.composition_label(tokens, o["n_functions"], o["domain"])
    if name in ("parity", "mod-count"):
        return str(tokens.count("1") % o.get("modulus", 2))
    if name == "max-of-k":
        return ref.max_of_k_label(tokens)
    if name == "modular-addition":
        return ref.modular_addition_label(tokens, o["modulus"])
    if name == "induction":
        return ref.induction_label(tokens)
    if name == "word-problem":
        return ref.word_label(tokens, o["group"])
    if name == "reachability":
        return ref.reachability_label(tokens, o["vertices"])
    return None


def reference_index(name, o, task, tokens) -> int:
    if name == "sc":
        # all M^L sequences: the base-M value; a seeded sample of them (the sample is the task's
        # choice): the rank of the value among the sample's values, which come in increasing order
        value = ref.sc_value(tokens, o["alphabet"])
        sample = _sample_values(task)
        return value if sample is None else sample.index(value)
    if name == "icqa":
        return ref.icqa_index(tokens, o["k"], o["n_questions"], o["n_answers"])
    if name == "tm":
        return ref.tm_index(tokens, o["l"], o["alphabet"])
    if name == "ictm":
        return ref.ictm_index(tokens, o["k"], o["l"], o["alphabet"], o["n_answers"])
    if name == "multihop":
        return ref.multihop_index(tokens, o["k"], o["n_entities"])
    if name == "composition":
        return ref.composition_index(tokens, o["domain"])
    if name in ("parity", "mod-count"):
        return ref.base_value([int(t) for t in tokens], 2)
    if name == "max-of-k":
        return ref.max_of_k_index(tokens, o["vocab"])
    if name == "modular-addition":
        return ref.modular_addition_index(tokens, o["modulus"])
    if name == "induction":
        return ref.induction_index(tokens, o["vocab"], o["n"])
    if name == "word-problem":
        return ref.base_value([task.vocab.index(t) for t in tokens], len(task.vocab))
    if name == "reachability":
        return ref.reachability_index(tokens, o["vertices"])
    raise AssertionError(name)


def _sample_values(task) -> list | None:
    """The sorted values of a sampled SC dataset (None: every sequence), asserted increasing."""
    if task.size == task.M**task.L:
        return None
    key = (task.L, task.M, task.seed, task.size)
    if key not in _SAMPLES:
        values = [ref.sc_value(toks, task.M) for toks, _ in ref.all_points(task)]
        assert values == sorted(set(values)), "a sampled SC dataset must list its sequences in increasing order"
        _SAMPLES[key] = values
    return _SAMPLES[key]


_SAMPLES: dict = {}


def reference_size(name, o) -> int:
    if name == "sc":
        total = o["alphabet"] ** o["length"]
        return total if o["n_points"] is None else o["n_points"]
    if name == "icqa":
        return ref.icqa_size(o["k"], o["n_questions"], o["n_answers"])
    if name == "tm":
        return o["alphabet"] ** o["l"]
    if name == "ictm":
        return ref.ictm_size(o["k"], o["l"], o["alphabet"], o["n_answers"])
    if name == "multihop":
        return ref.multihop_size(o["k"], o["n_entities"])
    if name == "composition":
        return o["domain"] ** (o["n_functions"] * o["domain"] + 1)
    if name in ("parity", "mod-count"):
        return 2 ** o["n"]
    if name == "max-of-k":
        return o["vocab"] ** o["k"]
    if name == "modular-addition":
        return o["modulus"] ** 2
    if name == "induction":
        return o["vocab"] * (o["n"] - 2) * (o["vocab"] - 1) ** (o["n"] - 2)
    if name == "word-problem":
        k = int(o["group"][1:])
        return (k if o["group"][0] == "c" else 2) ** o["n"]
    if name == "reachability":
        V = o["vertices"]
        return 2 ** (V * V) * V * V
    raise AssertionError(name)


def evaluate_formula(text: str, l: int | None = None):
    """The value of a printed size formula: products of ints, A(n,k) and b^e; "N of M^L"
    (a sample: N); the ICTM sum over template tuples (computed by the reference from the
    numbers it names).  None if the text is none of these."""
    m = re.fullmatch(r"A\((\d+),(\d+)\) \* sum over ordered distinct \(t_0\.\.t_(\d+)\) of prod N\(t_i\) \* "
                     r"sum N\(t_i\), N\(t\) = A\((\d+), wildcards of t\)", text)
    if m and l is not None:
        na, k, k1, alphabet = (int(g) for g in m.groups())
        assert k1 == k - 1, text
        return ref.ictm_size(k, l, alphabet, na)
    m = re.fullmatch(r"(\d+) of (\d+)\^(\d+)", text)
    if m:
        return int(m.group(1))
    if not re.fullmatch(r"[0-9A(),^* ]+", text):
        return None
    value = 1
    for factor in text.split("*"):
        factor = factor.strip()
        if mm := re.fullmatch(r"A\((\d+),\s*(\d+)\)", factor):
            value *= perm(int(mm.group(1)), int(mm.group(2)))
        elif mm := re.fullmatch(r"(\d+)\^(\d+)", factor):
            value *= int(mm.group(1)) ** int(mm.group(2))
        elif re.fullmatch(r"\d+", factor):
            value *= int(factor)
        else:
            return None
    return value


# ---- properties of the known tasks


@prop(150)
@given(configs(), st.data())
def test_index_to_sequence_to_index_is_the_identity(cfg, data):
    name, opts = cfg
    o = dict(opts)
    task, points = load(name, opts)
    event(name)
    for i, (toks, _) in enumerate(points):
        assert reference_index(name, o, task, toks) == i, (i, toks)
    # single-point decode (point) agrees with the batched one at random indices
    for i in data.draw(st.lists(st.integers(0, task.size - 1), min_size=1, max_size=5)):
        p = task.point(i)
        assert (p.tokens, p.label) == points[i]


@prop(150)
@given(configs(names=("icqa", "tm", "ictm", "multihop", "composition", "parity", "mod-count", "word-problem",
                      "reachability", "max-of-k")), st.data())
def test_sequence_to_index_to_sequence_is_the_identity(cfg, data):
    """A sequence generated from the definition (random choices, not from the enumerator) has an
    index in range, and that index decodes back to it, with the definition's label."""
    name, opts = cfg
    o = dict(opts)
    task, _ = load(name, opts)
    draw = data.draw
    if name == "icqa":
        k = o["k"]
        qs = draw(st.permutations(range(o["n_questions"])))[:k]
        ans = draw(st.permutations(range(o["n_answers"])))[:k]
        c = draw(st.integers(0, k - 1))
        toks = sum(([f"q{q}", "=", f"a{a}"] for q, a in zip(qs, ans)), []) + [f"q{qs[c]}", "="]
    elif name == "tm":
        toks = [f"t{draw(st.integers(0, o['alphabet'] - 1))}" for _ in range(o["l"])] + ["<cls>"]
    elif name == "multihop":
        k, N = o["k"], o["n_entities"]
        src = draw(st.permutations(range(N)))[:k]
        tgt = [draw(st.integers(0, k - 1)) for _ in range(k)]
        c = draw(st.integers(0, k - 1))
        toks = sum(([ref.entity(src[i], N), ">", ref.entity(src[tgt[i]], N)] for i in range(k)), [])
        toks += [ref.entity(src[c], N), ">"]
    elif name == "composition":
        L, N = o["n_functions"], o["domain"]
        toks = [str(draw(st.integers(0, N - 1))) for _ in range(L * N + 1)]
    elif name in ("parity", "mod-count"):
        toks = [draw(st.sampled_from("01")) for _ in range(o["n"])]
    elif name == "max-of-k":
        toks = [str(draw(st.integers(0, o["vocab"] - 1))) for _ in range(o["k"])]
    elif name == "word-problem":
        toks = [draw(st.sampled_from(generators(o["group"]))) for _ in range(o["n"])]
    elif name == "reachability":
        V = o["vertices"]
        toks = [draw(st.sampled_from("01")) for _ in range(V * V)] + [f"v{draw(st.integers(0, V - 1))}" for _ in "st"]
    else:  # ictm
        k, l, m = o["k"], o["l"], o["alphabet"]
        T = ref.templates(l, m)
        tup = draw(st.permutations(T))[:k]
        ans = draw(st.permutations(range(o["n_answers"])))[:k]
        c = draw(st.integers(0, k - 1))

        def substitute(t):
            s = draw(st.permutations(range(m)))
            return [f"x{s[w]}" for w in t]

        toks = sum((substitute(t) + ["=", f"a{a}"] for t, a in zip(tup, ans)), []) + substitute(tup[c]) + ["="]
    toks = tuple(toks)
    i = reference_index(name, o, task, toks)
    assert 0 <= i < task.size
    p = task.point(i)
    assert p.tokens == toks
    assert p.label == reference_label(name, o, toks)


@prop(100)
@given(configs())
def test_sizes_equal_their_formulas(cfg):
    name, opts = cfg
    o = dict(opts)
    task, points = load(name, opts)
    assert task.size == len(points) == reference_size(name, o)
    printed = evaluate_formula(task.size_formula, o.get("l"))
    assert printed is not None, f"cannot read the printed formula {task.size_formula!r}"
    assert printed == task.size, (task.size_formula, task.size)
    if name == "sc" and o["n_points"] is not None:
        assert task.size_formula.endswith(f"{o['alphabet']}^{o['length']}") or task.size == o["alphabet"] ** o["length"]


@prop(100)
@given(configs())
def test_every_point_has_the_label_of_the_definition(cfg):
    name, opts = cfg
    o = dict(opts)
    task, points = load(name, opts)
    event(name)
    if name == "sc":
        seqs = [t for t, _ in points]
        labels = [y for _, y in points]
        assert len(set(seqs)) == len(seqs) == task.size
        assert all(t[-1] == "<cls>" and len(t) == o["length"] + 1 for t in seqs)
        assert sorted(labels) == sorted(task.classes), "labels must be pairwise distinct and use every class"
        full = {ref.sc_tokens(v, o["length"], o["alphabet"]) for v in range(o["alphabet"] ** o["length"])}
        assert set(seqs) <= full
        if o["n_points"] is None:
            assert set(seqs) == full
        return
    want = reference_points(name, o)
    got = dict(points)
    assert len(got) == len(points), "a sequence is listed twice"
    if want is None:  # word problems: every word over the generating set, once
        assert sorted(task.vocab) == sorted(generators(o["group"]))
        want = {w: ref.word_label(w, o["group"]) for w in itertools.product(task.vocab, repeat=o["n"])}
    assert got == want
    for toks, lab in points:
        assert lab == reference_label(name, o, toks)
    assert set(got.values()) <= set(task.classes)


@pytest.mark.slow
@prop(100)
@given(configs(names=("icqa", "tm", "ictm", "multihop")))
def test_orbit_representatives_cover_each_orbit_exactly_once(cfg):
    name, opts = cfg
    task, points = load(name, opts)
    groups = task.symmetry_groups()
    assert groups
    orbits = ref.orbits(points, groups)  # asserts the labelled dataset is closed under the groups
    idx, sizes = task.orbit_representatives()
    idx = [int(i) for i in idx]
    sizes = [int(s) for s in sizes]
    assert sum(sizes) == task.size
    assert len(idx) == len(sizes) == len(orbits) == len(set(idx))
    orbit_of = {j: o for o in orbits for j in o}
    for i, s in zip(idx, sizes):
        assert len(orbit_of[i]) == s, (i, s, len(orbit_of[i]))
    covered = sorted(j for i in idx for j in orbit_of[i])
    assert covered == list(range(task.size)), "some orbit has no representative, or two"
    event(f"{name}: {len(orbits)} orbits")


@pytest.mark.slow
@prop(100)
@given(configs(), st.data())
def test_batches_decode_the_same_points_at_every_batch_size(cfg, data):
    name, opts = cfg
    task, points = load(name, opts)
    bs = data.draw(st.integers(1, 64))
    lo = data.draw(st.integers(0, task.size - 1))
    hi = data.draw(st.integers(lo + 1, task.size))
    seen = []
    for b in task.batches(bs, lo, hi):
        assert len(b.index) <= bs
        seen += [int(i) for i in b.index]
        for i, row, lab in zip(b.index, b.ids.tolist(), b.labels.tolist()):
            assert (tuple(task.vocab[t] for t in row), task.classes[lab]) == points[int(i)]
    assert seen == list(range(lo, hi))
    subset = data.draw(st.lists(st.integers(0, task.size - 1), min_size=1, max_size=20))
    got = [int(i) for b in task.batches_of(subset, bs) for i in b.index]
    assert got == subset


# ---- every task, including ones added later: the task-independent properties at their default sizes


def _available(name):
    try:
        return make_task(name)
    except BadInput as exc:
        if "not available" in str(exc):
            return None
        raise


def test_every_task_has_a_plain_reference():
    """A task added without a reference in tests/task_reference.py still gets the task-independent
    properties below at its default sizes; this test says it is missing the label check."""
    assert OTHERS == (), f"tasks without a plain reference of their definition: {OTHERS}"


@pytest.mark.parametrize("name", KNOWN + OTHERS)
@prop(10)
@given(data=st.data())
def test_other_tasks_enumerate_consistently(name, data):
    task = _available(name)
    if task is None:
        pytest.skip(f"task {name} is not in this build")
    if task.size > 20000:
        pytest.skip(f"task {name} has {task.size} points at its default sizes")
    points = _cached_points(name)
    assert len(points) == task.size
    assert len({t for t, _ in points}) == task.size, "decode is not injective: a sequence is listed twice"
    printed = evaluate_formula(task.size_formula)
    if printed is not None:
        assert printed == task.size, (task.size_formula, task.size)
    else:
        event(f"{name}: size formula {task.size_formula!r} not evaluated")
    for i in data.draw(st.lists(st.integers(0, task.size - 1), min_size=1, max_size=5)):
        p = task.point(i)
        want = points[i]
        assert p.tokens == want[0]
        if task.outputs == "all":
            assert tuple(p.labels) == want[1]
        else:
            assert p.label == want[1]
    groups = task.symmetry_groups()
    if groups and ref.group_order(groups) <= 5040 and task.orbit_representatives() is not None:
        orbits = ref.orbits(points, groups)
        idx, sizes = task.orbit_representatives()
        orbit_of = {j: o for o in orbits for j in o}
        assert sum(int(s) for s in sizes) == task.size
        assert sorted(j for i in idx for j in orbit_of[int(i)]) == list(range(task.size))
        assert all(len(orbit_of[int(i)]) == int(s) for i, s in zip(idx, sizes))


@lru_cache(maxsize=None)
def _cached_points(name):
    return ref.all_points(make_task(name))
