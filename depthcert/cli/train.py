"""Console scripts `train` and `reproduce` (need the "train" extra: torch + matplotlib).

Exit codes (depthcert/cli/errors.py): 0 done, 2 bad input (one line on stderr), 4 internal error,
130 interrupted; results are OBSERVED training runs, not proofs. `train` shows a progress bar on a
terminal only (as every command does); `reproduce`, whose sweeps run for hours, prints a plain line
per tenth of the work when stderr is a file (training/progress.py).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser as _CommonParser
from depthcert.training.experiments import EXPERIMENTS, GROUPS

TASK_OPTIONS = (
    # (flag, dest, type)
    ("--k", "k", int),
    ("--n-questions", "n_questions", int),
    ("--n-answers", "n_answers", int),
    ("--l", "l", int),
    ("--alphabet", "alphabet", int),
    ("--length", "length", int),
    ("--hops", "hops", int),
    ("--n-entities", "n_entities", int),
    ("--n-points", "n_points", int),
    ("--task-seed", "task_seed", int),
)


class _Parser(_CommonParser):
    """The commands' parser (no abbreviations, negative-looking values) naming the program in errors."""

    def error(self, message):
        raise BadInput(f"{self.prog}: {message}")


def _show_progress(args) -> bool:
    """A progress bar only on a terminal, never with --json (the convention of every command)."""
    return not args.json and sys.stderr.isatty()


def _die(message: str) -> int:
    from depthcert.cli.errors import fresh_line

    fresh_line()  # a bar still open is closed first: the message starts its own line
    print(f"error: {message}".splitlines()[0], file=sys.stderr)
    return 2


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BadInput("training needs PyTorch: pip install -e '.[train]' (torch 2.13.0, CPU build; see docs/development.md)") from None


def _clean(obj):
    """JSON-safe: non-finite floats become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def train_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="train", description="Train the paper's attention-only transformer on a task (OBSERVED, not proven).")
    from depthcert.cli.common import every_task_name

    p.add_argument("task", help=f"the task: {', '.join(every_task_name())} (aliases allowed); the size options below "
                   "are those of sc, icqa, tm, ictm and multihop, the other tasks train at their default sizes")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", default="1", help="heads in every layer (4) or per layer (1,1,4)")
    p.add_argument("--width", type=int, default=None, help="d' (default: vocabulary + positions)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--optimizer", default="sgd", help="sgd (paper) or adam")
    p.add_argument("--attention", default="relu", help="relu (paper) or softmax")
    p.add_argument("--qk-init", default="normal", help="uniform (paper, sc), normal, zero, construction (paper, layer 1)")
    p.add_argument("--v-init", default="identity", help="ones (paper), identity, normal, zero")
    p.add_argument("--out-init", default="normal", help="uniform (paper), normal, zero")
    p.add_argument("--init-scale", type=float, default=0.02, help="std of the normal inits")
    p.add_argument("--variant", default=None, help="construction variant for --qk-init construction")
    p.add_argument("--grad-clip", type=float, default=1.0, help="clip gradient norm (0 = off)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-size", type=int, default=1000)
    for flag, dest, typ in TASK_OPTIONS:
        p.add_argument(flag, dest=dest, type=typ, default=None)
    p.add_argument("--exact-check", type=_exact_check_arg, nargs="?", const=FLOAT_WEIGHTS, default=None,
                   metavar="BITS", help="decide the trained model's accuracy on every point exactly, from its float32 "
                   "weights as they are (with BITS: rounded to multiples of 2^-BITS); finite tasks up to 200000 points")
    p.add_argument("--log", default=None, help="write the per-step JSON log here (atomically)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON, no progress bar (a bar shows on a terminal only)")
    return p


FLOAT_WEIGHTS = "float32"


def _exact_check_arg(text: str):
    """--exact-check [BITS]: no value = the float32 weights as they are; BITS in 1..30 = rounded."""
    if text == FLOAT_WEIGHTS:
        return FLOAT_WEIGHTS
    try:
        bits = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bits") from None
    if not 1 <= bits <= 30:
        raise argparse.ArgumentTypeError(f"must be between 1 and 30 bits, got {bits}")
    return bits


def _bits(value):
    return None if value == FLOAT_WEIGHTS else value


def _weights_text(bits) -> str:
    return "float32 weights as trained" if bits is None else f"weights rounded to 2^-{bits}"


def config_from_args(args) -> "TrainConfig":
    from depthcert.training.train import TrainConfig

    opts = tuple((dest, getattr(args, dest)) for _, dest, _ in TASK_OPTIONS if getattr(args, dest) is not None)
    opts = tuple((("seed" if k == "task_seed" else k), v) for k, v in opts)
    from depthcert.training.train import parse_heads

    return TrainConfig(
        task=args.task,
        layers=args.layers,
        heads=parse_heads(args.heads),
        width=args.width,
        steps=args.steps,
        seed=args.seed,
        batch_size=args.batch_size,
        lr=args.lr,
        momentum=args.momentum,
        optimizer=args.optimizer,
        attention=args.attention,
        qk_init=args.qk_init,
        v_init=args.v_init,
        out_init=args.out_init,
        init_scale=args.init_scale,
        construction_variant=args.variant,
        grad_clip=args.grad_clip,
        eval_every=args.eval_every,
        eval_size=args.eval_size,
        task_options=opts,
    )


def copy_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="train copy", description="Train on the copy task (OBSERVED, not proven): a standard "
                "softmax transformer with LayerNorm and MLP, or depthcert's attention-only class.")
    p.add_argument("task", help="copy")
    p.add_argument("--length", type=int, default=8, help="tokens to copy (n)")
    p.add_argument("--alphabet", type=int, default=10, help="alphabet size (m)")
    p.add_argument("--noise", type=float, default=0.0, help="rate of flipped input tokens (labels stay clean)")
    p.add_argument("--arch", default="transformer", help="transformer (softmax, LayerNorm, MLP) or attention-only "
                   "(depthcert's ReLU class, outputs at every position; --exact-check applies)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--exact-check", type=_exact_check_arg, nargs="?", const=FLOAT_WEIGHTS, default=None,
                   metavar="BITS", help="attention-only: verify every clean input exactly, from the float32 weights "
                   "as they are (with BITS: rounded to multiples of 2^-BITS)")
    p.add_argument("--log", default=None, help="write the JSON log here (atomically)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON, no progress bar (a bar shows on a terminal only)")
    return p


def copy_main(argv) -> int:
    args = copy_parser().parse_args(argv)
    if args.task != "copy":
        raise BadInput(f"expected the task copy, got {args.task!r}")
    from depthcert.training.copy_task import CopyTask

    task = CopyTask(args.length, args.alphabet, args.noise)  # bad sizes fail before torch is imported
    if args.exact_check is not None:
        if args.arch != "attention-only":
            raise BadInput("--exact-check needs --arch attention-only: the standard transformer has LayerNorm and "
                           "GELU, which depthcert's exact checker does not support")
        if task.size > 200_000:
            raise BadInput(f"--exact-check: the copy task has {task.size} inputs; at most 200000 are checked")
    _check_log_folder(args.log)
    _import_torch()
    from depthcert.checkers.atomic import write_json_atomic
    from depthcert.training.copy_train import CopyConfig, exact_check_copy, train_copy

    config = CopyConfig(length=args.length, alphabet=args.alphabet, noise=args.noise, arch=args.arch,
                        layers=args.layers, heads=args.heads, width=args.width, steps=args.steps, seed=args.seed,
                        batch_size=args.batch_size, lr=args.lr, eval_every=args.eval_every)
    result, model = train_copy(config, progress=_show_progress(args))
    if args.exact_check is not None:
        result.exact_check = exact_check_copy(model, config, _bits(args.exact_check))
    log = _clean(result.to_json())
    if args.log is not None:
        write_json_atomic(args.log, log)
    if args.json:
        print(json.dumps({"command": "train copy", "verdict": "observed",
                          **{k: v for k, v in log.items() if k != "evals"}}))
        return 0
    f, r = result.final, result.redundancy
    print(f"OBSERVED copy n={args.length} m={args.alphabet} noise={args.noise} {args.arch} layers={args.layers} "
          f"heads={args.heads} width={args.width} seed={args.seed} steps={f['step']}: held-out acc {f['acc']:.4f} "
          f"(ceiling {f['ceiling']:.2f}) clean acc {f['clean_acc']:.4f} loss {f['loss']:.4f} ({result.seconds:.1f}s)")
    if r:
        print(f"redundancy: {r['ratio_grad']:.2f} by gradient norm (< {r['grad_rel_threshold']:.0%} of the largest), "
              f"{r['ratio_ablation']:.2f} by ablation (drop < {r['ablation_threshold']:.0%}); "
              f"largest single-head drop {r['max_single_drop']:.3f}")
    if result.exact_check:
        c = result.exact_check
        print(f"EXACT ({_weights_text(c['bits'])}): {c['verdict']} on {c['checked']} of {c['points']} inputs"
              + (f", min margin {c['min_margin']}" if c["verdict"] == "verified" else
                 (f"; counterexample {c['counterexample']}" if c["counterexample"] else "")))
    return 0


def _check_log_folder(path) -> None:
    """Fail on an unwritable folder before spending the training time."""
    if path is None:
        return
    import os

    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise BadInput(f"cannot write {path}: folder {folder} does not exist")


def train_main(argv=None) -> int:
    from depthcert.cli.common import run_main

    return run_main(_train, argv)


def _train(argv) -> int:
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        if argv and argv[0].strip().lower() == "copy":
            return copy_main(argv)
        args = train_parser().parse_args(argv)
        _import_torch()
        from depthcert.checkers.atomic import write_json_atomic
        from depthcert.checkers.tasks import canonical_task
        from depthcert.training.train import train

        config = config_from_args(args)
        canonical_task(config.task)
        _check_log_folder(args.log)
        result, model = train(config, progress=_show_progress(args))
        log = _clean(result.to_json())
        if args.exact_check is not None:
            from depthcert.training.export import exact_accuracy, to_exact
            from depthcert.training.train import build_task

            task = build_task(config)
            bits = _bits(args.exact_check)
            chk = exact_accuracy(to_exact(model, task, bits), task, bits=bits)
            log["exact_check"] = {
                "status": "EXACT for " + ("the trained float32 weights" if bits is None else "these rounded weights")
                          + " (checkers.accuracy), every point of the task",
                "bits": chk.bits, "points": chk.points, "correct": chk.correct, "accuracy": chk.accuracy,
                "evaluator": chk.path,
            }
        if args.log is not None:
            write_json_atomic(args.log, log)
        f = result.final
        if args.json:
            summary = {"command": "train", "verdict": "observed", **{k: v for k, v in log.items() if k != "steps"}}
            print(json.dumps(summary))
        else:
            print(
                f"OBSERVED {result.config.task} layers={result.config.layers} "
                f"heads={','.join(map(str, result.config.layer_heads))} "
                f"d'={result.shape.dim} seed={result.config.seed} steps={f.step}: "
                f"held-out acc {f.test_acc:.4f} loss {f.test_loss:.4f} | train acc {f.train_acc:.4f} "
                f"({result.seconds:.1f}s; split: {result.split})"
                + (" DIVERGED" if result.diverged else "")
            )
            if "exact_check" in log:
                c = log["exact_check"]
                print(f"EXACT ({_weights_text(c['bits'])}): {c['correct']}/{c['points']} points correct "
                      f"({c['evaluator']})")
        return 0
    except BadInput as exc:
        return _die(str(exc))


DEFAULT_OUT, DEFAULT_DOC = "docs/img", "docs/experiments.md"


def reproduce_paths(out: str | None, doc: str | None) -> tuple[str, str]:
    """--out and --doc as used: the defaults inside a checkout (docs/img, docs/experiments.md); a
    given --out also holds the report unless --doc is given, so the command works from any folder.
    --out is created (with its parents); --doc's folder must exist."""
    import os

    if doc is None:
        doc = DEFAULT_DOC if out is None else os.path.join(out, "experiments.md")
    out = DEFAULT_OUT if out is None else out
    if os.path.exists(out) and not os.path.isdir(out):
        raise BadInput(f"--out {out} exists and is not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    return out, doc


def reproduce_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="reproduce", description="Reproduce the paper's experiments (OBSERVED, not proven).")
    p.add_argument("what", help="reference (the run the tests compare), figure2 (depth sweep + docs/experiments.md), figure3 (attention maps), ictm2 (open "
                   "question 5.4), figure4..figure7 (heads per layer; heads = all four), copy (copy-task depth/heads "
                   "study), all")
    p.add_argument("--out", default=None, help="folder for the PNG plots and JSON results, created if missing "
                   f"(default {DEFAULT_OUT})")
    p.add_argument("--doc", default=None, help=f"markdown report to write (default: {DEFAULT_DOC} with the default "
                   "--out, else experiments.md inside --out)")
    p.add_argument("--steps", type=int, default=None, help="override steps per run")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds per configuration")
    p.add_argument("--tasks", default=None, help="comma-separated subset of tasks")
    p.add_argument("--jobs", type=int, default=1, help="copy: training processes in parallel (results do not "
                   "depend on it: every run is seeded and single-threaded)")
    p.add_argument("--json", action="store_true", help="no progress output; print a JSON summary")
    return p


def reproduce_main(argv=None) -> int:
    from depthcert.cli.common import run_main

    return run_main(_reproduce, argv)


def _written_since(started: float, out: str, doc: str) -> list[str]:
    """The files of the folder `out` and the report `doc` written since `started` (time.time())."""
    import os

    paths = sorted(os.path.join(out, name) for name in os.listdir(out))
    return [p for p in dict.fromkeys(paths + [doc]) if os.path.isfile(p) and os.path.getmtime(p) >= started]


def _reproduce(argv) -> int:
    try:
        args = reproduce_parser().parse_args(argv)
        # a bad name fails here, before torch (seconds to import) is loaded
        if args.what not in EXPERIMENTS and args.what not in GROUPS:
            raise BadInput(f"unknown experiment {args.what!r}; known: {', '.join(EXPERIMENTS + tuple(GROUPS))}")
        _import_torch()
        from depthcert.training import reproduce

        out, doc = reproduce_paths(args.out, args.doc)
        started = time.time() - 1  # file times may be rounded down to the second
        summary = reproduce.run(args.what, out=out, doc=doc, steps=args.steps, seeds=args.seeds,
                                tasks=args.tasks, progress=not args.json, jobs=args.jobs)
        wrote = _written_since(started, out, doc)
        if args.json:
            print(json.dumps({"command": "reproduce", "verdict": "observed", "experiments": _clean(summary),
                              "out": out, "doc": doc, "wrote": wrote}))
        else:
            for path in wrote:
                print(f"wrote {path}")
        return 0
    except BadInput as exc:
        return _die(str(exc))
