"""docs/tutorial.md runs and prints what it says.

Every ```python block of the tutorial is executed in order in one shared namespace, in a temporary
working directory (the files the tutorial writes go there).  When a ```python block is followed
directly (blank lines aside) by a ```text block, the block's captured stdout must equal that text
exactly, after stripping trailing whitespace from every line and trailing blank lines.  A ```python
block directly under a line `<!-- file: NAME -->` is also written to NAME in that directory before
it runs (the tutorial tells the reader to save it; later blocks import it or pass it to a command).
"""
from __future__ import annotations

import contextlib
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIAL = os.path.join(ROOT, "docs", "tutorial.md")


def tutorial_blocks(path: str | None = None) -> list[tuple[int, str, str | None]]:
    """[(line of the ```python fence, code, expected stdout or None)] in document order."""
    lines = open(path or TUTORIAL, encoding="utf-8").read().splitlines()
    blocks: list[tuple[int, str, str | None]] = []
    python_end = -1  # index of the last ```python block's closing fence
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        start, lang = i, fence[3:].strip()
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"tutorial.md:{start + 1}: unclosed ``` fence"
        i += 1  # past the closing fence
        if lang == "python":
            blocks.append((start + 1, "\n".join(body) + "\n", None))
            python_end = i - 1
        elif lang == "text":
            follows = python_end >= 0 and all(not lines[k].strip() for k in range(python_end + 1, start))
            assert blocks and blocks[-1][2] is None and follows, (
                f"tutorial.md:{start + 1}: a ```text block must directly follow a ```python block")
            line, code, _ = blocks[-1]
            blocks[-1] = (line, code, "\n".join(body))
        else:
            raise AssertionError(f"tutorial.md:{start + 1}: code blocks are ```python or ```text, got ```{lang}")
    return blocks


def block_files(path: str | None = None) -> dict[int, str]:
    """{line of the ```python fence: file name} for blocks directly under `<!-- file: NAME -->`."""
    lines = open(path or TUTORIAL, encoding="utf-8").read().splitlines()
    out = {}
    for i, text in enumerate(lines[1:], start=1):
        prev = lines[i - 1].strip()
        if text.strip() == "```python" and prev.startswith("<!-- file:") and prev.endswith("-->"):
            out[i + 1] = prev[len("<!-- file:"):-len("-->")].strip()
    return out


def normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def run_tutorial(workdir: str) -> list[tuple[int, str | None, str]]:
    """Run every block in `workdir`; [(line, expected, printed)] per block, in order."""
    namespace: dict = {"__name__": "__tutorial__"}
    results = []
    old_cwd, old_path = os.getcwd(), os.environ.get("PATH", "")
    # the tutorial calls the console scripts by name: make the ones of this interpreter's venv found
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + old_path
    os.chdir(workdir)
    sys.path.insert(0, workdir)  # `from my_family import build`, as a script run next to the file
    files = block_files()
    try:
        for line, code, expected in tutorial_blocks():
            if line in files:
                with open(os.path.join(workdir, files[line]), "w", encoding="utf-8") as fh:
                    fh.write(code)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(code, f"docs/tutorial.md (block at line {line})", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"docs/tutorial.md:{line}: the block raised {exc!r}; "
                                     f"it had printed\n{out.getvalue()}") from exc
            results.append((line, expected, out.getvalue()))
    finally:
        os.chdir(old_cwd)
        os.environ["PATH"] = old_path
        sys.path.remove(workdir)
        for name in files.values():  # a later run in another directory imports its own copy
            sys.modules.pop(os.path.splitext(name)[0], None)
    return results


def test_tutorial_structure():
    blocks = tutorial_blocks()
    assert len(blocks) >= 10
    assert sum(expected is not None for _, _, expected in blocks) >= 10


def test_tutorial_runs_and_prints_what_it_says(tmp_path):
    for line, expected, printed in run_tutorial(str(tmp_path)):
        if expected is not None:
            assert normalise(printed) == normalise(expected), (
                f"docs/tutorial.md:{line}: the block prints\n{printed}\nbut the tutorial says\n{expected}")
    written = sorted(os.listdir(tmp_path))
    assert {"w.json", "data.json", "my_family.py"} <= set(written), written
