"""verify-tracr: tracr-compiled programs imported exactly and checked on every input.

Needs the optional extra `tracr` (tracr-pypi, jax, dm-haiku): without it every test but the
missing-extra message is skipped with the reason.  Programs are compiled once per module
(tracr's compile takes a few seconds each); the whole file runs in about a minute here.
"""
from __future__ import annotations

import json
import sys
from fractions import Fraction

import numpy as np
import pytest


SKIP_REASON = 'the optional extra "tracr" is not installed (pip install -e ".[tracr]")'


@pytest.fixture(scope="module")
def tr():
    """tracr's library and depthcert's importer, or skip the test."""
    pytest.importorskip("jax", reason=SKIP_REASON)
    pytest.importorskip("haiku", reason=SKIP_REASON)
    lib = pytest.importorskip("tracr.compiler.lib", reason=SKIP_REASON)
    from tracr.rasp import rasp

    from depthcert.cli import verify_tracr as tracr_cli
    from depthcert.interop import tracr_import

    class NS:
        pass

    ns = NS()
    ns.lib, ns.rasp, ns.cli, ns.imp = lib, rasp, tracr_cli, tracr_import
    return ns


_CACHE: dict = {}


def compiled(tr, name, vocab, L, **kw):
    """(program, compiled) for a library program, compiled once per module run."""
    key = (name, vocab, L, tuple(sorted(kw.items())))
    if key not in _CACHE:
        prog, _ = tr.cli.resolve_program(name, vocab, L)
        _CACHE[key] = (prog, tr.imp.compile_program(prog, vocab, L, **kw))
    return _CACHE[key]


def check(tr, name, vocab, L, **kw):
    prog, c = compiled(tr, name, vocab, L)
    return tr.cli.check_program(name, vocab, L, program=prog, compiled=c, **kw)


def ids_of(model, inputs):
    row = {t: i for i, t in enumerate(model.vocab)}
    return np.array([[row["BOS"]] + [row[str(t)] for t in x] for x in inputs], dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# the extra

def test_missing_extra_is_one_line_exit_2(monkeypatch, capsys):
    from depthcert.cli import verify_tracr as tracr_cli

    monkeypatch.setitem(sys.modules, "tracr", None)  # import tracr raises ImportError
    code = tracr_cli.verify_tracr_main(["make_reverse", "--vocab", "1,2,3", "--max-seq-len", "4"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and 'pip install -e ".[tracr]"' in err


# ---------------------------------------------------------------------------------------------
# the done criteria

@pytest.mark.slow
def test_reverse_decided_on_all_120_inputs(tr, capsys, monkeypatch):
    """The command line: every one of the 120 inputs evaluated (symmetry off), verified, with
    a certified margin enclosure within 1e-6 of 1 (the true margin is just below 1).  The
    command's compile of make_reverse is the module's (tracr's compile is deterministic and takes
    seconds); every other step of the command runs."""
    prog, c = compiled(tr, "make_reverse", (1, 2, 3), 4)
    real_resolve, real_compile = tr.cli.resolve_program, tr.imp.compile_program
    calls = []

    def resolve(spec, vocab, max_seq_len):  # the command resolves its program; the module's stands in
        program, call = real_resolve(spec, vocab, max_seq_len)
        return (prog if (spec, tuple(vocab), max_seq_len) == ("make_reverse", (1, 2, 3), 4) else program), call

    def compile_once(program, vocab, max_seq_len, causal=False, mlp_exactness=100):
        calls.append(program is prog)
        if program is prog and (tuple(vocab), max_seq_len, causal, mlp_exactness) == ((1, 2, 3), 4, False, 100):
            return c
        return real_compile(program, vocab, max_seq_len, causal=causal, mlp_exactness=mlp_exactness)

    monkeypatch.setattr(tr.cli, "resolve_program", resolve)
    monkeypatch.setattr(tr.imp, "compile_program", compile_once)
    code = tr.cli.verify_tracr_main(["make_reverse", "--vocab", "1,2,3", "--max-seq-len", "4", "--json",
                                     "--symmetry", "off"])
    info = json.loads(capsys.readouterr().out)
    assert code == 0 and info["verdict"] == "verified"
    assert info["inputs"] == 120 and info["points_evaluated"] == 120 and info["points_covered"] == 120
    assert info["positions_labelled"] == 3 * 1 + 9 * 2 + 27 * 3 + 81 * 4
    lo, hi = (Fraction(x) for x in info["min_margin_exact_ends"])
    assert Fraction(999999, 10**6) < lo <= hi < Fraction(1000001, 10**6)  # float64 intervals: within 1e-6
    assert info["float_forward"]["disagree_positions"] == 0
    assert calls == [True]  # the command compiled its program once (the module's compile of it)


def test_reverse_symmetry_reduction_is_proven(tr):
    res = check(tr, "make_reverse", (1, 2, 3), 4)
    info = res.info
    assert info["verdict"] == "verified"
    assert info["points_covered"] == 120 and info["points_evaluated"] < 120
    assert info["symmetry"].startswith("equivariance proven")


@pytest.mark.slow
def test_sort_unique_refuted_outside_its_precondition_and_verified_inside(tr):
    res = check(tr, "make_sort_unique", (1, 2, 3), 4)
    info = res.info
    assert res.status == 1 and info["verdict"] == "refuted"
    ce = info["counterexample"]
    assert ce["input"] == ["1", "1"] and ce["position"] == 2
    assert ce["expected"] == "None" and ce["predicted"] == "1"
    assert ce["kind"] == "no value in the output space"
    # tracr's own float forward reproduces it: it outputs 1 there too
    _, c = compiled(tr, "make_sort_unique", (1, 2, 3), 4)
    (decoded, _), = tr.imp.float_forward(c, [(1, 1)])
    assert decoded[2] == 1
    assert info["float_forward"]["reproduces_counterexample"] is True
    assert info["float_forward"]["disagree_inputs"] == 105  # the measurement in the issue
    # with the precondition (distinct tokens) every input is decided
    res = check(tr, "make_sort_unique", (1, 2, 3), 4, distinct=True)
    assert res.status == 0 and res.info["verdict"] == "verified" and res.info["inputs"] == 15


# ---------------------------------------------------------------------------------------------
# the importer's identities

SAMPLES = [(1,), (2, 1), (1, 2, 3), (3, 3, 1, 2), (2, 2, 2, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("embedding", ["permutation", "mlp-table"])
def test_folded_model_matches_tracr_float_forward(tr, embedding):
    """Certified logits of the imported model (every position) equal tracr's float32 outputs
    within float32 tolerance; the mlp-table embedding (a first MLP layer writing the tables)
    gives the same function as the permutation."""
    _, c = compiled(tr, "make_reverse", (1, 2, 3), 4)
    imp = tr.imp.import_tracr(c, embedding=embedding)
    assert imp.embedding == embedding
    m = imp.model
    reader = tr.imp.Readout(m)
    for n in sorted({len(x) for x in SAMPLES}):
        xs = [x for x in SAMPLES if len(x) == n]
        outs = reader.outputs(ids_of(m, xs), range(n + 1))
        for x, (dec, scores), got in zip(xs, tr.imp.float_forward(c, xs), outs):
            for p in range(n + 1):
                for cl in range(len(m.classes)):
                    lo, hi = got[p][cl]
                    assert hi - lo < Fraction(1, 10**20)
                    assert abs(float(lo) - scores[p][cl]) < 1e-5, (x, p, cl)


@pytest.mark.slow
def test_multi_head_layer_and_numerical_output(tr):
    """make_pair_balance: a layer with two heads (tracr sums, depthcert averages: W_V x 2) and a
    numerical output; the enclosures match the float forward and the exact program value."""
    vocab = ("(", ")", "a")
    _, c = compiled(tr, "make_pair_balance", vocab, 3)
    imp = tr.imp.import_tracr(c)
    m = imp.model
    assert 2 in m.heads and imp.numerical and m.classes == ("value",)
    ks = c.assembled.model_config.key_size
    assert all(h.scale == 1 and h.scale_sqrt_divisor == ks for L in m.layers for h in L)
    xs = [("(", ")", "a"), (")", "(", "("), ("(", "(", ")")]
    outs = tr.imp.Readout(m).outputs(ids_of(m, xs), range(4))
    for x, (dec, scores), got in zip(xs, tr.imp.float_forward(c, xs), outs):
        for p in range(1, 4):
            lo, hi = got[p][0]
            assert abs(float(lo) - scores[p][0]) < 1e-6
    res = check(tr, "make_pair_balance", vocab, 3)
    # the default tolerance (1/1000) decides: tracr's numerical aggregate is off by its softmax leak, no more
    assert res.info["verdict"] == "verified" and res.status == 0 and res.info["tolerance"] == "1/1000"
    assert res.info["positions_outside"] == 0
    lo, hi = (float(v) for v in res.info["max_error_enclosure"])
    assert 0 < lo <= hi < 1e-6
    res = check(tr, "make_pair_balance", vocab, 3, tolerance=Fraction(1, 10**6))
    assert res.info["verdict"] == "verified" and res.status == 0
    res = check(tr, "make_pair_balance", vocab, 3, tolerance=Fraction(1, 10**12))
    assert res.info["verdict"] == "refuted" and res.status == 1  # every error is certified above 1e-12


@pytest.mark.slow
def test_numerical_error_of_one_half_is_refuted_by_default(tr, monkeypatch, capsys):
    """A numerical output off by 1/2 (the program's values shifted by 1/2) is refuted without any
    --tolerance: exit 1, never exit 0."""
    real = tr.cli.ground_truth

    def shifted(program, inputs, causal, exact=False):
        return [v if isinstance(v, str) else [None if y is None else y + Fraction(1, 2) for y in v]
                for v in real(program, inputs, causal, exact=exact)]

    monkeypatch.setattr(tr.cli, "ground_truth", shifted)
    code = tr.cli.verify_tracr_main(["make_frac_prevs", "--vocab", "1,2", "--max-seq-len", "3", "--json",
                                     "--no-float-check"])
    info = json.loads(capsys.readouterr().out)
    assert code == 1 and info["verdict"] == "refuted" and info["tolerance"] == "1/1000"
    assert Fraction(info["max_error_enclosure"][0]) > Fraction(49, 100)


def test_tracr_refusal_prints_tracr_reason(tr, capsys):
    """tracr's static validation refuses a program: its reason (which expression, why) is printed
    after "Unsupported RASP expressions:", on the one error line."""
    from tracr.rasp import rasp

    bad = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
                                        rasp.tokens, default=0)).named("bad_mean")
    from depthcert.checkers.errors import BadInput

    with pytest.raises(BadInput) as exc:
        tr.imp.compile_program(bad, (1, 2), 3)
    text = str(exc.value)
    assert "Unsupported RASP expressions:" in text and "\n" not in text
    assert "bad_mean: An aggregate's output encoding must match its input encoding" in text, text


def test_import_facts(tr):
    """(a) "one" is exactly 1 at every position of every layer of the float forward, and the
    token table writes it; (d) the token and position tables are one-hot (permutation mode,
    BOS's position row unused); (e) no layer norm; every parameter exact (dyadic)."""
    _, c = compiled(tr, "make_reverse", (1, 2, 3), 4)
    am = c.assembled
    assert am.model_config.layer_norm is False
    labels = list(am.residual_labels)
    one = labels.index("one")
    out = am.apply(["BOS", 3, 1, 2])
    for resid in [out.input_embeddings] + list(out.residuals):
        assert np.all(np.asarray(resid)[0, :, one] == 1.0)
    imp = tr.imp.import_tracr(c)
    m = imp.model
    assert imp.embedding == "permutation" and m.constant_row
    assert imp.row_labels[m.constant_index] == "one"
    V = len(m.vocab)
    for t in m.vocab:
        assert imp.row_labels[m.vocab.index(t)] == f"token {t}"
    assert imp.row_labels[V] == "position 0"  # BOS: tracr embeds no position there
    for L in m.layers:
        for h in L:
            assert not any(h.W_V[m.constant_index]) and not any(h.W_V[:, V])  # neither written nor read
            assert all(v.denominator & (v.denominator - 1) == 0 for v in h.W_QK.ravel())


def test_json_round_trip_reverifies_from_files(tr, tmp_path, capsys):
    from depthcert.checkers.atomic import read_json
    from depthcert.checkers.weights_file import model_from_json, model_to_json
    from depthcert.cli.verify_construction import verify_construction_main

    w, d = tmp_path / "w.json", tmp_path / "d.json"
    res = check(tr, "make_reverse", (1, 2, 3), 4, export=str(w), dataset_out=str(d), float_check=False)
    obj = read_json(str(w), "weights")
    assert obj["version"] == 2
    _, c = compiled(tr, "make_reverse", (1, 2, 3), 4)
    again = model_from_json(obj)
    assert again == tr.imp.import_tracr(c, name="tracr:make_reverse").model
    assert model_to_json(again) == obj
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        verify_construction_main(["--dataset", str(d), "--weights", str(w), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert exit_.value.code == 0 and info["verdict"] == "verified" and info["points_covered"] == 120
    assert info["min_margin"] == res.info["min_margin"] and set(info["min_margin"]) == {"lower", "upper", "decimal"}


# ---------------------------------------------------------------------------------------------
# the cross-check with tracr's float forward (docs/tracr.md)

@pytest.mark.slow
def test_length_refuted_at_10_and_float_forward_agrees(tr):
    """tracr's selector width (make_length) at max_seq_len 10: the length-10 input is counted 9,
    certified; tracr's float forward outputs 9 too.  Raising mlp_exactness repairs it."""
    res = check(tr, "make_length", (1,), 10)
    info = res.info
    assert info["verdict"] == "refuted"
    ce = info["counterexample"]
    assert ce["kind"] == "wrong output" and ce["input"] == ["1"] * 10
    assert (ce["expected"], ce["predicted"]) == ("10", "9")
    assert info["float_forward"]["reproduces_counterexample"] is True
    assert info["float_forward"]["agrees_with_verdict"] is True
    prog, _ = compiled(tr, "make_length", (1,), 10)
    c2 = tr.imp.compile_program(prog, (1,), 10, mlp_exactness=1000)
    # no float forward of the repaired model (its cross-check is the refuted one's above; tracr's
    # float forward jit-compiles per input length, seconds each)
    res = tr.cli.check_program("make_length", (1,), 10, program=prog, compiled=c2, float_check=False)
    assert res.info["verdict"] == "verified"


@pytest.mark.parametrize("name,vocab,L,kw", [
    ("make_hist", (1, 2, 3), 4, {}),
    ("shift_by", (1, 2, 3), 4, {"skip_none": True}),
    ("shift_by", (1, 2, 3), 4, {}),
    ("make_frac_prevs", (1, 2), 5, {}),
])
def test_verdict_agrees_with_float_forward(tr, name, vocab, L, kw):
    info = check(tr, name, vocab, L, **kw).info
    fc = info["float_forward"]
    if info["output"] == "categorical":
        assert fc["agrees_with_verdict"] is True
        if info["verdict"] == "refuted":
            assert fc["reproduces_counterexample"] is True
    else:  # float error and certified error agree to float32 accuracy
        assert abs(float(fc["max_error"]) - float(info["max_error_enclosure"][1])) < 1e-6


# ---------------------------------------------------------------------------------------------
# bad input: one line, exit 2, before anything big

@pytest.mark.parametrize("argv,words", [
    (["make_reverse", "--vocab", "1,2,3", "--max-seq-len", "20"], "--max-inputs"),
    (["make_reverse", "--vocab", "1,,3", "--max-seq-len", "3"], "--vocab"),
    (["make_reverse", "--vocab", "1,1", "--max-seq-len", "3"], "twice"),
    (["make_nothing", "--vocab", "1,2", "--max-seq-len", "3"], "unknown program"),
    (["make_nary_sequencemap", "--vocab", "1,2", "--max-seq-len", "3"], "not a program"),
    (["nosuchmodule:f", "--vocab", "1,2", "--max-seq-len", "3"], "cannot import"),
    (["make_length", "--vocab", "1,2", "--max-seq-len", "3", "--find-min", "mlp-exactness", "--mlp-exactness", "50"],
     "leave out --mlp-exactness"),
])
def test_bad_input_exit_2(tr, capsys, argv, words):
    code = tr.cli.verify_tracr_main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err


def test_module_function_program(tr, tmp_path, monkeypatch, capsys):
    (tmp_path / "myprog.py").write_text(
        "from tracr.rasp import rasp\n"
        "def first_is_one(sop):\n"
        "    return rasp.Map(lambda x: x == 1, sop).named('first_is_one')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = tr.cli.verify_tracr_main(["myprog:first_is_one", "--vocab", "1,2", "--max-seq-len", "3", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert code == 0 and info["verdict"] == "verified" and info["inputs"] == 14
    assert info["model_class"] == "mlp+constant-row+all-positions"  # no attention: exact rationals
    assert Fraction(info["min_margin"]["exact"]) > 0
