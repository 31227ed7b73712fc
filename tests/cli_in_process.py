"""Run a console script of pyproject.toml inside the test process, as the shell would run it.

`run_command(["verify-construction", "icqa", "--k", "2"])` calls the entry point the installed
script calls (depthcert's console_scripts entry points, i.e. pyproject.toml's [project.scripts])
with the given arguments, in the repository's folder, and
returns (exit code, stdout, stderr) -- what `subprocess.run` of the installed script returns, less
the second of interpreter start and imports each subprocess costs.  Tests that need the installed
script itself (its exit status through the OS, its console wrapper) keep a real subprocess:
tests/test_docs.py runs one documented command per script that way.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from importlib.metadata import entry_points

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def scripts() -> dict:
    """console script name -> its entry point, depthcert's only (another package may name a
    script `train` too)."""
    return {ep.name: ep for ep in entry_points(group="console_scripts") if ep.value.startswith("depthcert.")}


def entry_point(name: str):
    return scripts()[name].load()


def run_command(argv: list[str], cwd: str = ROOT) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the console script argv[0] run with argv[1:] in cwd."""
    main = entry_point(argv[0])
    out, err = io.StringIO(), io.StringIO()
    here, saved_argv = os.getcwd(), sys.argv
    os.chdir(cwd)
    sys.argv = [argv[0], *argv[1:]]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv[1:]))
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = saved_argv
        os.chdir(here)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed to stderr, status 1
        err.write(f"{code}\n")
        code = 1
    return code, out.getvalue(), err.getvalue()
