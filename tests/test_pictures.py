"""checkers/trace.py against the reference evaluator; show-construction writes its pictures."""
from __future__ import annotations

import builtins
from fractions import Fraction

import numpy as np
import pytest

from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import logits_fraction_reference
from depthcert.checkers.tasks import make_task
from depthcert.checkers.trace import trace
from depthcert.constructions import registry

CASES = [
    ("icqa", {"k": 2}, None, False),
    ("multihop", {"hops": 3, "k": 3}, "doubling", False),
    ("multihop", {"hops": 2, "k": 2}, "paper", True),
    ("sc", {"length": 2, "alphabet": 2}, None, False),
]


@pytest.mark.parametrize("name,opts,variant,as_printed", CASES)
def test_trace_matches_reference(name, opts, variant, as_printed):
    task = make_task(name, **opts)
    model = registry.build(task, variant, as_printed).model
    for i in sorted({0, task.size // 3, task.size - 1}):
        ids, _ = task.decode(np.array([i]))
        tr = trace(model, ids[0])
        assert tr.logits == tuple(logits_fraction_reference(model, list(ids[0])))
        assert len(tr.H) == model.n_layers + 1 and len(tr.attention) == model.n_layers
        n = task.length
        for li, layer in enumerate(model.layers):
            assert len(tr.attention[li]) == len(layer)
            for S in tr.attention[li]:
                assert S.shape == (n, n) and all(isinstance(v, Fraction) and v >= 0 for v in S.flat)
        assert all(isinstance(v, Fraction) for H in tr.H for v in H.flat)


def test_trace_multihop_copy_layer_is_exact():
    """Layer 1 of the multihop copy: pair column 3i attends with score 1 to 3i+2 only."""
    task = make_task("multihop", hops=1, k=2)
    tr = trace(registry.build(task, "linear").model, task.decode(np.array([5]))[0][0])
    S = tr.attention[0][0]
    ones = {(j, q) for (j, q), v in np.ndenumerate(S) if v}
    assert ones == {(2, 0), (5, 3), (6, 7)} and all(S[j, q] == 1 for j, q in ones)


def test_trace_bad_input():
    task = make_task("icqa", k=1)
    model = registry.build(task).model
    with pytest.raises(BadInput):
        trace(model, [])
    with pytest.raises(BadInput):
        trace(model, [99] * task.length)


def _run(argv, capsys):
    from depthcert.cli.show_construction import show_construction_main

    with pytest.raises(SystemExit) as exc:
        show_construction_main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_show_construction_writes_pngs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, out, _ = _run(["multihop", "--hops", "2", "--k", "2", "--variant", "doubling", "--point", "5",
                         "--out", str(tmp_path)], capsys)
    assert code == 0, out
    names = {p.name for p in tmp_path.iterdir()}
    expected = {"overview.png", "residual.png", "classifier.png"}
    expected |= {f"layer{i}-attention.png" for i in (1, 2, 3)} | {f"layer{i}-head1-weights.png" for i in (1, 2, 3)}
    prefix = "multihop-hops2-k2-n_entities2-doubling-p5-"  # task, sizes, variant, point: runs do not mix
    assert names == {prefix + n for n in expected}
    for p in tmp_path.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "point   5:" in out


def test_show_construction_bad_input(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = _run(["multihop", "--hops", "2", "--k", "2", "--point", "999", "--out", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1 and "outside the dataset" in err
    code, _, err = _run(["multihop", "--variant", "nope", "--out", str(tmp_path)], capsys)
    assert code == 2 and "unknown --variant" in err


def test_show_construction_without_matplotlib(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    code, _, err = _run(["icqa", "--k", "1", "--out", str(tmp_path / "x")], capsys)
    assert code == 2
    assert err.strip().endswith("pip install depthcert[plot]") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
