"""Log-depth tasks and constructions (docs/logdepth.md): parity, mod-count, group word problems,
reachability.  Labels are checked against plain-Python references written from the task
definitions (not from the enumerator); every construction is verified exhaustively at small sizes;
the one-layer certificate is re-checked by the independent checker."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers import certificate as cc
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.checkers.trace import trace
from depthcert.constructions import registry

BIN = os.path.dirname(sys.executable)


# ---------------------------------------------------------------- independent references

def perm_from_cycles(m: int, cycles) -> tuple[int, ...]:
    img = list(range(m))
    for c in cycles:
        for i, x in enumerate(c):
            img[x] = c[(i + 1) % len(c)]
    return tuple(img)


# The generating sets stated in docs/logdepth.md, written out literally.
GENERATORS = {
    "a4": perm_from_cycles(4, [(0, 1, 2)]), "a5": perm_from_cycles(5, [(0, 1, 2)]),
    "s3": perm_from_cycles(3, [(0, 1)]), "s4": perm_from_cycles(4, [(0, 1)]), "s5": perm_from_cycles(5, [(0, 1)]),
}
SECOND = {
    "a4": perm_from_cycles(4, [(1, 2, 3)]), "a5": perm_from_cycles(5, [(0, 1, 2, 3, 4)]),
    "s3": perm_from_cycles(3, [(0, 1, 2)]), "s4": perm_from_cycles(4, [(0, 1, 2, 3)]),
    "s5": perm_from_cycles(5, [(0, 1, 2, 3, 4)]),
}


def word_product(perms) -> tuple[int, ...]:
    """Left to right, each permutation applied after the previous ones: x -> p_n(...p_1(x))."""
    m = len(perms[0])
    out = tuple(range(m))
    for p in perms:
        out = tuple(p[out[x]] for x in range(m))
    return out


def cycle_name(p) -> str:
    out, seen = [], set()
    for x in range(len(p)):
        if x in seen or p[x] == x:
            continue
        c, y = [], x
        while y not in seen:
            seen.add(y)
            c.append(str(y))
            y = p[y]
        out.append("(" + "".join(c) + ")")
    return "".join(out) or "e"


def reachable(bits, V, s, t) -> bool:
    adj = {u: [w for w in range(V) if bits[u * V + w]] for u in range(V)}
    seen, todo = {s}, deque([s])
    while todo:
        u = todo.popleft()
        for w in adj[u]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return t in seen


def reference_label(task, tokens) -> str:
    """The label straight from the task's definition."""
    if task.name == "parity":
        return str(sum(t == "1" for t in tokens) % 2)
    if task.name == "mod-count":
        return str(sum(t == "1" for t in tokens) % task.params["modulus"])
    if task.name == "word-problem":
        group = task.params["group"]
        if group.startswith("c"):
            return str(sum(int(t) for t in tokens) % int(group[1:]))
        gens = {cycle_name(GENERATORS[group]): GENERATORS[group], cycle_name(SECOND[group]): SECOND[group]}
        return cycle_name(word_product([gens[t] for t in tokens]))
    V = task.params["vertices"]
    bits = [int(t) for t in tokens[: V * V]]
    s, t = int(tokens[-2][1:]), int(tokens[-1][1:])
    return "yes" if reachable(bits, V, s, t) else "no"


def all_sequences(task):
    """Every sequence of the dataset, from the format alone."""
    if task.name == "reachability":
        V = task.params["vertices"]
        verts = [f"v{i}" for i in range(V)]
        return [bits + (s, t) for bits in itertools.product("01", repeat=V * V) for s in verts for t in verts]
    return list(itertools.product(task.vocab, repeat=task.params["n"]))


SMALL_TASKS = [
    ("parity", dict(n=1)), ("parity", dict(n=5)), ("mod-count", dict(n=6, modulus=3)),
    ("mod-count", dict(n=4, modulus=5)), ("word-problem", dict(group="a5", n=4)),
    ("word-problem", dict(group="s3", n=5)), ("word-problem", dict(group="c4", n=3)),
    ("word-problem", dict(group="s4", n=3)), ("reachability", dict(vertices=1)),
    ("reachability", dict(vertices=2)), ("reachability", dict(vertices=3)),
]


@pytest.mark.parametrize("name,opts", SMALL_TASKS, ids=[f"{n}-{o}" for n, o in SMALL_TASKS])
def test_every_point_matches_the_definition(name, opts):
    task = make_task(name, **opts)
    seqs = all_sequences(task)
    assert task.size == len(seqs)
    ids, labels = task.decode(np.arange(task.size, dtype=np.int64))
    got = [tuple(task.vocab[t] for t in row) for row in ids]
    assert sorted(got) == sorted(seqs)  # the indexing is a bijection onto the dataset
    assert got == sorted(got, key=lambda s: [task.vocab.index(t) for t in s])  # index order = numeral order
    for seq, y in zip(got, labels):
        assert task.classes[y] == reference_label(task, seq), seq


@pytest.mark.parametrize("name,opts,formula", [
    ("parity", dict(n=10), 2**10), ("mod-count", dict(n=20, modulus=7), 2**20),
    ("word-problem", dict(group="a5", n=16), 2**16), ("word-problem", dict(group="c5", n=7), 5**7),
    ("word-problem", dict(group="s5", n=62), 2**62), ("reachability", dict(vertices=4), 2**16 * 16),
    ("reachability", dict(vertices=7), 2**49 * 49),
])
def test_sizes_equal_the_formulas(name, opts, formula):
    task = make_task(name, **opts)
    assert task.size == formula
    assert eval(task.size_formula.replace("^", "**")) == formula


def test_groups_have_their_orders_and_generators():
    for name, order in (("a4", 12), ("a5", 60), ("s3", 6), ("s4", 24), ("s5", 120), ("c7", 7)):
        task = make_task("word-problem", group=name, n=2)
        assert len(task.classes) == order == len(set(task.classes))
        if name[0] != "c":
            assert task.vocab == (cycle_name(GENERATORS[name]), cycle_name(SECOND[name]))


@st.composite
def random_points(draw):
    kind = draw(st.sampled_from(["parity", "mod-count", "word-a5", "word-s5", "word-c", "reach"]))
    if kind == "parity":
        task = make_task("parity", n=draw(st.integers(1, 62)))
    elif kind == "mod-count":
        task = make_task("mod-count", n=draw(st.integers(1, 62)), modulus=draw(st.integers(2, 9)))
    elif kind in ("word-a5", "word-s5"):
        task = make_task("word-problem", group=kind[5:], n=draw(st.integers(1, 62)))
    elif kind == "word-c":
        k = draw(st.integers(2, 9))
        task = make_task("word-problem", group=f"c{k}", n=draw(st.integers(1, 12)))
    else:
        task = make_task("reachability", vertices=draw(st.integers(1, 7)))
    return task, draw(st.integers(0, task.size - 1))


@settings(max_examples=150, deadline=None)
@given(random_points())
def test_random_index_sequence_label_agree_with_reference(tp):
    task, i = tp
    p = task.point(i)
    assert len(p.tokens) == task.length
    assert p.label == reference_label(task, p.tokens)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["a5", "s5", "s4"]), st.lists(st.integers(0, 1), min_size=1, max_size=40), st.data())
def test_product_is_associative_in_any_tree_order(group, word, data):
    """The label is the left-to-right product; any bracketing (the constructions' tree) agrees."""
    gens = [GENERATORS[group], SECOND[group]]
    perms = [gens[b] for b in word]

    def bracket(ps):
        if len(ps) == 1:
            return ps[0]
        cut = data.draw(st.integers(1, len(ps) - 1))
        return word_product([bracket(ps[:cut]), bracket(ps[cut:])])

    task = make_task("word-problem", group=group, n=len(word))
    index = int("".join(map(str, word)), 2)
    assert task.point(index).label == cycle_name(word_product(perms)) == cycle_name(bracket(perms))


# ---------------------------------------------------------------- constructions

def _verified(task, variant):
    c = registry.build(task, variant)
    v = verify(c.model, task, progress=False)
    assert v.verified, (task.describe(), variant, v.counterexample)
    assert v.points_covered == task.size
    return c, v


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("variant", ["tree", "tree-mlp", "count"])
def test_parity_and_mod_count_verify(n, variant):
    for task in (make_task("parity", n=n), make_task("mod-count", n=n, modulus=3)):
        c, v = _verified(task, variant)
        assert v.min_margin == 1
        layers = 2 if variant == "count" else max(1, (n - 1).bit_length())
        assert c.model.n_layers == layers


@pytest.mark.parametrize("group,n", [("a5", 5), ("s3", 6), ("c3", 4), ("a4", 4), ("s4", 3), ("c2", 5)])
@pytest.mark.parametrize("variant", ["tree", "tree-mlp"])
def test_word_problems_verify(group, n, variant):
    task = make_task("word-problem", group=group, n=n)
    c, v = _verified(task, variant)
    assert c.model.n_layers == max(1, (n - 1).bit_length())
    assert v.min_margin >= 1
    if variant == "tree":
        assert c.model.is_plain  # the paper's class


@pytest.mark.parametrize("V", [1, 2, 3])
@pytest.mark.parametrize("variant", ["squaring", "squaring-mlp"])
def test_reachability_verifies(V, variant):
    task = make_task("reachability", vertices=V)
    c, v = _verified(task, variant)
    T = (V - 2).bit_length() if V > 2 else 0
    assert c.model.n_layers == (T + 2 if variant == "squaring" else 1 + 2 * T)
    assert v.min_margin == 1
    assert c.model.is_plain == (variant == "squaring")


def test_layer_counts_grow_like_log2_n():
    for n, layers in ((1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4), (17, 5), (32, 5), (33, 6),
                      (62, 6)):
        assert registry.build(make_task("parity", n=n), "tree-mlp").model.n_layers == layers
    assert [registry.build(make_task("reachability", vertices=V), "squaring").model.n_layers
            for V in range(1, 8)] == [2, 2, 3, 4, 4, 5, 5]


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(st.sampled_from([("parity", dict(n=9)), ("mod-count", dict(n=6, modulus=4)),
                        ("word-problem", dict(group="s3", n=6)), ("word-problem", dict(group="a5", n=5)),
                        ("reachability", dict(vertices=3))]),
       st.sampled_from([0, 1]), st.integers(0, 2**40))
def test_exact_trace_predicts_the_reference_label(case, which, u):
    """The per-point Fraction trace (a second evaluator) agrees with the independent reference."""
    name, opts = case
    task = make_task(name, **opts)
    variant = registry.variants(name)[which]
    model = registry.build(task, variant).model
    p = task.point(u % task.size)
    tr = trace(model, list(p.tokens))
    assert model.classes[tr.predicted] == reference_label(task, p.tokens)
    ranked = sorted(tr.logits, reverse=True)
    assert ranked[0] - ranked[1] >= 1


def test_one_layer_certificate_is_valid_under_the_independent_checker(tmp_path):
    """parity n = 3: 000 + 110 and 010 + 100 (last token 0) share their token multisets."""
    from depthcert.proofs.dependence import decide_task

    for name, opts in (("parity", dict(n=3)), ("reachability", dict(vertices=3))):
        res = decide_task(make_task(name, **opts), progress=False)
        assert not res.decision.fittable
        ok, msg = cc.check_certificate(res.decision.certificate.to_json())
        assert ok, msg
    out = tmp_path / "cert.json"
    r = subprocess.run([os.path.join(BIN, "find-dependence"), "--task", "parity", "--n", "3", "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, cc.__file__, str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("valid"), r.stdout + r.stderr
    assert json.loads(out.read_text())["points"]


def test_cli_verifies_and_refuses_too_large_runs(capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction

    def run(*argv):
        code = run_main(_verify_construction, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("word-problem", "--group", "a5", "--n", "6")
    assert code == 0 and "VERIFIED" in out
    code, out, err = run("parity", "--n", "30")  # 2^30 points: refused before any evaluation
    assert code == 2 and not out and "--max-points" in err and len(err.strip().splitlines()) == 1
    code, _, err = run("reachability", "--vertices", "8")
    assert code == 2 and "--vertices <= 7" in err
    code, _, err = run("parity", "--n", "5000")
    assert code == 2 and "longest sequence" in err


@pytest.mark.parametrize("name,opts,match", [
    ("parity", dict(n=0), ">= 1"), ("parity", dict(n=63), "2\\^62"), ("mod-count", dict(n=3, modulus=1), ">= 2"),
    ("word-problem", dict(group="a7"), "4 <= m <= 6"), ("word-problem", dict(group="q8"), "unknown --group"),
    ("word-problem", dict(group=5), "--group must be a name"), ("word-problem", dict(group="c1"), "k >= 2|2 <= k"),
    ("reachability", dict(vertices=0), ">= 1"), ("parity", dict(group="a5"), "does not apply"),
    ("word-problem", dict(group="s5", n=63), "2\\^62"),
])
def test_bad_input(name, opts, match):
    with pytest.raises(BadInput, match=match):
        make_task(name, **opts)


def test_count_refuses_groups_and_tree_refuses_other_tasks():
    from depthcert.constructions import group_tree, reachability

    with pytest.raises(BadInput):
        group_tree.build_count(make_task("word-problem", group="c3", n=3))
    with pytest.raises(BadInput):
        group_tree.build_tree(make_task("reachability", vertices=2))
    with pytest.raises(BadInput):
        reachability.build_squaring(make_task("parity", n=3))


def test_wide_groups_are_refused_before_their_tables_are_made(capsys):
    """c<k> with large k: the encoding's k tables of k x k (and the tree's k heads) are refused by
    the weight budget before they are allocated; a group the budget admits still verifies."""
    import resource
    import time

    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction

    def run(*argv):
        t0, rss0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        code = run_main(_verify_construction, list(argv))
        out, err = capsys.readouterr()
        return code, out, err, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0

    code, out, err, secs, grew = run("word-problem", "--group", "c200", "--n", "1")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "selector tables" in err and "--max-weights" in err
    assert grew < 200_000  # KB: 200 tables of 200 x 200 int64 would be 64 MB, never made
    code, _, err, _, _ = run("word-problem", "--group", "c100", "--n", "2", "--variant", "tree-mlp")
    assert code == 2 and "--max-weights" in err and len(err.strip().splitlines()) == 1
    code, _, err, _, _ = run("word-problem", "--group", "c100", "--n", "2")
    assert code == 2 and "100 heads" in err
    code, out, _, _, _ = run("word-problem", "--group", "c12", "--n", "3")
    assert code == 0 and "VERIFIED" in out


@pytest.mark.parametrize("group", ["c7", "s4", "a5"])
def test_check_encoding_catches_a_wrong_table(group):
    """check_encoding (vectorized over the key) accepts the real encoding and rejects one whose
    selector table, constant or code is changed in a single entry."""
    from dataclasses import replace

    from depthcert.constructions import group_tree

    g = make_task("word-problem", group=group, n=2).group
    e = group_tree.encoding(g)
    group_tree.check_encoding(g, e)
    L = [m.copy() for m in e.L]
    r, c = np.argwhere(L[1])[0]
    L[1][r, c] = 0
    L[1][(r + 1) % e.dim, c] = 1
    with pytest.raises(RuntimeError, match="does not compose|do not sum"):
        group_tree.check_encoding(g, replace(e, L=tuple(L)))
    cs = [v.copy() for v in e.c]
    cs[-1][0] += 1
    with pytest.raises(RuntimeError, match="does not compose"):
        group_tree.check_encoding(g, replace(e, c=tuple(cs)))
    enc = e.enc.copy()
    enc[1] = enc[2]
    with pytest.raises(RuntimeError, match="not injective"):
        group_tree.check_encoding(g, replace(e, enc=enc))


@pytest.mark.parametrize("group", ["c2", "c7", "s3", "s4", "a5"])
def test_multiplication_table_matches_compose(group):
    """Group.mul (row-vectorized, cached, read-only) is the table of compose() on the elements."""
    from depthcert.checkers.tasks.logdepth import compose

    g = make_task("word-problem", group=group, n=2).group
    index = {e: i for i, e in enumerate(g.elements)}
    ref = np.array([[index[compose(a, b)] for b in g.elements] for a in g.elements])
    assert (g.mul == ref).all() and g.mul is g.mul
    with pytest.raises(ValueError):
        g.mul[0, 0] = 1
