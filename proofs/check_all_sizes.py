"""Standalone re-check of an all-sizes certificate (standard library only; imports nothing from
depthcert, numpy or sympy).

    python proofs/check_all_sizes.py FILE      FILE: the output of
                                               `verify-construction TASK --all-sizes --json`
                                               (or its "certificate" object alone)

What it re-checks, per representative point: the split tree of parameter regions partitions the
point's range (each split fixes one parameter at the offsets below `at` and keeps the ray from
`at`); on every leaf region it re-runs the lumped forward pass from the certificate's tables
(H0, W_QK, W_V per head, W_O) with its own polynomial arithmetic, decides every ReLU sign by the
coefficient test (after substituting the region; a sign it cannot settle rejects the
certificate), recomputes every margin polynomial, compares it with the certificate's, and decides
its sign the same way.  Exit 0: every margin is > 0 wherever its competitor exists (the
construction's lumped tables are correct for every size); 1: some margin is not > 0 (the
failing region is printed); 2: malformed or inconsistent certificate.

It also re-derives, and refuses a certificate that disagrees: the orbit-size identity (|G| / |Stab|
summed over the representatives equals the task's dataset size, as factorial ratios of linear
forms, with the dataset size of the task known here, not read from the certificate: icqa, tm at an
l, multihop at (k, hops), ictm at (k, l)); every model set's size is >= 0 over the claimed range and
every point set's over its representative's range (a representative starting above the base must
have a point set negative below its start, in that parameter alone), the parts of every model set add
up to it (so a set with a fixed member is non-empty), the model sets are the task's, the class
families count the task's classes (no competitor left out); the claimed
range lies inside the task's; the top-level claim, range and margin equal what it derived.  A
task it has no dataset formula for is refused (exit 2): it cannot re-derive that proof.

A multi-hop linear certificate for every hops ("kind": "every-hops", fixed k) holds per
representative the copy and hop layers, the label for h = 1 and the label rule f on the labels
reached: the checker applies the copy layer, then the hop layer again and again (the label following
f) until a (stream, label) pair repeats, deciding every ReLU sign and margin on the way: the pairs
follow one deterministic map, so the pairs seen are those of every h.

A Theorem 1 certificate ("kind": "lemma4") is checked differently: the builder's rules as
polynomials in h, L, M, read here from the value the hash binds (and refused when the certificate's
`rules` differ from them in any entry), every condition of the Lemma 4 derivation re-decided here
(the slot offsets at 0, h + 1 and L - 1 composed from o(h); d = M + 1 and n = L + 1 read from the
value), the margin re-derived as a s w / m and the claim compared with Theorem 1's.

A parity / mod-count `count` certificate ("kind": "count", p) holds the builder's rules per key case as
polynomials in q, t, read here from the value the hash binds (refused when they differ in any entry);
the checker makes the cases from p itself (j = 0, j = p q + s, j = p q with q >= 1;
n = j + 1 + t), computes the second differences of [c = r mod p] at j, re-decides every condition of
the derivation and re-derives the margin b_0 - b_1 and the claim.

The task side, re-derived (once every margin is > 0): each representative's sequence is read from its
H0, which must be the one-hot embedding; its label is computed by this checker's own rule for the
task (icqa, tm, multi-hop, ictm; every hops: the start f(s) and the label map f on the labels
reached) and compared with the certificate's; the fixed members of every set are exactly the
members the point uses, the rest one part (so its stabilizer is the symmetric group of the unused
members); the representatives' first-occurrence forms are pairwise different (no two in one
orbit); the variant is one of the task's.

The binding: the certificate carries the closed value's canonical tables (`value`) and its
`content_hash`; the tables are re-hashed here (sha256 of their canonical JSON) and every point's
tables (every head of every layer, W_O) must be the value's split by the point's parts.  That the
value is the construction's is what `check-certificate FILE --rebuild` establishes (it rebuilds the
value, recomputes the hash and compares the whole certificate); this file cannot, by design.

Malformed or hostile JSON is exit 2 with one line: NaN, Infinity, ints past 2^53, nesting past 64
levels, exponent forms, unknown fields wherever the checker reads (see `load`, `sane`, `check_fields`).
`--help` prints the usage.

Normalization: the margin printed is the tables' margin, followed by the normalized margin =
margin / (largest |entry| of W_O) (sc: / |read-out weight|; count: / largest |read-out entry|): a
read-out scaled by c > 0 scales every logit and the margin by c and changes no prediction, so no
such rescale changes the normalized margin.

What it takes on trust: the kernel's semantics as the lumped pass here implements them; that the
value is the construction's (above); for every hops, that the model for h hops is the copy layer
then the hop layer h times (the value's repeat count); and that the task's dataset is closed under
the product of its token groups' symmetric groups (its label rules use token equalities only).
"""
from __future__ import annotations

import json
import math
import re
import sys
from fractions import Fraction


class Invalid(Exception):
    pass


# ----------------------------------------------------------------------------- polynomials


class Poly:
    """A polynomial over Q in nv variables: {exponent tuple: Fraction}, no zero coefficients."""

    __slots__ = ("t", "nv")

    def __init__(self, terms: dict, nv: int):
        self.t = {m: c for m, c in terms.items() if c != 0}
        self.nv = nv

    @classmethod
    def const(cls, c, nv):
        return cls({(0,) * nv: Fraction(c)}, nv)

    @classmethod
    def var(cls, i, nv):
        return cls({tuple(1 if j == i else 0 for j in range(nv)): Fraction(1)}, nv)

    @classmethod
    def parse(cls, terms, nv):
        out = {}
        if not isinstance(terms, list):
            raise Invalid(f"a polynomial is a list of [exponents, coefficient], not {_short(terms)}")
        for term in terms:
            if not isinstance(term, list) or len(term) != 2:
                raise Invalid(f"a polynomial term is [exponents, coefficient], not {_short(term)}")
            exps, c = term
            if not isinstance(exps, list) or len(exps) != nv or not all(
                    isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in exps) or sum(exps) > MAX_EXPONENT:
                raise Invalid(f"bad monomial {_short(exps)} ({nv} exponents, ints >= 0 of total degree at most "
                              f"{MAX_EXPONENT})")
            out[tuple(exps)] = out.get(tuple(exps), Fraction(0)) + _q(c)
        return cls(out, nv)

    def __add__(self, o):
        out = dict(self.t)
        for m, c in o.t.items():
            out[m] = out.get(m, Fraction(0)) + c
        return Poly(out, self.nv)

    def __neg__(self):
        return Poly({m: -c for m, c in self.t.items()}, self.nv)

    def __sub__(self, o):
        return self + (-o)

    def __mul__(self, o):
        if not isinstance(o, Poly):
            return Poly({m: c * Fraction(o) for m, c in self.t.items()}, self.nv)
        out = {}
        for m1, c1 in self.t.items():
            for m2, c2 in o.t.items():
                m = tuple(a + b for a, b in zip(m1, m2))
                out[m] = out.get(m, Fraction(0)) + c1 * c2
        return Poly(out, self.nv)

    def __eq__(self, o):
        return isinstance(o, Poly) and self.t == o.t

    def is_zero(self):
        return not self.t

    def const_term(self):
        return self.t.get((0,) * self.nv, Fraction(0))

    def compose(self, exprs):
        """Substitute variable i -> exprs[i] (a Poly) for every i."""
        out = Poly({}, self.nv)
        cache = {}
        for m, c in self.t.items():
            term = Poly.const(c, self.nv)
            for i, e in enumerate(m):
                if e:
                    key = (i, e)
                    if key not in cache:
                        p = Poly.const(1, self.nv)
                        for _ in range(e):
                            p = p * exprs[i]
                        cache[key] = p
                    term = term * cache[key]
            out = out + term
        return out

    def variables(self):
        return {i for m in self.t for i, e in enumerate(m) if e}


def _n(count: int, word: str) -> str:
    """'1 representative', '2 representatives'."""
    return f"{count} {word}{'' if count == 1 else 's'}"


MAX_DIGITS = 4000  # digits of a numerator or denominator (Python's own int parsing stops at 4300)
MAX_EXPONENT = 64  # total degree of one monomial (the certificates made here have degree <= 2; a tamper's
# gate polynomials reach 10): substituting a region into a monomial of degree e expands it into up to
# C(e + nv, nv) terms, so the degree bounds the work per term
_RATIONAL = re.compile(r"-?[0-9]{1,%d}(/[0-9]{1,%d})?" % (MAX_DIGITS, MAX_DIGITS))


def _q(text) -> Fraction:
    """An exact number: an int, or a string "p" or "p/q" of decimal digits (no exponent form such as
    "1e999999", which Fraction would expand, no float)."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise Invalid(f"not an exact number: {_short(text)}")
    if isinstance(text, str) and not _RATIONAL.fullmatch(text):
        raise Invalid(f"not an exact number (p or p/q in decimal digits): {_short(text)}")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise Invalid(f"not an exact number: {_short(text)}") from None


def _short(obj) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------- regions and signs


class Ctx:
    def __init__(self, params):
        self.params = params  # [(name, base, after or None)]
        self.names = [p[0] for p in params]
        self.nv = len(params)

    def expr(self, offsets, free, i):
        name, base, after = self.params[i]
        e = Poly.const(base + offsets[i], self.nv)
        if after is not None:
            e = e + self.expr(offsets, free, self.names.index(after))
        if free[i]:
            e = e + Poly.var(i, self.nv)
        return e

    def substitute(self, p: Poly, offsets, free) -> Poly:
        return p.compose([self.expr(offsets, free, i) for i in range(self.nv)])

    def sign(self, p: Poly, offsets, free, conds) -> str:
        """'pos', 'nonneg', 'zero', 'nonpos', 'neg', 'absent'; raises Invalid if the coefficient
        test cannot settle it (the producer should have split the region)."""
        q = self.substitute(p, offsets, free)
        shift = [0] * self.nv
        for c in conds:
            cs = self.substitute(c, offsets, free)
            vs = cs.variables()
            if not vs:
                if cs.const_term() < 0:
                    return "absent"
                continue
            if len(vs) != 1:
                continue
            (i,) = vs
            a = cs.t.get(tuple(1 if j == i else 0 for j in range(self.nv)), Fraction(0))
            if any(sum(m) > 1 for m in cs.t) or a <= 0:
                continue
            b = cs.const_term()
            lb = _ceil(-b / a)
            shift[i] = max(shift[i], lb)
        if any(shift):
            q = q.compose([Poly.var(i, self.nv) + Poly.const(shift[i], self.nv) for i in range(self.nv)])
        if q.is_zero():
            return "zero"
        cs = list(q.t.values())
        const = q.const_term()
        if all(c >= 0 for c in cs):
            return "pos" if const > 0 else "nonneg"
        if all(c <= 0 for c in cs):
            return "neg" if const < 0 else "nonpos"
        raise Invalid("a sign is not settled by the coefficient test on a leaf region")


def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


# ----------------------------------------------------------------------------- lumped algebra


def matmul(A, B, fam_r, fam_m, fam_c, sizes, nv):
    """Tables: dict (r, c, pattern) -> Poly.  Families: lists of (name, sort or None)."""
    by_mid = {}
    for (m, c, pb), v in B.items():
        by_mid.setdefault(m, []).append((c, pb, v))
    out = {}
    one = Poly.const(1, nv)
    for (r, m, pa), va in A.items():
        sr, s = fam_r[r][1], fam_m[m][1]
        for c, pb, vb in by_mid.get(m, ()):
            sc = fam_c[c][1]
            outs = ("eq", "ne") if sr is not None and sr == sc else ("",)
            if s is None:
                cases = [(pc, one) for pc in outs]
            else:
                n = sizes[s]
                if sr != s and sc != s:
                    cases = [(pc, n) for pc in outs]
                elif sr == s and sc != s:
                    cases = [(pc, one if pa == "eq" else n - one) for pc in outs]
                elif sc == s and sr != s:
                    cases = [(pc, one if pb == "eq" else n - one) for pc in outs]
                elif (pa, pb) == ("eq", "eq"):
                    cases = [("eq", one)]
                elif (pa, pb) == ("ne", "ne"):
                    cases = [("eq", n - one), ("ne", n - one - one)]
                else:
                    cases = [("ne", one)]
            for pc, mult in cases:
                key = (r, c, pc)
                out[key] = out.get(key, Poly({}, nv)) + mult * va * vb
    return {k: v for k, v in out.items() if not v.is_zero()}


def transpose(A):
    return {(c, r, p): v for (r, c, p), v in A.items()}


def conditions(fa, fb, pat, sizes, nv):
    need = {}
    for f in (fa, fb):
        if f[1] is not None:
            need[f[1]] = need.get(f[1], 0) + 1
    if pat == "eq":
        need[fa[1]] = 1
    return [sizes[s] - Poly.const(n, nv) for s, n in need.items()]


MAX_HOPS = 10_000  # an every-hops certificate whose pairs do not repeat within this many hops is refused


def check_point(pt: dict, ctx: Ctx, log, margins_seen: list) -> list:
    nv = ctx.nv
    rows = [tuple(f) for f in pt["rows"]]
    cols = [tuple(f) for f in pt["cols"]]
    classes = [tuple(f) for f in pt["classes"]]
    sizes = {s: Poly.parse(t, nv) for s, t in pt["sorts"].items()}
    for fams in (rows, cols, classes):
        for name, sort in fams:
            if sort is not None and sort not in sizes:
                raise Invalid(f"family {name} is indexed by an unknown set {sort}")

    def table(entries, fr, fc):
        out = {}
        for r, c, p, v in entries:
            if not (0 <= r < len(fr) and 0 <= c < len(fc)):
                raise Invalid("table index out of range")
            want = ("eq", "ne") if fr[r][1] is not None and fr[r][1] == fc[c][1] else ("",)
            if p not in want:
                raise Invalid(f"pattern {p!r} between {fr[r][0]} and {fc[c][0]}")
            out[(r, c, p)] = Poly.parse(v, nv)
        return out

    layers = [[(table(h["W_QK"], rows, rows), table(h["W_V"], rows, rows)) for h in layer] for layer in pt["layers"]]
    W_O = table(pt["W_O"], classes, rows)
    H0 = table(pt["H0"], rows, cols)
    last = [c[0] for c in cols].index(pt["last"])
    hops = "start" in pt  # every hops: layers (copy, hop), hop repeated h times for every h >= 1
    names = [c[0] for c in classes]
    if hops:
        nxt = pt["next"]
        if len(layers) != 2 or not isinstance(nxt, dict) or pt["start"] not in names or "label" in pt or any(
                a not in names or b not in names or classes[names.index(a)][1] is not None
                or classes[names.index(b)][1] is not None for a, b in nxt.items()) \
                or classes[names.index(pt["start"])][1] is not None:
            raise Invalid(f"representative {pt['representative']}: an every-hops point needs two layers (copy, hop), "
                          "a start label and a label map on single classes")
    label = names.index(pt["label"]) if not hops else None
    failures = []

    def apply(H, layer, offsets, free):
        add = {}
        for qk, v in layer:
            S = matmul(matmul(transpose(H), qk, cols, rows, rows, sizes, nv), H, cols, rows, cols, sizes, nv)
            A = {}
            for (j, k, p), val in S.items():
                s = ctx.sign(val, offsets, free, conditions(cols[j], cols[k], p, sizes, nv))
                if s in ("pos", "nonneg"):
                    A[(j, k, p)] = val
            out = matmul(matmul(v, H, rows, rows, cols, sizes, nv), A, rows, cols, cols, sizes, nv)
            for key, val in out.items():
                add[key] = add.get(key, Poly({}, nv)) + val
        scale = Fraction(1, len(layer))
        H = dict(H)
        for key, val in add.items():
            H[key] = H.get(key, Poly({}, nv)) + val * scale
        return {k: v for k, v in H.items() if not v.is_zero()}

    def margins_of(H, label):
        logits = matmul(W_O, H, classes, rows, cols, sizes, nv)
        per_class = {r: v for (r, c, p), v in logits.items() if c == last}
        zero = Poly({}, nv)
        got = {}
        for r, (name, sort) in enumerate(classes):
            if r == label:
                continue
            got[name] = (per_class.get(label, zero) - per_class.get(r, zero),
                         [sizes[sort] - Poly.const(1, nv)] if sort is not None else [])
        return got

    def decide_margins(got, offsets, free, where=""):
        for name, (poly, conds) in got.items():
            s = ctx.sign(poly, offsets, free, conds)
            if s != "absent":
                sub = ctx.substitute(poly, offsets, free)
                margins_seen.append(sub.const_term() if not sub.variables() else None)
            if s not in ("pos", "absent"):
                failures.append((pt["representative"], name + where, list(offsets), list(free), _text(poly, ctx), s))

    def run(node, offsets, free):
        if list(node["offsets"]) != list(offsets) or list(node["free"]) != list(free):
            raise Invalid(f"tree node region {node['offsets']}/{node['free']} is not {offsets}/{free}")
        if "split" in node:
            i = ctx.names.index(node["split"])
            at = node["at"]
            if not free[i] or not isinstance(at, int) or at < 1:
                raise Invalid("bad split")
            kids = node["children"]
            if len(kids) != at + 1:
                raise Invalid("a split needs at + 1 children")
            for t in range(at):
                o = list(offsets)
                f = list(free)
                o[i] += t
                f[i] = False
                run(kids[t], o, f)
            o = list(offsets)
            o[i] += at
            run(kids[at], o, list(free))
            return
        if hops:
            # S_h = Phi^h(copy(H0)) and label_h = f^(h-1)(start): one deterministic map on the pairs
            # (S_h, label_h), so once a pair repeats every later pair is one already decided
            H, lab, seen, h = apply(H0, layers[0], offsets, free), pt["start"], set(), 0
            while True:
                h += 1
                if h > MAX_HOPS:
                    raise Invalid(f"representative {pt['representative']}: no (stream, label) pair repeats "
                                  f"within {MAX_HOPS} hops")
                H = apply(H, layers[1], offsets, free)
                if h > 1:
                    if lab not in nxt:
                        raise Invalid(f"representative {pt['representative']}: the label map has no image of {lab}")
                    lab = nxt[lab]
                key = (frozenset((k, frozenset(v.t.items())) for k, v in H.items()), lab)
                if key in seen:
                    break
                seen.add(key)
                decide_margins(margins_of(H, names.index(lab)), offsets, free, f" at h = {h}")
            log.append(len(seen))
            return
        H = H0
        for layer in layers:
            H = apply(H, layer, offsets, free)
        got = margins_of(H, label)
        want = node["margins"]
        if set(want) != set(got):
            raise Invalid("the margins name different classes")
        for name, (poly, conds) in got.items():
            # compared on the region (a fixed parameter is substituted): an entry that cannot exist
            # there contributes only through counts that vanish at the fixed value
            if ctx.substitute(Poly.parse(want[name]["value"], nv), offsets, free) != ctx.substitute(poly, offsets, free):
                raise Invalid(f"margin against {name} differs from the certificate's on {offsets}/{free}")
        decide_margins(got, offsets, free)
        log.append(1)

    root = pt["tree"]
    if not all(root["free"]):
        raise Invalid("the root region must leave every parameter free")
    for i, off in enumerate(root["offsets"]):
        if off > 0:  # the point must not exist just below its range: some set would be negative there
            below = list(root["offsets"])
            below[i] -= 1
            at = [ctx.expr(below, [False] * nv, j) for j in range(nv)]
            if all(sz.compose(at).const_term() >= 0 for sz in sizes.values()):
                raise Invalid(f"representative {pt['representative']}: its range starts above a size where it exists")
            # ... and at every size below it, whatever the other parameters: a point set linear in
            # parameter i alone, increasing in it, negative one below the start
            loose = [ctx.expr(below, [j != i for j in range(nv)], j) for j in range(nv)]
            if not any(all(sum(mo) <= 1 and (sum(mo) == 0 or mo[i] == 1) for mo in sz.t)
                       and sz.t.get(tuple(int(j == i) for j in range(nv)), 0) > 0
                       and sz.compose(loose).const_term() < 0 and not sz.compose(loose).variables()
                       for sz in sizes.values()):
                raise Invalid(f"representative {pt['representative']}: its range starts above a size where it "
                              "may exist (no point set in that parameter alone is negative below it)")
    run(root, root["offsets"], root["free"])
    return failures


# ----------------------------------------------------------------------------- re-derivations

# What this checker knows about each task, independently of the certificate: the task's own
# parameter range, its index sets' sizes, and its dataset size as a ratio of factorials of linear
# forms times a polynomial (icqa: A(n_q, k) A(n_a, k) k = n_q! n_a! k! / ((n_q-k)! (n_a-k)! (k-1)!)).
def _icqa(fixed: dict):
    if fixed:
        return None
    return {"range": [("k", 1, None), ("n_q", 0, "k"), ("n_a", 0, "k")],
            "sets": {"Q": {"n_q": 1}, "A": {"n_a": 1}, "T": {"k": 1}}, "classes": {"n_a": 1},
            "size_num": [{"n_q": 1}, {"n_a": 1}, {"k": 1}],
            "size_den": [{"n_q": 1, "k": -1}, {"n_a": 1, "k": -1}, {"k": 1, "": -1}]}


def _multihop(fixed: dict):
    """At fixed (hops, k): A(N, k) k^k k sequences (k distinct sources, f on them, a start)."""
    if set(fixed) != {"hops", "k"} or not all(isinstance(v, int) and v >= 1 for v in fixed.values()):
        return None
    k = fixed["k"]
    return {"range": [("N", k, None)], "sets": {"N": {"N": 1}}, "classes": {"N": 1}, "size_num": [{"N": 1}],
            "size_den": [{"N": 1, "": -k}], "size_poly": {(): k ** k * k}}


def _tm(fixed: dict):
    """At a fixed length l: m^l sequences."""
    if set(fixed) != {"l"} or not isinstance(fixed["l"], int) or fixed["l"] < 1:
        return None
    return {"range": [("m", 1, None)], "sets": {"m": {"m": 1}}, "classes": {"": _bell(fixed["l"])},
            "size_num": [], "size_den": [],
            "size_poly": {("m",) * fixed["l"]: 1}}


def _bell(n: int) -> int:
    """The number of set partitions of n items (the templates of a length-n sequence)."""
    row = [1]
    for _ in range(n - 1):
        nxt = [row[-1]]
        for v in row:
            nxt.append(nxt[-1] + v)
        row = nxt
    return row[-1]


def _stirling2(n: int, b: int) -> int:
    """Set partitions of n items into b blocks (the templates of length n with b wildcards)."""
    row = [1] + [0] * b  # S(0, j)
    for i in range(1, n + 1):
        row = [0] + [j * row[j] + row[j - 1] for j in range(1, b + 1)]
    return row[b]


def _ictm(fixed: dict):
    """At fixed (k, l), query "any": A(n_a, k) k! sum over k-sets S of templates of prod_{t in S} N(t)
    sum_{t in S} N(t), N(t) = A(m, b(t)) for a template with b(t) wildcards (S(l, b) of them): the
    sum over ordered k-tuples of distinct templates of prod N sum N, by the generating polynomials
    of the template counts (a polynomial in m and n_a; A(m, b) = 0 for an integer m < b, so the
    templates not realizable over m tokens add nothing). m starts where k templates are realizable."""
    if set(fixed) - {"query"} != {"k", "l"} or fixed.get("query", "any") != "any" or not all(
            isinstance(fixed[p], int) and fixed[p] >= 1 for p in ("k", "l")):
        return None
    k, l = fixed["k"], fixed["l"]
    if _bell(l) > 10 ** 5:
        raise Invalid(f"l = {l}: Bell(l) = {_bell(l)} templates, more than any certificate here holds (at most 100000)")
    m0 = next((m for m in range(1, l + 1) if sum(_stirling2(l, b) for b in range(1, m + 1)) >= k), None)
    if m0 is None:
        return None  # fewer than k templates of length l: no dataset

    def size(ctx: "Ctx") -> "Poly":
        one = Poly.const(1, ctx.nv)
        m, na = Poly.var(ctx.names.index("m"), ctx.nv), Poly.var(ctx.names.index("n_a"), ctx.nv)
        plain = [one] + [Poly({}, ctx.nv)] * k  # plain[j]: sum over j-sets of prod N
        marked = [Poly({}, ctx.nv)] * (k + 1)  # marked[j]: the same times sum N
        for b in range(1, l + 1):
            N = one
            for t in range(b):
                N = N * (m - Poly.const(t, ctx.nv))
            for _ in range(_stirling2(l, b)):
                for j in range(k, 0, -1):
                    marked[j] = marked[j] + N * marked[j - 1] + N * N * plain[j - 1]
                    plain[j] = plain[j] + N * plain[j - 1]
        out = marked[k]
        for t in range(k):
            out = out * (na - Poly.const(t, ctx.nv)) * Poly.const(t + 1, ctx.nv)
        return out

    return {"range": [("m", m0, None), ("n_a", k, None)], "sets": {"m": {"m": 1}, "n_a": {"n_a": 1}},
            "classes": {"n_a": 1}, "size_num": [], "size_den": [], "size_of": size}


TASKS = {"icqa": _icqa, "multihop": _multihop, "tm": _tm, "ictm": _ictm}


def _linear(form: dict, ctx: Ctx) -> Poly:
    out = Poly({}, ctx.nv)
    for name, c in form.items():
        out = out + (Poly.const(c, ctx.nv) if name == "" else Poly.var(ctx.names.index(name), ctx.nv) * c)
    return out


def _factorial_ratio(num: list, den: list, ctx: Ctx):
    """num!/den! (lists of linear Polys) as (polynomial numerator, polynomial denominator, the
    remaining numerator forms, the remaining denominator forms), pairing forms that differ by a
    constant c (x! / (x - c)! = x (x-1) ... (x-c+1))."""
    for p in num + den:
        if any(sum(m) > 1 for m in p.t):
            raise Invalid("a set size is not linear in the parameters: no factorial identity re-derived")
    num, den = list(num), list(den)
    pn, pd = Poly.const(1, ctx.nv), Poly.const(1, ctx.nv)
    changed = True
    while changed:
        changed = False
        for i, x in enumerate(num):
            for j, y in enumerate(den):
                d = x - y
                if d.variables():
                    continue
                c = d.const_term()
                if c.denominator != 1:
                    continue
                c = int(c)
                hi, n = (x, c) if c >= 0 else (y, -c)
                prod = Poly.const(1, ctx.nv)
                for t in range(n):
                    prod = prod * (hi - Poly.const(t, ctx.nv))
                if c >= 0:
                    pn = pn * prod
                else:
                    pd = pd * prod
                del num[i], den[j]
                changed = True
                break
            if changed:
                break
    key = lambda p: sorted(p.t.items())  # noqa: E731
    return pn, pd, sorted((key(p) for p in num)), sorted((key(p) for p in den))


def rederive(cert: dict, ctx: Ctx, data: dict) -> dict:
    """The orbit identity, the set sizes and the claim, re-derived; raises Invalid on any mismatch."""
    task = cert.get("task")
    fixed = cert.get("fixed") or {}
    every = _every(cert)
    if every and (task != "multihop" or set(fixed) != {"k"} or any("start" not in p for p in cert["points"])):
        raise Invalid("every hops is re-derived for multihop at a fixed k only, each point with its label rule")
    if not every and any("start" in p for p in cert.get("points", [])):
        raise Invalid("a point with a label rule in a certificate for one hop count")
    # every hops: the dataset at (k, hops) has the same size for every hops (A(N, k) k^k k)
    info = (TASKS[task]({**fixed, "hops": 1} if every else fixed)) if task in TASKS else None
    if info is None:
        raise Invalid(f"no dataset formula for task {task!r}" + (f" at {fixed}" if fixed else "")
                      + " here: the orbit identity cannot be re-derived")
    own = {n: (b, a) for n, b, a in info["range"]}
    for n, b, a in ctx.params:
        if n not in own or own[n][1] != a or b < own[n][0]:
            raise Invalid(f"the claimed range {_describe(n, b, a)} is not inside the task's range "
                          f"({', '.join(_describe(*p) for p in info['range'])})")
    if [n for n, _, _ in ctx.params] != [n for n, _, _ in info["range"]]:
        raise Invalid("the parameters are not the task's")
    zeros, free = [0] * ctx.nv, [True] * ctx.nv
    total = None
    for pt in cert["points"]:
        sorts = {s_: Poly.parse(t, ctx.nv) for s_, t in pt["sorts"].items()}
        msets = pt.get("model_sets")
        if not isinstance(msets, dict) or set(msets) != set(info["sets"]):
            raise Invalid(f"representative {pt['representative']}: model sets {sorted(msets or {})} are not the "
                          f"task's {sorted(info['sets'])}")
        start = _root_offsets(pt, ctx)  # the representative's own range (check_point: empty below it)
        for name, size in list(sorts.items()):
            if not _nonneg(ctx, size, start, free):
                raise Invalid(f"representative {pt['representative']}: point set {name} of size "
                              f"{_text(size, ctx)} can be negative in the claimed range")
        for S, entry in msets.items():
            size = Poly.parse(entry["size"], ctx.nv)
            if size != _linear(info["sets"][S], ctx):
                raise Invalid(f"set {S} has size {_text(size, ctx)}, the task's is {_text(_linear(info['sets'][S], ctx), ctx)}")
            parts = Poly({}, ctx.nv)
            for kind, name in entry["parts"]:
                if kind == "fixed":
                    parts = parts + Poly.const(1, ctx.nv)
                elif kind == "sort" and name in sorts:
                    parts = parts + sorts[name]
                else:
                    raise Invalid(f"set {S}: unknown part {kind} {name}")
            if parts != size:
                raise Invalid(f"representative {pt['representative']}: the parts of {S} add up to "
                              f"{_text(parts, ctx)}, not {_text(size, ctx)} (wrong orbit sizes)")
            if not _nonneg(ctx, size, zeros, free) or size.is_zero():
                raise Invalid(f"set {S} of size {_text(size, ctx)} can be negative in the claimed range")
        # the class families cover the task's classes: a family of a point set counts |P| classes, a
        # fixed one counts 1 (a certificate without some competitors re-decides fewer margins)
        names = [f[0] for f in pt["classes"]]
        if len(set(names)) != len(names):
            raise Invalid(f"representative {pt['representative']}: a class family is named twice")
        count = Poly({}, ctx.nv)
        for name, sort in pt["classes"]:
            count = count + (Poly.const(1, ctx.nv) if sort is None else sorts.get(sort, Poly({}, ctx.nv)))
        if count != _linear(info["classes"], ctx):
            raise Invalid(f"representative {pt['representative']}: the class families count {_text(count, ctx)} "
                          f"classes, the task has {_text(_linear(info['classes'], ctx), ctx)}")
        # orbit size |G| / |Stab| = prod_S |S|! / prod_P |P|!
        orbit = _factorial_ratio([Poly.parse(e["size"], ctx.nv) for e in msets.values()], list(sorts.values()), ctx)
        if total is None:
            total = orbit
        elif orbit[2:] == total[2:]:
            total = (total[0] * orbit[1] + orbit[0] * total[1], total[1] * orbit[1], total[2], total[3])
        else:
            raise Invalid("orbits of different factorial shapes: their sum is not re-derived here")
    want = _factorial_ratio([_linear(f, ctx) for f in info["size_num"]], [_linear(f, ctx) for f in info["size_den"]], ctx)
    extra = Poly({}, ctx.nv)
    for names, c in ({} if "size_of" in info else info.get("size_poly", {(): 1})).items():
        term = Poly.const(c, ctx.nv)
        for name in names:
            term = term * Poly.var(ctx.names.index(name), ctx.nv)
        extra = extra + term
    if "size_of" in info:
        extra = info["size_of"](ctx)
    want = (want[0] * extra, want[1], want[2], want[3])
    if total is None or total[2:] != want[2:] or total[0] * want[1] != want[0] * total[1]:
        raise Invalid("the orbits of the representatives do not add up to the task's dataset size (orbit identity)")
    claim = "correct on every point for all " + ", ".join(every + [_describe(*p) for p in ctx.params]) + (
        " at " + ", ".join(f"{k}={v}" for k, v in fixed.items()) if fixed else "")
    for where, obj in (("certificate", cert), ("report", data if data is not cert else {})):
        if "claim" in obj and obj["claim"] != claim:
            raise Invalid(f"the {where}'s claim {obj['claim']!r} is not the one re-derived: {claim!r}")
    if data is not cert and "all_sizes" in data and data["all_sizes"] != every + [_describe(*p) for p in ctx.params]:
        raise Invalid(f"the report's range {data['all_sizes']} is not the certificate's")
    return {"claim": claim}


def _every(cert: dict) -> list:
    """The parameters proven by periodicity, not as polynomial variables: [] or ["hops >= 1"]."""
    every = cert.get("every")
    if every is None and cert.get("kind") is None:
        return []
    if cert.get("kind") != "every-hops" or every != {"name": "hops", "base": 1}:
        raise Invalid(f"unknown certificate kind {cert.get('kind')!r} / every {every!r}")
    return ["hops >= 1"]


def _root_offsets(pt: dict, ctx: Ctx) -> list:
    """Where the representative's range starts (its split tree's root): offsets >= 0 of the claimed
    range's base values; only a parameter with no `after` may start above its base."""
    off = pt.get("tree", {}).get("offsets")
    if not isinstance(off, list) or len(off) != ctx.nv or not all(isinstance(o, int) and o >= 0 for o in off):
        raise Invalid(f"representative {pt.get('representative')}: its region does not start inside the claimed range")
    if any(o and ctx.params[i][2] is not None for i, o in enumerate(off)):
        raise Invalid(f"representative {pt.get('representative')}: a range that starts above a relative base")
    return off


def _nonneg(ctx: Ctx, p: Poly, offsets, free) -> bool:
    """p >= 0 on the whole region by the coefficient test (False if the test does not settle it)."""
    try:
        return ctx.sign(p, offsets, free, []) in ("pos", "nonneg", "zero")
    except Invalid:
        return False


def _describe(n, b, a) -> str:
    if a is None:
        return f"{n} >= {b}"
    return f"{n} >= {a}" + (f" + {b}" if b else "")


def _text(p: Poly, ctx: Ctx) -> str:
    parts = []
    for m, c in sorted(p.t.items(), reverse=True):
        mono = "*".join(n if e == 1 else f"{n}^{e}" for n, e in zip(ctx.names, m) if e)
        parts.append(f"{c}*{mono}" if mono and c != 1 else mono or str(c))
    return " + ".join(parts) or "0"


# ----------------------------------------------------------------------------- the task side, re-derived

# The variants each task's certificates may name (a name outside these is refused; which variant a
# certificate's tables are is bound by its content hash, recomputed by `check-certificate FILE --rebuild`).
VARIANTS = {"icqa": {"copy-matching"}, "multihop": {"linear", "doubling", "paper"}, "tm": {"ternary"},
            "ictm": {"parsing-copying-matching"}, "sc": {"heads"}, "parity": {"count"}, "mod-count": {"count"}}

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _template(tokens) -> tuple:
    seen = {}
    return tuple(seen.setdefault(t, len(seen)) for t in tokens)


def _template_name(pattern) -> str:
    if len(pattern) and max(pattern) < len(LETTERS):
        return "".join(LETTERS[v] for v in pattern)
    return ".".join(str(v) for v in pattern)


def _power(f: dict, start, hops: int):
    """f^hops(start): walk until an entity repeats, then reduce hops modulo the cycle."""
    path, where = [start], {start: 0}
    while len(path) <= hops:
        nxt = f[path[-1]]
        if nxt in where:
            mu = where[nxt]
            return path[mu + (hops - mu) % (len(path) - mu)]
        where[nxt] = len(path)
        path.append(nxt)
    return path[hops]


def _columns(pt: dict, nv: int) -> list:
    """H0 read as the one-hot embedding it must be: per column family (name, sort, token row (name,
    sort), position row (name, sort)); every entry the constant 1, one token row ("tok:...") and one
    position row ("pos...") per column, a row indexed by a set only on a column of that set at the
    same member, distinct position rows."""
    rows, cols = pt["rows"], pt["cols"]
    one = Poly.const(1, nv)
    tok, pos = {}, {}
    for r, c, p, v in pt["H0"]:
        if not (0 <= r < len(rows) and 0 <= c < len(cols)):
            raise Invalid("H0 index out of range")
        rname, rsort = rows[r]
        cname, csort = cols[c]
        if Poly.parse(v, nv) != one:
            raise Invalid(f"H0 at ({rname}, {cname}) is not 1: not the one-hot embedding")
        if rsort is not None and (rsort != csort or p != "eq"):
            raise Invalid(f"H0 at ({rname}, {cname}, {p!r}): a row of set {rsort} on a column that is not its member")
        if rsort is None and p not in ("",) and not (csort is not None and p in ("eq", "ne")):
            raise Invalid(f"H0 pattern {p!r} at ({rname}, {cname})")
        if rsort is None and csort is not None and p == "ne":
            raise Invalid(f"H0 at ({rname}, {cname}, 'ne'): not one-hot")
        kind = tok if rname.startswith("tok:") else pos if rname.startswith("pos") else None
        if kind is None:
            raise Invalid(f"H0 writes row {rname}: the embedding has token and position rows only")
        if c in kind:
            raise Invalid(f"column {cname} has two {'token' if kind is tok else 'position'} rows in H0")
        kind[c] = (rname, rsort)
    out = []
    for c, (cname, csort) in enumerate(cols):
        if c not in tok or c not in pos:
            raise Invalid(f"column {cname} has no {'token' if c not in tok else 'position'} row in H0")
        if csort is not None and pos[c][1] != csort:
            raise Invalid(f"column {cname} of set {csort}: its members share one position row")
        out.append((cname, csort, tok[c], pos[c]))
    if len({p for _, _, _, p in out}) != len(out):
        raise Invalid("two columns have one position row in H0")
    if pt["last"] not in [c for c, _, _, _ in out]:
        raise Invalid("the last column is not a column")
    return out


def _parts(pt: dict) -> dict:
    """model set -> (fixed part names, sort part names), from the point's model_sets."""
    out = {}
    for S, entry in pt["model_sets"].items():
        fixed = [n for k, n in entry["parts"] if k == "fixed"]
        sorts = [n for k, n in entry["parts"] if k == "sort"]
        if len(set(fixed)) != len(fixed):
            raise Invalid(f"set {S}: a fixed part named twice")
        out[S] = (fixed, sorts)
    return out


def _vocab_sequence(pt: dict, nv: int, length: int, groups: tuple, literals: tuple) -> list:
    """The representative's tokens in position order: (set, fixed part) for a token of a task set,
    the literal otherwise; positions pos0 .. pos{length-1}, each once, the last the read column."""
    cols = _columns(pt, nv)
    by_pos = {}
    for cname, csort, (tname, tsort), (pname, psort) in cols:
        if csort is not None or tsort is not None or psort is not None:
            raise Invalid(f"column {cname}: a position indexed by a set (this task's positions are single)")
        by_pos[pname] = (cname, tname)
    want = [f"pos{j}" for j in range(length)]
    if sorted(by_pos) != sorted(want):
        raise Invalid(f"the positions in H0 are {sorted(by_pos)}, not pos0 .. pos{length - 1}")
    if by_pos[want[-1]][0] != pt["last"]:
        raise Invalid("the read column is not the last position")
    parts = _parts(pt)
    seq = []
    for p in want:
        name = by_pos[p][1][len("tok:"):]
        if "@" in name and name.split("@", 1)[0] in groups:
            S, part = name.split("@", 1)
            if part not in parts.get(S, ((), ()))[0]:
                raise Invalid(f"token {name} is not a fixed member of set {S}")
            seq.append((S, part))
        elif name in literals:
            seq.append(name)
        else:
            raise Invalid(f"token {name} is not a token of the task")
    return seq


def _need(ok: bool, pt: dict, why: str) -> None:
    if not ok:
        raise Invalid(f"representative {pt['representative']} is not a point of the task: {why}")


def _stabilizer_is_free(pt: dict, used: dict) -> None:
    """The fixed parts of each set are exactly the members the point uses and the rest is one part
    (its stabilizer is the symmetric group of the unused members, as the orbit identity assumes)."""
    for S, (fixed, sorts) in _parts(pt).items():
        if sorted(fixed) != sorted(used.get(S, ())):
            raise Invalid(f"representative {pt['representative']}: set {S} fixes {sorted(fixed)}, the point uses "
                          f"{sorted(used.get(S, ()))}: its orbit size is not |G| / |Stab|")
        if len(sorts) != 1:
            raise Invalid(f"representative {pt['representative']}: set {S} has {len(sorts)} parts of unused members, not one")


def task_side(cert: dict, nv: int) -> tuple[str, int]:
    """Each representative read from its H0, its label computed by the task's rule and compared with
    the certificate's (label, or start and next for every hops), its fixed members the ones it uses,
    and the representatives' first-occurrence forms pairwise different.  Returns (what was checked,
    number of representatives)."""
    task, fixed = cert.get("task"), cert.get("fixed") or {}
    forms = {}
    for pt in cert["points"]:
        unsorted = {c[0] for c in pt["classes"] if c[1] is None}
        if task == "icqa":
            form, label = _icqa_point(pt, nv)
        elif task in ("tm", "multihop", "ictm"):
            if task == "tm":
                l = fixed["l"]
                seq = _vocab_sequence(pt, nv, l + 1, ("m",), ("<cls>",))
                _need(all(isinstance(t, tuple) for t in seq[:l]) and seq[l] == "<cls>", pt, "not l tokens then <cls>")
                label = "cls:" + _template_name(_template(seq[:l]))
            elif task == "multihop":
                k = fixed["k"]
                seq = _vocab_sequence(pt, nv, 3 * k + 2, ("N",), (">",))
                _need(all(seq[3 * i + 1] == ">" for i in range(k)) and seq[3 * k + 1] == ">", pt, "a > is missing")
                f = {seq[3 * i]: seq[3 * i + 2] for i in range(k)}
                _need(len(f) == k and all(isinstance(x, tuple) for x in f), pt, "the k sources are not distinct entities")
                _need(all(y in f for y in f.values()), pt, "a target is not a source")
                s = seq[3 * k]
                _need(s in f, pt, "the query is not a source")
                cls = lambda e: "cls:N@" + e[1]  # noqa: E731
                if "start" in pt:
                    reached, x = [], f[s]
                    while x not in reached:
                        reached.append(x)
                        x = f[x]
                    want_next = {cls(x): cls(f[x]) for x in reached}
                    if pt["start"] != cls(f[s]) or pt["next"] != want_next:
                        raise Invalid(f"representative {pt['representative']}: the label rule is start "
                                      f"{pt['start']} next {pt['next']}; the task's (f on the sources) is start "
                                      f"{cls(f[s])} next {want_next}")
                    label = None
                else:
                    label = cls(_power(f, s, fixed["hops"]))
            else:
                k, l = fixed["k"], fixed["l"]
                b = l + 2
                seq = _vocab_sequence(pt, nv, k * b + l + 1, ("m", "n_a"), ("=",))
                ctx = [tuple(seq[i * b: i * b + l]) for i in range(k)]
                outs = [seq[i * b + l + 1] for i in range(k)]
                q = tuple(seq[k * b: k * b + l])
                _need(all(seq[i * b + l] == "=" for i in range(k)) and seq[-1] == "=", pt, "an = is missing")
                _need(all(isinstance(t, tuple) and t[0] == "m" for x in ctx + [q] for t in x), pt,
                      "a question token outside the alphabet")
                _need(all(isinstance(a, tuple) and a[0] == "n_a" for a in outs) and len(set(outs)) == k, pt,
                      "the answers are not k distinct answer tokens")
                temps = [_template(x) for x in ctx]
                _need(len(set(temps)) == k, pt, "two context questions share a template")
                hits = [i for i in range(k) if temps[i] == _template(q)]
                _need(len(hits) == 1, pt, "the query's template is not a context template")
                _need(fixed.get("query", "any") != "new" or q != ctx[hits[0]], pt, "the query repeats its question")
                label = "cls:n_a@" + outs[hits[0]][1]
            used = {}
            for t in seq:
                if isinstance(t, tuple) and t[1] not in used.setdefault(t[0], []):
                    used[t[0]].append(t[1])
            _stabilizer_is_free(pt, used)
            # the label is a function of the sequence (the rule), so the sequence's form is the orbit's
            renamed, seen = [], {}
            for t in seq:
                if isinstance(t, tuple):
                    group = seen.setdefault(t[0], {})
                    renamed.append((t[0], group.setdefault(t[1], len(group))))
                else:
                    renamed.append(t)
            form = tuple(renamed)
        else:
            raise Invalid(f"no label rule for task {task!r} here")
        if label is not None:
            if label not in unsorted:
                raise Invalid(f"representative {pt['representative']}: its label by the task's rule, {label}, is not "
                              "one of its single class families")
            if pt.get("label") != label:
                raise Invalid(f"representative {pt['representative']}: the certificate's label is {pt.get('label')}, "
                              f"the task's rule gives {label}")
        if form in forms:
            raise Invalid(f"representatives {forms[form]} and {pt['representative']} are in one orbit "
                          "(equal first-occurrence forms): a duplicate representative")
        forms[form] = pt["representative"]
    return ("labels by the task's rule, representatives in pairwise different orbits (first-occurrence forms), "
            "fixed members = members used"), len(forms)


def _icqa_point(pt: dict, nv: int):
    """ICQA's representative: triples indexed by the parts of T (one fixed triple, one set of the others),
    each (question, =, answer) with the triple's own member of Q and A, then (query, =); the label is the
    answer of the triple whose question is the query."""
    cols = _columns(pt, nv)
    parts = _parts(pt)
    if set(parts) != {"Q", "A", "T"}:
        raise Invalid("an icqa point splits the sets Q, A, T")
    tfixed, tsorts = parts["T"]
    slots = {}
    for cname, csort, (tname, tsort), (pname, psort) in cols:
        if pname in ("posF0", "posF1"):
            _need(csort is None and tsort is None, pt, f"{pname} is one position")
            slots[pname] = tname
            continue
        r, _, part = pname.partition("@")
        _need(r in ("pos0", "pos1", "pos2") and (part in tfixed or part in tsorts), pt, f"position row {pname}")
        _need((psort is None) == (part in tfixed) and (psort is None or psort == part), pt, f"position row {pname}")
        slots[(int(r[3]), part)] = (tname, tsort)
    want = {(r, p) for r in range(3) for p in tfixed + tsorts} | {"posF0", "posF1"}
    _need(set(slots) == want, pt, "the columns are not 3 per triple part and the query's 2")
    used = {"Q": [], "A": [], "T": list(tfixed)}
    questions = {}
    for part in tfixed + tsorts:
        for r, S in ((0, "Q"), (2, "A")):
            tname, tsort = slots[(r, part)]
            _need(tname.startswith(f"tok:{S}@"), pt, f"slot {r} of triple {part} holds {tname}")
            member = tname.split("@", 1)[1]
            if part in tfixed:
                _need(tsort is None and member in parts[S][0], pt, f"triple {part}: {tname} is not a fixed member")
                used[S].append(member)
            else:
                _need(tsort == part and member == part and part in parts[S][1], pt,
                      f"triple set {part}: {tname} is not its own member of {S}")
            if r == 0:
                questions[part] = (tname, tsort)
        _need(slots[(1, part)] == ("tok:=", None), pt, f"triple {part}: the middle token is not =")
    _need(slots["posF1"] == "tok:=", pt, "the sequence does not end with =")
    hits = [p for p, (tname, tsort) in questions.items() if tsort is None and tname == slots["posF0"]]
    _need(len(hits) == 1, pt, "the query is not exactly one context question")
    label = "cls:A@" + slots[(2, hits[0])][0].split("@", 1)[1]
    for S in ("Q", "A"):
        if len(set(used[S])) != len(used[S]):
            raise Invalid(f"representative {pt['representative']}: a member of {S} in two triples")
    # the stabilizer Sym(the other triples) x Sym(unused questions) x Sym(unused answers): the parts of
    # Q and A are the fixed members used, the other triples' set and one set of unused members
    for S in ("Q", "A"):
        fixed, sorts = parts[S]
        _need(sorted(fixed) == sorted(used[S]) and len(sorts) == 2 and set(tsorts) <= set(sorts), pt,
              f"the parts of {S} are not the members used, the other triples' and the unused ones")
    if len(tfixed) != 1 or len(tsorts) != 1:
        raise Invalid(f"representative {pt['representative']}: T is not one query triple and the others")
    return ("icqa",), label  # every icqa point is in one orbit of Sym(Q) x Sym(A) x Sym(T)


# ----------------------------------------------------------------------------- binding to the closed value


def _sha256_of(value) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_hash(cert: dict) -> str:
    """The certificate's `value` (the closed value's canonical tables) hashes to its content_hash."""
    value, h = cert.get("value"), cert.get("content_hash")
    if not isinstance(value, dict) or not isinstance(h, str):
        raise Invalid("no closed value and content hash in the certificate: it is bound to no construction")
    if _sha256_of(value) != h:
        raise Invalid(f"the certificate's value hashes to {_sha256_of(value)}, not its content_hash {h}")
    return h


def check_binding(cert: dict, ctx: Ctx) -> str:
    """Every point's tables (every head of every layer, W_O) are the closed value's tables split by
    the point's parts, and the value's layers are the point's (each once; every hops: the copy layer
    once, then the hop layer repeated hops times).  Returns the content hash."""
    h = check_hash(cert)
    value = cert["value"]
    _keys(value, ("format", "version", "name", "params", "fixed", "sets", "stream", "positions", "classes", "layers",
                  "W_O"), "the value")
    if (value["format"], value["version"]) != VALUE_FORMAT:
        raise Invalid(f"the value is not a {VALUE_FORMAT[0]} version {VALUE_FORMAT[1]} value")
    if not isinstance(value["layers"], list):
        raise Invalid("the value's layers are not a list")
    for layer in value["layers"]:
        _keys(layer, ("heads", "repeat"), "a layer of the value")
        for hd in layer["heads"] if isinstance(layer["heads"], list) else [None]:
            _keys(hd, ("W_QK", "W_V"), "a head of the value")
    vnames = [p[0] for p in value.get("params", [])]
    every = bool(_every(cert))
    for name, v in (cert.get("fixed") or {}).items():
        if [name, v] not in value.get("fixed", []):
            raise Invalid(f"the value holds {value.get('fixed')}, not the certificate's {name} = {v}")
    extra = [n for n in vnames if n not in ctx.names and not (every and n == "hops")]
    if extra:
        raise Invalid(f"the value's parameters {vnames} are not the certificate's {ctx.names}")

    def poly(terms, where):
        out = {}
        for mono, c in terms:
            e = [0] * ctx.nv
            for n, x in zip(vnames, mono):
                if x and n not in ctx.names:
                    raise Invalid(f"{where} depends on {n}")
                if x:
                    e[ctx.names.index(n)] = x
            out[tuple(e)] = out.get(tuple(e), Fraction(0)) + _q(c)
        return Poly(out, ctx.nv)

    def families(key):
        return {f: s for _, s, fams in value[key] for f in fams}

    stream, positions, classes = families("stream"), families("positions"), families("classes")
    layers = value["layers"]
    if every:
        rep = [poly(lay["repeat"], "a repeat count") if all(not m[vnames.index("hops")] for m, _ in lay["repeat"])
               else None for lay in layers]
        hop_ok = len(layers) == 2 and rep[0] == Poly.const(1, ctx.nv) and rep[1] is None and \
            layers[1]["repeat"] == [[[1 if n == "hops" else 0 for n in vnames], "1"]]
        if not hop_ok:
            raise Invalid("the value's layers are not a copy layer once and a hop layer repeated hops times")
    elif any(poly(lay["repeat"], "a repeat count") != Poly.const(1, ctx.nv) for lay in layers):
        raise Invalid("a layer of the value is repeated: not the certificate's layers")

    value_sets = {name: poly(t, f"set {name}") for name, t in value.get("sets", [])}
    for pt in cert["points"]:
        parts = _parts(pt)
        for S, entry in pt["model_sets"].items():
            if value_sets.get(S) != Poly.parse(entry["size"], ctx.nv):
                raise Invalid(f"representative {pt['representative']}: set {S} has size {_text(Poly.parse(entry['size'], ctx.nv), ctx)}, "
                              "the value's " + (_text(value_sets[S], ctx) if S in value_sets else "has no such set"))

        def split(fams, point_fams, what):
            out = {}
            for name, sort in point_fams:
                if name in fams and fams[name] is None:
                    if sort is not None:
                        raise Invalid(f"{what} family {name} is single in the value")
                    out[name] = (name, None, None)
                    continue
                F, _, part = name.rpartition("@")
                S = fams.get(F)
                if not F or S is None or S not in parts:
                    raise Invalid(f"{what} family {name} is not a family of the value split by a part")
                fx, ss = parts[S]
                if not ((part in fx and sort is None) or (part in ss and sort == part)):
                    raise Invalid(f"{what} family {name}: {part} is not a part of {S}")
                out[name] = (F, S, part)
            want = {(F, p) for F, S in fams.items() for p in ([None] if S is None else parts[S][0] + parts[S][1])}
            if {(F, part) for F, _, part in out.values()} != want or len(out) != len(point_fams):
                raise Invalid(f"representative {pt['representative']}: its {what} families are not the value's "
                              "split by the point's parts")
            return out

        rmap = split(stream, pt["rows"], "row")
        split(positions, pt["cols"], "column")
        kmap = split(classes, pt["classes"], "class")

        def expected(entries, fr, fc, rm, cm):
            val = {(a, b, p): poly(t, f"entry ({a}, {b})") for a, b, p, t in entries}
            out = {}
            for i, (rn, rs) in enumerate(fr):
                for j, (cn, cs) in enumerate(fc):
                    F, S, p = rm[rn]
                    G, T, q = cm[cn]
                    for pp in (("eq", "ne") if rs is not None and rs == cs else ("",)):
                        if S is not None and S == T:
                            vp = "eq" if p == q and (rs is None or pp == "eq") else "ne"
                        else:
                            vp = ""
                        v = val.get((F, G, vp))
                        if v is not None and not v.is_zero():
                            out[(i, j, pp)] = v
            return out

        def got(entries):
            return {(r, c, p): Poly.parse(v, ctx.nv) for r, c, p, v in entries}

        rows, classes_ = [tuple(f) for f in pt["rows"]], [tuple(f) for f in pt["classes"]]
        if len(pt["layers"]) != len(layers):
            raise Invalid(f"representative {pt['representative']}: {len(pt['layers'])} layers, the value has {len(layers)}")
        for li, (play, vlay) in enumerate(zip(pt["layers"], layers)):
            if len(play) != len(vlay["heads"]):
                raise Invalid(f"representative {pt['representative']}: layer {li + 1} has {len(play)} heads, the value's "
                              f"{len(vlay['heads'])}")
            for hi, (ph, vh) in enumerate(zip(play, vlay["heads"])):
                for m in ("W_QK", "W_V"):
                    if got(ph[m]) != expected(vh[m], rows, rows, rmap, rmap):
                        raise Invalid(f"representative {pt['representative']}: layer {li + 1} head {hi} {m} is not the "
                                      f"value's {m} split by the point's parts")
        if got(pt["W_O"]) != expected(value["W_O"], classes_, rows, kmap, rmap):
            raise Invalid(f"representative {pt['representative']}: W_O is not the value's W_O split by the point's parts")
    return h


def readout_scale(entries) -> Fraction | None:
    """The largest |entry| of a read-out (None when an entry depends on the sizes)."""
    best = Fraction(0)
    for *_, terms in entries:
        for mono, c in terms:
            if any(mono):
                return None
            best = max(best, abs(_q(c)))
    return best or None


def normalized(margin: str | None, scale: Fraction | None) -> str:
    """The margin per unit of read-out: margin / max |W_O entry| (a read-out scaled by c > 0 scales every
    logit, hence the margin, by c: the normalized margin does not change)."""
    if margin is None or scale is None:
        return "none (a margin or a read-out entry depends on the sizes)"
    return str(Fraction(margin) / scale)


# ----------------------------------------------------------------------------- rules read from the value

VALUE_FORMAT = ("depthcert.closed-model", 1)


def _keys(obj, allowed, where: str, required=None) -> dict:
    """obj is a JSON object whose keys are among `allowed` (and include `required`, default all of
    them): an unknown field is refused, never ignored."""
    if not isinstance(obj, dict):
        raise Invalid(f"{where} is not a JSON object")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise Invalid(f"{where} has unknown fields {', '.join(map(_short, unknown))} (known: {', '.join(sorted(allowed))})")
    missing = sorted(set(allowed if required is None else required) - set(obj))
    if missing:
        raise Invalid(f"{where} lacks the fields {', '.join(missing)}")
    return obj


def _value_rule(r, nv: int, where: str) -> dict:
    """A value's rule [kind, src, col_block, row, col, value] (constructions/closed.canonical_tables)."""
    if not isinstance(r, list) or len(r) != 6:
        raise Invalid(f"{where}: a rule is [kind, block, column block, row, column, value]")
    kind, src, cb, row, col, val = r
    if kind not in ("entry", "copy", "scaled") or not (src is None or isinstance(src, str)) or not (
            cb is None or isinstance(cb, str)):
        raise Invalid(f"{where}: rule kind {_short(kind)} / blocks {_short(src)}, {_short(cb)} are not a rule's")
    return {"kind": kind, "src": src, "col_block": cb, "row": Poly.parse(row, nv), "col": Poly.parse(col, nv),
            "value": Poly.parse(val, nv)}


def _value_head(hd, nv: int, where: str) -> tuple:
    _keys(hd, ("W_QK", "W_V"), where)
    out = []
    for part in ("W_QK", "W_V"):
        if not isinstance(hd[part], list):
            raise Invalid(f"{where} {part} is not a list of rules")
        out.append([_value_rule(r, nv, f"{where} {part} rule {i}") for i, r in enumerate(hd[part])])
    return tuple(out)


def _value_head_of(value: dict, kind: str, keys: tuple) -> None:
    _keys(value, keys, "the value")
    if (value["format"], value["version"]) != VALUE_FORMAT or value["kind"] != kind:
        raise Invalid(f"the value is not a {VALUE_FORMAT[0]} version {VALUE_FORMAT[1]} {kind} value")


def _shape(ok: bool, why: str) -> None:
    if not ok:
        raise Invalid(f"the value is not of the derivation's shape: {why}")


def _rules_agree(got: dict, want: dict, where: str, nv: int) -> None:
    """The certificate's rules are, entry by entry, the ones read from the value it hashes."""
    if not isinstance(got, dict) or set(got) != set(want):
        raise Invalid(f"{where}: the rules are {sorted(got) if isinstance(got, dict) else _short(got)}, not the "
                      f"value's {sorted(want)}")
    for k, w in want.items():
        g = got[k]
        if isinstance(w, list):
            if not isinstance(g, list) or len(g) != len(w):
                raise Invalid(f"{where}: rule {k} is not the value's {len(w)} polynomials")
            pairs = [(f"{k}[{i}]", Poly.parse(x, nv), y) for i, (x, y) in enumerate(zip(g, w))]
        else:
            pairs = [(k, Poly.parse(g, nv), w)]
        for name, a, b in pairs:
            if a != b:
                raise Invalid(f"{where}: rule {name} is {_terms_text(a)} in the certificate, the value's is "
                              f"{_terms_text(b)} (the rules are not read from the value it hashes)")


def _terms_text(p: Poly) -> str:
    return _short(sorted([list(m), str(c)] for m, c in p.t.items()))


LEMMA4_VALUE = ("format", "version", "kind", "name", "params", "d", "n", "dim", "count", "read_count", "read_offset",
                "read_weight", "copy", "last")


def lemma4_rules_of(value) -> tuple[dict, Poly, Poly]:
    """(rules, d, n) read from a head-family value (polynomials in h, L, M) as the prover's derivation
    reads it (proofs/all_sizes_lemma4.derive): copy head h's one non-zero W_QK entry (position,
    position) and its one copy of the token block, the one cancel head (b I on the positions, W_V = c
    I), the head count m = count + 1, the read-out."""
    _value_head_of(value, "head-family", LEMMA4_VALUE)
    if value["params"] != [[n, b, a] for n, b, a in SC_PARAMS]:
        raise Invalid(f"the value's parameters {_short(value['params'])} are not h, L, M of Theorem 1")
    nv = 3
    f = {k: Poly.parse(value[k], nv) for k in ("d", "n", "dim", "count", "read_count", "read_offset", "read_weight")}
    qk, v = _value_head(value["copy"], nv, "the value's copy head h")
    qk = [r for r in qk if not (r["kind"] == "entry" and r["value"].is_zero())]
    _shape(len(qk) == 1 and qk[0]["kind"] == "entry" and (qk[0]["src"], qk[0]["col_block"]) == ("position", "position"),
           "copy head h's W_QK is not one entry of the (position, position) block")
    _shape(len(v) == 1 and v[0]["kind"] == "copy" and v[0]["src"] == "token",
           "copy head h's W_V is not one copy of the token block")
    last = value["last"]
    _shape(isinstance(last, list) and len(last) == 1, "not one cancel head after the copy heads")
    cqk, cv = _value_head(last[0], nv, "the value's cancel head")
    _shape(len(cqk) == 1 and cqk[0]["kind"] == "scaled" and cqk[0]["src"] == "position" and len(cv) == 1
           and cv[0]["kind"] == "scaled" and cv[0]["src"] is None, "the cancel head is not b I on the positions, W_V = c I")
    e, c = qk[0], v[0]
    rules = {"count": f["count"], "q": e["col"], "j": e["row"], "a": e["value"], "s": c["value"], "o": c["row"],
             "b": cqk[0]["value"], "c": cv[0]["value"], "m": f["count"] + Poly.const(1, nv), "dim": f["dim"],
             "read_count": f["read_count"], "read_offset": f["read_offset"], "w": f["read_weight"]}
    return rules, f["d"], f["n"]


COUNT_VALUE = ("format", "version", "kind", "name", "p", "vocab", "params", "count1", "count2", "layer1", "layer2",
               "readout", "cases")


def count_rules_of(value, task: str, p: int, want_cases: list) -> list:
    """Per residue case, the rules read from a count value as the prover's derivation reads it
    (proofs/all_sizes_count.derive_case): the rules not tied to a key at n = j + 1 + t, key j's rules
    (polynomials in q, t) the case's."""
    _value_head_of(value, "count", COUNT_VALUE)
    if value["name"] != task or value["p"] != p or value["vocab"] != ["0", "1"] or value["params"] != [["n", 1, None]]:
        raise Invalid(f"the value is for {_short(value['name'])} at p = {_short(value['p'])}, vocabulary "
                      f"{_short(value['vocab'])}, range {_short(value['params'])}: not {task} at p = {p} over tokens 0, 1, n >= 1")
    cases = value["cases"]
    if not isinstance(cases, list) or len(cases) != len(want_cases):
        raise Invalid(f"the value does not hold the {len(want_cases)} key cases at p = {p}")
    nv = 2
    q, t, one = Poly.var(0, nv), Poly.var(1, nv), Poly.const(1, nv)
    count1, count2 = Poly.parse(value["count1"], 1), Poly.parse(value["count2"], 1)
    l1qk, l1v = _value_head(value["layer1"], 1, "the value's layer 1")
    l2qk, l2v = _value_head(value["layer2"], 1, "the value's layer 2")
    if not isinstance(value["readout"], list):
        raise Invalid("the value's read-out is not a list of rules")
    ro = [_value_rule(r, 1, f"the value's read-out rule {i}") for i, r in enumerate(value["readout"])]
    _shape(not l1qk and not l2qk and not l2v, "a head has rules not tied to a key other than layer 1's count value")
    _shape(len(l1v) == 1 and l1v[0]["kind"] == "entry" and (l1v[0]["src"], l1v[0]["col_block"]) == ("count", "token"),
           "layer 1's W_V is not one (count, token) entry")
    _shape(len(ro) == 2 * p and all(r["kind"] == "entry" and r["src"] == "class" for r in ro),
           "the read-out is not two entries per class")
    u = [r for r in ro if r["col_block"] == "residue"]
    b = [r for r in ro if r["col_block"] == "position"]
    _shape(len(u) == p and len(b) == p, "the read-out is not (class r, residue) and (class r, position) per class")
    out = []
    for (text, sres, qbase), case in zip(want_cases, cases):
        _keys(case, ("text", "s", "qbase", "key1", "key2"), f"the value's case {_short(case.get('text') if isinstance(case, dict) else case)}")
        if (case["text"], case["s"], case["qbase"]) != (text, sres, qbase):
            raise Invalid(f"the value's case {_short(case['text'])} is not the case {text}")
        j = Poly.const(0, nv) if sres is None else q * p + Poly.const(sres, nv)
        n = j + one + t

        def at_n(P):
            out_ = Poly({}, nv)
            for (e,), c in P.t.items():
                term = Poly.const(c, nv)
                for _ in range(e):
                    term = term * n
                out_ = out_ + term
            return out_

        k1qk, k1v = _value_head(case["key1"], nv, f"{text} layer 1 key")
        k2qk, k2v = _value_head(case["key2"], nv, f"{text} layer 2 key")
        _shape(not k1v and len(k1qk) == 1 and k1qk[0]["kind"] == "entry"
               and (k1qk[0]["src"], k1qk[0]["col_block"]) == ("position", "position"),
               f"{text}: layer 1 key j is not one (position j, position) entry")
        blocks = [(r["src"], r["col_block"]) for r in k2qk]
        _shape(len(k2qk) == 2 and all(r["kind"] == "entry" for r in k2qk)
               and sorted(blocks) == [("position", "count"), ("position", "position")],
               f"{text}: layer 2 key j's W_QK is not (position j, count) and (position j, position)")
        _shape(len(k2v) == p and all(r["kind"] == "entry" and (r["src"], r["col_block"]) == ("residue", "position")
                                     for r in k2v), f"{text}: layer 2 key j's W_V is not one (residue r, position j) entry per r")
        e1, sc = k1qk[0], l1v[0]
        be, ga = k2qk[blocks.index(("position", "count"))], k2qk[blocks.index(("position", "position"))]
        rules = {
            "count1": at_n(count1), "count2": at_n(count2), "a1_row": e1["row"], "a1_col": e1["col"], "a1": e1["value"],
            "s1_row": at_n(sc["row"]), "s1_col": at_n(sc["col"]), "s1": at_n(sc["value"]),
            "beta_row": be["row"], "beta_col": be["col"], "beta": be["value"],
            "gamma_row": ga["row"], "gamma_col": ga["col"], "gamma": ga["value"],
            "w_row": [r["row"] for r in k2v], "w_col": [r["col"] for r in k2v], "w": [r["value"] for r in k2v],
            "u_class": [at_n(r["row"]) for r in u], "u_row": [at_n(r["col"]) for r in u], "u": [at_n(r["value"]) for r in u],
            "b_class": [at_n(r["row"]) for r in b], "b_col": [at_n(r["col"]) for r in b], "b": [at_n(r["value"]) for r in b],
        }
        out.append(rules)
    return out


# ----------------------------------------------------------------------------- Theorem 1 (sc)

SC_CLAIM = ("correct on every point for all L >= 1 (sequence length before CLS), M >= 1 (alphabet), every seed "
            "and every --n-points sample")
SC_PARAMS = [("h", 0, None), ("L", 1, "h"), ("M", 1, None)]
SC_RULES = ("count", "q", "j", "a", "s", "o", "b", "c", "m", "dim", "read_count", "read_offset", "w")


def check_lemma4(cert: dict, data: dict) -> tuple[list, str]:
    """Theorem 1's derivation re-decided from the builder's rules (polynomials in h, L, M; d = M + 1
    token rows, n = L + 1 positions): (failed conditions, margin re-derived).  The slot offsets at
    h = 0, h + 1 and L - 1 are computed here from the rule o(h) (a polynomial: the builder branched
    on no size).  Raises Invalid when the claim, range or margin is not the one derived."""
    if cert.get("task") != "sc":
        raise Invalid("a lemma4 certificate is for task sc")
    params = [(p["name"], int(p["base"]), p.get("after")) for p in cert["params"]]
    if params != SC_PARAMS:
        raise Invalid(f"the claimed range {', '.join(_describe(*p) for p in params)} is not Theorem 1's "
                      f"({', '.join(_describe(*p) for p in SC_PARAMS)})")
    ctx = Ctx(params)
    nv = ctx.nv
    r, vd, vn = lemma4_rules_of(cert["value"])  # what is derived is read from the value the hash binds
    _rules_agree(cert["rules"], r, "the certificate", nv)
    h, L, M = (Poly.var(i, nv) for i in range(3))
    one = Poly.const(1, nv)
    d = M + one
    o_at = lambda e: r["o"].compose([e, L, M])  # noqa: E731
    zeros, free = [0] * nv, [True] * nv

    def pos(p):
        try:
            return ctx.sign(p, zeros, free, []) == "pos"
        except Invalid:
            return False

    per_position = r["a"] * r["s"] * r["w"]
    conds = [
        ("the token block is the vocabulary: d = M + 1", (vd - d).is_zero()),
        ("one position per token and the CLS: n = L + 1", (vn - L - one).is_zero()),
        ("count = L", (r["count"] - L).is_zero()),
        ("q_h = n - 1", (r["q"] - L).is_zero()),
        ("j_h = h", (r["j"] - h).is_zero()),
        ("a_h > 0", pos(r["a"])),
        ("b > 0", pos(r["b"])),
        ("m = L + 1 heads", (r["m"] - r["count"] - one).is_zero()),
        ("m + b c = 0", (r["m"] + r["b"] * r["c"]).is_zero()),
        ("o_0 = 0", o_at(Poly.const(0, nv)).is_zero()),
        ("o_{h+1} - o_h = d", (o_at(h + one) - r["o"] - d).is_zero()),
        ("o_{L-1} + d <= d'", _nonneg(ctx, r["dim"] - o_at(L - one) - d, zeros, free)),
        ("read-out count = L", (r["read_count"] - L).is_zero()),
        ("o'_h = o_h", (r["read_offset"] - r["o"]).is_zero()),
        ("a_h s_h w_h > 0", pos(per_position)),
        ("a_h s_h w_h free of h", all(m[0] == 0 for m in per_position.t)),
    ]
    failed = [text for text, ok in conds if not ok]
    margin = None
    if not failed:
        claimed = _q(cert.get("margin"))
        if not (per_position - r["m"] * claimed).is_zero():
            raise Invalid(f"the certificate's margin {cert.get('margin')!r} is not a s w / m = "
                          f"({_text(per_position, ctx)}) / ({_text(r['m'], ctx)})")
        margin = str(claimed)
    for where, obj in (("certificate", cert), ("report", data if data is not cert else {})):
        if "claim" in obj and obj["claim"] != SC_CLAIM:
            raise Invalid(f"the {where}'s claim {obj['claim']!r} is not the one derived: {SC_CLAIM!r}")
        if "margin" in obj and not failed and _margin_text(obj["margin"]) != margin:
            raise Invalid(f"the {where}'s margin {obj['margin']!r} is not the one re-derived: {margin}")
    if data is not cert and not failed and _verdict(data) not in ("proven", None):
        raise Invalid(f"the report's verdict {_verdict(data)!r} does not match a valid proof")
    if data is not cert and "all_sizes" in data and data["all_sizes"] != ["L >= 1", "M >= 1"]:
        raise Invalid(f"the report's range {data['all_sizes']} is not the certificate's")
    return failed, margin


COUNT_RULES = ("count1", "count2", "a1_row", "a1_col", "a1", "s1_row", "s1_col", "s1", "beta_row", "beta_col", "beta",
               "gamma_row", "gamma_col", "gamma", "w_row", "w_col", "w", "u_class", "u_row", "u", "b_class", "b_col", "b")
COUNT_LISTS = ("w_row", "w_col", "w", "u_class", "u_row", "u", "b_class", "b_col", "b")


def _count_claim(task: str, p: int) -> str:
    return "correct on every point for all n >= 1 (sequence length)" + ("" if task == "parity" else f" at p = {p}")


def check_count(cert: dict, data: dict) -> tuple[list, str]:
    """Parity / mod-count `count`: the key cases re-made here from p (j = 0, j = p q + s for s = 1..p-1 with
    q >= 0, j = p q with q >= 1; n = j + 1 + t), every condition of the derivation re-decided on the builder's
    rules (variables q, t), the second differences D_r(j) computed here, the margin mu = b_0 - b_1 re-derived.
    Returns (failed conditions, margin); raises Invalid when the claim, range or margin is not the one derived."""
    task = cert.get("task")
    if task not in ("parity", "mod-count"):
        raise Invalid("a count certificate is for parity or mod-count")
    p = cert.get("p")
    if not isinstance(p, int) or isinstance(p, bool) or p < 2 or (task == "parity" and p != 2):
        raise Invalid(f"p = {p!r} is not the task's modulus")
    if cert.get("params") != [{"name": "n", "base": 1}]:
        raise Invalid(f"the claimed range {cert.get('params')!r} is not n >= 1")
    if (cert.get("fixed") or None) != (None if task == "parity" else {"p": p}):
        raise Invalid(f"the fixed parameters {cert.get('fixed')!r} are not the task's")
    got = cert.get("cases")
    if not isinstance(got, list) or len(got) != p + 1:  # before any work in p: the file holds p + 1 cases
        raise Invalid(f"the key cases are not the {p + 1} cases j = 0, j = {p} q + s (s = 1..{p - 1}), j = {p} q (q >= 1)")
    want = [("j = 0", None, 0)] + [(f"j = {p} q + {r}, q >= 0", r, 0) for r in range(1, p)] + [(f"j = {p} q, q >= 1", 0, 1)]
    for c in got:
        _keys(c, ("case", "rules"), "a key case")
    if [c["case"] for c in got] != [w[0] for w in want]:
        raise Invalid(f"the key cases are not j = 0, j = {p} q + s (s = 1..{p - 1}), j = {p} q (q >= 1)")
    check_hash(cert)
    from_value = count_rules_of(cert["value"], task, p, want)  # what is derived is read from the value the hash binds
    nv = 2
    q, t, one = Poly.var(0, nv), Poly.var(1, nv), Poly.const(1, nv)
    T = lambda c, r: 1 if c % p == r else 0  # noqa: E731
    failed, consts = [], None
    for (text, sres, qbase), case, r in zip(want, got, from_value):
        _rules_agree(case["rules"], r, text, nv)
        # the case's variables are q >= qbase, t >= 0: substitute q = qbase + q' so the range is the orthant
        shift = lambda P: P.compose([q + Poly.const(qbase, nv), t])  # noqa: E731
        r = {k: ([shift(x) for x in v] if isinstance(v, list) else shift(v)) for k, v in r.items()}
        j = Poly.const(0, nv) if sres is None else (q + Poly.const(qbase, nv)) * p + Poly.const(sres, nv)
        n = j + one + t

        def const(P, what):
            if any(any(m) for m in P.t):
                failed.append(f"{text}: {what} is not one number for every n")
                return None
            return P.const_term()

        vals = {k: const(r[k], k) for k in ("a1", "s1", "beta")}
        vals["u"] = [const(x, "u") for x in r["u"]]
        vals["b"] = [const(x, "b") for x in r["b"]]
        if any(v is None for v in [vals["a1"], vals["s1"], vals["beta"]] + vals["u"] + vals["b"]):
            continue
        key = repr(vals)
        if consts is None:
            consts = (key, vals)
        elif consts[0] != key:
            failed.append(f"{text}: a1, s1, beta, u, b differ from the case j = 0")
        a1, s1, beta, u, b = vals["a1"], vals["s1"], vals["beta"], vals["u"], vals["b"]
        K = beta * a1 * s1
        mu = b[0] - b[1]
        conds = [
            ("count = n (layer 1)", (r["count1"] - n).is_zero()), ("count = n (layer 2)", (r["count2"] - n).is_zero()),
            ("layer 1 row = j", (r["a1_row"] - j).is_zero()), ("layer 1 col = n - 1", (r["a1_col"] - n + one).is_zero()),
            ("a1 > 0", a1 > 0), ("s1 row = 0", r["s1_row"].is_zero()), ("s1 col = 1 (token 1)", (r["s1_col"] - one).is_zero()),
            ("s1 > 0", s1 > 0), ("beta row = j", (r["beta_row"] - j).is_zero()), ("beta col = 0", r["beta_col"].is_zero()),
            ("beta > 0", beta > 0), ("gamma row = j", (r["gamma_row"] - j).is_zero()),
            ("gamma col = n - 1", (r["gamma_col"] - n + one).is_zero()), ("gamma = -beta a1 s1 j", (r["gamma"] + j * K).is_zero()),
            ("mu = b_0 - b_1 > 0", mu > 0),
        ]
        for i in range(p):
            D = (T(1, i) - T(0, i)) if sres is None else (T(sres + 1, i) - 2 * T(sres, i) + T(sres - 1, i))
            conds += [
                (f"w row {i} = {i}", (r["w_row"][i] - Poly.const(i, nv)).is_zero()), (f"w col {i} = j", (r["w_col"][i] - j).is_zero()),
                (f"u K w_j[{i}] = mu D_{i}(j)", (r["w"][i] * (u[i] * K) - Poly.const(mu * D, nv)).is_zero()),
                (f"u class {i}", (r["u_class"][i] - Poly.const(i, nv)).is_zero()), (f"u row {i}", (r["u_row"][i] - Poly.const(i, nv)).is_zero()),
                (f"u_{i} = u_0 > 0", u[i] == u[0] and u[i] > 0), (f"b class {i}", (r["b_class"][i] - Poly.const(i, nv)).is_zero()),
                (f"b col {i} = n - 1", (r["b_col"][i] - n + one).is_zero()),
                (f"b_{i} = mu [{i} = 0] + b_1", b[i] - mu * (1 if i == 0 else 0) - b[1] == 0),
            ]
        failed += [f"{text}: {c}" for c, ok in conds if not ok]
    margin = None
    if not failed:
        margin = str(consts[1]["b"][0] - consts[1]["b"][1])
    claim = _count_claim(task, p)
    for where, obj in (("certificate", cert), ("report", data if data is not cert else {})):
        if "claim" in obj and obj["claim"] != claim:
            raise Invalid(f"the {where}'s claim {obj['claim']!r} is not the one derived: {claim!r}")
        if "margin" in obj and not failed and _margin_text(obj["margin"]) != margin:
            raise Invalid(f"the {where}'s margin {obj['margin']!r} is not the one re-derived: {margin}")
    want_status = "proven" if task == "parity" else "partial"
    if data is not cert and not failed and _verdict(data) not in (want_status, None):
        raise Invalid(f"the report's verdict {_verdict(data)!r} does not match a valid proof")
    if data is not cert and "all_sizes" in data and data["all_sizes"] != ["n >= 1"]:
        raise Invalid(f"the report's range {data['all_sizes']} is not the certificate's")
    return failed, margin


def _margin_text(margin):
    """A margin as the certificate writes it ("3"), from a report's margin object
    ({"exact": "3", "decimal": "3"}; {"formula": ...} is no single number: None) or a string."""
    if isinstance(margin, dict):
        return margin.get("exact")
    return margin


def _verdict(report: dict):
    """The report's verdict (older reports: "status")."""
    return report.get("verdict", report.get("status"))


def main(argv=None) -> int:
    """python check_all_sizes.py FILE: exit 0 valid, 1 a margin not > 0, 2 malformed or inconsistent,
    4 internal error (a bug here: one line, never exit 1, which means a failing certificate)."""
    try:
        return _main(argv)
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip().splitlines()
        print(f"internal error: {type(exc).__name__}" + (f": {text[0][:300]}" if text else "") + "; please report",
              file=sys.stderr)
        return 4


USAGE = """usage: check_all_sizes.py FILE

Re-checks an all-sizes certificate with the standard library only: FILE is the output of
`verify-construction TASK --all-sizes --json` (or its "certificate" object alone).
Exit 0 valid, 1 a margin or a condition of the derivation is not > 0 / does not hold,
2 malformed, inconsistent or not re-derivable (one line on stderr), 4 internal error."""


def _main(argv) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if len(argv) != 1 or (argv[0].startswith("-") and argv[0] != "-"):
        print(USAGE.splitlines()[0] + " (--help for more)", file=sys.stderr)
        return 2
    try:
        data = load(argv[0])
        code, line = check_data(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError, Invalid) as exc:
        text = " ".join(str(exc).split())
        print(f"invalid: {text[:500]}", file=sys.stderr)
        return 2
    print(line)
    return code


MAX_FILE_BYTES = 256 << 20
MAX_DEPTH = 64  # a certificate nests about 12 deep; a split tree adds 2 per split
MAX_INT = 1 << 53  # an int in a certificate or report (indices, offsets, counts, exponents, bases)


def _reject_constant(name):
    raise Invalid(f"{name} is not a number JSON holds (NaN and Infinity are refused)")


def _finite_float(text):
    x = float(text)
    if not math.isfinite(x):
        raise Invalid(f"the number {_short(text)} overflows a float")
    return x


def load(path: str):
    """FILE's JSON, refusing (Invalid) what no certificate holds: NaN or Infinity, a float out of range,
    an int of more than 4300 digits, nesting deeper than Python's reader (a deeper nesting than MAX_DEPTH
    is refused by `sane`), a file over 256 MiB, text that is not UTF-8."""
    import os

    if os.path.isfile(path) and os.path.getsize(path) > MAX_FILE_BYTES:
        raise Invalid(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB: no certificate is")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise Invalid(f"{path} nests deeper than any certificate (at most {MAX_DEPTH} levels)") from None
    except UnicodeDecodeError:
        raise Invalid(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise Invalid(f"{path} is not JSON: {exc}") from None
    except ValueError as exc:  # an int past Python's digit limit
        raise Invalid(f"{path} holds a number no certificate holds: {exc}") from None


def sane(data) -> None:
    """Every value is plain JSON of bounded size: nesting at most MAX_DEPTH, ints at most 2^53 in absolute
    value, finite floats, string keys (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise Invalid(f"the JSON nests deeper than any certificate (at most {MAX_DEPTH} levels)")
        if isinstance(x, dict):
            for k, v in x.items():
                if not isinstance(k, str):
                    raise Invalid(f"a JSON key {_short(k)} is not a string")
                stack.append((v, depth + 1))
        elif isinstance(x, list):
            stack.extend((v, depth + 1) for v in x)
        elif isinstance(x, bool) or x is None or isinstance(x, str):
            pass
        elif isinstance(x, int):
            if abs(x) > MAX_INT:
                raise Invalid(f"the int {_short(x)} is larger than any a certificate holds (2^53)")
        elif isinstance(x, float):
            if not math.isfinite(x):
                raise Invalid(f"the number {x!r} is not finite")
        else:
            raise Invalid(f"a {type(x).__name__} is not JSON data")


REPORT_KEYS = ("all_sizes", "base_cases", "certificate", "claim", "command", "content_hash", "evaluating_seconds",
               "evidence_margin", "failure", "family", "finite_only", "instance", "margin", "margin_note", "method", "readout",
               "reason", "rests_on", "seconds", "steps", "task", "theorem", "variant", "verdict")
CERT_KEYS = {
    "lumped": ("format", "version", "task", "variant", "params", "fixed", "points", "claim", "margin", "content_hash",
               "value"),
    "every-hops": ("format", "version", "kind", "every", "task", "variant", "params", "fixed", "points", "claim",
                   "margin", "content_hash", "value"),
    "lemma4": ("format", "version", "kind", "task", "variant", "params", "rules", "claim", "margin", "content_hash",
               "value"),
    "count": ("format", "version", "kind", "task", "variant", "p", "params", "fixed", "cases", "claim", "margin",
              "content_hash", "value"),
}
POINT_KEYS = ("representative", "H0", "W_O", "classes", "cols", "rows", "layers", "last", "model_sets", "sorts", "tree",
              "label", "start", "next")
TREE_KEYS = ("offsets", "free", "margins", "split", "at", "children")


def check_fields(data, cert: dict) -> None:
    """Every object the checker reads has only fields it knows (an unknown field is refused, never
    ignored); the value's fields are checked where it is read."""
    if data is not cert:
        _keys(data, REPORT_KEYS, "the report", required=("certificate",))
    kind = cert.get("kind") or "lumped"
    if kind not in CERT_KEYS:
        raise Invalid(f"unknown certificate kind {_short(kind)}")
    _keys(cert, CERT_KEYS[kind], "the certificate", required=())  # a missing field is refused where it is read
    params = cert.get("params")
    if not isinstance(params, list):
        raise Invalid("the certificate's params are not a list")
    for prm in params:
        _keys(prm, ("name", "base", "after"), "a parameter", required=("name", "base"))
        if not isinstance(prm["name"], str) or isinstance(prm["base"], bool) or not isinstance(prm["base"], int) or not (
                0 <= prm["base"] <= 64) or not (prm.get("after") is None or isinstance(prm["after"], str)):
            raise Invalid(f"the parameter {_short(prm)} is not a name, a base from 0 to 64 and an earlier parameter")
    if kind == "every-hops":
        _keys(cert["every"], ("name", "base"), "every")
    fixed = cert.get("fixed")
    if fixed is not None:
        if not isinstance(fixed, dict):
            raise Invalid("fixed is not an object")
        for k, v in fixed.items():
            top = 10 ** 4 if k == "p" else 64  # a count certificate holds p + 1 cases of p rules; k, l, hops: small
            if not (k == "query" and isinstance(v, str)) and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top):
                raise Invalid(f"the fixed size {k} = {_short(v)} is not an int from 1 to {top}")
    if kind in ("lumped", "every-hops"):
        if not isinstance(cert.get("points"), list) or not cert["points"]:
            raise Invalid("the certificate has no representatives")
        for pt in cert["points"]:
            _keys(pt, POINT_KEYS, "a representative", required=())
            msets = pt.get("model_sets", {})
            if not isinstance(msets, dict):
                raise Invalid("model_sets is not an object")
            for S, entry in msets.items():
                _keys(entry, ("size", "parts"), f"model set {_short(S)}")
            for layer in pt.get("layers", []) if isinstance(pt.get("layers", []), list) else [None]:
                if not isinstance(layer, list):
                    raise Invalid("a representative's layer is not a list of heads")
                for hd in layer:
                    _keys(hd, ("W_QK", "W_V"), "a head")
            nodes = [pt["tree"]] if "tree" in pt else []
            while nodes:
                node = nodes.pop()
                _keys(node, TREE_KEYS, "a region of the split tree",
                      required=("offsets", "free") + (("split", "at", "children") if isinstance(node, dict) and "split" in node
                                                      else ()))
                if "split" in node:
                    if not isinstance(node["children"], list):
                        raise Invalid("a split's children are not a list")
                    nodes.extend(node["children"])
                elif "margins" in node:  # an every-hops leaf has none: its margins are decided hop after hop
                    margins = node["margins"]
                    if not isinstance(margins, dict):
                        raise Invalid("a region's margins are not an object")
                    for name, m in margins.items():
                        _keys(m, ("value", "text", "exists"), f"the margin against {_short(name)}", required=("value",))


def certificate_of(data):
    """The certificate object of a report (its "certificate") or the certificate itself."""
    cert = data.get("certificate", data) if isinstance(data, dict) else None
    if not isinstance(cert, dict) or cert.get("format") != "depthcert.all-sizes" or cert.get("version") != 1:
        raise Invalid("not a depthcert.all-sizes version 1 certificate")
    return cert


def _check_variant(cert: dict, data) -> None:
    """The variant is one of the task's with a proof for every size, and the report's (a family's
    certificate names the variant "family"; which tables it is, the content hash binds)."""
    task = cert.get("task")
    if cert.get("variant") not in VARIANTS.get(task, set()) | {"family"}:
        raise Invalid(f"variant {cert.get('variant')!r} is not a variant of task {task!r} with a proof for every size "
                      f"({', '.join(sorted(VARIANTS.get(task, ()))) or 'none'})")
    if cert.get("kind") == "every-hops" and (task, cert.get("variant")) != ("multihop", "linear"):
        raise Invalid(f"an every-hops certificate is multi-hop linear's (one hop layer repeated hops times), not "
                      f"{task} {cert.get('variant')}'s")
    if data is not cert and data.get("variant") not in (None, cert["variant"]) and not str(
            data.get("variant")).startswith("family "):
        raise Invalid(f"the report's variant {data.get('variant')!r} is not the certificate's {cert['variant']!r}")


def check_data(data) -> tuple[int, str]:
    """(exit code 0 valid / 1 a margin not > 0, the line to print) for a report or certificate;
    raises Invalid (exit 2) when it is malformed, inconsistent or not re-derivable."""
    sane(data)
    cert = certificate_of(data)
    check_fields(data, cert)
    out = _check_data(data, cert)
    if data is not cert:
        for key in ("content_hash", "task"):  # the report's words are the certificate's
            if data.get(key) is not None and data[key] != cert.get(key):
                raise Invalid(f"the report's {key} {_short(data[key])} is not the certificate's {_short(cert.get(key))}")
        fam = data.get("family")
        if fam is not None and (not isinstance(fam, dict) or fam.get("content_hash") != cert.get("content_hash")):
            raise Invalid("the report's family names another content hash than the certificate's")
    return out


def _check_data(data, cert: dict) -> tuple[int, str]:
    if cert.get("kind") in ("count", "lemma4"):
        _check_variant(cert, data)
    if cert.get("kind") == "count":
        failed, margin = check_count(cert, data)
        head = f"{cert['task']} count" + (f" at p = {cert['p']}" if cert["task"] != "parity" else "")
        if failed:
            return 1, f"{head}: {_n(len(failed), 'condition')} of the count derivation fail: " + "; ".join(failed[:5])
        scale = max([abs(_q(c)) for case in cert["cases"] for k in ("u", "b") for t in case["rules"][k] for _, c in t]
                    or [Fraction(0)])
        bound = (f"closed value {check_hash(cert)} (its tables re-hashed; every rule read from them)")
        return 0, (f"{head}: valid; every condition of the count derivation re-decided from the builder's rules in "
                   f"{len(cert['cases'])} key cases (j = 0 and each residue of j mod p), labels by the rule "
                   "(the number of 1s mod p) in the second differences, the margin re-derived; claim re-derived; "
                   f"every margin > 0 for all n >= 1; minimum margin {margin} (normalized "
                   f"{normalized(margin, scale or None)}: margin / largest |read-out entry|); {bound}")
    if cert.get("kind") == "lemma4":
        h = check_hash(cert)
        failed, margin = check_lemma4(cert, data)
        if failed:
            return 1, f"sc {cert['variant']}: {_n(len(failed), 'condition')} of the Lemma 4 derivation fail: " + "; ".join(failed)
        w = Poly.parse(cert["rules"]["w"], 3)
        scale = abs(w.const_term()) if not w.variables() else None
        return 0, (f"sc {cert['variant']}: valid; every condition of the Lemma 4 derivation re-decided from the "
                   "builder's rules (coefficient test); claim and margin re-derived; every margin > 0 for all "
                   f"L >= 1, M >= 1; minimum margin {margin} (normalized {normalized(margin, scale)}: margin / "
                   f"|read-out weight|); closed value {h} (its tables re-hashed; every rule read from them)")
    params = [(p["name"], int(p["base"]), p.get("after")) for p in cert["params"]]
    ctx = Ctx(params)
    leaves, failures, margins = [], [], []
    rederive(cert, ctx, data)
    _check_variant(cert, data)
    for pt in cert["points"]:
        failures += check_point(pt, ctx, leaves, margins)
    if not failures:  # a failing margin is reported as such (exit 1) before the task side and the binding
        side, _ = task_side(cert, ctx.nv)
        h = check_binding(cert, ctx)
    if any(m is None for m in margins):
        margin = None  # a margin that depends on the sizes: no single number re-derived
    else:
        margin = str(min(margins)) if margins else None
    for where, obj in (("certificate", cert), ("report", data if data is not cert else {})):
        if "margin" in obj and not failures and _margin_text(obj["margin"]) != margin:
            raise Invalid(f"the {where}'s margin {obj['margin']!r} is not the one re-derived: "
                          f"{margin if margin is not None else 'none (a margin depends on the sizes)'}")
    want_status = "partial" if cert.get("fixed") else "proven"  # fixed structural sizes stay finite-only
    if data is not cert and not failures and _verdict(data) not in (want_status, None):
        raise Invalid(f"the report's verdict {_verdict(data)!r} does not match a valid proof")
    head = f"{cert['task']} {cert['variant']}" + (f" at {cert['fixed']}" if cert.get("fixed") else "")
    if failures:
        rep, name, off, fr, text, s = failures[0]
        return 1, (f"{head}: {len(failures)} margin{'s' if len(failures) != 1 else ''} not > 0; first: representative "
                   f"{rep}, label - {name} = {text} ({s}) on region offsets {off} free {fr}")
    scale = readout_scale(cert["value"]["W_O"])
    return 0, (f"{head}: valid; {_n(len(cert['points']), 'representative')}, {_n(len(leaves), 'leaf region')}, every "
               "ReLU sign and every margin re-decided"
               + (f" ({_n(sum(leaves), '(stream, label) pair')}, hop after hop until each repeats)" if _every(cert) else "")
               + f"; orbit identity, set sizes and claim re-derived; {side}; every table is the closed value {h} "
               "(re-hashed) split by the point's parts; every margin > 0 for all "
               + ", ".join(_every(cert) + [_describe(*p) for p in params]) + f"; minimum margin {margin} (normalized "
               f"{normalized(margin, scale)}: margin / largest |W_O entry|)")


if __name__ == "__main__":
    sys.exit(main())
