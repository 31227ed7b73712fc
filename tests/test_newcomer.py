"""What a newcomer meets first: each finding of a fresh clone's first hour, fixed and kept fixed.

One test (or a few) per finding: pictures work from the quickstart's install, every command's task
list is what it accepts (aliases named), files written are named, process counts are honest on a
resumed run, time lines cover every phase, robustness runs show progress on a terminal, and worker
processes start safely next to JAX.
"""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def run(*argv, cwd=ROOT, timeout=300):
    return subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


# ---- pictures from the quickstart: `pip install -e .` brings matplotlib

def test_matplotlib_is_a_default_dependency_and_the_hint_is_a_working_command():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert any(re.match(r"matplotlib\b", d) for d in project["dependencies"]), project["dependencies"]
    with open(os.path.join(ROOT, "constraints-lowest.txt")) as fh:  # its lower bound is tested by the lowest job
        assert re.search(r"^matplotlib==3\.6\.0$", fh.read(), re.M)
    from depthcert.cli.show_construction import INSTALL_HINT

    # a package that is on no registry (depthcert[plot]) is not a hint a user can follow
    assert "depthcert[" not in INSTALL_HINT and INSTALL_HINT.endswith('pip install "matplotlib>=3.6"')


# ---- task lists: each command lists exactly the tasks it accepts, aliases included

def _mains():
    from depthcert.cli import check_certificate, find_dependence, show_construction, verify_construction
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main as verify_model

    return {
        # command -> (its main, argv naming a task, whether it takes every task with a dataset)
        "verify-construction": (lambda a: run_main(verify_construction._verify_construction, a), lambda t: [t], False),
        "show-construction": (lambda a: run_main(show_construction._show_construction, a),
                              lambda t: [t, "--out", os.devnull], False),
        "find-dependence": (lambda a: run_main(find_dependence._find_dependence, a), lambda t: ["--task", t], True),
        "check-certificate": (lambda a: run_main(check_certificate._check_certificate, a),
                              lambda t: [os.path.join(ROOT, "proofs", "certificates", "theorem2_icqa.json"), "--task", t], True),
        "verify-model": (lambda a: run_main(verify_model, a),
                         lambda t: [os.path.join(ROOT, "docs", "examples", "prev-token-hardmax.json"), "--task", t], True),
    }


def _listed(err: str) -> tuple[list[str], dict[str, str]]:
    """The task names and the alias -> task map an unknown-task line lists."""
    m = re.search(r"known: (.*) \(aliases: (.*)\)$", err.strip())
    assert m, err
    aliases = {}
    for group in m.group(2).split("; "):
        names, task = group.split(" = ")
        aliases.update({a: task for a in names.split(", ")})
    return m.group(1).split(", "), aliases


@pytest.mark.parametrize("command", list(_mains()))
def test_the_unknown_task_line_lists_exactly_what_the_command_takes(command, capsys):
    from depthcert import constructions
    from depthcert.checkers.tasks import TASK_ALIASES

    main, argv, every = _mains()[command]
    assert main(argv("no-such-task")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    names, aliases = _listed(err)
    want = list(dict.fromkeys(TASK_ALIASES.values())) if every else list(constructions.all_variants())
    assert sorted(names) == sorted(want)
    assert aliases == {a: t for a, t in TASK_ALIASES.items() if a != t and t in want}
    assert aliases["template"] == "tm"
    for name in set(TASK_ALIASES) - set(names) - set(aliases):  # what is not listed is refused in one line
        assert main(argv(name)) == 2
        err = capsys.readouterr().err
        assert "has no construction" in err and err.count("\n") == 1, (name, err)


def test_an_alias_runs_as_its_task():
    r = run("verify-construction", "template", "--l", "2", "--alphabet", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["task"] == "tm"


@pytest.mark.parametrize("command", ["verify-construction", "find-dependence"])
def test_help_lists_the_aliases(command):
    text = re.sub(r"\s+", " ", run(command, "--help").stdout).replace("- ", "-")
    assert "template, template-matching = tm" in text and "ic-qa, qa = icqa" in text


# ---- every file a command writes is named on stdout

def test_export_names_the_file_it_wrote(tmp_path):
    out = tmp_path / "w.json"
    r = run("verify-construction", "icqa", "--k", "2", "--export", str(out))
    assert r.returncode == 0 and out.is_file()
    assert r.stdout.rstrip().endswith(f"wrote       {out} (the model's exact weights, JSON)"), r.stdout
    r = run("verify-construction", "icqa", "--k", "2", "--export", str(out), "--point", "3")
    assert r.stdout.rstrip().endswith(f"wrote      {out} (the model's exact weights, JSON)"), r.stdout
    r = run("verify-construction", "icqa", "--k", "2", "--export", str(out), "--json")
    assert json.loads(r.stdout)["wrote"] == [str(out)]


def test_reproduce_names_every_file_it_wrote(tmp_path, monkeypatch, capsys):
    """reproduce --out DIR: one `wrote FILE` line per file of this run (the experiment is replaced by
    one that writes two files; an older file in DIR is not named)."""
    pytest.importorskip("torch")
    from depthcert.cli import train
    from depthcert.training import reproduce

    def fake_run(what, out, doc, **_):
        (tmp_path / "out" / f"{what}.json").write_text("{}")
        with open(doc, "w") as fh:
            fh.write("# report\n")
        return {what: {}}

    (tmp_path / "out").mkdir()
    old = tmp_path / "out" / "older.png"
    old.write_text("x")
    os.utime(old, (1e9, 1e9))
    monkeypatch.setattr(reproduce, "run", fake_run)
    assert train.reproduce_main(["reference", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"wrote {tmp_path / 'out' / 'experiments.md'}", f"wrote {tmp_path / 'out' / 'reference.json'}"]


# ---- a resumed run counts the processes it started

def test_a_run_resumed_wholly_from_its_journal_starts_no_process(tmp_path):
    journal = tmp_path / "run.jsonl"
    argv = ["verify-construction", "tm", "--l", "4", "--alphabet", "4", "--variant", "heads", "--symmetry", "off",
            "--workers", "2", "--journal", str(journal), "--chunk-points", "64"]
    first = run(*argv)
    assert first.returncode == 0 and "; 2 processes)" in first.stdout, first.stdout
    again = run(*argv)
    assert again.returncode == 0, again.stderr
    assert "; no worker process: every chunk from the journal)" in again.stdout, again.stdout
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:-1]) + "\n")  # one chunk left to run: one process, not two
    third = run(*argv)
    assert "; 1 process)" in third.stdout, third.stdout


# ---- worker processes start safely next to JAX

JAX_SCRIPT = '''
import sys, warnings

if __name__ == "__main__":
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as seen:
        import jax
        jax.numpy.zeros(2).block_until_ready()  # JAX's threads run (as after a verify-tracr run)
        from depthcert import constructions
        from depthcert.checkers import shards
        from depthcert.checkers.exhaustive import verify
        from depthcert.checkers.tasks import make_task
        if sys.argv[1] == "fork":  # the control: what the runner did before
            shards.start_method = lambda: "fork"
        task = make_task("tm", l=4, alphabet=4)
        model = constructions.build(task, "heads").model
        v = verify(model, task, progress=False, symmetry="off", runner=shards.ProcessRunner(2), chunk_points=64)
        print(v.verified, v.points_checked, shards.start_method())
    print(sum("fork" in str(w.message) for w in seen))
'''


def test_worker_processes_start_with_forkserver_next_to_jax(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "jax_workers.py"
    script.write_text(JAX_SCRIPT)
    out = {}
    for how in ("default", "fork"):
        r = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        out[how] = r.stdout.split()
    assert out["default"] == ["True", "256", "forkserver", "0"]  # no warning that a fork may deadlock
    assert out["fork"][:3] == ["True", "256", "fork"] and int(out["fork"][3]) > 0  # the test can fail


def test_worker_processes_fork_without_jax(monkeypatch):
    from depthcert.checkers import shards

    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert shards.start_method() == "fork"  # no start-up cost where nothing forbids it
    monkeypatch.setitem(sys.modules, "jax", object())
    assert shards.start_method() == "forkserver"


# ---- --as-printed and --readout name the same read-out

def test_as_printed_theorem1_reads_out_with_lemma3_and_says_so():
    base = ["verify-construction", "sc", "--length", "4", "--alphabet", "3"]
    printed = run(*base, "--as-printed")
    assert printed.returncode == 0 and "Lemma 3 classifier" in printed.stdout and "min margin  1/64" in printed.stdout
    same = run(*base, "--as-printed", "--readout", "lemma3", "--json")
    assert same.returncode == 0, same.stderr
    doc = json.loads(same.stdout)
    assert (doc["readout"], doc["min_margin"]["exact"]) == ("lemma3", "1/64")
    paper = run(*base, "--as-printed", "--readout", "paper")
    assert paper.returncode == 2 and "reads out with Lemma 3's classifier" in paper.stderr
    ours = run(*base, "--readout", "lemma3")  # depthcert's version reads the one-hots: the hint names --as-printed
    assert ours.returncode == 2 and "--as-printed" in ours.stderr and ours.stderr.count("\n") == 1
    assert json.loads(run(*base, "--json").stdout)["readout"] == "paper"


# ---- verify-model: the time line covers every phase; robustness shows progress on a terminal

EXAMPLE = ["docs/examples/prev-token-softmax-1.json", "--dataset", "docs/examples/prev-token-data.json"]


def test_verify_model_time_line_covers_robustness():
    r = run("verify-model", *EXAMPLE, "--robustness")
    last = r.stdout.rstrip().splitlines()[-1]
    m = re.fullmatch(r"time {11}(\d+\.\d) s \(ran on this process\): (\d+\.\d) s reading the model and the task, "
                     r"(\d+\.\d) s deciding every point, (\d+\.\d) s robustness", last)
    assert m, r.stdout
    total, *parts = map(float, m.groups())
    assert sum(parts) <= total + 0.2 and float(m.group(4)) > 0  # the robustness phase is in the total
    doc = json.loads(run("verify-model", *EXAMPLE, "--robustness", "--json").stdout)
    assert doc["total_seconds"] >= doc["seconds"] + doc["robustness_seconds"] - 0.01


def test_robustness_shows_progress_on_a_terminal_only(monkeypatch, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main as verify_model

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    # the example model gets some points wrong: exit 1 (refuted) where verify-model exits 1 on a refuted
    # model, 0 where it left that to --require-all; the bars are the point here
    assert run_main(verify_model, EXAMPLE + ["--robustness"]) in (0, 1)
    err = capsys.readouterr().err
    for bar in ("robustness: smallest margin", "robustness: radius 2^-", "robustness: fractional bits"):
        assert bar in err, err[-500:]
    assert run_main(verify_model, EXAMPLE + ["--robustness", "--json"]) in (0, 1)
    assert capsys.readouterr().err == ""  # --json: quiet, even on a terminal


# ---- the --wrong-out file is what docs/trained-models.md says

def test_wrong_out_file_is_the_documented_example(tmp_path):
    text = open(os.path.join(ROOT, "docs", "trained-models.md")).read()
    section = text[text.index("## The `--wrong-out` file"):]
    cmd = re.search(r"`(verify-model [^`]*--wrong-out wrong\.json)`", section).group(1)
    example = re.search(r"<!-- wrong-out-example -->\n```json\n(.*?)\n```", section, re.S).group(1)
    argv = cmd.split()
    argv[argv.index("wrong.json")] = str(tmp_path / "wrong.json")
    r = run(*argv)
    assert r.returncode in (0, 1) and f"wrote          {tmp_path / 'wrong.json'}" in r.stdout, r.stdout
    got = json.load(open(tmp_path / "wrong.json"))
    assert r.returncode == 0 or got["wrong"]  # exit 1 means refuted: some point certainly wrong
    assert got == json.loads(example)
    assert got["correct"] + len(got["wrong"]) + len(got["undecided"]) == got["points"]
    for key in got:  # every key is named in the section's prose
        assert f"`{key}`" in section, key



# ---- a README read in five minutes, and a reading order over docs/

def _readme() -> str:
    return open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_readme_is_short_and_annotates_its_output():
    text = _readme()
    assert len(text.splitlines()) < 150
    for term in ("**evaluated**", "**covered**", "symmetry reduction", "**min margin**"):
        assert term in text, term
    assert "<!-- doc-test -->" in text  # the annotated output is run by tests/test_docs.py


def test_readme_test_command_is_what_ci_runs():
    readme = re.findall(r"^pip install -c constraints\.txt -e (\S+) && python -m pytest -q$", _readme(), re.M)
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    main_job = ci[ci.index('echo "== job main'):]
    install = re.search(r"^python -m pip install -q -c constraints\.txt -e (\S+)$", main_job, re.M).group(1)
    assert readme == [install] and re.search(r"^python -m pytest -q$", main_job, re.M)


def test_reading_order_starts_with_the_tutorial_and_covers_every_page():
    text = _readme()
    order = text[text.index("## Reading order"):]
    assert re.search(r"^1\. `docs/tutorial\.md`", order, re.M) and "docs/index.md" in order
    index = open(os.path.join(ROOT, "docs", "index.md"), encoding="utf-8").read()
    first = re.search(r"^1\. \[(\S+)\]", index, re.M).group(1)
    assert first == "tutorial.md"
    pages = {os.path.basename(p) for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md")}
    listed = set(re.findall(r"\]\(([a-z0-9_-]+\.md)\)", index))
    assert pages - {"index.md"} == listed, (pages - listed, listed - pages)


def _reading_order(text: str, pattern: str) -> list[str]:
    return list(dict.fromkeys(re.findall(pattern, text)))


def test_readme_and_index_give_one_reading_order():
    """README's reading order is docs/index.md's, shortened: its pages appear in the same order, and
    it skips none of the index's pages before its last one except those it names as skipped."""
    text = _readme()
    section = text[text.index("## Reading order"):]
    section = section[:section.index("\nContributing")]
    readme = _reading_order(section.replace("`theorem", "`docs/theorem"), r"`docs/([a-z0-9_-]+\.md)`")
    readme.remove("index.md")  # named in the lead sentence
    index = _reading_order(open(os.path.join(ROOT, "docs", "index.md"), encoding="utf-8").read(),
                           r"\]\(([a-z0-9_-]+\.md)\)")
    assert readme == [p for p in index if p in readme], (readme, index)  # the same order
    skipped = index[:index.index(readme[-1])]
    skipped = [p for p in skipped if p not in readme]
    assert skipped == ["multihop.md", "composition.md", "logdepth.md", "robustness.md", "softmax.md"], skipped
    for page in skipped:  # named where the README passes over them
        assert {"multihop.md": "multi-hop", "logdepth.md": "log depth"}.get(page, page[:-3]) in section, page


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/commands.md", "docs/results.md",
                                  "docs/development.md", "docs/tutorial.md", "docs/tracr.md", "docs/json.md",
                                  "docs/softmax.md"])
def test_user_docs_have_no_machine_paths_issue_numbers_or_history(page):
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    for pattern in (r"/tmp/", r"/work/", r"\bissue \d+", r"\bissue #\d+", r"\bBefore this\b", r"\bwent from\b",
                    r"\bnow takes\b"):
        assert not re.search(pattern, text, re.I), (page, pattern)


def test_verify_tracr_robustness_is_timed_and_shows_progress(monkeypatch, capsys):
    """verify-tracr --robustness: the wall time line covers the robustness passes, which show tqdm
    bars on a terminal (one compile of a small program)."""
    pytest.importorskip("tracr")
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_tracr import _main as verify_tracr

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    argv = ["make_length", "--vocab", "1,2", "--max-seq-len", "3", "--robustness", "--no-float-check"]
    assert run_main(verify_tracr, argv) == 0
    out, err = capsys.readouterr()
    assert "robustness: radius 2^-" in err and "robustness: fractional bits" in err
    m = re.search(r"wall time   (\d+\.\d+) s in all, (\d+\.\d+) s deciding, (\d+\.\d+) s robustness", out)
    assert m and float(m.group(1)) >= float(m.group(2)) + float(m.group(3)) - 0.01, out


def test_verify_construction_robustness_shows_progress_on_a_terminal_only(monkeypatch, capsys):
    from depthcert.cli import verify_construction
    from depthcert.cli.common import run_main

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    argv = ["icqa", "--k", "2", "--robustness"]
    assert run_main(verify_construction._verify_construction, argv) == 0
    err = capsys.readouterr().err
    for bar in ("robustness: radius", "robustness: fractional bits", "robustness: float formats"):
        assert bar in err, err[-500:]
    assert run_main(verify_construction._verify_construction, argv + ["--json"]) == 0
    assert capsys.readouterr().err == ""


# ---- Ctrl-C and errors after a progress bar: exit 130, one line, starting its own line

def _screen(text: str) -> list[str]:
    """The lines a terminal shows for `text`: a carriage return moves to the start of the line and
    later characters overwrite earlier ones (as tqdm's redrawn bars rely on)."""
    lines, line, col = [], [], 0
    for ch in text:
        if ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif ch == "\r":
            col = 0
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    if line:
        lines.append("".join(line).rstrip())
    return [s for s in lines if s]


def test_screen_reads_a_redrawn_line():
    assert _screen("abc\rxy\n") == ["xyc"] and _screen("bar 50%\r       \rerror: x\n") == ["error: x"]


@pytest.mark.parametrize("exc,code,line", [
    (lambda: __import__("depthcert.checkers.errors", fromlist=["BadInput"]).BadInput("--k must be >= 1"), 2,
     "error: --k must be >= 1"),
    (lambda: KeyboardInterrupt(), 130, "interrupted (Ctrl-C)"),
    (lambda: ZeroDivisionError("boom"), 4,
     "internal error: ZeroDivisionError: boom; please report (rerun with DEPTHCERT_DEBUG=1 for the traceback)"),
])
def test_an_error_during_a_progress_bar_starts_on_a_fresh_line(exc, code, line, capsys):
    """A bar like every command's (tqdm on stderr, leave=False) is on the screen when the command
    fails: the terminal shows the error line alone, not appended to the bar."""
    from tqdm import tqdm

    from depthcert.cli.errors import run_main

    def body(argv):
        bar = tqdm(total=10, desc="verify icqa", unit="pt", leave=False, file=sys.stderr)
        bar.update(5)
        bar.refresh()
        raise exc()

    assert run_main(body, []) == code
    err = capsys.readouterr().err
    assert "verify icqa" in err  # the bar was drawn
    assert _screen(err) == [line], repr(err)


def test_ctrl_c_exits_130_with_one_line_through_the_os():
    """A real SIGINT in a running command: exit status 130 (128 + SIGINT, what a shell reports),
    one line on stderr, no traceback (the process signals itself: no timing involved)."""
    # a process started in the background by a non-interactive shell inherits SIGINT ignored (and
    # Python then installs no handler): the script restores Python's own, as an interactive run has it
    script = ("import os, signal, sys\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from depthcert.cli.errors import run_main\n"
              "def body(argv):\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    while True:\n"
              "        pass\n"
              "sys.exit(run_main(body, []))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr, r.stdout) == (130, "interrupted (Ctrl-C)\n", "")


def test_help_names_the_interrupt_exit_code():
    from depthcert.cli.errors import EXIT_CODES, exit_codes_epilog

    for name in EXIT_CODES:
        assert exit_codes_epilog(name).endswith("; 130 interrupted (Ctrl-C)."), name


# ---- train: a progress bar on a terminal only

def test_train_shows_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    pytest.importorskip("torch")
    r = run("train", "icqa", "--k", "2", "--steps", "20", "--eval-every", "10", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("OBSERVED icqa"), r.stderr
    assert r.stderr == "", r.stderr  # a pipe or a file: no bar, no progress lines
    r = run("train", "copy", "--length", "4", "--alphabet", "3", "--steps", "10", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_train_shows_a_bar_on_a_terminal(monkeypatch, capsys):
    pytest.importorskip("torch")
    from depthcert.cli.train import train_main

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert train_main(["icqa", "--k", "2", "--steps", "20", "--eval-every", "10"]) == 0
    assert "icqa L=2 H=1,1 seed=0" in capsys.readouterr().err
    assert train_main(["icqa", "--k", "2", "--steps", "20", "--eval-every", "10", "--json"]) == 0
    assert capsys.readouterr().err == ""


# ---- the test suite writes nothing into the repository

def test_documented_commands_write_their_files_outside_the_repository(tmp_path):
    """docs/trained-models.md's `export-transformerlens ... depthcert-prev-token.safetensors` writes
    into the folder it runs in: tests/test_docs.py runs the docs' commands in a folder linking the
    checkout's entries (link_checkout), so the file lands there and the repository stays clean."""
    sys.path.insert(0, os.path.dirname(__file__))
    import test_docs

    name = "depthcert-prev-token.safetensors"
    blocks = [b for b in test_docs.BLOCKS if b[2].startswith("export-transformerlens ") and b[2].endswith(" " + name)]
    assert len(blocks) == 1, [b[2] for b in test_docs.BLOCKS if "export" in b[2]]
    in_root = os.path.join(ROOT, name)
    before = os.stat(in_root).st_mtime_ns if os.path.exists(in_root) else None
    cwd = test_docs.link_checkout(tmp_path)
    test_docs.test_documented_command_prints_what_the_docs_say(*blocks[0], docs_cwd=cwd)
    test_docs.test_installed_script_prints_what_the_docs_say(*blocks[0], docs_cwd=cwd)
    assert (tmp_path / name).is_file() and not (tmp_path / name).is_symlink()
    assert (os.stat(in_root).st_mtime_ns if os.path.exists(in_root) else None) == before


# ---- docs/trained-models.md: "decide your own TransformerLens model" near the top, and its code runs

def _own_model_section() -> str:
    text = open(os.path.join(ROOT, "docs", "trained-models.md"), encoding="utf-8").read()
    start = text.index("## Decide your own TransformerLens model in three commands")
    return text, text[start:text.index("\n## ", start + 1)]


def test_own_model_steps_come_first_and_the_readme_links_them():
    text, section = _own_model_section()
    assert text.index(section) < text.index("## The Max-of-K table")  # before every result section
    assert text[:text.index(section)].count("\n") < 25
    assert "docs/trained-models.md#decide-your-own-transformerlens-model-in-three-commands" in _readme()


def test_own_model_steps_run_on_a_live_hooked_transformer(tmp_path, monkeypatch):
    """Step 1's code and the cfg.json line (plain json.dump raises TypeError on the config's torch
    dtype; the documented default=str does not), then step 3's verify-model on each file."""
    pytest.importorskip("transformer_lens")
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    _, section = _own_model_section()
    step1 = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    dump = re.search(r"`(json\.dump\(model\.cfg\.to_dict\(\), [^`]*)`", section.replace("\n   ", " ")).group(1)
    save = re.search(r"`(torch\.save\(model\.state_dict\(\), \"mine\.pt\"\))`", section).group(1)
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_heads=1, d_head=8, d_vocab=4, n_ctx=3, attn_only=True,
                                  normalization_type=None, act_fn=None, seed=0)
    model = HookedTransformer(cfg)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError):  # what a newcomer tried first
        json.dump(model.cfg.to_dict(), open(os.devnull, "w"))
    scope = {"model": model, "json": json, "torch": torch}
    exec(textwrap.dedent(step1), scope)
    exec(dump, scope)
    exec(save, scope)
    task = ["--task", "max-of-k", "--vocab", "4", "--k", "3", "--json"]
    docs = [json.loads(run("verify-model", *argv, *task, cwd=tmp_path).stdout)
            for argv in (["mine.safetensors"], ["mine.pt", "--config", "cfg.json"])]
    assert docs[0]["points"] == 64 and docs[0]["correct"] == docs[1]["correct"], docs


# ---- README: exit codes per command, the Max-of-K row, the torch wheel, one reading order with docs/index.md

def _readme_table(heading: str) -> list[list[str]]:
    text = _readme()
    lines = text[text.index(heading):].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[first:]))  # the first table
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def test_readme_exit_code_table_is_what_the_commands_exit_with():
    """Each code's row names exactly the commands whose EXIT_CODES (depthcert/cli/errors.py: the
    --help epilogs and docs/commands.md's table) include it; "every command" means all of them."""
    from depthcert.cli.errors import EXIT_CODES, EXIT_INTERRUPTED, exit_codes_epilog

    rows = {int(code): (means, commands) for code, means, commands in _readme_table("## Exit codes")}
    assert sorted(rows) == [0, 1, 2, 3, 4, EXIT_INTERRUPTED], rows
    for code, (means, commands) in rows.items():
        named = set(EXIT_CODES) if commands == "every command" else set(re.findall(r"`([a-z-]+)`", commands))
        if code == EXIT_INTERRUPTED:
            assert named == set(EXIT_CODES) and all(f"{code} interrupted" in exit_codes_epilog(n) for n in named)
            continue
        assert named == {name for name, codes in EXIT_CODES.items() if code in codes}, (code, named)
    assert "refuted" in rows[1][0] and "bad input" in rows[2][0] and "undecided" in rows[3][0]


def test_readme_max_of_k_row_says_which_model_and_which_inputs():
    row = next(r for r in _readme_table("## Results") if "max-of-k" in r[1])
    ckpt = re.search(r"max_of_k_v(\d+)_k(\d+)\.safetensors", row[1])
    k = re.search(r"--k (\d+)", row[1]).group(1)
    vocab = re.search(r"--vocab (\d+)", row[1]).group(1)
    assert f"trained for K = {ckpt.group(2)}" in row[0] and f"every input of length {k}" in row[0], row[0]
    assert vocab == ckpt.group(1) and row[3].endswith(f"of {int(vocab) ** int(k):,} correct"), row


def test_readme_says_how_to_avoid_the_gpu_torch():
    text = _readme()
    assert "several GB" in text and "CPU wheel" in text
    line = re.search(r"^pip install torch==(\S+) --index-url https://download\.pytorch\.org/whl/cpu$", text, re.M)
    with open(os.path.join(ROOT, "constraints.txt")) as fh:
        assert line and re.search(rf"^torch=={re.escape(line.group(1))}$", fh.read(), re.M)  # the pinned version
    assert '"The test suite"' in text and "## The test suite" in open(os.path.join(ROOT, "docs", "development.md")).read()


# ---- docs/json.md: bad input with --json is exit 2, one line on stderr, no document

@pytest.mark.parametrize("argv", [
    ["verify-construction", "icqa", "--k", "0"], ["find-dependence", "--task", "nosuch"],
    ["find-depth", "--task", "tm", "--l", "0", "--heads", "1"], ["check-certificate", "no-such-file.json"],
    ["verify-model", "no-such-file.safetensors", "--task", "icqa"], ["reproduce-paper", "--nosuch"],
    ["show-construction", "icqa", "--k", "0", "--out", "pictures"], ["export-transformerlens", "no-such.json", "o.safetensors"],
    ["verify-tracr", "make_length", "--vocab", "1,2", "--max-seq-len", "0"], ["train", "icqa", "--k", "0"],
    ["reproduce", "nosuch"]],
    ids=lambda a: a[0])
def test_bad_input_with_json_is_exit_2_one_line_and_no_document(argv, tmp_path):
    sys.path.insert(0, os.path.dirname(__file__))
    from cli_in_process import run_command

    text = open(os.path.join(ROOT, "docs", "json.md"), encoding="utf-8").read()
    assert "A\ncommand that stops before a verdict prints no document" in text
    assert "the user's own bad input is exit 2 with no document" in text
    code, out, err = run_command(argv + ["--json"], cwd=str(tmp_path))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert os.listdir(tmp_path) == []  # nothing written


# ---- command output in the docs is what the command prints: no indented `$` paraphrases

OWN_PAGES = ["README.md", "docs/theorem5.md", "docs/theorem6.md", "docs/json.md", "docs/tutorial.md",
             "docs/semantics.md", "docs/architecture.md", "docs/tracr.md", "docs/index.md"]


@pytest.mark.parametrize("page", OWN_PAGES)
def test_command_output_sits_in_fenced_blocks_that_tests_check(page):
    """An indented `$ command` block escapes tests/test_docs.py (it checks fenced blocks only): every
    `$ ` line of these pages is in a fenced block, where the source check and the doc-test apply."""
    fenced = False
    for n, line in enumerate(open(os.path.join(ROOT, page), encoding="utf-8"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            assert not re.match(r"^\s+\$ ", line), f"{page}:{n}: {line.strip()}"


@pytest.mark.parametrize("page,task", [("docs/theorem5.md", "tm"), ("docs/theorem6.md", "ictm")])
def test_theorem_pages_replay_the_printed_counterexample_as_printed(page, task):
    """The replay command of the printed weights' counterexample names --as-printed and the point
    the refuting run printed, and both runs are doc-tests (their output is checked)."""
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    refuted = re.findall(rf"^\$ (verify-construction {task} .*--as-printed)$\n(?:(?!\$ ).*\n)*?  point +(\d+)  \(replay",
                         text, re.M)
    assert refuted, page
    for cmd, point in refuted[:1]:
        assert re.search(rf"^\$ {re.escape(cmd)} --point {point}$\npoint {point}: .*\n(?:.*\n)*?.*\(WRONG", text, re.M)
    sys.path.insert(0, os.path.dirname(__file__))
    import test_docs

    blocks = [b for b in test_docs.BLOCKS if b[0] == page]
    assert sum("--as-printed" in b[2] for b in blocks) >= 2, blocks


# ---- stale wording: the architecture page names every command module and task module

@pytest.mark.parametrize("folder", ["depthcert/cli", "checkers/tasks", "depthcert/interop"])
def test_architecture_names_every_module(folder):
    text = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    tracked = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True).stdout.split()
    modules = [os.path.basename(p) for p in tracked if p.endswith(".py") and os.path.dirname(p) == folder]
    assert modules or not os.path.isdir(os.path.join(ROOT, ".git"))
    missing = [m for m in modules if m != "__init__.py" and f"`{m}`" not in text]
    assert not missing, (folder, missing)
    assert not re.search(r"\bnow;|\bnext\)", text)  # "tracr now; TransformerLens next": plans, not the code


@pytest.mark.parametrize("page", OWN_PAGES)
def test_user_docs_name_no_team_roles(page):
    """Who wrote what ("the lead's"), or which report measured it ("the issue's"), means nothing to a reader."""
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    assert not re.search(r"\bthe (lead|issue|auditor|helper|session)'s\b", text, re.I), page


# ---- the tutorial's contents list is its sections

def test_tutorial_contents_list_every_section_in_order():
    text = open(os.path.join(ROOT, "docs", "tutorial.md"), encoding="utf-8").read()
    contents = text[text.index("Contents:"):text.index("\n## ")]
    listed = re.findall(r"^(\d+)\. (.+)$", contents, re.M)
    sections = re.findall(r"^## (\d+)\. (.+)$", text, re.M)
    assert listed == sections and len(sections) >= 8, (listed, sections)


# ---- docs/semantics.md: every task's token rows and positions, checked against the tasks' vocabularies

def _run(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _templates(l: int, m: int) -> list[str]:
    """Every template of length l with at most m distinct letters (first-occurrence order), sorted."""
    out = [""]
    for _ in range(l):
        out = [t + chr(ord("A") + c) for t in out for c in range(min(m, len(set(t)) + 1))]
    return sorted(out)


def _group_tokens(group: str) -> list[str]:
    kind, m = group[0], int(group[1:])
    if kind == "c":
        return _run("", m)
    full = "(" + "".join(map(str, range(m))) + ")"
    if kind == "s":
        return ["(01)", full]
    return ["(012)", full if m % 2 else "(" + "".join(map(str, range(1, m))) + ")"]


# task: (token rows, n, sequence, classes: the doc's cells), then the same as functions of the task's
# sizes (token names, n, class names or None when the cell is words only), and sizes to test besides the defaults
EMBEDDINGS = {
    "sc": ("`t0 .. t{alphabet-1}`, `<cls>`", "`length + 1`", "`x_1 .. x_length <cls>`",
           "`y0 .. y{n_points-1}`: every sequence its own class (a seeded permutation)",
           lambda p: _run("t", p["alphabet"]) + ["<cls>"], lambda p: p["length"] + 1, lambda p: _run("y", p["n_points"]),
           [dict(length=2, alphabet=2), dict(length=2, alphabet=4, n_points=5)]),
    "icqa": ("`q0 .. q{n_questions-1}`, `=`, `a0 .. a{n_answers-1}`", "`3 k + 2`",
             "`k` triples `q = a` (distinct questions, distinct answers), then the query `q =`",
             "`a0 .. a{n_answers-1}`",
             lambda p: _run("q", p["n_questions"]) + ["="] + _run("a", p["n_answers"]), lambda p: 3 * p["k"] + 2,
             lambda p: _run("a", p["n_answers"]), [dict(k=2, n_questions=3, n_answers=4)]),
    "tm": ("`t0 .. t{alphabet-1}`, `<cls>`", "`l + 1`", "`x_1 .. x_l <cls>`",
           "the templates of length `l` with at most `alphabet` letters, sorted: `AAA`, `AAB`, `ABA`, `ABB`, `ABC` at l = 3",
           lambda p: _run("t", p["alphabet"]) + ["<cls>"], lambda p: p["l"] + 1, lambda p: _templates(p["l"], p["alphabet"]),
           [dict(l=2, alphabet=4), dict(l=4, alphabet=2)]),
    "ictm": ("`x0 .. x{alphabet-1}`, `=`, `a0 .. a{n_answers-1}`", "`k (l + 2) + l + 1`",
             "`k` blocks `x_1 .. x_l = a` (distinct templates, distinct answers), then the query `x_1 .. x_l =`",
             "`a0 .. a{n_answers-1}`",
             lambda p: _run("x", p["alphabet"]) + ["="] + _run("a", p["n_answers"]),
             lambda p: p["k"] * (p["l"] + 2) + p["l"] + 1, lambda p: _run("a", p["n_answers"]),
             [dict(k=1, l=3, alphabet=3, n_answers=2)]),
    "multihop": ("the entities `a`, `b`, ... (`e0 .. e{n_entities-1}` beyond 26), `>`", "`3 k + 2`",
                 "`k` facts `e > f`, then the query `e >`", "the entities",
                 lambda p: ([chr(97 + i) for i in range(p["n_entities"])] if p["n_entities"] <= 26
                            else _run("e", p["n_entities"])) + [">"],
                 lambda p: 3 * p["k"] + 2,
                 lambda p: [chr(97 + i) for i in range(p["n_entities"])] if p["n_entities"] <= 26 else _run("e", p["n_entities"]),
                 [dict(hops=3, k=2, n_entities=4), dict(hops=1, k=1, n_entities=27)]),
    "parity": ("`0`, `1`", "`n`", "`n` bits", "`0`, `1`", lambda p: ["0", "1"], lambda p: p["n"], lambda p: ["0", "1"],
               [dict(n=3)]),
    "mod-count": ("`0`, `1`", "`n`", "`n` bits", "`0 .. {modulus-1}`", lambda p: ["0", "1"], lambda p: p["n"],
                  lambda p: _run("", p["modulus"]), [dict(n=3, modulus=4)]),
    "word-problem": ("the generators of `group`: `(01)`, `(01..m-1)` for `s<m>`; `(012)`, then `(01..m-1)` (odd m) or "
                     "`(12..m-1)` (even m) for `a<m>`; `0 .. {k-1}` for `c<k>`", "`n`", "`n` generators `g_1 .. g_n`",
                     "the group's elements in cycle notation, sorted by their images (`e` first); `0 .. {k-1}` for `c<k>`",
                     lambda p: _group_tokens(p["group"]), lambda p: p["n"],
                     lambda p: _run("", int(p["group"][1:])) if p["group"][0] == "c" else None,
                     [dict(group="s3", n=3), dict(group="a4", n=2), dict(group="c4", n=2)]),
    "reachability": ("`0`, `1`, `v0 .. v{vertices-1}`", "`vertices^2 + 2`",
                     "the adjacency bits, row-major (bit (u, w): the edge u -> w), then the source and the target",
                     "`no`, `yes`", lambda p: ["0", "1"] + _run("v", p["vertices"]), lambda p: p["vertices"] ** 2 + 2,
                     lambda p: ["no", "yes"], [dict(vertices=2)]),
    "composition": ("`0 .. {N-1}` (`--domain`)", "`L N + 1` (`--n-functions` L)",
                    "the tables `f_1(0) .. f_1(N-1)` ... `f_L(0) .. f_L(N-1)`, then `x`", "`0 .. {N-1}`",
                    lambda p: _run("", p["N"]), lambda p: p["L"] * p["N"] + 1, lambda p: _run("", p["N"]),
                    [dict(n_functions=3, domain=2)]),
    "max-of-k": ("`0 .. {vocab-1}`", "`k`", "`k` tokens", "`0 .. {vocab-1}`", lambda p: _run("", p["vocab"]),
                 lambda p: p["k"], lambda p: _run("", p["vocab"]), [dict(vocab=5, k=2)]),
    "modular-addition": ("`0 .. {p-1}`, `=`", "`3`", "`a b =`", "`0 .. {p-1}`", lambda p: _run("", p["p"]) + ["="],
                         lambda p: 3, lambda p: _run("", p["p"]), [dict(modulus=5)]),
    "induction": ("`0 .. {vocab-1}`", "`n`", "`n` tokens; the last one occurred exactly once before",
                  "`0 .. {vocab-1}`", lambda p: _run("", p["vocab"]), lambda p: p["n"],
                  lambda p: _run("", p["vocab"]), [dict(vocab=3, n=4)]),
}


def embedding_table() -> str:
    """docs/semantics.md's table of every task's embedding: the cells above, the default sizes and
    point 0 from the task itself (`python tests/test_newcomer.py` prints it)."""
    from depthcert.checkers.tasks import make_task

    lines = ["| task (default sizes) | token rows `0 .. V-1`, in order | positions `n` (position `j` is row `V + j`) "
             "| the sequence, position 0 first | point 0 at the default sizes | classes: rows of `W_O`, in order |",
             "|---|---|---|---|---|---|"]
    for name, (rows, n, layout, classes, *_) in EMBEDDINGS.items():
        task = make_task(name)
        sizes = ", ".join(f"{k}={v}" for k, v in task.params.items())
        point = task.point(0)
        lines.append(f"| `{name}` ({sizes}) | {rows} | {n} | {layout} | `{' '.join(point.tokens)}` -> `{point.label}` "
                     f"| {classes} |")
    return "\n".join(lines)


def test_semantics_embedding_table_is_every_tasks_vocabulary():
    """One row per task with a dataset (13), each row what the task's code does: the token rows,
    the sequence length and the classes, as the doc states them in the sizes, equal the task's own
    vocabulary, length and classes at the default sizes and at others; the table is embedding_table()."""
    from depthcert.checkers.tasks import TASK_ALIASES, make_task

    assert list(EMBEDDINGS) == list(dict.fromkeys(TASK_ALIASES.values())), "a task without a row"
    for name, (*_, vocab, n, classes, others) in EMBEDDINGS.items():
        for sizes in [{}] + others:
            task = make_task(name, **sizes)
            p = dict(task.params)
            assert list(task.vocab) == vocab(p), (name, sizes, task.vocab)
            assert task.length == n(p), (name, sizes, task.length)
            if classes(p) is not None:
                assert list(task.classes) == classes(p), (name, sizes, task.classes)
            else:  # a group's elements: words only in the doc
                assert task.classes[0] == "e" and len(set(task.classes)) == len(task.classes), (name, sizes)
    text = open(os.path.join(ROOT, "docs", "semantics.md"), encoding="utf-8").read()
    marker = "<!-- test: tests/test_newcomer.py::test_semantics_embedding_table_is_every_tasks_vocabulary -->\n"
    assert marker in text
    table = text[text.index(marker) + len(marker):].split("\n\n")[0]
    assert table == embedding_table(), "docs/semantics.md's table differs; today it is:\n" + embedding_table()


if __name__ == "__main__":
    print(embedding_table())


# ---- heads are numbered from 1 in printed output, --all-sizes included

def test_all_sizes_report_numbers_heads_from_1():
    sys.path.insert(0, os.path.dirname(__file__))
    from cli_in_process import run_command

    code, out, _ = run_command(["verify-construction", "icqa", "--all-sizes"])
    heads = re.findall(r"^\s+layer (\d+) head (\d+):", out, re.M)
    assert code == 0 and heads == [("1", "1"), ("2", "1")], heads  # heads per layer [1, 1]
    code, out, _ = run_command(["verify-construction", "tm", "--l", "3", "--alphabet", "4", "--as-printed"])
    assert code == 1 and "layer 1 head 1 W_V" in out  # the finite check's wording, for comparison


def test_training_scripts_print_progress_on_a_terminal_only(tmp_path, monkeypatch, capsys):
    """python -m depthcert.cli.train_induction (and train_max_of_k, train_grokking: the same
    switch) print their step lines on a terminal only."""
    pytest.importorskip("torch")
    from depthcert.cli.train_induction import main

    argv = ["--out", str(tmp_path / "m.safetensors"), "--vocab", "3", "--n", "4", "--steps", "1"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0
    assert "step 0 loss" in capsys.readouterr().err
