"""Packaging: the installed distribution is one `depthcert` namespace plus console scripts.

The repository's folders checkers/, constructions/, proofs/, training/ are installed as
depthcert.checkers, ... (pyproject.toml package-dir); nothing generic lands at the top level of
a user's environment, where it would collide with other distributions or a user's own folders.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERIC = ("checkers", "constructions", "proofs", "training")


def _dist():
    """The installed distribution (site-packages), not the build's depthcert.egg-info that
    setuptools leaves in the repository folder (on sys.path when pytest runs from there)."""
    import sysconfig

    where = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    found = [d for d in md.distributions(path=where) if d.metadata["Name"] == "depthcert"]
    if not found:  # pragma: no cover - the README installs it first
        pytest.skip("depthcert is not installed (pip install -e .)")
    return found[0]


def test_top_level_is_only_depthcert():
    dist = _dist()
    top = (dist.read_text("top_level.txt") or "").split()
    assert top == ["depthcert"], top


def test_installed_files_are_namespace_scripts_or_metadata():
    dist = _dist()
    scripts = {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}
    assert {"verify-construction", "find-dependence", "check-certificate"} <= scripts
    for f in dist.files or ():
        p = str(f).replace("\\", "/")
        parts = p.split("/")
        ok = (parts[0] == "depthcert" or parts[0].startswith("depthcert-") and parts[0].endswith(".dist-info")
              or "__editable__" in p or parts[-1] in scripts)
        assert ok, f"installed file outside the depthcert namespace: {p}"
        assert parts[0] not in GENERIC, p


def test_console_scripts_point_into_the_namespace():
    dist = _dist()
    for ep in dist.entry_points:
        if ep.group == "console_scripts":
            assert ep.value.startswith("depthcert."), ep


def test_generic_names_are_not_importable_outside_the_repository(tmp_path):
    """From a folder of the user's, `import checkers` fails and `import depthcert.checkers` works."""
    code = ("import importlib.util, sys\n"
            "missing = [n for n in %r if importlib.util.find_spec(n) is not None]\n"
            "import depthcert.checkers.model, depthcert.cli.verify_construction, depthcert.constructions.registry\n"
            "import depthcert\n"
            "print('generic:', missing, 'api:', depthcert.verify.__module__)\n" % (GENERIC,))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "generic: [] api: depthcert.checkers.exhaustive", r.stdout


def test_stored_certificates_ship_with_the_package():
    """Every stored certificate (the top level, all_sizes/, depth/) is a .json file that
    pyproject.toml's package data names, so an installed package holds it."""
    import fnmatch
    import tomllib

    from depthcert.proofs import theorems

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        globs = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["depthcert.proofs.certificates"]
    files = []
    for here, dirs, names in os.walk(theorems.CERT_DIR):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files += [os.path.relpath(os.path.join(here, n), theorems.CERT_DIR).replace(os.sep, "/") for n in names]
    files = [f for f in files if f != "__init__.py"]
    assert files and all(f.endswith(".json") for f in files), files
    assert {"all_sizes", "depth"} <= {f.split("/")[0] for f in files if "/" in f}
    unshipped = [f for f in files if not any(fnmatch.fnmatchcase(f, g) and f.count("/") == g.count("/") for g in globs)]
    assert not unshipped, unshipped


def test_public_api_exports_resolve():
    import depthcert

    for name in depthcert.__all__:
        assert getattr(depthcert, name) is not None, name
    with pytest.raises(AttributeError):
        depthcert.no_such_name  # noqa: B018


def test_pyproject_maps_every_folder_under_depthcert():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        cfg = tomllib.load(fh)["tool"]["setuptools"]
    assert all(p == "depthcert" or p.startswith("depthcert.") for p in cfg["packages"])
    assert {cfg["package-dir"][f"depthcert.{g}"] for g in GENERIC} == set(GENERIC)
