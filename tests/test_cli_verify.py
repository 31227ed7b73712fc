"""verify-construction end to end: verdicts, JSON keys, exit codes, weights round trip."""
import json

import pytest

from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction


def run(argv, capsys):
    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_icqa_k3_verified_json(capsys):
    code, out, err = run(["icqa", "--k", "3", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "verified"
    assert info["points_total"] == info["points_covered"] == 60 * 60 * 3 and info["points_checked"] == 3
    code, out, err = run(["icqa", "--k", "3", "--json", "--symmetry", "off"], capsys)
    assert code == 0 and json.loads(out)["points_checked"] == 60 * 60 * 3
    assert info["min_margin"] == 3 and info["theorem"].startswith("Theorem 3")
    for key in ("task", "theorem", "verdict", "points_total", "points_checked", "min_margin"):
        assert key in info


def test_guard_counts_evaluated_points_not_covered(capsys):
    code, out, _ = run(["icqa", "--k", "9", "--max-points", "100", "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["points_checked"] == 9 and info["points_covered"] == info["points_total"] > 10**15


def test_sc_human_output(capsys):
    code, out, _ = run(["sc", "--length", "2", "--alphabet", "3"], capsys)
    assert code == 0 and "VERIFIED" in out and "9 of 9 points" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["icqa", "--k", "0"], "--k"),
        (["icqa", "--k", "4", "--n-questions", "3"], "larger than"),
        (["nosuchtask"], "unknown task"),
        (["icqa", "--k", "x"], "not an integer"),
        (["icqa", "--alphabet", "3"], "does not apply"),
        (["icqa", "--k", "3", "--variant", "nope"], "unknown --variant"),
        (["icqa", "--k", "9", "--symmetry", "off"], "--max-points"),
        (["icqa", "--weights", "/nonexistent/w.json"], "cannot read"),
    ],
)
def test_bad_input_exit_2_one_line(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err


def test_export_round_trip_and_tamper(tmp_path, capsys):
    w = tmp_path / "w.json"
    code, _, _ = run(["icqa", "--k", "2", "--export", str(w), "--json"], capsys)
    assert code == 0
    obj = json.loads(w.read_text())
    assert obj["format"] == "depthcert.weights" and len(obj["layers"]) == 2
    code, out, _ = run(["icqa", "--k", "2", "--weights", str(w), "--json"], capsys)
    assert code == 0 and json.loads(out)["min_margin"] == 3
    obj["layers"][1][0]["W_QK"][1][1] = 0  # question q1 no longer matches itself
    w.write_text(json.dumps(obj))
    code, out, _ = run(["icqa", "--k", "2", "--weights", str(w), "--json"], capsys)
    info = json.loads(out)
    assert code == 1 and info["verdict"] == "refuted"
    ce = info["counterexample"]
    assert ce["tokens"][-2] == "q1" and set(ce) >= {"tokens", "expected", "predicted", "logits"}
    code, out, _ = run(["icqa", "--k", "2", "--weights", str(w), "--point", str(ce["index"]), "--json"], capsys)
    assert code == 1 and json.loads(out)["correct"] is False


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda o: o.update(format="x"), "format"),
        (lambda o: o["layers"][0][0]["W_QK"][0].__setitem__(0, 0.5), "W_QK[0][0]"),
        (lambda o: o["layers"][0][0]["W_V"][2].__setitem__(1, "1/0"), "zero denominator"),
        (lambda o: o["layers"][0][0]["W_V"][2].__setitem__(1, "nan"), "W_V[2][1]"),
        (lambda o: o["layers"][1][0]["W_V"].pop(), "rows"),
        (lambda o: o["W_O"][0].pop(), "W_O[0]"),
        (lambda o: o.pop("W_O"), "W_O"),
        (lambda o: o["layers"][0].clear(), "layers[0]"),
    ],
)
def test_malformed_weights_exit_2_and_name_the_field(tmp_path, capsys, mutate, needle):
    w = tmp_path / "w.json"
    assert run(["icqa", "--k", "2", "--export", str(w), "--json"], capsys)[0] == 0
    obj = json.loads(w.read_text())
    mutate(obj)
    w.write_text(json.dumps(obj))
    code, out, err = run(["icqa", "--k", "2", "--weights", str(w)], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1


def test_failed_run_writes_no_export(tmp_path, capsys):
    target = tmp_path / "out.json"
    code, _, _ = run(["icqa", "--k", "5", "--n-questions", "3", "--export", str(target)], capsys)
    assert code == 2 and not target.exists()


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def test_user_weights_may_order_their_vocabulary_freely(tmp_path, capsys):
    w = tmp_path / "w.json"
    assert run(["icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3", "--export", str(w), "--json"], capsys)[0] == 0
    obj = json.loads(w.read_text())
    V = len(obj["vocab"])
    order = list(range(V))[::-1]  # reverse the token rows and permute every matrix to match
    perm = order + list(range(V, len(obj["W_O"][0])))
    obj["vocab"] = [obj["vocab"][i] for i in order]
    for layer in obj["layers"]:
        for head in layer:
            for key in ("W_QK", "W_V"):
                head[key] = [[head[key][r][c] for c in perm] for r in perm]
    obj["W_O"] = [[row[c] for c in perm] for row in obj["W_O"]]
    obj.pop("layout")
    _write(w, obj)
    code, out, _ = run(["icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3", "--weights", str(w), "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "verified" and info["min_margin"] == 3
    obj["vocab"][0] = "zz"  # a task token the model no longer embeds
    _write(w, obj)
    code, _, err = run(["icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3", "--weights", str(w)], capsys)
    assert code == 2 and "lacks" in err


def test_dataset_file_with_sc_construction_and_with_weights(tmp_path, capsys):
    seqs = [[a, b, "c"] for a in "xyz" for b in "xy"]
    ds = _write(tmp_path / "d.json", {"format": "depthcert.dataset", "version": 1, "sequences": seqs,
                                     "labels": [f"L{i}" for i in range(len(seqs))]})
    w = tmp_path / "w.json"
    code, out, _ = run(["sc", "--dataset", ds, "--export", str(w), "--json"], capsys)
    assert code == 0 and json.loads(out)["points_checked"] == 6
    code, out, _ = run(["--dataset", ds, "--weights", str(w), "--json"], capsys)
    assert code == 0 and json.loads(out)["verdict"] == "verified"
    relabel = _write(tmp_path / "d2.json", {"format": "depthcert.dataset", "version": 1, "sequences": seqs,
                                            "labels": [f"L{(i + 1) % len(seqs)}" for i in range(len(seqs))]})
    code, out, _ = run(["--dataset", relabel, "--weights", str(w), "--json"], capsys)
    assert code == 1 and json.loads(out)["verdict"] == "refuted"
    mixed = _write(tmp_path / "d3.json", {"format": "depthcert.dataset", "version": 1,
                                          "sequences": [["x", "c"], ["y", "d"]], "labels": ["A", "B"]})
    code, _, err = run(["sc", "--dataset", mixed], capsys)
    assert code == 2 and "same token" in err
    code, _, err = run(["icqa", "--dataset", ds], capsys)
    assert code == 2 and "--dataset" in err
