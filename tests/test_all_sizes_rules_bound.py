"""The stand-alone all-sizes checker (proofs/check_all_sizes.py, run as `python -I`) derives what it
certifies from the value it hashes, for every certificate kind: Theorem 1's `lemma4` rules and the
count rules are read from the value and must equal the certificate's entry by entry; a lumped
certificate's tables must be the value's split by the point's parts.  Per kind: the rules (tables)
edited alone, the value edited alone (with and without a new hash), and both edited consistently with
a new hash -- rejected, unless the edited certificate is still a true proof (then it is valid for the
new hash, not the construction's).  And malformed or hostile JSON is exit 2 with one line."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from depthcert.proofs import check_all_sizes as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKER = os.path.join(ROOT, "proofs", "check_all_sizes.py")
STORED = os.path.join(ROOT, "proofs", "certificates", "all_sizes")


def stored(name: str) -> dict:
    with open(os.path.join(STORED, name + ".json")) as fh:
        return json.load(fh)


def check(tmp_path, data, raw: str | None = None) -> tuple[int, str, str]:
    path = tmp_path / "cert.json"
    path.write_text(raw if raw is not None else json.dumps(data))
    r = subprocess.run([sys.executable, "-I", CHECKER, str(path)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def rehash(cert: dict) -> None:
    cert["content_hash"] = C._sha256_of(cert["value"])


def one_line(err: str) -> None:
    assert err.count("\n") == 1 and err.startswith("invalid: ") and "Traceback" not in err, err


def poly(c) -> list:
    return [[[0, 0, 0], str(c)]]


# ----------------------------------------------------------------------------- Theorem 1 (lemma4)


def sc_edit(cert, *, rule=None, value=None, new_hash=False, margin=None):
    d = copy.deepcopy(cert)
    if rule:
        d["rules"][rule[0]] = rule[1]
    if value:
        value(d["value"])
    if new_hash:
        rehash(d)
    if margin is not None:
        d["margin"] = margin
    return d


def _read_weight(c):
    def edit(v):
        v["read_weight"] = poly(c)
    return edit


def test_sc_rules_edited_alone_are_refused(tmp_path):
    """The audit's case: w = 2 in the rules and margin 2, the value (margin 1) untouched: it was valid and
    printed the construction's hash; now the rules are not the value's."""
    cert = stored("sc")
    assert check(tmp_path, cert)[0] == 0
    code, out, err = check(tmp_path, sc_edit(cert, rule=("w", poly(2)), margin="2"))
    assert code == 2 and "rule w is" in err and "the value's is" in err, (code, out, err)
    one_line(err)
    for rule in (("a", poly(2)), ("o", [[[1, 0, 1], "1"], [[1, 0, 0], "1"], [[2, 0, 0], "1"]]), ("m", poly(7))):
        code, out, err = check(tmp_path, sc_edit(cert, rule=rule))
        assert code == 2 and f"rule {rule[0]} is" in err, (rule, code, out, err)


def test_sc_value_edited_alone_is_refused(tmp_path):
    cert = stored("sc")
    code, _, err = check(tmp_path, sc_edit(cert, value=_read_weight(2)))
    assert code == 2 and "hashes to" in err, err
    code, _, err = check(tmp_path, sc_edit(cert, value=_read_weight(2), new_hash=True))
    assert code == 2 and "rule w is" in err, err


def test_sc_both_edited_consistently(tmp_path):
    cert = stored("sc")
    # still a true proof (the read-out doubled, margin 2): valid, for the new hash, never the construction's
    d = sc_edit(cert, rule=("w", poly(2)), value=_read_weight(2), new_hash=True, margin="2")
    code, out, err = check(tmp_path, d)
    assert code == 0 and d["content_hash"] in out and cert["content_hash"] not in out, (out, err)
    assert "minimum margin 2 (normalized 1" in out
    # ... but with the old margin 1 it is not the margin derived
    d = sc_edit(cert, rule=("w", poly(2)), value=_read_weight(2), new_hash=True)
    assert check(tmp_path, d)[0] == 2
    # a read-out weight -1: the derivation fails
    d = sc_edit(cert, rule=("w", poly(-1)), value=_read_weight(-1), new_hash=True)
    code, out, err = check(tmp_path, d)
    assert code == 1 and "a_h s_h w_h > 0" in out, (out, err)
    # a slot offset with an h^2 term, in both: the slots overlap
    o = cert["rules"]["o"] + [[[2, 0, 0], "1"]]

    def offset(v):
        v["copy"]["W_V"][0][3] = o
        v["read_offset"] = o
    d = sc_edit(cert, rule=("o", o), value=offset, new_hash=True)
    d["rules"]["read_offset"] = o
    code, out, err = check(tmp_path, d)
    assert code == 1 and "o_{h+1} - o_h = d" in out, (out, err)


def test_sc_a_token_block_that_is_not_the_vocabulary_fails(tmp_path):
    """d and n are in the value, not in the rules: the checker reads them there (d = 2 M)."""
    cert = stored("sc")

    def widen(v):
        v["d"] = [[[0, 0, 1], "2"]]
    code, out, err = check(tmp_path, sc_edit(cert, value=widen, new_hash=True))
    assert code == 1 and "d = M + 1" in out, (out, err)


def test_sc_a_value_of_another_shape_is_refused(tmp_path):
    cert = stored("sc")

    def second_copy(v):
        v["copy"]["W_V"].append(v["copy"]["W_V"][0])
    code, _, err = check(tmp_path, sc_edit(cert, value=second_copy, new_hash=True))
    assert code == 2 and "not of the derivation's shape" in err, err


# ----------------------------------------------------------------------------- count (parity, mod-count)


@pytest.fixture(scope="module")
def mod3():
    from depthcert.checkers.tasks import make_task
    from depthcert.proofs.all_sizes import prove

    rep = prove(make_task("mod-count", n=4, modulus=3), "count")
    return rep.certificate


@pytest.mark.parametrize("which", ["parity", "mod-count"])
def test_count_rules_edited_alone_are_refused(which, mod3, tmp_path):
    cert = stored("parity_count") if which == "parity" else mod3
    assert check(tmp_path, cert)[0] == 0
    d = copy.deepcopy(cert)
    d["cases"][1]["rules"]["w"][1].append([[0, 0], "1"])
    code, _, err = check(tmp_path, d)
    assert code == 2 and "rule w[1] is" in err, err
    one_line(err)
    d = copy.deepcopy(cert)
    d["cases"][0]["rules"]["b"] = [[[[0, 0], "2"]], [[[0, 0], "0"]]] + d["cases"][0]["rules"]["b"][2:]
    d["margin"] = "2"
    code, _, err = check(tmp_path, d)
    assert code == 2 and "rule b[0] is" in err, err


def _key2_w(d, case: int, r: int, extra: list) -> None:
    """w_j[r] of one case, in the value (layer 2 key W_V rule r) and in the certificate's rules."""
    d["value"]["cases"][case]["key2"]["W_V"][r][5] = d["value"]["cases"][case]["key2"]["W_V"][r][5] + extra
    d["cases"][case]["rules"]["w"][r] = d["cases"][case]["rules"]["w"][r] + extra


@pytest.mark.parametrize("which", ["parity", "mod-count"])
def test_count_value_edited_alone_is_refused(which, mod3, tmp_path):
    cert = stored("parity_count") if which == "parity" else mod3
    d = copy.deepcopy(cert)
    d["value"]["cases"][1]["key2"]["W_V"][1][5].append([[0, 0], "1"])
    code, _, err = check(tmp_path, d)
    assert code == 2 and "hashes to" in err, err
    rehash(d)
    code, _, err = check(tmp_path, d)
    assert code == 2 and "rule w[1] is" in err, err


@pytest.mark.parametrize("which", ["parity", "mod-count"])
def test_count_both_edited_consistently(which, mod3, tmp_path):
    cert = stored("parity_count") if which == "parity" else mod3
    # a w_j coefficient one more in one case: u K w_j = mu D(j) fails there
    d = copy.deepcopy(cert)
    _key2_w(d, 1, 1, [[[0, 0], "1"]])
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code == 1 and "u K w_j[1] = mu D_1(j)" in out, (out, err)
    # a q t term in gamma_j (zero wherever q = 0 or t = 0), in both
    d = copy.deepcopy(cert)
    qk = d["value"]["cases"][2]["key2"]["W_QK"]
    g = next(r for r in qk if r[1:3] == ["position", "position"])
    g[5] = g[5] + [[[1, 1], "1"]]
    d["cases"][2]["rules"]["gamma"] = d["cases"][2]["rules"]["gamma"] + [[[1, 1], "1"]]
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code == 1 and "gamma = -beta a1 s1 j" in out, (out, err)


def test_count_a_consistent_edit_that_stays_true_is_valid_for_its_own_hash(tmp_path):
    """The read-out doubled in the value and the rules (u = 2, b = (2, 0)), margin 2: still a proof,
    of the new value (its hash), never printed as the construction's."""
    cert = stored("parity_count")
    d = copy.deepcopy(cert)
    for rule in d["value"]["readout"]:
        rule[5] = [[m, str(2 * int(c))] for m, c in rule[5]]
    for case in d["cases"]:
        for k in ("u", "b"):
            case["rules"][k] = [[[m, str(2 * int(c))] for m, c in t] for t in case["rules"][k]]
    rehash(d)
    d["margin"] = "2"
    code, out, err = check(tmp_path, d)
    assert code == 0 and "minimum margin 2 (normalized 1" in out and d["content_hash"] in out, (out, err)
    assert cert["content_hash"] not in out


def test_count_without_its_value_is_refused(tmp_path):
    d = copy.deepcopy(stored("parity_count"))
    del d["value"], d["content_hash"]
    code, _, err = check(tmp_path, d)
    assert code == 2 and "bound to no construction" in err, err


# ----------------------------------------------------------------------------- lumped (icqa, every hops)


def _scale_wo(entries, c):
    for e in entries:
        e[-1] = [[m, str(c * int(x))] for m, x in e[-1]]


def test_lumped_tables_edited_alone_are_refused(tmp_path):
    cert = stored("icqa")
    assert check(tmp_path, cert)[0] == 0
    d = copy.deepcopy(cert)
    _scale_wo(d["points"][0]["W_O"], 2)
    for m in d["points"][0]["tree"]["margins"].values():
        m["value"] = [[e, str(2 * int(x))] for e, x in m["value"]]
    d["margin"] = "6"
    code, _, err = check(tmp_path, d)
    assert code == 2 and "W_O is not the value's W_O" in err, err
    one_line(err)


def test_lumped_value_edited_alone_is_refused(tmp_path):
    d = copy.deepcopy(stored("icqa"))
    _scale_wo(d["value"]["W_O"], 2)
    code, _, err = check(tmp_path, d)
    assert code == 2 and "hashes to" in err, err
    rehash(d)
    code, _, err = check(tmp_path, d)
    assert code == 2 and "W_O is not the value's W_O" in err, err


def test_lumped_both_edited_consistently(tmp_path):
    cert = stored("icqa")
    d = copy.deepcopy(cert)
    for c, code_want in ((2, 0), (-1, 1)):
        d = copy.deepcopy(cert)
        _scale_wo(d["value"]["W_O"], c)
        _scale_wo(d["points"][0]["W_O"], c)
        for m in d["points"][0]["tree"]["margins"].values():
            m["value"] = [[e, str(c * int(x))] for e, x in m["value"]]
        d["margin"] = str(3 * c)
        rehash(d)
        code, out, err = check(tmp_path, d)
        assert code == code_want, (c, out, err)
        if code == 0:  # still a proof: of the value with the new hash
            assert d["content_hash"] in out and cert["content_hash"] not in out and "minimum margin 6 (normalized 3" in out


def test_every_hops_tables_edited_alone_are_refused(tmp_path, capsys):
    from depthcert.checkers.tasks import make_task
    from depthcert.proofs.all_sizes import prove

    cert = prove(make_task("multihop", k=2, hops=1), "linear").certificate
    assert check(tmp_path, cert)[0] == 0
    d = copy.deepcopy(cert)
    hop = d["points"][0]["layers"][1][0]["W_V"]
    hop[0][-1] = [[m, str(2 * int(x))] for m, x in hop[0][-1]]
    code, out, err = check(tmp_path, d)
    assert code in (1, 2) and "valid;" not in out, (out, err)
    d = copy.deepcopy(cert)
    d["value"]["layers"][1]["heads"][0]["W_V"][0][-1] = [[m, "2"] for m, _ in d["value"]["layers"][1]["heads"][0]["W_V"][0][-1]]
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code in (1, 2) and "valid;" not in out, (out, err)


# ----------------------------------------------------------------------------- hostile JSON, --help


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _report(cert: dict, **fields) -> str:
    """The certificate inside a report, with fields the checker does not read (steps, seconds, base_cases)
    set as given (raw JSON text): hostile data must be refused wherever it is."""
    body = {"command": "verify-construction --all-sizes", "verdict": "proven", "certificate": cert}
    text = json.dumps(body)[:-1]
    for k, raw in fields.items():
        text += f', "{k}": {raw}'
    return text + "}"


@pytest.mark.parametrize("name,make", [
    ("deep nesting past the JSON reader", lambda c: _report(c, steps=_deep(200_000))),
    ("deep nesting within the reader", lambda c: _report(c, steps=_deep(500))),
    ("a huge int", lambda c: _report(c, base_cases="[" + "9" * 5000 + "]")),
    ("an int past 2^53", lambda c: _report(c, base_cases="[" + "9" * 40 + "]")),
    ("NaN", lambda c: _report(c, seconds="NaN")),
    ("Infinity", lambda c: _report(c, seconds="-Infinity")),
    ("a float overflow", lambda c: _report(c, seconds="1e999")),
    ("a huge exponent form", lambda c: json.dumps(c).replace('"margin": "1"', '"margin": "1e999999999"', 1)),
    ("a huge exponent", lambda c: json.dumps(c).replace('[[0, 0, 0], "1"]', '[[0, 0, 99999999], "1"]', 1)),
    ("a float coefficient", lambda c: json.dumps(c).replace('[[0, 0, 0], "1"]', '[[0, 0, 0], 1.0]', 1)),
    ("an unknown top-level field", lambda c: json.dumps({**c, "trusted": True})),
    ("an unknown field in the value", lambda c: json.dumps(_rehashed({**c, "value": {**c["value"], "extra": 1}}))),
    ("an unknown rule", lambda c: json.dumps({**c, "rules": {**c["rules"], "z": []}})),
    ("not JSON", lambda c: json.dumps(c)[:-5]),
    ("not an object", lambda c: "[1, 2]"),
    ("not UTF-8", lambda c: None),
])
def test_hostile_sc_json_is_exit_2_one_line(name, make, tmp_path):
    cert = stored("sc")
    assert check(tmp_path, None, _report(cert, seconds="0.5", steps="[]"))[0] == 0
    raw = make(cert)
    if raw is None:
        path = tmp_path / "cert.json"
        path.write_bytes(b'{"format": "\xff\xfe"}')
        r = subprocess.run([sys.executable, "-I", CHECKER, str(path)], capture_output=True, text=True, timeout=120)
        code, out, err = r.returncode, r.stdout, r.stderr
    else:
        code, out, err = check(tmp_path, None, raw)
    assert code == 2 and out == "", (name, code, out, err[:300])
    one_line(err)


def _rehashed(cert: dict) -> dict:
    rehash(cert)
    return cert


def _big_p(c):
    c["p"] = 10 ** 15
    c["fixed"] = {"p": 10 ** 15}


@pytest.mark.parametrize("which,edit", [
    ("icqa", lambda c: c["points"][0].update(extra=1)),
    ("icqa", lambda c: c["points"][0]["tree"].update(note="x")),
    ("icqa", lambda c: c["points"][0]["tree"]["margins"]["cls:A@Tr"].update(note="x")),
    ("icqa", lambda c: (c["value"]["layers"][0].update(extra=1), rehash(c))),
    ("icqa", lambda c: c["params"][0].update(base=10 ** 9)),
    ("tm", lambda c: (c.update(task="tm", fixed={"l": 5000}))),
    ("parity_count", lambda c: c["cases"][0].update(note="x")),
    ("mod3", _big_p),
    ("parity_count", lambda c: (c["value"]["cases"][0].update(extra=1), rehash(c))),
])
def test_unknown_fields_and_huge_sizes_are_refused(which, edit, mod3, tmp_path):
    d = copy.deepcopy(mod3 if which == "mod3" else stored("icqa" if which == "tm" else which))
    edit(d)
    code, out, err = check(tmp_path, d)
    assert code == 2 and out == "", (code, out, err)
    one_line(err)


def test_an_unknown_field_in_the_report_is_refused(tmp_path):
    report = {"command": "verify-construction --all-sizes", "verdict": "proven", "certificate": stored("sc")}
    assert check(tmp_path, report)[0] == 0
    code, _, err = check(tmp_path, {**report, "signed_off_by": "someone"})
    assert code == 2 and "unknown fields" in err, err


def test_a_report_whose_words_are_not_its_certificates_is_refused(tmp_path):
    cert = stored("sc")
    report = {"command": "verify-construction --all-sizes", "verdict": "proven", "task": "sc",
              "content_hash": cert["content_hash"], "certificate": cert}
    assert check(tmp_path, report)[0] == 0
    for key, value in (("content_hash", "sha256:" + "0" * 64), ("task", "icqa")):
        code, _, err = check(tmp_path, {**report, key: value})
        assert code == 2 and f"the report's {key}" in err, err
    code, _, err = check(tmp_path, {**report, "family": {"content_hash": "sha256:" + "1" * 64}})
    assert code == 2 and "the report's family" in err, err


def test_huge_fixed_structures_are_refused_before_any_work(tmp_path):
    """An ictm certificate at l = 30 would loop over Stirling numbers past 10^20: refused at once."""
    d = copy.deepcopy(stored("icqa"))
    d["task"] = "ictm"
    d["fixed"] = {"k": 2, "l": 30}
    code, _, err = check(tmp_path, d)
    assert code == 2 and "Bell(l)" in err, err


def test_help_prints_usage_and_a_flag_is_no_file_name(tmp_path):
    for flag in ("--help", "-h"):
        r = subprocess.run([sys.executable, "-I", CHECKER, flag], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("usage: check_all_sizes.py FILE") and r.stderr == "", r
        assert "Exit 0 valid" in r.stdout
    r = subprocess.run([sys.executable, "-I", CHECKER, "--verbose"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "usage" in r.stderr, r
    r = subprocess.run([sys.executable, "-I", CHECKER], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr, r


def test_the_checker_imports_only_the_standard_library():
    import ast

    tree = ast.parse(open(CHECKER).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "math", "re", "sys", "os", "hashlib", "fractions"}, names


@pytest.fixture(scope="module")
def lumped_fixed():
    """Lumped certificates at a fixed structure (tm at l = 3, multi-hop doubling at k = 2, hops = 2)."""
    from depthcert.checkers.tasks import make_task
    from depthcert.proofs.all_sizes import prove

    return {"tm": prove(make_task("tm", l=3, alphabet=3), "ternary").certificate,
            "doubling": prove(make_task("multihop", k=2, hops=2), "doubling").certificate}


def _scale_all(d, c, points=True, value=True):
    """The read-out times c in every point's tables and margins and/or in the value."""
    def scaled(terms):
        out = []
        for m, x in terms:
            q = C._q(x) * c
            out.append([m, str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"])
        return out

    if value:
        for e in d["value"]["W_O"]:
            e[-1] = scaled(e[-1])
    if points:
        for pt in d["points"]:
            for e in pt["W_O"]:
                e[-1] = scaled(e[-1])
            nodes = [pt["tree"]]
            while nodes:
                node = nodes.pop()
                nodes.extend(node.get("children", []))
                for m in node.get("margins", {}).values():
                    m["value"] = scaled(m["value"])


@pytest.mark.parametrize("which", ["tm", "doubling"])
def test_lumped_fixed_structure_tables_value_and_both(which, lumped_fixed, tmp_path):
    cert = lumped_fixed[which]
    code, out, err = check(tmp_path, cert)
    assert code == 0, err
    margin = C._q(cert["margin"])
    d = copy.deepcopy(cert)  # the tables alone
    _scale_all(d, 2, value=False)
    d["margin"] = str(2 * margin)
    code, out, err = check(tmp_path, d)
    assert code == 2 and "W_O is not the value's W_O" in err, err
    d = copy.deepcopy(cert)  # the value alone, then re-hashed
    _scale_all(d, 2, points=False)
    assert "hashes to" in check(tmp_path, d)[2]
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code == 2 and "W_O is not the value's W_O" in err, err
    d = copy.deepcopy(cert)  # both, re-hashed: still a proof (margin doubled), for the new hash only
    _scale_all(d, 2)
    d["margin"] = str(2 * margin)
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code == 0 and d["content_hash"] in out and cert["content_hash"] not in out, (out, err)
    d = copy.deepcopy(cert)  # both negated, re-hashed: every margin < 0
    _scale_all(d, -1)
    d["margin"] = str(-margin)
    rehash(d)
    code, out, err = check(tmp_path, d)
    assert code == 1 and "not > 0" in out, (out, err)
