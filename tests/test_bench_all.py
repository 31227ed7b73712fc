"""benchmarks/bench_all.py's rows, untimed: every --quick row has a recorded ratio, and the full
table has the rows the goal is stated for.

The timed check (each --quick whole run within 4x its recorded whole / float64 ratio) is a
benchmark, benchmarks/check_quick_ratios.py: no test depends on the machine's speed or load.
tests/test_shards.py::test_benchmark_smoke_runs_every_row runs --quick untimed."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import bench_all  # noqa: E402
import check_quick_ratios  # noqa: E402


def test_quick_rows_have_recorded_ratios():
    quick = {r.name for r in bench_all.ROWS if r.quick is not None}
    assert quick == set(bench_all.QUICK_RATIOS)
    # the --quick run covers the kinds of whole run the issue names: a fitted read-out, softmax models
    assert any(r.task == "tm" for r in bench_all.ROWS if r.name in quick)
    assert any(r.model != "construction" for r in bench_all.ROWS if r.name in quick)


def test_the_ratio_check_names_a_slow_row_and_passes_a_fast_one():
    """check_quick_ratios.slow_rows on made-up measurements (no timing): a row 10x its recorded
    ratio fails when measured again as slow, passes when the second measurement is within; an entry
    so high that a 10x slower run would pass is named too."""
    name, recorded = next(iter(bench_all.QUICK_RATIOS.items()))
    slow = {"name": name, "verdict": "verified", "whole_ratio": 10 * recorded}
    fast = {"name": name, "verdict": "verified", "whole_ratio": recorded}
    assert check_quick_ratios.slow_rows([fast], remeasure=lambda n: slow) == []
    assert check_quick_ratios.slow_rows([slow], remeasure=lambda n: fast) == []
    out = check_quick_ratios.slow_rows([slow], remeasure=lambda n: slow)
    assert len(out) == 1 and out[0].startswith(f"{name}: whole / float64"), out
    assert check_quick_ratios.slow_rows([dict(fast, verdict="undecided")], remeasure=lambda n: fast) != []
    loose = check_quick_ratios.slow_rows([dict(fast, whole_ratio=recorded / 20)], remeasure=lambda n: fast)
    assert len(loose) == 1 and "too loose" in loose[0], loose


def test_full_table_has_the_rows_the_goal_is_stated_for():
    names = {r.name for r in bench_all.ROWS}
    assert {f"TM {v} l={l}" for v in ("heads", "ternary") for l in (5, 6, 7)} <= names
    assert {"ICTM (fixed)", "ICQA, layer 2 softmax (scale 64)", "random 2-layer softmax + MLP"} <= names
    softmax = [r for r in bench_all.ROWS if r.model != "construction"]
    assert {bench_all.make_task_size(r) for r in softmax} == {43_200, 15_625}
