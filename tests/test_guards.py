"""Every size option of every task is guarded before allocation: a huge value is refused (exit 2,
one line naming what is wrong) or runs quickly, never a hang or a machine-filling allocation.

verify-construction, find-dependence and show-construction run in-process under a wall-clock
alarm that is only a hang stop (the regression this guards against built 10^30 token names until
the kernel killed it): HANG_STOP is far above any run here, loaded or not, and no assertion reads
a duration.  Tests of --max-seconds read an injected clock (tests/fake_clock.py), so whether a
limit passes is decided by the code's own readings, never by the machine's speed."""
from __future__ import annotations

import signal

import pytest

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import TASK_ALIASES
from depthcert.cli.common import TASK_OPTIONS, run_main
from depthcert.cli.verify_construction import _verify_construction
from fake_clock import step_clock

TASKS = sorted(set(TASK_ALIASES.values()))
STRING_VALUES = {"group": "s99999", "query": "x" * 50}
HUGE = (10**6, 10**30)
HANG_STOP = 300  # seconds: a run still going after this is a hang (every case here takes under 3 s idle)


class _Timeout(Exception):
    pass


def _run_limited(fn, argv, capsys):
    def alarm(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_STOP)
    try:
        code = run_main(fn, argv)
    except _Timeout:
        code = "timeout"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr()
    return code, out.out, out.err


CASES = [(task, name, value) for task in TASKS for name, _ in TASK_OPTIONS if name != "seed"
         for value in ([STRING_VALUES[name]] if name in STRING_VALUES else HUGE)]


@pytest.mark.parametrize("task,name,value", CASES, ids=[f"{t}-{n}-{str(v)[:8]}" for t, n, v in CASES])
def test_huge_size_option_is_refused_or_fast(task, name, value, capsys):
    argv = [task, f"--{name.replace('_', '-')}", str(value), "--json"]
    code, out, err = _run_limited(_verify_construction, argv, capsys)
    assert code != "timeout", f"{argv} still running after {HANG_STOP} s"
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, (argv, err)
        assert "out of memory" not in err, (argv, err)


def test_multihop_hops_1000_is_refused_naming_the_option(capsys):
    code, out, err = _run_limited(_verify_construction, ["multihop", "--hops", "1000"], capsys)
    assert code == 2 and "--max-weights" in err, (code, err)


def test_evaluation_estimate_is_refused_naming_max_seconds(capsys, monkeypatch):
    """The a-priori estimate is over the limit, so a batch is timed: on a clock of 0.1 s per reading
    the batch of 2048 points measures at least 0.1 s, so the 65,536 points at least 3.2 s (the a-priori
    bound's 8 deadline checks before it read 0.1-0.8 s, within the limit)."""
    step_clock(monkeypatch, 0.1)
    code, out, err = _run_limited(_verify_construction, ["parity", "--n", "16", "--max-seconds", "1"], capsys)
    assert code == 2 and "--max-seconds" in err and "measured on a batch of 2048" in err, err


def test_orbit_scan_is_under_max_points(capsys):
    code, out, err = _run_limited(_verify_construction, ["ictm", "--k", "3", "--l", "3", "--alphabet", "5"], capsys)
    assert code == 2 and "orbit representatives" in err and "--max-points" in err, err


def test_lemma3_estimate_is_refused_before_the_probe(capsys, monkeypatch):
    """Refused on the estimate, before any probe runs: on a stopped clock no measurement or
    deadline can be what refuses it."""
    step_clock(monkeypatch, 0.0)
    code, out, err = _run_limited(
        _verify_construction, ["sc", "--n-points", "200000", "--length", "12", "--alphabet", "3"], capsys)
    assert code == 2 and ("--max-weights" in err or "--max-seconds" in err), err


def test_find_dependence_and_show_construction_take_the_budget(tmp_path, capsys):
    from depthcert.cli.find_dependence import _find_dependence

    code, out, err = _run_limited(_find_dependence, ["--task", "multihop", "--hops", "1000"], capsys)
    assert code in (0, 2), (code, err)
    pytest.importorskip("matplotlib")
    from depthcert.cli.show_construction import _show_construction

    code, out, err = _run_limited(_show_construction, ["multihop", "--hops", "1000", "--out", str(tmp_path / "p")],
                                  capsys)
    assert code == 2 and "--max-weights" in err, err


def test_evaluation_over_the_a_priori_estimate_is_timed_before_it_is_refused(monkeypatch):
    """The a-priori rate is a floor; with the floor made 100x slower (so the estimate says about six
    minutes) the guard times a sample batch, measures well under a minute, and the run covers every
    point.  The same run under a half-second limit is refused, naming the sample."""
    from depthcert.checkers import exhaustive
    from depthcert.checkers.budget import resource_budget
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.tasks import make_task
    from depthcert.constructions import registry

    for name in ("FLOAT_OPS_PER_SECOND", "CHECKED_OPS_PER_SECOND", "EXACT_OPS_PER_SECOND"):
        monkeypatch.setattr(exhaustive, name, getattr(exhaustive, name) / 100)
    task = make_task("word-problem", group="a5", n=12)
    model = registry.build(task, "tree-mlp").model
    assert Evaluator(model).use_float
    assert task.size * exhaustive.forward_ops(model, task.length) / exhaustive.FLOAT_OPS_PER_SECOND > 120
    step_clock(monkeypatch, 0.001)  # injected: the sample of 512 points "measures" a few readings of 1 ms
    with resource_budget(max_seconds=60):
        v = exhaustive.verify(model, task, progress=False, batch_size=512)
    assert v.verdict == "verified" and v.points_covered == task.size
    # a limit the model's a-priori bound (8 clock readings, also under --max-seconds) stays within,
    # and the sample's own a-priori estimate (about 45 s at the slowed floor) does not
    with resource_budget(max_seconds=0.5):
        with pytest.raises(BadInput, match="a sample of 512 of 4096 points"):
            exhaustive.verify(model, task, progress=False, batch_size=512)


@pytest.mark.parametrize("name,opts", [
    ("icqa", dict(k=5000)), ("sc", dict(length=100, alphabet=10)), ("tm", dict(l=100, alphabet=10)),
    ("multihop", dict(k=40, n_entities=40)), ("composition", dict(n_functions=40, domain=9)),
    ("parity", dict(n=100)), ("reachability", dict(vertices=9)),
])
def test_datasets_past_64_bit_indices_raise_too_many_points(name, opts):
    """The one error type (a BadInput) that --all-sizes turns into 'run it at small sizes'."""
    from depthcert.checkers.errors import TooManyPoints
    from depthcert.checkers.tasks import make_task

    with pytest.raises(TooManyPoints, match="2\\^62"):
        make_task(name, **opts)


def _big_icqa_weights(tmp_path):
    """ICQA k=2's weights with every non-zero attention entry replaced by a rational of ~4,000 digits."""
    import json
    import random

    from depthcert.checkers.tasks import make_task
    from depthcert.checkers.weights_file import model_to_json
    from depthcert.constructions import registry

    rng = random.Random(1)
    w = model_to_json(registry.build(make_task("icqa", k=2), None).model)

    def big(x):
        return x if x in (0, "0") else f"{rng.randrange(10 ** 3990, 10 ** 3995)}/{rng.randrange(10 ** 3990, 10 ** 3995)}"

    for layer in w["layers"]:
        for head in layer:
            head["W_QK"] = [[big(x) for x in row] for row in head["W_QK"]]
            head["W_V"] = [[big(x) for x in row] for row in head["W_V"]]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(w))
    return path


STEP = 0.3  # injected seconds per clock reading: --max-seconds 1 passes at the 4th reading after the start
READINGS = 10  # readings by the stop: today 7 (verify-construction) and 8 (verify-model), at the 1st-2nd check past the limit


def test_big_integer_weights_of_a_bounded_model_stop_at_max_seconds(tmp_path, capsys, monkeypatch):
    """User weights of thousands of digits: the a-priori bound exists (2 layers) but the op-count
    estimate ignores the numbers' size, so the big-integer pass checks --max-seconds before every
    layer of every sub-batch (without it this run took minutes past --max-seconds 1)."""
    path = _big_icqa_weights(tmp_path)
    clock = step_clock(monkeypatch, STEP)
    code, out, err = _run_limited(
        _verify_construction, ["icqa", "--k", "2", "--weights", str(path), "--max-seconds", "1"], capsys)
    # a limit reached is not bad input: exit 3, one line, no limit suggested without a measured rate
    assert code == 3 and not out and "ran past the limit of 1 s" in err and "--max-seconds" in err, (code, err)
    # the limit counts from the start and covers the a-priori bound (6 s of big-integer products
    # before it was checked there): stopped at the first reading past it
    assert len(err.strip().splitlines()) == 1 and clock.readings <= READINGS, (clock.readings, err)


def test_verify_model_stops_at_max_seconds(tmp_path, capsys, monkeypatch):
    """verify-model has the same guard: the same weights as a checkpoint ran minutes with no limit."""
    from depthcert.cli.verify_model import _main as _verify_model

    path = _big_icqa_weights(tmp_path)
    clock = step_clock(monkeypatch, STEP)
    code, out, err = _run_limited(_verify_model, [str(path), "--task", "icqa", "--k", "2", "--max-seconds", "1"], capsys)
    # a limit reached is not bad input: exit 3 with what was decided so far (tests/test_hole_time_limit.py)
    assert code == 3 and err == "" and "stopped        stopped at --max-seconds 1 " in out, (code, err)
    assert clock.readings <= READINGS + 3, (clock.readings, err)  # + the stopped run's report of its times


def test_the_a_priori_bound_stops_at_its_deadline(tmp_path):
    """integerize's magnitude bound (big-integer products, seconds for weights of thousands of
    digits) checks the deadline before every head: a passed deadline stops it with BadInput."""
    import time

    from depthcert.checkers.evaluate import integerize
    from depthcert.checkers.weights_file import load_weights

    model = load_weights(str(_big_icqa_weights(tmp_path)))
    with pytest.raises(BadInput, match="bounding the numbers ran past the limit of 1 s"):
        integerize(model, (time.perf_counter() - 1, 1, "bounding the numbers"))  # passed before it starts
