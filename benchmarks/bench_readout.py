"""Whole verify-construction run with the max-margin read-out against a plain float64 forward.

    python benchmarks/bench_readout.py [--l 7] [--alphabet 7] [--variant ternary|heads]

Runs `verify-construction tm --l L --alphabet M --variant V --symmetry off` (build, the LP
read-out fit and the exact check of every point) in this process, as bench_all.py does, and
the plain float64 forward of the same model over the same points; prints both times, their
ratio (goal: at most 2), the read-out's normalized margin and its note (the LP's rounds, caps
and bound: proofs/readout.py).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_all  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--l", type=int, default=7)
    p.add_argument("--alphabet", type=int, default=7)
    p.add_argument("--variant", default="ternary", choices=("ternary", "heads"))
    a = p.parse_args()
    row = bench_all.Row(f"TM {a.variant} l={a.l}", "tm", dict(l=a.l, alphabet=a.alphabet), None, a.variant)
    d = bench_all.one_row(row, quick=False)
    print(f"$ {d['command']}")
    print(f"  verdict {d['verdict']}, {d['points']:,} points; read-out {d['readout']}: {d['readout_note']}")
    print(f"  normalized margins: {d['readout_margins']}")
    print(f"  whole run {d['whole_s']:.2f} s (evaluating {d['eval_s']:.2f} s); plain float64 forward "
          f"{d['float_s']:.3f} s; ratio {d['whole_ratio']:.2f} (goal <= 2)")


if __name__ == "__main__":
    main()
