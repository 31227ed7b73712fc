"""Conventions every command keeps (issue 22, part 7): no abbreviated options, values that look
like negative numbers accepted after an option that takes one, task lists generated from the
constructions registry, example files found from any folder, and counted nouns in the singular
for one ("1 point", "1 ReLU head")."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

from depthcert import constructions
from depthcert.cli.common import _Parser, run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mains():
    from depthcert.cli import (check_certificate, find_dependence, reproduce_paper, show_construction, train,
                               verify_construction, verify_tracr)

    return {
        "verify-construction": lambda a: run_main(verify_construction._verify_construction, a),
        "find-dependence": lambda a: run_main(find_dependence._find_dependence, a),
        "check-certificate": lambda a: run_main(check_certificate._check_certificate, a),
        "show-construction": lambda a: run_main(show_construction._show_construction, a),
        "reproduce-paper": lambda a: run_main(reproduce_paper._reproduce_paper, a),
        "verify-tracr": lambda a: run_main(verify_tracr._main, a),
        "train": train.train_main,
        "reproduce": train.reproduce_main,
    }


@pytest.mark.parametrize("command,argv,full", [
    ("verify-construction", ["multihop", "--hop", "2"], "--hops"),
    ("find-dependence", ["--task", "multihop", "--hop", "2"], "--hops"),
    ("check-certificate", ["x.json", "--tas", "tm"], "--task"),
    ("show-construction", ["icqa", "--k", "2", "--out", "o", "--poin", "1"], "--point"),
    ("reproduce-paper", ["--onl", "theorem1"], "--only"),
    ("verify-tracr", ["make_reverse", "--vocab", "1,2", "--max-seq-len", "2", "--tol", "1/2"], "--tolerance"),
    ("train", ["icqa", "--lay", "1"], "--layers"),
    ("reproduce", ["figure2", "--see", "1"], "--seeds"),
])
def test_abbreviated_options_are_refused(command, argv, full, capsys, tmp_path, monkeypatch):
    """`--hop 2` is not `--hops 2`: exit 2, one line, nothing run."""
    monkeypatch.chdir(tmp_path)
    assert _mains()[command](argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unrecognized arguments" in err and argv[-2] in err, err
    assert not os.listdir(tmp_path)


def test_every_parser_of_the_commands_is_the_shared_one():
    """No command builds a bare argparse parser (which would allow abbreviations again)."""
    for path in glob.glob(os.path.join(ROOT, "depthcert", "cli", "*.py")):
        text = open(path).read()
        assert "argparse.ArgumentParser(" not in text or path.endswith("common.py"), path
    assert _Parser(prog="x").allow_abbrev is False


@pytest.mark.parametrize("argv", [["--vocab", "-1,0,1"], ["--vocab=-1,0,1"], ["--vocab", "-1"]])
def test_negative_looking_list_values(argv):
    from depthcert.cli.verify_tracr import _parser, parse_vocab

    args = _parser().parse_args(["make_reverse", *argv, "--max-seq-len", "2"])
    want = argv[-1].split("=")[-1]
    assert args.vocab == want
    assert parse_vocab(args.vocab) == tuple(int(t) for t in want.split(","))


def test_a_negative_value_is_still_refused_where_it_is_bad(capsys):
    assert _mains()["verify-construction"](["icqa", "--k", "-2"]) == 2
    assert "'-2' is not a positive integer" in capsys.readouterr().err


def test_flags_after_an_option_are_still_flags(capsys):
    """Only values that start like a number are joined: `--variant --as-printed` stays an error."""
    assert _mains()["verify-construction"](["icqa", "--variant", "--as-printed"]) == 2
    assert "expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["verify-construction", "find-dependence", "check-certificate",
                                     "show-construction", "train"])
def test_help_lists_every_task_of_the_registry(command, capsys):
    with pytest.raises(SystemExit):
        _mains()[command](["--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    names = list(constructions.all_variants())
    assert len(names) >= 10
    for name in names:
        assert re.search(rf"[ :,(]{re.escape(name)}[,) ]", text), (command, name)


@pytest.mark.parametrize("command", ["find-dependence", "check-certificate", "verify-model", "train"])
def test_dataset_commands_list_every_task_of_the_task_registry(command, capsys):
    """Commands that take any task's dataset (not only a constructed one) list every task of
    checkers/tasks' registry, max-of-k (no construction) included; the construction commands
    list only the constructions registry's, which refuses max-of-k in one line."""
    from depthcert.checkers.tasks import TASK_ALIASES
    from depthcert.cli.verify_model import _main as verify_model_main

    mains = _mains() | {"verify-model": lambda a: run_main(verify_model_main, a)}
    with pytest.raises(SystemExit):
        mains[command](["--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out).replace("max- of-k", "max-of-k")
    every = list(dict.fromkeys(TASK_ALIASES.values()))
    assert "max-of-k" in every and set(constructions.all_variants()) < set(every)
    for name in every:
        assert re.search(rf"[ :,(]{re.escape(name)}[,) ]", text), (command, name)
    assert _mains()["verify-construction"](["max-of-k"]) == 2
    assert "task max-of-k has no construction" in capsys.readouterr().err


def test_missing_task_names_every_task(capsys):
    assert _mains()["verify-construction"]([]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in constructions.all_variants()), err


def test_reproduce_paper_dataset_command_runs_from_any_folder(tmp_path, monkeypatch, capsys):
    """The command reproduce-paper prints for the Theorem 4 scope finding (--dataset
    docs/examples/...) works outside the checkout: the example files ship with the package."""
    import shlex

    from depthcert.proofs.theorems import CLAIMS, command

    claim = next(c for c in CLAIMS if c.dataset)
    argv = shlex.split(command(claim))
    assert argv[0] == "find-dependence" and argv[2].startswith("docs/examples/")
    monkeypatch.chdir(tmp_path)
    assert _mains()["find-dependence"](argv[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "fittable"
    assert _mains()["find-dependence"](["--dataset", "docs/examples/no-such-file.json"]) == 2
    assert "no-such-file.json" in capsys.readouterr().err


def test_one_point_and_one_head_are_singular(tmp_path, capsys):
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"format": "depthcert.dataset", "version": 1,
                                "sequences": [["x", "y", "y"]], "labels": ["a"]}))
    code = _mains()["verify-construction"](["sc", "--dataset", str(data)])
    out = capsys.readouterr().out
    assert code == 0 and "1 point = 1" in out and "evaluated   1 point " in out, out
    assert "1 layer," in out and not re.search(r"\b1 (points|layers|inputs)\b|\(s\)", out), out
    code = _mains()["find-dependence"](["--task", "icqa", "--k", "1"])
    out = capsys.readouterr().out
    assert code == 0 and re.search(r"\b1 ReLU head \(", out) and "1 ReLU heads" not in out, out


def test_no_generated_text_says_s_in_parentheses():
    """'(s)' and '(es)' after a count are gone from every message the code builds."""
    pattern = re.compile(r"\}\s?[a-z ]*\((s|es)\)|\" [a-z ]*\((s|es)\)")
    for path in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True):
        if "/.venv" in path or "/tests/" in path or "/build/" in path:
            continue
        for i, line in enumerate(open(path), 1):
            assert not pattern.search(line), f"{path}:{i}: {line.strip()}"


def test_one_hop_and_one_round_are_singular_with_values_not_symbols(capsys):
    """The multihop descriptions at h = 1 (the linear variant's is built from the symbolic
    builder, whose hop count is a symbol: the printed text gives the values)."""
    for variant, want in [("linear", "then 1 hop layer of the last column: 2 layers"),
                          ("paper", "1 round of copy")]:
        assert _mains()["verify-construction"](["multihop", "--hops", "1", "--k", "2", "--variant", variant]) == 0
        assert want in capsys.readouterr().out
    assert _mains()["verify-construction"](["multihop", "--hops", "3", "--k", "2", "--variant", "linear"]) == 0
    assert "then 3 hop layers of the last column: 4 layers" in capsys.readouterr().out


def test_find_dependence_one_class_margin_is_named_not_none(tmp_path, capsys):
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"format": "depthcert.dataset", "version": 1,
                                "sequences": [["a", "b"], ["b", "b"]], "labels": ["x", "x"]}))
    assert _mains()["find-dependence"](["--dataset", str(data)]) == 0
    out = capsys.readouterr().out
    assert "min margin none (one class)" in out and "None" not in out, out


def test_verify_model_and_export_take_example_files_from_any_folder(tmp_path, monkeypatch, capsys):
    """The docs' verify-model and export-transformerlens commands (docs/trained-models.md) name
    docs/examples/ files; they work outside the checkout too."""
    pytest.importorskip("safetensors")
    from depthcert.cli.export_transformerlens import _main as export_main
    from depthcert.cli.verify_model import _main as verify_model_main

    monkeypatch.chdir(tmp_path)
    data = ["--dataset", "docs/examples/prev-token-data.json"]
    assert run_main(verify_model_main, ["docs/examples/prev-token-hardmax.json"] + data + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "verified"
    assert run_main(export_main, ["docs/examples/prev-token-softmax-20.json", "tl.safetensors"]) == 0
    assert capsys.readouterr().out.startswith("wrote tl.safetensors")
    assert run_main(verify_model_main, ["tl.safetensors"] + data + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "verified"
    assert run_main(verify_model_main, ["docs/examples/layernorm-tiny.safetensors", "--task", "max-of-k", "--vocab",
                                        "4", "--k", "3"]) == 1  # found, and decided (refuted) with its LayerNorm
    assert "layernorm" in capsys.readouterr().out


def test_every_example_file_is_package_data():
    """Each file of docs/examples/ matches a package-data pattern of depthcert.examples, so a
    non-editable install ships it too."""
    import fnmatch
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["depthcert.examples"]
    for name in os.listdir(os.path.join(ROOT, "docs", "examples")):
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name
