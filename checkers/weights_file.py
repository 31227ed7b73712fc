"""Exact weights in and out: the "depthcert.weights" JSON format (versions 1 and 2).

    {"format": "depthcert.weights", "version": 1 | 2,
     "name": str (optional),
     "vocab": [token, ...]        optional: defaults to the task's embedding order
     "max_length": int            optional: defaults to the task's sequence length
     "classes": [name, ...]       optional: defaults to the task's classes (W_O row order)
     "layout": [{"name": str, "size": int}, ...]   optional; sizes must add up to d'
     "layers": [LAYER, ...]
     "W_O": M,
     version 2 only:
     "outputs": "last" | "all"    optional, default "last"
     "constant_row": true | false optional, default false: H0 gets a row of ones at V + max_length}

    LAYER: [HEAD, ...] (version 1 and 2), or, version 2 only,
           {"heads": [HEAD, ...], "causal": bool (default false),
            "mlp": {"W1": M, "b1": VEC, "W2": M, "b2": VEC} (optional)}
    HEAD:  {"W_QK": M, "W_V": M}, version 2 may add "attention": "relu" | "hardmax" | "softmax"
           (default relu), "scale": RATIONAL and "scale_sqrt_divisor": RATIONAL (softmax only,
           both default 1: the scores are multiplied by scale / sqrt(scale_sqrt_divisor))
    M: a list of rows, VEC a list; each entry an int or a "p/q" string (exact; floats refused).

H0 = [one-hot token in vocab order; one-hot position (max_length rows); ones if constant_row;
zeros up to d'].  `model_to_json` writes version 1 for the paper's model class, so exports of
the paper's constructions are unchanged, and version 2 otherwise.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import MAX_DIM, Block, Layout
from depthcert.checkers.model import ATTENTION_KINDS, MLP, OUTPUT_KINDS, Head, Layer, Model
from depthcert.checkers.rational import format_rational, parse_rational

FORMAT = "depthcert.weights"
VERSION = 2
VERSIONS = (1, 2)


def matrix_to_json(M: np.ndarray) -> list[list]:
    return [[format_rational(v) for v in row] for row in M]


def _head_to_json(h: Head, v2: bool) -> dict:
    out = {"W_QK": matrix_to_json(h.W_QK), "W_V": matrix_to_json(h.W_V)}
    if v2 and h.attention != "relu":
        out["attention"] = h.attention
    if v2 and h.attention == "softmax":
        out["scale"] = format_rational(h.scale)
        if h.scale_sqrt_divisor != 1:
            out["scale_sqrt_divisor"] = format_rational(h.scale_sqrt_divisor)
    return out


def _layer_to_json(layer: Layer, v2: bool):
    heads = [_head_to_json(h, v2) for h in layer]
    if not v2 or (not layer.causal and layer.mlp is None):
        return heads
    out = {"heads": heads, "causal": layer.causal}
    if layer.mlp is not None:
        m = layer.mlp
        out["mlp"] = {"W1": matrix_to_json(m.W1), "b1": [format_rational(v) for v in m.b1],
                      "W2": matrix_to_json(m.W2), "b2": [format_rational(v) for v in m.b2]}
    return out


def model_to_json(model: Model) -> dict:
    if model.has_norm_or_smooth:
        raise BadInput("a weights file holds no LayerNorm/RMSNorm or gelu/silu MLP, no gated MLP, no rotary head and "
                       "no parallel layer: keep such a model as its TransformerLens checkpoint or Hugging Face folder")
    v2 = not model.is_plain
    out = {
        "format": FORMAT,
        "version": 2 if v2 else 1,
        "name": model.name,
        "vocab": list(model.vocab),
        "max_length": model.max_length,
        "classes": list(model.classes),
        "layout": model.layout.to_json(),
        "layers": [_layer_to_json(layer, v2) for layer in model.layers],
        "W_O": matrix_to_json(model.W_O),
    }
    if v2:
        out["outputs"] = model.outputs
        out["constant_row"] = model.constant_row
    return out


def _matrix(value, where: str, shape: tuple[int | None, int]) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise BadInput(f"{where}: expected a non-empty list of rows")
    rows, cols = shape
    if rows is not None and len(value) != rows:
        raise BadInput(f"{where}: has {len(value)} rows, expected {rows}")
    out = np.empty((len(value), cols), dtype=object)
    seen: dict = {}
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise BadInput(f"{where}[{i}]: expected a list (a row)")
        if len(row) != cols:
            raise BadInput(f"{where}[{i}]: has {len(row)} entries, expected {cols}")
        out[i] = _parse_row(row, seen, where, i)
    out.flags.writeable = False
    return out


def _parse_row(row: list, seen: dict, where: str, i: int) -> list:
    """[_parse_once(v, ...) for v in row], the cached entries looked up in one pass first (a
    call per entry showed in profiles): `seen` holds (str or int, value) keys only, so a float,
    bool or other entry is never found there and goes on to parse_rational's refusal."""
    get = seen.get
    try:
        vals = [get((type(v), v)) for v in row]
    except TypeError:  # an unhashable entry (a list, a dict): parsed one by one, refused there
        vals = [None] * len(row)
    for j, q in enumerate(vals):
        if q is None:
            vals[j] = _parse_once(row[j], seen, where, i, j)
    return vals


def _parse_once(v, seen: dict, where: str, i: int, j: int | None = None) -> Fraction:
    """parse_rational(v), each distinct entry parsed once per matrix: weights repeat (0, 1, a few
    small multiples), and a Fraction per entry, with its regex, gcd and error text, dominated
    reading a weights file.  Keyed by (type, value), so True (== 1) or 1.0 never meet 1's
    Fraction: they still reach parse_rational and its refusal."""
    key = (type(v), v) if type(v) in (str, int) else None
    if key is not None:
        q = seen.get(key)
        if q is not None:
            return q
    q = parse_rational(v, f"{where}[{i}]" if j is None else f"{where}[{i}][{j}]")
    if key is not None:
        seen[key] = q
    return q


def _vector(value, where: str, size: int) -> np.ndarray:
    if not isinstance(value, list):
        raise BadInput(f"{where}: expected a list of {size} numbers")
    if len(value) != size:
        raise BadInput(f"{where}: has {len(value)} entries, expected {size}")
    out = np.empty(size, dtype=object)
    seen: dict = {}
    out[:] = [_parse_once(v, seen, where, i) for i, v in enumerate(value)]
    out.flags.writeable = False
    return out


def _bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise BadInput(f"{where}: expected true or false, got {value!r}")
    return value


def _head(head, where: str, d: int, v2: bool) -> Head:
    if not isinstance(head, dict):
        raise BadInput(f"weights file: {where} must be an object with W_QK and W_V")
    for key in ("W_QK", "W_V"):
        if key not in head:
            raise BadInput(f"weights file: {where}.{key} is missing")
    allowed = {"W_QK", "W_V"} | ({"attention", "scale", "scale_sqrt_divisor"} if v2 else set())
    extra = sorted(set(head) - allowed)
    if extra:
        hint = " (attention and scale need \"version\": 2)" if extra[0] in ("attention", "scale") else ""
        raise BadInput(f"weights file: {where} has unknown field {extra[0]!r}{hint}")
    kind = head.get("attention", "relu")
    if kind not in ATTENTION_KINDS:
        raise BadInput(f"weights file: {where}.attention must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
    scale, root = Fraction(1), Fraction(1)
    for key in ("scale", "scale_sqrt_divisor"):
        if key in head:
            if kind != "softmax":
                raise BadInput(f"weights file: {where}.{key} applies to softmax heads only")
            value = parse_rational(head[key], f"{where}.{key}")
            if value <= 0:
                raise BadInput(f"weights file: {where}.{key} must be positive, got {value}")
            if key == "scale":
                scale = value
            else:
                root = value
    return Head(_matrix(head["W_QK"], f"{where}.W_QK", (d, d)), _matrix(head["W_V"], f"{where}.W_V", (d, d)),
                attention=kind, scale=scale, scale_sqrt_divisor=root)


def _mlp(obj, where: str, d: int) -> MLP:
    if not isinstance(obj, dict):
        raise BadInput(f"weights file: {where} must be an object with W1, b1, W2, b2")
    for key in ("W1", "b1", "W2", "b2"):
        if key not in obj:
            raise BadInput(f"weights file: {where}.{key} is missing")
    extra = sorted(set(obj) - {"W1", "b1", "W2", "b2"})
    if extra:
        raise BadInput(f"weights file: {where} has unknown field {extra[0]!r}")
    W1 = _matrix(obj["W1"], f"{where}.W1", (None, d))
    f = W1.shape[0]
    from depthcert.checkers.layout import MAX_DIM

    if f > MAX_DIM:
        raise BadInput(f"weights file: {where}.W1 has {f} hidden units (limit {MAX_DIM})")
    return MLP(W1, _vector(obj["b1"], f"{where}.b1", f), _matrix(obj["W2"], f"{where}.W2", (d, f)),
               _vector(obj["b2"], f"{where}.b2", d))


def _layer(layer, li: int, d: int, v2: bool) -> Layer:
    where = f"layers[{li}]"
    if isinstance(layer, list):
        if not layer:
            raise BadInput(f"weights file: {where} must be a non-empty list of heads")
        return Layer(tuple(_head(h, f"{where}[{hi}]", d, v2) for hi, h in enumerate(layer)))
    if not v2:
        raise BadInput(f"weights file: {where} must be a non-empty list of heads (a layer object needs \"version\": 2)")
    if not isinstance(layer, dict):
        raise BadInput(f"weights file: {where} must be a list of heads or an object {{\"heads\", \"causal\", \"mlp\"}}")
    extra = sorted(set(layer) - {"heads", "causal", "mlp"})
    if extra:
        raise BadInput(f"weights file: {where} has unknown field {extra[0]!r}")
    heads_raw = layer.get("heads", [])
    if not isinstance(heads_raw, list):
        raise BadInput(f"weights file: {where}.heads must be a list of heads")
    heads = tuple(_head(h, f"{where}.heads[{hi}]", d, v2) for hi, h in enumerate(heads_raw))
    causal = _bool(layer.get("causal", False), f"{where}.causal")
    mlp = _mlp(layer["mlp"], f"{where}.mlp", d) if layer.get("mlp") is not None else None
    if not heads and mlp is None:
        raise BadInput(f"weights file: {where} has no heads and no mlp")
    return Layer(heads, causal, mlp)


def _first_dim(layers_raw) -> int:
    """d' from the first W_QK (or W1) found in the layers."""
    for li, layer in enumerate(layers_raw):
        heads = layer if isinstance(layer, list) else (layer.get("heads") if isinstance(layer, dict) else None)
        where = f"layers[{li}]" if isinstance(layer, list) else f"layers[{li}].heads"
        if isinstance(heads, list) and heads:
            if not isinstance(heads[0], dict):
                raise BadInput(f"weights file: {where}[0] must be an object with W_QK and W_V")
            qk0 = heads[0].get("W_QK")
            if not isinstance(qk0, list) or not qk0:
                raise BadInput(f"weights file: {where}[0].W_QK must be a non-empty list of rows")
            return len(qk0)
        if isinstance(layer, dict) and isinstance(layer.get("mlp"), dict):
            W1 = layer["mlp"].get("W1")
            if isinstance(W1, list) and W1 and isinstance(W1[0], list) and W1[0]:
                return len(W1[0])
            raise BadInput(f"weights file: layers[{li}].mlp.W1 must be a non-empty list of rows")
        if isinstance(layer, list) or not isinstance(layer, dict):
            break
    raise BadInput("weights file: layers[0] must be a non-empty list of heads ({\"W_QK\", \"W_V\"})")


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
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version not in VERSIONS:  # true == 1
        raise BadInput(f"weights file: unsupported \"version\" {version!r} (this tool reads 1 and 2)")
    v2 = version == 2
    known = {"format", "version", "name", "vocab", "max_length", "classes", "layout", "layers", "W_O", "notes"}
    if v2:
        known |= {"outputs", "constant_row"}
    extra = sorted(set(obj) - known)
    if extra:
        hint = " (it needs \"version\": 2)" if extra[0] in ("outputs", "constant_row") else ""
        raise BadInput(f"weights file: unknown field {extra[0]!r}{hint}")
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
    outputs = obj.get("outputs", "last")
    if outputs not in OUTPUT_KINDS:
        raise BadInput(f"weights file: \"outputs\" must be \"last\" or \"all\", got {outputs!r}")
    constant_row = _bool(obj.get("constant_row", False), "weights file: constant_row")
    layers_raw = obj.get("layers")
    if not isinstance(layers_raw, list) or not layers_raw:
        raise BadInput("weights file: \"layers\" must be a non-empty list of layers")
    d = _first_dim(layers_raw)
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
        if d > MAX_DIM:
            raise BadInput(f"weights file: d' = {d} is larger than the limit {MAX_DIM}")
        base = [("token", len(vocab)), ("position", max_length)] + ([("one", 1)] if constant_row else [])
        layout = Layout.of(*base).padded(d, "scratch")
    layers = [_layer(layer, li, d, v2) for li, layer in enumerate(layers_raw)]
    if "W_O" not in obj:
        raise BadInput("weights file: \"W_O\" is missing")
    W_O = _matrix(obj["W_O"], "W_O", (len(classes), d))
    name = obj.get("name", "")
    if not isinstance(name, str):
        raise BadInput("weights file: \"name\" must be a string")
    return Model(vocab, max_length, classes, layout, tuple(layers), W_O, name=name, outputs=outputs,
                 constant_row=constant_row)


def load_weights(path: str, task=None) -> Model:
    """Read a weights file (versions 1 and 2); `task` supplies defaults for vocab/length/classes."""
    from depthcert.checkers.atomic import read_json

    return model_from_json(read_json(path, "weights"), task)


def save_weights(model: Model, path: str) -> None:
    """Write `model` as a weights file, atomically (version 1 for the paper's class, else 2)."""
    from depthcert.checkers.atomic import write_json_atomic

    write_json_atomic(path, model_to_json(model))
