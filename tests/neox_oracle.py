"""An independent evaluator of Hugging Face GPTNeoXForCausalLM checkpoints, for the tests.

Written from transformers' own definitions (models/gpt_neox/modeling_gpt_neox.py: GPTNeoXRotaryEmbedding.
compute_default_rope_parameters and forward, rotate_half, apply_rotary_pos_emb, GPTNeoXAttention (the
fused query_key_value viewed as (..., heads, 3 head_size) and chunked into q, k, v), eager_attention_forward,
GPTNeoXMLP, GPTNeoXLayer (use_parallel_residual), GPTNeoXModel, GPTNeoXForCausalLM; nn.LayerNorm),
reading config.json's dict and the state dict under transformers' names.  It does not import depthcert
and knows nothing of its one-hot stream, its Norm, Head or Rotary objects, or its interval and ball
arithmetic.

    x_p = embed_in[t_p]
    per layer: y = LN(x; w_in, b_in, eps);  qkv_h = (y W^T + b)[3 h s : 3 (h+1) s] = [q_h | k_h | v_h]
               r = int(s * partial_rotary_factor);  inv_freq_i = 1 / theta^(2i / r),  emb = cat(p inv, p inv)
               q[:r] <- q[:r] cos(emb) + rotate_half(q[:r]) sin(emb)    (k likewise; q[r:] passed through)
               A = softmax(q . k / sqrt(s)) over keys <= p;  a = dense(concat_h A v)
               parallel:  x <- x + a + mlp(LN(x; w_post, b_post))
               else:      x <- x + a;  x <- x + mlp(LN(x; w_post, b_post))
               mlp(z) = dense_4h_to_h(act(dense_h_to_4h(z)))
    logits = lm_head(LN(x; w_final, b_final)),  LN(x) = (x - mean) / sqrt(var + eps) w + b

The real function: theta and partial_rotary_factor are read from rope_parameters (or rotary_emb_base /
rotary_pct), theta as the decimal config.json holds (Fraction of its repr), eps the float64; every
angle, cos and sin is an mpmath number at DPS digits (transformers computes them in float32).  Exact
Fractions while the values are rational (the embedding and its mean and variance), mpmath after that.
A cross-check, not a certificate: margins within TIE of 0 count as exact ties.
"""
from __future__ import annotations

from fractions import Fraction

import mpmath

from llama_oracle import _act, _exact, _linear, _mpf, _num

DPS = 60
TIE = mpmath.mpf("1e-40")


def _layernorm(x, w, b, eps):
    """nn.LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias (biased variance), as real numbers."""
    k = len(x)
    if all(isinstance(v, Fraction) for v in x):
        mu = sum(x, Fraction(0)) / k
        c = [v - mu for v in x]
        s = mpmath.sqrt(_num(sum((v * v for v in c), Fraction(0)) / k + Fraction(eps)))
    else:
        x = [_num(v) for v in x]
        mu = sum(x) / k
        c = [v - mu for v in x]
        s = mpmath.sqrt(sum(v * v for v in c) / k + _num(Fraction(eps)))
    return [(mpmath.mpf(0) if v == 0 else _num(v) / s) * wi + bi for v, wi, bi in zip(c, w, b)]


class NeoXOracle:
    """The forward pass of one checkpoint (config.json dict, state dict of numpy float64 arrays)."""

    def __init__(self, cfg: dict, sd: dict):
        self.cfg = cfg
        sd = {("lm_head.weight" if k == "embed_out.weight" else k): v for k, v in sd.items()}
        self.p = {k: _exact(v) if k == "gpt_neox.embed_in.weight" else _mpf(v) for k, v in sd.items()}
        if cfg.get("tie_word_embeddings", False):
            self.p["lm_head.weight"] = _mpf(sd["gpt_neox.embed_in.weight"])
        rope = cfg.get("rope_parameters") or {}
        theta = rope.get("rope_theta", cfg.get("rotary_emb_base"))
        factor = rope.get("partial_rotary_factor", cfg.get("rotary_pct"))
        self.theta = Fraction(repr(theta)) if isinstance(theta, float) else Fraction(theta)
        self.heads = cfg["num_attention_heads"]
        self.s = cfg["hidden_size"] // self.heads
        self.r = int(self.s * factor)
        self.eps = cfg.get("layer_norm_eps", 1e-5)
        self.parallel = cfg.get("use_parallel_residual", True)
        self.act = cfg.get("hidden_act", "gelu")
        self._memo = {}

    def _cos_sin(self, p: int):
        if p not in self._memo:
            r, theta = self.r, _num(self.theta)
            inv = [1 / theta ** (mpmath.mpf(2 * i) / r) for i in range(r // 2)]
            emb = [p * f for f in inv] * 2
            self._memo[p] = ([mpmath.cos(a) for a in emb], [mpmath.sin(a) for a in emb])
        return self._memo[p]

    def _rope(self, x, p: int):
        cos, sin = self._cos_sin(p)
        x, rest = x[:self.r], list(x[self.r:])
        h = len(x) // 2
        rot = [-v for v in x[h:]] + list(x[:h])
        return [a * c + b * s for a, c, b, s in zip(x, cos, rot, sin)] + rest

    def logits(self, tokens) -> list:
        """The logits at the last position (mpf)."""
        c, P, s = self.cfg, self.p, self.s
        with mpmath.workdps(DPS):
            n = len(tokens)
            xs = [list(P["gpt_neox.embed_in.weight"][t]) for t in tokens]
            for li in range(c["num_hidden_layers"]):
                pre = f"gpt_neox.layers.{li}."
                last = li == c["num_hidden_layers"] - 1
                ln = pre + "input_layernorm."
                ys = [_layernorm(x, P[ln + "weight"], P[ln + "bias"], self.eps) for x in xs]
                a = pre + "attention."
                qkv = [_linear(y, P[a + "query_key_value.weight"], P.get(a + "query_key_value.bias")) for y in ys]

                def part(vec, h, j):  # the view (heads, 3 s), chunk j of head h
                    return vec[3 * h * s + j * s: 3 * h * s + (j + 1) * s]

                queries = [n - 1] if last else list(range(n))
                new = []
                for q in queries:
                    concat = []
                    for h in range(self.heads):
                        qh = self._rope(part(qkv[q], h, 0), q)
                        kh = [self._rope(part(qkv[j], h, 1), j) for j in range(q + 1)]
                        sc = [sum(u * v for u, v in zip(qh, k)) / mpmath.sqrt(s) for k in kh]
                        top = max(sc)
                        e = [mpmath.exp(v - top) for v in sc]
                        z = sum(e)
                        concat += [sum(e[j] * part(qkv[j], h, 2)[i] for j in range(q + 1)) / z for i in range(s)]
                    att = _linear(concat, P[a + "dense.weight"], P.get(a + "dense.bias"))
                    post = pre + "post_attention_layernorm."
                    m = pre + "mlp."

                    def mlp(u):
                        hid = _linear(_layernorm(u, P[post + "weight"], P[post + "bias"], self.eps),
                                      P[m + "dense_h_to_4h.weight"], P[m + "dense_h_to_4h.bias"])
                        acted = [max(v, 0) if self.act == "relu" else _act(self.act, v) for v in hid]
                        return _linear(acted, P[m + "dense_4h_to_h.weight"],
                                       P[m + "dense_4h_to_h.bias"])

                    if self.parallel:
                        out = [_num(u) + v + w for u, v, w in zip(xs[q], att, mlp(xs[q]))]
                    else:
                        mid = [_num(u) + v for u, v in zip(xs[q], att)]
                        out = [u + v for u, v in zip(mid, mlp(mid))]
                    new.append(out)
                xs = new
            f = "gpt_neox.final_layer_norm."
            y = _layernorm(xs[-1], P[f + "weight"], P[f + "bias"], self.eps)
            return _linear(y, P["lm_head.weight"])

    def margin(self, tokens, label: int):
        """logit[label] - max of the other logits (mpf)."""
        lg = self.logits(tokens)
        return lg[label] - max(v for i, v in enumerate(lg) if i != label)
