"""docs/robustness.md's tracr table: the smallest mlp_exactness that verifies, per library program,
at lengths 5 and 10 (`verify-tracr PROGRAM ... --find-min mlp-exactness --json`; not run by the tests).

    python benchmarks/tracr_exactness_table.py [--lengths 5,10] [--only make_length,...]

The numerical programs (make_frac_prevs, make_pair_balance) are verified when every output is
within --tolerance 1/100 of the program's value.  Each cell: e (e - 1 and its verdict), or what
the search reported.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time

# program, vocabulary, extra options: two tokens keep length 10 at 2,046 inputs; make_sort_unique
# assumes distinct tokens (its precondition), so it gets five of them and --distinct-tokens;
# shift_by and detect_pattern pad with None by design (--skip-none); the numerical programs are
# verified within a tolerance.
ROWS = (
    ("make_length", "1,2", ""),
    ("make_reverse", "1,2", ""),
    ("make_hist", "1,2", ""),
    ("make_sort_unique", "1,2,3,4,5", "--distinct-tokens"),
    ("make_sort", "1,2", ""),
    ("make_sort_freq", "1,2", ""),
    ("make_count_less_freq", "1,2", ""),
    ("make_count", "1,2", ""),
    ("shift_by", "1,2", "--skip-none"),
    ("detect_pattern", "1,2", "--skip-none"),
    ("make_shuffle_dyck", "(,)", ""),
    ("make_shuffle_dyck2", "(,)", ""),
    ("make_frac_prevs", "1,2", "--tolerance 1/100"),
    ("make_pair_balance", "(,)", "--tolerance 1/100"),
)


def cell(program: str, vocab: str, extra: str, length: int) -> tuple[str, str]:
    cmd = ["verify-tracr", program, "--vocab", vocab, "--max-seq-len", str(length), *shlex.split(extra),
           "--find-min", "mlp-exactness", "--json"]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t
    if out.returncode not in (0, 1):
        return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1], f"{secs:.0f} s"
    info = json.loads(out.stdout)
    e, fails = info.get("mlp_exactness"), info.get("fails_at")
    if e is None:
        text = info.get("note", "none")
    elif fails is None:
        text = f"{e} (the first value tried)"
    else:
        text = f"{e} ({fails} {info['tried'][str(fails)]})"
    return text, f"{secs:.0f} s"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="5,10")
    p.add_argument("--only", default="")
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    only = set(filter(None, a.only.split(",")))
    print("| program | vocab | options | " + " | ".join(f"min mlp_exactness at length {L}" for L in lengths) + " |")
    print("|---|---|---|" + "---|" * len(lengths))
    for program, vocab, extra in ROWS:
        if only and program not in only:
            continue
        cells = [cell(program, vocab, extra, L) for L in lengths]
        print(f"| `{program}` | {vocab} | {extra or '-'} | " + " | ".join(c[0] for c in cells) + " |", flush=True)
        print(f"{program}: " + ", ".join(c[1] for c in cells), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
