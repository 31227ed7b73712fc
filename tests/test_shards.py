"""Sharded runs give the single-process verdict: processes, a Dask LocalCluster, and a journal
that survives a real SIGKILL of the run and resumes to the same verdict, margin and
counterexample (checkers/shards.py, checkers/journal.py, depthcert/cli/cluster.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from depthcert.checkers import shards
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry

BIN = os.path.dirname(sys.executable)


def _triple(v):
    ce = v.counterexample
    return v.verdict, v.min_margin, v.points_checked, None if ce is None else (ce.index, ce.tokens, ce.predicted)


def _cases():
    task = make_task("multihop", hops=2, k=3, n_entities=4)  # 1944 points
    good = registry.build(task, "linear").model
    lay = good.layout
    # tampered: one W_O entry raised so that a point in the middle of the dataset fails
    bad = good.with_weight(("W_O", 1, lay.index("dst", 2)), 2)
    return task, good, bad


TASK, GOOD, BAD = _cases()


@pytest.mark.parametrize("model", [GOOD, BAD], ids=["verified", "tampered"])
def test_processes_and_journal_give_the_single_process_verdict(model, tmp_path):
    one = verify(model, TASK, progress=False)
    procs = verify(model, TASK, progress=False, runner=shards.ProcessRunner(2), chunk_points=97)
    inproc = verify(model, TASK, progress=False, journal=str(tmp_path / "j"), chunk_points=101)
    assert _triple(one) == _triple(procs) == _triple(inproc)
    # resumed from the journal alone: every chunk read back, same verdict
    again = verify(model, TASK, progress=False, journal=str(tmp_path / "j"), chunk_points=101)
    assert _triple(again) == _triple(one)
    assert any("came from the journal" in n for n in again.notes)


def test_process_pool_is_no_larger_than_its_chunks():
    """--workers 1000 on a run of a few chunks forks one process per chunk (a fork pool starts every
    process at once), says so, and gives the single-process verdict."""
    runner = shards.ProcessRunner(1000)
    procs = verify(GOOD, TASK, progress=False, runner=runner, chunk_points=1000)  # 1944 points: 2 chunks
    assert runner.used == 2 and runner.describe() == "2 processes"
    assert _triple(procs) == _triple(verify(GOOD, TASK, progress=False))


def test_tampered_verdict_is_a_refutation_in_the_middle():
    v = verify(BAD, TASK, progress=False)
    assert v.verdict == "refuted" and 0 < v.counterexample.index < TASK.size - 1


def test_symmetry_plan_shards_the_representatives(tmp_path):
    task = make_task("icqa", k=3, n_questions=4, n_answers=4)
    model = registry.build(task).model
    a = verify(model, task, progress=False, symmetry="auto")
    b = verify(model, task, progress=False, symmetry="auto", journal=str(tmp_path / "j"), chunk_points=1)
    assert _triple(a) == _triple(b) and b.points_covered == task.size


@pytest.mark.parametrize("model", [GOOD, BAD], ids=["verified", "tampered"])
def test_dask_local_cluster_gives_the_same_verdict(model):
    pytest.importorskip("dask.distributed")
    from depthcert.cli.cluster import DaskRunner

    runner = DaskRunner("local", 2)
    try:
        v = verify(model, TASK, progress=False, runner=runner, chunk_points=150)
    finally:
        runner.close()
    assert _triple(v) == _triple(verify(model, TASK, progress=False))
    assert "Dask LocalCluster" in v.path


def test_journal_of_another_model_or_size_is_refused(tmp_path):
    j = str(tmp_path / "j")
    verify(GOOD, TASK, progress=False, journal=j, chunk_points=500)
    with pytest.raises(BadInput, match="another model"):
        verify(BAD, TASK, progress=False, journal=j, chunk_points=500)
    with pytest.raises(BadInput, match="another (task|model)"):
        other = make_task("multihop", hops=3, k=3, n_entities=4)
        verify(registry.build(other, "linear").model, other, progress=False, journal=j, chunk_points=500)
    with pytest.raises(BadInput, match="another chunk"):
        verify(GOOD, TASK, progress=False, journal=j, chunk_points=400)


def test_partial_last_line_is_redone(tmp_path):
    j = tmp_path / "j"
    verify(GOOD, TASK, progress=False, journal=str(j), chunk_points=500)
    lines = j.read_text().splitlines()
    j.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # a crash mid-append
    v = verify(GOOD, TASK, progress=False, journal=str(j), chunk_points=500)
    assert _triple(v) == _triple(verify(GOOD, TASK, progress=False))
    assert any(f"{len(lines) - 2} of 4 chunks came from the journal" in n for n in v.notes), v.notes


# The killed run stops itself (SIGSTOP) right after its third journal line, so the kill lands at the
# same point of the run on any machine; a polling parent raced the run and lost under load.
_STOP_AFTER_THIRD_LINE = """
import os, signal, sys
from depthcert.checkers import journal
from depthcert.cli.verify_construction import verify_construction_main
real, lines = journal.Journal.record, []
def record(self, res):
    real(self, res)
    lines.append(1)
    if len(lines) == 3:
        os.kill(os.getpid(), signal.SIGSTOP)
journal.Journal.record = record
verify_construction_main(sys.argv[1:])
"""


def test_sigkill_midway_then_resume(tmp_path):
    """A real SIGKILL of the verify-construction process while it journals (stopped right after
    its third chunk's line), then the same command: it skips the journalled chunks and prints the
    verdict of an uninterrupted run."""
    j = tmp_path / "journal.jsonl"
    cmd = [os.path.join(BIN, "verify-construction"), "tm", "--l", "6", "--alphabet", "4", "--variant", "heads",
           "--symmetry", "off", "--workers", "1", "--chunk-points", "64", "--batch-size", "16", "--journal", str(j),
           "--json"]
    proc = subprocess.Popen([sys.executable, "-c", _STOP_AFTER_THIRD_LINE] + cmd[1:], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    hang_stop = time.monotonic() + 600  # only a hang ends the wait; the outcome never depends on it
    while True:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            break
        if time.monotonic() > hang_stop:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the run neither stopped nor ended")
        time.sleep(0.05)
    if not os.WIFSTOPPED(status):
        pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()}")
    assert len(j.read_text().splitlines()) == 4  # header + 3 chunks
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(j.read_text().splitlines()) - 1
    assert proc.returncode == -signal.SIGKILL and done_before == 3
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    fresh = subprocess.run([c for c in cmd if c not in ("--journal", str(j))], capture_output=True, text=True,
                           timeout=600)
    a, b = json.loads(resumed.stdout), json.loads(fresh.stdout)
    assert resumed.returncode == fresh.returncode == 0
    for key in ("verdict", "min_margin", "points_checked", "points_covered"):
        assert a[key] == b[key], key
    note = " ".join(a["run_notes"])
    done_after = int(note.split(": ")[1].split(" of ")[0])
    assert done_after >= done_before and f"of {-(-4096 // 64)} chunks came from the journal" in note, note


@pytest.mark.slow
def test_benchmark_smoke_runs_every_row():
    """benchmarks/bench_all.py --quick (the script as a user runs it): one table row per --quick
    row, in order, none failed; a construction is verified, the random softmax + MLP model gets
    its exact verdict (smoke, not timed; benchmarks/check_quick_ratios.py times the rows)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "bench_all.py"), "--quick"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, os.path.join(root, "benchmarks"))
    import bench_all
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| row |"))
    columns = [c.strip() for c in lines[head].strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines[head + 2:]
            if line.startswith("| ")]
    quick = [row for row in bench_all.ROWS if row.quick is not None]
    assert quick and [d["row"] for d in rows] == [row.name for row in quick], r.stdout
    for row, d in zip(quick, rows):
        assert d.get("verdict") == "verified" if row.model == "construction" else d.get("verdict") in (
            "verified", "refuted"), (row.name, r.stdout)
