"""Benchmark: certified decisions against a plain float64 forward over the same points, per
attention kind, every ratio measured in this one run.

    python benchmarks/bench_softmax.py            (about a minute on 2 cores; --no-tracr skips tracr)

Rows:
  * ICQA k=3, n_q = n_a = 6 (43,200 points, sequences of 11 tokens), the Theorem 3
    copy-matching construction (2 layers x 1 head, d' = 24) with layer 2 as relu (the paper's),
    hardmax, or softmax at scale 64 (issue 25's shape), --symmetry off;
  * ICQA k=3, n_q = n_a = 5 (10,800 points), layer 2 softmax at scale 64;
  * a tracr program (make_reverse over vocabulary 1..4, every input of length 1..7: 21,844 inputs,
    every output position labelled by tracr's RASP evaluator), imported exactly.

"certified" is the whole `checkers.exhaustive.verify` run (dataset batches, the exact prefix,
float64 intervals, balls for the points they leave); "float64" is a plain numpy forward of the
same model over the same batches (one-hot embedding, every layer, argmax), which certifies
nothing.  Each time is the best of two runs, interleaved.  ratio = certified / float64.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from depthcert import constructions  # noqa: E402
from depthcert.checkers.exhaustive import verify  # noqa: E402
from depthcert.checkers.model import Layer  # noqa: E402
from depthcert.checkers.tasks import ICQA  # noqa: E402


class FloatForward:
    """The plain float64 forward of checkers/model.py's semantics (every attention kind, causal
    masks, MLPs, the constant row, last or all positions).  Certifies nothing."""

    def __init__(self, model):
        self.model = model
        self.V, self.n = len(model.vocab), model.max_length
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
        X = np.zeros((B, n, self.model.dim))
        X[np.arange(B)[:, None], np.arange(n)[None, :], ids] = 1.0
        X[:, np.arange(n), self.V + np.arange(n)] = 1.0
        if self.const is not None:
            X[:, :, self.const] = 1.0
        all_out = self.model.outputs == "all"
        mask = np.tril(np.ones((n, n), dtype=bool))  # [query, key]
        for li, (heads, causal, mlp) in enumerate(self.layers):
            last = li == len(self.layers) - 1 and not all_out
            Q = X[:, -1:, :] if last else X
            out = Q.copy()
            m = mask[-Q.shape[1]:]
            for W, Vm, kind, c in heads:
                S = np.matmul(np.matmul(Q, W.T), X.transpose(0, 2, 1))  # (B, query, key)
                if kind == "relu":
                    A = np.maximum(S, 0)
                    if causal:
                        A = np.where(m, A, 0.0)
                else:
                    if causal:
                        S = np.where(m, S, -np.inf)
                    if kind == "hardmax":
                        A = (S == S.max(axis=-1, keepdims=True)).astype(np.float64)
                        A /= A.sum(axis=-1, keepdims=True)
                    else:
                        E = np.exp(c * (S - S.max(axis=-1, keepdims=True)))
                        A = E / E.sum(axis=-1, keepdims=True)
                out = out + np.matmul(A, np.matmul(X, Vm.T)) / len(heads)
            if mlp is not None:
                W1, b1, W2, b2 = mlp
                out = out + np.matmul(np.maximum(np.matmul(out, W1.T) + b1, 0), W2.T) + b2
            X = out
        return np.matmul(X, self.W_O.T).argmax(axis=-1)


def time_float(model, task, batch_size=2048) -> float:
    t = time.perf_counter()
    ff = FloatForward(model)
    for batch in task.batches(batch_size):
        ff.predict(batch.ids)
    return time.perf_counter() - t


def time_verify(model, task):
    t = time.perf_counter()
    v = verify(model, task, progress=False, symmetry="off")
    return time.perf_counter() - t, v


def layer2(model, kind, scale=1):
    layers = list(model.layers)
    L = layers[1]
    layers[1] = Layer(tuple(replace(h, attention=kind, scale=Fraction(scale if kind == "softmax" else 1)) for h in L),
                      L.causal, L.mlp)
    return replace(model, layers=tuple(layers))


def tracr_row():
    """make_reverse, vocabulary 1..4, lengths 1..7: (name, model, task) or None without tracr."""
    try:
        from depthcert.cli import verify_tracr as tracr_cli
        from depthcert.interop.tracr_import import compile_program, import_tracr, require_tracr

        require_tracr()
    except Exception as e:  # the optional extra is missing
        print(f"(tracr row skipped: {e})")
        return None
    vocab, L = [1, 2, 3, 4], 7
    program, _ = tracr_cli.resolve_program("make_reverse", vocab, L)
    compiled = compile_program(program, vocab, L)
    model = import_tracr(compiled, name="tracr:make_reverse").model
    inputs = tracr_cli.enumerate_inputs(vocab, L, False)
    truth = tracr_cli.ground_truth(program, inputs, False, exact=False)
    value_class = dict(zip(compiled.output_values, model.classes))
    labels = [[None] + [value_class[v] for v in vals] for vals in truth]
    task = tracr_cli.make_dataset(inputs, labels, "make_reverse", tuple(str(v) for v in vocab))
    return (f"tracr make_reverse, vocab 1..4, lengths 1..7 ({len(inputs):,} inputs; "
            f"{model.n_layers} layers, d' = {model.dim}, {model.kinds()})", model, task)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-tracr", action="store_true")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}")
    rows = []
    big = ICQA(k=3, n_questions=6, n_answers=6)
    base = constructions.build(big).model
    for kind in ("relu", "hardmax", "softmax"):
        m = layer2(base, kind, 64)
        name = f"ICQA k=3 n=6 ({big.size:,} points), layer 2 {kind}" + (" scale 64" if kind == "softmax" else "")
        rows.append((name, m, big))
    small = ICQA(k=3, n_questions=5, n_answers=5)
    rows.append((f"ICQA k=3 n=5 ({small.size:,} points), layer 2 softmax scale 64",
                 layer2(constructions.build(small).model, "softmax", 64), small))
    if not args.no_tracr:
        tr = tracr_row()
        if tr is not None:
            rows.append(tr)
    print()
    print("| model | float64 forward (s) | certified verify (s) | ratio | verdict | evaluation |")
    print("|---|---|---|---|---|---|")
    for name, model, task in rows:
        tf = time_float(model, task)
        tv, v = time_verify(model, task)
        tf = min(tf, time_float(model, task))  # each side's best of two runs, interleaved (the machine
        tv = min(tv, time_verify(model, task)[0])  # is shared: a load spike hits one run, not both)
        print(f"| {name} | {tf:.3f} | {tv:.3f} | {tv / tf:.2f} | {v.verdict} | {v.path} |", flush=True)


if __name__ == "__main__":
    main()
