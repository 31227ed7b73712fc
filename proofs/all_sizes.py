"""verify-construction TASK --all-sizes: a construction proven correct for every size, not only
the sizes enumerated (paper Theorems 1 and 3 in full; Theorems 5, 6 and the multi-hop variants
in their vocabulary sizes).

Exit codes: 0 proven for every size of every parameter (at or above the stated base values);
1 a size where the construction fails (the smallest found, confirmed by `verify` when that size
is small enough to run); 2 bad input (one line); 3 not proven for every size: some parameters
stay finite-only (named, with the reason), or the method does not reach the construction.

Methods (docs/all-sizes.md has the worked proofs):
  * lumped evaluation (proofs/all_sizes_lumped.py): the builder the finite check calls, run with
    symbolic sizes (constructions/indexed.py), gives one set-indexed table per matrix, invariant
    under a product of symmetric groups at every size; one representative per orbit is run with the set sizes as polynomials (sympy), so
    every score and logit is a polynomial in the size parameters and every ReLU sign and every
    margin is decided for all integers at once.  ICQA (Theorem 3): symbolic in k, n_q, n_a.
    TM (ternary), ICTM, multi-hop: symbolic in the vocabulary sizes at a fixed structure;
    multi-hop `linear` also in every hop count (its hop layers are one layer repeated, and the
    lumped states repeat: periodicity).
  * Lemma 4 derivation (proofs/all_sizes_lemma4.py): Theorem 1's builder run with symbolic L, M
    and a generic copy head index h (constructions/head_family.py); the last column and every
    logit derived for every sequence.
  * count derivation (proofs/all_sizes_count.py): parity / mod-count `count` run with symbolic n and
    a generic key j split by its residue mod p (at the task's p); the last column's logits derived
    for every count (the telescoping sum of the second differences).
Base cases are always verified exactly with checkers.exhaustive.verify, and the symbolic margins
are required to equal verify's exact margins at every base case.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np
import sympy as sp

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import decimal_text, format_rational
from depthcert.constructions.indexed import SizeBranch as SizeBranchError
from depthcert.proofs.all_sizes_families import (NotAFamily, PointView, View, check_point_sizes, merge,
                                                 missing_classes, model_tables, point_h0, refine)
from depthcert.proofs.all_sizes_lumped import (LHead, LMatrix, LumpedModel, Param, PassLog, Region, Ring, Split,
                                               Undecided, apply_layers, decide, first_failure, forward, logits_of, margins,
                                               poly_text, state_key, to_fraction, whole_region)
from depthcert.proofs import all_sizes_tasks as T

EXIT_PROVEN, EXIT_FAILS, EXIT_PARTIAL = 0, 1, 3
CONFIRM_MAX_POINTS = 200_000  # a failing size is re-checked with verify when it evaluates this few points
MAX_ORBITS = 3000  # representatives a vocabulary proof may run


@dataclass(frozen=True)
class Step:
    title: str
    lines: tuple[str, ...]


@dataclass
class Report:
    task: str
    variant: str
    theorem: str
    status: str  # proven | partial | fails | not-proven
    claim: str
    method: str
    margin: str | None = None
    margin_note: str = ""
    params: tuple[str, ...] = ()  # proven for all sizes of these (with the base)
    finite: tuple[tuple[str, str], ...] = ()  # (parameter, why) finite-only
    steps: list = field(default_factory=list)
    base_cases: list = field(default_factory=list)
    failure: dict | None = None
    reason: str = ""
    instance: str = ""
    certificate: dict | None = None
    seconds: float = 0.0
    eval_seconds: float = 0.0  # of which spent in verify (base cases, confirmations)
    lumped: tuple | None = field(default=None, repr=False)  # (leaves, ring, params): symbolic_margin()
    rests_on: tuple[str, ...] = ()  # what a proof for every size rests on (printed and in the JSON)
    evidence_margin: str | None = None  # the margin of an analysis that is not a proof (table reading)
    content_hash: str | None = None  # closed.content_hash of the value proven (constructions/closed.py)
    value: object = field(default=None, repr=False)  # that value (the instance line instantiates it)
    readout: str | None = None  # the read-out proven: "paper", "lemma3", "family's own"

    @property
    def exit_code(self) -> int:
        if self.status == "proven":
            return EXIT_PROVEN
        if self.status == "fails":
            return EXIT_FAILS
        return EXIT_PARTIAL

    def to_json(self) -> dict:
        out = {
            "command": "verify-construction --all-sizes",
            "task": self.task, "variant": self.variant, "theorem": self.theorem,
            "verdict": self.status.replace("-", "_"),
            "claim": self.claim, "method": self.method, "margin": margin_object(self.margin),
            "margin_note": self.margin_note,
            "all_sizes": list(self.params), "finite_only": [{"parameter": p, "why": w} for p, w in self.finite],
            "steps": [{"title": s.title, "lines": list(s.lines)} for s in self.steps],
            "base_cases": [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.base_cases],
            "failure": self.failure, "reason": self.reason,
            "rests_on": list(self.rests_on), "evidence_margin": self.evidence_margin,
            "instance": self.instance, "content_hash": self.content_hash, "readout": self.readout,
            "seconds": round(self.seconds, 3),
            "evaluating_seconds": round(self.eval_seconds, 3),
        }
        if self.certificate is not None:
            out["certificate"] = self.certificate
        return out


def margin_object(text: str | None) -> dict | None:
    """The JSON margin object of a proven margin: {"exact", "decimal"} when it is a rational,
    {"formula"} when it is a formula in the sizes or a bound ("> 0")."""
    if text is None:
        return None
    try:
        q = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return {"formula": text}
    return {"exact": str(format_rational(q)), "decimal": decimal_text(q)}


# ----------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class LumpedPlan:
    """What a lumped proof needs for one construction: the parameters (symbolic), the sizes held
    fixed, how to build the task / construction / families at a size, and the representatives."""

    task: str
    variant: str
    theorem: str
    params: tuple[Param, ...]
    fixed: dict  # structural sizes held fixed (task option -> value)
    finite: tuple[tuple[str, str], ...]
    options: Callable[[dict], dict]  # parameter values -> task options
    build: Callable  # task -> Model
    view: Callable  # (task, model) -> View
    sort_polys: dict  # model set -> size polynomial text
    extraction: tuple[dict, ...]
    base: tuple[dict, ...]
    points: Callable  # (task, view) -> [(key, PointView, token ids, used counts)]
    region: Callable  # used counts -> Region offsets
    coverage: Callable  # [(key, used counts)] -> [Step lines], ok
    method: str
    group_note: str
    # the closed value (constructions/closed.py): () -> ClosedModel, NotClosed when there is none;
    # every model the proof checks in its range is instantiate(value, sizes, task)
    value: Callable | None = None
    maker: str = ""  # the function that made the value (named in `rests on`)


def _task(name: str, options: dict):
    from depthcert.checkers.tasks import make_task

    return make_task(name, **options)


def _size_text(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _registry_builder(task_name: str, variant: str | None, as_printed: bool):
    from depthcert import constructions

    def build(task):
        return constructions.build(task, variant, as_printed).model

    return build


def _registry_construct(task_name: str, variant: str | None, as_printed: bool):
    from depthcert import constructions

    def construct(task):
        return constructions.build(task, variant, as_printed)

    return construct


def family_symbols(task):
    """(symbolic task, sizes): the symbols a closed value of this task's family is made from (the
    structural sizes k, l, hops held at the task's), and the task's sizes it is instantiated at."""
    name = task.name
    if name == "icqa":
        from depthcert.constructions.copy_matching import sizes_of, symbolic_task

        return symbolic_task(), sizes_of(task)
    if name == "multihop":
        from depthcert.constructions.multihop import symbolic_task

        return symbolic_task(task.k, task.hops), {"N": task.n_entities}
    if name == "tm":
        from depthcert.constructions.parsing_mapping import symbolic_task

        return symbolic_task(task.l), {"m": task.m}
    if name == "ictm":
        from depthcert.constructions.parsing_copying_matching import symbolic_task

        return symbolic_task(task.k, task.l), {"m": task.m, "n_a": task.n_a}
    if name == "sc":
        from depthcert.constructions.memorization import symbolic_task

        return symbolic_task(), {"L": task.length - 1, "M": len(task.vocab) - 1}
    if name in ("parity", "mod-count"):
        return None, {"n": task.n}  # closed.close_count makes the symbols (n; q, t per residue case)
    raise BadInput(f"--family: task {name} has no closed value (icqa, multihop, tm, ictm, sc, parity, mod-count)")


def family_value(fn, task):
    """The closed value of a user family: fn called once with the task's symbols (NotClosed if it
    makes none)."""
    from depthcert.constructions.closed import close_count, value_of

    sym_task, _ = family_symbols(task)
    if sym_task is None:
        return close_count(fn, task.name, task.group.order)
    return value_of(fn, sym_task)


def _registry_value(task, variant: str, as_printed: bool):
    """() -> the registry builder's closed value at the task's structure (NotClosed: none)."""
    name = task.name
    if name == "icqa":
        from depthcert.constructions.copy_matching import closed_value

        return lambda: closed_value(as_printed)
    if name == "multihop":
        from depthcert.constructions.multihop import closed_value

        return lambda: closed_value(variant, task.k, task.hops, as_printed)
    if name == "tm" and variant == "ternary":
        from depthcert.constructions.parsing_mapping import closed_value

        return lambda: closed_value(task.l, as_printed)
    if name == "ictm":
        from depthcert.constructions.parsing_copying_matching import closed_value

        return lambda: closed_value(task.k, task.l, as_printed)
    return None


def _value_route(task, variant, as_printed, construct, builder=None):
    """(value maker, finite build task -> Model for sizes outside the value's range, maker name).
    builder (task -> Model, no closed value): the evidence-only reading of tables at sample sizes."""
    if builder is not None:
        return None, builder, ""
    if construct is not None:
        return (lambda: family_value(construct, task)), None, "the family's function"
    return (_registry_value(task, variant, as_printed), (lambda t: _registry_construct(task.name, variant, as_printed)(t).model),
            _builder_of(task.name, variant))


def icqa_plan(construct=None, as_printed: bool = False, variant: str | None = None) -> LumpedPlan:
    """Theorem 3: lumped in k, n_q and n_a (Sym(Q) x Sym(A) x Sym(T), one orbit).  The weights are
    the closed value's (`construct`: a family's function of the symbols; the registry's builder by
    default); every model checked is that value instantiated."""

    params = (Param("k", 1), Param("n_q", 0, after="k"), Param("n_a", 0, after="k"))
    # sizes where the representative's H0 (the kernel's embedding of point 0) is read
    extraction = tuple({"k": k, "n_q": q, "n_a": a} for k, q, a in ((2, 2, 2), (3, 3, 4), (3, 5, 5)))
    base = tuple({"k": k, "n_q": q, "n_a": a} for k, q, a in
                 ((1, 1, 1), (1, 2, 3), (2, 2, 2), (2, 3, 3), (2, 4, 3), (3, 3, 3), (3, 5, 5)))

    def points(task, view):
        pv = T.icqa_point(task, view, 0)
        ids, _ = task.decode(np.array([0], dtype=np.int64))
        return [("query triple c", pv, [int(t) for t in ids[0]], {})]

    def coverage(_reps):
        text, ok = T.icqa_orbit_identity()
        task = _task("icqa", {"k": 3, "n_questions": 4, "n_answers": 4})
        reached, total = T.icqa_orbit_bruteforce(task)
        lines = (f"orbit-stabilizer (sympy): {text}: {'holds' if ok else 'FAILS'}; the stabilizer of the "
                 "representative is Sym(Tr) x Sym(Uq) x Sym(Ua)",
                 f"brute force at k=3, n_q=4, n_a=4: the generators reach {reached} of {total} points from point 0")
        return lines, ok and reached == total

    from depthcert.constructions.copy_matching import THEOREM

    value, finite, maker = _value_route(_task("icqa", {"k": 1}), variant or "copy-matching", as_printed, construct)
    return LumpedPlan(
        "icqa", variant or "copy-matching", THEOREM, params, {}, (),
        lambda v: {"k": v["k"], "n_questions": v["n_q"], "n_answers": v["n_a"]},
        finite, T.icqa_view, T.ICQA_SIZES, extraction, base,
        points, lambda used: whole_region(params), coverage,
        "the closed value (made once from symbolic k, n_q, n_a), then lumped evaluation over Sym(Q) x Sym(A) x Sym(T)",
        "Q = questions (n_q), A = answers (n_a), T = (q, =, a) position triples (k)",
        value=value, maker=maker,
    )


def _vocab_points(groups_of: Callable):
    import numpy as np

    def points(task, view):
        groups = groups_of(task)
        idx, _ = task.orbit_representatives()
        if len(idx) > MAX_ORBITS:
            raise BadInput(f"{task.describe()} has {len(idx)} orbits, more than the {MAX_ORBITS} a vocabulary proof "
                           "runs; use smaller structural sizes")
        ids, labels = task.decode(np.asarray(idx, dtype=np.int64))
        out = []
        for row, y in zip(ids.tolist(), labels.tolist()):
            toks = [task.vocab[t] for t in row]
            label = task.classes[int(y)]
            key = T.canonical(toks + [label], groups)
            sort_polys = {g: g for g in groups}
            pv = T.vocab_point(view, groups, sort_polys, toks, label)
            used = {g: sum(1 for t in set(toks + [label]) if t in groups[g]) for g in groups}
            out.append((key, pv, row, used))
        return out

    return points


def multihop_plan(task, variant: str, as_printed: bool, builder=None, construct=None) -> LumpedPlan:
    """Multi-hop at fixed k, hops: lumped in the number of entities N >= k."""
    k, h = task.k, task.hops
    params = (Param("N", k),)
    extraction = tuple({"N": N} for N in (k + 1, k + 2, k + 3))
    base = tuple({"N": N} for N in (k, k + 1))

    def coverage(reps):
        N = sp.Symbol("N")
        terms = [sp.ff(N, used["N"]) for _, used in reps]
        cov = T.vocab_coverage(terms, sp.ff(N, k) * k**k * k, "A(N, k) k^k k")
        return (cov.text + (": holds" if cov.ok else ": FAILS"),
                f"the {len(reps)} representatives have pairwise different first-occurrence forms (distinct orbits)"), \
            cov.ok and len({key for key, _ in reps}) == len(reps)

    from depthcert.constructions.multihop import THEOREM

    value, finite, maker = _value_route(task, variant, as_printed, construct, builder)
    return LumpedPlan(
        "multihop", variant, THEOREM, params, {"hops": h, "k": k},
        (("k", "the number of orbits (functional graphs, k^k * k) grows with k: no finite lumping"),
         ("hops", "each hop count is its own stack of layers; checked at the given h only")),
        lambda v: {"hops": h, "k": k, "n_entities": v["N"]},
        finite,
        lambda t, m: T.model_view(t, m, {"N": t.entities}, {"N": t.n_entities}),
        {"N": "N"}, extraction, base, _vocab_points(lambda t: {"N": t.entities}),
        lambda used: Region((max(0, used["N"] - k),), (True,)), coverage,
        f"the closed value (made once from symbolic N), then lumped evaluation over Sym(entities), symbolic in N, "
        f"at k={k}, hops={h}",
        "N = entities", value=value, maker=maker,
    )


def tm_plan(task, variant: str, as_printed: bool, builder=None, construct=None) -> LumpedPlan:
    """Template matching at fixed l: lumped in the alphabet size m >= l."""
    from depthcert.checkers.tasks.template import stirling2

    l = task.l
    params = (Param("m", l),)
    lo = max(l, 2)
    extraction = tuple({"m": m} for m in (lo, lo + 1, lo + 2))
    base = tuple({"m": m} for m in range(1, l + 2))

    def coverage(reps):
        m = sp.Symbol("m")
        terms = [sp.ff(m, used["m"]) for _, used in reps]
        cov = T.vocab_coverage(terms, m**l, "m^l")
        n_t = sum(stirling2(l, b) for b in range(1, l + 1))
        return (cov.text + (": holds" if cov.ok else ": FAILS"),
                f"{len(reps)} representatives = Bell({l}) = {n_t} templates, pairwise different"), \
            cov.ok and len({key for key, _ in reps}) == len(reps) == n_t

    from depthcert.constructions.parsing_mapping import THEOREM

    value, finite, maker = _value_route(task, variant, as_printed, construct, builder)
    return LumpedPlan(
        "tm", variant, THEOREM, params, {"l": l},
        (("l", "the template count Bell(l) and the ternary weights 3^(l-1-i) grow with l, and the Lemma 3 "
               "classifier is fitted per l: no finite lumping"),),
        lambda v: {"l": l, "alphabet": v["m"]},
        finite,
        lambda t, mdl: T.model_view(t, mdl, {"m": t.tokens}, {"m": t.m}),
        {"m": "m"}, extraction, base, _vocab_points(lambda t: {"m": t.tokens}),
        lambda used: Region((max(0, used["m"] - l),), (True,)), coverage,
        f"the closed value (made once from symbolic m), then lumped evaluation over Sym(alphabet), symbolic in m, "
        f"at l={l} (m < l: exact base cases)",
        "m = alphabet tokens", value=value, maker=maker,
    )


def ictm_plan(task, variant: str, as_printed: bool, builder=None, construct=None) -> LumpedPlan:
    """In-context template matching at fixed k, l: lumped in the alphabet m and the answers n_a."""
    from depthcert.checkers.tasks.template import count_templates, enumerate_patterns

    k, l = task.k, task.l
    m0 = next(m for m in range(1, l + 2) if count_templates(l, m) >= k)
    full = (k + 1) * l
    params = (Param("m", m0), Param("n_a", k))
    extraction = tuple({"m": m, "n_a": a} for m, a in ((max(m0, 2), k + 1), (full, k + 2), (full + 1, k + 1)))
    base = tuple({"m": m, "n_a": a} for m, a in ((m0, k), (m0 + 1, k + 1)))
    blocks = [int(b) for b in enumerate_patterns(l, l).max(axis=1) + 1]

    def coverage(reps):
        m, na = sp.symbols("m n_a")
        terms = [sp.ff(m, used["m"]) * sp.ff(na, used["n_a"]) for _, used in reps]
        cov = T.vocab_coverage(terms, T.ictm_size_expr(blocks, k, m, na), "the ICTM size formula")
        return (cov.text + (": holds" if cov.ok else ": FAILS"),
                f"the {len(reps)} representatives have pairwise different first-occurrence forms (distinct orbits)"), \
            cov.ok and len({key for key, _ in reps}) == len(reps)

    from depthcert.constructions.parsing_copying_matching import THEOREM

    value, finite, maker = _value_route(task, variant, as_printed, construct, builder)
    return LumpedPlan(
        "ictm", variant, THEOREM, params, {"k": k, "l": l},
        (("k", "the number of orbits (template tuples and question patterns) grows with k"),
         ("l", "the number of orbits grows with l, and the layer-3 heads (2l) and mask -l^2 depend on l")),
        lambda v: {"k": k, "l": l, "alphabet": v["m"], "n_answers": v["n_a"]},
        finite,
        lambda t, mdl: T.model_view(t, mdl, {"m": t.tokens, "n_a": t.answers}, {"m": t.m, "n_a": t.n_a}),
        {"m": "m", "n_a": "n_a"}, extraction, base,
        _vocab_points(lambda t: {"m": t.tokens, "n_a": t.answers}),
        lambda used: Region((max(0, used["m"] - m0), max(0, used["n_a"] - k)), (True, True)), coverage,
        f"the closed value (made once from symbolic m, n_a), then lumped evaluation over Sym(alphabet) x "
        f"Sym(answers), symbolic in m, n_a, at k={k}, l={l}",
        "m = alphabet tokens, n_a = answers", value=value, maker=maker,
    )


# ----------------------------------------------------------------------------- the lumped proof


def _parse(ring_: Ring, text: str):
    return ring_.parse(text)


def _tables_to_lmatrix(table: dict, rows, cols, ring_: Ring) -> LMatrix:
    data = {}
    for (r, c, p), v in table.items():
        if v:
            data[(rows.index(r), cols.index(c), p)] = ring_.const(v)
    return LMatrix(rows, cols, data)


@dataclass
class _Built:
    values: dict
    task: object
    model: object
    view: View


def _build(plan: LumpedPlan, values: dict, value=None) -> _Built | None:
    """The model at these sizes: the closed value instantiated when its range holds them (the finite
    check's own route), else the finite-only build (None when there is none: a family)."""
    from depthcert.constructions.closed import instantiate

    task = _task(plan.task, plan.options(values))
    if value is not None and value.range.contains({n: values[n] for n in value.range.names}):
        model = instantiate(value, values, task)
    elif plan.build is not None:
        model = plan.build(task)
    else:
        return None
    return _Built(values, task, model, plan.view(task, model))


_EVAL = [0.0]  # seconds spent in verify since the proof started (reported as "evaluating")


def _verify_base(plan, b: _Built) -> dict:
    from depthcert.checkers.exhaustive import verify

    v = verify(b.model, b.task, symmetry="auto", progress=False)
    _EVAL[0] += v.seconds
    row = {"size": dict(b.values), "points": v.points_total, "evaluated": v.points_checked,
           "verdict": v.verdict, "min_margin": None if v.min_margin is None else format_rational(v.min_margin)}
    if v.counterexample is not None:
        ce = v.counterexample
        row["counterexample"] = {"point": ce.index, "input": b.task.render(ce.tokens), "expected": ce.expected,
                                 "predicted": ce.predicted}
    row["_margin"] = v.min_margin
    return row


def prove_lumped(plan: LumpedPlan) -> Report:
    t0 = time.perf_counter()
    ring_ = Ring(plan.params)
    rep = Report(plan.task, plan.variant, plan.theorem, "not-proven", "", plan.method)
    fixed = (" at " + _size_text(plan.fixed)) if plan.fixed else ""
    rep.claim = "correct on every point for all " + ", ".join(p.describe() for p in plan.params) + fixed
    rep.params = tuple(p.describe() for p in plan.params)
    rep.finite = plan.finite

    # 0. the closed value (constructions/closed.py): every model below in its range is it instantiated
    from depthcert.constructions.closed import NotClosed

    value, why = None, ""
    if plan.value is not None:
        try:
            value = plan.value()
        except NotClosed as exc:
            why = str(exc)
    # 1. base cases, exactly (a construction that fails at a small size stops here)
    built: dict = {}
    for values in plan.base:
        b = _build(plan, values, value)
        if b is None:
            continue
        built[tuple(values.items())] = b
        row = _verify_base(plan, b)
        rep.base_cases.append(row)
        if row["verdict"] != "verified":
            rep.status = "fails"
            rep.failure = {"size": {**plan.fixed, **values}, "how": "base case refuted by verify",
                           **({"counterexample": row["counterexample"]} if "counterexample" in row else {})}
            rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
            rep.seconds = time.perf_counter() - t0
            return rep
    # 2. the family: the closed value, read whole
    if plan.value is not None:
        if value is None:
            rep.finite = ((", ".join(p.name for p in plan.params), "not a closed value (reason)"),) + tuple(rep.finite)
            return _not_proven(rep, f"not proven: not a closed value: {why}", t0)
        return _prove_symbolic(plan, rep, ring_, built, t0, value)
    try:
        for values in plan.extraction:
            built.setdefault(tuple(values.items()), _build(plan, values))
        names, tabs, spaces = [], [], None
        family_sizes = {key: b for key, b in built.items() if _in_region(plan.params, b.values)}
        for key, b in family_sizes.items():
            where = _size_text(b.values)
            tabs.append((where, model_tables(b.model, b.view, where)))
            sp_ = (b.view.rows, b.view.cols, b.view.classes)
            if spaces is None:
                spaces = sp_
            elif tuple(f for s in sp_ for f in s.families) != tuple(f for s in spaces for f in s.families):
                raise NotAFamily(f"the rows / positions / classes form different families at {where}")
            for s, poly in plan.sort_polys.items():
                want = ring_.parse(poly).compose([(ring_.gen[n], ring_.const(v)) for n, v in b.values.items()])
                if int(want.LC if not want.is_zero else 0) != b.view.sort_sizes[s]:
                    raise NotAFamily(f"set {s} has {b.view.sort_sizes[s]} elements at {where}, not {poly}")
            names.append(where)
        fam = merge(tabs)
        miss = missing_classes(fam, spaces[0], spaces[2])
        if miss:
            raise NotAFamily(f"no size built shows {miss[0]}")
    except NotAFamily as exc:
        return _not_proven(rep, f"not one parametric family: {exc}", t0)
    rows, cols, classes = spaces
    n_entries = sum(1 for t in list(fam.qk.values()) + list(fam.v.values()) + [fam.o] for v in t.values() if v)
    rep.steps.append(Step("family", (
        f"sets: {plan.group_note}",
        f"every weight matrix read at {len(names)} sizes ({'; '.join(names)}) is one invariant table: "
        f"{n_entries} non-zero classes over {len(rows)} row families, heads per layer {fam.heads}",
        "so the model is equivariant under the product of the sets' symmetric groups at every size")))

    return _after_family(plan, rep, ring_, fam, spaces, family_sizes, t0)


def _prove_symbolic(plan: LumpedPlan, rep: Report, ring_: Ring, built: dict, t0: float, value) -> Report:
    """Step 2: the closed value read whole (every head, table, set, segment, repeat count and W_O);
    the models the proof checks are that value instantiated (closed.instantiate)."""
    from depthcert.constructions.closed import NotClosed, content_hash
    from depthcert.proofs import all_sizes_symbolic as S

    try:
        if tuple(p.name for p in value.params) != tuple(p.name for p in plan.params) or any(
                (a.base, a.after) != (b.base, b.after) for a, b in zip(value.params, plan.params)):
            raise NotClosed(f"the value's range {value.range.describe()} is not the proof's "
                            f"{', '.join(p.describe() for p in plan.params)}")
        if any(dict(value.fixed).get(k_) != v_ for k_, v_ in plan.fixed.items()):
            raise NotClosed(f"the value is for the structure {dict(value.fixed)}, not {plan.fixed}")
        fam = S.read(value, ring_)
        spaces = S.spaces(value)
        sizes = S.set_sizes(value, ring_)
    except NotClosed as exc:
        return _not_proven(rep, f"not proven: {exc}", t0)
    unknown = sorted(set(sizes) - set(plan.sort_polys))
    if unknown:
        return _not_proven(rep, f"not proven: the value has sets {', '.join(unknown)} that the task's symmetry "
                                f"does not act on (its sets: {', '.join(plan.sort_polys)}); the lumped pass reads "
                                "only those", t0)
    for s_, poly in plan.sort_polys.items():
        if s_ not in sizes or sizes[s_] != ring_.parse(poly):
            return _not_proven(rep, f"the value's set {s_} has size "
                                    f"{poly_text(sizes[s_]) if s_ in sizes else 'none'}, not {poly}", t0)
    family_sizes = {}
    for values in tuple(b.values for b in built.values()) + plan.extraction:
        if not value.range.contains(values):
            continue  # a base case below the value's range: verified exactly only
        key = tuple(values.items())
        b = built.get(key) or _build(plan, values, value)
        b = _Built(values, b.task, b.model, S.concrete_view(value, b.task, values))
        built[key] = b
        if _in_region(plan.params, values):
            family_sizes[key] = b
    sized = S.non_constant(fam)
    h = content_hash(value)
    rep.content_hash, rep.value = h, value
    rep.steps.append(Step("family", (
        f"sets: {plan.group_note}",
        f"the closed value {h}, made once by {plan.maker} from symbolic "
        f"{', '.join(p.name for p in plan.params)} over {', '.join(p.describe() for p in plan.params)} (no size "
        "to read: symbols only)",
        f"read whole: {S.table_count(fam)} non-zero classes over {len(spaces[0])} row families, heads per layer "
        f"{fam.heads}, every head of every layer, W_O and every set size; "
        + (f"{len(sized)} entr{'y depends' if len(sized) == 1 else 'ies depend'} on the sizes: " + "; ".join(sized[:4])
           + ("; ..." if len(sized) > 4 else "") if sized else "every entry is a constant"),
        "a set-indexed table is invariant under the product of the sets' symmetric groups at every size",
        f"every model checked here in that range (the {len(family_sizes)} sizes used) is the value instantiated "
        "(closed.instantiate), the route the finite check takes")))
    rep.rests_on = (
        f"the closed value {h} (made by {plan.maker} from symbols only) and closed.instantiate, the one route from "
        "it to the model the finite check verifies",
        "the kernel's semantics as the lumped pass implements them (relu attention averaged per layer, residual, "
        "one-hot token and position embedding, read-out at the last column)",
        "the task's definition (its dataset closed under the group) and the orbit identity of step 2; the representatives are checked, not trusted (checkers/symmetry.check_orbits: distinct orbits, orbit sizes re-derived, labels from the task's rule)")
    return _after_family(plan, rep, ring_, fam, spaces, family_sizes, t0, value)


def _builder_name(plan: LumpedPlan) -> str:
    return _builder_of(plan.task, plan.variant)


def _builder_of(task: str, variant: str) -> str:
    from depthcert import constructions
    from depthcert.checkers.errors import BadInput

    try:
        fn = constructions.builder_of(task, variant)
        return f"{fn.__module__}.{fn.__qualname__}"
    except (BadInput, AttributeError):
        return "the given builder"


def _after_family(plan: LumpedPlan, rep: Report, ring_: Ring, fam, spaces, family_sizes: dict, t0: float,
                  closed_value=None) -> Report:
    rows, cols, classes = spaces
    # 3. representatives: H0 read at every size where they occur
    reps: dict = {}
    for key, b in family_sizes.items():
        for rkey, pv, ids, used in plan.points(b.task, b.view):
            where = f"{_size_text(b.values)} point {rkey}"
            try:
                h0 = point_h0(b.model, ids, b.view, pv, where)
                check_point_sizes(pv, b.view, ring_, b.values, where)
            except NotAFamily as exc:
                return _not_proven(rep, f"the representative is not invariant: {exc}", t0)
            entry = reps.setdefault(rkey, {"pv": pv, "h0": [], "used": used, "at": []})
            entry["h0"].append((_size_text(b.values), h0))
            entry["at"].append(b)
            old = entry["pv"]
            if (old.rows, old.cols, old.classes, old.last, old.label) != (pv.rows, pv.cols, pv.classes, pv.last, pv.label):
                return _not_proven(rep, f"representative {rkey} has different point families at different sizes", t0)
    lines, ok = plan.coverage([(k, e["used"]) for k, e in reps.items()])
    rep.steps.append(Step("orbits", tuple(lines)))
    if not ok:
        return _not_proven(rep, "the representatives do not cover the dataset", t0)

    # 4. the lumped pass of every representative on its region, split where a sign changes
    model_layers = []
    for li, m in enumerate(fam.heads):
        model_layers.append([(fam.qk[(li, hi)], fam.v[(li, hi)]) for hi in range(m)])
    relu_logged, failures, leaves, refined = None, [], {}, {}
    cert_points = []
    try:
        for rkey, e in reps.items():
            pv: PointView = e["pv"]
            h0 = merge_h0(e["h0"])
            prow, pcol, pcls = pv.spaces()
            sizes = {s: _parse(ring_, p) for s, p in pv.sorts.items()}
            shape = (pv.rows, pv.classes)
            if shape not in refined:  # representatives with the same point families share the weights
                refined[shape] = (
                    tuple(tuple(LHead(refine(qk, rows, rows, pv.rows, pv.rows, ring_),
                                      refine(v, rows, rows, pv.rows, pv.rows, ring_)) for qk, v in layer)
                          for layer in model_layers),
                    refine(fam.o, classes, rows, pv.classes, pv.rows, ring_))
            layers, W_O = refined[shape]
            H0 = _tables_to_lmatrix(h0, prow, pcol, ring_)
            lm = LumpedModel(prow, pcol, pcls, layers, W_O, H0, sizes, pv.last, pv.label)
            done: list = []
            tree = _run_region(lm, ring_, plan.region(e["used"]), done)
            if relu_logged is None and done:
                relu_logged = done[0][2]
            leaves[rkey] = done
            for region, mg, _ in done:
                for other, (poly, conds) in mg.items():
                    if decide(ring_, poly, region, conds).kind in ("pos", "absent"):
                        continue
                    bad = first_failure(ring_, poly, region, conds)
                    if bad is not None:
                        failures.append((tuple(bad[p.name] for p in plan.params), bad, rkey, other, poly))
            cert_points.append(_cert_point(rkey, lm, pv, tree, ring_, _model_sets(pv, rows, classes, plan, ring_)))
    except Undecided as exc:
        return _not_proven(rep, f"a sign is not decided: {exc}", t0)
    except NotAFamily as exc:
        return _not_proven(rep, f"the representative is not one table across sizes: {exc}", t0)
    rep.steps.append(Step("lumped pass", _pass_lines(reps, leaves, relu_logged, plan, ring_)))

    # 5. margins in closed form
    closed, per_other = _closed_margin(leaves, ring_, next(iter(reps.values()))["pv"].label)
    rep.margin = closed
    verdict = ((f"on every region every margin is > 0 wherever its competitor exists (coefficient test): "
                f"minimum {closed}",) if not failures else
               ("some margin is <= 0: the smallest failing size is given above",))
    rep.steps.append(Step("margins", per_other + verdict))

    # 6. cross-check: the symbolic margins equal verify's exact margins at every base case
    cross = []
    exact_only = []
    for row in rep.base_cases:
        values = row["size"]
        if not _in_region(plan.params, values):
            exact_only.append(_size_text(values))
            continue
        sym = _margin_at(leaves, ring_, plan.params, values)
        want = row["_margin"]
        if sym != want:
            raise RuntimeError(f"all-sizes internal error: symbolic margin {sym} but verify {want} at {values}")
        cross.append(_size_text(values))
    rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
    rep.steps.append(Step("cross-check", (f"the symbolic margin equals verify's exact minimum margin at all "
                                          f"{len(cross)} base cases in the symbolic range",)
                          + ((f"below the symbolic range, verified exactly only: {'; '.join(exact_only)}",)
                             if exact_only else ())))
    rep.lumped = (leaves, ring_, plan.params)
    rep.certificate = {"format": "depthcert.all-sizes", "version": 1, "task": plan.task, "variant": plan.variant,
                       "fixed": plan.fixed,
                       "params": [{"name": p.name, "base": p.base, "after": p.after} for p in plan.params],
                       "claim": rep.claim, "margin": closed, "points": cert_points,
                       **({"content_hash": rep.content_hash, "value": _value_tables(rep.value)} if rep.content_hash else {})}
    if failures:
        failures.sort(key=lambda f: f[0])
        _, bad, rkey, other, poly = failures[0]
        value = to_fraction(_eval(poly, ring_, bad))
        rep.status = "fails"
        rep.failure = {"size": {**plan.fixed, **bad}, "how": "symbolic margin <= 0",
                       "representative": str(rkey), "competitor": other, "margin_formula": poly_text(poly),
                       "margin": format_rational(value)}
        rep.failure.update(_confirm(plan, bad, closed_value))
        rep.seconds = time.perf_counter() - t0
        return rep
    if plan.value is None:
        return _table_only(rep, t0)
    rep.status = "partial" if plan.finite else "proven"
    rep.seconds = time.perf_counter() - t0
    return rep


TABLE_ONLY = ("its builder is not written with set-indexed blocks (constructions/indexed.py), so no run of it covers "
              "every size: its weights were read at the sample sizes listed, and a change at a size never read "
              "escapes that reading. The analysis below holds for the weights read; every size stays finite-only "
              "(checked exactly by `verify` at the sizes run)")


def _table_only(rep: Report, t0: float) -> Report:
    """A proof whose family step read tables at sample sizes: evidence, not a proof for every size."""
    rep.status = "not-proven"
    rep.reason = "not proven for every size: " + TABLE_ONLY
    rep.method = "evidence only (weights read at sample sizes): " + rep.method
    rep.finite = ((", ".join(p.split(" ")[0] for p in rep.params) or "all", "read at sample sizes (reason)"),) + tuple(
        rep.finite)
    rep.evidence_margin = rep.margin
    rep.margin = None
    rep.certificate = None
    rep.lumped = None
    rep.seconds = time.perf_counter() - t0
    return rep


def _run_region(lm: LumpedModel, ring_: Ring, region: Region, done: list) -> dict:
    """The split tree of one representative: a region is a leaf when every ReLU sign and every
    margin sign on it is settled by the coefficient test; otherwise it splits where decide says."""
    log = PassLog()
    try:
        logits = forward(lm, ring_, region, log)
        mg = margins(lm, ring_, logits)
        for poly, conds in mg.values():
            decide(ring_, poly, region, conds)
    except Split as s:
        return {"region": region, "split": s.var, "at": s.at,
                "children": [_run_region(lm, ring_, piece, done) for piece in s.pieces]}
    done.append((region, mg, log))
    return {"region": region, "margins": mg}


def merge_h0(tables: list) -> dict:
    out: dict = {}
    first: dict = {}
    for where, t in tables:
        for key, v in t.items():
            if key in out and out[key] != v:
                raise NotAFamily(f"H0 {key} is {out[key]} at {first[key]} but {v} at {where}")
            out.setdefault(key, v)
            first.setdefault(key, where)
    return out


def _not_proven(rep: Report, reason: str, t0: float) -> Report:
    rep.status = "not-proven"
    rep.reason = reason
    if rep.base_cases and not any(s.title == "base cases" for s in rep.steps):
        rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
    rep.seconds = time.perf_counter() - t0
    return rep


def _eval(poly, ring_: Ring, values: dict):
    v = poly.compose([(ring_.gen[n], ring_.const(x)) for n, x in values.items()])
    return v.LC if not v.is_zero else ring_.R.domain.zero


def _in_region(params, values: dict) -> bool:
    """values satisfy every parameter's base (the sizes the symbolic proof is about)."""
    return all(values[p.name] >= (values[p.after] if p.after else 0) + p.base for p in params)


def _contains(region: Region, params, values: dict) -> bool:
    for i, p in enumerate(params):
        low = (values[p.after] if p.after else 0) + p.base + region.offsets[i]
        if values[p.name] < low or (not region.free[i] and values[p.name] != low):
            return False
    return True


def symbolic_margin(rep: Report, values: dict) -> Fraction | None:
    """The proof's margin formula at concrete sizes (the minimum over the representatives and the
    competitors that exist there); None when a single class leaves no competitor."""
    leaves, ring_, params = rep.lumped
    return _margin_at(leaves, ring_, params, values)


def _margin_at(leaves: dict, ring_: Ring, params, values: dict) -> Fraction | None:
    """min over representatives and competitors existing at `values` of the symbolic margin."""
    best = None
    for rkey, done in leaves.items():
        for region, mg, _ in done:
            if not _contains(region, params, values):
                continue
            for other, (poly, conds) in mg.items():
                if any(to_fraction(_eval(c, ring_, values)) < 0 for c in conds):
                    continue
                v = to_fraction(_eval(poly, ring_, values))
                best = v if best is None else min(best, v)
    return best


def _closed_margin(leaves: dict, ring_: Ring, label: str = "") -> tuple[str | None, tuple[str, ...]]:
    """The margin in closed form: the minimum over representatives and competitors when every
    margin is a constant, else the distinct formulas."""
    polys = [poly for done in leaves.values() for _, mg, _ in done for poly, _ in mg.values()]
    if not polys:
        return None, ("a single class: no competitor, no margin",)
    lines = []
    if all(p.is_ground for p in polys):
        closed = str(format_rational(min(to_fraction(p.LC if not p.is_zero else 0) for p in polys)))
    else:
        distinct = sorted({poly_text(p) for p in polys})
        closed = "min(" + ", ".join(distinct[:6]) + (", ..." if len(distinct) > 6 else "") + ")"
    if len(leaves) == 1:
        (done,) = leaves.values()
        for region, mg, _ in done:
            where = "" if len(done) == 1 else f" on {region.describe(ring_.params)}"
            for other, (poly, conds) in mg.items():
                exist = (" (exists for " + ", ".join(cond_text(c) for c in conds) + ")") if conds else ""
                lines.append(f"label {label} - {other} = {poly_text(poly)}{where}{exist}")
    else:
        count: dict = {}
        for done in leaves.values():
            ps = [poly for _, mg, _ in done for poly, _ in mg.values()]
            if all(p.is_ground for p in ps):
                key = str(format_rational(min(to_fraction(p.LC if not p.is_zero else 0) for p in ps)))
            else:
                key = "min(" + ", ".join(sorted({poly_text(p) for p in ps})) + ")"
            count[key] = count.get(key, 0) + 1
        lines.append("smallest margin of each orbit: " + ", ".join(
            f"{v} ({n} orbit{'s' if n > 1 else ''})" for v, n in sorted(count.items(), key=lambda kv: _order(kv[0]))))
    return closed, tuple(lines)


def cond_text(c) -> str:
    """c >= 0 as 'expression >= constant', e.g. 'k >= 2', '-k + n_a >= 1'."""
    const = to_fraction(c.coeff(1))
    rest = c - c.coeff(1)
    return f"{poly_text(rest)} >= {format_rational(-const)}"


def _order(text: str):
    try:
        return (0, Fraction(text), text)
    except ValueError:
        return (1, Fraction(0), text)


def _pass_lines(reps, leaves, log: PassLog, plan: LumpedPlan, ring_: Ring) -> tuple[str, ...]:
    n_pieces = sum(len(d) for d in leaves.values())
    lines = [f"{len(reps)} representative{'s' if len(reps) != 1 else ''}, {n_pieces} region{'s' if n_pieces != 1 else ''}: "
             + ("no score changes sign inside a region; one region per representative" if n_pieces == len(reps) else
                "split where a score changes sign (exact real roots), each piece run again")]
    if log is not None:
        heads: dict = {}
        for li, hi, fj, fk, p, v, kind in log.relu:
            h = heads.setdefault((li, hi), {"on": {}, "off": 0})
            if kind in ("pos", "nonneg"):
                h["on"][v] = h["on"].get(v, 0) + 1
            else:
                h["off"] += 1
        for (li, hi), h in sorted(heads.items()):
            on = ", ".join(f"{n} x {v}" for v, n in sorted(h["on"].items(), key=lambda kv: kv[0]))
            lines.append(f"layer {li + 1} head {hi + 1}: score classes > 0 kept: {on or 'none'}; "
                         f"{h['off']} class{'es' if h['off'] != 1 else ''} <= 0 cut by ReLU" + (" (first representative, first region)"
                                                                     if len(reps) > 1 or n_pieces > 1 else ""))
    return tuple(lines)


def _base_lines(rows: list) -> tuple[str, ...]:
    out = []
    for r in rows:
        margin = "- (one class)" if r["min_margin"] is None else r["min_margin"]
        line = (f"{_size_text(r['size'])}: {r['points']} point{'s' if r['points'] != 1 else ''} ({r['evaluated']} evaluated), "
                f"{r['verdict']}, margin {margin}")
        if "counterexample" in r:
            ce = r["counterexample"]
            line += f"; point {ce['point']} {ce['input']}: expected {ce['expected']}, predicted {ce['predicted']}"
        out.append(line)
    return tuple(out)


def _confirm(plan: LumpedPlan, bad: dict, value=None) -> dict:
    """Re-check a failing size with the exhaustive checker when it is small enough (the model: the
    value instantiated there)."""
    from depthcert.checkers.exhaustive import plan_points, verify

    try:
        b = _build(plan, bad, value)
        if b is None:
            return {"confirmed": "not run (no model at this size)"}
        task, model = b.task, b.model
        pp = plan_points(model, task, "auto")
        if pp.n_eval > CONFIRM_MAX_POINTS:
            return {"confirmed": f"not run ({pp.n_eval} points to evaluate)"}
        v = verify(model, task, plan=pp, progress=False)
        _EVAL[0] += v.seconds
    except BadInput as exc:
        return {"confirmed": f"not run ({exc})"}
    out = {"confirmed": f"verify at this size: {v.verdict.upper()}"}
    if v.counterexample is not None:
        ce = v.counterexample
        out["confirmed"] += f", point {ce.index}: {task.render(ce.tokens)}, expected {ce.expected}, predicted {ce.predicted}"
    return out


def _model_sets(pv: PointView, rows, classes, plan: LumpedPlan, ring_: Ring) -> dict:
    """Every model set with its size and the point parts it splits into (for the re-checker's
    orbit identity): a part is ('fixed', label) (one element) or ('sort', point set)."""
    sort_of = {f.name: f.sort for f in rows.families + classes.families}
    out: dict = {}
    for f in pv.rows + pv.classes:
        S = sort_of.get(f.model)
        if S is None:
            continue
        entry = out.setdefault(S, {"size": _terms(_parse(ring_, plan.sort_polys[S])), "parts": []})
        part = [f.spec[0], f.spec[1]]
        if part not in entry["parts"]:
            entry["parts"].append(part)
    return out


def _cert_point(rkey, lm: LumpedModel, pv: PointView, tree: dict, ring_: Ring, model_sets: dict | None = None) -> dict:
    def mat(M: LMatrix):
        return [[r, c, p, _terms(v)] for (r, c, p), v in sorted(M.data.items())]

    def node(n: dict) -> dict:
        out = {"offsets": list(n["region"].offsets), "free": list(n["region"].free)}
        if "split" in n:
            out.update({"split": n["split"], "at": n["at"], "children": [node(c) for c in n["children"]]})
        else:
            out["margins"] = {o: {"value": _terms(p), "text": _ptext(p), "exists": [_terms(c) for c in conds]}
                              for o, (p, conds) in n["margins"].items()}
        return out

    return {
        "representative": str(rkey),
        "sorts": {s: _terms(_parse(ring_, t)) for s, t in pv.sorts.items()},
        "rows": [[f.name, f.sort] for f in lm.rows.families],
        "cols": [[f.name, f.sort] for f in lm.cols.families],
        "classes": [[f.name, f.sort] for f in lm.classes.families],
        "layers": [[{"W_QK": mat(h.W_QK), "W_V": mat(h.W_V)} for h in layer] for layer in lm.layers],
        "W_O": mat(lm.W_O), "H0": mat(lm.H0), "last": lm.last, "label": lm.label,
        "tree": node(tree),
        **({"model_sets": model_sets} if model_sets else {}),
    }


def _value_tables(value) -> dict | None:
    """The closed value's canonical tables (what its content hash hashes), written into the certificate so
    that proofs/check_all_sizes.py re-hashes them and compares every point's tables with them."""
    from depthcert.constructions.closed import canonical_tables

    return None if value is None else canonical_tables(value)


def _terms(p) -> list:
    """A polynomial as [[exponents, "p/q"], ...] (exponents in the parameters' order)."""
    return [[list(m), str(format_rational(to_fraction(c)))] for m, c in sorted(p.terms())]


def _ptext(p) -> str:
    return poly_text(p) if not p.is_ground else str(format_rational(to_fraction(p.LC if not p.is_zero else 0)))


# ----------------------------------------------------------------------------- multi-hop, every h


HOP_SIZES = (1, 2, 3)


def prove_multihop_linear(task, as_printed: bool = False, builder=None, construct=None) -> Report:
    """Multi-hop `linear` for every hops >= 1 and every N >= k, at fixed k.

    The model for h hops is the copy layer followed by h copies of one hop layer (checked: the
    tables of every hop layer at every h and N built are one table).  So the stream after s hops
    is S_s = Phi^s(S_0), Phi the lumped hop layer, and the label for h = s hops is f^s(x_c) =
    f(label for s - 1) (the task's definition).  The pairs (S_s, label_s) therefore follow a
    deterministic map: once a pair repeats (exact equality of the lumped tables), the sequence is
    periodic from there, and the finitely many pairs seen are every pair for every h.  Each is
    decided for every N at once (the lumped pass)."""
    from depthcert.constructions.multihop import THEOREM

    t0 = time.perf_counter()
    k = task.k
    params = (Param("N", k),)
    ring_ = Ring(params)
    from depthcert.constructions.closed import NotClosed, instantiate, value_of
    from depthcert.constructions.multihop import closed_value, symbolic_task

    rep = Report("multihop", "linear", THEOREM, "not-proven",
                 f"correct on every point for all hops >= 1, N >= {k} at k={k}",
                 ("the closed value (made once from symbolic hops and N), then " if builder is None else "")
                 + f"lumped evaluation over Sym(entities), symbolic in N, and periodicity of the hop layer in h, at k={k}")
    value = None
    if builder is None:
        try:
            value = value_of(construct, symbolic_task(k)) if construct is not None else closed_value("linear", k, None,
                                                                                                    as_printed)
        except NotClosed as exc:
            rep.params = ()
            rep.finite = (("hops, N", "not a closed value (reason)"),)
            return _not_proven(rep, f"not proven: not a closed value: {exc}", t0)

        def build(t):
            return instantiate(value, {"hops": t.hops, "N": t.n_entities}, t)
    else:
        build = builder
    rep.params = ("hops >= 1", f"N >= {k}")
    rep.finite = (("k", "the number of orbits (functional graphs, k^k * k) grows with k: no finite lumping"),)

    def view_of(t, m):
        return T.model_view(t, m, {"N": t.entities}, {"N": t.n_entities})

    built = {}
    for h in (1, 2, 3, 4):
        for N in (k, k + 1):
            t = _task("multihop", {"hops": h, "k": k, "n_entities": N})
            m = build(t)
            b = _Built({"hops": h, "N": N}, t, m, view_of(t, m))
            built[(h, N)] = b
            row = _verify_base(None, b)
            rep.base_cases.append(row)
            if row["verdict"] != "verified":
                rep.status = "fails"
                rep.failure = {"size": {"k": k, "hops": h, "N": N}, "how": "base case refuted by verify",
                               **({"counterexample": row["counterexample"]} if "counterexample" in row else {})}
                rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
                rep.seconds = time.perf_counter() - t0
                return rep
    if builder is None:
        out = _multihop_linear_symbolic(task, value, build, rep, ring_, built, t0)
        if isinstance(out, Report):
            return out
        copy_f, hop_f, spaces = out
        rows, cols, classes = spaces
    else:
        out = _multihop_linear_tables(task, build, rep, built, view_of, t0)
        if isinstance(out, Report):
            return out
        copy_f, hop_f, spaces = out
        rows, cols, classes = spaces
    out = _multihop_linear_rest(task, rep, ring_, built, copy_f, hop_f, rows, cols, classes, t0,
                                symbolic=builder is None)
    if out.status == "not-proven" and out.reason.startswith("a sign is not decided"):
        _search_small_failure(out, k, build)  # undecided for every N: look for the smallest failing size
    return out


SEARCH_HOPS, SEARCH_N = 4, 8  # an undecided multi-hop proof looks for a failure at hops <= 4, N <= k + 8


def _search_small_failure(rep: Report, k: int, build) -> None:
    """verify the value instantiated at hops <= SEARCH_HOPS, N <= k + SEARCH_N (by N, then hops); the
    first failure makes the report `fails` at that size (exit 1); none found leaves it not proven."""
    from depthcert.checkers.exhaustive import plan_points, verify

    for N in range(k, k + SEARCH_N + 1):
        for h in range(1, SEARCH_HOPS + 1):
            t = _task("multihop", {"hops": h, "k": k, "n_entities": N})
            model = build(t)
            pp = plan_points(model, t, "auto")
            if pp.n_eval > CONFIRM_MAX_POINTS:
                continue
            v = verify(model, t, plan=pp, progress=False)
            _EVAL[0] += v.seconds
            if not v.verified:
                ce = v.counterexample
                rep.status = "fails"
                rep.failure = {"size": {"k": k, "hops": h, "N": N},
                               "how": "refuted by verify (the smallest size found where the undecided sign goes wrong)"}
                if ce is not None:
                    rep.failure["counterexample"] = {"point": ce.index, "input": t.render(ce.tokens),
                                                     "expected": ce.expected, "predicted": ce.predicted}
                return
    rep.reason += f"; verify finds no failure at hops <= {SEARCH_HOPS}, N <= {k + SEARCH_N}"


def _same_size(a, b) -> bool:
    """a = b as polynomials in the sizes (no comparison decided over a range: a repeat count equal to
    hops at every size read but not as a polynomial is not hops)."""
    try:
        diff = b - a
    except (TypeError, ValueError):
        return False
    return not getattr(diff, "terms", True)


def _multihop_linear_symbolic(task, value, build, rep, ring_, built, t0):
    """The closed value of multi-hop linear read whole: layers = (copy layer, one hop layer repeated
    hops times), every head of both, W_O; no weight may depend on the hops."""
    from depthcert.constructions.closed import NotClosed, content_hash
    from depthcert.constructions.closed import poly_text as closed_poly_text
    from depthcert.proofs import all_sizes_symbolic as S

    k = task.k
    names = S.names_of(value)
    try:
        if names != ("hops", "N"):
            raise NotClosed(f"the value's parameters are {', '.join(names)}, not hops, N")
        if dict(value.fixed).get("k") != k:
            raise NotClosed(f"the value is for the structure {dict(value.fixed)}, not k = {k}")
        if len(value.layers) != 2 or S.constant_repeat(value.layers[0], names) != 1:
            raise NotClosed("the model is not (copy layer, one hop layer repeated hops times)")
        hops_poly = (((1, 0), Fraction(1)),)
        if value.layers[1].repeat != hops_poly:
            raise NotClosed(f"the hop layer is repeated {closed_poly_text(value.layers[1].repeat, names)} times, not hops "
                            "times: the model is not (copy layer, one hop layer repeated hops times)")
        copy_f = S.layer_tables(value.layers[0], ring_, names)
        hop_f = S.layer_tables(value.layers[1], ring_, names)
        copy_f.o = {key: S.as_poly(ring_, p, names) for key, p in value.W_O.entries}
        spaces = S.spaces(value)
        if S.set_sizes(value, ring_) != {"N": ring_.gen["N"]}:
            raise NotClosed("the value's sets are not the entity set N of size N (the only set the symmetry acts on)")
    except NotClosed as exc:
        return _not_proven(rep, f"not proven: {exc}", t0)
    for h in HOP_SIZES:
        for N in (k + 1, k + 2, k + 3):
            if (h, N) not in built:
                t = _task("multihop", {"hops": h, "k": k, "n_entities": N})
                built[(h, N)] = _Built({"hops": h, "N": N}, t, build(t), None)
    for key, b in list(built.items()):
        values = {"hops": b.values["hops"], "N": b.values["N"]}
        built[key] = _Built(b.values, b.task, b.model, S.concrete_view(value, b.task, values))
    fam = S.Tables(copy_f.heads + hop_f.heads, {(0, hi): t for (_, hi), t in copy_f.qk.items()}
                   | {(1, hi): t for (_, hi), t in hop_f.qk.items()},
                   {(0, hi): t for (_, hi), t in copy_f.v.items()} | {(1, hi): t for (_, hi), t in hop_f.v.items()},
                   copy_f.o)
    sized = S.non_constant(fam)
    rep.content_hash, rep.value = content_hash(value), value
    rep.steps.append(Step("family", (
        "sets: N = entities",
        f"the closed value {rep.content_hash}, made once by {_builder_of('multihop', 'linear')} from symbolic hops "
        f"and N over hops >= 1, N >= {k} (k = {k} fixed): symbols only",
        f"read whole: the copy layer ({len(value.layers[0].heads)} head"
        f"{'s' if len(value.layers[0].heads) != 1 else ''}), one hop layer Phi ({len(value.layers[1].heads)} head"
        f"{'s' if len(value.layers[1].heads) != 1 else ''}) repeated hops times (its repeat count is the symbol hops), "
        f"W_O: {S.table_count(fam)} non-zero classes over {len(spaces[0])} row families; "
        + (f"{len(sized)} entr{'y depends' if len(sized) == 1 else 'ies depend'} on N: " + "; ".join(sized[:4])
           + ("; ..." if len(sized) > 4 else "") if sized else "no weight depends on the sizes"),
        f"every model checked here (the {len(built)} sizes used) is the value instantiated (closed.instantiate)")))
    rep.rests_on = (
        f"the closed value {rep.content_hash} and closed.instantiate, the one route from it to the model the finite "
        "check verifies",
        "the kernel's semantics as the lumped pass implements them (relu attention averaged per layer, residual, "
        "one-hot token and position embedding, read-out at the last column)",
        "the task's definition (its dataset closed under the group), the orbit identity of step 2 and its label rule f^h(s) = f(f^(h-1)(s)) (step 3); the representatives are checked, not trusted (checkers/symmetry.check_orbits)")
    return copy_f, hop_f, spaces


def _multihop_linear_tables(task, build, rep, built, view_of, t0):
    """The family read from models built at sample sizes (a given builder: evidence only)."""
    k = task.k
    try:
        for h in HOP_SIZES:
            for N in (k + 1, k + 2, k + 3):
                t = _task("multihop", {"hops": h, "k": k, "n_entities": N})
                m = build(t)
                built.setdefault((h, N), _Built({"hops": h, "N": N}, t, m, view_of(t, m)))
        copy_t, hop_t, spaces = [], [], None
        for (h, N), b in built.items():
            where = f"hops={h}, N={N}"
            tab = model_tables(b.model, b.view, where)
            if tab.heads != [1] * (h + 1):
                raise NotAFamily(f"{where}: heads per layer {tab.heads}, not h + 1 layers of one head")
            sp_ = (b.view.rows, b.view.cols, b.view.classes)
            if spaces is None:
                spaces = sp_
            elif tuple(f for s in sp_ for f in s.families) != tuple(f for s in spaces for f in s.families):
                raise NotAFamily(f"the rows / positions / classes form different families at {where}")
            copy_t.append((where, _one_layer(tab, 0)))
            hop_t += [(f"{where} layer {li + 1}", _one_layer(tab, li)) for li in range(1, h + 1)]
        copy_f, hop_f = merge(copy_t), merge(hop_t)
        rows, cols, classes = spaces
        for f, what in ((copy_f, "copy"), (hop_f, "hop")):
            miss = missing_classes(f, rows, classes)
            if miss:
                raise NotAFamily(f"no size built shows {what} {miss[0]}")
    except NotAFamily as exc:
        return _not_proven(rep, f"not one parametric family: {exc}", t0)
    rep.steps.append(Step("family", (
        "sets: N = entities",
        f"the copy layer, every hop layer and W_O read at {len(built)} sizes (hops {sorted({h for h, _ in built})}, "
        f"N {sorted({N for _, N in built})}) are three invariant tables: every hop layer of every model is the same "
        "table, so the model for h hops is copy + h times one layer Phi")))
    return copy_f, hop_f, spaces


def _multihop_linear_rest(task, rep, ring_, built, copy_f, hop_f, rows, cols, classes, t0, symbolic: bool) -> Report:
    import numpy as np

    from dataclasses import replace as dc_replace

    k = task.k
    base_task = built[(1, k + 3)].task
    idx, _ = base_task.orbit_representatives()
    total_pairs, failures, all_margins = 0, [], []
    cert_points = []
    try:
        for index in idx.tolist():
            h0s = []
            pv = None
            for N in (k + 1, k + 2, k + 3):
                b = built[(1, N)]
                ids, _ = b.task.decode(np.array([index], dtype=np.int64))
                toks = [b.task.vocab[t] for t in ids[0]]
                here = T.vocab_point(b.view, {"N": b.task.entities}, {"N": "N"}, toks, b.task.point(index).label)
                if pv is not None and (pv.rows, pv.cols, pv.classes) != (here.rows, here.cols, here.classes):
                    raise NotAFamily(f"point {index} has different point families at N={N}")
                pv = pv or here
                h0s.append((f"N={N}", point_h0(b.model, ids[0].tolist(), b.view, here, f"N={N} point {index}")))
            prow, pcol, pcls = pv.spaces()
            sizes = {s_: ring_.parse(p_) for s_, p_ in pv.sorts.items()}
            # every head of the copy layer and of the hop layer (a head left out is a model not proven)
            copy = tuple(LHead(refine(qk, rows, rows, pv.rows, pv.rows, ring_), refine(v, rows, rows, pv.rows, pv.rows, ring_))
                         for qk, v in [(copy_f.qk[(0, hi)], copy_f.v[(0, hi)]) for hi in range(copy_f.heads[0])])
            hop = tuple(LHead(refine(qk, rows, rows, pv.rows, pv.rows, ring_), refine(v, rows, rows, pv.rows, pv.rows, ring_))
                        for qk, v in [(hop_f.qk[(0, hi)], hop_f.v[(0, hi)]) for hi in range(hop_f.heads[0])])
            W_O = refine(copy_f.o, classes, rows, pv.classes, pv.rows, ring_)
            lm = LumpedModel(prow, pcol, pcls, (copy,), W_O, _tables_to_lmatrix(merge_h0(h0s), prow, pcol, ring_),
                             sizes, pv.last, pv.label)
            region = Region((0,), (True,))
            H = apply_layers(lm, lm.H0, (copy,), ring_, region)
            seen, s_ = {}, 0
            toks_b = [base_task.vocab[t] for t in base_task.decode(np.array([index]))[0][0]]
            labels = []
            while True:
                s_ += 1
                H = apply_layers(lm, H, (hop,), ring_, region, first=s_)
                label = _task("multihop", {"hops": s_, "k": k, "n_entities": k + 3}).point(index).label
                fam_label = pv.class_map[("cls:N", base_task.entities.index(label))][0]
                labels.append(fam_label)
                key = (state_key(H), fam_label)
                if key in seen:
                    break
                seen[key] = s_
                for other, (poly, conds) in margins(dc_replace(lm, label=fam_label), ring_,
                                                    logits_of(lm, ring_, H)).items():
                    all_margins.append(poly)
                    if decide(ring_, poly, region, conds).kind not in ("pos", "absent"):
                        bad = first_failure(ring_, poly, region, conds)
                        if bad is not None:
                            failures.append(((s_, bad["N"]), {"k": k, "hops": s_, **bad}, index, other, poly))
            total_pairs += len(seen)
            nxt = {}  # the label rule on the labels reached: label_{s+1} = f(label_s)
            for a, b in zip(labels, labels[1:]):
                if nxt.setdefault(a, b) != b:
                    raise NotAFamily(f"point {index}: the labels for h = 1, 2, ... do not follow one map")
            cert_points.append({"point": index, "input": " ".join(toks_b), "states": len(seen),
                                "repeats_at": s_, "equals_state_of_h": seen[key],
                                "cert": _cert_hops_point(index, dc_replace(lm, layers=(copy, hop)), pv, ring_,
                                                         labels[0], nxt, rows, classes)})
    except (Split, Undecided) as exc:
        return _not_proven(rep, f"a sign is not decided for every N: {exc}", t0)
    except NotAFamily as exc:
        return _not_proven(rep, f"not one parametric family: {exc}", t0)
    periods = {}
    for c in cert_points:
        periods[(c["states"], c["repeats_at"] - c["equals_state_of_h"])] = periods.get(
            (c["states"], c["repeats_at"] - c["equals_state_of_h"]), 0) + 1
    N_ = sp.Symbol("N")
    cov = T.vocab_coverage([sp.ff(N_, k)] * len(idx), sp.ff(N_, k) * k**k * k, "A(N, k) k^k k")
    rep.steps.append(Step("orbits", (f"{len(idx)} representatives (each functional graph f on the k={k} sources "
                                     "and start c; the same indices for every h)",
                                     cov.text + (": holds" if cov.ok else ": FAILS"))))
    if not cov.ok:
        return _not_proven(rep, "the representatives do not cover the dataset", t0)
    rep.steps.append(Step("every h", (
        f"per representative, (S_s, label_s) for s = 1, 2, ... until a pair repeats: {total_pairs} pairs in all; "
        "(distinct pairs, period): " + ", ".join(f"({a}, {p}) x {n}" for (a, p), n in sorted(periods.items())),
        f"the copy layer's {len(copy)} head{'s' if len(copy) != 1 else ''} and the hop layer's {len(hop)} head"
        f"{'s' if len(hop) != 1 else ''} applied at every step; every pair's margin is decided for all N >= {k} "
        "(coefficient test): so every h >= 1 is covered")))
    if failures:
        failures.sort(key=lambda f: f[0])
        _, bad, index, other, poly = failures[0]
        rep.status = "fails"
        rep.failure = {"size": bad, "how": "symbolic margin <= 0", "representative": str(index), "competitor": other,
                       "margin_formula": poly_text(poly), "margin": format_rational(to_fraction(_eval(poly, ring_, {"N": bad["N"]})))}
        rep.seconds = time.perf_counter() - t0
        return rep
    if all(p.is_ground for p in all_margins):
        rep.margin = str(format_rational(min(to_fraction(p.coeff(1)) for p in all_margins)))
    else:
        rep.margin = "min(" + ", ".join(sorted({poly_text(p) for p in all_margins})) + ")"
    rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
    cross = [r for r in rep.base_cases if r["_margin"] is not None and str(format_rational(r["_margin"])) != rep.margin]
    rep.steps.append(Step("cross-check", (f"verify's exact minimum margin is {rep.margin} at every base case"
                                          if not cross else "verify's margins differ at some base cases",)))
    if not symbolic:
        return _table_only(rep, t0)
    if cross:
        return _not_proven(rep, "the symbolic margin differs from verify's at a base case", t0)
    rep.status = "partial"
    rep.certificate = {"format": "depthcert.all-sizes", "version": 1, "task": "multihop", "variant": "linear",
                       "kind": "every-hops", "every": {"name": "hops", "base": 1}, "fixed": {"k": k},
                       "params": [{"name": "N", "base": k, "after": None}], "claim": rep.claim, "margin": rep.margin,
                       "points": [c["cert"] for c in cert_points],
                       **({"content_hash": rep.content_hash, "value": _value_tables(rep.value)} if rep.content_hash else {})}
    rep.seconds = time.perf_counter() - t0
    return rep


def _cert_hops_point(index, lm: LumpedModel, pv: PointView, ring_: Ring, start: str, nxt: dict, rows, classes) -> dict:
    """A representative of multi-hop linear for every h: its tables with layers (copy, hop), the
    label for h = 1 (`start`) and the label rule f on the labels reached (`next`); the re-checker
    runs copy, then hop after hop, until a (stream, label) pair repeats, deciding every margin."""
    sort_of = {f.name: f.sort for f in rows.families + classes.families}
    sets: dict = {}
    for f in pv.rows + pv.classes:  # as _model_sets: every model set, its size and its parts here
        S = sort_of.get(f.model)
        if S is None:
            continue
        entry = sets.setdefault(S, {"size": _terms(ring_.gen[S]), "parts": []})
        if [f.spec[0], f.spec[1]] not in entry["parts"]:
            entry["parts"].append([f.spec[0], f.spec[1]])
    out = _cert_point(index, lm, pv, {"region": Region((0,), (True,)), "margins": {}}, ring_, sets)
    del out["label"], out["tree"]["margins"]
    out.update({"start": start, "next": dict(sorted(nxt.items()))})
    return out


def _one_layer(tab, li: int):
    from depthcert.proofs.all_sizes_families import Tables

    return Tables([1], {(0, 0): tab.qk[(li, 0)]}, {(0, 0): tab.v[(li, 0)]}, tab.o)


# ----------------------------------------------------------------------------- Theorem 1


SC_SIZES = ((1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (4, 2))


def prove_sc(as_printed: bool = False, construct=None, variant: str | None = None) -> Report:
    """Theorem 1 for every L >= 1, M >= 1: the builder run with symbolic L, M and a generic copy head
    h (constructions/memorization.py), the last column derived for every sequence, the read-out's
    logits in closed form (proofs/all_sizes_lemma4.py).  `construct`: task -> Construction (the
    registry's by default; the finite checks call the same function)."""
    from depthcert.checkers.exhaustive import verify
    from depthcert.constructions.closed import NotClosed, content_hash, instantiate, value_of
    from depthcert.constructions.memorization import THEOREM, closed_value, symbolic_task
    from depthcert.proofs.all_sizes_lemma4 import derive_value, poly_terms, smallest_failure

    t0 = time.perf_counter()
    variant = variant or "heads"
    value, why = None, ""
    try:
        if construct is not None:
            value = value_of(construct, symbolic_task())
        elif not as_printed:
            value = closed_value()
        else:
            why = ("Lemma 3's classifier (as printed) is fitted point by point on the layer's outputs: no read-out "
                   "stated for every size")
    except NotClosed as exc:
        why = str(exc)
    registry = _registry_construct("sc", variant, as_printed)

    def construct_model(task):
        if value is not None:
            return instantiate(value, {"L": task.length - 1, "M": len(task.vocab) - 1}, task)
        return registry(task).model if construct is None else None

    rep = Report("sc", variant, THEOREM, "not-proven",
                 "correct on every point for all L >= 1 (sequence length before CLS), M >= 1 (alphabet), every "
                 "seed and every --n-points sample",
                 "the closed value (made once from symbolic L, M and a generic copy head h); the last column derived "
                 "for every sequence; the read-out's logits in closed form")
    rep.params = ("L >= 1", "M >= 1")
    rep.finite = ()

    def base(L, M):
        task = _task("sc", {"length": L, "alphabet": M})
        v = verify(construct_model(task), task, progress=False)
        _EVAL[0] += v.seconds
        row = {"size": {"L": L, "M": M}, "points": v.points_total, "evaluated": v.points_checked,
               "verdict": v.verdict, "min_margin": None if v.min_margin is None else format_rational(v.min_margin),
               "_margin": v.min_margin}
        if v.counterexample is not None:
            ce = v.counterexample
            row["counterexample"] = {"point": ce.index, "input": task.render(ce.tokens), "expected": ce.expected,
                                     "predicted": ce.predicted}
        return row

    if value is None and construct is not None:
        rep.finite = (("L, M", "not a closed value (reason)"),)
        return _not_proven(rep, f"not proven: not a closed value: {why}", t0)
    for L, M in SC_SIZES:
        row = base(L, M)
        rep.base_cases.append(row)
        if row["verdict"] != "verified":
            rep.status = "fails"
            rep.failure = {"size": {"L": L, "M": M}, "how": "base case refuted by verify",
                           **({"counterexample": row["counterexample"]} if "counterexample" in row else {})}
            rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
            rep.seconds = time.perf_counter() - t0
            return rep
    if value is None:
        rep.finite = (("L, M", "not a closed value (reason)"),)
        return _not_proven(rep, f"not proven: not a closed value: {why}", t0)
    try:
        der = derive_value(value)
    except NotClosed as exc:
        return _not_proven(rep, f"not proven: {exc}", t0)
    except SizeBranchError as exc:
        return _not_proven(rep, f"a condition is not decided: {exc.what}", t0)
    except NotAFamily as exc:
        return _not_proven(rep, f"the layer is not the Lemma 4 shape: {exc}", t0)
    rep.content_hash, rep.value = content_hash(value), value
    rep.steps.append(Step("family", (
        f"the closed value {rep.content_hash}, made once by {_builder_of('sc', variant) if construct is None else 'the family function'} "
        "from symbolic L, M and a generic copy head index h over 0 <= h <= L - 1, L >= 1, M >= 1 (symbols only); "
        "read whole: d, n, d', the copy heads (count, head h's rules), every other head, the read-out",
        *der.shapes,
        f"every model checked here (the {len(rep.base_cases)} base sizes) is the value instantiated (closed.instantiate: "
        "copy head h's polynomials at h = 0 .. L - 1)")))
    lines = tuple(f"{cond.text}: " + {True: "holds", False: "FAILS", None: "undecided"}[cond.decided()]
                  for cond in der.conditions)
    rep.steps.append(Step("derivation", lines + (
        "so for every L, M and every sequence x: h_last = g sum_{h<L} e_{o_h + x_h} (Lemma 4's concatenated "
        "one-hots), g = a s / m; the logit of the class of s is g w #{h : x_h = s_h}",
        f"label - other = g w #{{h : x_h != s_h}} >= g w = {der.margin}, with equality at a sequence differing in "
        "one position (M >= 2; M = 1 has one class)")))
    bad = der.failing()
    if bad:
        found = smallest_failure(der)
        if found is None:
            return _not_proven(rep, f"undecided for every size: {bad[0].text}", t0)
        size, h, cond = found
        rep.status = "fails"
        rep.failure = {"size": size, "how": f"{cond.text} fails at head h = {h}"}
        try:
            row = base(size["L"], size["M"])
            rep.failure["confirmed"] = f"verify at this size: {row['verdict'].upper()}" + (
                f", point {row['counterexample']['point']}: {row['counterexample']['input']}, expected "
                f"{row['counterexample']['expected']}, predicted {row['counterexample']['predicted']}"
                if "counterexample" in row else f", margin {row['min_margin']}")
        except BadInput as exc:
            rep.failure["confirmed"] = f"not run ({exc})"
        rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
        rep.seconds = time.perf_counter() - t0
        return rep
    L_, M_ = sp.Symbol("L"), sp.Symbol("M")
    cross = [r for r in rep.base_cases if r["size"]["M"] >= 2
             and r["_margin"] != Fraction(str(der.margin.subs({L_: r["size"]["L"], M_: r["size"]["M"]})))]
    rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
    rep.steps.append(Step("cross-check", (
        f"the symbolic margin {der.margin} equals verify's exact minimum margin at every base case with M >= 2"
        if not cross else "verify's margins differ from the symbolic margin at some base cases",)))
    if cross:
        return _not_proven(rep, "the symbolic margin differs from verify's at a base case", t0)
    rep.margin = str(format_rational(Fraction(str(der.margin)))) if der.margin.is_number else str(der.margin)
    rep.margin_note = ("the exact minimum over every point of every full dataset claimed, M >= 2; M = 1 has one "
                       "class; an --n-points sample's is at least this")
    rep.rests_on = (
        f"the closed value {rep.content_hash} and closed.instantiate, the one route from it to the model the finite "
        "check verifies (memorization.Lemma4.instantiate: one layer, the copy heads, then the cancel head; stream "
        "[token; position; pad]; constructions/head_family.py rules_matrix, template_readout)",
        "the kernel's semantics as the derivation uses them (relu attention averaged per layer, residual, one-hot "
        "token and position embedding, read-out at the last column)")
    rep.certificate = {
        "format": "depthcert.all-sizes", "version": 1, "task": "sc", "variant": variant, "kind": "lemma4",
        "params": [{"name": "h", "base": 0}, {"name": "L", "base": 1, "after": "h"}, {"name": "M", "base": 1}],
        "rules": {name: poly_terms(v) for name, v in der.rules.items()},
        "claim": rep.claim, "margin": rep.margin, "content_hash": rep.content_hash,
        "value": _value_tables(rep.value),
    }
    rep.status = "proven"
    rep.seconds = time.perf_counter() - t0
    return rep


# ----------------------------------------------------------------------------- not covered


NOT_COVERED = {
    ("tm", "heads"): "its Lemma 4 slots overlap the token rows, so no permutation of the alphabet fixes the weights "
                     "(checkers/symmetry.py refuses it too) and d' = max(l n, d + n) changes shape with m",
    ("multihop", "relu-and"): "its layer-2 heads are indexed by the entities (a head per entity), which the lumped "
                              "tables (one table per head) do not cover",
    ("multihop", "dnf"): "its layer-2 heads are indexed by value and pair paths (N^h k^h heads), which the lumped "
                         "tables (one table per head) do not cover",
}
_COMPOSITION = ("N, L finite-only: the orbits of the L-tuples of functions on N points (and the query) under Sym(N) "
                "grow with N, so no finite set of representatives covers every N (the lumped method needs one); a "
                "proof for every N would need an argument that the entries off the lookup path get no attention "
                "whatever their values, which is not implemented; layer J reads table J's positions, so the layers "
                "are not one layer repeated (no periodicity in L); and the decoder variants' causal mask is outside "
                "the model class the lumped pass implements; checked per size by `verify`")
_TREE = ("n finite-only: the number of layers grows with n (ceil(log2 n) levels, each its own layer), so there is "
         "no fixed structure to evaluate for every size; checked per size by `verify`")
_MLP = " (and its ReLU MLP sublayers are outside the model class the lumped pass implements)"
for _v in ("linear", "doubling", "encoder-linear", "encoder-doubling"):
    NOT_COVERED[("composition", _v)] = _COMPOSITION
for _t in ("parity", "mod-count", "word-problem"):
    NOT_COVERED[(_t, "tree")] = _TREE
    NOT_COVERED[(_t, "tree-mlp")] = _TREE[:-len("; checked per size by `verify`")] + _MLP + "; checked per size by `verify`"
NOT_COVERED[("reachability", "squaring")] = (
    "V finite-only: the number of layers grows with V (ceil(log2(V - 1)) + 2, each squaring its own layer), so there "
    "is no fixed structure to evaluate for every size; checked per size by `verify`")
NOT_COVERED[("reachability", "squaring-mlp")] = NOT_COVERED[("reachability", "squaring")].replace(
    "; checked per size", _MLP + "; checked per size")


def plan_for(task, variant: str | None, as_printed: bool, construct=None):
    from depthcert import constructions

    name = task.name
    if construct is not None:
        variant = variant or "family"
        if name == "sc":
            return ("sc", variant, None)
        if name == "icqa":
            return icqa_plan(construct=construct, as_printed=as_printed, variant=variant)
        if name in ("parity", "mod-count"):
            return ("count", variant, None)
        if name == "multihop" and variant == "linear":
            return ("multihop-linear", variant, None)
        if name == "multihop":
            return multihop_plan(task, variant, as_printed, construct=construct)
        if name == "tm":
            return tm_plan(task, variant, as_printed, construct=construct)
        if name == "ictm":
            return ictm_plan(task, variant, as_printed, construct=construct)
        return ("not-covered", variant, f"no all-sizes method for a family of task {name} (icqa, sc, tm, ictm, multihop)")
    table = constructions.variants(name)
    if not table:
        raise BadInput(f"no construction for task {name!r}")
    variant = variant or table[0]
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {name}; known: {', '.join(table)}")
    if (name, variant) in NOT_COVERED:
        return ("not-covered", variant, NOT_COVERED[(name, variant)])
    if name == "sc":
        return ("sc", variant, None)
    if name == "icqa":
        return icqa_plan(as_printed=as_printed, variant=variant)
    if name in ("parity", "mod-count") and variant == "count":
        return ("count", variant, None)
    if name in ("multihop", "tm", "ictm"):
        reps = task.orbit_representatives()
        if reps is not None and len(reps[0]) > MAX_ORBITS:
            raise BadInput(f"{task.describe()} has {len(reps[0])} orbits, more than the {MAX_ORBITS} a vocabulary "
                           "proof runs; use smaller structural sizes")
    if name == "multihop" and variant == "linear":
        return ("multihop-linear", variant, None)
    if name == "multihop":
        return multihop_plan(task, variant, as_printed)
    if name == "tm":
        return tm_plan(task, variant, as_printed)
    if name == "ictm":
        return ictm_plan(task, variant, as_printed)
    return ("not-covered", variant, f"no all-sizes method for task {name}")


def prove(task, variant: str | None = None, as_printed: bool = False, construct=None) -> Report:
    """The all-sizes report for the registry's construction of `task` (variant, as printed), or for
    a user family `construct` (task, as_printed) -> Construction written with constructions/indexed.py."""
    _EVAL[0] = 0.0
    rep = _prove(task, variant, as_printed, construct)
    rep.eval_seconds = _EVAL[0]
    return rep


def _prove(task, variant: str | None, as_printed: bool, construct=None) -> Report:
    plan = plan_for(task, variant, as_printed, construct)
    if isinstance(plan, LumpedPlan):
        return prove_lumped(plan)
    kind, variant, why = plan
    if kind == "sc":
        return prove_sc(as_printed, construct, variant)
    if kind == "multihop-linear":
        return prove_multihop_linear(task, as_printed, construct=construct)
    if kind == "count":
        return prove_count(task, as_printed, construct)
    if construct is not None:
        return Report(task.name, variant, "user family", "not-proven", "", "none", reason=f"not covered: {why}")
    from depthcert import constructions

    c = constructions.build(task, variant, as_printed)
    return Report(task.name, variant, c.theorem, "not-proven", "", "none", reason=f"not covered: {why}",
                  finite=((finite_params(task.name, variant), "not covered (reason)"),))


def finite_params(name: str, variant: str) -> str:
    """The size parameters a not-covered construction's reason names (the JSON's finite_only)."""
    if name == "composition":
        return "N, L"
    if name in ("parity", "mod-count", "word-problem"):
        return "n"
    if name == "reachability":
        return "V"
    if name == "multihop":
        return "N, hops, k"
    if name == "tm":
        return "m, l"
    from depthcert.checkers.tasks import make_task  # noqa: F401 - every other task: all its sizes

    return "all"


# ----------------------------------------------------------------------------- parity / mod-count count

COUNT_BASE_N = tuple(range(1, 9))
COUNT_SEARCH_N = 12  # a condition that fails: verify at n = 1.. this, for a refuted size


def count_claim(name: str, p: int) -> str:
    at = "" if name == "parity" else f" at p = {p}"
    return f"correct on every point for all n >= 1 (sequence length){at}"


def prove_count(task, as_printed: bool = False, construct=None) -> Report:
    """Parity / mod-count `count` for every n >= 1 at the task's p: the builder run with symbolic n and
    a generic key j split by its residue mod p (proofs/all_sizes_count.py)."""
    from depthcert.checkers.exhaustive import verify
    from depthcert.constructions.closed import NotClosed, close_count, content_hash, instantiate
    from depthcert.constructions.group_tree import closed_count_value
    from depthcert.proofs.all_sizes_count import VOCAB, cert_rules, derive_value

    t0 = time.perf_counter()
    name, p = task.name, task.group.order
    rep = Report(name, "count", "constant depth: counting (2 layers)", "not-proven", count_claim(name, p),
                 f"the closed value (made from symbolic n, and a generic key j = 0, j = {p} q + s for each residue s); "
                 "the last column's logits derived for every count c (telescoping sum)")
    value, why = None, ""
    try:
        value = close_count(construct, name, p) if construct is not None else closed_count_value(name, p)
    except NotClosed as exc:
        why = str(exc)

    def construct_model(t):
        if value is not None:
            return instantiate(value, {"n": t.n}, t)
        return _registry_construct(name, "count", as_printed)(t).model
    rep.params = ("n >= 1",)
    rep.finite = () if name == "parity" else (("p", "the derivation splits the key j by its residue mod p, one "
                                               "case per residue; run it per p"),)

    def opts(n):
        return {"n": n} if name == "parity" else {"n": n, "modulus": p}

    def base(n):
        t = _task(name, opts(n))
        v = verify(construct_model(t), t, progress=False)
        _EVAL[0] += v.seconds
        row = {"size": {"n": n}, "points": v.points_total, "evaluated": v.points_checked, "verdict": v.verdict,
               "min_margin": None if v.min_margin is None else format_rational(v.min_margin), "_margin": v.min_margin}
        if v.counterexample is not None:
            ce = v.counterexample
            row["counterexample"] = {"point": ce.index, "input": t.render(ce.tokens), "expected": ce.expected,
                                     "predicted": ce.predicted}
        return row

    def refute(upto, reason):
        for n in range(1, upto + 1):
            row = base(n) if n not in [r["size"]["n"] for r in rep.base_cases] else \
                next(r for r in rep.base_cases if r["size"]["n"] == n)
            if row not in rep.base_cases:
                rep.base_cases.append(row)
            if row["verdict"] != "verified":
                rep.status = "fails"
                rep.failure = {"size": {"n": n}, "how": reason,
                               **({"counterexample": row["counterexample"]} if "counterexample" in row else {})}
                rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
                rep.seconds = time.perf_counter() - t0
                return rep
        return None

    probe = _task(name, opts(1))
    if tuple(probe.vocab) != VOCAB or tuple(probe.classes) != tuple(str(r) for r in range(p)):
        return _not_proven(rep, f"the task's tokens {probe.vocab} / classes {probe.classes} are not the ones the "
                                "derivation reads (\"0\", \"1\"; class r = count mod p)", t0)
    if value is None and construct is not None:
        rep.finite = (("n", "not a closed value (reason)"),)
        return _not_proven(rep, f"not proven: not a closed value: {why}", t0)
    done = refute(COUNT_BASE_N[-1], "base case refuted by verify")
    if done is not None:
        return done
    if value is None:
        rep.finite = (("n", "not a closed value (reason)"),)
        return _not_proven(rep, f"not proven: not a closed value: {why}", t0)
    try:
        derived = derive_value(value)
        consts: dict = {}
        for cr in derived:
            for k in ("a1", "s1", "beta", "u", "b"):
                v = cr.rules[k]
                consts.setdefault(k, v)
                if str(v) != str(consts[k]):
                    return _not_proven(rep, f"the value's {k} differs between the cases j = 0 and {cr.text}", t0)
    except NotClosed as exc:
        return _not_proven(rep, f"not proven: {exc}", t0)
    except SizeBranchError as exc:
        return _not_proven(rep, f"a rule is not decided: {exc.what}", t0)
    except NotAFamily as exc:
        return _not_proven(rep, f"the value's rules are not the count derivation's shape: {exc}", t0)
    rep.content_hash, rep.value = content_hash(value), value
    bad = [(cr.text, c) for cr in derived for c in cr.conditions if c.decided() is not True]
    rep.steps.append(Step("family", (
        f"the closed value {rep.content_hash}, made by "
        f"{_builder_of(name, 'count') if construct is None else 'the family function'} from symbols only: n for the "
        f"rules not tied to a key, and a generic key j in {len(derived)} cases covering every 0 <= j <= n - 1 of every "
        "n >= 1: " + "; ".join(cr.text for cr in derived) + " (n = j + 1 + t, t >= 0); read whole: both layers' key "
        "counts and rules, every case's key rules, the read-out",
        f"every model checked here (the {len(rep.base_cases)} base sizes) is the value instantiated (closed.instantiate: "
        "key j's rules from its residue case)")))
    if bad:
        done = refute(COUNT_SEARCH_N, f"{bad[0][1].text} does not hold ({bad[0][0]})")
        if done is not None:
            return done
        return _not_proven(rep, f"{bad[0][1].text}: {'FAILS' if bad[0][1].decided() is False else 'undecided'} "
                                f"for {bad[0][0]} (verify finds no failure up to n = {COUNT_SEARCH_N})", t0)
    bb = [Fraction(x) for x in derived[0].rules["b"]]
    mu = bb[0] - bb[1]
    r0 = derived[0].rules
    fam = rep.steps[-1]
    rep.steps[-1] = Step(fam.title, fam.lines[:1] + (
        f"layer 1 key j: W_QK a1 = {r0['a1']} at (position j, position n - 1); W_V s1 = {r0['s1']} at (count, token "
        "\"1\")",
        f"layer 2 key j: W_QK beta = {r0['beta']} at (position j, count), gamma_j at (position j, position n - 1); "
        "W_V w_j[r] at (residue r, position j)",
        *(f"  {cr.text}: gamma_j = {_rule_text(cr.rules['gamma'])}, w_j = ({', '.join(_rule_text(w) for w in cr.rules['w'])})"
          for cr in derived),
        f"read-out: class r has u = {r0['u'][0]} at residue r and b_r at position n - 1, b = "
        f"({', '.join(str(b) for b in r0['b'])})") + fam.lines[1:])
    rep.steps.append(Step("derivation", tuple(f"{cr.text}: {len(cr.conditions)} conditions hold" for cr in derived) + (
        "so for every n and every sequence with c ones: the last column's count row is a1 s1 c, layer 2 adds "
        "K relu(c - j) w_j from key j, and logit_r = b_r + u K sum_{j<c} (c - j) w_j[r] = mu [c = r mod p] + b_1 "
        "(sum_{j<c} (c - j) D_r(j) = T_r(c) - T_r(0), telescoping twice)",
        f"label - other = mu = {format_rational(mu)} at every point")))
    cross = [r for r in rep.base_cases if r["_margin"] != mu]
    rep.steps.append(Step("base cases", _base_lines(rep.base_cases)))
    rep.steps.append(Step("cross-check", (
        f"the symbolic margin {format_rational(mu)} equals verify's exact minimum margin at every base case"
        if not cross else "verify's margins differ from the symbolic margin at some base cases",)))
    if cross:
        return _not_proven(rep, "the symbolic margin differs from verify's at a base case", t0)
    rep.margin = str(format_rational(mu))
    rep.margin_note = "the exact margin of every point of every n >= 1: every class but the label scores mu less"
    rep.rests_on = (
        f"the closed value {rep.content_hash} and closed.instantiate, the one route from it to the model the finite "
        "check verifies (group_tree.CountSpec.instantiate: two layers of one head each; stream [token; position; "
        "count; residue])",
        "the kernel's semantics as the derivation uses them (relu attention summed over keys, one head per layer, "
        "residual, one-hot token and position embedding, read-out at the last column)")
    rep.certificate = {
        "format": "depthcert.all-sizes", "version": 1, "task": name, "variant": "count", "kind": "count", "p": p,
        "params": [{"name": "n", "base": 1}],
        "cases": [{"case": cr.text, "rules": cert_rules(cr.rules)} for cr in derived],
        "claim": rep.claim, "margin": rep.margin, "content_hash": rep.content_hash,
        "value": _value_tables(rep.value),
    }
    if name == "mod-count":
        rep.certificate["fixed"] = {"p": p}
    rep.status = "proven" if name == "parity" else "partial"
    rep.seconds = time.perf_counter() - t0
    return rep


def _rule_text(v) -> str:
    """A rule's value as printed: a polynomial in the case's variables q, t, or a number."""
    from depthcert.constructions.indexed import Size

    return v.text() if isinstance(v, Size) else str(v)
