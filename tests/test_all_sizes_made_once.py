"""Every closed kind is made by calling its function once per process (per set of symbols): the proof,
the finite check of the same run and the printed hash are of that one value (constructions/closed.py
made_once).  Each family here writes a line to a file per call and returns another value from its
second call on (for the same symbols); `--all-sizes` with sizes given (the instance is the finite
check in the same run) must prove the first value, print its hash, and have called the function
exactly once per set of symbols.  And `--expect-hash` makes the comparison with a finite check
elsewhere one command (exit 2, one line, on a different hash)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction
from depthcert.constructions import closed as C

FAMILIES = textwrap.dedent('''
    import os
    from dataclasses import replace
    from fractions import Fraction
    from depthcert.constructions import closed as C, group_tree, multihop
    from depthcert.constructions.copy_matching import closed_value as icqa_value
    from depthcert.constructions.memorization import closed_value as sc_value

    LOG = os.environ["DEPTHCERT_TEST_CALLS"]

    def _count(sym):
        """one line per call: the symbols handed; returns how many calls with these symbols before this one"""
        text = C.handed_text(sym)
        with open(LOG, "a+") as fh:
            fh.seek(0)
            before = fh.read().splitlines().count(text)
            fh.write(text + "\\n")
        return before

    def _negated(table):
        return C.ClosedTable(tuple((k, tuple((m, -c) for m, c in p)) for k, p in table.entries))

    def icqa(sym):
        v = icqa_value(False)
        return v if _count(sym) == 0 else replace(v, W_O=_negated(v.W_O))

    def hops(sym):
        v = multihop.build_linear(sym).symbolic
        return v if _count(sym) == 0 else replace(v, W_O=_negated(v.W_O))

    def sc(sym):
        v = sc_value()
        return v if _count(sym) == 0 else replace(v, read_weight=tuple((m, -c) for m, c in v.read_weight))

    def count(sym):
        first = _count(sym) == 0
        out = group_tree.build_count(sym)
        if not first:  # every later call with these symbols: the read-out negated
            s = out.symbolic
            out = replace(out, symbolic=replace(s, readout=tuple(replace(e, value=-e.value) for e in s.readout)))
        return out
''')


@pytest.fixture()
def fam(tmp_path, monkeypatch):
    path = tmp_path / "counting_families.py"
    path.write_text(FAMILIES)
    log = tmp_path / "calls.txt"
    monkeypatch.setenv("DEPTHCERT_TEST_CALLS", str(log))
    return str(path), log


def run(argv, capsys):
    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def calls(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


KINDS = [  # (task argv, function, exit code of --all-sizes, symbol sets handed, the registry's value hash)
    (["icqa", "--k", "2", "--n-questions", "3", "--n-answers", "3"], "icqa", 0, 1, "icqa"),
    (["multihop", "--k", "2", "--hops", "2", "--n-entities", "3"], "hops", 3, 1, None),
    (["sc", "--length", "3", "--alphabet", "2"], "sc", 0, 1, "sc"),
    (["parity", "--n", "6"], "count", 0, 4, "parity"),
    (["mod-count", "--p", "3", "--n", "5"], "count", 3, 5, None),
]


def _registry_hash(name):
    from depthcert.constructions import copy_matching, group_tree, memorization

    value = {"icqa": lambda: copy_matching.closed_value(), "sc": lambda: memorization.closed_value(),
             "parity": lambda: group_tree.closed_count_value("parity", 2)}[name]()
    return C.content_hash(value)


@pytest.mark.parametrize("argv,fn,code_want,sets,registry", KINDS, ids=[k[1] + "-" + k[0][0] for k in KINDS])
def test_all_sizes_calls_the_family_once_per_symbol_set(argv, fn, code_want, sets, registry, fam, capsys):
    path, log = fam
    code, out, err = run(argv + ["--family", f"{path}:{fn}", "--all-sizes"], capsys)
    assert code == code_want, out + err
    got = calls(log)
    assert len(got) == sets and len(set(got)) == sets, got  # once per set of symbols, none repeated
    value = out.split("value       ")[1].split()[0]
    if registry:  # the first call's value is the registry's: that is the value proven
        assert value == _registry_hash(registry)
    assert "= the proof's margin" in out and "verify verified" in out, out  # the instance: the same value
    fam_row = out.split("  family      ")[1].split("\n  read-out")[0]
    assert ("ran once in this process (1 call)" if sets == 1 else f"{sets} calls, each with its own symbols, none "
            "repeated") in fam_row, fam_row
    assert fam_row.count("handed") == sets and f"--expect-hash {value}" in fam_row, fam_row
    for text in got:
        assert text in fam_row


@pytest.mark.parametrize("argv,fn,code_want,sets,registry", KINDS, ids=[k[1] + "-" + k[0][0] for k in KINDS])
def test_the_finite_check_calls_the_family_once(argv, fn, code_want, sets, registry, fam, capsys):
    path, log = fam
    code, out, err = run(argv + ["--family", f"{path}:{fn}"], capsys)
    assert code == 0 and "VERIFIED" in out, out + err
    assert len(calls(log)) == sets
    if registry:
        assert f"value       {_registry_hash(registry)}" in out


def test_json_says_what_the_family_was_handed(fam, capsys):
    path, log = fam
    code, out, _ = run(["parity", "--n", "4", "--family", f"{path}:count", "--all-sizes", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["family"]["calls"] == 4 and doc["family"]["handed"] == calls(log)
    assert doc["family"]["content_hash"] == doc["content_hash"] == doc["certificate"]["content_hash"]
    from depthcert.proofs import check_all_sizes

    assert check_all_sizes.check_data(doc)[0] == 0  # the report with its family field re-checks


def test_the_api_makes_the_value_once(fam):
    """prove(construct=f) and closed.value_of(f, ...) in one process: f runs once, both have one value."""
    import importlib.util

    from depthcert.checkers.tasks import make_task
    from depthcert.constructions import copy_matching
    from depthcert.proofs.all_sizes import prove

    path, log = fam
    spec = importlib.util.spec_from_file_location("counting_families_api", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rep = prove(make_task("icqa", k=1), construct=mod.icqa)
    value = C.value_of(mod.icqa, copy_matching.symbolic_task())
    assert rep.status == "proven" and rep.value is value and len(calls(log)) == 1
    assert C.making(mod.icqa).calls == 1


# ----------------------------------------------------------------------------- --expect-hash

ARGV_READER = textwrap.dedent('''
    import sys
    from dataclasses import replace
    from depthcert.constructions import closed as C
    from depthcert.constructions.copy_matching import closed_value

    def build(sym):
        """the paper's value, unless the command line has --k: then the read-out negated"""
        v = closed_value(False)
        if "--k" in sys.argv:
            return replace(v, W_O=C.ClosedTable(tuple((k, tuple((m, -c) for m, c in p)) for k, p in v.W_O.entries)))
        return v
''')


def _cli(args, cwd):
    r = subprocess.run([sys.executable, "-m", "depthcert.cli.verify_construction", *args], capture_output=True,
                       text=True, cwd=cwd, timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_a_family_that_reads_the_command_line_is_caught_by_its_hash(tmp_path):
    """The audit's case: proven without sizes (it reads sys.argv), refuted by the finite check with --k.
    The proof's output says what is outside the value and gives the command; with --expect-hash the
    finite check refuses, one line, exit 2, naming both hashes."""
    (tmp_path / "reader.py").write_text(ARGV_READER)
    code, out, err = _cli(["icqa", "--family", "reader.py:build", "--all-sizes"], tmp_path)
    assert code == 0 and "PROVEN FOR ALL SIZES" in out, out + err
    proven = out.split("value       ")[1].split()[0]
    assert "not in the value" in out and f"--expect-hash {proven}" in out
    code, out, err = _cli(["icqa", "--family", "reader.py:build", "--k", "2", "--expect-hash", proven], tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("error: --expect-hash: the closed value built here is sha256:") and f"not {proven}" in err


def test_expect_hash_passes_when_the_values_agree_and_refuses_otherwise(capsys):
    icqa = C.content_hash(__import__("depthcert.constructions.copy_matching", fromlist=["x"]).closed_value())
    code, out, err = run(["icqa", "--k", "2", "--expect-hash", icqa], capsys)
    assert code == 0 and "VERIFIED" in out and f"value       {icqa}" in out, out + err
    code, out, err = run(["icqa", "--all-sizes", "--expect-hash", icqa], capsys)
    assert code == 0 and "PROVEN FOR ALL SIZES" in out, out + err
    other = "sha256:" + "0" * 64
    for argv, needle in ((["icqa", "--k", "2", "--expect-hash", other], "the closed value built here is"),
                         (["icqa", "--all-sizes", "--expect-hash", other], "the closed value built here is"),
                         (["icqa", "--k", "2", "--expect-hash", "sha256:abc"], "not a content hash"),
                         (["sc", "--length", "3", "--alphabet", "2", "--as-printed", "--expect-hash", icqa],
                          "has no closed value"),
                         (["tm", "--variant", "ternary", "--l", "3", "--alphabet", "3", "--expect-hash", other],
                          "the closed value built here is")):
        code, out, err = run(argv, capsys)
        assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, (argv, out, err)


def test_expect_hash_refuses_a_run_that_replaces_the_values_read_out(capsys):
    """tm ternary's default finite check fits a max-margin read-out in place of the value's (Lemma 3's):
    with the value's hash it is refused (it would not check that value); --readout lemma3 checks it."""
    argv = ["tm", "--variant", "ternary", "--l", "3", "--alphabet", "3"]
    code, out, _ = run(argv + ["--all-sizes"], capsys)
    proven = out.split("value       ")[1].split()[0]
    code, out, err = run(argv + ["--expect-hash", proven], capsys)  # the fit's build: another value
    assert code == 2 and "the closed value built here is" in err and out == "", (out, err)
    code, out, _ = run(argv, capsys)
    built = out.split("value       ")[1].split()[0]
    assert built != proven and "(its read-out replaced by the max-margin fit)" in out
    code, out, err = run(argv + ["--expect-hash", built], capsys)  # its own hash: but its read-out is the fit's
    assert code == 2 and "max-margin fit" in err and out == "", (out, err)
    code, out, err = run(argv + ["--readout", "lemma3", "--expect-hash", proven], capsys)
    assert code == 0 and "VERIFIED" in out and f"value       {proven}" in out, (out, err)


def test_a_callable_that_is_never_equal_to_itself_is_still_made_once():
    """The memo is by identity: a callable object whose __eq__ says False and whose hash changes on every
    call is still called once for the same symbols."""
    from depthcert.constructions import copy_matching

    class Sly:
        def __init__(self):
            self.calls, self.h = 0, 0

        def __eq__(self, other):
            return False

        def __hash__(self):
            self.h += 1
            return self.h

        def __call__(self, sym):
            self.calls += 1
            return copy_matching.closed_value()

    fn = Sly()
    a = C.value_of(fn, copy_matching.symbolic_task())
    b = C.value_of(fn, copy_matching.symbolic_task())
    assert a is b and fn.calls == 1 and C.making(fn).calls == 1
