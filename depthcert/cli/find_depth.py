"""find-depth: the minimal depth of average-hard attention with H heads per layer, on a finite dataset.

    find-depth --task TASK [sizes] | --dataset FILE   --heads H [--max-layers L] [--json]
               [--max-clauses N] [--max-seconds S] [--certificates DIR] [--export FILE]

For L = 1, 2, ... (docs/depth.md): an impossibility certificate for the exact class B(L, H) (bilinear
hardmax attention, any width), re-checked by proofs/check_depth.py (standard library only), or a hardmax model realised with
bilinear scores and verified on every point (checkers.exhaustive.verify, the code behind
`verify-construction --weights`), or "open at L" with the reason.  The minimal depth is exact
only when every smaller L is refuted by a re-checked certificate and a verified model exists at L.
Exit codes: 0 minimal depth exact; 2 bad input; 3 open (some depth neither refuted nor realised);
4 internal error.
"""
from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser, add_task_options, nonnegative_int, plural, positive_int, run_main, tasks_help
from depthcert.cli.errors import EXIT_OK, EXIT_UNDECIDED

DEFAULT_MAX_CLAUSES = 200_000_000
DEFAULT_MAX_NODES = 60_000
DEFAULT_MAX_ROUNDS = 2_000
DEFAULT_MAX_SECONDS = 3600
DEFAULT_MAX_LAYERS = 3
MAX_HEADS = 4
MAX_POINTS = 5_000

RULES_OUT = ("attention-only transformers with average-hard (hardmax) attention, {h} per layer, at most {l}, "
             "one-hot token and position inputs, linear values, any width and any weights, a linear "
             "read-out at the last position{c} (docs/depth.md)")
NOT_RULED_OUT = ("softmax or ReLU attention, MLP sublayers, layer normalisation, more heads per layer, "
                 "read-outs at other positions")


def _build_parser() -> _Parser:
    p = _Parser(prog="find-depth",
                description="Minimal depth of average-hard attention-only transformers with H heads per layer on a "
                            "finite dataset: a re-checked impossibility certificate for every smaller depth and a "
                            "model verified on every point (docs/depth.md).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help=tasks_help(every_task=True) + "; copy: the copy task (--length, --alphabet); "
                                    "pointer: pointer chasing, f(0) .. f(N-1) then x, label f^hops(x) "
                                    "(--n-entities N, --hops)")
    src.add_argument("--dataset", metavar="FILE", help="a depthcert.dataset JSON file (last-position labels)")
    add_task_options(p)
    p.add_argument("--heads", type=positive_int, required=True, help=f"heads per layer (1..{MAX_HEADS})")
    p.add_argument("--max-layers", type=positive_int, default=DEFAULT_MAX_LAYERS,
                   help=f"the largest depth tried (default {DEFAULT_MAX_LAYERS})")
    p.add_argument("--max-clauses", type=positive_int, default=DEFAULT_MAX_CLAUSES,
                   help="the largest case-split encoding: a run whose selection literals (one per point, layer, "
                        "head, position and possible maximal set, 2^keys - 1) exceed it is refused before anything "
                        f"is built (default {DEFAULT_MAX_CLAUSES:,})")
    p.add_argument("--max-nodes", type=positive_int, default=DEFAULT_MAX_NODES,
                   help="the work budget of each depth in search nodes, shared by its phases in fixed shares: the "
                        f"outcome is the same on every machine (default {DEFAULT_MAX_NODES:,})")
    p.add_argument("--max-rounds", type=nonnegative_int, default=DEFAULT_MAX_ROUNDS,
                   help="the budget of the clausal search, which runs at a depth the other phases leave open: rounds "
                        "of a SAT solver call and its LPs, each adding Farkas lemmas; 0 skips it "
                        f"(default {DEFAULT_MAX_ROUNDS:,}; docs/depth.md, section 3)")
    p.add_argument("--max-seconds", type=positive_int, default=DEFAULT_MAX_SECONDS,
                   help="a safety stop for the whole run; an outcome it ends is marked machine-dependent "
                        f"(default {DEFAULT_MAX_SECONDS} s)")
    p.add_argument("--certificates", metavar="DIR", help="write each impossibility certificate to DIR")
    p.add_argument("--export", metavar="FILE", help="write the verified model (depthcert.weights v2, hardmax)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


_SIZE_OPTIONS = ("k", "l", "n_questions", "n_answers", "hops", "n_entities", "n", "modulus", "group", "vertices",
                 "length", "alphabet", "n_functions", "domain", "vocab", "query", "seed", "n_points")


def _refuse_options(args, task, takes):
    """A size option the task does not take is bad input (one line)."""
    for name in _SIZE_OPTIONS:
        if name not in takes and getattr(args, name, None) is not None:
            raise BadInput(f"option --{name.replace('_', '-')} does not apply to task {task}")


def _copy_problem(args):
    from depthcert.training.copy_task import CopyTask

    length = args.length if args.length is not None else 2
    alphabet = args.alphabet if args.alphabet is not None else 2
    _refuse_options(args, "copy", ("length", "alphabet"))
    task = CopyTask(length=length, alphabet=alphabet)
    if task.size * length > MAX_POINTS:
        raise BadInput(f"copy --length {length} --alphabet {alphabet} has {task.size * length} labelled positions "
                       f"(limit {MAX_POINTS})")
    ids, labels = task.all_points()
    pts = []
    for row, lab in zip(ids, labels):
        toks = [task.vocab[t] for t in row]
        for i in range(len(toks)):
            if lab[i] >= 0:
                pts.append((tuple(toks[: i + 1]), task.classes[lab[i]]))
    return SimpleNamespace(name="copy", params={"length": length, "alphabet": alphabet}, points=pts, causal=True,
                           vocab=task.vocab, classes=task.classes, max_length=2 * length, outputs="all",
                           groups=(), representatives=None, task=task,
                           task_ref={"name": "copy", "params": {"length": length, "alphabet": alphabet}},
                           describe=f"copy (length={length}, alphabet={alphabet})")


def _pointer_problem(args):
    """Pointer chasing: a function f: [N] -> [N] written as its values f(0) .. f(N-1), then a query
    x; the label is f^hops(x) (tokens and labels are the digits "0" .. str(N-1))."""
    from itertools import product

    N = args.n_entities if args.n_entities is not None else 3
    hops = args.hops if args.hops is not None else 4
    _refuse_options(args, "pointer", ("n_entities", "hops"))
    if not 1 <= N <= 9:
        raise BadInput(f"pointer --n-entities {N}: expected 1..9")
    if N ** (N + 1) > MAX_POINTS:
        raise BadInput(f"pointer --n-entities {N} has {N ** (N + 1):,} points; find-depth loads at most {MAX_POINTS:,}")
    pts = []
    for f in product(range(N), repeat=N):
        for x in range(N):
            y = x
            for _ in range(hops):
                y = f[y]
            pts.append((tuple(str(v) for v in f) + (str(x),), str(y)))
    vocab = tuple(str(v) for v in range(N))
    params = {"N": N, "hops": hops}
    return SimpleNamespace(name="pointer", params=params, points=pts, causal=False, vocab=vocab, classes=vocab,
                           max_length=N + 1, outputs="last", groups=(), representatives=None, task=None,
                           task_ref={"name": "pointer", "params": params},
                           describe=f"pointer (N={N}, hops={hops})")


def _problem(args):
    """The points and everything the search and the realisation need, after the size guards."""
    if args.dataset:
        from depthcert.checkers.tasks.dataset_file import load_dataset

        task = load_dataset(args.dataset)
        if task.outputs != "last":
            raise BadInput("find-depth reads datasets with one label per sequence (last position)")
        name, task_ref = task.name, None
    elif args.task and args.task.strip().lower() == "copy":
        return _copy_problem(args)
    elif args.task and args.task.strip().lower() == "pointer":
        return _pointer_problem(args)
    else:
        from depthcert.cli.common import TASK_OPTIONS
        from depthcert.checkers.tasks import make_task

        task = make_task(args.task, **{n: getattr(args, n) for n, _ in TASK_OPTIONS})
        if getattr(task, "outputs", "last") != "last":
            raise BadInput(f"task {task.name} labels every position; find-depth reads the last position")
        name = task.name
        task_ref = {"name": name, "params": dict(task.params)} if name in _RULES else None
    if task.size > MAX_POINTS:
        raise BadInput(f"{task.describe()} has {task.size:,} points; find-depth loads at most {MAX_POINTS:,}")
    return SimpleNamespace(name=name, params=dict(task.params), points=None, causal=False, vocab=task.vocab,
                           classes=task.classes, max_length=task.length, outputs="last",
                           groups=task.symmetry_groups(), task=task, task_ref=task_ref, describe=task.describe())


_RULES = ("icqa", "tm", "ictm", "multihop", "parity", "composition")


def _load_points(prob):
    if prob.points is not None:
        return
    t = prob.task
    pts = []
    for b in t.batches():
        for ids, lab in zip(b.ids, b.labels):
            pts.append((tuple(str(t.vocab[i]) for i in ids), str(t.classes[lab])))
    prob.points = pts
    prob.classes = tuple(str(c) for c in t.classes)
    prob.vocab = tuple(str(v) for v in t.vocab)
    reps = t.orbit_representatives() if prob.groups else None
    prob.representatives = None if reps is None else sorted(int(i) for i in reps[0])


def encoding_size(size: int, length: int, layers: int, heads: int, causal: bool) -> int:
    """Selection literals of the case split over every point: for each point, layer, head and
    position, one per possible maximal set of its visible keys (2^keys - 1)."""
    per = sum((2 ** ((i + 1) if causal else length)) - 1 for i in range(length))
    return size * layers * heads * per


def _verify_model(prob, weights):
    from depthcert.checkers.exhaustive import verify
    from depthcert.checkers.weights_file import model_from_json

    if prob.name == "pointer":
        from depthcert.checkers.tasks.dataset_file import DatasetTask

        task = DatasetTask([list(t) for t, _ in prob.points], [y for _, y in prob.points], name="pointer")
    elif prob.name == "copy":
        from depthcert.checkers.tasks.dataset_file import DatasetTask

        ids, labels = prob.task.all_points()
        V, C = prob.task.vocab, prob.task.classes
        seqs = [[V[t] for t in row] for row in ids]
        labs = [[None if y < 0 else C[y] for y in row] for row in labels]
        task = DatasetTask(seqs, labs, name="copy", per_position=True)
    else:
        task = prob.task
    model = model_from_json(weights, task)
    v = verify(model, task, symmetry="auto" if prob.groups else "off", progress=False)
    return v.verified, v.min_margin


def _find_depth(argv) -> int:
    args = _build_parser().parse_args(argv)
    from depthcert.cli.common import data_file

    args.dataset = data_file(args.dataset)
    if args.heads > MAX_HEADS:
        raise BadInput(f"--heads {args.heads}: at most {MAX_HEADS} heads per layer")
    if args.max_layers > 4:
        raise BadInput(f"--max-layers {args.max_layers}: at most 4 layers")
    t_start = time.perf_counter()
    prob = _problem(args)
    size = len(prob.points) if prob.points is not None else prob.task.size
    length = max(len(p[0]) for p in prob.points) if prob.points is not None else prob.max_length
    from depthcert.proofs.check_depth import MAX_KEYS

    if length > MAX_KEYS:
        raise BadInput(f"sequences of length {length}: find-depth splits over at most {MAX_KEYS} keys")
    clauses = encoding_size(size, length, args.max_layers, args.heads, prob.causal)
    if clauses > args.max_clauses:
        raise BadInput(f"the case split of {size:,} points, length {length}, {args.max_layers} layers of "
                       f"{args.heads} heads has {clauses:,} selection literals, more than --max-clauses "
                       f"{args.max_clauses:,}; use smaller sizes or fewer layers")
    # a priori time: the realisation evaluates every point once per depth (~2 microseconds per
    # key comparison and row), the search at least one node per point
    estimate = size * args.max_layers * args.heads * length * length * 2e-5
    if estimate > args.max_seconds:
        raise BadInput(f"evaluating {size:,} points at {args.max_layers} layers needs about {estimate:.0f} s, more "
                       f"than --max-seconds {args.max_seconds}")
    _load_points(prob)
    deadline = t_start + args.max_seconds
    from depthcert.proofs.depth import decide

    show = sys.stderr.isatty() and not args.json
    outcomes = []
    for L in range(1, args.max_layers + 1):
        bar = None
        if show:
            from tqdm import tqdm

            bar = tqdm(desc=f"find-depth L={L}", unit=" nodes", leave=False, file=sys.stderr, delay=3)
        try:
            out = decide(prob, L, args.heads, args.max_nodes, deadline, progress=bar,
                         verify_model=lambda w: _verify_model(prob, w), max_rounds=args.max_rounds)
        finally:
            if bar is not None:
                bar.close()
        outcomes.append(out)
        if out.kind == "model":
            break
    wrote = _write(args, prob, outcomes)
    report = _report(prob, args, outcomes, time.perf_counter() - t_start, wrote)
    if args.json:
        print(json.dumps(report))
    else:
        print("\n".join(_human(prob, args, outcomes, report)))
    return EXIT_OK if report["exact"] else EXIT_UNDECIDED


def _write(args, prob, outcomes):
    from depthcert.checkers.atomic import write_json_atomic

    wrote = []
    if args.certificates:
        os.makedirs(args.certificates, exist_ok=True)
        for o in outcomes:
            if o.kind == "impossible":
                sizes = "-".join(f"{k}{v}" for k, v in prob.params.items() if k != "query" or v != "any")
                path = os.path.join(args.certificates, f"{prob.name}{'-' + sizes if sizes else ''}-L{o.layers}-H{args.heads}.json")
                write_json_atomic(path, o.certificate)
                wrote.append(path)
    if args.export:
        for o in outcomes:
            if o.kind == "model":
                write_json_atomic(args.export, o.weights)
                wrote.append(args.export)
    return wrote


def _margin(m):
    from depthcert.cli.common import margin_json

    return margin_json(m)


def _report(prob, args, outcomes, seconds, wrote):
    refuted = 0
    for o in outcomes:
        if o.kind != "impossible":
            break
        refuted = o.layers
    model = next((o for o in outcomes if o.kind == "model"), None)
    exact = model is not None and refuted == model.layers - 1
    depths = []
    for o in outcomes:
        d = {"layers": o.layers, "outcome": o.kind, "work_nodes": o.work or o.nodes, "seconds": round(o.seconds, 2)}
        if o.rounds:
            d["work_rounds"] = o.rounds
        if o.machine:
            d["machine_dependent"] = True
        if o.kind == "impossible" and o.proof_size:
            d["certificate"] = {"points": len(o.certificate["points"]), "version": o.certificate["version"],
                                "atoms": o.proof_size[0], "lemmas": o.proof_size[1], "steps": o.proof_size[2],
                                "check": o.check_message}
        elif o.kind == "impossible":
            d["certificate"] = {"points": len(o.certificate["points"]), "version": o.certificate["version"],
                                "nodes": o.tree_nodes, "leaves": o.leaves, "check": o.check_message}
            if o.notes:
                d["certificate"]["source"] = "; ".join(o.notes)
        elif o.kind == "model":
            d["model"] = {"d_model": len(o.weights["W_O"][0]), "verified": True, "min_margin": _margin(o.margin),
                          "points_checked": len(prob.points)}
            if o.padded_from:
                d["model"]["padded_from_heads"] = o.padded_from
            if o.notes:
                d["model"]["source"] = "; ".join(o.notes)
        else:
            d["reason"] = o.reason
        depths.append(d)
    return {"command": "find-depth", "verdict": "minimal_depth" if exact else "open",
            "task": prob.name, "params": prob.params, "points": len(prob.points), "heads": args.heads,
            "causal": prob.causal, "depths": depths, "minimal_depth": model.layers if exact else None,
            "exact": exact, "lower_bound": refuted + 1, "upper_bound": model.layers if model else None,
            "max_nodes": args.max_nodes, "max_rounds": args.max_rounds, "machine_dependent": any(o.machine for o in outcomes),
            "wrote": wrote, "seconds": round(seconds, 2)}


def _human(prob, args, outcomes, report):
    h = plural(args.heads, "head")
    lines = [f"find-depth {prob.describe}: {plural(len(prob.points), 'point')}, {h} per layer"
             + (", causal" if prob.causal else "")]
    for o in outcomes:
        if o.kind == "impossible" and o.proof_size:
            a, m, st = o.proof_size
            lines.append(f"  L={o.layers}  impossible (certificate): {plural(len(o.certificate['points']), 'point')}, "
                         f"clausal proof of {a:,} atoms, {m:,} Farkas lemmas and {st:,} steps; work {o.work or o.nodes:,} "
                         f"nodes and {o.rounds:,} rounds, {o.seconds:.1f} s")
            lines.append(f"        re-checked by proofs/check_depth.py: {o.check_message}")
        elif o.kind == "impossible":
            lines.append(f"  L={o.layers}  impossible (certificate): {plural(len(o.certificate['points']), 'point')}, "
                         f"tree of {o.tree_nodes:,} nodes and {o.leaves:,} Farkas leaves; work {o.work or o.nodes:,} "
                         f"nodes, {o.seconds:.1f} s")
            lines.append(f"        re-checked by proofs/check_depth.py: {o.check_message}")
            for note in o.notes:
                lines.append(f"        {note} (not searched)")
        elif o.kind == "model":
            lines.append(f"  L={o.layers}  verified model: hardmax, d'={len(o.weights['W_O'][0])}, every point "
                         f"({len(prob.points)}) correct, min margin {_fmt_margin(o.margin)}; work {o.work or o.nodes:,} "
                         f"nodes{f' and {o.rounds:,} rounds' if o.rounds else ''}, {o.seconds:.1f} s")
            for note in o.notes:
                known = note.startswith("known model")
                lines.append(f"        {note}" + (" (not searched; verified on every point like a searched model)"
                                                   if known else ""))
            if o.padded_from:
                lines.append(f"        found with {plural(o.padded_from, 'head')} per layer and padded with zero-value "
                             f"heads to {h} (a model with fewer heads is one with more); verified with {h}")
        else:
            rounds = f" and {o.rounds:,} of {args.max_rounds:,} rounds" if o.rounds else ""
            lines.append(f"  L={o.layers}  open after {o.work or o.nodes:,} of {args.max_nodes:,} nodes{rounds}: {o.reason}")
            if o.machine:
                lines.append("        (ended by the safety stop in seconds: this outcome depends on the machine)")
    if report["exact"]:
        m = report["minimal_depth"]
        lines.append(f"minimal depth with {h} per layer: {m} (every smaller depth refuted by a re-checked "
                     f"certificate, a model verified on every point at {m})")
    else:
        up = report["upper_bound"]
        lines.append(f"minimal depth with {h} per layer: not decided: at least {report['lower_bound']}"
                     + (f", at most {up}" if up else f", no model with at most {args.max_layers} "
                                                  f"layer{'s' if args.max_layers > 1 else ''} found"))
    lo = report["lower_bound"] - 1
    if lo >= 1:
        lines.append("rules out: " + RULES_OUT.format(h=h + (" or fewer" if args.heads > 1 else ""), l=plural(lo, "layer"),
                                                      c=", causal" if prob.causal else "")
                     .replace("{l}", plural(lo, "layer")))
        lines.append("does not rule out: " + NOT_RULED_OUT)
    for path in report["wrote"]:
        lines.append(f"wrote {path}")
    lines.append(f"time: {report['seconds']:.1f} s")
    return lines


def _fmt_margin(m):
    from depthcert.cli.common import _fmt_q

    return _fmt_q(m)


def find_depth_main(argv=None) -> int:
    return run_main(_find_depth, argv)


if __name__ == "__main__":
    sys.exit(find_depth_main())
