"""Softmax decided completely and fast (issue 25) and its hostile inputs (issue 22, part 6).

  * checkers/softmax_intervals.py: np.exp within EXP_REL of arb over the range used; interval
    decisions never contradict arb at 512 bits on random models with huge and tiny scores, and
    every certified margin enclosure contains the arb margin;
  * checkers/softmax_ties.py: ties reached through exp are proven (exact cancellation of two
    heads, three equal logits of a tracr program), a hardmax after softmax with tied scores is
    decided, and a model outside the Lindemann-Weierstrass normal form stays undecided saying so;
  * scales of 10^30 and scores of -10^8 / -10^13 get the right verdict within seconds, and a
    counterexample with exp(-10^13) prints without building a 2^(10^13) integer.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthcert.checkers import softmax_intervals as si
from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import Head, Layer, Model
from depthcert.checkers.softmax_balls import SoftmaxDecider, ball_bounds
from independent_oracle import softmax_cross_check

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _arb(prec=256):
    import flint

    flint.ctx.prec = prec
    return flint


# ---- exp: the one accuracy assumption of the float path, checked against arb


def _exp_points(rng) -> np.ndarray:
    """Arguments over the whole range exp_bounds calls np.exp on ([EXP_LOW, a few]): uniform,
    log-spaced towards 0 from both sides, the ends, and neighbours of integers."""
    xs = [rng.uniform(si.EXP_LOW, 5.0, 4000), -np.logspace(-300, np.log10(-si.EXP_LOW), 2000),
          np.logspace(-300, 0.7, 500), np.array([0.0, -0.0, si.EXP_LOW, 5.0, -1e-310, 1e-310])]
    ints = np.arange(int(si.EXP_LOW), 6, dtype=np.float64)
    xs += [ints, np.nextafter(ints, np.inf), np.nextafter(ints, -np.inf)]
    return np.concatenate(xs)


def test_numpy_exp_is_within_exp_rel_of_arb():
    """EXP_REL (2^-50, 4 ulp) bounds np.exp's relative error on every argument tried; and the
    widened bounds exp_bounds returns enclose arb's exp (the claim the float path rests on)."""
    flint = _arb(200)
    x = _exp_points(np.random.default_rng(25))
    e = np.exp(x)
    lo, hi = si.exp_bounds(x, x)
    worst = 0.0
    for xi, ei, l, h in zip(x, e, lo, hi):
        t = flint.arb(float(xi)).exp()
        assert l <= t and t <= h, (xi, l, t, h)  # arb compares exactly against the floats
        rel = abs((flint.arb(float(ei)) - t) / t)
        worst = max(worst, float(rel.upper().mid()))
    assert worst <= si.EXP_REL, worst
    assert worst < si.EXP_REL / 2  # np.exp is in fact within 2 ulp here: the assumption has slack


def test_exp_below_range_and_overflow():
    with np.errstate(over="ignore"):
            lo, hi = si.exp_bounds(np.array([-1e4, -701.0, 800.0]), np.array([-1e4, -700.5, 800.0]))
    assert list(lo[:2]) == [0.0, 0.0] and list(hi[:2]) == [si.EXP_TINY] * 2
    assert hi[2] == np.inf  # overflow makes the point unsure, never a wrong bound


# ---- intervals against arb on random one- and two-layer models, huge and tiny scores


def _random_model(rng, n_layers, V=3, n=3, C=3, extra=2, big=False):
    lay = Layout.of(("token", V), ("position", n), ("x", extra))
    d = lay.dim
    vals = [Fraction(v) for v in (1, -1, 2, -3)] + [Fraction(1, 3), Fraction(-5, 7)]
    if big:
        vals += [Fraction(10**6), Fraction(-10**6), Fraction(1, 10**6)]

    def mat(r, c, density=0.3):
        M = np.array([[Fraction(0)] * c for _ in range(r)], dtype=object)
        for i in range(r):
            for j in range(c):
                if rng.random() < density:
                    M[i, j] = vals[rng.integers(len(vals))]
        return M

    layers = []
    for _ in range(n_layers):
        kinds = rng.choice(["softmax", "softmax", "relu", "hardmax"], size=rng.integers(1, 3))
        if "softmax" not in kinds:
            kinds[0] = "softmax"
        scales = [Fraction(1), Fraction(64), Fraction(1, 3)] + ([Fraction(10**6)] if big else [])
        heads = tuple(Head(mat(d, d), mat(d, d), attention=k,
                           scale=scales[rng.integers(len(scales))] if k == "softmax" else Fraction(1),
                           scale_sqrt_divisor=Fraction(int(rng.choice([1, 2, 16]))) if k == "softmax" else Fraction(1))
                      for k in kinds)
        layers.append(Layer(heads, causal=bool(rng.random() < 0.3)))
    return Model(tuple("abc"[:V]), n, tuple("pqr"[:C]), lay, tuple(layers), mat(C, d, 0.6), outputs="all")


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), n_layers=st.integers(1, 2), big=st.booleans())
def test_intervals_never_contradict_arb(seed, n_layers, big):
    """Every point of every length-3 sequence: interval `correct` => arb (512 bits) margin > 0
    and inside [lo, hi]; interval `wrong` => arb margin <= 0 (never a certified-correct point)."""
    rng = np.random.default_rng(seed)
    model = _random_model(rng, n_layers, big=big)
    dec = SoftmaxDecider(model, 512, 512, exact_after=512)
    fwd = si.IntervalForward(model, dec.first)
    fwd.CHUNK = 5  # decide() splits the 27 points into chunks and joins the answers
    ids = np.array([[a, b, c] for a in range(3) for b in range(3) for c in range(3)], dtype=np.int64)
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    labels = rng.integers(-1, 3, size=ids.shape)
    labels[:, 2] = rng.integers(0, 3, size=len(ids))
    status, lo, hi, _ = fwd.decide(H, den, labels)
    for i in range(len(ids)):
        lab = [(k, int(y)) for k, y in enumerate(labels[i]) if y >= 0]
        d = dec._attempt(H[i], den, lab, 512) if status[i] else None
        if status[i] == 1:
            assert d.status != "wrong", (seed, i)
            if d.status == "correct":
                assert Fraction(float(lo[i])) <= d.margin[0] and d.margin[1] <= Fraction(float(hi[i])), (seed, i)
        elif status[i] == -1:
            assert d.status != "correct", (seed, i)


def test_interval_bounds_hold_for_huge_and_tiny_scores():
    """Scores of +-10^6 at scale 10^6 (exponents of 10^12), next to scores of 10^-6: the float
    path either decides a point correctly or leaves it to the balls; verify agrees with arb."""
    lay = Layout.of(("token", 2), ("position", 3), ("A", 1))
    for score in (Fraction(10**6), Fraction(-10**6), Fraction(1, 10**6), Fraction(-1, 10**6)):
        qk = BlockMatrix(lay, lay).entry("token", 0, "position", 2, score).build()
        v = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).build()
        out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1) \
            .entry("class", 1, "position", 2, Fraction(1, 2)).build()
        model = Model(("a", "b"), 3, ("x", "y"), lay,
                      (Layer((Head(qk, v, attention="softmax", scale=Fraction(10**6)),)),), out)
        for seq in (["a", "b", "b"], ["a", "a", "b"], ["b", "b", "a"], ["b", "a", "a"]):
            for label in ("x", "y"):
                data = DatasetTask([seq], [label])
                v_ = verify(model, data, progress=False)
                assert v_.verdict != "undecided", (score, seq, v_)
                assert softmax_cross_check(model, data, v_) == [], (score, seq, label)


# ---- issue 22 part 6: huge scales and scores, each decided at the starting precision (no escalation)


def _attack_model(score, scale=1):
    """Query 1 scores key token a with `score`, token b with 0; x reads a's weight, y reads 1/4."""
    lay = Layout.of(("token", 2), ("position", 2), ("A", 1))
    qk = BlockMatrix(lay, lay).entry("token", 0, "position", 1, score).build()
    v = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1) \
        .entry("class", 1, "position", 1, Fraction(1, 4)).build()
    return Model(("a", "b"), 2, ("x", "y"), lay,
                 (Layer((Head(qk, v, attention="softmax", scale=Fraction(scale)),)),), out)


ATTACK_DATA = (["a", "b"], ["b", "b"])


@pytest.mark.parametrize("score, scale, verdict, index", [
    (1, 10**30, "refuted", 1),  # a gets weight 1 - tiny (x > 1/4); "b b" has x = 0 < 1/4
    (-1, 10**30, "refuted", 0),  # a gets weight ~ e^(-10^30): x ~ 0 < 1/4 at point 0
    (-10**8, 1, "refuted", 0),  # the -1e9-style masks of compiled models
    (-10**13, 1, "refuted", 0),
    (10**13, 10**30, "refuted", 1),
])
def test_huge_scores_and_scales_decide_within_seconds(score, scale, verdict, index):
    """Work, not seconds: every point is decided by 64-bit balls, the first precision tried (a
    score or scale that forced the precision up to the cap took minutes)."""
    model = _attack_model(Fraction(score), scale)
    v = verify(model, DatasetTask(list(ATTACK_DATA), ["x", "x"]), progress=False)
    assert v.path.startswith("certified balls (arb, 64 bits:"), v.path
    assert v.verdict == verdict and v.counterexample.index == index and not v.counterexample.tie
    for lo, hi in v.counterexample.logit_bounds:  # small numbers: printable
        assert lo <= hi and lo.denominator.bit_length() <= 8193 and abs(hi) <= 2


def test_huge_scale_is_verified_when_right():
    """At scale 10^30 the 64-bit balls used to overflow (ValueError, exit 1); now verified."""
    model = _attack_model(Fraction(1), 10**30)
    v = verify(model, DatasetTask([["a", "b"]], ["x"]), progress=False)
    assert v.verdict == "verified", v
    lo, hi = v.margin_enclosure
    assert lo <= Fraction(3, 4) <= hi and hi - lo < Fraction(1, 10**12)


def test_cli_prints_a_minus_1e13_counterexample_quickly(tmp_path, capsys):
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction
    import json

    w, d = tmp_path / "w.json", tmp_path / "d.json"
    w.write_text(json.dumps(model_to_json(_attack_model(Fraction(-10**13)))))
    d.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": list(ATTACK_DATA),
                             "labels": ["x", "x"]}))
    for extra in ([], ["--json"], ["--point", "0"]):
        assert run_main(_verify_construction, ["--dataset", str(d), "--weights", str(w)] + extra) == 1
    out = capsys.readouterr().out
    assert "REFUTED" in out and "x in [0, " in out and "64 bits" in out  # decided at the first precision


def test_ball_bounds_round_tiny_ends_outward():
    flint = _arb(64)
    x = flint.arb(-10**13).exp()
    lo, hi = ball_bounds(x)
    assert lo == 0 < hi <= Fraction(1, 2**8192)
    lo, hi = ball_bounds(-x)
    assert -Fraction(1, 2**8192) <= lo < 0 == hi


# ---- exact ties through exp (Lindemann-Weierstrass)


def _two_heads(scale2: Fraction) -> Model:
    """Two softmax heads on "a b b", query 2: both score key a with 1 (key b: 0), with scales
    7/(3 sqrt 2) and scale2 / sqrt 8.  Head 1 writes a's weight into A and b's into B, head 2 the
    other way round; class x reads 3 (A - B) = 3 (w1_a - w2_a) (the heads' a-weights), y reads 0."""
    lay = Layout.of(("token", 2), ("position", 3), ("A", 1), ("B", 1))
    qk = BlockMatrix(lay, lay).entry("token", 0, "position", 2, 1).build()
    v1 = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).entry("B", 0, "token", 1, 1).build()
    v2 = BlockMatrix(lay, lay).entry("B", 0, "token", 0, 1).entry("A", 0, "token", 1, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 3).entry("class", 0, "B", 0, -3).build()
    return Model(("a", "b"), 3, ("x", "y"), lay,
                 (Layer((Head(qk, v1, attention="softmax", scale=Fraction(7, 3), scale_sqrt_divisor=Fraction(2)),
                         Head(qk, v2, attention="softmax", scale=scale2, scale_sqrt_divisor=Fraction(8)))),), out)


def test_two_heads_cancelling_through_exp_are_a_proven_tie():
    """scale2 = 14/3: 14/(3 sqrt 8) = 7/(3 sqrt 2), the same weights, so x - y = 0 exactly through
    exp: the balls never separate it, the collected coefficients (exponents in Q sqrt 2) are all
    0: a proven tie, refuted.  scale2 = 7/3: head 2 is flatter, w1_a > w2_a, verified."""
    from independent_oracle import Oracle

    data = DatasetTask([["a", "b", "b"]], ["x"])
    tied = _two_heads(Fraction(14, 3))
    v = verify(tied, data, progress=False)
    assert v.verdict == "refuted", v
    ce = v.counterexample
    assert (ce.index, ce.expected, ce.predicted, ce.tie) == (0, "x", "y", True)
    assert "exact tie decision (1 point)" in v.path
    assert abs(float(Oracle(tied).margin(("a", "b", "b"), "x")[0])) < 1e-60
    apart = _two_heads(Fraction(7, 3))
    v = verify(apart, data, progress=False)
    assert v.verdict == "verified", v
    lo, hi = v.margin_enclosure
    m = Oracle(apart).margin(("a", "b", "b"), "x")[0]
    assert 0 < lo and float(lo) <= float(m) <= float(hi)


def test_softmax_after_softmax_outside_the_normal_form_stays_undecided():
    """Layer 2's softmax scores read values written through layer 1's exp: its exponents are
    transcendental and Lindemann-Weierstrass says nothing; with an exact tie there the point stays
    undecided, and the verdict names why (not the precision cap)."""
    lay = Layout.of(("token", 2), ("position", 3), ("s", 1), ("A", 1), ("B", 1))
    qk1 = BlockMatrix(lay, lay).entry("token", 0, "position", 2, 1).build()
    v1 = BlockMatrix(lay, lay).entry("s", 0, "token", 0, 1).build()  # s_k = weight of a at query k
    qk2 = BlockMatrix(lay, lay).entry("s", 0, "position", 2, 1).build()  # layer 2: keys scored by s
    v2 = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).entry("B", 0, "token", 0, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1).entry("class", 1, "B", 0, 1).build()
    model = Model(("a", "b"), 3, ("x", "y"), lay, ((Head(qk1, v1, attention="softmax"),),
                                                 (Head(qk2, v2, attention="softmax"),)), out)
    v = verify(model, DatasetTask([["a", "b", "b"]], ["x"]), progress=False, balls={"max_precision": 256})
    assert v.verdict == "undecided", v
    assert v.undecided.limit.startswith("precision cap (256 bits); exact tie decision not applicable: "
                                        "a softmax head after a softmax layer")


# ---- tracr: a program whose three output logits are exactly equal


@pytest.mark.slow
def test_tracr_mean_of_three_tokens_is_a_proven_three_way_tie(tmp_path, monkeypatch):
    """Aggregate(Select(tokens, tokens, TRUE), tokens), categorical, on "1 2 3": every key gets
    the same score, so the output is (1/3, 1/3, 1/3) over the classes 1, 2, 3 through exp; RASP
    says 2 (the mean).  Three equal logits: a proven tie, refuted at that position."""
    pytest.importorskip("jax")
    pytest.importorskip("tracr.compiler.lib")
    from depthcert.cli import verify_tracr as tracr_cli
    from depthcert.interop.tracr_import import compile_program, import_tracr

    (tmp_path / "meanprog.py").write_text(
        "from tracr.rasp import rasp\n"
        "def mean_token(sop):\n"
        "    sel = rasp.Select(sop, sop, rasp.Comparison.TRUE)\n"
        "    return rasp.categorical(rasp.Aggregate(sel, sop))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    program, _ = tracr_cli.resolve_program("meanprog:mean_token", (1, 2, 3), 3)
    model = import_tracr(compile_program(program, (1, 2, 3), 3), name="tracr:mean_token").model
    data = tracr_cli.make_dataset([(1, 2, 3)], [[None, None, None, "2"]], "mean", ("1", "2", "3"))
    v = verify(model, data, progress=False)
    assert v.verdict == "refuted", v
    ce = v.counterexample
    assert ce.tie and ce.position == 3 and ce.expected == "2"
    assert "exact tie decision (1 point)" in v.path


# ---- sharding and the journal apply to softmax runs


def _icqa_softmax(scale):
    from dataclasses import replace

    from depthcert.checkers.tasks import ICQA
    from depthcert.constructions import registry

    task = ICQA(k=3, n_questions=3, n_answers=3)
    base = registry.build(task).model
    layers = list(base.layers)
    layers[1] = Layer(tuple(replace(h, attention="softmax", scale=Fraction(scale)) for h in layers[1]))
    return replace(base, layers=tuple(layers)), task


def _same(v, w):
    return (v.verdict, v.points_checked, v.points_covered, v.counterexample, v.undecided, v.undecided_count,
            v.margin_enclosure) == (w.verdict, w.points_checked, w.points_covered, w.counterexample, w.undecided,
                                    w.undecided_count, w.margin_enclosure)


@pytest.mark.parametrize("wrong", [False, True])
def test_sharded_and_journalled_softmax_runs_give_the_single_process_verdict(tmp_path, wrong):
    """ICQA k=3, 3 questions and answers (108 points), layer 2 softmax at scale 64: verified; with
    class a0's read-out biased through the last position row, refuted at point 1."""
    from depthcert.checkers import shards

    model, task = _icqa_softmax(64)
    if wrong:
        model = model.with_weight(("W_O", 0, len(model.vocab) + task.length - 1), Fraction(1, 2))
    one = verify(model, task, progress=False)
    assert one.verdict == ("refuted" if wrong else "verified"), one
    j = str(tmp_path / "run.journal")
    first = verify(model, task, progress=False, journal=j, chunk_points=17)
    assert _same(first, one), (first, one)
    again = verify(model, task, progress=False, journal=j, chunk_points=17)  # every chunk from the journal
    n_journalled = 1 if wrong else 7  # a refuted run stops after its first (failing) chunk
    assert _same(again, one) and f"{n_journalled} of 7 chunks came from the journal" in again.notes[-1]
    # decided again: the journal's counterexample and every used chunk's enclosure-end points
    import json

    lines = [json.loads(x) for x in open(j).read().splitlines()[1:]]
    named = {p for r in lines[:n_journalled] for p in (r["low_index"], r["high_index"])}
    named |= {lines[0]["bad_index"]} if wrong else set()
    assert again.journal.re_evaluated == len(named) >= n_journalled, (again.journal, named)
    assert all(r["lo"] <= r["low_index"] < r["hi"] and r["lo"] <= r["high_index"] < r["hi"] for r in lines)
    # forked workers (not after JAX was imported by the tracr tests: forking a multithreaded
    # process may deadlock); otherwise the same chunks in this process
    import sys

    runner = shards.InProcessRunner() if "jax" in sys.modules else shards.ProcessRunner(2)
    forked = verify(model, task, progress=False, runner=runner, chunk_points=13)
    assert _same(forked, one)
    with pytest.raises(Exception, match="another options"):
        verify(model, task, progress=False, journal=j, chunk_points=17, balls={"max_precision": 128})


def test_softmax_journal_lines_cannot_lie(tmp_path):
    """A softmax run's journal: an edited line fails its checksum; a line rewritten with its
    checksum recomputed that records a failure the model does not have is decided again and
    refused (BadInput naming the line), never printed as REFUTED."""
    import json

    from depthcert.checkers.errors import BadInput
    from depthcert.checkers.journal import line_checksum

    model, task = _icqa_softmax(64)
    j = tmp_path / "run.journal"
    assert verify(model, task, progress=False, journal=str(j), chunk_points=17).verdict == "verified"
    lines = j.read_text().splitlines()
    first = json.loads(lines[1])
    edited = dict(first, low="-1")
    j.write_text("\n".join([lines[0], json.dumps(edited)] + lines[2:]) + "\n")
    with pytest.raises(BadInput, match="line 2: checksum mismatch"):
        verify(model, task, progress=False, journal=str(j), chunk_points=17)
    forged = dict(first, bad_index=first["hi"] - 1, low="-1")
    forged["sum"] = line_checksum(forged)
    j.write_text("\n".join([lines[0], json.dumps(forged)] + lines[2:]) + "\n")
    with pytest.raises(BadInput, match="line 2: counterexample 16 decided again is not what the journal records"):
        verify(model, task, progress=False, journal=str(j), chunk_points=17)


def _forge(j, number: int, **changes):
    """Line `number` of journal `j` rewritten with `changes` and its checksum recomputed."""
    import json

    from depthcert.checkers.journal import line_checksum

    lines = j.read_text().splitlines()
    obj = dict(json.loads(lines[number - 1]), **changes)
    obj["sum"] = line_checksum(obj)
    lines[number - 1] = json.dumps(obj)
    j.write_text("\n".join(lines) + "\n")
    return obj


@pytest.mark.parametrize("number", [2, 5])
def test_softmax_journal_margin_enclosure_cannot_lie(tmp_path, number):
    """A verified softmax run's chunk line rewritten with its checksum recomputed to a margin
    enclosure no point of the chunk has: [10^-6, 2 10^-6] (the true margins are about 1) is
    refused, because the point the line names for its high end, decided again, has a margin
    above 2 10^-6; ends raised above the named point's enclosure are refused because the point
    named for the low end has a margin below the recorded low.  Never printed as VERIFIED with
    the forged margin."""
    import json

    from depthcert.checkers.errors import BadInput

    model, task = _icqa_softmax(64)
    j = tmp_path / "run.journal"
    fresh = verify(model, task, progress=False, journal=str(j), chunk_points=17)
    assert fresh.verdict == "verified" and fresh.margin_enclosure[0] > Fraction(1, 2), fresh
    honest = j.read_text()
    line = json.loads(honest.splitlines()[number - 1])
    _forge(j, number, low="1/1000000", high="1/500000")
    with pytest.raises(BadInput, match=rf"line {number}: point {line['high_index']} of the chunk's recorded "
                                       r"margin high 2e-06, decided again, has margin in \[.*not what the journal records"):
        verify(model, task, progress=False, journal=str(j), chunk_points=17)
    raised = 2 * Fraction(line["high"])  # above the named points' margins, both ends
    j.write_text(honest)
    _forge(j, number, low=str(raised), high=str(raised))
    with pytest.raises(BadInput, match=rf"line {number}: point {line['low_index']} of the chunk's recorded margin low"):
        verify(model, task, progress=False, journal=str(j), chunk_points=17)
    # the honest journal resumes to the fresh run's verdict and enclosure
    j.write_text(honest)
    again = verify(model, task, progress=False, journal=str(j), chunk_points=17)
    assert _same(again, fresh) and again.journal.from_journal == 7


@pytest.mark.parametrize("changes, needle", [
    (lambda r: {"low_index": r["hi"]}, "is not among the chunk's checked points"),
    (lambda r: {"high_index": -1}, "-1 only when the chunk has no enclosure"),
    (lambda r: {"low_index": str(r["low_index"])}, "must be integers"),
    (lambda r: {"high_index": None}, "must be integers"),
    (lambda r: {"low_index": None, "high_index": None, "extra": 0}, "not a softmax chunk line of journal version 3"),
])
def test_softmax_journal_enclosure_points_are_validated(tmp_path, changes, needle):
    import json

    from depthcert.checkers.errors import BadInput

    model, task = _icqa_softmax(64)
    j = tmp_path / "run.journal"
    verify(model, task, progress=False, journal=str(j), chunk_points=17)
    _forge(j, 3, **changes(json.loads(j.read_text().splitlines()[2])))
    with pytest.raises(BadInput, match=f"line 3: .*{needle}"):
        verify(model, task, progress=False, journal=str(j), chunk_points=17)


def test_forged_enclosure_through_the_cli_is_exit_2(tmp_path, capsys):
    """verify-construction --weights FILE --journal FILE on the softmax model: the forged line
    gives exit 2 and one line, nothing on stdout."""
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.cli import verify_construction as cli
    import json

    model, task = _icqa_softmax(64)
    w = tmp_path / "w.json"
    w.write_text(json.dumps(model_to_json(model)))
    j = tmp_path / "run.journal"
    argv = ["icqa", "--k", "3", "--n-questions", "3", "--n-answers", "3", "--weights", str(w), "--journal", str(j),
            "--chunk-points", "17", "--workers", "1", "--symmetry", "off"]
    assert cli.run_main(cli._verify_construction, argv) == 0
    honest_out = capsys.readouterr().out
    assert "VERIFIED" in honest_out
    assert cli.run_main(cli._verify_construction, argv) == 0  # resumed: the same verdict line
    assert capsys.readouterr().out.splitlines()[0] == honest_out.splitlines()[0]
    _forge(j, 4, low="1/1000000", high="1/500000")
    assert cli.run_main(cli._verify_construction, argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "line 4: point" in out.err, out
    assert "not what the journal records" in out.err


def test_summary_names_the_points_of_both_ends():
    """[least lower end, least upper end] may come from two points; each end names its own."""
    from depthcert.checkers.exhaustive import _BallSummary

    s = _BallSummary()
    s.add_correct(np.array([0.5, 0.25, 0.75]), np.array([0.5, 2.0, 0.625]), False, np.array([10, 11, 12]))
    assert (s.low, s.high, s.low_index, s.high_index) == (Fraction(1, 4), Fraction(1, 2), 11, 10)
    s.add_correct(np.array([0.375]), np.array([0.4375]), False, np.array([13]))
    assert (s.low, s.high, s.low_index, s.high_index) == (Fraction(1, 4), Fraction(7, 16), 11, 13)


# ---- overflow inside a float sum: the enclosure says nothing, the point must go to the balls


def test_relu_and_hardmax_never_settle_an_overflowed_entry():
    """An entry whose float value overflowed (m = -inf with a finite radius: a dot product whose
    partial sums overflowed although its exact value is positive) is not "surely <= 0" for relu,
    nor surely below the maximum for hardmax; the exponent bounds trust np.exp only on
    [EXP_LOW, EXP_HIGH]."""
    with np.errstate(all="ignore"):
        for m in (-np.inf, np.inf, np.nan):
            R = si.relu(si.Interval(np.array([m, -2.0]), np.array([1.0, 1.0])))
            assert not np.isfinite(R.m[0]) and (R.m[1], R.r[1]) == (0.0, 0.0)  # the finite entry: 0
            w, settled = si.hardmax(si.Interval(np.array([[[m, 0.0]]]), np.array([[[1.0, 1e-6]]])), None)
            assert not settled.any(), m
        R = si.relu(si.Interval(np.array([1.0]), np.array([np.inf])))
        assert not np.isfinite(R.r[0])
        w, settled = si.hardmax(si.Interval(np.array([[[-np.inf, 0.0]]]), np.array([[[1.0, 1e-6]]])),
                                np.array([[False, True]]))  # the overflowed key is masked: settled
        assert settled.all()
        lo, hi = si.exp_bounds(np.array([si.EXP_HIGH, 6.0]), np.array([si.EXP_HIGH, 6.0]))
        assert np.isfinite(hi[0]) and (lo[1], hi[1]) == (0.0, np.inf)


def _overflow_model(order, attention, vz, wx):
    """Layer 1 (relu, exact prefix) writes the huge exact floats `order` (three -1.5 2^996 and five
    1.125 2^996) into key 0's block c only.  Layer 2's `attention` head scores key 0 for the last
    query by 2^27 sum(c): exactly 9 2^1020 > 0, but the float sum overflows to -inf in some
    orders.  The value z is key 0's position entry (relu) or one of its negative c entries
    (hardmax), times vz; x reads z with weight wx; y reads 1."""
    lay = Layout.of(("token", 2), ("position", 2), ("c", 8), ("z", 1))
    t0, p0, c0, z0 = lay.offset("token"), lay.offset("position"), lay.offset("c"), lay.offset("z")
    qk1 = BlockMatrix(lay, lay).entry("position", 0, "position", 0, 1).build()  # only query 0 attends
    v1 = BlockMatrix(lay, lay)
    for i, val in enumerate(order):
        v1.entry("c", i, "token", 0, val).entry("c", i, "token", 1, val)
    qk2 = BlockMatrix(lay, lay)
    for i in range(8):
        qk2.entry("c", i, "position", 1, 2**27)
    read = ("position", 0) if attention == "relu" else ("c", list(order).index(min(order)))  # a negative c
    v2 = BlockMatrix(lay, lay).entry("z", 0, *read, vz).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "z", 0, wx).entry("class", 1, "position", 1, 1).build()
    zero = BlockMatrix(lay, lay).build()
    return Model(("a", "b"), 2, ("x", "y"), lay,
                 (Layer((Head(qk1, v1.build(), attention="relu"),)),
                  Layer((Head(zero, zero, attention="softmax"), Head(qk2.build(), v2, attention=attention)))), out)


@pytest.mark.parametrize("attention, vz, wx", [("relu", Fraction(1, 2**1000), 1), ("hardmax", Fraction(1, 2**1000), -32)])
def test_an_overflowing_score_never_verifies_a_wrong_point(attention, vz, wx):
    """Label y is wrong at every order (relu: key 0's weight 9 2^1020 makes x = 4.5 2^20;
    hardmax: key 0 wins and x = 1.5).  The float path used to read the overflowed score -inf as a
    zero relu weight (or as a key out of the argmax) and verify the point; every summation order
    of the 8 terms is tried, so whichever order this machine's BLAS takes, some order overflows."""
    from itertools import permutations

    from independent_oracle import Oracle

    big_neg, big_pos = -3 * 2**995, 9 * 2**993
    orders = sorted(set(permutations([big_neg] * 3 + [big_pos] * 5)))
    data = DatasetTask([["a", "b"]], ["y"])
    assert Oracle(_overflow_model(orders[0], attention, vz, wx)).margin(("a", "b"), "y")[0] < 0
    for order in orders:
        v = verify(_overflow_model(order, attention, vz, wx), data, progress=False)
        assert v.verdict == "refuted", ([1 if x > 0 else -1 for x in order], v.verdict, v.path)


@pytest.mark.parametrize("score, scale, divisor, verdict", [
    (1, 10**400, 1, "verified"), (1, 1, Fraction(1, 10**400), "verified"), (1, 1, 10**400, "verified"),
    (1, 10**300, Fraction(1, 10**300), "verified"), (1, Fraction(1, 10**400), 1, "verified"), (-1, 10**400, 1, "refuted")])
def test_scales_beyond_float64_are_decided_by_the_balls(score, scale, divisor, verdict):
    """A scale or divisor beyond float64's range (c = 10^400, 10^-200, 10^450) has no float
    enclosure: the interval path steps aside (it used to raise OverflowError or ZeroDivisionError)."""
    lay = Layout.of(("token", 2), ("position", 2), ("A", 1))
    qk = BlockMatrix(lay, lay).entry("token", 0, "position", 1, score).build()
    v = BlockMatrix(lay, lay).entry("A", 0, "token", 0, 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1) \
        .entry("class", 1, "position", 1, Fraction(1, 4)).build()
    model = Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(qk, v, attention="softmax", scale=Fraction(scale),
                                                                scale_sqrt_divisor=Fraction(divisor)),)),), out)
    data = DatasetTask([["a", "b"], ["b", "b"]], ["x", "y"])
    v_ = verify(model, data, progress=False)
    assert v_.verdict == verdict, v_
    assert softmax_cross_check(model, data, v_) == []


def test_hardmax_after_softmax_tie_with_an_irrational_margin():
    """Layer 1 (softmax) writes s = the total weight of the a's into every column (the same at
    every query); layer 2 (hardmax) scores every key by s: a three-way tie whose balls never
    separate.  The exact decision makes the argmax all three keys, so t = mean s = s: on "a a b"
    x - y = 2e / (2e + 1) - 59/100 = 0.2546...: verified (the issue's hardmax-after-softmax
    shape, margin about 0.254); on "a b b" s = e / (e + 2) < 0.59: refuted, not a tie."""
    import math

    from independent_oracle import softmax_cross_check

    lay = Layout.of(("token", 2), ("position", 3), ("s", 1), ("t", 1))
    qk1 = BlockMatrix(lay, lay).set("token", "position", [[1, 1, 1], [0, 0, 0]]).build()
    v1 = BlockMatrix(lay, lay).entry("s", 0, "token", 0, 1).build()
    qk2 = BlockMatrix(lay, lay).set("s", "position", [[1, 1, 1]]).build()
    v2 = BlockMatrix(lay, lay).entry("t", 0, "s", 0, 1).build()
    W_O = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "t", 0, 1) \
        .entry("class", 1, "position", 2, Fraction(59, 100)).build()
    model = Model(("a", "b"), 3, ("x", "y"), lay,
                  ((Head(qk1, v1, attention="softmax"),), (Head(qk2, v2, attention="hardmax"),)), W_O)
    e = math.e
    for seq, verdict, margin in ((["a", "a", "b"], "verified", 2 * e / (2 * e + 1) - 0.59),
                                 (["a", "b", "b"], "refuted", e / (e + 2) - 0.59)):
        data = DatasetTask([seq], ["x"])
        v = verify(model, data, progress=False)
        assert v.verdict == verdict and "exact tie decision (1 point)" in v.path, v
        lo, hi = v.margin_enclosure
        assert lo <= Fraction(margin) + Fraction(1, 10**12) and Fraction(margin) - Fraction(1, 10**12) <= hi
        assert hi - lo < Fraction(1, 10**12)
        assert verdict == "verified" or not v.counterexample.tie
        assert softmax_cross_check(model, data, v) == []


def _weight_heads(specs, coefs):
    """Softmax heads on "a b b", query 2: head i scores key a with specs[i][0] (keys b: 0) at scale
    specs[i][1] / sqrt(specs[i][2]) and writes a's weight into A_i; class x reads sum coefs_i A_i."""
    lay = Layout.of(("token", 2), ("position", 3), ("A", len(specs)))
    out = BlockMatrix(Layout.of(("class", 2)), lay)
    heads = []
    for i, ((score, scale, divisor), c) in enumerate(zip(specs, coefs)):
        qk = BlockMatrix(lay, lay).entry("token", 0, "position", 2, score).build()
        v = BlockMatrix(lay, lay).entry("A", i, "token", 0, 1).build()
        heads.append(Head(qk, v, attention="softmax", scale=Fraction(scale), scale_sqrt_divisor=Fraction(divisor)))
        out.entry("class", 0, "A", i, c)
    return Model(("a", "b"), 3, ("x", "y"), lay, (Layer(tuple(heads)),), out.build())


@pytest.mark.parametrize("specs, coefs, verdict, tie", [
    # exponents 2 * 3/sqrt 5, 3 * 2/sqrt 5, 1 * 12/sqrt 20 and 2 * (3/2)/sqrt(5/4): equal only once collected
    ([(2, 3, 5), (3, 2, 5), (1, 12, 20)], [1, 1, -2], "refuted", True),
    ([(2, Fraction(3, 2), Fraction(5, 4)), (1, 12, 20)], [1, -1], "refuted", True),
    ([(1, 2, 1), (1, 4, 4)], [1, -1], "refuted", True),  # 2 and 4/sqrt 4: a rational scale either way
    # near ties: the scale moved by 10^-29 changes the weight by about 2.4e-31, never a tie
    ([(1, 6, 5), (1, 6 + Fraction(1, 10**29), 5)], [1, -1], "refuted", False),
    ([(1, 6, 5), (1, 6 - Fraction(1, 10**29), 5)], [1, -1], "verified", None),
    ([(1, 1, 2), (1, 1, 3)], [1, -1], "verified", None),  # sqrt 2 and sqrt 3: never the same exponent
])
def test_ties_after_collecting_exponents_and_near_ties(specs, coefs, verdict, tie):
    from independent_oracle import softmax_cross_check

    data = DatasetTask([["a", "b", "b"]], ["x"])
    model = _weight_heads(specs, coefs)
    v = verify(model, data, progress=False)
    assert v.verdict == verdict, v
    assert (v.counterexample.tie if v.counterexample else None) == tie
    if tie:
        assert v.margin_enclosure == (0, 0) and "exact tie decision (1 point)" in v.path
    else:
        lo, hi = v.margin_enclosure
        assert (lo > 0) == (verdict == "verified") and (hi < 0) == (verdict == "refuted")
        assert softmax_cross_check(model, data, v) == []
