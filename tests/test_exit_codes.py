"""Exit codes are documented once and agree everywhere: README's table ("Exit codes") lists, for
every console command, exactly the codes depthcert/cli/errors.py's EXIT_CODES gives it, and every
command's --help ends with that list."""
from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

from depthcert.cli.errors import EXIT_CODES, exit_codes_epilog

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def readme_table() -> dict[str, set[int]]:
    """command -> the codes its rows of the exit-code table (docs/commands.md) fill in (a cell "-": not used)."""
    text = (ROOT / "docs" / "commands.md").read_text()
    section = text.split("## Exit codes", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["command", "0", "1", "2", "3", "4"], header
    table: dict[str, set[int]] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        codes = {int(h) for h, c in zip(header[1:], cells[1:]) if c != "-"}
        for name in re.findall(r"`([a-z-]+)", cells[0].split("(")[0]):
            table.setdefault(name, set()).update(codes)
    return table


def test_every_console_script_has_its_exit_codes():
    assert set(SCRIPTS) == set(EXIT_CODES), set(SCRIPTS) ^ set(EXIT_CODES)


def test_readme_table_lists_every_command_with_its_codes():
    table = readme_table()
    for name, codes in EXIT_CODES.items():
        assert table.get(name) == set(codes), (name, table.get(name), set(codes))
    assert README_ONCE in (ROOT / "docs" / "commands.md").read_text()


README_ONCE = "Every command and every exit code, once:"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_ends_with_the_exit_codes(name, capsys):
    module, func = SCRIPTS[name].split(":")
    main = getattr(importlib.import_module(module), func)
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = "".join(capsys.readouterr().out.split())  # argparse wraps the epilog, also at hyphens
    assert out.endswith("".join(exit_codes_epilog(name).split())), (name, out[-400:])


@pytest.mark.parametrize("module,attr", [("depthcert.checkers.certificate", "classify"),
                                         ("depthcert.proofs.check_all_sizes", "rederive")])
def test_standalone_checkers_exit_4_on_a_bug(module, attr, tmp_path, monkeypatch, capsys):
    """The standard-library checkers: an unexpected exception is exit 4 and one line, never exit 1
    (which means invalid)."""
    mod = importlib.import_module(module)
    path = tmp_path / "c.json"
    path.write_text('{"format": "depthcert.all-sizes", "version": 1, "params": [], "points": [{}]}')

    def boom(*args, **kwargs):
        raise ZeroDivisionError("injected")

    monkeypatch.setattr(mod, attr, boom)
    assert mod.main([str(path)]) == 4
    err = capsys.readouterr().err
    assert err == "internal error: ZeroDivisionError: injected; please report\n", err
