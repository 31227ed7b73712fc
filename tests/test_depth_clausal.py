"""Version-3 (clausal) depth certificates: the search (proofs/depth_clausal.py) and the independent
checker (proofs/check_clausal.py): refutations re-check, a depth with a verified model is never
refuted, and every kind of false edit is refused."""
import copy
import itertools
import json
import os

import pytest

from depthcert.proofs import check_clausal as cc
from depthcert.proofs import check_depth as cd
from depthcert.proofs import depth_clausal as dc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _points(task, params, alphabet, n):
    """Every labelled sequence of length n over the alphabet (a string or a list of tokens)."""
    rule = cd.LABEL_RULES[task]
    out = []
    for toks in itertools.product(alphabet, repeat=n):
        lab = rule(list(toks), params)
        if lab is not None:
            out.append((toks, lab))
    return out


@pytest.fixture(scope="module")
def parity3():
    pts = _points("parity", {"n": 3}, "01", 3)
    out = dc.refute(pts, 1, 1, False, {"name": "parity", "params": {"n": 3}}, max_rounds=500)
    assert out.status == "refuted", out
    return out.certificate


def test_parity_one_layer_is_refuted_and_rechecked(parity3):
    ok, msg = cd.check(parity3)
    assert ok, msg
    assert msg.startswith("valid: version 3, ")
    proof = parity3["proof"]
    assert proof["steps"][-1] == [] and proof["lemmas"]
    assert {"head", "readout"} >= {k for lem in proof["lemmas"] for k in lem if k != "clause"}
    # the checker derives the base clauses itself: lemmas are what rules the class out
    without = copy.deepcopy(parity3)
    without["proof"]["lemmas"] = []
    assert cd.classify(without)[0] == "invalid"


def test_composition_one_layer_refuted_with_readout_lemmas():
    pts = _points("composition", {"L": 2, "N": 2}, "01", 5)
    out = dc.refute(pts, 1, 1, False, {"name": "composition", "params": {"L": 2, "N": 2}}, max_rounds=1000)
    assert out.status == "refuted"
    assert cd.check(out.certificate)[0]
    assert any("readout" in lem for lem in out.certificate["proof"]["lemmas"])
    assert any("head" in lem for lem in out.certificate["proof"]["lemmas"])


@pytest.mark.parametrize("task,params,alphabet,n", [("parity", {"n": 3}, "01", 3),
                                                   ("tm", {"l": 2, "alphabet": 2}, ["t0", "t1", "<cls>"], 3)])
def test_a_depth_with_a_verified_model_is_never_refuted(task, params, alphabet, n):
    """parity n = 3 and TM l = 2 have verified two-layer models (docs/depth.md, section 4): the
    clausal search at L = 2 must end with every point fitting, never with a certificate."""
    pts = _points(task, params, alphabet, n)
    assert len(pts) >= 4
    out = dc.refute(pts, 2, 1, False, {"name": task, "params": params}, max_rounds=2000)
    assert out.status == "fits", out


def _mutate(cert, fn):
    c = copy.deepcopy(cert)
    fn(c)
    return cd.classify(c)[0]


def _first(cert, kind):
    return next(lem for lem in cert["proof"]["lemmas"] if kind in lem)


EDITS = [
    ("flip a head lemma's literal", lambda c: _first(c, "head")["clause"].__setitem__(0, -_first(c, "head")["clause"][0]),
     ("invalid",)),
    ("scale one Farkas coefficient", lambda c: _first(c, "head")["head"]["y"][0].__setitem__(1, "7/3"), ("invalid",)),
    ("a negative coefficient", lambda c: _first(c, "readout")["readout"][0].__setitem__(2, "-1"), ("invalid",)),
    ("a read-out row on the point's own label",
     lambda c: _first(c, "readout")["readout"][0].__setitem__(1, c["points"][_first(c, "readout")["readout"][0][0]]["label"]),
     ("invalid",)),
    ("drop the empty clause", lambda c: c["proof"]["steps"].pop(), ("invalid", "malformed")),
    ("a step that does not follow", lambda c: c["proof"]["steps"].insert(0, [1]), ("invalid",)),
    ("a literal out of range", lambda c: c["proof"]["steps"].insert(0, [10 ** 6]), ("malformed",)),
    ("an atom twice", lambda c: c["proof"]["atoms"].append(c["proof"]["atoms"][0]), ("malformed",)),
    ("an atom missing", lambda c: c["proof"]["atoms"].pop(), ("invalid", "malformed")),
    ("an unknown key", lambda c: c["proof"].__setitem__("note", "x"), ("malformed",)),
    ("an unknown lemma key", lambda c: _first(c, "head").__setitem__("note", "x"), ("malformed",)),
    ("a wrong label", lambda c: c["points"][0].__setitem__("label", "0" if c["points"][0]["label"] == "1" else "1"),
     ("invalid",)),
    ("a tree instead of a proof", lambda c: c.__setitem__("tree", c.pop("proof")), ("malformed",)),
    ("a float coefficient", lambda c: _first(c, "head")["head"]["y"][0].__setitem__(1, 0.5), ("malformed",)),
    ("a head lemma naming another layer", lambda c: _first(c, "head")["head"].__setitem__("layer", 2), ("malformed",)),
]


@pytest.mark.parametrize("name,edit,want", EDITS, ids=[e[0] for e in EDITS])
def test_false_edits_are_refused(parity3, name, edit, want):
    assert _mutate(parity3, edit) in want


def test_the_checker_runs_alone_on_a_version3_certificate(parity3, tmp_path):
    """`python -I proofs/check_depth.py FILE` from another folder: nothing but Python and the two
    checker files (check_depth.py imports check_clausal.py from its own folder)."""
    import subprocess
    import sys

    path = tmp_path / "c.json"
    path.write_text(json.dumps(parity3))
    checker = os.path.join(ROOT, "proofs", "check_depth.py")
    r = subprocess.run([sys.executable, "-I", checker, str(path)], capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("valid: version 3, "), (r.stdout, r.stderr)
    bad = copy.deepcopy(parity3)
    bad["proof"]["steps"].insert(0, [1])
    path.write_text(json.dumps(bad))
    r = subprocess.run([sys.executable, "-I", checker, str(path)], capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 1 and r.stdout.startswith("invalid: proof.steps[0]"), (r.stdout, r.stderr)


def test_a_lemma_must_determine_its_vectors():
    """A read-out lemma whose clause leaves a selection open is refused (the vectors it uses must be
    given by the clause's "s" literals)."""
    pts = _points("parity", {"n": 3}, "01", 3)
    out = dc.refute(pts, 1, 1, False, {"name": "parity", "params": {"n": 3}}, max_rounds=500)
    c = copy.deepcopy(out.certificate)
    atoms = c["proof"]["atoms"]
    lem = _first(c, "readout")
    sel = [x for x in lem["clause"] if atoms[abs(x) - 1][0] == "s"]
    lem["clause"].remove(sel[0])
    assert cd.classify(c)[0] == "invalid"


def test_unit_propagation_checks_steps():
    prop = cc._Propagator(3)
    prop.add([1, 2])
    prop.add([-1, 2])
    assert prop.implied([2])
    assert not prop.implied([1])
    assert not prop.implied([3])
    prop.add([-2, 3])
    assert prop.implied([3])
    prop.add([-3])
    assert prop.implied([])  # the clause set is now inconsistent


def test_base_clause_guard_refuses_before_building():
    pts = [(tuple("0" * 200), "0")]
    C = cc.Clausal(pts, 1, 1, False)
    C.parse_atoms([["s", 1, 0, 0, 199, 0]])
    with pytest.raises(cc.Invalid, match="base clauses exceed"):
        C.base_clauses()


def test_the_encoding_guard_stops_the_search_before_allocating(monkeypatch):
    monkeypatch.setattr(dc, "MAX_CLAUSES", 100)
    pts = _points("parity", {"n": 3}, "01", 3)
    out = dc.refute(pts, 1, 1, False, None, max_rounds=10)
    assert out.status == "too large" and out.work.rounds == 0


def test_budget_is_rounds_not_seconds():
    pts = _points("parity", {"n": 4}, "01", 4)
    a = dc.refute(pts, 1, 2, False, None, max_rounds=5)
    b = dc.refute(pts, 1, 2, False, None, max_rounds=5)
    assert a.status == b.status == "budget"
    assert (a.work.rounds, a.work.lemmas, a.work.lps) == (b.work.rounds, b.work.lemmas, b.work.lps)


def _stored_version3():
    import glob

    out = []
    for p in sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "depth", "*.json"))):
        with open(p, encoding="utf-8") as fh:
            if json.load(fh).get("version") == 3:
                out.append(p)
    return out


@pytest.mark.parametrize("path", _stored_version3(), ids=os.path.basename)
def test_stored_version3_certificates_name_their_task_and_sizes(path):
    """Each stored clausal certificate names its task and is stored under the name find-depth
    --certificates gives it (tests/test_depth.py re-checks every stored certificate)."""
    with open(path, encoding="utf-8") as fh:
        c = json.load(fh)
    assert c["task"] is not None and c["version"] == 3
    sizes = "-".join(f"{k}{v}" for k, v in c["task"]["params"].items())
    assert os.path.basename(path) == f"{c['task']['name']}-{sizes}-L{c['layers']}-H{c['heads']}.json"


def _find_depth_json(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.find_depth import _find_depth

    code = run_main(_find_depth, argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_clausal_fit_is_realised_and_verified(capsys):
    """Composition of two functions on N = 2 with two heads: the clausal search's selections on all
    32 points are realised with bilinear scores and verified on every point: one layer suffices."""
    code, doc = _find_depth_json(["--task", "composition", "--L", "2", "--N", "2", "--heads", "2", "--max-nodes", "20",
                                  "--max-layers", "1"], capsys)
    assert code == 0 and doc["exact"] and doc["minimal_depth"] == 1
    d = doc["depths"][0]
    assert d["outcome"] == "model" and d["model"]["verified"] and d["model"]["points_checked"] == 32
    assert "clausal" in d["model"]["source"] and d["work_rounds"] > 0


def test_max_rounds_zero_skips_the_clausal_search(capsys):
    code, doc = _find_depth_json(["--task", "composition", "--L", "2", "--N", "2", "--heads", "2", "--max-nodes", "20",
                                  "--max-layers", "1", "--max-rounds", "0"], capsys)
    assert code == 3 and doc["depths"][0]["outcome"] == "open" and "work_rounds" not in doc["depths"][0]
    assert "clausal" not in doc["depths"][0]["reason"] and doc["max_rounds"] == 0
