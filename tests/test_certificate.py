"""The independent certificate checker (checkers/certificate.py): paper Def. 3, Props. 7-8, Lemma 6."""
from __future__ import annotations

import ast
import copy
import glob
import itertools
import json
import os
import subprocess
import sys
from fractions import Fraction
from math import gcd

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers.certificate import check_certificate, classify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORED = sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "*.json")))


def cert(points, **extra):
    return {"format": "depthcert.certificate", "version": 1, "points": points, **extra}


def theorem2_points():
    """Paper section 13.1: E0 (+) E1 = E2 (+) E3 with targets x, x, y, y."""
    rows = [("a = x b = y a =", "x", "y"), ("a = y b = x b =", "x", "y"),
            ("a = y b = x a =", "y", "x"), ("a = x b = y b =", "y", "x")]
    return [{"tokens": t.split(), "label": lab, "mu": {other: 1}} for t, lab, other in rows]


def template_of(seq):
    first = {}
    return "".join("ABCDEFGH"[first.setdefault(t, len(first))] for t in seq)


def tm_sequences(l, m):
    """All m^l sequences with CLS appended, labelled by template (built here, not by the project)."""
    out = {}
    for s in itertools.product([f"t{i}" for i in range(m)], repeat=l):
        out.setdefault(template_of(s), []).append(list(s) + ["<cls>"])
    return out


def lemma6_certificate(l, m, t1, t2):
    """Lemma 6: lambda = n(t2) on every t1 sequence, lambda' = n(t1) on every t2 sequence."""
    seqs = tm_sequences(l, m)
    a, b = seqs[t1], seqs[t2]
    g = gcd(len(a), len(b))
    pts = [{"tokens": s, "label": t1, "mu": {t2: len(b) // g}} for s in a]
    pts += [{"tokens": s, "label": t2, "mu": {t1: len(a) // g}} for s in b]
    return cert(pts)


def test_theorem2_four_sequences_are_a_certificate():
    ok, msg = check_certificate(cert(theorem2_points()))
    assert ok, msg


def test_theorem2_wrong_labels_are_not():
    pts = theorem2_points()
    pts[1]["label"], pts[1]["mu"] = "y", {"x": 1}  # now E1 has the other target: no contradiction
    assert not check_certificate(cert(pts))[0]


@pytest.mark.parametrize("l,m", [(2, 2), (2, 3), (3, 3), (3, 4)])
def test_lemma6_any_two_templates(l, m):
    names = sorted(tm_sequences(l, m))
    for t1, t2 in itertools.combinations(names, 2):
        ok, msg = check_certificate(lemma6_certificate(l, m, t1, t2))
        assert ok, (t1, t2, msg)


def test_lemma6_one_template_alone_is_not_enough():
    c = lemma6_certificate(3, 3, "AAA", "ABC")
    c["points"] = [p for p in c["points"] if p["label"] == "AAA"]
    assert not check_certificate(c)[0]


def test_equations_are_per_group_not_global():
    """aa+bb = ab+ba with the last token split over two groups is not a certificate: phi differs per group."""
    pts = [{"tokens": ["a", "a", "r"], "label": "S", "mu": {"D": 1}},
           {"tokens": ["b", "b", "s"], "label": "S", "mu": {"D": 1}},
           {"tokens": ["a", "b", "r"], "label": "D", "mu": {"S": 1}},
           {"tokens": ["b", "a", "s"], "label": "D", "mu": {"S": 1}}]
    ok, msg = check_certificate(cert(pts))
    assert not ok and "group" in msg
    # the same with one last token is valid
    for p in pts:
        p["tokens"][-1] = "r"
    assert check_certificate(cert(pts))[0]


def test_failure_names_position_token_class():
    pts = theorem2_points()
    pts[0]["mu"]["y"] = 2
    ok, msg = check_certificate(cert(pts))
    assert not ok
    assert msg.startswith("invalid:") and "position 0" in msg and 'token "a"' in msg and 'class "x"' in msg


def test_int_tokens_and_labels():
    pts = [{"tokens": [0, 0, 9], "label": 0, "mu": {"1": 1}}, {"tokens": [1, 1, 9], "label": 0, "mu": {"1": 1}},
           {"tokens": [0, 1, 9], "label": 1, "mu": {"0": 1}}, {"tokens": [1, 0, 9], "label": 1, "mu": {"0": 1}}]
    assert check_certificate(cert(pts))[0]
    pts[0]["tokens"][0] = "0"  # the string "0" is a different token from the int 0
    assert not check_certificate(cert(pts))[0]


@pytest.mark.parametrize("mutate,field", [
    (lambda c: c.update(format="nope"), "format"),
    (lambda c: c.update(version=2), "version"),
    (lambda c: c.update(points=[]), "points"),
    (lambda c: c["points"][0]["mu"].update(y=-1), "negative"),
    (lambda c: c["points"][0]["mu"].update(y=1.5), "non-negative int"),
    (lambda c: c["points"][0]["mu"].update(y=True), "non-negative int"),
    (lambda c: c["points"][0]["mu"].update(x=1), "own label"),
    (lambda c: [p.update(mu={}) for p in c["points"]], "all coefficients are zero"),
    (lambda c: c["points"][0].update(label=3), "mix"),
    (lambda c: c["points"][0].update(tokens=[]), "tokens"),
    (lambda c: c["points"][0]["tokens"].__setitem__(0, None), "tokens[0]"),
    (lambda c: c["points"][0].update(extra=1), "unknown field"),
])
def test_malformed_names_the_field(mutate, field):
    c = cert(theorem2_points())
    mutate(c)
    status, msg = classify(c)
    assert status == "malformed" and field in msg, msg
    assert check_certificate(c)[0] is False


@pytest.mark.parametrize("path", STORED, ids=[os.path.basename(p) for p in STORED])
def test_stored_certificates_recheck(path):
    with open(path) as fh:
        obj = json.load(fh)
    ok, msg = check_certificate(obj)
    assert ok, msg


def _positive_points(obj):
    return [i for i, p in enumerate(obj["points"]) if any(p["mu"].values())]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_tampering_one_coefficient_invalidates(data):
    path = data.draw(st.sampled_from(STORED))
    with open(path) as fh:
        obj = json.load(fh)
    i = data.draw(st.sampled_from(_positive_points(obj)))
    p = obj["points"][i]
    c = data.draw(st.sampled_from(sorted(p["mu"])))
    delta = data.draw(st.sampled_from([1, 2, -1]))
    if p["mu"][c] + delta < 0:
        delta = 1
    p["mu"][c] += delta
    if not any(any(q["mu"].values()) for q in obj["points"]):
        return
    ok, msg = check_certificate(obj)
    assert not ok, (path, i, c, delta)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_tampering_one_token_invalidates(data):
    path = data.draw(st.sampled_from(STORED))
    with open(path) as fh:
        obj = json.load(fh)
    i = data.draw(st.sampled_from(_positive_points(obj)))
    toks = obj["points"][i]["tokens"]
    j = data.draw(st.integers(0, len(toks) - 1))
    others = sorted({t for p in obj["points"] for t in p["tokens"]} - {toks[j]}) + ["zz-not-a-token"]
    toks[j] = data.draw(st.sampled_from(others))
    ok, msg = check_certificate(obj)
    assert not ok, (path, i, j)


def test_every_stored_certificate_fails_under_each_single_coefficient_change():
    for path in STORED:
        with open(path) as fh:
            base = json.load(fh)
        for i in _positive_points(base):
            for c in base["points"][i]["mu"]:
                obj = copy.deepcopy(base)
                obj["points"][i]["mu"][c] += 1
                assert not check_certificate(obj)[0], (path, i, c)


def test_checker_imports_only_the_standard_library():
    src = open(os.path.join(ROOT, "checkers", "certificate.py")).read()
    tree = ast.parse(src)
    allowed = {"json", "fractions", "collections", "sys", "re", "math", "itertools"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in certificate.py"
            names = [node.module.split(".")[0]]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("__import__", "exec", "eval"):
            raise AssertionError(f"dynamic import/exec in certificate.py: {node.func.id}")
        else:
            continue
        for n in names:
            assert n in allowed, f"certificate.py imports {n}"


def test_checker_runs_standalone_without_the_project(tmp_path):
    """Copy the file elsewhere and run it with -I (isolated: no project on sys.path)."""
    import shutil

    shutil.copy(os.path.join(ROOT, "checkers", "certificate.py"), tmp_path / "certificate.py")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(cert(theorem2_points())))
    bad = copy.deepcopy(cert(theorem2_points()))
    bad["points"][0]["mu"]["y"] = 3
    badf = tmp_path / "bad.json"
    badf.write_text(json.dumps(bad))
    run = lambda f: subprocess.run([sys.executable, "-I", str(tmp_path / "certificate.py"), str(f)],
                                   capture_output=True, text=True, cwd=tmp_path)
    assert run(good).returncode == 0
    assert run(badf).returncode == 1


def test_check_certificate_cli_exit_codes(tmp_path, capsys):
    from depthcert.cli.check_certificate import check_certificate_main

    good = tmp_path / "good.json"
    good.write_text(json.dumps(cert(theorem2_points())))
    assert check_certificate_main([str(good)]) == 0
    bad = cert(theorem2_points())
    bad["points"][2]["tokens"][0] = "b"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert check_certificate_main([str(tmp_path / "bad.json")]) == 1
    assert "position 0" in capsys.readouterr().out
    mal = cert(theorem2_points())
    mal["points"][0]["mu"]["y"] = -1
    (tmp_path / "mal.json").write_text(json.dumps(mal))
    assert check_certificate_main([str(tmp_path / "mal.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "mu" in err[0]
    (tmp_path / "notjson.json").write_text("{")
    assert check_certificate_main([str(tmp_path / "notjson.json")]) == 2
    assert check_certificate_main([str(tmp_path / "missing.json")]) == 2


def test_soundness_identity_on_random_one_layer_models():
    """sum_i w_i . o_i = 0 exactly for random multi-head ReLU one-layer models (the proof's identity)."""
    from depthcert.checkers.evaluate import logits_fraction_reference
    from depthcert.checkers.layout import Layout
    from depthcert.checkers.model import Head, Model

    obj = cert(theorem2_points())
    vocab = ("a", "b", "=", "x", "y")
    classes = ("x", "y")
    n = 8
    d = len(vocab) + n + 2
    rng = np.random.default_rng(1)

    def rand(shape):
        M = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            M[idx] = Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 3)))
        return M

    for _ in range(3):
        heads = tuple(Head(rand((d, d)), rand((d, d))) for _ in range(3))
        model = Model(vocab, n, classes, Layout.of(("all", d)), (heads,), rand((2, d)))
        total = Fraction(0)
        for p in obj["points"]:
            o = logits_fraction_reference(model, [vocab.index(t) for t in p["tokens"]])
            y = classes.index(p["label"])
            for c, k in p["mu"].items():
                total += k * (o[y] - o[classes.index(c)])
        assert total == 0
