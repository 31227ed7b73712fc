"""User docs describe the tool as it is: no machine-specific paths, no internal issue numbers, no
history of how it got there.  Scans README.md and docs/*.md (links to other projects' issue
trackers, like https://github.com/OWNER/REPO/issues/7, are fine)."""
from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))

MACHINE_PATH = re.compile(r"(?<![\w.])/tmp/|/home/\w|/work/(?:main|shared)\b")
ISSUE_NUMBER = re.compile(r"\bissues?\s*(?:#\s*|no\.?\s*|number\s+)?\d+|(?<![\w/&])#\d+\b", re.I)
HISTORY = re.compile(
    r"before this (?:work|change|fix|commit|wave|session)|before the (?:fix|change)\b|"
    r"\bused to (?:run|take|print|say|give|fail|be slow)\b|an earlier (?:run|version) of the same code|"
    r"\bthis wave\b|\blast session\b|\bmeasured before (?:it|the change)\b|\bafter the change\b", re.I)


def findings(text: str) -> list[str]:
    """Every offending line of a page, as "LINE: what: the text"."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in (("machine-specific path", MACHINE_PATH), ("issue number", ISSUE_NUMBER),
                              ("history", HISTORY)):
            m = pattern.search(line)
            if m:
                out.append(f"{n}: {what} {m.group(0)!r}: {line.strip()}")
    return out


def test_the_scan_covers_readme_and_docs():
    names = {os.path.relpath(p, ROOT) for p in PAGES}
    assert "README.md" in names and "docs/trained-models.md" in names and len(names) > 10


@pytest.mark.parametrize("path", PAGES, ids=[os.path.relpath(p, ROOT) for p in PAGES])
def test_user_docs_have_no_history_tmp_paths_or_issue_numbers(path):
    bad = findings(open(path, encoding="utf-8").read())
    assert not bad, f"{os.path.relpath(path, ROOT)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("line", [
    "wrote /tmp/depthcert-prev-token.safetensors: HookedTransformer",
    "0 chunks resumed from /tmp/a26/bench.journal",
    "docs/softmax.md mentions issue #31 here",
    "(see issue 33, item 2)",
    "as filed in #27",
    "Before this work the same command took 174 s",
    "* **The paper's class used to run on exact big integers**",
    "(an earlier run of the same code printed 54.6 s)",
])
def test_the_scan_catches_each_kind(line):
    assert findings(line), line


@pytest.mark.parametrize("line", [
    "Floats (the HiGHS LP solver) are only used to *search*",
    "see https://github.com/google-deepmind/tracr/issues/7 for the upstream report",
    "`verify-model depthcert-prev-token.safetensors` reads it back",
    "the entry (2, 0) can no longer read table 3",
    "| Theorem 5 heads (fixed) | `verify-construction tm --l 3` |",
    "write it to build/tmp/x.json",
])
def test_the_scan_passes_ordinary_prose(line):
    assert not findings(line), findings(line)
