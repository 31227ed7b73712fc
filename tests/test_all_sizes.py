"""verify-construction TASK --all-sizes: proofs for every size (issues 13, 24).

Theorem 3 (icqa) is proven for all sizes from its builder run with symbolic sizes (one source);
its margin formula is checked against the exact `verify` at every size enumerated here; Theorem 1
(sc) is proven from its builder run with symbolic L, M and a generic copy head h, margin 1; tampers
of the builders that act only at sizes never enumerated are refused (a size comparison, naming the
line) or refuted at their smallest failing size, never proven; tm, ictm and multihop are proven in
the sizes their orbits allow (exit 3 naming the rest); the as-printed Theorem 5 / 6 constructions
fail at a base case; bad input exits 2 with one line; the standalone re-checker re-derives the
orbit identity, set sizes, claim and margin and rejects edited certificates.
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
from depthcert.constructions.indexed import finite_build, is_symbolic
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
    assert code == 0 and err == "" and info["verdict"] == "proven"
    assert info["all_sizes"] == ["k >= 1", "n_q >= k", "n_a >= k"] and info["finite_only"] == []
    assert info["margin"] == {"exact": "3", "decimal": "3"} and info["theorem"].startswith("Theorem 3")
    titles = [s["title"] for s in info["steps"]]
    assert titles == ["family", "orbits", "lumped pass", "margins", "base cases", "cross-check"]
    orbit = " ".join(info["steps"][1]["lines"])
    assert "holds" in orbit and "reach 1728 of 1728 points" in orbit
    assert all(r["verdict"] == "verified" for r in info["base_cases"])
    # the standalone re-checker (standard library only) accepts it
    rc, rout, rerr = recheck(tmp_path, info)
    assert rc == 0, rerr
    assert rout == ("icqa copy-matching: valid; 1 representative, 1 leaf region, every ReLU sign and every "
                    "margin re-decided; orbit identity, set sizes and claim re-derived; labels by the task's rule, "
                    "representatives in pairwise different orbits (first-occurrence forms), fixed members = members "
                    f"used; every table is the closed value {info['content_hash']} (re-hashed) split by the point's "
                    "parts; every margin > 0 for all k >= 1, n_q >= k, n_a >= k; minimum margin 3 (normalized 3: "
                    "margin / largest |W_O entry|)\n")
    family = " ".join(info["steps"][0]["lines"])
    assert "made once by depthcert.constructions.copy_matching.build from symbolic k, n_q, n_a" in family and "read at" not in family
    assert info["content_hash"].startswith("sha256:") and "read whole" in family
    assert any("closed.instantiate" in r and info["content_hash"] in r for r in info["rests_on"])


def test_icqa_instance_is_built_and_verified(capsys):
    code, out, _ = run(["icqa", "--k", "4", "--n-questions", "9", "--all-sizes"], capsys)
    assert code == 0 and ("instance    k=4, n_q=9, n_a=6: the proven value instantiated, verify verified on 4354560 points (4 evaluated), "
                          "margin 3 = the proof's margin there") in out
    assert "PROVEN FOR ALL SIZES" in out
    code, out, _ = run(["icqa", "--k", "7", "--all-sizes"], capsys)
    assert code == 0 and "instance    k=7, n_q=9, n_a=9: the proven value instantiated, verify verified" in out
    code, out, _ = run(["icqa", "--k", "1", "--n-answers", "1", "--all-sizes"], capsys)
    assert code == 0 and ("instance    k=1, n_q=3, n_a=1: the proven value instantiated, verify verified on 3 points (1 evaluated), margin "
                          "none (a single class) = the proof's margin there") in out


def test_finite_builds_instantiate_the_symbolic_model():
    """One source: the finite model at a size is the builder's symbolic model instantiated there, and
    the builder's entry point returns the symbolic model on a symbolic task."""
    from depthcert.constructions.indexed import SymbolicModel

    c = registry.build(copy_matching.symbolic_task())
    assert isinstance(c.symbolic, SymbolicModel) and c.model is None
    for k, nq, na in ((1, 1, 1), (2, 5, 3), (4, 4, 7)):
        task = make_task("icqa", k=k, n_questions=nq, n_answers=na)
        assert registry.build(task).model == c.symbolic.instantiate(task, {"k": k, "n_q": nq, "n_a": na})
        assert registry.build(task).model == _direct_icqa(task)


def _direct_icqa(task):
    """Theorem 3 written block by block with checkers.layout (the pre-issue-24 builder), independently."""
    from depthcert.checkers.layout import BlockMatrix, Layout
    from depthcert.checkers.model import Head, Model
    from depthcert.constructions.attention import instructive_attention

    lay = Layout.of(("question", task.n_q), ("response", 1), ("answer", task.n_a), ("position", task.length))
    ident = BlockMatrix(lay, lay)
    for b in lay.names:
        ident.set(b, b, 1)
    ident = ident.build()
    layer1 = Head(instructive_attention(lay, copy_matching.copy_map(task.k)), ident)
    layer2 = Head(BlockMatrix(lay, lay).set("question", "question", 1).build(), ident)
    W_O = BlockMatrix(Layout.of(("answer", task.n_a)), lay).set("answer", "answer", 1).build()
    return Model(task.vocab, task.length, task.classes, lay, ((layer1,), (layer2,)), W_O, name="copy-matching")


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


def test_sc_proven_for_every_size_margin_1(capsys):
    """Theorem 1's builder run with symbolic L, M and a generic copy head h: every condition of the
    Lemma 4 derivation holds over the range and the closed-form read-out gives margin exactly 1."""
    code, out, err = run(["sc", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "proven" and info["margin"] == {"exact": "1", "decimal": "1"}, (out, err)
    assert info["finite_only"] == [] and info["all_sizes"] == ["L >= 1", "M >= 1"]
    assert "the closed value sha256:" in info["rests_on"][0] and "closed.instantiate" in info["rests_on"][0]
    derivation = info["steps"][1]["lines"]
    assert sum(line.endswith(": holds") for line in derivation) == 12 and not any("FAILS" in x for x in derivation)
    assert all(r["verdict"] == "verified" for r in info["base_cases"])
    assert "memorization.build" in info["steps"][0]["lines"][0] and "the value instantiated" in info["steps"][0]["lines"][-1]


def test_sc_instance_is_built_and_verified(capsys):
    code, out, _ = run(["sc", "--length", "3", "--alphabet", "4", "--all-sizes"], capsys)
    assert code == 0
    assert "instance    L=3, M=4: the proven value instantiated, verify verified on 64 points (64 evaluated), margin 1 = the proof's margin" in out


def test_sc_instance_of_a_sample_has_at_least_the_proofs_margin(capsys):
    """An --n-points sample's margin can exceed the full dataset's minimum: that agrees with the proof."""
    code, out, _ = run(["sc", "--length", "3", "--alphabet", "3", "--n-points", "3", "--seed", "1", "--all-sizes"],
                       capsys)
    assert code == 0 and "margin 2 >= the proof's margin 1 (its minimum over the full dataset; this is a sample)" in out


def test_sc_lemma3_read_out_is_not_proven_for_every_size(capsys):
    """As printed, the paper's Lemma 3 classifier is fitted point by point: no read-out for every size (exit 3)."""
    code, out, _ = run(["sc", "--as-printed", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "not_proven" and info["margin"] is None
    assert "Lemma 3" in info["reason"] and "point by point" in info["reason"]


@pytest.mark.parametrize("L,M", [(1, 2), (2, 2), (2, 5), (3, 2), (3, 3), (3, 4), (4, 3), (5, 2)])
def test_sc_margins_of_both_read_outs_at_enumerated_sizes(L, M):
    """The closed-form read-out's margin is 1 (the proof's); Lemma 3's (as printed) is 2^-((L-1)(M-1))
    (observed)."""
    for seed in (0, 7):
        task = make_task("sc", length=L, alphabet=M, seed=seed)
        v = verify(registry.build(task).model, task, progress=False)
        assert v.verified and v.min_margin == 1
        v3 = verify(registry.build(task, as_printed=True).model, task, progress=False)
        assert v3.verified and v3.min_margin == Fraction(1, 2 ** ((L - 1) * (M - 1)))


def test_sc_heads_are_lemma4s():
    """The rules materialise to the same matrices as the block-matrix Lemma 4 heads (lemma4_heads)."""
    from depthcert.constructions.memorization import layouts, lemma4_heads

    for L, M in ((1, 2), (3, 3), (4, 2)):
        model = registry.build(make_task("sc", length=L, alphabet=M)).model
        inp, slots = layouts(M + 1, L + 1)
        old = lemma4_heads(inp, slots, L + 1, "token", L)
        assert len(old) == len(model.layers[0])
        for a, b in zip(old, model.layers[0]):
            assert (np.array(a.W_QK) == np.array(b.W_QK)).all() and (np.array(a.W_V) == np.array(b.W_V)).all()


def sc_tamper(kind):
    """Theorem 1's builder with its rules changed (the audit's SC tampers, written into the builder's
    functions, so the run for every size and every finite build see the same change)."""
    from depthcert.constructions import memorization as mem
    from depthcert.constructions.head_family import Copy, Entry, HeadFamily, HeadRules, Template

    def rules(d, n):
        copies, last = mem.lemma4_rules(d, n)
        L, M = n - 1, d - 1

        def head(h):
            r = copies.head(h)
            if kind == "scaled head" and L * M > 50:
                return HeadRules(r.qk, (Copy(r.v[0].dst, "token", 2 * n),))
            if kind == "swap" and L >= 5 and h <= 1:
                return HeadRules((Entry("position", 1 - h, "position", n - 1, 1),), r.v)
            if kind == "extra attention entry" and L >= 6:
                return HeadRules(r.qk + (Entry("position", n - 1, "position", n - 1, 1),), r.v)
            if kind == "extra entry everywhere":
                return HeadRules(r.qk + (Entry("position", n - 1, "position", n - 1, 1),), r.v)
            if kind == "key drift":  # = h for L <= 5, h + 1 at L = 6
                return HeadRules((Entry("position", h + (L - 1) * (L - 2) * (L - 3) * (L - 4) * (L - 5) / 120,
                                        "position", n - 1, 1),), r.v)
            return r

        return HeadFamily(copies.count, head), last

    def read(d, n):
        t = mem.template(d, n)
        L, M = n - 1, d - 1

        def at(h):
            offset, w = t.at(h)
            if kind == "negation" and M >= 6:
                return offset, -w
            if kind == "quartic":  # 1 for L <= 4, -1 at L = 5
                return offset, w - (L - 1) * (L - 2) * (L - 3) * (L - 4) / 12
            return offset, w

        return Template(t.count, at)

    def build(task, as_printed=False):
        return mem.build(task, as_printed, rules=rules, read=read)

    return build


@pytest.mark.parametrize("kind,line", [("scaled head", "if kind == \"scaled head\" and L * M > 50:"),
                                       ("swap", "if kind == \"swap\" and L >= 5 and h <= 1:"),
                                       ("extra attention entry", "if kind == \"extra attention entry\" and L >= 6:"),
                                       ("negation", "if kind == \"negation\" and M >= 6:")])
def test_sc_tamper_at_unread_sizes_is_refused_naming_the_line(kind, line):
    from depthcert.proofs.all_sizes import prove_sc

    rep = prove_sc(construct=sc_tamper(kind))
    assert rep.status == "not-proven" and rep.exit_code == 3
    assert "branches on a size at tests/test_all_sizes.py:" in rep.reason and line in rep.reason, rep.reason
    assert all(r["verdict"] == "verified" for r in rep.base_cases)  # every small case still verifies


@pytest.mark.parametrize("kind,size", [("quartic", {"L": 5, "M": 2}), ("key drift", {"L": 6, "M": 2})])
def test_sc_polynomial_tamper_is_refuted_at_its_smallest_failing_size(kind, size):
    from depthcert.proofs.all_sizes import prove_sc

    build = sc_tamper(kind)
    rep = prove_sc(construct=build)
    assert rep.status == "fails" and rep.exit_code == 1 and rep.failure["size"] == size, rep.failure
    assert rep.failure["confirmed"].startswith("verify at this size: REFUTED")
    below = make_task("sc", length=size["L"] - 1, alphabet=2)
    assert verify(build(below).model, below, progress=False).verified


def test_sc_extra_entry_on_every_head_is_not_the_lemma4_shape():
    from depthcert.proofs.all_sizes import prove_sc

    rep = prove_sc(construct=sc_tamper("extra entry everywhere"))
    assert rep.status != "proven" and rep.exit_code in (1, 3)


def test_sc_correct_change_is_proven_with_its_own_margin():
    """Doubling every copy head's W_V doubles the last column: still correct, and the proof's margin is
    the code's (2), equal to verify's at every base case."""
    from depthcert.constructions import memorization as mem
    from depthcert.constructions.head_family import Copy, HeadFamily, HeadRules
    from depthcert.proofs.all_sizes import prove_sc

    def rules(d, n):
        copies, last = mem.lemma4_rules(d, n)
        return HeadFamily(copies.count, lambda h: HeadRules(copies.head(h).qk, (Copy(h * d, "token", 2 * n),))), last

    rep = prove_sc(construct=lambda task: mem.build(task, rules=rules))
    assert rep.status == "proven" and rep.margin == "2"
    assert all(r["min_margin"] in (None, 2) for r in rep.base_cases)


# ----------------------------------------------------------------------------- tampering


def symbolic_tamper(edit):
    """The ICQA builder with `edit(task, symbolic model)` applied to its one symbolic object (the
    all-sizes run and every finite build, an instantiation at a point, see the same edit)."""

    def build(task, as_printed=False):
        if not is_symbolic(task):
            return finite_build(build, task, copy_matching.symbolic_task, copy_matching.sizes_of(task), as_printed)
        c = copy_matching.build(task, as_printed)
        edit(task, c.symbolic)
        return c

    return build


def wrapped(edit):
    """The builder's entry point wrapped by `edit(task, construction)`, which may change the finished
    model: a tamper outside the builder, acting on the finite model."""

    def build(task, as_printed=False):
        return edit(task, copy_matching.build(task, as_printed))

    return build


def _with(c, model):
    return replace(c, model=model)


def _layer2_qk_minus_one_from_k7(task, c):
    if task.k >= 7:  # acts only at sizes no small case reads
        m = c.model
        s = m.layout.slice("question")
        qk = m.layers[1][0].W_QK.copy()
        qk[s, s] = -qk[s, s]
        qk.flags.writeable = False
        return _with(c, replace(m, layers=(m.layers[0], (replace(m.layers[1][0], W_QK=qk),))))
    return c


def _extra_w_o_entry_from_na9(task, c):
    if task.n_a >= 9:
        m = c.model
        W = m.W_O.copy()
        W[1, m.layout.offset("answer")] = Fraction(5)
        W.flags.writeable = False
        return _with(c, replace(m, W_O=W))
    return c


def _w_o_sign_flip_from_nq8(task, c):
    if task.n_q >= 8:
        m = c.model
        W = -m.W_O
        W.flags.writeable = False
        return _with(c, replace(m, W_O=W))
    return c


def _position_ramp(task, c):
    """A position-dependent layer-2 score (key j adds j/100 for the last query): not set-indexed."""
    m = c.model
    n = task.length if m is not None else 3 * task.k + 2
    ramp = [Fraction(j, 100) for j in range(n)]
    s = m.layout.slice("position")
    qk = m.layers[1][0].W_QK.copy()
    for j in range(n):
        qk[s.start + j, s.start + n - 1] += ramp[j]
    qk.flags.writeable = False
    return _with(c, replace(m, layers=(m.layers[0], (replace(m.layers[1][0], W_QK=qk),))))


BRANCH_TAMPERS = {
    "layer-2 score -1 when k >= 7": (_layer2_qk_minus_one_from_k7, "if task.k >= 7:", {"k": 7, "n_questions": 7,
                                                                                         "n_answers": 7}),
    "extra W_O entry when n_a >= 9": (_extra_w_o_entry_from_na9, "if task.n_a >= 9:", {"k": 2, "n_questions": 2,
                                                                                      "n_answers": 9}),
    "W_O sign flip when n_q >= 8": (_w_o_sign_flip_from_nq8, "if task.n_q >= 8:", {"k": 2, "n_questions": 8,
                                                                                  "n_answers": 2}),
    "position ramp (a loop over the positions)": (_position_ramp, "for j in range(n)", None),
}


@pytest.mark.parametrize("name", list(BRANCH_TAMPERS))
def test_tamper_at_unread_sizes_is_refused_naming_the_line(name):
    """Each tamper acts only at sizes no base case reaches; the all-sizes run calls the same builder
    with symbolic sizes, the size comparison is undecided over the range: refused (exit 3) with the
    file and line, never proven; the finite check at the tampered size refutes it."""
    edit, line, size = BRANCH_TAMPERS[name]
    build = wrapped(edit)
    rep = prove_lumped(icqa_plan(construct=build))
    assert rep.status == "not-proven" and rep.exit_code == 3, rep.reason
    assert "test_all_sizes.py:" in rep.reason and line in rep.reason
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    if size is not None:
        task = make_task("icqa", **size)
        assert not verify(build(task).model, task, symmetry="off", progress=False).verified


def _off_diagonal_w_o(task, sym):
    sym.W_O.same("cls:A", "tok:A", same=1, other=(task.k - 4) / 3)


def _quartic_score(task, sym):
    k = task.k
    sym.layers[1][0].W_QK.same("tok:Q", "tok:Q", same=1 - (k - 1) * (k - 2) * (k - 3) * (k - 4) / 24)


@pytest.mark.parametrize("edit,first_bad", [(_off_diagonal_w_o, 7), (_quartic_score, 5)])
def test_polynomial_tamper_is_refuted_at_its_smallest_failing_size(edit, first_bad):
    """A weight that is a polynomial in k equal to the original at every k a small case reads: the
    symbolic run carries the polynomial, the proof fails at exactly the first k where the code
    fails, and verify confirms it there; k - 1 verifies."""
    build = symbolic_tamper(edit)
    rep = prove_lumped(icqa_plan(construct=build))
    assert rep.status == "fails" and rep.exit_code == 1
    assert rep.failure["size"] == {"k": first_bad, "n_q": first_bad, "n_a": first_bad}
    assert rep.failure["confirmed"].startswith("verify at this size: REFUTED")
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    for k, ok in ((first_bad - 1, True), (first_bad, False)):
        task = make_task("icqa", k=k, n_questions=k, n_answers=k)
        assert verify(build(task).model, task, symmetry="auto", progress=False).verified is ok


def _unused_answers_quartic(task, sym):
    """Our own tamper: the read-out weight 1 - u(u-1)(u-2)(u-3)/24 with u = n_a - k unused answers
    (1 at every base case, u <= 2; 0 at u = 4): fails first at k = 1, n_q = 1, n_a = 5."""
    u = task.n_a - task.k
    sym.W_O.same("cls:A", "tok:A", same=1 - u * (u - 1) * (u - 2) * (u - 3) / 24)


def test_tamper_in_another_parameter_is_refuted_at_its_smallest_failing_size():
    build = symbolic_tamper(_unused_answers_quartic)
    rep = prove_lumped(icqa_plan(construct=build))
    assert rep.status == "fails" and rep.exit_code == 1
    assert rep.failure["size"] == {"k": 1, "n_q": 1, "n_a": 5}, rep.failure
    assert rep.failure["confirmed"].startswith("verify at this size: REFUTED")
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    for size, ok in (((1, 1, 4), True), ((1, 1, 5), False), ((3, 4, 6), True), ((3, 3, 7), False)):
        task = make_task("icqa", k=size[0], n_questions=size[1], n_answers=size[2])
        assert verify(build(task).model, task, symmetry="auto", progress=False).verified is ok


SNIFFING_FAMILY = """
from dataclasses import replace

from depthcert.constructions import copy_matching


def build(task, as_printed=False):
    c = copy_matching.build(task, as_printed)
    if isinstance(task.k, int) and task.k >= 7:  # a concrete task only: a family never gets one
        return replace(c, model=replace(c.model, W_O=-c.model.W_O))
    return c
"""


def test_a_family_cannot_tell_concrete_from_symbolic_sizes(capsys, tmp_path):
    """A family that would change only its concrete builds (isinstance(task.k, int)) never sees one: it
    is called once with symbols, and both the proof and the finite check (`--family` without
    --all-sizes) get its closed value instantiated, so the sniffing branch is dead code and k = 7
    verifies with the proof's margin."""
    path = tmp_path / "sniff.py"
    path.write_text(SNIFFING_FAMILY)
    code, out, _ = run(["icqa", "--family", f"{path}:build", "--all-sizes", "--k", "7", "--n-questions", "7",
                        "--n-answers", "7"], capsys)
    assert code == 0 and "verify verified on 177811200 points" in out and "= the proof's margin there" in out, out
    code, out, _ = run(["icqa", "--family", f"{path}:build", "--k", "7", "--n-questions", "7", "--n-answers", "7",
                        "--json"], capsys)
    assert code == 0 and json.loads(out)["verdict"] == "verified"


def tampered(e=Fraction(1, 10), d=Fraction(1, 20)):
    """Copy-matching with e added to every layer-1 position score (every column also attends every
    column a little) and -d to every layer-2 position score: still set-indexed, correct up to k = 9,
    but the matching triple's score 1 + O(e) - d (1 + e n)^2 reaches 0 at k = 10."""
    fams = [f"pos{r}" for r in copy_matching.ROLES + copy_matching.FINAL]

    def edit(task, sym):
        for li, value in ((0, e), (1, -d)):
            qk = sym.layers[li][0].W_QK
            for a in fams:
                for b in fams:
                    if a[3] != "F" and b[3] != "F":
                        qk.same(a, b, same=qk.get(a, b, "eq") + value, other=qk.get(a, b, "ne") + value)
                    else:
                        qk.set(a, b, qk.get(a, b) + value)

    return symbolic_tamper(edit)


@pytest.fixture(scope="module")
def tamper_report():
    return prove_lumped(icqa_plan(construct=tampered()))


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
        assert verify(build(task).model, task, symmetry="auto", progress=False).verified is ok


def test_tamper_margin_formulas_equal_verify(tamper_report):
    build = tampered()
    for k in (1, 2, 4, 6, 8, 9, 10, 11):
        for extra in (0, 1):
            task = make_task("icqa", k=k, n_questions=k + extra, n_answers=k + extra)
            v = verify(build(task).model, task, symmetry="auto", progress=False)
            want = symbolic_margin(tamper_report, {"k": k, "n_q": k + extra, "n_a": k + extra})
            if v.verified:
                assert v.min_margin == want and (want is None or want > 0)
            else:
                assert want <= 0 and v.min_margin <= 0


def test_tamper_certificate_rechecks_as_failing(tamper_report, tmp_path):
    rc, out, err = recheck(tmp_path, tamper_report.to_json())
    assert rc == 1 and ("1 margin not > 0" in out or "margins not > 0" in out) and "offsets [9, 0, 0]" in out, (out, err)


def test_tm_tamper_from_m7_is_refused_naming_the_line():
    from depthcert.constructions import parsing_mapping
    from depthcert.proofs.all_sizes import tm_plan

    def tm_flip(task, as_printed=False):
        c = parsing_mapping.build_ternary(task, as_printed)
        if task.m >= 7:  # W_O flipped, at alphabets no base case reaches
            return replace(c, model=replace(c.model, W_O=-c.model.W_O))
        return c

    rep = prove_lumped(tm_plan(make_task("tm", l=3), "ternary", False, construct=tm_flip))
    assert rep.status == "not-proven" and rep.exit_code == 3
    assert "test_all_sizes.py:" in rep.reason and "if task.m >= 7:" in rep.reason
    task = make_task("tm", l=3, alphabet=7)
    assert not verify(tm_flip(task).model, task, symmetry="off", progress=False).verified


# ----------------------------------------------------------------------------- negative controls


def test_as_printed_template_constructions_get_no_proof(capsys):
    code, out, _ = run(["tm", "--l", "3", "--variant", "ternary", "--as-printed", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 1 and info["verdict"] == "fails" and info["failure"]["size"] == {"l": 3, "m": 2}
    assert info["failure"]["counterexample"]["input"] == "t1 t0 t0 <cls>"
    code, out, _ = run(["ictm", "--k", "2", "--l", "2", "--as-printed", "--all-sizes"], capsys)
    assert code == 1 and "fails at    k=2, l=2, m=2, n_a=2 (base case refuted by verify)" in out
    assert "x1 x1 = a0 x0 x1 = a1 x0 x0 =  expected a0, predicted a1" in out


def test_multihop_proven_from_its_builder_in_the_sizes_it_reaches(capsys):
    """multi-hop linear: its builder runs with symbolic hops and N (the hop layer is one Repeat), so
    every hops >= 1 and N >= k is proven at the given k; doubling / paper at the given (k, hops)."""
    code, out, _ = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial" and info["all_sizes"] == ["hops >= 1", "N >= 2"]
    assert [f["parameter"] for f in info["finite_only"]] == ["k"] and info["margin"] == {"exact": "1", "decimal": "1"}
    assert "from symbolic hops and N" in " ".join(info["steps"][0]["lines"])
    rep = prove(make_task("multihop", k=2, hops=3), "doubling")
    assert rep.status == "partial" and rep.margin == "1"
    for N in (2, 3, 6):
        task = make_task("multihop", k=2, hops=3, n_entities=N)
        v = verify(registry.build(task, "doubling").model, task, symmetry="auto", progress=False)
        assert v.min_margin == symbolic_margin(rep, {"N": N}) == 1


def _flip_w_o(model):
    return replace(model, W_O=-model.W_O)


def _flip_last_hop(model):
    """The last hop layer's W_V negated: that hop subtracts the entity it should copy."""
    last = model.layers[-1]
    heads = tuple(replace(h, W_V=-h.W_V) for h in last)
    return replace(model, layers=model.layers[:-1] + (heads,))


@pytest.mark.parametrize("flip", [_flip_w_o, _flip_last_hop])
def test_multihop_hop_tamper_from_h5_is_refused_naming_the_line(flip):
    from depthcert.constructions import multihop
    from depthcert.proofs.all_sizes import prove_multihop_linear

    def hop_flip(task, as_printed=False):
        c = multihop.build_linear(task, as_printed)
        if task.hops >= 5:  # the last hop flipped, at sizes no base case reaches
            return replace(c, model=flip(c.model))
        return c

    rep = prove_multihop_linear(make_task("multihop", k=2, hops=1), construct=hop_flip)
    assert rep.status == "not-proven" and rep.exit_code == 3
    assert "test_all_sizes.py:" in rep.reason and "if task.hops >= 5:" in rep.reason
    assert all(r["verdict"] == "verified" for r in rep.base_cases)
    for h, ok in ((4, True), (5, False)):
        task = make_task("multihop", k=2, hops=h, n_entities=3)
        assert verify(hop_flip(task).model, task, symmetry="off", progress=False).verified is ok


def test_multihop_hop_count_equal_to_hops_only_at_the_sizes_read_is_refused():
    """Our own tamper (not in the audit's list): the hop layer repeated hops + (h-1)(h-2)(h-3)(h-4)/24
    times, with no size comparison: the same model at every h <= 4, one hop too many at h = 5. The
    proof needs the count to be hops as a polynomial: refused (exit 3), never proven; verify at h = 5
    refutes it."""
    from depthcert.constructions import multihop
    from depthcert.constructions.indexed import Repeat
    from depthcert.proofs.all_sizes import prove_multihop_linear

    def extra_hop(task, as_printed=False):
        if not is_symbolic(task):
            task = multihop._check(task)
            return multihop._finite(extra_hop, task, as_printed, symbolic_hops=True, layers=task.hops + 2)
        c = multihop.build_linear(task, as_printed)
        h, (copy, hop) = task.hops, c.symbolic.layers
        count = h + (h - 1) * (h - 2) * (h - 3) * (h - 4) / 24
        return replace(c, symbolic=replace(c.symbolic, layers=(copy, Repeat(hop.layer, count))))

    rep = prove_multihop_linear(make_task("multihop", k=2, hops=1), construct=extra_hop)
    assert rep.status == "not-proven" and rep.exit_code == 3, rep.reason
    assert "the hop layer is repeated" in rep.reason and "not hops times" in rep.reason
    for h, layers, ok in ((4, 5, True), (5, 7, False)):
        task = make_task("multihop", k=2, hops=h, n_entities=3)
        model = extra_hop(task).model
        assert len(model.layers) == layers
        assert verify(model, task, symmetry="off", progress=False).verified is ok


def test_tm_ternary_proven_from_its_builder_in_m(capsys):
    """Theorem 5 ternary at a fixed l: the builder runs with symbolic m (its Lemma 3 read-out is
    fitted once at m = l and is one value on every alphabet row); margins equal verify's."""
    code, out, _ = run(["tm", "--l", "3", "--variant", "ternary", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial" and info["all_sizes"] == ["m >= 3"]
    assert [f["parameter"] for f in info["finite_only"]] == ["l"]
    for m in (3, 4, 5, 6):
        task = make_task("tm", l=3, alphabet=m)
        v = verify(registry.build(task, "ternary").model, task, symmetry="auto", progress=False)
        assert v.verified and str(v.min_margin) == info["margin"]["exact"]


def test_weights_read_at_sample_sizes_are_evidence_not_a_proof():
    """A builder given as task -> model (no symbolic run possible) is analysed on weights read at
    sample sizes: never printed as a proof (exit 3), no certificate, the margin as evidence."""
    from depthcert.proofs.all_sizes import tm_plan

    rep = prove_lumped(tm_plan(make_task("tm", l=3), "ternary", False,
                               builder=lambda t: registry.build(t, "ternary").model))
    assert rep.status == "not-proven" and rep.exit_code == 3 and rep.certificate is None and rep.margin is None
    assert "set-indexed" in rep.reason and rep.evidence_margin == "661607728557823123691/15807928823176436959040"
    assert [p for p, _ in rep.finite] == ["m", "l"]


def test_ictm_proven_from_its_builder_in_m_and_n_a():
    """Theorem 6 at a fixed (k, l): the builder runs with symbolic m and n_a; margins equal verify's."""
    rep = prove(make_task("ictm", k=1, l=2))
    assert rep.status == "partial" and rep.margin == "1" and rep.params == ("m >= 1", "n_a >= 1")
    assert [p for p, _ in rep.finite] == ["k", "l"]
    for m, na in ((1, 1), (2, 3), (4, 2), (5, 4)):
        task = make_task("ictm", k=1, l=2, alphabet=m, n_answers=na)
        v = verify(registry.build(task).model, task, symmetry="auto", progress=False)
        assert v.verified and v.min_margin == symbolic_margin(rep, {"m": m, "n_a": na})


def test_a_per_member_entry_is_refused_for_every_size():
    """The printed stray block of Theorem 6 (one entry per member) is allowed in a finite-only build and
    is no closed value: refused, naming the line, when made from symbols."""
    from depthcert.constructions import parsing_copying_matching as pcm
    from depthcert.constructions.closed import NotClosed, value_of

    with pytest.raises(NotClosed, match="branches on a size at constructions/parsing_copying_matching.py:[0-9]+"):
        value_of(lambda t: pcm.build(t, as_printed=True), pcm.symbolic_task(2, 2))
    task = make_task("ictm", k=2, l=2)
    c = pcm.build(task, as_printed=True)
    assert c.model is not None and c.symbolic is None  # finite only: no closed value rides along


@pytest.mark.parametrize("argv,needle", [
    (["tm", "--variant", "heads"], "overlap the token rows"),
    (["multihop", "--variant", "relu-and"], "a head per entity"),
    (["composition", "--L", "3", "--N", "2", "--variant", "linear"], "N, L finite-only: the orbits"),
    (["composition", "--variant", "encoder-doubling"], "N, L finite-only: the orbits"),
    (["parity", "--variant", "tree"], "n finite-only: the number of layers grows with n"),
    (["word-problem", "--variant", "tree-mlp"], "ReLU MLP sublayers"),
    (["reachability"], "V finite-only: the number of layers grows with V"),
])
def test_constructions_outside_the_method_are_said_so(argv, needle, capsys):
    """Not covered: exit 3, never a proof, and the reason names the parameters left finite-only."""
    code, out, _ = run(argv + ["--all-sizes"], capsys)
    assert code == 3 and "NOT PROVEN FOR ALL SIZES" in out and "reason      not covered: " in out
    assert needle in out, out
    code, out, _ = run(argv + ["--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "not_proven" and info.get("certificate") is None


@pytest.mark.parametrize("argv,needle", [
    (["icqa", "--all-sizes", "--weights", "w.json"], "takes no --weights"),
    (["icqa", "--all-sizes", "--point", "3"], "takes no --point"),
    (["icqa", "--all-sizes", "--export", "x.json"], "takes no --export"),
    (["icqa", "--all-sizes", "--symmetry", "off"], "takes no --symmetry"),
    (["icqa", "--all-sizes", "--variant", "nope"], "unknown --variant"),
    (["icqa", "--all-sizes", "--k", "0"], "--k"),
    (["multihop", "--k", "5", "--variant", "doubling", "--all-sizes"], "orbits"),  # 15,625 orbits > MAX_ORBITS
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


def _edit(info, path, value):
    out = json.loads(json.dumps(info))
    obj = out
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value
    return out


@pytest.mark.parametrize("path,value,needle", [
    # the other triples as k - 2 elements: the parts of T no longer add up to k
    (("certificate", "points", 0, "sorts", "Tr"), [[[0, 0, 0], "-2"], [[1, 0, 0], "1"]], "can be negative"),
    (("certificate", "points", 0, "sorts", "Uq"), [[[0, 1, 0], "1"], [[1, 0, 0], "-1"], [[0, 0, 0], "-1"]],
     "can be negative"),
    (("certificate", "points", 0, "model_sets", "T", "parts"), [["fixed", "c"], ["sort", "Tr"], ["sort", "Uq"]],
     "wrong orbit sizes"),
    (("certificate", "params", 0, "base"), 0, "not inside the task's range"),
    (("claim",), "correct on every point for all k >= 1", "claim"),
    (("certificate", "claim"), "correct on every point for all k >= 0, n_q >= k, n_a >= k", "claim"),
    (("margin",), "1000", "margin '1000' is not the one re-derived: 3"),
    (("certificate", "margin"), "4", "margin '4' is not the one re-derived: 3"),
    (("certificate", "task"), "tm", "no dataset formula for task 'tm'"),
])
def test_rechecker_rederives_and_rejects_edited_certificates(path, value, needle, capsys, tmp_path):
    code, out, _ = run(["icqa", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    rc, _, err = recheck(tmp_path, _edit(info, path, value))
    assert rc == 2 and needle in err, err


def test_rechecker_rederives_fixed_structure_certificates(capsys, tmp_path):
    """tm at a fixed l: the orbits (falling factorials of m) must add up to m^l; dropping one
    representative, or claiming another l (its Bell(l) classes), is rejected."""
    code, out, _ = run(["tm", "--l", "3", "--variant", "ternary", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    rc, rout, err = recheck(tmp_path, info)
    assert rc == 0 and rout.startswith("tm ternary at {'l': 3}: valid; 5 representatives"), err
    dropped = json.loads(json.dumps(info))
    dropped["certificate"]["points"].pop()
    rc, _, err = recheck(tmp_path, dropped)
    assert rc == 2 and "orbit identity" in err
    rc, _, err = recheck(tmp_path, _edit(info, ("certificate", "fixed", "l"), 4))  # Bell(4) = 15 templates
    assert rc == 2 and "the class families count 5 classes, the task has 15" in err, err


@pytest.mark.parametrize("k,l,reps,start", [(1, 2, 9, "m >= 1, n_a >= 1"), (2, 2, 74, "m >= 2, n_a >= 2")])
def test_rechecker_rederives_ictm_certificates(k, l, reps, start, capsys, tmp_path):
    """ictm at a fixed (k, l): the orbits (A(m, used) A(n_a, k)) must add up to the task's size
    A(n_a, k) k! sum over k-sets of templates of prod N sum N, which the checker computes itself;
    a representative whose range is moved above where it exists, a dropped representative, another
    (k, l), the query "new" reading, or a read-out that changes only beyond every small alphabet
    (1 - (m-1)...(m-5)/120, = 1 for m <= 5) is never valid."""
    code, out, _ = run(["ictm", "--k", str(k), "--l", str(l), "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial"
    rc, rout, err = recheck(tmp_path, info)
    assert rc == 0 and rout.startswith(f"ictm parsing-copying-matching at {{'k': {k}, 'l': {l}}}: valid; "
                                       f"{reps} representatives") and f"for all {start};" in rout, err
    if (k, l) == (2, 2):  # the line docs/all-sizes.md shows
        with open(os.path.join(ROOT, "docs", "all-sizes.md")) as fh:
            assert "    " + rout.strip() + "\n" in fh.read()
    dropped = json.loads(json.dumps(info))
    dropped["certificate"]["points"].pop()
    rc, _, err = recheck(tmp_path, dropped)
    assert rc == 2 and "orbit identity" in err, err
    late = json.loads(json.dumps(info))
    pt = next(p for p in late["certificate"]["points"] if p["tree"]["offsets"][0] == 0)
    pt["tree"]["offsets"][0] = 1
    rc, _, err = recheck(tmp_path, late)
    assert rc == 2 and "starts above a size where it exists" in err, err
    for edit in ({"k": k, "l": l + 1}, {"k": k + 1, "l": l}, {"k": k, "l": l, "query": "new"}):
        rc, _, err = recheck(tmp_path, _edit(info, ("certificate", "fixed"), edit))
        assert rc == 2 and err.startswith("invalid:"), (edit, err)
    # (m-1)(m-2)(m-3)(m-4)(m-5)/120 as terms in the checker's format (exponents of m, n_a)
    quintic = {0: -1, 1: 274, 2: -225, 3: 85, 4: -15, 5: 1}
    bent = json.loads(json.dumps(info))
    for p in bent["certificate"]["points"]:
        lab = [c[0] for c in p["classes"]].index(p["label"])
        p["W_O"] = [[r, c, pat, [[[e, 0], str(-Fraction(q, 120))] for e, q in quintic.items()] + v if r == lab else v]
                    for r, c, pat, v in p["W_O"]]
    rc, _, err = recheck(tmp_path, bent)
    assert rc == 2 and "differs from the certificate's" in err, err


def test_rechecker_rejects_a_certificate_without_some_competitors(capsys, tmp_path):
    """The unused answers' class family (and its margin) removed: fewer margins would be re-decided;
    the class families must count the task's n_a classes."""
    code, out, _ = run(["icqa", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    point = info["certificate"]["points"][0]
    drop = [i for i, (name, _) in enumerate(point["classes"]) if name == "cls:A@Ua"]
    assert drop == [2]
    point["classes"] = point["classes"][:2]
    point["W_O"] = [e for e in point["W_O"] if e[0] != 2]
    del point["tree"]["margins"]["cls:A@Ua"]
    rc, _, err = recheck(tmp_path, info)
    assert rc == 2 and "the class families count k classes, the task has n_a" in err, err


def test_rechecker_orbit_identity_with_a_second_orbit_is_rejected(capsys, tmp_path):
    """Two copies of the representative: the orbits add up to twice the dataset size."""
    code, out, _ = run(["icqa", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    info["certificate"]["points"].append(info["certificate"]["points"][0])
    rc, _, err = recheck(tmp_path, info)
    assert rc == 2 and "orbit identity" in err


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


# ----------------------------------------------------------------------------- user families


FAMILY = """
from fractions import Fraction

from depthcert.constructions import copy_matching
from depthcert.constructions.indexed import IndexedHead, IndexedMatrix, SymbolicModel, finite_build, is_symbolic
from depthcert.constructions.construction import Construction


def build(task, as_printed=False):
    if not is_symbolic(task):
        return finite_build(build, task, copy_matching.symbolic_task, copy_matching.sizes_of(task))
    stream, positions, classes = copy_matching.layouts(task)
    ident = IndexedMatrix(stream, stream).identity()
    layers = ((IndexedHead(copy_matching.copy_attention(stream), ident),),
              (IndexedHead(IndexedMatrix(stream, stream).same("tok:Q", "tok:Q", same=2), ident),))
    W_O = IndexedMatrix(classes, stream).same("cls:A", "tok:A", same=Fraction(1, 3))
    return Construction("icqa", "mine", "mine", None, as_printed,
                        symbolic=SymbolicModel("mine", stream, positions, classes, layers, W_O, task.range))


def branchy(task, as_printed=False):
    c = build(task, as_printed)
    if task.n_a > 6:
        c.symbolic.W_O.same("cls:A", "tok:A", same=-1)
    return c
"""


def test_user_family_proven_for_every_size_from_the_command_line(capsys, tmp_path):
    path = tmp_path / "fam.py"
    path.write_text(FAMILY)
    code, out, err = run(["icqa", "--family", f"{path}:build", "--all-sizes", "--k", "2", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "proven" and info["margin"] == {"exact": "2", "decimal": "2"}, err
    assert info["variant"] == f"family {path}:build" and f"made by {path}:build from symbols only" in info["rests_on"][0]
    assert info["instance"].startswith("k=2, n_q=4, n_a=4: the proven value instantiated, verify verified") and "= the proof's margin" in info["instance"]
    code, out, err = run(["icqa", "--family", f"{path}:branchy", "--all-sizes"], capsys)
    assert code == 3 and "branches on a size" in out and "if task.n_a > 6:" in out
    code, out, err = run(["icqa", "--family", f"{path}:build", "--k", "2"], capsys)
    assert code == 0 and "VERIFIED" in out


@pytest.mark.parametrize("spec,needle", [("nofile.py:build", "no file"), ("json:nothing", "has no function"),
                                         ("justaname", "MODULE:FUNCTION"), ("no_such_module_x:f", "importing")])
def test_user_family_bad_input_exit_2_one_line(spec, needle, capsys):
    code, out, err = run(["icqa", "--family", spec, "--all-sizes"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


SC_FAMILY = '''
from depthcert.constructions import memorization as mem
from depthcert.constructions.head_family import Copy, HeadFamily, HeadRules


def rules(d, n):
    copies, last = mem.lemma4_rules(d, n)
    return HeadFamily(copies.count, lambda h: HeadRules(copies.head(h).qk, (Copy(h * d, "token", 3 * n),))), last


def build(task, as_printed=False):
    return mem.build(task, as_printed, rules=rules)
'''


def test_user_sc_family_proven_from_the_command_line(capsys, tmp_path):
    """A user's Lemma 4 family (copy heads tripled) through --family: proven with its own margin 3,
    and the instance built and verified at the given sizes."""
    path = tmp_path / "scfam.py"
    path.write_text(SC_FAMILY)
    code, out, err = run(["sc", "--family", f"{path}:build", "--all-sizes", "--length", "2", "--alphabet", "3",
                          "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "proven" and info["margin"] == {"exact": "3", "decimal": "3"}, err
    assert info["instance"] == "L=2, M=3: the proven value instantiated, verify verified on 9 points (9 evaluated), margin 3 = the proof's margin"


def test_head_rules_fill_the_matrices_and_refuse_rows_outside_the_stream():
    from depthcert.checkers.layout import Layout
    from depthcert.constructions.head_family import Copy, Entry, Scaled, rules_matrix

    lay = Layout.of(("token", 2), ("position", 3)).padded(7, "pad")
    W = rules_matrix((Entry("position", 0, "position", 2, 5), Copy(5, "token", 3), Scaled("position", -1)), lay)
    assert W[2, 4] == 5 and W[5, 0] == 3 and W[6, 1] == 3 and [W[i, i] for i in range(2, 5)] == [-1, -1, -1]
    assert sum(1 for v in W.flat if v) == 6
    with pytest.raises(ValueError, match="a copy into rows 6..7"):
        rules_matrix((Copy(6, "token", 1),), lay)
    with pytest.raises(ValueError, match="outside block"):
        rules_matrix((Entry("position", 3, "position", 0, 1),), lay)


def test_rechecker_accepts_the_sc_certificate(capsys, tmp_path):
    code, out, _ = run(["sc", "--all-sizes", "--json"], capsys)
    rc, stdout, err = recheck(tmp_path, json.loads(out))
    assert code == 0 and rc == 0, err
    assert stdout.strip() == ("sc heads: valid; every condition of the Lemma 4 derivation re-decided from the builder's "
                              "rules (coefficient test); claim and margin re-derived; every margin > 0 for all L >= 1, "
                              "M >= 1; minimum margin 1 (normalized 1: margin / |read-out weight|); closed value "
                              f"{json.loads(out)['content_hash']} (its tables re-hashed; every rule read from them)")


@pytest.mark.parametrize("path,value,rc_want,needle", [
    (("margin",), "1000", 2, "margin '1000' is not"),
    (("certificate", "margin"), "2", 2, "margin '2' is not a s w / m"),
    (("claim",), "correct on every point for all L >= 0", 2, "claim"),
    (("certificate", "params", 1, "base"), 0, 2, "not Theorem 1's"),
    # the rules edited alone are not the value's (exit 2); edited in the value too and re-hashed, the
    # derivation fails (exit 1): tests/test_all_sizes_rules_bound.py
    (("certificate", "rules", "w"), [[[0, 0, 0], "-1"]], 2, "rule w is"),
    (("certificate", "rules", "o"), [[[1, 0, 0], "1"], [[1, 0, 1], "1"], [[2, 0, 0], "1"]], 2, "rule o is"),
    (("certificate", "rules", "j"), [[[0, 1, 0], "1"], [[0, 0, 0], "-1"]], 2, "rule j is"),
])
def test_rechecker_rejects_edited_sc_certificates(path, value, rc_want, needle, capsys, tmp_path):
    code, out, _ = run(["sc", "--all-sizes", "--json"], capsys)
    rc, stdout, err = recheck(tmp_path, _edit(json.loads(out), path, value))
    assert rc == rc_want and needle in (err if rc == 2 else stdout), (stdout, err)


def test_multihop_linear_every_hops_is_proven_and_its_description_names_values(capsys):
    """The linear builder's description compares the hop count (1 hop layer / h hop layers) only at a
    concrete size: the run with symbolic hops must not branch on it (it would be refused, exit 3
    with a reason, instead of proven for every hops and N)."""
    code, out, _ = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial" and info["all_sizes"] == ["hops >= 1", "N >= 2"], info.get("reason")
    for h, text in ((1, "1 hop layer of"), (3, "3 hop layers of")):
        assert text in registry.build(make_task("multihop", k=2, hops=h), "linear").description


def test_rechecker_rederives_multihop_linear_for_every_hops(capsys, tmp_path):
    """Multi-hop linear at a fixed k, every hops: the certificate holds per representative the copy
    and hop layers, the label for h = 1 and the label rule f; the checker runs hop after hop until a
    (stream, label) pair repeats and decides every margin. A label rule changed so the labels go
    wrong from h = 3 on fails there, naming h = 3; a missing image, a dropped representative, an edited
    claim, range, kind or margin is refused; a hop layer scaled by 1 - (N-2)(N-3)(N-4)/12 (= 1 at
    N <= 4) is never valid."""
    code, out, _ = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial" and info["certificate"]["kind"] == "every-hops"
    rc, rout, err = recheck(tmp_path, info)
    assert rc == 0, err
    assert rout.strip() == (
        "multihop linear at {'k': 2}: valid; 8 representatives, 8 leaf regions, every ReLU sign and every margin "
        "re-decided (10 (stream, label) pairs, hop after hop until each repeats); orbit identity, set sizes and claim "
        "re-derived; labels by the task's rule, representatives in pairwise different orbits (first-occurrence "
        f"forms), fixed members = members used; every table is the closed value {info['content_hash']} (re-hashed) "
        "split by the point's parts; every margin > 0 for all hops >= 1, N >= 2; minimum margin 1 (normalized 1: "
        "margin / largest |W_O entry|)")
    with open(os.path.join(ROOT, "docs", "all-sizes.md")) as fh:
        assert "    " + rout.strip() + "\n" in fh.read()
    points = info["certificate"]["points"]
    swap = next(i for i, p in enumerate(points) if len(p["next"]) == 2 and p["next"][p["start"]] != p["start"])
    a = points[swap]["start"]
    b = points[swap]["next"][a]
    # a -> b -> b -> ...: the true labels alternate a, b, a, b: wrong from h = 3 on
    rc, rout, err = recheck(tmp_path, _edit(info, ("certificate", "points", swap, "next"), {a: b, b: b}))
    assert rc == 1 and "at h = 3" in rout, (rout, err)
    rc, _, err = recheck(tmp_path, _edit(info, ("certificate", "points", swap, "next"), {a: b}))
    assert rc == 2 and "no image" in err, err
    for path, value, needle in (
            (("certificate", "claim"), "correct on every point for all hops >= 2, N >= 2 at k=2", "claim"),
            (("all_sizes",), ["N >= 2"], "range"),
            (("certificate", "kind"), None, "kind"),
            (("certificate", "every"), {"name": "hops", "base": 0}, "kind"),
            (("certificate", "fixed"), {"k": 2, "hops": 3}, "every hops"),
            (("margin",), "2", "margin")):
        rc, _, err = recheck(tmp_path, _edit(info, path, value))
        assert rc == 2 and needle in err, (path, err)
    dropped = json.loads(json.dumps(info))
    dropped["certificate"]["points"].pop(swap)
    rc, _, err = recheck(tmp_path, dropped)
    assert rc == 2 and "orbit identity" in err, err
    # the hop layer's value halved beyond N = 4 only: (1 - (N-2)(N-3)(N-4)/12) on every W_V entry
    bent = json.loads(json.dumps(info))
    cubic = {0: 36, 1: -26, 2: 9, 3: -1}  # 12 - (N-2)(N-3)(N-4) = -N^3 + 9N^2 - 26N + 36
    for p in bent["certificate"]["points"]:
        for head in p["layers"][1]:
            head["W_V"] = [[r, c, pat, [[[e + m[0]], str(Fraction(q, 12) * Fraction(v))] for (m, v) in terms
                                        for e, q in cubic.items()]] for r, c, pat, terms in head["W_V"]]
    rc, rout, err = recheck(tmp_path, bent)
    assert rc == 2 and "a sign is not settled" in err, (rout, err)
