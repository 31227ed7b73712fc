"""The all-sizes re-checker re-derives what it certifies (proofs/check_all_sizes.py) and
`check-certificate FILE --rebuild` binds a certificate to its construction.

Every fault is made by a mechanism applied to several certificates (icqa for every size, tm at l,
multi-hop doubling at (k, hops), multi-hop linear for every hops): the read-out rescaled (with and
without the closed value rescaled and re-hashed), W_O rows swapped together with the labels, a
representative replaced by a copy of another with the same orbit size, a relabelled variant name,
a changed label rule, H0 that is not the one-hot embedding."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest

from depthcert.checkers.tasks import make_task
from depthcert.cli.check_certificate import check_certificate_main
from depthcert.proofs import check_all_sizes as C
from depthcert.proofs.all_sizes import prove

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "proofs", "check_all_sizes.py")
STORED = sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "all_sizes", "*.json")))
ONE_LAYER = sorted(glob.glob(os.path.join(ROOT, "proofs", "certificates", "*.json")))

CASES = {
    "icqa": (("icqa", {}), None),
    "tm3": (("tm", {"l": 3}), "ternary"),
    "doubling": (("multihop", {"k": 2, "hops": 2}), "doubling"),
    "linear": (("multihop", {"k": 2, "hops": 1}), "linear"),
}


@pytest.fixture(scope="module")
def certs():
    out = {}
    for key, ((name, opts), variant) in CASES.items():
        rep = prove(make_task(name, **opts), variant)
        assert rep.certificate is not None and rep.content_hash, (key, rep.status, rep.reason)
        out[key] = json.loads(json.dumps({**rep.to_json(), "certificate": rep.certificate}))
    return out


def copy(x):
    return json.loads(json.dumps(x))


def verdict(data):
    """(exit code, message) of the standalone checker run in-process (2: Invalid)."""
    try:
        return C.check_data(data)
    except (C.Invalid, KeyError, TypeError, ValueError, IndexError) as exc:
        return 2, str(exc)


def scale_terms(terms, c):
    return [[m, str(Fraction(v) * c)] for m, v in terms]


def rehash(cert):
    cert["content_hash"] = "sha256:" + hashlib.sha256(
        json.dumps(cert["value"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def rescaled(data, c, value_too):
    """Every W_O entry times c, every margin (tree, certificate, report) times c: a consistent rescale."""
    d = copy(data)
    cert = d["certificate"]
    for pt in cert["points"]:
        pt["W_O"] = [[r, k, p, scale_terms(v, c)] for r, k, p, v in pt["W_O"]]
        stack = [pt.get("tree", {})]
        while stack:
            node = stack.pop()
            for m in node.get("margins", {}).values():
                m["value"] = scale_terms(m["value"], c)
                m["text"] = str(Fraction(m["text"]) * c) if "/" in m["text"] or m["text"].lstrip("-").isdigit() else m["text"]
            stack += node.get("children", [])
    margin = str(Fraction(cert["margin"]) * c)
    cert["margin"] = margin
    d["margin"] = {"exact": margin, "decimal": margin}
    if value_too:
        cert["value"]["W_O"] = [[a, b, p, scale_terms(v, c)] for a, b, p, v in cert["value"]["W_O"]]
        rehash(cert)
        d["content_hash"] = cert["content_hash"]
    return d


@pytest.mark.parametrize("key", ["icqa", "tm3", "doubling", "linear"])
def test_the_producers_certificates_are_valid_with_the_normalized_margin(certs, key):
    code, line = verdict(certs[key])
    assert code == 0, line
    cert = certs[key]["certificate"]
    scale = C.readout_scale(cert["value"]["W_O"])
    assert f"minimum margin {cert['margin']} (normalized {Fraction(cert['margin']) / scale}:" in line
    assert cert["content_hash"] in line and "labels by the task's rule" in line


@pytest.mark.parametrize("key", ["icqa", "tm3", "doubling", "linear"])
def test_a_rescaled_readout_is_rejected_or_claims_no_larger_normalized_margin(certs, key, tmp_path, capsys):
    data = certs[key]
    # tables rescaled, the closed value left: the tables are not the value's
    code, msg = verdict(rescaled(data, 2, value_too=False))
    assert code == 2 and "W_O is not the value's" in msg, msg
    # the value rescaled too and re-hashed: consistent, but the normalized margin is the construction's,
    # and the binding to the construction (its content hash rebuilt) fails
    twice = rescaled(data, 2, value_too=True)
    code, line = verdict(twice)
    cert = data["certificate"]
    norm = Fraction(cert["margin"]) / C.readout_scale(cert["value"]["W_O"])
    assert code == 0 and f"minimum margin {Fraction(cert['margin']) * 2} (normalized {norm}:" in line, line
    if key in ("icqa", "doubling"):  # the rebuild runs the prover again (seconds): two of the four
        path = tmp_path / "twice.json"
        path.write_text(json.dumps(twice))
        code = check_certificate_main([str(path), "--rebuild"])
        out = capsys.readouterr().out
        assert code == 1 and "not bound" in out and cert["content_hash"] in out, out


def swapped_labels(data, with_value):
    """In every point W_O's rows of the label class and another single class swapped, the label moved
    with them (the margins are unchanged: a model wrong on every point that claims the same margins)."""
    d = copy(data)
    cert = d["certificate"]
    every = cert.get("kind") == "every-hops"
    for pt in cert["points"]:
        names = [c[0] for c in pt["classes"]]
        lab = pt["start"] if every else pt["label"]
        others = [c[0] for c in pt["classes"] if c[0] != lab]
        other = next((c[0] for c in pt["classes"] if c[1] is None and c[0] != lab), others[0])  # icqa: A@Tr
        a, b = names.index(lab), names.index(other)
        swap = {a: b, b: a}
        pt["W_O"] = sorted([[swap.get(r, r), k, p, v] for r, k, p, v in pt["W_O"]], key=lambda e: (e[0], e[1], e[2]))
        if every:
            pt["start"] = other
        else:
            pt["label"] = other
            ren = {lab: other, other: lab}
            stack = [pt["tree"]]
            while stack:
                node = stack.pop()
                if "margins" in node:
                    node["margins"] = {ren.get(n, n): m for n, m in node["margins"].items()}
                stack += node.get("children", [])
    if with_value:  # tm: the value's classes are single families: swap two of its W_O rows as well
        names = [f for _, _, fams in cert["value"]["classes"] for f in fams]
        a, b = names[0], names[1]
        ren = {a: b, b: a}
        cert["value"]["W_O"] = sorted([[ren.get(r, r), k, p, v] for r, k, p, v in cert["value"]["W_O"]])
        rehash(cert)
    return d


@pytest.mark.parametrize("key", ["icqa", "tm3", "doubling", "linear"])
def test_readout_rows_swapped_with_the_labels_are_rejected(certs, key):
    code, msg = verdict(swapped_labels(certs[key], with_value=False))
    assert code in (1, 2) and code != 0, msg


def test_a_label_against_the_tasks_rule_is_rejected_even_when_tables_and_value_agree():
    """tm at l = 2: the value's W_O rows of AA and AB swapped and re-hashed, every point's rows and
    labels with them: tables, value and hash agree and every margin is > 0, but each label is not the
    template of its sequence."""
    rep = prove(make_task("tm", l=2), "ternary")
    data = json.loads(json.dumps({**rep.to_json(), "certificate": rep.certificate}))
    d = copy(data)
    cert = d["certificate"]
    ren = {"cls:AA": "cls:AB", "cls:AB": "cls:AA"}
    cert["value"]["W_O"] = sorted([[ren.get(r, r), k, p, v] for r, k, p, v in cert["value"]["W_O"]])
    rehash(cert)
    for pt in cert["points"]:
        names = [c[0] for c in pt["classes"]]
        a, b = names.index("cls:AA"), names.index("cls:AB")
        sw = {a: b, b: a}
        pt["W_O"] = sorted([[sw.get(r, r), k, p, v] for r, k, p, v in pt["W_O"]], key=lambda e: (e[0], e[1], e[2]))
        pt["label"] = ren[pt["label"]]
        pt["tree"]["margins"] = {ren.get(n, n): m for n, m in pt["tree"]["margins"].items()}
    code, msg = verdict(d)
    assert code == 2 and "the task's rule gives" in msg, msg


@pytest.mark.parametrize("key", ["tm3", "doubling", "linear"])
def test_a_representative_copied_over_another_of_the_same_orbit_size_is_rejected(certs, key):
    data = certs[key]
    pts = data["certificate"]["points"]
    pairs = [(i, j) for i in range(len(pts)) for j in range(len(pts)) if i != j and pts[i]["sorts"] == pts[j]["sorts"]]
    assert pairs
    for i, j in pairs[:3]:
        d = copy(data)
        dup = copy(pts[i])
        dup["representative"] = pts[j]["representative"]
        d["certificate"]["points"][j] = dup
        code, msg = verdict(d)
        assert code == 2 and "in one orbit" in msg, msg


@pytest.mark.parametrize("key", ["icqa", "tm3", "doubling", "linear"])
def test_a_relabelled_variant_name_is_rejected(certs, key, tmp_path, capsys):
    data = certs[key]
    d = copy(data)
    d["certificate"]["variant"] = d["variant"] = "made-up"
    code, msg = verdict(d)
    assert code == 2 and "is not a variant of task" in msg, msg
    if key == "doubling":  # a real variant's name on doubling's tables: valid alone, not bound
        d = copy(data)
        d["certificate"]["variant"] = d["variant"] = "paper"
        assert verdict(d)[0] == 0
        path = tmp_path / "paper.json"
        path.write_text(json.dumps(d))
        code = check_certificate_main([str(path), "--rebuild"])
        out = capsys.readouterr().out
        assert code == 1 and "not bound" in out, out


def test_a_changed_every_hops_label_rule_is_rejected(certs):
    data = certs["linear"]
    for i, pt in enumerate(data["certificate"]["points"]):
        if len(pt["next"]) < 2:
            continue
        d = copy(data)
        q = d["certificate"]["points"][i]
        a, b = sorted(q["next"])[:2]
        q["next"] = {**q["next"], a: q["next"][b], b: q["next"][a]} if q["next"][a] != q["next"][b] else \
            {**q["next"], a: b if q["next"][a] != b else a}
        code, msg = verdict(d)
        assert code in (1, 2), msg
        if code == 2:
            assert "the task's (f on the sources)" in msg, msg
        return
    pytest.fail("no representative with a two-label map")


@pytest.mark.parametrize("key", ["icqa", "tm3", "doubling"])
def test_an_embedding_that_is_not_one_hot_is_rejected(certs, key):
    """The sequence a label rule reads is H0 read as the one-hot embedding: an entry 2, a second token
    row on a column, or a row that is neither a token nor a position is refused."""
    cert = certs[key]["certificate"]
    nv = len(cert["params"])
    for edit, needle in ((lambda h0: [[h0[0][0], h0[0][1], h0[0][2], [[m, "2"] for m, _ in h0[0][3]]]] + h0[1:], "is not 1"),
                         (lambda h0: h0 + [[next(r for r, c, _, _ in h0 if r != h0[0][0]), h0[0][1], h0[0][2], h0[0][3]]],
                          "two|not its member"),):
        d = copy(cert)
        d["points"][0]["H0"] = edit(d["points"][0]["H0"])
        with pytest.raises(C.Invalid, match=needle):
            C.task_side(d, nv)
    d = copy(cert)
    rows = d["points"][0]["rows"]
    other = next((i for i, (name, _) in enumerate(rows) if not name.startswith(("tok:", "pos"))), None)
    if other is not None:
        d["points"][0]["H0"].append([other, 0, "", [[[0] * nv, "1"]]])
        with pytest.raises(C.Invalid, match="token and position rows only|pattern"):
            C.task_side(d, nv)


def test_the_command_line_checker_exits_2_with_one_line(certs, tmp_path):
    path = tmp_path / "dup.json"
    d = copy(certs["tm3"])
    pts = d["certificate"]["points"]
    i, j = next((i, j) for i in range(len(pts)) for j in range(len(pts)) if i != j and pts[i]["sorts"] == pts[j]["sorts"])
    pts[j] = {**copy(pts[i]), "representative": pts[j]["representative"]}
    path.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, CHECKER, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "in one orbit" in r.stderr


def test_rebuild_binds_a_genuine_certificate(certs, tmp_path, capsys):
    path = tmp_path / "icqa.json"
    path.write_text(json.dumps(certs["icqa"]))
    code = check_certificate_main([str(path), "--rebuild", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert code == 0 and info["verdict"] == "valid" and info["bound"] is True
    assert info["content_hash"] == certs["icqa"]["content_hash"] and "bound:" in info["binding_message"]
    code = check_certificate_main([str(path)])
    out = capsys.readouterr().out
    assert code == 0 and "not bound here" in out


@pytest.mark.parametrize("path", STORED, ids=[os.path.basename(p) for p in STORED])
def test_stored_all_sizes_certificates_recheck_and_are_bound(path, capsys):
    with open(path) as fh:
        assert verdict(json.load(fh))[0] == 0
    code = check_certificate_main([path, "--rebuild"])
    out = capsys.readouterr().out
    assert code == 0 and "bound:" in out, out


@pytest.mark.parametrize("path", ONE_LAYER, ids=[os.path.basename(p) for p in ONE_LAYER])
def test_stored_one_layer_certificates_still_check_and_take_no_rebuild(path, capsys):
    assert check_certificate_main([path]) == 0
    assert check_certificate_main([path, "--rebuild"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--rebuild" in err


@pytest.mark.parametrize("argv", [["icqa", "--k", "2"], ["sc", "--length", "2", "--alphabet", "2"],
                                  ["mod-count", "--n", "4", "--p", "3", "--variant", "count"],
                                  ["multihop", "--k", "2", "--hops", "2", "--n-entities", "3", "--variant", "doubling"]])
def test_the_finite_check_prints_the_hash_the_proof_proves(argv, capsys):
    from depthcert.cli.errors import run_main
    from depthcert.cli.verify_construction import _verify_construction

    assert run_main(_verify_construction, argv + ["--json"]) == 0
    finite = json.loads(capsys.readouterr().out)
    run_main(_verify_construction, argv + ["--all-sizes", "--json"])
    proof = json.loads(capsys.readouterr().out)
    assert finite["content_hash"].startswith("sha256:") and finite["value_readout"] == "the value's own"
    assert finite["content_hash"] == proof["content_hash"] == proof["certificate"]["content_hash"]


FAMILY = '''
from depthcert.constructions import copy_matching


def build(task, as_printed=False):
    return copy_matching.build(task, as_printed)
'''


def test_a_family_certificate_is_bound_with_its_family(tmp_path, capsys):
    from depthcert.cli.errors import run_main
    from depthcert.cli.verify_construction import _verify_construction

    fam = tmp_path / "fam.py"
    fam.write_text(FAMILY)
    assert run_main(_verify_construction, ["icqa", "--family", f"{fam}:build", "--all-sizes", "--json"]) == 0
    path = tmp_path / "fam.json"
    path.write_text(capsys.readouterr().out)
    assert check_certificate_main([str(path), "--rebuild"]) == 2
    assert "--family" in capsys.readouterr().err
    assert check_certificate_main([str(path), "--rebuild", "--family", f"{fam}:build"]) == 0
    assert "bound:" in capsys.readouterr().out
