"""Hypothesis profiles of the test suite, and a count of the properties and examples run.

Profiles (select with `python -m pytest --hypothesis-profile=NAME`):

  ci    the default: 100 examples for properties that do not pin a count, and the per-test
        counts written in the tests (tests/proptools.py `prop(n)`: n examples).  Keeps the
        whole suite within CI time.
  deep  10x: 1000 examples for unpinned properties, n * 10 for every `prop(n)` property.
        Meant for a nightly job or before a release.

Both profiles drop the per-example deadline (shared CI machines are noisy; the suite's time is
bounded by the example counts instead) and print a reproduction blob on failure.

At the end of a run the terminal summary lists how many hypothesis properties ran and how many
examples they executed (explicit examples, generated ones, and any replay or shrinking of a
failure all count), per test file.
"""
from __future__ import annotations

import functools
import os
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("deep", max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("DEPTHCERT_HYPOTHESIS_PROFILE", "ci"))

_EXAMPLES: Counter = Counter()  # nodeid -> examples executed
_CURRENT: list = [None]  # nodeid of the test running now
_SKIPPED: set = set()  # nodeids skipped (a property that skips is not counted as run)


def _counting(inner):
    """Wrap a hypothesis test's inner function (the documented `.hypothesis.inner_test` hook)
    so that every example it runs is counted for the test running now."""

    @functools.wraps(inner)
    def run_example(*args, **kwargs):
        _EXAMPLES[_CURRENT[0]] += 1
        return inner(*args, **kwargs)

    run_example._depthcert_counting = True
    return run_example


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        fn = getattr(item, "obj", None)
        if fn is not None and is_hypothesis_test(fn):
            inner = fn.hypothesis.inner_test
            if not getattr(inner, "_depthcert_counting", False):
                fn.hypothesis.inner_test = _counting(inner)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _CURRENT[0] = item.nodeid
    try:
        yield
    finally:
        _CURRENT[0] = None


def pytest_runtest_logreport(report):
    if report.skipped:
        _SKIPPED.add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not any(k is not None and k not in _SKIPPED for k in _EXAMPLES):
        return
    name = settings.get_current_profile_name()
    by_file: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for nodeid, n in _EXAMPLES.items():
        if nodeid is None or nodeid in _SKIPPED:
            continue
        f = by_file[nodeid.split("::")[0]]
        f[0] += 1
        f[1] += n
    total_props = sum(v[0] for v in by_file.values())
    total_examples = sum(v[1] for v in by_file.values())
    tr = terminalreporter
    tr.write_sep("=", f"hypothesis properties (profile {name!r}, max_examples {settings.default.max_examples})")
    tr.write_line(f"{total_props} propert{'y' if total_props == 1 else 'ies'} ran {total_examples} "
                  f"example{'' if total_examples == 1 else 's'}")
    width = max(len(k) for k in by_file)
    for path in sorted(by_file):
        props, n = by_file[path]
        tr.write_line(f"  {path:<{width}}  {props:3d} {'property  ' if props == 1 else 'properties'}  {n:6d} "
                      f"example{'' if n == 1 else 's'}")
