"""Reading and writing tensor checkpoints without transformer-lens: safetensors (read by this
module with numpy alone: an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw little-endian data) and torch's `.pt` (needs torch).

Every float32 / float16 / bfloat16 / float64 value is returned as a float64 numpy array, which
holds each of them exactly (float64 has more exponent and mantissa bits than all four)."""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from depthcert.checkers.errors import BadInput

_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "BOOL": "|b1",
                       "U8": "|u1", "I8": "|i1", "BF16": "<u2"}
MAX_HEADER = 100 * 2**20


def read_safetensors(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors as numpy arrays, float kinds exactly as float64; metadata strings)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) < 8:
        raise BadInput(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or 8 + n > len(raw):
        raise BadInput(f"{path}: not a safetensors file (header length {n} does not fit the file)")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadInput(f"{path}: not a safetensors file (the header is not JSON)") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path}: not a safetensors file (the header is not a JSON object)")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise BadInput(f"{path}: safetensors __metadata__ is not an object")
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        try:
            dtype, shape, (lo, hi) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{path}: tensor {name!r} has a malformed header entry") from None
        if dtype not in _SAFETENSORS_DTYPES:
            raise BadInput(f"{path}: tensor {name!r} has dtype {dtype}, not one of {', '.join(_SAFETENSORS_DTYPES)}")
        np_dtype = np.dtype(_SAFETENSORS_DTYPES[dtype])
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= lo <= hi <= len(data)) or hi - lo != count * np_dtype.itemsize:
            raise BadInput(f"{path}: tensor {name!r} has byte range {lo}..{hi}, which does not hold shape {shape}")
        arr = np.frombuffer(data[lo:hi], dtype=np_dtype).reshape(shape)
        if dtype == "BF16":  # the top 16 bits of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.copy()
    return out, {str(k): str(v) for k, v in meta.items()}


def write_safetensors(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write float32/float64/int64 numpy arrays as a safetensors file (atomically)."""
    kinds = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i8"): "I64", np.dtype("<f2"): "F16"}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        arr = arr.astype(arr.dtype.newbyteorder("<"))
        if arr.dtype not in kinds:
            raise ValueError(f"cannot write dtype {arr.dtype} ({name})")
        blob = arr.tobytes()
        header[name] = {"dtype": kinds[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for blob in blobs:
            fh.write(blob)
    os.replace(tmp, path)


def _numpy_scalar_globals() -> list:
    """numpy scalars and dtypes, which torch's weights-only unpickler refuses by default: the config
    of a HookedTransformer (cfg.to_dict()) holds attn_scale as a numpy float64.  Both rebuild data
    (a dtype and its bytes) and run no code; listed under numpy 2's and numpy 1's module names."""
    core = getattr(np, "_core", None) or np.core
    scalar = core.multiarray.scalar
    return [(scalar, "numpy._core.multiarray.scalar"), (scalar, "numpy.core.multiarray.scalar"), np.dtype,
            *{type(np.dtype(c)) for c in "?bhilqBHILQefdg"}]


def read_torch(path: str):
    """torch.load with weights_only=True (no code runs); tensors become float64 numpy arrays."""
    try:
        import torch
    except ImportError:
        raise BadInput(f"{path}: reading a .pt checkpoint needs torch (pip install 'depthcert[train]'), "
                       "or save it as safetensors") from None
    try:
        with torch.serialization.safe_globals(_numpy_scalar_globals()):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BadInput(f"cannot read {path}: No such file or directory") from None
    except Exception as exc:  # torch raises many kinds for a malformed file
        raise BadInput(f"{path}: not a torch checkpoint readable with weights_only=True ({type(exc).__name__})") from None

    def conv(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                return x.detach().to(torch.float64).numpy()  # exact for float16/bfloat16/float32
            return x.detach().numpy().copy()
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return x

    return conv(obj)


def float_arrays(sd: dict, shapes: dict, name: str, lacks=lambda key: "", shape_from: str = "") -> dict:
    """sd's entries that `shapes` names, as float64 arrays of exactly those shapes with every value
    finite; a missing entry (its message's tail: `lacks(key)`), a non-float one, a wrong shape or a
    NaN/infinity is refused.  `name` starts every message ("GPT-2 state dict: ...")."""
    out = {}
    for key, shape in shapes.items():
        if key not in sd:
            raise BadInput(f"{name} state dict lacks {key}" + lacks(key))
        arr = np.asarray(sd[key])
        if arr.dtype.kind != "f":
            raise BadInput(f"{name} state dict: {key} is not a float tensor (dtype {arr.dtype})")
        if tuple(arr.shape) != shape:
            raise BadInput(f"{name} state dict: {key} has shape {tuple(arr.shape)}, expected {shape}{shape_from}")
        arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            raise BadInput(f"{name} state dict: {key} has a NaN or infinite entry")
        out[key] = arr
    return out


def float_parameters(sd: dict, shapes: dict, name: str, *, tied: bool, embed: str, embed_short: str,
                     is_buffer, unexpected) -> dict[str, np.ndarray]:
    """The parameters `shapes` names, as float64 arrays of exactly those shapes with every value
    finite, from a Hugging Face state dict `sd`; with `tied`, an lm_head.weight that is present must
    equal the embedding `embed` (from_pretrained replaces it by the embedding); entries `is_buffer`
    accepts are dropped, and any other entry is refused with `unexpected(key)`, the reason's tail.
    `name` starts every message ("GPT-2 state dict: ...")."""
    for key in sd:
        if key not in shapes and not is_buffer(key) and not (key == "lm_head.weight" and tied):
            raise BadInput(f"{name} state dict: unexpected entry {key!r} ({unexpected(key)})")
    out = float_arrays(sd, shapes, name, lacks=lambda key: " (tie_word_embeddings is false)"
                       if key == "lm_head.weight" else "", shape_from=" from config.json")
    if tied and "lm_head.weight" in sd:
        lm = np.asarray(sd["lm_head.weight"])
        if lm.shape != out[embed].shape or not np.array_equal(lm, out[embed]):
            raise BadInput(f"{name} state dict: lm_head.weight differs from {embed}, but tie_word_embeddings is "
                           f"true (from_pretrained would replace it by {embed_short})")
    return out
