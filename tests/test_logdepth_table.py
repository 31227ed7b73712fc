"""docs/logdepth.md's results table is what benchmarks/logdepth_table.py measures today.

The rows of up to 1,024 points are re-run in-process and every column but the seconds is compared
with the docs; every row of the script appears in the docs and no other row does.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import logdepth_table as lt  # noqa: E402

from depthcert.cli.verify_construction import verify_construction_main  # noqa: E402
from depthcert.cli.find_dependence import find_dependence_main  # noqa: E402

MAINS = {"verify-construction": verify_construction_main, "find-dependence": find_dependence_main}


def _in_process(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = MAINS[argv[0]](argv[1:])
        except SystemExit as e:
            code = e.code
    assert code in (0, 1, None), (argv, code)
    return json.loads(out.getvalue())


def _doc_rows():
    text = (ROOT / "docs" / "logdepth.md").read_text()
    table = text.split(lt.MARKER, 1)[1].lstrip("\n").split("\n\n", 1)[0].splitlines()
    assert "\n".join(table[:2]) == lt.HEADER
    return {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in table[2:]}


def _without_seconds(line):
    cells = [c.strip() for c in line.strip("|").split("|")]
    return cells[:7] + cells[8:]


def test_the_docs_list_exactly_the_script_rows():
    assert set(_doc_rows()) == {(r.label, r.variant) for r in lt.ROWS}


@pytest.mark.parametrize("row", [r for r in lt.ROWS if r.points <= 1024], ids=lambda r: f"{r.label} {r.variant}")
def test_small_rows_match_the_docs(row):
    m = lt.measure(row, _in_process)
    assert m["verdict"] == "verified"
    assert _without_seconds(lt.markdown(m)) == _without_seconds(_doc_rows()[(row.label, row.variant)])
