"""check-certificate stays independent and strict.

1. checkers/certificate.py imports only the Python standard library: nothing from the project,
   no numpy / scipy / sympy / flint / highspy, no dynamic imports (its AST is inspected).
2. Every stored certificate (proofs/certificates/*.json) is valid, and changing any single
   coefficient, token or label of it makes the checker reject it.
"""
from __future__ import annotations

import ast
import copy
import glob
import json
import os
import subprocess
import sys

import pytest

from depthcert.checkers import certificate as cc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "checkers", "certificate.py")
STORED = sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "*.json")))
PROJECT = {"checkers", "constructions", "proofs", "training", "benchmarks", "tests", "depthcert"}
FORBIDDEN = {"numpy", "scipy", "sympy", "flint", "highspy", "mpmath", "gmpy2", "torch", "pandas"}


def _imports(tree):
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


def test_checker_imports_only_the_standard_library():
    tree = ast.parse(open(CHECKER, encoding="utf-8").read())
    imports = _imports(tree)
    assert imports, "no imports found: the AST walk is broken"
    for name, level in imports:
        top = name.split(".")[0]
        assert level == 0, f"relative import from {name!r}"
        assert top not in PROJECT, f"imports the project: {name}"
        assert top not in FORBIDDEN, f"imports {name}"
        if hasattr(sys, "stdlib_module_names"):
            assert top in sys.stdlib_module_names, f"{name} is not in the standard library"


def test_checker_has_no_dynamic_imports():
    tree = ast.parse(open(CHECKER, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id not in ("__import__", "importlib", "exec", "eval"), node.id
        if isinstance(node, ast.Attribute):
            assert node.attr not in ("import_module", "__import__"), node.attr


def test_checker_runs_alone_without_the_project(tmp_path):
    """Copied into an empty folder and run by a bare interpreter (-I: no site-packages, no cwd)."""
    lone = tmp_path / "certificate.py"
    lone.write_text(open(CHECKER, encoding="utf-8").read())
    cert = tmp_path / "c.json"
    obj = json.load(open(STORED[0])) if STORED else {
        "format": "depthcert.certificate", "version": 1,
        "points": [{"tokens": ["a", "a", "r"], "label": "X", "mu": {"Y": 1}},
                   {"tokens": ["b", "b", "r"], "label": "X", "mu": {"Y": 1}},
                   {"tokens": ["a", "b", "r"], "label": "Y", "mu": {"X": 1}},
                   {"tokens": ["b", "a", "r"], "label": "Y", "mu": {"X": 1}}]}
    cert.write_text(json.dumps(obj))
    r = subprocess.run([sys.executable, "-I", "-S", str(lone), str(cert)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("valid:"), (r.stdout, r.stderr)


def _single_changes(obj):
    """Every single edit: each coefficient +1 / -1 / to 0, a new class with coefficient 1, each
    token to a fresh token and to each other token seen at that position, each label to another
    class.  Yields (description, edited object)."""
    pts = obj["points"]
    classes = sorted({str(p["label"]) for p in pts} | {c for p in pts for c in p["mu"]})
    for i, p in enumerate(pts):
        for c, k in p["mu"].items():
            for new in {k + 1, k - 1, 0} - {k}:
                if new < 0:
                    continue
                o = copy.deepcopy(obj)
                o["points"][i]["mu"][c] = new
                yield f"points[{i}].mu[{c}] {k} -> {new}", o
        for c in classes:
            if c != str(p["label"]) and c not in p["mu"]:
                o = copy.deepcopy(obj)
                o["points"][i]["mu"][c] = 1
                yield f"points[{i}].mu[{c}] 0 -> 1", o
        if not any(p["mu"].values()):
            continue  # a point without coefficients does not enter the equations
        for j, tok in enumerate(p["tokens"]):
            others = {q["tokens"][j] for q in pts if len(q["tokens"]) > j} - {tok}
            fresh = "__fresh__" if isinstance(tok, str) else 987654321
            for new in sorted(others, key=str) + [fresh]:
                o = copy.deepcopy(obj)
                o["points"][i]["tokens"][j] = new
                yield f"points[{i}].tokens[{j}] {tok!r} -> {new!r}", o
        for c in classes:
            if c != str(p["label"]) and c not in p["mu"]:
                o = copy.deepcopy(obj)
                o["points"][i]["label"] = c if isinstance(p["label"], str) else int(c)
                yield f"points[{i}].label -> {c}", o


@pytest.mark.skipif(not STORED, reason="no stored certificates in proofs/certificates yet")
@pytest.mark.parametrize("path", STORED, ids=[os.path.basename(p) for p in STORED])
def test_stored_certificate_valid_and_every_single_change_rejected(path):
    obj = json.load(open(path, encoding="utf-8"))
    status, msg = cc.classify(obj)
    assert status == "valid", msg
    accepted, n = [], 0
    for what, edited in _single_changes(obj):
        n += 1
        status, _ = cc.classify(edited)
        if status == "valid":
            accepted.append(what)
    assert n >= 3 * len(obj["points"]), n
    assert not accepted, f"{os.path.basename(path)} still valid after: {accepted[:5]}"


def test_single_change_enumeration_is_not_vacuous():
    """On a certificate with a padding point (no coefficients), its token changes are not
    counted as required rejections, but every coefficient change still is."""
    obj = {"format": "depthcert.certificate", "version": 1, "points": [
        {"tokens": ["a", "a", "r"], "label": "X", "mu": {"Y": 1}},
        {"tokens": ["b", "b", "r"], "label": "X", "mu": {"Y": 1}},
        {"tokens": ["a", "b", "r"], "label": "Y", "mu": {"X": 1}},
        {"tokens": ["b", "a", "r"], "label": "Y", "mu": {"X": 1}},
        {"tokens": ["c", "c", "r"], "label": "Y", "mu": {}}]}
    assert cc.classify(obj)[0] == "valid"
    changes = list(_single_changes(obj))
    assert all(cc.classify(o)[0] != "valid" for _, o in changes)
    padded = copy.deepcopy(obj)
    padded["points"][4]["tokens"][0] = "zz"
    assert cc.classify(padded)[0] == "valid"  # why padding tokens are excluded above
