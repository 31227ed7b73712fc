"""Issue 41 hole 3: the max-margin read-out fit takes no float of an unbounded integer.

The audit's fuzz, seeded and small: random rational relu models (numerators from 2^31 to 2^64,
denominators up to 10^30 + 7, one or two layers), labelled by their own exact predictions, go
through `verify-construction --weights W --dataset D --readout max-margin`.  Every run ends in a
verdict (exit 0 or 1, never 4: the fit used to raise OverflowError in `t * scale / hv.den` once the
stream's integers passed float64's range), and a run whose integers have no float64 value says in
its note that the fit scaled them in exact arithmetic.
"""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.layout import Layout
from depthcert.checkers.model import Head, Layer, Model

SEEDS = range(24)  # 24 models: about 10 s in all
SEQS = [list(s) for s in ("aba", "bba", "aab", "bab", "aaa", "bbb", "abb", "baa")]
DENOMINATORS = (1, 3, 2**61 - 1, 10**18 + 9, 10**30 + 7)


def _q(rng) -> Fraction:
    num = int(rng.integers(2**31, 2**62)) * int(rng.integers(1, 5)) * int(rng.choice([-1, 1]))
    return Fraction(num, int(rng.choice(DENOMINATORS)))


def random_rational_model(seed: int) -> Model:
    """Relu heads and a read-out with sparse random rationals (about a third of the entries)."""
    rng = np.random.default_rng(seed)
    lay = Layout.of(("token", 2), ("position", 3), ("s", 2))
    d = lay.dim

    def mat(p):
        M = np.full((d, d), Fraction(0), dtype=object)
        for i in range(d):
            for j in range(d):
                if rng.random() < p:
                    M[i, j] = _q(rng)
        return M

    layers = tuple(Layer((Head(mat(0.35), mat(0.35), attention="relu"),)) for _ in range(int(rng.integers(1, 3))))
    WO = np.array([[_q(rng) if rng.random() < 0.6 else Fraction(0) for _ in range(d)] for _ in range(2)], dtype=object)
    return Model(("a", "b"), 3, ("x", "y"), lay, layers, WO)


def _files(tmp_path, seed):
    """The model and a dataset labelled by the model's own exact predictions (ties: class x)."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.weights_file import model_to_json

    model = random_rational_model(seed)
    ids = np.array([[model.vocab.index(t) for t in s] for s in SEQS])
    logits, _ = Evaluator(model).logits(ids)
    labels = ["y" if int(row[1]) > int(row[0]) else "x" for row in logits]
    w, dset = tmp_path / f"w{seed}.json", tmp_path / f"d{seed}.json"
    w.write_text(json.dumps(model_to_json(model)))
    dset.write_text(json.dumps({"format": "depthcert.dataset", "version": 1, "sequences": SEQS, "labels": labels}))
    return model, str(w), str(dset)


def _run(argv, capsys):
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_construction import _verify_construction

    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _beyond_float(model) -> bool:
    """Whether some weight's numerator or denominator alone has no float64 value (the hidden
    stream's then surely do not either)."""
    return any(abs(Fraction(v).numerator) > 2**1024 or Fraction(v).denominator > 2**1024
               for layer in model.layers for h in layer.heads for M in (h.W_QK, h.W_V) for v in M.flat)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_rational_models_get_a_verdict_with_the_max_margin_readout(tmp_path, capsys, seed):
    model, w, dset = _files(tmp_path, seed)
    code, out, err = _run(["--weights", w, "--dataset", dset, "--readout", "max-margin", "--json"], capsys)
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc["verdict"] in ("verified", "refuted")
    assert (doc["verdict"] == "verified") == (code == 0)


def test_the_fuzz_reaches_integers_beyond_float64_and_the_note_says_so(tmp_path, capsys):
    """Some seeds' hidden integers pass float64's range (the case that crashed): their runs name
    the exact scaling in the read-out note, and their own read-out (no --readout) is verified, as
    the audit saw."""
    from depthcert.checkers.tasks.dataset_file import load_dataset
    from depthcert.proofs.readout import hidden_vectors

    reached = 0
    for seed in SEEDS:
        model, w, dset = _files(tmp_path, seed)
        hv = hidden_vectors(model, load_dataset(dset), symmetry="off")
        if max(abs(int(v)) for v in hv.X.flat) < 2**1024 and hv.den < 2**1024:
            continue
        reached += 1
        code, out, err = _run(["--weights", w, "--dataset", dset, "--readout", "max-margin", "--json"], capsys)
        assert code in (0, 1), err
        assert "in exact arithmetic" in json.loads(out)["readout_note"]
        assert _run(["--weights", w, "--dataset", dset], capsys)[0] == 0
    assert reached >= 3


def test_fit_max_margin_on_integers_beyond_float64_is_exact():
    """Hidden numerators of 10^400 (and, apart, a denominator of 10^400): the fit separates the
    vectors, its margin an exact Fraction, its note names the exact scaling, nothing raises."""
    from depthcert.proofs.readout import HiddenVectors, fit_max_margin

    big = 10**400
    X = np.array([[big, 1], [-big, 1], [3 * big, 1]], dtype=object)
    fit = fit_max_margin(HiddenVectors(X, 7, np.array([0, 1, 0]), (), 3, "test"), 2)
    assert isinstance(fit.vector_margin, Fraction) and fit.vector_margin > 10**390
    assert "in exact arithmetic" in fit.note
    X2 = np.array([[1, 1], [-1, 1]], dtype=object)
    fit2 = fit_max_margin(HiddenVectors(X2, 10**400, np.array([0, 1]), (), 2, "test"), 2)
    assert 0 < fit2.vector_margin < Fraction(1, 10**390) and "in exact arithmetic" in fit2.note
