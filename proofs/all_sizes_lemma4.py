"""Theorem 1 for every size, from the builder run with symbolic L, M and a generic head index h.

`constructions.build` on the symbolic sc task returns the builder's `Lemma4` object
(constructions/memorization.py): the copy heads as the builder's own function of h, the cancel
head, the read-out template, every index and weight a polynomial in h, L, M (d = M + 1 token rows,
n = L + 1 positions).  No weight is read at a sample size.  The derivation, for every sequence x
(input column j = e_{x_j} + e_{d + j}, the layer averages its m heads):

  copy head h: W_QK one entry a_h at (position j_h, position q_h); with q_h = n - 1 and a_h > 0 the
      last column attends to key j_h only, with weight a_h; W_V = s_h (rows o_h.. <- token block)
      adds (a_h s_h / m) e_{o_h + x_{j_h}}
  cancel head: W_QK = b I on positions, W_V = c I: with b > 0 it adds (b c / m) h_last, and
      m + b c = 0 removes the residual
  so with count = L, j_h = h, o_0 = 0, o_{h+1} - o_h = d, o_{L-1} + d <= d':
      h_last = sum_{h<L} g e_{o_h + x_h},  g = a s / m  (the concatenated one-hots, scaled)
  read-out: the class of s has w_h at row o'_h + s_h; with o'_h = o_h its logit is
      sum_h g w [x_h = s_h], so label - other = g w #{h : x_h != s_h} >= g w,
      with equality at a competitor differing in one position (every full dataset with M >= 2).

Every condition is decided over the range by the coefficient test of constructions/indexed.py; a
condition that fails or is undecided is evaluated at small sizes to find the smallest failing one.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import sympy as sp

from depthcert.constructions.head_family import Copy, Entry, Scaled
from depthcert.constructions.indexed import Size
from depthcert.proofs.all_sizes_families import NotAFamily


@dataclass(frozen=True)
class Condition:
    text: str
    expr: object  # Size or number
    op: str  # "> 0" | "== 0" | ">= 0"

    def decided(self):
        """True / False over the whole range, or None (undecided)."""
        if not isinstance(self.expr, Size):
            v = Fraction(self.expr)
            return _holds(v, self.op)
        s = self.expr.range.sign(self.expr.terms)
        table = {"> 0": {"pos": True, "zero": False, "neg": False, "nonpos": False},
                 "== 0": {"zero": True, "pos": False, "neg": False},
                 ">= 0": {"pos": True, "zero": True, "nonneg": True, "neg": False}}[self.op]
        return table.get(s)

    def at(self, values: dict) -> bool:
        v = self.expr.at(values) if isinstance(self.expr, Size) else Fraction(self.expr)
        return _holds(v, self.op)


def _holds(v: Fraction, op: str) -> bool:
    return v > 0 if op == "> 0" else v == 0 if op == "== 0" else v >= 0


def _free_of_h(v) -> bool:
    if not isinstance(v, Size):
        return True
    i = v.range.names.index("h")
    return all(m[i] == 0 for m in v.terms)


def to_sympy(v, names=("h", "L", "M")) -> sp.Expr:
    if not isinstance(v, Size):
        f = Fraction(v)
        return sp.Rational(f.numerator, f.denominator)
    syms = [sp.Symbol(n) for n in v.range.names]
    return sp.expand(sum(sp.Rational(c.numerator, c.denominator) * sp.Mul(*[s ** e for s, e in zip(syms, m)])
                         for m, c in v.terms.items()))


@dataclass(frozen=True)
class Lemma4Derivation:
    conditions: tuple[Condition, ...]
    margin: sp.Expr  # g w, in L and M
    shapes: tuple[str, ...]  # what the builder's rules were read as
    rules: dict  # name -> Size or number: the builder's rules the derivation reads (the certificate's)

    def failing(self):
        return [c for c in self.conditions if c.decided() is not True]


def derive(spec, task) -> Lemma4Derivation:
    """The derivation's conditions for the builder's Lemma4 object at symbolic sizes (NotAFamily when
    a head is not of the two shapes; SizeBranch propagates from the builder's functions)."""
    h, L = task.h, task.L
    d, n = spec.d, spec.n
    m = spec.copies.count + len(spec.last)
    copy = spec.copies.head(h)
    qk = [r for r in copy.qk if not (isinstance(r, Entry) and not isinstance(r.value, Size) and r.value == 0)]
    if len(qk) != 1 or not isinstance(qk[0], Entry) or (qk[0].row_block, qk[0].col_block) != ("position", "position"):
        raise NotAFamily(f"copy head h: W_QK is {qk!r}, not one entry of the (position, position) block")
    e = qk[0]
    if len(copy.v) != 1 or not isinstance(copy.v[0], Copy) or copy.v[0].src_block != "token":
        raise NotAFamily(f"copy head h: W_V is {copy.v!r}, not one copy of the token block")
    a, s, o = e.value, copy.v[0].value, copy.v[0].dst
    if len(spec.last) != 1:
        raise NotAFamily(f"{len(spec.last)} heads after the copy heads, not the one cancel head")
    cancel = spec.last[0]
    if (len(cancel.qk) != 1 or not isinstance(cancel.qk[0], Scaled) or cancel.qk[0].block != "position"
            or len(cancel.v) != 1 or not isinstance(cancel.v[0], Scaled) or cancel.v[0].block is not None):
        raise NotAFamily("the last head is not b I on the positions with W_V = c I")
    b, c = cancel.qk[0].value, cancel.v[0].value
    o0 = spec.copies.head(0).v[0].dst
    o_next = spec.copies.head(h + 1).v[0].dst
    o_last = spec.copies.head(L - 1).v[0].dst
    tpl = spec.readout
    if tpl is None:
        raise NotAFamily("no read-out stated for every size")
    off, w = tpl.at(h)
    conds = (
        Condition("the copy heads are one per position before the CLS: count = L", spec.copies.count - L, "== 0"),
        Condition("copy head h attends from the last position: q_h = n - 1", e.col - (n - 1), "== 0"),
        Condition("copy head h attends to position h: j_h = h", e.row - h, "== 0"),
        Condition("its score is positive (relu keeps it): a_h > 0", a, "> 0"),
        Condition("cancel score b > 0 (relu keeps it)", b, "> 0"),
        Condition("cancel head removes the residual: m + b c = 0 (m = L + 1 heads)", m + b * c, "== 0"),
        Condition("slots start at row 0: o_0 = 0", o0, "== 0"),
        Condition("slots do not overlap: o_{h+1} - o_h = d", o_next - o - d, "== 0"),
        Condition("the last slot fits: o_{L-1} + d <= d'", spec.dim - o_last - d, ">= 0"),
        Condition("the read-out covers every slot: count = L", tpl.count - L, "== 0"),
        Condition("the read-out reads slot h: o'_h = o_h", off - o, "== 0"),
        Condition("each agreeing position raises the logit: a_h s_h w_h > 0", a * s * w, "> 0"),
    )
    if not (_free_of_h(a * s * w)):
        raise NotAFamily(f"the per-position weight a_h s_h w_h = {a * s * w} depends on the head index h")
    margin = sp.simplify(to_sympy(a * s * w) / to_sympy(m))
    shapes = (f"copy head h (h < L): W_QK = {to_sympy(a)} at (position {to_sympy(e.row)}, position {to_sympy(e.col)}), "
              f"W_V = {to_sympy(s)} (rows {to_sympy(o)}.. <- token block)",
              f"cancel head: W_QK = {to_sympy(b)} I on the positions, W_V = {to_sympy(c)} I",
              f"read-out: the class of s has {to_sympy(w)} at row {to_sympy(off)} + s_h for every h < L",
              f"layer: m = {to_sympy(m)} heads averaged, d' = {to_sympy(spec.dim)} rows (d = M + 1, n = L + 1)")
    rules = {"count": spec.copies.count, "q": e.col, "j": e.row, "a": a, "s": s, "o": o, "b": b, "c": c, "m": m,
             "dim": spec.dim, "read_count": tpl.count, "read_offset": off, "w": w}
    return Lemma4Derivation(conds, margin, shapes, rules)


def poly_terms(v, nv: int = 3) -> list:
    """A rule as the certificate's polynomial: [[exponents], "coefficient"] per term."""
    if isinstance(v, Size):
        return [[list(m), str(c)] for m, c in sorted(v.terms.items())]
    f = Fraction(v)
    return [[[0] * nv, str(f)]] if f else []


def smallest_failure(derivation: Lemma4Derivation, max_L: int = 12, max_M: int = 6):
    """The smallest L (then M, from 2, M = 1 last) where a condition fails at some head h < L, or None."""
    for L in range(1, max_L + 1):
        for M in list(range(2, max_M + 1)) + [1]:
            for h in range(L):
                bad = [c for c in derivation.conditions if not c.at({"h": h, "L": L, "M": M})]
                if bad:
                    return {"L": L, "M": M}, h, bad[0]
    return None


class _Family:
    """A ClosedHeadFamily read as the derivation reads a Lemma4 object: every field a Size over the
    value's range (h, L, M), copy head x's rules the value's polynomials with h := x."""

    def __init__(self, value):
        from depthcert.constructions.closed import validate_family
        from depthcert.constructions.head_family import HeadFamily, Template

        validate_family(value)
        self.range = value.range
        self.sym = self.range.symbols()
        self.d, self.n, self.dim = self._at(value.d), self._at(value.n), self._at(value.dim)
        self.copies = HeadFamily(self._at(value.count), lambda x: self._head(value.copy, x))
        self.last = tuple(self._head(hr, 0) for hr in value.last)
        self.readout = Template(self._at(value.read_count),
                                lambda x: (self._at(value.read_offset, x), self._at(value.read_weight, x)))

    def _at(self, p, x=None):
        """The polynomial p(h, L, M) with h := x (x None: the symbol h)."""
        x = self.sym["h"] if x is None else x
        out = Fraction(0)
        for (eh, eL, eM), c in p:
            out = out + c * (x ** eh) * (self.sym["L"] ** eL) * (self.sym["M"] ** eM)
        return out

    def _head(self, hr, x):
        from depthcert.constructions.head_family import Copy, Entry, HeadRules, Scaled

        def rule(r):
            if r.kind == "entry":
                return Entry(r.src, self._at(r.row, x), r.col_block, self._at(r.col, x), self._at(r.value, x))
            if r.kind == "copy":
                return Copy(self._at(r.row, x), r.src, self._at(r.value, x))
            return Scaled(r.src, self._at(r.value, x))

        return HeadRules(tuple(rule(r) for r in hr.qk), tuple(rule(r) for r in hr.v))


def derive_value(value) -> Lemma4Derivation:
    """The derivation for a closed head family (constructions/closed.ClosedHeadFamily): every field
    of the value is read (the copy head at h, 0, h + 1 and L - 1; every last head; the read-out)."""
    from depthcert.constructions.indexed import SymbolicTask

    fam = _Family(value)
    task = SymbolicTask("sc", fam.range)
    task.sizes = fam.sym
    return derive(fam, task)
