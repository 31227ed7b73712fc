"""verify-construction: build a construction (or load --weights) and check it on every point.

Exit codes: 0 verified, 1 refuted (counterexample printed), 2 bad input (one line, no traceback),
3 undecided (softmax models only: certified balls could not separate some point's logits at the
precision cap; the point is printed; never rounded into a verdict; --all-sizes: not proven), 4 internal error
(depthcert/cli/errors.py).
"""
from __future__ import annotations

import json
import os
import sys
import time
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput, TooManyPoints
from depthcert.checkers.rational import format_rational
from depthcert.cli.common import (EXIT_UNDECIDED, PRECISION_LIMIT, TASK_OPTIONS, _counterexample_json, _fmt_q,
                                  _Parser, _precision_options, _undecided_json, add_budget_options, add_task_options,
                                  data_file, enclosure_text, exit_codes_epilog, guard_classifier_size, logits_line,
                                  margin_json, nonnegative_int, plural, positive_int, run_main, task_from_args,
                                  tasks_help, variants_help, verdict_fields)

DEFAULT_MAX_POINTS = 20_000_000


def _build_parser() -> _Parser:
    p = _Parser(
        prog="verify-construction",
        description="Build a construction of arXiv 2404.01601 in exact arithmetic and check it on every "
        "point of its task's dataset.",
        epilog="Dataset sizes: sc M^L; icqa A(n_q,k)*A(n_a,k)*k; tm m^l (Bell(l) templates); "
        "ictm, multihop and the other tasks: see docs/ (each run prints its size formula). Each point is an "
        "integer index: replay one with --point N. " + exit_codes_epilog("verify-construction"),
    )
    p.add_argument("task", nargs="?", help=tasks_help())
    p.add_argument("--dataset", metavar="FILE",
                   help="a labelled dataset (depthcert.dataset JSON) instead of a task's: checks --weights on it, "
                   "or builds the Theorem 1 memorization construction for it (task sc)")
    add_task_options(p)
    p.add_argument("--variant", default=None, help=variants_help())
    p.add_argument("--as-printed", action="store_true", help="the weights exactly as the paper prints them")
    p.add_argument("--weights", metavar="FILE", help="verify these weights (depthcert.weights JSON) instead")
    p.add_argument("--export", metavar="FILE", help="write the construction's exact weights as JSON")
    p.add_argument("--point", type=nonnegative_int, metavar="N", help="evaluate only dataset point N and show it")
    p.add_argument("--max-points", type=positive_int, default=DEFAULT_MAX_POINTS,
                   help=f"refuse runs that would evaluate more points (default {DEFAULT_MAX_POINTS})")
    add_budget_options(p)
    p.add_argument("--symmetry", choices=("auto", "off"), default="auto",
                   help="auto: prove equivariance under the task's token permutations on the weights, then "
                   "evaluate one point per orbit (falls back to every point if the proof fails)")
    p.add_argument("--exact", action="store_true", help="skip the proven float64 fast path (big integers)")
    p.add_argument("--precision", type=positive_int, default=None, metavar="BITS",
                   help="softmax models: bits of the first ball attempt (default 64)")
    p.add_argument("--max-precision", type=positive_int, default=None, metavar="BITS",
                   help="softmax models: precision cap; balls still overlapping there make the point undecided "
                   f"(default 4096, at most {PRECISION_LIMIT})")
    p.add_argument("--batch-size", type=positive_int, default=2048)
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="processes for runs of 400k+ evaluated points (default: all cores); with --dask local, "
                   "the LocalCluster's workers")
    p.add_argument("--dask", nargs="?", const="local", default=None, metavar="SCHEDULER",
                   help="run the points on Dask: 'local' (a LocalCluster here; the default value) or a scheduler "
                   "address tcp://host:port (a cluster started with dask-jobqueue); needs the cluster extra")
    p.add_argument("--journal", metavar="FILE",
                   help="record finished chunks in FILE; re-running the same command resumes from it (the same "
                   "verdict); a journal of another model, task or size is refused")
    p.add_argument("--chunk-points", type=positive_int, default=None, metavar="N",
                   help="points per chunk of a sharded run (--workers, --dask, --journal; default 65536)")
    p.add_argument("--all-sizes", action="store_true",
                   help="prove the construction correct for every value of its size parameters (at or above "
                   "stated base values), not only the sizes given; exit 0 proven, 1 a size where it fails, 3 not "
                   "proven for every size (the parameters that stay finite-only are named)")
    p.add_argument("--family", metavar="MODULE:FUNCTION",
                   help="verify (or with --all-sizes prove) your own construction: FUNCTION(task, as_printed) -> "
                   "Construction, written with constructions/indexed.py or head_family.py (MODULE may be a FILE.py)")
    p.add_argument("--expect-hash", metavar="HASH", default=None,
                   help="check nothing unless the closed value built is the one with this content hash (sha256:..., "
                   "the hash --all-sizes proves and prints on its value line): a different hash, or no closed value, "
                   "is exit 2 with one line")
    p.add_argument("--cot", action="store_true",
                   help="verify chain-of-thought generation: the model generates its intermediate steps "
                   "autoregressively and every step of every input is checked (tasks that define steps)")
    p.add_argument("--readout", choices=("auto", "max-margin", "lemma3", "paper"), default="auto",
                   help="the classifier W_O: max-margin (an LP over the distinct final hidden vectors, entries in "
                   "[-1, 1], rationalized, then verified), lemma3 (Lemma 3's incremental classifier, as the paper "
                   "proves it exists), paper (the construction's own read-out); auto (default): max-margin where "
                   "the paper gives no read-out of its own (Lemma 3 constructions), else paper")
    p.add_argument("--fit-effort", type=int, default=1, metavar="N",
                   help="the max-margin read-out's LP work budget times N (default 1: about half the cost of a "
                   "plain float64 forward over the dataset; larger N fits closer to the LP's optimum, and the note "
                   "says how close)")
    p.add_argument("--compare-readouts", action="store_true",
                   help="also build and verify the other read-out and report both normalized margins")
    p.add_argument("--robustness", action="store_true",
                   help="certified weight tolerance (linf_radius), fewest fractional bits, and float16/bfloat16/"
                   "float32 forward passes (docs/robustness.md)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _task_or_dataset(args):
    if not args.dataset:
        if not args.task:
            from depthcert.cli.common import task_names

            raise BadInput(f"give a TASK ({', '.join(task_names())}) or --dataset FILE")
        return task_from_args(args, every_task=False)
    from depthcert.checkers.tasks.dataset_file import load_dataset
    from depthcert.cli.common import check_task_name

    given = [name for name, _ in TASK_OPTIONS if getattr(args, name) is not None]
    if given:
        raise BadInput(f"--{given[0].replace('_', '-')} does not apply with --dataset (the file fixes the data)")
    if args.task and check_task_name(args.task, every_task=False) != "sc":
        raise BadInput("--dataset is checked with --weights, or with task sc (the Theorem 1 construction)")
    if not args.task and not args.weights:
        raise BadInput("--dataset needs --weights FILE, or task sc to build the Theorem 1 construction")
    task = load_dataset(args.dataset)
    if args.task:
        task.name = "sc"  # the construction registry's key for this dataset
    return task


def _load_model(args, task):
    from depthcert.checkers.atomic import read_json
    from depthcert.checkers.weights_file import model_from_json

    model = model_from_json(read_json(args.weights, "weights"), task)
    return model


def _verify_construction(argv) -> int:
    from depthcert.checkers.budget import resource_budget

    t_start = time.perf_counter()
    args = _build_parser().parse_args(argv)
    args.dataset, args.weights = data_file(args.dataset), data_file(args.weights)
    with resource_budget(args.max_weights, args.max_seconds, show_progress=sys.stderr.isatty() and not args.json):
        return _verify_construction_guarded(args, t_start)


def phase(args, text: str) -> None:
    """Name a phase on stderr for terminal runs (a long build or proof is not silent)."""
    if sys.stderr.isatty() and not getattr(args, "json", False):
        print(f"... {text}", file=sys.stderr, flush=True)


def _verify_construction_guarded(args, t_start: float) -> int:
    from depthcert.checkers.exhaustive import check_compatible, plan_points, verify
    from depthcert import constructions

    try:
        task = _task_or_dataset(args)
    except TooManyPoints as exc:
        if args.all_sizes:
            raise BadInput(f"{exc} (--all-sizes needs a dataset it can build: run it at small sizes; its report "
                           "names the parameters proven for every value)") from None
        raise
    if args.all_sizes:
        from depthcert.cli.all_sizes import verify_all_sizes

        return verify_all_sizes(args, task)
    if args.cot:
        if args.expect_hash is not None:
            raise BadInput("--expect-hash compares the closed value of a construction checked without --cot")
        from depthcert.cli.cot import verify_cot

        return verify_cot(args, task)
    if args.batch_size < 1:
        raise BadInput("--batch-size must be >= 1")
    if args.max_points < 1:
        raise BadInput(f"--max-points must be >= 1, got {args.max_points}")
    if args.family and (args.weights or args.variant):
        raise BadInput("--family builds your construction; it takes no --weights or --variant")
    from depthcert.proofs import readout as ro

    if not 1 <= args.fit_effort <= ro.MAX_FIT_EFFORT:
        raise BadInput(f"--fit-effort must be from 1 to {ro.MAX_FIT_EFFORT}, got {args.fit_effort}")
    if args.weights:
        if args.variant or args.as_printed:
            raise BadInput("--weights verifies the given file; it takes no --variant or --as-printed")
        if args.readout == "lemma3":
            raise BadInput("--readout lemma3 applies to Lemma 3 constructions; --weights has its own W_O "
                           "(or --readout max-margin)")
        model = _load_model(args, task)
        value_hash = None
        theorem, variant, description, notes = "user-supplied weights", "weights:" + args.weights, "", ()
        own = "weights"
    else:
        guard_classifier_size(task, args.max_weights)
        phase(args, f"building the {task.name} construction")
        if args.family:
            if args.readout == "lemma3":
                raise BadInput("--readout lemma3: --family builds your construction with its own read-out "
                               "(or --readout max-margin)")
            if args.as_printed:
                raise BadInput("--family builds your closed value from symbols; it takes no --as-printed")
            from depthcert.cli.all_sizes import family_construction

            c = family_construction(args.family, task)  # its closed value instantiated (constructions/closed.py)
        else:
            lemma3_builder = constructions.fits_readout(constructions.builder_of(task, args.variant))
            if args.readout == "paper" and lemma3_builder:
                raise BadInput("--readout paper: the paper gives this construction no read-out of its own "
                               "(Lemma 3 is an existence proof); use --readout lemma3 or max-margin")
            # --as-printed is the paper's construction as printed: its read-out stays Lemma 3 under auto
            want_fit = args.readout == "max-margin" or (args.readout == "auto" and lemma3_builder and not args.as_printed)
            c = constructions.build(task, args.variant, args.as_printed, lemma3=not want_fit)
            # the read-out the construction has as built (as printed, Theorem 1's is Lemma 3's while
            # depthcert's version reads the one-hots): --readout lemma3 / paper name exactly that one
            if args.readout == "lemma3" and c.readout not in ("lemma3", "none"):
                printed_lemma3 = not args.as_printed and constructions.build(task, args.variant, True).readout == "lemma3"
                raise BadInput("--readout lemma3: this construction's read-out is the paper's own (not Lemma 3); "
                               "use --readout paper or max-margin" + (
                                   "; as printed (--as-printed) it reads out with Lemma 3's classifier"
                                   if printed_lemma3 else ""))
            if args.readout == "paper" and c.readout == "lemma3":
                raise BadInput("--readout paper: as printed, this construction reads out with Lemma 3's classifier; "
                               "use --readout lemma3 or max-margin")
        model, theorem, variant, description, notes = c.model, c.theorem, c.variant, c.description, c.notes
        own = "lemma3" if c.readout == "none" else c.readout  # a W_O left for the fit replaces Lemma 3's
        value_hash = _value_hash(c.symbolic)
    check_compatible(model, task)
    readout_name = "max-margin" if (args.readout == "max-margin" or (
        args.readout == "auto" and own == "lemma3" and not args.as_printed)) else own
    if args.expect_hash is not None:  # before any work: the check is of the expected value, or nothing
        from depthcert.cli.all_sizes import check_expected_hash

        check_expected_hash(args.expect_hash, value_hash, readout_name == "max-margin")
    readout_note = None
    if args.fit_effort != 1 and readout_name != "max-margin" and not args.compare_readouts:
        raise BadInput(f"--fit-effort sets the max-margin read-out's LP budget; this run's read-out is {readout_name}")
    table = None  # the one exact pass the fit reads and the verdict is decided from (plain runs)
    if readout_name == "max-margin":
        table = _one_pass_table(args, model, task)
        phase(args, "fitting the max-margin read-out (LP)")
        # the fit is a search: it uses orbit representatives whenever the layers' equivariance is
        # proven, whatever --symmetry says (which governs the verdict's check of every point)
        from dataclasses import replace

        hv = ro.hidden_vectors(model, task, "auto", args.max_points, table=table)
        fit = ro.fit_max_margin(hv, len(model.classes), task.size, args.fit_effort)
        fitted = replace(model, W_O=fit.W_O)
        readout_note = fit.note
        if fit.vector_margin <= 0 and own == "lemma3" and args.readout == "auto":
            # the search found no separating read-out: the paper's existence proof decides instead
            model = constructions.build(task, args.variant, args.as_printed).model
            readout_name = "lemma3"
            readout_note += "; it separates none: Lemma 3's classifier is used instead"
        else:
            model = fitted
            description = description.replace("Lemma 3 classifier", "max-margin read-out (LP)")

    def export():  # only once every input check has passed: exit 2 must leave no file behind
        if args.export:
            from depthcert.checkers.atomic import write_json_atomic
            from depthcert.checkers.weights_file import model_to_json

            write_json_atomic(args.export, model_to_json(model))

    balls = _precision_options(args, model)
    if args.point is not None:
        if args.point >= task.size:
            raise BadInput(f"--point {args.point} is outside the dataset (0 .. {task.size - 1})")
        export()
        return _show_point(args, task, model, theorem, balls)
    phase(args, "planning the points (symmetry proof on the weights)")
    plan = plan_points(model, task, args.symmetry, max_scan=args.max_points)
    if plan.n_eval > args.max_points:
        raise BadInput(
            f"{task.describe()} needs {plan.n_eval} points evaluated ({plan.note}), above the limit "
            f"{args.max_points}; raise it with --max-points {plan.n_eval}"
        )
    export()
    v = None
    if table is not None:  # the kernel decides the fitted model from the table, or refuses (two passes)
        from depthcert.checkers.hidden_table import TableMismatch, decide

        try:
            v = decide(model, table, task, plan)
        except TableMismatch:
            v = None
    if v is None:
        runner = None
        if args.dask:
            from depthcert.cli.cluster import DaskRunner

            runner = DaskRunner(args.dask, args.workers if args.dask == "local" else None)
        try:
            v = verify(model, task, batch_size=args.batch_size, progress=None if not args.json else False,
                       force_exact=args.exact, plan=plan, workers=args.workers, balls=balls, runner=runner,
                       journal=args.journal, chunk_points=args.chunk_points)
        finally:
            if runner is not None:
                runner.close()
    info = {
        "command": "verify-construction",
        "task": task.name,
        "params": task.params,
        "theorem": theorem,
        "variant": variant,
        "as_printed": bool(args.as_printed),
        "layers": model.n_layers,
        "heads": list(model.heads),
        "d_model": model.dim,
        **verdict_fields(v, task, t_start),
        "symmetry": v.notes[0] if v.notes else "",
        "notes": list(notes),
    }
    if args.export:
        info["wrote"] = [args.export]
    if not model.is_plain:
        info["model_class"] = model.kinds()
    if len(v.notes) > 1:
        info["run_notes"] = list(v.notes[1:])
    if v.journal is not None:
        info["journal"] = v.journal.to_json()
    if v.counterexample is not None:
        info["counterexample"] = _counterexample_json(v.counterexample)
    if v.undecided is not None:
        info["undecided"] = _undecided_json(v.undecided)
        info["undecided_points"] = v.undecided_count
    info["readout"] = readout_name
    if value_hash is not None:  # the closed value this model is instantiated from (--all-sizes proves the same)
        info["content_hash"] = value_hash
        info["value_readout"] = "the value's own" if readout_name != "max-margin" else "replaced by the max-margin fit"
    margins = {readout_name.replace("-", "_"): _normalized(v, model)}
    if readout_note:
        info["readout_note"] = readout_note
    if args.compare_readouts:
        phase(args, "building and verifying the other read-out")
        other_name, other = _other_readout(args, task, model, readout_name, own, constructions, ro)
        if other is not None:
            ov = verify(other, task, batch_size=args.batch_size, progress=False, force_exact=args.exact,
                        symmetry=args.symmetry, workers=args.workers)
            margins[other_name.replace("-", "_")] = _normalized(ov, other) if ov.verified else f"refuted ({ov.verdict})"
    info["readout_margins"] = margins
    if args.robustness:
        phase(args, "robustness: weight tolerance, fractional bits, float formats")
        from depthcert.proofs.robustness import robustness_report

        info["robustness"] = robustness_report(model, task, v, symmetry=args.symmetry, max_points=args.max_points,
                                               progress=sys.stderr.isatty() and not args.json)
    info["total_seconds"] = round(time.perf_counter() - t_start, 3)  # the other read-out and robustness included
    if args.json:
        print(json.dumps(info))
    else:
        _print_human(info, task, v, description)
    return 0 if v.verified else (EXIT_UNDECIDED if v.verdict == "undecided" else 1)


def _one_pass_table(args, model, task):
    """The kernel's hidden-vector table over the points the verification will cover (its plan for
    --symmetry, on the layers), for plain runs: read at the last position, exact, in index order, no
    --point, --exact, --journal or --dask.  None otherwise (the fit and the verification each evaluate)."""
    from dataclasses import replace

    from depthcert.checkers.exhaustive import plan_points
    from depthcert.checkers.hidden_table import hidden_table, readable

    if (args.point is not None or args.exact or args.journal or args.dask or readable(model) is not None
            or getattr(task, "outputs", "last") == "all" or not getattr(task, "index_ordered", True)):
        return None
    phase(args, "planning the points (symmetry proof on the layers)")
    zero = np.full(model.W_O.shape, Fraction(0), dtype=object)
    plan = plan_points(replace(model, W_O=zero), task, args.symmetry, max_scan=args.max_points)
    if plan.n_eval > args.max_points:
        return None  # refused below, with the same line as without a table
    if args.symmetry == "auto" or not task.symmetry_groups():  # the fit's points are these (its own
        # symmetry proof is this one, or there is none): its guard refuses before any point is evaluated
        from depthcert.proofs.readout import guard_fit

        guard_fit(min(plan.n_eval, len(model.classes)), len(model.classes))
    phase(args, f"evaluating {plural(plan.n_eval, 'point')} (one exact pass for the fit and the verdict)")
    return hidden_table(model, task, plan, args.batch_size, progress=None if not args.json else False)


def _normalized(v, model) -> str | None:
    """The verdict's exact minimum margin divided by the largest |entry| of W_O (None if refuted)."""
    from depthcert.proofs.readout import normalized_margin

    if not v.verified:
        return None
    q = normalized_margin(v.min_margin, model.W_O)
    return None if q is None else str(format_rational(q))


def _other_readout(args, task, model, readout_name, own, constructions, ro):
    """(name, model) of the read-out not used: max-margin vs the construction's own."""
    from dataclasses import replace

    if readout_name != "max-margin":
        fitted, _, _ = ro.with_max_margin_readout(model, task, "auto", args.max_points, args.fit_effort)
        return "max-margin", fitted
    if own == "weights":
        return "weights", _load_model(args, task)
    c = constructions.build(task, args.variant, args.as_printed)
    return own, replace(model, W_O=c.model.W_O)


def model_has_balls(v) -> bool:
    return v.path.startswith("certified balls")


def _value_hash(symbolic) -> str | None:
    """The content hash of the closed value a construction was instantiated from (the hash
    `--all-sizes` proves and `check-certificate --rebuild` compares), or None."""
    from depthcert.constructions import closed

    kinds = tuple(getattr(closed, n) for n in ("ClosedModel", "ClosedHeadFamily", "ClosedCount") if hasattr(closed, n))
    return closed.content_hash(symbolic) if isinstance(symbolic, kinds) else None


def _print_human(info: dict, task, v, description: str) -> None:
    kind = f" [{info['model_class']}]" if "model_class" in info else ""
    margin = _fmt_q(v.min_margin)
    if v.margin_enclosure is not None:
        lo, hi = enclosure_text(v.margin_enclosure)
        margin = f"in [{lo}, {hi}] (certified enclosure)"
    elif model_has_balls(v):
        margin = "unknown (an undecided point's margin is unknown)"
    rows = [
        ("theorem", info["theorem"] + (" [as printed]" if info["as_printed"] else "")),
        ("variant", info["variant"] + (f": {description}" if description else "")),
        ("model", f"{plural(info['layers'], 'layer')}, heads per layer {info['heads']}, d' = {info['d_model']}{kind}"),
        *((("value", info["content_hash"] + ("" if info["value_readout"] == "the value's own"
                                               else " (its read-out replaced by the max-margin fit)")),)
          if "content_hash" in info else ()),
        ("dataset", f"{task.describe()}: {plural(info['points_total'], 'point')} = {info['size_formula']}"),
        ("evaluated", f"{plural(info['points_checked'], 'point')} ({info['evaluation']})"),
        ("covered", f"{info['points_covered']} of {plural(info['points_total'], 'point')}"
                    + (f" ({plural(v.undecided_count, 'evaluated point')} undecided)" if v.undecided is not None else "")),
        ("symmetry", info["symmetry"].removeprefix("symmetry: ")),
        ("verdict", info["verdict"].upper()),
        ("min margin", margin + ("" if v.verified or v.counterexample is None else " (up to the counterexample)")),
        ("wall time", f"{info['total_seconds']:.2f} s in all, {v.seconds:.2f} s evaluating"),
    ]
    print(f"verify-construction {task.name}")
    margins = info.get("readout_margins", {})
    if info.get("readout") == "max-margin" or len(margins) > 1:
        rows.append(("read-out", info["readout"] + ": normalized margins (margin / max |W_O|) " + ", ".join(
            f"{k} {_fmt_q(None if m is None or m.startswith('refuted') else Fraction(m)) if m is None or not m.startswith('refuted') else m}"
            for k, m in margins.items())))
    for key, val in rows:
        print(f"  {key:<11} {val}")
    if info.get("readout_note"):
        print(f"  note        {info['readout_note']}")
    if "robustness" in info:
        _print_robustness(info["robustness"])
    for note in info["notes"] + info.get("run_notes", []):
        print(f"  note        {note}")
    for path in info.get("wrote", []):
        print(f"  wrote       {path} (the model's exact weights, JSON)")
    ce = v.counterexample
    if ce is not None:
        print("counterexample:")
        print(f"  point      {ce.index}  (replay: --point {ce.index})")
        print(f"  input      {task.render(ce.tokens)}")
        if ce.position is not None:
            print(f"  position   {ce.position}  (token {ce.tokens[ce.position]})")
        print(f"  expected   {ce.expected}")
        print(f"  predicted  {ce.predicted}" + (("  (tie with the expected label" + (": exact tie, proven)" if ce.logit_bounds
                                                                               else ")")) if ce.tie else ""))
        print(logits_line(ce))
    u = v.undecided
    if u is not None:
        print(f"undecided: {plural(v.undecided_count, 'point')}; the first:")
        print(f"  point      {u.index}  (replay: --point {u.index})")
        print(f"  input      {task.render(u.tokens)}")
        if u.position is not None:
            print(f"  position   {u.position}")
        from depthcert.checkers.softmax_balls import TINY_BITS, TOO_SMALL

        if u.limit == TOO_SMALL:  # separated, but by less than any lower end the output states
            print(f"  expected   {u.expected}, above every other class (closest: {u.other}) at {u.precision} bits")
        else:
            print(f"  expected   {u.expected}, not separated from {u.other} at {u.precision} bits")
        print(f"  limit      {u.limit}")
        if u.limit == TOO_SMALL:
            print(f"  margin     above 0 (certified); no positive lower end stated below 2^-{TINY_BITS - 64}")
        elif u.margin is None:
            print("  margin     unknown: a hardmax argmax after a softmax layer could not be settled")
        else:
            lo, hi = enclosure_text(u.margin)
            print(f"  margin     in [{lo}, {hi}]: the balls still contain 0")


def _print_robustness(r: dict) -> None:
    from depthcert.cli.common import bound_text

    lin = r.get("linf_radius") or {}
    bits = r.get("min_fraction_bits") or {}
    print("robustness:")
    if lin:
        print(f"  linf radius  certified >= {lin.get('certified_lower') or '-'}, broken at <= {lin.get('broken_upper') or '-'}"
              + (f" ({lin['note']})" if lin.get("note") else ""))
    if bits:
        print(f"  fewest bits  {bits.get('bits', '-')} fractional bits verify; {bits.get('fails', '-')}"
              + (f" ({bits['note']})" if bits.get("note") else ""))
    for name, f in (r.get("formats") or {}).items():
        worst = f.get("worst_point")
        print(f"  {name:<12} {'exact argmax on every point' if f.get('ok') else 'NOT certified'}"
              + (f"; worst point {worst['index']} (margin lower bound "
                 f"{bound_text(Fraction(f['worst_margin_lower']), up=False, digits=6)})" if worst else "")
              + (f" ({f['note']})" if f.get("note") else ""))


def _show_point(args, task, model, theorem, balls=None) -> int:
    """Evaluate one dataset point and show every checked position's logits and margin.  Under
    --max-seconds as the whole run is (checkers/exhaustive.py: verify): the a-priori bound and the
    big-integer pass stop before a layer once the limit has passed, and a softmax point before
    each position's decision (BadInput, exit 2, naming the limit)."""
    from depthcert.checkers.budget import seconds_limit
    from depthcert.checkers.exhaustive import check_compatible, token_rows

    t0 = time.perf_counter()
    if args.point >= task.size:
        raise BadInput(f"--point {args.point} is outside the dataset (0 .. {task.size - 1})")
    rows = check_compatible(model, task)
    p = task.point(args.point)
    ids, labels = task.decode(np.array([args.point], dtype=np.int64))
    tokens = token_rows(model, task)
    ids = ids if tokens is None else tokens[ids]
    n = ids.shape[1]
    checks = [(n - 1, int(labels[0]))] if labels.ndim == 1 else \
        [(k, int(y)) for k, y in enumerate(labels[0]) if y >= 0]
    limit = seconds_limit()
    deadline = None if limit is None else (t0 + limit, limit, f"evaluating point {args.point}")
    if model.has_softmax:
        return _show_point_balls(args, task, model, theorem, balls, p, ids, checks, rows, deadline)
    ev = _point_evaluator(model, args.exact, deadline)
    if labels.ndim == 1:
        num, den = ev.logits(ids)
        per_pos = {n - 1: num[0]}
    else:
        num, den = ev.logits_all(ids)
        per_pos = {k: num[0, k] for k, _ in checks}
    results = []
    for k, y_task in checks:
        logits = [Fraction(int(x), den) for x in per_pos[k]]
        y = rows[y_task]
        others = [q for i, q in enumerate(logits) if i != y]
        best = max(range(len(logits)), key=lambda i: (logits[i], i != y))
        margin = logits[y] - max(others) if others else None
        ok = margin is None or margin > 0
        results.append({"position": k, "expected": model.classes[y],
                        "predicted": model.classes[best] if not ok else model.classes[y], "correct": ok,
                        "margin": margin_json(margin),
                        "logits": {c: str(format_rational(q)) for c, q in zip(model.classes, logits)}})
    return _print_point(args, task, theorem, p, results)


def _point_evaluator(model, exact: bool, deadline):
    """The evaluator of one shown point; deadline (perf_counter time, seconds, what) or None: the
    a-priori bound and every layer of the big-integer pass stop once it has passed."""
    from depthcert.checkers.evaluate import Evaluator

    if deadline is None:
        return Evaluator(model, force_exact=exact)
    ev = Evaluator(model, force_exact=exact, deadline=deadline)
    ev.stop_after(deadline[1], deadline[2], start=deadline[0] - deadline[1])
    return ev


def _show_point_balls(args, task, model, theorem, balls, p, ids, checks, rows, deadline=None) -> int:
    from depthcert.checkers.budget import time_limit_passed
    from depthcert.checkers.softmax_balls import SoftmaxDecider

    dec = SoftmaxDecider(model, **(balls or {}))
    H, den = _point_evaluator(dec.prefix_model(), args.exact, deadline).logits_all(ids)
    results = []
    for k, y_task in checks:  # one decision per position, so every position is shown
        if deadline is not None and time.perf_counter() > deadline[0]:
            raise time_limit_passed(deadline[2], deadline[1])
        d = dec.decide(H[0], den, [(k, rows[y_task])], logits=True)
        status = {"correct": True, "wrong": False}.get(d.status)
        results.append({"position": k, "expected": model.classes[rows[y_task]],
                         "predicted": model.classes[d.other] if d.status == "wrong" else
                         (model.classes[rows[y_task]] if d.status == "correct" else "undecided"),
                         "correct": status, "margin": margin_json(enclosure=d.margin),
                         "precision_bits": d.precision,
                         "logits": {c: enclosure_text(b) for c, b in zip(model.classes, d.logits)}})
    return _print_point(args, task, theorem, p, results)


def _print_point(args, task, theorem, p, results) -> int:
    last_only = task.outputs != "all"
    wrong = [r for r in results if r["correct"] is False]
    undecided = [r for r in results if r["correct"] is None]
    info = {"command": "verify-construction", "task": task.name, "theorem": theorem, "point": args.point,
            "tokens": list(p.tokens), "expected": p.label, "correct": not wrong and not undecided,
            "verdict": "wrong" if wrong else ("undecided" if undecided else "correct")}
    if undecided and not wrong:
        info["correct"] = None
    if args.export:
        info["wrote"] = [args.export]
    if last_only:
        r = results[0]
        info.update({k: r[k] for k in r if k not in ("position", "correct", "expected")})
    else:
        info["positions"] = results
    if args.json:
        print(json.dumps(info))
    else:
        print(f"point {args.point}: {task.render(p.tokens)}")
        for r in results:
            head = "" if last_only else f"  position {r['position']}:"
            if head:
                print(head)
            state = {True: "correct", False: "WRONG", None: "UNDECIDED"}[r["correct"]]
            if "precision_bits" in r:
                m = r["margin"]
                margin = "-" if m is None else f"in [{m['lower']}, {m['upper']}] at {r['precision_bits']} bits"
                print(f"  expected   {r['expected']}")
                print(f"  predicted  {r['predicted']}  ({state}, margin {margin})")
                print("  logits     " + "  ".join(f"{c} in [{b[0]}, {b[1]}]" for c, b in r["logits"].items()))
            else:
                print(f"  expected   {r['expected']}")
                print(f"  predicted  {r['predicted']}  ({state}, margin {'None' if r['margin'] is None else r['margin']['exact']})")
                print("  logits     " + "  ".join(f"{c}={v}" for c, v in r["logits"].items()))
        for path in info.get("wrote", []):
            print(f"  wrote      {path} (the model's exact weights, JSON)")
    if wrong:
        return 1
    return EXIT_UNDECIDED if undecided else 0


def verify_construction_main(argv=None) -> int:
    sys.exit(run_main(_verify_construction, argv))


if __name__ == "__main__":
    verify_construction_main()
