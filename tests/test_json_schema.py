"""Every command's --json is one JSON document of one schema (depthcert/schema/output.schema.json,
docs/json.md): a `command` and a `verdict` key always, margins as margin objects.

Each case runs a command in-process on a small input and validates what it printed; the schema
itself is checked as a JSON Schema and against documents it must refuse, so a schema that
accepts everything fails here too.
"""
from __future__ import annotations

import json
import os
from fractions import Fraction

import pytest

jsonschema = pytest.importorskip("jsonschema")

from depthcert.cli.common import run_main  # noqa: E402
from depthcert.proofs.theorems import CERT_DIR, EXAMPLES_DIR  # noqa: E402
from depthcert.schema import output_schema  # noqa: E402

SCHEMA = output_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
EX = "docs/examples/"


def _main(name):
    from depthcert.cli import check_certificate, find_dependence, find_depth, reproduce_paper, verify_construction

    return {"verify-construction": verify_construction._verify_construction,
            "find-dependence": find_dependence._find_dependence,
            "find-depth": find_depth._find_depth,
            "check-certificate": check_certificate._check_certificate,
            "reproduce-paper": reproduce_paper._reproduce_paper}[name]


def run_json(command, argv, capsys, monkeypatch=None):
    """(exit code, the one document printed) of `command argv --json`; stdout must be exactly it."""
    code = run_main(_main(command), list(argv) + ["--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)  # one document: json.loads refuses trailing text
    assert out.count("\n") == 1 and out.endswith("\n"), out[:200]
    validate(doc)
    return code, doc


def validate(doc) -> None:
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{list(e.path)}: {e.message[:200]}" for e in errors[:5])


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("doc,why", [
    ({"command": "verify-construction", "task": "icqa"}, "no verdict"),
    ({"command": "verify-construction", "verdict": "proven", "task": "icqa", "points_total": 1,
      "points_checked": 1, "min_margin": None}, "a verdict verify-construction never gives"),
    ({"command": "verify-construction", "verdict": "verified", "task": "icqa", "points_total": 1,
      "points_checked": 1, "min_margin": 3}, "a margin as a number"),
    ({"command": "verify-construction", "verdict": "verified", "task": "icqa", "points_total": 1,
      "points_checked": 1, "min_margin": {"exact": "0.5", "decimal": "0.5"}}, "an exact margin that is not p/q"),
    ({"command": "verify-construction", "verdict": "verified", "task": "icqa", "points_total": 1,
      "points_checked": 1, "min_margin": {"exact": "1/2"}}, "an exact margin without its decimal"),
    ({"command": "find-dependence", "verdict": "fittable", "task": "tm", "points": 2, "fittable": True,
      "certificate": None, "model": {"min_margin": "1"}}, "find-dependence's margin as a string"),
    ({"command": "verify-construction --all-sizes", "status": "proven", "task": "icqa", "variant": "x",
      "margin": None}, "status instead of verdict"),
    ({"command": "nothing", "verdict": "verified"}, "an unknown command"),
])
def test_the_schema_refuses(doc, why):
    assert list(VALIDATOR.iter_errors(doc)), why


# ------------------------------------------------------------------------------------ verify-construction

@pytest.mark.parametrize("argv,code,verdict,margin", [
    (["icqa", "--k", "2"], 0, "verified", {"exact": "3", "decimal": "3"}),
    (["sc", "--length", "2", "--alphabet", "2"], 0, "verified", None),
    (["tm", "--l", "3", "--alphabet", "3", "--variant", "ternary", "--as-printed"], 1, "refuted", None),
    (["multihop", "--k", "2", "--hops", "2", "--variant", "linear"], 0, "verified", None),
    (["composition", "--L", "2", "--N", "2"], 0, "verified", None),
    (["composition", "--L", "2", "--N", "2", "--cot"], 0, "verified", None),
    (["--dataset", EX + "prev-token-data.json", "--weights", EX + "prev-token-hardmax.json"], 0, "verified", None),
    (["--dataset", EX + "prev-token-data.json", "--weights", EX + "prev-token-softmax-20.json"], 0, "verified", None),
    (["--dataset", EX + "prev-token-data.json", "--weights", EX + "prev-token-softmax-1.json"], 1, "refuted", None),
    (["--dataset", EX + "softmax-tie-data.json", "--weights", EX + "softmax-tie-weights.json",
      "--max-precision", "128"], 1, "refuted", None),  # an exact tie through exp: proven, a failure
])
def test_verify_construction(argv, code, verdict, margin, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # docs/examples/ paths resolve from the package from any folder
    got, doc = run_json("verify-construction", argv, capsys)
    assert (got, doc["verdict"], doc["command"]) == (code, verdict, "verify-construction")
    if margin is not None:
        assert doc["min_margin"] == margin
    m = doc["min_margin"]
    if verdict == "undecided":
        u = doc["undecided"]["margin"]
        assert Fraction(u["lower"]) < 0 < Fraction(u["upper"]) and doc["undecided"]["precision_bits"] == 128
    elif "softmax" in " ".join(argv):
        assert set(m) == {"lower", "upper", "decimal"}
        assert Fraction(m["lower"]) <= Fraction(m["decimal"]) <= Fraction(m["upper"])
        assert (Fraction(m["upper"]) <= 0) == (verdict == "refuted")  # a proven tie: [0, 0]
    else:
        assert set(m) == {"exact", "decimal"} and (Fraction(m["exact"]) > 0) == (verdict == "verified")
        assert abs(Fraction(m["decimal"]) - Fraction(m["exact"])) <= abs(Fraction(m["exact"])) / 10**9


@pytest.mark.parametrize("argv,code,verdict", [
    (["icqa", "--k", "2", "--point", "3"], 0, "correct"),
    (["tm", "--l", "3", "--alphabet", "3", "--variant", "ternary", "--as-printed", "--point", "7"], 1, "wrong"),
    (["--dataset", EX + "prev-token-data.json", "--weights", EX + "prev-token-softmax-20.json", "--point", "0"],
     0, "correct"),
    (["composition", "--L", "2", "--N", "2", "--cot", "--point", "1"], 0, "correct"),
])
def test_verify_construction_point(argv, code, verdict, capsys):
    got, doc = run_json("verify-construction", argv, capsys)
    assert (got, doc["verdict"]) == (code, verdict)


def test_journal_run(tmp_path, capsys):
    argv = ["icqa", "--k", "2", "--symmetry", "off", "--journal", str(tmp_path / "j"), "--chunk-points", "100"]
    assert run_json("verify-construction", argv, capsys)[1]["min_margin"]["exact"] == "3"
    assert run_json("verify-construction", argv, capsys)[1]["verdict"] == "verified"  # resumed


def test_dask_run(capsys):
    pytest.importorskip("dask.distributed")
    code, doc = run_json("verify-construction", ["icqa", "--k", "2", "--symmetry", "off", "--dask", "local",
                                                 "--workers", "1", "--chunk-points", "100"], capsys)
    assert code == 0 and doc["verdict"] == "verified" and doc["points_checked"] == 288


@pytest.mark.parametrize("argv,code,verdict,margin", [
    (["icqa", "--k", "2"], 0, "proven", {"exact": "3", "decimal": "3"}),
    (["sc", "--length", "2", "--alphabet", "2"], 0, "proven", {"exact": "1", "decimal": "1"}),
    (["tm", "--l", "3", "--variant", "ternary", "--as-printed"], 1, "fails", None),
    (["tm", "--l", "3", "--alphabet", "2"], 3, "not_proven", None),
    (["parity", "--n", "5", "--variant", "count"], 0, "proven", {"exact": "1", "decimal": "1"}),
    (["mod-count", "--p", "4", "--variant", "count"], 3, "partial", {"exact": "1", "decimal": "1"}),
])
def test_all_sizes(argv, code, verdict, margin, capsys):
    got, doc = run_json("verify-construction", argv + ["--all-sizes"], capsys)
    assert (got, doc["verdict"], doc["command"]) == (code, verdict, "verify-construction --all-sizes")
    assert "status" not in doc and doc["margin"] == margin


# ------------------------------------------------------------------------------------ the other commands

@pytest.mark.parametrize("argv,verdict", [
    (["--task", "tm", "--len", "3"], "not_fittable"),
    (["--task", "composition", "--L", "1", "--N", "2"], "fittable"),
    (["--dataset", EX + "tm-one-substitution-l3.json"], "fittable"),
])
def test_find_dependence(argv, verdict, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, doc = run_json("find-dependence", argv, capsys)
    assert code == 0 and doc["verdict"] == verdict and doc["fittable"] == (verdict == "fittable")
    if verdict == "fittable":
        assert Fraction(doc["model"]["min_margin"]["exact"]) > 0


def test_find_depth(capsys):
    code, doc = run_json("find-depth", ["--task", "tm", "--l", "2", "--alphabet", "2", "--heads", "1",
                                        "--max-layers", "2", "--max-seconds", "60"], capsys)
    assert code == 0 and doc["verdict"] == "minimal_depth" and doc["minimal_depth"] == 2
    assert [d["outcome"] for d in doc["depths"]] == ["impossible", "model"]


def test_check_certificate(tmp_path, capsys):
    cert = os.path.join(str(CERT_DIR), "tm_len3.json")
    code, doc = run_json("check-certificate", [cert], capsys)
    assert code == 0 and doc["verdict"] == "valid"
    code, doc = run_json("check-certificate", [cert, "--task", "tm", "--len", "3"], capsys)
    assert code == 0 and doc["verdict"] == "valid" and doc["about_dataset"] is True
    code, doc = run_json("check-certificate", [cert, "--task", "tm", "--len", "3", "--alphabet", "4"], capsys)
    assert code in (0, 1) and doc["verdict"] in ("valid", "not_about_dataset")
    bad = json.loads(open(cert).read())
    bad["points"] = bad["points"][:-1]  # the weighted counts no longer cancel
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, doc = run_json("check-certificate", [str(tmp_path / "bad.json")], capsys)
    assert code == 1 and doc["verdict"] == "invalid"


def test_reproduce_paper(capsys):
    code, doc = run_json("reproduce-paper", ["--only", "theorem4", "scope-theorem4-one-substitution"], capsys)
    assert code == 0 and doc["verdict"] == "reproduced" and [c["claim"] for c in doc["claims"]] == \
        ["theorem4", "scope-theorem4-one-substitution"]


def test_show_construction(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from depthcert.cli.show_construction import _show_construction

    code = run_main(_show_construction, ["icqa", "--k", "2", "--out", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0 and doc["verdict"] == "written" and doc["files"]


@pytest.mark.slow
def test_verify_tracr(capsys):
    pytest.importorskip("tracr")
    from depthcert.cli.verify_tracr import _main

    code = run_main(_main, ["make_hist", "--vocab", "1,2", "--max-seq-len", "3", "--json", "--no-float-check"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0 and doc["verdict"] == "verified" and doc["min_margin"] is not None


def test_train(capsys):
    pytest.importorskip("torch")
    from depthcert.cli.train import train_main

    code = train_main(["icqa", "--k", "2", "--layers", "1", "--steps", "2", "--eval-size", "10", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0 and doc["verdict"] == "observed"


def test_train_copy(capsys):
    pytest.importorskip("torch")
    from depthcert.cli.train import train_main

    code = train_main(["copy", "--length", "2", "--alphabet", "2", "--steps", "2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0 and doc["command"] == "train copy" and doc["verdict"] == "observed"


def test_reproduce(capsys, tmp_path):
    pytest.importorskip("torch")
    from depthcert.cli.train import reproduce_main

    code = reproduce_main(["reference", "--out", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert out.count("\n") == 1
    validate(doc)
    assert code == 0 and doc["command"] == "reproduce" and doc["verdict"] == "observed"


@pytest.mark.parametrize("argv", [["icqa", "--k", "2", "--robustness"], ["icqa", "--k", "2", "--compare-readouts"],
                                  ["tm", "--l", "3", "--alphabet", "2", "--robustness", "--compare-readouts"]])
def test_verify_construction_robustness_and_readouts(argv, capsys):
    code, doc = run_json("verify-construction", argv, capsys)
    assert code == 0 and doc["verdict"] == "verified"
    if "--robustness" in argv:
        r = doc["robustness"]
        assert Fraction(r["linf_radius"]["certified_lower"]) > 0 and set(r["formats"]) == {"float16", "bfloat16",
                                                                                          "float32"}


@pytest.mark.parametrize("argv", [["--task", "tm", "--len", "2", "--bounds"], ["--task", "icqa", "--k", "1"]])
def test_find_dependence_bounds_and_fittable(argv, capsys):
    """tm at length 2 (4 points) has the whole --bounds object (3/4 correct at most, one certificate)
    in a fraction of the seconds length 3 takes."""
    code, doc = run_json("find-dependence", argv, capsys)
    assert code == 0 and doc["verdict"] in ("fittable", "not_fittable")
    if "--bounds" in argv:
        b = doc["bounds"]
        assert b["upper_search_complete"] and 0 < b["lower_correct"] <= b["upper_correct"] < b["total"], b


def test_export_transformerlens_json(tmp_path, capsys):
    from depthcert.cli.export_transformerlens import _main as export_transformerlens

    out = str(tmp_path / "m.safetensors")
    code = run_main(export_transformerlens, ["docs/examples/prev-token-softmax-20.json", out, "--json"])
    text = capsys.readouterr().out
    doc = json.loads(text)
    assert code == 0 and text.count("\n") == 1 and os.path.isfile(out)
    validate(doc)
    assert doc["wrote"] == [out] and doc["config"]["n_layers"] == 1


def test_every_command_with_json_is_in_the_schema_and_tested_here():
    """Each console script of pyproject.toml has --json, is a `command` value of the schema
    (train's `copy` subcommand too), and this file runs each one."""
    import re
    import tomllib

    from depthcert.cli.common import _Parser

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    names = set(SCHEMA["properties"]["command"]["enum"])
    text = open(__file__).read()
    parsers = []
    real = _Parser.parse_args

    def capture(self, args=None, namespace=None):  # the parser a main builds, then stop
        parsers.append(self)
        raise SystemExit(0)

    without = []
    for script, target in scripts.items():
        module, func = target.split(":")
        main = getattr(__import__(module, fromlist=[func]), func)
        parsers.clear()
        _Parser.parse_args = capture
        try:
            try:
                main(["x"])
            except SystemExit:
                pass
        finally:
            _Parser.parse_args = real
        assert parsers, script
        if "--json" not in parsers[-1]._option_string_actions:
            without.append(script)
            continue
        assert script in names, script
        tested = {"verify-construction": "run_json(\"verify-construction\"", "find-dependence": "run_json(\"find-dependence\"", "find-depth": "run_json(\"find-depth\"",
                  "check-certificate": "run_json(\"check-certificate\"", "reproduce-paper": "run_json(\"reproduce-paper\"",
                  "show-construction": "_show_construction, [", "verify-tracr": "verify_tracr import _main",
                  "verify-model": "verify_model import _main", "train": "train_main([\"icqa\"",
                  "reproduce": "reproduce_main([\"reference\"",
                  "export-transformerlens": "run_main(export_transformerlens, ["}[script]
        assert tested in text, script
    assert without == [], without
    assert "train copy" in names and 'train_main(["copy"' in text
    assert re.search(r'"verify-construction", argv \+ \["--all-sizes"\]', text)


def test_the_examples_ship_with_the_package():
    assert os.path.isfile(os.path.join(EXAMPLES_DIR, "tm-one-substitution-l3.json"))


@pytest.mark.parametrize("weights,verdict,margin", [
    ("prev-token-hardmax.json", "verified", {"exact": "1", "decimal": "1"}),
    ("prev-token-softmax-1.json", "refuted", "lower"),
    ("prev-token-softmax-20.json", "verified", "lower"),
])
def test_verify_model(weights, verdict, margin, capsys):
    """verify-model speaks the shared conventions: command, verdict, margin objects (exact for a
    rational model, a certified enclosure for softmax), counts that are integers."""
    from depthcert.cli.verify_model import _main

    code = run_main(_main, [EX + weights, "--dataset", EX + "prev-token-data.json", "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    validate(doc)
    assert code == (1 if verdict == "refuted" else 0) and doc["command"] == "verify-model" and doc["verdict"] == verdict
    assert doc["points"] == doc["correct"] + doc["wrong"] + doc["undecided_points"] == 81
    assert doc["min_margin"] == margin if isinstance(margin, dict) else margin in doc["min_margin"]


def test_verify_construction_undecided(capsys, tmp_path):
    """A softmax head after a softmax layer, tied exactly: outside the exact tie decision, so the
    run ends undecided at the precision cap (exit 3) and the document says so."""
    from depthcert.checkers.layout import BlockMatrix, Layout
    from depthcert.checkers.model import Head, Model
    from depthcert.checkers.weights_file import model_to_json

    lay = Layout.of(("token", 2), ("position", 3), ("s", 1), ("A", 1), ("B", 1))
    qk1 = BlockMatrix(lay, lay).entry("token", 0, "position", 2, 1).build()
    v1 = BlockMatrix(lay, lay).entry("s", 0, "token", 0, 1).build()
    qk2 = BlockMatrix(lay, lay).entry("s", 0, "position", 2, 1).build()
    v2 = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).entry("B", 0, "token", 0, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1).entry("class", 1, "B", 0, 1).build()
    model = Model(("a", "b"), 3, ("x", "y"), lay, ((Head(qk1, v1, attention="softmax"),),
                                                 (Head(qk2, v2, attention="softmax"),)), out)
    weights, data = tmp_path / "w.json", tmp_path / "d.json"
    weights.write_text(json.dumps(model_to_json(model)))
    data.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "name": "after-softmax",
                                "sequences": [["a", "b", "b"]], "labels": ["x"]}))
    code, doc = run_json("verify-construction", ["--dataset", str(data), "--weights", str(weights),
                                                 "--max-precision", "256"], capsys)
    assert (code, doc["verdict"]) == (3, "undecided"), doc


@pytest.mark.parametrize("weights", ["prev-token-hardmax.json", "prev-token-softmax-1.json", "prev-token-softmax-20.json"])
def test_verify_model_robustness(weights, capsys):
    """verify-model --robustness --json: the robustness object of the schema (rational radii, integer
    bits, formats either per format or not available with a reason)."""
    from depthcert.cli.verify_model import _main

    code = run_main(_main, [EX + weights, "--dataset", EX + "prev-token-data.json", "--robustness", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    r = doc["robustness"]
    assert code == (1 if doc["verdict"] == "refuted" else 0)
    assert Fraction(r["linf_radius"]["certified_lower"]) < Fraction(r["linf_radius"]["broken_upper"])
    assert isinstance(r["min_fraction_bits"]["bits"], int)
    assert r["formats"]["available"] is False and r["formats"]["reason"]
    bad = dict(doc, robustness={"linf_radius": {"certified_lower": 0.5, "broken_upper": None},
                                "min_fraction_bits": r["min_fraction_bits"], "formats": r["formats"]})
    with pytest.raises(Exception):
        validate(bad)  # a float radius is not an exact rational


@pytest.mark.slow
def test_verify_tracr_robustness(capsys):
    """verify-tracr --robustness --json on a program that verifies: the robustness object of the
    schema; rounding the imported model to the reported bits keeps every point correct."""
    pytest.importorskip("tracr")
    from depthcert.cli.verify_tracr import _main as tracr_main

    code = run_main(tracr_main, ["make_length", "--vocab", "1,2", "--max-seq-len", "3", "--robustness", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    r = doc["robustness"]
    assert code == 0 and doc["verdict"] == "verified"
    assert 0 < Fraction(r["linf_radius"]["certified_lower"]) < Fraction(r["linf_radius"]["broken_upper"])
    assert r["formats"]["available"] is False and "softmax" in r["formats"]["reason"]
    assert r["min_fraction_bits"]["fails_at"] == r["min_fraction_bits"]["bits"] - 1
