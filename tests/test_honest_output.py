"""Issue 15: say exactly what was shown.  reproduce-paper's table (printed weights, depthcert's
version, verdict, command; scope findings), the two ICTM query readings, check-certificate's
dataset check and its meaning line, canonical class keys and the same answer from the standalone
checker and the console command, show-construction --json, help texts listing their values,
total and evaluation time."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from depthcert.checkers import certificate as cc
from depthcert.checkers.tasks import make_task
from depthcert.checkers.tasks.template import ictm_size
from depthcert.cli.common import run_main
from depthcert.cli.reproduce_paper import _reproduce_paper
from depthcert.cli.verify_construction import _verify_construction
from depthcert.cli.check_certificate import _check_certificate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CERTS = os.path.join(ROOT, "proofs", "certificates")


def run(fn, argv, capsys):
    code = run_main(fn, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_reproduce_paper_table_has_a_header_and_printed_verdicts(capsys):
    code, out, _ = run(_reproduce_paper, ["--only", "theorem5-ternary", "theorem1", "scope-theorem2-k1"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0] == "| claim | as printed | depthcert's version | verdict | command |"
    ternary = next(line for line in lines if line.startswith("| Theorem 5 (ternary"))
    cells = [c.strip() for c in ternary.strip("|").split("|")]
    assert cells[1].startswith("REFUTED:") and "counterexample point 9" in cells[1]
    assert cells[3] == "VERIFIED" and "--as-printed" in cells[4]
    scope = next(line for line in lines if "scope: k >= 2" in line)
    assert "FITTABLE" in scope and "find-dependence --task icqa --k 1" in scope and "(finding)" in scope
    theorem1 = next(line for line in lines if line.startswith("| Theorem 1"))
    assert "identical to depthcert's version" in theorem1


def test_reproduce_paper_json_names_printed_and_command(capsys):
    code, out, _ = run(_reproduce_paper, ["--only", "theorem6", "--json"], capsys)
    (row,) = json.loads(out)
    assert row["printed"] == "differs" and row["printed_verdict"] == "refuted" and row["verdict"] == "verified"
    assert row["command"].startswith("verify-construction ictm")


@pytest.mark.parametrize("query", ["any", "new"])
def test_ictm_query_readings_sizes_construction_certificate(query):
    from depthcert.proofs.dependence import decide_task
    from depthcert.checkers.exhaustive import verify
    from depthcert.constructions import registry

    task = make_task("ictm", k=2, l=2, alphabet=3, n_answers=2, query=query)
    assert task.size == ictm_size(2, 3, 2, 2, query) == (648 if query == "any" else 504)
    assert verify(registry.build(task).model, task, progress=False, symmetry="auto").verified
    small = make_task("ictm", k=2, l=2, alphabet=2, n_answers=2, query=query)
    dec = decide_task(small, progress=False).decision
    assert not dec.fittable and cc.check_certificate(dec.certificate.to_json())[0]
    if query == "new":  # no query repeats its context question
        step = task.l + 2
        for i in range(task.size):
            toks = task.point(i).tokens
            qs = toks[task.k * step: task.k * step + task.l]
            assert all(qs != toks[j * step: j * step + task.l] for j in range(task.k))


def test_ictm_query_bad_value(capsys):
    code, _, err = run(_verify_construction, ["ictm", "--query", "maybe"], capsys)
    assert code == 2 and "--query must be any or new" in err


def test_check_certificate_against_its_dataset(capsys):
    f = os.path.join(CERTS, "theorem2_icqa.json")
    code, out, _ = run(_check_certificate, [f, "--task", "icqa", "--k", "2", "--n-questions", "2",
                                            "--n-answers", "2"], capsys)
    assert code == 0 and "every point is a point of icqa" in out and out.strip().endswith("section 10)")
    code, out, _ = run(_check_certificate, [f, "--task", "tm", "--l", "2"], capsys)
    assert code == 1 and "not about tm" in out
    code, out, _ = run(_check_certificate, [f], capsys)
    assert code == 0 and "its own points only" in out


@pytest.mark.parametrize("key", ["02", "+2", "2\n", " 2", "-0"])
def test_int_class_keys_must_be_canonical(key):
    obj = {"format": "depthcert.certificate", "version": 1, "points": [
        {"tokens": ["a", "c"], "label": 1, "mu": {key: 1}}, {"tokens": ["b", "c"], "label": 2, "mu": {"1": 1}}]}
    status, msg = cc.classify(obj)
    assert status == "malformed" and "canonical" in msg


def test_standalone_checker_and_console_agree_on_huge_numbers(tmp_path):
    cert = json.load(open(os.path.join(CERTS, "theorem4_tm.json")))
    for p in cert["points"]:  # scale every coefficient by 10^5000: still valid
        p["mu"] = {c: k * 10**5000 for c, k in p["mu"].items()}
    f = tmp_path / "big.json"
    sys.set_int_max_str_digits(0)
    f.write_text(json.dumps(cert))
    lone = subprocess.run([sys.executable, "-I", os.path.join(ROOT, "checkers", "certificate.py"), str(f)],
                          capture_output=True, text=True)
    console = subprocess.run([os.path.join(os.path.dirname(sys.executable), "check-certificate"), str(f)],
                             capture_output=True, text=True)
    assert lone.returncode == console.returncode == 0, (lone.stderr, console.stderr)
    assert lone.stdout.splitlines()[0] == console.stdout.splitlines()[0]


def test_show_construction_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from depthcert.cli.show_construction import _show_construction

    code, out, _ = run(_show_construction, ["icqa", "--k", "2", "--point", "3", "--out", str(tmp_path), "--json"],
                       capsys)
    info = json.loads(out)
    assert code == 0 and info["point"] == 3 and len(info["files"]) == len(os.listdir(tmp_path))
    assert all(os.path.basename(f).startswith("icqa-k2-") and "-p3-" in f for f in info["files"])


def test_help_lists_variants_and_claims(capsys):
    with pytest.raises(SystemExit):
        run_main(_verify_construction, ["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "tm: heads, ternary" in out and "multihop: paper, linear, doubling" in out
    with pytest.raises(SystemExit):
        run_main(_reproduce_paper, ["--help"])
    assert "theorem5-ternary" in " ".join(capsys.readouterr().out.split())


def test_total_and_evaluation_time_are_both_reported(capsys):
    code, out, _ = run(_verify_construction, ["icqa", "--k", "2", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["total_seconds"] >= info["seconds"] >= 0
    code, out, _ = run(_verify_construction, ["icqa", "--k", "2"], capsys)
    assert " s in all, " in out and " s evaluating" in out
