"""Trainer tests (issue 7).  Skipped as a whole when PyTorch is not installed."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from depthcert.checkers.evaluate import Evaluator, logits_fraction_reference  # noqa: E402
from depthcert.checkers.tasks import make_task  # noqa: E402
from depthcert.constructions import registry  # noqa: E402
from depthcert.cli.train import train_main  # noqa: E402
from depthcert.training.data import Sampler, held_out_mask, split_for  # noqa: E402
from depthcert.training.model import from_exact, parsing_qk  # noqa: E402
from depthcert.training.reproduce import map_similarity  # noqa: E402
from depthcert.training.train import TrainConfig, train  # noqa: E402

CONSTRUCTED = [
    ("icqa", {"k": 2, "n_questions": 3, "n_answers": 3}, "copy-matching"),
    ("sc", {"length": 2, "alphabet": 3}, "heads"),
]


def _torch_logits(model, ids):
    tm = from_exact(model)
    with torch.no_grad():
        return tm(torch.as_tensor(ids)).numpy()


@pytest.mark.parametrize("name,options,variant", CONSTRUCTED)
def test_forward_matches_exact_evaluator(name, options, variant):
    """float64 torch forward == exact integer evaluator (float tolerance: a consistency check)."""
    task = make_task(name, **options)
    model = registry.build(task, variant, as_printed=False).model
    idx = np.arange(min(task.size, 64))
    ids, _ = task.decode(idx)
    num, den = Evaluator(model).logits(ids)
    exact = np.array(num, dtype=np.float64) / float(den)
    got = _torch_logits(model, ids)
    scale = max(1.0, float(np.abs(exact).max()))
    np.testing.assert_allclose(got, exact, rtol=1e-9, atol=1e-9 * scale)


@pytest.mark.parametrize("name,options,variant", CONSTRUCTED)
def test_forward_matches_fraction_reference(name, options, variant):
    task = make_task(name, **options)
    model = registry.build(task, variant, as_printed=False).model
    ids, _ = task.decode(np.arange(3))
    got = _torch_logits(model, ids)
    for row, seq in zip(got, ids):
        ref = np.array([float(v) for v in logits_fraction_reference(model, list(seq))])
        np.testing.assert_allclose(row, ref, rtol=1e-9, atol=1e-9)


def test_multihop_construction_forward_if_available():
    if not registry.variants("multihop"):
        pytest.skip("no multihop construction")
    task = make_task("multihop", hops=2, k=2, n_entities=3)
    model = registry.build(task, None, as_printed=False).model
    ids, _ = task.decode(np.arange(task.size))
    num, den = Evaluator(model).logits(ids)
    np.testing.assert_allclose(_torch_logits(model, ids), np.array(num, dtype=np.float64) / float(den), rtol=1e-9, atol=1e-9)


def test_smoke_train_icqa():
    cfg = TrainConfig(task="icqa", layers=2, steps=5, seed=1, eval_every=2, eval_size=50,
                      task_options=(("k", 2),), qk_init="construction")
    result, model = train(cfg)
    assert len(result.steps) == 5
    assert [e.step for e in result.evals] == [2, 4, 5]
    assert 0.0 <= result.final.test_acc <= 1.0
    json.dumps(result.to_json())
    assert model.shape.heads == (1, 1)


def test_smoke_train_is_reproducible():
    cfg = TrainConfig(task="sc", layers=1, steps=4, seed=3, eval_size=20, task_options=(("length", 2), ("alphabet", 3)))
    a, _ = train(cfg)
    b, _ = train(cfg)
    assert a.steps == b.steps


@pytest.mark.parametrize("name,options", [("icqa", {"k": 2}), ("tm", {"l": 3, "alphabet": 5})])
def test_training_batches_avoid_held_out(name, options):
    task = make_task(name, **options)
    split = split_for(task)
    s = Sampler(task, np.random.default_rng(0))
    idx, ids, _ = s.train_batch(200)
    assert not held_out_mask(task, split, idx, ids).any()
    eidx, eids, _ = s.eval_set(100)
    assert held_out_mask(task, split, eidx, eids).all()


def test_parsing_init_shape_and_rejects_other_tasks():
    task = make_task("tm", l=3, alphabet=4)
    W = parsing_qk(task, len(task.vocab) + task.length + 2)
    assert W.shape == (len(task.vocab) + task.length + 2,) * 2
    from depthcert.checkers.errors import BadInput

    with pytest.raises(BadInput):
        parsing_qk(make_task("icqa", k=2), 20)


def test_map_similarity_identity():
    A = np.random.default_rng(0).random((3, 5, 5))
    s = map_similarity(A, A)
    assert s["cosine"] == pytest.approx(1.0)
    assert s["mass_on_construction_support"] == pytest.approx(1.0)


def test_cli_json_and_log(tmp_path, capsys):
    log = tmp_path / "run.json"
    rc = train_main(["icqa", "--k", "2", "--layers", "1", "--steps", "3", "--eval-size", "20", "--json", "--log", str(log)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"].startswith("OBSERVED") and out["verdict"] == "observed" and out["command"] == "train"
    data = json.loads(log.read_text())
    assert len(data["steps"]) == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["nosuchtask", "--steps", "1"],
        ["icqa", "--layers", "0", "--steps", "1"],
        ["icqa", "--width", "3", "--steps", "1"],
        ["icqa", "--alphabet", "3", "--steps", "1"],
        ["icqa", "--steps", "1", "--log", "/nonexistent-folder/x.json"],
        ["icqa", "--steps", "abc"],
        ["sc", "--qk-init", "construction", "--variant", "nope", "--steps", "1"],
    ],
)
def test_cli_bad_input_exits_2_one_line(argv, capsys):
    rc = train_main(argv + ["--json"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_export_of_construction_init_is_exactly_checkable():
    """Rounding a torch copy of a verified construction gives back a model the exact evaluator accepts."""
    from depthcert.training.export import exact_accuracy, to_exact

    task = make_task("icqa", k=2, n_questions=3, n_answers=3)
    exact = registry.build(task, "copy-matching", as_printed=False).model
    tm = from_exact(exact)
    chk = exact_accuracy(to_exact(tm, task, bits=16), task, bits=16)
    assert chk.points == task.size
    assert chk.correct == task.size


def test_cli_exact_check(capsys):
    rc = train_main(["icqa", "--k", "2", "--n-questions", "2", "--n-answers", "3", "--steps", "2",
                     "--eval-size", "10", "--json", "--exact-check", "8"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact_check"]["points"] == make_task("icqa", k=2, n_questions=2, n_answers=3).size


def test_reproduce_figure2_tiny(tmp_path):
    """The sweep pipeline end to end at a few steps: JSON, PNG and the markdown report."""
    pytest.importorskip("matplotlib")
    from depthcert.cli.train import reproduce_main

    out = tmp_path / "img"
    out.mkdir()
    doc = tmp_path / "experiments.md"
    rc = reproduce_main(["figure2", "--tasks", "icqa,ictm", "--steps", "3", "--seeds", "1", "--out", str(out),
                         "--doc", str(doc), "--json"])
    assert rc == 0
    data = json.loads((out / "figure2.json").read_text())
    assert {r["task"] for r in data["runs"]} == {"icqa", "ictm"}
    assert any(r.get("error_groups") for r in data["runs"])
    assert (out / "figure2.png").stat().st_size > 0
    text = doc.read_text()
    assert "OBSERVED" in text and "| icqa |" in text


def test_reproduce_bad_input(tmp_path, capsys):
    from depthcert.cli.train import reproduce_main

    assert reproduce_main(["figure9"]) == 2
    (tmp_path / "a-file").write_text("")
    assert reproduce_main(["figure2", "--out", str(tmp_path / "a-file")]) == 2  # --out is created, a file is refused
    assert reproduce_main(["figure2", "--tasks", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error:") for line in err)


def test_reproduce_reference_from_any_folder(tmp_path, monkeypatch, capsys):
    """`reproduce reference --out DIR` from a folder that is not the checkout: --out is created and
    holds the report (experiments.md) as well as reference.json."""
    from depthcert.cli.train import reproduce_main

    monkeypatch.chdir(tmp_path)
    rc = reproduce_main(["reference", "--out", "new/results", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["verdict"] == "observed" and out["doc"] == os.path.join("new/results", "experiments.md")
    assert (tmp_path / "new/results/reference.json").exists() and (tmp_path / "new/results/experiments.md").exists()


def test_per_layer_heads_config_and_cli(capsys):
    """--heads 1,1,4 gives one head count per layer (paper appendix 9.2's [h1, h2, ...])."""
    from depthcert.checkers.errors import BadInput
    from depthcert.training.train import parse_heads

    assert parse_heads("1,1,4") == (1, 1, 4) and parse_heads("4") == 4 and parse_heads("[2,3]") == (2, 3)
    cfg = TrainConfig(task="icqa", layers=2, heads=(1, 3), steps=2, eval_every=1, eval_size=20,
                      task_options=(("k", 2),), qk_init="construction")
    result, model = train(cfg)
    assert model.shape.heads == (1, 3) and cfg.layer_heads == (1, 3)
    with pytest.raises(BadInput):
        TrainConfig(task="icqa", layers=3, heads=(1, 2))
    with pytest.raises(BadInput):
        parse_heads("1,x")
    assert train_main(["icqa", "--k", "2", "--layers", "2", "--heads", "1,2,3", "--steps", "1", "--json"]) == 2
    assert "lists 3 layers" in capsys.readouterr().err
    rc = train_main(["icqa", "--k", "2", "--layers", "2", "--heads", "2,1", "--steps", "2", "--eval-size", "10",
                     "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["model"]["heads"] == [2, 1]


def test_reproduce_heads_figure_tiny(tmp_path):
    """Figures 4-7 pipeline at a few steps: JSON, PNG and the report section."""
    pytest.importorskip("matplotlib")
    from depthcert.cli.train import reproduce_main

    out = tmp_path / "img"
    out.mkdir()
    doc = tmp_path / "experiments.md"
    assert reproduce_main(["figure5", "--steps", "2", "--seeds", "1", "--out", str(out), "--doc", str(doc),
                           "--json"]) == 0
    data = json.loads((out / "figure5.json").read_text())
    assert {tuple(r["heads"]) for r in data["runs"]} == {(1, 1), (2, 2), (4, 4), (1, 4), (4, 1)}
    assert (out / "figure5.png").stat().st_size > 0
    text = doc.read_text()
    assert "## Figure 5" in text and "| [1,4] |" in text


def test_cli_exact_check_decides_the_float32_weights_as_trained(capsys):
    """--exact-check without BITS: every weight the exact rational its float32 value is, no rounding."""
    rc = train_main(["icqa", "--k", "2", "--n-questions", "2", "--n-answers", "3", "--steps", "2",
                     "--eval-size", "10", "--json", "--exact-check"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    chk = out["exact_check"]
    assert chk["bits"] is None and "float32 weights" in chk["status"]
    assert chk["points"] == make_task("icqa", k=2, n_questions=2, n_answers=3).size


def test_to_exact_keeps_every_float32_weight_exactly():
    from fractions import Fraction

    from depthcert.training.export import to_exact

    task = make_task("icqa", k=2, n_questions=3, n_answers=3)
    tm = from_exact(registry.build(task, "copy-matching", as_printed=False).model)
    with torch.no_grad():
        tm.W_O.add_(torch.full_like(tm.W_O, 1e-3))
    exact = to_exact(tm, task)
    w = tm.W_O.detach().double().numpy()
    assert all(exact.W_O[i, j] == Fraction(float(w[i, j])) for i in range(w.shape[0]) for j in range(w.shape[1]))


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_trained_weights_are_decided_exactly(causal):
    """A softmax-attention model of the training code, its float32 weights as they are: the exact
    verdicts (checkers.accuracy) agree with the float64 forward on every point whose float margin is
    clear of rounding, and the certified softmax logits enclose the forward's."""
    from depthcert.checkers.accuracy import decide_all
    from depthcert.training.export import to_exact
    from depthcert.training.model import AttentionOnly, ModelShape

    task = make_task("icqa", k=2, n_questions=3, n_answers=3)
    shape = ModelShape(vocab_size=len(task.vocab), max_length=task.length, dim=len(task.vocab) + task.length + 2,
                       heads=(1, 2), n_classes=len(task.classes), attention="softmax", causal=causal)
    tm = AttentionOnly(shape, dtype=torch.float32)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7)
    exact = to_exact(tm, task)
    assert {h.attention for L in exact.layers for h in L} == {"softmax"}
    v = decide_all(exact, task)
    ids, labels = task.decode(np.arange(task.size))
    with torch.no_grad():
        logits = tm.double()(torch.tensor(ids)).numpy()
    own = logits[np.arange(task.size), labels]
    rest = logits.copy()
    rest[np.arange(task.size), labels] = -np.inf
    margin = own - rest.max(axis=1)
    clear = np.abs(margin) > 1e-9
    wrong = np.zeros(task.size, bool)
    wrong[np.asarray(v.wrong, dtype=int)] = True
    assert len(v.undecided) == 0 and 0 < v.correct < task.size
    assert (wrong[clear] == (margin[clear] <= 0)).all()
    assert v.correct == int((margin > 0).sum())


def test_cli_exact_check_decides_softmax_attention(capsys):
    rc = train_main(["icqa", "--k", "2", "--n-questions", "2", "--n-answers", "3", "--steps", "5", "--attention", "softmax",
                     "--eval-size", "10", "--json", "--exact-check"])
    assert rc == 0
    chk = json.loads(capsys.readouterr().out)["exact_check"]
    assert chk["bits"] is None and chk["points"] == make_task("icqa", k=2, n_questions=2, n_answers=3).size
    assert chk["evaluator"].startswith("certified")
