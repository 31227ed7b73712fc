"""`verify-construction TASK [sizes] --all-sizes [--json]` and `--family MODULE:FUNCTION`: reads
the options, runs the all-sizes prover (proofs/all_sizes.py), builds and checks the instance at
the sizes given, and prints the report."""
from __future__ import annotations

import json
from fractions import Fraction

from depthcert import constructions
from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import format_rational
from depthcert.proofs.all_sizes import CONFIRM_MAX_POINTS, Report, _size_text, prove, symbolic_margin


def load_family(spec: str):
    """MODULE:FUNCTION or path/to/file.py:FUNCTION -> the family function: called once with the
    task's symbols only (constructions/indexed.SymbolicTask), it returns a closed value
    (constructions/closed.py; or a model written with constructions/indexed.py, closed here);
    BadInput naming what is wrong."""
    import importlib
    import importlib.util
    import os

    module, sep, func = spec.rpartition(":")
    if not sep or not module or not func:
        raise BadInput(f"--family {spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise BadInput(f"--family: no file {module}")
            ms = importlib.util.spec_from_file_location(f"depthcert_family_{abs(hash(module))}", module)
            mod = importlib.util.module_from_spec(ms)
            ms.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module: one line naming the failure
        raise BadInput(f"--family: importing {module} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise BadInput(f"--family: {module} has no function {func}")
    return fn


def family_construction(spec: str, task):
    """The finite Construction of a --family at the task's sizes: its closed value instantiated (the
    only route); one line (BadInput) when the function makes no closed value."""
    from depthcert.constructions.closed import NotClosed, instantiate
    from depthcert.constructions.construction import Construction
    from depthcert.proofs.all_sizes import family_symbols, family_value

    fn = load_family(spec)
    _, sizes = family_symbols(task)
    try:
        value = family_value(fn, task)
    except NotClosed as exc:
        raise BadInput(f"--family {spec}: not a closed value: {exc}") from None
    model = instantiate(value, sizes, task)
    return Construction(task.name, f"family {spec}", "user family (closed value)", model, False,
                        f"the closed value {content_hash_of(value)} instantiated", symbolic=value)


def check_expected_hash(expected: str, got: str | None, readout_replaced: bool = False) -> None:
    """--expect-hash HASH: BadInput (exit 2, one line, nothing checked) unless the closed value this run
    builds (or proves) has content hash HASH: a finite check elsewhere is of the value a proof is about
    exactly when it prints that proof's hash."""
    import re

    if not re.fullmatch(r"sha256:[0-9a-f]{64}", expected or ""):
        raise BadInput(f"--expect-hash {expected!r}: not a content hash (sha256: and 64 hex digits, as the value "
                       "line prints it)")
    if got is None:
        raise BadInput(f"--expect-hash {expected}: this construction has no closed value (no content hash): "
                       "nothing checked")
    if got != expected:
        raise BadInput(f"--expect-hash: the closed value built here is {got}, not {expected}: another value "
                       "than the one expected, nothing checked")
    if readout_replaced:
        raise BadInput(f"--expect-hash {expected}: this run replaces the value's read-out by the max-margin fit, "
                       "so it would not check the value with that hash; give --readout lemma3 or paper")


def family_lines(spec: str, made, content_hash: str | None, task_name: str) -> list[str]:
    """What the `family` rows say: the function ran once in this process, what it was handed, and that
    anything else it read is outside the value (so a finite check elsewhere is compared by hash)."""
    if made is None:
        return [f"{spec} was not run"]
    ran = (f"{spec} ran once in this process (1 call)" if made.calls == 1 else
           f"{spec} made its value once in this process: {made.calls} calls, each with its own symbols, none repeated")
    lines = [ran + "; " + ("the proof, the instance and the value line are of the one value it made" if content_hash
                           else "it made no closed value (the reason below)")]
    lines += [f"handed {i}: {h}" if made.calls > 1 else f"handed: {h}" for i, h in enumerate(made.handed, 1)]
    if content_hash:
        lines.append("what else it read (a global, the command line, a file, the clock) is not in the value: a finite "
                     "check elsewhere is of this value only where it prints this hash: verify-construction "
                     f"{task_name} --family {spec} [sizes] --expect-hash {content_hash}")
    return lines


def content_hash_of(value) -> str:
    from depthcert.constructions.closed import content_hash

    return content_hash(value)


READOUT_OF = {"tm": "lemma3"}  # the read-out a proof for every size is about, when not the paper's own


SIZE_NAMES = {"icqa": {"k": "k", "n_questions": "n_q", "n_answers": "n_a"}, "sc": {"length": "L", "alphabet": "M"},
              "multihop": {"n_entities": "N"}, "parity": {"n": "n"}, "mod-count": {"n": "n"}, "tm": {"alphabet": "m"}, "ictm": {"alphabet": "m", "n_answers": "n_a"}}


def verify_all_sizes(args, task) -> int:
    """Entry point of `verify-construction TASK [sizes] --all-sizes [--json]`."""
    for flag, value in (("--weights", args.weights), ("--dataset", args.dataset), ("--export", args.export),
                        ("--point", args.point), ("--cot", args.cot)):
        if value not in (None, False):
            raise BadInput(f"--all-sizes proves a construction of the registry; it takes no {flag}")
    if args.symmetry != "auto":
        raise BadInput("--all-sizes decides its own reductions; it takes no --symmetry")
    if getattr(args, "n_points", None) is not None or getattr(args, "seed", None) is not None:
        pass  # sc: the proof covers every seed and sample
    family = getattr(args, "family", None)
    construct = None
    if family:
        if args.as_printed or args.variant:
            raise BadInput("--family builds your closed value from symbols; it takes no --as-printed or --variant")
        construct = load_family(family)  # called with the task's symbols only
        from depthcert.constructions.closed import NotAValue, NotClosed
        from depthcert.proofs.all_sizes import family_value

        try:
            family_value(construct, task)  # the one making: the proof and the instance below get this value
        except NotAValue as exc:
            raise BadInput(f"--family {family}: not a closed value: {exc}") from None
        except NotClosed:
            pass  # a function that tried to read a size: the proof says why (exit 3)
    proven_readout = ("family's own" if family else
                      "lemma3" if task.name == "sc" and args.as_printed else READOUT_OF.get(task.name, "paper"))
    readout = getattr(args, "readout", "auto")
    if readout not in ("auto", proven_readout) and not (family and readout == "paper"):
        raise BadInput(f"--all-sizes proves the construction's own read-out ({proven_readout}); --readout {readout} "
                       + ("fits a read-out per size, which no proof for every size covers"
                          if readout == "max-margin" else "is not this construction's read-out"))
    rep = prove(task, args.variant, args.as_printed, construct)
    rep.readout = proven_readout
    if family:
        rep.variant = f"family {family}"
        rep.theorem = "user family (closed value, constructions/closed.py)"
        if rep.rests_on:
            rep.rests_on = (f"the closed value {rep.content_hash} made by {family} from symbols only, and "
                            "closed.instantiate (the finite check `--family` builds by the same instantiation)",) + tuple(
                rep.rests_on[1:])
    if args.as_printed:
        rep.theorem += " [as printed]"
    rep.instance = _instance(rep, task, args, construct)
    if getattr(args, "expect_hash", None) is not None:
        check_expected_hash(args.expect_hash, rep.content_hash)
    out = rep.to_json()
    if family:
        from depthcert.constructions.closed import making

        made = making(construct)
        rep.family_lines = family_lines(family, made, rep.content_hash, task.name)
        out["family"] = {"function": family, "runs": 1, "calls": 0 if made is None else made.calls,
                         "handed": [] if made is None else list(made.handed), "content_hash": rep.content_hash}
    if args.json:
        print(json.dumps(out))
    else:
        print_report(rep)
    return rep.exit_code


def _instance(rep: Report, task, args, construct=None) -> str:
    """At the sizes given on the command line: the model built there (the finite check's build) and
    checked exactly with `verify`, next to the proof's margin formula evaluated there."""
    from depthcert.checkers.exhaustive import plan_points, verify

    names = SIZE_NAMES.get(task.name, {})
    given = [k for k in task.params if k in names and getattr(args, k, None) is not None]
    if not given:
        return ""
    values = {names[k]: v for k, v in task.params.items() if k in names}
    sym = None
    if rep.status in ("proven", "partial") and rep.lumped is not None and all(p.name in values for p in rep.lumped[2]):
        sym = symbolic_margin(rep, values)
    at = {**values, **({"hops": task.hops} if task.name == "multihop" else {})}  # the sizes instantiated
    text = _size_text(at) + ": built, "
    value = rep.value
    # sizes outside the proven value's range (tm's m < l): the finite build is checked, never compared with the proof
    inside = value is None or value.range.contains({n: at.get(n, 0) for n in value.range.names})
    try:
        if value is not None and inside:
            from depthcert.constructions.closed import instantiate

            model = instantiate(value, at, task)  # the value proven, at these sizes
            text = _size_text(at) + ": the proven value instantiated, "
        elif construct is not None:
            return text.replace("built, ", "") + ("outside the value's range: not built" if value is not None
                                                  else "not built (no value proven)")
        else:
            model = constructions.build(task, args.variant, args.as_printed).model
            if not inside:
                text = _size_text(at) + f": outside the proof's range ({value.range.describe()}), built at these sizes, "
        pp = plan_points(model, task, "auto")
        if pp.n_eval > CONFIRM_MAX_POINTS:
            if rep.status in ("proven", "partial"):
                rep.status = "not-proven"
                rep.reason = (f"the sizes given ({_size_text(values)}) are too large to check here ({pp.n_eval} points "
                              f"to evaluate, limit {CONFIRM_MAX_POINTS}): the instance is not verified, so no verdict "
                              "is given for it; run without sizes for the proof, or with smaller sizes")
            return text + f"verify not run ({pp.n_eval} points to evaluate, limit {CONFIRM_MAX_POINTS})" + (
                "" if sym is None else f"; the proof's margin there {format_rational(sym)}")
        v = verify(model, task, plan=pp, progress=False)
        rep.eval_seconds += v.seconds
    except BadInput as exc:
        if rep.status in ("proven", "partial"):
            rep.status = "not-proven"
            rep.reason = f"the instance at {_size_text(values)} could not be checked ({exc}): no verdict is given for it"
        return text + f"verify not run ({exc})"
    got = "none (a single class)" if v.min_margin is None else str(format_rational(v.min_margin))
    text += (f"verify {v.verdict} on {v.points_total} point{'' if v.points_total == 1 else 's'} "
             f"({v.points_checked} evaluated), margin {got}")
    if not inside:
        pass  # no proof's margin there to compare with
    elif rep.lumped is not None and rep.status in ("proven", "partial") and all(p.name in values for p in rep.lumped[2]):
        if sym == v.min_margin:
            text += " = the proof's margin there"
        else:
            want = "none" if sym is None else format_rational(sym)
            text += f"; the proof's margin there is {want}: DISAGREES"
            rep.status = "fails"
            rep.failure = {"size": values, "how": "the instance checked by verify disagrees with the proof"}
    elif rep.status in ("proven", "partial") and rep.margin is not None and rep.lumped is None:
        if got == rep.margin:  # a proof whose margin is one constant (multi-hop linear, sc)
            text += " = the proof's margin"
        elif v.min_margin is not None and _sampled(task) and v.min_margin >= Fraction(rep.margin):
            text += f" >= the proof's margin {rep.margin} (its minimum over the full dataset; this is a sample)"
        elif v.min_margin is not None:
            text += f"; the proof's margin is {rep.margin}: DISAGREES"
            rep.status = "fails"
            rep.failure = {"size": values, "how": "the instance checked by verify disagrees with the proof"}
    if not v.verified and rep.status in ("proven", "partial"):
        rep.status = "fails"
        rep.failure = {"size": values, "how": "the instance built here is refuted by verify"}
    return text


def _readout_text(rep) -> str:
    if rep.readout == "lemma3":
        return ("Lemma 3's classifier (the construction's own, proven here); the default finite check fits a "
                "max-margin read-out instead: `--readout lemma3` checks the one proven")
    if rep.readout == "paper":
        return "the construction's own W_O (the default finite check uses the same)"
    return "the family's own W_O (the finite check `--family` uses the same)"


def _sampled(task) -> bool:
    """An sc task of --n-points sequences out of M^L (its margin is at least the full dataset's)."""
    return task.name == "sc" and task.params.get("n_points") != task.params["alphabet"] ** task.params["length"]


STATUS_TEXT = {"proven": "PROVEN FOR ALL SIZES", "partial": "PROVEN FOR ALL SIZES OF SOME PARAMETERS",
               "fails": "FAILS", "not-proven": "NOT PROVEN FOR ALL SIZES"}


def print_report(rep: Report) -> None:
    print(f"verify-construction {rep.task} --all-sizes")
    rows = [("theorem", rep.theorem), ("variant", rep.variant), ("method", rep.method)]
    if rep.content_hash:
        rows.append(("value", rep.content_hash))
    for i, line in enumerate(getattr(rep, "family_lines", ())):
        rows.append(("family" if i == 0 else "", line))
    if getattr(rep, "readout", None) and rep.status in ("proven", "partial"):
        rows.append(("read-out", _readout_text(rep)))
    if rep.claim and rep.status in ("proven", "partial"):
        rows.append(("claim", rep.claim))
    for p, why in rep.finite:
        rows.append(("finite only", f"{p}: {why}"))
    if rep.margin is not None and rep.status in ("proven", "partial"):
        text = rep.margin_note or "the exact minimum over every point of every size claimed"
        rows.append(("margin", f"{rep.margin} ({text})"))
    if rep.instance:
        rows.append(("instance", rep.instance))
    if rep.status in ("proven", "partial"):
        for i, r in enumerate(rep.rests_on):
            rows.append(("rests on" if i == 0 else "", r))
    rows.append(("verdict", STATUS_TEXT[rep.status]))
    if rep.reason:
        rows.append(("reason", rep.reason))
    if rep.failure:
        f = rep.failure
        rows.append(("fails at", _size_text(f["size"]) + f" ({f['how']})"))
        if "competitor" in f:
            rows.append(("margin", f"label - {f['competitor']} = {f['margin']} there (formula on its region: "
                                   f"{f['margin_formula']})"))
        if "confirmed" in f:
            rows.append(("confirmed", f["confirmed"]))
        if "counterexample" in f:
            ce = f["counterexample"]
            rows.append(("point", f"{ce['point']}: {ce['input']}  expected {ce['expected']}, predicted {ce['predicted']}"))
    for key, val in rows:
        print(f"  {key:<11} {val}")
    if rep.steps:
        print("proof:" if rep.status != "not-proven" else "analysis (not a proof for every size):")
        for i, s in enumerate(rep.steps, 1):
            print(f"  {i}. {s.title}")
            for line in s.lines:
                print(f"       {line}")
    print(f"  wall time   {rep.seconds:.2f} s in all, {rep.eval_seconds:.2f} s evaluating")
