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
