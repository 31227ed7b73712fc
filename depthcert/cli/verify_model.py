"""verify-model CHECKPOINT (--task TASK [sizes] | --dataset FILE): certified accuracy on every point.

CHECKPOINT is a TransformerLens checkpoint (.safetensors or .pt, docs/trained-models.md), a Hugging
Face GPT-2 folder written by save_pretrained (config.json + model.safetensors), or a depthcert
weights file (.json).  Every point is decided (checkers/accuracy.py): the output is
`certified accuracy N/M` (a tie counts as wrong), the smallest margin among correct points, and
the wrong points (the first few printed, all of them with --wrong-out FILE).

Exit codes, as every command's (README): 0 every point certainly correct (verified), 1 some point
certainly wrong (refuted: the certified accuracy is below 100%, whatever else is undecided), 2 bad
input (one line), 3 no point wrong but some left undecided at the precision limit, or the run
stopped at --max-seconds with what it decided so far (never rounded into a verdict).
--require-all is accepted and changes nothing (it used to be needed for exit 1).
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


def load_any_model(path: str, config: str | None, task, config_seen: list | None = None):
    """A TransformerLens checkpoint (.safetensors/.pt/.pth) or a depthcert weights file (.json).
    A TransformerLens checkpoint is read at every position when the task labels every position (its
    logits are computed there); config_seen: a list the checkpoint's config dict is appended to."""
    low = path.lower()
    if os.path.isdir(path) or low.endswith((".safetensors", ".pt", ".pth")):
        from depthcert.interop.transformerlens import load_model

        vocab = tuple(task.vocab) if task is not None else None
        classes = tuple(task.classes) if task is not None else None
        every = task is not None and getattr(task, "outputs", "last") == "all"
        if os.path.isdir(path):  # a Hugging Face save_pretrained folder (GPT-2): depthcert/interop/huggingface.py
            from depthcert.interop.huggingface import load_model as load_hf

            if config is not None:
                raise BadInput("--config applies to TransformerLens checkpoints; a Hugging Face folder carries its "
                               "config.json")
            cfg_model = load_hf(path, None, None, config_seen, every_position=every)
        else:
            cfg_model = load_model(path, config, None, None, config_seen, every_position=every)
        # name tokens and classes as the task does when the sizes agree ("0", "1", ... otherwise)
        from dataclasses import replace

        if vocab is not None and len(vocab) == len(cfg_model.vocab) and len(classes) == len(cfg_model.classes):
            return replace(cfg_model, vocab=vocab, classes=classes)
        # a Hugging Face causal LM's logits are next-token logits over its own vocabulary: when the task's
        # tokens are the model's and its classes are some of them (modular addition: "0" .. "p-1" of the
        # tokens "0" .. "p-1", "="), each logit is named as its token, and a label must beat every token's
        if (os.path.isdir(path) and vocab is not None and len(vocab) == len(cfg_model.vocab) == len(cfg_model.classes)
                and set(classes) <= set(vocab)):
            return replace(cfg_model, vocab=vocab, classes=vocab)
        return cfg_model
    if config is not None:
        raise BadInput("--config applies to TransformerLens checkpoints (.safetensors, .pt) only")
    if low.endswith(".json"):
        from depthcert.checkers.weights_file import load_weights

        model = load_weights(path, task)
        if task is not None and getattr(task, "outputs", "last") == "all" and model.outputs != "all":
            raise BadInput(f"{path}: the task labels every position, but this weights file classifies the last "
                           "position only (\"outputs\": \"last\", the default); add \"outputs\": \"all\" to the "
                           "file (weights format version 2) to classify every position")
        return model
    raise BadInput(f"{path}: unknown checkpoint type (expected .safetensors, .pt, .pth or a depthcert .json weights file)")


def checkpoint_use(model, task) -> str | None:
    """One line when the task's inputs use fewer tokens or positions than the checkpoint has (None
    when they use all of them): "the inputs use 10 of the checkpoint's 64 tokens and 2 of its 4
    positions".  A task that needs more is refused before (checkers/exhaustive.py check_compatible)."""
    parts = []
    V, n = len(model.vocab), model.max_length
    used_tokens = len(set(task.vocab) & set(model.vocab))
    if used_tokens < V:
        parts.append(f"{used_tokens:,} of the checkpoint's {V:,} tokens")
    if task.length < n:
        parts.append(f"{task.length:,} of {'its' if parts else 'the checkpoint' + chr(39) + 's'} {n:,} positions")
    if not parts:
        return None
    line = "the inputs use " + " and ".join(parts)
    C, used_classes = len(model.classes), len(set(task.classes) & set(model.classes))
    if used_classes < C:
        line += f"; a point is correct only if its label beats all {C:,} output classes ({used_classes:,} are labels)"
    return line


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
    """The AccuracyVerdict of every point, in this process or on Dask, resuming from a journal.
    Past `max_seconds` (checked between chunks and batches, before every point and precision in
    arb, inside the exact tie decision, and before every layer of the big-integer pass) the run
    stops and the verdict counts what was decided so far (AccuracyVerdict.stopped: the points not
    reached; a journal keeps the finished chunks)."""
    from depthcert.checkers.accuracy import PointDecider, Stopped, chunks, merge, merge_stopped
    from depthcert.checkers.budget import TimeLimitPassed

    t0 = time.perf_counter()
    what = f"deciding {plural(task.size, 'point')}"
    # the limit counts from here: building the decider (the exact model's a-priori bound) included
    deadline = (t0 + max_seconds, max_seconds, what) if max_seconds is not None else None
    try:
        dec = PointDecider(model, task, deadline=deadline, **opts)  # validates compatibility before any worker starts
    except TimeLimitPassed as exc:  # the exact model's a-priori bound ran past the limit: nothing decided
        return merge_stopped(task, [], chunks(task.size, chunk_points), "not started", time.perf_counter() - t0,
                             ("ran on this process",), f"stopped at --max-seconds {max_seconds:g} while preparing the model ({exc}), with no "
                             "point decided, so no measured rate to suggest a limit from")
    if max_seconds is not None:
        dec.stop_after(max_seconds, what, start=t0)

    class _Stop(Exception):
        pass

    def check_time():
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            raise _Stop
    jr = None
    if journal is not None:
        from depthcert.checkers.accuracy_journal import AccuracyJournal

        jr = AccuracyJournal(journal, model, task, {k: str(v) for k, v in sorted(opts.items())}, chunk_points)
    todo = [c for c in chunks(task.size, chunk_points) if jr is None or c not in jr.done]
    results = [] if jr is None else list(jr.done.values())
    boxes = {}  # the margin-end points of the journalled chunks, decided again before anything is printed
    try:
        for r in results:
            if r.margin is not None:
                for i in (r.low_index, r.high_index):
                    if i not in boxes:
                        boxes[i] = dec.chunk(i, i + 1, 1).margin
                jr.check_enclosure(r, boxes[r.low_index], boxes[r.high_index])
    except Stopped as exc:  # the journal's chunks unchecked: none of them counts
        return merge_stopped(task, [], chunks(task.size, chunk_points), dec.path, time.perf_counter() - t0,
                             (f"ran on this process; the chunks of {journal} not used",), f"stopped at --max-seconds {max_seconds:g} while checking the journal's recorded "
                             f"points, with no point decided, so no measured rate to suggest a limit from ({exc.why})")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=task.size, initial=task.size - sum(hi - lo for lo, hi in todo), unit="pt",
                   desc="verify-model", leave=False, file=sys.stderr)
    finished: set = set()

    def take(res):
        results.append(res)
        finished.add((res.lo, res.hi))
        if jr is not None:
            jr.record(res)
        if bar is not None:
            bar.update(res.hi - res.lo)
        check_time()

    where = "this process"
    stop = None  # the stop's message, when the run reached max_seconds
    try:
        if dask is not None and todo:
            from depthcert.cli.cluster import DaskRunner

            runner = DaskRunner(None if dask == "local" else dask, workers)
            try:
                where = runner.describe()
                spec = runner.client.scatter(_Spec(model, task, opts), broadcast=True)
                futures = [runner.client.submit(run_chunk, spec, lo, hi, batch_size, pure=False) for lo, hi in todo]
                from dask.distributed import TimeoutError as DaskTimeout
                from dask.distributed import as_completed

                # a worker's chunk is not stopped from here: the wait for results is (past --max-seconds, the
                # chunks finished so far count, as in one process)
                left_s = None if max_seconds is None else max(t0 + max_seconds - time.perf_counter(), 0.001)
                done_iter = iter(as_completed(futures, timeout=left_s))
                while True:
                    try:
                        fut = next(done_iter)
                    except StopIteration:
                        break
                    except DaskTimeout:
                        raise _Stop from None
                    try:
                        res = fut.result()
                    except BadInput:
                        raise
                    except Exception as exc:
                        raise BadInput(f"a Dask worker failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
                    take(res)
            finally:
                runner.close()
        else:
            for lo, hi in todo:
                take(dec.chunk(lo, hi, batch_size))
    except Stopped as exc:  # inside a chunk: its points decided so far count (it is not journalled)
        results.append(exc.partial)
        finished.add((exc.partial.lo, exc.partial.hi))
        stop = exc.why
    except (_Stop, TimeLimitPassed) as exc:  # between chunks (or while building what a chunk needs)
        stop = str(exc) or "between chunks"
    if bar is not None:
        bar.close()
    note = f"ran on {where}" + (f"; {plural(len(jr.done) - len(todo), 'chunk')} resumed from {journal}" if jr is not None else "")
    seconds = time.perf_counter() - t0
    left = [c for c in todo if c not in finished]
    decided = task.size - sum(r.stopped for r in results) - sum(hi - lo for lo, hi in left)
    if stop is None or decided == task.size:  # (the limit passed after the last point: nothing is missing)
        return merge(task, results, dec.path, seconds, (note,))
    # a limit to suggest only from what this run measured: its rate over the points it decided
    if decided > 0:
        need = seconds * task.size / decided
        stop = (f"stopped at --max-seconds {max_seconds:g} after {seconds:.1f} s, {decided:,} of {task.size:,} points "
                f"decided; at this run's measured rate ({decided / seconds:,.0f} points/s) all of them would take "
                f"about {need:,.0f} s (a point left to the exact tie decision can take up to its own limit more): "
                f"try --max-seconds {int(need * 1.5) + 1} (1.5 times that estimate)")
    else:
        stop = (f"stopped at --max-seconds {max_seconds:g} after {seconds:.1f} s with no point decided, so no "
                "measured rate to suggest a limit from")
    return merge_stopped(task, results, left, dec.path, seconds, (note,), stop)


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
    p.add_argument("checkpoint", help="TransformerLens checkpoint (.safetensors, .pt), a Hugging Face GPT-2 folder "
                                      "(config.json + model.safetensors) or depthcert weights (.json)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help=tasks_help(every_task=True))
    src.add_argument("--dataset", help="a depthcert.dataset JSON file")
    add_task_options(p)
    p.add_argument("--config", help="TransformerLens config JSON (when the checkpoint does not carry it)")
    p.add_argument("--require-all", action="store_true",
                   help="accepted and changes nothing: a run with some point certainly wrong exits 1 without it")
    p.add_argument("--strict-config", action="store_true",
                   help="refuse (exit 2) a TransformerLens config with keys that are not HookedTransformerConfig fields "
                        "(HookedTransformerConfig.from_dict refuses them too), or a Hugging Face config.json with keys "
                        "this reader neither reads, refuses nor lists as without effect; without it: one warning line "
                        "names them, and they are ignored")
    p.add_argument("--wrong-out", help="write every wrong and undecided point to this JSON file")
    p.add_argument("--show", type=int, default=5, help="wrong points printed (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--dask", nargs="?", const="local", default=None, help="run chunks on Dask (local or a scheduler address)")
    p.add_argument("--workers", type=positive_int, default=None, help="Dask local workers (default: CPU count)")
    p.add_argument("--journal", help="record finished chunks here; a re-run resumes")
    p.add_argument("--chunk-points", type=positive_int, default=65536,
                   help="points per chunk: the unit a --journal records and --dask hands to a worker (default 65,536)")
    p.add_argument("--max-points", type=positive_int, default=DEFAULT_MAX_POINTS,
                   help=f"refuse datasets with more points (default {DEFAULT_MAX_POINTS:,})")
    # 2048 points per batch, as verify-construction: the softmax models' exact prefix and float64 intervals
    # ran about 30% faster than at 8192 (arrays of a batch stay in cache); every count and margin is the same
    p.add_argument("--batch-size", type=positive_int, default=2048,
                   help="points evaluated together inside a chunk (memory and speed only; every count and margin is "
                        "the same; default 2,048)")
    p.add_argument("--precision", type=positive_int, default=None, help="arb start precision (bits)")
    p.add_argument("--max-precision", type=positive_int, default=None, help="arb precision cap (bits, default 4096)")
    p.add_argument("--method", default="auto", choices=("auto", "tables", "intervals", "balls"),
                   help="softmax models: certified float64 tables (one-layer attention-only), float64 intervals "
                        "(any softmax model), or arb balls for every point; auto takes the first that applies")
    p.add_argument("--max-seconds", type=positive_int, default=DEFAULT_MAX_SECONDS,
                   help=f"stop a run that goes on longer and report what it decided so far (exit 3, or 1 when a point "
                        f"decided is wrong; a --journal keeps its finished chunks; default {DEFAULT_MAX_SECONDS} s)")
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
    hf_folder = os.path.isdir(args.checkpoint)
    if hf_folder:
        args.checkpoint = os.path.normpath(args.checkpoint)  # (its name printed without a trailing slash)
    if args.compare_float:
        if not hf_folder and not args.checkpoint.lower().endswith((".safetensors", ".pt", ".pth")):
            raise BadInput("--compare-float applies to TransformerLens checkpoints (.safetensors, .pt) and Hugging "
                           "Face folders")
        if task.outputs != "last":
            raise BadInput("--compare-float reads the last position only; this dataset labels every position")
    seen: list = []
    model = load_any_model(args.checkpoint, args.config, task, seen)
    unknown = []
    if seen and hf_folder:  # config.json: a key neither read, refused nor without effect
        from depthcert.interop.huggingface import config_warning

        unknown, what = config_warning(seen[0])
        if unknown and args.strict_config:
            raise BadInput(f"--strict-config: {what}; rename or remove {'them' if len(unknown) != 1 else 'it'}")
        if unknown:
            print(f"warning: ignored {what} (docs/trained-models.md; --strict-config: exit 2)", file=sys.stderr)
    elif seen:
        from depthcert.interop.transformerlens import TL_VERSION, unknown_config_keys

        unknown = unknown_config_keys(seen[0])
        if unknown:
            what = (f"TransformerLens config key{'s' if len(unknown) != 1 else ''} that "
                    f"{'are not HookedTransformerConfig fields' if len(unknown) != 1 else 'is not a HookedTransformerConfig field'}"
                    f" (TransformerLens {TL_VERSION}): {', '.join(unknown)}")
            if args.strict_config:
                raise BadInput(f"--strict-config: {what}; rename or remove {'them' if len(unknown) != 1 else 'it'}")
            print(f"warning: ignored {what}; HookedTransformerConfig.from_dict would refuse "
                  f"{'them' if len(unknown) != 1 else 'it'} (--strict-config: exit 2)", file=sys.stderr)
    use = checkpoint_use(model, task)
    read_seconds = time.perf_counter() - t_start
    opts = {"start_precision": args.precision, "max_precision": args.max_precision, "method": args.method}
    v = run(model, task, opts, args.chunk_points, args.batch_size, args.dask, args.workers, args.journal,
            progress=not args.json and sys.stderr.isatty(), max_seconds=args.max_seconds)
    floats = None
    if args.compare_float and not v.stopped:  # (a stopped run has no decision to compare every point with)
        from depthcert.interop.float_forward import compare_with_verdict
        from depthcert.interop.transformerlens import read_checkpoint

        if hf_folder:
            from depthcert.interop import huggingface_llama as llama
            from depthcert.interop import huggingface_neox as neox
            from depthcert.interop.huggingface import read_tl

            if llama.folder_family(args.checkpoint) is not None:  # a true float64 forward (and float32)
                floats = compare_with_verdict(*llama.read_float(args.checkpoint), task, v, model,
                                              forward=llama.llama_forward)
            elif neox.folder_is_neox(args.checkpoint):  # likewise
                floats = compare_with_verdict(*neox.read_float(args.checkpoint), task, v, model,
                                              forward=neox.neox_forward)
            else:
                floats = compare_with_verdict(*read_tl(args.checkpoint), task, v, model)
        else:
            floats = compare_with_verdict(*read_checkpoint(args.checkpoint, args.config), task, v, model)
    robust, t_robust = None, time.perf_counter()
    if args.robustness and v.stopped:  # its passes keep the set of correct points, which a stopped run does not know
        robust = {"note": "not measured: the run stopped at --max-seconds before deciding every point"}
    elif args.robustness:
        from depthcert.proofs.robustness import model_robustness_report

        robust = model_robustness_report(model, task, v, opts, progress=not args.json and sys.stderr.isatty())
    robust_seconds = time.perf_counter() - t_robust
    if args.wrong_out:
        write_points(args.wrong_out, task, v)
    if len(v.wrong):  # a point certainly wrong refutes, whatever else is undecided (--require-all: the same)
        code = EXIT_REFUTED
    elif len(v.undecided) or v.stopped:
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
                          "stopped_points": v.stopped, "stop": v.stop or None,
                          "ignored_config_keys": unknown, "inputs": use,
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
    print(f"task           {task.describe()} ({v.points:,} point{'' if v.points == 1 else 's'})")
    if use:
        print(f"inputs         {use}")
    print(f"path           {v.path}" + (f" ({v.by_tables:,} point{'' if v.by_tables == 1 else 's'} by float64, {v.by_balls:,} in arb)"
                                         if v.by_tables else ""))
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
    if v.stopped:
        print(f"not decided    {v.stopped:,} (the run stopped first)")
    print(f"min margin     {_fmt_margin(v.margin)} (over the correct points{' decided' if v.stopped else ''})")
    print(f"verdict        {v.verdict}")
    if v.stop:
        print(f"stopped        {v.stop}")
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
