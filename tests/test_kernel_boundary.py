"""The rooms of the code import downward only, and the trusted kernel stays small and closed.

Rooms (docs/architecture.md), from the top: cli > interop, proofs, training > constructions >
checkers.  A module may import its own room and the rooms listed for it in ALLOWED, nothing else.
The kernel (checkers/, listed in checkers/__init__.py) imports only kernel modules, the standard
library, numpy, python-flint, tqdm and threadpoolctl; checkers/certificate.py imports only the standard library;
every .py file of checkers/ is on the kernel list.  Each rule is also run on a synthetic bad
import, so the test can fail.
"""
from __future__ import annotations

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKERS = os.path.join(ROOT, "checkers")

# room -> the folder it lives in (the package-dir mapping of pyproject.toml)
ROOMS = {
    "checkers": "checkers",
    "constructions": "constructions",
    "proofs": "proofs",
    "training": "training",
    "interop": os.path.join("depthcert", "interop"),
    "cli": os.path.join("depthcert", "cli"),
}
# room -> the rooms it may import (its own included): arrows only downward
ALLOWED = {
    "checkers": {"checkers"},
    "constructions": {"constructions", "checkers"},
    "proofs": {"proofs", "constructions", "checkers"},
    "interop": {"interop", "constructions", "checkers"},
    "training": {"training", "constructions", "checkers"},
    "cli": {"cli", "interop", "proofs", "training", "constructions", "checkers"},
}
KERNEL_THIRD_PARTY = {"numpy", "flint", "tqdm", "threadpoolctl"}  # tqdm: the progress bar only; threadpoolctl: one BLAS thread per forked worker


def kernel_modules() -> list[str]:
    """The kernel list of checkers/__init__.py, as paths relative to checkers/ ('tasks/base.py')."""
    doc = open(os.path.join(CHECKERS, "__init__.py")).read()
    block = doc.split("The kernel list", 1)[1].split("Everything else", 1)[0]
    return re.findall(r"^ {4}([a-z_/]+\.py)\s", block, flags=re.M)


def python_files(folder: str) -> list[str]:
    out = []
    for here, dirs, files in os.walk(os.path.join(ROOT, folder)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.join(here, f) for f in files if f.endswith(".py")]
    return sorted(out)


def module_name(path: str) -> str:
    """depthcert.<room>... for a file of a room's folder."""
    rel = os.path.relpath(path, ROOT)
    for room, folder in ROOMS.items():
        if rel.startswith(folder + os.sep):
            parts = os.path.relpath(rel, folder)[: -len(".py")].split(os.sep)
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            return ".".join(["depthcert", room] + parts)
    raise ValueError(path)


def imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module a source imports, absolute; `from depthcert import X` names depthcert.X for
    a room and the public API (depthcert.checkers) for an export."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            if base == "depthcert":
                out |= {f"depthcert.{a.name}" if a.name in ROOMS else "depthcert.checkers" for a in node.names}
            elif base.startswith("depthcert."):
                out |= {f"{base}.{a.name}" for a in node.names}  # a submodule or a name: same room
            else:
                out.add(base)
    return out


def room_of(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "depthcert" and len(parts) > 1 and parts[1] in ROOMS else None


def direction_violations(room: str, imported: set[str]) -> list[str]:
    return sorted(n for n in imported if room_of(n) and room_of(n) not in ALLOWED[room])


def kernel_violations(imported: set[str], kernel: set[str]) -> list[str]:
    bad = []
    for n in imported:
        if n.startswith("depthcert."):
            if room_of(n) != "checkers" or not _kernel_path(n, kernel):
                bad.append(n)
        elif n.split(".")[0] not in KERNEL_THIRD_PARTY | set(sys.stdlib_module_names) | {"__future__"}:
            bad.append(n)
    return sorted(bad)


def _kernel_path(name: str, kernel: set[str]) -> bool:
    """depthcert.checkers.a.b (a module, or a name defined in module a) is on the kernel list."""
    parts = name.split(".")[2:]
    if not parts:
        return True  # the package itself
    for stem in ("/".join(parts), "/".join(parts[:-1])):
        if stem and (stem + ".py" in kernel or stem + "/__init__.py" in kernel):
            return True
    return False


def _file_imports(path: str) -> set[str]:
    return imports(open(path).read(), module_name(path), path.endswith("__init__.py"))


def test_every_room_imports_only_downward():
    bad = []
    for room, folder in ROOMS.items():
        for path in python_files(folder):
            bad += [f"{os.path.relpath(path, ROOT)} imports {n}" for n in direction_violations(room, _file_imports(path))]
    assert not bad, "\n".join(bad)


def test_direction_rule_catches_an_upward_import():
    """Self-check on synthetic edges: each of these must be refused."""
    cases = [("checkers", "from depthcert.constructions import build"),
             ("checkers", "import depthcert.proofs.dependence"),
             ("constructions", "from depthcert.proofs.theorems import CLAIMS"),
             ("proofs", "from depthcert.cli.common import run_main"),
             ("interop", "from depthcert.proofs import dependence"),
             ("training", "from depthcert import cli"),
             ("training", "from depthcert.interop.tracr_import import import_tracr")]
    for room, line in cases:
        assert direction_violations(room, imports(line, f"depthcert.{room}.m")), (room, line)
    assert not direction_violations("cli", imports("from depthcert import constructions", "depthcert.cli.m"))
    assert not direction_violations("proofs", imports("from depthcert import Model", "depthcert.proofs.m"))


def test_kernel_list_names_exactly_the_files_of_checkers():
    listed = kernel_modules()
    # weight_balls.py: --robustness's certified linf radius and float-format verdicts rest on it
    assert {"model.py", "evaluate.py", "softmax_balls.py", "weight_balls.py", "symmetry.py", "exhaustive.py", "certificate.py",
            "tasks/base.py"} <= set(listed)
    # kernel by reason: softmax verdicts rest on the certified float64 intervals, the exact tie
    # decision and the one-layer attention tables; accuracy counts (verify-model) are verdicts on
    # every point, and their journal resumes them; Max-of-K is a dataset an accuracy is about
    assert {"softmax_intervals.py", "softmax_ties.py", "attention_tables.py", "accuracy.py", "accuracy_journal.py",
            "tasks/max_of_k.py"} <= set(listed)
    on_disk = {os.path.relpath(p, CHECKERS).replace(os.sep, "/") for p in python_files("checkers")} - {"__init__.py"}
    assert set(listed) == on_disk, (sorted(on_disk - set(listed)), sorted(set(listed) - on_disk))


def test_kernel_imports_only_kernel_stdlib_numpy_flint():
    kernel = set(kernel_modules())
    bad = []
    for path in python_files("checkers"):
        bad += [f"{os.path.relpath(path, ROOT)} imports {n}" for n in kernel_violations(_file_imports(path), kernel)]
    assert not bad, "\n".join(bad)


def test_kernel_rule_catches_a_non_kernel_import():
    kernel = set(kernel_modules())
    for line in ("import scipy", "import highspy", "from depthcert.proofs.dependence import decide_task",
                 "from depthcert.checkers.no_such_module import x", "import sympy"):
        assert kernel_violations(imports(line, "depthcert.checkers.m"), kernel), line
    assert not kernel_violations(imports("from depthcert.checkers.tasks.base import Task\nimport numpy",
                                         "depthcert.checkers.m"), kernel)


def test_certificate_checker_is_standard_library_only():
    for imp in imports(open(os.path.join(CHECKERS, "certificate.py")).read(), "depthcert.checkers.certificate"):
        assert imp.split(".")[0] in sys.stdlib_module_names or imp == "__future__", imp


def test_console_scripts_point_into_the_cli():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert scripts
    for name, target in scripts.items():
        assert target.startswith("depthcert.cli."), (name, target)
