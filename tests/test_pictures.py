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


@pytest.mark.slow
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
    assert err.strip().endswith('pip install "matplotlib>=3.6"') and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


# ---- issue 22 part 7: the pictures name their axes, carry colour bars, and agree on orientation


@pytest.fixture()
def saved_figures(monkeypatch):
    """Every matplotlib figure saved while the test runs (still written to disk)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figures, real = [], Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _images(fig):
    """Axes drawing an image that is not itself a colour bar."""
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def _colorbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


@pytest.mark.slow
def test_show_construction_weight_and_attention_axes_are_named(tmp_path, capsys, saved_figures):
    code, _, _ = _run(["tm", "--l", "3", "--alphabet", "2", "--out", str(tmp_path)], capsys)
    assert code == 0
    qk = att = 0
    for fig in saved_figures:
        assert len(_colorbars(fig)) >= 1
        for ax in _images(fig):
            if ax.get_title().endswith("W_QK"):  # the bilinear form h_key^T W_QK h_query
                qk += 1
                assert ax.get_ylabel().startswith("key feature") and ax.get_xlabel() == "query feature"
            elif ax.get_title().endswith("attention"):  # one row per query, one column per key
                att += 1
                assert ax.get_ylabel() == "query" and ax.get_xlabel().startswith("key")
    assert qk == 5 and att >= 5  # layer 1: 1 head, layer 2: 4 heads (each drawn alone and in the overview)


def test_figure3_axes_colour_bar_and_fonts(tmp_path, saved_figures):
    """docs/img/figure3_*.png drawn again from the stored maps: a labelled colour bar, every map
    with key columns and query rows (as show-construction draws attention), fonts of 9 points
    or more (80 dpi: 10 pixels)."""
    import json
    import os

    from depthcert.training.reproduce import plot_figure3

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "img", "figure3.json"), encoding="utf-8") as fh:
        cases = json.load(fh)["cases"]
    for case in cases:
        plot_figure3(case, str(tmp_path / f"figure3_{case['task']}.png"))
        fig = saved_figures[-1]
        (cb,) = _colorbars(fig)
        assert "attention weight" in cb.get_ylabel()
        maps = _images(fig)
        assert len(maps) == len(case["examples"]) * 2 * (1 + len(case["trained"]))
        for ax in maps:
            assert ax.get_xlabel() == "key (attended position)"
            n = len(case["examples"][0])
            assert ax.images[0].get_array().shape == (n, n)
            for t in ax.get_xticklabels() + ax.get_yticklabels():
                assert t.get_fontsize() >= 9
        first = [ax for ax in maps if ax.get_ylabel()]
        assert len(first) == 1 + len(case["trained"]) and all(ax.get_ylabel().endswith("query") for ax in first)
        # rows are queries: the construction's map has every row summing to 1 (a query's weights)
        A = maps[0].images[0].get_array()
        assert np.allclose(np.asarray(A).sum(axis=1)[np.asarray(A).sum(axis=1) > 0], 1)
