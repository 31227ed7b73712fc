"""Weights and dataset files, version 2 (the wider model classes), end to end through the CLI:
round trips, version 1 unchanged, hostile fields (exit 2, one line with the field path, nothing
written), exit code 3 for an undecided softmax model, and the options that only some models take."""
from __future__ import annotations

import copy
import itertools
import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.tasks.dataset_file import DatasetTask, dataset_from_json
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.checkers.tasks import ICQA
from depthcert.checkers.weights_file import model_from_json, model_to_json
from depthcert.constructions import registry
from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction
from depthcert.cli.find_dependence import _find_dependence

TOKENS = ("a", "b", "c")
N = 4


def prev_token_model(kind="hardmax", scale=1, mlp=False, constant_row=False) -> Model:
    """Causal one-layer copy of the previous token at every position (position 0 unlabelled);
    optionally an MLP that adds 0 (relu of a negative constant) and a constant row."""
    blocks = [("token", 3), ("position", N)] + ([("one", 1)] if constant_row else []) + [("prev", 3)]
    lay = Layout.of(*blocks)
    shift = [[1 if j == k - 1 else 0 for k in range(N)] for j in range(N)]
    qk = BlockMatrix(lay, lay).set("position", "position", shift).build()
    v = BlockMatrix(lay, lay).set("prev", "token", 1).build()
    out = BlockMatrix(Layout.of(("class", 3)), lay).set("class", "prev", 1).build()
    m = None
    if mlp:
        hidden = Layout.of(("unit", 2))
        W1 = BlockMatrix(hidden, lay).set("unit", "token", [[1, 0, 0], [0, 1, 0]]).build()
        b1 = np.array([Fraction(-2), Fraction(-3, 2)], dtype=object)
        W2 = BlockMatrix(lay, hidden).set("prev", "unit", [[5, 0], [0, 5], [0, 0]]).build()
        b2 = np.full(lay.dim, Fraction(0), dtype=object)
        m = MLP(W1, b1, W2, b2)
    head = Head(qk, v, attention=kind, scale=Fraction(scale))
    return Model(TOKENS, N, TOKENS, lay, (Layer((head,), causal=True, mlp=m),), out, outputs="all",
                 constant_row=constant_row, name=f"prev-{kind}")


def prev_token_dataset() -> dict:
    seqs = [list(s) for s in itertools.product(TOKENS, repeat=N)]
    return {"format": "depthcert.dataset", "version": 2, "name": "prev", "sequences": seqs,
            "labels": [[None] + s[:-1] for s in seqs]}


def run(fn, argv, capsys):
    code = run_main(fn, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return str(p)


@pytest.mark.parametrize("kind,mlp,const", [("hardmax", False, False), ("relu", True, True), ("softmax", False, True)])
def test_round_trip_keeps_weights_and_verdict(kind, mlp, const):
    model = prev_token_model(kind, 20 if kind == "softmax" else 1, mlp, const)
    obj = model_to_json(model)
    assert obj["version"] == 2 and obj["outputs"] == "all" and obj["constant_row"] is const
    back = model_from_json(json.loads(json.dumps(obj)))
    assert model_to_json(back) == obj
    task = dataset_from_json(prev_token_dataset())
    a, b = verify(model, task, progress=False), verify(back, task, progress=False)
    assert a.verdict == b.verdict == "verified"
    assert (a.min_margin, a.margin_enclosure) == (b.min_margin, b.margin_enclosure)


def test_paper_constructions_still_export_version_1():
    obj = model_to_json(registry.build(ICQA(k=2)).model)
    assert obj["version"] == 1 and "outputs" not in obj and all(isinstance(L, list) for L in obj["layers"])
    assert all(set(h) == {"W_QK", "W_V"} for L in obj["layers"] for h in L)


def test_cli_verifies_v2_files_and_exit_codes(tmp_path, capsys):
    data = write(tmp_path, "data.json", prev_token_dataset())
    good = write(tmp_path, "hard.json", model_to_json(prev_token_model("hardmax", mlp=True, constant_row=True)))
    code, out, err = run(_verify_construction, ["--dataset", data, "--weights", good, "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["verdict"] == "verified" and info["min_margin"] == 1, (out, err)
    assert info["model_class"] == "hardmax+causal+mlp+constant-row+all-positions"
    bad = write(tmp_path, "soft.json", model_to_json(prev_token_model("softmax", 1)))
    code, out, _ = run(_verify_construction, ["--dataset", data, "--weights", bad, "--json"], capsys)
    info = json.loads(out)
    assert code == 1 and info["verdict"] == "refuted" and info["counterexample"]["position"] == 3
    lo, hi = (Fraction(x) for x in info["min_margin_enclosure"])
    assert lo <= hi < 0


def undecided_model() -> Model:
    """One softmax head with equal scores over 3 keys (weights exactly 1/3, not dyadic): classes
    a and b read the same count through two different blocks, so their logits tie exactly while
    their balls keep a radius.  Label a: never separable, never verified."""
    lay = Layout.of(("token", 2), ("position", 3), ("A", 2), ("B", 2))
    qk = BlockMatrix(lay, lay).build()
    v = BlockMatrix(lay, lay).set("A", "token", 1).set("B", "token", 1).build()
    out = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "A", 0, 1).entry("class", 1, "B", 0, 1).build()
    return Model(("x", "y"), 3, ("a", "b"), lay, (Layer((Head(qk, v, attention="softmax"),)),), out)


def test_cli_exit_3_for_an_undecided_point(tmp_path, capsys):
    data = write(tmp_path, "d.json", {"format": "depthcert.dataset", "version": 1,
                                      "sequences": [["x", "y", "y"]], "labels": ["a"]})
    w = write(tmp_path, "w.json", model_to_json(undecided_model()))
    code, out, err = run(_verify_construction, ["--dataset", data, "--weights", w, "--max-precision", "128"], capsys)
    assert code == 3, (out, err)
    assert "verdict     UNDECIDED" in out and "not separated from b at 128 bits" in out
    code, out, _ = run(_verify_construction, ["--dataset", data, "--weights", w, "--max-precision", "128", "--json"],
                       capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "undecided" and info["undecided"]["index"] == 0
    assert info["undecided_points"] == 1 and info["undecided"]["precision_bits"] == 128
    lo, hi = (Fraction(x) for x in info["undecided"]["margin_enclosure"])
    assert lo < 0 < hi
    code, out, _ = run(_verify_construction, ["--dataset", data, "--weights", w, "--max-precision", "128",
                                              "--point", "0"], capsys)
    assert code == 3 and "UNDECIDED" in out


def test_exact_zero_difference_is_a_certified_tie(tmp_path, capsys):
    """Identical W_O rows: the difference ball is exactly [0 +- 0], a certified tie: refuted."""
    model = prev_token_model("softmax", 20)
    W = model.W_O.copy()
    W[1] = W[0]
    tied = replace(model, W_O=W)
    v = verify(tied, dataset_from_json(prev_token_dataset()), progress=False)
    assert v.verdict == "refuted" and v.counterexample.tie and v.counterexample.index == 0
    assert v.counterexample.position == 1


V2_CASES = [
    ("attention unknown", ("layers", 0, "heads", 0, "attention"), "linear", "attention must be one of"),
    ("scale on a hardmax head", ("layers", 0, "heads", 0, "scale"), 2, "scale applies to softmax heads only"),
    ("causal not a bool", ("layers", 0, "causal"), "yes", "layers[0].causal"),
    ("layer extra field", ("layers", 0, "norm"), True, "unknown field 'norm'"),
    ("mlp extra field", ("layers", 0, "mlp", "W3"), [[1]], "unknown field 'W3'"),
    ("mlp b1 short", ("layers", 0, "mlp", "b1"), ["1"], "layers[0].mlp.b1: has 1 entries, expected 2"),
    ("mlp b1 entry float", ("layers", 0, "mlp", "b1", 0), 0.5, "layers[0].mlp.b1[0]"),
    ("mlp b2 not a list", ("layers", 0, "mlp", "b2"), 3, "layers[0].mlp.b2"),
    ("mlp W1 short row", ("layers", 0, "mlp", "W1", 1), [1, 2], "layers[0].mlp.W1[1]: has 2 entries"),
    ("mlp W2 wrong rows", ("layers", 0, "mlp", "W2"), [[1, 2]], "layers[0].mlp.W2: has 1 rows"),
    ("outputs unknown", ("outputs",), "every", "\"outputs\" must be"),
    ("constant_row not a bool", ("constant_row",), 1, "constant_row"),
    ("heads not a list", ("layers", 0, "heads"), {}, "layers[0].heads must be a list"),
]


def _hardmax_mlp_obj():
    return model_to_json(prev_token_model("hardmax", mlp=True, constant_row=True))


@pytest.mark.parametrize("name,path,value,needle", V2_CASES, ids=[c[0] for c in V2_CASES])
def test_malformed_v2_weights(tmp_path, capsys, name, path, value, needle):
    obj = _hardmax_mlp_obj()
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    data = write(tmp_path, "data.json", prev_token_dataset())
    w = write(tmp_path, "w.json", obj)
    code, out, err = run(_verify_construction, ["--dataset", data, "--weights", w, "--export",
                                                str(tmp_path / "x.json")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), (code, out, err)
    assert needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.json", "w.json"]


@pytest.mark.parametrize("scale", ["0", "-1/2", 0.5, "x"])
def test_bad_softmax_scale(scale):
    obj = model_to_json(prev_token_model("softmax", 20))
    obj["layers"][0]["heads"][0]["scale"] = scale
    with pytest.raises(BadInput, match=r"layers\[0\]\.heads\[0\]\.scale"):
        model_from_json(obj)


def test_version_1_refuses_version_2_fields():
    v1 = model_to_json(registry.build(ICQA(k=2)).model)
    obj = copy.deepcopy(v1)
    obj["layers"][0][0]["attention"] = "hardmax"
    with pytest.raises(BadInput, match="need \"version\": 2"):
        model_from_json(obj)
    obj = copy.deepcopy(v1)
    obj["layers"][0] = {"heads": obj["layers"][0], "causal": True}
    with pytest.raises(BadInput, match="needs \"version\": 2"):
        model_from_json(obj)
    obj = copy.deepcopy(v1)
    obj["outputs"] = "all"
    with pytest.raises(BadInput, match="needs \"version\": 2"):
        model_from_json(obj)


def test_layer_with_neither_heads_nor_mlp():
    obj = _hardmax_mlp_obj()
    obj["layers"].append({"heads": [], "causal": False})
    with pytest.raises(BadInput, match=r"layers\[1\] has no heads and no mlp"):
        model_from_json(obj)


def test_mlp_only_layer_loads_and_runs():
    obj = _hardmax_mlp_obj()
    mlp = obj["layers"][0]["mlp"]
    obj["layers"].append({"heads": [], "mlp": mlp})
    model = model_from_json(obj)
    assert model.heads == (1, 0) and model.layers[1].mlp is not None
    assert verify(model, dataset_from_json(prev_token_dataset()), progress=False).verified


DATASET_V2_CASES = [
    ("per-position in version 1", {"version": 1, "labels": [[None, "a"]]}, "need \"version\": 2"),
    ("wrong length", {"labels": [[None]]}, "labels[0]: 1 labels for a sequence of length 2"),
    ("all null", {"labels": [[None, None]]}, "labels[0]: labels no position"),
    ("label a float", {"labels": [[None, 1.5]]}, "labels[0][1]"),
    ("mixed scalar and list", {"sequences": [["a", "b"], ["b", "a"]], "labels": [[None, "a"], "b"]}, "labels[1]"),
]


@pytest.mark.parametrize("name,fields,needle", DATASET_V2_CASES, ids=[c[0] for c in DATASET_V2_CASES])
def test_malformed_per_position_dataset(name, fields, needle):
    obj = {"format": "depthcert.dataset", "version": 2, "sequences": [["a", "b"]], **fields}
    with pytest.raises(BadInput) as exc:
        dataset_from_json(obj)
    assert needle in str(exc.value)


def test_last_output_model_on_per_position_dataset_is_bad_input(tmp_path, capsys):
    data = write(tmp_path, "data.json", prev_token_dataset())
    w = write(tmp_path, "w.json", model_to_json(replace(prev_token_model(), outputs="last")))
    code, out, err = run(_verify_construction, ["--dataset", data, "--weights", w], capsys)
    assert code == 2 and "labels every position" in err


@pytest.mark.parametrize("argv,needle", [
    (["--precision", "128"], "apply to softmax models only"),
    (["--max-precision", "70000"], "above the limit 65536"),
    (["--precision", "512", "--max-precision", "256"], "above --max-precision 256"),
    (["--precision", "1"], "at least 2 bits"),
])
def test_precision_options_are_guarded(tmp_path, capsys, argv, needle):
    data = write(tmp_path, "data.json", prev_token_dataset())
    kind = "hardmax" if argv[:2] == ["--precision", "128"] else "softmax"
    w = write(tmp_path, "w.json", model_to_json(prev_token_model(kind, 20 if kind == "softmax" else 1)))
    code, out, err = run(_verify_construction, ["--dataset", data, "--weights", w] + argv, capsys)
    assert code == 2 and needle in err, err


def test_find_dependence_refuses_per_position_datasets(tmp_path, capsys):
    data = write(tmp_path, "data.json", prev_token_dataset())
    code, out, err = run(_find_dependence, ["--dataset", data], capsys)
    assert code == 2 and "labels every position" in err


def test_per_position_counterexample_names_first_failing_position():
    """Break the copy at position 2 only (key 1 tied with key 2 for query 2): the first failing
    position of the first failing point is 2, and its margin 0 is the point's margin."""
    model = prev_token_model("hardmax")
    qk = model.layers[0][0].W_QK
    p1, p2 = model.layout.index("position", 2), model.layout.index("position", 2)
    broken = model.with_weight((0, 0, "W_QK", p1, p2), 1)  # key 2 scores 1 for query 2 too
    task = DatasetTask(*(lambda d: (d["sequences"], d["labels"]))(prev_token_dataset()))
    v = verify(broken, task, progress=False)
    ce = v.counterexample
    assert v.verdict == "refuted" and ce.position == 2 and ce.tie
    assert ce.index == next(i for i, s in enumerate(task._seqs) if s[1] != s[2])
    assert qk[p1, p2] == 0
