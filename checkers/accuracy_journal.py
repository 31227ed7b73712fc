"""A journal of finished chunks of a certified-accuracy run (checkers/accuracy.py), for resuming.

    {"format": "depthcert.accuracy-journal", "version": 2, "model": SHA256, "task": SHA256,
     "options": {...}, "points": N, "chunk": C}                       first line: what the run is
    {"run": R, "lo": 0, "hi": 65536, "correct": 65530, "wrong": [...], "undecided": [], "margin": ["p/q", "p/q"],
     "low_index": 9, "high_index": 40, "by_tables": 65536, "by_balls": 0,
     "limits": [[7, "precision cap (4096 bits)"]], "sum": S}                              one line a chunk

R is the SHA-256 of the header line's canonical JSON, S the SHA-256 of the chunk line's canonical
JSON without "sum" (checkers/journal.py's line_checksum).  "margin" encloses the least margin of
the chunk's correct points: [least lower end, least upper end] of their enclosures; low_index is
a correct point whose enclosure gives the lower end, high_index one giving the upper end (-1 both
when no margin is known).  "limits" gives, for the chunk's first undecided points (at most
MAX_LIMITS), why each stayed undecided (the limit it reached), so a resumed run names the same
reasons as the run that decided them; a line without it (written before reasons were kept) reads
as one with no reasons.

Lines are appended whole and fsync'ed; a partial last line (a crash) is cut off and its chunk
redone.  A journal of another model (any weight), task, option (precision, tables) or chunk size
is refused: the header must match exactly.  A resumed run merges the recorded chunks with the
fresh ones; the merge checks that the chunks cover every point once and that the counts add up.

Claim.  A header of another version (version 1 chunk lines carry no checksum), a chunk line that
is not JSON, fails its checksum (edited in place or corrupted), belongs to another run (an intact
line whose R differs: copied from another journal), is not a chunk of this run,
repeats a chunk with other results, or does not add up (correct + wrong + undecided = the chunk's
points; wrong and undecided points increasing, inside the chunk; a margin exactly when some point
is correct, low <= high; low_index and high_index inside the chunk and neither wrong nor
undecided, -1 exactly when there is no margin; limits: increasing undecided points of the chunk,
each with a short printable reason) is refused with one line naming the journal line
(BadInput: exit 2).  Before anything is printed, verify-model decides again, one point at a time
with the run's own options (`check_enclosure`), the low_index and high_index points of every chunk
taken from the journal: the high_index point must be correct with an enclosure reaching down to
the recorded upper end or below, the low_index point's up to the recorded lower end or above.

Limit.  A forger who recomputes the checksum can still move a wrong point to the correct ones, or
raise the margin's lower end above the true minimum of the points not named, or reword an
undecided point's reason: no other recorded point is decided again.  Resume only journals this tool wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.journal import (_canonical, append_line, check_signature, cut_partial_line, line_checksum,
                                        margin_text, model_fingerprint, read_lines, task_fingerprint)

FORMAT = "depthcert.accuracy-journal"
VERSION = 2
_KEYS = ("run", "lo", "hi", "correct", "wrong", "undecided", "margin", "low_index", "high_index", "by_tables",
         "by_balls", "sum")
_OPTIONAL = ("limits",)  # absent on lines written before undecided reasons were journalled
_RATIONAL = re.compile(r"^-?[0-9]{1,5000}(/[0-9]{1,5000})?$")
MAX_REASON_CHARS = 500


class AccuracyJournal:
    def __init__(self, path: str, model, task, options: dict, chunk: int):
        self.path = path
        self.header = {"format": FORMAT, "version": VERSION, "model": model_fingerprint(model),
                       "task": task_fingerprint(task), "options": options, "points": int(task.size), "chunk": int(chunk)}
        self.run_id = hashlib.sha256(_canonical(self.header)).hexdigest()
        self.done: dict = {}
        self.line_of: dict = {}
        if os.path.exists(path) and os.path.getsize(path) > 0:
            self._resume()
        else:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise BadInput(f"cannot write journal {path}: folder {folder} does not exist")
            self._append_raw(json.dumps(self.header) + "\n")

    def _resume(self) -> None:
        path = self.path
        data, lines, partial = read_lines(path)
        try:
            head = json.loads(lines[0].decode("utf-8")) if lines else None
        except (ValueError, UnicodeDecodeError):
            head = None
        if not isinstance(head, dict):
            raise BadInput(f"journal {path}: the first line is not a journal header")
        if head.get("format") != FORMAT:
            raise BadInput(f"journal {path}: not a depthcert accuracy journal")
        if head.get("version") != VERSION:
            raise BadInput(f"journal {path} line 1: version {head.get('version')!r}; this depthcert reads version "
                           f"{VERSION} only (version 1 chunk lines carry no checksum): start a new journal file")
        for key in ("model", "task", "options", "points", "chunk"):
            if head.get(key) != self.header[key]:
                raise BadInput(f"journal {path} line 1: its {key} fingerprint is not this run's (a journal written "
                               f"for another {key}, or its header edited); use a new journal file for this run")
        for number, raw in enumerate(lines[1:], start=2):
            res = self._line(raw, f"journal {path} line {number}")
            key = (res.lo, res.hi)
            if key in self.done and self.done[key].to_json() != res.to_json():
                raise BadInput(f"journal {path} line {number}: chunk {res.lo}..{res.hi - 1} is already recorded on "
                               f"line {self.line_of[key]} with other results")
            self.done.setdefault(key, res)
            self.line_of.setdefault(key, number)
        cut_partial_line(path, data, partial)

    def _line(self, raw: bytes, where: str):
        """One chunk line, validated (the module docstring's Claim), as a ChunkAccuracy."""
        from depthcert.checkers.accuracy import ChunkAccuracy

        try:
            r = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise BadInput(f"{where}: not a JSON chunk line") from None
        if not isinstance(r, dict) or not set(_KEYS) <= set(r) <= set(_KEYS) | set(_OPTIONAL):
            raise BadInput(f"{where}: not a chunk line of accuracy journal version {VERSION} (fields "
                           f"{', '.join(_KEYS)}, optionally {', '.join(_OPTIONAL)})")
        check_signature(r, self.run_id, where)
        ints = ("lo", "hi", "correct", "low_index", "high_index", "by_tables", "by_balls")
        lists = ("wrong", "undecided")
        if not all(type(r[k]) is int for k in ints) or not all(
                isinstance(r[k], list) and all(type(i) is int for i in r[k]) for k in lists):
            raise BadInput(f"{where}: {', '.join(ints)} must be integers, wrong and undecided lists of integers")
        lo, hi, size, chunk = r["lo"], r["hi"], self.header["points"], self.header["chunk"]
        if not (0 <= lo < size and lo % chunk == 0 and hi == min(size, lo + chunk)):
            raise BadInput(f"{where}: chunk {lo}..{hi - 1} is not a chunk of this run ({size} points in chunks of "
                           f"{chunk})")
        for k in lists:
            v = r[k]
            if any(not lo <= i < hi for i in v) or any(a >= b for a, b in zip(v, v[1:])):
                raise BadInput(f"{where}: the {k} points must be increasing and inside the chunk {lo}..{hi - 1}")
        if set(r["wrong"]) & set(r["undecided"]) or r["correct"] < 0 or \
                r["correct"] + len(r["wrong"]) + len(r["undecided"]) != hi - lo:
            raise BadInput(f"{where}: correct, wrong and undecided points do not add up to the chunk's {hi - lo}")
        m = r["margin"]
        if m is not None and not (isinstance(m, list) and len(m) == 2 and all(
                isinstance(x, str) and _RATIONAL.match(x) for x in m) and Fraction(m[0]) <= Fraction(m[1])):
            raise BadInput(f"{where}: margin must be two exact rationals low <= high, or null")
        if m is not None and r["correct"] == 0:
            raise BadInput(f"{where}: a margin is recorded but no point is correct")
        named = set(r["wrong"]) | set(r["undecided"])
        for end in ("low_index", "high_index"):
            i = r[end]
            if (i == -1) != (m is None) or (i != -1 and (not lo <= i < hi or i in named)):
                raise BadInput(f"{where}: {end} {i} is not a correct point of the chunk (-1 only when there is no "
                               "margin)")
        margin = None if m is None else (Fraction(m[0]), Fraction(m[1]))
        limits = self._limits(r.get("limits", []), set(r["undecided"]), where)
        return ChunkAccuracy(lo, hi, r["correct"], np.asarray(r["wrong"], dtype=np.int64),
                             np.asarray(r["undecided"], dtype=np.int64), margin, r["by_tables"], r["by_balls"],
                             r["low_index"], r["high_index"], limits)

    @staticmethod
    def _limits(value, undecided: set, where: str) -> tuple:
        """The recorded reasons [[point, reason], ...] as ((point, reason), ...), validated."""
        from depthcert.checkers.accuracy import MAX_LIMITS

        ok = isinstance(value, list) and len(value) <= MAX_LIMITS and all(
            isinstance(x, list) and len(x) == 2 and type(x[0]) is int and x[0] in undecided and isinstance(x[1], str)
            and 0 < len(x[1]) <= MAX_REASON_CHARS and x[1].isprintable() for x in value)
        if not ok or any(a[0] >= b[0] for a, b in zip(value, value[1:])):
            raise BadInput(f"{where}: limits must list at most {MAX_LIMITS} undecided points of the chunk, increasing, "
                           f"each with its reason (printable, at most {MAX_REASON_CHARS} characters)")
        return tuple((i, why) for i, why in value)

    def check_enclosure(self, res, low_box, high_box) -> None:
        """A journalled chunk's margin ends against its two named points decided again
        (`low_box`, `high_box`: their enclosures, None when the point is not correct now)."""
        for end, index, box, ok in (
                ("upper", res.high_index, high_box, high_box is not None and high_box[0] <= res.margin[1]),
                ("lower", res.low_index, low_box, low_box is not None and low_box[1] >= res.margin[0])):
            if not ok:
                got = "is not correct" if box is None else f"has margin in [{margin_text(box[0])}, {margin_text(box[1])}]"
                value = res.margin[1] if end == "upper" else res.margin[0]
                raise BadInput(f"journal {self.path} line {self.line_of[(res.lo, res.hi)]}: point {index} of the "
                               f"chunk's recorded margin {end} end {margin_text(value)}, decided again, {got}, not what "
                               "the journal records: the line is not this run's result")

    def record(self, res) -> None:
        limits = [[int(i), "".join(c if c.isprintable() else " " for c in why)[:MAX_REASON_CHARS]]
                  for i, why in res.limits if why]
        obj = dict(res.to_json(), limits=limits, run=self.run_id)
        obj["sum"] = line_checksum(obj)
        self._append_raw(json.dumps(obj) + "\n")
        self.done[(res.lo, res.hi)] = res

    def _append_raw(self, line: str) -> None:
        append_line(self.path, line)
