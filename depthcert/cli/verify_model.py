"""verify-model CHECKPOINT (--task TASK [sizes] | --dataset FILE): certified accuracy on every point.

CHECKPOINT is a TransformerLens checkpoint (.safetensors or .pt, docs/trained-models.md) or a
depthcert weights file (.json).  Every point is decided (checkers/accuracy.py): the output is
`certified accuracy N/M` (a tie counts as wrong), the smallest margin among correct points, and
the wrong points (the first few printed, all of them with --wrong-out FILE).

Exit codes: 0 every point decided (with --require-all: every point correct), 1 with
--require-all: some point certainly wrong (refuted), 2 bad input (one line), 3 points left
undecided at the precision limit (listed; never rounded into a verdict).
"""
from __future__ import annotations

import json
import os
import sys
import time

from depthcert.checkers.budget import DEFAULT_MAX_SECONDS
from depthcert.checkers.errors import BadInput
from depthcert.cli.common import (EXIT_UNDECIDED, PRECISION_LIMIT, _Parser, add_task_options, data_file, enclosure_text,
                                  margin_json, plural, positive_int, run_main, task_from_args, tasks_help)

EXIT_REFUTED = 1
MAX_LISTED = 2_000_000  # --wrong-out refuses to list more points than this (the counts stay exact)
DEFAULT_MAX_POINTS = 100_000_000  # refuse larger datasets unless --max-points says otherwise


def load_any_model(path: str, config: str | None, task):
    """A TransformerLens checkpoint (.safetensors/.pt/.pth) or a depthcert weights file (.json)."""
    low = path.lower()
    if low.endswith((".safetensors", ".pt", ".pth")):
        from depthcert.interop.transformerlens import load_model

        vocab = tuple(task.vocab) if task is not None else None
        classes = tuple(task.classes) if task is not None else None
        cfg_model = load_model(path, config, None, None)
        # name tokens and classes as the task does when the sizes agree ("0", "1", ... otherwise)
        if vocab is not None and len(vocab) == len(cfg_model.vocab) and len(classes) == len(cfg_model.classes):
            from dataclasses import replace

            return replace(cfg_model, vocab=vocab, classes=classes)
        return cfg_model
    if config is not None:
        raise BadInput("--config applies to TransformerLens checkpoints (.safetensors, .pt) only")
    if low.endswith(".json"):
        from depthcert.checkers.weights_file import load_weights

        return load_weights(path, task)
    raise BadInput(f"{path}: unknown checkpoint type (expected .safetensors, .pt, .pth or a depthcert .json weights file)")


class _Spec:
    """What a worker needs (picklable)."""

    def __init__(self, model, task, opts):
        self.model, self.task, self.opts = model, task, opts


_CACHE: dict = {}


def run_chunk(spec: _Spec, lo: int, hi: int, batch_size: int):
    from depthcert.checkers.accuracy import PointDecider

    if _CACHE.get("spec") is not spec:
        _CACHE.clear()
        _CACHE.update(spec=spec, dec=PointDecider(spec.model, spec.task, **spec.opts))
    return _CACHE["dec"].chunk(lo, hi, batch_size)


def run(model, task, opts: dict, chunk_points: int, batch_size: int, dask: str | None = None,
        workers: int | None = None, journal: str | None = None, progress: bool = False,
        max_seconds: float | None = None):
    """The AccuracyVerdict of every point, in this process or on Dask, resuming from a journal;
    past `max_seconds` the run stops with BadInput (exit 2; a journal keeps the finished chunks)."""
    from depthcert.checkers.accuracy import PointDecider, chunks, merge
    from depthcert.checkers.budget import time_limit_passed

    t0 = time.perf_counter()
    what = f"deciding {plural(task.size, 'point')}"
    # the limit counts from here: building the decider (the exact model's a-priori bound) included
    deadline = (t0 + max_seconds, max_seconds, what) if max_seconds is not None else None
    dec = PointDecider(model, task, deadline=deadline, **opts)  # validates compatibility before any worker starts
    if max_seconds is not None:
        dec.stop_after(max_seconds, what, start=t0)

    def check_time():
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            raise time_limit_passed(what, max_seconds)
    jr = None
    if journal is not None:
        from depthcert.checkers.accuracy_journal import AccuracyJournal

        jr = AccuracyJournal(journal, model, task, {k: str(v) for k, v in sorted(opts.items())}, chunk_points)
    todo = [c for c in chunks(task.size, chunk_points) if jr is None or c not in jr.done]
    results = [] if jr is None else list(jr.done.values())
    boxes = {}  # the margin-end points of the journalled chunks, decided again before anything is printed
    for r in results:
        if r.margin is not None:
            for i in (r.low_index, r.high_index):
                if i not in boxes:
                    boxes[i] = dec.chunk(i, i + 1, 1).margin
            jr.check_enclosure(r, boxes[r.low_index], boxes[r.high_index])
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=task.size, initial=task.size - sum(hi - lo for lo, hi in todo), unit="pt",
                   desc="verify-model", leave=False, file=sys.stderr)

    def take(res):
        check_time()
        results.append(res)
        if jr is not None:
            jr.record(res)
        if bar is not None:
            bar.update(res.hi - res.lo)

    where = "this process"
    if dask is not None and todo:
        from depthcert.cli.cluster import DaskRunner

        runner = DaskRunner(None if dask == "local" else dask, workers)
        try:
            where = runner.describe()
            spec = runner.client.scatter(_Spec(model, task, opts), broadcast=True)
            futures = [runner.client.submit(run_chunk, spec, lo, hi, batch_size, pure=False) for lo, hi in todo]
            from dask.distributed import as_completed

            for fut in as_completed(futures):
                try:
                    take(fut.result())
                except BadInput:
                    raise
                except Exception as exc:
                    raise BadInput(f"a Dask worker failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        finally:
            runner.close()
    else:
        for lo, hi in todo:
            take(dec.chunk(lo, hi, batch_size))
    if bar is not None:
        bar.close()
    note = f"ran on {where}" + (f"; {plural(len(jr.done) - len(todo), 'chunk')} resumed from {journal}" if jr is not None else "")
    return merge(task, results, dec.path, time.perf_counter() - t0, (note,))


def _fmt_margin(m) -> str:
    from depthcert.checkers.rational import exact_text

    if m is None:
        return "-"
    if m[0] == m[1]:
        return exact_text(m[0])
    # rounded outward (10 digits), as verify-construction prints it: float(...):.10g rounded to
    # nearest, so a tight enclosure printed ends that exclude the true margin, and a margin
    # beyond float64 (1e600 from weights of 1e300) raised OverflowError (exit 4)
    lo, hi = enclosure_text(m)
    return f"in [{lo}, {hi}] (certified enclosure)"


def write_points(path: str, task, verdict) -> None:
    from depthcert.checkers.atomic import write_json_atomic

    if len(verdict.wrong) + len(verdict.undecided) > MAX_LISTED:
        raise BadInput(f"--wrong-out: {len(verdict.wrong) + len(verdict.undecided)} points to list, more than {MAX_LISTED}")

    def rows(idx):
        out = []
        for i in idx:
            p = task.point(int(i))
            out.append([int(i), " ".join(p.tokens), p.label])
        return out

    write_json_atomic(path, {"format": "depthcert.points", "version": 1, "task": task.describe(),
                             "points": task.size, "correct": verdict.correct,
                             "wrong": rows(verdict.wrong), "undecided": rows(verdict.undecided)})


def _main(argv) -> int:
    t_start = time.perf_counter()
    p = _Parser(prog="verify-model", description="Certified accuracy of a trained model on every point of a dataset.")
    p.add_argument("checkpoint", help="TransformerLens checkpoint (.safetensors, .pt) or depthcert weights (.json)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help=tasks_help(every_task=True))
    src.add_argument("--dataset", help="a depthcert.dataset JSON file")
    add_task_options(p)
    p.add_argument("--config", help="TransformerLens config JSON (when the checkpoint does not carry it)")
    p.add_argument("--require-all", action="store_true", help="verified/refuted: exit 1 when some point is wrong")
    p.add_argument("--wrong-out", help="write every wrong and undecided point to this JSON file")
    p.add_argument("--show", type=int, default=5, help="wrong points printed (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--dask", nargs="?", const="local", default=None, help="run chunks on Dask (local or a scheduler address)")
    p.add_argument("--workers", type=positive_int, default=None, help="Dask local workers (default: CPU count)")
    p.add_argument("--journal", help="record finished chunks here; a re-run resumes")
    p.add_argument("--chunk-points", type=positive_int, default=65536)
    p.add_argument("--max-points", type=positive_int, default=DEFAULT_MAX_POINTS,
                   help=f"refuse datasets with more points (default {DEFAULT_MAX_POINTS:,})")
    # 2048 points per batch, as verify-construction: the softmax models' exact prefix and float64 intervals
    # ran about 30% faster than at 8192 (arrays of a batch stay in cache); every count and margin is the same
    p.add_argument("--batch-size", type=positive_int, default=2048)
    p.add_argument("--precision", type=positive_int, default=None, help="arb start precision (bits)")
    p.add_argument("--max-precision", type=positive_int, default=None, help="arb precision cap (bits, default 4096)")
    p.add_argument("--method", default="auto", choices=("auto", "tables", "intervals", "balls"),
                   help="softmax models: certified float64 tables (one-layer attention-only), float64 intervals "
                        "(any softmax model), or arb balls for every point; auto takes the first that applies")
    p.add_argument("--max-seconds", type=positive_int, default=DEFAULT_MAX_SECONDS,
                   help=f"stop a run (exit 2; a --journal keeps its finished chunks) that goes on longer (default "
                        f"{DEFAULT_MAX_SECONDS} s)")
    p.add_argument("--robustness", action="store_true",
                   help="weight tolerance (certified ball pass, arb exp for softmax), fewest fractional bits and float "
                        "formats, each keeping the same set of correct points (docs/robustness.md)")
    p.add_argument("--compare-float", action="store_true",
                   help="also run a plain float32 and a float64 forward of the TransformerLens checkpoint over every "
                        "point and count where each disagrees with the certified decision (a float brute force "
                        "certifies nothing)")
    args = p.parse_args(argv)
    for name in ("precision", "max_precision"):
        v = getattr(args, name)
        if v is not None and not 2 <= v <= PRECISION_LIMIT:
            raise BadInput(f"--{name.replace('_', '-')} must be in 2 .. {PRECISION_LIMIT}, got {v}")
    if args.precision and args.max_precision and args.precision > args.max_precision:
        raise BadInput("--precision must not exceed --max-precision")
    if args.show < 0:
        raise BadInput("--show must be >= 0")
    if args.workers is not None and args.dask is None:
        raise BadInput("--workers applies with --dask")
    if args.wrong_out is not None and not os.path.isdir(os.path.dirname(os.path.abspath(args.wrong_out))):
        raise BadInput(f"--wrong-out {args.wrong_out}: folder does not exist")
    args.checkpoint, args.dataset = data_file(args.checkpoint), data_file(args.dataset)  # docs/examples/ from any folder
    if args.dataset is not None:
        from depthcert.checkers.tasks.dataset_file import load_dataset

        task = load_dataset(args.dataset)
    else:
        task = task_from_args(args)
    if task.size > args.max_points:
        raise BadInput(f"{task.describe()} has {task.size:,} points, more than --max-points {args.max_points:,}")
    if args.robustness and (args.dask is not None or args.journal is not None):
        raise BadInput("--robustness runs in this process: drop --dask and --journal")
    if args.compare_float:
        if not args.checkpoint.lower().endswith((".safetensors", ".pt", ".pth")):
            raise BadInput("--compare-float applies to TransformerLens checkpoints (.safetensors, .pt)")
        if task.outputs != "last":
            raise BadInput("--compare-float reads the last position only; this dataset labels every position")
    model = load_any_model(args.checkpoint, args.config, task)
    read_seconds = time.perf_counter() - t_start
    opts = {"start_precision": args.precision, "max_precision": args.max_precision, "method": args.method}
    v = run(model, task, opts, args.chunk_points, args.batch_size, args.dask, args.workers, args.journal,
            progress=not args.json and sys.stderr.isatty(), max_seconds=args.max_seconds)
    floats = None
    if args.compare_float:
        from depthcert.interop.float_forward import compare_with_verdict
        from depthcert.interop.transformerlens import read_checkpoint

        floats = compare_with_verdict(*read_checkpoint(args.checkpoint, args.config), task, v, model)
    robust, t_robust = None, time.perf_counter()
    if args.robustness:
        from depthcert.proofs.robustness import model_robustness_report

        robust = model_robustness_report(model, task, v, opts, progress=not args.json and sys.stderr.isatty())
    robust_seconds = time.perf_counter() - t_robust
    if args.wrong_out:
        write_points(args.wrong_out, task, v)
    if args.require_all and len(v.wrong):
        code = EXIT_REFUTED
    elif len(v.undecided):
        code = EXIT_UNDECIDED
    else:
        code = 0
    if args.json:
        margin = (None if v.margin is None else
                  margin_json(exact=v.margin[0]) if v.margin[0] == v.margin[1] else margin_json(enclosure=v.margin))
        print(json.dumps({"command": "verify-model", "checkpoint": os.path.basename(args.checkpoint),
                          "task": task.describe(), "points": v.points,
                          "correct": v.correct, "wrong": len(v.wrong), "undecided_points": len(v.undecided),
                          "verdict": v.verdict, "min_margin": margin,
                          "first_wrong": [int(i) for i in v.wrong[: args.show]],
                          "first_undecided": [int(i) for i in v.undecided[:100]],
                          "undecided_limits": [{"point": int(i), "limit": w} for i, w in v.limits if w],
                          "evaluation": v.path, "seconds": round(v.seconds, 3),
                          "total_seconds": round(time.perf_counter() - t_start, 3)}
                         | ({"robustness_seconds": round(robust_seconds, 3)} if args.robustness else {})
                         | ({"wrote": [args.wrong_out]} if args.wrong_out else {})
                         | ({} if robust is None else {"robustness": robust})
                         | ({} if floats is None else {"float_comparison": floats})))
        return code
    pct = 100 * v.correct / v.points if v.points else 0.0
    print(f"model          {os.path.basename(args.checkpoint)} ({model.kinds()}, {plural(model.n_layers, 'layer')}, d' = {model.dim})")
    print(f"task           {task.describe()} ({v.points:,} points)")
    print(f"path           {v.path}" + (f" ({v.by_tables:,} points by float64, {v.by_balls:,} in arb)" if v.by_tables else ""))
    print(f"certified accuracy {v.correct:,}/{v.points:,} ({pct:.4f}%)")
    print(f"wrong          {len(v.wrong):,} (a tie counts as wrong)")
    for i in v.wrong[: args.show]:
        pt = task.point(int(i))
        print(f"  point {int(i)}: {task.render(pt.tokens)}  label {pt.label}")
    if len(v.wrong) > args.show:
        print(f"  ... {len(v.wrong) - args.show:,} more" + (f" in {args.wrong_out}" if args.wrong_out else " (all of them: --wrong-out FILE)"))
    print(f"undecided      {len(v.undecided):,}" + (" (certified balls still overlap at the precision cap)" if len(v.undecided) else ""))
    why = dict(v.limits)  # the limit each undecided point reached, when this run decided it
    for i in v.undecided[: args.show]:
        pt = task.point(int(i))
        print(f"  point {int(i)}: {task.render(pt.tokens)}  label {pt.label}"
              + (f"  ({why[int(i)]})" if why.get(int(i)) else ""))
    print(f"min margin     {_fmt_margin(v.margin)} (over the correct points)")
    if args.require_all:
        print(f"verdict        {v.verdict}")
    if floats is not None:
        _print_floats(floats, task, args.show)
    if robust is not None:
        _print_robustness(robust)
    if args.wrong_out:
        print(f"wrote          {args.wrong_out} (every wrong and undecided point: docs/trained-models.md)")
    total = time.perf_counter() - t_start  # the last line: the whole run, reading the model included
    print(f"time           {total:.1f} s ({v.notes[0]})" + (
        f": {read_seconds:.1f} s reading the model and the task, {v.seconds:.1f} s deciding every point, "
        f"{robust_seconds:.1f} s robustness" if args.robustness else ""))
    return code


def _print_robustness(r: dict) -> None:
    """The robustness block; formats not available are printed with their reason."""
    from depthcert.cli.verify_construction import _print_robustness as print_construction

    if "note" in r:
        print(f"robustness:\n  {r['note']}")
        return
    fm = r.get("formats") or {}
    print_construction({k: v for k, v in r.items() if k != "formats"} | ({} if "available" in fm else {"formats": fm}))
    print("  keeps        the same set of correct points")
    if "available" in fm:
        print(f"  formats      not available: {fm['reason']}")


def _print_floats(floats: dict, task, show: int) -> None:
    """--compare-float: each float brute force's counts and its disagreements with the certificate."""
    for name, f in floats.items():
        print(f"{name:<14} {f['correct']:,} correct, {f['wrong']:,} wrong by a plain {name} forward ({f['seconds']:.1f} s); "
              f"{plural(f['disagreements'], 'disagreement')} with the certified decision"
              + (f", {f['undecided_float_correct']:,} undecided points it calls correct" if f["undecided_float_correct"] else ""))
        for d in f["first_disagreements"][:show]:
            pt = task.point(d["point"])
            print(f"  point {d['point']}: {task.render(pt.tokens)}  label {pt.label}: certified {d['certified']}, "
                  f"{name} says {d['float']}")
        if f["disagreements"] > show:
            print(f"  ... {f['disagreements'] - show:,} more (--json lists the first {len(f['first_disagreements'])})")


def verify_model_main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(verify_model_main())
