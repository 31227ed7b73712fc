"""depthcert: exact verification of transformer constructions and depth lower bounds.

The installed package is one namespace: `depthcert.checkers` (the trusted core),
`depthcert.constructions`, `depthcert.proofs` and `depthcert.training` are the repository's
top-level folders of the same names, mapped under `depthcert` by pyproject.toml.
"""
from __future__ import annotations

import os as _os

# Running from a source checkout without installing: the subpackages are this folder's siblings.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "checkers")) and _os.path.isfile(
    _os.path.join(_os.path.dirname(_here), "checkers", "__init__.py")
):
    __path__.append(_os.path.dirname(_here))  # noqa: F821 (package __path__)
