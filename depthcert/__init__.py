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

import os as _os

# Running from a source checkout without installing: the subpackages are this folder's siblings.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "checkers")) and _os.path.isfile(
    _os.path.join(_os.path.dirname(_here), "checkers", "__init__.py")
):
    __path__.append(_os.path.dirname(_here))  # noqa: F821 (package __path__)

# The public API: kernel names only, by plain imports (docs/architecture.md).
from depthcert.checkers.errors import BadInput  # noqa: E402
from depthcert.checkers.exhaustive import Counterexample, UndecidedPoint, Verdict, verify  # noqa: E402
from depthcert.checkers.layout import BlockMatrix, Layout, eye, zeros  # noqa: E402
from depthcert.checkers.model import MLP, Head, Layer, Model  # noqa: E402
from depthcert.checkers.tasks import Task, make_task  # noqa: E402
from depthcert.checkers.tasks.dataset_file import DatasetTask as Dataset  # noqa: E402
from depthcert.checkers.tasks.dataset_file import load_dataset, save_dataset  # noqa: E402
from depthcert.checkers.trace import trace  # noqa: E402
from depthcert.checkers.weights_file import load_weights, model_from_json, model_to_json, save_weights  # noqa: E402

__all__ = ["BadInput", "BlockMatrix", "Counterexample", "Dataset", "Head", "Layer", "Layout", "MLP", "Model", "Task",
           "UndecidedPoint", "Verdict", "eye", "load_dataset", "load_weights", "make_task", "model_from_json",
           "model_to_json", "save_dataset", "save_weights", "trace", "verify", "zeros"]
