"""Certified decisions for models with softmax attention, in ball arithmetic (python-flint arb).

exp of a non-zero rational is transcendental, so a softmax model's logits are not rationals and
no finite exact computation produces them.  Instead every value is carried as a ball [mid +- rad]
that provably contains it (arb propagates rigorous error bounds through +, *, /, exp), and a
point is decided only when the balls separate:

    correct    at every labelled position, every (label - other) logit difference ball > 0
    wrong      at some labelled position, some (label - other) ball < 0: a certified wrong
               answer; or some difference ball is exactly [0 +- 0]: a certified tie (a ball of
               radius 0 contains only its midpoint, so the difference is exactly 0; ties fail)
    undecided  otherwise, after raising the working precision up to a cap

An exact tie whose ball keeps a positive radius (the zero arises through exp) never separates,
so it stays undecided: it is never verified.  A float64 forward may pre-screen points, but no
float ever decides one.

Layers before the first softmax layer are rational and are evaluated exactly (checkers.evaluate)
on the whole batch; the balls start from that exact residual stream.  After a softmax layer, a
hardmax head is decided only when its maximum is certainly unique (or all candidates are exact
and equal); an argmax the balls cannot settle makes the point undecided.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

import numpy as np

from depthcert.checkers.model import Model

START_PRECISION = 64  # bits of the first attempt
MAX_PRECISION = 4096  # cap: still overlapping balls at this precision -> undecided
EXACT_AFTER = 256  # balls still overlapping at this precision: the exact tie decision (softmax_ties) runs
BOUND_BITS = 1 << 13  # reported endpoints at or above 2^-BOUND_BITS are exact; decisions compare the
# balls themselves, never these ends
TINY_BITS = 1 << 22  # an end below 2^-BOUND_BITS keeps 64 significant bits and its exponent down to
# 2^-TINY_BITS (a positive end stays positive: a 512 KB denominator at most); below that it is rounded
# outward to a multiple of 2^-BOUND_BITS (never a 2^(10^13)-sized integer for exp(-10^13))
TOO_SMALL = (f"certified correct, but a margin ball's lower end is below 2^-{TINY_BITS - 64}, where no positive "
             "lower end is stated (undecided rather than an enclosure that contains 0)")


def _flint():
    import flint

    return flint


@dataclass(frozen=True)
class PointDecision:
    """The certified outcome of one point (margins are enclosures with exact dyadic endpoints)."""

    status: str  # "correct" | "wrong" | "undecided"
    margin: tuple[Fraction, Fraction] | None  # encloses min over labelled positions of label - best
    # other; None when unknown (a single class, or an argmax the balls could not settle)
    position: int  # correct: the position of the smallest margin; else the deciding position
    other: int  # class row with the best other logit at `position` (wrong: certainly above the label,
    # or exactly tied with it); -1 when unknown
    logits: tuple[tuple[Fraction, Fraction], ...]  # wrong/undecided: every class's logit enclosure at `position`
    precision: int  # bits of the attempt that decided (or the cap)
    tie: bool = False  # wrong because the difference is exactly 0 (a radius-0 ball at 0, or proven
    # zero by the exact tie decision, checkers/softmax_ties.py)
    limit: str = ""  # undecided: which limit was reached (precision cap, term limit, outside the
    # exact decision's model shapes); decided: "" ("proven tie" notes come with tie=True)


class PathsDisagree(RuntimeError):
    """Two certified paths decided one point differently (say the float64 intervals correct and
    the balls wrong): one of them is wrong, so nothing may be reported -- an internal error
    (exit 4), never resolved silently."""

    def __init__(self, point: str, first: str, said_first: str, second: str, said_second: str):
        super().__init__(f"certified paths disagree at {point}: {first} says {said_first}, "
                         f"{second} says {said_second}")

    @staticmethod
    def correct(margin) -> str:
        """What a path said of a correct point: "correct (margin in [lo, hi])", the enclosure's
        ends rounded outward to 10 digits in exact decimal arithmetic (a float() of a margin
        beyond float64, like 1e400, would raise OverflowError and hide the disagreement)."""
        if margin is None:
            return "correct"
        return f"correct (margin in [{_outward(margin[0], up=False)}, {_outward(margin[1], up=True)}])"


def _outward(q, up: bool, digits: int = 10) -> str:
    """q rounded to `digits` significant digits towards +inf (up) or -inf, as "d.ddde+N"; the
    division is exact decimal arithmetic, so any size of rational is safe."""
    from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

    q = Fraction(q)
    if q == 0:
        return "0"
    ctx = Context(prec=digits, Emax=10**12, Emin=-10**12, rounding=ROUND_CEILING if up else ROUND_FLOOR)
    return format(ctx.divide(Decimal(q.numerator), Decimal(q.denominator)).normalize(ctx), "e")


class Undecidable(Exception):
    """Raised inside one attempt when a hardmax argmax cannot be settled at this precision."""


class NonFinite(Exception):
    """A ball overflowed (inf/NaN) at this precision: the attempt is retried at a higher one."""


def ball_bounds(x) -> tuple[Fraction, Fraction]:
    """Exact dyadic endpoints [lower, upper] enclosing an arb ball, each end on the same side of 0
    as the ball's own end (a ball certainly above 0 gets a lower end above 0, however small).
    Ends at or above 2^-BOUND_BITS are exact; smaller ones are rounded outward to 64 significant
    bits, their exponent kept, down to 2^-TINY_BITS; below that, outward to multiples of
    2^-BOUND_BITS (so exp(-10^13) gives [0, 2^-8192], never a 2^(10^13) denominator: the one case
    where a positive ball gets the lower end 0).  Raises NonFinite for an infinite or NaN ball,
    and for endpoints above 2^BOUND_BITS."""
    if not x.is_finite():
        raise NonFinite
    out = []
    for end, upward in ((x.lower(), False), (x.upper(), True)):
        man, exp = end.mid().man_exp()
        man, exp = int(man), int(exp)
        if exp >= 0:
            if exp + man.bit_length() > BOUND_BITS:
                raise NonFinite
            out.append(Fraction(man << exp))
        elif exp >= -BOUND_BITS:
            out.append(Fraction(man, 1 << -exp))
        elif exp + man.bit_length() - 64 >= -TINY_BITS:  # 64 significant bits, rounded outward
            extra = max(man.bit_length() - 64, 0)
            m = (-((-man) >> extra) if upward else man >> extra)  # ceil / floor of man / 2^extra
            out.append(Fraction(m, 1 << (-exp - extra)))
        else:  # round outward to the grid 2^-BOUND_BITS without building 2^-exp
            shift = -exp - BOUND_BITS
            q = -((-man) >> shift) if upward else man >> shift  # ceil / floor of man / 2^shift
            out.append(Fraction(q, 1 << BOUND_BITS))
    return out[0], out[1]


def _relu(x, zero):
    if x <= 0:  # certainly <= 0
        return zero
    if x >= 0:
        return x
    return x.nonnegative_part()  # straddles 0: relu lies in [0, upper]


def _fmpq_mat(M):
    flint = _flint()
    return flint.fmpq_mat([[flint.fmpq(Fraction(v).numerator, Fraction(v).denominator) for v in row] for row in M])


class _Weights:
    """The model's rationals as arb matrices at one precision (built once per precision)."""

    def __init__(self, model: Model, first: int, prec: int):
        flint = _flint()
        arb, arb_mat, fmpq = flint.arb, flint.arb_mat, flint.fmpq
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            def mat(M):
                return arb_mat([[arb(fmpq(Fraction(v).numerator, Fraction(v).denominator)) for v in row] for row in M])

            def col(v):
                return mat(np.asarray(v, dtype=object).reshape(-1, 1))

            from depthcert.checkers.norm_activation_balls import Activation, NormBall

            def norm(N):
                return None if N is None else NormBall(N, model.constant_index, model.dim).at(prec)

            self.extras = []
            self.layers = []
            self.parallel = []
            for layer in model.layers[first:]:
                heads = [(mat(h.W_QK), mat(h.W_V), h.attention,
                          arb(fmpq(h.scale.numerator, h.scale.denominator))
                          / arb(fmpq(h.scale_sqrt_divisor.numerator, h.scale_sqrt_divisor.denominator)).sqrt(),
                          None if h.rotary is None else (mat(h.rotary.W_Q), mat(h.rotary.W_K), h.rotary))
                         for h in layer]
                mlp = None
                if layer.mlp is not None:
                    mlp = (mat(layer.mlp.W1), col(layer.mlp.b1), mat(layer.mlp.W2), col(layer.mlp.b2),
                           None if not layer.mlp.gated else (mat(layer.mlp.W_gate), col(layer.mlp.b_gate)))
                inv_m = arb(fmpq(1, len(layer))) if len(layer) else None
                self.layers.append((heads, layer.causal, mlp, inv_m))
                self.parallel.append(layer.parallel)  # the MLP reads the stream before the heads' update
                # LayerNorm/RMSNorm and the MLP activation (checkers/norm_activation_balls.py)
                self.extras.append((norm(layer.norm_attn), norm(layer.norm_mlp),
                                    Activation(layer.mlp.activation if layer.mlp is not None else "relu", prec)))
            self.norm_final = norm(model.norm_final)
            self.W_O = model.W_O
            self.first_qk = [_fmpq_mat(h.W_QK) for h in model.layers[first]] if first < len(model.layers) else []
            self._diff = {}
            self._mat = mat
        finally:
            flint.ctx.prec = old

    def diff_row(self, y: int, c: int):
        """(W_O[y] - W_O[c]) as a 1 x d' arb matrix (exact difference first: tighter balls);
        diff_row(c, None) is W_O[c] itself."""
        key = (y, c)
        if key not in self._diff:
            self._diff[key] = self._mat([self.W_O[y] if c is None else self.W_O[y] - self.W_O[c]])
        return self._diff[key]


class SoftmaxDecider:
    """decide(exact residual stream entering the first softmax layer, labels) -> PointDecision."""

    def __init__(self, model: Model, start_precision: int = START_PRECISION, max_precision: int = MAX_PRECISION,
                 exact_after: int = EXACT_AFTER):
        if start_precision < 2 or max_precision < start_precision:
            raise ValueError("need 2 <= start_precision <= max_precision")
        self.model = model
        self.first = model.first_irrational  # the first layer with softmax heads, a norm or a gelu/silu MLP
        self.start, self.cap = start_precision, max_precision
        self.exact_after = min(max(exact_after, start_precision), max_precision)
        self._weights = lru_cache(maxsize=8)(lambda prec: _Weights(model, self.first, prec))
        self._ties = None
        self.run_deadline: float | None = None  # the run's --max-seconds (a time.perf_counter() time): read
        # before every precision tried and inside the exact tie decision; past it, RunLimitReached stops the run
        self.precisions_used: dict[int, int] = {}
        self.exact_decisions = 0  # points decided by the exact tie decision (softmax_ties)

    def prefix_model(self) -> Model:
        """The rational layers before the first softmax layer, reading out the whole residual
        stream at every position (W_O = identity): its logits are the exact H entering the
        first softmax layer."""
        from depthcert.checkers.layout import eye

        d = self.model.dim
        return Model(self.model.vocab, self.model.max_length, tuple(f"row{r}" for r in range(d)),
                     self.model.layout, self.model.layers[: self.first], eye(d), outputs="all",
                     constant_row=self.model.constant_row)

    def decide(self, H: np.ndarray, den: int, labels: list[tuple[int, int]], logits: bool = False) -> PointDecision:
        """H: (n, d') integer numerators of the exact stream (columns = positions), over `den`;
        labels: [(position, class row)] to check.  Raises the precision; balls still overlapping
        at `exact_after` bits go to the exact decision (checkers/softmax_ties.py): a difference
        proven exactly 0 is a tie (wrong), one proven non-zero is separated at a rising
        precision up to the cap.  Wrong and undecided decisions carry every class's logit
        enclosure; correct ones only when `logits` is set."""
        prec = self.start
        d = None
        why = ""  # why the exact decision did not decide (outside its model shapes, a limit)
        tried = False
        exact_d = None  # the exact decision, when it decided (counted apart from the balls)
        while True:
            if self.run_deadline is not None and time.perf_counter() > self.run_deadline:
                from depthcert.checkers.softmax_ties import RunLimitReached

                raise RunLimitReached(f"the run's --max-seconds passed while deciding a point in arb ({prec} bits)")
            try:
                d = self._attempt(H, den, labels, prec, logits)
            except (Undecidable, NonFinite):
                d = None
            if d is not None and (d.status != "undecided" or d.limit == TOO_SMALL):
                break  # (a margin too small to state stays so at every precision)
            if prec >= self.exact_after and not tried:
                tried = True
                exact = self._exact(H, den, labels, logits)
                if exact is not None and exact.status != "undecided":
                    d = exact_d = exact
                    self.exact_decisions += 1
                    break
                if exact is not None:
                    why = exact.limit
            if prec >= self.cap:
                limit = f"precision cap ({self.cap} bits)" + (f"; {why}" if why else "")
                if d is None:  # an argmax after a softmax layer stayed unsettled: nothing is known
                    d = PointDecision("undecided", None, labels[0][0], -1, (), prec, limit=limit)
                else:
                    d = replace(d, limit=limit)
                break
            prec = min(2 * prec, self.cap)
        if d is not exact_d:  # points the exact decision settled are counted by exact_decisions
            self.precisions_used[d.precision] = self.precisions_used.get(d.precision, 0) + 1
        return d

    def _exact(self, H, den, labels, logits) -> PointDecision | None:
        from depthcert.checkers.softmax_ties import TieDecider

        from depthcert.checkers.norm_activation_balls import tie_reason

        why = tie_reason(self.model)
        if why is not None:
            return PointDecision("undecided", None, labels[0][0], -1, (), self.cap, limit=why)
        if self._ties is None:
            self._ties = TieDecider(self.model, self.first, self.cap)
        self._ties.run_deadline = self.run_deadline
        return self._ties.decide(H, den, labels, logits)

    def _attempt(self, Hnum: np.ndarray, den: int, labels, prec: int, logits: bool = False) -> PointDecision:
        flint = _flint()
        arb, arb_mat, fmpq = flint.arb, flint.arb_mat, flint.fmpq
        old = flint.ctx.prec
        flint.ctx.prec = prec
        try:
            W = self._weights(prec)
            n, dim = Hnum.shape
            Hq = flint.fmpq_mat([[fmpq(int(Hnum[k, r]), den) for k in range(n)] for r in range(dim)])  # exact (d', n)
            H = arb_mat(Hq)
            zero = arb(0)
            # only the last column reaches the classifier when the last position is all that is checked
            last_only = all(pos == n - 1 for pos, _ in labels)
            for li, (heads, causal, mlp, inv_m) in enumerate(W.layers):
                queries = [n - 1] if last_only and li == len(W.layers) - 1 else list(range(n))
                Q = H if len(queries) == n else arb_mat([[H[r, n - 1]] for r in range(dim)])  # (d', q)
                norm_attn, norm_mlp, act = W.extras[li]
                G = H if norm_attn is None else norm_attn.exact(Hq) if li == 0 else norm_attn.ball(H)  # what the heads read
                GQ = G if len(queries) == n else arb_mat([[G[r, n - 1]] for r in range(dim)])
                Q_in = Q  # a parallel layer's MLP reads it (Layer.parallel)
                if heads:
                    upd = None
                    for hi, (W_QK, W_V, kind, scale, rot) in enumerate(heads):
                        exact = None
                        if rot is not None:  # (R_k W_Q g_k) . (R_j W_K g_j), cos/sin balls (checkers/rotary.py)
                            from depthcert.checkers.rotary import rotate_ball

                            Qr = rotate_ball(rot[0] * GQ, rot[2], queries, prec)
                            Kr = rotate_ball(rot[1] * G, rot[2], list(range(n)), prec)
                            S = Kr.transpose() * Qr  # (n, q)
                        elif li == 0 and norm_attn is None:  # the first softmax layer reads the exact stream: exact scores
                            Qq = Hq if len(queries) == n else flint.fmpq_mat([[Hq[r, n - 1]] for r in range(dim)])
                            exact = Hq.transpose() * (W.first_qk[hi] * Qq)
                            S = arb_mat(exact)
                        else:
                            S = G.transpose() * (W_QK * GQ)  # (n, q): key j, query queries[k]
                        A = _attention(S, kind, scale, causal, queries, arb, arb_mat, zero, exact)
                        term = (W_V * G) * A
                        upd = term if upd is None else upd + term
                    Q = Q + upd * inv_m
                if mlp is not None:
                    W1, b1, W2, b2, gate = mlp
                    ones = arb_mat([[1] * len(queries)])
                    M_in = Q_in if W.parallel[li] else Q
                    N = M_in if norm_mlp is None else norm_mlp.ball(M_in)
                    P = W1 * N + b1 * ones
                    if gate is None:
                        Z = arb_mat([[act(P[i, k], zero) for k in range(len(queries))] for i in range(P.nrows())])
                    else:  # a gated MLP: act(W_gate N + b_gate) * (W1 N + b1), entry by entry
                        Pg = gate[0] * N + gate[1] * ones
                        Z = arb_mat([[act(Pg[i, k], zero) * P[i, k] for k in range(len(queries))]
                                     for i in range(P.nrows())])
                    Q = Q + W2 * Z + b2 * ones
                H = Q
            if W.norm_final is not None:  # the classifier reads N(H); exactly computed when no layer ran
                H = W.norm_final.exact(Hq) if not W.layers else W.norm_final.ball(H)
            if H.ncols() != n:
                labels = [(0, y) for _, y in labels]  # the one remaining column is position n - 1
            d = _decide_logits(W, H, labels, self.model, prec, logits)
            if H.ncols() != n:
                d = replace(d, position=n - 1)
            return d
        finally:
            flint.ctx.prec = old


def certain_maxima(s) -> list[int] | None:
    """The positions of the balls `s` (finite) that reach the maximum, when the balls make that set
    certain: one ball entirely above every other, or several exact balls of one equal value; None
    when some ball may or may not reach the maximum (hardmax attention weights 1/count need it)."""
    best = max(range(len(s)), key=lambda i: s[i].lower())
    cand = [i for i in range(len(s)) if not (s[i] < s[best])]
    if len(cand) > 1 and not all(s[i].is_exact() and s[i] == s[best] for i in cand):
        return None
    return cand


def _attention(S, kind, scale, causal, queries, arb, arb_mat, zero, exact=None):
    """Weights A (n_key, len(queries)) from the score balls S (key j, query queries[k]), per
    checkers/model.py.  `exact`: the same scores as an exact fmpq_mat (the first softmax layer):
    softmax then shifts by the exact maximum, so every exponent c (s_j - max) is an exact
    rational times the scale ball (exp(-10^13) is a tiny ball, exp(0) exactly 1, and a scale of
    10^30 cannot turn rounding into an infinite ball), and hardmax compares exactly."""
    n = S.nrows()
    A = [[zero] * len(queries) for _ in range(n)]
    for k, q in enumerate(queries):
        keys = list(range(q + 1) if causal else range(n))
        if kind == "relu":
            for j in keys:
                A[j][k] = _relu(S[j, k], zero)
        elif kind == "softmax":
            if exact is not None:
                top = max(exact[j, k] for j in keys)
                e = [(arb(exact[j, k] - top) * scale).exp() if exact[j, k] != top else arb(1) for j in keys]
            else:
                x = [S[j, k] * scale for j in keys]
                if not all(v.is_finite() for v in x):
                    raise NonFinite
                shift = arb(max(v.mid() for v in x))  # any exact shift gives the same weights
                e = [(v - shift).exp() for v in x]
            Z = sum(e[1:], e[0])
            for j, ej in zip(keys, e):
                A[j][k] = ej / Z
        elif exact is not None:  # hardmax on exact scores: the exact argmax
            top = max(exact[j, k] for j in keys)
            cand = [j for j in keys if exact[j, k] == top]
            w = arb(1) / len(cand)
            for j in cand:
                A[j][k] = w
        else:  # hardmax: the argmax set must be certain
            s = [S[j, k] for j in keys]
            if not all(v.is_finite() for v in s):
                raise NonFinite
            cand = certain_maxima(s)
            if cand is None:
                raise Undecidable  # several keys may reach the maximum and the balls cannot say which
            w = arb(1) / len(cand)
            for i in cand:
                A[keys[i]][k] = w
    return arb_mat(A)


def _decide_logits(W: _Weights, H, labels, model: Model, prec: int, logits: bool = False) -> PointDecision:
    """Compare the label with every other class at every labelled position.

    At a position the margin m = min_{c != y} (o[y] - o[c]) lies in [min lo_c, min hi_c] of the
    difference balls.  The position is wrong when some difference ball is certainly below 0 or is
    exactly [0 +- 0] (m <= 0 for sure), correct when every difference ball is certainly above 0,
    else undecided.  The decisions compare the balls (arb), the reported ends are ball_bounds.
    The point is wrong at its first wrong position, else undecided at its first undecided
    position, else correct; its margin interval is the minimum over all its labelled positions,
    as for the exact evaluator.  An infinite or NaN ball raises NonFinite (retry higher)."""
    C = len(model.classes)
    if C == 1:  # a single class: nothing to compare
        return PointDecision("correct", None, labels[0][0], -1, (), prec)
    cols = H.transpose()  # (n, d'): row k = column k of H
    arb_mat = type(H)
    low = high = None
    smallest = None  # (lo, position, class, column) of the smallest lower end: where the margin is
    first = {}  # status -> (position, class, column, tie) of its first position
    for pos, y in labels:
        hcol = arb_mat([[cols[pos, r]] for r in range(H.nrows())])
        balls = [((W.diff_row(y, c) * hcol)[0, 0], c) for c in range(C) if c != y]  # label minus class c
        diffs = [(ball_bounds(b), c) for b, c in balls]
        p_lo = min(lo for (lo, _), _ in diffs)
        p_hi = min(hi for (_, hi), _ in diffs)
        below = [c for b, c in balls if b < 0]
        zero = next((c for b, c in balls if b.is_exact() and b.is_zero()), None)
        c_min = min(diffs, key=lambda d: (d[0][1], d[0][0]))[1]  # the class most surely above
        if below:
            first.setdefault("wrong", (pos, c_min if c_min in below else below[0], hcol, False))
        elif zero is not None:  # class `zero` ties the label exactly: wrong, whatever the others do
            first.setdefault("wrong", (pos, zero, hcol, True))
        elif not all(b > 0 for b, _ in balls):
            first.setdefault("undecided", (pos, c_min, hcol, False))
        low = p_lo if low is None else min(low, p_lo)
        high = p_hi if high is None else min(high, p_hi)
        if smallest is None or p_lo < smallest[0]:
            smallest = (p_lo, pos, min(diffs, key=lambda d: d[0][0])[1], hcol)
    for status in ("wrong", "undecided"):
        if status in first:
            pos, c, hcol, tie = first[status]
            return PointDecision(status, (low, high), pos, c, _logit_bounds(W, hcol, model), prec, tie=tie)
    _, pos, c, hcol = smallest
    if low <= 0:  # every ball above 0, one below 2^-TINY_BITS: no positive lower end to state
        return PointDecision("undecided", None, pos, c, _logit_bounds(W, hcol, model), prec, limit=TOO_SMALL)
    return PointDecision("correct", (low, high), pos, c, _logit_bounds(W, hcol, model) if logits else (), prec)


def _logit_bounds(W: _Weights, hcol, model: Model):
    return tuple(ball_bounds((W.diff_row(c, None) * hcol)[0, 0]) for c in range(len(model.classes)))
