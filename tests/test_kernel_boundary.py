"""The trusted kernel stays small and closed: the modules listed in checkers/__init__.py import
only each other, the standard library, numpy and python-flint (never file formats, searches,
constructions or command lines), and checkers/certificate.py imports only the standard library."""
from __future__ import annotations

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKERS = os.path.join(ROOT, "checkers")


def kernel_modules() -> list[str]:
    doc = open(os.path.join(CHECKERS, "__init__.py")).read()
    block = doc.split("test_kernel_boundary.py):", 1)[1].split("Around it", 1)[0]
    return re.findall(r"^\s+([a-z_]+)\.py\s", block, flags=re.M)


def imports(path: str) -> set[str]:
    tree = ast.parse(open(path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "depthcert.checkers":
                out |= {f"depthcert.checkers.{a.name}" for a in node.names}
            else:
                out.add(node.module)
    return out


def test_kernel_list_names_existing_modules():
    mods = kernel_modules()
    assert {"model", "evaluate", "softmax_balls", "symmetry", "exhaustive", "certificate"} <= set(mods)
    for m in mods:
        assert os.path.isfile(os.path.join(CHECKERS, m + ".py")), m


def test_kernel_imports_only_kernel_stdlib_numpy_flint():
    kernel = set(kernel_modules())
    allowed_third = {"numpy", "flint", "tqdm"}  # tqdm: the progress bar only
    for m in kernel:
        for imp in imports(os.path.join(CHECKERS, m + ".py")):
            top = imp.split(".")[0]
            if imp.startswith("depthcert."):
                assert imp.startswith("depthcert.checkers.") and imp.split(".")[2] in kernel, (m, imp)
            else:
                assert top in allowed_third or top in sys.stdlib_module_names or top == "__future__", (m, imp)


def test_certificate_checker_is_standard_library_only():
    for imp in imports(os.path.join(CHECKERS, "certificate.py")):
        assert imp.split(".")[0] in sys.stdlib_module_names or imp == "__future__", imp
