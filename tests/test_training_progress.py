"""Progress output of long runs, and fail-fast bad input of `reproduce` (issue 16).  No PyTorch needed."""
from __future__ import annotations

import io
import subprocess
import sys

from depthcert.training.progress import Progress


def test_plain_lines_when_not_a_terminal():
    """A file gets one line per tenth of the work, not a redraw per step."""
    buf = io.StringIO()
    bar = Progress(1000, "sweep", stream=buf)
    assert bar.mode == "lines"
    for i in range(1000):
        bar.set_postfix(step=i)
        bar.update(1)
    bar.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 10
    assert "\r" not in buf.getvalue()
    assert lines[0].startswith("sweep: 100/1000 (10%)")
    assert lines[-1].startswith("sweep: 1000/1000 (100%)") and "step=999" in lines[-1]


def test_few_steps_print_each_step_once_and_large_updates_one_line():
    buf = io.StringIO()
    with Progress(3, "runs", stream=buf) as bar:
        for _ in range(3):
            bar.update()
    assert [ln.split(" ")[1] for ln in buf.getvalue().splitlines()] == ["1/3", "2/3", "3/3"]
    buf = io.StringIO()
    Progress(100, "x", stream=buf).update(100)
    assert len(buf.getvalue().splitlines()) == 1


def test_bar_on_a_terminal_and_silence_when_disabled():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    t = Tty()
    bar = Progress(50, "tty", stream=t)
    assert bar.mode == "bar"
    for _ in range(50):
        bar.update()
    bar.close()
    assert "\r" in t.getvalue()  # tqdm redraws in place on a terminal
    buf = io.StringIO()
    off = Progress(10, "off", enabled=False, stream=buf)
    off.update(10)
    assert off.mode == "off" and buf.getvalue() == ""


def test_reproduce_bad_name_fails_before_importing_torch():
    code = ("import sys\n"
            "from depthcert.cli.train import reproduce_main\n"
            "rc = reproduce_main(['figure9'])\n"
            "print(rc, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["2", "False"]
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown experiment 'figure9'")
    assert "figure7" in err[0] and "copy" in err[0]


def test_train_copy_bad_sizes_fail_before_importing_torch():
    code = ("import sys\n"
            "from depthcert.cli.train import train_main\n"
            "print(train_main(['copy', '--noise', '1.5']), train_main(['copy', '--length', '0']),\n"
            "      train_main(['copy', '--exact-check', '12']), 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["2", "2", "2", "False"]
    err = r.stderr.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("error:") for e in err)
    assert "attention-only" in err[2]


def test_train_extra_pins_the_cpu_torch_and_ci_installs_it():
    """The train extra asks for exactly the torch the documented numbers came from (2.13.0: on this
    machine's disk, a CPU build; a range admitting newer releases pulls a CUDA build of several GB)."""
    import os

    import pytest

    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    assert "torch==2.13.0" in extras["train"]
    with open(os.path.join(root, ".ci", "run"), encoding="utf-8") as fh:
        ci = fh.read()
    assert "train]" in ci
    with open(os.path.join(root, "docs", "experiments.md"), encoding="utf-8") as fh:
        assert "torch 2.13.0" in fh.read()
