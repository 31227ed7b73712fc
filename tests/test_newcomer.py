"""What a newcomer meets first: each finding of a fresh clone's first hour, fixed and kept fixed.

One test (or a few) per finding: pictures work from the quickstart's install, every command's task
list is what it accepts (aliases named), files written are named, process counts are honest on a
resumed run, time lines cover every phase, robustness runs show progress on a terminal, and worker
processes start safely next to JAX.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def run(*argv, cwd=ROOT, timeout=300):
    return subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


# ---- pictures from the quickstart: `pip install -e .` brings matplotlib

def test_matplotlib_is_a_default_dependency_and_the_hint_is_a_working_command():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert any(re.match(r"matplotlib\b", d) for d in project["dependencies"]), project["dependencies"]
    with open(os.path.join(ROOT, "constraints-lowest.txt")) as fh:  # its lower bound is tested by the lowest job
        assert re.search(r"^matplotlib==3\.6\.0$", fh.read(), re.M)
    from depthcert.cli.show_construction import INSTALL_HINT

    # a package that is on no registry (depthcert[plot]) is not a hint a user can follow
    assert "depthcert[" not in INSTALL_HINT and INSTALL_HINT.endswith('pip install "matplotlib>=3.6"')


# ---- task lists: each command lists exactly the tasks it accepts, aliases included

def _mains():
    from depthcert.cli import check_certificate, find_dependence, show_construction, verify_construction
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main as verify_model

    return {
        # command -> (its main, argv naming a task, whether it takes every task with a dataset)
        "verify-construction": (lambda a: run_main(verify_construction._verify_construction, a), lambda t: [t], False),
        "show-construction": (lambda a: run_main(show_construction._show_construction, a),
                              lambda t: [t, "--out", os.devnull], False),
        "find-dependence": (lambda a: run_main(find_dependence._find_dependence, a), lambda t: ["--task", t], True),
        "check-certificate": (lambda a: run_main(check_certificate._check_certificate, a),
                              lambda t: [os.path.join(ROOT, "proofs", "certificates", "theorem2_icqa.json"), "--task", t], True),
        "verify-model": (lambda a: run_main(verify_model, a),
                         lambda t: [os.path.join(ROOT, "docs", "examples", "prev-token-hardmax.json"), "--task", t], True),
    }


def _listed(err: str) -> tuple[list[str], dict[str, str]]:
    """The task names and the alias -> task map an unknown-task line lists."""
    m = re.search(r"known: (.*) \(aliases: (.*)\)$", err.strip())
    assert m, err
    aliases = {}
    for group in m.group(2).split("; "):
        names, task = group.split(" = ")
        aliases.update({a: task for a in names.split(", ")})
    return m.group(1).split(", "), aliases


@pytest.mark.parametrize("command", list(_mains()))
def test_the_unknown_task_line_lists_exactly_what_the_command_takes(command, capsys):
    from depthcert import constructions
    from depthcert.checkers.tasks import TASK_ALIASES

    main, argv, every = _mains()[command]
    assert main(argv("no-such-task")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    names, aliases = _listed(err)
    want = list(dict.fromkeys(TASK_ALIASES.values())) if every else list(constructions.all_variants())
    assert sorted(names) == sorted(want)
    assert aliases == {a: t for a, t in TASK_ALIASES.items() if a != t and t in want}
    assert aliases["template"] == "tm"
    for name in set(TASK_ALIASES) - set(names) - set(aliases):  # what is not listed is refused in one line
        assert main(argv(name)) == 2
        err = capsys.readouterr().err
        assert "has no construction" in err and err.count("\n") == 1, (name, err)


def test_an_alias_runs_as_its_task():
    r = run("verify-construction", "template", "--l", "2", "--alphabet", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["task"] == "tm"


@pytest.mark.parametrize("command", ["verify-construction", "find-dependence"])
def test_help_lists_the_aliases(command):
    text = re.sub(r"\s+", " ", run(command, "--help").stdout).replace("- ", "-")
    assert "template, template-matching = tm" in text and "ic-qa, qa = icqa" in text
