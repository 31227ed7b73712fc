"""Audit of the closed-value mechanism (--all-sizes) with attack variants of its own: each changed
closed value ends in a refusal, exit 3 with the reason, or exit 1 -- never a proof whose range holds
a size where the value is wrong.  Values are changed through the public data (closed.ClosedModel,
ClosedHeadFamily) and given with --family; the gate polynomials are 0 at every base size."""
from __future__ import annotations

import textwrap

import pytest

from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction

FAMILIES = textwrap.dedent('''
    from dataclasses import replace
    from fractions import Fraction
    from depthcert.constructions import closed as C
    from depthcert.constructions.copy_matching import closed_value
    from depthcert.constructions.memorization import closed_value as sc_value

    def P(v, size):
        return C._poly_of(size, tuple(p.name for p in v.params), v.range, "audit")

    def gate(n):  # 0 for n = 1 .. 5
        return (n - 1) * (n - 2) * (n - 3) * (n - 4) * (n - 5)

    def rows_before_tokens(sym):
        """a stream-only set of size gate(n_a) placed before the token rows: at n_a >= 6 every
        token's one-hot lands on a pad row"""
        v = closed_value(False)
        return replace(v, sets=tuple(sorted(v.sets + (("X", P(v, gate(sym.n_a))),))),
                       stream=(C.ClosedSegment("pad", "X", ("pad:X",)),) + v.stream)

    def answer_set_resized(sym):
        v = closed_value(False)
        return replace(v, sets=tuple((n, P(v, sym.n_a + gate(sym.n_a)) if n == "A" else p) for n, p in v.sets))

    def layer_repeated_by_gate(sym):
        v = closed_value(False)
        return replace(v, layers=(v.layers[0], replace(v.layers[1], repeat=P(v, 1 + gate(sym.n_a)))))

    def layer_repeated_twice(sym):
        v = closed_value(False)
        return replace(v, layers=(v.layers[0], replace(v.layers[1], repeat=(((0, 0, 0), Fraction(2)),))))

    def sc_token_block_widened(sym):
        """Theorem 1's token block d = 2 M (slots, d' and read-out moved with it): the derivation's
        conditions all hold, but d is not the vocabulary's M + 1 tokens from M = 2 on"""
        v = sc_value(); h, L, M = sym.h, sym.L, sym.M
        d = 2 * M
        cv = replace(v.copy.v[0], row=P(v, h * d))
        return replace(v, d=P(v, d), dim=P(v, (L + 1) * d), copy=replace(v.copy, v=(cv,)), read_offset=P(v, h * d))
''')


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit") / "audit_families.py"
    path.write_text(FAMILIES)
    return str(path)


def run(argv, capsys):
    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("fn", ["rows_before_tokens", "answer_set_resized", "layer_repeated_by_gate"])
def test_a_value_wrong_from_a_size_on_is_never_proven(fam, fn, capsys):
    code, out = run(["icqa", "--family", f"{fam}:{fn}", "--all-sizes"], capsys)
    assert code == 3, out
    assert "NOT PROVEN FOR ALL SIZES" in out and "reason" in out


def test_a_constant_repeat_is_read_as_that_many_layers(fam, capsys):
    code, out = run(["icqa", "--family", f"{fam}:layer_repeated_twice", "--all-sizes"], capsys)
    assert code == 0 and "margin      651 " in out, out
    for sizes in (["--k", "2", "--n-questions", "3", "--n-answers", "4"], ["--k", "3", "--n-questions", "4", "--n-answers", "3"]):
        code, out = run(["icqa", "--family", f"{fam}:layer_repeated_twice", *sizes, "--all-sizes"], capsys)
        assert code == 0 and "margin 651 = the proof's margin there" in out, out


def test_a_head_family_whose_token_block_is_not_the_vocabulary_is_never_proven(fam, capsys):
    code, out = run(["sc", "--family", f"{fam}:sc_token_block_widened", "--all-sizes"], capsys)
    assert code in (1, 2, 3), out
    assert "PROVEN FOR ALL SIZES" not in out.replace("NOT PROVEN FOR ALL SIZES", "")


def test_the_instance_line_names_every_size_it_instantiates(capsys):
    """multi-hop linear's value is in hops and N: the instance line says both (it said only N)."""
    code, out = run(["multihop", "--k", "2", "--variant", "linear", "--hops", "3", "--n-entities", "3", "--all-sizes"],
                    capsys)
    assert code == 3 and "instance    N=3, hops=3: the proven value instantiated" in out, out


def test_an_every_hops_certificate_relabelled_to_another_variant_is_rejected_alone(capsys):
    """The standalone checker (not only --rebuild) refuses multi-hop linear's every-hops tables named
    doubling or paper: neither is proven for every hops."""
    import json

    from depthcert.proofs import check_all_sizes as C

    code, out = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes", "--json"], capsys)
    data = json.loads(out[out.index("{"):])
    assert C.check_data(data)[0] == 0
    for variant in ("doubling", "paper"):
        d = json.loads(json.dumps(data))
        d["variant"] = d["certificate"]["variant"] = variant
        with pytest.raises(C.Invalid, match="every-hops certificate is multi-hop linear's"):
            C.check_data(d)


def test_a_size_outside_the_proofs_range_is_checked_not_compared(capsys):
    """tm ternary at l = 3 is proven for m >= 3; at m = 2 the finite build is verified, and no proof's
    margin exists there to disagree with (it said DISAGREES and FAILS, exit 1, on a verified model)."""
    code, out = run(["tm", "--variant", "ternary", "--l", "3", "--alphabet", "2", "--all-sizes"], capsys)
    assert code == 3, out
    assert "instance    m=2: outside the proof's range (m >= 3), built at these sizes, verify verified" in out, out
    assert "DISAGREES" not in out and "FAILS" not in out


STATEFUL = textwrap.dedent('''
    from dataclasses import replace
    from fractions import Fraction
    from depthcert.constructions import closed as C
    from depthcert.constructions.copy_matching import closed_value

    CALLS = [0]

    def counts_its_calls(sym):
        """the paper's value on the first call, its read-out negated on every later call"""
        CALLS[0] += 1
        v = closed_value(False)
        if CALLS[0] == 1:
            return v
        return replace(v, W_O=C.ClosedTable(tuple((k, tuple((m, -c) for m, c in p)) for k, p in v.W_O.entries)))
''')


def test_a_family_function_runs_once_per_run(tmp_path, capsys):
    """A function that keeps state between calls: --all-sizes proves the value its first call makes,
    the one the finite check (a run of its own) builds; the hashes agree."""
    path = tmp_path / "stateful.py"
    path.write_text(STATEFUL)
    code, out = run(["icqa", "--family", f"{path}:counts_its_calls", "--all-sizes"], capsys)
    assert code == 0, out
    proven = out.split("value       ")[1].split()[0]
    code, out = run(["icqa", "--family", f"{path}:counts_its_calls", "--k", "2", "--n-questions", "2",
                     "--n-answers", "3"], capsys)
    assert code == 0 and f"value       {proven}" in out, out
