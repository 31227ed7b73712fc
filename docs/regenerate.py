"""Rewrite the tool-printed tables of README.md and docs/*.md from what the tools print today.

    python docs/regenerate.py                 rewrite every marked table (every row, slow ones too)
    python docs/regenerate.py --check         re-run the rows checked in CI and compare (exit 1 on a
                                              difference, naming the file, the row and both values);
                                              nothing is written.  tests/test_docs.py runs it.
    python docs/regenerate.py --check --slow  the same for every row, the slow ones too (.ci/run's
                                              main job runs it)
    python docs/regenerate.py --list          the marked tables and their rows

A marked table is the Markdown table directly under a line `<!-- regenerate: commands -->`.  One
row is one command: its `command` cell holds the command line (in backticks), and every cell whose
column header names a field below (`layers`, `heads`, `d'`, `points`, `points covered`,
`evaluated`, `inputs`, `verdict`, `min margin`, `min margin (~ rounded)`, `read-out`, ...: FIELDS) is filled from that command's `--json`
document.  Other cells (names, remarks) are kept as written.  A row is added by writing its name
and command and running this script.

A table may have a `checked` column: `CI` rows are re-run by `--check` (in the test suite); a row
too slow for the suite says `ran YYYY-MM-DD` instead (the date the full regeneration last ran it),
is rewritten only by a full run and compared by `--check --slow` (CI's main job, after the tests).
Without that column every row is checked by `--check`.

A fenced block under `<!-- doc-test: slow -->` is a doc-test (`$ command` lines, each followed by
exactly what it prints, `(exit N)` when not 0; wall times masked) too slow for the test suite:
`--check --slow` runs its commands and compares, a plain run rewrites it.  Commands run in a
temporary folder that links the checkout's entries, so a file a command writes lands there.

tests/test_docs.py also fails when a table or a fenced block of command output in README.md or
docs/ has no source at all (see `SOURCE MARKERS` there).
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "<!-- regenerate: commands -->"
BIN = os.path.dirname(sys.executable)


def _margin(doc: dict) -> str:
    """The exact margin, or a softmax model's certified enclosure [lower, upper]."""
    m = doc.get("min_margin", doc.get("margin"))
    if m is None:
        return "-"
    if "exact" in m:
        return m["exact"]
    if "formula" in m:
        return m["formula"]
    return f"[{m['lower']}, {m['upper']}]"


def _points(doc: dict) -> str:
    """The dataset's size (verify-construction, find-dependence, verify-model); with verify-model
    the certified count of correct points first."""
    if "correct" in doc and "points" in doc:
        return f"{doc['correct']:,} of {doc['points']:,} correct"
    n = doc.get("points_total", doc.get("points"))
    return "-" if n is None else f"{n:,}"


def _margin_short(doc: dict) -> str:
    """The exact margin, or `~` and three digits when its fraction is longer than 40 characters
    (`--json` has it in full)."""
    m = _margin(doc)
    if len(m) <= 40 or not re.fullmatch(r"-?\d+(/\d+)?", m):
        return m
    from fractions import Fraction
    return f"~{float(Fraction(m)):.3g}"


def _percent_correct(doc: dict) -> str:
    """verify-model's certified count of correct points and its share."""
    return f"{doc['correct']:,} ({100 * doc['correct'] / doc['points']:.4f}%)"


def _disagreements(doc: dict) -> str:
    """verify-model --compare-float: points where the float32 / float64 forward and the certified
    verdict disagree."""
    f = doc["float_comparison"]
    return f"{f['float32']['disagreements']:,} / {f['float64']['disagreements']:,}"


def _depth_bounds(d: dict) -> str:
    """find-depth: the minimal depth, or its bounds."""
    if d["exact"]:
        return str(d["minimal_depth"])
    lo, up = d["lower_bound"], d["upper_bound"]
    return f"{lo}-{up}" if up else f">= {lo}"


def _depth_at(layers: int):
    """find-depth: the outcome at one depth, in a few words."""
    def cell(d: dict) -> str:
        for x in d["depths"]:
            if x["layers"] != layers:
                continue
            if x["outcome"] == "impossible":
                c = x["certificate"]
                if c["version"] == 3:
                    return (f"impossible: {c['points']} pts, clausal: {c['lemmas']:,} lemmas, {c['steps']:,} steps, "
                            f"{x['work_rounds']:,} rounds")
                return f"impossible: {c['points']} pts, tree of {c['nodes']:,}"
            if x["outcome"] == "model":
                m = x["model"]
                k = m.get("padded_from_heads")
                src = m.get("source", "")
                parts = (["known"] if src.startswith("known model") else ["clausal"] if "clausal" in src else []) + \
                        ([f"{k} head{'s' if k > 1 else ''}, padded"] if k else [])
                how = f" ({', '.join(parts)})" if parts else ""
                return f"model, d'={m['d_model']}{how}"
            stop = " (safety stop: depends on the machine)" if x.get("machine_dependent") else ""
            rounds = f" and {x['work_rounds']:,} rounds" if x.get("work_rounds") else ""
            nodes = x["work_nodes"]
            return f"open after {nodes:,} node{'' if nodes == 1 else 's'}{rounds}{stop}"
        return "-"
    return cell


def _one_layer_model(doc: dict) -> str:
    """find-dependence: the fitted one-layer model of a fittable dataset, as verified."""
    if not doc["fittable"]:
        return "-"
    m = doc["model"]
    return (f"{m['layers']} layer, {m['heads']} heads, d'={m['dim']}, {'verified' if m['verified'] else 'refuted'}, "
            f"min margin {m['min_margin']['exact']}")


# column header -> the cell's text from the command's --json document ("-" where it has no such field)
FIELDS = {
    "layers": lambda d: str(d["layers"]),
    "heads": lambda d: ",".join(map(str, d["heads"])),
    "d'": lambda d: str(d["d_model"]),
    "points": _points,
    "points covered": lambda d: str(d["points_covered"]),
    "evaluated": lambda d: str(d["points_checked"]),
    "inputs": lambda d: f"{d['inputs']:,}",
    "steps each": lambda d: str(d["steps"]),  # verify-construction --cot
    "verdict": lambda d: d["verdict"].replace("_", " ") + (
        f" {d['minimal_depth']}" if d["verdict"] == "minimal_depth" else ""),
    "min margin": _margin,
    "min margin (~ rounded)": _margin_short,
    "read-out": lambda d: d.get("readout", "-"),
    "certified accuracy": _percent_correct,
    "wrong": lambda d: f"{d['wrong']:,}",
    "undecided": lambda d: f"{d['undecided_points']:,}",
    "min margin (certified enclosure)": _margin,
    "float32 / float64 disagreements": _disagreements,
    "minimal depth": _depth_bounds,
    "L = 1": _depth_at(1),
    "L = 2": _depth_at(2),
    "L = 3": _depth_at(3),
    "work (nodes)": lambda d: f"{sum(x['work_nodes'] for x in d['depths']):,}",
    "work (rounds)": lambda d: f"{sum(x.get('work_rounds', 0) for x in d['depths']):,}",
    "path": lambda d: d["evaluation"],
    "certificate points": lambda d: "-" if d["fittable"] else str(d["points_in_certificate"]),
    "one-layer model": _one_layer_model,
}


def _field(name: str, doc: dict) -> str:
    try:
        return FIELDS[name](doc)
    except KeyError:
        return "-"


def doc_files() -> list[str]:
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def marked_tables(path: str) -> list[tuple[int, int]]:
    """[(index of the header line, index past the last row)] of the tables under MARK."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    for i, line in enumerate(lines):
        if line.strip() == MARK:
            if i + 2 >= len(lines) or not lines[i + 1].startswith("|"):
                raise SystemExit(f"{os.path.relpath(path, ROOT)}:{i + 1}: {MARK} must precede a table")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append((i + 1, j))
    return out


SLOW_DOC_TEST = "<!-- doc-test: slow -->"


def mask_times(text: str) -> str:
    """The output with its wall times replaced by <t> (the only thing a doc-test does not compare)."""
    text = re.sub(r"(wall time\s+)\d+\.\d+ s in all, \d+\.\d+ s evaluating", r"\1<t>", text)
    text = re.sub(r"^(  wall time\s+).*\d+\.\d+ s in all.*$", r"\1<t>", text, flags=re.M)  # any split of the time
    text = re.sub(r"^time: \d+\.\d+ s$", "time: <t> s", text, flags=re.M)
    text = re.sub(r"^time {11}.*$", lambda m: re.sub(r"\d+\.\d+ s", "<t> s", m.group(0)), text, flags=re.M)
    text = re.sub(r"(by a plain float(?:32|64) forward )\(\d+\.\d+ s\)", r"\1(<t> s)", text)  # --compare-float
    text = re.sub(r"^(  compiled .*)\(\d+\.\d+ s\)$", r"\1(<t> s)", text, flags=re.M)  # verify-tracr's compile time
    return re.sub(r'"(total_)?seconds": [0-9.]+', r'"\1seconds": <t>', text)


def slow_doc_tests(lines: list[str]) -> list[tuple[int, int]]:
    """[(index of the opening fence, index of the closing fence)] of the blocks under SLOW_DOC_TEST."""
    out = []
    for i, line in enumerate(lines):
        if line.strip() == SLOW_DOC_TEST:
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                raise SystemExit(f"line {i + 1}: {SLOW_DOC_TEST} must precede a fenced block")
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 1, j))
    return out


def _linked_checkout(folder: str) -> str:
    for name in os.listdir(ROOT):
        if name != ".git":
            os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))
    return folder


def run_doc_test_block(body: list[str]) -> list[str]:
    """The block's `$ command` lines, each followed by what it prints today (and `(exit N)`)."""
    out = []
    with tempfile.TemporaryDirectory() as folder:
        cwd = _linked_checkout(folder)
        for line in body:
            if not line.startswith("$ "):
                continue
            argv = shlex.split(line[2:])
            argv[0] = os.path.join(BIN, argv[0])
            r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=3600)
            out.append(line)
            out.extend(r.stdout.rstrip("\n").split("\n"))
            if r.returncode:
                out.append(f"(exit {r.returncode})")
    return out


def run_json(command: str) -> dict:
    argv = shlex.split(command) + ["--json"]
    argv[0] = os.path.join(BIN, argv[0])
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if r.returncode not in (0, 1, 3):
        raise RuntimeError(f"`{command}` exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def regenerate_row(header: list[str], cells: list[str], today: str | None) -> list[str]:
    """The row's cells with every FIELDS column recomputed (and its `checked` date set to today)."""
    command = cells[header.index("command")].strip("`")
    doc = run_json(command)
    out = list(cells)
    for k, name in enumerate(header):
        if name in FIELDS:
            out[k] = _field(name, doc)
        elif name == "checked" and today is not None and cells[k] != "CI":
            out[k] = f"ran {today}"
    return out


def is_checked_in_ci(header: list[str], cells: list[str]) -> bool:
    return "checked" not in header or cells[header.index("checked")] == "CI"


def process(path: str, check: bool, log=print, slow: bool = False) -> list[str]:
    """Regenerate (or with `check` compare: the CI rows, every row with `slow`) the marked tables of
    one file; returns the differences."""
    lines = open(path, encoding="utf-8").read().split("\n")
    rel = os.path.relpath(path, ROOT)
    diffs = []
    today = datetime.date.today().isoformat()
    for head, end in marked_tables(path):
        header = _cells(lines[head])
        if "command" not in header:
            raise SystemExit(f"{rel}:{head + 1}: a regenerated table needs a `command` column")
        for r in range(head + 2, end):
            cells = _cells(lines[r])
            if check and not slow and not is_checked_in_ci(header, cells):
                continue
            new = regenerate_row(header, cells, None if check else today)
            if new != cells:
                changed = [f"{header[k]}: {cells[k]!r} -> {new[k]!r}" for k in range(len(cells)) if new[k] != cells[k]]
                diffs.append(f"{rel}:{r + 1}: `{cells[header.index('command')].strip('`')}`: " + "; ".join(changed))
                lines[r] = "| " + " | ".join(new) + " |"
    if check and slow or not check:
        for start, end in reversed(slow_doc_tests(lines)):
            body = lines[start + 1:end]
            new = run_doc_test_block(body)
            if [mask_times(x) for x in new] != [mask_times(x) for x in body]:
                first = next((k for k, (a, b) in enumerate(zip(body, new)) if mask_times(a) != mask_times(b)),
                             min(len(body), len(new)))
                was = body[first] if first < len(body) else "(nothing)"
                now = new[first] if first < len(new) else "(nothing)"
                diffs.append(f"{rel}:{start + 2 + first}: doc-test (slow): {was!r} -> {now!r}")
                lines[start + 1:end] = new
    if diffs and not check:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
        log(f"rewrote {rel} ({len(diffs)} rows)")
    return diffs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="compare the CI rows, write nothing (exit 1 on a difference)")
    p.add_argument("--slow", action="store_true", help="with --check: compare every row, the slow (`ran DATE`) ones too")
    p.add_argument("--list", action="store_true", help="list the marked tables and their commands")
    p.add_argument("files", nargs="*", help="only these files (default: README.md and docs/*.md)")
    args = p.parse_args(argv)
    files = [os.path.abspath(f) for f in args.files] or doc_files()
    if args.list:
        for path in files:
            lines = open(path, encoding="utf-8").read().split("\n")
            for head, end in marked_tables(path):
                header = _cells(lines[head])
                for r in range(head + 2, end):
                    cells = _cells(lines[r])
                    where = "CI" if is_checked_in_ci(header, cells) else cells[header.index("checked")]
                    print(f"{os.path.relpath(path, ROOT)}:{r + 1}  [{where}]  {cells[header.index('command')].strip('`')}")
            for start, end in slow_doc_tests(lines):
                for k in range(start + 1, end):
                    if lines[k].startswith("$ "):
                        print(f"{os.path.relpath(path, ROOT)}:{k + 1}  [slow doc-test]  {lines[k][2:]}")
        return 0
    if args.slow and not args.check:
        p.error("--slow goes with --check (a plain run rewrites every row, the slow ones too)")
    diffs = []
    for path in files:
        diffs += process(path, args.check, slow=args.slow)
    for d in diffs:
        print(d)
    if args.check:
        which = "row" if args.slow else "CI row"
        print(f"{len(diffs)} rows differ from what their commands print" if diffs else f"every {which} is what its command prints")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
