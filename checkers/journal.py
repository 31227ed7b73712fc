"""A journal of finished chunks, so an exhaustive run killed midway resumes where it stopped.

    {"format": "depthcert.journal", "version": 1, "model": SHA256, "task": SHA256, "plan": SHA256,
     "points": N, "chunk": C}                                      first line: what the run is
    {"lo": 0, "hi": 65536, "checked": 65536, "min_num": "3", "bad_index": -1}   one line a chunk
    {"lo": 0, "hi": 65536, "checked": 65536, "low": "p/q", "high": "p/q", "unknown": false,
     "bad_index": -1, "undecided": 0, "undecided_index": -1}        softmax models: the margin enclosure

Lines are appended whole, flushed and fsync'ed as each chunk finishes; a crash can leave at most
one partial last line, which is ignored on reading.  A journal written for another model (any
weight, vocabulary, class, layout or option), task (name, sizes, points) or plan (the symmetry
reduction's index list) is refused: the header's fingerprints must match exactly.  Resuming
reads the recorded chunk results instead of recomputing them; the merge (checkers/shards.py)
is the same, so the verdict is the single-process one.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from depthcert.checkers.errors import BadInput

FORMAT = "depthcert.journal"
VERSION = 1


def _sha(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


def model_fingerprint(model) -> str:
    """Every field that changes what the model computes, weights entry by entry (exact text)."""
    parts = [model.vocab, model.max_length, model.classes, model.layout.to_json(), model.outputs, model.constant_row]
    for layer in model.layers:
        parts.append(("layer", layer.causal, len(layer)))
        for h in layer:
            parts += [h.attention, str(h.scale), str(h.scale_sqrt_divisor), [str(v) for v in h.W_QK.flat],
                      [str(v) for v in h.W_V.flat]]
        if layer.mlp is not None:
            m = layer.mlp
            parts += [[str(v) for v in M.flat] for M in (m.W1, m.b1, m.W2, m.b2)]
    parts.append([str(v) for v in model.W_O.flat])
    return _sha(parts)


def task_fingerprint(task) -> str:
    parts = [task.name, sorted(task.params.items()), task.size, task.vocab, task.classes, task.outputs]
    extra = getattr(task, "content_fingerprint", None)
    if extra is not None:
        parts.append(extra())
    return _sha(parts)


def _ball_result(r: dict):
    """A softmax chunk's line (exact dyadic margin ends as "p/q" text) as a BallChunkResult."""
    from fractions import Fraction

    from depthcert.checkers.shards import BallChunkResult

    q = (lambda x: None if x is None else Fraction(str(x)))
    return BallChunkResult(int(r["lo"]), int(r["hi"]), int(r["checked"]), q(r["low"]), q(r["high"]),
                           bool(r["unknown"]), int(r["bad_index"]), int(r["undecided"]), int(r["undecided_index"]))


def plan_fingerprint(indices) -> str:
    if indices is None:
        return "every point"
    return hashlib.sha256(np.asarray(indices, dtype=np.int64).tobytes()).hexdigest()


class Journal:
    """Open (create or resume) the journal at `path` for this run; `done` maps (lo, hi) to
    the recorded chunk results, `record(result)` appends one."""

    def __init__(self, path: str, model, task, indices, n_points: int, chunk: int, options: dict | None = None):
        from depthcert.checkers.shards import ChunkResult

        self.path = path
        self.header = {"format": FORMAT, "version": VERSION, "model": model_fingerprint(model),
                       "task": task_fingerprint(task), "plan": plan_fingerprint(indices),
                       "points": int(n_points), "chunk": int(chunk)}
        if options:  # softmax runs: the ball precisions change what "undecided" means
            self.header["options"] = _sha(sorted(options.items()))
        self.done: dict = {}
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if exists:
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
                raise BadInput(f"journal {path}: not a depthcert journal")
            for key in ("model", "task", "plan", "points", "chunk", "options"):
                if head.get(key) != self.header.get(key):
                    raise BadInput(f"journal {path} was written for another {key} (its fingerprint differs); "
                                   "use a new journal file for this run")
            if not lines[-1] == "":  # a partial last line: end it, so appends start on a line of their own
                self._append_raw("\n")
            for line in lines[1:]:
                try:
                    r = json.loads(line)
                    if "low" in r:
                        self.done[(int(r["lo"]), int(r["hi"]))] = _ball_result(r)
                        continue
                    res = ChunkResult(int(r["lo"]), int(r["hi"]), int(r["checked"]),
                                      None if r["min_num"] is None else int(r["min_num"]), int(r["bad_index"]),
                                      tuple(int(x) for x in r.get("batches", (0, 0))))
                except (ValueError, KeyError, TypeError):
                    continue  # a partial last line from a crash: that chunk is simply redone
                self.done[(res.lo, res.hi)] = res
        else:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise BadInput(f"cannot write journal {path}: folder {folder} does not exist")
            self._append(self.header)

    def record(self, res) -> None:
        if hasattr(res, "n_undecided"):  # a softmax chunk
            q = (lambda x: None if x is None else str(x))
            self._append({"lo": res.lo, "hi": res.hi, "checked": res.checked, "low": q(res.low), "high": q(res.high),
                          "unknown": res.unknown, "bad_index": res.bad_index, "undecided": res.n_undecided,
                          "undecided_index": res.undecided_index})
            self.done[(res.lo, res.hi)] = res
            return
        self._append({"lo": res.lo, "hi": res.hi, "checked": res.checked,
                      "min_num": None if res.min_num is None else str(res.min_num), "bad_index": res.bad_index,
                      "batches": list(res.batches)})
        self.done[(res.lo, res.hi)] = res

    def _append(self, obj) -> None:
        self._append_raw(json.dumps(obj) + "\n")

    def _append_raw(self, line: str) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise BadInput(f"cannot write journal {self.path}: {exc.strerror}") from None
