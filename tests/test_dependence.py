"""One-layer decision (proofs/dependence.py), dataset files and the find-dependence CLI."""
from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthcert.checkers.certificate import check_certificate
from depthcert.checkers.tasks.dataset_file import DatasetTask, dataset_from_json, load_dataset
from depthcert.proofs.dependence import Data, accuracy_bounds, decide, decide_task
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task

THEOREM2 = [("a = x b = y a =", "x"), ("a = y b = x b =", "x"), ("a = y b = x a =", "y"), ("a = x b = y b =", "y")]


def dataset_obj(seqs, labels):
    return {"format": "depthcert.dataset", "version": 1, "sequences": seqs, "labels": labels}


def points_of(task):
    out = {}
    for i in range(task.size):
        p = task.point(i)
        out[tuple(p.tokens)] = p.label
    return out


def assert_speaks_about(cert_obj, labelled):
    for p in cert_obj["points"]:
        assert labelled[tuple(p["tokens"])] == p["label"]


def test_theorem2_decided_with_four_points():
    d = Data([s.split() for s, _ in THEOREM2], [lab for _, lab in THEOREM2])
    dec = decide(d)
    assert not dec.fittable and len(dec.certificate.points) == 4
    assert dec.certificate.check()[0]
    lam = dict(dec.certificate.dependences())["x"]
    assert sorted(lam) == [-1, -1, 1, 1]


def test_tm_length2_is_aa_plus_bb_equals_ab_plus_ba():
    task = make_task("tm", l=2, alphabet=2)
    res = decide_task(task, progress=False)
    cert = res.decision.certificate
    assert not res.decision.fittable and len(cert.points) == 4
    toks = sorted(tuple(p.tokens[:2]) for p in cert.points)
    assert toks == [("t0", "t0"), ("t0", "t1"), ("t1", "t0"), ("t1", "t1")]
    assert check_certificate(cert.to_json())[0]
    assert_speaks_about(cert.to_json(), points_of(task))


@pytest.mark.parametrize("name,opts", [("icqa", {"k": 2}), ("tm", {"l": 3}), ("ictm", {"k": 2, "l": 2, "alphabet": 2, "n_answers": 2}),
                                       ("multihop", {"hops": 2})])
def test_paper_tasks_get_small_checked_certificates(name, opts):
    task = make_task(name, **opts)
    res = decide_task(task, progress=False)
    assert not res.decision.fittable
    obj = res.decision.certificate.to_json()
    assert check_certificate(obj)[0]
    assert len(obj["points"]) == 4
    assert_speaks_about(obj, points_of(task))


def test_sc_distinct_labels_fittable_and_model_verifies():
    task = make_task("sc", length=2, alphabet=3)
    res = decide_task(task, progress=False)
    assert res.decision.fittable and res.decision.certificate is None
    assert res.verdict.verified and res.verdict.points_checked == task.size
    assert len(res.model.layers) == 1
    assert verify(res.model, task, progress=False, force_exact=True).verified


def test_fitted_model_breaks_when_one_classifier_row_is_copied():
    """The emitted model is really what makes the verdict: copy one class row of W_O onto another."""
    task = make_task("sc", length=2, alphabet=3)
    res = decide_task(task, progress=False)
    m = res.model
    y = m.classes.index(task.point(0).label)
    other = (y + 1) % len(m.classes)
    broken = m
    for col in range(m.dim):  # class y's row of W_O becomes a copy of class other's row
        if m.W_O[y, col] != m.W_O[other, col]:
            broken = broken.with_weight(("W_O", y, col), m.W_O[other, col])
    v = verify(broken, task, progress=False)
    assert not v.verified and v.counterexample.expected in (m.classes[y], m.classes[other])


labelled_datasets = st.integers(1, 3).flatmap(
    lambda n: st.dictionaries(
        st.tuples(*[st.sampled_from("abc")] * n).map(lambda t: t + ("r",)),
        st.sampled_from(["p", "q", "s"]),
        min_size=1,
        max_size=12,
    )
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labelled_datasets, st.booleans())
def test_decision_is_always_one_checked_outcome(points, mixed):
    seqs = [list(s) for s in points]
    labels = list(points.values())
    if mixed and len(seqs) > 1:  # also sequences of another length (another group)
        seqs[-1] = seqs[-1] + ["r"]
    task = DatasetTask(seqs, labels)
    res = decide_task(task, progress=False)
    dec = res.decision
    assert dec.fittable in (True, False)
    if dec.fittable:
        assert dec.certificate is None and res.verdict.verified and res.verdict.points_checked == len(seqs)
    else:
        obj = dec.certificate.to_json()
        assert check_certificate(obj)[0]
        labelled = {tuple(s): lab for s, lab in zip(seqs, labels)}
        assert_speaks_about(obj, labelled)
        assert res.model is None


def test_accuracy_bounds_theorem2_is_three_quarters(monkeypatch):
    from fake_clock import step_clock

    step_clock(monkeypatch, 0.0)  # a stopped clock: the time budget never cuts the search short
    task = DatasetTask([s.split() for s, _ in THEOREM2], [lab for _, lab in THEOREM2])
    b = accuracy_bounds(task, seconds=20)
    assert (b.lower_correct, b.upper_correct, b.total) == (3, 3, 4)
    assert all(c.check()[0] for c in b.certificates)


def test_accuracy_bounds_icqa_two_by_two(monkeypatch):
    from fake_clock import step_clock

    step_clock(monkeypatch, 0.0)  # the bounds depend on the search's work (max_rounds), not on the machine
    task = make_task("icqa", k=2, n_questions=2, n_answers=2)
    b = accuracy_bounds(task, seconds=20)
    assert b.upper_correct == 6 and len(b.certificates) == 2
    assert 5 <= b.lower_correct <= 6
    ids = [set(tuple(p.tokens) for p in c.points) for c in b.certificates]
    assert not (ids[0] & ids[1])


# ---------------------------------------------------------------------------------------------
# dataset files


def test_dataset_mixed_lengths_batches_grouped():
    t = DatasetTask([[1, 2], [3, 1, 2], [2, 2]], ["u", "v", "u"])
    assert t.length == 3 and t.vocab == ("1", "2", "3") and t.classes == ("u", "v")
    shapes = sorted(b.ids.shape for b in t.batches())
    assert shapes == [(1, 3), (2, 2)]
    assert sorted(int(i) for b in t.batches() for i in b.index) == [0, 1, 2]


@pytest.mark.parametrize("obj,field", [
    ({"format": "x", "version": 1, "sequences": [["a"]], "labels": ["p"]}, "format"),
    ({"format": "depthcert.dataset", "version": 3, "sequences": [["a"]], "labels": ["p"]}, "version"),
    (dataset_obj([], []), "empty"),
    (dataset_obj("ab", ["p"]), "sequences"),
    (dataset_obj([["a"]], ["p", "q"]), "labels"),
    (dataset_obj([["a", 1]], ["p"]), "mix"),
    (dataset_obj([["a"], ["b"]], ["p", 2]), "labels[1]"),
    (dataset_obj([["a"], ["a"]], ["p", "q"]), "conflicting"),
    (dataset_obj([[]], ["p"]), "sequences[0]"),
    (dataset_obj([["a", None]], ["p"]), "sequences[0][1]"),
    (dataset_obj([["a", True]], ["p"]), "sequences[0][1]"),
    (dataset_obj([["a", 1.5]], ["p"]), "sequences[0][1]"),
    ({"format": "depthcert.dataset", "version": 1, "labels": ["p"]}, "sequences"),
    ({**dataset_obj([["a"]], ["p"]), "weird": 1}, "weird"),
    ([1, 2], "object"),
])
def test_dataset_bad_input_names_field(obj, field):
    with pytest.raises(BadInput) as e:
        dataset_from_json(obj)
    assert field in str(e.value)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_dataset_not_fittable_json_and_out(tmp_path, capsys):
    from depthcert.cli.find_dependence import find_dependence_main

    f = tmp_path / "d.json"
    f.write_text(json.dumps(dataset_obj([s.split() for s, _ in THEOREM2], [lab for _, lab in THEOREM2])))
    out = tmp_path / "cert.json"
    assert find_dependence_main(["--dataset", str(f), "--json", "--out", str(out)]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["fittable"] is False and rep["points_in_certificate"] == 4
    assert check_certificate(rep["certificate"])[0]
    assert check_certificate(json.loads(out.read_text()))[0]


def test_cli_human_output_reads_like_the_paper(capsys):
    from depthcert.cli.find_dependence import find_dependence_main

    assert find_dependence_main(["--task", "tm", "--len", "2", "--alphabet", "2"]) == 0
    text = capsys.readouterr().out
    assert "E0 (+) E1 = E2 (+) E3" in text
    assert "NOT fittable" in text and "softmax" in text and "any number of heads" in text


def test_cli_fittable_export_reloads_and_verifies(tmp_path, capsys):
    from depthcert.checkers.atomic import read_json
    from depthcert.checkers.weights_file import model_from_json
    from depthcert.cli.find_dependence import find_dependence_main

    f = tmp_path / "d.json"
    seqs = [[a, b, "c"] for a, b in itertools.product([0, 1, 2], repeat=2)]
    labels = list(range(len(seqs)))
    seqs = [[str(t) for t in s] for s in seqs]
    f.write_text(json.dumps(dataset_obj(seqs, labels)))
    w = tmp_path / "w.json"
    assert find_dependence_main(["--dataset", str(f), "--json", "--export", str(w)]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["fittable"] is True and rep["model"]["verified"] is True
    task = load_dataset(str(f))
    model = model_from_json(read_json(str(w), "weights"), task)
    assert verify(model, task, progress=False).verified


def test_a_model_from_a_rounded_lp_vertex_says_so(monkeypatch, capsys):
    """Past the exact least-norm re-solve the printed model is a rounded LP vertex, which another
    solver version may choose differently: the output says so (text and --json), and the model is
    still checked exactly."""
    from depthcert.cli.find_dependence import find_dependence_main
    from depthcert.proofs import dependence

    assert find_dependence_main(["--task", "icqa", "--k", "1", "--json"]) == 0
    assert "notes" not in json.loads(capsys.readouterr().out)  # the canonical table: nothing to say
    monkeypatch.setattr(dependence, "canonical_table", lambda prob: None)
    assert find_dependence_main(["--task", "icqa", "--k", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["model"]["verified"] is True
    assert len(rep["notes"]) == 1 and "rounded LP vertex" in rep["notes"][0]
    assert find_dependence_main(["--task", "icqa", "--k", "1"]) == 0
    assert "note: group (length 5, last '='): the one-layer model is a rounded LP vertex" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["--task", "nosuch"], "unknown task"),
    ([], "--task"),
    (["--dataset", "/nonexistent/d.json"], "cannot read"),
    (["--task", "tm", "--len", "2", "--out", "/nonexistent/dir/c.json"], "does not exist"),
    (["--task", "icqa", "--hops", "2"], "hops"),
])
def test_cli_bad_input_exit_2_one_line(argv, needle, capsys):
    from depthcert.cli.find_dependence import find_dependence_main

    assert find_dependence_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_huge_task_certificate_from_sampled_windows():
    """ICQA at the paper's 100-token scale (2.8e12 points): a 4-point certificate on sampled points."""
    task = make_task("icqa", k=3, n_questions=100, n_answers=100)
    res = decide_task(task, progress=False)
    obj = res.decision.certificate.to_json()
    assert not res.decision.fittable and check_certificate(obj)[0] and len(obj["points"]) == 4
    for p in obj["points"]:  # every point obeys the task's rule: label = answer after the queried question
        t = p["tokens"]
        pairs = {t[3 * i]: t[3 * i + 2] for i in range(3)}
        assert t[-1] == "=" and pairs[t[-2]] == p["label"]



def _all_points(task):
    out = {}
    for b in task.batches(8192):
        for row, lab in zip(b.ids.tolist(), b.labels.tolist()):
            out[tuple(task.vocab[t] for t in row)] = task.classes[lab]
    return out


def test_stored_task_certificates_speak_about_their_datasets():
    import glob
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    n = 0
    for path in sorted(glob.glob(os.path.join(root, "proofs", "certificates", "*.json"))):
        obj = json.load(open(path))
        claims = obj.get("claims", {})
        if "params" not in claims or "task" not in claims:
            continue
        task = make_task(claims["task"], **claims["params"])
        assert check_certificate(obj)[0], path
        assert_speaks_about(obj, _all_points(task))
        n += 1
    assert n >= 7



@pytest.mark.parametrize("seqs, labels", [
    ("aar abr bar bbr bcr car cbr", "pqpqptt"),
    ("aaar aabr abar abbr baar", "ppspq"),
])
def test_solver_infeasibility_is_confirmed(seqs, labels):
    """HiGHS 1.16.0's LP presolve calls these feasible one-layer fits infeasible (and no
    certificate exists, so the search could not answer): an infeasibility is only taken from a
    run without presolve.  The fitted model is then verified on every point."""
    task = DatasetTask([list(s) for s in seqs.split()], list(labels))
    dec = decide_task(task, progress=False)
    assert dec.decision.fittable and dec.decision.certificate is None
    assert dec.verdict.verified and dec.verdict.points_checked == task.size


def test_least_norm_table_does_not_depend_on_the_qp_solver(monkeypatch):
    """The printed one-layer model is the least-norm table, unique for the dataset: the same
    exact table whether HiGHS's QP solver finds the point or fails (HiGHS 1.16.0 calls this QP
    infeasible) and the NNLS least-distance fallback finds it."""
    from depthcert.proofs import dependence

    real_run_lp, real_canonical = dependence._run_lp, dependence.canonical_table
    tables = []

    def spy(prob):
        tables.append(real_canonical(prob))
        return tables[-1]

    def qp_fails(*args, identity_hessian=False, **kw):
        if identity_hessian:
            return "infeasible", None
        return real_run_lp(*args, **kw)

    monkeypatch.setattr(dependence, "canonical_table", spy)
    task = DatasetTask([list(s) for s in "aar abr bar bbr bcr car cbr".split()], list("pqpqptt"))
    first = decide_task(task, progress=False)
    monkeypatch.setattr(dependence, "_run_lp", qp_fails)
    second = decide_task(task, progress=False)
    assert len(tables) == 2 and all(t is not None for t in tables)
    assert tables[0].tolist() == tables[1].tolist() == [
        [81, 59, -140], [81, 59, -140], [-139, -161, 300], [116, -126, 10], [-214, 204, 10],
        [121, -121, 0], [23, -43, 20]]
    assert first.decision.fits == second.decision.fits
    assert second.verdict.verified


# ---- issue 22 part 1: the LP solver writes nothing, on any highspy version


@pytest.mark.parametrize("argv", [["find-dependence", "--task", "template", "--len", "3", "--json"],
                                  ["find-dependence", "--task", "icqa", "--k", "1"],
                                  ["verify-construction", "tm", "--l", "3", "--alphabet", "2", "--json"]])
def test_a_fresh_process_prints_no_solver_banner(argv):
    """highspy 1.16 prints a banner on file descriptor 1 when a process builds its first Highs
    object: a fresh process (the banner comes once per process) must print only its own output,
    and nothing on stderr (find-dependence's LP; verify-construction's max-margin read-out LP)."""
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), argv[0])
    r = subprocess.run([exe] + argv[1:], capture_output=True, text=True, timeout=300, cwd=os.path.dirname(__file__))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "HiGHS" not in r.stdout and "THIRD_PARTY" not in r.stdout
    if "--json" in argv:
        assert r.stdout.count("\n") == 1 and json.loads(r.stdout)["command"] == argv[0]
    else:
        assert r.stdout.startswith("task: icqa")


def test_quiet_highs_writes_nothing_even_when_highspy_prints(capfd, monkeypatch):
    """The first Highs construction of a process is silenced at the file-descriptor level: a
    stand-in that writes to fd 1 and 2 on construction (as highspy 1.16's banner does) is mute."""
    import os

    import highspy

    from depthcert.proofs import dependence

    real = highspy.Highs

    class Loud(real):
        def __init__(self):
            os.write(1, b"Running HiGHS (banner)\n")
            os.write(2, b"banner on stderr\n")
            super().__init__()

    monkeypatch.setattr(highspy, "Highs", Loud)
    h = dependence._quiet_highs()
    flag = h.getOptionValue("output_flag")  # (status, value) on 1.16, the value on older releases
    assert (flag[-1] if isinstance(flag, tuple) else flag) is False
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    os.write(1, b"after\n")  # the descriptors are restored
    assert capfd.readouterr().out == "after\n"
