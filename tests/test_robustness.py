"""Max-margin read-out, robustness searches, float formats and tracr setting searches (small sizes)."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.checkers.weight_balls import FORMATS, BallForward
from depthcert.constructions import registry
from depthcert.proofs import readout as ro
from depthcert.proofs import robustness as rb
from depthcert.proofs import tracr_settings as ts
from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction


def _json(argv, capsys):
    code = run_main(_verify_construction, argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_lp_finds_the_known_optimum_of_two_orthogonal_vectors():
    # w0 = (1, -1), w1 = (-1, 1) gives margin 2 on both, and no box-bounded W_O does better
    X = np.array([[1, 0], [0, 1]], dtype=object)
    hv = ro.HiddenVectors(X, 1, np.array([0, 1]), (), 2, "")
    fit = ro.fit_max_margin(hv, 2)
    assert fit.vector_margin == 2
    assert all(abs(v) <= 1 for v in fit.W_O.flat)


@pytest.mark.parametrize("task_args,variant", [({"l": 3, "alphabet": 4}, "ternary"),
                                               ({"l": 3, "alphabet": 3}, "heads")])
def test_max_margin_readout_verifies_and_beats_lemma3(task_args, variant):
    task = make_task("tm", **task_args)
    fitted, fit, _ = ro.with_max_margin_readout(registry.build(task, variant, lemma3=False).model, task)
    lemma3 = registry.build(task, variant).model
    v_fit, v_l3 = verify(fitted, task, symmetry="auto"), verify(lemma3, task, symmetry="auto")
    assert v_fit.verified and v_l3.verified
    assert ro.normalized_margin(v_fit.min_margin, fitted.W_O) >= ro.normalized_margin(v_l3.min_margin, lemma3.W_O)


def test_cli_reports_both_normalized_margins(capsys):
    code, info = _json(["tm", "--l", "3", "--alphabet", "3", "--variant", "ternary", "--compare-readouts"], capsys)
    assert code == 0 and info["readout"] == "max-margin"
    m = {k: Fraction(v) for k, v in info["readout_margins"].items()}
    assert set(m) == {"max_margin", "lemma3"} and m["max_margin"] >= m["lemma3"] > 0
    # Theorem 1's own read-out (closed form, the one --all-sizes proves) against the max-margin fit
    code, info = _json(["sc", "--length", "3", "--alphabet", "2", "--compare-readouts"], capsys)
    assert code == 0 and info["readout"] == "paper"
    m = {k: Fraction(v) for k, v in info["readout_margins"].items()}
    assert set(m) == {"paper", "max_margin"} and m["max_margin"] >= m["paper"] == 1


@pytest.mark.parametrize("argv", [["icqa", "--k", "2", "--readout", "lemma3"], ["tm", "--readout", "paper"]])
def test_readout_that_does_not_exist_is_bad_input(argv, capsys):
    assert run_main(_verify_construction, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --readout") and err.count("\n") == 1


def test_icqa_fewest_bits_verify_and_one_fewer_fails(capsys):
    code, info = _json(["icqa", "--k", "2", "--robustness"], capsys)
    assert code == 0
    b = info["robustness"]["min_fraction_bits"]["bits"]
    task = make_task("icqa", k=2)
    model = registry.build(task).model
    assert verify(rb.round_to_bits(model, b), task, symmetry="off").verified
    assert not verify(rb.round_to_bits(model, b - 1), task, symmetry="off").verified
    lin = info["robustness"]["linf_radius"]
    assert Fraction(lin["certified_lower"]) < Fraction(lin["broken_upper"])


def test_certified_radius_survives_random_perturbations():
    task = make_task("icqa", k=2)
    model = registry.build(task).model
    eps = Fraction(1, 256)
    rng = np.random.default_rng(0)
    for _ in range(2):
        pert = rb.map_weights(model, lambda w: w + eps * Fraction(int(rng.integers(-4, 5)), 4))
        assert verify(pert, task, symmetry="off").verified


def test_ball_margin_encloses_the_exact_margin():
    task = make_task("icqa", k=2)
    model = registry.build(task).model
    batch = next(task.batches(4))
    for ids, y in zip(batch.ids, batch.labels):
        low, _ = BallForward(model).margin_lower([int(t) for t in ids], int(y))
        assert low <= 3  # the exact margin (3) is inside the zero-radius enclosure
        assert low > 3 - Fraction(1, 2**100)


@pytest.mark.parametrize("name,dtype", [("float16", np.float16), ("float32", np.float32)])
def test_format_rounding_matches_numpy(name, dtype):
    rng = np.random.default_rng(1)
    for x in list(rng.normal(size=200) * 10.0 ** rng.integers(-6, 4, size=200)) + [2.0**-24 * 1.5, 1 / 3]:
        assert FORMATS[name].round(Fraction(float(x))) == Fraction(float(dtype(x)))


def test_find_min_exactness_meets_the_threshold():
    class R:
        def __init__(self, ok):
            self.status = 0 if ok else 1

    out = ts.find_min_exactness(lambda mlp_exactness: R(mlp_exactness >= 37))
    assert out["mlp_exactness"] == 37 and out["fails_at"] == 36
    out = ts.find_max_length(lambda max_seq_len: R(max_seq_len <= 6), cap=9)
    assert out["max_length"] == 6 and out["fails_at"] == 7


def test_find_min_and_find_max_together_is_bad_input(capsys):
    from depthcert.cli.verify_tracr import _main

    code = run_main(_main, ["make_length", "--vocab", "1,2", "--max-seq-len", "3", "--find-min", "mlp-exactness",
                            "--find-max", "length"])
    assert code == 2 and capsys.readouterr().err.count("\n") == 1


def test_robustness_refuses_softmax_models():
    from dataclasses import replace

    task = make_task("icqa", k=2)
    model = registry.build(task).model
    soft = replace(model, layers=tuple(replace(L, heads=tuple(replace(h, attention="softmax") for h in L))
                                       for L in model.layers))
    from depthcert.checkers.errors import BadInput

    with pytest.raises(BadInput):
        rb.robustness_report(soft, task)


def test_exact_min_margin_split_path_matches_python_integers():
    # the hi/lo split path (scores past 2^53) against plain Python integers
    rng = np.random.default_rng(0)
    for _ in range(20):
        N, d, C = (int(v) for v in rng.integers(2, 12, size=3))
        X = np.array(rng.integers(-10**6, 10**6 + 1, size=(N, d)), dtype=object)
        Wq = rng.integers(-2**48, 2**48 + 1, size=(C, d), dtype=np.int64)
        y = rng.integers(0, C, size=N)
        S = [[sum(int(X[i, r]) * int(Wq[c, r]) for r in range(d)) for c in range(C)] for i in range(N)]
        assert ro._exact_min_margin(X, Wq, y) == min(S[i][y[i]] - S[i][c] for i in range(N) for c in range(C) if c != y[i])


def test_lp_over_the_cap_keeps_the_lifting_readout(monkeypatch):
    # with a cap below the first round's pairs no LP is solved: the lifting read-out is fitted,
    # said so in the note, and still verified exactly on every point
    monkeypatch.setattr(ro, "MAX_LP_ROWS", 1)
    task = make_task("tm", l=3, alphabet=4)
    fitted, fit, _ = ro.with_max_margin_readout(registry.build(task, "ternary", lemma3=False).model, task)
    assert "was not solved" in fit.note and fit.vector_margin > 0
    v = verify(fitted, task, symmetry="off")
    assert v.verified and ro.normalized_margin(v.min_margin, fitted.W_O) == fit.vector_margin


@pytest.mark.parametrize("rows", [[[1, 0], [0, 1]], [[1, 1], [0, 1]], [[1, 0], [0, 0]]])
def test_checked_classifier_is_exact_on_every_bound_path(rows):
    # column maxima [1, 1] reach 2^53 (per-row pass needed) / a row reaches 2^53 (big integers) /
    # column maxima stay below (one row of maxima is enough): the logits are exact in every case
    from depthcert.checkers.evaluate import Evaluator, _absmat, _float

    task = make_task("icqa", k=2)
    ev = Evaluator(registry.build(task).model)
    CT = np.array([[2**52], [2**52]], dtype=object)
    ev.use_float, ev._CT, ev._CTf, ev._CTa = False, CT, _float(CT), _float(_absmat(CT))
    h = np.array(rows, dtype=np.float64)
    got = ev._classify(h)
    assert [int(v) for v in got[:, 0]] == [sum(int(a) * 2**52 for a in r) for r in rows]


def test_format_overflow_of_an_intermediate_value_is_not_certified():
    # a second head whose scores pass float32's range and whose W_V is 0 leaves the exact model as
    # it was (the first head's W_V doubled for the 1/m), but in float32 the scores overflow to inf
    # and inf * 0 = NaN reaches the stream: no enclosure of the result shows it, the range check must
    from dataclasses import replace

    task = make_task("icqa", k=2)
    model = registry.build(task).model
    d, L = model.dim, model.layers[1]
    (h,) = L.heads
    big = replace(h, W_QK=np.full((d, d), Fraction(2**125), dtype=object), W_V=np.full((d, d), Fraction(0), dtype=object))
    both = replace(model, layers=(model.layers[0], replace(L, heads=(replace(h, W_V=h.W_V * 2), big))))
    assert verify(both, task, symmetry="off").verified
    ones = np.ones(d, dtype=np.float32)
    with np.errstate(over="ignore"):
        assert np.isinf(ones @ np.full((d, d), np.float32(2.0**125)) @ ones)  # a score in float32
    out = rb.formats(both, task)
    assert not out["float32"]["ok"] and "largest finite" in out["float32"]["note"]
    assert rb.formats(model, task)["float32"]["ok"]


def _float16_margin(model, ids, y):
    """The margin of a forward pass actually computed in numpy float16 (weights rounded to float16,
    every product and sum rounded, sums in index order; H^T (W_QK H), (W_V H) A as the ball pass)."""
    from depthcert.checkers.model import embed_exact

    dt = np.float16

    def r(M):
        return np.array([[float(FORMATS["float16"].round(Fraction(v))) for v in row] for row in np.atleast_2d(M)]).astype(dt)

    def mm(A, B):
        acc = np.zeros((A.shape[0], B.shape[1]), dtype=dt)
        for k in range(A.shape[1]):
            acc = (acc + (A[:, k:k + 1] * B[k:k + 1, :]).astype(dt)).astype(dt)
        return acc

    H = np.array([[float(v) for v in row] for row in embed_exact(model, ids)]).astype(dt)
    with np.errstate(all="ignore"):
        for L in model.layers:
            total = None
            for h in L:
                S = np.maximum(mm(H.T, mm(r(h.W_QK), H)), dt(0))
                U = mm(mm(r(h.W_V), H), S)
                total = U if total is None else (total + U).astype(dt)
            if len(L.heads) > 1:
                total = (total / dt(len(L.heads))).astype(dt)
            H = (H + total).astype(dt)
        logits = mm(r(model.W_O), H[:, -1:])[:, 0].astype(np.float64)
    return logits[y] - max(logits[c] for c in range(len(logits)) if c != y)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_float16_enclosure_holds_for_a_real_float16_run(seed):
    # the ball pass's margin lower bound is at most the margin numpy's float16 computes, for W_O's
    # rows times odd integers in (2^10, 2^11) (exact weights whose logits pass 2^11: rounded, the
    # case an exactness rule must not call exact) and for random weights, thirds (rounded weights)
    from dataclasses import replace

    from depthcert.checkers.exhaustive import token_rows

    task = make_task("icqa", k=2)
    base = registry.build(task).model
    rng = np.random.default_rng(seed)
    tokens = token_rows(base, task)
    f = rng.integers(512, 1024, size=len(base.classes)) * 2 + 1
    odd = replace(base, W_O=np.array([[w * int(f[c]) for w in row] for c, row in enumerate(base.W_O)], dtype=object))
    thirds = rb.map_weights(base, lambda w: w + Fraction(int(rng.integers(-8, 9)), 3))
    batch = next(task.batches(48))
    for model in (odd, thirds):
        bf = BallForward(model, fmt=FORMATS["float16"])
        for ids, y in zip(batch.ids if tokens is None else tokens[batch.ids], batch.labels):
            ids = [int(t) for t in ids]
            low, over = bf.margin_lower(ids, int(y))
            m = _float16_margin(model, ids, int(y))
            assert over or (np.isfinite(m) and Fraction(float(m)) >= low)
    # three heads with W_V / 5: divisions by 3 that are not exact, sums that are not dyadic
    hop = make_task("multihop", hops=3)
    model = registry.build(hop, "relu-and").model
    L = model.layers[1]
    model = replace(model, layers=(model.layers[0], replace(L, heads=tuple(replace(h, W_V=h.W_V / 5) for h in L)),
                                   *model.layers[2:]))
    bf = BallForward(model, fmt=FORMATS["float16"])
    hop_tokens = token_rows(model, hop)
    batch = next(hop.batches(24))
    for ids, y in zip(batch.ids if hop_tokens is None else hop_tokens[batch.ids], batch.labels):
        ids = [int(t) for t in ids]
        low, over = bf.margin_lower(ids, int(y))
        m = _float16_margin(model, ids, int(y))
        assert over or (np.isfinite(m) and Fraction(float(m)) >= low)


@pytest.mark.slow
def test_float16_certified_claims_hold_on_every_point():
    # exact operations are exact: icqa's small integers are computed without error (lower bound
    # = the exact margin 3); tm heads with Lemma 3's read-out mixes exact and rounded operations.
    # The claim is computed at orbit representatives and checked here on every point
    for task, model in ((make_task("icqa", k=2), None), (make_task("tm", l=3, alphabet=4), "heads")):
        m = registry.build(task).model if model is None else registry.build(task, model).model
        f16 = rb.formats(m, task)["float16"]
        assert f16["ok"]
        low = Fraction(f16["worst_margin_lower"])
        for i in range(task.size):
            p = task.point(i)
            ids = [m.vocab.index(t) for t in p.tokens]
            label = p.label if isinstance(p.label, str) else task.classes[p.label]
            assert Fraction(float(_float16_margin(m, ids, list(m.classes).index(label)))) >= low
    icqa = make_task("icqa", k=2)
    assert Fraction(rb.formats(registry.build(icqa).model, icqa)["bfloat16"]["worst_margin_lower"]) == 3
    # 5 and 3 heads: the sums of the heads are multiples of 3, so the divisions are exact too
    hop = make_task("multihop", hops=3)
    m = registry.build(hop, "relu-and").model
    bf = BallForward(m, fmt=FORMATS["float16"])
    batch = next(hop.batches(40))
    for ids, y in zip(batch.ids, batch.labels):
        ids = [int(t) for t in ids]
        low, over = bf.margin_lower(ids, int(y))
        assert not over and low == 1 == _float16_margin(m, ids, int(y))


@pytest.mark.parametrize("name", list(FORMATS))
def test_representable_agrees_with_the_format_rounding(name):
    # the integer test of "a value of the format" against rounding in Fractions, across the range
    from flint import arb, fmpq

    fmt = FORMATS[name]
    bf = BallForward(registry.build(make_task("icqa", k=2)).model, fmt=fmt)
    rng = np.random.default_rng(2)
    p, lo = fmt.significand_bits, fmt.min_exponent - fmt.significand_bits + 1
    qs = [fmt.max_finite, fmt.max_finite + Fraction(2) ** (fmt.max_finite.numerator.bit_length() - p),
          Fraction(2) ** lo, Fraction(2) ** (lo - 1), Fraction(3) * Fraction(2) ** lo, Fraction(2**p + 1)]
    qs += [Fraction(int(rng.integers(1, 2**int(rng.integers(1, 30))))) * Fraction(2) ** int(rng.integers(-160, 140))
           for _ in range(3000)]
    for q in qs:
        try:
            want = fmt.round(q) == q
        except ValueError:
            want = False
        assert bf._representable(arb(fmpq(q.numerator, q.denominator))) == want
        assert bf._representable(arb(fmpq(-q.numerator, q.denominator))) == want


# ---------------------------------------------------------------------------- any model (verify-model --robustness)
EX = "docs/examples/"


def _model_and_task(weights, scale=None):
    from depthcert.checkers.tasks.dataset_file import load_dataset
    from depthcert.cli.verify_model import load_any_model

    task = load_dataset(EX + "prev-token-data.json")
    model = load_any_model(EX + weights, None, task)
    if scale is not None:  # non-dyadic weights: rounding then changes the model
        model = rb.map_weights(model, lambda w: w * scale)
    return model, task


def _wrong_set(model, task):
    from depthcert.checkers.accuracy import decide_all

    v = decide_all(model, task)
    assert len(v.undecided) == 0
    return {int(i) for i in v.wrong}


def _perturbed(model, eps, rng):
    return rb.map_weights(model, lambda w: w + eps * Fraction(int(rng.integers(-8, 9)), 8))


@pytest.mark.parametrize("weights", ["prev-token-softmax-1.json", "prev-token-hardmax.json"])
def test_weight_balls_enclose_every_perturbed_model(weights):
    """The ball pass at radius eps encloses the margins of models whose weights moved by at most
    eps (softmax through arb exp); at radius 0 it encloses the certified decider's margins."""
    from depthcert.checkers.exhaustive import _ball_labels, check_compatible
    from depthcert.checkers.weight_balls import NotCertified, WeightBallForward

    model, task = _model_and_task(weights, Fraction(7, 10))
    eps = Fraction(1, 64)
    wide = WeightBallForward(model, eps)
    rng = np.random.default_rng(3)
    others = [WeightBallForward(_perturbed(model, eps, rng)) for _ in range(3)]
    rows = check_compatible(model, task)
    batch = next(task.batches(81))
    checked = 0
    for i in range(0, 81, 7):
        ids = [int(t) for t in batch.ids[i]]
        labels = _ball_labels(batch.labels[i], np.array([rows[k] for k in range(len(task.classes))]), len(ids))
        try:
            box = wide.differences(ids, labels)
        except NotCertified:  # a hardmax argmax the box cannot settle
            continue
        for other in others:
            for (pos, y, cs), (_, _, cs2) in zip(box, other.differences(ids, labels)):
                for (c, lo, hi), (_, lo2, hi2) in zip(cs, cs2):
                    assert lo <= lo2 <= hi2 <= hi
        checked += 1
    assert checked >= 5


def test_model_fewest_bits_keep_the_correct_set_and_one_fewer_does_not():
    from depthcert.checkers.accuracy import decide_all

    model, task = _model_and_task("prev-token-softmax-1.json", Fraction(7, 10))
    v = decide_all(model, task)
    out = rb.model_min_fraction_bits(model, task, v, {})
    b = out["bits"]
    ref = {int(i) for i in v.wrong}
    assert 0 < len(ref) < 81  # some points wrong: the set, not all-correct, is what is kept
    assert _wrong_set(rb.round_to_bits(model, b), task) == ref
    assert out["fails_at"] == b - 1 and _wrong_set(rb.round_to_bits(model, b - 1), task) != ref


@pytest.mark.parametrize("weights", ["prev-token-softmax-1.json", "prev-token-softmax-20.json"])
def test_model_certified_radius_survives_perturbations_and_the_upper_breaks(weights):
    from depthcert.checkers.accuracy import decide_all

    model, task = _model_and_task(weights, Fraction(7, 10))
    v = decide_all(model, task)
    out = rb.model_linf_radius(model, task, v, {})
    eps, upper = Fraction(out["certified_lower"]), Fraction(out["broken_upper"])
    assert 0 < eps < upper
    ref = {int(i) for i in v.wrong}
    rng = np.random.default_rng(0)
    for _ in range(2):
        assert _wrong_set(_perturbed(model, eps, rng), task) == ref
    # every weight pushed to a corner of the box, all the same way
    assert _wrong_set(rb.map_weights(model, lambda w: w + eps), task) == ref


def test_model_radius_upper_is_only_reported_when_the_recheck_refutes(monkeypatch):
    """The explicit perturbation is re-decided by the certified path; if that path did not find the
    point wrong, no upper bound is printed."""
    from depthcert.checkers import accuracy

    model, task = _model_and_task("prev-token-softmax-20.json")
    v = accuracy.decide_all(model, task)

    class Never:
        def __init__(self, *a, **k):
            pass

        def chunk(self, lo, hi, batch_size):
            return accuracy.ChunkAccuracy(lo, hi, hi - lo, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                          None, 0, 0, None, None)

    monkeypatch.setattr(accuracy, "PointDecider", Never)
    out = rb.model_linf_radius(model, task, v, {})
    assert out["broken_upper"] is None and out["note"] == "no explicit perturbation found"


def test_verify_model_robustness_cli_softmax_formats_not_available(capsys):
    from depthcert.cli.verify_model import _main

    code = run_main(_main, [EX + "prev-token-softmax-20.json", "--dataset", EX + "prev-token-data.json", "--robustness"])
    out = capsys.readouterr().out
    assert code == 0
    assert "formats      not available: softmax heads" in out and "linf radius  certified >= " in out
    code = run_main(_main, [EX + "prev-token-softmax-20.json", "--dataset", EX + "prev-token-data.json", "--robustness",
                            "--dask"])
    assert code == 2 and capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_verify_model_robustness_of_a_relu_model_gives_formats(tmp_path, capsys):
    """A relu weights file correct on every point goes through the format passes too."""
    from depthcert.checkers.weights_file import save_weights
    from depthcert.cli.verify_model import _main

    task = make_task("icqa", k=2)
    model = registry.build(task).model
    save_weights(model, str(tmp_path / "icqa.json"))
    code = run_main(_main, [str(tmp_path / "icqa.json"), "--task", "icqa", "--k", "2", "--robustness", "--json"])
    r = json.loads(capsys.readouterr().out)["robustness"]
    assert code == 0 and set(r["formats"]) == {"float16", "bfloat16", "float32"}
    b = r["min_fraction_bits"]["bits"]
    assert verify(rb.round_to_bits(model, b), task, symmetry="off").verified
    assert not verify(rb.round_to_bits(model, b - 1), task, symmetry="off").verified


def test_verify_model_robustness_point_limit_and_search_are_bad_input(monkeypatch, capsys):
    from depthcert.cli.verify_model import _main

    monkeypatch.setattr(rb, "MODEL_MAX_POINTS", 80)
    code = run_main(_main, [EX + "prev-token-softmax-20.json", "--dataset", EX + "prev-token-data.json", "--robustness"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "at most 80 points" in err
    pytest.importorskip("tracr")
    from depthcert.cli.verify_tracr import _main as tracr_main

    code = run_main(tracr_main, ["make_length", "--vocab", "1,2", "--max-seq-len", "3", "--find-min", "mlp-exactness",
                                 "--robustness"])
    assert code == 2 and capsys.readouterr().err.count("\n") == 1


def test_radius_exponents_are_exact_below_the_float_range():
    """The radius search's log2 is exact: a margin or eps below 1e-308 (float 0) still has one."""
    from depthcert.proofs.robustness import _ceil_log2

    assert [_ceil_log2(Fraction(n, d)) for n, d in ((1, 20), (1, 16), (3, 1), (4, 1), (5, 1), (1, 1))] == \
        [-4, -4, 2, 2, 3, 0]
    assert _ceil_log2(Fraction(1, 2**2000)) == -2000 and _ceil_log2(Fraction(3, 2**2000)) == -1998
