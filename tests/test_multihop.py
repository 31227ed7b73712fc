"""Multi-hop in-context QA (paper section 7): dataset, labels, constructions, layer counts."""
from __future__ import annotations

import itertools
from fractions import Fraction
from math import perm

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks.multihop import MultiHop
from depthcert.checkers.symmetry import check_equivariance
from depthcert.checkers.tasks import make_task
from depthcert.checkers.trace import trace
from depthcert.constructions import multihop, registry

VARIANTS = ("paper", "linear", "doubling", "relu-and")


def brute_force(n_entities: int, k: int, hops: int) -> set[tuple[tuple[str, ...], str]]:
    """Every (sequence, label) straight from the definition, independently of decode()."""
    ents = MultiHop(hops, k, n_entities).entities
    out = set()
    for src in itertools.permutations(ents, k):
        for tgt in itertools.product(src, repeat=k):
            f = dict(zip(src, tgt))
            for s in src:
                seq = tuple(t for x, y in zip(src, tgt) for t in (x, ">", y)) + (s, ">")
                e = s
                for _ in range(hops):
                    e = f[e]
                out.add((seq, e))
    return out


def label_by_reading(tokens: tuple[str, ...], hops: int) -> str:
    """Follow the pairs written in the sequence itself."""
    f = {tokens[i]: tokens[i + 2] for i in range(0, len(tokens) - 2, 3)}
    e = tokens[-2]
    for _ in range(hops):
        e = f[e]
    return e


@pytest.mark.parametrize("n_entities,k,hops", [(1, 1, 1), (2, 1, 3), (2, 2, 1), (3, 2, 2), (3, 3, 4), (4, 3, 2)])
def test_size_and_points_match_brute_force(n_entities, k, hops):
    task = MultiHop(hops, k, n_entities)
    assert task.size == perm(n_entities, k) * k**k * k
    assert task.length == 3 * k + 2
    ids, labels = task.decode(np.arange(task.size))
    got = {(tuple(task.vocab[t] for t in row), task.classes[y]) for row, y in zip(ids, labels)}
    assert len(got) == task.size  # the indexing is a bijection onto the dataset
    assert got == brute_force(n_entities, k, hops)


def test_paper_example():
    """The paper's "a > b b > c c > d a >" answered d (closed here by d > a)."""
    task = MultiHop(hops=3, k=4)
    p = task.point(432)
    assert " ".join(p.tokens) == "a > b b > c c > d d > a a >" and p.label == "d"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("hops", [1, 2, 3, 4, 5])
def test_variants_verify_exhaustively(variant, hops):
    task = make_task("multihop", hops=hops, k=2, n_entities=3)
    c = registry.build(task, variant)
    v = verify(c.model, task, progress=False)
    assert v.verified and v.points_covered == task.size == 48
    assert v.min_margin == 1
    if variant != "relu-and":
        assert c.model.heads == (1,) * c.model.n_layers


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_verify_k3(variant):
    task = make_task("multihop", hops=3, k=3)
    v = verify(registry.build(task, variant).model, task, progress=False)
    assert v.verified and v.points_covered == 486 and v.min_margin == 1


@pytest.mark.parametrize("k,n_entities", [(2, 2), (2, 3), (3, 3), (3, 4)])
def test_relu_and_two_hops_in_two_layers(k, n_entities):
    """h = 2 needs only 2 layers (one-layer impossible at k = 3: test_one_layer_certificate)."""
    task = make_task("multihop", hops=2, k=k, n_entities=n_entities)
    c = registry.build(task, "relu-and")
    assert c.model.n_layers == 2 and c.model.heads == (k + 2, n_entities)
    v = verify(c.model, task, progress=False)
    assert v.verified and v.points_covered == task.size and v.min_margin == 1


@pytest.mark.parametrize("hops", range(1, 13))
def test_relu_and_any_hops(hops):
    """L layers reach h <= 3 * 2^(L-2) - 1: 2 layers for h <= 2, 3 for h <= 5, 4 for h <= 11."""
    task = make_task("multihop", hops=hops, k=2, n_entities=3)
    c = registry.build(task, "relu-and")
    L = 2 if hops <= 2 else 3 if hops <= 5 else 4 if hops <= 11 else 5
    assert c.model.n_layers == L
    v = verify(c.model, task, progress=False)
    assert v.verified and v.points_covered == 48 and v.min_margin == 1


@pytest.mark.parametrize("k,n_entities,hops", [(2, 3, 3), (2, 2, 4), (3, 3, 2)])
def test_dnf_any_hops_in_two_layers(k, n_entities, hops):
    """With N^h k^h heads two layers do any h (one layer cannot: test_one_layer_certificate)."""
    task = make_task("multihop", hops=hops, k=k, n_entities=n_entities)
    c = registry.build(task, "dnf")
    assert c.model.n_layers == 2 and c.model.heads == (2 * k + 1, n_entities**hops * k**hops)
    v = verify(c.model, task, progress=False)
    assert v.verified and v.points_covered == task.size and v.min_margin == 1


def test_dnf_head_limit():
    with pytest.raises(BadInput, match="heads"):
        registry.build(make_task("multihop", hops=6, k=3), "dnf")


def test_one_layer_certificate():
    """No one-layer model does 1 hop (k = 2) or 2 hops (k = 3): checked Def. 3 certificates."""
    from depthcert.proofs.dependence import decide_task

    for hops, k in ((1, 2), (2, 3)):
        result = decide_task(make_task("multihop", hops=hops, k=k), progress=False)
        assert not result.decision.fittable and result.decision.certificate is not None


@pytest.mark.parametrize("hops", range(1, 10))
def test_layer_counts(hops):
    task = MultiHop(hops, 2, 2)
    layers = {v: registry.build(task, v).model.n_layers for v in VARIANTS}
    relu_and = next(L for L in range(2, 10) if 3 * 2 ** (L - 2) - 1 >= hops)
    assert layers == {"paper": 2 * hops, "linear": hops + 1, "doubling": hops.bit_length() + 1, "relu-and": relu_and}
    assert hops.bit_length() + 1 == int(np.floor(np.log2(hops))) + 2


def test_paper_as_printed_is_refuted():
    """Theorem 3's W_V = I copy merges source and target of a pair (shared entity vocabulary)."""
    task = make_task("multihop", hops=1, k=3)
    v = verify(registry.build(task, "paper", as_printed=True).model, task, progress=False)
    assert not v.verified
    ce = v.counterexample
    assert (ce.index, " ".join(ce.tokens), ce.expected, ce.predicted) == (1, "a > a b > a c > a b >", "a", "b")
    assert ce.logits == (Fraction(3), Fraction(6), Fraction(0))


@pytest.mark.parametrize("variant", ("paper", "linear", "doubling"))
def test_entity_symmetry_is_proven(variant):
    task = make_task("multihop", hops=3, k=3, n_entities=4)
    rep = check_equivariance(registry.build(task, variant).model, task.symmetry_groups())
    assert rep.ok, rep.reason
    idx, sizes = task.orbit_representatives()
    assert sum(sizes) == task.size and len(idx) == 3**3 * 3


def test_relu_and_heads_are_permuted_not_invariant():
    """relu-and's layer-2 heads (one per entity) are permuted by an entity permutation, so the
    per-head equivariance proof does not apply and verify-construction evaluates every point."""
    task = make_task("multihop", hops=2, k=2, n_entities=3)
    rep = check_equivariance(registry.build(task, "relu-and").model, task.symmetry_groups())
    assert not rep.ok and "layer 2 head 1" in rep.reason  # 1-based, the paper's convention


@settings(max_examples=30, deadline=None)
@given(
    k=st.integers(1, 3),
    extra=st.integers(0, 2),
    hops=st.integers(1, 8),
    variant=st.sampled_from(VARIANTS),
    u=st.integers(0, 10**9),
)
@pytest.mark.slow
def test_random_point_exact_margin_one(k, extra, hops, variant, u):
    """Any size, any point: the exact trace predicts the label read off the sequence, margin 1."""
    task = MultiHop(hops, k, k + extra)
    i = u % task.size
    ids, labels = task.decode(np.array([i]))
    p = task.point(i)
    assert p.label == label_by_reading(p.tokens, hops)
    tr = trace(registry.build(task, variant).model, ids[0])
    y = int(labels[0])
    assert tr.predicted == y
    if len(tr.logits) > 1:
        assert tr.logits[y] - max(v for c, v in enumerate(tr.logits) if c != y) == 1


def test_bad_input():
    with pytest.raises(BadInput, match="larger than the number of entities"):
        MultiHop(2, 4, 3)
    with pytest.raises(BadInput, match="--hops"):
        MultiHop(0, 2, 2)
    with pytest.raises(BadInput, match="does not apply"):
        make_task("multihop", length=3)
    with pytest.raises(BadInput, match="same option"):
        make_task("multihop", alphabet=4, n_entities=5)
    assert make_task("multi-hop", alphabet=5, k=2).n_entities == 5
    with pytest.raises(BadInput, match="multihop task"):
        multihop.build_linear(make_task("icqa", k=1), False)
