"""Benchmark: exact verification against a plain float64 forward pass and a naive sympy one.

    python benchmarks/bench_exact.py            (about a minute on 2 cores)

Everything is measured in this one run, on the same points of the same model:
  exact      checkers.exhaustive.verify (integer model, float64 with a proven bound, strict argmax,
             exact margins), one process
  float64    the same batched forward pass written plainly in numpy float64 (weights converted to
             float, argmax only): the inexact baseline
  sympy      per-point evaluation with sympy Rational matrices (the naive exact baseline), on a
             sample, extrapolated
and time against dataset size, and the symmetry-reduced proof at the paper's 100-token scale.
"""
from __future__ import annotations

import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from depthcert.checkers.evaluate import embed_batch  # noqa: E402
from depthcert.checkers.exhaustive import verify  # noqa: E402
from depthcert.checkers.tasks import ICQA  # noqa: E402
from depthcert import constructions  # noqa: E402


def float_forward_accuracy(model, task, batch_size=2048) -> tuple[int, float]:
    """Plain float64 eq. 1-3 on every point; returns (correct, seconds)."""
    layers = [[(np.array(h.W_QK, dtype=float), np.array(h.W_V, dtype=float)) for h in layer] for layer in model.layers]
    W_O = np.array(model.W_O, dtype=float)
    t0 = time.perf_counter()
    correct = 0
    for batch in task.batches(batch_size):
        H = embed_batch(model, batch.ids, np.float64)
        for li, layer in enumerate(layers):
            last = li == len(layers) - 1
            q = H[:, :, -1:] if last else H
            out = q.copy()
            for W, V in layer:
                S = np.maximum(np.matmul(H.transpose(0, 2, 1), np.matmul(W, q)), 0)
                out += np.matmul(np.matmul(V, H), S) / len(layer)
            H = out
        logits = np.matmul(H[:, :, -1], W_O.T)
        correct += int((logits.argmax(axis=1) == batch.labels).sum())
    return correct, time.perf_counter() - t0


def sympy_per_point(model, task, sample: int) -> float:
    """Seconds per point with sympy Rational matrices (naive exact evaluation)."""
    import sympy

    layers = [[(sympy.Matrix(h.W_QK.tolist()), sympy.Matrix(h.W_V.tolist())) for h in layer] for layer in model.layers]
    W_O = sympy.Matrix(model.W_O.tolist())
    idx = np.linspace(0, task.size - 1, sample).astype(np.int64)
    t0 = time.perf_counter()
    for i in idx:
        ids, labels = task.decode(np.array([i]))
        H = sympy.Matrix(embed_batch(model, ids, np.float64)[0].astype(int).tolist())
        for layer in layers:
            new = H.copy()
            for W, V in layer:
                S = (H.T * W * H).applyfunc(lambda x: x if x > 0 else 0)
                new += V * H * S / len(layer)
            H = new
        o = W_O * H[:, -1]
        assert max(range(len(o)), key=lambda c: o[c]) == labels[0]
    return (time.perf_counter() - t0) / sample


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}")
    task = ICQA(k=3, n_questions=7, n_answers=7)
    model = constructions.build(task).model
    verify(model, task, symmetry="auto")  # warm up
    v = verify(model, task, symmetry="off")
    correct, t_float = float_forward_accuracy(model, task)
    assert v.verified and correct == task.size
    exact_rate = task.size / v.seconds
    float_rate = task.size / t_float
    sp = sympy_per_point(model, task, 20)
    print()
    print(f"ICQA k=3, n_q=n_a=7 (Theorem 3 construction), {task.size} points, same points for every row")
    print("| evaluation | points/s | relative to float64 |")
    print("|---|---|---|")
    print(f"| exact (depthcert verify) | {exact_rate:,.0f} | {exact_rate / float_rate:.2f} |")
    print(f"| plain numpy float64 forward | {float_rate:,.0f} | 1.00 |")
    print(f"| sympy Rational, per point (20-point sample) | {1 / sp:,.1f} | {1 / sp / float_rate:.5f} |")
    print(f"exact / sympy speed-up: {exact_rate * sp:,.0f}x")
    print()
    print("time against dataset size (exact, every point, symmetry off)")
    print("| n_q = n_a | points | seconds | points/s |")
    print("|---|---|---|---|")
    for n in (4, 5, 6, 7, 8):
        t = ICQA(k=3, n_questions=n, n_answers=n)
        r = verify(constructions.build(t).model, t, symmetry="off")
        print(f"| {n} | {t.size} | {r.seconds:.3f} | {t.size / r.seconds:,.0f} |")
    print()
    t = ICQA(k=3, n_questions=100, n_answers=100)
    t0 = time.perf_counter()
    r = verify(constructions.build(t).model, t, symmetry="auto")
    total = time.perf_counter() - t0
    print(f"paper scale: ICQA k=3, 100 questions, 100 answers: {r.verdict} over {r.points_covered} points "
          f"({r.points_checked} evaluated) in {total:.2f} s including construction and equivariance proof")


if __name__ == "__main__":
    main()
