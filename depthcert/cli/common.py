"""What every depthcert command shares: argument parsing that exits 2 on bad input, the task
options, resource-budget options, and the formatting of exact numbers, enclosures and points.

Exit codes and the wrapper every command body runs in: depthcert/cli/errors.py (docs/commands.md, "Exit codes").
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from fractions import Fraction

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import decimal_text, format_rational
from depthcert.cli.errors import EXIT_UNDECIDED, exit_codes_epilog, run_main  # noqa: F401 -- commands import them here

PRECISION_LIMIT = 65536  # bits: a ball forward pass at this precision is already slow


_NEGATIVE_VALUE = re.compile(r"^-[0-9.]")


class _Parser(argparse.ArgumentParser):
    """argparse that raises BadInput (exit 2, one line) instead of printing usage, refuses
    abbreviated options (`--hop 2` is not `--hops 2`), takes a value that starts like a
    negative number after an option that needs one (`--vocab -1,0,1` as `--vocab=-1,0,1`),
    and ends --help with the command's exit codes (depthcert/cli/errors.py)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("epilog", exit_codes_epilog(kwargs.get("prog")))
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise BadInput(message)

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        joined, i = [], 0
        while i < len(args):
            action = self._option_string_actions.get(args[i])
            if (action is not None and action.nargs is None and i + 1 < len(args)
                    and _NEGATIVE_VALUE.match(args[i + 1])):
                joined.append(f"{args[i]}={args[i + 1]}")
                i += 2
                continue
            joined.append(args[i])
            i += 1
        return super().parse_known_args(joined, namespace)


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 point', '2 points' (n as printed: thousands separated when `n` is a formatted str)."""
    count = n if isinstance(n, str) else str(n)
    one = (n == 1) if not isinstance(n, str) else n.replace(",", "") == "1"
    return f"{count} {word if one else (many or word + 's')}"


def task_names() -> list[str]:
    """Every task that has a construction, from the constructions registry (in its order)."""
    from depthcert import constructions

    return list(constructions.all_variants())


def every_task_name() -> list[str]:
    """Every task with a dataset (checkers/tasks' registry), constructed or not (max-of-k has
    no construction: find-dependence, check-certificate, verify-model and train take it)."""
    from depthcert.checkers.tasks import TASK_ALIASES

    names = task_names()
    return names + [t for t in dict.fromkeys(TASK_ALIASES.values()) if t not in names]


def task_aliases(names) -> str:
    """The other spellings of the tasks `names`: "classification, sequence-classification = sc; ..."."""
    from depthcert.checkers.tasks import TASK_ALIASES

    groups = {name: [a for a, t in TASK_ALIASES.items() if t == name and a != name] for name in names}
    return "; ".join(f"{', '.join(a)} = {name}" for name, a in groups.items() if a)


def tasks_help(every_task: bool = False) -> str:
    """A task argument's help: the task names of the registry (the tasks with a construction, or
    with `every_task` every task with a dataset), then their aliases."""
    names = every_task_name() if every_task else task_names()
    return f"the task: {', '.join(names)} (docs/ describes each); aliases: {task_aliases(names)}"


def check_task_name(name: str, every_task: bool = True) -> str:
    """The canonical name of a task the command takes (`every_task`: every task with a dataset, else
    the tasks with a construction); otherwise BadInput listing exactly what the command takes."""
    from depthcert.checkers.tasks import TASK_ALIASES

    names = every_task_name() if every_task else task_names()
    key = TASK_ALIASES.get(str(name).strip().lower())
    if key in names:
        return key
    takes = f"known: {', '.join(names)} (aliases: {task_aliases(names)})"
    if key is None:
        raise BadInput(f"unknown task {name!r}; {takes}")
    raise BadInput(f"task {key} has no construction (find-dependence, check-certificate, verify-model and train "
                   f"take it); {takes}")


def data_file(path: str | None) -> str | None:
    """A --dataset/--weights path as given, or, when it does not exist and names one of the
    example files (docs/examples/NAME), the copy shipped with the package: the commands the
    docs print work from any folder."""
    if path is None or os.path.exists(path):
        return path
    from depthcert.proofs.theorems import EXAMPLES_DIR

    norm = path.replace("\\", "/")
    name = os.path.basename(norm)
    if (norm == name or norm.endswith("docs/examples/" + name)) and os.path.isfile(os.path.join(EXAMPLES_DIR, name)):
        return os.path.join(EXAMPLES_DIR, name)
    return path


def margin_json(exact=None, enclosure=None) -> dict | None:
    """One margin object: {"exact": "1/2", "decimal": "0.5"} for an exact margin;
    {"lower": ..., "upper": ..., "decimal": ...} for a certified enclosure (softmax models;
    lower/upper rounded outward, decimal the midpoint for reading); None when unknown."""
    if exact is not None:
        return {"exact": str(format_rational(exact)), "decimal": decimal_text(exact)}
    if enclosure is not None:
        lo, hi = enclosure
        lower, upper = enclosure_text(enclosure)
        return {"lower": lower, "upper": upper, "decimal": decimal_text((Fraction(lo) + Fraction(hi)) / 2)}
    return None


def verdict_fields(v, task, t_start: float) -> dict:
    """The fields every exhaustive verify run reports in --json (verify-construction, --cot):
    counts, the dataset's size formula, the verdict, the margin object, the evaluation path, times."""
    import time

    return {
        "points_total": v.points_total,
        "points_covered": v.points_covered,
        "points_checked": v.points_checked,
        "size_formula": task.size_formula,
        "verdict": v.verdict,
        "min_margin": margin_json(v.min_margin, v.margin_enclosure),
        "evaluation": v.path,
        "seconds": round(v.seconds, 3),
        "total_seconds": round(time.perf_counter() - t_start, 3),
    }


TASK_OPTIONS = (
    ("k", "number of (question, answer) pairs in the context (icqa, ictm); sequence length (max-of-k)"),
    ("l", "template length (tm, ictm); --len is the same"),
    ("n_questions", "question tokens (icqa; default k+2)"),
    ("n_answers", "answer tokens (icqa, ictm; default k+2)"),
    ("alphabet", "alphabet size (sc, tm, ictm)"),
    ("length", "sequence length before CLS (sc)"),
    ("seed", "seed of the distinct SC labels (sc)"),
    ("n_points", "sample this many sequences (sc)"),
    ("hops", "number of hops (multihop)"),
    ("n_entities", "entity tokens (multihop)"),
    ("n", "sequence length (parity, mod-count, word-problem, induction)"),
    ("modulus", "the modulus p (mod-count, modular-addition); --p is the same"),
    ("group", "the finite group (word-problem), e.g. a5, s5, c3"),
    ("vertices", "number of vertices (reachability)"),
    ("n_functions", "number of composed functions L (composition); --L is the same"),
    ("domain", "domain size N of each function (composition); --N is the same"),
    ("vocab", "vocabulary size (max-of-k, induction)"),
    ("query", "ictm: the query's substitution: any (default; its context question's included) or new"),
)
# extra flag spellings and non-integer options of TASK_OPTIONS
OPTION_FLAGS = {"l": ["--len"], "modulus": ["--p"], "n_functions": ["--L"], "domain": ["--N"]}
OPTION_TYPES = {"group": str, "query": str}


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


def variants_help() -> str:
    """--variant's help: every task's constructions, the default first."""
    from depthcert import constructions

    table = constructions.all_variants()
    return "which construction (default: the task's first): " + "; ".join(
        f"{task}: {', '.join(v)}" for task, v in table.items())


def add_budget_options(p: argparse.ArgumentParser) -> None:
    from depthcert.checkers.budget import DEFAULT_MAX_SECONDS, DEFAULT_MAX_WEIGHTS

    p.add_argument("--max-weights", type=positive_int, default=DEFAULT_MAX_WEIGHTS,
                   help=f"refuse constructions with more weight entries (default {DEFAULT_MAX_WEIGHTS:,})")
    p.add_argument("--max-seconds", type=positive_int, default=DEFAULT_MAX_SECONDS,
                   help=f"refuse a build or evaluation step estimated to take longer (default {DEFAULT_MAX_SECONDS} s)")


def add_task_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dataset size")
    for name, help_text in TASK_OPTIONS:
        flags = [f"--{name.replace('_', '-')}"] + OPTION_FLAGS.get(name, [])
        typ = OPTION_TYPES.get(name, nonnegative_int if name == "seed" else positive_int)
        g.add_argument(*flags, dest=name, type=typ, default=None, help=help_text)


def task_from_args(args, every_task: bool = True):
    """The task named by args.task with its size options; `every_task=False` for the commands that
    build a construction (the task must have one: check_task_name)."""
    from depthcert.checkers.tasks import make_task

    check_task_name(args.task, every_task)
    opts = {name: getattr(args, name) for name, _ in TASK_OPTIONS}
    return make_task(args.task, **opts)


def _fmt_q(q) -> str:
    """An exact number as text; a long one (over 30 characters) also as a short decimal."""
    from depthcert.checkers.rational import exact_text

    return "-" if q is None else exact_text(q)


def bound_text(q, up: bool, digits: int = 10) -> str:
    """q rounded outward to `digits` significant digits as an exact decimal string: rounded
    down for a lower end (up=False), up for an upper end, so an enclosure stays an enclosure.
    The string's value is n * 10^-s for the rounded integer n, whatever carry rounding caused."""
    q = Fraction(q)
    if q == 0:
        return "0"
    num, den = q.numerator, q.denominator  # integers only below: no str() or gcd of a 10^100000-sized one

    def at_least(e: int) -> bool:  # |q| >= 10^e
        return abs(num) * 10 ** max(-e, 0) >= den * 10 ** max(e, 0)

    e = math.floor((abs(num).bit_length() - den.bit_length()) * math.log10(2))  # within 1 of log10 |q|
    while at_least(e):
        e += 1
    while not at_least(e - 1):
        e -= 1  # now 10^(e-1) <= |q| < 10^e
    s = digits - e
    N, D = (num * 10**s, den) if s >= 0 else (num, den * 10**-s)  # q 10^s = N / D: `digits` digits before the point
    n = -((-N) // D) if up else N // D
    if n == 0:
        return "0"
    text = str(abs(n))
    exp10 = len(text) - 1 - s  # a carry (999.. -> 1000..) lengthens text and raises the exponent
    text = text.rstrip("0") or "0"
    mant = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return ("-" if n < 0 else "") + f"{mant}e{exp10:+d}"


def enclosure_text(pair) -> list[str]:
    return [bound_text(pair[0], up=False), bound_text(pair[1], up=True)]


def _counterexample_json(ce) -> dict:
    out = {
        "index": ce.index,
        "tokens": list(ce.tokens),
        "expected": ce.expected,
        "predicted": ce.predicted,
        "tie": ce.tie,
        "logits": {c: str(format_rational(v)) for c, v in zip(ce.classes, ce.logits)},
    }
    if ce.position is not None:
        out["position"] = ce.position
    if ce.logit_bounds:
        out["logits"] = {c: enclosure_text(b) for c, b in zip(ce.classes, ce.logit_bounds)}
        out["logits_are"] = "certified enclosures [lower, upper]"
    return out


def _undecided_json(u) -> dict:
    return {
        "index": u.index,
        "tokens": list(u.tokens),
        "expected": u.expected,
        "position": u.position,
        "not_separated_from": u.other,
        "margin": margin_json(enclosure=u.margin),
        "precision_bits": u.precision,
        "limit": u.limit,
        "logits": {c: enclosure_text(b) for c, b in zip(u.classes, u.logit_bounds)},
    }


def guard_classifier_size(task, max_weights: int) -> None:
    """Refuse before building when W_O alone (classes x d', d' >= vocabulary + positions) is
    over the weight budget: some builders compute a value per class before they allocate."""
    from depthcert.checkers.layout import MAX_DIM

    width = len(task.vocab) + task.length
    if width > MAX_DIM:
        return  # the layout's own limit refuses it, naming d'
    entries = len(task.classes) * width
    if entries > max_weights:
        raise BadInput(f"{task.describe()} has {len(task.classes):,} classes: W_O alone needs more than "
                       f"{entries:,} weight entries, above the limit {max_weights:,}; raise it with "
                       f"--max-weights {entries}, or use smaller sizes")


def _precision_options(args, model) -> dict | None:
    """Ball precisions for softmax models; refused (exit 2) when out of range or meaningless."""
    given = args.precision is not None or args.max_precision is not None
    if not model.has_softmax:
        if given:
            raise BadInput("--precision and --max-precision apply to softmax models only (this model is exact)")
        return None
    return precision_range(args.precision, args.max_precision)


def precision_range(precision: int | None, max_precision: int | None) -> dict:
    """--precision / --max-precision as verify's `balls` option, refused when out of range."""
    from depthcert.checkers.softmax_balls import MAX_PRECISION, START_PRECISION

    start = START_PRECISION if precision is None else precision
    cap = max(MAX_PRECISION, start) if max_precision is None else max_precision
    if start < 2:
        raise BadInput(f"--precision must be at least 2 bits, got {start}")
    if cap > PRECISION_LIMIT:
        raise BadInput(f"--max-precision {cap} is above the limit {PRECISION_LIMIT} bits")
    if start > cap:
        raise BadInput(f"--precision {start} is above --max-precision {cap}")
    return {"start_precision": start, "max_precision": cap}


def logits_line(ce) -> str:
    """A counterexample's logits: exact values, or certified enclosures for softmax models."""
    if ce.logit_bounds:
        return "  logits     " + "  ".join(f"{c} in [{lo}, {hi}]" for c, (lo, hi) in
                                         ((c, enclosure_text(b)) for c, b in zip(ce.classes, ce.logit_bounds)))
    return "  logits     " + "  ".join(f"{c}={format_rational(q)}" for c, q in zip(ce.classes, ce.logits))
