"""Train / held-out splits of a task's index space, sampled without enumerating it.

  sc        memorization: every point has its own label, so nothing can be held out; the
            evaluation set is the training set (the paper's setting).
  icqa,     a deterministic hash of the point index puts ~1/5 of the points in the held-out
  multihop  set: held-out contexts (question/answer permutations) were never trained on.
  tm, ictm  held-out substitutions: a point is held out when the set of word tokens of its
            (query) question hashes into the held-out bucket, so the evaluated questions use
            token combinations that never appear as a (query) question in training.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import Task

HELD_OUT_BUCKETS = 5  # one bucket in five is held out
_MIX = np.uint64(0x9E3779B97F4A7C15)


def _hash(x: np.ndarray) -> np.ndarray:
    """A fixed integer mixer (splitmix64 finaliser) on uint64 arrays."""
    z = (x.astype(np.uint64) + _MIX) & np.uint64(0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


@dataclass(frozen=True)
class Split:
    """How points are assigned to train / held-out; `kind` is shown in logs."""

    kind: str  # "none" | "index" | "substitution"
    description: str


def split_for(task: Task) -> Split:
    if task.name == "sc":
        return Split("none", "memorization: evaluated on the training points")
    if task.name in ("tm", "ictm"):
        return Split(
            "substitution",
            "held-out substitutions: the word-token set of the (query) question hashes to bucket 0 of "
            f"{HELD_OUT_BUCKETS}",
        )
    return Split("index", f"held-out points: index hashes to bucket 0 of {HELD_OUT_BUCKETS}")


def question_slice(task: Task) -> slice:
    """Positions of the (query) question whose substitution decides the split (tm, ictm)."""
    if task.name == "tm":
        return slice(0, task.length - 1)
    l = task.params.get("l") or task.params.get("template_length") or getattr(task, "l", None)
    if not l:
        raise BadInput(f"task {task.name} does not say its template length")
    return slice(task.length - 1 - int(l), task.length - 1)


def held_out_mask(task: Task, split: Split, index: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """True for points in the held-out set."""
    if split.kind == "none":
        return np.zeros(len(index), dtype=bool)
    if split.kind == "index":
        return _hash(index) % np.uint64(HELD_OUT_BUCKETS) == 0
    q = ids[:, question_slice(task)]
    V = len(task.vocab)
    present = np.zeros((len(ids), V), dtype=bool)
    present[np.arange(len(ids))[:, None], q] = True
    # the bit pattern of the token set, folded into 64 bits
    key = np.zeros(len(ids), dtype=np.uint64)
    for t in range(V):
        with np.errstate(over="ignore"):
            key = _hash(key ^ np.where(present[:, t], np.uint64(t + 1), np.uint64(0)))
    return key % np.uint64(HELD_OUT_BUCKETS) == 0


class Sampler:
    """Draws training batches and a fixed held-out evaluation set."""

    def __init__(self, task: Task, rng: np.random.Generator, split: Split | None = None):
        self.task = task
        self.rng = rng
        self.split = split or split_for(task)

    def _draw(self, count: int, want_held_out: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = self.task.size
        got_i, got_x, got_y = [], [], []
        have = 0
        for _ in range(200):
            n = max(64, 2 * (count - have))
            idx = self.rng.integers(0, size, size=n, dtype=np.int64) if size < 2**62 else _big_draw(self.rng, size, n)
            ids, labels = self.task.decode(idx)
            mask = held_out_mask(self.task, self.split, idx, ids)
            if self.split.kind != "none":
                keep = mask if want_held_out else ~mask
            else:
                keep = np.ones(len(idx), dtype=bool)
            got_i.append(idx[keep])
            got_x.append(ids[keep])
            got_y.append(labels[keep])
            have += int(keep.sum())
            if have >= count:
                break
        if have == 0:
            raise BadInput(f"task {self.task.name} at this size has no {'held-out' if want_held_out else 'training'} points")
        return (np.concatenate(got_i)[:count], np.concatenate(got_x)[:count], np.concatenate(got_y)[:count])

    def train_batch(self, batch_size: int):
        return self._draw(batch_size, want_held_out=False)

    def eval_set(self, count: int):
        """Held-out points (all points if the task is small enough and nothing is held out)."""
        if self.split.kind == "none" and self.task.size <= count:
            idx = np.arange(self.task.size, dtype=np.int64)
            ids, labels = self.task.decode(idx)
            return idx, ids, labels
        if self.task.size <= 4 * count:
            idx = np.arange(self.task.size, dtype=np.int64)
            ids, labels = self.task.decode(idx)
            if self.split.kind != "none":
                m = held_out_mask(self.task, self.split, idx, ids)
                idx, ids, labels = idx[m], ids[m], labels[m]
            if len(idx) == 0:
                raise BadInput(f"task {self.task.name} at this size has no held-out points; make it larger")
            if len(idx) > count:
                pick = np.sort(self.rng.choice(len(idx), size=count, replace=False))
                idx, ids, labels = idx[pick], ids[pick], labels[pick]
            return idx, ids, labels
        return self._draw(count, want_held_out=True)


def _big_draw(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    raise BadInput(f"dataset of size {size} is too large to index with 64-bit integers")
