"""python -m depthcert.cli.train_max_of_k: train the reference Max-of-K model
(depthcert.training.max_of_k, OBSERVED) and write it as a TransformerLens safetensors checkpoint.

    python -m depthcert.cli.train_max_of_k --out training/checkpoints/max_of_k_v64_k4.safetensors
"""
from __future__ import annotations

import sys
import time

from depthcert.cli.common import _Parser, nonnegative_int, plural, positive_int, run_main


def _main(argv) -> int:
    p = _Parser(prog="python -m depthcert.cli.train_max_of_k", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=positive_int, default=64)
    p.add_argument("--k", type=positive_int, default=4)
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--n-train", type=positive_int, default=384_000)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    args = p.parse_args(argv)
    from depthcert.interop.transformerlens import write_checkpoint
    from depthcert.training.max_of_k import train

    t0 = time.perf_counter()
    cfg, state, loss = train(args.vocab, args.k, args.n_train, args.epochs, seed=args.seed,
                             progress=sys.stderr.isatty())
    cfg.update(n_train=args.n_train, epochs=args.epochs, final_loss=round(loss, 6))
    write_checkpoint(args.out, cfg, state)
    print(f"trained {cfg['model_name']} seed {args.seed}: {plural(args.epochs, 'epoch')} of {plural(args.n_train, 'sequence')}, "
          f"final batch loss {loss:.4f}, {time.perf_counter() - t0:.0f} s -> {args.out}")
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
