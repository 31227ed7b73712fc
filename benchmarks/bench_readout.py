"""Whole verify-construction run with the max-margin read-out against a plain float64 forward.

    python benchmarks/bench_readout.py [--l 7] [--alphabet 7]

Runs `verify-construction tm --l L --alphabet M --variant ternary --symmetry off --json` (build,
LP read-out and exact check of every point, in a subprocess, wall time) and, in this process, a
plain float64 forward pass of the same model over the same points (embedding, every layer,
logits; no checks, no margins), and prints both times and their ratio (goal: at most 2).
Also prints the normalized margins of both read-outs when --compare is given (slow at l = 7:
Lemma 3's classifier is built in Fractions).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from fractions import Fraction

import numpy as np


def plain_forward_seconds(model, task, batch_size: int = 2048) -> float:
    """float64 logits of every point, the last layer at the last query only (as the verifier)."""
    from depthcert.checkers.evaluate import embed_rows

    W = [[(np.array(h.W_QK, dtype=np.float64), np.array(h.W_V, dtype=np.float64)) for h in L] for L in model.layers]
    WO = np.array(model.W_O, dtype=np.float64)
    t = time.perf_counter()
    for batch in task.batches(batch_size):
        X = embed_rows(model, batch.ids, np.float64)
        for li, L in enumerate(W):
            q = X[:, -1:, :] if li == len(W) - 1 else X
            out = q.copy()
            for A, V in L:
                S = np.maximum(np.matmul(X, np.matmul(q, A.T).transpose(0, 2, 1)), 0)
                out = out + np.matmul(np.matmul(S.transpose(0, 2, 1), X), V.T) / len(L)
            X = out
        X[:, -1, :] @ WO.T
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--l", type=int, default=7)
    p.add_argument("--alphabet", type=int, default=7)
    p.add_argument("--compare", action="store_true")
    a = p.parse_args()
    cmd = ["verify-construction", "tm", "--l", str(a.l), "--alphabet", str(a.alphabet), "--variant", "ternary",
           "--symmetry", "off", "--json"] + (["--compare-readouts"] if a.compare else [])
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    whole = time.perf_counter() - t
    info = json.loads(out.stdout)
    from depthcert.checkers.tasks import make_task
    from depthcert import constructions

    task = make_task("tm", l=a.l, alphabet=a.alphabet)
    # the same layers and W_O shape (the forward's cost does not depend on W_O's values)
    model = constructions.build(task, "ternary", lemma3=False).model
    plain = plain_forward_seconds(model, task)
    print(f"$ {' '.join(cmd)}")
    print(f"  verdict {info['verdict']}, {info['points_checked']:,} points evaluated, read-out {info['readout']}")
    print(f"  normalized margins: {info['readout_margins']}")
    print(f"  whole run {whole:.1f} s (evaluating {info['seconds']:.1f} s); plain float64 forward {plain:.1f} s; "
          f"ratio {whole / plain:.2f} (goal <= 2)")
    if a.compare and "lemma3" in info["readout_margins"]:
        m, l3 = (Fraction(info["readout_margins"][k]) for k in ("max_margin", "lemma3"))
        print(f"  max-margin / Lemma 3 normalized margin: {float(m / l3):.3g}")
    sys.exit(0)


if __name__ == "__main__":
    main()
