"""--fit-effort N: the max-margin read-out's LP work budget times N (proofs/readout.lp_budget)."""
from __future__ import annotations

import json
import re

import pytest

from depthcert.checkers.errors import BadInput
from depthcert.cli.verify_construction import verify_construction_main
from depthcert.proofs import readout as ro


def _run(capsys, *argv):
    try:
        code = verify_construction_main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_budget_is_effort_times_the_default():
    for points, dim in ((10, 3), (3_125, 12), (46_656, 14), (10**9, 50)):
        base = ro.lp_budget(points, dim)
        assert ro.lp_budget(points, dim, 1) == base
        assert ro.lp_budget(points, dim, 7) == 7 * base
    for bad in (0, -1, ro.MAX_FIT_EFFORT + 1, 1.5):
        with pytest.raises(BadInput):
            ro.lp_budget(100, 3, bad)


def test_note_reports_the_larger_budget(capsys):
    budgets = []
    for effort in (1, 3):
        code, out, _ = _run(capsys, "tm", "--l", "5", "--alphabet", "5", "--variant", "ternary",
                            "--fit-effort", str(effort), "--json")
        assert code == 0
        note = json.loads(out)["readout_note"]
        m = re.search(r"of ([\d,]+) work units", note)
        if m is None:  # the LP reached its optimum within the budget: nothing more to spend
            assert "stopped" not in note
            return
        budgets.append(int(m.group(1).replace(",", "")))
    assert budgets[1] == 3 * budgets[0]


@pytest.mark.parametrize("argv, what", [
    (("tm", "--l", "3", "--fit-effort", "0"), "--fit-effort must be from 1"),
    (("tm", "--l", "3", "--fit-effort", "10001"), "--fit-effort must be from 1"),
    (("icqa", "--k", "2", "--fit-effort", "3"), "this run's read-out is paper"),
])
def test_bad_effort_is_one_line_exit_2(capsys, argv, what):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert what in err and len(err.strip().splitlines()) == 1


def test_effort_refused_past_max_seconds(capsys):
    code, _, err = _run(capsys, "tm", "--l", "5", "--alphabet", "5", "--variant", "ternary",
                        "--fit-effort", "10000", "--max-seconds", "5")
    assert code == 2 and "--fit-effort 10000" in err and len(err.strip().splitlines()) == 1
