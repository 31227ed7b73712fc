"""Template matching (TM) and in-context template matching (ICTM): datasets, Theorems 5 and 6."""
from __future__ import annotations

import itertools
from fractions import Fraction
from math import perm

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import plan_points, verify
from depthcert.checkers.tasks import make_task
from depthcert.checkers.tasks.template import (
    InContextTemplateMatching,
    TemplateMatching,
    bell,
    count_templates,
    ictm_size,
)
from depthcert.constructions import parsing_copying_matching as pcm
from depthcert.constructions import parsing_mapping as pm
from depthcert.constructions import registry


def pattern(seq) -> tuple[int, ...]:
    """Canonical first-occurrence pattern, written plainly (independent of the task code)."""
    first: dict = {}
    return tuple(first.setdefault(x, len(first)) for x in seq)


def name(p) -> str:
    return "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[v] for v in p)


def check(model, task):
    plan = plan_points(model, task)
    return verify(model, task, plan=plan)


# ---------------------------------------------------------------- datasets

@pytest.mark.parametrize("l,m", [(1, 1), (1, 3), (2, 2), (3, 2), (3, 4), (4, 3), (4, 5)])
def test_tm_size_and_labels_brute_force(l, m):
    t = make_task("tm", l=l, alphabet=m)
    assert t.size == m**l
    seqs = list(itertools.product(range(m), repeat=l))
    pats = sorted({pattern(s) for s in seqs})
    assert len(pats) == len(t.classes) == count_templates(l, m)
    if m >= l:
        assert len(t.classes) == bell(l)
    assert t.classes == tuple(name(p) for p in pats)
    ids, labels = t.decode(np.arange(t.size))
    assert ids.shape == (t.size, l + 1) and (ids[:, -1] == m).all()
    assert [tuple(r) for r in ids[:, :l]] == seqs  # index = the sequence in base m
    assert [t.classes[y] for y in labels] == [name(pattern(s)) for s in seqs]


def test_bell_numbers():
    assert [bell(n) for n in range(8)] == [1, 1, 2, 5, 15, 52, 203, 877]


def ictm_brute(k, l, m, na):
    """All valid ICTM points by filtering raw products: (context questions, answers, c, query)."""
    seqs = list(itertools.product(range(m), repeat=l))
    out = set()
    for ctx in itertools.product(seqs, repeat=k):
        temps = [pattern(s) for s in ctx]
        if len(set(temps)) < k:
            continue
        for ans in itertools.permutations(range(na), k):
            for c in range(k):
                for q in seqs:
                    if pattern(q) != temps[c]:
                        continue
                    toks = []
                    for s, a in zip(ctx, ans):
                        toks += list(s) + [m, m + 1 + a]
                    toks += list(q) + [m]
                    out.add((tuple(toks), m + 1 + ans[c]))
    return out


@pytest.mark.parametrize("k,l,m,na", [(1, 1, 2, 1), (1, 2, 2, 2), (2, 2, 2, 2), (2, 2, 3, 2), (2, 3, 2, 2), (3, 3, 2, 3)])
def test_ictm_size_brute_force(k, l, m, na):
    t = make_task("ictm", k=k, l=l, alphabet=m, n_answers=na)
    brute = ictm_brute(k, l, m, na)
    assert t.size == len(brute) == ictm_size(l, m, k, na)
    ids, labels = t.decode(np.arange(t.size))
    got = {(tuple(r), int(y) + m + 1) for r, y in zip(ids, labels)}
    assert got == brute  # a bijection onto the valid points, labels included
    assert t.length == k * (l + 2) + l + 1


def ictm_label_ok(t: InContextTemplateMatching, ids, label) -> bool:
    step = t.l + 2
    q = pattern(ids[t.k * step : t.k * step + t.l])
    temps = [pattern(ids[b * step : b * step + t.l]) for b in range(t.k)]
    if len(set(temps)) != t.k or temps.count(q) != 1:
        return False
    b = temps.index(q)
    return ids[b * step + t.l] == t.m and ids[b * step + t.l + 1] == label + t.m + 1


def test_orbit_representatives_cover_dataset():
    for t in (make_task("tm", l=4, alphabet=3), make_task("ictm", k=2, l=2, alphabet=4, n_answers=3)):
        idx, sizes = t.orbit_representatives()
        assert sum(int(s) for s in sizes) == t.size
        assert len(set(idx.tolist())) == len(idx)


@pytest.mark.parametrize("name_,opts,msg", [
    ("tm", {"l": 0}, "--l must be >= 1"),
    ("tm", {"alphabet": 0}, "--alphabet must be >= 1"),
    ("tm", {"k": 2}, "does not apply"),
    ("ictm", {"k": 3, "l": 2}, "distinct templates"),
    ("ictm", {"k": 3, "n_answers": 2, "l": 3}, "larger than the number of answer tokens"),
    ("ictm", {"n_questions": 3}, "does not apply"),
    ("ictm", {"k": 5, "l": 5, "alphabet": 6, "n_answers": 6}, "^311875200 ordered template choices"),
    ("ictm", {"k": 50, "l": 50, "alphabet": 50, "n_answers": 50}, "^more than 10\\^2363 ordered template choices"),
])
def test_bad_input(name_, opts, msg):
    with pytest.raises(BadInput, match=msg):
        make_task(name_, **opts)


# ---------------------------------------------------------------- constructions

@pytest.mark.parametrize("variant", ["heads", "ternary"])
@pytest.mark.parametrize("l,m", [(1, 2), (2, 2), (2, 3), (3, 3), (3, 4)])
def test_theorem5_verifies(variant, l, m):
    t = make_task("tm", l=l, alphabet=m)
    v = check(registry.build(t, variant).model, t)
    assert v.verified and v.points_covered == t.size
    assert l == 1 or v.min_margin > 0


def test_theorem5_printed_refuted():
    t = make_task("tm", l=3, alphabet=4)
    v = check(registry.build(t, "ternary", as_printed=True).model, t)
    assert not v.verified and v.counterexample.index == 9 and v.counterexample.expected == "ABC"
    v = check(registry.build(t, "heads", as_printed=True).model, t)
    assert not v.verified and v.counterexample.tie
    # each fix alone is not enough
    for fixes in ({"value-columns"}, {"layer2-source"}):
        for f in (pm.build_ternary_with, pm.build_heads_with):
            assert not check(f(t, frozenset(fixes)).model, t).verified


def test_theorem6_target_and_printed():
    t = make_task("ictm", k=2, l=2, alphabet=3, n_answers=2)
    v = check(registry.build(t, "parsing-copying-matching").model, t)
    assert v.verified and v.points_covered == 648 and v.min_margin == Fraction(1, 2)
    full = verify(registry.build(t, "parsing-copying-matching").model, t)  # every point, no symmetry
    assert full.verified and full.points_checked == 648 and full.min_margin == v.min_margin
    m = registry.build(t, "parsing-copying-matching", as_printed=True).model
    assert m.heads == (1, 1, 4) and m.dim == t.m + 1 + t.n_a + t.length + t.l + 2
    v = check(m, t)
    assert not v.verified
    ce = v.counterexample
    assert ce.index == 2 and " ".join(ce.tokens) == "x1 x1 = a0 x0 x1 = a1 x0 x0 =" and ce.predicted == "a1"


@pytest.mark.parametrize("fix,size", [
    ("qk1-stray-block", (2, 2, 4, 2)),
    ("final-answers", (2, 2, 3, 3)),
    ("final-self-mask", (2, 2, 3, 3)),
    ("layer3-rows", (2, 2, 3, 2)),
])
def test_theorem6_each_fix_needed(fix, size):
    k, l, m, na = size
    t = make_task("ictm", k=k, l=l, alphabet=m, n_answers=na)
    assert not check(pcm.build_with(t, pcm.ALL_FIXES - {fix}).model, t).verified
    assert check(pcm.build_with(t, pcm.ALL_FIXES).model, t).verified


@pytest.mark.parametrize("k,l,m,na", [(1, 1, 1, 2), (1, 2, 2, 3), (2, 2, 2, 4), (2, 3, 3, 2), (3, 3, 2, 3)])
def test_theorem6_verifies(k, l, m, na):
    t = make_task("ictm", k=k, l=l, alphabet=m, n_answers=na)
    v = check(registry.build(t, "parsing-copying-matching").model, t)
    assert v.verified and v.points_covered == t.size and v.min_margin > 0


def test_one_entry_change_is_refuted():
    t = make_task("tm", l=3, alphabet=3)
    model = registry.build(t, "ternary").model
    bad = model.with_weight((0, 0, "W_QK", 0, 0), 0)  # token t0 no longer attends equal tokens
    v = verify(bad, t)
    assert v.verdict == "refuted" and v.counterexample is not None
    t = make_task("ictm", k=2, l=2, alphabet=3, n_answers=2)
    model = registry.build(t, "parsing-copying-matching").model
    bad = model.with_weight((0, 0, "W_QK", 0, 0), 0)
    v = verify(bad, t)
    assert v.verdict == "refuted" and v.counterexample is not None


# ---------------------------------------------------------------- properties

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(l=st.integers(1, 4), m=st.integers(1, 4), variant=st.sampled_from(["heads", "ternary"]),
       data=st.data())
def test_tm_property(l, m, variant, data):
    t = TemplateMatching(l=l, alphabet=m)
    i = data.draw(st.integers(0, t.size - 1))
    p = t.point(i)
    assert p.label == name(pattern(p.tokens[:-1])) and p.tokens[-1] == "<cls>"
    assert t.size == m**l and len(t.classes) == count_templates(l, m)
    v = check(registry.build(t, variant).model, t)
    assert v.verified


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 2), l=st.integers(1, 3), m=st.integers(1, 4), extra=st.integers(0, 2), data=st.data())
def test_ictm_property(k, l, m, extra, data):
    na = k + extra
    if k > count_templates(l, m):
        with pytest.raises(BadInput):
            InContextTemplateMatching(k=k, l=l, alphabet=m, n_answers=na)
        return
    t = InContextTemplateMatching(k=k, l=l, alphabet=m, n_answers=na)
    assert t.size == ictm_size(l, m, k, na)
    for _ in range(5):
        i = data.draw(st.integers(0, t.size - 1))
        ids, labels = t.decode(np.array([i]))
        assert ictm_label_ok(t, [int(x) for x in ids[0]], int(labels[0]))
    v = check(registry.build(t, "parsing-copying-matching").model, t)
    assert v.verified and v.points_covered == t.size
