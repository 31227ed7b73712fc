"""Reproducibility of training on CPU (issue 16): the documented reference experiment
(docs/experiments.md, "Reproducibility") is re-run and compared number by number, and two runs in
fresh processes give the same per-step losses to the last bit.

Needs the 'train' extra (CI installs it: .ci/run); without PyTorch the module is skipped with the
reason below.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: pip install -e '.[train]' (torch 2.13.0 CPU build, see README)")

from depthcert.training.reproduce import REFERENCE_CONFIG, reference_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "experiments.md")
DATA = os.path.join(ROOT, "docs", "img", "reference.json")
ROW = re.compile(r"^\| (\d+) \| (\d+)/(\d+) \| ([0-9.]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|$")


def documented_rows() -> list[tuple[str, ...]]:
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("## Reproducibility", 1)[1].split("\n## ", 1)[0]
    rows = [m.groups() for m in (ROW.match(line) for line in section.splitlines()) if m]
    assert rows, "docs/experiments.md has no reference table"
    return rows


def as_rows(data: dict) -> list[tuple[str, ...]]:
    """The reference run's numbers formatted exactly as docs/experiments.md prints them."""
    return [(str(e["step"]), str(e["correct"]), str(e["evaluated"]), f"{e['test_acc']:.4f}", f"{e['test_loss']:.6g}",
             f"{e['train_loss']:.6g}") for e in data["evals"]]


# Other x86-64 CPUs (other SIMD widths, other BLAS kernels) round float32 sums differently: the
# documented losses are compared with this relative tolerance (seen: 5.64635e-05 vs 5.64636e-05,
# 2e-6 apart); counts and accuracies must match exactly.  Bit-for-bit equality is tested between
# two processes on one machine (test_two_fresh_processes_agree_to_the_last_bit).
LOSS_RTOL = 1e-3


def assert_rows_close(got: list[tuple[str, ...]], want: list[tuple[str, ...]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:4] == w[:4], (g, w)  # step, correct, evaluated, accuracy: exact
        for a, b in zip(g[4:], w[4:]):  # losses
            assert float(a) == pytest.approx(float(b), rel=LOSS_RTOL), (g, w)


@pytest.fixture(scope="module")
def rerun() -> dict:
    return reference_run()


def test_documented_command_is_the_reference_config():
    from depthcert.cli.train import config_from_args, train_parser
    from depthcert.training.report import REFERENCE_RUN

    with open(DOC, encoding="utf-8") as fh:
        assert f"`{REFERENCE_RUN['command']}`" in fh.read()
    argv = REFERENCE_RUN["command"].split()[1:]
    assert config_from_args(train_parser().parse_args(argv)) == REFERENCE_CONFIG


def test_rerun_reproduces_the_documented_numbers(rerun):
    """Every documented number: held-out counts and accuracies exactly, losses within LOSS_RTOL."""
    assert_rows_close(as_rows(rerun), documented_rows())


def test_rerun_matches_the_stored_trajectory(rerun):
    with open(DATA, encoding="utf-8") as fh:
        stored = json.load(fh)
    assert stored["machine"]["torch"].startswith("2.13.0")
    assert_rows_close(as_rows(rerun), as_rows(stored))
    assert len(rerun["step_losses"]) == len(stored["step_losses"])
    for x, y in zip(rerun["step_losses"], stored["step_losses"]):
        assert x == pytest.approx(y, rel=LOSS_RTOL)


@pytest.mark.slow
def test_two_fresh_processes_agree_to_the_last_bit():
    code = ("import json\n"
            "from depthcert.training.reproduce import reference_run\n"
            "import torch\n"
            "d = reference_run()\n"
            "print(json.dumps({'losses': d['step_losses'], 'evals': d['evals'],\n"
            "                  'deterministic': torch.are_deterministic_algorithms_enabled(),\n"
            "                  'threads': torch.get_num_threads()}))\n")
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    a, b = outs
    assert a["deterministic"] and a["threads"] == 1
    assert a["losses"] == b["losses"]  # every step's float, bit for bit (JSON floats round-trip exactly)
    assert a["evals"] == b["evals"]
