"""verify-construction TASK --all-sizes: proofs for every size (issue 13).

Theorem 3 (icqa) and Theorem 1 (sc) are proven for all sizes; their margin formulas are checked
against the exact `verify` at every size enumerated here; a construction tampered to fail only
at k = 10 (beyond every base case) is caught by the symbolic method at exactly k = 10; the
as-printed Theorem 5 / 6 constructions get no proof; bad input exits 2 with one line; the
standalone re-checker accepts the proofs and rejects a tampered certificate.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import copy_matching, registry
from depthcert.proofs.all_sizes import icqa_plan, prove, prove_lumped, symbolic_margin
from depthcert.proofs.all_sizes_lumped import (Family, LMatrix, Param, Region, Ring, Space, Split, decide, matmul,
                                               patterns, whole_region)
from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "proofs", "check_all_sizes.py")


def run(argv, capsys):
    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def recheck(tmp_path, data, name="cert.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, CHECKER, str(path)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


# ----------------------------------------------------------------------------- Theorem 3


def test_icqa_proven_for_all_sizes_margin_3(capsys, tmp_path):
    code, out, err = run(["icqa", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and err == "" and info["status"] == "proven"
    assert info["all_sizes"] == ["k >= 1", "n_q >= k", "n_a >= k"] and info["finite_only"] == []
    assert info["margin"] == "3" and info["theorem"].startswith("Theorem 3")
    titles = [s["title"] for s in info["steps"]]
    assert titles == ["family", "orbits", "lumped pass", "margins", "base cases", "cross-check"]
    orbit = " ".join(info["steps"][1]["lines"])
    assert "holds" in orbit and "reach 1728 of 1728 points" in orbit
    assert all(r["verdict"] == "verified" for r in info["base_cases"])
    # the standalone re-checker (standard library only) accepts it
    rc, rout, rerr = recheck(tmp_path, info)
    assert rc == 0, rerr
    assert rout == ("icqa copy-matching: valid; 1 representative(s), 1 leaf region(s), every ReLU sign and every "
                    "margin re-decided; every margin > 0 for all k >= 1, n_q >= k, n_a >= k\n")


def test_icqa_instance_of_given_sizes(capsys):
    code, out, _ = run(["icqa", "--k", "4", "--n-questions", "9", "--all-sizes"], capsys)
    assert code == 0 and "instance    k=4, n_q=9, n_a=6: covered, margin 3" in out
    assert "PROVEN FOR ALL SIZES" in out
    code, out, _ = run(["icqa", "--k", "1", "--n-answers", "1", "--all-sizes"], capsys)
    assert code == 0 and "instance    k=1, n_q=3, n_a=1: covered, margin none (a single class)" in out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_icqa_margin_formula_equals_verify(k):
    """The proven margin (3, or no margin with a single answer) is verify's exact minimum at every
    size enumerated here."""
    rep = prove(make_task("icqa", k=1))
    for nq in (k, k + 2):
        for na in (k, k + 1, k + 3):
            task = make_task("icqa", k=k, n_questions=nq, n_answers=na)
            v = verify(registry.build(task).model, task, symmetry="auto", progress=False)
            assert v.verified
            assert v.min_margin == symbolic_margin(rep, {"k": k, "n_q": nq, "n_a": na})
            assert v.min_margin == (None if na == 1 else 3)


def test_icqa_margin_at_the_readme_scale():
    rep = prove(make_task("icqa"))
    task = make_task("icqa", k=3, n_questions=100, n_answers=100)
    v = verify(registry.build(task).model, task, symmetry="auto", progress=False)
    assert v.verified and v.points_covered == 2_823_864_120_000
    assert v.min_margin == symbolic_margin(rep, {"k": 3, "n_q": 100, "n_a": 100}) == 3


# ----------------------------------------------------------------------------- Theorem 1


def test_sc_proven_for_all_sizes(capsys):
    code, out, err = run(["sc", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["status"] == "proven" and info["all_sizes"] == ["L >= 1", "M >= 1"]
    assert info["margin"] == "> 0" and "2^-((L-1)(M-1))" in info["margin_note"] and "not proven" in info["margin_note"]
    fitted = info["steps"][0]["lines"][1]
    for formula in ("a = 1", "j = h", "q = L", "s = L + 1", "o = M*h + h", "b = 1", "c = -L - 1"):
        assert formula in fitted
    derivation = info["steps"][1]["lines"]
    assert sum("holds" in line for line in derivation) == 8 and not any("FAILS" in line for line in derivation)


def test_sc_changed_layer_is_not_proven_even_where_it_verifies():
    """Doubling every copy head's W_V doubles the last column (2 x the concatenation): every base
    case still verifies (margins double), but the layer is no longer the Lemma 4 family the
    derivation proves (a_h s_h / n = 2, not 1): not proven (exit 3), never silently accepted."""
    from depthcert.proofs.all_sizes import prove_sc

    def build(task):
        m = registry.build(task).model
        heads = [replace(h, W_V=h.W_V * 2) for h in m.layers[0][:-1]] + [m.layers[0][-1]]
        return replace(m, layers=(tuple(heads),))

    rep = prove_sc(builder=build)
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    assert rep.base_cases[4]["min_margin"] == 1  # L=2, M=2: twice 1/2
    assert rep.status == "not-proven" and rep.exit_code == 3 and "identity" in rep.reason
    assert "copy weight a_h s_h / n = 1: FAILS" in rep.steps[1].lines


@pytest.mark.parametrize("L,M", [(1, 2), (2, 2), (2, 5), (3, 2), (3, 3), (3, 4), (4, 3), (5, 2)])
def test_sc_observed_margin_at_enumerated_sizes(L, M):
    """Observed (the proof only shows margin > 0): Lemma 3's exact margin is 2^-((L-1)(M-1))."""
    for seed in (0, 7):
        task = make_task("sc", length=L, alphabet=M, seed=seed)
        v = verify(registry.build(task).model, task, progress=False)
        assert v.verified and v.min_margin == Fraction(1, 2 ** ((L - 1) * (M - 1)))


# ----------------------------------------------------------------------------- tampering


def tampered(e=Fraction(1, 10), d=Fraction(1, 20)):
    """Copy-matching with e * J added to layer 1's position scores (every column also attends every
    column a little) and -d * J to layer 2's: still invariant under Sym(Q) x Sym(A) x Sym(T), and
    correct up to k = 9, but the matching triple's score 1 + O(e) - d (1 + e n)^2 reaches 0 at k = 10."""

    def build(task):
        m = copy_matching.build(task).model
        s = m.layout.slice("position")
        layers = []
        for li, (head,) in enumerate(m.layers):
            qk = head.W_QK.copy()
            qk[s, s] = qk[s, s] + (e if li == 0 else -d)
            qk.flags.writeable = False
            layers.append((replace(head, W_QK=qk),))
        return replace(m, layers=tuple(layers))

    return build


@pytest.fixture(scope="module")
def tamper_report():
    return prove_lumped(icqa_plan(builder=tampered()))


def test_tamper_failing_only_at_k10_is_caught_with_that_size(tamper_report):
    rep = tamper_report
    assert rep.status == "fails" and rep.exit_code == 1
    assert rep.failure["size"] == {"k": 10, "n_q": 10, "n_a": 10}
    assert rep.failure["how"] == "symbolic margin <= 0" and rep.failure["margin"] == 0
    assert rep.failure["confirmed"].startswith("verify at this size: REFUTED, point 0")
    # every base case (k <= 3) verifies: no enumerated size shows the failure
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    assert max(r["size"]["k"] for r in rep.base_cases) == 3
    build = tampered()
    for k, ok in ((9, True), (10, False)):
        task = make_task("icqa", k=k, n_questions=k, n_answers=k)
        assert verify(build(task), task, symmetry="auto", progress=False).verified is ok


def test_tamper_margin_formulas_equal_verify(tamper_report):
    build = tampered()
    for k in (1, 2, 4, 6, 8, 9, 10, 11):
        for extra in (0, 1):
            task = make_task("icqa", k=k, n_questions=k + extra, n_answers=k + extra)
            v = verify(build(task), task, symmetry="auto", progress=False)
            want = symbolic_margin(tamper_report, {"k": k, "n_q": k + extra, "n_a": k + extra})
            if v.verified:
                assert v.min_margin == want and (want is None or want > 0)
            else:
                assert want <= 0 and v.min_margin <= 0


def test_tamper_certificate_rechecks_as_failing(tamper_report, tmp_path):
    rc, out, err = recheck(tmp_path, tamper_report.to_json())
    assert rc == 1 and "margin(s) not > 0" in out and "offsets [9, 0, 0]" in out, (out, err)


def test_tamper_that_breaks_the_symmetry_gets_no_proof():
    """A position-dependent score (key position j adds j/100) is no longer one invariant table:
    refused (exit 3), never 'proven'."""

    def ramp(task):
        m = copy_matching.build(task).model
        s = m.layout.slice("position")
        head = m.layers[1][0]
        qk = head.W_QK.copy()
        for j in range(task.length):
            qk[s.start + j, s.start + task.length - 1] += Fraction(j, 100)
        qk.flags.writeable = False
        return replace(m, layers=(m.layers[0], (replace(head, W_QK=qk),)))

    rep = prove_lumped(icqa_plan(builder=ramp))
    assert rep.status == "not-proven" and rep.exit_code == 3 and "not invariant" in rep.reason


# ----------------------------------------------------------------------------- negative controls


def test_as_printed_template_constructions_get_no_proof(capsys):
    code, out, _ = run(["tm", "--l", "3", "--variant", "ternary", "--as-printed", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 1 and info["status"] == "fails" and info["failure"]["size"] == {"l": 3, "m": 2}
    assert info["failure"]["counterexample"]["input"] == "t1 t0 t0 <cls>"
    code, out, _ = run(["ictm", "--k", "2", "--l", "2", "--as-printed", "--all-sizes"], capsys)
    assert code == 1 and "fails at    k=2, l=2, m=2, n_a=2 (base case refuted by verify)" in out
    assert "x1 x1 = a0 x0 x1 = a1 x0 x0 =  expected a0, predicted a1" in out


def test_partial_proofs_name_their_finite_parameters(capsys):
    code, out, _ = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["status"] == "partial" and info["all_sizes"] == ["hops >= 1", "N >= 2"]
    assert [f["parameter"] for f in info["finite_only"]] == ["k"] and info["margin"] == "1"
    code, out, _ = run(["tm", "--l", "3", "--variant", "ternary", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["all_sizes"] == ["m >= 3"] and [f["parameter"] for f in info["finite_only"]] == ["l"]
    for m in (3, 4, 5, 6):
        task = make_task("tm", l=3, alphabet=m)
        v = verify(registry.build(task, "ternary").model, task, symmetry="auto", progress=False)
        assert v.verified and str(v.min_margin) == info["margin"]


def test_vocabulary_proofs_margins_equal_verify():
    rep = prove(make_task("ictm", k=1, l=2))
    assert rep.status == "partial" and rep.margin == "1"
    for m, na in ((1, 1), (2, 3), (4, 2), (5, 4)):
        task = make_task("ictm", k=1, l=2, alphabet=m, n_answers=na)
        v = verify(registry.build(task).model, task, symmetry="auto", progress=False)
        assert v.verified and v.min_margin == symbolic_margin(rep, {"m": m, "n_a": na})
    rep = prove(make_task("multihop", k=2, hops=3), "doubling")
    assert rep.status == "partial" and rep.margin == "1"
    for N in (2, 3, 6):
        task = make_task("multihop", k=2, hops=3, n_entities=N)
        v = verify(registry.build(task, "doubling").model, task, symmetry="auto", progress=False)
        assert v.min_margin == symbolic_margin(rep, {"N": N}) == 1


@pytest.mark.parametrize("argv", [["tm", "--variant", "heads"], ["multihop", "--variant", "relu-and"]])
def test_constructions_outside_the_method_are_said_so(argv, capsys):
    code, out, _ = run(argv + ["--all-sizes"], capsys)
    assert code == 3 and "NOT PROVEN FOR ALL SIZES" in out and "reason      not covered: " in out


@pytest.mark.parametrize("argv,needle", [
    (["icqa", "--all-sizes", "--weights", "w.json"], "takes no --weights"),
    (["icqa", "--all-sizes", "--point", "3"], "takes no --point"),
    (["icqa", "--all-sizes", "--export", "x.json"], "takes no --export"),
    (["icqa", "--all-sizes", "--symmetry", "off"], "takes no --symmetry"),
    (["icqa", "--all-sizes", "--variant", "nope"], "unknown --variant"),
    (["icqa", "--all-sizes", "--k", "0"], "--k"),
    (["multihop", "--k", "6", "--variant", "doubling", "--all-sizes"], "orbits"),
    (["icqa", "--k", "5000", "--all-sizes"], "run it at small sizes"),
])
def test_bad_input_exit_2_one_line(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


# ----------------------------------------------------------------------------- the re-checker


def test_rechecker_rejects_a_changed_certificate(capsys, tmp_path):
    run(["icqa", "--all-sizes", "--json"], capsys)
    code, out, _ = run(["icqa", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    point = info["certificate"]["points"][0]
    point["W_O"] = [[r, c, p, [[[0, 0, 0], "2"]] if v == [[[0, 0, 0], "1"]] else v] for r, c, p, v in point["W_O"]]
    rc, _, err = recheck(tmp_path, info)
    assert rc == 2 and "differs from the certificate" in err
    rc, _, err = recheck(tmp_path, {"format": "something else"})
    assert rc == 2 and err.startswith("invalid:")


# ----------------------------------------------------------------------------- the lumped algebra


def _expand(M: LMatrix, sizes: dict):
    """The concrete matrix of a table at concrete set sizes, with the row / column labels."""
    def index(space):
        out = []
        for fi, f in enumerate(space.families):
            n = 1 if f.sort is None else sizes[f.sort]
            out += [(fi, e) for e in range(n)]
        return out

    rows, cols = index(M.rows), index(M.cols)
    A = np.zeros((len(rows), len(cols)), dtype=object)
    for i, (fr, er) in enumerate(rows):
        for j, (fc, ec) in enumerate(cols):
            a, b = M.rows.families[fr], M.cols.families[fc]
            p = "" if patterns(a, b) == ("",) else ("eq" if er == ec else "ne")
            v = M.data.get((fr, fc, p))
            A[i, j] = Fraction(int(v.LC.numerator), int(v.LC.denominator)) if v else Fraction(0)
    return A


def test_lumped_product_equals_the_concrete_product():
    """(A B) on the tables, instantiated, equals the product of the instantiated matrices, for
    random invariant tables and every set size 0..3 (the counts 1, |S|-1, |S|-2)."""
    rng = random.Random(13)
    ring_ = Ring((Param("s", 0), Param("t", 0)))
    fams = Space((Family("x", "S"), Family("y", None), Family("z", "T"), Family("w", "S")))
    sizes = {"S": ring_.gen["s"], "T": ring_.gen["t"]}

    def rand():
        data = {}
        for i, a in enumerate(fams.families):
            for j, b in enumerate(fams.families):
                for p in patterns(a, b):
                    if rng.random() < 0.7:
                        data[(i, j, p)] = ring_.const(Fraction(rng.randint(-3, 3), rng.randint(1, 2)))
        return LMatrix(fams, fams, {k: v for k, v in data.items() if not v.is_zero})

    for _ in range(5):
        A, B = rand(), rand()
        C = matmul(A, B, sizes, ring_)
        for s in range(4):
            for t in range(3):
                Cs = C.substituted(ring_, {"s": s, "t": t})
                want = _expand(A, {"S": s, "T": t}).dot(_expand(B, {"S": s, "T": t}))
                assert (_expand(Cs, {"S": s, "T": t}) == want).all()


def test_decide_splits_a_sign_change_and_the_tail_passes_the_coefficient_test():
    ring_ = Ring((Param("k", 1),))
    k = ring_.gen["k"]
    poly = -k * k + 20 * k - 19  # > 0 for 1 < k < 19, 0 at k = 1, 19, < 0 beyond
    with pytest.raises(Split) as exc:
        decide(ring_, poly, whole_region(ring_.params))
    pieces = exc.value.pieces
    assert [p.free for p in pieces[:-1]] == [(False,)] * (len(pieces) - 1) and pieces[-1].free == (True,)
    assert decide(ring_, poly, pieces[-1]).kind == "neg"
    assert decide(ring_, ring_.const(2) * k - 1, Region((0,), (True,))).kind == "pos"
