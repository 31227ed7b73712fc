"""Hostile input for every command and file format: exit 2, one line naming what is wrong, no
traceback, nothing written to --out / --export.  Plus hypothesis fuzzing of every loader: a clean
BadInput (or, for the certificate checker, a "malformed"/"invalid" status) or success, never any
other exception.

Commands: verify-construction (depthcert/cli/verify_construction.py), find-dependence and
check-certificate (depthcert/cli/find_dependence.py, check_certificate.py, skipped while absent),
certificate.py's own main.  Loaders: checkers/weights_file.py, checkers/tasks/dataset_file.py,
checkers/certificate.py, checkers/atomic.py.
"""
from __future__ import annotations

import copy
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from depthcert.checkers import certificate as cc
from depthcert.checkers.atomic import read_json, write_json_atomic
from depthcert.checkers.tasks.dataset_file import dataset_from_json
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import ICQA
from depthcert.checkers.weights_file import model_from_json, model_to_json
from depthcert.constructions import registry
from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction

try:
    from depthcert.cli import check_certificate as cli_check_certificate
    from depthcert.cli import find_dependence as cli_dependence
except ImportError:  # find-dependence / check-certificate not there yet
    cli_dependence = cli_check_certificate = None

needs_dependence = pytest.mark.skipif(cli_dependence is None, reason="depthcert/cli/find_dependence.py not present yet")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

TASK = ICQA(k=2)  # 288 points, 2 layers, d' = 17
VALID_WEIGHTS = model_to_json(registry.build(TASK).model)
VALID_DATASET = {
    "format": "depthcert.dataset", "version": 1,
    "sequences": [["a", "b", "r"], ["b", "a", "r"], ["a", "a", "r"], ["b", "b", "r"], ["a", "r"]],
    "labels": ["AB", "AB", "AA", "AA", "A"],
}
# TM of length 2 needs no more than this: aa + bb = ab + ba (one group: same length, last token)
VALID_CERT = {
    "format": "depthcert.certificate", "version": 1,
    "points": [
        {"tokens": ["a", "a", "<cls>"], "label": "AA", "mu": {"AB": 1}},
        {"tokens": ["b", "b", "<cls>"], "label": "AA", "mu": {"AB": 1}},
        {"tokens": ["a", "b", "<cls>"], "label": "AB", "mu": {"AA": 1}},
        {"tokens": ["b", "a", "<cls>"], "label": "AB", "mu": {"AA": 1}},
    ],
}


def run(fn, argv, capsys):
    code = run_main(fn, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_bad_input(code, out, err, needle):
    assert code == 2, (code, out, err)
    assert out == "", out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert needle.lower() in err.lower(), (needle, err)


def no_files_but(folder, allowed):
    left = sorted(set(os.listdir(folder)) - set(allowed))
    assert left == [], left  # no output, no stray temporary file


# --------------------------------------------------------------------------- sanity of fixtures


def test_valid_fixtures_are_valid(tmp_path, capsys):
    w = tmp_path / "w.json"
    w.write_text(json.dumps(VALID_WEIGHTS))
    code, out, _ = run(_verify_construction, ["icqa", "--k", "2", "--weights", str(w), "--json"], capsys)
    assert code == 0 and json.loads(out)["verdict"] == "verified"
    assert dataset_from_json(VALID_DATASET).size == 5
    assert cc.classify(VALID_CERT)[0] == "valid"


# --------------------------------------------------------------------------- unreadable files

def _file_cases(valid_text: str):
    return [
        ("missing", None, "no such file"),
        ("directory", "DIR", "is a directory"),
        ("binary bytes", b"\x00\xff\xfe\x80garbage", "cannot read"),
        ("empty file", "", "not json"),
        ("not JSON", "format = weights\n", "not json"),
        ("truncated", valid_text[: len(valid_text) // 2], "not json"),
        ("UTF-8 BOM", "\ufeff" + valid_text, "not json"),
        ("deeply nested", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("top-level array", "[1, 2, 3]", "object"),
        ("top-level null", "null", "object"),
        ("top-level string", '"depthcert"', "object"),
        ("top-level number", "1" * 5000, ""),
    ]


def _materialise(tmp_path, name, content):
    path = tmp_path / "in.json"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name,content,needle", _file_cases(json.dumps(VALID_WEIGHTS)),
                         ids=[c[0] for c in _file_cases("x")])
def test_verify_construction_weights_file_unreadable(tmp_path, capsys, name, content, needle):
    path = _materialise(tmp_path, name, content)
    code, out, err = run(_verify_construction, ["icqa", "--k", "2", "--weights", path,
                                                "--export", str(tmp_path / "export.json")], capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["in.json"])


@pytest.mark.skipif(IS_ROOT, reason="root reads files without read permission")
def test_weights_file_without_permission(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(VALID_WEIGHTS))
    path.chmod(0)
    code, out, err = run(_verify_construction, ["icqa", "--k", "2", "--weights", str(path)], capsys)
    assert_bad_input(code, out, err, "permission denied")


def test_unreadable_file_by_permission_even_as_root(tmp_path):
    """Root bypasses mode bits, so exercise the OSError branch of read_json with a FIFO-free trick:
    a path whose parent is a file (ENOTDIR) fails the same way a permission error does."""
    parent = tmp_path / "file"
    parent.write_text("x")
    with pytest.raises(BadInput, match="cannot read weights file .*Not a directory"):
        read_json(str(parent / "w.json"), "weights")


# --------------------------------------------------------------------------- weights file contents


def _set(path, value):
    def f(o):
        cur = o
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
    return f


def _pop(path):
    def f(o):
        cur = o
        for k in path[:-1]:
            cur = cur[k]
        cur.pop(path[-1])
    return f


QK00 = ("layers", 0, 0, "W_QK", 0, 0)
WEIGHT_CASES = [
    # wrong shapes
    ("first W_QK missing a row", _pop(("layers", 0, 0, "W_QK", 3)), "layout sizes add up to 17 but W_QK is 16x16"),
    ("W_QK missing a row", _pop(("layers", 1, 0, "W_QK", 3)), "layers[1][0].W_QK: has 16 rows, expected 17"),
    ("W_QK short row", _pop(("layers", 0, 0, "W_QK", 2, 0)), "W_QK[2]: has 16 entries"),
    ("W_V of layer 1 missing a row", _pop(("layers", 1, 0, "W_V", 0)), "layers[1][0].W_V"),
    ("W_O missing a row", _pop(("W_O", 0)), "W_O: has 3 rows, expected 4"),
    ("W_O short row", _pop(("W_O", 1, 0)), "W_O[1]"),
    ("W_QK a scalar", _set(("layers", 0, 0, "W_QK"), 1), "W_QK must be a non-empty list"),
    ("W_V a scalar", _set(("layers", 0, 0, "W_V"), 1), "W_V: expected a non-empty list"),
    ("W_V row a number", _set(("layers", 0, 0, "W_V", 0), 7), "W_V[0]: expected a list"),
    ("layers empty", _set(("layers",), []), "layers"),
    ("layer without heads", _set(("layers", 1), []), "layers[1]"),
    ("head missing W_V", _pop(("layers", 0, 0, "W_V")), "W_V is missing"),
    ("head extra field", _set(("layers", 0, 0, "W_K"), [[1]]), "unknown field 'W_K'"),
    ("head not an object", _set(("layers", 1, 0), [[1]]), "layers[1][0]"),
    # entries
    ("entry text", _set(QK00, "abc"), "'abc' is not an exact rational"),
    ("entry float", _set(QK00, 0.5), "W_QK[0][0]"),
    ("entry null", _set(QK00, None), "W_QK[0][0]"),
    ("entry bool", _set(QK00, True), "W_QK[0][0]"),
    ("entry list", _set(QK00, [1]), "W_QK[0][0]"),
    ("entry NaN string", _set(QK00, "nan"), "'nan' is not an exact rational"),
    ("entry NaN float", _set(QK00, float("nan")), "W_QK[0][0]"),
    ("entry inf string", _set(QK00, "inf"), "'inf' is not an exact rational"),
    ("entry -Infinity string", _set(QK00, "-Infinity"), "is not an exact rational"),
    ("entry inf float", _set(QK00, float("inf")), "W_QK[0][0]"),
    ("entry 1e3 string", _set(QK00, "1e3"), "not an exact rational"),
    ("entry hex", _set(QK00, "0x10"), "not an exact rational"),
    ("entry non-ASCII digit", _set(QK00, "\u0663"), "not an exact rational"),
    ("entry p/q/r", _set(QK00, "1/2/3"), "not an exact rational"),
    ("entry zero denominator", _set(QK00, "1/0"), "zero denominator"),
    ("entry 0/0", _set(QK00, "0/0"), "zero denominator"),
    ("entry negative denominator", _set(QK00, "1/-2"), "not an exact rational"),
    ("entry 5000-digit string", _set(QK00, "7" * 5000), "more than 4000 digits"),
    ("entry 5000-digit denominator", _set(QK00, "1/" + "7" * 5000), "more than 4000 digits"),
    ("entry 5000-digit int", _set(QK00, 7 * 10**5000), "more than 4000 digits"),
    # header and metadata
    ("format wrong", _set(("format",), "depthcert.weight"), "format"),
    ("format missing", _pop(("format",)), "format"),
    ("version 3", _set(("version",), 3), "version"),
    ("version true", _set(("version",), True), "version"),
    ("version string", _set(("version",), "1"), "version"),
    ("unknown field", _set(("extra",), 1), "unknown field 'extra'"),
    ("name not a string", _set(("name",), 5), "name"),
    ("max_length negative", _set(("max_length",), -1), "max_length"),
    ("max_length zero", _set(("max_length",), 0), "max_length"),
    ("max_length string", _set(("max_length",), "8"), "max_length"),
    ("max_length huge", _set(("max_length",), 10**30), "smaller than vocabulary"),
    ("vocab duplicates", lambda o: o.__setitem__("vocab", o["vocab"][:-1] + [o["vocab"][0]]), "duplicate"),
    ("vocab wrong size", lambda o: o.__setitem__("vocab", o["vocab"] + ["zz"]), "vocabulary"),
    ("vocab empty", _set(("vocab",), []), "vocab"),
    ("vocab entry null", _set(("vocab", 0), None), "vocab[0]"),
    ("classes lack labels", _set(("classes",), ["a0", "a1", "a2", "zz"]), "lack task labels"),
    ("classes duplicates", _set(("classes",), ["a0", "a0", "a1", "a2"]), "duplicates"),
    ("layout negative size", _set(("layout",), [{"name": "x", "size": -5}]), "size must be a non-negative int"),
    ("layout huge", _set(("layout",), [{"name": "x", "size": 10**7}]), "limit 4096"),
    ("layout wrong total", _set(("layout",), [{"name": "x", "size": 3}]), "add up to 3"),
    ("layout entry extra key", _set(("layout",), [{"name": "x", "size": 17, "y": 1}]), "layout[0]"),
    ("layout duplicate names", _set(("layout",), [{"name": "x", "size": 9}, {"name": "x", "size": 8}]), "duplicate"),
]


@pytest.mark.parametrize("name,mutate,needle", WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_verify_construction_malformed_weights(tmp_path, capsys, name, mutate, needle):
    obj = copy.deepcopy(VALID_WEIGHTS)
    mutate(obj)
    w = tmp_path / "w.json"
    w.write_text(json.dumps(obj))
    export = tmp_path / "export.json"
    code, out, err = run(_verify_construction, ["icqa", "--k", "2", "--weights", str(w), "--export", str(export)],
                         capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["w.json"])


# --------------------------------------------------------------------------- verify-construction options

OPTION_CASES = [
    (["icqa", "--k", "x"], "not an integer"),
    (["icqa", "--k", "1e3"], "not an integer"),
    (["icqa", "--k", "nan"], "not an integer"),
    (["icqa", "--k", "inf"], "not an integer"),
    (["icqa", "--k", ""], "not an integer"),
    (["icqa", "--k", "0"], "--k"),
    (["icqa", "--k", "-3"], "--k"),
    (["icqa", "--k"], "expected one argument"),
    (["icqa", "--bogus", "1"], "unrecognized arguments"),
    ([], "task"),
    ([""], "task"),
    (["nosuchtask"], "unknown task"),
    (["icqa", "--k", "1000000"], "more than 2^62"),
    (["icqa", "--k", "99999999999999999999999999"], "more than 2^62"),
    (["icqa", "--k", "30"], "more than 2^62"),
    (["icqa", "--n-questions", "1000000"], "more than 2^62"),
    (["icqa", "--k", "2", "--n-questions", "5000", "--n-answers", "2"], "limit 4096"),
    (["sc", "--length", "1000000"], "more than 2^62"),
    (["sc", "--length", "1000000", "--alphabet", "1"], "limit 4096"),
    (["sc", "--alphabet", "1000000"], "too large"),
    (["sc", "--seed", "-1"], "--seed"),
    (["sc", "--n-points", "0"], "--n-points"),
    (["sc", "--length", "2", "--n-points", "100"], "--n-points must be <= 9"),
    (["tm", "--l", "1000000"], "more than 2^62"),
    (["tm", "--l", "1000000", "--alphabet", "1"], "limit 4096"),
    (["tm", "--alphabet", "1000000"], "limit 4096"),
    (["ictm", "--l", "1000000"], "limit 4096"),
    (["ictm", "--k", "1000000"], "limit 4096"),
    (["multihop", "--k", "1000000"], "more than 2^62"),
    (["multihop", "--n-entities", "1000000"], "more than 2^62"),
    (["icqa", "--k", "2", "--point", "288"], "outside the dataset"),
    (["icqa", "--k", "2", "--point", "-1"], "--point"),
    (["icqa", "--k", "2", "--point", str(10**30)], "outside the dataset"),
    (["icqa", "--k", "2", "--batch-size", "0"], "--batch-size"),
    (["icqa", "--k", "2", "--batch-size", "-5"], "--batch-size"),
    (["icqa", "--k", "2", "--max-points", "0"], "--max-points"),
    (["icqa", "--k", "2", "--max-points", "-5"], "--max-points"),
    (["icqa", "--k", "2", "--variant", ""], "unknown --variant"),
    (["icqa", "--k", "2", "--weights", "w.json", "--as-printed"], "--weights"),
    (["icqa", "--k", "2", "--export", "/nonexistent-dir/e.json"], "does not exist"),
]


@pytest.mark.parametrize("argv,needle", OPTION_CASES, ids=[" ".join(a) or "<none>" for a, _ in OPTION_CASES])
def test_verify_construction_hostile_options(tmp_path, capsys, argv, needle):
    export = tmp_path / "export.json"
    extra = [] if "--export" in argv or not argv or argv == [""] else ["--export", str(export)]
    code, out, err = run(_verify_construction, argv + extra, capsys)
    assert_bad_input(code, out, err, needle)
    assert not export.exists()


def test_export_into_a_directory_is_one_line_and_leaves_no_temp_file(tmp_path, capsys):
    target = tmp_path / "adir"
    target.mkdir()
    code, out, err = run(_verify_construction, ["icqa", "--k", "2", "--export", str(target)], capsys)
    assert_bad_input(code, out, err, "cannot write")
    no_files_but(tmp_path, ["adir"])
    assert os.listdir(target) == []


def test_write_json_atomic_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(TypeError):
        write_json_atomic(str(tmp_path / "x.json"), {"a": object()})  # unserialisable: before any file
    with pytest.raises(BadInput, match="does not exist"):
        write_json_atomic(str(tmp_path / "no" / "x.json"), {})
    (tmp_path / "x.json").write_text("old")
    (tmp_path / "d").mkdir()
    with pytest.raises(BadInput, match="cannot write"):
        write_json_atomic(str(tmp_path / "d"), {"a": 1})
    assert sorted(os.listdir(tmp_path)) == ["d", "x.json"] and (tmp_path / "x.json").read_text() == "old"


def test_write_json_atomic_honours_the_umask(tmp_path):
    """Regression: mkstemp's 0600 leaked into every --export / --out file."""
    old = os.umask(0o022)
    try:
        write_json_atomic(str(tmp_path / "x.json"), {"a": 1})
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "x.json").st_mode & 0o777) == 0o644


# --------------------------------------------------------------------------- datasets

DATASET_CASES = [
    ("empty dataset", {"sequences": [], "labels": []}, "empty"),
    ("conflicting duplicate", {"sequences": [["a", "b"], ["a", "b"]], "labels": ["x", "y"]},
     "duplicate sequence with conflicting labels"),
    ("tokens mix str and int", {"sequences": [["a", 1]], "labels": ["x"]}, "mix"),
    ("tokens mix across sequences", {"sequences": [["a"], [1]], "labels": ["x", "y"]}, "mix"),
    ("labels mix", {"sequences": [["a"], ["b"]], "labels": ["x", 1]}, "mix"),
    ("token null", {"sequences": [["a", None]], "labels": ["x"]}, "sequences[0][1]"),
    ("token float", {"sequences": [["a", 1.5]], "labels": ["x"]}, "sequences[0][1]"),
    ("token NaN", {"sequences": [["a", float("nan")]], "labels": ["x"]}, "sequences[0][1]"),
    ("token bool", {"sequences": [["a", True]], "labels": ["x"]}, "sequences[0][1]"),
    ("token list", {"sequences": [["a", ["b"]]], "labels": ["x"]}, "sequences[0][1]"),
    ("token empty string", {"sequences": [["a", ""]], "labels": ["x"]}, "empty string"),
    ("label empty string", {"sequences": [["a"]], "labels": [""]}, "labels[0]"),
    ("label object", {"sequences": [["a"]], "labels": [{}]}, "labels[0]"),
    ("fewer labels", {"sequences": [["a"], ["b"]], "labels": ["x"]}, "1 labels for 2 sequences"),
    ("empty sequence", {"sequences": [[]], "labels": ["x"]}, "empty sequence"),
    ("sequences a string", {"sequences": "ab", "labels": ["x"]}, "sequences"),
    ("sequence a string", {"sequences": ["ab"], "labels": ["x"]}, "sequences[0]"),
    ("labels a dict", {"sequences": [["a"]], "labels": {"0": "x"}}, "labels"),
    ("sequences missing", {"labels": ["x"]}, "sequences"),
    ("labels missing", {"sequences": [["a"]]}, "labels"),
    ("unknown field", {"sequences": [["a"]], "labels": ["x"], "weights": 1}, "unknown field"),
    ("format wrong", {"format": "depthcert.weights", "sequences": [["a"]], "labels": ["x"]}, "format"),
    ("version 3", {"version": 3, "sequences": [["a"]], "labels": ["x"]}, "version"),
    ("version true", {"version": True, "sequences": [["a"]], "labels": ["x"]}, "version"),
    ("name not a string", {"name": 3, "sequences": [["a"]], "labels": ["x"]}, "name"),
]


def _dataset(fields):
    return {"format": "depthcert.dataset", "version": 1, **fields}


@pytest.mark.parametrize("name,fields,needle", DATASET_CASES, ids=[c[0] for c in DATASET_CASES])
def test_dataset_loader_hostile(name, fields, needle):
    with pytest.raises(BadInput) as exc:
        dataset_from_json(_dataset(fields))
    msg = str(exc.value)
    assert needle.lower() in msg.lower() and "\n" not in msg


def test_dataset_mixed_lengths_and_consistent_duplicates_are_accepted():
    t = dataset_from_json(_dataset({"sequences": [["a", "b"], ["a"], ["a", "b"]], "labels": ["x", "y", "x"]}))
    assert t.size == 3 and t.length == 2
    seen = sorted(int(i) for b in t.batches(2) for i in b.index)
    assert seen == [0, 1, 2]  # every point enumerated once, across both lengths


@needs_dependence
@pytest.mark.parametrize("name,fields,needle", DATASET_CASES[:12], ids=[c[0] for c in DATASET_CASES[:12]])
def test_find_dependence_hostile_dataset(tmp_path, capsys, name, fields, needle):
    d = tmp_path / "d.json"
    d.write_text(json.dumps(_dataset(fields)))
    code, out, err = run(cli_dependence._find_dependence_safe,
                         ["--dataset", str(d), "--out", str(tmp_path / "c.json"), "--export", str(tmp_path / "w.json")],
                         capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["d.json"])


@needs_dependence
@pytest.mark.parametrize("name,content,needle", _file_cases(json.dumps(VALID_DATASET)),
                         ids=[c[0] for c in _file_cases("x")])
def test_find_dependence_dataset_file_unreadable(tmp_path, capsys, name, content, needle):
    path = _materialise(tmp_path, name, content)
    code, out, err = run(cli_dependence._find_dependence_safe, ["--dataset", path, "--out", str(tmp_path / "c.json")],
                         capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["in.json"])


FD_OPTION_CASES = [
    ([], "--task"),
    (["--task", "icqa", "--dataset", "d.json"], "not allowed with"),
    (["--task", "nosuch"], "unknown task"),
    (["--task", "icqa", "--k", "0"], "--k"),
    (["--task", "icqa", "--k", "1000000"], "more than 2^62"),
    (["--task", "sc", "--length", "2", "--sample", "0"], "--sample"),
    (["--task", "sc", "--length", "2", "--sample", "-3"], "--sample"),
    (["--task", "sc", "--length", "2", "--search-seed", "x"], "--search-seed"),
    (["--task", "sc", "--length", "2", "--out", "same.json", "--export", "same.json"], "same file"),
    (["--dataset", "d.json", "--k", "3"], "does not apply"),
    (["--task", "tm", "--l", "2", "--bounds", "--bounds-seconds", "nan"], "--bounds-seconds"),
    (["--task", "tm", "--l", "2", "--bounds", "--bounds-seconds", "-1"], "--bounds-seconds"),
    (["--task", "tm", "--l", "2", "--bounds", "--bounds-seconds", "inf"], "--bounds-seconds"),
    (["--task", "tm", "--l", "2", "--bounds", "--bounds-seconds", "x"], "--bounds-seconds"),
]


@needs_dependence
@pytest.mark.parametrize("argv,needle", FD_OPTION_CASES, ids=[" ".join(a) or "<none>" for a, _ in FD_OPTION_CASES])
def test_find_dependence_hostile_options(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.json").write_text(json.dumps(VALID_DATASET))
    code, out, err = run(cli_dependence._find_dependence_safe, argv, capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["d.json"])


@needs_dependence
def test_find_dependence_out_into_missing_folder_writes_nothing(tmp_path, capsys):
    d = tmp_path / "d.json"
    d.write_text(json.dumps(_dataset({"sequences": [s["tokens"] for s in VALID_CERT["points"]],
                                      "labels": [s["label"] for s in VALID_CERT["points"]]})))
    code, out, err = run(cli_dependence._find_dependence_safe,
                         ["--dataset", str(d), "--out", str(tmp_path / "no" / "c.json"), "--json"], capsys)
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    no_files_but(tmp_path, ["d.json"])


# --------------------------------------------------------------------------- certificates

def _cert(mutate):
    obj = copy.deepcopy(VALID_CERT)
    mutate(obj)
    return obj


MALFORMED_CERTS = [
    ("top-level array", lambda o: None, "expected a JSON object"),
    ("format wrong", _set(("format",), "depthcert.cert"), "format"),
    ("version 2", _set(("version",), 2), "version"),
    ("version true", _set(("version",), True), "version"),
    ("points empty", _set(("points",), []), "points"),
    ("point a list", _set(("points", 0), ["a"]), "points[0]"),
    ("tokens empty", _set(("points", 0, "tokens"), []), "points[0].tokens"),
    ("token float", _set(("points", 0, "tokens", 0), 1.5), "tokens[0]"),
    ("token null", _set(("points", 0, "tokens", 0), None), "tokens[0]"),
    ("token bool", _set(("points", 0, "tokens", 0), True), "tokens[0]"),
    ("label bool", _set(("points", 0, "label"), True), "points[0].label"),
    ("labels mix", _set(("points", 0, "label"), 3), "labels mix"),
    ("mu a list", _set(("points", 0, "mu"), [1]), "points[0].mu"),
    ("mu negative", _set(("points", 0, "mu", "AB"), -1), "negative"),
    ("mu float", _set(("points", 0, "mu", "AB"), 1.0), "non-negative int"),
    ("mu string", _set(("points", 0, "mu", "AB"), "1"), "non-negative int"),
    ("mu NaN", _set(("points", 0, "mu", "AB"), float("nan")), "non-negative int"),
    ("mu on own label", _set(("points", 0, "mu"), {"AA": 1}), "own label"),
    ("all zero", lambda o: [p.__setitem__("mu", {}) for p in o["points"]], "all coefficients are zero"),
    ("unknown point field", _set(("points", 0, "weight"), 1), "unknown field"),
    ("classes missing one", _set(("classes",), ["AA"]), "classes"),
]


@pytest.mark.parametrize("name,mutate,needle", MALFORMED_CERTS, ids=[c[0] for c in MALFORMED_CERTS])
def test_certificate_checker_malformed(tmp_path, capsys, name, mutate, needle):
    obj = [1, 2] if name == "top-level array" else _cert(mutate)
    status, msg = cc.classify(obj)
    assert status == "malformed" and needle in msg and "\n" not in msg
    f = tmp_path / "c.json"
    f.write_text(json.dumps(obj))
    assert cc.main([str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err
    if cli_dependence is not None:
        code, out, err = run(cli_check_certificate._check_certificate, [str(f)], capsys)
        assert_bad_input(code, out, err, needle)


def test_certificate_wrong_but_well_formed_is_invalid_not_malformed(tmp_path, capsys):
    obj = _cert(_set(("points", 3, "tokens", 0), "c"))  # ba -> ca: occurrence counts no longer cancel
    assert cc.classify(obj)[0] == "invalid"
    f = tmp_path / "c.json"
    f.write_text(json.dumps(obj))
    assert cc.main([str(f)]) == 1
    out = capsys.readouterr()
    assert out.out.startswith("invalid:") and out.err == ""


@pytest.mark.parametrize("name,content,needle", _file_cases(json.dumps(VALID_CERT)), ids=[c[0] for c in _file_cases("x")])
def test_certificate_file_unreadable(tmp_path, capsys, name, content, needle):
    path = _materialise(tmp_path, name, content)
    assert cc.main([path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    if cli_dependence is not None:
        code, out, err = run(cli_check_certificate._check_certificate, [path], capsys)
        assert_bad_input(code, out, err, needle)


# --------------------------------------------------------------------------- resource guards


def test_max_points_guard_names_the_number_and_the_option(capsys):
    code, out, err = run(_verify_construction, ["icqa", "--k", "4", "--symmetry", "off", "--max-points", "1000"]
                         if _has_symmetry() else ["icqa", "--k", "4", "--max-points", "1000"], capsys)
    n = ICQA(k=4).size
    assert_bad_input(code, out, err, f"--max-points {n}")
    assert str(n) in err


def _has_symmetry() -> bool:
    return "--symmetry" in _verify_construction_help()


def _verify_construction_help() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            _verify_construction(["--help"])
        except SystemExit:
            pass
    return buf.getvalue()


@pytest.mark.skipif(not _has_symmetry(), reason="verify-construction has no --symmetry yet")
def test_max_points_counts_points_evaluated_after_symmetry_reduction(capsys):
    """A proof covering 2.8 * 10^12 points by evaluating 3 of them is not refused by --max-points 10;
    with the reduction off the same run is refused, naming the number and the option."""
    argv = ["icqa", "--k", "3", "--n-questions", "100", "--n-answers", "100", "--max-points", "10"]
    size = ICQA(k=3, n_questions=100, n_answers=100).size
    assert size > 10**12
    code, out, err = run(_verify_construction, argv + ["--symmetry", "auto", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "verified"
    assert info["points_checked"] == 3 and info["points_covered"] == info["points_total"] == size
    code, out, err = run(_verify_construction, argv + ["--symmetry", "off"], capsys)
    assert_bad_input(code, out, err, f"--max-points {size}")


@needs_dependence
def test_find_dependence_refuses_what_it_cannot_load_naming_the_number(capsys, monkeypatch):
    """find-dependence loads every point to decide a fittable dataset; past its load limit it
    must refuse in one line naming the number of points (limit lowered here to 50 so that a
    64-point fittable task exercises it: one-layer memorization fits sc)."""
    from depthcert.proofs import dependence

    monkeypatch.setattr(dependence, "LOAD_LIMIT", 50)
    code, out, err = run(cli_dependence._find_dependence_safe, ["--task", "sc", "--length", "3", "--alphabet", "4"],
                         capsys)
    assert_bad_input(code, out, err, "64 points")


@needs_dependence
def test_find_dependence_guard_names_the_option_that_lifts_it(capsys, monkeypatch):
    help_text = cli_dependence._build_parser().format_help()
    if "--max-points" not in help_text:
        pytest.skip("find-dependence has no --max-points option yet (its load limit is fixed)")
    from depthcert.proofs import dependence

    monkeypatch.setattr(dependence, "LOAD_LIMIT", 50)
    code, out, err = run(cli_dependence._find_dependence_safe,
                         ["--task", "sc", "--length", "3", "--alphabet", "4", "--max-points", "10"], capsys)
    assert_bad_input(code, out, err, "--max-points 64")


# --------------------------------------------------------------------------- verify-construction --dataset

needs_vc_dataset = pytest.mark.skipif("--dataset" not in _verify_construction_help(),
                                      reason="verify-construction has no --dataset yet")


@needs_vc_dataset
@pytest.mark.parametrize("name,fields,needle", DATASET_CASES, ids=[c[0] for c in DATASET_CASES])
def test_verify_construction_hostile_dataset(tmp_path, capsys, name, fields, needle):
    d = tmp_path / "d.json"
    d.write_text(json.dumps(_dataset(fields)))
    code, out, err = run(_verify_construction, ["sc", "--dataset", str(d), "--export", str(tmp_path / "w.json")],
                         capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["d.json"])


@needs_vc_dataset
@pytest.mark.parametrize("name,content,needle", _file_cases(json.dumps(VALID_DATASET)),
                         ids=[c[0] for c in _file_cases("x")])
def test_verify_construction_dataset_file_unreadable(tmp_path, capsys, name, content, needle):
    path = _materialise(tmp_path, name, content)
    code, out, err = run(_verify_construction, ["sc", "--dataset", path, "--export", str(tmp_path / "w.json")], capsys)
    assert_bad_input(code, out, err, needle)
    no_files_but(tmp_path, ["in.json"])


@needs_vc_dataset
def test_verify_construction_dataset_max_points(tmp_path, capsys):
    d = tmp_path / "d.json"
    d.write_text(json.dumps(_dataset({"sequences": [["a", "b", "r"], ["b", "a", "r"], ["a", "a", "r"], ["b", "b", "r"]],
                                      "labels": ["x", "y", "z", "w"]})))
    code, out, err = run(_verify_construction, ["sc", "--dataset", str(d), "--max-points", "3",
                                                "--export", str(tmp_path / "w.json")], capsys)
    assert_bad_input(code, out, err, "--max-points 4")
    no_files_but(tmp_path, ["d.json"])
    code, out, err = run(_verify_construction, ["sc", "--dataset", str(d), "--max-points", "4", "--json"], capsys)
    assert code == 0 and json.loads(out)["verdict"] == "verified"


# --------------------------------------------------------------------------- fuzzing

json_leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
               | st.text(max_size=8) | st.sampled_from(["1/0", "nan", "1/2", "-3", "depthcert.weights", "a0", "<cls>"]))
json_values = st.recursive(json_leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                           max_leaves=25)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _mutate(obj, rng: random.Random, value):
    """One random structural edit: replace a node by `value`, delete it, or duplicate a list item."""
    obj = copy.deepcopy(obj)
    paths = list(_paths(obj))
    path = rng.choice(paths[1:])
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    op = rng.random()
    if op < 0.6:
        parent[path[-1]] = value
    elif op < 0.8:
        parent.pop(path[-1])
    elif isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
    else:
        parent[str(value)[:6]] = value
    return obj


def _weights_ok_or_badinput(obj):
    try:
        model = model_from_json(obj, TASK)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    try:
        v = verify(model, TASK, progress=False)
    except BadInput:
        return
    assert v.verdict in ("verified", "refuted")


@FUZZ
@given(json_values)
def test_fuzz_weights_random_json(obj):
    _weights_ok_or_badinput(obj)


@FUZZ
@given(st.dictionaries(st.sampled_from(["vocab", "max_length", "classes", "layout", "layers", "W_O", "name"]),
                       json_values, max_size=7))
def test_fuzz_weights_random_fields(fields):
    _weights_ok_or_badinput({"format": "depthcert.weights", "version": 1, **fields})


@FUZZ
@given(st.randoms(use_true_random=False), json_values)
def test_fuzz_weights_mutated_valid_file(rng, value):
    _weights_ok_or_badinput(_mutate(VALID_WEIGHTS, rng, value))


def _dataset_ok_or_badinput(obj):
    try:
        t = dataset_from_json(obj)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    assert sum(len(b.index) for b in t.batches(3)) == t.size


@FUZZ
@given(json_values)
def test_fuzz_dataset_random_json(obj):
    _dataset_ok_or_badinput(obj)


@FUZZ
@given(st.dictionaries(st.sampled_from(["sequences", "labels", "name"]), json_values, max_size=3))
def test_fuzz_dataset_random_fields(fields):
    _dataset_ok_or_badinput({"format": "depthcert.dataset", "version": 1, **fields})


@FUZZ
@given(st.randoms(use_true_random=False), json_values)
def test_fuzz_dataset_mutated_valid_file(rng, value):
    _dataset_ok_or_badinput(_mutate(VALID_DATASET, rng, value))


@FUZZ
@given(json_values)
def test_fuzz_certificate_random_json(obj):
    assert cc.classify(obj)[0] in ("malformed", "invalid", "valid")


@FUZZ
@given(st.randoms(use_true_random=False), json_values)
def test_fuzz_certificate_mutated_valid_file(rng, value):
    status, msg = cc.classify(_mutate(VALID_CERT, rng, value))
    assert status in ("malformed", "invalid", "valid") and "\n" not in msg


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_read_json_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "f.json"
    path.write_bytes(data)
    try:
        read_json(str(path), "weights")
    except BadInput as exc:
        assert "\n" not in str(exc)
