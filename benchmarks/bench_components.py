"""Benchmark: LayerNorm / RMSNorm / GELU / SiLU TransformerLens models, the certified whole run
against a plain float64 forward over the same inputs, in one run and one process.

    python benchmarks/bench_components.py            (every row)
    python benchmarks/bench_components.py --quick    (smaller models)

Each row is a seeded random HookedTransformer-shaped checkpoint (float32 weights, written as a
safetensors file first, not timed) decided on every input of max-of-k (`--vocab V --k K`):

  certified  verify-model's run: reading the checkpoint into the exact model (every weight the
             rational it is) and deciding every point (certified float64 intervals, arb for the
             points they leave)
  float64    depthcert/interop/float_forward.py's numpy forward of the same checkpoint (reading
             included), argmax only: a float brute force, which certifies nothing

Wall and CPU seconds of this process are printed, each the best of two interleaved runs (the
machine may be shared: wall time moves with the load, CPU time less); ratio = certified / float64
(the goal: within 3x).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name -> config changes
ROWS = {
    "LN + gelu": dict(normalization_type="LN", act_fn="gelu"),
    "LNPre (fold_ln) + gelu_new": dict(normalization_type="LNPre", act_fn="gelu_new"),
    "RMS + silu": dict(normalization_type="RMS", act_fn="silu"),
    "LN attention-only": dict(normalization_type="LN", attn_only=True, act_fn=None),
    "no norm + relu (reference)": dict(normalization_type=None, act_fn="relu"),
}


def checkpoint(path: str, change: dict, quick: bool, seed: int = 0):
    from depthcert.interop import transformerlens as tl

    dm = 16 if quick else 32
    cfg = dict(n_layers=2, d_model=dm, n_heads=4, d_head=dm // 4, d_vocab=8, d_vocab_out=8, n_ctx=4,
               d_mlp=4 * dm, attn_only=False, attention_dir="causal", eps=1e-5)
    cfg.update(change)
    rng = np.random.default_rng(seed)
    sd = {}
    for key, shape in tl.expected_shapes(tl.config_from_dict(cfg)).items():
        a = rng.standard_normal(shape) * (0.8 / np.sqrt(dm))
        if key.endswith(".w"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        sd[key] = a.astype(np.float32)
    tl.write_checkpoint(path, cfg, sd)
    return cfg


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--k", type=int, default=None, help="sequence length (default 4, quick 3)")
    args = ap.parse_args(argv)
    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_model import load_any_model, run
    from depthcert.interop.float_forward import FloatForward, float_correct
    from depthcert.interop.transformerlens import read_checkpoint

    k = args.k or (3 if args.quick else 4)
    task = make_task("max-of-k", vocab=8, k=k)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}; "
          f"max-of-k vocab=8 k={k}: {task.size:,} inputs per row")
    print(f"{'model':30s} {'certified s':>11s} {'(cpu)':>7s} {'float64 s':>10s} {'(cpu)':>7s} {'ratio':>6s} "
          f"{'(cpu)':>6s} {'correct':>8s} {'wrong':>6s} {'undec':>6s} {'in arb':>6s} {'disagree':>8s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, change in ROWS.items():
            path = os.path.join(tmp, "m.safetensors")
            checkpoint(path, change, args.quick)

            def certified():
                model = load_any_model(path, None, task)
                return run(model, task, {}, 65536, 8192)

            def float64():
                cfg, sd = read_checkpoint(path)
                fwd = FloatForward(cfg, sd, np.float64)
                ids, labels = task.decode(np.arange(task.size))
                return float_correct(fwd, ids, labels)

            runs = [(timed(certified), timed(float64)) for _ in range(2)]  # best of two interleaved runs
            v = runs[0][0][0]
            ok = runs[0][1][0]
            cw, cc = min(r[0][1] for r in runs), min(r[0][2] for r in runs)
            fw, fc = min(r[1][1] for r in runs), min(r[1][2] for r in runs)
            cert = np.zeros(task.size, dtype=bool)
            cert[:] = True
            cert[v.wrong] = False
            cert[v.undecided] = False
            disagree = int(((ok != cert) & ~np.isin(np.arange(task.size), v.undecided)).sum())
            print(f"{name:30s} {cw:11.2f} {cc:7.2f} {fw:10.3f} {fc:7.3f} {cw / fw:6.1f} {cc / fc:6.1f} "
                  f"{v.correct:8,} {len(v.wrong):6,} {len(v.undecided):6,} {v.by_balls:6,} {disagree:8,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
