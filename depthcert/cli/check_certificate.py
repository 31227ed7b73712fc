"""check-certificate: re-check a one-layer impossibility certificate with checkers/certificate.py.

    check-certificate FILE [--task TASK ... | --dataset FILE]

Exit codes: 0 valid, 1 invalid, 2 malformed or unreadable, 4 internal error (depthcert/cli/errors.py).
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


def check_certificate_main(argv=None) -> int:
    return run_main(_check_certificate, argv)


if __name__ == "__main__":
    sys.exit(check_certificate_main())
