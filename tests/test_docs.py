"""Docs cannot drift: every block marked `<!-- doc-test -->` in README.md and docs/*.md is run.

A marked block is a fenced block of `$ command` lines, each followed by exactly what the command
prints (stdout), optionally ending with `(exit N)` when the exit code is not 0.  Wall times are
the only thing masked.  The example files under docs/examples/ are regenerated from the builders
in tests/test_weights_v2.py and must equal the committed ones.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "<!-- doc-test -->"
BIN = os.path.dirname(sys.executable)


def doc_blocks():
    out = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        lines = open(path).read().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            assert lines[i + 1].startswith("```"), f"{path}:{i + 2}: {MARK} must precede a fenced block"
            j = i + 2
            body = []
            while not lines[j].startswith("```"):
                body.append(lines[j])
                j += 1
            out.extend((os.path.relpath(path, ROOT), i + 3 + k, cmd, expected) for k, cmd, expected in _commands(body))
    return out


def _commands(body):
    cmds = []
    for k, line in enumerate(body):
        if line.startswith("$ "):
            cmds.append([k, line[2:], []])
        elif cmds:
            cmds[-1][2].append(line)
    return [(k, c, e) for k, c, e in cmds]


def _mask(text: str) -> str:
    text = re.sub(r"(wall time\s+)\d+\.\d+ s in all, \d+\.\d+ s evaluating", r"\1<t>", text)
    text = re.sub(r"^time: \d+\.\d+ s$", "time: <t> s", text, flags=re.M)
    text = re.sub(r"^time {11}.*$", lambda m: re.sub(r"\d+\.\d+ s", "<t> s", m.group(0)), text, flags=re.M)
    text = re.sub(r"(by a plain float(?:32|64) forward )\(\d+\.\d+ s\)", r"\1(<t> s)", text)  # --compare-float
    return re.sub(r'"(total_)?seconds": [0-9.]+', r'"\1seconds": <t>', text)


BLOCKS = doc_blocks()

sys.path.insert(0, os.path.dirname(__file__))
from cli_in_process import run_command  # noqa: E402

_JSON: dict = {}  # command line -> (exit code, its --json document), each command run once per session


def run_json(cmd: str) -> tuple[int, dict, str]:
    """(exit code, document, stderr) of `cmd --json`, run in-process once (several tests and
    tables name the same command)."""
    if cmd not in _JSON:
        code, out, err = run_command(shlex.split(cmd) + ["--json"])
        _JSON[cmd] = (code, json.loads(out), err)
    return _JSON[cmd]


def link_checkout(folder) -> str:
    """`folder` with every top-level entry of the repository linked in: documented commands run
    there, so their inputs (docs/examples/..., training/checkpoints/...) resolve as in a checkout,
    and a file a command writes into its folder (`export-transformerlens ... OUT.safetensors`)
    lands in `folder`, never in the repository."""
    for name in os.listdir(ROOT):
        if name != ".git" and not os.path.lexists(os.path.join(folder, name)):
            os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))
    return str(folder)


@pytest.fixture(scope="module")
def docs_cwd(tmp_path_factory):
    return link_checkout(tmp_path_factory.mktemp("docs-cwd"))


def _expected_exit(expected):
    if expected and re.fullmatch(r"\(exit \d+\)", expected[-1]):
        return int(expected[-1][6:-1]), expected[:-1]
    return 0, expected


def test_docs_have_tested_examples():
    files = {b[0] for b in BLOCKS}
    assert "README.md" in files and "docs/semantics.md" in files, files


@pytest.mark.parametrize("path,line,cmd,expected", BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_documented_command_prints_what_the_docs_say(path, line, cmd, expected, docs_cwd):
    """Run in-process (tests/cli_in_process.py: the entry point pyproject.toml names, in a folder
    linking the repository's entries: docs_cwd); the next test runs one block per console script as
    a real subprocess."""
    exit_code, expected = _expected_exit(expected)
    code, out, err = run_command(shlex.split(cmd), cwd=docs_cwd)
    assert code == exit_code, (cmd, code, err)
    assert _mask(out.rstrip("\n")) == _mask("\n".join(expected)), f"{path}:{line}: `{cmd}` prints\n{out}"


def _one_block_per_script():
    """The first documented block of each console script the docs run."""
    firsts = {}
    for b in BLOCKS:
        firsts.setdefault(shlex.split(b[2])[0], b)
    return list(firsts.values())


@pytest.mark.parametrize("path,line,cmd,expected", _one_block_per_script(),
                         ids=[shlex.split(b[2])[0] for b in _one_block_per_script()])
def test_installed_script_prints_what_the_docs_say(path, line, cmd, expected, docs_cwd):
    """The installed console script, as a subprocess: its exit status through the OS and its
    stdout are what the block says (once per script; every block runs in-process above)."""
    exit_code, expected = _expected_exit(expected)
    argv = shlex.split(cmd)
    argv[0] = os.path.join(BIN, argv[0])
    r = subprocess.run(argv, cwd=docs_cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == exit_code, (cmd, r.returncode, r.stderr)
    assert _mask(r.stdout.rstrip("\n")) == _mask("\n".join(expected)), f"{path}:{line}: `{cmd}` prints\n{r.stdout}"


LAYERNORM_EXAMPLE = "layernorm-tiny.safetensors"


def layernorm_example() -> tuple[dict, dict]:
    """docs/examples/layernorm-tiny.safetensors: a one-layer attention-only TransformerLens config
    with LayerNorm (which verify-model refuses), seeded float32 weights of the right shapes."""
    cfg = {"act_fn": None, "attention_dir": "causal", "attn_only": True, "d_head": 8, "d_model": 8, "d_vocab": 4,
           "d_vocab_out": 4, "model_name": "layernorm-example", "n_ctx": 3, "n_heads": 1, "n_layers": 1,
           "normalization_type": "LN"}
    shapes = {"blocks.0.attn.W_K": (1, 8, 8), "blocks.0.attn.W_O": (1, 8, 8), "blocks.0.attn.W_Q": (1, 8, 8),
              "blocks.0.attn.W_V": (1, 8, 8), "blocks.0.attn.b_K": (1, 8), "blocks.0.attn.b_O": (8,),
              "blocks.0.attn.b_Q": (1, 8), "blocks.0.attn.b_V": (1, 8), "embed.W_E": (4, 8),
              "pos_embed.W_pos": (3, 8), "unembed.W_U": (8, 4), "unembed.b_U": (4,)}
    rng = np.random.default_rng(0)
    sd = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in shapes.items()}
    sd.update({"blocks.0.ln1.w": np.ones(8, np.float32), "blocks.0.ln1.b": np.zeros(8, np.float32),
               "ln_final.w": np.ones(8, np.float32), "ln_final.b": np.zeros(8, np.float32)})
    return cfg, sd


def _layernorm_example_matches(path: str) -> bool:
    from depthcert.interop.checkpoint_files import read_safetensors

    cfg, sd = layernorm_example()
    tensors, meta = read_safetensors(path)
    return (json.loads(meta["transformerlens_config"]) == cfg and set(tensors) == set(sd)
            and all(np.array_equal(tensors[k], sd[k]) for k in sd))  # read back as float64, exactly


def test_example_files_are_what_the_builders_make():
    sys.path.insert(0, os.path.dirname(__file__))
    from test_weights_v2 import prev_token_dataset, prev_token_model, undecided_model

    from depthcert.checkers.weights_file import model_to_json

    want = {
        "prev-token-data.json": prev_token_dataset(),
        "prev-token-hardmax.json": model_to_json(prev_token_model("hardmax")),
        "prev-token-softmax-20.json": model_to_json(prev_token_model("softmax", 20)),
        "prev-token-softmax-1.json": model_to_json(prev_token_model("softmax", 1)),
        "softmax-tie-weights.json": model_to_json(undecided_model()),
        "softmax-tie-data.json": {"format": "depthcert.dataset", "version": 1, "name": "softmax-tie",
                                  "sequences": [["x", "y", "y"]], "labels": ["a"]},
    }
    from depthcert.checkers.tasks import make_task

    for l in (3, 4):  # template matching with one sequence (one substitution map) per template
        tm = make_task("tm", l=l, alphabet=l)
        want[f"tm-one-substitution-l{l}.json"] = {
            "format": "depthcert.dataset", "version": 1, "name": f"tm-one-substitution-l{l}",
            "description": f"template matching, l={l}: one sequence per template (wildcard j -> token t_j), "
                           "the label its template",
            "sequences": [[tm.vocab[i] for i in tm.representative(c)] for c in range(len(tm.classes))],
            "labels": list(tm.classes)}
    have = sorted(os.listdir(os.path.join(ROOT, "docs", "examples")))
    assert have == sorted(list(want) + [LAYERNORM_EXAMPLE])
    assert _layernorm_example_matches(os.path.join(ROOT, "docs", "examples", LAYERNORM_EXAMPLE))
    for name, obj in want.items():
        with open(os.path.join(ROOT, "docs", "examples", name)) as fh:
            assert json.load(fh) == json.loads(json.dumps(obj)), name


def refresh() -> None:
    """Rewrite every marked block with what its commands print today (run by a maintainer after a
    deliberate output change: `python tests/test_docs.py`; review the diff before committing)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        _refresh(link_checkout(folder))


def _refresh(cwd: str) -> None:
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        lines = open(path).read().split("\n")
        out, i = [], 0
        while i < len(lines):
            out.append(lines[i])
            if lines[i].strip() != MARK:
                i += 1
                continue
            out.append(lines[i + 1])
            j = i + 2
            while not lines[j].startswith("```"):
                if lines[j].startswith("$ "):
                    argv = shlex.split(lines[j][2:])
                    argv[0] = os.path.join(BIN, argv[0])
                    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)
                    out.append(lines[j])
                    out.extend(r.stdout.rstrip("\n").split("\n"))
                    if r.returncode:
                        out.append(f"(exit {r.returncode})")
                j += 1
            out.append(lines[j])
            i = j + 1
        with open(path, "w") as fh:
            fh.write("\n".join(out))


if __name__ == "__main__":
    refresh()


def all_sizes_rows():
    """(table, command, 'finite-only' cell or None, margin cell) of docs/results.md's two --all-sizes tables."""
    lines = open(os.path.join(ROOT, "docs", "results.md")).read().splitlines()
    rows = []
    for table in ("proven", "partial"):
        i = lines.index(f"<!-- all-sizes-{table} -->")
        for line in lines[i + 3:]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.append((table, cells[1].strip("`"), cells[3] if table == "partial" else None, cells[-1]))
    return rows


@pytest.mark.parametrize("table,cmd,finite,margin", all_sizes_rows(), ids=[r[1] for r in all_sizes_rows()])
def test_all_sizes_tables_hold_what_the_commands_prove(table, cmd, finite, margin):
    """A row of the table of proofs for every size exits 0 (proven); a partial row exits 3 and names
    the parameters that stay finite; an exact margin cell is the printed margin."""
    code, info, err = run_json(cmd)
    assert (code, info["verdict"]) == ((0, "proven") if table == "proven" else (3, "partial")), err
    if finite is not None:
        assert [f["parameter"] for f in info["finite_only"]] == [p.strip() for p in finite.split(",")]
    try:
        Fraction(margin)
    except ValueError:
        return  # a formula or a per-size description: the all-sizes tests check those
    assert info["margin"]["exact"] == margin


def _construction_claims():
    from depthcert.proofs.theorems import CLAIMS

    return [c for c in CLAIMS if c.method == "construction"]


@pytest.mark.parametrize("claim", _construction_claims(), ids=[c.key for c in _construction_claims()])
def test_reproduce_paper_rows_print_what_their_commands_print(claim):
    """Each number of a reproduce-paper construction row (depthcert's version, and the weights as
    printed) is what the command the row names prints, read-out included."""
    from depthcert.proofs.theorems import check_claim

    r = check_claim(claim)
    pairs = [(r.detail, r.command())] + ([(r.printed_detail, r.command(as_printed=True))]
                                         if claim.printed == "differs" else [])
    for detail, cmd in pairs:
        m = re.match(r"(\d+) layers?, heads ([\d,]+), d'=(\d+); (\d+)/(\d+) points covered \((\d+) evaluated\), "
                     r"min margin ([^;\s]+)", detail)
        assert m, detail
        info = run_json(cmd)[1]
        got = (str(info["layers"]), ",".join(map(str, info["heads"])), str(info["d_model"]),
               str(info["points_covered"]), str(info["points_total"]), str(info["points_checked"]),
               info["min_margin"]["exact"])
        assert got == m.groups(), (cmd, got, detail)


# ---- every table and every fenced block of command output has a source
#
# SOURCE MARKERS: the HTML comment lines directly above a table (its header row) or a fenced block
# (its opening fence) must include one of
#   <!-- doc-test -->                      a block of `$ command` lines and their output, run above
#   <!-- doc-test: slow -->                the same, too slow for the suite: docs/regenerate.py
#                                          --check --slow runs it (CI's main job)
#   <!-- regenerate: commands -->          a table docs/regenerate.py rewrites (`--check` runs below)
#   <!-- test: tests/FILE.py::FUNCTION --> a test that compares it
#   <!-- ran: YYYY-MM-DD at COMMIT: COMMAND -->  output no check can re-run (benchmark timings,
#                                          hour-long runs): the day it ran, the commit it was
#                                          measured on (it must exist in the repository's history)
#                                          and the command (without `: COMMAND` a table names each
#                                          row's command in a `command` column, a block in its `$ `
#                                          lines).  A plain `ran: DATE` without the commit is refused:
#                                          output CI can re-run is a regenerate table, a doc-test or a
#                                          doc-test: slow
#   <!-- not-output: WHY -->               written by hand (formats, exit codes, options): no tool
#                                          prints it
# A table or block of output without one fails test_every_table_and_output_block_has_a_source.

PAGE_SOURCES = {  # pages a command writes whole; each says so in its first lines ("Generated by `COMMAND`")
    "docs/experiments.md": "reproduce",  # training/report.py, from docs/img/*.json (each records its command)
    "docs/mutation.md": "python benchmarks/mutation_report.py --out docs/mutation.md",
}
TEXT_BLOCKS_TESTED = {"docs/tutorial.md": "tests/test_tutorial.py"}  # ```text: the preceding ```python's stdout
SOURCE = re.compile(r"<!-- (doc-test|doc-test: slow|regenerate: commands|test: (?P<test>\S+)|ran: (?P<date>\d{4}-\d\d-\d\d)"
                    r"(?: at (?P<commit>[0-9a-f]{7,40}))?(?P<cmd>: .+)?|not-output: .+) -->")


def _doc_pieces(path: str):
    """(kind, line, comments above, header or fence info, body lines) for every table and fenced
    block of a Markdown file; kind is "table" or "block"."""
    lines = open(path, encoding="utf-8").read().split("\n")

    def comments_above(i):
        out = []
        while i > 0 and lines[i - 1].strip().startswith("<!--") and lines[i - 1].strip().endswith("-->"):
            i -= 1
            out.append(lines[i].strip())
        return out

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            yield "block", i + 1, comments_above(i), line[3:].strip(), lines[i + 1:j]
            i = j + 1
            continue
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1].strip()):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            yield "table", i + 1, comments_above(i), line, lines[i + 2:j]
            i = j
            continue
        i += 1


def _is_output_block(info: str, body: list[str]) -> bool:
    if info == "text":
        return True
    for k, line in enumerate(body[:-1]):
        if line.startswith("$ ") and body[k + 1].strip() and not body[k + 1].startswith("$ "):
            return True
    return False


def _is_commit(rev: str) -> bool:
    """Whether `rev` names a commit of this repository (True where there is no git history to ask)."""
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        return True
    r = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True)
    return r.returncode == 0


def _source_problem(kind: str, comments: list[str], header: str, body: list[str]) -> str | None:
    """None if a comment above names a valid source, else what is missing or wrong."""
    import datetime

    for c in comments:
        m = SOURCE.fullmatch(c)
        if not m:
            continue
        if m.group("test"):
            file, _, func = m.group("test").partition("::")
            full = os.path.join(ROOT, file)
            if not (os.path.isfile(full) and re.search(rf"^def {re.escape(func)}\b", open(full).read(), re.M)):
                return f"{c}: no test {func} in {file}"
        if m.group("date"):
            try:
                day = datetime.date.fromisoformat(m.group("date"))
            except ValueError:
                return f"{c}: not a date"
            if day > datetime.date.today():
                return f"{c}: a date in the future"
            if not m.group("commit"):
                return (f"{c}: a ran: marker names the commit the output was measured on (ran: DATE at COMMIT: "
                        "COMMAND); output CI can re-run is a regenerate table or a doc-test (slow)")
            if m.group("commit") and not _is_commit(m.group("commit")):
                return f"{c}: no commit {m.group('commit')} in this repository"
            if not m.group("cmd"):
                names = [x.strip() for x in header.strip("|").split("|")] if kind == "table" else []
                if kind == "table" and "command" not in names:
                    return f"{c}: a table without a `command` column must name its command (ran: DATE: COMMAND)"
                if kind == "block" and not any(x.startswith("$ ") for x in body):
                    return f"{c}: a block without `$ ` lines must name its command (ran: DATE: COMMAND)"
        if c in ("<!-- doc-test -->", "<!-- doc-test: slow -->") and kind != "block":
            return f"{c} marks a fenced block"
        return None
    return "no source: mark it <!-- doc-test -->, <!-- regenerate: commands -->, <!-- test: ... -->, " \
           "<!-- ran: DATE: COMMAND --> or <!-- not-output: WHY --> (tests/test_docs.py, SOURCE MARKERS)"


def source_problems(paths=None) -> list[str]:
    out = []
    for path in paths or [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        rel = os.path.relpath(path, ROOT)
        if rel in PAGE_SOURCES:
            head = "\n".join(open(path, encoding="utf-8").read().split("\n")[:5])
            if f"Generated by `{PAGE_SOURCES[rel]}`" not in head:
                out.append(f"{rel}:1: page: its first lines must say Generated by `{PAGE_SOURCES[rel]}`")
            continue
        for kind, line, comments, header, body in _doc_pieces(path):
            if kind == "block" and not _is_output_block(header, body):
                continue  # code, a command to type, a file format: nothing a tool printed
            if kind == "block" and header == "text" and rel in TEXT_BLOCKS_TESTED:
                continue
            problem = _source_problem(kind, comments, header, body)
            if problem:
                out.append(f"{rel}:{line}: {kind}: {problem}")
    return out


def test_every_table_and_output_block_has_a_source():
    problems = source_problems()
    assert not problems, "\n".join(problems)


def test_the_source_check_catches_a_table_without_a_source(tmp_path):
    git = os.path.isdir(os.path.join(ROOT, ".git"))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()[:9] if git else "0123456"
    page = tmp_path / "page.md"
    page.write_text("text\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<!-- not-output: a format -->\n| x |\n|---|\n| y |\n\n"
                    "```\n$ verify-construction icqa\nVERIFIED\n```\n\n<!-- ran: 2026-01-02 -->\n```\n$ x\ny\n```\n\n"
                    f"<!-- ran: 2026-01-02 at {head} -->\n| n | m |\n|---|---|\n| 1 | 2 |\n\n<!-- test: tests/test_docs.py::nope -->\n"
                    "| p |\n|---|\n| 1 |\n\n```python\nprint(1)\n```\n\n"
                    "<!-- ran: 2026-01-02 at 0123456789abcdef: python benchmarks/x.py -->\n| q |\n|---|\n| 1 |\n")
    problems = source_problems([str(page)])
    want = ["3", "12", "18", "24", "29"] + (["38"] if git else [])
    assert [p.split(": ")[0].rsplit(":", 1)[1] for p in problems] == want, problems
    assert "names the commit" in problems[2] and "command" in problems[3] and "no test nope" in problems[4]
    assert not git or "no commit 0123456789abcdef" in problems[5]
    page.write_text(f"<!-- ran: 2026-01-02 at {head}: python benchmarks/x.py -->\n| q |\n|---|\n| 1 |\n")
    assert source_problems([str(page)]) == []


def test_a_plain_ran_marker_is_refused():
    """`<!-- ran: DATE: COMMAND -->` without the commit is refused, on a block and on a table; the
    same output with `at COMMIT` passes."""
    plain = ["<!-- ran: 2026-01-02: find-depth --task icqa -->"]
    body = ["$ find-depth --task icqa", "minimal depth 2"]
    assert "names the commit" in _source_problem("block", plain, "", body)
    assert "names the commit" in _source_problem("table", plain, "| a |", [])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()[:9]
    assert _source_problem("block", [f"<!-- ran: 2026-01-02 at {head or '0123456'}: find-depth --task icqa -->"], "",
                           body) is None


def _regenerate_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_regenerate", os.path.join(ROOT, "docs", "regenerate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerated_tables_are_what_their_commands_print(monkeypatch, capsys):
    """docs/regenerate.py --check: every CI row of every `<!-- regenerate: commands -->` table.
    The script's own main runs here; each row's command runs in-process, once (README and
    docs/results.md share rows), exit codes as the script accepts them."""
    regenerate = _regenerate_module()

    def in_process(command):
        code, doc, err = run_json(command)
        if code not in (0, 1, 3):
            raise RuntimeError(f"`{command}` exited {code}: {err.strip()}")
        return doc

    monkeypatch.setattr(regenerate, "run_json", in_process)
    code = regenerate.main(["--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.strip() == "every CI row is what its command prints"


def test_regenerate_runs_the_installed_command():
    """docs/regenerate.py's own run_json (a subprocess of the installed script) reads the same
    document the in-process run does (seconds aside)."""
    cmd = "verify-construction sc --length 4 --alphabet 3"
    doc = _regenerate_module().run_json(cmd)
    strip = lambda d: json.loads(_mask(json.dumps(d, sort_keys=True)).replace("<t>", "0"))
    assert strip(doc) == strip(run_json(cmd)[1])


def test_slow_doc_tests_are_compared_by_check_slow_only(tmp_path):
    """docs/regenerate.py: a `<!-- doc-test: slow -->` block is run by --check --slow (a changed
    line is named; wall times are masked), skipped by --check, and rewritten by a plain run."""
    regenerate = _regenerate_module()
    cmd = "verify-construction sc --length 4 --alphabet 3"
    printed = regenerate.run_doc_test_block([f"$ {cmd}"])
    assert printed[0] == f"$ {cmd}" and len(printed) > 3
    page = tmp_path / "page.md"
    right = "text\n\n<!-- doc-test: slow -->\n```\n" + "\n".join(printed) + "\n```\n"
    page.write_text(right)
    assert regenerate.process(str(page), check=True, slow=True) == []
    wrong = right.replace(printed[2], printed[2] + " (planted)")
    page.write_text(wrong)
    assert regenerate.process(str(page), check=True, slow=False) == []
    diffs = regenerate.process(str(page), check=True, slow=True)
    assert len(diffs) == 1 and "(planted)" in diffs[0] and "doc-test (slow)" in diffs[0], diffs
    assert page.read_text() == wrong  # --check writes nothing
    regenerate.process(str(page), check=False, log=lambda *a: None)
    assert regenerate.mask_times(page.read_text()) == regenerate.mask_times(right)


# ---- tables of layer counts and sizes written as formulas: each compared with the built models

def _table_under(doc: str, marker: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, body rows' cells) of the table directly under the line `marker` in docs/DOC."""
    lines = open(os.path.join(ROOT, "docs", doc), encoding="utf-8").read().split("\n")
    i = lines.index(marker) + 1
    while lines[i].startswith("<!--"):  # other markers of the same table
        i += 1
    rows = []
    for line in lines[i:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[0], rows[2:]


def _columns(header: list[str]) -> list[list[int]]:
    """The values of L (or h) each column from the second on stands for: `3`, or `8-10` for 8..10."""
    out = []
    for cell in header[1:]:
        lo, _, hi = cell.partition("-")
        out.append(list(range(int(lo), int(hi or lo) + 1)))
    return out


def test_composition_layers_table():
    """docs/composition.md's layers per L: the linear rows are L, the doubling rows the depth the
    builders use (layers_needed, and the built model for L <= 4); a lower bound of 2 at L stands
    where the one-layer table below has a certificate for that L at N = 2."""
    from depthcert.checkers.tasks.composition import Composition
    from depthcert.constructions import composition as comp
    from depthcert.constructions import registry

    header, rows = _table_under("composition.md", "<!-- test: tests/test_docs.py::test_composition_layers_table -->")
    columns = _columns(header)
    by_name = {r[0].split()[0].strip("`,"): r[1:] for r in rows}
    assert set(by_name) == {"linear", "doubling", "encoder-doubling", "lower"}, by_name
    _, certs = _table_under("composition.md", "<!-- one-layer-certificates -->")
    refuted = {int(r[0]) for r in certs if r[1] == "2" and r[4] != "-"}  # the table is at N = 2
    for Ls, lin, dbl, enc, low in zip(columns, by_name["linear"], by_name["doubling"], by_name["encoder-doubling"],
                                      by_name["lower"]):
        for L in Ls:
            assert lin == (str(L) if len(Ls) == 1 else f"{Ls[0]}-{Ls[-1]}"), (L, lin)
            assert str(comp.layers_needed(L, False)) == dbl and str(comp.layers_needed(L, True)) == enc, (L, dbl, enc)
            if L <= 4:
                for variant, want in (("linear", L), ("encoder-linear", L), ("doubling", int(dbl)),
                                      ("encoder-doubling", int(enc))):
                    assert registry.build(Composition(L, 2), variant).model.n_layers == want, (L, variant)
            if low:
                assert low == ("1" if L == 1 else "2") and (L == 1 or L in refuted), (L, low)


def _relu_and_layers(h: int) -> int:
    L = 2
    while 3 * 2 ** (L - 2) - 1 < h:
        L += 1
    return L


# docs/multihop.md's variants table: variant -> (its layers, heads, d' cells as written, and those
# formulas as functions of (h, k, N, n = the sequence length 3k + 2) for the built model)
MULTIHOP_VARIANTS = {
    "`paper`": (("2h", "1 per layer", "N(h+1) + 1 + n"),
                lambda h, k, N, n: (2 * h, [1] * (2 * h), N * (h + 1) + 1 + n)),
    "`paper --as-printed`": (("2h", "1", "N + 1 + n"), lambda h, k, N, n: (2 * h, [1] * (2 * h), N + 1 + n)),
    "`linear`": (("h + 1", "1", "2N + 1 + n"), lambda h, k, N, n: (h + 1, [1] * (h + 1), 2 * N + 1 + n)),
    "`doubling`": (("floor(log2 h) + 2", "1", "2N + 1 + n"),
                   lambda h, k, N, n: (h.bit_length() + 1, [1] * (h.bit_length() + 1), 2 * N + 1 + n)),
    "`relu-and`": (("smallest L with 3 * 2^(L-2) - 1 >= h", "k+2, N (+1 when h = 1 mod 3; 1 when h = 1), 1, 1, ...",
                    "N(k + 2) + k + 1 + n"),
                   lambda h, k, N, n: (_relu_and_layers(h), [k + 2, 1 if h == 1 else N + (h % 3 == 1)]
                                       + [1] * (_relu_and_layers(h) - 2), N * (k + 2) + k + 1 + n)),
    "`dnf`": (("2", "2k+1, N^h k^h", "N(2k + 3) + 1 + n"),
              lambda h, k, N, n: (2, [2 * k + 1, N ** h * k ** h], N * (2 * k + 3) + 1 + n)),
}


def test_multihop_variants_table():
    """docs/multihop.md's variants table: its layers, heads and d' formulas are the ones above, and
    the models built at k = 2, 3, N = k, k + 1, h = 1..4 have exactly those (dnf where it has at most
    5,000 heads, the builder's limit)."""
    from depthcert.checkers.tasks.multihop import MultiHop
    from depthcert.constructions import registry

    header, rows = _table_under("multihop.md", "<!-- test: tests/test_docs.py::test_multihop_variants_table -->")
    assert header[0] == "variant" and header[2:] == ["layers", "heads", "d'"], header
    assert {r[0]: tuple(r[2:]) for r in rows} == {v: cells for v, (cells, _) in MULTIHOP_VARIANTS.items()}
    for name, (_, formula) in MULTIHOP_VARIANTS.items():
        variant, as_printed = name.strip("`").split()[0], "--as-printed" in name
        for k in (2, 3):
            for N in (k, k + 1):
                for h in (1, 2, 3, 4):
                    if variant == "dnf" and N ** h * k ** h > 5000:
                        continue
                    task = MultiHop(hops=h, k=k, n_entities=N)
                    m = registry.build(task, variant, as_printed=as_printed).model
                    got = (m.n_layers, [len(layer.heads) for layer in m.layers], m.dim)
                    assert got == formula(h, k, N, task.length), (name, h, k, N, got)


def test_multihop_layers_table():
    """docs/multihop.md's layers per hop count: every cell of the paper, linear, doubling and
    relu-and rows is the built model's depth (k = 3, N = 3), dnf's 2 where it is built (k = N = 2)
    and its formula elsewhere; the lower-bound row is 2 (one layer refuted: the stored certificate
    proofs/certificates/multihop_one_layer.json and docs/impossibility.md's table) where filled."""
    from depthcert.checkers.tasks.multihop import MultiHop
    from depthcert.constructions import registry

    header, rows = _table_under("multihop.md", "<!-- test: tests/test_docs.py::test_multihop_layers_table -->")
    hs = [h for [h] in _columns(header)]
    by_name = {r[0].split()[0]: r[1:] for r in rows}
    assert set(by_name) == {"paper", "linear", "doubling", "relu-and", "dnf", "lower"}, by_name
    for i, h in enumerate(hs):
        for variant in ("paper", "linear", "doubling", "relu-and"):
            m = registry.build(MultiHop(hops=h, k=3, n_entities=3), variant).model
            assert by_name[variant][i] == str(m.n_layers), (variant, h, m.n_layers)
        assert by_name["dnf"][i] == "2"
        if 4 ** h <= 5000:
            assert registry.build(MultiHop(hops=h, k=2, n_entities=2), "dnf").model.n_layers == 2
        assert by_name["lower"][i] in ("", "2"), (h, by_name["lower"][i])


def test_all_sizes_coverage_table():
    """docs/all-sizes.md's coverage table: each row's command exits with the code the row names
    first (`(exit N)`: the command's construction), and its exact margin is the one in the row's margin cell (none where the cell is -)."""
    header, rows = _table_under("all-sizes.md", "<!-- test: tests/test_docs.py::test_all_sizes_coverage_table -->")
    assert header[:2] == ["construction", "command (one of the row's)"] and "margin" in header, header
    k = header.index("margin")
    for row in rows:
        cmd = row[1].strip("`")
        exits = re.findall(r"\(exit (\d)", row[2])
        assert exits, (cmd, row[2])
        code, info, err = run_json(cmd)
        assert code == int(exits[0]), (cmd, code, err)
        margin = (info.get("margin") or {}).get("exact")
        if row[k] == "-":
            assert margin is None, (cmd, margin)
        else:
            assert margin is not None and re.search(rf"(?<![\d/]){re.escape(margin)}(?![\d/])", row[k]), (cmd, margin, row[k])


def _doubling_depth(L: int, forward: bool) -> int:
    """The smallest T with k_T >= L: k_1 = 1, k_s = k_{s-1} + 2^(s-2) + (2^(s-1) if forward else 1)."""
    T, k = 1, 1
    while k < L:
        T += 1
        k += 2 ** (T - 2) + (2 ** (T - 1) if forward else 1)
    return T


COMPOSITION_VARIANTS = {  # variant -> its layers, heads, d' cells in docs/composition.md's variants table
    "`linear`": ("L", "1 each", "(L+2)N + 1"),
    "`doubling`": ("smallest T with k_T >= L, k_1 = 1, k_s = k_{s-1} + 2^(s-2) + 1", "1 or 2 per layer",
                   "N(T + 1 or 2) + n"),
    "`encoder-linear`": ("L", "1 each", "(L+2)N + 1"),
    "`encoder-doubling`": ("smallest T with k_T >= L, k_1 = 1, k_s = k_{s-1} + 2^(s-2) + 2^(s-1)", "up to 3 per layer",
                           "N(T + 1 or 2) + n"),
}


def test_composition_variants_table():
    """docs/composition.md's variants table: its layers, heads and d' cells are the formulas above,
    and the models built at L = 1..6, N = 2, 3 (n = LN + 1 tokens) have exactly those."""
    from depthcert.checkers.tasks.composition import Composition
    from depthcert.constructions import registry

    header, rows = _table_under("composition.md", "<!-- test: tests/test_docs.py::test_composition_variants_table -->")
    assert header[0] == "variant" and header[-3:] == ["layers", "heads", "d'"], header
    assert {r[0]: tuple(r[-3:]) for r in rows} == COMPOSITION_VARIANTS
    for name in COMPOSITION_VARIANTS:
        variant = name.strip("`")
        for L in range(1, 7):
            for N in (2, 3):
                task = Composition(L, N)
                m = registry.build(task, variant).model
                heads = [len(layer.heads) for layer in m.layers]
                if variant.endswith("linear"):
                    assert (m.n_layers, heads, m.dim) == (L, [1] * L, (L + 2) * N + 1), (variant, L, N)
                    continue
                T = _doubling_depth(L, forward=variant.startswith("encoder"))
                assert m.n_layers == T and max(heads) <= (3 if variant.startswith("encoder") else 2), (variant, L, N)
                assert m.dim in (N * (T + 1) + task.length, N * (T + 2) + task.length), (variant, L, N, m.dim)
