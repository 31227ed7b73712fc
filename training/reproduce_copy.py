"""`reproduce copy`: the noisy copy task across depth, heads, width and length (OBSERVED, not proven),
next to the exact one-layer construction (training/copy_exact.py, EXACT).

The study in shared/paper/related trains standard transformers (softmax attention, LayerNorm,
MLP) with depth L = 2, 4, 8, heads h = 4, 8 and hidden sizes 128-512 on a copy task with 10%
token noise, lengths 10-100, and measures a redundancy ratio (share of heads whose gradient norm
is about 0).  Here, at sizes two CPU cores train in minutes: depth 1, 2, 4, 8; heads 1, 4, 8;
width 16-64; lengths 8, 16, 32 (and 64 for shallow models); noise 0.1 (and 0 for comparison);
redundancy by gradient norm and by ablation (training/copy_train.py).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, replace

import numpy as np

from depthcert.checkers.atomic import write_json_atomic
from depthcert.training.copy_train import CopyConfig

ALPHABET = 10
NOISE = 0.1
GRID_LENGTHS = (8, 16, 32)
GRID_DEPTHS = (1, 2, 4, 8)
GRID_HEADS = (1, 4, 8)
GRID_WIDTH = 32
STEPS = 300
EVAL_SIZE = 256
EXACT_SIZES = (4, 4)  # n, m for the exact checks (m^n = 256 inputs)
EXACT_BITS = 12


def _depth_axes(ax, depths, n, ylabel=None):
    """A panel of one length n: layers on a log2 axis, a ratio in [0, 1] on the other."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths)
    ax.set_xticklabels(depths)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"length n = {n}", fontsize=9)
    ax.set_xlabel("layers")
    if ylabel:
        ax.set_ylabel(ylabel)


def plan(steps: int | None = None, quick: bool = False) -> list[tuple[str, CopyConfig, int | None]]:
    """(group, config, exact-check bits) for every run of the study; `quick` is a smoke-test subset."""
    s = steps or STEPS
    base = CopyConfig(alphabet=ALPHABET, noise=NOISE, width=GRID_WIDTH, steps=s, eval_every=max(1, s // 30),
                      eval_size=EVAL_SIZE)
    lengths, depths, heads = (GRID_LENGTHS, GRID_DEPTHS, GRID_HEADS) if not quick else ((4,), (1, 2), (1, 4))
    runs = []
    for n in lengths:
        for L in depths:
            for H in heads:
                runs.append(("grid", replace(base, length=n, layers=L, heads=H), None))
    if quick:
        n_long = lengths[-1]
        runs.append(("width", replace(base, length=n_long, layers=2, heads=4, width=16), None))
        runs.append(("clean", replace(base, length=n_long, layers=1, heads=4, noise=0.0), None))
    else:
        n_long = lengths[-1]
        for w in (16, 64):
            runs.append(("width", replace(base, length=n_long, layers=2, heads=4, width=w), None))
        for L in depths:
            runs.append(("clean", replace(base, length=n_long, layers=L, heads=8, noise=0.0), None))
        for L in (1, 2):
            runs.append(("long", replace(base, length=64, layers=L, heads=4), None))
    n, m = EXACT_SIZES
    for noise in (0.0, NOISE):
        runs.append(("exact", replace(base, length=n, alphabet=m, noise=noise, arch="attention-only", layers=1,
                                      heads=1, width=32, lr=0.01, steps=max(s, 400) if not quick else s), EXACT_BITS))
    return runs


def _one(job) -> dict:
    group, config, bits = job
    from depthcert.training.copy_train import exact_check_copy, train_copy

    result, model = train_copy(config)
    if bits is not None:
        result.exact_check = exact_check_copy(model, config, bits)
    out = result.to_json()
    out["group"] = group
    return out


def exact_constructions() -> list[dict]:
    """The Lemma 1 construction verified on every clean input, at a few sizes and attention kinds."""
    from depthcert.training.copy_exact import softmax_scale_needed, verify_copy

    rows = []
    for n, m, att, causal in ((4, 4, "relu", True), (6, 4, "relu", True), (8, 3, "relu", True),
                              (6, 4, "relu", False), (6, 4, "hardmax", True), (4, 4, "softmax", True),
                              (6, 3, "softmax", True)):
        t0 = time.perf_counter()
        model, v = verify_copy(n, m, att, causal=causal)
        enc = getattr(v, "margin_enclosure", None)
        rows.append({"length": n, "alphabet": m, "attention": att, "kinds": model.kinds(), "layers": model.n_layers,
                     "heads": list(model.heads), "dim": model.dim, "verdict": v.verdict,
                     "points": v.points_total, "checked": v.points_checked,
                     "min_margin": str(v.min_margin) if v.min_margin is not None else None,
                     "margin_enclosure": [float(enc[0]), float(enc[1])] if enc else None,
                     "scale": str(softmax_scale_needed(n)) if att == "softmax" else None,
                     "seconds": time.perf_counter() - t0})
    return rows


def run_copy(out: str, steps: int | None, seeds: int | None, progress: bool, jobs: int = 1,
             quick: bool = False) -> dict:
    from depthcert.training.progress import progress as make_progress
    from depthcert.training.reproduce import _machine

    work = plan(steps, quick)
    bar = make_progress(progress, len(work), "copy")
    t0 = time.perf_counter()
    runs: list[dict] = []
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for r in pool.map(_one, work):
                runs.append(r)
                if bar is not None:
                    bar.update(1)
    else:
        for job in work:
            runs.append(_one(job))
            if bar is not None:
                c = job[1]
                bar.set_postfix(n=c.length, L=c.layers, H=c.heads, acc=f"{runs[-1]['final']['acc']:.2f}")
                bar.update(1)
    if bar is not None:
        bar.close()
    data = {"experiment": "copy", "status": "OBSERVED (trained, not proven); the construction rows are EXACT",
            "seconds": time.perf_counter() - t0, "jobs": jobs, "steps": steps or STEPS, "quick": quick,
            "defaults": asdict(CopyConfig()), "runs": runs, "constructions": exact_constructions(),
            "machine": _machine()}
    write_json_atomic(os.path.join(out, "copy.json"), data)
    plot_copy(data, out)
    return data


def _grid(data, n, L, H):
    return next((r for r in data["runs"] if r["group"] == "grid" and r["config"]["length"] == n
                 and r["config"]["layers"] == L and r["config"]["heads"] == H), None)


def plot_copy(data: dict, out: str) -> None:
    """copy-accuracy.png, copy-loss.png, copy-redundancy.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [r for r in data["runs"] if r["group"] == "grid"]
    if not grid:
        return
    lengths = sorted({r["config"]["length"] for r in grid})
    depths = sorted({r["config"]["layers"] for r in grid})
    heads = sorted({r["config"]["heads"] for r in grid})
    cmap = plt.get_cmap("tab10")
    sup = "OBSERVED (trained, not proven): copy task, noise {:.0%}, width {}, {} steps, 1 seed".format(
        grid[0]["config"]["noise"], grid[0]["config"]["width"], grid[0]["config"]["steps"])

    # accuracy against depth
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.6), squeeze=False)
    for i, n in enumerate(lengths):
        ax = axes[0][i]
        for hi, H in enumerate(heads):
            rs = [_grid(data, n, L, H) for L in depths]
            ax.plot(depths, [r["final"]["acc"] if r else np.nan for r in rs], "o-", color=cmap(hi), label=f"{H} heads")
            ax.plot(depths, [r["final"]["clean_acc"] if r else np.nan for r in rs], "x--", color=cmap(hi), alpha=0.6)
        ax.axhline(grid[0]["ceiling"], color="gray", ls=":", lw=1, label="ceiling 1 - noise")
        _depth_axes(ax, depths, n, "held-out token accuracy\n(o noisy input, x clean input)" if i == 0 else None)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(sup, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "copy-accuracy.png"), dpi=80)
    plt.close(fig)

    # held-out loss curves: rows = heads, columns = lengths, one curve per depth
    fig, axes = plt.subplots(len(heads), len(lengths), figsize=(4.0 * len(lengths), 2.8 * len(heads)), squeeze=False)
    for hi, H in enumerate(heads):
        for i, n in enumerate(lengths):
            ax = axes[hi][i]
            for di, L in enumerate(depths):
                r = _grid(data, n, L, H)
                if r is None:
                    continue
                ax.plot([e["step"] for e in r["evals"]], [e["loss"] for e in r["evals"]], color=cmap(di),
                        label=f"{L} layer{'s' if L > 1 else ''}")
            ax.set_yscale("log")
            ax.set_title(f"n = {n}, {H} head{'s' if H > 1 else ''}", fontsize=8)
            if hi == len(heads) - 1:
                ax.set_xlabel("step")
            if i == 0:
                ax.set_ylabel("held-out loss")
            if hi == 0 and i == 0:
                ax.legend(fontsize=7)
    fig.suptitle(sup, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "copy-loss.png"), dpi=70)
    plt.close(fig)

    # redundancy ratio two ways, heads >= 2
    multi = [H for H in heads if H > 1]
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.2 * len(lengths), 3.4), squeeze=False)
    for i, n in enumerate(lengths):
        ax = axes[0][i]
        for hi, H in enumerate(multi):
            rs = [_grid(data, n, L, H) for L in depths]
            ax.plot(depths, [r["redundancy"]["ratio_grad"] if r else np.nan for r in rs], "o-", color=cmap(hi + 1),
                    label=f"{H} heads, gradient norm")
            ax.plot(depths, [r["redundancy"]["ratio_ablation"] if r else np.nan for r in rs], "s--",
                    color=cmap(hi + 1), label=f"{H} heads, ablation")
        _depth_axes(ax, depths, n, "redundancy ratio" if i == 0 else None)
        ax.legend(fontsize=6, loc="best")
    fig.suptitle(sup + "\nredundant: gradient norm < 5% of the largest head's, or ablation drop < 1 point", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "copy-redundancy.png"), dpi=80)
    plt.close(fig)
