"""User datasets: the "depthcert.dataset" JSON format (versions 1 and 2) as a `Task`.

    {"format": "depthcert.dataset", "version": 1 | 2,
     "name": str (optional),
     "sequences": [[token, ...], ...],      tokens: all strings or all ints
     "labels": [label, ...]}                labels: all strings or all ints, one per sequence

Version 2 also allows per-position labels: every entry of "labels" is then a list as long as
its sequence, each item a label or null (that position is not checked; every sequence labels
at least one position).  Such a dataset has outputs "all" and needs a model with outputs "all".

Sequences may have different lengths.  The model's vocabulary is the sorted set of tokens (as
strings), its classes the sorted set of labels, and max_length the longest sequence.  A sequence
listed twice with different labels is rejected (no model can fit it; almost surely a mistake).
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from depthcert.checkers.atomic import read_json
from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks.base import UNLABELLED, Batch, Task

FORMAT = "depthcert.dataset"
VERSION = 2
VERSIONS = (1, 2)
MAX_POINTS = 2_000_000


def _kind(value, where: str) -> type:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadInput(f"{where}: expected a string or an int, got {value!r}")
    if isinstance(value, str) and not value:
        raise BadInput(f"{where}: empty string")
    return type(value)


def _sort_key(v):
    return v


class DatasetTask(Task):
    """A labelled dataset from a file; `batches()` groups points by sequence length."""

    name = "dataset"
    theorem = "user dataset"

    def __init__(self, sequences: Sequence[Sequence], labels: Sequence, name: str = "dataset",
                 per_position: bool | None = None):
        """labels: one label per sequence, or (per_position) one list per sequence with a label
        or None per position.  per_position=None: per-position iff the labels are lists."""
        if not isinstance(sequences, list):
            raise BadInput("sequences: expected a list of sequences")
        if not isinstance(labels, list):
            raise BadInput("labels: expected a list of labels")
        if not sequences:
            raise BadInput("sequences: the dataset is empty")
        if len(sequences) > MAX_POINTS:
            raise BadInput(f"sequences: {len(sequences)} points (limit {MAX_POINTS})")
        if len(labels) != len(sequences):
            raise BadInput(f"labels: {len(labels)} labels for {len(sequences)} sequences")
        tok_kinds, lab_kinds = set(), set()
        for i, s in enumerate(sequences):
            if not isinstance(s, list):
                raise BadInput(f"sequences[{i}]: expected a list of tokens")
            if not s:
                raise BadInput(f"sequences[{i}]: empty sequence")
            for j, t in enumerate(s):
                tok_kinds.add(_kind(t, f"sequences[{i}][{j}]"))
            if len(tok_kinds) > 1:
                raise BadInput(f"sequences[{i}]: tokens mix strings and ints")
        if per_position is None:
            per_position = bool(labels) and isinstance(labels[0], list)
        flat = []  # every label given, for the class set
        for i, lab in enumerate(labels):
            if per_position:
                if not isinstance(lab, list):
                    raise BadInput(f"labels[{i}]: expected a list of per-position labels (or null)")
                if len(lab) != len(sequences[i]):
                    raise BadInput(f"labels[{i}]: {len(lab)} labels for a sequence of length {len(sequences[i])}")
                given = [(f"labels[{i}][{k}]", v) for k, v in enumerate(lab) if v is not None]
                if not given:
                    raise BadInput(f"labels[{i}]: labels no position (every sequence needs one label)")
            else:
                given = [(f"labels[{i}]", lab)]
            for where, v in given:
                lab_kinds.add(_kind(v, where))
                if len(lab_kinds) > 1:
                    raise BadInput(f"{where}: labels mix strings and ints")
                flat.append(v)
        seen: dict[tuple, object] = {}
        for i, (s, lab) in enumerate(zip(sequences, labels)):
            key = tuple(s)
            lab = tuple(lab) if per_position else lab
            if key in seen and seen[key] != lab:
                raise BadInput(
                    f"sequences[{i}]: duplicate sequence with conflicting labels {seen[key]!r} and {lab!r}"
                )
            seen[key] = lab
        self.name = str(name) if name else "dataset"
        self.outputs = "all" if per_position else "last"
        tokens = sorted({t for s in sequences for t in s}, key=_sort_key)
        classes = sorted(set(flat), key=_sort_key)
        self.original_tokens = tuple(tokens)
        self.original_labels = tuple(classes)
        self.vocab = tuple(str(t) for t in tokens)
        self.classes = tuple(str(c) for c in classes)
        tid = {t: i for i, t in enumerate(tokens)}
        cid = {c: i for i, c in enumerate(classes)}
        self._seqs = [np.array([tid[t] for t in s], dtype=np.int64) for s in sequences]
        if per_position:  # ragged: one array per sequence, UNLABELLED where null
            self._labels = [np.array([UNLABELLED if v is None else cid[v] for v in lab], dtype=np.int64)
                            for lab in labels]  # a list of arrays: sequences may differ in length
        else:
            self._labels = np.array([cid[lab] for lab in labels], dtype=np.int64)
        self._lengths = np.array([len(s) for s in sequences], dtype=np.int64)
        self.length = int(self._lengths.max())
        # batches come grouped by length: in index order only if lengths never decrease
        self.index_ordered = bool(np.all(np.diff(self._lengths) >= 0))
        self.size = len(sequences)
        self.params = {"points": self.size, "lengths": sorted(set(int(n) for n in self._lengths))}
        self.token_out = {str(t): t for t in tokens}
        self.label_out = {str(c): c for c in classes}

    def content_fingerprint(self) -> str:
        """A hash of every sequence and label (the journal refuses another dataset's chunks)."""
        import hashlib

        h = hashlib.sha256()
        for seq in self._seqs:
            h.update(np.asarray(seq, dtype=np.int64).tobytes() + b"|")
        for lab in (self._labels if isinstance(self._labels, list) else [self._labels]):
            h.update(np.asarray(lab, dtype=np.int64).tobytes() + b"|")
        return h.hexdigest()

    def to_json(self) -> dict:
        """The dataset as a "depthcert.dataset" object (version 1 when it labels the last
        position only, else 2), with its tokens and labels as originally given."""
        toks, labs = self.original_tokens, self.original_labels
        seqs = [[toks[t] for t in s] for s in self._seqs]
        if self.outputs == "all":
            labels = [[None if y == UNLABELLED else labs[y] for y in row] for row in self._labels]
        else:
            labels = [labs[y] for y in self._labels]
        return {"format": FORMAT, "version": 2 if self.outputs == "all" else 1, "name": self.name,
                "sequences": seqs, "labels": labels}

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        lengths = set(int(self._lengths[i]) for i in index)
        if len(lengths) > 1:
            raise ValueError("decode: indices of sequences with different lengths; use batches()")
        ids = np.stack([self._seqs[i] for i in index]) if len(index) else np.zeros((0, 0), dtype=np.int64)
        if self.outputs == "all":
            n = ids.shape[1] if len(index) else 0
            return ids, (np.stack([self._labels[i] for i in index]) if len(index) else np.zeros((0, n), dtype=np.int64))
        return ids, self._labels[index]

    def _grouped(self, indices: np.ndarray, batch_size: int) -> Iterator[Batch]:
        indices = np.asarray(indices, dtype=np.int64)
        for n in sorted(set(int(v) for v in self._lengths[indices])):
            sel = indices[self._lengths[indices] == n]
            for lo in range(0, len(sel), batch_size):
                idx = sel[lo : lo + batch_size]
                ids, labels = self.decode(idx)
                yield Batch(idx, ids, labels)

    def batches(self, batch_size: int = 4096, start: int = 0, stop: int | None = None) -> Iterator[Batch]:
        stop = self.size if stop is None else stop
        yield from self._grouped(np.arange(start, stop, dtype=np.int64), batch_size)

    def batches_of(self, indices: Sequence[int], batch_size: int = 4096) -> Iterator[Batch]:
        yield from self._grouped(np.asarray(indices, dtype=np.int64), batch_size)


def dataset_from_json(obj, name: str = "dataset") -> DatasetTask:
    """Validate a parsed "depthcert.dataset" object; BadInput names the first bad field."""
    if not isinstance(obj, dict):
        raise BadInput("dataset: expected a JSON object")
    if obj.get("format") != FORMAT:
        raise BadInput(f"format: expected {FORMAT!r}, got {obj.get('format')!r}")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version not in VERSIONS:
        raise BadInput(f"version: expected 1 or 2, got {version!r}")
    unknown = sorted(set(obj) - {"format", "version", "name", "sequences", "labels", "description"})
    if unknown:
        raise BadInput(f"{unknown[0]}: unknown field")
    if "sequences" not in obj:
        raise BadInput("sequences: missing")
    if "labels" not in obj:
        raise BadInput("labels: missing")
    nm = obj.get("name", name)
    if not isinstance(nm, str):
        raise BadInput("name: expected a string")
    labels = obj["labels"]
    per_position = isinstance(labels, list) and any(isinstance(v, list) for v in labels)
    if per_position and version == 1:
        raise BadInput("labels: per-position labels (lists) need \"version\": 2")
    return DatasetTask(obj["sequences"], labels, nm or name, per_position=per_position)


def save_dataset(task: DatasetTask, path: str) -> None:
    """Write a dataset file atomically (see DatasetTask.to_json)."""
    from depthcert.checkers.atomic import write_json_atomic

    write_json_atomic(path, task.to_json())


def load_dataset(path: str) -> DatasetTask:
    import os

    return dataset_from_json(read_json(path, "dataset"), os.path.splitext(os.path.basename(path))[0])
