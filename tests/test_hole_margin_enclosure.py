"""Issue 41 hole 7: a printed enclosure of a certified-correct margin excludes 0.

The audit's case: a point certified correct whose true margin is far below 2^-8192 printed the
"certified enclosure" [0, 9.168019338e-2467] (it contains 0, a tie) and a JSON "decimal" of
4.58e-2467 (not the margin's size), because checkers/softmax_balls.py ball_bounds rounded both
ends outward to multiples of 2^-8192.  Here a one-head softmax model whose correct point has the
margin e^-S / (1 + e^-S) (S = 320,000: about 5.83e-138975) is verified with a positive lower
end, the words and the JSON print the same two ends, and the JSON decimal lies between them.
Below 2^-4194240 (no positive lower end is stated there: its denominator alone would take
megabytes) the point is undecided, saying why (exit 3), never an enclosure that contains 0.
"""
from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.layout import Layout
from depthcert.checkers.model import Head, Layer, Model

S = 320_000
LOG10_MARGIN = -S / math.log(10)  # log10(e^-S), the margin's size (1 + e^-S is 1 to 138,975 digits)


def tiny_margin_model(s: int) -> Model:
    """Key 0 scores -s at the query (position 1), key 1 scores 0; token a writes 1 into row x; the
    read-out is x for class x, 0 for class y.  On "a b" the margin is e^-s / (1 + e^-s); on "a a" 1."""
    lay = Layout.of(("token", 2), ("position", 2), ("x", 1))
    d = lay.dim
    QK = np.full((d, d), Fraction(0), dtype=object)
    QK[lay.index("position", 0), lay.index("position", 1)] = Fraction(-s)
    V = np.full((d, d), Fraction(0), dtype=object)
    V[lay.index("x", 0), lay.index("token", 0)] = Fraction(1)
    WO = np.full((2, d), Fraction(0), dtype=object)
    WO[0, lay.index("x", 0)] = Fraction(1)
    return Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(QK, V, attention="softmax"),)),), WO)


def _files(tmp_path, s):
    from depthcert.checkers.weights_file import model_to_json

    w, d = tmp_path / "w.json", tmp_path / "d.json"
    w.write_text(json.dumps(model_to_json(tiny_margin_model(s))))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": [["a", "b"], ["a", "a"]],
                             "labels": ["x", "x"]}))
    return str(w), str(d)


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction

    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ball_bounds_keep_a_positive_lower_end_however_small():
    import flint

    from depthcert.checkers.softmax_balls import ball_bounds

    old = flint.ctx.prec
    flint.ctx.prec = 64
    try:
        x = flint.arb(-S).exp()
        lo, hi = ball_bounds(x)
        assert 0 < lo <= hi and lo < Fraction(1, 2**8192)
        assert abs(math.log10(lo.numerator) - math.log10(lo.denominator) - LOG10_MARGIN) < 1e-6
        assert x > flint.arb(lo.numerator) / flint.arb(lo.denominator) or lo == hi  # lo is below the ball...
        assert x < flint.arb(hi.numerator) / flint.arb(hi.denominator) or lo == hi  # ...and hi above it
        nlo, nhi = ball_bounds(-x)
        assert (nlo, nhi) == (-hi, -lo) and nhi < 0  # a negative ball's upper end stays below 0
    finally:
        flint.ctx.prec = old


def test_the_audits_case_prints_an_enclosure_that_excludes_zero(tmp_path, capsys):
    w, d = _files(tmp_path, S)
    code, out, err = _run(["--weights", w, "--dataset", d], capsys)
    assert code == 0 and err == "", err
    line = next(x for x in out.splitlines() if x.strip().startswith("min margin"))
    lo_text, hi_text = line.split("in [", 1)[1].split("]", 1)[0].split(", ")
    lo, hi = Decimal(lo_text), Decimal(hi_text)
    assert 0 < lo <= hi
    assert abs(float(lo.log10()) - LOG10_MARGIN) < 1e-6 and abs(float(hi.log10()) - LOG10_MARGIN) < 1e-6
    code, out, err = _run(["--weights", w, "--dataset", d, "--json"], capsys)
    m = json.loads(out)["min_margin"]
    assert code == 0 and (m["lower"], m["upper"]) == (lo_text, hi_text)  # the JSON and the words agree
    assert lo <= Decimal(m["decimal"]) <= hi


def test_a_margin_beyond_any_stated_lower_end_is_undecided_not_zero(tmp_path, capsys):
    """e^-4,000,000 is about 2^-5,770,780: certified correct by the balls, but no positive lower end
    is stated that small, so the point is undecided (exit 3), and nothing prints a 0 lower end."""
    from depthcert.checkers.softmax_balls import TOO_SMALL

    w, d = _files(tmp_path, 4_000_000)
    code, out, err = _run(["--weights", w, "--dataset", d, "--json"], capsys)
    doc = json.loads(out)
    assert code == 3 and doc["verdict"] == "undecided", (code, err)
    assert doc["min_margin"] is None or not doc["min_margin"]["lower"].startswith("0")
    assert TOO_SMALL in json.dumps(doc)
    code, out, err = _run(["--weights", w, "--dataset", d], capsys)
    assert code == 3 and "margin     above 0 (certified)" in out and "[0," not in out


@pytest.mark.parametrize("s", [9_000, 60_000])
def test_margins_just_below_the_old_grid_are_positive_too(tmp_path, capsys, s):
    """e^-9000 (about 2^-12984, just past the old 2^-8192 grid) and e^-60000."""
    w, d = _files(tmp_path, s)
    code, out, err = _run(["--weights", w, "--dataset", d, "--json"], capsys)
    m = json.loads(out)["min_margin"]
    assert code == 0 and Decimal(m["lower"]) > 0
    assert abs(float(Decimal(m["lower"]).log10()) + s / math.log(10)) < 1e-6


def test_verify_model_prints_the_same_positive_enclosure(tmp_path, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import _main

    w, d = _files(tmp_path, S)
    assert run_main(_main, [w, "--dataset", d, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["min_margin"]
    assert 0 < Decimal(m["lower"]) <= Decimal(m["decimal"]) <= Decimal(m["upper"])
    assert abs(float(Decimal(m["lower"]).log10()) - LOG10_MARGIN) < 1e-6
    assert run_main(_main, [w, "--dataset", d]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("min margin"))
    assert f"in [{m['lower']}, {m['upper']}] (certified enclosure)" in line
