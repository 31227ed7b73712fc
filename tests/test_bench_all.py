"""benchmarks/bench_all.py --quick: whole commands against a plain float64 forward.

A ratio, never an absolute time: each row's whole run (build, read-out fit, verification) over
its float64 forward, measured in one process on the same machine, must stay within SLACK times the
ratio recorded in bench_all.QUICK_RATIOS.  A 10x slowdown of any whole run fails; the machine's
load moves both sides alike.  A row over its bound is measured once more before it fails."""
from __future__ import annotations

import io
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import bench_all  # noqa: E402

SLACK = 4  # below 10: a 10x regression fails even after a 2x lucky measurement of the baseline


def test_quick_rows_have_recorded_ratios():
    quick = {r.name for r in bench_all.ROWS if r.quick is not None}
    assert quick == set(bench_all.QUICK_RATIOS)
    # the --quick run covers the kinds of whole run the issue names: a fitted read-out, softmax models
    assert any(r.task == "tm" for r in bench_all.ROWS if r.name in quick)
    assert any(r.model != "construction" for r in bench_all.ROWS if r.name in quick)


def test_quick_whole_runs_within_slack_of_the_recorded_ratios():
    out = io.StringIO()
    results = bench_all.run(quick=True, out=out)
    table = out.getvalue()
    assert len(results) == len(bench_all.QUICK_RATIOS), table
    slow = []
    for d in results:
        bound = SLACK * bench_all.QUICK_RATIOS[d["name"]]
        assert d["verdict"] in ("verified", "refuted"), table
        # not vacuous: this run made ten times slower would be over the bound
        assert 10 * d["whole_ratio"] > bound, f"{d['name']}: bound {bound:.1f} too loose for {d['whole_ratio']:.2f}"
        if d["whole_ratio"] > bound:
            row = next(r for r in bench_all.ROWS if r.name == d["name"])
            again = bench_all.one_row(row, quick=True)
            if again["whole_ratio"] > bound:
                slow.append(f"{d['name']}: whole / float64 {d['whole_ratio']:.1f} and {again['whole_ratio']:.1f}, "
                            f"bound {bound:.1f} ({SLACK} x recorded {bench_all.QUICK_RATIOS[d['name']]})")
    assert not slow, "\n".join(slow) + "\n" + table


def test_full_table_has_the_rows_the_goal_is_stated_for():
    names = {r.name for r in bench_all.ROWS}
    assert {f"TM {v} l={l}" for v in ("heads", "ternary") for l in (5, 6, 7)} <= names
    assert {"ICTM (fixed)", "ICQA, layer 2 softmax (scale 64)", "random 2-layer softmax + MLP"} <= names
    softmax = [r for r in bench_all.ROWS if r.model != "construction"]
    assert {bench_all.make_task_size(r) for r in softmax} == {43_200, 15_625}
