"""The JSON Schema of every command's --json output (output.schema.json; docs/json.md)."""
from __future__ import annotations

import json
from importlib import resources


def output_schema() -> dict:
    """The schema every command's --json document validates against."""
    return json.loads(resources.files(__name__).joinpath("output.schema.json").read_text(encoding="utf-8"))
