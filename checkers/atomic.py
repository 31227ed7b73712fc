"""Write output files atomically: a temporary file in the same folder, then rename."""
from __future__ import annotations

import json
import os
import tempfile

from depthcert.checkers.errors import BadInput


def write_json_atomic(path: str, obj) -> None:
    """Serialise first, then write a temp file and rename, so a failure leaves nothing behind."""
    text = json.dumps(obj, indent=1) + "\n"
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise BadInput(f"cannot write {path}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".depthcert-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        mask = os.umask(0)  # mkstemp creates 0600; give the file the mode open() would have
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise BadInput(f"cannot write {path}: {exc.strerror}") from None


def read_json(path: str, what: str):
    """Read a JSON file; unreadable or non-JSON input is BadInput naming the file."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {what} file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} file {path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadInput(f"{what} file {path} is nested too deeply") from None
    except ValueError as exc:  # e.g. an int literal beyond Python's 4300-digit conversion limit
        raise BadInput(f"{what} file {path} is not usable JSON: {str(exc).splitlines()[0][:120]}") from None
