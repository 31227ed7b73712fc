"""Resource guards: a run that would exceed memory or time is refused before it allocates.

Every command builds constructions inside `resource_budget(max_weights, max_seconds)`:

  weights  every weight matrix a construction allocates (BlockMatrix, eye, zeros) is charged
           its number of entries before allocation; past `max_weights` the build stops with
           BadInput naming the limit and the option that raises it (--max-weights).
  seconds  expensive steps charge their estimated seconds before they start (Lemma 3's
           classifier, the evaluation of every point); an estimate above `max_seconds` is
           refused the same way (--max-seconds).  Estimates are rough (within ~4x on this
           machine), which is all a guard needs: they decide whether to start, never a verdict.
           The a-priori evaluation rate is a floor (dense products at the slowest path's speed);
           an evaluation estimated above the limit is timed on one batch from the middle of the
           points before it is refused (checkers/exhaustive.py: verify), so the refusal and the
           --max-seconds value it suggests rest on this machine's measured speed.  A model
           whose numbers have no a-priori bound (checkers/evaluate.py: BOUND_UNKNOWN) has no
           estimate at all: its big-integer pass checks the limit before every layer instead.

Outside a budget (library use) nothing is charged.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from depthcert.checkers.errors import BadInput

DEFAULT_MAX_WEIGHTS = 5_000_000  # entries (object arrays: 8 bytes of pointer each, plus values)
DEFAULT_MAX_SECONDS = 900


@dataclass
class _Budget:
    max_weights: int
    max_seconds: float
    used_weights: int = 0
    show_progress: bool = False


_ACTIVE: list[_Budget] = []


@contextmanager
def resource_budget(max_weights: int = DEFAULT_MAX_WEIGHTS, max_seconds: float = DEFAULT_MAX_SECONDS,
                    show_progress: bool = False):
    _ACTIVE.append(_Budget(max_weights, max_seconds, show_progress=show_progress))
    try:
        yield _ACTIVE[-1]
    finally:
        _ACTIVE.pop()


def charge_weights(entries: int, what: str = "weight matrices") -> None:
    """Count `entries` weight entries about to be allocated; refuse past the budget."""
    if not _ACTIVE:
        return
    b = _ACTIVE[-1]
    b.used_weights += int(entries)
    if b.used_weights > b.max_weights:
        raise BadInput(f"the construction needs more than {b.max_weights:,} weight entries ({what}); "
                       f"raise the limit with --max-weights (each entry costs 8+ bytes)")


def charge_seconds(estimate: float, what: str, how: str = "estimated") -> None:
    """Refuse a step whose estimated time exceeds the budget's --max-seconds."""
    if not _ACTIVE:
        return
    b = _ACTIVE[-1]
    if estimate > b.max_seconds:
        raise BadInput(f"{what} would take about {_human(estimate)} ({how}), above the limit of "
                       f"{_human(b.max_seconds)}; raise it with --max-seconds {int(estimate * 2) + 1}")


def seconds_limit() -> float | None:
    """The active budget's --max-seconds (None outside a budget)."""
    return _ACTIVE[-1].max_seconds if _ACTIVE else None


class TimeLimitPassed(BadInput):
    """A step stopped while running, past --max-seconds.  A caller that can report what was decided
    so far catches it (verify-model: exit 3 with partial counts); elsewhere it is a one-line exit 3
    (depthcert/cli/errors.py run_main: a limit reached is not bad input)."""


def time_limit_passed(what: str, seconds: float) -> TimeLimitPassed:
    """The error of a step stopped while running, past --max-seconds (for steps no estimate can bound)."""
    return TimeLimitPassed(f"{what} ran past the limit of {_human(seconds)} and was stopped (its numbers grow too fast "
                           "to estimate the time beforehand, so no limit is suggested: raise --max-seconds)")


def over_budget(estimate: float) -> bool:
    """Whether `estimate` seconds exceed the active budget (False outside a budget)."""
    return bool(_ACTIVE) and estimate > _ACTIVE[-1].max_seconds


def progress_wanted(estimate: float) -> bool:
    """Show a progress bar for a step estimated at a couple of seconds or more (terminal runs)."""
    return bool(_ACTIVE) and _ACTIVE[-1].show_progress and estimate >= 2


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"
