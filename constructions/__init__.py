"""depthcert.constructions: the paper's hand-made models, one module per mechanism.

One public entry point: `build(task, variant=None, as_printed=False)` returns a `Construction`
(task, variant, theorem, model); `variants(task_name)` lists a task's variants (the first is the
default), `all_variants()` every task's, and `cot_builders()` the chain-of-thought models;
`builder_of(task, variant)` and `fits_readout(builder)` say whether a builder's read-out is Lemma 3's.  The table is registry.py's.
"""
from __future__ import annotations

from depthcert.constructions.construction import Construction
from depthcert.constructions.registry import all_variants, build, builder_of, cot_builders, fits_readout, variants

__all__ = ["Construction", "all_variants", "build", "builder_of", "cot_builders", "fits_readout", "variants"]
