"""Benchmark: the Max-of-K reference model decided on every input, against plain float forwards
over the same inputs, every time and ratio measured in this one run.

    python benchmarks/bench_max_of_k.py                      (vocabulary 64, K = 4: 16,777,216 inputs)
    python benchmarks/bench_max_of_k.py --k 3 --workers 1    (a quick run: 262,144 inputs)

"certified" is verify-model's whole run (checkers/accuracy.py: exact tables of the one-layer
model, certified float64 per point, arb for the points within the error bound of a tie), on a
Dask LocalCluster of --workers processes (in this process with --workers 1), optionally
journalled (--journal FILE: a re-run resumes).  "float32" / "float64" are the TransformerLens
forward in torch (training/tl_forward.py, torch.set_num_threads(--workers)) over the same
inputs, counting a point correct when its label's float logit is strictly the largest: a float
brute force, which certifies nothing.  "disagreements" lists the inputs where a float count and
the certified decision differ (what a float brute force gets wrong).  ratio = certified / float.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CHECKPOINT = os.path.join(ROOT, "training", "checkpoints", "max_of_k_v64_k4.safetensors")


def float_forward(cfg, sd, task, dtype, batch: int = 1 << 16):
    """(seconds, indices where the float forward is not strictly right)."""
    import torch

    from depthcert.training.tl_forward import TLTransformer

    model = TLTransformer(cfg, dtype=dtype)
    model.load_state_dict({k: torch.tensor(v, dtype=dtype) for k, v in sd.items()})
    wrong = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for lo in range(0, task.size, batch):
            idx = np.arange(lo, min(task.size, lo + batch), dtype=np.int64)
            ids, labels = task.decode(idx)
            logits = model(torch.from_numpy(ids))[:, -1]
            lab = torch.from_numpy(labels)
            own = logits.gather(1, lab[:, None])[:, 0]
            other = logits.scatter(1, lab[:, None], float("-inf")).max(dim=1).values
            bad = ~(own > other)
            if bad.any():
                wrong.append(idx[bad.numpy()])
    seconds = time.perf_counter() - t0
    return seconds, (np.concatenate(wrong) if wrong else np.zeros(0, dtype=np.int64))


def margin_text(m) -> str:
    """The certified margin enclosure as verify-model prints it (exact when its ends agree, else
    rounded outward, so the printed interval still contains it)."""
    from depthcert.cli.verify_model import _fmt_margin

    return "none (no correct input)" if m is None else _fmt_margin(m)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="Dask local workers (1: this process)")
    p.add_argument("--journal", default=None)
    p.add_argument("--show", type=int, default=10)
    args = p.parse_args(argv)
    import torch

    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_model import load_any_model, run
    from depthcert.interop.transformerlens import read_checkpoint

    torch.set_num_threads(args.workers)
    task = make_task("max-of-k", vocab=args.vocab, k=args.k)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}, "
          f"torch {torch.__version__}; {args.workers} worker{'s' if args.workers != 1 else ''}")
    t0 = time.perf_counter()
    model = load_any_model(args.checkpoint, None, task)
    t_load = time.perf_counter() - t0
    cfg, sd = read_checkpoint(args.checkpoint)
    v = run(model, task, {"method": "auto"}, 65536, 8192, "local" if args.workers > 1 else None,
            args.workers if args.workers > 1 else None, args.journal)
    t32, w32 = float_forward(cfg, sd, task, torch.float32)
    t64, w64 = float_forward(cfg, sd, task, torch.float64)
    cert_wrong = set(int(i) for i in v.wrong)
    undecided = set(int(i) for i in v.undecided)
    print()
    print(f"model {os.path.relpath(args.checkpoint, ROOT)} (read exactly in {t_load:.1f} s: "
          f"{model.kinds()}, d' = {model.dim}); task {task.describe()}: {task.size:,} inputs")
    print(f"{'':<10} {'seconds':>9} {'ratio':>7} {'correct':>12} {'wrong':>8} {'undecided':>9} {'disagree':>8}")
    print(f"{'certified':<10} {v.seconds:>9.1f} {'1.0':>7} {v.correct:>12,} {len(v.wrong):>8,} {len(v.undecided):>9,} {'-':>8}")
    rows = {}
    for name, t, w in (("float32", t32, w32), ("float64", t64, w64)):
        fw = set(int(i) for i in w)
        dis = sorted((fw ^ cert_wrong) - undecided)
        rows[name] = dis
        print(f"{name:<10} {t:>9.1f} {v.seconds / t:>7.1f} {task.size - len(fw):>12,} {len(fw):>8,} {'-':>9} {len(dis):>8,}")
    print()
    print(f"certified accuracy {v.correct:,}/{task.size:,} ({100 * v.correct / task.size:.4f}%); "
          f"min margin over correct inputs {margin_text(v.margin)}")
    print(f"path: {v.path} ({v.by_tables:,} inputs decided in float64 with the proven bound, {v.by_balls:,} in arb); "
          f"{v.notes[0]}")
    print(f"ratio certified / float32 forward = {v.seconds / t32:.1f}, certified / float64 forward = {v.seconds / t64:.1f}")
    for name, dis in rows.items():
        if not dis:
            print(f"{name}: agrees with the certified decision on every input")
            continue
        print(f"{name}: disagrees with the certified decision on {len(dis)} input{'s' if len(dis) != 1 else ''}:")
        for i in dis[: args.show]:
            pt = task.point(i)
            print(f"  input {i}: {' '.join(pt.tokens)}  label {pt.label}: certified "
                  f"{'wrong' if i in cert_wrong else 'correct'}, {name} says {'correct' if i in cert_wrong else 'wrong'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
