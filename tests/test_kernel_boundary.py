"""The rooms of the code import downward only, and the trusted kernel stays small and closed.

Rooms (docs/architecture.md), from the top: cli > interop, proofs, training > constructions >
checkers.  A module may import its own room and the rooms listed for it in ALLOWED, nothing else.
The kernel (checkers/, listed in checkers/__init__.py) imports only kernel modules, the standard
library, numpy, python-flint, tqdm and threadpoolctl; checkers/certificate.py imports only the standard library;
every .py file of checkers/ is on the kernel list.  Every module of the package is in a room
(or is the public API, which re-exports kernel names only); nobody imports a room by its bare
folder name; modules are imported by plain import statements (no import_module / __import__ /
pkgutil lookups by string) except where a command loads a module the user names.  Each rule is
also run on a synthetic bad import, so the test can fail.
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
# modules outside the rooms: the public API (kernel names only) and the schema's data loader
OUTSIDE_ROOMS = {os.path.join("depthcert", "__init__.py"): {"checkers"},
                 os.path.join("depthcert", "schema", "__init__.py"): set()}
# the only modules that import by a string: a module the user names on the command line
USER_NAMED_MODULES = {os.path.join("depthcert", "cli", "all_sizes.py"),  # --family MODULE:FUNCTION
                      os.path.join("depthcert", "cli", "verify_tracr.py")}  # verify-tracr MODULE:FUNCTION
KERNEL_THIRD_PARTY = {"numpy", "flint", "tqdm", "threadpoolctl"}  # tqdm: the progress bar only; threadpoolctl: one BLAS thread per forked worker
# scipy: only these names, each trusted for the reason checkers/__init__.py states: erfc to ERFC_REL
# (checked against arb by tests/test_trained_components.py), the CSR product as float64 sums of the
# non-zero products in some order (Higham's bound covers any order and subset)
KERNEL_SCIPY = {"scipy.special": {"erfc"}, "scipy.sparse": {"csr_matrix"}}


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
    """Imports of a room the given room may not import, and of any room by its bare folder name
    (`import checkers.model`: works only from a source checkout, and hides the room)."""
    bare = {"checkers", "constructions", "proofs", "training"}
    return sorted(n for n in imported if (room_of(n) and room_of(n) not in ALLOWED[room]) or n.split(".")[0] in bare)


def string_imports(source: str) -> list[str]:
    """Calls that import a module named by a string: importlib.import_module, __import__,
    importlib.util.spec_from_file_location / module_from_spec, pkgutil scans."""
    names = {"import_module", "__import__", "spec_from_file_location", "module_from_spec", "iter_modules",
             "walk_packages"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in names:
                found.append(f"line {node.lineno}: {name}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: import {m}" for m in mods if m.split(".")[0] == "pkgutil"]
    return found


def kernel_violations(imported: set[str], kernel: set[str]) -> list[str]:
    bad = []
    for n in imported:
        if n.startswith("depthcert."):
            if room_of(n) != "checkers" or not _kernel_path(n, kernel):
                bad.append(n)
        elif n in KERNEL_SCIPY:
            continue  # which names it takes: test_kernel_takes_from_scipy_only_the_trusted_names
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


def package_files() -> list[str]:
    """Every .py file of the installed package: the rooms' folders and the depthcert folder."""
    files = set(python_files("depthcert"))
    for folder in ROOMS.values():
        files |= set(python_files(folder))
    return sorted(files)


def test_every_module_is_in_a_room():
    folders = [folder + os.sep for folder in ROOMS.values()]
    loose = [os.path.relpath(p, ROOT) for p in package_files()]
    loose = [p for p in loose if not any(p.startswith(f) for f in folders) and p not in OUTSIDE_ROOMS]
    assert not loose, f"modules in no room (add the room to ROOMS and docs/architecture.md): {loose}"


def test_public_api_imports_only_the_kernel():
    kernel = set(kernel_modules())
    for rel, rooms in OUTSIDE_ROOMS.items():
        package = "depthcert" if rel == os.path.join("depthcert", "__init__.py") else "depthcert.schema"
        imported = imports(open(os.path.join(ROOT, rel)).read(), package, is_package=True)
        inside = {n for n in imported if n.startswith("depthcert.")}
        assert {room_of(n) for n in inside} <= rooms, (rel, sorted(inside))
        assert not kernel_violations(inside, kernel), (rel, kernel_violations(inside, kernel))


def test_modules_are_imported_by_plain_imports():
    bad = []
    for path in package_files():
        rel = os.path.relpath(path, ROOT)
        if rel not in USER_NAMED_MODULES:
            bad += [f"{rel} {hit}" for hit in string_imports(open(path).read())]
    assert not bad, "\n".join(bad)
    for line in ("import importlib\nimportlib.import_module('depthcert.proofs.x')", "__import__('x')",
                 "from importlib import import_module\nimport_module('x')", "import pkgutil",
                 "import importlib.util as u\nu.spec_from_file_location('m', 'f.py')"):
        assert string_imports(line), line
    assert not string_imports("import importlib.resources\nfrom depthcert.checkers import model")


def test_direction_rule_catches_an_upward_import():
    """Self-check on synthetic edges: each of these must be refused."""
    cases = [("checkers", "from depthcert.constructions import build"),
             ("checkers", "import depthcert.proofs.dependence"),
             ("constructions", "from depthcert.proofs.theorems import CLAIMS"),
             ("proofs", "from depthcert.cli.common import run_main"),
             ("interop", "from depthcert.proofs import dependence"),
             ("training", "from depthcert import cli"),
             ("training", "from depthcert.interop.tracr_import import import_tracr"),
             ("cli", "from checkers.model import Model"),
             ("proofs", "import constructions.registry")]
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


def scipy_names(source: str) -> set[str]:
    """Every 'module.name' a source takes from scipy (a bare `import scipy...` gives the module)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "scipy"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scipy":
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _trusted_scipy(name: str) -> bool:
    module, _, attr = name.rpartition(".")
    return attr in KERNEL_SCIPY.get(module, set())


def test_kernel_takes_from_scipy_only_the_trusted_names():
    bad = []
    for path in python_files("checkers"):
        bad += [f"{os.path.relpath(path, ROOT)} takes {n}" for n in scipy_names(open(path).read())
                if not _trusted_scipy(n)]
    assert not bad, "\n".join(bad)
    for line in ("from scipy.special import gammaln", "import scipy.special", "from scipy.sparse import linalg",
                 "from scipy import special"):
        assert not all(_trusted_scipy(n) for n in scipy_names(line)), line
    assert all(_trusted_scipy(n) for n in scipy_names("from scipy.special import erfc"))


def test_kernel_rule_catches_a_non_kernel_import():
    kernel = set(kernel_modules())
    for line in ("import scipy", "from scipy import special", "import scipy.optimize", "import highspy", "from depthcert.proofs.dependence import decide_task",
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
