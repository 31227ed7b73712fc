"""`reproduce figure2 | figure3 | ictm2 | all`: the paper's experiments at CPU-minute sizes.

Each experiment stores its numbers in <out>/<name>.json and the whole report docs/experiments.md
is regenerated from whichever of those files exist.  Every number here is OBSERVED from training
runs (one optimiser, a few seeds, small sizes); none of it is proven.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from depthcert.checkers.atomic import read_json, write_json_atomic
from depthcert.checkers.errors import BadInput
from depthcert.training.train import TrainConfig, TrainResult, train

SOLVED = 0.95  # "solves" = mean final held-out accuracy >= this


@dataclass(frozen=True)
class Column:
    """One task column of paper Figure 2."""

    task: str
    title: str
    options: tuple[tuple[str, object], ...]
    depths: tuple[int, ...]
    steps: int
    train: tuple[tuple[str, object], ...]
    paper: str  # what the paper reports for this column
    solves_from: int  # the paper's smallest depth that solves the task


FIGURE2 = (
    Column(
        "sc", "Memorization (SC)", (("length", 3), ("alphabet", 4)), (1, 2, 3), 1000,
        (("qk_init", "uniform"), ("out_init", "uniform"), ("width", 20)),
        "1 layer memorizes (all depths reach 100%)", 1,
    ),
    Column(
        "icqa", "Reasoning (ICQA)", (("k", 3),), (1, 2, 3), 1000,
        (("qk_init", "construction"),),
        "1 layer ~ random guess; 2 layers learn with enough steps", 2,
    ),
    Column(
        "tm", "Generalization (TM)", (("l", 4), ("alphabet", 8)), (1, 2, 3), 1500,
        (("qk_init", "construction"),),
        "1 layer fails; 2 layers generalize quickly", 2,
    ),
    Column(
        "ictm", "Contextual generalization (ICTM)", (("k", 2), ("l", 3), ("alphabet", 6), ("n_answers", 4)),
        (1, 2, 3, 4), 2500,
        (("qk_init", "construction"),),
        "1 and 2 layers ~ random guess; 3 layers solve it; 4 layers learn faster (appendix 9.3)", 3,
    ),
)
DEFAULT_SEEDS = 2


def _cmd(argv: list[str]) -> str:
    return "reproduce " + " ".join(argv)


def _progress(progress: bool, total: int, desc: str):
    """A bar on a terminal, plain lines every tenth when the output is a file (training/progress.py)."""
    from depthcert.training.progress import progress as make_progress

    return make_progress(progress, total, desc)


def _summary(result: TrainResult, baseline: float) -> dict:
    f = result.final
    return {
        "task": result.config.task,
        "layers": result.config.layers,
        "heads": result.config.heads,
        "width": result.shape.dim,
        "seed": result.config.seed,
        "steps": f.step,
        "qk_init": result.config.qk_init,
        "optimizer": result.config.optimizer,
        "lr": result.config.lr,
        "attention": result.config.attention,
        "final_test_acc": f.test_acc,
        "final_test_loss": f.test_loss,
        "final_train_acc": f.train_acc,
        "final_train_loss": f.train_loss,
        "majority_baseline": baseline,
        "seconds": result.seconds,
        "diverged": result.diverged,
        "curve": [[e.step, e.test_acc, e.train_loss, e.test_loss] for e in result.evals],
    }


def _baseline(config: TrainConfig) -> float:
    """Majority-class accuracy on the same held-out set the run is evaluated on."""
    from depthcert.training.data import Sampler
    from depthcert.training.train import build_task

    task = build_task(config)
    _, _, y = Sampler(task, np.random.default_rng(config.seed)).eval_set(config.eval_size)
    return float(np.bincount(y, minlength=len(task.classes)).max() / len(y))


def ictm_error_groups(model, config: TrainConfig, count: int = 3000) -> list[dict]:
    """Held-out ICTM errors grouped by (template of context question 0, of question 1, of the query)."""
    import torch

    from depthcert.checkers.tasks.template import canonical_patterns, pattern_name
    from depthcert.training.data import Sampler
    from depthcert.training.train import build_task

    task = build_task(config)
    _, ids, y = Sampler(task, np.random.default_rng(10_000 + config.seed)).eval_set(count)
    with torch.no_grad():
        pred = model(torch.as_tensor(ids)).argmax(1).numpy()
    step = task.l + 2
    starts = [i * step for i in range(task.k + 1)]
    names = [[pattern_name(p) for p in canonical_patterns(ids[:, a:a + task.l])] for a in starts]
    groups: dict[tuple, list[int]] = {}
    for r in range(len(ids)):
        key = tuple(names[b][r] for b in range(len(starts)))
        g = groups.setdefault(key, [0, 0])
        g[0] += 1
        g[1] += int(pred[r] != y[r])
    rows = [{"templates": list(k), "points": v[0], "wrong": v[1]} for k, v in groups.items()]
    rows.sort(key=lambda d: (-d["wrong"], -d["points"]))
    return rows


def run_figure2(out: str, steps: int | None, seeds: int | None, tasks, progress: bool) -> dict:
    cols = [c for c in FIGURE2 if tasks is None or c.task in tasks]
    n_seeds = seeds or DEFAULT_SEEDS
    total = sum(len(c.depths) for c in cols) * n_seeds
    bar = _progress(progress, total, "figure2")
    runs = []
    t0 = time.perf_counter()
    for col in cols:
        for depth in col.depths:
            for seed in range(n_seeds):
                cfg = TrainConfig(task=col.task, layers=depth, steps=steps or col.steps, seed=seed,
                                  task_options=col.options, eval_every=max(1, (steps or col.steps) // 30),
                                  **dict(col.train))
                result, model = train(cfg)
                summary = _summary(result, _baseline(cfg))
                if col.task == "ictm":
                    summary["error_groups"] = ictm_error_groups(model, cfg)
                runs.append(summary)
                if bar is not None:
                    bar.set_postfix(task=col.task, L=depth, acc=f"{result.final.test_acc:.2f}")
                    bar.update(1)
    if bar is not None:
        bar.close()
    data = {
        "experiment": "figure2",
        "status": "OBSERVED (trained, not proven)",
        "seconds": time.perf_counter() - t0,
        "seeds": n_seeds,
        "steps_override": steps,
        "columns": [asdict(c) for c in cols],
        "runs": runs,
        "machine": _machine(),
    }
    write_json_atomic(os.path.join(out, "figure2.json"), data)
    plot_figure2(data, os.path.join(out, "figure2.png"))
    return data


REFERENCE_CONFIG = TrainConfig(task="icqa", layers=2, steps=200, seed=0, qk_init="construction", eval_every=50,
                               task_options=(("k", 3),))


def reference_run(progress: bool = False) -> dict:
    """The documented reference experiment (docs/experiments.md, "Reproducibility"); a few seconds."""
    from depthcert.training.report import REFERENCE_RUN

    t0 = time.perf_counter()
    result, _ = train(REFERENCE_CONFIG, progress=progress)
    n = result.eval_points
    evals = [{"step": e.step, "correct": int(round(e.test_acc * n)), "evaluated": n, "test_acc": e.test_acc,
              "test_loss": e.test_loss, "train_loss": e.train_loss} for e in result.evals]
    return {"experiment": "reference", "status": "OBSERVED (trained, not proven)", "train_command": REFERENCE_RUN["command"],
            "seconds": time.perf_counter() - t0, "evals": evals,
            "step_losses": [lo for _, lo, _ in result.steps], "machine": _machine()}


def run_reference(out: str, steps, seeds, tasks, progress: bool) -> dict:
    data = reference_run(progress)
    write_json_atomic(os.path.join(out, "reference.json"), data)
    return data


def _machine() -> dict:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count()}


def plot_curves(ax_a, ax_l, rs: list[dict], color, label: str) -> None:
    """Held-out accuracy (ax_a) and training loss (ax_l) of the runs `rs` of one configuration:
    the mean over seeds, and their range shaded, up to the shortest run's last evaluation."""
    m = min(len(r["curve"]) for r in rs)
    steps = np.array([p[0] for p in rs[0]["curve"][:m]])
    acc = np.array([[p[1] for p in r["curve"][:m]] for r in rs])
    loss = np.array([[p[2] if p[2] is not None else np.nan for p in r["curve"][:m]] for r in rs])
    ax_a.plot(steps, acc.mean(0), color=color, label=label)
    ax_a.fill_between(steps, acc.min(0), acc.max(0), color=color, alpha=0.15)
    ax_l.plot(steps, np.nanmean(loss, 0), color=color)
    ax_l.fill_between(steps, np.nanmin(loss, 0), np.nanmax(loss, 0), color=color, alpha=0.15)


def finish_panel(ax_a, ax_l, spec: dict, title: str, baselines: list, first: bool) -> None:
    """Title (task options), majority-class line, axes labels (first column only) and legend."""
    if baselines:
        ax_a.axhline(np.mean(baselines), color="gray", ls=":", lw=1, label="majority class")
    opts = ", ".join(f"{k}={v}" for k, v in spec["options"])
    evald = " (eval = training points)" if spec["task"] == "sc" else ""
    ax_a.set_title(f"{title}\n{opts}{evald}", fontsize=9)
    ax_a.set_ylim(-0.02, 1.02)
    ax_a.set_ylabel("held-out accuracy" if first else "")
    ax_l.set_ylabel("training loss" if first else "")
    ax_l.set_yscale("log")
    ax_l.set_xlabel("step")
    ax_a.legend(fontsize=7, loc="lower right")


def plot_figure2(data: dict, path: str) -> None:
    """Paper Figure 2 layout: one column per task; held-out accuracy (top), training loss (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = data["columns"]
    fig, axes = plt.subplots(2, len(cols), figsize=(3.6 * len(cols), 5.6), squeeze=False)
    colors = {1: "tab:red", 2: "tab:blue", 3: "tab:green", 4: "tab:purple"}
    for ci, col in enumerate(cols):
        ax_a, ax_l = axes[0][ci], axes[1][ci]
        for depth in col["depths"]:
            rs = [r for r in data["runs"] if r["task"] == col["task"] and r["layers"] == depth]
            if not rs:
                continue
            plot_curves(ax_a, ax_l, rs, colors.get(depth, None), f"{depth} layer{'s' if depth > 1 else ''}")
        base = [r["majority_baseline"] for r in data["runs"] if r["task"] == col["task"]]
        finish_panel(ax_a, ax_l, col, col["title"], base, first=ci == 0)
    fig.suptitle(f"OBSERVED (trained, not proven): mean and range over {data['seeds']} seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Figure 3: trained vs constructed attention maps


@dataclass(frozen=True)
class MapCase:
    task: str
    options: tuple[tuple[str, object], ...]
    variants: tuple[str, ...]  # construction variants to try, in order
    examples: tuple[tuple[str, ...], ...]  # token sequences (paper Figure 3 style)
    steps: int


FIGURE3 = (
    MapCase("icqa", (("k", 2), ("n_questions", 4), ("n_answers", 4)), ("copy-matching",),
            (("q0", "=", "a1", "q1", "=", "a2", "q0", "="), ("q0", "=", "a1", "q1", "=", "a2", "q1", "=")), 3000),
    MapCase("tm", (("l", 4), ("alphabet", 8)), ("heads", "ternary"),
            (("t0", "t0", "t1", "t2", "<cls>"), ("t0", "t1", "t1", "t2", "<cls>")), 3000),
)


def column_normalize(A: np.ndarray) -> np.ndarray:
    """Each query column (last axis) as a distribution over keys; all-zero columns stay zero."""
    A = np.maximum(np.asarray(A, dtype=float), 0.0)
    s = A.sum(axis=-2, keepdims=True)
    return np.divide(A, s, out=np.zeros_like(A), where=s > 0)


def map_similarity(trained: np.ndarray, constructed: np.ndarray) -> dict:
    """Cosine similarity of column-normalized maps (all queries, last query) and the fraction of
    trained attention mass on the keys the construction attends to (mean over query columns the
    construction uses).  Maps are (..., n_keys, n_queries)."""
    T, C = column_normalize(trained), column_normalize(constructed)

    def cos(a, b):
        a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        if not (nb > 0).any():
            return float("nan")  # the construction does not attend from these queries
        ok = (na > 0) & (nb > 0)
        vals = np.where(ok, (a * b).sum(1) / np.where(ok, na * nb, 1), 0.0)
        return float(np.mean(vals[nb > 0]))

    support = C > 0
    used = support.any(axis=-2)  # (B, n_queries)
    mass = (T * support).sum(axis=-2)
    return {
        "cosine": cos(T, C),
        "cosine_last_query": cos(T[..., -1:], C[..., -1:]),
        "mass_on_construction_support": float(mass[used].mean()) if used.any() else float("nan"),
        "last_query_mass_on_support": float(mass[..., -1][used[..., -1]].mean()) if used[..., -1].any() else float("nan"),
    }


def _head_mean(maps):
    """Per layer: attention maps averaged over heads, (B, n, n)."""
    return [m.mean(dim=1).numpy() for m in maps]


def run_figure3(out: str, steps: int | None, seeds: int | None, tasks, progress: bool) -> dict:
    import torch

    from depthcert.checkers.tasks import make_task
    from depthcert import constructions
    from depthcert.training.data import Sampler
    from depthcert.training.model import from_exact, parsing_qk

    cases = [c for c in FIGURE3 if tasks is None or c.task in tasks]
    results = []
    t0 = time.perf_counter()
    bar = _progress(progress, 2 * len(cases), "figure3")
    for case in cases:
        task = make_task(case.task, **dict(case.options))
        cons, note = None, ""
        known = constructions.variants(task.name)
        for v in case.variants:
            if v in known:
                cons = constructions.build(task, v, as_printed=False)
                break
        ids = np.array([[task.vocab.index(t) for t in ex] for ex in case.examples])
        _, ev_ids, _ = Sampler(task, np.random.default_rng(0)).eval_set(500)
        if cons is not None:
            cmodel = from_exact(cons.model)
            with torch.no_grad():
                _, cmaps = cmodel(torch.as_tensor(ids), return_attention=True)
                _, cmaps_ev = cmodel(torch.as_tensor(ev_ids), return_attention=True)
            cmaps, cmaps_ev = _head_mean(cmaps), _head_mean(cmaps_ev)
            cname = f"construction {cons.variant} ({cons.theorem})"
        else:
            # no verified construction in the registry yet: compare layer 1 with the paper's parsing pattern
            W = torch.as_tensor(parsing_qk(task, len(task.vocab) + task.length), dtype=torch.float64)

            def parse_maps(x):
                from depthcert.training.model import AttentionOnly, ModelShape

                m = AttentionOnly(ModelShape(len(task.vocab), task.length, W.shape[0], (1,), len(task.classes)),
                                  dtype=torch.float64)
                with torch.no_grad():
                    m.W_QK[0][0].copy_(W)
                    return _head_mean([m.scores(m.embed(torch.as_tensor(x)), 0)])

            cmaps, cmaps_ev = parse_maps(ids), parse_maps(ev_ids)
            cname = "paper's layer-1 parsing pattern (no registry construction for this task yet)"
            note = "layer 2 is not compared: no construction in constructions/registry for this task"
        trained = {}
        for init in ("normal", "construction" if cons is not None else "parsing"):
            cfg = TrainConfig(task=case.task, layers=2, steps=steps or case.steps, seed=0, qk_init=init,
                              construction_variant=cons.variant if cons is not None else None,
                              task_options=case.options, eval_every=max(1, (steps or case.steps) // 20))
            result, model = train(cfg, task=task)
            model = model.double()
            with torch.no_grad():
                _, tmaps = model(torch.as_tensor(ids), return_attention=True)
                _, tmaps_ev = model(torch.as_tensor(ev_ids), return_attention=True)
            tmaps, tmaps_ev = _head_mean(tmaps), _head_mean(tmaps_ev)
            sims = []
            for li in range(min(len(cmaps), 2)):
                sims.append({"layer": li + 1, "example": [map_similarity(tmaps[li][i:i + 1], cmaps[li][i:i + 1])
                                                           for i in range(len(ids))],
                             "held_out_mean": map_similarity(tmaps_ev[li], cmaps_ev[li])})
            trained[init] = {"final_test_acc": result.final.test_acc, "steps": result.final.step,
                             "maps": [m.tolist() for m in tmaps], "similarity": sims}
            if bar is not None:
                bar.update(1)
        entry = {"task": case.task, "options": dict(case.options), "construction": cname, "note": note,
                 "examples": [list(e) for e in case.examples], "construction_maps": [m.tolist() for m in cmaps],
                 "trained": trained}
        results.append(entry)
        plot_figure3(entry, os.path.join(out, f"figure3_{case.task}.png"))
    if bar is not None:
        bar.close()
    data = {"experiment": "figure3", "status": "OBSERVED (trained, not proven)",
            "seconds": time.perf_counter() - t0, "cases": results}
    write_json_atomic(os.path.join(out, "figure3.json"), data)
    return data


def plot_figure3(entry: dict, path: str) -> None:
    """Rows: constructed, trained from random init, trained from the paper's init; columns: each example's
    layers (paper Figure 3 layout).  Each map is drawn as show-construction draws attention: one row per
    query, one column per key, each query's weights normalized to sum 1 (a colour bar gives the scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = [("constructed", entry["construction_maps"])] + [
        (f"trained, {'random' if k == 'normal' else k} init\n(held-out acc {v['final_test_acc']:.2f})", v["maps"])
        for k, v in entry["trained"].items()
    ]
    n_layers = max(len(m) for _, m in sources)
    n_ex = len(entry["examples"])
    cols = n_ex * n_layers
    fig, axes = plt.subplots(len(sources), cols, figsize=(3.3 * cols + 0.8, 3.4 * len(sources)),
                             squeeze=False, layout="constrained")
    im = None
    for r, (name, maps) in enumerate(sources):
        for ei, toks in enumerate(entry["examples"]):
            labels = [f"{i} {t}" for i, t in enumerate(toks)]
            for li in range(n_layers):
                ax = axes[r][ei * n_layers + li]
                if li >= len(maps):
                    ax.axis("off")
                    continue
                A = column_normalize(np.array(maps[li])[ei])  # (key, query), each query sums to 1
                im = ax.imshow(A.T, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
                ax.set_xticks(range(len(toks)))
                ax.set_yticks(range(len(toks)))
                ax.set_xticklabels(labels, fontsize=9, rotation=90)
                ax.set_yticklabels(labels, fontsize=9)
                ax.set_title(f"layer {li + 1}, example {ei + 1}", fontsize=10)
                ax.set_xlabel("key (attended position)", fontsize=9)
                if ei * n_layers + li == 0:
                    ax.set_ylabel(f"{name}\n\nquery", fontsize=10)
    if im is not None:
        cb = fig.colorbar(im, ax=axes, fraction=0.02, pad=0.01)
        cb.set_label("attention weight (each query's row sums to 1)", fontsize=10)
        cb.ax.tick_params(labelsize=9)
    examples = "; ".join(f"example {i + 1}: {' '.join(t)}" for i, t in enumerate(entry["examples"]))
    fig.suptitle(f"{entry['task']}: attention maps (OBSERVED, not proven)\n{examples}", fontsize=12)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# The open question (paper 5.4): can two layers do ICTM?

ICTM_OPTIONS = FIGURE2[3].options
ICTM2_GRID = (
    # (layers, heads, width multiplier, qk_init, attention)
    (2, 1, 1, "construction", "relu"),
    (2, 4, 2, "construction", "relu"),
    (2, 8, 1, "construction", "relu"),
    (2, 4, 2, "normal", "relu"),
    (2, 4, 2, "construction", "softmax"),
    (3, 1, 1, "construction", "relu"),  # reference: the paper's depth
)


def run_ictm2(out: str, steps: int | None, seeds: int | None, tasks, progress: bool) -> dict:
    from depthcert.checkers.tasks import make_task

    task = make_task("ictm", **dict(ICTM_OPTIONS))
    base_width = len(task.vocab) + task.length
    n_seeds = seeds or 2
    n_steps = steps or 2000
    bar = _progress(progress, len(ICTM2_GRID) * n_seeds, "ictm2")
    runs = []
    t0 = time.perf_counter()
    for layers, heads, mult, init, att in ICTM2_GRID:
        for seed in range(n_seeds):
            cfg = TrainConfig(task="ictm", layers=layers, heads=heads, width=base_width * mult, steps=n_steps,
                              seed=seed, qk_init=init, attention=att, task_options=ICTM_OPTIONS,
                              eval_every=max(1, n_steps // 30))
            result, _ = train(cfg, task=task)
            runs.append(_summary(result, _baseline(cfg)))
            if bar is not None:
                bar.set_postfix(L=layers, H=heads, acc=f"{result.final.test_acc:.2f}")
                bar.update(1)
    if bar is not None:
        bar.close()
    data = {"experiment": "ictm2", "status": "OBSERVED (trained, not proven)", "options": dict(ICTM_OPTIONS),
            "base_width": base_width, "seeds": n_seeds, "steps": n_steps, "seconds": time.perf_counter() - t0,
            "runs": runs}
    write_json_atomic(os.path.join(out, "ictm2.json"), data)
    return data


# ----------------------------------------------------------------------------------------------


def run(what: str, out: str = "docs/img", doc: str = "docs/experiments.md", steps=None, seeds=None, tasks=None,
        progress: bool = True, jobs: int = 1) -> dict:
    """Run one experiment (or all), then regenerate the markdown report from the stored results."""
    import torch

    torch.set_num_threads(1)
    if not os.path.isdir(out):
        raise BadInput(f"output folder {out} does not exist")
    doc_dir = os.path.dirname(os.path.abspath(doc)) or "."
    if not os.path.isdir(doc_dir):
        raise BadInput(f"cannot write {doc}: folder {doc_dir} does not exist")
    if steps is not None and steps < 1:
        raise BadInput(f"--steps must be >= 1, got {steps}")
    if seeds is not None and seeds < 1:
        raise BadInput(f"--seeds must be >= 1, got {seeds}")
    task_set = None
    if tasks:
        from depthcert.checkers.tasks import canonical_task

        task_set = {canonical_task(t) for t in tasks.split(",") if t.strip()}
    if jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {jobs}")
    from depthcert.training.experiments import EXPERIMENTS, GROUPS
    from depthcert.training.reproduce_copy import run_copy
    from depthcert.training.reproduce_heads import FIGURES, run_heads_figure

    if what not in EXPERIMENTS and what not in GROUPS:
        raise BadInput(f"unknown experiment {what!r}; known: {', '.join(EXPERIMENTS + tuple(GROUPS))}")
    argv = sys.argv[1:] if os.path.basename(sys.argv[0]) == "reproduce" else [what]
    out_all = {}
    for name in GROUPS.get(what, (what,)):
        if name in ("figure2", "figure3", "ictm2", "reference"):
            fn = {"figure2": run_figure2, "figure3": run_figure3, "ictm2": run_ictm2, "reference": run_reference}[name]
            out_all[name] = fn(out, steps, seeds, task_set, progress)
        elif name in FIGURES:
            out_all[name] = run_heads_figure(name, out, steps, seeds, progress)
        else:
            out_all[name] = run_copy(out, steps, seeds, progress, jobs=jobs)
        out_all[name]["command"] = _cmd(argv)
        write_json_atomic(os.path.join(out, f"{name}.json"), out_all[name])
    from depthcert.training.report import write_report

    write_report(out, doc)
    return {k: {"seconds": v["seconds"]} for k, v in out_all.items()}
