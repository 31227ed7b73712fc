"""Progress reporting for long runs: a tqdm bar on a terminal, a few plain lines in a file.

A redrawn bar written to a log file or a CI log is a flood of carriage-return frames; when the
stream is not a terminal, `Progress` prints one plain line each time another tenth of the work
is done (and at the end), so a whole sweep leaves at most about a dozen lines per bar.
"""
from __future__ import annotations

import sys
import time


class Progress:
    """`Progress(total, desc)`; `.update(n)`, `.set_postfix(**kw)`, `.close()`; also a context manager.

    enabled=False prints nothing.  stream defaults to stderr; tty=None asks the stream.
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, stream=None, tty: bool | None = None,
                 steps: int = 10):
        self.total = max(1, int(total))
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self.n = 0
        self.postfix: dict = {}
        self.t0 = time.perf_counter()
        self._steps = max(1, steps)
        self._next_line = 1  # next tenth (of _steps) at which a plain line is printed
        self._bar = None
        self._closed = False
        if enabled and tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, file=self.stream, leave=False)

    @property
    def mode(self) -> str:
        return "off" if not self.enabled else ("bar" if self._bar is not None else "lines")

    def set_postfix(self, **kw) -> None:
        self.postfix = {k: v for k, v in kw.items()}
        if self._bar is not None:
            self._bar.set_postfix(**kw)

    def _line(self) -> None:
        elapsed = time.perf_counter() - self.t0
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        pct = 100.0 * self.n / self.total
        print(f"{self.desc}: {self.n}/{self.total} ({pct:.0f}%) {elapsed:.0f} s" + (f" {extra}" if extra else ""),
              file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        if not self.enabled:
            return
        printed = False
        while self._next_line <= self._steps and self.n * self._steps >= self._next_line * self.total:
            self._next_line += 1
            printed = True
        if printed:
            self._line()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(enabled: bool, total: int, desc: str) -> Progress | None:
    """None when disabled (callers write `if bar is not None: bar.update()`)."""
    return Progress(total, desc) if enabled else None
