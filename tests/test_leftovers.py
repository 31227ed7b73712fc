"""Small defects, each pinned: verify-construction --point under --max-seconds, exact
PathsDisagree messages, undecided reasons kept by the journals."""
from __future__ import annotations

import json

from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction
from fake_clock import step_clock
from test_guards import READINGS, STEP, _big_icqa_weights  # ICQA k=2 with ~4,000-digit rationals


def test_one_point_stops_at_max_seconds(tmp_path, capsys, monkeypatch):
    """`--point N` evaluates under --max-seconds as the whole run does: weights of thousands of
    digits ran one point for minutes past --max-seconds 1 (exit 0 long after the limit).  The clock
    is injected (tests/fake_clock.py, STEP = 0.3 s per reading): after the point's start it is read
    by the a-priori bound (2 heads) and before each of the 2 layers of big-integer work, and the
    4th reading, before layer 2, is the first past the limit (a run without the per-layer checks
    ends with exit 0)."""
    path = _big_icqa_weights(tmp_path)
    clock = step_clock(monkeypatch, STEP)
    code = run_main(_verify_construction, ["icqa", "--k", "2", "--weights", str(path), "--point", "3",
                                           "--max-seconds", "1"])
    out = capsys.readouterr()
    assert code == 3 and not out.out, (code, out)
    assert "evaluating point 3 ran past the limit of 1 s" in out.err and "--max-seconds" in out.err, out.err
    assert len(out.err.strip().splitlines()) == 1 and clock.readings <= READINGS, (clock.readings, out.err)


def test_one_point_within_the_limit_is_shown(capsys, monkeypatch):
    step_clock(monkeypatch, 0.0)  # a stopped clock: the 1 s limit cannot pass, however loaded the machine
    code = run_main(_verify_construction, ["icqa", "--k", "2", "--point", "3", "--max-seconds", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "correct" and out["point"] == 3


def _huge_margin_model():
    """One softmax head with zero scores; logit x = 10^400 at every point, logit y = 0: every
    margin of label x is 10^400, beyond float64."""
    from fractions import Fraction

    import numpy as np

    from depthcert.checkers.layout import Layout
    from depthcert.checkers.model import Head, Layer, Model

    lay = Layout.of(("token", 2), ("position", 2))
    zeros = np.array([[Fraction(0)] * 4 for _ in range(4)], dtype=object)
    WO = np.array([[10**400, 10**400, 0, 0], [0, 0, 0, 0]], dtype=object)
    return Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(zeros, zeros.copy(), attention="softmax"),)),), WO)


import pytest  # noqa: E402


@pytest.mark.parametrize("lie", ["wrong_for_correct", "disjoint_margin"])
def test_paths_disagree_prints_margins_beyond_float64(tmp_path, capsys, monkeypatch, lie):
    """Where the intervals and the balls disagree on a point whose margin is 10^400, the message
    names both answers with the balls' enclosure in exact decimal, rounded outward (a float() of
    it raised OverflowError: exit 4 with no word of the disagreement)."""
    import numpy as np

    from depthcert.checkers import exhaustive
    from depthcert.checkers.weights_file import model_to_json

    def lying(intervals, Hnum, den, labels, class_rows, n):  # the float64 intervals made to lie
        B = Hnum.shape[0]
        status = np.full(B, -1 if lie == "wrong_for_correct" else 1, dtype=np.int8)
        return status, np.full(B, 1.0), np.full(B, 2.0), np.full(B, n - 1)

    monkeypatch.setattr(exhaustive, "_interval_decisions", lying)
    w, d = tmp_path / "w.json", tmp_path / "d.json"
    w.write_text(json.dumps(model_to_json(_huge_margin_model())))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": [["a", "b"]], "labels": ["x"]}))
    assert run_main(_verify_construction, ["--weights", str(w), "--dataset", str(d)]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("internal error: PathsDisagree: certified paths disagree at point 0"), err
    assert "arb balls says correct (margin in [" in err[0] and "e+400]" in err[0], err
    lo, hi = err[0].split("arb balls says correct (margin in [")[1].split("]")[0].split(", ")
    from decimal import Decimal

    assert Decimal(lo) <= 10**400 <= Decimal(hi), (lo, hi)
    if lie == "disjoint_margin":
        assert "float64 intervals says correct (margin in [1e+0, 2e+0])" in err[0], err


def test_outward_decimal_encloses_any_rational():
    from decimal import Decimal
    from fractions import Fraction

    from depthcert.checkers.softmax_balls import _outward

    for q in (Fraction(10**400, 3), Fraction(-1, 3), Fraction(1, 2**8192), Fraction(-10**5000, 7), Fraction(5, 4)):
        lo, hi = Decimal(_outward(q, up=False)), Decimal(_outward(q, up=True))
        assert Fraction(lo) <= q <= Fraction(hi) and hi - lo <= abs(Decimal(q.numerator) / Decimal(q.denominator)) * Decimal("1e-9")


EX = "docs/examples/"


def _undecided_run(tmp_path, capsys, monkeypatch, extra=()):
    """verify-model on the prev-token softmax example in balls, journalled in chunks of 20, with
    every point made undecided for a stated reason (the balls' decision replaced)."""
    import os

    from depthcert.checkers import softmax_balls
    from depthcert.cli.verify_model import verify_model_main

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def undecided(self, H, den, labels, logits=False):
        return softmax_balls.PointDecision("undecided", None, labels[0][0], -1, (), 64,
                                           limit="precision cap (64 bits); a stated reason")

    j = tmp_path / "run.journal"
    argv = [os.path.join(root, EX, "prev-token-softmax-20.json"), "--dataset", os.path.join(root, EX, "prev-token-data.json"),
            "--method", "balls", "--chunk-points", "20", "--journal", str(j), "--json", *extra]
    with monkeypatch.context() as m:
        m.setattr(softmax_balls.SoftmaxDecider, "decide", undecided)
        code = verify_model_main(argv)
    return code, json.loads(capsys.readouterr().out), j, argv


def test_a_resumed_run_names_the_reasons_its_journal_recorded(tmp_path, capsys, monkeypatch):
    """The reason each undecided point stayed undecided is journalled: a run resumed wholly from
    the journal (the balls no longer patched: nothing is decided again) names the same reasons."""
    from depthcert.cli.verify_model import verify_model_main

    code, fresh, j, argv = _undecided_run(tmp_path, capsys, monkeypatch)
    assert code == 3 and fresh["undecided_points"] == 81 and len(fresh["undecided_limits"]) == 81
    assert all(x["limit"] == "precision cap (64 bits); a stated reason" for x in fresh["undecided_limits"])
    lines = [json.loads(x) for x in j.read_text().splitlines()]
    assert all(len(r["limits"]) == len(r["undecided"]) for r in lines[1:])
    assert verify_model_main(argv) == 3
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["undecided_limits"] == fresh["undecided_limits"]


def test_a_journal_without_reasons_still_resumes(tmp_path, capsys, monkeypatch):
    """A chunk line written before reasons were journalled (no "limits") resumes, with no reasons."""
    from depthcert.checkers.journal import line_checksum
    from depthcert.cli.verify_model import verify_model_main

    code, fresh, j, argv = _undecided_run(tmp_path, capsys, monkeypatch)
    lines = [json.loads(x) for x in j.read_text().splitlines()]
    for r in lines[1:]:
        del r["limits"]
        r["sum"] = line_checksum({k: v for k, v in r.items() if k != "sum"})
    j.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert verify_model_main(argv) == 3
    resumed = json.loads(capsys.readouterr().out)
    assert resumed["undecided_points"] == 81 and resumed["undecided_limits"] == []


@pytest.mark.parametrize("limits", [
    [[0, "a reason"]],  # point 0 is in another chunk
    [[20, "a\nreason"]],  # not printable
    [[21, "x"], [20, "x"]],  # not increasing
    [[20, "x" * 501]],  # too long
    [[20, ""]],
    "precision cap",
], ids=["other-chunk", "newline", "order", "long", "empty", "not-a-list"])
def test_forged_reasons_are_refused(tmp_path, capsys, monkeypatch, limits):
    """A chunk line whose reasons were edited (checksum recomputed) is refused: exit 2, one line."""
    from depthcert.checkers.journal import line_checksum
    from depthcert.cli.verify_model import verify_model_main

    code, fresh, j, argv = _undecided_run(tmp_path, capsys, monkeypatch)
    lines = [json.loads(x) for x in j.read_text().splitlines()]
    r = lines[2]  # the chunk 20..39
    assert r["lo"] == 20
    r["limits"] = limits
    r["sum"] = line_checksum({k: v for k, v in r.items() if k != "sum"})
    j.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert verify_model_main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith(f"error: journal {j} line 3: limits"), out.err


def test_a_forged_margin_beyond_float64_is_refused_not_an_internal_error(tmp_path, capsys):
    """A journal line whose margin was raised to 10^400 (checksum recomputed) is refused with exit
    2 and one line; the refusal's float() of the margin raised OverflowError (exit 4)."""
    import os

    from depthcert.checkers.journal import line_checksum
    from depthcert.cli.verify_model import verify_model_main

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    j = tmp_path / "run.journal"
    argv = [os.path.join(root, EX, "prev-token-softmax-20.json"), "--dataset", os.path.join(root, EX, "prev-token-data.json"),
            "--chunk-points", "20", "--journal", str(j), "--json"]
    assert verify_model_main(argv) == 0
    capsys.readouterr()
    lines = [json.loads(x) for x in j.read_text().splitlines()]
    big = str(10**400)
    lines[2]["margin"] = [big, big]
    lines[2]["sum"] = line_checksum({k: v for k, v in lines[2].items() if k != "sum"})
    j.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert verify_model_main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith(f"error: journal {j} line 3: "), out.err
    assert "recorded margin lower end 1e+400, decided again, has margin in [" in out.err, out.err


def test_margin_text_of_any_rational():
    from fractions import Fraction

    from depthcert.checkers.journal import margin_text

    assert margin_text(Fraction(1, 500000)) == "2e-06" and margin_text(0) == "0"
    assert margin_text(Fraction(10**400, 3)) == "3.333333333e+399"
    assert margin_text(-Fraction(10**400, 3)) == "-3.333333333e+399"
    assert margin_text(Fraction(1, 3 * 10**400)) == "3.333333333e-401"
