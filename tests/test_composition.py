"""Sequential function composition: the dataset, the decoder / encoder constructions, the
chain-of-thought generation (verify-construction --cot) and the one-layer certificates."""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers.tasks.composition import Composition
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.generation import verify_generation
from depthcert.checkers.tasks import make_task
from depthcert.checkers.trace import trace
from depthcert.constructions import composition as comp
from depthcert.constructions import registry

BIN = os.path.dirname(sys.executable)
VARIANTS = ("linear", "doubling", "encoder-linear", "encoder-doubling")


def reference_point(L: int, N: int, i: int) -> tuple[list[int], list[int]]:
    """(tokens, steps v_1..v_L) of point i straight from the definition in docs/composition.md."""
    n = L * N + 1
    digits = []
    for _ in range(n):
        i, d = divmod(i, N)
        digits.append(d)
    tokens = digits[::-1]
    tables = [tokens[k * N:(k + 1) * N] for k in range(L)]
    v, steps = tokens[-1], []
    for f in tables:
        v = f[v]
        steps.append(v)
    return tokens, steps


@pytest.mark.parametrize("L,N", [(1, 2), (2, 2), (3, 2), (1, 3), (2, 3)])
def test_every_point_is_every_sequence_once_with_its_label(L, N):
    task = Composition(L, N)
    assert task.size == N ** (L * N + 1) and task.length == L * N + 1
    ids, labels = task.decode(np.arange(task.size))
    # index order = lexicographic order of all sequences: the enumeration is a bijection
    assert [tuple(r) for r in ids] == list(itertools.product(range(N), repeat=L * N + 1))
    for row, y in zip(ids, labels):
        tables = [row[k * N:(k + 1) * N] for k in range(L)]
        v = row[-1]
        for f in tables:
            v = f[v]
        assert y == v


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(2, 6), st.data())
def test_decode_matches_the_plain_reference(L, N, data):
    if N ** (L * N + 1) > 2**62:
        with pytest.raises(BadInput, match="2\\^62"):
            Composition(L, N)
        return
    task = Composition(L, N)
    idx = data.draw(st.lists(st.integers(0, task.size - 1), min_size=1, max_size=5))
    ids, labels = task.decode(np.array(idx, dtype=np.int64))
    steps = task.cot_steps(np.array(idx, dtype=np.int64))
    for k, i in enumerate(idx):
        tokens, ref_steps = reference_point(L, N, i)
        assert list(ids[k]) == tokens
        assert list(steps[k]) == ref_steps and labels[k] == ref_steps[-1]
        assert task.point(i).label == str(ref_steps[-1])


def test_no_token_permutation_is_a_symmetry():
    """The docstring's claim, by brute force: for every sigma != id the relation
    label(X) -> label(sigma X) is not a permutation of the classes."""
    for L, N in [(1, 2), (1, 3), (2, 2), (2, 3)]:
        task = Composition(L, N)
        assert task.symmetry_groups() == () and task.orbit_representatives() is None
        ids, labels = task.decode(np.arange(task.size))
        lookup = {tuple(r): y for r, y in zip(ids, labels)}
        for sigma in itertools.permutations(range(N)):
            if sigma == tuple(range(N)):
                continue
            pairs = {(int(y), int(lookup[tuple(sigma[t] for t in r)])) for r, y in zip(ids, labels)}
            is_perm = len(pairs) == N and len({a for a, _ in pairs}) == N and len({b for _, b in pairs}) == N
            assert not is_perm, (L, N, sigma)


@pytest.mark.parametrize("opts,needle", [
    (dict(n_functions=30, domain=3), "2^62"),
    (dict(n_functions=10**9, domain=10**9), "sequences of L*N+1 > 4096 tokens"),
    (dict(n_functions=1, domain=1), "--N must be >= 2"),
    (dict(n_functions=0, domain=3), "--L must be >= 1"),
    (dict(n_functions=2, domain=3, k=2), "--k does not apply"),
])
def test_bad_sizes_are_refused_before_allocation(opts, needle):
    with pytest.raises(BadInput, match=re.escape(needle)):
        make_task("composition", **opts)


def test_render_and_point():
    task = Composition(2, 3)
    p = task.point(100)
    assert task.render(p.tokens) == "f1: 0 0 1 | f2: 0 2 0 | x: 1"
    assert p.label == "0"


# ------------------------------------------------------------------ constructions

def k_closed_form(T: int, forward: bool) -> int:
    """Functions the last column composes in T layers: 1 + sum_{s=2..T} (2^(s-2) + c_s)."""
    return 1 + sum(2 ** (s - 2) + (2 ** (s - 1) if forward else 1) for s in range(2, T + 1))


def test_layer_counts_follow_the_recurrences():
    for forward in (False, True):
        for L in range(1, 41):
            T = comp.layers_needed(L, forward)
            assert k_closed_form(T, forward) >= L > (k_closed_form(T - 1, forward) if T > 1 else 0), (L, forward)
    assert [comp.layers_needed(L, False) for L in range(1, 12)] == [1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 4]
    assert [comp.layers_needed(L, True) for L in range(1, 12)] == [1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 4]


@pytest.mark.parametrize("L,N,variants", [(1, 2, VARIANTS), (2, 2, VARIANTS), (3, 2, VARIANTS), (4, 2, VARIANTS),
                                            (2, 3, VARIANTS), (3, 3, VARIANTS), (5, 2, ("doubling",))])
def test_every_variant_is_verified_on_every_point(L, N, variants):
    """(5, 2): the decoder's preimage doubling at layer 2 (heads 2, 2, 1)."""
    task = Composition(L, N)
    for variant in variants:
        c = registry.build(task, variant)
        m = c.model
        v = verify(m, task, progress=False)
        assert v.verified and v.min_margin == 1 and v.points_checked == task.size, (variant, v.counterexample)
        causal = not variant.startswith("encoder")
        assert all(layer.causal == causal for layer in m.layers)
        want = L if variant.endswith("linear") else comp.layers_needed(L, forward=not causal)
        assert m.n_layers == want
        assert m.dim == (2 * N + task.length if variant.endswith("linear") else m.dim)


def test_the_mask_is_what_the_encoder_shortcut_needs():
    """encoder-doubling's forward heads read later tables: with a causal mask on every layer the
    same weights fail; the decoder weights never look ahead, so they work without the mask."""
    task = Composition(3, 2)
    enc = registry.build(task, "encoder-doubling").model
    masked = replace(enc, layers=tuple(replace(layer, causal=True) for layer in enc.layers))
    assert verify(masked, task, progress=False).verdict == "refuted"
    dec = registry.build(task, "doubling").model
    unmasked = replace(dec, layers=tuple(replace(layer, causal=False) for layer in dec.layers))
    assert verify(unmasked, task, progress=False).verified


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(2, 3), st.sampled_from(VARIANTS), st.data())
def test_exact_trace_reads_the_answer_with_margin_one(L, N, variant, data):
    task = Composition(L, N)
    i = data.draw(st.integers(0, task.size - 1))
    p = task.point(i)
    tr = trace(registry.build(task, variant).model, p.tokens)
    y = task.classes.index(p.label)
    assert tr.logits[y] == 1 and sorted(tr.logits)[-2] == 0


# ------------------------------------------------------------------ chain of thought

@pytest.mark.parametrize("L,N", [(1, 2), (2, 2), (3, 2), (4, 2), (2, 3), (3, 3)])
def test_cot_one_layer_generates_every_step(L, N):
    task = Composition(L, N)
    model = comp.build_cot(task).model
    assert model.n_layers == 1 and all(layer.causal for layer in model.layers)
    g = verify_generation(model, task, progress=False)
    assert g.verified and g.steps == L and g.verdict.min_margin == 1 and g.mode == "teacher-forced"


def tampered_cot(task: Composition, a0: int):
    """Step 2's query (position P) may also attend to the table-1 entry (1, a0): mask -1 -> 0."""
    m = comp.build_cot(task).model
    lay = m.layout
    r = lay.index("position", task.table_position(1, a0))
    q = lay.index("position", task.length)
    assert m.layers[0][0].W_QK[r, q] == -1
    return m.with_weight((0, 0, "W_QK", r, q), 0)


def first_failure_by_hand(task: Composition, a0: int) -> int:
    """Step 2 fails (a tie) exactly when v_1 = f_1(x) = a0 and f_1(a0) != f_2(a0)."""
    for i in range(task.size):
        tokens, steps = reference_point(task.L, task.N, i)
        f1, f2 = tokens[: task.N], tokens[task.N: 2 * task.N]
        if steps[0] == a0 and f1[a0] != f2[a0]:
            return i
    raise AssertionError("no failure")


@pytest.mark.parametrize("L,N,a0", [(2, 2, 0), (2, 3, 1), (3, 2, 1)])
def test_tampered_cot_is_refuted_at_the_right_input_and_step(L, N, a0):
    task = Composition(L, N)
    g = verify_generation(tampered_cot(task, a0), task, progress=False)
    want = first_failure_by_hand(task, a0)
    ce = g.verdict.counterexample
    assert g.status == "refuted" and g.failing_step == 2 and ce.index == want and ce.tie
    assert ce.position == task.length and g.verdict.points_checked == want + 1
    tokens, steps = reference_point(L, N, want)
    assert ce.tokens == tuple(str(t) for t in tokens + steps[:1]) and ce.expected == str(steps[1])
    assert g.verdict.min_margin == 0  # the tie; earlier inputs have margin 1 (or 2 at a0)


def run(*argv):
    r = subprocess.run([os.path.join(BIN, "verify-construction"), *argv], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_cli_cot_verified_refuted_and_bad_input(tmp_path):
    code, out, _ = run("composition", "--cot", "--L", "3", "--N", "2", "--json")
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "verified" and info["steps"] == 3 and info["layers"] == 1
    assert info["points_checked"] == 128 and info["min_margin"] == 1 and info["mode"] == "teacher-forced"
    from depthcert.checkers.weights_file import model_to_json

    task = Composition(2, 3)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(model_to_json(tampered_cot(task, 1))))
    code, out, _ = run("composition", "--cot", "--weights", str(bad))
    want = first_failure_by_hand(task, 1)
    assert code == 1 and "REFUTED" in out and f"point      {want}" in out and "step       2 of 2" in out
    code, out, _ = run("composition", "--cot", "--weights", str(bad), "--point", str(want))
    assert code == 1 and "step 2 (position 7)" in out and "WRONG" in out
    export = tmp_path / "never.json"
    for argv in (["icqa", "--cot"], ["composition", "--cot", "--as-printed"],
                 ["composition", "--cot", "--variant", "nope"],
                 ["composition", "--cot", "--max-points", "10", "--export", str(export)]):
        code, out, err = run(*argv)
        assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
    assert not export.exists()


# ------------------------------------------------------------------ one layer is not enough (L >= 2)

def test_one_layer_certificates(tmp_path):
    from depthcert.checkers.certificate import check_certificate
    from depthcert.proofs.dependence import decide_task

    assert decide_task(Composition(1, 2), progress=False).decision.fittable  # one lookup: one layer
    for L, N in [(2, 2), (3, 2), (2, 3)]:
        dec = decide_task(Composition(L, N), progress=False).decision
        assert not dec.fittable
        ok, msg = check_certificate(dec.certificate.to_json({}))
        assert ok, msg
    out = tmp_path / "cert.json"
    r = subprocess.run([os.path.join(BIN, "find-dependence"), "--task", "composition", "--L", "2", "--N", "2",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "NOT fittable" in r.stdout
    r = subprocess.run([os.path.join(BIN, "check-certificate"), str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout


def test_cot_enclosures_stay_outward_when_rounding_carries():
    """Regression: proofs.cli.bound_text printed 0.99999999999 rounded up as "1e-1" (below the
    value) when rounding carried into the next power of ten."""
    from decimal import Decimal

    from depthcert.cli.common import bound_text

    for q in (Fraction(99999999999, 10**11), Fraction(-99999999999, 10**11), Fraction(1, 3), Fraction(-7, 3),
              Fraction(999999999999, 10**9), Fraction(5)):
        assert Fraction(Decimal(bound_text(q, up=True))) >= q >= Fraction(Decimal(bound_text(q, up=False)))
    assert bound_text(Fraction(99999999999, 10**11), up=True) == "1e+0"
