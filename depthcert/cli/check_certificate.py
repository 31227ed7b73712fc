"""check-certificate: re-check a one-layer impossibility certificate with checkers/certificate.py,
or an all-sizes certificate (`verify-construction TASK --all-sizes --json`) with
proofs/check_all_sizes.py.

    check-certificate FILE [--task TASK ... | --dataset FILE]
    check-certificate FILE --rebuild [--family MODULE:FUNCTION]     (all-sizes certificates)

--rebuild binds an all-sizes certificate to its construction: it rebuilds the construction's closed
value (the registry's task and variant the certificate names, as built or as printed; or a --family),
recomputes its content hash and compares it, then the whole certificate the prover makes from it
(every point's tables, every margin, the claim) with the file's.

Exit codes: 0 valid (and, with --rebuild, bound), 1 invalid (or, with --rebuild, not this
construction's), 2 malformed or unreadable, 4 internal error (depthcert/cli/errors.py).
"""
from __future__ import annotations

import json
import sys

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser, add_task_options, data_file, positive_int, run_main, task_from_args, tasks_help

VALID_MEANS = ("valid means: these labelled sequences cannot all be classified correctly by one layer of the "
               "classes ruled out (docs/impossibility.md, section 10)")


def _check_certificate(argv) -> int:
    from depthcert.checkers import certificate as cc
    from depthcert.checkers.atomic import read_json

    p = _Parser(prog="check-certificate",
                description="Re-check a one-layer impossibility certificate with the independent checker "
                "(checkers/certificate.py). With --task or --dataset, also check that every certificate point is a "
                "point of that dataset with its dataset label (the certificate then speaks about that dataset).")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--task", help=tasks_help(every_task=True) + ", with its size options")
    p.add_argument("--dataset", metavar="DATASET", help="a depthcert.dataset file")
    add_task_options(p)
    p.add_argument("--max-points", type=positive_int, default=2_000_000,
                   help="refuse to index a dataset with more points (default 2,000,000)")
    p.add_argument("--rebuild", action="store_true",
                   help="all-sizes certificates: rebuild the construction's closed value, compare its content hash "
                   "and the certificate it makes (every table, margin and claim) with the file's")
    p.add_argument("--family", metavar="MODULE:FUNCTION",
                   help="with --rebuild: the family function the certificate was proven from (verify-construction --family)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = p.parse_args(argv)
    args.dataset = data_file(args.dataset)
    from depthcert.cli.common import TASK_OPTIONS

    given = [n for n, _ in TASK_OPTIONS if getattr(args, n) is not None]
    if args.task and args.dataset:
        raise BadInput("give --task or --dataset, not both")
    if given and not args.task:
        raise BadInput(f"--{given[0].replace('_', '-')} needs --task")
    obj = read_json(args.file, "certificate")
    if _is_all_sizes(obj):
        return _check_all_sizes(args, obj, given)
    if args.rebuild or args.family:
        raise BadInput("--rebuild and --family apply to all-sizes certificates (verify-construction --all-sizes --json)")
    status, msg = cc.classify(obj)
    if status == "malformed":
        raise BadInput(f"{args.file}: {msg[len('malformed: '):]}")
    about, about_msg = None, "(its own points only: pass --task or --dataset to check that they are points of a dataset)"
    if args.task or args.dataset:
        from depthcert.proofs.theorems import certificate_speaks_about

        if args.dataset:
            from depthcert.checkers.tasks.dataset_file import load_dataset

            task = load_dataset(args.dataset)
        else:
            task = task_from_args(args)
        if getattr(task, "outputs", "last") == "all":
            raise BadInput("certificates speak about last-position labels; this dataset labels every position")
        if task.size > args.max_points:
            raise BadInput(f"{task.describe()} has {task.size} points; indexing them is above the limit "
                           f"{args.max_points}; raise it with --max-points {task.size}")
        why = certificate_speaks_about(obj, task, limit=args.max_points)
        about = why is None
        about_msg = (f"every point is a point of {task.describe()} with its dataset label: no such one-layer model "
                     f"fits that dataset" if about else f"not about {task.describe()}: {why}")
    ok = status == "valid" and about is not False
    if args.json:
        verdict = "valid" if ok else ("invalid" if status != "valid" else "not_about_dataset")
        print(json.dumps({"command": "check-certificate", "verdict": verdict, "file": args.file,
                          "valid": status == "valid", "message": msg,
                          "about_dataset": about, "dataset_message": about_msg, "meaning": VALID_MEANS}))
    else:
        print(msg)
        print(about_msg)
        if status == "valid":
            print(VALID_MEANS)
    return 0 if ok else 1


ALL_SIZES_MEANS = ("valid means: the standard-library checker re-derived the proof for every size from the "
                   "certificate's tables (docs/all-sizes.md); bound means those tables are the ones the construction's "
                   "closed value gives")


def _is_all_sizes(obj) -> bool:
    cert = obj.get("certificate", obj) if isinstance(obj, dict) else None
    return isinstance(cert, dict) and cert.get("format") == "depthcert.all-sizes"


def _check_all_sizes(args, obj, given) -> int:
    """An all-sizes certificate: proofs/check_all_sizes.py's check, then with --rebuild the binding."""
    from depthcert.proofs import check_all_sizes as C

    if args.task or args.dataset or given:
        raise BadInput("an all-sizes certificate names its own task and variant: it takes no --task, --dataset or "
                       "sizes (--rebuild binds it to its construction)")
    if args.family and not args.rebuild:
        raise BadInput("--family needs --rebuild")
    try:
        code, line = C.check_data(obj)
    except (ValueError, KeyError, TypeError, IndexError, C.Invalid) as exc:
        code, line = 1, f"invalid: {exc}"
    cert = obj.get("certificate", obj)
    bound = None
    if not args.rebuild:
        bound_msg = ("not bound here to a construction: --rebuild rebuilds its closed value and compares the content "
                     "hash and every table")
    elif code != 0:
        bound_msg = "not rebuilt: the certificate is not valid"
    else:
        bound, bound_msg = rebuild(cert, args.family)
    ok = code == 0 and bound is not False
    if args.json:
        print(json.dumps({"command": "check-certificate", "verdict": "valid" if ok else "invalid", "file": args.file,
                          "kind": "all-sizes", "valid": code == 0, "message": line,
                          "content_hash": cert.get("content_hash"), "bound": bound, "binding_message": bound_msg,
                          "meaning": ALL_SIZES_MEANS}))
    else:
        print(line)
        print(bound_msg)
    return 0 if ok else 1


def _task_of(cert: dict):
    """The task at the certificate's structural sizes (its free sizes are the proof's symbols)."""
    from depthcert.checkers.tasks import make_task

    name, fixed = cert.get("task"), cert.get("fixed") or {}
    try:
        if name == "icqa":
            return make_task("icqa")
        if name == "multihop":
            return make_task("multihop", k=fixed["k"], hops=fixed.get("hops", 1))
        if name == "tm":
            return make_task("tm", l=fixed["l"])
        if name == "ictm":
            return make_task("ictm", k=fixed["k"], l=fixed["l"], **({"query": fixed["query"]} if "query" in fixed else {}))
        if name == "sc":
            return make_task("sc")
        if name == "parity":
            return make_task("parity")
        if name == "mod-count":
            return make_task("mod-count", modulus=cert["p"])
    except (KeyError, TypeError) as exc:
        raise BadInput(f"the certificate's structural sizes {fixed} do not name a {name} task ({exc})") from None
    raise BadInput(f"no construction to rebuild for task {name!r}")


def _first_difference(a, b, path="certificate"):
    """The path of the first place where two JSON values differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}"
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(b)}, rebuilt {len(a)})"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else path


def rebuild(cert: dict, family: str | None) -> tuple[bool, str]:
    """(bound, line): the construction the certificate names rebuilt (its closed value made again from
    symbols, the prover run on it), its content hash and whole certificate compared with the file's."""
    from depthcert.proofs.all_sizes import prove

    if cert.get("variant") == "family" and not family:
        raise BadInput("this certificate is a user family's (variant family): give --family MODULE:FUNCTION with --rebuild")
    task = _task_of(cert)
    construct = None
    if family:
        from depthcert.cli.all_sizes import load_family

        construct = load_family(family)
    what = f"{cert['task']} {'family ' + family if family else cert.get('variant')}"
    seen = []
    for as_printed in ([False] if family else [False, True]):
        rep = prove(task, None if family else cert.get("variant"), as_printed, construct)
        if rep.certificate is None:
            seen.append(f"{'as printed' if as_printed else 'as built'}: no certificate ({rep.status})")
            continue
        made = json.loads(json.dumps(rep.certificate))
        if made.get("content_hash") != cert.get("content_hash"):
            seen.append(f"{'as printed' if as_printed else 'as built'}: {made.get('content_hash')}")
            continue
        where = _first_difference(made, cert)
        name = what + (" as printed" if as_printed else "")
        if where is not None:
            return False, (f"not bound: {name} rebuilt has the certificate's content hash but its certificate differs "
                           f"at {where}")
        hashed = f"closed value {made['content_hash']} = the certificate's" if made.get("content_hash") else \
            "no closed value (built from rules)"
        return True, (f"bound: {name} rebuilt: {hashed}, and the certificate it makes (every table, margin and "
                      "claim) equals the file's")
    return False, (f"not bound: the certificate's closed value is {cert.get('content_hash')}; {what} rebuilt gives "
                   + "; ".join(seen))


def check_certificate_main(argv=None) -> int:
    return run_main(_check_certificate, argv)


if __name__ == "__main__":
    sys.exit(check_certificate_main())
