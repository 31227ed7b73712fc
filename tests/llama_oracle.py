"""An independent evaluator of Hugging Face Llama-family checkpoints (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM without a sliding window), for the tests.

Written from transformers' own definitions (models/llama/modeling_llama.py: LlamaRMSNorm,
LlamaRotaryEmbedding.compute_default_rope_parameters and forward, rotate_half, apply_rotary_pos_emb,
repeat_kv, eager_attention_forward, LlamaMLP, LlamaDecoderLayer, LlamaForCausalLM; qwen2: q/k/v biases),
reading config.json's dict and the state dict under transformers' own names.  It does not import
depthcert and knows nothing of its one-hot stream, its Norm, Head or Rotary objects, or its interval
and ball arithmetic.

    x_p = embed_tokens[t_p]
    per layer: y = RMS(x) w_in;  q, k, v = y Wq^T + bq, ...   (heads of head_dim; key/value head h // n_rep)
               inv_freq_i = 1 / theta^(2i / head_dim),  freqs = p inv_freq,  emb = cat(freqs, freqs)
               q <- q cos(emb) + rotate_half(q) sin(emb),  rotate_half(x) = cat(-x2, x1)   (k likewise)
               A = softmax(q . k / sqrt(head_dim)) over keys <= p;  x += o_proj(concat_h A v)
               x += down_proj(act(gate_proj(z)) * up_proj(z)),  z = RMS(x) w_post
    logits = lm_head(RMS(x) w_norm),  RMS(x) = x / sqrt(mean(x^2) + eps)

The real function: theta is the decimal config.json holds (Fraction of its shortest repr, which is
what json wrote), eps the float64; every angle, cos and sin is an mpmath number at DPS digits (where
transformers computes them in float32).  Exact Fractions while the values are rational (the
embedding and its mean square), mpmath after that.  A cross-check, not a certificate: margins within
TIE of 0 count as exact ties.
"""
from __future__ import annotations

from fractions import Fraction

import mpmath

DPS = 60
TIE = mpmath.mpf("1e-40")


def _num(v):
    if isinstance(v, Fraction):
        return mpmath.mpf(v.numerator) / v.denominator
    return v


def _exact(a):
    """A numpy float64 array as nested lists of Fractions (exact)."""
    if getattr(a, "ndim", 0) == 0:
        return Fraction(float(a))
    return [_exact(x) for x in a]


def _mpf(a):
    if getattr(a, "ndim", 0) == 0:
        return mpmath.mpf(float(a))
    return [_mpf(x) for x in a]


def _linear(x, W, b=None):
    """nn.Linear: y_i = sum_j W[i][j] x_j + b_i."""
    out = [sum(_num(xj) * wj for xj, wj in zip(x, row)) for row in W]
    return out if b is None else [a + c for a, c in zip(out, b)]


def _rms(x, w, eps):
    """LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight (as real numbers)."""
    if all(isinstance(v, Fraction) for v in x):
        var = sum((v * v for v in x), Fraction(0)) / len(x) + Fraction(eps)
        s = mpmath.sqrt(_num(var))
    else:
        x = [_num(v) for v in x]
        s = mpmath.sqrt(sum(v * v for v in x) / len(x) + _num(Fraction(eps)))
    return [(mpmath.mpf(0) if v == 0 else _num(v) / s) * wi for v, wi in zip(x, w)]


def _act(kind, x):
    if kind in ("silu", "swish"):
        return x / (1 + mpmath.exp(-x))
    if kind in ("gelu", "gelu_python"):
        return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
    if kind in ("gelu_new", "gelu_pytorch_tanh", "gelu_python_tanh"):
        return x * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x ** 3))) / 2
    if kind == "gelu_fast":
        return x * (1 + mpmath.tanh(x * mpmath.mpf("0.7978845608") * (1 + mpmath.mpf("0.044715") * x * x))) / 2
    raise ValueError(kind)


class LlamaOracle:
    """The forward pass of one checkpoint (config.json dict, state dict of numpy float64 arrays)."""

    def __init__(self, cfg: dict, sd: dict, rotary_dim: int | None = None):
        """rotary_dim: rotate only the first r coordinates of each head (partial rotary as transformers'
        GPT-NeoX / Phi write it: q_rot = q[:r] turned with inv_freq over r, q[r:] passed through)."""
        self.cfg = cfg
        self.p = {k: _exact(v) if k == "model.embed_tokens.weight" else _mpf(v) for k, v in sd.items()}
        if cfg.get("tie_word_embeddings", False):
            self.p["lm_head.weight"] = _mpf(sd["model.embed_tokens.weight"])
        rope = cfg.get("rope_parameters") or {}
        theta = rope.get("rope_theta", cfg.get("rope_theta"))
        self.theta = Fraction(repr(theta)) if isinstance(theta, float) else Fraction(theta)
        self.heads = cfg["num_attention_heads"]
        self.kv = cfg.get("num_key_value_heads") or self.heads
        self.dh = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.rotary_dim = rotary_dim or self.dh
        self._memo = {}

    def _cos_sin(self, p: int):
        """cos(emb), sin(emb) of position p (head_dim entries each)."""
        key = ("rope", p)
        if key not in self._memo:
            dim = self.rotary_dim
            theta = _num(self.theta)
            inv = [1 / theta ** (mpmath.mpf(2 * i) / dim) for i in range(dim // 2)]
            emb = [p * f for f in inv] * 2
            self._memo[key] = ([mpmath.cos(a) for a in emb], [mpmath.sin(a) for a in emb])
        return self._memo[key]

    def _rope(self, x, p: int):
        cos, sin = self._cos_sin(p)
        x, rest = x[:self.rotary_dim], list(x[self.rotary_dim:])
        h = len(x) // 2
        rot = [-v for v in x[h:]] + list(x[:h])
        return [a * c + r * s for a, c, r, s in zip(x, cos, rot, sin)] + rest

    def logits(self, tokens) -> list:
        """The logits at the last position (mpf)."""
        c, P = self.cfg, self.p
        with mpmath.workdps(DPS):
            n = len(tokens)
            xs = [list(P["model.embed_tokens.weight"][t]) for t in tokens]
            n_rep = self.heads // self.kv
            dh = self.dh
            for li in range(c["num_hidden_layers"]):
                pre = f"model.layers.{li}."
                last = li == c["num_hidden_layers"] - 1
                ys = [_rms(x, P[pre + "input_layernorm.weight"], self.eps) for x in xs]
                a = pre + "self_attn."

                def proj(name, y):
                    return _linear(y, P[a + name + "_proj.weight"], P.get(a + name + "_proj.bias"))

                qs = [proj("q", y) for y in ys]
                ks = [proj("k", y) for y in ys]
                vs = [proj("v", y) for y in ys]
                queries = [n - 1] if last else list(range(n))
                new = []
                for q in queries:
                    concat = []
                    for h in range(self.heads):
                        g = h // n_rep  # repeat_kv
                        qh = self._rope(qs[q][h * dh:(h + 1) * dh], q)
                        kh = [self._rope(ks[j][g * dh:(g + 1) * dh], j) for j in range(q + 1)]
                        s = [sum(x * y for x, y in zip(qh, k)) / mpmath.sqrt(dh) for k in kh]
                        top = max(s)
                        e = [mpmath.exp(v - top) for v in s]
                        z = sum(e)
                        concat += [sum(e[j] * vs[j][g * dh + i] for j in range(q + 1)) / z for i in range(dh)]
                    o = _linear(concat, P[a + "o_proj.weight"], P.get(a + "o_proj.bias"))
                    x = [_num(u) + v for u, v in zip(xs[q], o)]
                    zv = _rms(x, P[pre + "post_attention_layernorm.weight"], self.eps)
                    m = pre + "mlp."
                    gate = _linear(zv, P[m + "gate_proj.weight"], P.get(m + "gate_proj.bias"))
                    up = _linear(zv, P[m + "up_proj.weight"], P.get(m + "up_proj.bias"))
                    hid = [_act(c.get("hidden_act", "silu"), g_) * u for g_, u in zip(gate, up)]
                    d = _linear(hid, P[m + "down_proj.weight"], P.get(m + "down_proj.bias"))
                    new.append([u + v for u, v in zip(x, d)])
                xs = new
            y = _rms(xs[-1], P["model.norm.weight"], self.eps)
            return _linear(y, P["lm_head.weight"])

    def margin(self, tokens, label: int):
        """logit[label] - max of the other logits (mpf)."""
        lg = self.logits(tokens)
        return lg[label] - max(v for i, v in enumerate(lg) if i != label)
