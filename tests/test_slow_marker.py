"""The default run and the slow run (docs/development.md, The test suite): pyproject.toml deselects
the `slow` marker by default, .ci/run runs the README command, the slow docs and then the slow tests,
and tests/conftest.py's SLOW_CASES cannot go stale silently."""
from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest

import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_default_run_deselects_slow_and_the_marker_is_registered():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        opts = tomllib.load(fh)["tool"]["pytest"]["ini_options"]
    assert opts["addopts"] == "-m 'not slow'"
    assert any(m.startswith("slow:") for m in opts["markers"])


def test_ci_runs_the_default_then_the_slow_docs_then_the_slow_tests():
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    main_job = ci[ci.index('echo "== job main'):]
    steps = [line for line in main_job.splitlines() if line.startswith("python ") and "pip" not in line]
    assert steps == ["python -m pytest -q", "python docs/regenerate.py --check --slow", "python -m pytest -q -m slow"]


class _Item(SimpleNamespace):
    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_slow_cases_are_marked_and_a_stale_one_is_refused(monkeypatch):
    case = "tests/test_x.py::test_y[big]"
    monkeypatch.setattr(conftest, "SLOW_CASES", {case})
    items = [_Item(nodeid=case, marks=[]), _Item(nodeid="tests/test_x.py::test_y[small]", marks=[])]
    conftest._mark_slow_cases(SimpleNamespace(args=["tests"]), items)
    assert [i.marks for i in items] == [["slow"], []]
    with pytest.raises(pytest.UsageError, match=re.escape(case)):
        conftest._mark_slow_cases(SimpleNamespace(args=["tests"]), items[1:])  # the file collected whole, the case gone
    conftest._mark_slow_cases(SimpleNamespace(args=["tests/test_x.py::test_y[small]"]), items[1:])  # one id named: no check
