"""The paper's results table: every registered claim holds, and a certificate is only accepted
for a task if its points are points of that task's dataset."""
import pytest

from depthcert.checkers.tasks import make_task
from depthcert.proofs.theorems import CLAIMS, certificate_speaks_about, check_claim


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.key for c in CLAIMS])
def test_claim_holds(claim):
    r = check_claim(claim)
    assert r.ok, r.detail
    want = {"construction": "verified", "certificate": "certified", "fittable": "fittable"}[claim.method]
    assert r.verdict == want
    if claim.printed == "differs":  # the printed weights are checked too; all but Theorem 1's (the paper's
        # Lemma 3 read-out, which depthcert replaces by a closed form) fail (docs/errata.md)
        if claim.key == "theorem1":
            assert r.printed_verdict == "verified" and "min margin 1/16" in r.printed_detail
        else:
            assert r.printed_verdict == "refuted" and "counterexample point" in r.printed_detail


def test_certificate_for_other_data_is_not_about_the_task():
    task = make_task("icqa", k=2, n_questions=2, n_answers=2)
    cert = {"points": [{"tokens": ["q0", "=", "a0", "q1", "=", "a1", "q0", "="], "label": "a1", "mu": {"a0": 1}}]}
    assert "label" in certificate_speaks_about(cert, task)
    cert["points"][0]["tokens"][0] = "q9"
    assert "not in" in certificate_speaks_about(cert, task)



def test_rejected_certificate_is_not_established_in_json_and_table(monkeypatch, capsys):
    """A claim whose certificate the independent checker rejects is `not_established` (one token,
    like every other verdict value, and valid under the output schema) in --json, NOT ESTABLISHED
    in the table, and exit 1."""
    import json

    jsonschema = pytest.importorskip("jsonschema")
    from depthcert.checkers import certificate
    from depthcert.cli.common import run_main
    from depthcert.cli.reproduce_paper import _reproduce_paper
    from depthcert.schema import output_schema

    monkeypatch.setattr(certificate, "check_certificate", lambda cert: (False, "tampered for the test"))
    assert run_main(_reproduce_paper, ["--only", "theorem2", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "not_reproduced"
    assert [c["verdict"] for c in doc["claims"]] == ["not_established"]
    assert "tampered for the test" in doc["claims"][0]["detail"]
    jsonschema.Draft202012Validator(output_schema()).validate(doc)
    assert run_main(_reproduce_paper, ["--only", "theorem2"]) == 1
    assert "| NOT ESTABLISHED |" in capsys.readouterr().out
