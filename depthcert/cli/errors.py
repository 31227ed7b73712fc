"""The one wrapper every console entry point runs its command body in: exit codes and one-line errors.

Exit codes (docs/commands.md, "Exit codes"):
    0  verified / proven / done          1  refuted (a counterexample or a failing size is printed)
    2  bad input (one line naming it)    3  undecided or partial (the command says what)
    4  internal error: a bug in depthcert, one line ("internal error: ...; please report");
       DEPTHCERT_DEBUG=1 shows the traceback instead.
  130  interrupted (Ctrl-C): one line, as a shell reports a process ended by SIGINT (128 + 2).
1 means REFUTED, so no unexpected exception may ever end a command with it (Python's own default).
Every message starts on a fresh line: a progress bar still on the terminal is closed first.
"""
from __future__ import annotations

import os
import sys

from depthcert.checkers.budget import TimeLimitPassed
from depthcert.checkers.errors import BadInput

EXIT_OK = 0
EXIT_REFUTED = 1
EXIT_BAD_INPUT = 2
EXIT_UNDECIDED = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C
DEBUG_ENV = "DEPTHCERT_DEBUG"

_BAD = "bad input (one line naming it)"
_STOPPED = "stopped at --max-seconds by a step no estimate bounds (a limit reached, not bad input; nothing decided)"
_INTERNAL = "internal error (one line; please report)"
# Every command's exit codes and what each means: the one source of the epilog of every command's
# --help; tests/test_internal_error.py checks README's table ("Exit codes") against it.
EXIT_CODES = {
    "verify-construction": {
        EXIT_OK: "verified (--all-sizes: proven for every size; --point: the point is correct)",
        EXIT_REFUTED: "refuted, the counterexample printed (--all-sizes: fails at a size; --point: wrong)",
        EXIT_BAD_INPUT: _BAD + ", also a --journal line that does not add up",
        EXIT_UNDECIDED: "undecided (softmax models only; --all-sizes: partial, not proven), or " + _STOPPED,
        EXIT_INTERNAL: _INTERNAL},
    "find-dependence": {
        EXIT_OK: "decided (a certificate checked, or a one-layer model verified on every point)",
        EXIT_BAD_INPUT: _BAD, EXIT_UNDECIDED: _STOPPED, EXIT_INTERNAL: _INTERNAL + ", e.g. a certificate the independent checker rejects"},
    "find-depth": {EXIT_OK: "minimal depth exact (every smaller depth refuted by a re-checked certificate, a model "
                            "verified at it)", EXIT_BAD_INPUT: _BAD,
                   EXIT_UNDECIDED: "open: some depth neither refuted nor realised (the reason printed)",
                   EXIT_INTERNAL: _INTERNAL + ", e.g. a certificate the independent checker rejects"},
    "check-certificate": {EXIT_OK: "valid", EXIT_REFUTED: "invalid, or not about the given dataset",
                          EXIT_BAD_INPUT: "malformed or unreadable, or " + _BAD, EXIT_INTERNAL: _INTERNAL},
    "verify-tracr": {EXIT_OK: "verified (numerical programs: every error certified below --tolerance, default 1/1000; "
                              "--find-min/--find-max: a value found)",
                     EXIT_REFUTED: "refuted (--find-min/--find-max: none found)", EXIT_BAD_INPUT: _BAD + ", or the tracr extra missing",
                     EXIT_UNDECIDED: "undecided, or " + _STOPPED, EXIT_INTERNAL: _INTERNAL},
    "show-construction": {EXIT_OK: "pictures written", EXIT_BAD_INPUT: _BAD, EXIT_UNDECIDED: _STOPPED,
                          EXIT_INTERNAL: _INTERNAL},
    "reproduce-paper": {EXIT_OK: "every claim holds", EXIT_REFUTED: "some claim does not",
                        EXIT_BAD_INPUT: _BAD, EXIT_INTERNAL: _INTERNAL},
    "train": {EXIT_OK: "done", EXIT_BAD_INPUT: _BAD, EXIT_INTERNAL: _INTERNAL},
    "reproduce": {EXIT_OK: "done", EXIT_BAD_INPUT: _BAD, EXIT_INTERNAL: _INTERNAL},
    "verify-model": {EXIT_OK: "every point certainly correct (verified; the certified accuracy printed)",
                     EXIT_REFUTED: "some point certainly wrong (refuted; --require-all changes nothing)",
                     EXIT_BAD_INPUT: _BAD,
                     EXIT_UNDECIDED: "no point wrong, some left undecided at the precision limit (listed) or not reached "
                                     "before --max-seconds (counted)", EXIT_INTERNAL: _INTERNAL},
    "export-transformerlens": {EXIT_OK: "checkpoint written",
                               EXIT_BAD_INPUT: _BAD + ", or a model TransformerLens cannot hold (relu or hardmax attention)",
                               EXIT_INTERNAL: _INTERNAL},
}


def exit_codes_epilog(prog: str | None) -> str | None:
    """'Exit codes: 0 ...; 1 ...; ...' for a command's --help (None for an unknown prog)."""
    codes = EXIT_CODES.get((prog or "").split(" ")[0])
    if codes is None:
        return None
    return ("Exit codes: " + "; ".join(f"{code} {text}" for code, text in sorted(codes.items()))
            + f"; {EXIT_INTERRUPTED} interrupted (Ctrl-C).")


def fresh_line() -> None:
    """Close every progress bar still open (tqdm's, on stderr), so that the next line printed to
    stderr starts at the beginning of a line: a bar made with leave=False erases itself, any other
    ends its line. Nothing happens when tqdm was never imported."""
    tqdm = sys.modules.get("tqdm")
    bars = getattr(getattr(tqdm, "tqdm", None), "_instances", None)
    for bar in list(bars or ()):
        try:
            bar.close()
        except Exception:  # noqa: BLE001 -- a bar that cannot close must not hide the error being reported
            pass


def _say(line: str) -> None:
    fresh_line()
    print(line, file=sys.stderr)


def run_main(fn, argv=None) -> int:
    """fn(argv)'s return value as the exit code; a step stopped at --max-seconds (TimeLimitPassed)
    -> exit 3 with 'stopped: ...'; BadInput (and memory exhaustion) -> exit 2 with 'error: ...'; Ctrl-C (KeyboardInterrupt) -> exit 130 with 'interrupted'; any other exception ->
    exit 4 with one line, or its traceback when DEPTHCERT_DEBUG=1. Each message starts on a fresh
    line (open progress bars closed first)."""
    if hasattr(sys, "set_int_max_str_digits"):
        # exact results (margins, logits) can have more than Python's default 4300 digits
        # (multihop --as-printed --hops 5); inputs are capped separately (checkers/rational.py)
        sys.set_int_max_str_digits(0)
    try:
        return fn(argv)
    except TimeLimitPassed as exc:  # a limit reached is not bad input
        _say(f"stopped: {exc}".splitlines()[0])
        return EXIT_UNDECIDED
    except BadInput as exc:
        _say(f"error: {exc}".splitlines()[0])
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("interrupted (Ctrl-C)")
        return EXIT_INTERRUPTED
    except MemoryError:
        _say("error: out of memory: the requested sizes are too large for this machine")
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 -- the point: no traceback, and never exit 1
        if os.environ.get(DEBUG_ENV) == "1":
            import traceback

            fresh_line()
            traceback.print_exc()
            return EXIT_INTERNAL
        text = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
        detail = detail.removesuffix("; please report")  # said once, below
        _say(f"internal error: {detail}; please report (rerun with {DEBUG_ENV}=1 for the traceback)")
        return EXIT_INTERNAL

