"""depthcert: exact verification of transformer constructions and depth lower bounds.

The Python API (tutorial: docs/tutorial.md).  Build a model by named blocks, check it on every
point of a dataset, read the verdict:

    from depthcert import BlockMatrix, Dataset, Head, Layer, Layout, Model, verify

    lay = Layout.of(("token", 3), ("position", 4), ("prev", 3))
    ...
    v = verify(model, Dataset(sequences, labels))
    v.verdict, v.min_margin, v.counterexample

Names exported here (everything else is internal and may change):
  model        Model, Layer, Head, MLP                     checkers/model.py
  layout       Layout, BlockMatrix, eye, zeros             checkers/layout.py
  data         Dataset (per-sequence or per-position labels), make_task, Task
  checking     verify -> Verdict (Counterexample, UndecidedPoint), trace (exact forward pass)
  files        load_weights, save_weights, model_to_json, model_from_json, load_dataset,
               save_dataset
  errors       BadInput

The installed package is one namespace: `depthcert.checkers` (the trusted kernel),
`depthcert.constructions`, `depthcert.proofs` and `depthcert.training` are the repository's
top-level folders of the same names, mapped under `depthcert` by pyproject.toml;
`depthcert.cli` (the commands) and `depthcert.interop` (importers) are this folder's
subpackages (docs/architecture.md).
"""
from __future__ import annotations

import importlib as _importlib
import os as _os

# Running from a source checkout without installing: the subpackages are this folder's siblings.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "checkers")) and _os.path.isfile(
    _os.path.join(_os.path.dirname(_here), "checkers", "__init__.py")
):
    __path__.append(_os.path.dirname(_here))  # noqa: F821 (package __path__)

_EXPORTS = {
    "Model": "depthcert.checkers.model",
    "Layer": "depthcert.checkers.model",
    "Head": "depthcert.checkers.model",
    "MLP": "depthcert.checkers.model",
    "Layout": "depthcert.checkers.layout",
    "BlockMatrix": "depthcert.checkers.layout",
    "eye": "depthcert.checkers.layout",
    "zeros": "depthcert.checkers.layout",
    "verify": "depthcert.checkers.exhaustive",
    "Verdict": "depthcert.checkers.exhaustive",
    "Counterexample": "depthcert.checkers.exhaustive",
    "UndecidedPoint": "depthcert.checkers.exhaustive",
    "trace": "depthcert.checkers.trace",
    "Task": "depthcert.checkers.tasks",
    "make_task": "depthcert.checkers.tasks",
    "Dataset": ("depthcert.checkers.tasks.dataset_file", "DatasetTask"),
    "load_dataset": "depthcert.checkers.tasks.dataset_file",
    "save_dataset": "depthcert.checkers.tasks.dataset_file",
    "model_to_json": "depthcert.checkers.weights_file",
    "model_from_json": "depthcert.checkers.weights_file",
    "load_weights": "depthcert.checkers.weights_file",
    "save_weights": "depthcert.checkers.weights_file",
    "BadInput": "depthcert.checkers.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Exports load on first use, so `import depthcert` stays cheap."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'depthcert' has no attribute {name!r}")
    target = _EXPORTS[name]
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(_importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
