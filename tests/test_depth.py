"""find-depth (docs/depth.md): the case split, its standard-library checker, the realised models.

The checker is tested against edits that must break it, and the search against a brute force over
every total preorder on tiny datasets (an independent oracle for R(1, 1)).
"""
from __future__ import annotations

import ast
import copy
import glob
import itertools
import json
import os
import random
import subprocess
import sys

import pytest

from depthcert.cli.common import run_main
from depthcert.cli.find_depth import _find_depth
from depthcert.proofs import check_depth as cd
from depthcert.proofs.depth_search import DepthSearch, certificate, exact_farkas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "proofs", "check_depth.py")
STORED = sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "depth", "*.json")))


def tm2_points():
    from depthcert.checkers.tasks import make_task

    t = make_task("tm", l=2, alphabet=2)
    return t, [(tuple(t.point(i).tokens), t.point(i).label) for i in range(t.size)]


@pytest.fixture(scope="module")
def tm2_certificate():
    t, pts = tm2_points()
    kind, tree = DepthSearch(pts, 1, 1, False, 10**5, None).run()
    assert kind == "refuted"
    return certificate(pts, tree, 1, 1, False, {"name": "tm", "params": dict(t.params)})


def _imports(path):
    mods = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mods.update([(node.module or "").split(".")[0]] if node.module else [a.name for a in node.names])
    return mods


def test_checker_uses_the_standard_library_only():
    """check_depth.py and its version-3 part check_clausal.py import the standard library only, and
    check_depth.py the file beside it (as a package: `from . import`; as a script: from its folder)."""
    assert _imports(CHECKER) <= {"json", "os", "sys", "fractions", "itertools", "check_clausal"}, _imports(CHECKER)
    clausal = os.path.join(os.path.dirname(CHECKER), "check_clausal.py")
    assert _imports(clausal) <= {"fractions", "itertools"}, _imports(clausal)


def test_certificate_valid_and_standalone(tm2_certificate, tmp_path):
    ok, msg = cd.check(tm2_certificate)
    assert ok, msg
    path = tmp_path / "c.json"
    path.write_text(json.dumps(tm2_certificate))
    # run with nothing but Python, from another folder
    r = subprocess.run([sys.executable, "-I", CHECKER, str(path)], capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("valid: version 1, 4 points"), (r.stdout, r.stderr)


def _leaves(node, out):
    if "farkas" in node:
        out.append(node)
    else:
        for ch in node["children"]:
            _leaves(ch["node"], out)
    return out


def _splits(node, out):
    if "split" in node:
        out.append(node)
        for ch in node["children"]:
            _splits(ch["node"], out)
    return out


def test_edits_break_the_certificate(tm2_certificate):
    # a Farkas coefficient changed
    c = copy.deepcopy(tm2_certificate)
    leaf = _leaves(c["tree"], [])[0]
    leaf["farkas"][0][2] = 7
    assert cd.classify(c)[0] == "invalid"
    # a class no listed point carries (the model need not have such a logit)
    c = copy.deepcopy(tm2_certificate)
    leaf = _leaves(c["tree"], [])[0]
    leaf["farkas"][0][1] = "ZZ"
    status, msg = cd.classify(c)
    assert status == "invalid" and "not the label of any listed point" in msg, msg
    # a maximal set left out of a split: "possible but not covered"
    c = copy.deepcopy(tm2_certificate)
    split = _splits(c["tree"], [])[0]
    split["children"].pop()
    status, msg = cd.classify(c)
    assert status == "invalid" and "not covered" in msg, msg
    # a label changed: the task's rule disagrees
    c = copy.deepcopy(tm2_certificate)
    c["points"][0]["label"] = "AB" if c["points"][0]["label"] != "AB" else "AA"
    assert cd.classify(c)[0] == "invalid"
    # a task whose dataset does not hold the points (alphabet 1 has no t1)
    c = copy.deepcopy(tm2_certificate)
    c["task"]["params"]["alphabet"] = 1
    status, msg = cd.classify(c)
    assert status == "invalid" and "not a point of task tm" in msg, msg
    # more layers claimed than the tree decides: the leaves' points are not determined
    c = copy.deepcopy(tm2_certificate)
    c["layers"] = 2
    assert cd.classify(c)[0] == "invalid"
    # malformed
    c = copy.deepcopy(tm2_certificate)
    c["heads"] = "1"
    assert cd.classify(c)[0] == "malformed"


def test_checker_exit_codes(tm2_certificate, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tm2_certificate))
    bad = copy.deepcopy(tm2_certificate)
    _leaves(bad["tree"], [])[0]["farkas"][0][2] = 7
    badf = tmp_path / "bad.json"
    badf.write_text(json.dumps(bad))
    junk = tmp_path / "junk.json"
    junk.write_text("{")
    assert cd.main([str(good)]) == 0
    assert cd.main([str(badf)]) == 1
    assert cd.main([str(junk)]) == 2
    assert cd.main([str(tmp_path / "missing.json")]) == 2
    capsys.readouterr()


def _weak_orders(items):
    """Every total preorder of `items` as a list of blocks, best block first."""
    items = list(items)
    if not items:
        yield []
        return
    for r in range(1, len(items) + 1):
        for first in itertools.combinations(items, r):
            rest = [x for x in items if x not in first]
            for tail in _weak_orders(rest):
                yield [set(first)] + tail


def _brute_force_fits(points):
    """Whether some total preorder of the (token, position) items lets a linear read-out of the last
    position's R(1, 1) vector classify every point: the class by enumeration."""
    items = sorted({cd.rep0(t, i) for t, _ in points for i in range(len(t))})
    memo, seen = {}, set()
    for order in _weak_orders(items):
        feats = []
        for toks, _ in points:
            mine = [cd.rep0(toks, i) for i in range(len(toks))]
            top = next(b for b in order if any(m in b for m in mine))
            sel = frozenset(m for m in mine if m in top)
            feats.append(sel)
        key = tuple(feats)
        if key in seen:
            continue
        seen.add(key)
        vecs = [cd.vector(("r", 1, cd.rep0(toks, len(toks) - 1), (sel,)), memo)
                for (toks, _), sel in zip(points, feats)]
        if exact_farkas(vecs, [y for _, y in points]) is None:
            return True
    return False


def test_search_agrees_with_brute_force_on_tiny_datasets():
    rng = random.Random(1)
    seqs = [(a, b, "c") for a in "ab" for b in "ab"]
    decided = {"refuted": 0, "candidate": 0}
    for _ in range(12):
        chosen = rng.sample(seqs, rng.randint(2, 4))
        pts = [(s, rng.choice("xy")) for s in chosen]
        kind, res = DepthSearch(pts, 1, 1, False, 10**5, None).run()
        assert kind in ("refuted", "candidate")
        assert (kind == "candidate") == _brute_force_fits(pts), pts
        if kind == "refuted":
            ok, msg = cd.check(certificate(pts, res, 1, 1, False))
            assert ok, msg
        decided[kind] += 1
    assert decided["refuted"] and decided["candidate"]


def test_find_depth_tm2_minimal_depth_and_model_verified_by_verify_construction(tmp_path, capsys):
    weights = tmp_path / "w.json"
    certs = tmp_path / "certs"
    code = run_main(_find_depth, ["--task", "tm", "--l", "2", "--alphabet", "2", "--heads", "1", "--max-layers", "2",
                                  "--export", str(weights), "--certificates", str(certs)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "L=1  impossible (certificate): 4 points" in out
    assert "L=2  verified model: hardmax" in out
    assert "minimal depth with 1 head per layer: 2" in out
    files = sorted(os.listdir(certs))
    assert files == ["tm-l2-alphabet2-L1-H1.json"]
    assert cd.check(json.load(open(certs / files[0])))[0]
    from depthcert.cli.verify_construction import _verify_construction

    code = run_main(_verify_construction, ["tm", "--l", "2", "--alphabet", "2", "--weights", str(weights)])
    out = capsys.readouterr().out
    assert code == 0 and "VERIFIED" in out, out


@pytest.mark.parametrize("argv,needle", [
    (["--task", "icqa", "--k", "2", "--heads", "1", "--max-clauses", "100"], "--max-clauses 100"),
    (["--task", "icqa", "--k", "2", "--heads", "9"], "--heads 9"),
    (["--task", "nosuch", "--heads", "1"], "unknown task"),
    (["--task", "tm", "--l", "2", "--heads", "1", "--hops", "2"], "--hops"),
    (["--task", "ictm", "--k", "3", "--l", "3", "--heads", "1"], "points"),
    (["--task", "copy", "--length", "2", "--heads", "1", "--k", "2"], "--k"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, capsys, monkeypatch):
    # refused before any search: a search would call decide
    import depthcert.proofs.depth as depth

    monkeypatch.setattr(depth, "decide", lambda *a, **k: pytest.fail("searched before refusing"))
    assert run_main(_find_depth, argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


LARGE = 2_000_000  # bytes: a stored certificate this large is re-checked in the slow run only


@pytest.mark.parametrize("path", [pytest.param(p, id=os.path.basename(p),
                                               marks=[pytest.mark.slow] if os.path.getsize(p) > LARGE else [])
                                  for p in STORED])
def test_stored_certificates_recheck(path):
    with open(path, encoding="utf-8") as fh:
        ok, msg = cd.check(json.load(fh))
    assert ok, (path, msg)


def test_every_stored_certificate_is_rechecked_somewhere():
    assert STORED, "no stored depth certificates"
    assert sum(os.path.getsize(p) <= LARGE for p in STORED) >= 10  # the default run re-checks most of them
