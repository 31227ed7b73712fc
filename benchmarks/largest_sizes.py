"""docs/results.md's "largest sizes verified" table: each command run once here, its --json read back.

    python benchmarks/largest_sizes.py                  (every row in its own process: ~15 minutes)
    python benchmarks/largest_sizes.py --write docs/results.md

Each row is one `verify-construction ... --json` run (default time guard: a row that needs more
prints the tool's refusal, never a made-up number); the table shows points covered, points
evaluated, the min margin (exact; a long fraction as its short decimal, the exact value is in the
--json) and the tool's own total wall time.  `--write FILE` replaces the table below the
`<!-- largest-sizes-table -->` marker.  Seconds depend on the machine and its load; the other
columns do not.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from fractions import Fraction

MARKER = "<!-- largest-sizes-table -->"
HEADER = ("| construction | command | points | evaluated | min margin | wall time |\n"
          "|---|---|---|---|---|---|")

ROWS = [
    ("Theorem 5 heads (fixed)", "tm --l 6 --alphabet 6 --variant heads"),
    ("Theorem 5 ternary (fixed)", "tm --l 7 --alphabet 7 --variant ternary"),
    ("Theorem 6 (fixed)", "ictm --k 3 --l 3 --alphabet 4 --n-answers 3"),
    ("multi-hop, paper 2h (fixed)", "multihop --hops 8 --k 4 --n-entities 6 --variant paper"),
    ("multi-hop, pointer doubling", "multihop --hops 8 --k 4 --n-entities 6 --variant doubling"),
    ("composition, one lookup per layer (causal)", "composition --L 4 --N 3"),
    ("composition, preimage doubling (causal)", "composition --L 4 --N 3 --variant doubling"),
    ("composition, encoder doubling (no mask)", "composition --L 4 --N 3 --variant encoder-doubling"),
    ("composition, chain of thought (every step)", "composition --cot --L 4 --N 3"),
    ("parity, binary tree", "parity --n 16"),
    ("parity, counting (2 layers)", "parity --n 24 --variant count"),
    ("A5 word problem, binary tree", "word-problem --group a5 --n 12"),
    ("A5 word problem, tree + MLP", "word-problem --group a5 --n 20 --variant tree-mlp"),
    ("reachability, repeated squaring", "reachability --vertices 4"),
    ("reachability, squaring + ReLU MLP", "reachability --vertices 4 --variant squaring-mlp"),
]


def _margin(m) -> str:
    text = str(m["exact"] if isinstance(m, dict) else m)  # the --json margin object
    if len(text) <= 12:
        return text
    return f"{float(Fraction(text)):.3g} (exact in --json)"


def run_row(label: str, command: str) -> str:
    argv = ["verify-construction", *command.split(), "--json"]
    r = subprocess.run(argv, capture_output=True, text=True)
    shown = f"`verify-construction {command}`"
    if r.returncode != 0 or not r.stdout.strip():
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return f"| {label} | {shown} | not run: {last} | | | |"
    d = json.loads(r.stdout)
    points = f"{d['points_total']:,}" + (f" inputs x {d['steps']} steps" if d.get("cot") else "")
    covered = d.get("points_covered", d["points_checked"])
    if covered != d["points_total"] or d["verdict"] != "verified":
        return f"| {label} | {shown} | {d['verdict']}: {covered:,} of {d['points_total']:,} | | | |"
    return (f"| {label} | {shown} | {points} | {d['points_checked']:,} | {_margin(d['min_margin'])} | "
            f"{d['total_seconds']:.0f} s |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", metavar="FILE", help="replace the table below the marker in FILE")
    a = p.parse_args(argv)
    print(HEADER, flush=True)
    lines = []
    for label, command in ROWS:
        lines.append(run_row(label, command))
        print(lines[-1], flush=True)
    if a.write:
        text = open(a.write).read()
        head, sep, rest = text.partition(MARKER)
        if not sep:
            raise SystemExit(f"{a.write}: no {MARKER} marker")
        parts = rest.lstrip("\n").split("\n\n", 1)
        with open(a.write, "w") as f:
            f.write(head + MARKER + "\n" + HEADER + "\n" + "\n".join(lines) + "\n\n" + (parts[1] if len(parts) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
