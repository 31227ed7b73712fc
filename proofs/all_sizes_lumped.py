"""Lumped evaluation: one exact forward pass that holds for every size of a family at once.

Claim.  Let a finite group G = Sym(S_1) x ... x Sym(S_r) act on the rows of the residual stream,
on the positions and on the classes, where each row (position, class) is either fixed by G or is
one member of a *family* indexed by one of the sets S_i (a row of family F for element e of S_i
goes to the row of F for sigma(e)).  A matrix W between two such index sets is G-invariant iff
W[(F, e), (G, e')] depends only on (F, G) and, when F and G are indexed by the same set, on
whether e = e'.  So an invariant matrix is a finite table ("lumped matrix"): per pair of families
one value, or two ('eq', 'ne').  If H0 of a point X and every weight matrix are invariant under
the stabilizer of X, every H_l is (induction on layers, as in checkers/symmetry.py), and the
forward pass of X can be run on the tables:

    (A B)[(F, e), (H, e'')] = sum over families G of the middle index, and over the |S| elements
    e' of G's set: the terms split by how e' relates to e and e'' (equal to one of them, or to
    neither), and each case occurs a *count* of times: 1, |S| - 1 or |S| - 2.

The sizes |S_i| enter only as these counts.  Holding them as polynomials in the size parameters
(k, n_q, ...) runs the pass for every size at once: every entry of every H_l, every attention
score and every logit is a polynomial in the parameters.  ReLU needs the sign of a score: it is
decided for every parameter value of a *region* (products of integer rays and fixed values) by
one exact criterion, the coefficient test (`decide`); a score in one parameter that fails it is
split: the values below a threshold S (found from the exact real roots, sympy) become fixed
pieces and the ray from S passes the test; each piece is run again.  A lumped
entry whose family pattern cannot occur at some size (a set too small) only ever meets count
factors that vanish there, so it never leaks into an entry that exists.

Exact throughout: polynomials over QQ (sympy's sparse `ring`, python-flint ground field); no
floats anywhere.  The paper's model only (relu heads averaged per layer, no mask, no MLP).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from sympy import QQ, Poly, Symbol
from sympy.polys.rings import ring

SPLIT_LIMIT = 4000  # finite pieces a proof may split into before it gives up (undecided)


# ----------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Param:
    """A size parameter: name >= base (+ the value of an earlier parameter `after`)."""

    name: str
    base: int
    after: str | None = None  # e.g. n_q >= k: Param("n_q", 0, after="k")

    def describe(self) -> str:
        if self.after is None:
            return f"{self.name} >= {self.base}"
        return f"{self.name} >= {self.after}" + (f" + {self.base}" if self.base else "")


class Ring:
    """Polynomials over QQ in the size parameters (sympy sparse polynomials)."""

    def __init__(self, params: tuple[Param, ...]):
        self.params = params
        names = [p.name for p in params] or ["_none"]
        self.R, *gens = ring(",".join(names), QQ)
        self.gen = {p.name: g for p, g in zip(params, gens)}
        self.zero = self.R(0)
        self.one = self.R(1)

    def const(self, q) -> object:
        q = Fraction(q)
        return self.R(QQ(q.numerator, q.denominator))

    def parse(self, text: str):
        """A polynomial from its text (parameters by name): '3', 'k - 1', 'n_q - k'."""
        from sympy import sympify

        cache = self.__dict__.setdefault("_parsed", {})
        if text not in cache:
            syms = {p.name: Symbol(p.name) for p in self.params}
            cache[text] = self.R(sympify(text, locals=syms))
        return cache[text]


def to_fraction(c) -> Fraction:
    return Fraction(int(c.numerator), int(c.denominator))


def poly_text(p) -> str:
    """Readable text of a polynomial (sympy's printer); constants as ints or p/q."""
    if p.is_ground:
        q = to_fraction(p.LC) if not p.is_zero else Fraction(0)
        return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
    return str(p.as_expr())


@dataclass(frozen=True)
class Region:
    """Each parameter p = (value of p.after, or 0) + p.base + offset (+ a free integer t_p >= 0)."""

    offsets: tuple[int, ...]
    free: tuple[bool, ...]

    def describe(self, params: tuple[Param, ...]) -> str:
        parts = []
        for p, off, fr in zip(params, self.offsets, self.free):
            lo = p.base + off
            ref = p.after + (f" + {lo}" if lo else "") if p.after else str(lo)
            parts.append(f"{p.name} >= {ref}" if fr else f"{p.name} = {ref}")
        return ", ".join(parts)

    def smallest(self, params) -> dict[str, int]:
        """The parameter values at t = 0 (the region's smallest point)."""
        return self.at(params, {})

    def at(self, params, t: dict[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for p, off, fr in zip(params, self.offsets, self.free):
            v = (out[p.after] if p.after else 0) + p.base + off + (t.get(p.name, 0) if fr else 0)
            out[p.name] = v
        return out


def whole_region(params) -> Region:
    return Region(tuple(0 for _ in params), tuple(True for _ in params))


class Split(Exception):
    """A sign changes inside the region: run these pieces instead (param `var` fixed at each offset
    below `at`, and the ray from `at`)."""

    def __init__(self, pieces: list[Region], why: str, var: str = "", at: int = 0):
        super().__init__(why)
        self.pieces = pieces
        self.why = why
        self.var = var
        self.at = at


class Undecided(Exception):
    """A sign that the exact criteria cannot settle on a region (the proof stops, exit 3)."""


def substitute(ring_: Ring, poly, region: Region):
    """poly(params) -> poly(t) with every parameter replaced by its region expression; the free
    parameters' symbols now stand for the integers t_p >= 0."""
    pairs = []
    for p, off, fr in zip(ring_.params, region.offsets, region.free):
        expr = ring_.const(p.base + off)
        if p.after:
            expr = expr + _region_expr(ring_, region, p.after)
        if fr:
            expr = expr + ring_.gen[p.name]
        pairs.append((ring_.gen[p.name], expr))
    return poly.compose(pairs) if pairs else poly


def _region_expr(ring_: Ring, region: Region, name: str):
    idx = [p.name for p in ring_.params].index(name)
    p = ring_.params[idx]
    expr = ring_.const(p.base + region.offsets[idx])
    if p.after:
        expr = expr + _region_expr(ring_, region, p.after)
    if region.free[idx]:
        expr = expr + ring_.gen[name]
    return expr


@dataclass(frozen=True)
class Sign:
    """The sign of a polynomial on a region: 'pos', 'zero', 'neg', 'nonneg', 'nonpos', or
    'absent' (the entry does not exist anywhere in the region)."""

    kind: str
    how: str = ""


def _coefficient_sign(q) -> str | None:
    """Sign of q(t) for all integers t >= 0 from its coefficients alone (a sufficient test)."""
    if q.is_zero:
        return "zero"
    coeffs = [to_fraction(c) for _, c in q.terms()]
    const = to_fraction(q.coeff(1))
    if all(c >= 0 for c in coeffs):
        return "pos" if const > 0 else "nonneg"
    if all(c <= 0 for c in coeffs):
        return "neg" if const < 0 else "nonpos"
    return None


def _single_var(ring_: Ring, q) -> str | None:
    used = [name for name, g in ring_.gen.items() if q.degree(g) > 0]
    return used[0] if len(used) == 1 else None


def _threshold(ring_: Ring, q, var: str) -> int:
    """Smallest S >= 0 such that q(t + S) has all coefficients of one sign (q univariate in `var`).

    It exists: every root of q has |root| < B (Cauchy's bound), and a real polynomial whose roots
    all have negative real part has coefficients of one sign, so S = ceil(B) works; the property
    is kept by every further shift (t -> t + 1 maps non-negative coefficients to non-negative
    ones), so S is found by bisection between the largest real root (sympy, exact isolation) and
    B.  Then q has one sign on t >= S, certified by the coefficient test alone."""
    g = ring_.gen[var]
    lead = to_fraction(q.LC)
    n = q.degree(g)
    bound = 1 + max((abs(to_fraction(q.coeff(g**i)) / lead) for i in range(n)), default=Fraction(0))
    hi = math.ceil(bound) + 1
    x = Symbol(var)
    lo = 0
    for (a, b), _ in Poly(q.as_expr(), x).intervals():
        lo = max(lo, math.floor(Fraction(int(b.numerator), int(b.denominator))) + 1)

    def ok(S):
        return _coefficient_sign(q.compose([(g, g + ring_.const(S))])) is not None

    if ok(lo):
        return lo
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def decide(ring_: Ring, poly, region: Region, conditions=()) -> Sign:
    """Sign of poly on the integer points of `region` where every condition c >= 0 holds
    (conditions: polynomials; used to skip points where the entry does not exist).

    One exact criterion decides: after substituting the region (and tightening a free parameter
    by a condition in that parameter alone), a polynomial in t >= 0 with all coefficients >= 0 is
    >= 0 (> 0 with a positive constant), and symmetrically.  A polynomial in a single t that fails
    it is split (raises Split): the values t < S become fixed pieces and the ray t >= S passes
    the criterion (see _threshold).  Anything else raises Undecided.  So every sign a finished
    region uses is certified by the coefficient test, which the standalone re-checker repeats."""
    subs = [substitute(ring_, cond, region) for cond in conditions]
    if any(c.is_ground and to_fraction(c.coeff(1)) < 0 for c in subs):
        return Sign("absent")  # the entry exists nowhere in the region
    if poly.is_ground:  # a constant has its sign everywhere (the common case: no substitution needed)
        c = to_fraction(poly.coeff(1))
        return Sign("pos" if c > 0 else "neg" if c < 0 else "zero", "constant")
    q = substitute(ring_, poly, region)
    shift = {}
    for c in subs:
        if c.is_ground:
            continue
        var = _single_var(ring_, c)
        g = ring_.gen[var] if var else None
        if var is None or c.degree(g) != 1:
            continue  # deciding on a larger set is still sound
        a, b = to_fraction(c.coeff(g)), to_fraction(c.coeff(1))
        if a > 0:
            lb = math.ceil(-b / a)
            shift[var] = max(shift.get(var, 0), lb)
    if shift:
        q = q.compose([(ring_.gen[v], ring_.gen[v] + ring_.const(s)) for v, s in shift.items() if s > 0])
    s = _coefficient_sign(q)
    if s is not None:
        return Sign(s, "coefficients")
    var = _single_var(ring_, q)
    if var is None:
        raise Undecided(f"the sign of {poly_text(poly)} on {region.describe(ring_.params)} "
                        f"(as {poly_text(q)} in t >= 0) is not settled by the coefficient test")
    T = _threshold(ring_, q, var) + shift.get(var, 0)
    raise Split(split_region(ring_, region, var, T), f"{poly_text(poly)} has no one sign below {var} offset {T}",
                var, T)


def split_region(ring_: Ring, region: Region, var: str, T: int) -> list[Region]:
    """Fixed pieces for the free parameter `var` at offsets 0..T-1, and the ray from T."""
    i = [p.name for p in ring_.params].index(var)
    if T > SPLIT_LIMIT:
        raise Undecided(f"a sign changes {T} steps into {var}'s range (limit {SPLIT_LIMIT} pieces)")
    pieces = []
    for t in range(T):
        offs = list(region.offsets)
        fr = list(region.free)
        offs[i] += t
        fr[i] = False
        pieces.append(Region(tuple(offs), tuple(fr)))
    offs = list(region.offsets)
    offs[i] += T
    pieces.append(Region(tuple(offs), region.free))
    return pieces


def first_failure(ring_: Ring, poly, region: Region, conditions=()) -> dict[str, int] | None:
    """The smallest point of the region (conditions holding) where poly <= 0, or None if poly > 0
    everywhere there.  Smallest: poly constant or in one free parameter -> exact (roots); several
    parameters -> the others at their smallest values first (then it is *a* failing point)."""
    q = substitute(ring_, poly, region)
    free = [p.name for p, fr in zip(ring_.params, region.free) if fr]
    lows = {}
    for cond in conditions:
        c = substitute(ring_, cond, region)
        if c.is_ground:
            if to_fraction(c.coeff(1)) < 0:
                return None
            continue
        var = _single_var(ring_, c)
        if var is not None and c.degree(ring_.gen[var]) == 1:
            g = ring_.gen[var]
            a, b = to_fraction(c.coeff(g)), to_fraction(c.coeff(1))
            if a > 0:
                lows[var] = max(lows.get(var, 0), math.ceil(-b / a))
    # set all free parameters but one to their lowest values, search the remaining one exactly
    order = free or [None]
    for var in order:
        fixed = {v: lows.get(v, 0) for v in free if v != var}
        r = q.compose([(ring_.gen[v], ring_.const(x)) for v, x in fixed.items()]) if fixed else q
        if var is None or r.degree(ring_.gen[var]) <= 0:
            val = to_fraction(r.coeff(1))
            if val <= 0:
                t = dict(fixed)
                if var is not None:
                    t[var] = lows.get(var, 0)
                return region.at(ring_.params, t)
            continue
        lo = lows.get(var, 0)
        x = Symbol(var)
        rr = r.compose([(ring_.gen[var], ring_.gen[var] + ring_.const(lo))]) if lo else r
        P = Poly(rr.as_expr(), x)
        cands = {0}
        for (a, b), _ in P.intervals(eps=Fraction(1, 4)):
            for e in (a, b):
                e = Fraction(int(e.numerator), int(e.denominator))
                for c in (math.floor(e), math.ceil(e), math.ceil(e) + 1):
                    if c >= 0:
                        cands.add(c)
        for c in sorted(cands):
            val = to_fraction(rr.compose([(ring_.gen[var], ring_.const(c))]).coeff(1))
            if val <= 0:
                t = dict(fixed)
                t[var] = lo + c
                return region.at(ring_.params, t)
    return None


# ----------------------------------------------------------------------------- lumped matrices


@dataclass(frozen=True)
class Family:
    """A set of rows (positions, classes): one row if sort is None, else one per element of sort."""

    name: str
    sort: str | None = None


@dataclass(frozen=True)
class Space:
    families: tuple[Family, ...]

    def __post_init__(self):
        object.__setattr__(self, "_index", {f.name: i for i, f in enumerate(self.families)})

    def index(self, name: str) -> int:
        return self._index[name]

    def __len__(self):
        return len(self.families)


def patterns(a: Family, b: Family) -> tuple[str, ...]:
    return ("eq", "ne") if a.sort is not None and a.sort == b.sort else ("",)


@dataclass
class LMatrix:
    """An invariant matrix as its table: data[(row family, col family, pattern)] = polynomial
    (missing = 0).  Pattern 'eq' / 'ne' when both families are indexed by the same set, else ''."""

    rows: Space
    cols: Space
    data: dict = field(default_factory=dict)

    def get(self, r: int, c: int, pat: str, zero):
        return self.data.get((r, c, pat), zero)

    def T(self) -> "LMatrix":
        return LMatrix(self.cols, self.rows, {(c, r, p): v for (r, c, p), v in self.data.items()})

    def scaled(self, s) -> "LMatrix":
        return LMatrix(self.rows, self.cols, {key: v * s for key, v in self.data.items() if not (v * s).is_zero})

    def plus(self, other: "LMatrix") -> "LMatrix":
        out = dict(self.data)
        for key, v in other.data.items():
            w = out.get(key)
            w = v if w is None else w + v
            if w.is_zero:
                out.pop(key, None)
            else:
                out[key] = w
        return LMatrix(self.rows, self.cols, out)

    def substituted(self, ring_: Ring, values: dict[str, int]) -> "LMatrix":
        if not values:
            return self
        pairs = [(ring_.gen[n], ring_.const(v)) for n, v in values.items()]
        out = {}
        for key, v in self.data.items():
            w = v.compose(pairs)
            if not w.is_zero:
                out[key] = w
        return LMatrix(self.rows, self.cols, out)


def matmul(A: LMatrix, B: LMatrix, sizes: dict, ring_: Ring) -> LMatrix:
    """The table of A B (A.cols and B.rows are the same index set).  Counts: an element of the
    middle set that must equal a given one occurs once; one that must differ from one (two)
    given elements occurs |S| - 1 (|S| - 2) times; a free one |S| times."""
    mid = A.cols.families
    by_mid = defaultdict(list)
    for (m, c, pb), vb in B.data.items():
        by_mid[m].append((c, pb, vb))
    out: dict = defaultdict(lambda: ring_.zero)
    one = ring_.one
    for (r, m, pa), va in A.data.items():
        fr, fm = A.rows.families[r], mid[m]
        s = fm.sort
        for c, pb, vb in by_mid.get(m, ()):
            fc = B.cols.families[c]
            for pc, mult in _contributions(s, fr.sort, fc.sort, pa, pb, sizes, one):
                out[(r, c, pc)] = out[(r, c, pc)] + mult * va * vb
    return LMatrix(A.rows, B.cols, {k: v for k, v in out.items() if not v.is_zero})


def _contributions(s, sr, sc, pa, pb, sizes, one):
    pcs = ("eq", "ne") if sr is not None and sr == sc else ("",)
    if s is None:
        return [(pc, one) for pc in pcs]
    r_has, c_has = sr == s, sc == s
    n = sizes[s]
    if not r_has and not c_has:
        return [(pc, n) for pc in pcs]
    if r_has and not c_has:
        return [(pc, one if pa == "eq" else n - 1) for pc in pcs]
    if c_has and not r_has:
        return [(pc, one if pb == "eq" else n - 1) for pc in pcs]
    if pa == "eq" and pb == "eq":
        return [("eq", one)]
    if pa == "ne" and pb == "ne":
        return [("eq", n - 1), ("ne", n - 2)]
    return [("ne", one)]  # (eq, ne): the middle element is the row's; (ne, eq): the column's


def existence(fa: Family, fb: Family, pat: str, sizes: dict) -> list:
    """Conditions (polynomials >= 0) for an entry of pattern `pat` between fa and fb to exist."""
    need: dict[str, int] = {}
    for f in (fa, fb):
        if f.sort is not None:
            need[f.sort] = need.get(f.sort, 0) + 1
    if pat == "eq":
        need[fa.sort] = 1
    return [sizes[s] - n for s, n in need.items()]


# ----------------------------------------------------------------------------- the forward pass


@dataclass(frozen=True)
class LHead:
    W_QK: LMatrix  # rows x rows
    W_V: LMatrix


@dataclass(frozen=True)
class LumpedModel:
    """A model as tables: layers of heads (relu, averaged), W_O, and one point's H0."""

    rows: Space
    cols: Space  # positions of the point
    classes: Space
    layers: tuple[tuple[LHead, ...], ...]
    W_O: LMatrix  # classes x rows
    H0: LMatrix  # rows x cols
    sizes: dict  # sort -> polynomial
    last: str  # the column family the classifier reads (a single position)
    label: str  # the class family of the label (a single class)


@dataclass
class PassLog:
    """What a pass decided: every non-zero score class with its sign on the region (the report)."""

    relu: list = field(default_factory=list)


def forward(lm: LumpedModel, ring_: Ring, region: Region, log: PassLog | None = None) -> dict:
    """Run the lumped model on `region`; returns {class family: logit polynomial} at `last`.
    Raises Split when a score's sign changes inside the region, Undecided when it cannot tell."""
    return logits_of(lm, ring_, apply_layers(lm, lm.H0, lm.layers, ring_, region, log))


def apply_layers(lm: LumpedModel, H: LMatrix, layers, ring_: Ring, region: Region,
                 log: PassLog | None = None, first: int = 0) -> LMatrix:
    """H after `layers` (each a tuple of LHeads; ReLU signs decided on `region`)."""
    sizes = lm.sizes
    for li, layer in enumerate(layers, first):
        m = len(layer)
        add = None
        for hi, head in enumerate(layer):
            S = matmul(matmul(H.T(), head.W_QK, sizes, ring_), H, sizes, ring_)
            A = {}
            for (j, k, p), v in S.data.items():
                fj, fk = lm.cols.families[j], lm.cols.families[k]
                sign = decide(ring_, v, region, existence(fj, fk, p, sizes))
                if sign.kind in ("pos", "nonneg"):
                    A[(j, k, p)] = v
                if log is not None:
                    log.relu.append((li, hi, fj.name, fk.name, p, poly_text(v), sign.kind))
            Am = LMatrix(lm.cols, lm.cols, A)
            out = matmul(matmul(head.W_V, H, sizes, ring_), Am, sizes, ring_)
            add = out if add is None else add.plus(out)
        H = H.plus(add.scaled(ring_.const(Fraction(1, m))))
    return H


def logits_of(lm: LumpedModel, ring_: Ring, H: LMatrix) -> dict:
    logits = matmul(lm.W_O, H, lm.sizes, ring_)
    col = lm.cols.index(lm.last)
    return {lm.classes.families[r].name: v for (r, c, p), v in logits.data.items() if c == col}


def state_key(H: LMatrix) -> frozenset:
    """An exact, hashable identity of a lumped matrix (for detecting a repeated state)."""
    return frozenset((key, tuple(sorted(v.terms()))) for key, v in H.data.items())


def margins(lm: LumpedModel, ring_: Ring, logits: dict) -> dict:
    """label logit - logit of each other class family, with that family's existence conditions."""
    label = logits.get(lm.label, ring_.zero)
    out = {}
    for f in lm.classes.families:
        if f.name == lm.label:
            continue
        conds = [lm.sizes[f.sort] - 1] if f.sort is not None else []
        out[f.name] = (label - logits.get(f.name, ring_.zero), conds)
    return out
