"""Closed values (constructions/closed.py) and the prover that reads them whole (proofs/all_sizes.py).

By kind, not by instance: a random closed value's lumped margins against instantiate + verify at
random sizes (a part the prover left unread makes them differ); a changed value; a builder that tries
to read a size; a part the prover does not read; the multi-hop attack of a second hop head; honest
output (--readout, a size too large to check, finite_only)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthcert.checkers.exhaustive import verify
from depthcert.checkers.tasks import make_task
from depthcert.cli.common import run_main
from depthcert.cli.verify_construction import _verify_construction
from depthcert.constructions import closed as C
from depthcert.constructions import copy_matching, multihop, registry
from depthcert.constructions.indexed import IndexedHead, IndexedMatrix, Repeat, SizeBranch
from depthcert.proofs.all_sizes import icqa_plan, prove_lumped, prove_multihop_linear, symbolic_margin


def run(argv, capsys):
    code = run_main(_verify_construction, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def const(v) -> tuple:
    return (((0, 0, 0), Fraction(v)),) if v else ()


# ----------------------------------------------------------------------------- random closed values


BASE = copy_matching.closed_value()
STREAM = [(f, s.over) for s in BASE.stream for f in s.families]
CLASSES = [(f, s.over) for s in BASE.classes for f in s.families]


def _pattern(a, b):
    return ("eq", "ne") if a[1] is not None and a[1] == b[1] else ("",)


@st.composite
def tables(draw, rows, values, max_entries=6):
    entries = {}
    for _ in range(draw(st.integers(0, max_entries))):
        a, b = draw(st.sampled_from(rows)), draw(st.sampled_from(STREAM))
        pat = draw(st.sampled_from(_pattern(a, b)))
        v = draw(st.sampled_from(values))
        if v:
            entries[(a[0], b[0], pat)] = const(v)
    return C.ClosedTable(tuple(sorted(entries.items())))


@st.composite
def closed_values(draw):
    """Random two-layer ICQA values: Theorem 3's copy and match heads, each kept or not, plus 0-2 random
    heads per layer (same/other pairs over every set), a layer repeated a constant number of times, W_O
    Theorem 3's with random extra entries or random: some verify, some fail at some size."""
    layers = []
    for li in range(2):
        heads = [BASE.layers[li].heads[0]] if draw(st.booleans()) or li == 1 and draw(st.booleans()) else []
        for _ in range(draw(st.integers(0 if heads else 1, 2))):
            heads.append(C.ClosedHead(draw(tables(STREAM, (0, 1, 2))), draw(tables(STREAM, (-1, 0, 1, 2)))))
        layers.append(C.ClosedLayer(tuple(heads), const(draw(st.sampled_from((1, 1, 2))))))
    extra = draw(tables(CLASSES, (-1, 1, 2), 3))
    if draw(st.booleans()):
        entries = dict(BASE.W_O.entries)
        entries.update(dict(extra.entries))
        W_O = C.ClosedTable(tuple(sorted(entries.items())))
    else:
        W_O = extra
    return replace(BASE, name="random", layers=tuple(layers), W_O=W_O)


SIZES = ({"k": 1, "n_q": 1, "n_a": 2}, {"k": 1, "n_q": 2, "n_a": 3}, {"k": 2, "n_q": 2, "n_a": 3},
         {"k": 2, "n_q": 3, "n_a": 2}, {"k": 3, "n_q": 3, "n_a": 3}, {"k": 2, "n_q": 4, "n_a": 4})


def lumped_only(value):
    """The prover on the value without its base cases (which stop a failing value before the lumped
    pass): the lumped margins of every value are compared, failing or not."""
    return prove_lumped(replace(icqa_plan(construct=lambda sym: value), base=()))


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(closed_values(), st.sampled_from(SIZES))
def test_lumped_margins_equal_instantiate_and_verify_on_random_values(value, extra):
    """The prover's margin formula (every head, every table, every repeat, W_O read) equals verify's
    exact margin on the instantiated model wherever verify verifies, and is <= 0 wherever it refutes."""
    rep = lumped_only(value)
    if rep.lumped is None:  # a sign left undecided: nothing claimed, nothing to compare
        assert rep.status == "not-proven"
        return
    for s in (extra, {"k": 2, "n_q": 3, "n_a": 3}):
        task = make_task("icqa", k=s["k"], n_questions=s["n_q"], n_answers=s["n_a"])
        v = verify(C.instantiate(value, s, task), task, symmetry="off", progress=False)
        m = symbolic_margin(rep, s)
        if v.verified:
            assert m == v.min_margin, (s, m, v.min_margin)
        else:
            assert m is not None and m <= 0, (s, m)


def test_a_head_left_out_changes_the_margin():
    """The property above bites: dropping the second head of layer 2 from a value (a prover that read
    only the first head would prove this other value) gives another margin."""
    head = BASE.layers[1].heads[0]
    doubled = C.ClosedHead(head.W_QK, C.ClosedTable(tuple((k, const(3)) for k, _ in head.W_V.entries)))
    two = replace(BASE, layers=(BASE.layers[0], C.ClosedLayer((head, doubled), const(1))))
    rep_two = prove_lumped(icqa_plan(construct=lambda sym: two))
    rep_one = prove_lumped(icqa_plan(construct=lambda sym: replace(two, layers=(two.layers[0],
                                                                                 C.ClosedLayer((head,), const(1))))))
    assert rep_two.margin == "6" and rep_one.margin == "3"
    assert C.content_hash(two) != C.content_hash(BASE)


# ----------------------------------------------------------------------------- the value itself


def test_instantiate_is_the_finite_build_and_the_hash_is_stable():
    value = copy_matching.closed_value()
    for k, nq, na in ((1, 1, 1), (2, 5, 3), (4, 4, 7)):
        task = make_task("icqa", k=k, n_questions=nq, n_answers=na)
        c = registry.build(task)
        assert c.symbolic is value and c.model == C.instantiate(value, {"k": k, "n_q": nq, "n_a": na}, task)
    again = C.value_of(lambda s: copy_matching.build(s), copy_matching.symbolic_task())
    assert again == value and C.content_hash(again) == C.content_hash(value)
    assert C.canonical_tables(value)["layers"][1]["heads"][0]["W_QK"] == [["tok:Q", "tok:Q", "eq", [[[0, 0, 0], "1"]]]]


def test_a_changed_value_has_another_hash_and_its_own_proof():
    value = copy_matching.closed_value()
    (key, _), = value.W_O.entries
    changed = replace(value, W_O=C.ClosedTable(((key, const(2)),)))
    assert C.content_hash(changed) != C.content_hash(value)
    rep = prove_lumped(icqa_plan(construct=lambda sym: changed))
    assert rep.status == "proven" and rep.margin == "6" and rep.content_hash == C.content_hash(changed)


@pytest.mark.parametrize("builder,needle", [
    (lambda s: copy_matching.build(s) if int(s.k) else None, "as a Python integer"),
    (lambda s: copy_matching.build(s) if s.description else None, "has sizes"),
    (lambda s: copy_matching.build(s) if s.k >= 7 else copy_matching.build(s), "compares k >= 7"),
    (lambda s: [copy_matching.build(s) for _ in range(s.n_a)][0], "as a Python integer"),
    (lambda s: copy_matching.closed_value().W_O, "ClosedTable"),
    (lambda s: 3, "returned a int"),
])
def test_a_builder_that_tries_to_read_a_size_makes_no_value(builder, needle):
    with pytest.raises(C.NotClosed, match=needle):
        C.value_of(builder, copy_matching.symbolic_task())
    rep = prove_lumped(icqa_plan(construct=builder))
    assert rep.status == "not-proven" and rep.exit_code == 3 and "not a closed value" in rep.reason


def test_a_builder_that_catches_the_branch_still_makes_one_value():
    """Catching SizeBranch changes nothing a proof relies on: the builder runs once, and its one value is
    what every size instantiates."""
    def sly(s):
        c = copy_matching.build(s)
        try:
            if s.k >= 7:
                c.symbolic.W_O.same("cls:A", "tok:A", same=-1)
        except SizeBranch:
            pass
        return c

    value = C.value_of(sly, copy_matching.symbolic_task())
    assert value == copy_matching.closed_value()


def _with_field(value, **extra):
    out = replace(value)
    for k, v in extra.items():
        object.__setattr__(out, k, v)
    return out


def test_a_part_the_prover_does_not_read_is_refused():
    value = copy_matching.closed_value()
    with pytest.raises(C.NotClosed, match="not the fields"):
        C.validate(_with_field(value, extra_heads=()))

    @dataclasses.dataclass(frozen=True)
    class More(C.ClosedModel):
        bias: tuple = ()

    with pytest.raises(C.NotClosed, match="not a ClosedModel"):
        C.validate(More(*[getattr(value, f.name) for f in dataclasses.fields(C.ClosedModel)], bias=const(1)))
    # a same/other key across two different sets, a float, a family that does not exist, a zero entry
    cases = [((("tok:Q", "tok:A", "eq"), const(1)), "not indexed by one set"),
             ((("tok:Q", "tok:Q", "eq"), (((0, 0, 0), 0.5),)), "not a non-zero Fraction"),
             ((("tok:X", "tok:Q", ""), const(1)), "no row family"),
             ((("tok:Q", "tok:Q", "eq"), ()), "zero entry")]
    for entry, needle in cases:
        bad = replace(value, layers=(value.layers[0], C.ClosedLayer(
            (C.ClosedHead(C.ClosedTable((entry,)), value.layers[1].heads[0].W_V),), const(1))))
        with pytest.raises(C.NotClosed, match=needle):
            C.validate(bad)
    # a set the task's symmetry does not act on (scratch rows indexed by it): refused, never proven
    scratch = replace(value, sets=tuple(sorted(value.sets + (("S", (((0, 0, 1), Fraction(1)),)),))),
                      stream=value.stream + (C.ClosedSegment("scratch", "S", ("scr",)),))
    rep = prove_lumped(icqa_plan(construct=lambda sym: scratch))
    assert rep.status == "not-proven" and "sets S that the task's symmetry does not act on" in rep.reason
    # a layer repeated a symbolic number of times is not a fixed stack: refused, never proven
    k_times = replace(value, layers=(value.layers[0], C.ClosedLayer(value.layers[1].heads, (((1, 0, 0), Fraction(1)),))))
    rep = prove_lumped(icqa_plan(construct=lambda sym: k_times))
    assert rep.status == "not-proven" and "repeated a symbolic number of times" in rep.reason


def test_a_value_for_another_structure_is_refused():
    """A family handing back a value made for another hops (its `fixed` sizes) is refused, never proven."""
    other = multihop.closed_value("doubling", 2, 3)
    with pytest.raises(C.NotClosed, match="not the structure it was asked for"):
        C.value_of(lambda s: other, multihop.symbolic_task(2, 2))


def test_an_entry_of_one_member_is_no_closed_value():
    def member(s):
        c = copy_matching.build(s)
        c.symbolic.W_O.member("cls:A", 0, "tok:A", 0, 5)
        return c

    with pytest.raises(C.NotClosed, match="one entry of one member"):
        C.value_of(member, copy_matching.symbolic_task())


def test_theorem1_and_count_values_are_read_whole():
    """The head family's and the count value's every field is read: another head after the cancel head,
    or a rule of a layer not tied to a key, is refused by the derivation (exit 3), never proven."""
    from depthcert.constructions import group_tree, memorization
    from depthcert.proofs.all_sizes import prove_count, prove_sc

    fam = memorization.closed_value()
    extra = replace(fam, last=fam.last + fam.last)
    rep = prove_sc(construct=lambda s: extra)
    assert rep.status == "not-proven" and "2 heads after the copy heads" in rep.reason
    task = make_task("sc", length=2, alphabet=3)
    assert C.instantiate(fam, {"L": 2, "M": 3}, task) == registry.build(task).model
    cv = group_tree.closed_count_value("parity", 2)
    stray = replace(cv, layer2=C.ClosedRuleHead(cv.layer1.v, ()))
    rep = prove_count(make_task("parity", n=3), construct=lambda s: stray)
    assert rep.status == "not-proven" and rep.exit_code == 3, rep.reason
    assert C.content_hash(stray) != C.content_hash(cv)


# ----------------------------------------------------------------------------- multi-hop: every head


def second_hop_head(sym, as_printed=False):
    """The audit's attack: the hop layer gets a second head, a copy of the first whose W_V is scaled by
    1 - (N-2)(N-3)(N-4)(N-5)/24, which is 1 for every N <= 5 (the two heads then average to the one)."""
    c = multihop.build_linear(sym, as_printed)
    copy, hop = c.symbolic.layers
    head = hop.layer[0]
    N = sym.N
    scale = 1 - (N - 2) * (N - 3) * (N - 4) * (N - 5) / 24
    v2 = IndexedMatrix(head.W_V.rows, head.W_V.cols)
    v2.table = {key: v * scale for key, v in head.W_V.table.items()}
    layers = (copy, Repeat((head, IndexedHead(head.W_QK, v2)), hop.count))
    return replace(c, symbolic=replace(c.symbolic, layers=layers))


def test_a_second_hop_head_is_read_and_its_failure_found():
    rep = prove_multihop_linear(make_task("multihop", k=2, hops=1), construct=second_hop_head)
    assert rep.status != "proven" and rep.status != "partial", rep.margin
    assert rep.status == "fails" and rep.exit_code == 1 and rep.failure["size"]["N"] == 6, rep.failure
    family = " ".join(next(s.lines for s in rep.steps if s.title == "family"))
    assert "one hop layer Phi (2 heads)" in family and "depend on N" in family
    value = C.value_of(second_hop_head, multihop.symbolic_task(2))
    for N, ok in ((5, True), (6, False)):
        task = make_task("multihop", k=2, hops=1, n_entities=N)
        assert verify(C.instantiate(value, {"hops": 1, "N": N}, task), task, progress=False).verified is ok


def test_the_multihop_family_step_is_computed(capsys):
    code, out, _ = run(["multihop", "--k", "2", "--variant", "linear", "--all-sizes"], capsys)
    assert code == 3 and "one hop layer Phi (1 head)" in out and "no weight depends on the sizes" in out


# ----------------------------------------------------------------------------- honest output


def test_readout_of_the_proof_is_said_and_selected(capsys):
    code, out, err = run(["tm", "--l", "2", "--variant", "ternary", "--all-sizes", "--readout", "max-margin"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no proof for every size covers" in err
    code, out, err = run(["icqa", "--all-sizes", "--readout", "lemma3"], capsys)
    assert code == 2 and err.count("\n") == 1 and "(paper)" in err
    code, out, _ = run(["tm", "--l", "2", "--variant", "ternary", "--all-sizes", "--readout", "lemma3", "--json"],
                       capsys)
    info = json.loads(out)
    assert code == 3 and info["verdict"] == "partial" and info["readout"] == "lemma3"
    code, out, _ = run(["tm", "--l", "2", "--variant", "ternary", "--all-sizes"], capsys)
    assert "read-out    Lemma 3's classifier" in out and "--readout lemma3" in out


def test_a_given_size_too_large_to_check_is_not_proven(capsys):
    code, out, _ = run(["parity", "--variant", "count", "--n", "18", "--all-sizes"], capsys)
    assert code == 3 and "verify not run" in out and "too large to check" in out
    assert "verdict     NOT PROVEN FOR ALL SIZES" in out and "verdict     PROVEN" not in out


def test_finite_only_lists_what_the_reason_names(capsys):
    code, out, _ = run(["composition", "--variant", "linear", "--all-sizes", "--json"], capsys)
    info = json.loads(out)
    assert code == 3 and [f["parameter"] for f in info["finite_only"]] == ["N, L"] and "N, L" in info["reason"]


def test_family_takes_a_closed_value_and_nothing_else(capsys, tmp_path):
    path = tmp_path / "fams.py"
    path.write_text("from depthcert.constructions import copy_matching\n\n"
                    "def good(sym):\n    return copy_matching.closed_value()\n\n"
                    "def model(sym):\n    return 'a model'\n")
    code, out, _ = run(["icqa", "--family", f"{path}:good", "--all-sizes", "--k", "2"], capsys)
    assert code == 0 and "value       sha256:" in out
    code, out, err = run(["icqa", "--family", f"{path}:model", "--k", "2"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a closed value" in err
    code, out, err = run(["icqa", "--family", f"{path}:model", "--all-sizes"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "not a closed value" in err


def test_sc_margin_changed_beyond_the_base_cases_is_never_claimed():
    """The audit's sc kind: a read-out weight equal to 1 at every base case but 7/8 at L = 7. The value
    carries the polynomial, so the proof never claims margin 1: it finds the first size where the weight
    is <= 0 (L = 9, exit 1), and the finite check at L = 7 (the same value instantiated) gives 7/8."""
    from depthcert.constructions import memorization as mem
    from depthcert.constructions.head_family import Template
    from depthcert.proofs.all_sizes import prove_sc

    def read(d, n):
        t = mem.template(d, n)
        L = n - 1

        def at(h):
            off, w = t.at(h)
            return off, w - (L - 1) * (L - 2) * (L - 3) * (L - 4) * (L - 5) * (L - 6) / 5760

        return Template(t.count, at)

    def family(sym):
        return mem.build(sym, read=read)

    rep = prove_sc(construct=family)
    assert rep.status == "fails" and rep.exit_code == 1 and rep.failure["size"] == {"L": 9, "M": 2}
    assert rep.failure["confirmed"].startswith("verify at this size: REFUTED")
    value = C.value_of(family, mem.symbolic_task())
    task = make_task("sc", length=7, alphabet=2)
    assert verify(C.instantiate(value, {"L": 7, "M": 2}, task), task, progress=False).min_margin == Fraction(7, 8)
