"""export-transformerlens WEIGHTS OUT.safetensors: a depthcert model as a TransformerLens checkpoint.

WEIGHTS is a depthcert weights file (.json; `verify-construction TASK --export FILE` writes one).
OUT holds the HookedTransformer state dict, its config (metadata "transformerlens_config") and
depthcert's token and class names; `verify-model OUT ...` reads it back, and
`HookedTransformer(HookedTransformerConfig(**cfg)).load_state_dict(...)` loads it into
TransformerLens.  The weights are rounded to float32 (--dtype float64 keeps more): the export is a
float approximation of the exact model.  Exit codes: 0 written, 2 bad input (one line; relu or
hardmax attention is refused: TransformerLens has only softmax).  --json: one document
(`wrote`, `dtype`, the TransformerLens `config`).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.cli.common import _Parser, data_file, run_main


def _main(argv) -> int:
    p = _Parser(prog="export-transformerlens", description="Write a depthcert model as a TransformerLens checkpoint.")
    p.add_argument("weights", help="depthcert weights file (.json)")
    p.add_argument("out", help="output .safetensors file")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout (the file and its config)")
    args = p.parse_args(argv)
    if not args.out.endswith(".safetensors"):
        raise BadInput(f"{args.out}: the output must be a .safetensors file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise BadInput(f"cannot write {args.out}: folder does not exist")
    from depthcert.checkers.weights_file import load_weights
    from depthcert.interop.transformerlens import export_checkpoint

    model = load_weights(data_file(args.weights))  # docs/examples/NAME from any folder
    cfg = export_checkpoint(model, args.out, np.float32 if args.dtype == "float32" else np.float64)
    if args.json:
        import json

        print(json.dumps({"command": "export-transformerlens", "verdict": "written", "wrote": [args.out],
                          "dtype": args.dtype, "config": cfg}))
        return 0
    print(f"wrote {args.out}: HookedTransformer n_layers={cfg['n_layers']} n_heads={cfg['n_heads']} "
          f"d_model={cfg['d_model']} d_head={cfg['d_head']} d_vocab={cfg['d_vocab']} n_ctx={cfg['n_ctx']} "
          f"attention_dir={cfg['attention_dir']}" + (f" d_mlp={cfg['d_mlp']}" if cfg["d_mlp"] else " attn_only") +
          f", {args.dtype} weights")
    return 0


def export_transformerlens_main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    sys.exit(export_transformerlens_main())
