"""verify-tracr: does a model compiled by tracr compute its RASP program?  Every input, exactly.

    verify-tracr PROGRAM --vocab 1,2,3 --max-seq-len 4 [--distinct-tokens] [--causal] [--json]

PROGRAM is a name from tracr's program library (tracr.compiler.lib: make_reverse, make_hist,
make_sort_unique, ...; see LIBRARY_ARGS for the arguments each gets) or MODULE:FUNCTION
returning a RASP expression (called with the same arguments by parameter name).  The program is
compiled by tracr, imported exactly (depthcert/interop/tracr_import.py), and checked on every input of
every length 1..max_seq_len over the vocabulary (BOS first, as tracr places it), the labels
taken from tracr's RASP evaluator (rasp.evaluate; --causal: tracr's causal evaluator):

  categorical outputs  every output position is a labelled point of a per-position dataset
                       (checkers.dataset_file.DatasetTask) decided by checkers.exhaustive.verify
                       in certified ball arithmetic: verified (min margin enclosure), refuted
                       (input, position, expected, predicted) or undecided (exit 3).  A position
                       whose RASP value is not a value of the output space (None where an
                       Aggregate selects nothing, 1.5 as the mean of 1 and 2) cannot be produced
                       by the model: it is reported as a failure of its own kind.
  numerical outputs    the model's output at every position as a certified enclosure, against
                       the program's exact value (RASP's means in exact rationals); the largest
                       error is reported and decided against a tolerance (--tolerance T, default
                       DEFAULT_TOLERANCE = 1/1000): verified when every error is certified below it,
                       refuted when one is certified above it, undecided otherwise.

tracr's own float forward runs on the same inputs and is compared (never a verdict).
Exit codes: 0 verified, 1 refuted, 2 bad input,
3 undecided.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput

DEFAULT_MAX_INPUTS = 200_000
# numerical programs: the largest error |output - program value| accepted by default. tracr's
# numerical aggregates are off by their softmax leak (about 1e-7 in the library programs), its
# numerical MLPs by their discretization; an error of 1/1000 or more is a wrong output.
DEFAULT_TOLERANCE = Fraction(1, 1000)
DEFAULT_MAX_SEQ_LEN = 32

# Library programs: how their arguments are filled.  SOp arguments get rasp.tokens; the others
# follow the function's docstring example (or, without one, the value named here).
#   "TOKEN"   the first value of --vocab as given (make_frac_prevs's condition tokens == TOKEN,
#             make_count's token); "PATTERN": the first three --vocab values (docstring "abc");
#   "MAX_SEQ_LEN": --max-seq-len.
LIBRARY_ARGS = {
    "make_length": {},
    "make_reverse": {"sop": "SOP"},
    "make_hist": {},
    "make_sort_unique": {"vals": "SOP", "keys": "SOP"},
    "make_sort": {"vals": "SOP", "keys": "SOP", "max_seq_len": "MAX_SEQ_LEN", "min_key": 1},
    "make_sort_freq": {"max_seq_len": "MAX_SEQ_LEN"},
    "make_frac_prevs": {"bools": "TOKEN_EQ"},
    "make_pair_balance": {"sop": "SOP", "open_token": "(", "close_token": ")"},
    "make_shuffle_dyck": {"pairs": ["()", "{}"]},
    "make_shuffle_dyck2": {},
    "make_count_less_freq": {"n": 2},
    "make_count": {"sop": "SOP", "token": "TOKEN"},
    "shift_by": {"offset": 1, "sop": "SOP"},
    "detect_pattern": {"sop": "SOP", "pattern": "PATTERN"},
}
NOT_PROGRAMS = {"make_nary_sequencemap": "it takes a Python function f; wrap your use of it in MODULE:FUNCTION"}


# ----------------------------------------------------------------------------------------------
# arguments

def parse_vocab(text: str) -> tuple:
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or any(s == "" for s in items):
        raise BadInput(f"--vocab {text!r}: give comma-separated tokens, e.g. --vocab 1,2,3")
    if all(_is_int(s) for s in items):
        values = tuple(int(s) for s in items)
    else:
        values = tuple(items)
    if len(set(values)) != len(values):
        raise BadInput(f"--vocab {text!r} lists a token twice")
    if len(values) > 64:
        raise BadInput(f"--vocab has {len(values)} tokens, above the limit 64")
    return values


def _is_int(s: str) -> bool:
    t = s[1:] if s[:1] == "-" else s
    return t.isdigit()


def _fill(fn, given: dict, vocab: tuple, max_seq_len: int, where: str) -> dict:
    from tracr.rasp import rasp

    token_eq = rasp.tokens == vocab[0]
    token_eq._depthcert_text = f"rasp.tokens == {vocab[0]!r}"
    special = {"SOP": rasp.tokens, "MAX_SEQ_LEN": max_seq_len, "TOKEN": vocab[0], "TOKEN_EQ": token_eq,
               "PATTERN": list(vocab[:3])}
    kwargs = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind == p.POSITIONAL_ONLY:
            name = (p.POSITIONAL_ONLY, name)  # passed by position (shift_by's offset)
        key = name[1] if isinstance(name, tuple) else name
        if key in given:
            v = given[key]
            kwargs[name] = special.get(v, v) if isinstance(v, str) else v
        elif p.annotation in (rasp.SOp, "rasp.SOp") or key in ("sop", "vals", "keys", "bools"):
            kwargs[name] = rasp.tokens
        elif key == "max_seq_len":
            kwargs[name] = max_seq_len
        elif p.default is not p.empty:
            continue
        else:
            raise BadInput(f"{where}: no value for its argument {key!r} (write a MODULE:FUNCTION that fixes it)")
    return kwargs


def _call(fn, kwargs: dict):
    """Call with the positional-only arguments by position, in order."""
    pos = [v for k, v in kwargs.items() if isinstance(k, tuple)]
    kw = {k: v for k, v in kwargs.items() if not isinstance(k, tuple)}
    return fn(*pos, **kw)


def _describe_call(name: str, kwargs: dict) -> str:
    from tracr.rasp import rasp

    def show(v):
        if isinstance(v, rasp.SOp):
            return "rasp.tokens" if v is rasp.tokens else getattr(v, "_depthcert_text", v.label)
        return repr(v)

    return f"{name}(" + ", ".join(show(v) if isinstance(k, tuple) else f"{k}={show(v)}"
                                  for k, v in kwargs.items()) + ")"


def resolve_program(spec: str, vocab: tuple, max_seq_len: int):
    """(RASP SOp, description) for a library name or MODULE:FUNCTION."""
    from tracr.compiler import lib
    from tracr.rasp import rasp

    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise BadInput(f"cannot import module {mod_name!r}: {exc}") from None
        if not hasattr(mod, attr):
            raise BadInput(f"module {mod_name!r} has no {attr!r}")
        obj, given, where = getattr(mod, attr), {}, spec
    else:
        if spec in NOT_PROGRAMS:
            raise BadInput(f"{spec} is not a program: {NOT_PROGRAMS[spec]}")
        if spec not in LIBRARY_ARGS and not isinstance(getattr(lib, spec, None), rasp.SOp):
            known = ", ".join(LIBRARY_ARGS)
            raise BadInput(f"unknown program {spec!r}: give a tracr.compiler.lib name ({known}) or MODULE:FUNCTION")
        obj, given, where = getattr(lib, spec), LIBRARY_ARGS.get(spec, {}), spec
    if isinstance(obj, rasp.SOp):
        return obj, spec
    if not callable(obj):
        raise BadInput(f"{spec} is neither a RASP expression nor a function")
    kwargs = _fill(obj, given, vocab, max_seq_len, where)
    try:
        program = _call(obj, kwargs)
    except Exception as exc:  # a user function may raise anything: one line, exit 2
        raise BadInput(f"{spec} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(program, rasp.SOp):
        raise BadInput(f"{spec} returned {type(program).__name__}, not a RASP SOp")
    return program, _describe_call(spec.split(":")[-1], kwargs)


# ----------------------------------------------------------------------------------------------
# inputs and the ground truth

def count_inputs(V: int, L: int, distinct: bool) -> int:
    if distinct:
        return sum(math.perm(V, n) for n in range(1, min(L, V) + 1))
    return sum(V ** n for n in range(1, L + 1))


def enumerate_inputs(vocab: tuple, L: int, distinct: bool) -> list[tuple]:
    """Every input of length 1..L (lengths increasing, each length in product order)."""
    out = []
    for n in range(1, L + 1):
        it = itertools.permutations(vocab, n) if distinct else itertools.product(vocab, repeat=n)
        out.extend(it)
    return out


def _exact_evaluator(causal: bool):
    """tracr's RASP evaluator with the means of Aggregate taken in exact rationals (the
    program's value, which tracr's float evaluator rounds)."""
    from tracr.rasp import rasp

    class Exact(rasp.DefaultRASPEvaluator):
        def eval_aggregate(self, sop, xs):
            selector_value = self.evaluate(sop.selector, xs)
            values = self.evaluate(sop.sop, xs)
            out = []
            for row in selector_value:
                sel = [v for s, v in zip(row, values) if s]
                if not sel:
                    out.append(sop.default)
                elif len(sel) == 1:
                    out.append(sel[0])
                elif all(isinstance(v, (int, bool, float, Fraction)) for v in sel):
                    out.append(sum(Fraction(v) for v in sel) / len(sel))
                else:
                    raise ValueError(f"cannot aggregate {sel}")
            return out

        def evaluate(self, expr, xs):
            out = super().evaluate(expr, xs)
            if causal and isinstance(expr, rasp.Selector):
                out = [[bool(v) and j <= i for j, v in enumerate(row)] for i, row in enumerate(out)]
            return out

    return Exact().evaluate


def ground_truth(program, inputs, causal: bool, exact: bool = False) -> list:
    """Per input: the RASP value per position (tracr's evaluator; causal: its causal one), or
    the string of the exception the evaluator raised on that input."""
    if exact:
        evaluate = _exact_evaluator(causal)
    elif causal:
        from tracr.rasp import causal_eval

        evaluate = causal_eval.evaluate
    else:
        from tracr.rasp import rasp

        evaluate = rasp.evaluate
    out = []
    for x in inputs:
        try:
            out.append(list(evaluate(program, list(x))))
        except Exception as exc:  # the program is undefined on this input
            out.append(f"{type(exc).__name__}: {exc}")
    return out


# ----------------------------------------------------------------------------------------------
# the dataset, with a declared symmetry when the labels are equivariant

def make_dataset(inputs, labels, name: str, vocab_names: tuple):
    """The per-position dataset (BOS first, unlabelled) with a token symmetry declared when
    the labelled dataset is closed under every permutation of the vocabulary (checked exactly
    on the data, for a generating set); the kernel still checks the weights before using it."""
    from depthcert.checkers.tasks.dataset_file import DatasetTask
    from depthcert.interop.tracr_import import BOS

    class TracrDataset(DatasetTask):
        theorem = "tracr program"

        def symmetry_groups(self):
            return self._groups

        def orbit_representatives(self):
            return self._reps

    seqs = [[BOS] + [str(t) for t in x] for x in inputs]
    task = TracrDataset(seqs, labels, name, per_position=True)
    task._groups, task._reps = (), None
    closed = _closed_under_permutations(seqs, labels, vocab_names)
    if closed:
        task._groups = (tuple(vocab_names),)
        task._reps = _orbits(seqs, set(vocab_names))
    task.symmetry_note = ("labels equivariant under every permutation of the vocabulary (checked on the data)"
                          if closed else "labels not equivariant under token permutations (checked on the data)")
    return task


def _closed_under_permutations(seqs, labels, group) -> bool:
    from depthcert.checkers.symmetry import generators

    if len(group) < 2:
        return False
    index = {tuple(s): i for i, s in enumerate(seqs)}
    for sigma in generators(tuple(group)):
        for s, lab in zip(seqs, labels):
            t = tuple(sigma.get(x, x) for x in s)
            j = index.get(t)
            if j is None:
                return False
            want = [None if y is None else sigma.get(y, y) for y in lab]
            if list(labels[j]) != want:
                return False
    return True


def _orbits(seqs, group: set):
    canon = {}
    reps, sizes = [], []
    for i, s in enumerate(seqs):
        names = {}
        key = tuple(x if x not in group else names.setdefault(x, len(names)) for x in s)
        if key not in canon:
            canon[key] = len(reps)
            reps.append(i)
            sizes.append(0)
        sizes[canon[key]] += 1
    return np.array(reps, dtype=np.int64), np.array(sizes, dtype=np.int64)


def row_tokens(imported, vocab_names: tuple) -> dict:
    """Model.notes["row_tokens"] candidates: tracr residual rows "NAME:t" with t a token
    (the symmetry check moves them with the token; the equations are checked exactly)."""
    toks = set(vocab_names)
    blocks: dict[str, dict[str, int]] = {}
    for r, lab in enumerate(imported.row_labels):
        if ":" in lab and not lab.startswith(("token ", "position ")):
            blk, val = lab.split(":", 1)
            blocks.setdefault(blk, {})[val] = r
    tags = {}
    for blk, rows in blocks.items():
        if set(rows) == toks:  # an SOp whose values are exactly the tokens
            for val, r in rows.items():
                tags[r] = (blk, val)
    return tags


# ----------------------------------------------------------------------------------------------
# the check

@dataclass
class Result:
    info: dict
    status: int
    extra: dict = field(default_factory=dict)


def check_program(spec: str, vocab: tuple, max_seq_len: int, distinct: bool = False, causal: bool = False,
                  max_inputs: int = DEFAULT_MAX_INPUTS, balls: dict | None = None, float_check: bool = True,
                  embedding: str = "auto", symmetry: str = "auto", tolerance: Fraction = DEFAULT_TOLERANCE,
                  export: str | None = None, dataset_out: str | None = None, progress: bool = False,
                  skip_none: bool = False, mlp_exactness: int = 100, program=None, compiled=None) -> Result:
    """Compile, import and check one program on every input; the verdict as a dict."""
    from dataclasses import replace

    from depthcert.interop.tracr_import import compile_program, import_tracr, require_tracr

    t0 = time.perf_counter()
    require_tracr()
    if max_seq_len < 1:
        raise BadInput(f"--max-seq-len must be >= 1, got {max_seq_len}")
    if max_seq_len > DEFAULT_MAX_SEQ_LEN:
        raise BadInput(f"--max-seq-len {max_seq_len} is above the limit {DEFAULT_MAX_SEQ_LEN}")
    n_inputs = count_inputs(len(vocab), max_seq_len, distinct)
    if n_inputs > max_inputs:
        raise BadInput(f"{n_inputs:,} inputs of length 1..{max_seq_len} over {len(vocab)} tokens, above the limit "
                       f"{max_inputs:,}; raise it with --max-inputs {n_inputs}")
    if program is None:
        program, call = resolve_program(spec, vocab, max_seq_len)
    else:
        call = spec
    t_compile = time.perf_counter()
    if compiled is None:
        compiled = compile_program(program, vocab, max_seq_len, causal=causal, mlp_exactness=mlp_exactness)
    t_compile = time.perf_counter() - t_compile
    imported = import_tracr(compiled, embedding=embedding, name=f"tracr:{spec}")
    model = imported.model
    vocab_names = tuple(str(v) for v in vocab)
    if symmetry == "auto":
        model = replace(model, notes={**model.notes, "row_tokens": row_tokens(imported, vocab_names)})
    inputs = enumerate_inputs(vocab, max_seq_len, distinct)
    truth = ground_truth(program, inputs, causal, exact=not compiled.categorical)
    base = {
        "command": "verify-tracr",
        "program": spec,
        "call": call,
        "output": "categorical" if compiled.categorical else "numerical",
        "vocab": [str(v) for v in vocab],
        "max_seq_len": max_seq_len,
        "distinct_tokens": distinct,
        "causal": causal,
        "layers": model.n_layers,
        "heads": list(model.heads),
        "d_model": model.dim,
        "model_class": model.kinds(),
        "embedding": imported.embedding,
        "tracr_blocks": list(imported.tracr_blocks),
        "tracr_residual": len(compiled.assembled.residual_labels),
        "classes": list(model.classes),
        "inputs": len(inputs),
        "skip_none": skip_none,
        "mlp_exactness": mlp_exactness,
        "compile_seconds": round(t_compile, 3),
    }
    if export:
        from depthcert.checkers.atomic import write_json_atomic
        from depthcert.checkers.weights_file import model_to_json

        write_json_atomic(export, model_to_json(model))
    if compiled.categorical:
        res = _check_categorical(model, imported, compiled, inputs, truth, base, balls, symmetry, dataset_out,
                                 progress, vocab_names, skip_none)
    else:
        res = _check_numerical(model, compiled, inputs, truth, base, balls, tolerance, skip_none)
    if float_check:
        _float_check(compiled, inputs, truth, res)
    res.info["total_seconds"] = round(time.perf_counter() - t0, 3)
    return res


def _value_text(v) -> str:
    if isinstance(v, Fraction):
        return str(v) if v.denominator <= 10**6 else f"{float(v)!r} (exactly {v})"
    return repr(v) if isinstance(v, str) else str(v)


def _check_categorical(model, imported, compiled, inputs, truth, base, balls, symmetry, dataset_out, progress,
                       vocab_names, skip_none=False) -> Result:
    from depthcert.checkers.exhaustive import plan_points, verify
    from depthcert.cli.common import _counterexample_json, _undecided_json, margin_json

    value_class = {}
    for v, c in zip(compiled.output_values, model.classes):
        value_class[v] = c
    labels, ds_inputs, ds_index = [], [], []
    outside = []  # (input index, position (BOS = 0), RASP value or error)
    n_labelled = skipped = 0
    for i, (x, vals) in enumerate(zip(inputs, truth)):
        row = [None]
        if isinstance(vals, str):  # the evaluator raised: the program has no value anywhere
            for k in range(len(x)):
                outside.append((i, k + 1, vals))
            row += [None] * len(x)
        else:
            for k, v in enumerate(vals):
                try:
                    c = value_class.get(v)
                except TypeError:
                    c = None
                if c is None and v is None and skip_none:
                    skipped += 1
                elif c is None:
                    outside.append((i, k + 1, v))
                row.append(c)
        n_lab = sum(c is not None for c in row)
        if n_lab:
            labels.append(row)
            ds_inputs.append(x)
            ds_index.append(i)
            n_labelled += n_lab
    info = dict(base)
    info["positions_labelled"] = n_labelled
    info["positions_outside"] = len(outside)
    info["positions_none_skipped"] = skipped
    v = None
    if ds_inputs:
        name = base["program"].split(":")[-1]
        task = make_dataset(ds_inputs, labels, name, vocab_names)
        if dataset_out:
            from depthcert.checkers.tasks.dataset_file import save_dataset

            save_dataset(task, dataset_out)
        plan = plan_points(model, task, symmetry)
        v = verify(model, task, progress=progress, plan=plan, balls=balls)
        info["symmetry"] = plan.note.removeprefix("symmetry: ")
        info["symmetry_data"] = task.symmetry_note
        info["points_evaluated"] = v.points_checked
        info["points_covered"] = v.points_covered
        info["evaluation"] = v.path
        info["seconds"] = round(v.seconds, 3)
        # exact for a model without softmax (MLP-only programs), else a certified enclosure
        info["min_margin"] = margin_json(v.min_margin, v.margin_enclosure)
        if v.margin_enclosure is not None:
            info["min_margin_exact_ends"] = [str(v.margin_enclosure[0]), str(v.margin_enclosure[1])]
    counter = None
    if v is not None and v.counterexample is not None:
        ce = v.counterexample
        counter = _counterexample_json(ce)
        counter["kind"] = "wrong output"
        counter["input_index"] = ds_index[ce.index]
        counter["input"] = list(ce.tokens[1:])
    if outside and (counter is None or outside[0][0] < counter["input_index"]):
        i, pos, val = outside[0]
        counter = _outside_counterexample(model, inputs[i], pos, val, i)
    if counter is not None:
        info["counterexample"] = counter
        verdict = "refuted"
    elif v is not None and v.undecided is not None:
        verdict = "undecided"
        u = _undecided_json(v.undecided)
        u["input_index"] = ds_index[v.undecided.index]
        info["undecided"] = u
        info["undecided_points"] = v.undecided_count
    else:
        verdict = "verified"
    if outside:
        info["outside_inputs"] = len({i for i, _, _ in outside})
        i, pos, val = outside[0]
        info["first_outside"] = {"input": [str(t) for t in inputs[i]], "position": pos, "value": _value_text(val)}
    info["verdict"] = verdict
    status = {"verified": 0, "refuted": 1, "undecided": 3}[verdict]
    return Result(info, status, {"verdict": v, "outside": outside, "model": model,
                                 "task": task if ds_inputs else None})


def _outside_counterexample(model, x, pos, val, index) -> dict:
    """The input has no value of the output space at `pos`: the model's certified argmax there."""
    from depthcert.cli.common import enclosure_text
    from depthcert.interop.tracr_import import BOS, Readout

    ids = _ids(model, [x])
    logits = Readout(model).outputs(ids, [pos])[0][0]
    best = [c for c, (lo, _) in enumerate(logits)
            if all(lo > hi for c2, (_, hi) in enumerate(logits) if c2 != c)]
    predicted = model.classes[best[0]] if best else None
    tied = [] if best else _top_candidates(logits, model.classes)
    return {
        "kind": "no value in the output space",
        "input_index": index,
        "input": [str(t) for t in x],
        "tokens": [BOS] + [str(t) for t in x],
        "position": pos,
        "expected": _value_text(val),
        "predicted": predicted,
        "predicted_undecided_between": tied,
        "logits": {c: enclosure_text(b) for c, b in zip(model.classes, logits)},
        "logits_are": "certified enclosures [lower, upper]",
    }


def _top_candidates(logits, classes):
    top_lo = max(lo for lo, _ in logits)
    return [classes[c] for c, (_, hi) in enumerate(logits) if hi >= top_lo]


def _ids(model, inputs) -> np.ndarray:
    from depthcert.interop.tracr_import import BOS

    row = {t: i for i, t in enumerate(model.vocab)}
    return np.array([[row[BOS]] + [row[str(t)] for t in x] for x in inputs], dtype=np.int64)


def _check_numerical(model, compiled, inputs, truth, base, balls, tolerance, skip_none=False) -> Result:
    from depthcert.checkers.budget import charge_seconds
    from depthcert.checkers.exhaustive import BALL_OPS_PER_SECOND, forward_ops
    from depthcert.cli.common import bound_text, enclosure_text
    from depthcert.interop.tracr_import import Readout

    t0 = time.perf_counter()
    L = max(len(x) for x in inputs)
    charge_seconds(sum(len(x) for x in inputs) * forward_ops(model, L + 1) / BALL_OPS_PER_SECOND,
                   f"reading {len(inputs)} inputs' outputs in ball arithmetic")
    prec = (balls or {}).get("start_precision", 128)
    reader = Readout(model, max(prec, 64))
    info = dict(base)
    worst = None  # (error upper bound, input index, position, enclosure, value)
    worst_low = Fraction(0)  # the largest error is at least this
    outside = []
    values = []
    skipped = 0
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(inputs):
        by_len.setdefault(len(x), []).append(i)
    for n, idx in by_len.items():
        ids = _ids(model, [inputs[i] for i in idx])
        outs = reader.outputs(ids, range(1, n + 1))
        for b, i in enumerate(idx):
            vals = truth[i]
            for k in range(n):
                lo, hi = outs[b][k][0]
                v = None if isinstance(vals, str) else vals[k]
                if v is None and skip_none and not isinstance(vals, str):
                    skipped += 1
                    continue
                if v is None or not isinstance(v, (int, float, Fraction, bool)):
                    outside.append((i, k + 1, vals if isinstance(vals, str) else v))
                    continue
                v = Fraction(v)
                up = max(hi - v, v - lo)
                low = max(Fraction(0), lo - v, v - hi)
                worst_low = max(worst_low, low)
                values.append((i, k + 1, lo, hi, v))
                if worst is None or up > worst[0]:
                    worst = (up, i, k + 1, (lo, hi), v)
    info["seconds"] = round(time.perf_counter() - t0, 3)
    info["evaluation"] = f"certified balls (arb, {reader.decider.start} bits), one readout per position"
    info["positions_labelled"] = len(values)
    info["positions_outside"] = len(outside)
    info["positions_none_skipped"] = skipped
    if worst is not None:
        up, i, pos, enc, v = worst
        info["max_error_enclosure"] = [bound_text(worst_low, up=False), bound_text(up, up=True)]
        info["max_error_at"] = {"input": [str(t) for t in inputs[i]], "position": pos,
                                "value": _value_text(v), "output_enclosure": enclosure_text(enc)}
    if worst_low > tolerance or outside:
        verdict, status = "refuted", 1
    elif worst is None or worst[0] < tolerance:
        verdict, status = "verified", 0
    else:
        verdict, status = "undecided", 3
    info["tolerance"] = str(tolerance)
    if outside:
        i, pos, val = outside[0]
        info["first_outside"] = {"input": [str(t) for t in inputs[i]], "position": pos, "value": _value_text(val)}
    info["verdict"] = verdict
    return Result(info, status, {"values": values, "outside": outside})


def _float_check(compiled, inputs, truth, res: Result) -> None:
    """tracr's own float32 forward on every input, compared with RASP and with the verdict."""
    from depthcert.interop.tracr_import import float_forward

    info = res.info
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(inputs):
        by_len.setdefault(len(x), []).append(i)
    decoded = {}
    for n, idx in by_len.items():
        for i, (dec, scores) in zip(idx, float_forward(compiled, [inputs[i] for i in idx])):
            decoded[i] = (dec, scores)
    fc = {}
    if compiled.categorical:
        wrong = []  # (input index, position, float decoded, RASP value)
        total = 0
        for i, x in enumerate(inputs):
            dec = decoded[i][0]
            vals = truth[i]
            for k in range(len(x)):
                v = None if isinstance(vals, str) else vals[k]
                if v is None and info.get("skip_none") and not isinstance(vals, str):
                    continue
                total += 1
                if not _same_value(dec[k + 1], v):
                    wrong.append((i, k + 1, dec[k + 1], v))
        fc["positions"] = total
        fc["disagree_positions"] = len(wrong)
        fc["disagree_inputs"] = len({i for i, _, _, _ in wrong})
        if wrong:
            i, pos, got, want = wrong[0]
            fc["first_disagreement"] = {"input": [str(t) for t in inputs[i]], "position": pos,
                                        "float_forward": _value_text(got), "rasp": _value_text(want)}
        ce = info.get("counterexample")
        if ce is not None:
            dec = decoded[ce["input_index"]][0][ce["position"]]
            fc["counterexample_float_forward"] = _value_text(dec)
            fc["reproduces_counterexample"] = ce["predicted"] is not None and str(dec) == ce["predicted"]
        if info["verdict"] == "verified":
            fc["agrees_with_verdict"] = not wrong
        elif info["verdict"] == "refuted":
            fc["agrees_with_verdict"] = bool(wrong)
    else:
        worst = Fraction(0)
        where = None
        for i, x in enumerate(inputs):
            vals = truth[i]
            if isinstance(vals, str):
                continue
            for k in range(len(x)):
                if vals[k] is None or not isinstance(vals[k], (int, float, bool, Fraction)):
                    continue
                err = abs(Fraction(decoded[i][0][k + 1]) - Fraction(vals[k]))
                if err > worst:
                    worst, where = err, (i, k + 1)
        fc["max_error"] = f"{float(worst):.6g}"
        if where is not None:
            fc["max_error_at"] = {"input": [str(t) for t in inputs[where[0]]], "position": where[1]}
    info["float_forward"] = fc


def _same_value(a, b) -> bool:
    if a is None or b is None:
        return False
    try:
        return a == b
    except Exception:
        return False


# ----------------------------------------------------------------------------------------------
# the command

def _parser():
    from depthcert.cli.common import _Parser, add_budget_options, positive_int

    p = _Parser(prog="verify-tracr", description="Check that a tracr-compiled transformer computes its RASP "
                "program, exactly, on every input up to a length.")
    p.add_argument("program", help="a tracr.compiler.lib name (make_reverse, make_hist, make_sort_unique, ...) "
                   "or MODULE:FUNCTION returning a RASP SOp")
    p.add_argument("--vocab", required=True, help="comma-separated input tokens (all integers, or strings)")
    p.add_argument("--max-seq-len", type=positive_int, required=True, help="longest input (BOS not counted)")
    p.add_argument("--distinct-tokens", action="store_true", help="only inputs without repeated tokens "
                   "(the precondition of the sorting programs)")
    p.add_argument("--causal", action="store_true", help="compile a causal model; labels from tracr's causal evaluator")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--max-inputs", type=positive_int, default=DEFAULT_MAX_INPUTS,
                   help=f"refuse more inputs than this (default {DEFAULT_MAX_INPUTS:,})")
    p.add_argument("--precision", type=positive_int, default=None, help="first ball precision in bits (default 64)")
    p.add_argument("--max-precision", type=positive_int, default=None, help="precision cap in bits (default 4096)")
    p.add_argument("--tolerance", default=None, help="numerical outputs: verified when every error is certified "
                   f"below this rational, refuted when one is certified above it (default {DEFAULT_TOLERANCE})")
    p.add_argument("--symmetry", choices=("auto", "off"), default="auto",
                   help="auto: one input per orbit when the token symmetry is proven on the data and the weights")
    p.add_argument("--embedding", choices=("auto", "mlp-table"), default="auto",
                   help="auto: permute the residual basis when tracr's tables are one-hot; mlp-table: always "
                        "reproduce the tables with a first MLP layer")
    p.add_argument("--skip-none", action="store_true", help="do not check positions where the program's value "
                   "is None (shift_by and detect_pattern pad with None by design); by default such a position "
                   "is a failure: no output of the model is None")
    p.add_argument("--mlp-exactness", type=positive_int, default=None,
                   help="tracr's compile option (default 100, tracr's): larger values make its MLPs more exact")
    p.add_argument("--no-float-check", action="store_true", help="skip tracr's float forward comparison")
    p.add_argument("--find-min", choices=("mlp-exactness",), default=None,
                   help="search the smallest tracr mlp_exactness that verifies at --max-seq-len (each step an exact "
                   "verdict)")
    p.add_argument("--find-max", choices=("length",), default=None,
                   help="search the largest length (up to --max-seq-len, the cap) at which every length verifies")
    p.add_argument("--robustness", action="store_true",
                   help="categorical programs that verify: weight tolerance and fewest fractional bits of the "
                        "imported model (docs/robustness.md)")
    p.add_argument("--export", metavar="FILE", help="write the imported model (depthcert.weights version 2)")
    p.add_argument("--dataset-out", metavar="FILE", help="write the per-position dataset (depthcert.dataset v2); "
                   "verify-construction --dataset FILE --weights FILE re-checks it")
    add_budget_options(p)
    return p


def _balls(args) -> dict | None:
    from depthcert.cli.common import precision_range

    return precision_range(args.precision, args.max_precision)


def _main(argv) -> int:
    from depthcert.checkers.budget import resource_budget
    from depthcert.checkers.rational import parse_rational

    args = _parser().parse_args(argv)
    vocab = parse_vocab(args.vocab)
    tol = DEFAULT_TOLERANCE
    if args.tolerance is not None:
        tol = parse_rational(args.tolerance, "--tolerance")
        if tol <= 0:
            raise BadInput(f"--tolerance must be positive, got {args.tolerance}")
    balls = _balls(args)
    if args.find_min and args.mlp_exactness is not None:
        raise BadInput("--find-min mlp-exactness searches the exactness itself: leave out --mlp-exactness")
    if args.mlp_exactness is None:
        args.mlp_exactness = 100  # tracr's default
    if args.find_min or args.find_max:
        return _search_settings(args, vocab, balls, tol)
    with resource_budget(args.max_weights, args.max_seconds, show_progress=sys.stderr.isatty() and not args.json):
        res = check_program(args.program, vocab, args.max_seq_len, distinct=args.distinct_tokens,
                            causal=args.causal, max_inputs=args.max_inputs, balls=balls,
                            float_check=not args.no_float_check, embedding=args.embedding,
                            symmetry=args.symmetry, tolerance=tol, export=args.export,
                            dataset_out=args.dataset_out, progress=sys.stderr.isatty() and not args.json,
                            skip_none=args.skip_none, mlp_exactness=args.mlp_exactness)
    if args.robustness:  # after the check: the wall time covers it too
        t_robust = time.perf_counter()
        res.info["robustness"] = _robustness(res, balls, progress=sys.stderr.isatty() and not args.json)
        res.info["robustness_seconds"] = round(time.perf_counter() - t_robust, 3)
        res.info["total_seconds"] = round(res.info["total_seconds"] + res.info["robustness_seconds"], 3)
    if args.json:
        print(json.dumps(res.info))
    else:
        print_human(res.info)
        if args.robustness:
            from depthcert.cli.verify_model import _print_robustness

            _print_robustness(res.info["robustness"])
    return res.status


def _robustness(res, balls, progress: bool = False) -> dict:
    """verify-model's robustness report on the imported model and its per-position dataset, for a
    categorical program that verified (every point correct: the set kept is every point)."""
    from depthcert.proofs.robustness import model_robustness_report

    if res.info["verdict"] != "verified":
        return {"note": "the program is not verified: nothing to be robust about"}
    if res.extra.get("task") is None:
        return {"note": "numerical outputs (or no labelled position): the report covers categorical argmax outputs"}
    from depthcert.checkers.accuracy import decide_all

    opts = dict(balls or {})
    model, task = res.extra["model"], res.extra["task"]
    v = decide_all(model, task, **opts)
    return model_robustness_report(model, task, v, opts, progress=progress)


def _search_settings(args, vocab, balls, tol) -> int:
    """--find-min mlp-exactness / --find-max length: exit 0 when the search found a value."""
    from depthcert.checkers.budget import resource_budget
    from depthcert.proofs import tracr_settings as ts

    if args.find_min and args.find_max:
        raise BadInput("give one of --find-min and --find-max")
    if args.robustness:
        raise BadInput("--robustness applies to one check, not to a search")
    if args.export or args.dataset_out:
        raise BadInput("--export and --dataset-out apply to one check, not to a search")
    # the first check runs alone so that bad input (unknown program, sizes) exits 2 before the search
    common = dict(distinct=args.distinct_tokens, causal=args.causal, max_inputs=args.max_inputs, balls=balls,
                  float_check=False, embedding=args.embedding, symmetry=args.symmetry, tolerance=tol,
                  skip_none=args.skip_none)

    def check(mlp_exactness=args.mlp_exactness, max_seq_len=args.max_seq_len):
        with resource_budget(args.max_weights, args.max_seconds, show_progress=False):
            return check_program(args.program, vocab, max_seq_len, mlp_exactness=mlp_exactness, **common)

    if args.find_min:
        out = ts.find_min_exactness(check)
        found = out.get("mlp_exactness") is not None
        head = {"program": args.program, "vocab": [str(v) for v in vocab], "max_seq_len": args.max_seq_len,
                "search": "min mlp_exactness", **out}
    else:
        out = ts.find_max_length(check, args.max_seq_len)
        found = out.get("max_length") is not None
        head = {"program": args.program, "vocab": [str(v) for v in vocab], "cap": args.max_seq_len,
                "mlp_exactness": args.mlp_exactness, "search": "max length", **out}
    if args.json:
        print(json.dumps(head))
    else:
        print(f"verify-tracr {args.program}: {head['search']}")
        for k, v in head.items():
            if k not in ("program", "search"):
                print(f"  {k:<14} {v}")
    return 0 if found else 1


def print_human(info: dict) -> None:
    from depthcert.cli.common import plural

    lengths = f"lengths 1-{info['max_seq_len']}" + (", distinct tokens" if info["distinct_tokens"] else "")
    rows = [
        ("program", f"{info['call']} ({info['output']} output)"),
        ("compiled", f"tracr, vocab {{{', '.join(info['vocab'])}}}, max_seq_len {info['max_seq_len']}, BOS first"
                     + (", causal" if info["causal"] else "")
                     + (f", mlp_exactness {info['mlp_exactness']}" if info["mlp_exactness"] != 100 else "")
                     + f" ({info['compile_seconds']:.1f} s)"),
        ("model", f"{plural(info['layers'], 'layer')}, heads per layer {info['heads']}, d' = {info['d_model']} "
                  f"[{info['model_class']}], embedding {info['embedding']}"),
        ("inputs", f"{info['inputs']} ({lengths}); {plural(info['positions_labelled'], 'output position')} labelled"
                   + (f", {info['positions_outside']} without a value in the output space" if info["positions_outside"] else "")
                   + (f", {info['positions_none_skipped']} None positions not checked (--skip-none)"
                      if info.get("positions_none_skipped") else "")),
    ]
    if "points_evaluated" in info:
        rows.append(("evaluated", f"{plural(info['points_evaluated'], 'input')} ({info['evaluation']})"))
        rows.append(("symmetry", f"{info['symmetry']} [{info['symmetry_data']}]"))
    elif "evaluation" in info:
        rows.append(("evaluated", info["evaluation"]))
    rows.append(("verdict", info["verdict"].upper()))
    m = info.get("min_margin")
    if m is not None:
        ce0 = info.get("counterexample")
        note = " (up to the counterexample)" if ce0 is not None and ce0["kind"] == "wrong output" else ""
        text = f"in [{m['lower']}, {m['upper']}] (certified enclosure)" if "lower" in m else f"{m['exact']} (exact)"
        rows.append(("min margin", text + note))
    if "max_error_enclosure" in info:
        lo, hi = info["max_error_enclosure"]
        at = info["max_error_at"]
        rows.append(("max error", f"in [{lo}, {hi}] (certified), at input {' '.join(at['input'])} position "
                                  f"{at['position']}: output in [{at['output_enclosure'][0]}, {at['output_enclosure'][1]}], "
                                  f"program {at['value']}"))
    if "tolerance" in info:
        rows.append(("tolerance", f"{info['tolerance']} (verified: every error certified below it; refuted: one "
                                  "certified above it; --tolerance T sets it)"))
    fc = info.get("float_forward")
    if fc is not None:
        if "disagree_positions" in fc:
            text = (f"tracr's float forward disagrees with RASP at {fc['disagree_positions']} of "
                    f"{plural(fc['positions'], 'position')} ({plural(fc['disagree_inputs'], 'input')})")
            if "reproduces_counterexample" in fc:
                text += ("; reproduces the counterexample" if fc["reproduces_counterexample"]
                         else f"; at the counterexample it outputs {fc['counterexample_float_forward']}")
        else:
            text = f"tracr's float forward: largest error {fc['max_error']} against the program's value"
        rows.append(("float", text))
    rows.append(("wall time", f"{info['total_seconds']:.2f} s in all" +
                 (f", {info['seconds']:.2f} s deciding" if "seconds" in info else "") +
                 (f", {info['robustness_seconds']:.2f} s robustness" if "robustness_seconds" in info else "")))
    print(f"verify-tracr {info['program']}")
    for key, val in rows:
        print(f"  {key:<11} {val}")
    ce = info.get("counterexample")
    if ce is not None:
        print(f"counterexample ({ce['kind']}):")
        print(f"  input      {' '.join(ce['input'])}  (model input: BOS {' '.join(ce['input'])})")
        print(f"  position   {ce['position']}  (BOS is position 0; output {ce['position'] - 1} of the program)")
        print(f"  expected   {ce['expected']}")
        pred = ce["predicted"] if ce["predicted"] is not None else \
            ("not certified: the balls of " + ", ".join(ce.get("predicted_undecided_between", []))
             + " overlap (an exact tie never separates); any output differs from the program's None")
        print(f"  predicted  {pred}")
        print("  logits     " + "  ".join(f"{c} in [{b[0]}, {b[1]}]" if isinstance(b, list) else f"{c}={b}"
                                          for c, b in ce["logits"].items()))
    u = info.get("undecided")
    if u is not None:
        print(f"undecided: {plural(info['undecided_points'], 'input')}; the first:")
        print(f"  input      {' '.join(u['tokens'][1:])}")
        print(f"  position   {u['position']}")
        print(f"  expected   {u['expected']}, not separated from {u['not_separated_from']} at {u['precision_bits']} bits")
    if "first_outside" in info and (ce is None or ce["kind"] != "no value in the output space"):
        fo = info["first_outside"]
        print(f"no value: input {' '.join(fo['input'])} position {fo['position']}: RASP gives {fo['value']}, "
              f"which no output of the model can equal ({info['positions_outside']} such positions)")


def verify_tracr_main(argv=None) -> int:
    from depthcert.cli.common import run_main

    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(verify_tracr_main())
