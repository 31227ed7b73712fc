"""parity / mod-count `count` for every n: the builder run with symbolic n and a generic key j
(proofs/all_sizes_count.py), the re-checker (proofs/check_all_sizes.py, kind "count"), tampers at
sizes beyond the base cases."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import group_tree
from depthcert.constructions.head_family import Entry, HeadRules
from depthcert.constructions.indexed import is_symbolic
from depthcert.proofs.all_sizes import prove

from test_all_sizes import CHECKER, ROOT, run  # the command runner and the re-checker's path, shared


def recheck(tmp_path, data):
    path = tmp_path / "cert.json"
    path.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, CHECKER, str(path)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("argv,code_want,verdict,p", [
    (["parity"], 0, "proven", 2),
    (["mod-count", "--p", "3"], 3, "partial", 3),
    (["mod-count", "--p", "5"], 3, "partial", 5),
])
def test_count_proven_for_every_n_margin_is_verify_s(argv, code_want, verdict, p, capsys, tmp_path):
    code, out, _ = run(argv + ["--variant", "count", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == code_want and info["verdict"] == verdict and info["all_sizes"] == ["n >= 1"], info["reason"]
    assert (info["finite_only"] == []) is (p == 2)
    margin = info["margin"]["exact"]
    for n in (2, 7, 11):  # the exact minimum at sizes the proof did not read as base cases too
        task = make_task(argv[0], n=n, **({} if p == 2 else {"modulus": p}))
        v = verify(group_tree.build_count(task).model, task, symmetry="off", progress=False)
        assert v.verified and str(v.min_margin) == margin
    code, text = recheck(tmp_path, info)
    assert code == 0 and f"minimum margin {margin}" in text, text


def test_count_instance_line_builds_and_checks(capsys):
    code, out, _ = run(["mod-count", "--p", "3", "--n", "10", "--variant", "count", "--all-sizes"], capsys)
    assert code == 3 and "instance    n=10: the proven value instantiated, verify verified on 1024 points" in out
    assert "margin 1 = the proof's margin" in out


def _tampered(weight=None, bias=None):
    """count_rules with layer 2's key rules replaced (weight(n, j, r, w), bias(n, j, g))."""

    def rules(n, p, vocab):
        spec = group_tree.count_rules(n, p, vocab)
        key2 = spec.layer2.key

        def key(j):
            k = key2(j)
            qk = tuple(Entry(e.row_block, e.row, e.col_block, e.col, bias(n, j, e.value))
                       if bias and (e.row_block, e.col_block) == ("position", "position") else e for e in k.qk)
            v = tuple(Entry(e.row_block, e.row, e.col_block, e.col, weight(n, j, e.row, e.value)) if weight else e
                      for e in k.v)
            return HeadRules(qk, v)

        spec.layer2 = group_tree.KeyRules(spec.layer2.count, key)
        return spec

    return lambda task, as_printed=False: group_tree.build_count(task, as_printed, rules=rules)


def test_weight_changed_when_n_at_least_9_is_refused_naming_the_line():
    def weight(n, j, r, w):
        if n >= 9:  # a size comparison no case decides
            return w + (1 if r == 0 else 0)
        return w

    rep = prove(make_task("parity", n=4), "count", construct=_tampered(weight=weight))
    assert rep.status == "not-proven" and rep.exit_code == 3
    assert "test_all_sizes_count.py:" in rep.reason and "if n >= 9:" in rep.reason and "in the case j = 0" in rep.reason
    task = make_task("parity", n=9)
    assert not verify(_tampered(weight=weight)(task).model, task, symmetry="off", progress=False).verified


def test_polynomial_weight_tamper_zero_at_every_small_n_fails_at_n_9():
    """w_j[0] + (n-1)(n-2)...(n-8)/8!: the same weights at n = 1..8 (every base case), 1 more at n = 9."""
    def weight(n, j, r, w):
        if r != 0:
            return w
        extra = 1
        for i in range(1, 9):
            extra = extra * (n - i)
        return w + extra / 40320

    rep = prove(make_task("parity", n=4), "count", construct=_tampered(weight=weight))
    assert rep.status == "fails" and rep.exit_code == 1 and rep.failure["size"] == {"n": 9}, rep.reason
    assert "counterexample" in rep.failure


def test_bias_tamper_zero_at_every_key_below_10_fails_at_n_11():
    """gamma_j - j (j-1) ... (j-9) / 10!: the same scores at every key j <= 9 (so at every n <= 10, beyond
    the base cases n <= 8), one lower at key 10: the derivation's identity fails; verify refutes n = 11."""
    def bias(n, j, g):
        extra = 1
        for i in range(10):
            extra = extra * (j - i)
        return g - extra / 3628800

    rep = prove(make_task("mod-count", n=4, modulus=3), "count", construct=_tampered(bias=bias))
    assert rep.status == "fails" and rep.exit_code == 1 and rep.failure["size"] == {"n": 11}, rep.reason
    assert "gamma_j = -beta a1 s1 j" in rep.failure["how"]
    assert all(r["verdict"] == "verified" for r in rep.base_cases if r["size"]["n"] <= 10)


def test_recheck_rejects_edited_certificates(capsys, tmp_path):
    code, out, _ = run(["mod-count", "--p", "3", "--variant", "count", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    code, text = recheck(tmp_path, info)
    doc = open(os.path.join(ROOT, "docs", "all-sizes.md")).read()
    assert code == 0 and "    " + text.strip() + "\n" in doc, text  # the line docs/all-sizes.md quotes

    def edited(fn):
        d = copy.deepcopy(info)
        fn(d)
        return recheck(tmp_path, d)

    def margin(d):
        d["certificate"]["margin"] = "1000"
        d["margin"] = {"exact": "1000", "decimal": "1000"}

    def claim(d):
        d["certificate"]["claim"] = d["claim"] = "correct on every point for all n >= 0 at p = 3"

    def rng(d):
        d["certificate"]["params"] = [{"name": "n", "base": 0}]

    def p(d):
        d["certificate"]["p"] = 4

    def coefficient(d):  # w_j[1] of the case j = 3 q + 1 one more
        w = d["certificate"]["cases"][1]["rules"]["w"][1]
        w.append([[0, 0], "1"])

    def poly(d):  # a q t term in gamma: zero at q = 0 or t = 0
        d["certificate"]["cases"][2]["rules"]["gamma"].append([[1, 1], "1"])

    def verdict(d):
        d["verdict"] = "proven"

    # coefficient, poly: the rules edited alone disagree with the value the hash binds (exit 2); the same
    # edits made to the value too, re-hashed, fail the derivation (exit 1): tests/test_all_sizes_rules_bound.py
    for fn, want in ((margin, 2), (claim, 2), (rng, 2), (p, 2), (coefficient, 2), (poly, 2), (verdict, 2)):
        code, text = edited(fn)
        assert code == want, (fn.__name__, text)


def test_symbolic_build_has_no_model_and_finite_equals_symbolic_at_a_point():
    from depthcert.proofs.all_sizes_count import case_task

    st = case_task("parity", 2, 1, 0)
    c = group_tree.build_count(st)
    assert is_symbolic(st) and c.model is None and c.symbolic is not None
    for n in (1, 6, 13):
        task = make_task("parity", n=n)
        held = group_tree.build_count(case_task("parity", 2, None, 0, {"q": 0, "t": n - 1})).symbolic
        assert held.instantiate(task, "parity-count") == group_tree.build_count(task).model


def test_a_size_mod_p_is_decided_only_when_every_non_constant_coefficient_is_a_multiple_of_p():
    from depthcert.constructions.indexed import SizeBranch, SizeRange

    z = SizeRange.of(("q", 0), ("t", 0)).symbols()
    q, t = z["q"], z["t"]
    assert (3 * q + 5) % 3 == 2 and (6 * q * t - 1) % 3 == 2 and (2 * q + 1) % 2 == 1
    for bad, p in ((q, 3), (3 * q + t, 3), ((3 * q) / 2, 3), (q * q + q, 2)):  # q (q + 1) is even: not decided here
        with pytest.raises(SizeBranch):
            bad % p
    held = SizeRange.of(("q", 0), ("t", 0)).at({"q": 4, "t": 1}).symbols()
    assert (held["q"] + held["t"]) % 3 == 2
