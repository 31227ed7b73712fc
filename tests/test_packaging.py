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
    pyproject.toml's package data names, so an installed package holds it; each folder is a
    listed package of its own (a data folder under a package but not listed made setuptools warn
    "Package ... is absent from the `packages` configuration")."""
    import fnmatch
    import tomllib

    from depthcert.proofs import theorems

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        cfg = tomllib.load(fh)["tool"]["setuptools"]
    base = "depthcert.proofs.certificates"
    globs = [(name[len(base):].lstrip(".").replace(".", "/") + "/" if name != base else "") + g
             for name, pats in cfg["package-data"].items() if name == base or name.startswith(base + ".")
             for g in pats]
    assert {base + ".all_sizes", base + ".depth"} <= set(cfg["packages"])
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


@pytest.mark.slow
def test_a_built_wheel_holds_every_data_file_without_warnings(tmp_path):
    """A non-editable wheel, built from the files pyproject.toml names, holds every stored
    certificate (find-depth, check-certificate and the all-sizes proofs read them), the JSON
    schema and the docs examples, and the build prints no "absent from the `packages`
    configuration" warning."""
    import glob
    import shutil
    import zipfile

    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.safetensors", "*.pt")
    for folder in ("depthcert", "checkers", "constructions", "proofs", "training", "docs/examples"):
        shutil.copytree(os.path.join(ROOT, folder), src / folder, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(tmp_path / "dist"), "-v"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "absent from the `packages` configuration" not in r.stdout + r.stderr
    (wheel,) = glob.glob(str(tmp_path / "dist" / "*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    want = set()
    for pattern, where in (("proofs/certificates/**/*.json", "depthcert/proofs/certificates/"),
                           ("depthcert/schema/*.json", "depthcert/schema/"),
                           ("docs/examples/*.json", "depthcert/examples/")):
        top = pattern.split("*")[0]
        for f in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            want.add(where + os.path.relpath(f, os.path.join(ROOT, top)).replace(os.sep, "/"))
    assert any("/all_sizes/" in w for w in want) and any("/depth/" in w for w in want)
    assert not want - names, sorted(want - names)
