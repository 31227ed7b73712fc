"""show-construction: pictures of a construction on one example (like the paper's Figure 3).

    show-construction TASK [size options] [--variant V] [--as-printed] [--point N] --out DIR [--json]

writes into DIR, every file name starting with PREFIX = task, sizes, variant and point (for
example multihop-hops2-k2-n_entities2-doubling-p5), so runs with other sizes or points do not
overwrite or mix with each other's pictures:
    PREFIX-overview.png                 every head's attention map (layer by layer, 6 per row) above
                                        the residual stream after every layer, on the chosen point
    PREFIX-layer<l>-attention.png       layer l: every head's attention weights, query rows x key
                                        columns, axes labelled "position token"; exact values in cells
    PREFIX-layer<l>-head<h>-weights.png W_QK and W_V of that head, axes labelled with the layout's
                                        block names, block boundaries drawn
    PREFIX-classifier.png               W_O (class rows x blocks)
    PREFIX-residual.png                 H_0 .. H_L (block rows x tokens)
Layers and heads are numbered from 1, as in the paper.

The numbers come from checkers/trace.py (exact Fractions); only the colours are floats.  Values
spanning more than [-50, 50] are coloured by sign * log10(1 + |value|) (said in the colour bar).
matplotlib is a dependency (pyproject.toml); where it is missing the command exits 2 with one line
naming the pip command that installs it.
Exit codes: 0 written, 2 bad input, 4 internal error (depthcert/cli/errors.py).
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

from depthcert.checkers.errors import BadInput

INSTALL_HINT = 'show-construction needs matplotlib, a dependency of depthcert missing here: pip install "matplotlib>=3.6"'
MAX_COLS = 6  # panels per row of overview.png
LOG_ABOVE = 50  # colour by sign * log10(1 + |v|) when some |v| exceeds this
GOLDEN = (618033988, 10**9)  # default point: floor(size * 0.618...), rarely a degenerate example


def _require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: F401
    except ImportError:
        raise BadInput(INSTALL_HINT) from None
    return plt


def default_point(size: int) -> int:
    return size * GOLDEN[0] // GOLDEN[1]


# ---------------------------------------------------------------- exact -> colour values

def _log_magnitude(v: Fraction) -> float:
    """log10(1 + |v|) without overflowing floats on huge exact values."""
    a = abs(Fraction(v))
    if a < 10**15:
        return math.log10(1 + float(a))
    return math.log10(a.numerator) - math.log10(a.denominator)


def colour_values(M: np.ndarray) -> tuple[np.ndarray, bool]:
    """(float array for the colour map, whether it is log-scaled)."""
    exact = [Fraction(v) for v in M.flat]
    big = any(abs(v) > LOG_ABOVE for v in exact)
    if big:
        vals = [math.copysign(_log_magnitude(v), v) if v else 0.0 for v in exact]
    else:
        vals = [float(v) for v in exact]
    return np.array(vals, dtype=float).reshape(M.shape), big


def short(v) -> str:
    """Exact value as a short string ('' for 0, '' if it does not fit in a cell)."""
    v = Fraction(v)
    if v == 0:
        return ""
    s = str(v)
    return s if len(s) <= 4 else ""


# ---------------------------------------------------------------- drawing helpers

def _token_labels(tokens) -> list[str]:
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def _heat(ax, fig, M: np.ndarray, cmap: str, annotate: bool, diverging: bool):
    vals, logged = colour_values(M)
    vmax = float(np.abs(vals).max()) if vals.size else 1.0
    vmax = vmax or 1.0
    vmin = -vmax if diverging else 0.0
    if not diverging and vals.size and vals.min() < 0:
        vmin = float(vals.min())
    im = ax.imshow(vals, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    if logged:
        cb.set_label("sign * log10(1+|v|)", fontsize=7)
    cb.ax.tick_params(labelsize=6)
    if annotate:
        for (r, c), v in np.ndenumerate(M):
            s = short(v)
            if s:
                bright = abs(vals[r, c]) > 0.6 * vmax
                ax.text(c, r, s, ha="center", va="center", fontsize=6, color="white" if bright else "black")
    return im


def _block_axis(ax, layout, axis: str):
    """Block names at block centres, lines at block boundaries."""
    centres, names = [], []
    for b in layout.blocks:
        if b.size == 0:
            continue
        off = layout.offset(b.name)
        centres.append(off + (b.size - 1) / 2)
        names.append(b.name)
        if off > 0:
            line = ax.axhline if axis == "y" else ax.axvline
            line(off - 0.5, color="black", linewidth=0.8)
    if axis == "y":
        ax.set_yticks(centres)
        ax.set_yticklabels(names, fontsize=7)
    else:
        ax.set_xticks(centres)
        ax.set_xticklabels(names, fontsize=7, rotation=60, ha="right")


def _attention_panel(ax, fig, S: np.ndarray, tokens, title: str):
    """S is (key j, query k); drawn with queries as rows, keys as columns."""
    n = len(tokens)
    _heat(ax, fig, S.T, "Blues", annotate=n <= 24, diverging=False)
    labels = _token_labels(tokens)
    fs = 7 if n <= 20 else 5
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, fontsize=fs, rotation=90)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=fs)
    ax.set_xlabel("key (attended position)", fontsize=7)
    ax.set_ylabel("query", fontsize=7)
    ax.set_title(title, fontsize=8)


def row_names(model) -> list[str]:
    """A short name per residual row: the token of a token row, the index of a position row, the
    token a construction tagged the row with (Model.notes["row_tokens"]), else ''."""
    names = [""] * model.dim
    V = len(model.vocab)
    for i, t in enumerate(model.vocab):
        names[i] = str(t)
    for p in range(model.max_length):
        if V + p < model.dim:
            names[V + p] = str(p)
    tags = model.notes.get("row_tokens", {}) if model.notes else {}
    for r, (_, tok) in tags.items():
        if 0 <= r < model.dim:
            names[r] = str(tok)
    return names


def _residual_panel(ax, fig, H: np.ndarray, layout, tokens, title: str, rows: list[str] | None = None):
    n = len(tokens)
    _heat(ax, fig, H, "RdBu_r", annotate=H.shape[0] <= 48 and n <= 24, diverging=True)
    _block_axis(ax, layout, "y")
    if rows is not None and len(rows) <= 64:
        # block names move left of the per-row names
        centres = list(ax.get_yticks())
        labels = [lab.get_text() for lab in ax.get_yticklabels()]
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows, fontsize=5)
        for y, lab in zip(centres, labels):
            ax.annotate(lab, xy=(0, y), xycoords=("axes fraction", "data"), xytext=(-14, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=7)
    ax.set_xticks(range(n))
    ax.set_xticklabels(_token_labels(tokens), fontsize=6 if n <= 20 else 5, rotation=90)
    ax.set_title(title, fontsize=8)


# ---------------------------------------------------------------- the pictures

def file_prefix(construction, task, point: int) -> str:
    """task-sizes-variant[-printed]-pPOINT: what distinguishes one run's pictures from another's."""
    parts = [task.name] + [f"{k}{v}" for k, v in task.params.items() if not isinstance(v, (list, tuple))]
    parts += [construction.variant] + (["printed"] if construction.as_printed else []) + [f"p{point}"]
    return "-".join(str(x).replace("/", "_").replace(" ", "") for x in parts)


def render(construction, task, point: int, out: Path) -> list[Path]:
    """Write every picture of `construction` on dataset point `point` into `out`; returns the paths."""
    plt = _require_matplotlib()
    from depthcert.checkers.trace import trace

    model = construction.model
    p = task.point(point)
    ids, _ = task.decode(np.array([point], dtype=np.int64))
    tr = trace(model, ids[0])
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tokens = tr.tokens
    n = len(tokens)
    cell = max(2.6, 0.28 * n)
    variant = construction.variant + (" (as printed)" if construction.as_printed else "")
    head_line = f"{task.describe()}  [{variant}]  point {point}: {task.render(p.tokens)}  -> {p.label}"

    prefix = file_prefix(construction, task, point)

    def save(fig, name):
        path = out / f"{prefix}-{name}"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    # per layer: every head's attention map
    for li, heads in enumerate(tr.attention):
        fig, axes = plt.subplots(1, len(heads), figsize=(cell * len(heads) + 1, cell), squeeze=False,
                                 layout="constrained")
        for hi, S in enumerate(heads):
            _attention_panel(axes[0][hi], fig, S, tokens, f"layer {li + 1} head {hi + 1}")
        fig.suptitle(head_line, fontsize=8)
        save(fig, f"layer{li + 1}-attention.png")

    # per head: W_QK and W_V with block names
    lay = model.layout
    rows = row_names(model)
    wcell = max(3.2, 0.2 * lay.dim)
    for li, layer in enumerate(model.layers):
        for hi, head in enumerate(layer):
            fig, axes = plt.subplots(1, 2, figsize=(2 * wcell + 1.5, wcell), layout="constrained")
            for ax, M, name in ((axes[0], head.W_QK, "W_QK"), (axes[1], head.W_V, "W_V")):
                _heat(ax, fig, M, "RdBu_r", annotate=lay.dim <= 40, diverging=True)
                _block_axis(ax, lay, "y")
                _block_axis(ax, lay, "x")
                ax.set_title(f"layer {li + 1} head {hi + 1}  {name}", fontsize=8)
                if name == "W_QK":  # score(key j, query k) = h_j^T W_QK h_k
                    ax.set_ylabel("key feature (h_key^T W_QK h_query)", fontsize=7)
                    ax.set_xlabel("query feature", fontsize=7)
                else:  # value written = W_V h_key
                    ax.set_ylabel("output feature (W_V h_key)", fontsize=7)
                    ax.set_xlabel("key feature", fontsize=7)
            fig.suptitle(f"{task.describe()}  [{variant}]", fontsize=8)
            save(fig, f"layer{li + 1}-head{hi + 1}-weights.png")

    # classifier
    C = len(model.classes)
    fig, ax = plt.subplots(figsize=(wcell + 1, max(2.0, 0.22 * C + 1)), layout="constrained")
    _heat(ax, fig, model.W_O, "RdBu_r", annotate=lay.dim <= 40 and C <= 40, diverging=True)
    _block_axis(ax, lay, "x")
    ax.set_yticks(range(C))
    ax.set_yticklabels(model.classes, fontsize=6 if C <= 30 else 4)
    ax.set_title(f"W_O  (predicted {model.classes[tr.predicted]}, label {p.label})", fontsize=8)
    save(fig, "classifier.png")

    # residual stream after every layer
    L = len(tr.H)
    hcell = max(2.6, 0.18 * lay.dim)
    fig, axes = plt.subplots(1, L, figsize=(cell * L + 1, hcell), squeeze=False, layout="constrained")
    for li, H in enumerate(tr.H):
        _residual_panel(axes[0][li], fig, H, lay, tokens, "H0 (input)" if li == 0 else f"H{li} (after layer {li})",
                        rows)
    fig.suptitle(head_line, fontsize=8)
    save(fig, "residual.png")

    # overview: every head's attention map (layer by layer, wrapped after MAX_COLS panels), the
    # residual stream after every layer below
    panels = [(li, hi, S) for li, heads in enumerate(tr.attention) for hi, S in enumerate(heads)]
    cols = max(1, min(MAX_COLS, max(len(panels), L)))
    att_rows, res_rows = -(-len(panels) // cols), -(-L // cols)
    fig, axes = plt.subplots(att_rows + res_rows, cols,
                             figsize=(cell * cols + 1, cell * att_rows + hcell * res_rows), squeeze=False,
                             gridspec_kw={"height_ratios": [cell] * att_rows + [hcell] * res_rows},
                             layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    for i, (li, hi, S) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        ax.axis("on")
        _attention_panel(ax, fig, S, tokens, f"layer {li + 1} head {hi + 1}: attention")
    for i, H in enumerate(tr.H):
        ax = axes[att_rows + i // cols][i % cols]
        ax.axis("on")
        _residual_panel(ax, fig, H, lay, tokens, "H0 (input)" if i == 0 else f"H{i} (after layer {i})", rows)
    logits = ", ".join(f"{c}={short(v) or ('%.3g' % float(v) if abs(v) < 10**300 else 'huge')}"
                       for c, v in zip(model.classes[:8], tr.logits[:8]))
    fig.suptitle(f"{head_line}\npredicted {model.classes[tr.predicted]}; logits {logits}"
                 f"{' ...' if len(model.classes) > 8 else ''}", fontsize=9)
    save(fig, "overview.png")
    return written


# ---------------------------------------------------------------- command line

def _build_parser():
    from depthcert.cli.common import _Parser, add_budget_options, add_task_options, tasks_help, variants_help

    p = _Parser(
        prog="show-construction",
        description="Draw a construction of arXiv 2404.01601 on one example: every head's attention map "
        "(like the paper's Figure 3), its weight matrices with block names, the classifier and the "
        "residual stream.",
    )
    p.add_argument("task", help=tasks_help())
    add_task_options(p)
    p.add_argument("--variant", default=None, help=variants_help())
    p.add_argument("--as-printed", action="store_true", help="the weights exactly as the paper prints them")
    p.add_argument("--point", type=int, metavar="N", default=None,
                   help="dataset point to draw (default: floor(0.618 * size))")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_budget_options(p)
    return p


def _show_construction(argv) -> int:
    args = _build_parser().parse_args(argv)
    _require_matplotlib()  # fail fast, before any work
    from depthcert import constructions
    from depthcert.cli.common import task_from_args

    from depthcert.checkers.budget import resource_budget
    from depthcert.cli.common import guard_classifier_size

    task = task_from_args(args, every_task=False)
    guard_classifier_size(task, args.max_weights)
    with resource_budget(args.max_weights, args.max_seconds, show_progress=sys.stderr.isatty() and not args.json):
        construction = constructions.build(task, args.variant, args.as_printed)
    point = default_point(task.size) if args.point is None else args.point
    if not 0 <= point < task.size:
        raise BadInput(f"--point {point} is outside the dataset (0 .. {task.size - 1})")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot create the directory ({exc.strerror})") from None
    paths = render(construction, task, point, out)
    p = task.point(point)
    if args.json:
        import json

        print(json.dumps({"command": "show-construction", "verdict": "written", "task": task.name,
                          "params": task.params, "variant": construction.variant,
                          "as_printed": construction.as_printed, "point": point, "tokens": list(p.tokens),
                          "label": p.label, "files": [str(x) for x in paths]}))
        return 0
    print(f"show-construction {task.describe()} [{construction.variant}{' as printed' if construction.as_printed else ''}]")
    print(f"  point   {point}: {task.render(p.tokens)}  (label {p.label})")
    print(f"  wrote   {len(paths)} PNG files to {out}/ ({paths[-1].name} first)")
    return 0


def show_construction_main(argv=None) -> int:
    from depthcert.cli.common import run_main

    sys.exit(run_main(_show_construction, argv))


if __name__ == "__main__":
    show_construction_main()
