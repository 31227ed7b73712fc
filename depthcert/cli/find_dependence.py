"""find-dependence: one-layer impossibility, decided exactly.

    find-dependence --task TASK [--len L] [--k K] [--alphabet M] ...   (or --dataset FILE)

find-dependence ends in one of two checked outcomes: a certificate (paper Def. 3 / Farkas dual)
that checkers/certificate.py accepts, or an explicit one-layer model verified on every point.
Exit codes: 0 = certificate found and checked, or fittable with a verified model; 2 = bad input
(one line on stderr); 4 = internal error (a search/LP failure or a certificate the checker
rejects: reported in one line, never a silent "unknown"; depthcert/cli/errors.py).
"""
from __future__ import annotations

import json
import sys
import time

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import (_Parser, _fmt_q, add_budget_options, add_task_options, data_file, margin_json,
                                  plural, positive_int, run_main, task_from_args, tasks_help)

RULES_OUT = (
    "one-layer attention-only transformers with ReLU, linear or any other entrywise attention "
    "activation, any number of heads, any width (paper Props. 7-8)",
    "one-layer single-head softmax attention, any width (paper Props. 9-10; docs/softmax.md)",
)
# What a certificate says nothing about (the additive structure it relies on fails there).
NOT_RULED_OUT = "hardmax attention, softmax with two or more heads, MLP sublayers, two or more layers"


def _tok(t) -> str:
    return str(t)


def _seq(tokens) -> str:
    return " ".join(_tok(t) for t in tokens)


def _term(coef: int, name: str) -> str:
    return name if coef == 1 else f"{coef} (x) {name}"


def _term_o(coef: int, i: int) -> str:
    return f"o{i}" if coef == 1 else f"{coef} o{i}"


def render_certificate(cert) -> list[str]:
    """The certificate the way the paper writes it: sequences, dependence, contradiction."""
    lines = []
    pts = cert.points
    width = max(len(_seq(p.tokens)) for p in pts)
    lines.append(f"certificate: {len(pts)} sequences (one group: same length and last token)")
    for i, p in enumerate(pts):
        mu = ", ".join(f"{k} x ({p.label} over {c})" for c, k in p.mu)
        lines.append(f"  E{i} = {_seq(p.tokens):<{width}}   label {p.label}   weight {p.total}: {mu}")
    deps = cert.dependences()
    seen = set()
    lines.append("dependence (paper Def. 3: equal token multisets at every position):")
    for c, lam in deps:
        key = tuple(lam)
        if key in seen or tuple(-v for v in lam) in seen:
            continue
        seen.add(key)
        lhs = " (+) ".join(_term(v, f"E{i}") for i, v in enumerate(lam) if v > 0)
        rhs = " (+) ".join(_term(-v, f"E{i}") for i, v in enumerate(lam) if v < 0)
        lines.append(f"  {lhs} = {rhs}      [lambda from class {c}]")
        olhs = " + ".join(_term_o(v, i) for i, v in enumerate(lam) if v > 0)
        orhs = " + ".join(_term_o(-v, i) for i, v in enumerate(lam) if v < 0)
        lines.append(f"    => {olhs} = {orhs}  for every one-layer model (paper Prop. 8)")
    lines.append("contradiction:")
    ineq = []
    for i, p in enumerate(pts):
        for c, k in p.mu:
            ineq.append(f"{'' if k == 1 else str(k) + '*'}(o{i}[{p.label}] - o{i}[{c}])")
    lines.append("  fitting every E_i needs each bracket > 0, so  " + " + ".join(ineq) + "  > 0,")
    lines.append("  but that sum is sum_c sum_i lambda^c_i o_i[c] = 0.  So at least one E_i is misclassified.")
    return lines


def _task_description(task) -> str:
    params = ", ".join(f"{k}={v}" for k, v in task.params.items())
    return f"{task.name} ({params})" if params else task.name


def _seconds(text: str) -> float:
    """A finite time budget > 0 (nan, inf and negatives were accepted and gave silent results)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


def _build_parser() -> _Parser:
    p = _Parser(
        prog="find-dependence",
        description="Decide exactly whether some one-layer attention-only transformer fits a task's dataset: "
        "print a checked impossibility certificate (paper Def. 3) or a one-layer model verified on every point.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--task", help=tasks_help(every_task=True))
    src.add_argument("--dataset", metavar="FILE", help="a depthcert.dataset JSON file")
    add_task_options(p)
    p.add_argument("--sample", type=positive_int, default=256,
                   help="points per search neighbourhood/sample (a certificate on a subset certifies the whole set)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the search's sampling")
    p.add_argument("--bounds", action="store_true",
                   help="when not fittable, also bound the best one-layer accuracy (disjoint certificates, explicit partial model)")
    p.add_argument("--bounds-seconds", type=_seconds, default=30.0, help="time budget of --bounds (default 30)")
    p.add_argument("--max-points", type=positive_int, default=None,
                   help="load at most this many dataset points (default 400000); larger tasks are searched "
                   "for a certificate on sampled index windows only")
    p.add_argument("--out", metavar="FILE", help="save the certificate JSON (atomic)")
    p.add_argument("--export", metavar="FILE", help="save the fitted one-layer model's weights when fittable")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    add_budget_options(p)
    return p


def _find_dependence(argv) -> int:
    from depthcert.checkers.budget import resource_budget

    args = _build_parser().parse_args(argv)
    args.dataset = data_file(args.dataset)
    with resource_budget(args.max_weights, args.max_seconds, show_progress=sys.stderr.isatty() and not args.json):
        return _find_dependence_guarded(args)


def _find_dependence_guarded(args) -> int:
    from depthcert.checkers.atomic import write_json_atomic
    from depthcert.proofs.dependence import accuracy_bounds, decide_task

    if args.task is None and args.dataset is None:
        raise BadInput("give --task TASK or --dataset FILE")
    if args.dataset is not None:
        from depthcert.checkers.tasks.dataset_file import load_dataset
        from depthcert.cli.common import TASK_OPTIONS

        given = [n for n, _ in TASK_OPTIONS if getattr(args, n) is not None]
        if given:
            raise BadInput(f"option --{given[0].replace('_', '-')} does not apply to --dataset")
        task = load_dataset(args.dataset)
        if task.outputs == "all":
            raise BadInput("find-dependence decides last-position classification; this dataset labels every "
                           "position (give one label per sequence)")
    else:
        task = task_from_args(args)
    if args.export and args.out and args.export == args.out:
        raise BadInput("--out and --export name the same file")
    t0 = time.perf_counter()
    # a search/LP failure raises RuntimeError: exit 4, one line (depthcert/cli/errors.py)
    res = decide_task(task, sample=args.sample, seed=args.search_seed, progress=False if args.json else None,
                      load_limit=args.max_points)
    dec = res.decision
    report: dict = {
        "command": "find-dependence",
        "verdict": "fittable" if dec.fittable else "not_fittable",
        "task": task.name,
        "params": task.params,
        "points": task.size,
        "fittable": dec.fittable,
        "points_searched": dec.points_searched,
    }
    lines = [f"task: {_task_description(task)}, {plural(task.size, 'point')}"]
    if not dec.fittable:
        cert = dec.certificate
        from depthcert.checkers.certificate import check_certificate

        obj = cert.to_json({"claims": {"task": task.name, "params": task.params,
                                       "rules_out": list(RULES_OUT)}})
        ok, msg = check_certificate(obj)  # the verdict rests on this exact check only
        if not ok:
            raise RuntimeError(f"certificate rejected by the independent checker: {msg}")
        report.update({"certificate": obj, "points_in_certificate": len(cert.points), "check": msg,
                       "rules_out": list(RULES_OUT), "does_not_rule_out": NOT_RULED_OUT})
        lines.append("NOT fittable by any one-layer transformer of the classes ruled out below.")
        lines += render_certificate(cert)
        lines.append(f"independent check (checkers/certificate.py): {msg}")
        lines.append("rules out:")
        lines += [f"  - {r}" for r in RULES_OUT]
        lines.append(f"does not rule out: {NOT_RULED_OUT}")
        if args.bounds:
            b = accuracy_bounds(task, seconds=args.bounds_seconds, seed=args.search_seed, sample=args.sample,
                                load_limit=args.max_points, progress=(not args.json) and sys.stderr.isatty())
            for c in b.certificates:
                okc, msgc = c.check()
                if not okc:
                    raise RuntimeError(f"bound certificate rejected by the independent checker: {msgc}")
            report["bounds"] = {
                "lower_correct": b.lower_correct, "upper_correct": b.upper_correct, "total": b.total,
                "disjoint_certificates": len(b.certificates),
                "upper_search_complete": b.upper_search_complete,
                "lower_accuracy": f"{b.lower_correct}/{b.total}", "upper_accuracy": f"{b.upper_correct}/{b.total}",
                "seconds": round(b.seconds, 3),
            }
            lines.append(
                f"best one-layer accuracy: between {b.lower_correct}/{b.total} ({b.lower_correct / b.total:.4f}; an explicit "
                f"one-layer model, counted exactly) and {b.upper_correct}/{b.total} ({b.upper_correct / b.total:.4f}; "
                f"{len(b.certificates)} disjoint checked certificates{'' if b.upper_search_complete else ', search stopped at the time budget'})"
            )
        if args.out:
            write_json_atomic(args.out, obj)
            lines.append(f"certificate written to {args.out}")
        if args.export:
            lines.append("(--export: nothing to export, the dataset is not one-layer fittable)")
    else:
        v = res.verdict
        m = res.model
        report.update({"certificate": None, "points_in_certificate": 0, "model": {"layers": 1, "heads": m.heads[0], "dim": m.dim, "verified": v.verified,
                                 "points_checked": v.points_checked, "min_margin": margin_json(v.min_margin),
                                 "path": v.path}})
        lines.append("FITTABLE by a one-layer transformer.")
        lines.append(
            f"explicit model: 1 layer, {plural(m.heads[0], 'ReLU head')} (one per used (length, last token, key position)), "
            f"d' = {m.dim}; exhaustive exact check: {v.verdict} on {plural(v.points_checked, 'point')}, "
            f"min margin {'none (one class)' if v.min_margin is None else _fmt_q(v.min_margin)} ({v.path})"
        )
        if args.export:
            from depthcert.checkers.weights_file import model_to_json

            write_json_atomic(args.export, model_to_json(m))
            lines.append(f"weights written to {args.export}")
        if args.out:
            lines.append("(--out: no certificate, the dataset is one-layer fittable)")
    if dec.notes:  # how the search went where it matters for reading the answer (sampled classes, a rounded vertex)
        report["notes"] = list(dec.notes)
        lines += [f"note: {n}" for n in dec.notes]
    report["seconds"] = round(time.perf_counter() - t0, 3)
    lines.append(f"time: {report['seconds']:.2f} s")
    if args.json:
        print(json.dumps(report))
    else:
        print("\n".join(lines))
    return 0


def find_dependence_main(argv=None) -> int:
    return run_main(_find_dependence, argv)  # a search/LP failure: exit 4, one line


if __name__ == "__main__":
    sys.exit(find_dependence_main())
