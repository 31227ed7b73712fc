"""Check `bench_all.py --quick`'s whole runs against their recorded ratios (a benchmark, not a test).

    python benchmarks/check_quick_ratios.py     exit 0: every row within 0.4-SLACK x its recorded
                                                ratio; exit 1: the rows outside, named (after the table)

A ratio, never an absolute time: each row's whole run (build, read-out fit, verification) over its
float64 forward, measured in one process on the same machine, must stay within SLACK times the ratio
recorded in bench_all.QUICK_RATIOS, so a 10x slowdown of any whole run fails.  A row over its bound
is measured once more before it fails.  It times things, so it is not part of the test suite (no
test depends on the machine's speed or load): run it on an idle machine before re-recording the
benchmark tables (docs/development.md, Benchmarks).  tests/test_bench_all.py checks, without
timing, that every --quick row has a recorded ratio.
"""
from __future__ import annotations

import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_all  # noqa: E402

SLACK = 4  # below 10: a 10x regression fails even after a 2x lucky measurement of the baseline


def slow_rows(results: list[dict], remeasure=lambda name: bench_all.one_row(
        next(r for r in bench_all.ROWS if r.name == name), quick=True)) -> list[str]:
    """The rows whose whole / float64 ratio is over SLACK x recorded, twice (measured again once), or
    so far under it that a 10x slower run would still pass (the recorded entry is too high)."""
    slow = []
    for d in results:
        bound = SLACK * bench_all.QUICK_RATIOS[d["name"]]
        if d["verdict"] not in ("verified", "refuted"):
            slow.append(f"{d['name']}: verdict {d['verdict']}")
            continue
        if 10 * d["whole_ratio"] <= bound:
            slow.append(f"{d['name']}: bound {bound:.1f} too loose for {d['whole_ratio']:.2f} (re-record its entry)")
            continue
        if d["whole_ratio"] > bound:
            again = remeasure(d["name"])
            if again["whole_ratio"] > bound:
                slow.append(f"{d['name']}: whole / float64 {d['whole_ratio']:.1f} and {again['whole_ratio']:.1f}, "
                            f"bound {bound:.1f} ({SLACK} x recorded {bench_all.QUICK_RATIOS[d['name']]})")
    return slow


def main() -> int:
    out = io.StringIO()
    results = bench_all.run(quick=True, out=out)
    print(out.getvalue(), end="")
    missing = set(bench_all.QUICK_RATIOS) - {d["name"] for d in results}
    slow = slow_rows(results) + [f"{name}: no result" for name in sorted(missing)]
    for line in slow:
        print(line)
    print(f"{len(slow)} of {len(bench_all.QUICK_RATIOS)} rows outside 0.4-{SLACK} x their recorded ratio" if slow
          else f"every --quick row within 0.4-{SLACK} x its recorded ratio")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
