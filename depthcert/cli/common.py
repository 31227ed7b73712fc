"""What every depthcert command shares: argument parsing that exits 2 on bad input, the task
options, resource-budget options, and the formatting of exact numbers, enclosures and points.

Exit codes: 0 verified, 1 refuted (counterexample printed), 2 bad input (one line, no traceback),
3 undecided (softmax models only: certified balls could not separate some point's logits at the
precision cap; the point is printed; never rounded into a verdict).
"""
from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import format_rational

EXIT_UNDECIDED = 3
PRECISION_LIMIT = 65536  # bits: a ball forward pass at this precision is already slow


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
    ("n", "sequence length (parity, mod-count, word-problem)"),
    ("modulus", "the modulus p (mod-count); --p is the same"),
    ("group", "the finite group (word-problem), e.g. a5, s5, c3"),
    ("vertices", "number of vertices (reachability)"),
    ("n_functions", "number of composed functions L (composition); --L is the same"),
    ("domain", "domain size N of each function (composition); --N is the same"),
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


def task_from_args(args):
    from depthcert.checkers.tasks import make_task

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
    a = abs(q)
    e = len(str(a.numerator)) - len(str(a.denominator))
    if Fraction(10) ** e <= a:
        e += 1  # now 10^(e-1) <= a < 10^e
    s = digits - e
    x = q * Fraction(10) ** s  # `digits` digits before the point
    n = math.ceil(x) if up else math.floor(x)
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
        "logits": {c: format_rational(v) for c, v in zip(ce.classes, ce.logits)},
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
        "margin_enclosure": None if u.margin is None else enclosure_text(u.margin),
        "precision_bits": u.precision,
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
