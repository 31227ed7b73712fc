"""python -m depthcert.cli.train_induction: train the induction-head model (depthcert.training.induction:
two attention-only layers with LayerNorm) and write it as a TransformerLens safetensors checkpoint.

    python -m depthcert.cli.train_induction --out training/checkpoints/induction_v5_n8_ln.safetensors
"""
from __future__ import annotations

import os
import sys
import time

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser, nonnegative_int, positive_int, run_main


def _main(argv) -> int:
    p = _Parser(prog="python -m depthcert.cli.train_induction", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=positive_int, default=5)
    p.add_argument("--n", type=positive_int, default=8, help="sequence length (default 8)")
    p.add_argument("--steps", type=positive_int, default=4000)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    args = p.parse_args(argv)
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise BadInput(f"--out {args.out}: folder does not exist")
    if not 2 <= args.vocab <= 64 or not 3 <= args.n <= 64:
        raise BadInput("--vocab must be in 2 .. 64 and --n in 3 .. 64")
    from depthcert.interop.transformerlens import write_checkpoint
    from depthcert.training.induction import train

    t0 = time.perf_counter()
    cfg, state, stats = train(args.vocab, args.n, args.steps, seed=args.seed, progress=sys.stderr.isatty())
    write_checkpoint(args.out, dict(cfg, steps=args.steps, **stats), state)
    print(f"trained {cfg['model_name']} seed {args.seed}: {args.steps} steps, final batch loss {stats['final_loss']:.4f}, "
          f"accuracy {stats['sampled_accuracy']:.4f} on 4096 sampled points (float), {time.perf_counter() - t0:.0f} s -> {args.out}")
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
