"""An independent evaluator of TransformerLens checkpoints with LayerNorm / RMSNorm and smooth MLPs.

Written for the tests from TransformerLens's own definitions (components/layer_norm.py,
layer_norm_pre.py, rms_norm.py, rms_norm_pre.py, utilities/activation_functions.py,
components/abstract_attention.py), reading the config dict and the state dict directly: it does
not import depthcert, and it knows nothing of depthcert's one-hot stream, its Norm objects or its
interval and ball arithmetic.

    x_k = W_E[t_k] + W_pos[k]
    per block: y = ln1(x); q, k, v per head; A = softmax(q.k / sqrt(d_head)) over keys <= query
               (causal); x += sum_h (A v_h) W_O[h] + b_O;  x += act(ln2(x) W_in + b_in) W_out + b_out
    logits = ln_final(x) W_U + b_U       (ln_final RMS when final_rms)
    LN(x) = w (x - mean) / sqrt(mean((x - mean)^2) + eps) + b   (Pre: w = 1, b = 0; RMS: no centering, no b)

Exact Fractions while the values are rational (the embedding, and a normalization's centering and
variance of it: a constant row has x - mean = 0 exactly), mpmath at DPS digits after that.  eps
is the config's float64, exactly.  A cross-check, not a certificate: margins within TIE of 0 are
treated as exact ties.
"""
from __future__ import annotations

from fractions import Fraction

import mpmath

DPS = 60
TIE = mpmath.mpf("1e-40")


def _num(v):
    """A Fraction as an mpf at the working precision (an mpf stays)."""
    if isinstance(v, Fraction):
        return mpmath.mpf(v.numerator) / v.denominator
    return v


def _matrix(a):
    """A numpy float64 array as nested lists of exact Fractions."""
    if getattr(a, "ndim", 0) == 0:
        return Fraction(float(a))
    return [_matrix(x) for x in a]


def _mpf(a):
    if getattr(a, "ndim", 0) == 0:
        return mpmath.mpf(float(a))  # a float64 is exact in an mpf
    return [_mpf(x) for x in a]


def _norm(kind, x, eps, w=None, b=None):
    """TransformerLens's LayerNorm / LayerNormPre / RMSNorm / RMSNormPre of one vector."""
    k = len(x)
    if kind in ("LN", "LNPre"):
        mean = sum(x, Fraction(0)) / k if all(isinstance(v, Fraction) for v in x) else sum(map(_num, x)) / k
        c = [v - mean for v in x]
    else:
        c = list(x)
    if all(isinstance(v, Fraction) for v in c):
        var = sum((v * v for v in c), Fraction(0)) / k + Fraction(eps)
        scale = mpmath.sqrt(_num(var))
        n = [mpmath.mpf(0) if v == 0 else _num(v) / scale for v in c]
    else:
        c = [_num(v) for v in c]
        scale = mpmath.sqrt(sum(v * v for v in c) / k + _num(Fraction(eps)))
        n = [v / scale for v in c]
    if w is not None:
        n = [_num(wi) * ni for wi, ni in zip(w, n)]
    if b is not None:
        n = [ni + _num(bi) for ni, bi in zip(n, b)]
    return n


def _act(kind, x):
    x = _num(x)
    if kind == "relu":
        return x if x > 0 else mpmath.mpf(0)
    if kind == "gelu":
        return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
    if kind == "silu":
        return x / (1 + mpmath.exp(-x))
    if kind in ("gelu_new", "gelu_pytorch_tanh"):
        return x * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x ** 3))) / 2
    if kind == "gelu_fast":
        return x * (1 + mpmath.tanh(x * mpmath.mpf("0.7978845608") * (1 + mpmath.mpf("0.044715") * x * x))) / 2
    raise ValueError(kind)


def _vecmat(x, W):
    """x (len a) times W (a x b)."""
    return [sum(_num(x[i]) * W[i][j] for i in range(len(x))) for j in range(len(W[0]))]


class TLOracle:
    """The forward pass of one checkpoint (cfg dict, state dict of numpy arrays)."""

    def __init__(self, cfg: dict, sd: dict):
        self.cfg = cfg
        # the embeddings as exact Fractions; every other float64 weight as an (exact) mpf
        self.p = {k: _matrix(v) if k in ("embed.W_E", "pos_embed.W_pos") else _mpf(v) for k, v in sd.items()}
        self.norm = cfg.get("normalization_type")
        self.eps = float(cfg.get("eps", 1e-5))
        self.final = self.norm
        self._memo = {}
        if self.norm in ("LN", "LNPre") and cfg.get("final_rms"):
            self.final = "RMS" if self.norm == "LN" else "RMSPre"

    def _ln(self, kind, prefix, x):
        if kind is None:
            return x
        return _norm(kind, x, self.eps, self.p.get(prefix + ".w"), self.p.get(prefix + ".b"))

    def logits(self, tokens) -> list:
        """The logits at the last position, as mpf numbers.  Layer 0 reads x_k, which depends on
        (k, t_k) only: its normalized vectors and projections are computed once per pair (memo)."""
        c, p = self.cfg, self.p
        with mpmath.workdps(DPS):
            n = len(tokens)
            xs = [[a + b for a, b in zip(p["embed.W_E"][t], p["pos_embed.W_pos"][k])] for k, t in enumerate(tokens)]
            causal = c.get("attention_dir", "causal") == "causal"
            scale = mpmath.sqrt(c["d_head"]) if c.get("use_attn_scale", True) else 1
            for li in range(c["n_layers"]):
                pre = f"blocks.{li}."
                last = li == c["n_layers"] - 1

                def memo(key, make):
                    if li:
                        return make()
                    key = (pre,) + key
                    if key not in self._memo:
                        self._memo[key] = make()
                    return self._memo[key]

                ys = [memo(("y", k, tokens[k]), lambda x=x: self._ln(self.norm, pre + "ln1", x)) for k, x in enumerate(xs)]

                def proj(j, h, w):
                    return memo((w, j, tokens[j], h), lambda: [
                        a + b for a, b in zip(_vecmat(ys[j], p[pre + "attn.W_" + w][h]), p[pre + "attn.b_" + w][h])])

                queries = [n - 1] if last else list(range(n))
                out = []
                for q in queries:
                    total = list(p[pre + "attn.b_O"])
                    for h in range(c["n_heads"]):
                        qv = proj(q, h, "Q")
                        keys = range(q + 1) if causal else range(n)
                        s = [sum(a * b for a, b in zip(qv, proj(j, h, "K"))) / scale for j in keys]
                        top = max(s)
                        e = [mpmath.exp(v - top) for v in s]
                        z = sum(e)
                        vals = [proj(j, h, "V") for j in keys]
                        mixed = [sum(e[i] * vals[i][d] for i in range(len(e))) / z for d in range(c["d_head"])]
                        total = [a + b for a, b in zip(total, _vecmat(mixed, p[pre + "attn.W_O"][h]))]
                    out.append(total)
                xs = [[_num(a) + b for a, b in zip(xs[q], o)] for q, o in zip(queries, out)]
                if not c.get("attn_only", False):
                    new = []
                    for x in xs:
                        y = self._ln(self.norm, pre + "ln2", x)
                        hid = [_act(c["act_fn"], a + b) for a, b in zip(_vecmat(y, p[pre + "mlp.W_in"]), p[pre + "mlp.b_in"])]
                        mo = [a + b for a, b in zip(_vecmat(hid, p[pre + "mlp.W_out"]), p[pre + "mlp.b_out"])]
                        new.append([a + b for a, b in zip(x, mo)])
                    xs = new
            y = self._ln(self.final, "ln_final", xs[-1])
            return [a + b for a, b in zip(_vecmat(y, p["unembed.W_U"]), p["unembed.b_U"])]

    def margin(self, tokens, label: int):
        """logit[label] - max of the other logits (mpf)."""
        lg = self.logits(tokens)
        return lg[label] - max(v for i, v in enumerate(lg) if i != label)
