"""python -m depthcert.cli.train_grokking: train the grokked modular-addition model
(depthcert.training.grokking: Nanda et al. 2023's recipe) and write two TransformerLens safetensors
checkpoints, one before grokking (memorized) and one after.

    python -m depthcert.cli.train_grokking --out-dir training/checkpoints
"""
from __future__ import annotations

import os
import sys
import time

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser, nonnegative_int, positive_int, run_main


def _main(argv) -> int:
    p = _Parser(prog="python -m depthcert.cli.train_grokking", description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", required=True, help="folder of the two checkpoints")
    p.add_argument("--p", type=positive_int, default=113, help="the modulus (default 113)")
    p.add_argument("--steps", type=positive_int, default=20000, help="most full-batch steps (default 20000)")
    p.add_argument("--before-step", type=positive_int, default=1500,
                   help="the step of the checkpoint before grokking (default 1500)")
    p.add_argument("--stop-at-test-accuracy", type=float, default=1.0,
                   help="stop once the held-out accuracy reaches this (checked every 100 steps; default 1.0)")
    p.add_argument("--save-every", type=nonnegative_int, default=0,
                   help="also write a checkpoint every this many steps (0: none)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3, the paper's)")
    p.add_argument("--seed", type=nonnegative_int, default=999)
    p.add_argument("--data-seed", type=nonnegative_int, default=598)
    args = p.parse_args(argv)
    if not os.path.isdir(args.out_dir):
        raise BadInput(f"--out-dir {args.out_dir}: folder does not exist")
    if not 2 <= args.p <= 1000:
        raise BadInput(f"--p must be in 2 .. 1000, got {args.p}")
    if not 0 < args.stop_at_test_accuracy <= 1:
        raise BadInput(f"--stop-at-test-accuracy must be in (0, 1], got {args.stop_at_test_accuracy}")
    if not 0 < args.lr < 1:
        raise BadInput(f"--lr must be in (0, 1), got {args.lr}")
    if args.before_step >= args.steps:
        raise BadInput("--before-step must be below --steps")
    from depthcert.interop.transformerlens import write_checkpoint
    from depthcert.training.grokking import config, train

    cfg = config(args.p, args.seed, args.data_seed, lr=args.lr)
    name = f"grokking_p{args.p}"
    t0 = time.perf_counter()
    written = []

    def save(step, state, stats, last):
        kind = "after" if last else "before" if step == args.before_step else f"step{step}"
        path = os.path.join(args.out_dir, f"{name}_{kind}.safetensors")
        write_checkpoint(path, dict(cfg, **{f"at_{k}": v for k, v in stats.items()}), state)
        written.append(path)
        print(f"step {step}: train accuracy {stats['train_accuracy']:.4f}, held-out accuracy "
              f"{stats['test_accuracy']:.4f}, {time.perf_counter() - t0:.0f} s -> {path}", flush=True)

    want = {args.before_step} | (set(range(args.save_every, args.steps, args.save_every)) if args.save_every else set())
    train(args.steps, save, sorted(want), args.stop_at_test_accuracy, p=args.p, lr=args.lr, seed=args.seed, data_seed=args.data_seed,
          progress=sys.stderr.isatty())  # progress lines on a terminal only, as every command
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
