"""A plain numpy float forward of a TransformerLens checkpoint (float32 or float64), the float brute
force that `verify-model --compare-float` sets beside the certified decision.  It certifies
nothing: it is what a user runs without depthcert, written the way TransformerLens computes.

    x_k = W_E[t_k] + W_pos[k]
    per layer:  y = ln1(x);  q, k, v = y W_{Q,K,V}[h] + b;  A[h] = softmax((q . k) / sqrt(d_head)), causal
                x <- x + sum_h (A[h] v) W_O[h] + b_O
                x <- x + act(ln2(x) W_in + b_in) W_out + b_out      (unless attn_only)
    logits = ln_final(x) W_U + b_U

LN(x) = (x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b (LNPre without w, b), RMS(x) =
x / sqrt(mean(x^2) + eps) * w (RMSPre without w); act relu, gelu (erf), gelu_new / gelu_fast
(tanh), silu.  gelu_new's cube is x * x * x (two roundings; numpy's x ** 3 is a pow call, about 4x
slower here, and may differ from it in the last bit: a float brute force either way).  Every
operation runs in the chosen dtype (weights rounded to it; float32 checkpoints are exact in both).
Only the last position is unembedded.
"""
from __future__ import annotations

import math

import numpy as np

from depthcert.checkers.errors import BadInput

NORMS = (None, "LN", "LNPre", "RMS", "RMSPre")
ACTS = ("relu", "gelu", "gelu_new", "gelu_fast", "silu")


def _norm(x, kind, w, b, eps, dt):
    if kind is None:
        return x
    if kind.startswith("LN"):
        x = x - x.mean(-1, keepdims=True)
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + dt(eps))
    if kind == "LN":
        return x * w + b
    if kind == "RMS":
        return x * w
    return x


def _act(x, kind, dt):
    if kind == "relu":
        return np.maximum(x, dt(0))
    if kind == "gelu":
        from scipy.special import erf

        return dt(0.5) * x * (dt(1) + erf(x / dt(math.sqrt(2))))
    if kind == "gelu_new":
        return dt(0.5) * x * (dt(1) + np.tanh(dt(math.sqrt(2 / math.pi)) * (x + dt(0.044715) * (x * x * x))))
    if kind == "gelu_fast":
        return dt(0.5) * x * (dt(1) + np.tanh(x * dt(0.7978845608) * (dt(1) + dt(0.044715) * x * x)))
    if kind == "silu":
        return x / (dt(1) + np.exp(-x))
    raise BadInput(f"--compare-float: activation {kind!r} has no float forward here ({', '.join(ACTS)})")


class FloatForward:
    """The float forward of a (config dict, state dict) pair as read_checkpoint returns them."""

    def __init__(self, cfg: dict, sd: dict, dtype):
        self.dt = np.dtype(dtype).type
        self.cfg = cfg
        self.norm = cfg.get("normalization_type")
        self.norm = None if self.norm in (None, "None") else self.norm
        if self.norm not in NORMS:
            raise BadInput(f"--compare-float: normalization_type {self.norm!r} has no float forward here")
        self.final_norm = self.norm
        if self.norm in ("LN", "LNPre") and cfg.get("final_rms"):
            self.final_norm = "RMS" if self.norm == "LN" else "RMSPre"
        self.eps = float(cfg.get("eps", 1e-5))
        self.attn_only = bool(cfg.get("attn_only", False))
        self.act = None if self.attn_only else cfg.get("act_fn")
        if self.act is not None and self.act not in ACTS:
            raise BadInput(f"--compare-float: activation {self.act!r} has no float forward here ({', '.join(ACTS)})")
        self.causal = cfg.get("attention_dir", "causal") == "causal"
        self.scale = self.dt(math.sqrt(cfg["d_head"]) if cfg.get("use_attn_scale", True) else 1.0)
        self.p = {k: np.asarray(v, dtype=self.dt) for k, v in sd.items()
                  if not k.endswith((".attn.mask", ".attn.IGNORE"))}

    def _w(self, key):
        return self.p.get(key)

    def last_logits(self, ids: np.ndarray) -> np.ndarray:
        """(B, n) token ids -> (B, d_vocab_out) logits at the last position."""
        p, dt = self.p, self.dt
        B, n = ids.shape
        x = p["embed.W_E"][ids] + p["pos_embed.W_pos"][:n][None]
        mask = np.triu(np.ones((n, n), dtype=bool), 1)
        for li in range(self.cfg["n_layers"]):
            pre = f"blocks.{li}."
            y = _norm(x, self.norm, self._w(pre + "ln1.w"), self._w(pre + "ln1.b"), self.eps, dt)
            q = np.einsum("bpm,hmd->bhpd", y, p[pre + "attn.W_Q"]) + p[pre + "attn.b_Q"][None, :, None]
            k = np.einsum("bpm,hmd->bhpd", y, p[pre + "attn.W_K"]) + p[pre + "attn.b_K"][None, :, None]
            v = np.einsum("bpm,hmd->bhpd", y, p[pre + "attn.W_V"]) + p[pre + "attn.b_V"][None, :, None]
            s = np.matmul(q, k.transpose(0, 1, 3, 2)) / self.scale  # (B, H, query, key)
            if self.causal:
                s = np.where(mask, dt(-np.inf), s)
            s = np.exp(s - s.max(-1, keepdims=True))
            a = s / s.sum(-1, keepdims=True)
            z = np.matmul(a, v)  # (B, H, n, dh)
            x = x + np.einsum("bhpd,hdm->bpm", z, p[pre + "attn.W_O"]) + p[pre + "attn.b_O"]
            if not self.attn_only:
                y = _norm(x, self.norm, self._w(pre + "ln2.w"), self._w(pre + "ln2.b"), self.eps, dt)
                h = _act(y @ p[pre + "mlp.W_in"] + p[pre + "mlp.b_in"], self.act, dt)
                x = x + h @ p[pre + "mlp.W_out"] + p[pre + "mlp.b_out"]
        last = _norm(x[:, -1], self.final_norm, self._w("ln_final.w"), self._w("ln_final.b"), self.eps, dt)
        return last @ p["unembed.W_U"] + p["unembed.b_U"]


def float_correct(fwd: FloatForward, ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per point: the label's float logit strictly above every other float logit (a NaN is not)."""
    lg = fwd.last_logits(ids)
    rows = np.arange(len(ids))
    own = lg[rows, labels].copy()
    lg[rows, labels] = -np.inf
    return own > lg.max(axis=1)


MAX_LISTED = 100  # disagreements listed per dtype (the counts are complete)
MAX_BATCH_ENTRIES = 1 << 25  # activations per batch of the float forward (about 256 MB in float64)


def compare_with_verdict(cfg: dict, sd: dict, task, verdict, model=None, dtypes=("float32", "float64"),
                         batch_size: int = 4096, forward=None) -> dict:
    """For each dtype: the float brute force over every point of `task` and where it disagrees with
    the certified decision `verdict` (an AccuracyVerdict) of the exact `model` (whose names map the
    task's tokens and classes to embedding rows and logits, as the certified run maps them; None:
    task id k is row k; forward: the float forward's class, FloatForward by default, called as
    forward(cfg, sd, dtype)).  A point the certificate left undecided
    is not a disagreement; it is counted apart.  Returns {dtype: {"correct", "wrong", "seconds",
    "disagreements", "float_correct_certified_wrong", "float_wrong_certified_correct",
    "undecided", "first_disagreements": [{"point", "certified", "float"}]}}."""
    import time

    if task.outputs != "last":
        raise BadInput("--compare-float reads the last position only; this dataset labels every position")
    tokens, class_rows = None, None
    if model is not None:
        from depthcert.checkers.exhaustive import check_compatible, token_rows

        class_map = check_compatible(model, task)
        class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
        tokens = token_rows(model, task)
    wrong = np.zeros(task.size, dtype=bool)
    wrong[np.asarray(verdict.wrong, dtype=np.int64)] = True
    undecided = np.zeros(task.size, dtype=bool)
    undecided[np.asarray(verdict.undecided, dtype=np.int64)] = True
    n, dm, H = task.length, int(cfg["d_model"]), int(cfg["n_heads"])
    per_point = n * (4 * dm + int(cfg.get("d_mlp") or 0) + 2 * H * n + 4 * H * int(cfg["d_head"]))
    batch_size = max(1, min(batch_size, MAX_BATCH_ENTRIES // max(per_point, 1)))  # bounded memory per batch
    out = {}
    for name in dtypes:
        fwd = (forward or FloatForward)(cfg, sd, np.dtype(name))
        t0 = time.perf_counter()
        ok = np.zeros(task.size, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            for b in task.batches(batch_size):
                ids = b.ids if tokens is None else tokens[b.ids]
                labels = b.labels if class_rows is None else class_rows[b.labels]
                ok[b.index] = float_correct(fwd, ids, labels)
        seconds = time.perf_counter() - t0
        decided = ~undecided
        fc_cw = np.flatnonzero(decided & ok & wrong)
        fw_cc = np.flatnonzero(decided & ~ok & ~wrong)
        both = np.sort(np.concatenate([fc_cw, fw_cc]))
        out[name] = {"correct": int(ok.sum()), "wrong": int(task.size - ok.sum()), "seconds": round(seconds, 3),
                     "disagreements": int(len(both)), "float_correct_certified_wrong": int(len(fc_cw)),
                     "float_wrong_certified_correct": int(len(fw_cc)),
                     "undecided_float_correct": int((undecided & ok).sum()),
                     "first_disagreements": [{"point": int(i), "certified": "wrong" if wrong[i] else "correct",
                                              "float": "correct" if ok[i] else "wrong"} for i in both[:MAX_LISTED]]}
    return out
