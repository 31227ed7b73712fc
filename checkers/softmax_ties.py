"""Exact decision of softmax points whose balls do not separate (ties through exp).

Claim.  Let every softmax head's scores be exact rationals (true of the first softmax layer,
whose input stream is rational, and of any later softmax head whose scores happen to stay
rational), and its scale c = r / sqrt(q) (r, q positive rationals).  Then every value of the
forward pass is a quotient N / D of exponential polynomials

    N = sum_i a_i exp(e_i),   a_i rational,  e_i in the Q-span of {1, sqrt(R_1), ..., sqrt(R_t)}

(the R's: the squarefree classes of the scales' radicands), with D a product of softmax
normalisers, so D > 0.  Collect the terms of N per distinct exponent, exactly (an exponent is
a vector of rationals in that basis; the basis is linearly independent over Q, so equal vectors
are the same number and distinct vectors are distinct numbers).  The exponents are algebraic, so
by the Lindemann-Weierstrass theorem the exp(e_i) of distinct e_i are linearly independent over
the algebraic numbers: N = 0 exactly iff every collected coefficient is 0.  Hence:

    collected N empty   -> the value is exactly 0 (a proven tie where it is a logit difference)
    collected N nonempty -> the value is not 0, so its arb ball separates from 0 at some
                            finite precision: raise it (up to the cap)

Signs met on the way (relu of such a value, hardmax comparisons after softmax) are decided the
same way, so the whole forward pass stays in this normal form.  A value N / D is a rational q
exactly when N's collected terms are q times D's (N - q D = 0, by the same theorem), so a later
softmax head whose scores are rational (e.g. an earlier softmax averaging equal values) is
decided too.  Outside the form -- a softmax head whose scores are not rational (then they are
transcendental: an algebraic N / D would again be a ratio of coefficients, and
Lindemann-Weierstrass says nothing about such exponents) -- the decision raises Outside and the
point stays undecided, saying so.  The time and term limits (Limits) are enforced inside the
arithmetic and leave the point undecided naming the limit (LimitReached).
"""
from __future__ import annotations

import math
import threading
import time
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model

TERM_LIMIT = 20_000  # terms of one exponential polynomial; above: undecided ("term limit")
SECONDS_LIMIT = 10.0  # per point; above: undecided ("time limit")


class Outside(Exception):
    """The point's forward pass leaves the normal form: stays undecided."""


class LimitReached(Outside):
    """The time or term limit was reached (inside the arithmetic): stays undecided."""


def _run_limit_error():
    from depthcert.checkers.budget import TimeLimitPassed

    class RunLimitReached(TimeLimitPassed):
        """The whole run's --max-seconds passed inside a point's decision: the run stops (the point
        is not decided, and not called undecided either); never caught as Outside."""

    return RunLimitReached


RunLimitReached = _run_limit_error()


class Limits:
    """The per-point limits, enforced inside the arithmetic: every product of exponential
    polynomials counts its collected terms as it generates them and reads the clock once per
    row of the expansion, every arb evaluation reads it once per term, and every new
    polynomial reads it too -- so no point runs much past `seconds` (one row of a product: at
    most `terms` multiply-adds of Fractions) and no polynomial grows past `terms`.  run_deadline
    (a time.perf_counter() time: the run's --max-seconds) is read at the same places and stops
    the run itself (RunLimitReached), not just the point."""

    def __init__(self, seconds: float | None = None, terms: int | None = None, run_deadline: float | None = None):
        self.seconds = SECONDS_LIMIT if seconds is None else seconds
        self.terms = TERM_LIMIT if terms is None else terms
        self.deadline = time.monotonic() + self.seconds
        self.run_deadline = run_deadline

    def check_terms(self, count: int) -> None:
        if count > self.terms:
            raise LimitReached(f"term limit ({self.terms:,} exponential terms)")

    def check_time(self) -> None:
        if self.run_deadline is not None and time.perf_counter() > self.run_deadline:
            raise RunLimitReached("the run's --max-seconds passed inside a point's exact tie decision")
        if time.monotonic() > self.deadline:
            raise LimitReached(f"time limit ({self.seconds:g} s per point)")


_UNLIMITED = Limits(float("inf"), 10**18)
_state = threading.local()  # .limits: the point this thread decides (TieDecider.decide), else unlimited


def _current() -> Limits:
    return getattr(_state, "limits", _UNLIMITED)


class Capped(Exception):
    """A non-zero value did not separate from 0 below the precision cap."""


def _flint():
    import flint

    return flint


class Basis:
    """The radicals of the model's softmax scales: c = alpha * sqrt(R) with R = 1 (rational
    scale) or one of pairwise non-equivalent non-square integers R_1..R_t (sqrt(R_i) / sqrt(R_j)
    irrational), so that {1, sqrt(R_1), ..., sqrt(R_t)} is linearly independent over Q."""

    def __init__(self):
        self.reps: list[int] = [1]

    def scale(self, scale: Fraction, divisor: Fraction) -> tuple[int, Fraction]:
        """(basis index, alpha) with scale / sqrt(divisor) = alpha * sqrt(reps[index])."""
        p1, p2 = divisor.numerator, divisor.denominator
        N = p1 * p2  # scale / sqrt(p1/p2) = scale * sqrt(p2/p1) = scale * sqrt(N) / p1
        for i, R in enumerate(self.reps):
            root = math.isqrt(N * R)
            if root * root == N * R:  # sqrt(N) = root / R * sqrt(R)
                return i, scale * Fraction(root, R) / p1
        self.reps.append(N)
        return len(self.reps) - 1, scale / p1


class Poly:
    """sum a_i exp(e_i): a dict exponent (tuple of Fractions in the Basis) -> non-zero Fraction."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        limits = _current()
        limits.check_terms(len(terms))
        limits.check_time()
        self.terms = terms

    def __add__(self, other: "Poly") -> "Poly":
        out = dict(self.terms)
        for k, v in other.terms.items():
            s = out.get(k, 0) + v
            if s:
                out[k] = s
            else:
                out.pop(k, None)
        return Poly(out)

    def scaled(self, a: Fraction) -> "Poly":
        return Poly({k: v * a for k, v in self.terms.items()}) if a else ZERO

    def __mul__(self, other: "Poly") -> "Poly":
        if self is ONE:
            return other
        if other is ONE:
            return self
        out: dict = {}
        limits = _current()
        cap = limits.terms
        for k1, v1 in self.terms.items():
            limits.check_time()  # once per row: a row is at most `terms` multiply-adds
            for k2, v2 in other.terms.items():
                k = _norm_key(_add_keys(k1, k2))
                s = out.get(k, 0) + v1 * v2
                if s:
                    out[k] = s
                    if len(out) > cap:  # counted as the terms are generated, not after the product
                        limits.check_terms(len(out))
                else:
                    out.pop(k)
        return Poly(out)

    def constant(self) -> Fraction | None:
        """The rational value when the only exponent is 0 (or there is none), else None."""
        if not self.terms:
            return Fraction(0)
        if len(self.terms) == 1:
            (k, v), = self.terms.items()
            if not any(k):
                return v
        return None

    def key(self):
        return tuple(sorted(self.terms.items()))


def _add_keys(k1, k2):
    n = max(len(k1), len(k2))
    k1 = k1 + (Fraction(0),) * (n - len(k1))
    k2 = k2 + (Fraction(0),) * (n - len(k2))
    return tuple(a + b for a, b in zip(k1, k2))


ZERO = Poly({})
ONE = Poly({(): Fraction(1)})


def _norm_key(k):
    """Exponent vectors without trailing zeros, so equal exponents have equal keys."""
    k = list(k)
    while k and k[-1] == 0:
        k.pop()
    return tuple(k)


def _poly(terms) -> Poly:
    out: dict = {}
    for k, v in terms:
        k = _norm_key(k)
        s = out.get(k, 0) + v
        if s:
            out[k] = s
        else:
            out.pop(k, None)
    return Poly(out)


class Val:
    """num / den with den > 0 (a product of softmax normalisers, or 1)."""

    __slots__ = ("num", "den")

    def __init__(self, num: Poly, den: Poly = ONE):
        self.num, self.den = num, den

    @staticmethod
    def rational(q) -> "Val":
        q = Fraction(q)
        return Val(Poly({(): q}) if q else ZERO)

    def is_zero(self) -> bool:
        return not self.num.terms

    def constant(self) -> Fraction | None:
        """The value when it is a rational number, else None.  Exact and complete: num / den = q
        with q rational iff num - q den collects to 0, iff (Lindemann-Weierstrass: distinct
        exponents are independent) num's collected terms are q times den's, term by term."""
        if self.den is ONE or not self.num.terms:
            return self.num.constant()
        c, d = self.num.constant(), self.den.constant()
        if c is not None and d is not None:
            return c / d
        return _ratio(self.num, self.den)


def _ratio(num: Poly, den: Poly) -> Fraction | None:
    """q when num = q den as collected exponential polynomials (same exponents, coefficients in
    one ratio), else None."""
    if len(num.terms) != len(den.terms) or not den.terms:
        return None
    q = None
    for k, v in den.terms.items():
        a = num.terms.get(k)
        if a is None:
            return None
        r = a / v
        if q is None:
            q = r
        elif r != q:
            return None
    return q


def _same_den(a: Poly, b: Poly) -> bool:
    return a is b or a.terms == b.terms


def lin(pairs) -> Val:
    """sum coef * val over (Fraction coef, Val) pairs, exactly; denominators multiplied only
    where they differ."""
    groups: list[list] = []  # [den, num]
    for coef, v in pairs:
        if not coef or v.is_zero():
            continue
        for g in groups:
            if _same_den(g[0], v.den):
                g[1] = g[1] + v.num.scaled(coef)
                break
        else:
            groups.append([v.den, v.num.scaled(coef)])
    if not groups:
        return Val(ZERO)
    den, num = groups[0]
    for d, m in groups[1:]:
        num = num * d + m * den
        den = den * d
    return _simplify(Val(num, den))


def mul(a: Val, b: Val) -> Val:
    if a.is_zero() or b.is_zero():
        return Val(ZERO)
    return _simplify(Val(a.num * b.num, a.den * b.den))


def _simplify(v: Val) -> Val:
    if v.is_zero():
        return Val(ZERO)
    if v.den is not ONE:
        d = v.den.constant()
        if d is not None:
            return Val(v.num.scaled(1 / d))
        q = _ratio(v.num, v.den)  # an exactly rational quotient (e.g. equal values averaged by softmax)
        if q is not None:
            return Val.rational(q)
    return v


class Signs:
    """Signs of exact values: 0 when the collected numerator is empty (exact), else the sign of
    its arb ball at a rising precision (it separates, the numerator being non-zero)."""

    def __init__(self, basis: Basis, cap: int, start: int = 64):
        self.basis, self.cap, self.start = basis, cap, start
        self.used = start

    def ball(self, p: Poly, prec: int):
        flint = _flint()
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            roots = [flint.arb(R).sqrt() for R in self.basis.reps]
            total = flint.arb(0)
            limits = _current()
            for k, a in p.terms.items():
                limits.check_time()  # one exp per term, at up to the cap's precision
                e = flint.arb(0)
                for x, r in zip(k, roots):
                    if x:
                        e += flint.arb(flint.fmpq(x.numerator, x.denominator)) * r
                total += flint.arb(flint.fmpq(a.numerator, a.denominator)) * (e.exp() if k else flint.arb(1))
            return total
        finally:
            flint.ctx.prec = old

    def value_ball(self, v: Val, prec: int):
        flint = _flint()
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            return self.ball(v.num, prec) / self.ball(v.den, prec)
        finally:
            flint.ctx.prec = old

    def sign(self, v: Val) -> int:
        if v.is_zero():
            return 0
        c = v.constant()
        if c is not None:
            return (c > 0) - (c < 0)
        prec = self.start
        while True:
            _current().check_time()
            b = self.ball(v.num, prec)
            if b > 0 or b < 0:
                self.used = max(self.used, prec)
                return 1 if b > 0 else -1
            if prec >= self.cap:
                raise Capped
            prec = min(2 * prec, self.cap)


class TieDecider:
    """decide(H, den, labels) -> PointDecision, or an undecided one naming the limit reached."""

    def __init__(self, model: Model, first: int, cap: int, seconds: float | None = None, terms: int | None = None,
                 run_deadline: float | None = None):
        self.model, self.first, self.cap = model, first, cap
        self.seconds, self.terms = seconds, terms  # None: SECONDS_LIMIT, TERM_LIMIT (read per point)
        self.run_deadline = run_deadline  # the run's --max-seconds (perf_counter time), read inside the arithmetic
        if model.has_rotary or model.has_gated_mlp or model.has_parallel:  # tie_reason keeps them away
            raise ValueError("the exact tie decision does not cover rotary heads, gated MLPs or parallel layers")
        self.basis = Basis()
        self.layers = []
        for layer in model.layers[first:]:
            heads = []
            for h in layer:
                coef = None
                if h.attention == "softmax":
                    coef = self.basis.scale(h.scale, h.scale_sqrt_divisor)
                heads.append((_sparse(h.W_QK), _sparse(h.W_V), h.attention, coef))
            mlp = None
            if layer.mlp is not None:
                m = layer.mlp
                mlp = (_sparse(m.W1), [Fraction(x) for x in m.b1], _sparse(m.W2), [Fraction(x) for x in m.b2])
            self.layers.append((heads, layer.causal, mlp, Fraction(1, len(layer)) if len(layer) else None))

    def decide(self, Hnum: np.ndarray, den: int, labels, logits: bool = False):
        from depthcert.checkers.softmax_balls import PointDecision

        signs = Signs(self.basis, self.cap)
        _state.limits = Limits(self.seconds, self.terms, self.run_deadline)
        try:
            cols = self._forward(Hnum, den, labels, signs)
            return self._decide(cols, labels, signs, logits)
        except LimitReached as e:
            return PointDecision("undecided", None, labels[0][0], -1, (), self.cap,
                                 limit=f"exact tie decision stopped at its {e}")
        except Outside as e:
            return PointDecision("undecided", None, labels[0][0], -1, (), self.cap,
                                 limit=f"exact tie decision not applicable: {e}")
        except Capped:
            return None  # the balls' own undecided decision (with its enclosure) stands
        finally:
            _state.limits = _UNLIMITED

    def _forward(self, Hnum, den, labels, signs):
        n, d = Hnum.shape
        H = [[Val.rational(Fraction(int(Hnum[k, r]), den)) for r in range(d)] for k in range(n)]  # H[k][r]
        last_only = all(pos == n - 1 for pos, _ in labels)
        for li, (heads, causal, mlp, inv_m) in enumerate(self.layers):
            queries = [n - 1] if last_only and li == len(self.layers) - 1 else list(range(n))
            out = {k: list(H[k]) for k in queries}
            if heads:
                upd = {k: [[] for _ in range(d)] for k in queries}
                for W_QK, W_V, kind, coef in heads:
                    values = [_apply(W_V, H[j], d) for j in range(n)]
                    for k in queries:
                        keys = list(range(k + 1)) if causal else list(range(n))
                        Wq = _apply(W_QK, H[k], d)
                        scores = [lin_dot(H[j], Wq) for j in keys]
                        weights = _weights(scores, kind, coef, signs)
                        for j, w in zip(keys, weights):
                            if w.is_zero():
                                continue
                            for r in range(d):
                                if not values[j][r].is_zero():
                                    upd[k][r].append(mul(w, values[j][r]))
                for k in queries:
                    for r in range(d):
                        if upd[k][r]:
                            out[k][r] = lin([(Fraction(1), out[k][r])] + [(inv_m, v) for v in upd[k][r]])
            if mlp is not None:
                W1, b1, W2, b2 = mlp
                for k in queries:
                    P = _apply(W1, out[k], len(b1), b1)
                    Z = [p if signs.sign(p) > 0 else Val(ZERO) for p in P]
                    add = _apply(W2, Z, d, b2)
                    out[k] = [lin([(Fraction(1), a), (Fraction(1), b)]) for a, b in zip(out[k], add)]
            if len(queries) == n:
                H = [out[k] for k in range(n)]
            else:
                H = {n - 1: out[n - 1]}
        return H

    def _decide(self, H, labels, signs, logits):
        from depthcert.checkers.softmax_balls import PointDecision, ball_bounds

        W_O = self.model.W_O
        C = len(self.model.classes)
        if C == 1:
            return PointDecision("correct", None, labels[0][0], -1, (), signs.used)
        per = []  # (pos, y, [(class, sign, value)])
        for pos, y in labels:
            col = H[pos]
            diffs = []
            for c in range(C):
                if c == y:
                    continue
                row = [Fraction(W_O[y, r]) - Fraction(W_O[c, r]) for r in range(len(col))]
                v = lin(zip(row, col))
                diffs.append((c, signs.sign(v), v))
            per.append((pos, y, diffs))
        prec = max(signs.used, 64)
        low = high = None
        first_wrong = None
        smallest = None
        for pos, y, diffs in per:
            bounds = [(c, s, (Fraction(0), Fraction(0)) if s == 0 else ball_bounds(signs.value_ball(v, prec)))
                      for c, s, v in diffs]
            p_lo = min(b[0] for _, _, b in bounds)
            p_hi = min(b[1] for _, _, b in bounds)
            low = p_lo if low is None else min(low, p_lo)
            high = p_hi if high is None else min(high, p_hi)
            neg = [c for c, s, _ in bounds if s < 0]
            zero = [c for c, s, _ in bounds if s == 0]
            if first_wrong is None and (neg or zero):
                if neg:
                    c_best = min(((b[1], c) for c, s, b in bounds if s < 0))[1]
                    first_wrong = (pos, c_best, False)
                else:
                    first_wrong = (pos, zero[0], True)
            if smallest is None or p_lo < smallest[0]:
                smallest = (p_lo, pos, min(bounds, key=lambda t: t[2][0])[0])
        if first_wrong is not None:
            pos, c, tie = first_wrong
            return PointDecision("wrong", (low, high), pos, c, self._logit_bounds(H[pos], signs, prec), prec, tie=tie)
        _, pos, c = smallest
        if low <= 0:  # every difference proven above 0, one below 2^-TINY_BITS: no positive lower end to state
            from depthcert.checkers.softmax_balls import TOO_SMALL

            return PointDecision("undecided", None, pos, c, self._logit_bounds(H[pos], signs, prec), prec,
                                 limit=TOO_SMALL)
        return PointDecision("correct", (low, high), pos, c,
                             self._logit_bounds(H[pos], signs, prec) if logits else (), prec)

    def _logit_bounds(self, col, signs, prec):
        from depthcert.checkers.softmax_balls import ball_bounds

        W_O = self.model.W_O
        out = []
        for c in range(len(self.model.classes)):
            v = lin((Fraction(W_O[c, r]), col[r]) for r in range(len(col)))
            q = v.constant()
            out.append((q, q) if q is not None else ball_bounds(signs.value_ball(v, prec)))
        return tuple(out)


def _sparse(M) -> list[list[tuple[int, Fraction]]]:
    """Rows of a matrix as [(column, non-zero Fraction)]."""
    return [[(j, Fraction(v)) for j, v in enumerate(row) if v != 0] for row in np.asarray(M, dtype=object)]


def _apply(W, col, rows, bias=None) -> list[Val]:
    """W col (+ bias), W sparse rows, col a list of Vals."""
    out = []
    for i in range(rows):
        pairs = [(a, col[j]) for j, a in W[i]]
        if bias is not None and bias[i]:
            pairs.append((bias[i], Val.rational(1)))
        out.append(lin(pairs))
    return out


def lin_dot(u: list[Val], v: list[Val]) -> Val:
    """sum_r u[r] v[r]."""
    parts = [mul(a, b) for a, b in zip(u, v) if not a.is_zero() and not b.is_zero()]
    return lin((Fraction(1), p) for p in parts)


def _weights(scores: list[Val], kind: str, coef, signs: Signs) -> list[Val]:
    if kind == "relu":
        return [s if signs.sign(s) > 0 else Val(ZERO) for s in scores]
    if kind == "hardmax":
        best = [0]
        for i in range(1, len(scores)):
            s = signs.sign(lin([(Fraction(1), scores[i]), (Fraction(-1), scores[best[0]])]))
            if s > 0:
                best = [i]
            elif s == 0:
                best.append(i)
        w = Val.rational(Fraction(1, len(best)))
        return [w if i in best else Val(ZERO) for i in range(len(scores))]
    exact = [s.constant() for s in scores]
    if any(q is None for q in exact):
        raise Outside("a softmax head after a softmax layer has scores that are not exact rationals "
                      "(its exponents are transcendental; Lindemann-Weierstrass does not apply)")
    index, alpha = coef
    top = max(exact)
    terms = []
    for q in exact:
        key = [Fraction(0)] * (index + 1)
        key[index] = alpha * (q - top)
        terms.append(_norm_key(key))
    Z = _poly((k, Fraction(1)) for k in terms)
    return [_simplify(Val(_poly([(k, Fraction(1))]), Z)) for k in terms]
