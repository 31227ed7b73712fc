"""verify-construction TASK --cot: chain-of-thought generation, every step of every input checked.

    verify-construction composition --cot [--L L --N N] [--variant V | --weights FILE] [--point N]

The model generates the task's steps (task.cot_steps) one token at a time, each generated token
appended and the model run again; checkers/generation.py proves every step of every input
exactly (one teacher-forced pass per input when every layer is causal, every prefix run
separately otherwise).  The counterexample names the input and the failing step.
Exit codes: 0 verified, 1 refuted, 2 bad input, 3 undecided (softmax models only), 4 internal error.
"""
from __future__ import annotations

import json
import time
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import format_rational
from depthcert.constructions import cot_builders
from depthcert.cli.common import (_counterexample_json, _undecided_json, enclosure_text, logits_line, margin_json,
                                  plural, verdict_fields)


def _model(args, task):
    """(model, theorem, variant, description) from --weights or a COT_BUILDERS variant."""
    if args.weights:
        if args.variant:
            raise BadInput("--weights verifies the given file; it takes no --variant")
        from depthcert.checkers.atomic import read_json
        from depthcert.checkers.weights_file import model_from_json

        return model_from_json(read_json(args.weights, "weights"), task), "user-supplied weights", \
            "weights:" + args.weights, ""
    table = cot_builders().get(task.name)
    if not table:
        raise BadInput(f"no chain-of-thought construction for task {task.name!r}")
    variant = args.variant or next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {task.name} --cot; known: {', '.join(table)}")
    c = table[variant](task, False)
    return c.model, c.theorem, c.variant, c.description


def verify_cot(args, task) -> int:
    from depthcert.checkers.generation import TeacherForced, check_model, is_causal, verify_generation
    from depthcert.cli.common import EXIT_UNDECIDED, _precision_options

    t_start = time.perf_counter()
    if args.dataset:
        raise BadInput("--cot checks a task that defines generation steps (composition), not --dataset")
    if args.as_printed:
        raise BadInput("--as-printed does not apply to --cot (no printed chain-of-thought construction exists)")
    if not hasattr(task, "cot_steps"):
        raise BadInput(f"task {task.name} defines no chain-of-thought steps; --cot applies to composition")
    model, theorem, variant, description = _model(args, task)
    check_model(model, task)
    balls = _precision_options(args, model)
    tf = TeacherForced(task)
    if args.point is not None:
        if args.point >= task.size:
            raise BadInput(f"--point {args.point} is outside the dataset (0 .. {task.size - 1})")
        _export(args, model)
        return _show_point(args, task, tf, model, balls)
    if task.size > args.max_points:
        raise BadInput(f"{task.describe()} needs {task.size} points evaluated ({tf.S} steps each), above the limit "
                       f"{args.max_points}; raise it with --max-points {task.size}")
    _export(args, model)
    g = verify_generation(model, task, batch_size=args.batch_size, progress=None if not args.json else False,
                          force_exact=args.exact, balls=balls)
    v = g.verdict
    info = {
        "command": "verify-construction",
        "task": task.name,
        "params": task.params,
        "cot": True,
        "theorem": theorem,
        "variant": variant,
        "layers": model.n_layers,
        "heads": list(model.heads),
        "d_model": model.dim,
        "model_class": model.kinds(),
        "steps": g.steps,
        "mode": g.mode,
        "causal": is_causal(model),
        **verdict_fields(v, task, t_start),
    }
    if v.counterexample is not None:
        ce = _counterexample_json(v.counterexample)
        ce["step"] = g.failing_step
        ce["prompt"] = list(v.counterexample.tokens[: tf.P])
        ce["generated_before"] = list(v.counterexample.tokens[tf.P:])
        info["counterexample"] = ce
    if v.undecided is not None:
        u = _undecided_json(v.undecided)
        u["step"] = g.undecided_step
        info["undecided"] = u
        info["undecided_points"] = v.undecided_count
    if args.json:
        print(json.dumps(info))
    else:
        _print_human(info, task, tf, g, description)
    return 0 if v.verified else (EXIT_UNDECIDED if v.verdict == "undecided" else 1)


def _export(args, model) -> None:
    if args.export:  # only after every input check: exit 2 leaves no file behind
        from depthcert.checkers.atomic import write_json_atomic
        from depthcert.checkers.weights_file import model_to_json

        write_json_atomic(args.export, model_to_json(model))


def _print_human(info, task, tf, g, description) -> None:
    from depthcert.cli.common import _fmt_q

    v = g.verdict
    margin = _fmt_q(v.min_margin)
    if v.margin_enclosure is not None:
        lo, hi = enclosure_text(v.margin_enclosure)
        margin = f"in [{lo}, {hi}] (certified enclosure)"
    elif v.path.startswith("certified balls"):
        margin = "unknown (an undecided point's margin is unknown)"
    how = ("every layer causal: one teacher-forced pass per input (checkers/generation.py)" if g.mode == "teacher-forced"
           else "a layer is not causal: every prefix run separately")
    rows = [
        ("theorem", info["theorem"]),
        ("variant", info["variant"] + (f": {description}" if description else "")),
        ("model", f"{plural(info['layers'], 'layer')}, heads per layer {info['heads']}, d' = {info['d_model']} "
                  f"[{info['model_class']}]"),
        ("dataset", f"{task.describe()}: {plural(info['points_total'], 'point')} = {info['size_formula']}"),
        ("generation", f"{plural(g.steps, 'token')} per input, each appended and the model run again; {how}"),
        ("evaluated", f"{plural(info['points_checked'], 'input')} x {plural(g.steps, 'step')} ({info['evaluation']})"),
        ("covered", f"{v.points_covered} of {plural(v.points_total, 'input')}"
                    + (f" ({plural(v.undecided_count, 'input')} undecided)" if v.undecided is not None else "")),
        ("verdict", info["verdict"].upper()),
        ("min margin", margin + ("" if v.verified or v.counterexample is None else " (up to the counterexample)")),
        ("wall time", f"{info['total_seconds']:.2f} s in all, {v.seconds:.2f} s evaluating"),
    ]
    print(f"verify-construction {task.name} --cot")
    for key, val in rows:
        print(f"  {key:<11} {val}")
    ce = v.counterexample
    if ce is not None:
        print("counterexample:")
        print(f"  point      {ce.index}  (replay: --cot --point {ce.index})")
        print(f"  input      {task.render(ce.tokens[: tf.P])}")
        gen = " ".join(ce.tokens[tf.P:]) or "nothing yet"
        print(f"  step       {g.failing_step} of {g.steps}  (position {ce.position}; generated before it: {gen})")
        print(f"  expected   {ce.expected}")
        print(f"  predicted  {ce.predicted}" + ("  (tie with the expected token)" if ce.tie else ""))
        print(logits_line(ce))
    u = v.undecided
    if u is not None:
        print(f"undecided: {plural(v.undecided_count, 'input')}; the first:")
        print(f"  point      {u.index}  (replay: --cot --point {u.index})")
        print(f"  input      {task.render(u.tokens[: tf.P])}")
        print(f"  step       {g.undecided_step} of {g.steps}  (position {u.position})")
        print(f"  expected   {u.expected}, not separated from {u.other} at {u.precision} bits")


def _show_point(args, task, tf, model, balls) -> int:
    """Run the generation on one input, step by step (each prefix run separately), and show it."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.exhaustive import check_compatible, token_rows
    from depthcert.cli.common import EXIT_UNDECIDED

    class_map = check_compatible(model, task)
    tokens = token_rows(model, tf)
    ids, steps = tf.sequences(np.array([args.point], dtype=np.int64))
    results, status = [], 0
    for s in range(1, tf.S + 1):
        n = tf.P + s - 1
        seq = ids[:, :n] if tokens is None else tokens[ids[:, :n]]
        y = class_map[int(steps[0, s - 1])]
        entry = {"step": s, "position": n - 1, "expected": model.classes[y]}
        if model.has_softmax:
            from depthcert.checkers.softmax_balls import SoftmaxDecider

            dec = SoftmaxDecider(model, **(balls or {}))
            H, den = Evaluator(dec.prefix_model(), force_exact=args.exact).logits_all(seq)
            d = dec.decide(H[0], den, [(n - 1, y)], logits=True)
            ok = {"correct": True, "wrong": False}.get(d.status)
            entry.update({"correct": ok, "predicted": model.classes[d.other] if d.status == "wrong" else
                          (model.classes[y] if ok else "undecided"),
                          "margin": margin_json(enclosure=d.margin), "precision_bits": d.precision,
                          "logits": {c: enclosure_text(b) for c, b in zip(model.classes, d.logits)}})
        else:
            num, den = Evaluator(model, force_exact=args.exact).logits(seq)
            logits = [Fraction(int(x), den) for x in num[0]]
            others = [q for i, q in enumerate(logits) if i != y]
            margin = logits[y] - max(others) if others else None
            ok = margin is None or margin > 0
            best = max((i for i in range(len(logits)) if i != y), key=lambda i: logits[i], default=y)
            entry.update({"correct": ok, "predicted": model.classes[y] if ok else model.classes[best],
                          "margin": margin_json(margin),
                          "logits": {c: str(format_rational(q)) for c, q in zip(model.classes, logits)}})
        results.append(entry)
        if entry["correct"] is not True:
            status = 1 if entry["correct"] is False else EXIT_UNDECIDED
            break  # the run has left the expected sequence (or its next token is unknown)
    p = task.point(args.point)
    if args.json:
        print(json.dumps({"command": "verify-construction", "task": task.name, "cot": True, "point": args.point,
                          "tokens": list(p.tokens), "expected": [tf.classes[int(y)] for y in steps[0]],
                          "correct": status == 0,
                          "verdict": {0: "correct", 1: "wrong"}.get(status, "undecided"), "steps": results}))
        return status
    print(f"point {args.point}: {task.render(p.tokens)}")
    for r in results:
        state = {True: "correct", False: "WRONG", None: "UNDECIDED"}[r["correct"]]
        m = r["margin"]
        margin = ("-" if "precision_bits" in r else "None") if m is None else (
            f"in [{m['lower']}, {m['upper']}]" if "lower" in m else m["exact"])
        print(f"  step {r['step']} (position {r['position']}): expected {r['expected']}, "
              f"generated {r['predicted']}  ({state}, margin {margin})")
    return status
