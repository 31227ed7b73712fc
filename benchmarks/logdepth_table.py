"""The results table of docs/logdepth.md: layers against input length, next to the one-layer verdict.

    python benchmarks/logdepth_table.py                 (every row; the largest take minutes each)
    python benchmarks/logdepth_table.py --max-points 5000
    python benchmarks/logdepth_table.py --write docs/logdepth.md

Each row runs `verify-construction TASK OPTIONS --variant V --json` (every point evaluated, no
symmetry is declared for these tasks; the default time guard, which times a batch before it
refuses) and `find-dependence --task TASK OPTIONS --json` in their own
processes, and prints one markdown row: layers, heads, d', points, min margin, the evaluation
seconds the tool printed, and the one-layer verdict.  A row whose verdict is not `verified` (or
whose certificate the checker did not accept) is printed as such, never dropped.  `--write FILE`
replaces the table below the `<!-- logdepth-table -->` marker in FILE.  tests/test_logdepth_table.py
runs the rows of up to 1,024 points and compares every column but the seconds with the docs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass

MARKER = "<!-- logdepth-table -->"
HEADER = ("| task, size | variant | layers | heads per layer | d' | points | min margin | seconds | one layer |\n"
          "|---|---|---:|---|---:|---:|---:|---:|---|")


@dataclass(frozen=True)
class Row:
    label: str            # "parity n=8"
    task: str
    options: tuple        # CLI options of the task's sizes, e.g. ("--n", "8")
    variant: str
    points: int           # the dataset's size (to select rows before running them)


def _parity(n, variant):
    return Row(f"parity n={n}", "parity", ("--n", str(n)), variant, 2 ** n)


def _mod(p, n, variant):
    return Row(f"mod-count p={p} n={n}", "mod-count", ("--p", str(p), "--n", str(n)), variant, 2 ** n)


def _word(group, n, variant, gens):
    return Row(f"word-problem {group} n={n}", "word-problem", ("--group", group, "--n", str(n)), variant, gens ** n)


def _reach(v, variant):
    return Row(f"reachability V={v}", "reachability", ("--vertices", str(v)), variant, 2 ** (v * v) * v * v)


ROWS = (
    [_parity(n, "tree") for n in (2, 4, 8, 12, 14, 16)]
    + [_parity(n, "tree-mlp") for n in (2, 4, 8, 12, 16, 20)]
    + [_parity(n, "count") for n in (2, 8, 16, 20, 24)]
    + [_mod(3, n, "tree") for n in (4, 8, 12)]
    + [_mod(3, 8, "tree-mlp"), _mod(3, 16, "tree-mlp"), _mod(3, 8, "count"), _mod(3, 16, "count"),
       _mod(5, 16, "tree-mlp"), _mod(5, 16, "count")]
    + [_word("a5", n, "tree", 2) for n in (2, 4, 8, 10, 12)]
    + [_word("a5", n, "tree-mlp", 2) for n in (2, 4, 8, 16, 20)]
    + [_word("s5", 8, "tree", 2), _word("s5", 16, "tree-mlp", 2),
       _word("c5", 6, "tree", 5), _word("c5", 8, "tree-mlp", 5)]
    + [_reach(v, "squaring") for v in (1, 2, 3, 4)]
    + [_reach(v, "squaring-mlp") for v in (1, 2, 3, 4)]
)


def _run_json(argv: list[str]) -> dict:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise RuntimeError(f"{' '.join(argv)}: {last}")
    return json.loads(r.stdout)


_ONE_LAYER: dict = {}


def measure(row: Row, run_json=_run_json) -> dict:
    """Run the row's two commands (run_json(argv) -> their --json output); return the table's columns."""
    v = run_json(["verify-construction", row.task, *row.options, "--variant", row.variant, "--json"])
    key = (run_json, row.task, row.options)     # the one-layer verdict is shared by the size's variants
    if key not in _ONE_LAYER:
        _ONE_LAYER[key] = run_json(["find-dependence", "--task", row.task, *row.options, "--json"])
    d = _ONE_LAYER[key]
    if d.get("fittable"):
        one = "fittable"
    elif str(d.get("check", "")).startswith("valid"):
        one = f"certificate ({d['points_in_certificate']})"
    else:
        one = f"no verdict ({d.get('check', 'no certificate')})"
    return dict(label=row.label, variant=row.variant, verdict=v["verdict"], layers=v["layers"],
                heads=",".join(map(str, v["heads"])), d_model=v["d_model"], points=v["points_covered"],
                checked=v["points_checked"], margin=(v["min_margin"] or {}).get("exact"), seconds=v["seconds"], one_layer=one)


def markdown(m: dict) -> str:
    margin = m["margin"] if m["verdict"] == "verified" else f"{m['verdict'].upper()}"
    return (f"| {m['label']} | {m['variant']} | {m['layers']} | {m['heads']} | {m['d_model']} | "
            f"{m['points']:,} | {margin} | {m['seconds']:.2f} | {m['one_layer']} |")


def write_table(path: str, lines: list[str]) -> None:
    text = open(path).read()
    head, sep, rest = text.partition(MARKER)
    if not sep:
        raise SystemExit(f"{path}: no {MARKER} marker")
    body = rest.lstrip("\n").split("\n\n", 1)
    tail = body[1] if len(body) > 1 else ""
    with open(path, "w") as f:
        f.write(head + MARKER + "\n" + HEADER + "\n" + "\n".join(lines) + "\n\n" + tail)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-points", type=int, default=None, help="only rows with at most this many points")
    p.add_argument("--write", metavar="FILE", help="replace the table below the marker in FILE")
    a = p.parse_args(argv)
    rows = [r for r in ROWS if a.max_points is None or r.points <= a.max_points]
    lines = []
    print(HEADER, flush=True)
    for row in rows:
        line = markdown(measure(row))
        print(line, flush=True)
        lines.append(line)
    if a.write:
        write_table(a.write, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
