"""One exact pass for a fitted read-out (checkers/hidden_table.py): the kernel's decision from the
hidden-vector table is exhaustive.verify's verdict (margin, counterexample, counts), and a model the
table does not speak for is refused."""
from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert import constructions
from depthcert.checkers.exhaustive import plan_points, verify
from depthcert.checkers.hidden_table import TableMismatch, decide, hidden_table
from depthcert.checkers.tasks import make_task
from depthcert.proofs import readout as ro

CASES = [  # (task, params, variant)
    ("tm", dict(l=4, alphabet=4), "heads"),
    ("tm", dict(l=4, alphabet=4), "ternary"),  # equivariant layers: orbit representatives under auto
    ("icqa", dict(k=2), None),
    ("sc", dict(length=3, alphabet=3), None),
]


def _same(a, b) -> None:
    """Two verdicts agree on everything but the time (and the path's wording)."""
    assert (a.verdict, a.min_margin, a.points_checked, a.points_covered, a.points_total, a.notes) == \
           (b.verdict, b.min_margin, b.points_checked, b.points_covered, b.points_total, b.notes)
    assert a.counterexample == b.counterexample


def _layers_plan(model, task, symmetry):
    zero = np.full(model.W_O.shape, Fraction(0), dtype=object)
    return plan_points(replace(model, W_O=zero), task, symmetry)


def _read_outs(model, task, table):
    """Fitted, broken and random read-outs: verified and refuted ones (a tie, a failure further in)."""
    hv = ro.hidden_vectors(model, task, "auto", table=table)
    W = ro.fit_max_margin(hv, len(model.classes), task.size).W_O
    outs = {"fitted": W, "own": model.W_O}
    neg = np.array(W, dtype=object)
    k = int(table.labels[len(table.labels) // 2])  # a class first met in the middle of the plan
    neg[k] = -neg[k]
    outs["one class negated"] = neg
    tie = np.array(W, dtype=object)
    tie[int(table.labels[-1])] = tie[int(table.labels[0])]
    outs["two rows equal"] = tie
    outs["zero"] = np.full(W.shape, Fraction(0), dtype=object)  # every logit ties (symmetric: orbits kept)
    rng = np.random.default_rng(7)
    outs["random"] = np.array([[Fraction(int(v)) for v in r] for r in rng.integers(-2, 3, W.shape)], dtype=object)
    return outs


@pytest.mark.parametrize("name,params,variant", CASES)
@pytest.mark.parametrize("symmetry", ["off", "auto"])
def test_one_pass_verdict_is_the_two_pass_verdict(name, params, variant, symmetry):
    task = make_task(name, **params)
    model = constructions.build(task, variant, False).model
    table = hidden_table(model, task, _layers_plan(model, task, symmetry), batch_size=64, progress=False)
    assert not table.X.flags.writeable and not table.row_of.flags.writeable
    assert int(table.counts.sum()) == table.n_eval and len(table.row_of) == table.n_eval
    refuted = 0
    for what, W_O in _read_outs(model, task, table).items():
        m = replace(model, W_O=W_O)
        plan = plan_points(m, task, symmetry)
        try:
            one = decide(m, table, task, plan)
        except TableMismatch:  # a read-out without the layers' symmetry: another plan, two passes
            assert symmetry == "auto" and plan.indices is None and table.indices is not None, what
            continue
        two = verify(m, task, batch_size=64, plan=plan)
        _same(one, two)
        refuted += one.verdict == "refuted"
    assert refuted >= 1


def test_failure_past_the_first_point_and_the_margin_up_to_it():
    task = make_task("tm", l=4, alphabet=4)
    model = constructions.build(task, "heads", False).model
    plan = plan_points(model, task, "off")
    table = hidden_table(model, task, plan, progress=False)
    W = np.array(ro.fit_max_margin(ro.hidden_vectors(model, task, table=table), len(model.classes)).W_O, dtype=object)
    by_first = [int(table.labels[r]) for r in np.argsort(table.first)[::-1]]  # labels, latest first met first
    late, other = by_first[0], next(k for k in by_first if k != by_first[0])
    W[late] = W[other]  # the two classes tie: their points fail, every point met before them does not
    m = replace(model, W_O=W)
    one, two = decide(m, table, task, plan), verify(m, task, batch_size=100, plan=plan)
    _same(one, two)
    assert one.verdict == "refuted" and one.counterexample.tie
    assert one.points_checked > 1 and one.counterexample.index > 0 and one.min_margin == 0


def test_rows_of_points():
    """The fit reads the rows of the points it needs; a point the table did not evaluate gives None."""
    task = make_task("tm", l=4, alphabet=4)
    model = constructions.build(task, "ternary", False).model
    reps = _layers_plan(model, task, "auto")
    assert reps.indices is not None  # the ternary layers are equivariant: one point per orbit
    table = hidden_table(model, task, reps, progress=False)
    assert np.array_equal(table.point_at, reps.indices)
    assert np.array_equal(table.rows_of_points(reps.indices[::-1]), table.row_of[::-1])
    missing = next(i for i in range(task.size) if i not in set(reps.indices.tolist()))
    assert table.rows_of_points([int(reps.indices[0]), missing]) is None
    full = hidden_table(model, task, plan_points(model, task, "off"), progress=False)
    assert full.rows_of_points([task.size]) is None
    assert np.array_equal(full.rows_of_points(reps.indices), full.row_of[reps.indices])
    hv_reps = ro.hidden_vectors(model, task, "auto", table=table)
    hv_full = ro.hidden_vectors(model, task, "auto", table=full)  # the orbit representatives' rows of all points
    assert np.array_equal(hv_reps.X, hv_full.X) and np.array_equal(hv_reps.labels, hv_full.labels)


def test_big_integer_layers():
    """Layers whose values pass 2^53: the table holds exact big integers (checked or exact path)."""
    task = make_task("tm", l=3, alphabet=3)
    model = constructions.build(task, "heads", False).model
    big = Fraction(2**40) + Fraction(1, 3)
    layers = tuple(replace(L, heads=tuple(replace(h, W_V=h.W_V * big) for h in L.heads)) for L in model.layers)
    model = replace(model, layers=layers)
    plan = plan_points(model, task, "off")
    table = hidden_table(model, task, plan, batch_size=5, progress=False)
    assert table.path != "float64 (proven < 2^53)"
    for W_O in _read_outs(model, task, table).values():
        m = replace(model, W_O=W_O)
        _same(decide(m, table, task, plan), verify(m, task, batch_size=5, plan=plan))


def test_a_model_the_table_does_not_speak_for_is_refused():
    task = make_task("tm", l=3, alphabet=3)
    model = constructions.build(task, "heads", False).model
    plan = plan_points(model, task, "off")
    table = hidden_table(model, task, plan, progress=False)
    decide(model, table, task, plan)  # its own model: decided
    layer_changed = model.with_weight((0, 0, "W_V", 0, 0), model.layers[0].heads[0].W_V[0, 0] + 1)
    with pytest.raises(TableMismatch, match="more than W_O"):
        decide(layer_changed, table, task, plan)
    with pytest.raises(TableMismatch, match="more than W_O"):
        decide(replace(model, classes=tuple(reversed(model.classes))), table, task, plan)
    with pytest.raises(TableMismatch, match="more than W_O"):
        decide(replace(model, vocab=tuple(reversed(model.vocab))), table, task, plan)
    decide(replace(model, name="renamed"), table, task, plan)  # the name is not semantics
    with pytest.raises(TableMismatch, match="not W_O h"):
        decide(replace(model, outputs="all"), table, task, plan)
    with pytest.raises(TableMismatch, match="another task"):
        decide(model, table, make_task("tm", l=3, alphabet=3), plan)
    other = replace(plan, indices=np.arange(plan.n_eval)[::-1].copy())
    with pytest.raises(TableMismatch, match="plan"):
        decide(model, table, task, other)
    with pytest.raises(TableMismatch):
        decide(model, table, task, replace(plan, n_eval=plan.n_eval - 1))


def test_cli_one_pass_equals_two_passes(tmp_path, capsys, monkeypatch):
    """verify-construction's plain run (one pass: exhaustive.verify is never called) and a journalled
    run (the fit's pass, then verify) print the same."""
    from depthcert.checkers import exhaustive
    from depthcert.cli.verify_construction import _verify_construction

    argv = ["tm", "--l", "4", "--alphabet", "4", "--variant", "heads", "--symmetry", "off", "--json"]
    two_pass = exhaustive.verify

    def refuse(*a, **k):
        raise AssertionError("a second evaluation pass")

    monkeypatch.setattr(exhaustive, "verify", refuse)
    assert _verify_construction(argv) == 0
    one = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(exhaustive, "verify", two_pass)
    assert _verify_construction(argv + ["--journal", str(tmp_path / "j")]) == 0
    two = json.loads(capsys.readouterr().out)
    for key in ("verdict", "min_margin", "points_checked", "points_covered", "readout_margins", "readout_note"):
        assert one[key] == two[key], key


# ------------------------------------------------------------- the fused float path of evaluate.py

from hypothesis import event, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from proptools import prop  # noqa: E402
from test_model_classes import BIG_VALUES, VALUES, build_model, specs  # noqa: E402


@prop(60)
@given(st.sampled_from((VALUES, BIG_VALUES)).flatmap(lambda values: specs(kinds=("relu", "hardmax"), values=values)))
def test_fused_heads_equal_head_by_head(spec):
    """Every head in the same products (evaluate._attention_fused) gives the head-by-head pass's
    stream exactly: relu and hardmax heads, mixed, causal masks, every position and the last only."""
    from depthcert.checkers import evaluate

    model = build_model(spec)
    ev = evaluate.Evaluator(model)
    if not ev.use_float or not any(f is not None for f in ev._fused):
        event("not on the fused float path")
        return
    event("fused")
    by_len: dict = {}
    for p in spec.points:
        by_len.setdefault(len(p), []).append([t for t, _, _ in p])
    for rows in by_len.values():
        ids = np.array(rows, dtype=np.int64)
        for last in (True, False):
            a = evaluate._run(model, ids, last, ev._float_w, None, np.float64, fused=ev._fused)
            b = evaluate._run(model, ids, last, ev._float_w, None, np.float64)
            assert np.array_equal(a, b)
