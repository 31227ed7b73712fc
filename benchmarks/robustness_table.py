"""docs/robustness.md's construction table: every command of README's results table, run with
--compare-readouts --robustness --json, one markdown row each (not run by the tests).

    python benchmarks/robustness_table.py
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
from fractions import Fraction
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "docs" / "results.md"  # its results table


def commands() -> list[tuple[str, str]]:
    text = README.read_text()
    block = text.split("<!-- results-table -->", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in block.splitlines():
        m = re.match(r"\| ([^|]+) \| `(verify-construction [^`]+)` \|", line)
        if m:
            rows.append((m.group(1).strip(), m.group(2)))
    return rows


def fmt_margin(v) -> str:
    if v is None:
        return "-"
    if "/" in v and len(v) > 20:
        from fractions import Fraction

        return f"{float(Fraction(v)):.3g}"
    return v


def main() -> None:
    print("| construction | command | read-out used | normalized margins | linf eps certified / broken | "
          "fewest bits (b-1 fails) | float16 | bfloat16 | float32 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, cmd in commands():
        argv = shlex.split(cmd)[1:] + ["--compare-readouts", "--robustness", "--json"]
        out = subprocess.run(["verify-construction", *argv], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            print(f"| {name} | `{cmd}` | {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode} "
                  "| | | | | | |", flush=True)
            continue
        try:
            info = json.loads(out.stdout)
        except json.JSONDecodeError:
            print(f"| {name} | `{cmd}` | no JSON (exit {out.returncode}) | | | | | | |", flush=True)
            continue
        margins = ", ".join(f"{k} {fmt_margin(v)}" for k, v in info["readout_margins"].items())
        r = info.get("robustness", {})
        lin = r.get("linf_radius", {})
        bits = r.get("min_fraction_bits", {})
        fm = r.get("formats", {})

        def f(k):
            e = fm.get(k, {})
            low = e.get("worst_margin_lower")
            return ("yes" if e.get("ok") else "no") + (f" ({float(Fraction(low)):.3g})" if low else "")

        print(f"| {name} | `{cmd}` | {info['readout']} | {margins} | {lin.get('certified_lower', '-')} / "
              f"{lin.get('broken_upper', '-')} | {bits.get('bits', '-')} ({bits.get('fails_at', '-')}) | "
              f"{f('float16')} | {f('bfloat16')} | {f('float32')} |", flush=True)


if __name__ == "__main__":
    main()
