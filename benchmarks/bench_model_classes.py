"""Benchmark: evaluation speed of the wider model classes against the paper's relu class,
on the same shapes and the same points.

    python benchmarks/bench_model_classes.py            (about a minute on 2 cores)

The model is the Theorem 3 copy-matching construction (ICQA k=3, 5 questions, 5 answers:
2 layers, 1 head each, d' = 22, sequences of 11 tokens, 10,800 points), with every head's
attention kind replaced, a causal mask added, or a ReLU MLP sublayer (d_ff = 16) appended to
each layer.  The modified models need not classify correctly: every point is evaluated either
way (verify stops at the first counterexample, so the timings use `--symmetry off` and the
evaluators' logits on all points; the softmax rate is the certified per-point decision).
Everything is measured in this one run; ratios are to the relu row.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from depthcert.checkers.evaluate import Evaluator  # noqa: E402
from depthcert.checkers.model import MLP, Layer  # noqa: E402
from depthcert.checkers.softmax_balls import SoftmaxDecider  # noqa: E402
from depthcert.checkers.tasks import ICQA  # noqa: E402
from depthcert import constructions  # noqa: E402


def with_kind(model, kind, scale=1):
    layers = tuple(Layer(tuple(replace(h, attention=kind, scale=Fraction(scale)) for h in L), L.causal, L.mlp)
                   for L in model.layers)
    return replace(model, layers=layers)


def with_causal(model):
    return replace(model, layers=tuple(replace(L, causal=True) for L in model.layers))


def with_mlp(model, width=16, seed=0):
    rng = np.random.default_rng(seed)
    d = model.dim

    def mat(r, c):
        out = np.empty((r, c), dtype=object)
        for idx, v in np.ndenumerate(rng.integers(-2, 3, size=(r, c))):
            out[idx] = Fraction(int(v), 2)
        return out

    layers = tuple(replace(L, mlp=MLP(mat(width, d), mat(width, 1)[:, 0], mat(d, width), mat(d, 1)[:, 0]))
                   for L in model.layers)
    return replace(model, layers=layers)


def rate_exact(model, task, batch_size=2048) -> tuple[float, str]:
    ev = Evaluator(model)
    t0 = time.perf_counter()
    for batch in task.batches(batch_size):
        ev.logits(batch.ids)
    return task.size / (time.perf_counter() - t0), ev.path


def rate_softmax(model, task, sample: int) -> tuple[float, str]:
    dec = SoftmaxDecider(model)
    prefix = Evaluator(dec.prefix_model())
    idx = np.linspace(0, task.size - 1, sample).astype(np.int64)
    t0 = time.perf_counter()
    for batch in task.batches_of(idx, 512):
        H, den = prefix.logits_all(batch.ids)
        n = batch.ids.shape[1]
        for i in range(len(batch.index)):
            dec.decide(H[i], den, [(n - 1, int(batch.labels[i]))])
    bits = sorted(dec.precisions_used)
    return sample / (time.perf_counter() - t0), f"arb balls, {bits[0]}-{bits[-1]} bits"


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}")
    task = ICQA(k=3, n_questions=5, n_answers=5)
    base = constructions.build(task).model
    rows = []
    relu, path = rate_exact(base, task)
    rows.append(("relu (the paper's class)", relu, path))
    for name, m in (("hardmax", with_kind(base, "hardmax")),
                    ("relu + causal", with_causal(base)),
                    ("hardmax + causal", with_causal(with_kind(base, "hardmax"))),
                    ("relu + MLP (d_ff = 16)", with_mlp(base))):
        r, p = rate_exact(m, task)
        rows.append((name, r, p))
    for scale in (1, 8):
        r, p = rate_softmax(with_kind(base, "softmax", scale), task, 2000)
        rows.append((f"softmax scale {scale} (2,000-point sample)", r, p))
    print()
    print(f"ICQA k=3, n_q=n_a=5, copy-matching shapes (2 layers x 1 head, d' = {base.dim}, n = {task.length}), "
          f"{task.size} points")
    print("| model class | points/s | relative to relu | evaluation |")
    print("|---|---|---|---|")
    for name, r, p in rows:
        print(f"| {name} | {r:,.0f} | {r / relu:.3f} | {p} |")


if __name__ == "__main__":
    main()
