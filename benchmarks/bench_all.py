"""Benchmark: exact verification against the fastest plain float64 forward, every construction.

    python benchmarks/bench_all.py            (every row, each in its own process: ~3-6 minutes)
    python benchmarks/bench_all.py --quick    (the smallest size of every row: the test suite's smoke run)

For each construction, on the same points (every point, --symmetry off, one process):
  exact    checkers.exhaustive.verify: exact verdict and margin (float64 proven or checked per
           batch, big integers where needed), strict argmax
  float64  the fastest plain forward written here for the same model: one-hot inputs as table
           look-ups (row gathers instead of the first products), the last layer on the last
           column only, argmax only (inexact, no verdict): the baseline the ratio is taken to
and the peak resident memory of the exact run's process.  Ratio = exact seconds / float seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

ROWS = [
    # name, task, options, variant, quick options
    ("ICQA copy-matching", "icqa", dict(k=3, n_questions=8, n_answers=8), None, dict(k=3)),
    ("SC memorization", "sc", dict(length=6, alphabet=3), None, dict(length=3, alphabet=3)),
    ("TM heads (fixed)", "tm", dict(l=6, alphabet=6), "heads", dict(l=3, alphabet=3)),
    ("TM ternary (fixed)", "tm", dict(l=6, alphabet=6), "ternary", dict(l=3, alphabet=3)),
    ("ICTM (fixed)", "ictm", dict(k=2, l=2, alphabet=6, n_answers=3), None, dict(k=2, l=2, alphabet=2, n_answers=2)),
    ("multi-hop paper 2h", "multihop", dict(hops=3, k=4, n_entities=5), "paper", dict(hops=2, k=2, n_entities=2)),
    ("multi-hop linear", "multihop", dict(hops=3, k=4, n_entities=5), "linear", dict(hops=2, k=2, n_entities=2)),
    ("multi-hop doubling", "multihop", dict(hops=3, k=4, n_entities=5), "doubling", dict(hops=2, k=2, n_entities=2)),
    ("multi-hop relu-and", "multihop", dict(hops=3, k=4, n_entities=5), "relu-and", dict(hops=2, k=2, n_entities=2)),
    ("multi-hop dnf", "multihop", dict(hops=2, k=3, n_entities=4), "dnf", dict(hops=2, k=2, n_entities=2)),
    ("composition, one lookup per layer (causal)", "composition", dict(n_functions=3, domain=3), "linear", dict(n_functions=2, domain=2)),
    ("composition, preimage doubling (causal)", "composition", dict(n_functions=3, domain=3), "doubling", dict(n_functions=2, domain=2)),
    ("parity, binary tree", "parity", dict(n=16), "tree", dict(n=4)),
    ("parity, counting", "parity", dict(n=20), "count", dict(n=4)),
    ("A5 word problem, tree + ReLU MLP", "word-problem", dict(group="a5", n=16), "tree-mlp", dict(group="a5", n=4)),
    ("reachability, repeated squaring", "reachability", dict(vertices=4), "squaring", dict(vertices=3)),
]


class FloatForward:
    """The plain float64 forward of checkers/model.py's semantics, as fast as written here."""

    def __init__(self, model):
        self.model = model
        V, n = len(model.vocab), model.max_length
        self.V, self.n = V, n
        self.layers = []
        for L in model.layers:
            heads = [(np.array(h.W_QK, dtype=np.float64), np.array(h.W_V, dtype=np.float64), h.attention,
                      float(h.scale) / float(h.scale_sqrt_divisor) ** 0.5) for h in L]
            mlp = None
            if L.mlp is not None:
                mlp = tuple(np.array(M, dtype=np.float64) for M in (L.mlp.W1, L.mlp.b1, L.mlp.W2, L.mlp.b2))
            self.layers.append((heads, L.causal, mlp))
        self.W_O = np.array(model.W_O, dtype=np.float64)
        self.const = model.constant_index

    def predict(self, ids: np.ndarray) -> np.ndarray:
        B, n = ids.shape
        d = self.model.dim
        X = np.zeros((B, n, d))
        X[np.arange(B)[:, None], np.arange(n)[None, :], ids] = 1.0  # token one-hots (a gather)
        X[:, np.arange(n), self.V + np.arange(n)] = 1.0
        if self.const is not None:
            X[:, :, self.const] = 1.0
        for li, (heads, causal, mlp) in enumerate(self.layers):
            last = li == len(self.layers) - 1
            Q = X[:, -1:, :] if last else X
            out = Q.copy()
            if heads:
                for W, Vm, kind, scale in heads:
                    S = np.matmul(X, np.matmul(Q, W.T).transpose(0, 2, 1))  # (B, n_key, n_query)
                    if causal and not last:
                        S = np.where(np.tril(np.ones((n, n), dtype=bool)).T[None], S, -np.inf if kind != "relu" else 0)
                    if kind == "relu":
                        A = np.maximum(S, 0)
                    elif kind == "hardmax":
                        A = (S == S.max(axis=1, keepdims=True)).astype(np.float64)
                        A /= A.sum(axis=1, keepdims=True)
                    else:
                        E = np.exp(scale * (S - S.max(axis=1, keepdims=True)))
                        A = E / E.sum(axis=1, keepdims=True)
                    out = out + np.matmul(np.matmul(A.transpose(0, 2, 1), X), Vm.T) / len(heads)
            if mlp is not None:
                W1, b1, W2, b2 = mlp
                out = out + np.matmul(np.maximum(np.matmul(out, W1.T) + b1, 0), W2.T) + b2
            X = out
        return np.matmul(X[:, -1, :], self.W_O.T).argmax(axis=1)


def one_row(name: str, quick: bool) -> dict:
    from depthcert.checkers.exhaustive import verify
    from depthcert.checkers.tasks import make_task
    from depthcert import constructions

    row = next(r for r in ROWS if r[0] == name)
    _, task_name, opts, variant, quick_opts = row
    task = make_task(task_name, **(quick_opts if quick else opts))
    model = constructions.build(task, variant).model
    verify(model, task, progress=False, symmetry="off", batch_size=512)  # warm up caches and imports
    v = verify(model, task, progress=False, symmetry="off", workers=1)
    ff = FloatForward(model)
    t0 = time.perf_counter()
    correct = 0
    for batch in task.batches(2048):
        correct += int((ff.predict(batch.ids) == batch.labels).sum())
    t_float = time.perf_counter() - t0
    return {"name": name, "task": task.describe(), "points": task.size, "verdict": v.verdict,
            "exact_s": v.seconds, "float_s": t_float, "ratio": v.seconds / t_float, "evaluation": v.path,
            "float_correct": correct, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smallest sizes (smoke run)")
    p.add_argument("--row", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.row:
        print(json.dumps(one_row(args.row, args.quick)))
        return
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}")
    print("| construction | points | verdict | exact s | float64 s | exact / float64 | peak MB | exact evaluation |")
    print("|---|---|---|---|---|---|---|---|")
    for name, *_ in ROWS:
        cmd = [sys.executable, __file__, "--row", name] + (["--quick"] if args.quick else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {name} | failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode} |")
            continue
        d = json.loads(r.stdout)
        print(f"| {d['name']} ({d['task']}) | {d['points']:,} | {d['verdict']} | {d['exact_s']:.2f} | "
              f"{d['float_s']:.2f} | {d['ratio']:.2f} | {d['peak_mb']:.0f} | {d['evaluation']} |", flush=True)


if __name__ == "__main__":
    main()
