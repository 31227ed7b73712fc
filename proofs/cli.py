"""Command line: verify-construction (and the shared plumbing of every depthcert command).

Exit codes: 0 verified, 1 refuted (counterexample printed), 2 bad input (one line, no traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import format_rational

DEFAULT_MAX_POINTS = 20_000_000


class _Parser(argparse.ArgumentParser):
    """argparse that raises BadInput (exit 2, one line) instead of printing usage."""

    def error(self, message):
        raise BadInput(message)


def run_main(fn, argv=None) -> int:
    """Run a command body; BadInput -> 'error: ...' on stderr and exit code 2."""
    if hasattr(sys, "set_int_max_str_digits"):
        # exact results (margins, logits) can have more than Python's default 4300 digits
        # (multihop --as-printed --hops 5); inputs are capped separately (checkers/rational.py)
        sys.set_int_max_str_digits(0)
    try:
        return fn(argv)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: the requested sizes are too large for this machine", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0


TASK_OPTIONS = (
    ("k", "number of (question, answer) pairs in the context (icqa, ictm)"),
    ("l", "template length (tm, ictm); --len is the same"),
    ("n_questions", "question tokens (icqa; default k+2)"),
    ("n_answers", "answer tokens (icqa, ictm; default k+2)"),
    ("alphabet", "alphabet size (sc, tm, ictm)"),
    ("length", "sequence length before CLS (sc)"),
    ("seed", "seed of the distinct SC labels (sc)"),
    ("n_points", "sample this many sequences (sc)"),
    ("hops", "number of hops (multihop)"),
    ("n_entities", "entity tokens (multihop)"),
)


def _int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """An int >= 1 (sizes, limits, batch sizes): 0 and negatives are refused by the parser."""
    value = _int_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def nonnegative_int(text: str) -> int:
    """An int >= 0 (seeds, point indices)."""
    value = _int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def add_task_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dataset size")
    for name, help_text in TASK_OPTIONS:
        flags = [f"--{name.replace('_', '-')}"]
        if name == "l":
            flags.append("--len")
        g.add_argument(*flags, dest=name, type=nonnegative_int if name == "seed" else positive_int, default=None,
                       help=help_text)


def task_from_args(args):
    from depthcert.checkers.tasks import make_task

    opts = {name: getattr(args, name) for name, _ in TASK_OPTIONS}
    return make_task(args.task, **opts)


def _fmt_q(q) -> str:
    return "-" if q is None else str(format_rational(q))


def _counterexample_json(ce) -> dict:
    return {
        "index": ce.index,
        "tokens": list(ce.tokens),
        "expected": ce.expected,
        "predicted": ce.predicted,
        "tie": ce.tie,
        "logits": {c: format_rational(v) for c, v in zip(ce.classes, ce.logits)},
    }


def _build_parser() -> _Parser:
    p = _Parser(
        prog="verify-construction",
        description="Build a construction of arXiv 2404.01601 in exact arithmetic and check it on every "
        "point of its task's dataset. Exit 0 verified, 1 refuted, 2 bad input.",
        epilog="Dataset sizes: sc M^L; icqa A(n_q,k)*A(n_a,k)*k; tm m^l (Bell(l) templates); "
        "ictm and multihop: see docs/. Each point is an integer index: replay one with --point N.",
    )
    p.add_argument("task", nargs="?", help="sc (classification), icqa, tm (template), ictm, multihop")
    p.add_argument("--dataset", metavar="FILE",
                   help="a labelled dataset (depthcert.dataset JSON) instead of a task's: checks --weights on it, "
                   "or builds the Theorem 1 memorization construction for it (task sc)")
    add_task_options(p)
    p.add_argument("--variant", default=None, help="which construction (default: the task's first)")
    p.add_argument("--as-printed", action="store_true", help="the weights exactly as the paper prints them")
    p.add_argument("--weights", metavar="FILE", help="verify these weights (depthcert.weights JSON) instead")
    p.add_argument("--export", metavar="FILE", help="write the construction's exact weights as JSON")
    p.add_argument("--point", type=nonnegative_int, metavar="N", help="evaluate only dataset point N and show it")
    p.add_argument("--max-points", type=positive_int, default=DEFAULT_MAX_POINTS,
                   help=f"refuse runs that would evaluate more points (default {DEFAULT_MAX_POINTS})")
    p.add_argument("--symmetry", choices=("auto", "off"), default="auto",
                   help="auto: prove equivariance under the task's token permutations on the weights, then "
                   "evaluate one point per orbit (falls back to every point if the proof fails)")
    p.add_argument("--exact", action="store_true", help="skip the proven float64 fast path (big integers)")
    p.add_argument("--batch-size", type=positive_int, default=2048)
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="processes for runs of 400k+ evaluated points (default: all cores)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _task_or_dataset(args):
    if not args.dataset:
        if not args.task:
            raise BadInput("give a TASK (sc, icqa, tm, ictm, multihop) or --dataset FILE")
        return task_from_args(args)
    from depthcert.checkers.dataset_file import load_dataset
    from depthcert.checkers.tasks import canonical_task

    given = [name for name, _ in TASK_OPTIONS if getattr(args, name) is not None]
    if given:
        raise BadInput(f"--{given[0].replace('_', '-')} does not apply with --dataset (the file fixes the data)")
    if args.task and canonical_task(args.task) != "sc":
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
    from depthcert.checkers.exhaustive import check_compatible, plan_points, verify
    from depthcert.constructions import registry

    args = _build_parser().parse_args(argv)
    task = _task_or_dataset(args)
    if args.batch_size < 1:
        raise BadInput("--batch-size must be >= 1")
    if args.max_points < 1:
        raise BadInput(f"--max-points must be >= 1, got {args.max_points}")
    if args.weights:
        if args.variant or args.as_printed:
            raise BadInput("--weights verifies the given file; it takes no --variant or --as-printed")
        model = _load_model(args, task)
        theorem, variant, description, notes = "user-supplied weights", "weights:" + args.weights, "", ()
    else:
        c = registry.build(task, args.variant, args.as_printed)
        model, theorem, variant, description, notes = c.model, c.theorem, c.variant, c.description, c.notes
    check_compatible(model, task)

    def export():  # only once every input check has passed: exit 2 must leave no file behind
        if args.export:
            from depthcert.checkers.atomic import write_json_atomic
            from depthcert.checkers.weights_file import model_to_json

            write_json_atomic(args.export, model_to_json(model))

    if args.point is not None:
        if args.point >= task.size:
            raise BadInput(f"--point {args.point} is outside the dataset (0 .. {task.size - 1})")
        export()
        return _show_point(args, task, model, theorem)
    plan = plan_points(model, task, args.symmetry)
    if plan.n_eval > args.max_points:
        raise BadInput(
            f"{task.describe()} needs {plan.n_eval} points evaluated ({plan.note}), above the limit "
            f"{args.max_points}; raise it with --max-points {plan.n_eval}"
        )
    export()
    v = verify(model, task, batch_size=args.batch_size, progress=None if not args.json else False,
               force_exact=args.exact, plan=plan, workers=args.workers)
    info = {
        "task": task.name,
        "params": task.params,
        "theorem": theorem,
        "variant": variant,
        "as_printed": bool(args.as_printed),
        "layers": model.n_layers,
        "heads": list(model.heads),
        "d_model": model.dim,
        "points_total": v.points_total,
        "points_covered": v.points_covered,
        "points_checked": v.points_checked,
        "size_formula": task.size_formula,
        "verdict": v.verdict,
        "min_margin": None if v.min_margin is None else format_rational(v.min_margin),
        "evaluation": v.path,
        "seconds": round(v.seconds, 3),
        "symmetry": v.notes[0] if v.notes else "",
        "notes": list(notes),
    }
    if v.counterexample is not None:
        info["counterexample"] = _counterexample_json(v.counterexample)
    if args.json:
        print(json.dumps(info))
    else:
        _print_human(info, task, v, description)
    return 0 if v.verified else 1


def _print_human(info: dict, task, v, description: str) -> None:
    rows = [
        ("theorem", info["theorem"] + (" [as printed]" if info["as_printed"] else "")),
        ("variant", info["variant"] + (f": {description}" if description else "")),
        ("model", f"{info['layers']} layer(s), heads per layer {info['heads']}, d' = {info['d_model']}"),
        ("dataset", f"{task.describe()}: {info['points_total']} points = {info['size_formula']}"),
        ("evaluated", f"{info['points_checked']} points ({info['evaluation']})"),
        ("covered", f"{info['points_covered']} of {info['points_total']} points"),
        ("symmetry", info["symmetry"].removeprefix("symmetry: ")),
        ("verdict", info["verdict"].upper()),
        ("min margin", _fmt_q(v.min_margin) + ("" if v.verified else " (up to the counterexample)")),
        ("wall time", f"{v.seconds:.2f} s"),
    ]
    print(f"verify-construction {task.name}")
    for key, val in rows:
        print(f"  {key:<11} {val}")
    for note in info["notes"]:
        print(f"  note        {note}")
    ce = v.counterexample
    if ce is not None:
        print("counterexample:")
        print(f"  point      {ce.index}  (replay: --point {ce.index})")
        print(f"  input      {task.render(ce.tokens)}")
        print(f"  expected   {ce.expected}")
        print(f"  predicted  {ce.predicted}" + ("  (tie with the expected label)" if ce.tie else ""))
        print("  logits     " + "  ".join(f"{c}={format_rational(q)}" for c, q in zip(ce.classes, ce.logits)))


def _show_point(args, task, model, theorem) -> int:
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.exhaustive import check_compatible, token_rows

    if args.point >= task.size:
        raise BadInput(f"--point {args.point} is outside the dataset (0 .. {task.size - 1})")
    rows = check_compatible(model, task)
    p = task.point(args.point)
    ids, labels = task.decode(np.array([args.point], dtype=np.int64))
    tokens = token_rows(model, task)
    num, den = Evaluator(model, force_exact=args.exact).logits(ids if tokens is None else tokens[ids])
    logits = [Fraction(int(x), den) for x in num[0]]
    y = rows[int(labels[0])]
    others = [q for i, q in enumerate(logits) if i != y]
    best = max(range(len(logits)), key=lambda i: (logits[i], i != y))
    margin = logits[y] - max(others) if others else None
    ok = margin is None or margin > 0
    info = {
        "task": task.name, "theorem": theorem, "point": args.point, "tokens": list(p.tokens),
        "expected": p.label, "predicted": model.classes[best] if not ok else p.label,
        "correct": ok, "margin": None if margin is None else format_rational(margin),
        "logits": {c: format_rational(q) for c, q in zip(model.classes, logits)},
    }
    if args.json:
        print(json.dumps(info))
    else:
        print(f"point {args.point}: {task.render(p.tokens)}")
        print(f"  expected   {p.label}")
        print(f"  predicted  {info['predicted']}  ({'correct' if ok else 'WRONG'}, margin {info['margin']})")
        print("  logits     " + "  ".join(f"{c}={v}" for c, v in info["logits"].items()))
    return 0 if ok else 1


def verify_construction_main(argv=None) -> int:
    sys.exit(run_main(_verify_construction, argv))


if __name__ == "__main__":
    verify_construction_main()


def _reproduce_paper(argv) -> int:
    from depthcert.proofs.theorems import CLAIMS, check_claim, sizes_text

    p = _Parser(prog="reproduce-paper",
                description="Check every claim of arXiv 2404.01601 that depthcert covers: constructions on every "
                "dataset point, impossibility by independently checked certificates. Exit 0 iff all hold.")
    p.add_argument("--only", nargs="*", metavar="KEY", help="claim keys to run (default: all)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    claims = CLAIMS
    if args.only:
        known = {c.key for c in CLAIMS}
        bad = [k for k in args.only if k not in known]
        if bad:
            raise BadInput(f"unknown claim {bad[0]!r}; known: {', '.join(sorted(known))}")
        claims = tuple(c for c in CLAIMS if c.key in args.only)
    results = []
    for claim in claims:
        r = check_claim(claim)
        results.append(r)
        if not args.json:
            print(f"| {claim.paper} | {claim.statement} | {claim.method} | {claim.task} {sizes_text(claim)} | "
                  f"{r.verdict.upper()} | {r.detail} | {r.seconds:.1f} s |", flush=True)
    if args.json:
        print(json.dumps([{"claim": r.claim.key, "paper": r.claim.paper, "method": r.claim.method,
                           "task": r.claim.task, "options": r.claim.options, "verdict": r.verdict,
                           "detail": r.detail, "seconds": round(r.seconds, 2)} for r in results]))
    return 0 if all(r.ok for r in results) else 1


def reproduce_paper_main(argv=None) -> int:
    sys.exit(run_main(_reproduce_paper, argv))
