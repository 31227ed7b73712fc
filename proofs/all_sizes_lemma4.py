"""Theorem 1 for every size: the Lemma 4 layer maps every sequence to [x_0; ...; x_{L-1}; 0].

The layer of constructions/memorization.py (paper Lemma 4) has L + 1 heads, one more for every
position, so its family is read head by head rather than lumped.  At every size built, each head
is recognised exactly as one of two shapes, with numbers read from the weights:

  copy head h (h < L):  W_QK has a single non-zero entry a_h at (position j_h, position q_h);
                        W_V is s_h times the identity from the token block into the rows
                        o_h .. o_h + d - 1 (d = M + 1 token rows, the CLS included), else 0;
  cancel head (h = L):  W_QK = b * I on the position block, else 0;  W_V = c * I (all rows).

The numbers are then fitted exactly (sympy, linear in the monomials 1, h, L, M, hL, hM, LM) and
every fitted formula is checked on every head of every size built.  With the formulas, the
last column of the layer is derived symbolically (n = L + 1 heads averaged, input column j
= e_{x_j} + e_{d + j}): the scores read only position rows, so a_h [j = j_h] [L = q_h] and
b [j = L]; the identities q_h = L, j_h = h, a_h s_h / n = 1, 1 + b c / n = 0 and o_{h+1} - o_h = d
(sympy) give  h_L^(1) = sum_{h < L} e_{o_h + x_h}, with o_h = h d: the concatenation of the token
one-hots.  Two distinct sequences agree in a <= L - 1 slots, so their Gram determinant is
L^2 - a^2 >= 2L - 1 > 0: the vectors are pairwise non-parallel, which is Lemma 3's hypothesis,
and Lemma 3 (constructions/classifier.py follows its proof) gives the classifier.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy as sp

from depthcert.proofs.all_sizes_families import NotAFamily

L_, M_, h_ = sp.symbols("L M h", integer=True, nonnegative=True)
MONOMIALS = (sp.Integer(1), h_, L_, M_, h_ * L_, h_ * M_, L_ * M_)
SIZE_MONOMIALS = (sp.Integer(1), L_, M_, L_ * M_)  # the cancel head is h = L: fit in L, M only


@dataclass(frozen=True)
class HeadShape:
    size: tuple[int, int]  # (L, M)
    h: int
    kind: str  # copy | cancel
    numbers: dict  # name -> Fraction


def recognise(model, L: int, M: int) -> list[HeadShape]:
    """Each head of the built layer as a copy or cancel shape (exact), or NotAFamily."""
    d, n = M + 1, L + 1
    if model.n_layers != 1 or len(model.layers[0]) != n:
        raise NotAFamily(f"at L={L}, M={M}: expected 1 layer of L+1 = {n} heads, got heads {list(model.heads)}")
    if not model.is_plain:
        raise NotAFamily(f"at L={L}, M={M}: not the paper's model class ({model.kinds()})")
    dim = model.dim
    out = []
    for h, head in enumerate(model.layers[0]):
        qk = {(r, c): Fraction(v) for (r, c), v in _nonzero(head.W_QK)}
        vv = {(r, c): Fraction(v) for (r, c), v in _nonzero(head.W_V)}
        where = f"at L={L}, M={M}, head {h}"
        if any(not (d <= r < d + n and d <= c < d + n) for r, c in qk):
            raise NotAFamily(f"{where}: W_QK reads rows outside the position block")
        if h < L:
            if len(qk) != 1:
                raise NotAFamily(f"{where}: a copy head's W_QK has {len(qk)} non-zero entries, not 1")
            (r, c), a = next(iter(qk.items()))
            rows = sorted(r2 for r2, _ in vv)
            vals = set(vv.values())
            if len(vv) != d or len(vals) != 1 or any(c2 != r2 - rows[0] for r2, c2 in vv) or rows != list(range(rows[0], rows[0] + d)):
                raise NotAFamily(f"{where}: W_V is not s * (d rows <- token block)")
            out.append(HeadShape((L, M), h, "copy", {"a": a, "j": Fraction(r - d), "q": Fraction(c - d),
                                                       "s": vals.pop(), "o": Fraction(rows[0])}))
        else:
            diag = {r for (r, c) in qk if r == c}
            vals = set(qk.values())
            if len(qk) != n or diag != set(range(d, d + n)) or len(vals) != 1:
                raise NotAFamily(f"{where}: the cancel head's W_QK is not b * I on the position block")
            vvals = set(vv.values())
            if len(vv) != dim or any(r != c for r, c in vv) or len(vvals) != 1:
                raise NotAFamily(f"{where}: the cancel head's W_V is not c * I")
            out.append(HeadShape((L, M), h, "cancel", {"b": vals.pop(), "c": vvals.pop()}))
    return out


def _nonzero(W):
    for (r, c), v in np.ndenumerate(W):
        if v != 0:
            yield (r, c), v


def fit(shapes: list[HeadShape], kind: str, name: str, monomials=MONOMIALS) -> sp.Expr:
    """The number `name` of every `kind` head as one formula in the monomials (exact linear solve,
    then checked on every head)."""
    data = [(s.size[0], s.size[1], s.h, s.numbers[name]) for s in shapes if s.kind == kind]
    cs = sp.symbols(f"c0:{len(monomials)}")
    expr = sum(c * m for c, m in zip(cs, monomials))
    eqs = [expr.subs({L_: L, M_: M, h_: h}) - sp.Rational(v.numerator, v.denominator) for L, M, h, v in data]
    sol = sp.linsolve(eqs, cs)
    if not sol:
        raise NotAFamily(f"the {kind} heads' {name} is not one formula in {', '.join(map(str, monomials))} "
                         "across the sizes built")
    (values,) = sol
    if any(v.free_symbols for v in values):  # the sizes built must determine the formula
        raise NotAFamily(f"the {kind} heads' {name} is not determined by the sizes built")
    formula = sp.expand(sum(v * m for v, m in zip(values, monomials)))
    for L, M, h, v in data:
        if formula.subs({L_: L, M_: M, h_: h}) != sp.Rational(v.numerator, v.denominator):
            raise NotAFamily(f"the {kind} heads' {name} fits no single formula")
    return formula


@dataclass(frozen=True)
class Lemma4Proof:
    formulas: dict  # name -> sympy expression
    identities: tuple[tuple[str, bool], ...]
    sizes: tuple[tuple[int, int], ...]
    heads_checked: int

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.identities)


def prove_layer(built: dict) -> Lemma4Proof:
    """built: (L, M) -> model.  Recognise, fit, and check the identities of the derivation."""
    shapes = []
    for (L, M), model in sorted(built.items()):
        shapes += recognise(model, L, M)
    f = {}
    for name in ("a", "j", "q", "s", "o"):
        f[name] = fit(shapes, "copy", name)
    for name in ("b", "c"):
        f[name] = fit(shapes, "cancel", name, SIZE_MONOMIALS)
    n, d = L_ + 1, M_ + 1
    ids = (
        ("copy head h attends from the last position: q_h = L", sp.simplify(f["q"] - L_) == 0),
        ("copy head h attends to position h: j_h = h", sp.simplify(f["j"] - h_) == 0),
        ("its score is a positive constant: a_h > 0", bool(f["a"].is_number and f["a"] > 0)),
        ("copy weight a_h s_h / n = 1", sp.simplify(f["a"] * f["s"] / n - 1) == 0),
        ("cancel head: 1 + b c / n = 0 (the residual h_L is removed)", sp.simplify(1 + f["b"] * f["c"] / n) == 0),
        ("cancel score b > 0 (relu keeps it)", bool(f["b"].is_number and f["b"] > 0)),
        ("slots do not overlap: o_{h+1} - o_h = d, o_0 = 0", sp.simplify(f["o"].subs(h_, h_ + 1) - f["o"] - d) == 0
         and sp.simplify(f["o"].subs(h_, 0)) == 0),
        ("Lemma 3 hypothesis: L^2 - (L-1)^2 = 2L - 1 > 0 (Gram determinant of two distinct sequences)",
         sp.expand(L_**2 - (L_ - 1) ** 2 - (2 * L_ - 1)) == 0),
    )
    return Lemma4Proof(f, ids, tuple(sorted(built)), len(shapes))
