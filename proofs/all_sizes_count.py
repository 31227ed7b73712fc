"""Parity / mod-count `count` for every n (at a given p), from the builder run with symbolic n and a
generic key j (constructions/group_tree.py: count_rules, CountSpec).

The generic key is split by its residue so that j mod p is decided: j = 0 (n = 1 + t), j = p q + s
for s = 1..p-1 (q >= 0), j = p q (q >= 1), with n = j + 1 + t (t >= 0): every 0 <= j <= n - 1 of
every n >= 1 is in exactly one case.  In each case the builder's functions are called with that
symbolic j and n; a comparison they make that the case does not decide raises SizeBranch.

The derivation, for every sequence x with c ones (stream [token (2); position (n); count; residue
(p)], one head per layer, embedding [one-hot token; one-hot position; 0]):
  layer 1: key j's rules are one W_QK entry a1 at (position j, position n - 1), W_V one entry s1 at
      (count <- token "1"); with a1 > 0 the same for every key, the last column's count row is
      c' = a1 s1 c (other columns get score 0)
  layer 2: key j's W_QK rules are beta at (position j, count) and gamma_j at (position j, position
      n - 1); with gamma_j = -beta a1 s1 j the last column scores key j with K (c - j), K = beta a1 s1
      > 0, and adds K relu(c - j) w_j (W_V: w_j[r] at (residue r, position j))
  read-out: class r has u at residue r and b_r at position n - 1: logit_r = b_r + u K sum_{j<c} (c - j) w_j[r]
  with mu = b_0 - b_1 > 0, nu = b_1: if b_r = mu [r = 0] + nu and u K w_j[r] = mu D_r(j) for every j < n
  (D_r(0) = T_r(1) - T_r(0), D_r(j) = T_r(j+1) - 2 T_r(j) + T_r(j-1), T_r(c) = [c = r mod p], computed
  here from the case's residue, not by the builder), then sum_{j<c} (c - j) D_r(j) = T_r(c) - T_r(0)
  (telescoping twice), so logit_r = mu T_r(c) + nu: the label c mod p scores mu + nu, every other class
  nu; the margin is mu at every point of every n.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from depthcert.constructions.indexed import Size, SizeRange, SymbolicTask
from depthcert.proofs.all_sizes_families import NotAFamily
from depthcert.proofs.all_sizes_lemma4 import Condition, poly_terms

VOCAB = ("0", "1")


def cases(p: int) -> list[tuple[str, int | None, int]]:
    """(text, residue s or None for j = 0, base of q): j = 0; j = p q + s (s = 1..p-1, q >= 0); j = p q (q >= 1)."""
    out = [("j = 0", None, 0)]
    out += [(f"j = {p} q + {s}, q >= 0", s, 0) for s in range(1, p)]
    out.append((f"j = {p} q, q >= 1", 0, 1))
    return out


def case_task(name: str, p: int, s, qbase: int, point: dict | None = None) -> SymbolicTask:
    rng = SizeRange.of(("q", qbase), ("t", 0))
    if point is not None:
        rng = rng.at(point)
    jf = (lambda z: 0 * z["q"]) if s is None else (lambda z: p * z["q"] + s)
    return SymbolicTask(name, rng, derived={"j": jf, "n": lambda z: jf(z) + 1 + z["t"]},
                        fixed={"p": p, "vocab": VOCAB})


def target(c: int, r: int, p: int) -> int:
    return 1 if c % p == r else 0


def second_difference(s, r: int, p: int) -> int:
    """D_r(j) for j = 0 (s None) or j = s mod p, j >= 1."""
    if s is None:
        return target(1, r, p) - target(0, r, p)
    return target(s + 1, r, p) - 2 * target(s, r, p) + target(s - 1, r, p)


def _const(v, what: str) -> Fraction:
    if isinstance(v, Size):
        c = v.constant()
        if c is None:
            raise NotAFamily(f"{what} is {v.text()}, not one number for every size")
        return c
    return Fraction(v)


def _entries(rules, what: str):
    from depthcert.constructions.head_family import Entry

    rules = tuple(rules)
    for r in rules:
        if not isinstance(r, Entry):
            raise NotAFamily(f"{what}: {r!r} is not an entry rule")
    return rules


@dataclass
class CaseRules:
    text: str
    s: object
    rules: dict  # name -> Size or number (or list of them): the builder's rules at the generic key
    conditions: list


def derive_case(spec, task: SymbolicTask, text: str, s, p: int) -> CaseRules:
    """The builder's rules at the case's generic key j and the case's conditions (NotAFamily when a
    rule is not of the derivation's shape)."""
    j, n = task.j, task.n
    if spec.p != p or tuple(spec.vocab) != VOCAB:
        raise NotAFamily(f"the object is for p = {spec.p}, vocabulary {spec.vocab}, not p = {p}, {VOCAB}")
    l1, l2 = spec.layer1, spec.layer2
    if l1.qk or l2.qk or l2.v:
        raise NotAFamily("a head has rules not tied to a key other than layer 1's count value")
    k1, k2 = l1.key(j), l2.key(j)
    qk1 = _entries(k1.qk, "layer 1 W_QK")
    if k1.v or len(qk1) != 1 or (qk1[0].row_block, qk1[0].col_block) != ("position", "position"):
        raise NotAFamily(f"layer 1 key j: W_QK {qk1!r}, W_V {k1.v!r}: not one (position j, position) entry")
    v1 = _entries(l1.v, "layer 1 W_V")
    if len(v1) != 1 or (v1[0].row_block, v1[0].col_block) != ("count", "token"):
        raise NotAFamily(f"layer 1 W_V {v1!r}: not one (count, token) entry")
    qk2 = {(e.row_block, e.col_block): e for e in _entries(k2.qk, "layer 2 W_QK")}
    if len(qk2) != 2 or len(k2.qk) != 2 or set(qk2) != {("position", "count"), ("position", "position")}:
        raise NotAFamily(f"layer 2 key j: W_QK {k2.qk!r}: not (position j, count) and (position j, position)")
    v2 = _entries(k2.v, "layer 2 W_V")
    if len(v2) != p or any((e.row_block, e.col_block) != ("residue", "position") for e in v2):
        raise NotAFamily(f"layer 2 key j: W_V {v2!r}: not one (residue r, position j) entry per r < {p}")
    ro = _entries(spec.readout, "read-out")
    if len(ro) != 2 * p or any(e.row_block != "class" for e in ro):
        raise NotAFamily("the read-out is not two entries per class")
    u = [e for e in ro if (e.col_block) == "residue"]
    b = [e for e in ro if (e.col_block) == "position"]
    if len(u) != p or len(b) != p:
        raise NotAFamily("the read-out is not (class r, residue) and (class r, position) per class")
    e1, sc, be, ga = qk1[0], v1[0], qk2[("position", "count")], qk2[("position", "position")]
    rules = {
        "count1": l1.count, "count2": l2.count, "a1_row": e1.row, "a1_col": e1.col, "a1": e1.value,
        "s1_row": sc.row, "s1_col": sc.col, "s1": sc.value,
        "beta_row": be.row, "beta_col": be.col, "beta": be.value,
        "gamma_row": ga.row, "gamma_col": ga.col, "gamma": ga.value,
        "w_row": [e.row for e in v2], "w_col": [e.col for e in v2], "w": [e.value for e in v2],
        "u_class": [e.row for e in u], "u_row": [e.col for e in u], "u": [e.value for e in u],
        "b_class": [e.row for e in b], "b_col": [e.col for e in b], "b": [e.value for e in b],
    }
    a1, s1, beta = (_const(rules[k], k) for k in ("a1", "s1", "beta"))
    uu = [_const(x, "u") for x in rules["u"]]
    bb = [_const(x, "b") for x in rules["b"]]
    K = beta * a1 * s1
    mu = bb[0] - bb[1] if p >= 2 else None
    conds = [
        Condition("layer 1 has one key per position: count = n", l1.count - n, "== 0"),
        Condition("layer 2 has one key per position: count = n", l2.count - n, "== 0"),
        Condition("layer 1 key j is position j: row = j", e1.row - j, "== 0"),
        Condition("layer 1 query is the last column: col = n - 1", e1.col - (n - 1), "== 0"),
        Condition("layer 1 score a1 > 0 (relu keeps it)", a1, "> 0"),
        Condition("layer 1 writes count row 0", sc.row, "== 0"),
        Condition("layer 1 reads token \"1\": col = 1", sc.col - VOCAB.index("1"), "== 0"),
        Condition("layer 1 value s1 > 0", s1, "> 0"),
        Condition("layer 2 count score at key position j: row = j", be.row - j, "== 0"),
        Condition("layer 2 count score reads count row 0", be.col, "== 0"),
        Condition("layer 2 count score beta > 0", beta, "> 0"),
        Condition("layer 2 bias at key position j: row = j", ga.row - j, "== 0"),
        Condition("layer 2 bias at the last column: col = n - 1", ga.col - (n - 1), "== 0"),
        Condition("layer 2 bias gamma_j = -beta a1 s1 j (score K (c - j))", ga.value + K * j, "== 0"),
        Condition("read-out margin mu = b_0 - b_1 > 0", mu, "> 0"),
    ]
    for r, e in enumerate(v2):
        conds.append(Condition(f"layer 2 value row r = {r}", e.row - r, "== 0"))
        conds.append(Condition(f"layer 2 value {r} at key position j", e.col - j, "== 0"))
        conds.append(Condition(f"u K w_j[{r}] = mu D_{r}(j)", uu[r] * K * e.value - mu * second_difference(s, r, p),
                               "== 0"))
    for r in range(p):
        conds.append(Condition(f"read-out class {r} reads residue {r}", u[r].row - r, "== 0"))
        conds.append(Condition(f"read-out class {r} reads residue {r}", u[r].col - r, "== 0"))
        conds.append(Condition(f"read-out u_{r} = u_0", uu[r] - uu[0], "== 0"))
        conds.append(Condition(f"read-out u > 0", uu[r], "> 0"))
        conds.append(Condition(f"read-out class {r} constant at position n - 1", b[r].row - r, "== 0"))
        conds.append(Condition(f"read-out class {r} constant at position n - 1", b[r].col - (n - 1), "== 0"))
        conds.append(Condition(f"b_{r} = mu [{r} = 0] + b_1", bb[r] - mu * (1 if r == 0 else 0) - bb[1], "== 0"))
    return CaseRules(text, s, rules, conds)


def cert_rules(rules: dict) -> dict:
    return {k: ([poly_terms(x, 2) for x in v] if isinstance(v, list) else poly_terms(v, 2)) for k, v in rules.items()}


def case_spec(value, case, task: SymbolicTask):
    """The closed count value read in one residue case as derive_case reads a CountSpec: its rules not
    tied to a key with n := j + 1 + t, key j's rules the case's, every number a Size over (q, t)."""
    from depthcert.constructions.group_tree import CountSpec, KeyRules
    from depthcert.constructions.head_family import Copy, Entry, HeadRules, Scaled

    sym = task.range.symbols()
    n = task.n

    def plain(v):
        return v.constant() if isinstance(v, Size) and v.constant() is not None else v

    def at_n(p):
        out = Fraction(0)
        for (e,), c in p:
            out = out + c * n ** e
        return plain(out)

    def at_qt(p):
        out = Fraction(0)
        for (eq, et), c in p:
            out = out + c * sym["q"] ** eq * sym["t"] ** et
        return plain(out)

    def rule(r, f):
        if r.kind == "entry":
            return Entry(r.src, f(r.row), r.col_block, f(r.col), f(r.value))
        if r.kind == "copy":
            return Copy(f(r.row), r.src, f(r.value))
        return Scaled(r.src, f(r.value))

    def rules(rs, f):
        return tuple(rule(r, f) for r in rs)

    def key(hr):
        def at(j):
            if j is not task.j and (not isinstance(j, Size) or (j - task.j).terms):
                raise NotAFamily("a key rule asked at another key than the case's generic j")
            return HeadRules(rules(hr.qk, at_qt), rules(hr.v, at_qt))
        return at

    l1 = KeyRules(at_n(value.count1), key(case.key1), rules(value.layer1.qk, at_n), rules(value.layer1.v, at_n))
    l2 = KeyRules(at_n(value.count2), key(case.key2), rules(value.layer2.qk, at_n), rules(value.layer2.v, at_n))
    return CountSpec(n, value.p, value.vocab, l1, l2, rules(value.readout, at_n))


def derive_value(value) -> list:
    """derive_case for every residue case of a closed count value (constructions/closed.ClosedCount):
    every field read (both layers' key counts, their rules not tied to a key, every case's key rules,
    the read-out)."""
    from depthcert.constructions.closed import validate_count

    validate_count(value)
    out = []
    for case in value.cases:
        st = case_task(value.name, value.p, case.s, case.qbase)
        out.append(derive_case(case_spec(value, case, st), st, case.text, case.s, value.p))
    return out
