"""An unexpected exception in any console command exits 4 with one line, never 1 (REFUTED) and
never a traceback; DEPTHCERT_DEBUG=1 shows the traceback (depthcert/cli/errors.py)."""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from depthcert.cli.errors import EXIT_INTERNAL

# every console script pyproject.toml declares (not the installed metadata, which may be stale)
SCRIPTS = sorted(tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
                 ["project"]["scripts"].items())


def test_every_console_script_is_listed():
    names = {name for name, _ in SCRIPTS}
    assert {"verify-construction", "find-dependence", "check-certificate", "show-construction", "reproduce-paper",
            "train", "reproduce", "verify-tracr"} <= names, names


@pytest.mark.parametrize("name,target", SCRIPTS, ids=[name for name, _ in SCRIPTS])
def test_injected_internal_error_exits_4_with_one_line(name, target, monkeypatch, capsys):
    def boom(self, *args, **kwargs):
        raise RuntimeError("injected failure\nsecond line")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", boom)
    monkeypatch.delenv("DEPTHCERT_DEBUG", raising=False)
    module, func = target.split(":")
    main = getattr(importlib.import_module(module), func)
    try:
        code = main([])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL, (name, code, err)
    assert err.count("\n") == 1 and err.startswith("internal error: RuntimeError: injected failure; please report"), err


INJECT = """
import sys
import depthcert.checkers.exhaustive as ex
def boom(*a, **k):
    raise ZeroDivisionError("injected")
ex.verify = boom
from depthcert.cli.verify_construction import verify_construction_main
verify_construction_main(sys.argv[1:])
"""


@pytest.mark.parametrize("debug", ["0", "1"])
def test_internal_error_in_a_real_process(debug):
    env = dict(os.environ, DEPTHCERT_DEBUG=debug)
    r = subprocess.run([sys.executable, "-c", INJECT, "icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3",
                        "--symmetry", "off"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == EXIT_INTERNAL, (r.returncode, r.stderr)
    assert r.stdout == ""
    if debug == "1":
        assert "Traceback" in r.stderr and "ZeroDivisionError: injected" in r.stderr
    else:
        assert r.stderr.splitlines() == ["internal error: ZeroDivisionError: injected; please report (rerun with "
                                         "DEPTHCERT_DEBUG=1 for the traceback)"]


def test_please_report_is_said_once(capsys):
    from depthcert.cli.common import run_main

    def fails(argv):
        raise RuntimeError("the LP is infeasible but no exact certificate was recovered; please report")

    assert run_main(fails, []) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("please report") == 1 and err.count("\n") == 1, err
