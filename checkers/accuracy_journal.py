"""A journal of finished chunks of a certified-accuracy run (checkers/accuracy.py), for resuming.

    {"format": "depthcert.accuracy-journal", "version": 1, "model": SHA256, "task": SHA256,
     "options": {...}, "points": N, "chunk": C}                       first line: what the run is
    {"lo": 0, "hi": 65536, "correct": 65530, "wrong": [...], "undecided": [], "margin": ["p/q", "p/q"], ...}

Lines are appended whole and fsync'ed; a partial last line (a crash) is ignored and its chunk
redone.  A journal of another model (any weight), task, option (precision, tables) or chunk size
is refused: the header must match exactly.  A resumed run merges the recorded chunks with the
fresh ones; the merge checks that the chunks cover every point once and that the counts add up.
"""
from __future__ import annotations

import json
import os

from depthcert.checkers.errors import BadInput
from depthcert.checkers.journal import model_fingerprint, task_fingerprint

FORMAT = "depthcert.accuracy-journal"
VERSION = 1


class AccuracyJournal:
    def __init__(self, path: str, model, task, options: dict, chunk: int):
        from depthcert.checkers.accuracy import ChunkAccuracy

        self.path = path
        self.header = {"format": FORMAT, "version": VERSION, "model": model_fingerprint(model),
                       "task": task_fingerprint(task), "options": options, "points": int(task.size), "chunk": int(chunk)}
        self.done: dict = {}
        if os.path.exists(path) and os.path.getsize(path) > 0:
            try:
                with open(path, encoding="utf-8") as fh:
                    lines = fh.read().split("\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise BadInput(f"cannot read journal {path}: {getattr(exc, 'strerror', None) or exc}") from None
            try:
                head = json.loads(lines[0])
            except ValueError:
                raise BadInput(f"journal {path}: the first line is not a journal header") from None
            if not isinstance(head, dict) or head.get("format") != FORMAT:
                raise BadInput(f"journal {path}: not a depthcert accuracy journal")
            for key in ("model", "task", "options", "points", "chunk"):
                if head.get(key) != self.header[key]:
                    raise BadInput(f"journal {path} was written for another {key}; use a new journal file for this run")
            if lines[-1] != "":
                self._append_raw("\n")
            for line in lines[1:]:
                try:
                    res = ChunkAccuracy.from_json(json.loads(line))
                except (ValueError, KeyError, TypeError, ZeroDivisionError):
                    continue
                self.done[(res.lo, res.hi)] = res
        else:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise BadInput(f"cannot write journal {path}: folder {folder} does not exist")
            self._append_raw(json.dumps(self.header) + "\n")

    def record(self, res) -> None:
        self._append_raw(json.dumps(res.to_json()) + "\n")
        self.done[(res.lo, res.hi)] = res

    def _append_raw(self, line: str) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise BadInput(f"cannot write journal {self.path}: {exc.strerror}") from None
