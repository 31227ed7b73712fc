"""Certified paths at the float64 limit, the exact tie decision's limits, and paths that disagree.

  * every certified float path (the one-layer tables, the batch intervals, the arb balls, the
    weight balls, the checked integer pass) treats an overflowed value -- or an error bound or
    enclosure end that overflows -- as undecided at its level and hands the point on: never a
    verdict, never Fraction(inf) (exit 4).  Each verdict is compared with an independent
    evaluation (tests/independent_oracle.py: Fractions and mpmath, not the code under test) on
    models whose integer weights are near float64's largest number 1.8e308;
  * the exact tie decision's 10-second and 20,000-term limits hold inside the arithmetic, so a
    point that would expand past them is undecided quickly, saying which limit it reached;
  * a second softmax layer whose scores are exactly rational is decided;
  * two certified paths that disagree on a point are an internal error (exit 4, one line).
"""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.accuracy import decide_all
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Layer, Model
from depthcert.checkers.tasks.dataset_file import DatasetTask
from independent_oracle import Oracle

E307 = 10**307
FLOAT_MAX = int(np.finfo(np.float64).max)  # 2^1024 - 2^971, an integer
NEAR_MAX = FLOAT_MAX - 8 * 2**971
METHODS = ("auto", "tables", "intervals", "balls")


def _zeros(d):
    return np.array([[Fraction(0)] * d for _ in range(d)], dtype=object)


def big_model() -> Model:
    """One softmax head with zero scores (weights 1/2 on "a a"), W_V keeping the position rows.
    At "a a" the float64 table forward adds D_x = 1.2e308, then 1.3e308 / 2 (overflow: inf), then
    -0.5e308 / 2: logit_x is exactly 1.6e308, logit_y exactly 1.7e308, so the margin of label x is
    -1e307 and of label y +1e307 -- while the overflowed float margin says +inf and -inf."""
    lay = Layout.of(("token", 2), ("position", 2))
    WV = _zeros(4)
    WV[2, 2] = WV[3, 3] = Fraction(1)
    WO = np.array([[17 * E307, 0, 13 * E307, -5 * E307], [17 * E307, E307 // 10, 0, 0]], dtype=object)
    return Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(_zeros(4), WV, attention="softmax"),)),), WO)


def max_model() -> Model:
    """logit_x = float64's largest number less 8 of its last-place units at every point,
    logit_y = 0: every margin is that number, its float interval <m, r> finite, while the
    enclosure's upper end m + r, rounded outward, is inf."""
    lay = Layout.of(("token", 2), ("position", 2))
    WO = np.array([[NEAR_MAX, NEAR_MAX, 0, 0], [0, 0, 0, 0]], dtype=object)
    return Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(_zeros(4), _zeros(4), attention="softmax"),)),), WO)


# the three cases on big_model: (sequences, labels, truly wrong points)
CASES = {
    "verified_before": ([["a", "a"], ["b", "b"]], ["x", "y"], [0]),  # float: VERIFIED; true margin -1e307
    "refuted_before": ([["a", "a"], ["b", "b"]], ["y", "y"], []),  # float: REFUTED; true margin +1e307
    "exit4_before": ([["a", "a"]], ["x"], [0]),  # float: Fraction(inf), exit 4
}


def _fraction(x) -> Fraction:
    """An mpmath number (or a Fraction) as the exact Fraction it stands for."""
    if isinstance(x, Fraction):
        return x
    sign, man, exp, _ = x._mpf_  # (sign bit, mantissa, exponent, bit count): finite numbers only
    q = Fraction(int(man) * 2**int(exp)) if exp >= 0 else Fraction(int(man), 2**-int(exp))
    return -q if sign else q


def _oracle_margins(model, seqs, labels, dps=120):
    """The oracle's margins (mpmath at `dps` digits, as Fractions): within 10^(-dps+5) relative."""
    o = Oracle(model, dps=dps)
    return [_fraction(o.margin(tuple(s), y)[0]) for s, y in zip(seqs, labels)]


def test_the_oracle_sees_the_true_margins():
    m = _oracle_margins(big_model(), [["a", "a"], ["a", "a"]], ["x", "y"])
    assert abs(m[0] + E307) < 10**200 and abs(m[1] - E307) < 10**200


def test_tables_leave_overflowed_points_undecided():
    """The table forward overflows at "a a": status -1 (arb decides), never 1 or 0; every point
    the tables do decide agrees with the oracle and lies within tau of its float margin."""
    from depthcert.checkers.attention_tables import OneLayerTables

    model = big_model()
    tab = OneLayerTables(model, 2)
    ids = np.array([[0, 0], [0, 0], [1, 1], [0, 1], [1, 0]])
    labels = np.array([0, 1, 1, 1, 0])
    status, mhat = tab.decide(ids, labels)
    assert list(status[:2]) == [-1, -1]
    seqs = [["ab"[t] for t in row] for row in ids]
    true = _oracle_margins(model, seqs, ["xy"[y] for y in labels])
    for s, mh, t in zip(status, mhat, true):
        if s == 1:
            assert t > 0 and abs(float(t) - mh) <= tab.tau
        elif s == 0:
            assert t < 0 and abs(float(t) - mh) <= tab.tau


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", METHODS)
def test_every_method_gives_the_true_verdict_at_the_float_limit(case, method):
    seqs, labels, wrong = CASES[case]
    model = big_model()
    v = decide_all(model, DatasetTask(seqs, labels), method=method)
    assert list(v.wrong) == wrong and len(v.undecided) == 0 and v.correct == len(seqs) - len(wrong)
    true = _oracle_margins(model, seqs, labels)
    assert [i for i, t in enumerate(true) if t <= 0] == wrong
    good = [t for t in true if t > 0]
    if good:
        lo, hi = v.margin
        assert lo <= min(good) <= hi


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_intervals_and_balls_give_the_true_verdict_at_the_float_limit(case):
    """verify (verify-construction --weights): the float64 intervals, then balls; the first
    truly wrong point refutes, and the margin enclosure holds the oracle's margins."""
    from depthcert.checkers.exhaustive import verify

    seqs, labels, wrong = CASES[case]
    model = big_model()
    v = verify(model, DatasetTask(seqs, labels), progress=False)
    true = _oracle_margins(model, seqs, labels)
    assert v.verdict == ("refuted" if wrong else "verified"), v
    if wrong:
        assert v.counterexample.index == wrong[0] and not v.counterexample.tie
    lo, hi = v.margin_enclosure
    assert lo <= min(true[: (wrong[0] + 1) if wrong else len(true)]) <= hi


@pytest.mark.parametrize("case, code", [("verified_before", 1), ("refuted_before", 0), ("exit4_before", 1)])
def test_verify_model_cli_reproductions(tmp_path, capsys, case, code):
    """The issue's three runs (verify-model --require-all on a depthcert weights file): before,
    exit 0 with a point of margin -1e307 counted correct, exit 1 on a point of margin +1e307,
    and exit 4; now the true verdicts."""
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.cli.verify_model import verify_model_main

    seqs, labels, wrong = CASES[case]
    w, d = tmp_path / "big.json", tmp_path / "data.json"
    w.write_text(json.dumps(model_to_json(big_model())))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": seqs, "labels": labels}))
    assert verify_model_main([str(w), "--dataset", str(d), "--require-all", "--json"]) == code
    out = json.loads(capsys.readouterr().out)
    assert out["first_wrong"] == wrong and out["undecided_points"] == 0


def test_transformerlens_checkpoint_at_the_float_limit(tmp_path, capsys):
    """The same model as a float64 TransformerLens checkpoint (export-transformerlens): its weights
    are big_model's rounded to float64, and verify-model gives the oracle's verdicts on it."""
    pytest.importorskip("safetensors")
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.cli.export_transformerlens import export_transformerlens_main
    from depthcert.cli.verify_model import load_any_model, verify_model_main

    w, ckpt = tmp_path / "big.json", tmp_path / "big.safetensors"
    w.write_text(json.dumps(model_to_json(big_model())))
    assert export_transformerlens_main([str(w), str(ckpt), "--dtype", "float64"]) == 0
    for case, (seqs, labels, _) in sorted(CASES.items()):
        d = tmp_path / f"{case}.json"
        d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": seqs, "labels": labels}))
        task = DatasetTask(seqs, labels)
        true = _oracle_margins(load_any_model(str(ckpt), None, task), seqs, labels)
        wrong = [i for i, t in enumerate(true) if t <= 0]
        capsys.readouterr()
        assert verify_model_main([str(ckpt), "--dataset", str(d), "--require-all", "--json"]) == (1 if wrong else 0)
        out = json.loads(capsys.readouterr().out)
        assert out["first_wrong"] == wrong and out["undecided_points"] == 0, case


@pytest.mark.parametrize("method", METHODS)
def test_margin_enclosure_ends_beyond_float64_are_not_reported(method):
    """Every margin is float64's largest number; the intervals' upper end m + r rounds to inf
    (it was reported as Fraction(inf): exit 4).  Such a point goes on to the balls."""
    model = max_model()
    v = decide_all(model, DatasetTask([["a", "b"], ["b", "b"]], ["x", "x"]), method=method)
    assert v.verdict == "verified"
    lo, hi = v.margin
    assert lo <= NEAR_MAX <= hi and hi - lo < Fraction(NEAR_MAX, 10**10)


def test_intervals_leave_unbounded_enclosures_to_the_balls():
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.softmax_intervals import IntervalForward

    model = max_model()
    dec = SoftmaxDecider(model)
    H, den = Evaluator(dec.prefix_model()).logits_all(np.array([[0, 1]]))
    status, lo, hi, _ = IntervalForward(model, dec.first).decide(H, den, np.array([[-1, 0]]))
    assert status[0] == 0  # m and r finite, but m + r rounded up is inf


@pytest.mark.parametrize("method", METHODS)
def test_single_class_models_have_no_margin(method):
    """One class: every point correct and no margin (the intervals reported NaN ends: exit 4)."""
    lay = Layout.of(("token", 2), ("position", 2))
    WO = np.array([[Fraction(1), 0, 0, 0]], dtype=object)
    model = Model(("a", "b"), 2, ("x",), lay, (Layer((Head(_zeros(4), _zeros(4), attention="softmax"),)),), WO)
    v = decide_all(model, DatasetTask([["a", "b"], ["b", "b"]], ["x", "x"]), method=method)
    assert v.verdict == "verified" and v.margin is None


def _random_big_model(rng, n_layers: int, beyond: bool = False) -> Model:
    """Random softmax models whose read-out weights are random integers up to 6e307 (so table
    entries stay finite while sums of them overflow), sparse +-1 values and small random scores
    (the attention weights are not uniform); `beyond`: one read-out weight 10^309 (no float64)."""
    lay = Layout.of(("token", 2), ("position", 3))
    d = lay.dim

    def mat(p, value):
        M = _zeros(d)
        for i in range(d):
            for j in range(d):
                if rng.random() < p:
                    M[i, j] = value()
        return M

    def qk():
        return mat(0.4, lambda: Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 3))))

    def values():
        return mat(0.25, lambda: Fraction(int(rng.choice([-1, 1]))))

    unit = 6 * E307 // 10**6
    WO = np.array([[int(rng.integers(-10**6, 10**6 + 1)) * unit if rng.random() < 0.7 else 0 for _ in range(d)]
                   for _ in range(2)], dtype=object)
    if beyond:
        WO[0, int(rng.integers(0, d))] = 10**309
    layers = tuple(Layer((Head(qk(), values(), attention="softmax"),)) for _ in range(n_layers))
    return Model(("a", "b"), 3, ("x", "y"), lay, layers, WO)


def _check_tables(model, seqs, labels, true):
    """status 1 => true margin > 0, status 0 => < 0, each within tau of the float margin; a point
    with a non-finite float logit is never decided.  Returns (decided, non-finite) counts."""
    from depthcert.checkers.attention_tables import OneLayerTables

    tab = OneLayerTables(model, len(seqs[0]))
    ids = np.array([[model.vocab.index(t) for t in s] for s in seqs])
    rows = np.array([model.classes.index(y) for y in labels])
    status, mhat = tab.decide(ids, rows)
    with np.errstate(all="ignore"):
        finite = np.isfinite(tab.forward(ids)).all(axis=1)
    for i, (st, mh, t) in enumerate(zip(status, mhat, true)):
        if st >= 0:
            assert finite[i] and (t > 0) == (st == 1) and abs(t - Fraction(mh)) <= Fraction(tab.tau), i
    return int((status >= 0).sum()), int((~finite).sum())


def test_the_random_models_reach_the_float_limit():
    """The property below is not vacuous: on its one-layer models the tables decide most points,
    and some float64 forwards overflow (those points go to arb)."""
    decided = overflowed = 0
    seqs = [[a, b, c] for a in "ab" for b in "ab" for c in "ab"]
    for seed in (0, 1, 2, 4, 5, 6):
        model = _random_big_model(np.random.default_rng(1000 + seed), 1)
        true = _oracle_margins(model, seqs + seqs, ["x"] * 8 + ["y"] * 8)
        d, o = _check_tables(model, seqs + seqs, ["x"] * 8 + ["y"] * 8, true)
        decided, overflowed = decided + d, overflowed + o
    assert decided >= 48 and overflowed >= 2, (decided, overflowed)


@pytest.mark.parametrize("seed", range(12))
def test_random_models_at_the_float_limit_agree_with_the_oracle(seed):
    """Every point of every length-3 sequence, both labels, every method: a point called correct
    has an oracle margin > 0 inside the reported enclosure, a point called wrong one <= 0."""
    rng = np.random.default_rng(1000 + seed)
    model = _random_big_model(rng, 1 if seed < 8 else 2, beyond=seed % 4 == 3)
    seqs = [[a, b, c] for a in "ab" for b in "ab" for c in "ab"]
    seqs, labels = seqs + seqs, ["x"] * 8 + ["y"] * 8
    true = _oracle_margins(model, seqs, labels)
    if model.n_layers == 1 and seed % 4 != 3:  # the tables themselves, every point at once
        _check_tables(model, seqs, labels, true)
    for method in ("auto", "intervals"):
        for i in range(len(seqs)):  # one point per run: each point's own enclosure is checked
            v = decide_all(model, DatasetTask([seqs[i]], [labels[i]]), method=method)
            if len(v.wrong):
                assert true[i] <= 0, (seed, method, i)
            elif len(v.undecided) == 0:
                assert true[i] > 0, (seed, method, i)
                lo, hi = v.margin
                assert lo <= true[i] <= hi, (seed, method, i)


def test_balls_beyond_float64():
    """Weights of 10^400 (no float64 at all): the balls decide, as the oracle says."""
    model = big_model()
    WO = np.array([[v * 10**93 for v in row] for row in model.W_O], dtype=object)
    from dataclasses import replace

    model = replace(model, W_O=WO)
    for seqs, labels, wrong in CASES.values():
        true = _oracle_margins(model, seqs, labels)
        assert [i for i, t in enumerate(true) if t <= 0] == wrong
        for method in METHODS:
            v = decide_all(model, DatasetTask(seqs, labels), method=method)
            assert list(v.wrong) == wrong and len(v.undecided) == 0
            if len(wrong) < len(seqs):
                assert v.margin[0] <= min(t for t in true if t > 0) <= v.margin[1]


def test_weight_balls_at_the_float_limit():
    """Weight balls (arb) on the big model: every difference enclosure holds the oracle margin;
    an infinite ball end is NotCertified, never a number."""
    import flint

    from depthcert.checkers.weight_balls import NotCertified, WeightBallForward, _lower, _upper

    model = big_model()
    wb = WeightBallForward(model, Fraction(0))
    for seq, y in ((["a", "a"], 0), (["a", "a"], 1), (["b", "b"], 1)):
        ((_, _, diffs),) = wb.differences([0 if t == "a" else 1 for t in seq], [(1, y)])
        (_, lo, hi), = diffs
        t = _oracle_margins(model, [seq], ["xy"[y]])[0]
        assert lo <= t <= hi and hi - lo < 10**290
    for bad in (flint.arb("inf"), flint.arb("nan"), flint.arb(0, "inf")):
        with pytest.raises(NotCertified):
            _lower(bad)
        with pytest.raises(NotCertified):
            _upper(bad)


def test_relu_ball_formats_flag_overflow_at_the_format_limit():
    """A relu model whose logits pass float32's largest number is not certified in float32
    (overflow flagged), and its exact (weight radius 0) margins agree with Fractions."""
    from depthcert.checkers.weight_balls import FORMATS, BallForward

    lay = Layout.of(("token", 2), ("position", 2))
    v = BlockMatrix(lay, lay).entry("position", 0, "token", 0, 1).build()
    qk = BlockMatrix(lay, lay).entry("token", 0, "token", 0, 1).build()
    big = 3 * 10**38  # above float32's 3.4e38 once doubled
    WO = np.array([[big, 0, big, 0], [0, big, 0, 0]], dtype=object)
    model = Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(qk, v),)),), WO)
    low, over = BallForward(model, fmt=FORMATS["float32"]).margin_lower([0, 0], 0)
    assert over
    low, over = BallForward(model).margin_lower([0, 0], 0)
    o = Oracle(model).margin(("a", "a"), "x")[0]
    assert not over and low == o


def test_checked_integer_pass_treats_nan_as_too_large():
    from depthcert.checkers.evaluate import _Exceeded, _limit

    with pytest.raises(_Exceeded):
        _limit(np.array([1.0, np.nan]))
    with pytest.raises(_Exceeded):
        _limit(np.array([np.inf]))
    _limit(np.array([2.0 ** 52]))


# ---- the exact tie decision's limits, enforced inside the arithmetic


def relu_after_softmax(n: int = 4, extra: int = 2, seed: int = 0) -> Model:
    """Layer 1 softmax, layer 2 a relu head reading layer 1's output; classes p and q read rows
    x0 and x1, which every head writes alike, so the logit difference is exactly 0 through exp: the balls never separate and
    the exact tie decision must expand products of sums of exponentials (about 27 s for one
    point without limits)."""
    rng = np.random.default_rng(seed)
    lay = Layout.of(("token", 2), ("position", n), ("x", extra))
    d = lay.dim

    def mat():
        M = _zeros(d)
        for i in range(d):
            for j in range(d):
                if rng.random() < 0.5:
                    M[i, j] = Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 4)))
        return M

    def values():  # rows x0 and x1 written alike: the stream's x0 and x1 stay equal
        M = mat()
        M[lay.index("x", 1), :] = M[lay.index("x", 0), :]
        return M

    WO = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "x", 0, 1).entry("class", 1, "x", 1, 1).build()
    return Model(("a", "b"), n, ("p", "q"), lay, (Layer((Head(mat(), values(), attention="softmax"),)),
                                                  Layer((Head(mat(), values(), attention="relu"),))), WO)


def _tie_point_decision(monkeypatch, seconds, terms, step):
    """The tie point's decision under the given limits, on an injected clock (tests/fake_clock.py:
    `step` seconds per reading of time.monotonic, which the limits read), and the number of
    polynomials it made."""
    from depthcert.checkers import softmax_ties
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from fake_clock import step_clock

    monkeypatch.setattr(softmax_ties, "SECONDS_LIMIT", seconds)
    monkeypatch.setattr(softmax_ties, "TERM_LIMIT", terms)
    model = relu_after_softmax()
    dec = SoftmaxDecider(model, max_precision=512)
    H, den = Evaluator(dec.prefix_model()).logits_all(np.array([[0, 1, 0, 1]]))
    made = [0]
    real_init = softmax_ties.Poly.__init__

    def init(self, terms):
        made[0] += 1
        real_init(self, terms)

    monkeypatch.setattr(softmax_ties.Poly, "__init__", init)
    step_clock(monkeypatch, step, "monotonic")
    d = dec.decide(H[0], den, [(3, 0)])
    return d, made[0]


def test_tie_decision_time_limit_holds_inside_the_expansion(monkeypatch):
    """The deadline is read inside the products, not only when a sign is asked: on a clock of
    0.01 s per reading a 0.5 s limit passes at the 51st reading, about 50 polynomials into an
    expansion that makes about 800 without a limit, and the verdict names the limit."""
    d, made = _tie_point_decision(monkeypatch, 0.5, 10**9, 0.01)
    assert d.status == "undecided"
    assert d.limit == "precision cap (512 bits); exact tie decision stopped at its time limit (0.5 s per point)"
    assert made < 100, made
    d, made = _tie_point_decision(monkeypatch, 10**6, 10**9, 0.01)  # the same point, no limit reached
    assert made > 700 and d.status != "undecided", (made, d)


def test_tie_decision_term_limit_holds_while_terms_are_generated(monkeypatch):
    """A 50-term limit (the point's polynomials reach 175 terms) stops the expansion as the 51st
    collected term appears (the product is never built first), and says so."""
    from depthcert.checkers import softmax_ties

    biggest = [0]
    real_init = softmax_ties.Poly.__init__

    def init(self, terms):
        biggest[0] = max(biggest[0], len(terms))
        real_init(self, terms)

    monkeypatch.setattr(softmax_ties.Poly, "__init__", init)
    d, _ = _tie_point_decision(monkeypatch, 60.0, 50, 0.0)  # a stopped clock: only the term limit can stop it
    assert d.status == "undecided"
    assert d.limit == "precision cap (512 bits); exact tie decision stopped at its term limit (50 exponential terms)"
    assert biggest[0] <= 50


def test_default_limits_are_the_documented_ones():
    from depthcert.checkers import softmax_ties

    assert (softmax_ties.SECONDS_LIMIT, softmax_ties.TERM_LIMIT) == (10.0, 20_000)


# ---- a later softmax layer whose scores are exactly rational is decided


def rational_second_layer() -> Model:
    """Layer 1 (softmax, scores 1 for token a, 0 for b) writes 2 into row s from every key: its
    output there is (2 e^1 + 2 e^0 + ...) / (e^1 + e^0 + ...) = 2 exactly.  Layer 2 (softmax)
    scores key j by s_j + 3 [j = 0]: rational scores 5, 2, 2 at the last query.  Its head
    writes token a's weight into both A and B, which classes x and y read: an exact tie."""
    lay = Layout.of(("token", 2), ("position", 3), ("s", 1), ("A", 1), ("B", 1))
    qk1 = BlockMatrix(lay, lay).entry("token", 0, "position", 2, 1).build()
    v1 = BlockMatrix(lay, lay).entry("s", 0, "token", 0, 2).entry("s", 0, "token", 1, 2).build()
    qk2 = BlockMatrix(lay, lay).entry("s", 0, "position", 2, 1).entry("position", 0, "position", 2, 3).build()
    v2 = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).entry("B", 0, "token", 0, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1).entry("class", 1, "B", 0, 1).build()
    return Model(("a", "b"), 3, ("x", "y"), lay, ((Head(qk1, v1, attention="softmax"),),
                                                 (Head(qk2, v2, attention="softmax"),)), out)


def test_rational_scores_in_a_second_softmax_layer_are_decided():
    """It was undecided with "exponents transcendental"; the scores are rational, so the exact
    decision proves the tie (refuted), as docs/softmax.md says."""
    from depthcert.checkers.exhaustive import verify

    model = rational_second_layer()
    assert abs(_fraction(Oracle(model, dps=80).margin(("a", "b", "b"), "x")[0])) < Fraction(1, 10**60)
    v = verify(model, DatasetTask([["a", "b", "b"]], ["x"]), progress=False, balls={"max_precision": 256})
    assert v.verdict == "refuted", v
    assert v.counterexample.tie and (v.counterexample.expected, v.counterexample.predicted) == ("x", "y")


def test_rational_quotients_are_recognised_exactly():
    from depthcert.checkers.softmax_ties import Poly, Val, _ratio

    one = (Fraction(0),)
    a, b = (Fraction(1),), (Fraction(2),)
    den = Poly({(): Fraction(1), a: Fraction(1), b: Fraction(3)})
    assert Val(Poly({(): Fraction(2), a: Fraction(2), b: Fraction(6)}), den).constant() == 2
    assert Val(Poly({(): Fraction(2), a: Fraction(2), b: Fraction(5)}), den).constant() is None
    assert Val(Poly({(): Fraction(2), a: Fraction(2)}), den).constant() is None
    assert _ratio(Poly({a: Fraction(-1, 2)}), Poly({a: Fraction(1)})) == Fraction(-1, 2)
    assert one  # exponents are tuples of Fractions (trailing zeros dropped): () is exponent 0


# ---- two certified paths that disagree: an internal error


def _cli_files(tmp_path, model, seqs, labels):
    from depthcert.checkers.weights_file import model_to_json

    w, d = tmp_path / "w.json", tmp_path / "d.json"
    w.write_text(json.dumps(model_to_json(model)))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": seqs, "labels": labels}))
    return str(w), str(d)


@pytest.mark.parametrize("lie", ["wrong_for_correct", "correct_for_wrong", "disjoint_margin"])
def test_paths_that_disagree_are_an_internal_error(tmp_path, capsys, monkeypatch, lie):
    """The intervals are made to lie about one point; the balls that run on it too (wrong
    points, and correct points with loose enclosures) disagree: exit 4 with one line naming
    both paths and the point -- not the intervals' answer, not the balls' answer."""
    from depthcert.checkers import softmax_intervals
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction

    model = big_model()
    seqs, labels = [["b", "b"], ["a", "a"]], ["y", "x"]  # point 0 correct, point 1 wrong (true margins)
    real = softmax_intervals.IntervalForward.decide

    def lying(self, Hnum, den, labels_):
        status, lo, hi, pos = real(self, Hnum, den, labels_)
        status, lo, hi = status.copy(), lo.copy(), hi.copy()
        if lie == "wrong_for_correct":
            status[0] = -1
        elif lie == "correct_for_wrong":
            status[1], lo[1], hi[1] = 1, 1.0, 1e300  # loose: the balls re-decide it
        else:
            status[0], lo[0], hi[0] = 1, 1.0, 2.0  # the true margin is 1.2e307
        return status, lo, hi, pos

    monkeypatch.setattr(softmax_intervals.IntervalForward, "decide", lying)
    w, d = _cli_files(tmp_path, model, seqs, labels)
    assert run_main(_verify_construction, ["--weights", w, "--dataset", d]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("internal error: PathsDisagree: certified paths disagree at point ")
    assert "float64 intervals says" in err[0] and "arb balls says" in err[0]


def test_verify_model_names_the_limit_an_undecided_point_reached(tmp_path, capsys, monkeypatch):
    """verify-model prints (and --json lists in undecided_limits) the true reason: the precision
    cap and the exact decision's time limit, not only "balls still overlap"."""
    from depthcert.checkers import softmax_ties
    from depthcert.cli.verify_model import verify_model_main

    from fake_clock import step_clock

    monkeypatch.setattr(softmax_ties, "SECONDS_LIMIT", 0.5)
    # the exact decision's clock advances 1 s per reading: its 0.5 s limit passes at its first check,
    # on any machine (with the real clock an idle machine decided the tie within 0.5 s: exit 1)
    step_clock(monkeypatch, 1.0, "monotonic")
    w, d = _cli_files(tmp_path, relu_after_softmax(), [["a", "b", "a", "b"]], ["p"])
    why = "precision cap (512 bits); exact tie decision stopped at its time limit (0.5 s per point)"
    assert verify_model_main([w, "--dataset", d, "--max-precision", "512", "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["undecided_limits"] == [{"point": 0, "limit": why}]
    assert verify_model_main([w, "--dataset", d, "--max-precision", "512"]) == 3
    assert f"  point 0: a b a b  label p  ({why})" in capsys.readouterr().out.splitlines()
