"""An injected clock for the tests of time limits (--max-seconds, deadlines, the measured-speed
guard): no test may depend on the machine's speed or load (docs/development.md).

The code under test reads `time.perf_counter()` (every module does `import time`); a test replaces
that function with a StepClock, which advances a fixed step per reading and ignores the real time.
A limit of S seconds then passes after a fixed number of readings, and a "measured" batch takes
the readings it makes times the step: the same outcome on any machine, idle or loaded.  step = 0
is a stopped clock (no limit ever passes).  pytest's own timing keeps the real clock (it binds
perf_counter at import)."""
from __future__ import annotations

import threading
import time


class StepClock:
    """A perf_counter that returns start + step * (number of readings so far)."""

    def __init__(self, step: float, start: float = 1000.0):
        self.step, self.start, self.readings = float(step), float(start), 0
        self._lock = threading.Lock()  # worker threads read it too

    def __call__(self) -> float:
        with self._lock:
            self.readings += 1
            return self.start + self.step * self.readings


def step_clock(monkeypatch, step: float, name: str = "perf_counter") -> StepClock:
    """Install a StepClock as time.<name> (perf_counter, or monotonic: checkers/softmax_ties.py) for
    the rest of the test (monkeypatch undoes it)."""
    clock = StepClock(step)
    monkeypatch.setattr(time, name, clock)
    return clock
