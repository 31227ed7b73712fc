"""The one wrapper every console entry point runs its command body in: exit codes and one-line errors.

Exit codes (README, "Exit codes"):
    0  verified / proven / done          1  refuted (a counterexample or a failing size is printed)
    2  bad input (one line naming it)    3  undecided or partial (the command says what)
    4  internal error: a bug in depthcert, one line ("internal error: ...; please report");
       DEPTHCERT_DEBUG=1 shows the traceback instead.
1 means REFUTED, so no unexpected exception may ever end a command with it (Python's own default).
"""
from __future__ import annotations

import os
import sys

from depthcert.checkers.errors import BadInput

EXIT_OK = 0
EXIT_REFUTED = 1
EXIT_BAD_INPUT = 2
EXIT_UNDECIDED = 3
EXIT_INTERNAL = 4
DEBUG_ENV = "DEPTHCERT_DEBUG"


def run_main(fn, argv=None) -> int:
    """fn(argv)'s return value as the exit code; BadInput (and interrupts, memory exhaustion) ->
    exit 2 with 'error: ...'; any other exception -> exit 4 with one line, or its traceback when
    DEPTHCERT_DEBUG=1."""
    if hasattr(sys, "set_int_max_str_digits"):
        # exact results (margins, logits) can have more than Python's default 4300 digits
        # (multihop --as-printed --hops 5); inputs are capped separately (checkers/rational.py)
        sys.set_int_max_str_digits(0)
    try:
        return fn(argv)
    except BadInput as exc:
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("error: out of memory: the requested sizes are too large for this machine", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 -- the point: no traceback, and never exit 1
        if os.environ.get(DEBUG_ENV) == "1":
            import traceback

            traceback.print_exc()
            return EXIT_INTERNAL
        text = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
        print(f"internal error: {detail}; please report (rerun with {DEBUG_ENV}=1 for the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL

