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

What it takes on trust (checked by the producer, not here): that the tables are those of the
construction at every size (read and merged from built models), and that the representatives'
orbits cover the dataset (a sympy count identity).  See docs/all-sizes.md.
"""
from __future__ import annotations

import json
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
        for exps, c in terms:
            if not isinstance(exps, list) or len(exps) != nv or not all(isinstance(e, int) and e >= 0 for e in exps):
                raise Invalid(f"bad monomial {exps!r}")
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


def _q(text) -> Fraction:
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise Invalid(f"not an exact number: {text!r}")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise Invalid(f"not an exact number: {text!r}") from None


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


def check_point(pt: dict, ctx: Ctx, log) -> list:
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
    label = [c[0] for c in classes].index(pt["label"])
    failures = []

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
        H = H0
        for layer in layers:
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
            H = {k: v for k, v in H.items() if not v.is_zero()}
        logits = matmul(W_O, H, classes, rows, cols, sizes, nv)
        per_class = {r: v for (r, c, p), v in logits.items() if c == last}
        zero = Poly({}, nv)
        got = {}
        for r, (name, sort) in enumerate(classes):
            if r == label:
                continue
            got[name] = (per_class.get(label, zero) - per_class.get(r, zero),
                         [sizes[sort] - Poly.const(1, nv)] if sort is not None else [])
        want = node["margins"]
        if set(want) != set(got):
            raise Invalid("the margins name different classes")
        for name, (poly, conds) in got.items():
            # compared on the region (a fixed parameter is substituted): an entry that cannot exist
            # there contributes only through counts that vanish at the fixed value
            if ctx.substitute(Poly.parse(want[name]["value"], nv), offsets, free) != ctx.substitute(poly, offsets, free):
                raise Invalid(f"margin against {name} differs from the certificate's on {offsets}/{free}")
            s = ctx.sign(poly, offsets, free, conds)
            if s not in ("pos", "absent"):
                failures.append((pt["representative"], name, list(offsets), list(free), want[name]["text"], s))
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
    run(root, root["offsets"], root["free"])
    return failures


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


def _main(argv) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: check_all_sizes.py FILE", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as fh:
            data = json.load(fh)
        cert = data.get("certificate", data) if isinstance(data, dict) else None
        if not isinstance(cert, dict) or cert.get("format") != "depthcert.all-sizes" or cert.get("version") != 1:
            raise Invalid("not a depthcert.all-sizes version 1 certificate")
        params = [(p["name"], int(p["base"]), p.get("after")) for p in cert["params"]]
        ctx = Ctx(params)
        leaves, failures = [], []
        for pt in cert["points"]:
            failures += check_point(pt, ctx, leaves)
    except (OSError, ValueError, KeyError, TypeError, IndexError, Invalid) as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 2
    head = f"{cert['task']} {cert['variant']}" + (f" at {cert['fixed']}" if cert.get("fixed") else "")
    if failures:
        rep, name, off, fr, text, s = failures[0]
        print(f"{head}: {len(failures)} margin{'s' if len(failures) != 1 else ''} not > 0; first: representative {rep}, label - {name} = {text} "
              f"({s}) on region offsets {off} free {fr}")
        return 1
    print(f"{head}: valid; {_n(len(cert['points']), 'representative')}, {_n(len(leaves), 'leaf region')}, every ReLU sign "
          f"and every margin re-decided; every margin > 0 for all "
          + ", ".join(f"{n} >= {a + (f' + {b}' if b else '') if a else b}" for n, b, a in params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
