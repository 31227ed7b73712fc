"""Issue 41 hole 4: verify-model's --max-seconds is checked inside a softmax point's tie decision,
and a run that reaches it exits 3 (1 when a decided point is wrong), never 2 (bad input), with what
it decided so far; it suggests a limit only from a rate it measured.

Every test runs on an injected clock (tests/fake_clock.py): no outcome depends on the machine's
speed or load.
"""
from __future__ import annotations

import json
import os
import time
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Layer, Model
from fake_clock import StepClock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKPOINT = os.path.join(ROOT, "training", "checkpoints", "max_of_k_v64_k4.safetensors")


def tie_model(n: int = 4, extra: int = 2, seed: int = 0) -> Model:
    """Layer 1 softmax, layer 2 relu; classes p and q read rows x0 and x1, which every head writes
    alike: every point is an exact tie through exp, which the balls never separate, so each one goes
    to the exact tie decision (tests/test_float_limits.py's relu_after_softmax)."""
    rng = np.random.default_rng(seed)
    lay = Layout.of(("token", 2), ("position", n), ("x", extra))
    d = lay.dim

    def mat():
        M = np.array([[Fraction(0)] * d for _ in range(d)], dtype=object)
        for i in range(d):
            for j in range(d):
                if rng.random() < 0.5:
                    M[i, j] = Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 4)))
        return M

    def values():
        M = mat()
        M[lay.index("x", 1), :] = M[lay.index("x", 0), :]
        return M

    WO = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "x", 0, 1).entry("class", 1, "x", 1, 1).build()
    return Model(("a", "b"), n, ("p", "q"), lay, (Layer((Head(mat(), values(), attention="softmax"),)),
                                                  Layer((Head(mat(), values(), attention="relu"),))), WO)


def _files(tmp_path):
    from depthcert.checkers.weights_file import model_to_json

    w, d = tmp_path / "w.json", tmp_path / "d.json"
    w.write_text(json.dumps(model_to_json(tie_model())))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1,
                             "sequences": [["a", "b", "a", "b"], ["b", "b", "a", "a"]], "labels": ["p", "p"]}))
    return str(w), str(d)


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main

    code = run_main(_main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


class _ClockInsideTies(StepClock):
    """Stopped (step 0) until the exact tie decision starts, then `step` per reading: the run's
    deadline can only pass inside the tie decision's arithmetic."""

    def __init__(self, step):
        super().__init__(step)
        self.running = False

    def __call__(self):
        with self._lock:
            self.readings += 1
            if self.running:
                self.start += self.step
            return self.start


@pytest.fixture()
def clock_in_ties(monkeypatch):
    from depthcert.checkers import softmax_ties

    clock = _ClockInsideTies(1.0)
    monkeypatch.setattr(time, "perf_counter", clock)
    real = softmax_ties.TieDecider.decide
    raised = []

    def decide(self, *a, **k):
        clock.running = True
        try:
            return real(self, *a, **k)
        except softmax_ties.RunLimitReached as exc:
            raised.append(str(exc))
            raise

    monkeypatch.setattr(softmax_ties.TieDecider, "decide", decide)
    return clock, raised


def test_the_limit_stops_a_point_inside_its_tie_decision_with_exit_3(tmp_path, capsys, clock_in_ties):
    clock, raised = clock_in_ties
    w, d = _files(tmp_path)
    code, out, err = _run([w, "--dataset", d, "--max-seconds", "50"], capsys)
    assert code == 3 and err == "", (code, err)
    assert raised == ["the run's --max-seconds passed inside a point's exact tie decision"]
    assert "not decided    2 (the run stopped first)" in out
    assert "verdict        undecided" in out
    line = next(x for x in out.splitlines() if x.startswith("stopped "))
    assert "no point decided, so no measured rate to suggest a limit from" in line and "--max-seconds 2" not in line


def test_the_json_of_a_stopped_run_has_the_partial_counts(tmp_path, capsys, clock_in_ties):
    w, d = _files(tmp_path)
    code, out, err = _run([w, "--dataset", d, "--max-seconds", "50", "--json"], capsys)
    doc = json.loads(out)
    assert code == 3 and doc["verdict"] == "undecided"
    assert doc["points"] == doc["correct"] + doc["wrong"] + doc["undecided_points"] + doc["stopped_points"] == 2
    assert doc["stopped_points"] == 2 and doc["stop"].startswith("stopped at --max-seconds 50 ")


def test_without_the_limit_the_same_points_are_decided(tmp_path, capsys, monkeypatch):
    """The control: a stopped clock (no limit passes) and a 60-term limit, so each tie point is
    proven a tie (wrong) or ends undecided at the term limit quickly: every point decided by the
    points' own limits, nothing stopped."""
    from depthcert.checkers import softmax_ties

    monkeypatch.setattr(time, "perf_counter", StepClock(0.0))
    monkeypatch.setattr(softmax_ties, "TERM_LIMIT", 60)
    w, d = _files(tmp_path)
    code, out, err = _run([w, "--dataset", d, "--max-seconds", "50", "--json"], capsys)
    doc = json.loads(out)
    assert doc["stopped_points"] == 0 and doc["stop"] is None and doc["wrong"] + doc["undecided_points"] == 2
    assert code == (1 if doc["wrong"] else 3)


def test_a_run_stopped_between_chunks_counts_its_chunks_and_suggests_from_its_rate(capsys, monkeypatch):
    """The Max-of-K checkpoint (K = 2: 4,096 points, some wrong) in chunks of 64, on a clock of
    1 s per reading and a 30 s limit: some chunks are decided, the rest are counted as not decided;
    a decided point is wrong, so the run is refuted (exit 1) even though it stopped; the limit it
    suggests is the measured rate's."""
    clock = StepClock(1.0)
    monkeypatch.setattr(time, "perf_counter", clock)
    code, out, err = _run([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "64",
                           "--max-seconds", "30", "--json"], capsys)
    doc = json.loads(out)
    assert err == "" and 0 < doc["stopped_points"] < 4096
    decided = doc["correct"] + doc["wrong"] + doc["undecided_points"]
    assert decided + doc["stopped_points"] == 4096 and decided % 64 == 0
    assert (code, doc["verdict"]) == ((1, "refuted") if doc["wrong"] else (3, "undecided"))
    assert f"{decided:,} of 4,096 points decided" in doc["stop"] and "measured rate" in doc["stop"]
    suggested = int(doc["stop"].rsplit("--max-seconds ", 1)[1].split()[0])
    assert suggested > 30


def test_a_limit_reached_is_never_bad_input(tmp_path, capsys, monkeypatch):
    """The audit's case: a softmax tie with --max-seconds 2 exited 2 ("bad input"); here on a clock
    of 0.5 s per reading wherever the limit passes."""
    monkeypatch.setattr(time, "perf_counter", StepClock(0.5))
    w, d = _files(tmp_path)
    code, out, err = _run([w, "--dataset", d, "--max-seconds", "2"], capsys)
    assert code == 3 and err == "" and "stopped        stopped at --max-seconds 2 " in out


def test_a_limit_reached_while_preparing_the_model_reports_nothing_decided(capsys, monkeypatch):
    """The exact model's a-priori bound (PointDecider's construction) past the limit: exit 3, every
    point counted as not decided, the human output printed whole."""
    from depthcert.checkers import accuracy
    from depthcert.checkers.budget import time_limit_passed

    def slow(self, *a, **k):
        raise time_limit_passed("bounding the model's exact numbers", 5)

    monkeypatch.setattr(accuracy.PointDecider, "__init__", slow)
    code, out, err = _run([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--max-seconds", "5"], capsys)
    assert code == 3 and err == "" and "not decided    4,096 (the run stopped first)" in out
    assert "while preparing the model" in out and out.splitlines()[-1].startswith("time ")


def test_a_limit_reached_while_checking_a_journal_uses_none_of_it(tmp_path, capsys, monkeypatch):
    """A resumed run whose journal's recorded points are being decided again when the limit passes:
    none of the journal's chunks counts (they were not checked), exit 3, not 1 from unchecked lines."""
    from depthcert.checkers import accuracy

    j = str(tmp_path / "run.journal")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "1000", "--journal", j]
    assert _run(argv, capsys)[0] == 1
    real = accuracy.PointDecider.chunk

    def chunk(self, lo, hi, batch_size=8192):
        if hi - lo == 1:  # a journal's recorded point decided again
            raise accuracy.Stopped(real(self, lo, lo, batch_size), "the limit passed")
        return real(self, lo, hi, batch_size)

    monkeypatch.setattr(accuracy.PointDecider, "chunk", chunk)
    code, out, err = _run(argv + ["--json"], capsys)
    doc = json.loads(out)
    assert code == 3 and err == "" and doc["stopped_points"] == 4096 and doc["wrong"] == 0
    assert "while checking the journal's recorded points" in doc["stop"]


def test_a_stopped_run_measures_no_robustness_and_compares_no_floats(tmp_path, capsys, clock_in_ties):
    w, d = _files(tmp_path)
    code, out, err = _run([w, "--dataset", d, "--max-seconds", "50", "--robustness", "--json"], capsys)
    doc = json.loads(out)
    assert code == 3 and doc["robustness"] == {"note": "not measured: the run stopped at --max-seconds before "
                                                       "deciding every point"}
