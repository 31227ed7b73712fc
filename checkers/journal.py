"""A journal of finished chunks, so an exhaustive run killed midway resumes where it stopped.

    {"format": "depthcert.journal", "version": 3, "model": SHA256, "task": SHA256, "plan": SHA256,
     "points": N, "chunk": C}                                              line 1: what the run is
    {"run": R, "lo": 0, "hi": 65536, "checked": 65536, "min_num": "0x3", "min_index": 17,
     "bad_index": -1, "batches": [32, 0], "sum": S}                       one line a chunk
    {"run": R, "lo": 0, "hi": 65536, "checked": 65536, "low": "p/q", "high": "p/q", "low_index": 9,
     "high_index": 40, "unknown": false, "bad_index": -1, "undecided": 0, "undecided_index": -1, "sum": S}
                                                                          softmax models: the margin enclosure
A softmax chunk's enclosure [low, high] is [least lower end, least upper end] of its checked
points' enclosures: low_index is a point whose enclosure gives low, high_index one whose
enclosure gives high (-1 both when the chunk has no enclosure).

A softmax run's header also carries "options", the fingerprint of its ball precisions (they change
what "undecided" means).

R is the SHA-256 of the header line's canonical JSON (so every chunk line names the model, task,
plan and chunking it was computed for), S the SHA-256 of the chunk line's canonical JSON without
"sum".  Lines are appended whole, flushed and fsync'ed as each chunk finishes; a crash can leave
at most one partial last line (no newline), which is cut off on resuming and its chunk redone.

Claim.  Nothing read from a journal is trusted as written.  A header for another model, task,
plan or chunking, a header of another version (version 1 lines carry no checksum, version 2
softmax lines do not name the points of their enclosure ends), a chunk line that is not valid
JSON, fails its checksum (edited in place or corrupted, whatever its R says), belongs to another
run (an intact line whose R differs: copied from another journal), names a chunk that is not one of this run's, repeats a chunk with other
results, or whose counts do not add up (a chunk without failure checked every one of its points
and has a positive margin; a failing chunk checked its points up to and including the failing
one, whose margin is the chunk's minimum and is <= 0; the minimum-margin point lies among the
checked ones; a softmax chunk without failure or undecided point has an enclosure of positive
margins (its lower end rounded outward may be 0), a failing one an enclosure reaching 0 or
below, its undecided count at most its checked points, its first undecided point and the points
of its enclosure ends among them, those -1 exactly when it has no enclosure) is refused with one
line naming the journal line (BadInput: exit 2).  Beyond that, the verifier
(checkers/exhaustive.py) re-evaluates, before printing anything, the recorded minimum-margin
point of every chunk it takes from the journal and the recorded counterexample: each must have
exactly the recorded margin (`Journal.check_point`).  A softmax run re-decides the recorded
counterexample and first undecided point, which must be wrong and undecided again, and the two
points of the enclosure ends of every chunk it takes from the journal (the chunks the merge
uses), one point at a time with the run's own precisions (`Journal.check_enclosure`): the
high_index point's enclosure decided again must reach down to the recorded high or below (its
margin can be <= high), and the low_index point's must reach up to the recorded low or above
(its margin can be >= low); otherwise the line is refused the same way.  These check that the
ends could be true; they are not recomputed from the two points.

Limit.  A journal whose lines were rewritten with recomputed checksums and a recorded minimum
that a real point of the chunk attains (softmax: ends that the two named points' enclosures,
decided again, do not rule out) can still claim that chunk's other points pass, and (softmax) a
low above the true minimum of the chunk's other points: the checksum detects corruption, edits
and splices, not a forger with the source code.  Resume only journals this tool wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput

FORMAT = "depthcert.journal"
VERSION = 3
_HEX = re.compile(r"^-?0x[0-9a-f]+$")  # margins in hexadecimal: no limit on digits, linear time
_CHUNK_KEYS = ("run", "lo", "hi", "checked", "min_num", "min_index", "bad_index", "batches", "sum")
_BALL_KEYS = ("run", "lo", "hi", "checked", "low", "high", "low_index", "high_index", "unknown", "bad_index",
              "undecided", "undecided_index", "sum")
_RATIONAL = re.compile(r"^-?[0-9]{1,5000}(/[0-9]{1,5000})?$")  # an enclosure end: exact dyadic text


def _sha(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def margin_text(q) -> str:
    """A margin in a refusal: 6 significant digits ("2e-06"), or for a rational beyond float64's
    range (a forged 10^400, where float() raises OverflowError) the exact decimal to 10 digits."""
    q = Fraction(q)
    try:
        x = float(q)
    except OverflowError:
        x = None
    if x is not None and (x != 0 or q == 0) and abs(x) < float("inf"):
        return f"{x:.6g}"
    from depthcert.checkers.softmax_balls import _outward

    return _outward(q, up=q < 0)  # rounded towards 0: the digits shown are the number's own


def line_checksum(obj: dict) -> str:
    """SHA-256 of a chunk line's canonical JSON, its "sum" field left out."""
    return hashlib.sha256(_canonical({k: v for k, v in obj.items() if k != "sum"})).hexdigest()


def model_fingerprint(model) -> str:
    """Every field that changes what the model computes, weights entry by entry (exact text)."""
    parts = [model.vocab, model.max_length, model.classes, model.layout.to_json(), model.outputs, model.constant_row]
    for layer in model.layers:
        parts.append(("layer", layer.causal, len(layer)))
        for h in layer:
            parts += [h.attention, str(h.scale), str(h.scale_sqrt_divisor), [str(v) for v in h.W_QK.flat],
                      [str(v) for v in h.W_V.flat]]
            if getattr(h, "rotary", None) is not None:
                R = h.rotary
                parts.append(("rotary", R.dim, str(R.theta), [str(v) for v in R.W_Q.flat], [str(v) for v in R.W_K.flat]))
        if layer.mlp is not None:
            m = layer.mlp
            parts += [[str(v) for v in M.flat] for M in (m.W1, m.b1, m.W2, m.b2)]
            if m.activation != "relu":
                parts.append(("activation", m.activation))
            if getattr(m, "W_gate", None) is not None:
                parts.append(("gate", [str(v) for v in m.W_gate.flat], [str(v) for v in m.b_gate.flat]))
        if getattr(layer, "parallel", False):
            parts.append("parallel")
        for key in ("norm_attn", "norm_mlp"):
            if getattr(layer, key) is not None:
                parts.append(_norm_parts(key, getattr(layer, key)))
    if getattr(model, "norm_final", None) is not None:
        parts.append(_norm_parts("norm_final", model.norm_final))
    parts.append([str(v) for v in model.W_O.flat])
    return _sha(parts)


def _norm_parts(key: str, N) -> tuple:
    return (key, N.kind, str(N.eps), N.offset, [str(v) for v in N.P.flat])


def task_fingerprint(task) -> str:
    parts = [task.name, sorted(task.params.items()), task.size, task.vocab, task.classes, task.outputs]
    extra = getattr(task, "content_fingerprint", None)
    if extra is not None:
        parts.append(extra())
    return _sha(parts)


def plan_fingerprint(indices) -> str:
    if indices is None:
        return "every point"
    return hashlib.sha256(np.asarray(indices, dtype=np.int64).tobytes()).hexdigest()


@dataclass(frozen=True)
class JournalUse:
    """What a run took from its journal: `from_journal` of `chunks` chunks read back (every line
    validated), `re_evaluated` recorded points evaluated again and found as recorded."""

    path: str
    chunks: int
    from_journal: int
    re_evaluated: int

    def note(self) -> str:
        chunks = "chunk" if self.chunks == 1 else "chunks"
        points = "point" if self.re_evaluated == 1 else "points"
        return (f"journal {self.path}: {self.from_journal} of {self.chunks} {chunks} came from the journal (every "
                f"line validated, {self.re_evaluated} recorded {points} re-evaluated as recorded)")

    def to_json(self) -> dict:
        return {"file": self.path, "chunks": self.chunks, "from_journal": self.from_journal,
                "points_re_evaluated": self.re_evaluated}


class Journal:
    """Open (create or resume) the journal at `path` for this run.  `done` maps (lo, hi) to the
    validated chunk results read back, `line_of` maps (lo, hi) to their line numbers (1 = the
    header); `record(result)` appends one.  `indices` is the plan's index list (None: every
    index); `single_class`: the model has one class, so no chunk has a margin."""

    def __init__(self, path: str, model, task, indices, n_points: int, chunk: int, options: dict | None = None):
        self.path = path
        self.indices = None if indices is None else np.asarray(indices, dtype=np.int64)
        self.n_points, self.chunk = int(n_points), int(chunk)
        self.single_class = len(model.classes) == 1
        self.header = {"format": FORMAT, "version": VERSION, "model": model_fingerprint(model),
                       "task": task_fingerprint(task), "plan": plan_fingerprint(indices),
                       "points": self.n_points, "chunk": self.chunk}
        if options:  # softmax runs: the ball precisions change what "undecided" means
            self.header["options"] = _sha(sorted(options.items()))
        self.run_id = hashlib.sha256(_canonical(self.header)).hexdigest()
        self.done: dict = {}
        self.line_of: dict = {}
        if os.path.exists(path) and os.path.getsize(path) > 0:
            self._resume()
        else:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise BadInput(f"cannot write journal {path}: folder {folder} does not exist")
            self._append(self.header)

    # ---------------------------------------------------------------- reading back

    def _resume(self) -> None:
        path = self.path
        data, lines, partial = read_lines(path)
        self._check_header(lines[0] if lines else partial, complete=bool(lines))
        for number, raw in enumerate(lines[1:], start=2):
            res = self._chunk_line(raw, number)
            key = (res.lo, res.hi)
            if key in self.done and self.done[key] != res:
                raise BadInput(f"journal {path} line {number}: chunk {res.lo}..{res.hi - 1} is already recorded on "
                               f"line {self.line_of[key]} with other results")
            self.done.setdefault(key, res)
            self.line_of.setdefault(key, number)
        cut_partial_line(path, data, partial)

    def _check_header(self, raw: bytes, complete: bool) -> None:
        path = self.path
        try:
            head = json.loads(raw.decode("utf-8")) if complete else None
        except (ValueError, UnicodeDecodeError):
            head = None
        if not isinstance(head, dict):
            raise BadInput(f"journal {path} line 1: not a journal header")
        if head.get("format") != FORMAT:
            raise BadInput(f"journal {path} line 1: not a depthcert journal")
        if head.get("version") != VERSION:
            raise BadInput(f"journal {path} line 1: version {head.get('version')!r}; this depthcert reads version "
                           f"{VERSION} only (version 1 chunk lines carry no fingerprint or checksum, version 2 softmax "
                           "lines do not name the points of their margin enclosure): start a new journal file")
        for key in ("model", "task", "plan", "points", "chunk", "options"):
            if head.get(key) != self.header.get(key):
                raise BadInput(f"journal {path} line 1: its {key} fingerprint is not this run's (a journal written "
                               f"for another {key}, or its header edited); use a new journal file for this run")
        if set(head) != set(self.header):
            raise BadInput(f"journal {path} line 1: unexpected header fields {sorted(set(head) - set(self.header))}")

    def _chunk_line(self, raw: bytes, number: int):
        """One chunk line, validated (the module docstring's list), as a ChunkResult."""
        from depthcert.checkers.shards import ChunkResult

        where = f"journal {self.path} line {number}"
        try:
            r = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise BadInput(f"{where}: not a JSON chunk line") from None
        if isinstance(r, dict) and "low" in r:
            return self._ball_line(r, where)
        self._check_signed(r, _CHUNK_KEYS, "chunk line", where)
        ints = ("lo", "hi", "checked", "min_index", "bad_index")
        if not all(type(r[k]) is int for k in ints) or not (
                isinstance(r["batches"], list) and len(r["batches"]) == 2
                and all(type(x) is int and x >= 0 for x in r["batches"])):
            raise BadInput(f"{where}: {', '.join(ints)} must be integers and batches two counts")
        min_num = r["min_num"]
        if min_num is not None:
            if not isinstance(min_num, str) or not _HEX.match(min_num):
                raise BadInput(f"{where}: min_num must be a hexadecimal integer (\"-0x7\") or null")
            min_num = int(min_num, 16)
        res = ChunkResult(r["lo"], r["hi"], r["checked"], min_num, r["bad_index"], tuple(r["batches"]),
                          r["min_index"])
        problem = self.inconsistency(res)
        if problem:
            raise BadInput(f"{where}: {problem}")
        return res

    def _check_signed(self, r, keys, kind: str, where: str) -> None:
        """The fields of a line of this kind, this run's fingerprint, and the line's checksum."""
        if not isinstance(r, dict) or set(r) != set(keys):
            raise BadInput(f"{where}: not a {kind} of journal version {VERSION} (fields {', '.join(keys)})")
        check_signature(r, self.run_id, where)

    def _ball_line(self, r: dict, where: str):
        """One softmax chunk line, validated, as a BallChunkResult."""
        from depthcert.checkers.shards import BallChunkResult

        self._check_signed(r, _BALL_KEYS, "softmax chunk line", where)
        ints = ("lo", "hi", "checked", "bad_index", "undecided", "undecided_index", "low_index", "high_index")
        if not all(type(r[k]) is int for k in ints) or type(r["unknown"]) is not bool:
            raise BadInput(f"{where}: {', '.join(ints)} must be integers and unknown true or false")
        ends = []
        for k in ("low", "high"):
            if r[k] is not None and not (isinstance(r[k], str) and _RATIONAL.match(r[k])):
                raise BadInput(f"{where}: {k} must be an exact rational (\"-3/8\") or null")
            ends.append(None if r[k] is None else Fraction(r[k]))
        if (ends[0] is None) != (ends[1] is None) or (ends[0] is not None and ends[0] > ends[1]):
            raise BadInput(f"{where}: low and high must both be given, low <= high, or both null")
        res = BallChunkResult(r["lo"], r["hi"], r["checked"], ends[0], ends[1], r["unknown"], r["bad_index"],
                              r["undecided"], r["undecided_index"], r["low_index"], r["high_index"])
        problem = self._counts(res) or self._ball_consistency(res)
        if problem:
            raise BadInput(f"{where}: {problem}")
        return res

    def _ball_consistency(self, res) -> str:
        checked = self._plan(res.lo, res.lo + res.checked)
        if not 0 <= res.n_undecided <= res.checked - (res.bad_index >= 0):
            return f"{_n(res.n_undecided, 'undecided point')} recorded for {_n(res.checked, 'point')} checked"
        if (res.n_undecided > 0) != (res.undecided_index >= 0) or (
                res.undecided_index >= 0 and not _contains(checked, res.undecided_index)):
            return f"the first undecided point {res.undecided_index} does not match the undecided count or chunk"
        for end, index in (("low", res.low_index), ("high", res.high_index)):
            if (index == -1) != (res.low is None) or (index != -1 and not _contains(checked, index)):
                return (f"the point {index} of the enclosure's {end} end is not among the chunk's checked points "
                        "(-1 only when the chunk has no enclosure)")
        if self.single_class or res.low is None:
            return ""
        if res.bad_index < 0 and res.n_undecided == 0 and not res.unknown and (res.low < 0 or res.high <= 0):
            return (f"a chunk without failure must have a positive margin enclosure; the line records "
                    f"[{res.low}, {res.high}]")
        if res.bad_index >= 0 and res.low > 0:
            return f"a failing chunk's margin enclosure must reach 0 or below; the line records low {res.low}"
        return ""

    def _counts(self, res) -> str:
        """The chunk grid and the checked count (every chunk result)."""
        lo, hi, chunk = res.lo, res.hi, self.chunk
        if not (0 <= lo < self.n_points and lo % chunk == 0 and hi == min(self.n_points, lo + chunk)):
            return f"chunk {lo}..{hi - 1} is not a chunk of this run ({self.n_points} points in chunks of {chunk})"
        if not 1 <= res.checked <= hi - lo:
            return f"chunk {lo}..{hi - 1} of {_n(hi - lo, 'point')} records {_n(res.checked, 'point')} checked"
        last = int(self._plan(lo + res.checked - 1, lo + res.checked)[0])
        if res.bad_index < -1:
            return f"bad_index {res.bad_index} is neither -1 (no failure) nor a point index"
        if res.bad_index == -1 and res.checked != hi - lo:
            return f"chunk {lo}..{hi - 1} records no failure but {res.checked} of its {_n(hi - lo, 'point')} checked"
        if res.bad_index >= 0 and res.bad_index != last:
            return (f"chunk {lo}..{hi - 1} records point {res.bad_index} as its first failure but checked "
                    f"{_n(res.checked, 'point')}, the last of which is point {last}")
        return ""

    def check_decided(self, key, what: str, index: int, ok: bool) -> None:
        """A journal-sourced softmax point decided again: `ok` says it is what the line records."""
        if not ok:
            raise BadInput(f"journal {self.path} line {self.line_of[key]}: {what} {index} decided again is not "
                           "what the journal records: the line is not this run's result")

    def check_enclosure(self, key, res, low_box, high_box) -> None:
        """A journal-sourced softmax chunk's enclosure ends against its two named points decided
        again (`low_box`, `high_box`: their enclosures (lo, hi), None when none is known): the
        high_index point's must reach down to the recorded high, the low_index point's up to the
        recorded low (the module docstring's Claim)."""
        for end, index, box, ok in (
                ("high", res.high_index, high_box, high_box is not None and high_box[0] <= res.high),
                ("low", res.low_index, low_box, low_box is not None and low_box[1] >= res.low)):
            if not ok:
                got = "no margin enclosure" if box is None else f"margin in [{margin_text(box[0])}, {margin_text(box[1])}]"
                raise BadInput(f"journal {self.path} line {self.line_of[key]}: point {index} of the chunk's recorded "
                               f"margin {end} {margin_text(getattr(res, end))}, decided again, has {got}, not what the "
                               "journal records: the line is not this run's result")

    def inconsistency(self, res) -> str:
        """What does not add up in a chunk result of this run ('' when nothing)."""
        problem = self._counts(res)
        if problem:
            return problem
        checked = self._plan(res.lo, res.lo + res.checked)
        if self.single_class:
            if res.min_num is not None or res.min_index != -1 or res.bad_index != -1:
                return "a model with one class has no margins and no failures, but the line records some"
            return ""
        if res.min_num is None:
            return "the line records no minimum margin"
        if res.bad_index < 0 and res.min_num <= 0:
            return f"a chunk without failure must have a positive minimum margin; the line records {res.min_num}"
        if res.bad_index >= 0 and (res.min_num > 0 or res.min_index != res.bad_index):
            return ("a failing chunk's minimum margin is its failing point's (<= 0); the line records "
                    f"{res.min_num} at point {res.min_index}")
        if not _contains(checked, res.min_index):
            return f"the minimum-margin point {res.min_index} is not among the chunk's checked points"
        return ""

    def _plan(self, a: int, b: int):
        """Dataset indices of plan positions a..b-1 (a range, or a slice of the plan's list)."""
        return range(a, b) if self.indices is None else self.indices[a:b]

    def check_point(self, key, what: str, index: int, recorded: int | None, got) -> None:
        """A journal-sourced point re-evaluated: `got` (its margin numerator now) must be `recorded`."""
        if got is None or recorded is None or int(got) != recorded:
            raise BadInput(f"journal {self.path} line {self.line_of[key]}: {what} {index} re-evaluated has margin "
                           f"numerator {got}, the journal records {recorded}: the line is not this run's result")

    # ---------------------------------------------------------------- writing

    def record(self, res) -> None:
        if hasattr(res, "n_undecided"):  # a softmax chunk
            q = (lambda x: None if x is None else str(x))
            obj = {"run": self.run_id, "lo": res.lo, "hi": res.hi, "checked": res.checked, "low": q(res.low),
                   "high": q(res.high), "low_index": res.low_index, "high_index": res.high_index,
                   "unknown": bool(res.unknown), "bad_index": res.bad_index,
                   "undecided": res.n_undecided, "undecided_index": res.undecided_index}
            obj["sum"] = line_checksum(obj)
            self._append(obj)
            self.done[(res.lo, res.hi)] = res
            return
        obj = {"run": self.run_id, "lo": res.lo, "hi": res.hi, "checked": res.checked,
               "min_num": None if res.min_num is None else hex(res.min_num), "min_index": res.min_index,
               "bad_index": res.bad_index, "batches": list(res.batches)}
        obj["sum"] = line_checksum(obj)
        self._append(obj)
        self.done[(res.lo, res.hi)] = res

    def _append(self, obj) -> None:
        append_line(self.path, json.dumps(obj) + "\n")


def read_lines(path: str) -> tuple[bytes, list[bytes], bytes]:
    """A journal file's bytes, its complete lines, and the partial last line a crash can leave
    (b"" when the file ends with a newline)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise BadInput(f"cannot read journal {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    partial = lines.pop()
    return data, lines, partial


def cut_partial_line(path: str, data: bytes, partial: bytes) -> None:
    """Cut off a crash's partial last line, so appends start on a line of their own."""
    if not partial:
        return
    try:
        with open(path, "r+b") as fh:
            fh.truncate(len(data) - len(partial))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise BadInput(f"cannot write journal {path}: {exc.strerror}") from None


def check_signature(r: dict, run_id: str, where: str) -> None:
    """A chunk line's checksum holds and it names this run; the refusal says which of the two was
    seen: a line whose text no longer matches its checksum was edited in place or corrupted
    (whatever its fingerprint now says); an intact line that names another run was copied from
    another journal (or rewritten with its checksum recomputed)."""
    other = r["run"] != run_id
    if r["sum"] != line_checksum(r):
        raise BadInput(f"{where}: checksum mismatch: the line's contents differ from what its checksum records, "
                       "so it was edited in place or corrupted"
                       + ("; its run fingerprint also differs from the header's" if other else ""))
    if other:
        raise BadInput(f"{where}: the line is intact (its checksum holds) but belongs to another run (its "
                       "fingerprint differs from the header's): copied from another journal, or rewritten with "
                       "its checksum recomputed")


def append_line(path: str, line: str) -> None:
    """Append one whole line, flushed and fsync'ed."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise BadInput(f"cannot write journal {path}: {exc.strerror}") from None


def _n(count: int, word: str) -> str:
    """'1 point', '2 points'."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _contains(points, index: int) -> bool:
    if isinstance(points, range):
        return index in points
    return bool(np.any(points == index))
