"""Exact weights in and out: the "depthcert.weights" JSON format (version 1).

    {"format": "depthcert.weights", "version": 1,
     "name": str (optional),
     "vocab": [token, ...]        optional: defaults to the task's embedding order
     "max_length": int            optional: defaults to the task's sequence length
     "classes": [name, ...]       optional: defaults to the task's classes (W_O row order)
     "layout": [{"name": str, "size": int}, ...]   optional; sizes must add up to d'
     "layers": [[{"W_QK": M, "W_V": M}, ...], ...] a list of layers, each a list of heads
     "W_O": M}
    M: a list of rows, each entry an int or a "p/q" string (exact; floats are refused).

H0 = [one-hot token in vocab order; one-hot position (max_length rows); zeros up to d'].
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Block, Layout
from depthcert.checkers.model import Head, Model
from depthcert.checkers.rational import format_rational, parse_rational

FORMAT = "depthcert.weights"
VERSION = 1


def matrix_to_json(M: np.ndarray) -> list[list]:
    return [[format_rational(v) for v in row] for row in M]


def model_to_json(model: Model) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": model.name,
        "vocab": list(model.vocab),
        "max_length": model.max_length,
        "classes": list(model.classes),
        "layout": model.layout.to_json(),
        "layers": [
            [{"W_QK": matrix_to_json(h.W_QK), "W_V": matrix_to_json(h.W_V)} for h in layer] for layer in model.layers
        ],
        "W_O": matrix_to_json(model.W_O),
    }


def _matrix(value, where: str, shape: tuple[int | None, int]) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise BadInput(f"{where}: expected a non-empty list of rows")
    rows, cols = shape
    if rows is not None and len(value) != rows:
        raise BadInput(f"{where}: has {len(value)} rows, expected {rows}")
    out = np.empty((len(value), cols), dtype=object)
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise BadInput(f"{where}[{i}]: expected a list (a row)")
        if len(row) != cols:
            raise BadInput(f"{where}[{i}]: has {len(row)} entries, expected {cols}")
        for j, v in enumerate(row):
            out[i, j] = parse_rational(v, f"{where}[{i}][{j}]")
    out.flags.writeable = False
    return out


def _str_list(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise BadInput(f"{where}: expected a non-empty list")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise BadInput(f"{where}[{i}]: expected a string or int, got {v!r}")
        out.append(str(v))
    return tuple(out)


def model_from_json(obj, task=None) -> Model:
    """Parse and validate a weights object; `task` supplies defaults for vocab/length/classes."""
    if not isinstance(obj, dict):
        raise BadInput("weights file: top level must be a JSON object")
    if obj.get("format") != FORMAT:
        raise BadInput(f"weights file: \"format\" must be {FORMAT!r}, got {obj.get('format')!r}")
    if isinstance(obj.get("version"), bool) or obj.get("version") != VERSION:  # true == 1 in Python
        raise BadInput(f"weights file: unsupported \"version\" {obj.get('version')!r} (this tool reads {VERSION})")
    known = {"format", "version", "name", "vocab", "max_length", "classes", "layout", "layers", "W_O", "notes"}
    extra = sorted(set(obj) - known)
    if extra:
        raise BadInput(f"weights file: unknown field {extra[0]!r}")
    if "vocab" in obj:
        vocab = _str_list(obj["vocab"], "vocab")
    elif task is not None:
        vocab = tuple(task.vocab)
    else:
        raise BadInput("weights file: \"vocab\" is missing (and no task gives a default)")
    if "classes" in obj:
        classes = _str_list(obj["classes"], "classes")
    elif task is not None:
        classes = tuple(task.classes)
    else:
        raise BadInput("weights file: \"classes\" is missing")
    max_length = obj.get("max_length", task.length if task is not None else None)
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise BadInput(f"weights file: \"max_length\" must be a positive int, got {max_length!r}")
    layers_raw = obj.get("layers")
    if not isinstance(layers_raw, list) or not layers_raw:
        raise BadInput("weights file: \"layers\" must be a non-empty list of layers")
    first = layers_raw[0]
    if not isinstance(first, list) or not first or not isinstance(first[0], dict):
        raise BadInput("weights file: layers[0] must be a non-empty list of heads ({\"W_QK\", \"W_V\"})")
    qk0 = first[0].get("W_QK")
    if not isinstance(qk0, list) or not qk0:
        raise BadInput("weights file: layers[0][0].W_QK must be a non-empty list of rows")
    d = len(qk0)
    if "layout" in obj:
        lay_raw = obj["layout"]
        if not isinstance(lay_raw, list) or not lay_raw:
            raise BadInput("weights file: \"layout\" must be a list of {\"name\", \"size\"}")
        blocks = []
        for i, b in enumerate(lay_raw):
            if not isinstance(b, dict) or set(b) != {"name", "size"}:
                raise BadInput(f"weights file: layout[{i}] must be {{\"name\": str, \"size\": int}}")
            try:
                blocks.append(Block(b["name"], b["size"]))
            except BadInput as exc:
                raise BadInput(f"weights file: layout[{i}]: {exc}") from None
        layout = Layout(tuple(blocks))
        if layout.dim != d:
            raise BadInput(f"weights file: layout sizes add up to {layout.dim} but W_QK is {d}x{d}")
    else:
        layout = Layout.of(("token", len(vocab)), ("position", max_length)).padded(d, "scratch")
    layers = []
    for li, layer in enumerate(layers_raw):
        if not isinstance(layer, list) or not layer:
            raise BadInput(f"weights file: layers[{li}] must be a non-empty list of heads")
        heads = []
        for hi, head in enumerate(layer):
            where = f"layers[{li}][{hi}]"
            if not isinstance(head, dict):
                raise BadInput(f"weights file: {where} must be an object with W_QK and W_V")
            for key in ("W_QK", "W_V"):
                if key not in head:
                    raise BadInput(f"weights file: {where}.{key} is missing")
            extra = sorted(set(head) - {"W_QK", "W_V"})
            if extra:
                raise BadInput(f"weights file: {where} has unknown field {extra[0]!r}")
            heads.append(Head(_matrix(head["W_QK"], f"{where}.W_QK", (d, d)), _matrix(head["W_V"], f"{where}.W_V", (d, d))))
        layers.append(tuple(heads))
    if "W_O" not in obj:
        raise BadInput("weights file: \"W_O\" is missing")
    W_O = _matrix(obj["W_O"], "W_O", (len(classes), d))
    name = obj.get("name", "")
    if not isinstance(name, str):
        raise BadInput("weights file: \"name\" must be a string")
    return Model(vocab, max_length, classes, layout, tuple(layers), W_O, name=name)
