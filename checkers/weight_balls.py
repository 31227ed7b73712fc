"""Certified forward passes in ball arithmetic (python-flint arb) for two robustness questions.

1. Weight tolerance.  Every weight w is replaced by the ball [w - eps, w + eps] and the forward
   pass is done in ball arithmetic; each point's margin against each other class is enclosed as
   one ball, (W_O[y] - W_O[c]) . h with radius 2 eps on the difference.  If every lower end is
   positive, every model whose weights each lie within eps of these keeps the strict argmax on
   that point (ball arithmetic encloses every value any such model computes).

2. Float formats.  A forward pass computed in a binary format with a p-bit significand (unit
   roundoff u = 2^-p), weights rounded to the format and every operation rounded to nearest, on
   exact 0/1 inputs.  Each result is enclosed by the exact operation on the enclosures plus the
   standard rounding bounds (Higham, Accuracy and Stability of Numerical Algorithms, ch. 3):
   a dot product of length k computed in any order is within gamma_k sum |a_i||b_i| (gamma_k =
   k u / (1 - k u)) of the exact one, plus 2k eta for underflow (eta = half the smallest
   subnormal); a sum or scaling is within u |result| + eta.  A value whose enclosure reaches the
   format's largest finite number may overflow, and so may an intermediate value: a dot product
   whose sum |a_i||b_i| (1 + gamma_k) + 2k eta reaches it (a bound on every product and partial
   sum in any order; an overflowed attention score times a zero value is NaN, invisible in the
   result's enclosure).  Either way the point is not certified.  An operation on values known
   exactly (zero-radius balls) whose exact result, and for a dot product every product and
   partial sum in any order, is a value of the format is computed without error: no bound is
   added there (small-integer constructions are then computed exactly, as a float run does).
   The 1/m of a layer's m heads is one rounded division of the heads' sum.  A point is
   certified when its label's logit enclosure lies strictly above every other logit's.

Supported: relu attention (the paper's class), causal masks, ReLU MLPs, the constant row,
last-position outputs.  Hardmax and softmax heads are refused (ValueError).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.model import Model
from depthcert.checkers.softmax_balls import certain_maxima

PRECISION = 256  # bits of the ball midpoints


@dataclass(frozen=True)
class FloatFormat:
    name: str
    significand_bits: int  # p, counting the implicit bit
    min_exponent: int  # smallest normal exponent e_min: normals are >= 2^e_min
    max_finite: Fraction

    @property
    def unit_roundoff(self) -> Fraction:
        return Fraction(1, 2**self.significand_bits)

    @property
    def eta(self) -> Fraction:
        """Half the smallest positive subnormal: the absolute error bound of gradual underflow."""
        return Fraction(1, 2 ** (self.significand_bits - self.min_exponent))

    def round(self, x: Fraction) -> Fraction:
        """x rounded to the nearest value of the format, ties to even (overflow: ValueError)."""
        x = Fraction(x)
        if x == 0:
            return x
        a = abs(x)
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if Fraction(2) ** e > a:
            e -= 1  # now 2^e <= a < 2^(e+1)
        e = max(e, self.min_exponent)  # subnormals share the smallest exponent's spacing
        quantum = Fraction(2) ** (e - self.significand_bits + 1)
        q = a / quantum
        n = q.numerator // q.denominator
        rest = q - n
        if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
            n += 1
        r = n * quantum
        if r > self.max_finite:
            raise ValueError(f"{float(x):.6g} overflows {self.name}")
        return r if x > 0 else -r


FORMATS = {
    "float16": FloatFormat("float16", 11, -14, Fraction(65504)),
    "bfloat16": FloatFormat("bfloat16", 8, -126, Fraction((2**8 - 1) * 2**(127 - 7))),
    "float32": FloatFormat("float32", 24, -126, Fraction((2**24 - 1) * 2**(127 - 23))),
}


def _check_supported(model: Model) -> None:
    if model.outputs != "last":
        raise ValueError("ball forward passes cover models read at the last position")
    if model.has_gated_mlp or model.has_parallel:
        raise ValueError("ball forward passes do not cover gated MLPs or parallel layers")
    for layer in model.layers:
        for head in layer:
            if head.attention != "relu":
                raise ValueError(f"ball forward passes cover relu attention only (a {head.attention} head)")


def _arb(q):
    from flint import arb, fmpq

    q = Fraction(q)
    return arb(fmpq(q.numerator, q.denominator))


def _ball(q, rad: Fraction):
    from flint import arb, fmpq

    q = Fraction(q)
    return arb(fmpq(q.numerator, q.denominator), fmpq(rad.numerator, rad.denominator)) if rad else _arb(q)


def _mat(M: np.ndarray, rad: Fraction, conv=None):
    from flint import arb_mat

    M = np.atleast_2d(M)
    conv = conv or (lambda v: v)
    return arb_mat([[_ball(conv(v), rad) for v in row] for row in M])


def _relu_ball(x):
    from flint import arb

    if x >= 0:
        return x
    if x <= 0:
        return arb(0)
    return arb(0).union(x)


class BallForward:
    """Margin enclosures of one model, with every weight widened by eps (weight tolerance) or
    rounded to a float format with every operation's rounding error added (fmt)."""

    def __init__(self, model: Model, eps: Fraction = Fraction(0), fmt: FloatFormat | None = None):
        import flint

        _check_supported(model)
        if eps and fmt is not None:
            raise ValueError("a weight radius and a float format are separate questions")
        self.model, self.eps, self.fmt = model, Fraction(eps), fmt
        self._over = False
        self._prec = flint.ctx.prec
        flint.ctx.prec = PRECISION
        conv = fmt.round if fmt is not None else None
        r = self.eps
        self.layers = []
        for layer in model.layers:
            heads = [(_mat(h.W_QK, r, conv), _mat(h.W_V, r, conv)) for h in layer]
            mlp = None
            if layer.mlp is not None:
                m = layer.mlp
                mlp = (_mat(m.W1, r, conv), _mat(m.b1[:, None], r, conv), _mat(m.W2, r, conv), _mat(m.b2[:, None], r, conv))
            self.layers.append((heads, layer.causal, mlp))
        self.W_O = model.W_O
        self.W_O_rounded = _mat(model.W_O, Fraction(0), conv)
        self._weight_rows = {}  # id of a weight matrix (the left factor of its products) -> its dyadic rows
        if fmt is not None:
            for heads, _, mlp in self.layers:
                for M in [m for QK_V in heads for m in QK_V] + list(mlp[::2] if mlp is not None else ()):
                    self._weight_rows[id(M)] = _dyadic_lines(M, by_rows=True)
            self._weight_rows[id(self.W_O_rounded)] = _dyadic_lines(self.W_O_rounded, by_rows=True)
        flint.ctx.prec = self._prec

    # ------------------------------------------------------------------ rounding bounds
    def _dot_err(self, A, B, k: int):
        """A * B plus, in format mode, gamma_k |A||B| + 2k eta entrywise (any summation order)."""
        P = A * B
        if self.fmt is None:
            return P
        from flint import arb, arb_mat, fmpq

        u = self.fmt.unit_roundoff
        gamma = k * u / (1 - k * u)
        absA = arb_mat([[A[i, j].abs_upper() for j in range(A.ncols())] for i in range(A.nrows())])
        absB = arb_mat([[B[i, j].abs_upper() for j in range(B.ncols())] for i in range(B.nrows())])
        bound = absA * absB
        g = arb(fmpq(gamma.numerator, gamma.denominator))
        e = arb(fmpq(2 * k * self.fmt.eta.numerator, self.fmt.eta.denominator))
        # every product and every partial sum, in any order, is at most sum |a||b| (1 + gamma) + e
        # in magnitude: below the largest finite number, nothing on the way can overflow (an
        # overflowed score times a zero value is NaN, which no enclosure of the result would show)
        self._check_range(bound * (1 + g) + e)
        exact = self._exact_dots(A, B)
        return arb_mat([[P[i, j] if (exact[i][j] and P[i, j].is_exact()) else P[i, j] + _sym((bound[i, j] * g).abs_upper() + e)
                         for j in range(P.ncols())] for i in range(P.nrows())])

    def _exact_dots(self, A, B) -> list[list[bool]]:
        """exact[i][j]: row i of A and column j of B are exact points (the computed values are
        known exactly) and every product and partial sum of their dot product, in any order, is
        a value of the format, so the computation makes no rounding error at all.  Row i of A is
        N_i 2^(E_i) and column j of B is M_j 2^(F_j) with integer vectors; every partial sum is
        then an integer multiple k of 2^(E_i + F_j) with |k| <= s = |N_i| . |M_j|, and such a
        number is a value of the format when s <= 2^p and 2^(E_i + F_j) is at least the smallest
        subnormal (overflow is the range check's business)."""
        rows = self._weight_rows.get(id(A)) or _dyadic_lines(A, by_rows=True)
        cols = _dyadic_lines(B, by_rows=False)
        exact = [[False] * B.ncols() for _ in range(A.nrows())]
        ok_r = [i for i, r in enumerate(rows) if r is not None]
        ok_c = [j for j, c in enumerate(cols) if c is not None]
        if not ok_r or not ok_c:
            return exact
        p, lowest = self.fmt.significand_bits, self.fmt.min_exponent - self.fmt.significand_bits + 1
        NA = np.array([[abs(v) for v in rows[i][0]] for i in ok_r], dtype=object).reshape(len(ok_r), A.ncols())
        MB = np.array([[abs(v) for v in cols[j][0]] for j in ok_c], dtype=object).reshape(len(ok_c), B.nrows())
        S = NA.dot(MB.T)
        for a, i in enumerate(ok_r):
            for b, j in enumerate(ok_c):
                exact[i][j] = S[a, b] <= 2**p and rows[i][1] + cols[j][1] >= lowest
        return exact

    def _op_err(self, M):
        """M plus u |M| + eta entrywise (one rounded addition or scaling), in format mode."""
        if self.fmt is None:
            return M
        from flint import arb, arb_mat, fmpq

        u, eta = self.fmt.unit_roundoff, self.fmt.eta
        fu, fe = arb(fmpq(u.numerator, u.denominator)), arb(fmpq(eta.numerator, eta.denominator))
        out = arb_mat([[M[i, j] if self._representable(M[i, j]) else M[i, j] + _sym((M[i, j].abs_upper() * fu).abs_upper() + fe)
                        for j in range(M.ncols())] for i in range(M.nrows())])
        self._check_range(out)
        return out

    def _representable(self, x) -> bool:
        """x is an exact point and a value of the format: an operation whose exact result it is (on
        operands known exactly) is computed without error."""
        if not x.is_exact():
            return False
        m, e = x.mid().man_exp()  # x = m 2^e, m odd (or 0)
        m, e = abs(int(m)), int(e)
        if m == 0:
            return True
        p, fmt = self.fmt.significand_bits, self.fmt
        # p significant bits at most, no bit below the smallest subnormal, at most the largest finite
        return (m.bit_length() <= p and e >= fmt.min_exponent - p + 1
                and (e >= 0 and m << e <= fmt.max_finite or e < 0 and m <= fmt.max_finite * 2**-e))

    def _check_range(self, M) -> None:
        """Record a possible overflow when an entry of M may reach the format's largest finite number."""
        if self._overflow(M):
            self._over = True

    def _overflow(self, M) -> bool:
        if self.fmt is None:
            return False
        from flint import arb, fmpq

        top = arb(fmpq(self.fmt.max_finite.numerator, self.fmt.max_finite.denominator))
        return any(not (M[i, j].abs_upper() < top) for i in range(M.nrows()) for j in range(M.ncols()))

    # ------------------------------------------------------------------ forward
    def hidden(self, token_ids) -> tuple[object, bool]:
        """(enclosure of the last column (d x 1 arb_mat), overflow possible)."""
        import flint
        from flint import arb_mat

        from depthcert.checkers.model import embed_exact

        prev = flint.ctx.prec
        flint.ctx.prec = PRECISION
        self._over = False  # set by every rounded operation whose value may reach the largest finite number
        try:
            n = len(token_ids)
            H = arb_mat([[_arb(v) for v in row] for row in embed_exact(self.model, token_ids)])
            d = H.nrows()
            over = False
            for heads, causal, mlp in self.layers:
                if heads:
                    m = len(heads)
                    total = None
                    for QK, V in heads:
                        S = self._dot_err(H.transpose(), self._dot_err(QK, H, d), d)  # (keys, queries)
                        A = arb_mat([[(_relu_ball(S[j, k]) if (not causal or j <= k) else _arb(0)) for k in range(n)]
                                     for j in range(n)])
                        U = self._dot_err(self._dot_err(V, H, d), A, n)
                        total = U if total is None else self._op_err(total + U)
                    upd = self._op_err(_divide(total, m)) if m > 1 else total
                    H = self._op_err(H + upd)
                    over = over or self._overflow(H)
                if mlp is not None:
                    W1, b1, W2, b2 = mlp
                    ones = arb_mat([[_arb(1)] * n])
                    Z = self._op_err(self._dot_err(W1, H, d) + b1 * ones)
                    Z = arb_mat([[_relu_ball(Z[i, j]) for j in range(n)] for i in range(Z.nrows())])
                    H = self._op_err(self._op_err(H + self._dot_err(W2, Z, Z.nrows())) + b2 * ones)
                    over = over or self._overflow(Z) or self._overflow(H)
            h = arb_mat([[H[i, n - 1]] for i in range(d)])
            return h, over or self._over
        finally:
            flint.ctx.prec = prev

    def margin_lower(self, token_ids, label_row: int) -> tuple[Fraction, bool]:
        """(a lower bound on the point's margin over every model in scope, overflow possible).

        Weight tolerance: min_c lower((W_O[y] - W_O[c]) . h) with radius 2 eps per difference entry.
        Float format: min_c lower(logit_y) - upper(logit_c), each logit with its rounding bound."""
        import flint
        from flint import arb_mat

        h, over = self.hidden(token_ids)
        prev = flint.ctx.prec
        flint.ctx.prec = PRECISION
        try:
            C, d = self.W_O.shape
            y = label_row
            low = None
            if self.fmt is None:
                for c in range(C):
                    if c == y:
                        continue
                    diff = _mat(np.array([[Fraction(self.W_O[y, r]) - Fraction(self.W_O[c, r]) for r in range(d)]]),
                                2 * self.eps)
                    v = (diff * h)[0, 0]
                    lo = _lower(v)
                    low = lo if low is None else min(low, lo)
            else:
                self._over = False
                logits = self._dot_err(self.W_O_rounded, h, d)
                over = over or self._over or self._overflow(logits)
                ly = _lower(logits[y, 0])
                for c in range(C):
                    if c != y:
                        lo = ly - _upper(logits[c, 0])
                        low = lo if low is None else min(low, lo)
            return (Fraction(0) if low is None else low), over
        finally:
            flint.ctx.prec = prev


def _divide(M, m: int):
    """M / m entrywise (the 1/m of a layer's heads, one rounded division in a format): an exact
    entry gives the exact quotient's enclosure (an exact point when the quotient is dyadic, so a
    quotient that is a value of the format adds no rounding bound), others M * [1/m]."""
    from flint import arb_mat

    inv = _arb(Fraction(1, m))
    out = []
    for i in range(M.nrows()):
        row = []
        for j in range(M.ncols()):
            x = M[i, j]
            if x.is_exact():
                a, e = x.mid().man_exp()
                q = Fraction(int(a)) * Fraction(2) ** int(e) / m
                row.append(_arb(q))
            else:
                row.append(x * inv)
        out.append(row)
    return arb_mat(out)


def _dyadic_lines(M, by_rows: bool) -> list:
    """Per row (or column) of an arb_mat: (integers N, exponent E) with the line exactly N 2^E, or
    None when one of its entries is not an exact point."""
    n_lines, n_along = (M.nrows(), M.ncols()) if by_rows else (M.ncols(), M.nrows())
    out = []
    for a in range(n_lines):
        parts = []
        for b in range(n_along):
            x = M[a, b] if by_rows else M[b, a]
            if not x.is_exact():
                parts = None
                break
            m, e = x.mid().man_exp()
            parts.append((int(m), int(e)))
        if parts is None:
            out.append(None)
            continue
        E = min((e for m, e in parts if m), default=0)
        out.append(([m << (e - E) if m else 0 for m, e in parts], E))
    return out


def _sym(r):
    """A ball containing [-r, r] (r >= 0 an arb)."""
    r = r.abs_upper()
    return (-r).union(r)


def _lower(x) -> Fraction:
    """A rational at or below every value of the ball x."""
    return _exact(x.lower(), down=True)


def _upper(x) -> Fraction:
    return _exact(x.upper(), down=False)


def _exact(x, down: bool) -> Fraction:
    """The arb x (an exact point after lower()/upper()) as a Fraction, rounded outward if needed.
    An infinite or NaN end (an overflowed ball) bounds nothing: NotCertified, never a number."""
    if not x.is_finite():
        raise NotCertified
    m, e = x.mid().man_exp()
    q = Fraction(int(m)) * (Fraction(2) ** int(e))
    rad = x.rad()
    if rad != 0:
        rm, re = rad.mid().man_exp()
        r = Fraction(int(rm)) * (Fraction(2) ** int(re))
        q = q - r if down else q + r
    return q


class NotCertified(Exception):
    """A ball pass cannot settle a point (a hardmax argmax the balls do not separate, an infinite
    ball): the point is not certified at this radius."""


class WeightBallForward:
    """Weight tolerance for any model: relu, hardmax and softmax heads, MLPs, any labelled positions.

    Every weight of the heads (W_QK, W_V), the MLPs (W1, b1, W2, b2) and W_O is the ball
    [w - eps, w + eps]; a softmax head's scale c = scale / sqrt(scale_sqrt_divisor) is a fixed
    hyperparameter and stays exact.  The forward pass is done in arb ball arithmetic (every +, *,
    /, exp rigorous), so each enclosure contains the value computed by every model whose weights
    each lie within eps of these.  Softmax: exp(c s_j - shift) / sum_k exp(c s_k - shift) with an
    exact shift (any shift gives the same weights).  Hardmax: the argmax set must be certain (one
    key certainly above every other, or all candidates exact and equal), else NotCertified.  No
    float format here: rounding of exp in a float format is not bounded (formats are refused for
    softmax models)."""

    def __init__(self, model: Model, eps: Fraction = Fraction(0), precision: int = PRECISION):
        import flint
        from flint import arb

        self.model, self.eps, self.precision = model, Fraction(eps), precision
        if model.has_rotary or model.has_gated_mlp or model.has_parallel:
            raise ValueError("weight balls do not cover rotary heads, gated MLPs or parallel layers")
        prev = flint.ctx.prec
        flint.ctx.prec = precision
        try:
            r = self.eps
            self.layers = []
            for layer in model.layers:
                heads = [(_mat(h.W_QK, r), _mat(h.W_V, r), h.attention,
                          _arb(h.scale) / _arb(h.scale_sqrt_divisor).sqrt()) for h in layer]
                mlp = None
                if layer.mlp is not None:
                    m = layer.mlp
                    mlp = (_mat(m.W1, r), _mat(m.b1[:, None], r), _mat(m.W2, r), _mat(m.b2[:, None], r))
                inv_m = arb(1) / len(layer) if len(layer) else None
                self.layers.append((heads, layer.causal, mlp, inv_m))
            self._diff = {}
        finally:
            flint.ctx.prec = prev

    def _diff_row(self, y: int, c: int):
        """(W_O[y] - W_O[c]) as a ball row: exact difference, radius 2 eps per entry."""
        if (y, c) not in self._diff:
            W = self.model.W_O
            self._diff[(y, c)] = _mat(np.array([[Fraction(W[y, r]) - Fraction(W[c, r]) for r in range(W.shape[1])]]),
                                      2 * self.eps)
        return self._diff[(y, c)]

    def stream(self, token_ids, positions) -> dict:
        """{position: enclosure of the final residual column (d x 1 arb_mat)} for the given
        positions.  Raises NotCertified when a hardmax argmax is not certain or a ball is infinite."""
        import flint
        from flint import arb, arb_mat

        from depthcert.checkers.model import embed_exact

        prev = flint.ctx.prec
        flint.ctx.prec = self.precision
        try:
            n = len(token_ids)
            H = arb_mat([[_arb(v) for v in row] for row in embed_exact(self.model, token_ids)])
            d = H.nrows()
            last = len(self.layers) - 1
            queries = list(range(n))
            for li, (heads, causal, mlp, inv_m) in enumerate(self.layers):
                queries = sorted(set(positions)) if li == last else list(range(n))
                Q = H if len(queries) == n else arb_mat([[H[r, k] for k in queries] for r in range(d)])
                if heads:
                    upd = None
                    for W_QK, W_V, kind, scale in heads:
                        S = H.transpose() * (W_QK * Q)  # (keys, queries)
                        A = _attention_balls(S, kind, scale, causal, queries, n)
                        term = (W_V * H) * A
                        upd = term if upd is None else upd + term
                    Q = Q + (upd if len(heads) == 1 else upd * inv_m)
                if mlp is not None:
                    W1, b1, W2, b2 = mlp
                    ones = arb_mat([[_arb(1)] * len(queries)])
                    Z = W1 * Q + b1 * ones
                    Z = arb_mat([[_relu_ball(Z[i, j]) for j in range(Z.ncols())] for i in range(Z.nrows())])
                    Q = Q + W2 * Z + b2 * ones
                H = Q
            for i in range(H.nrows()):
                for j in range(H.ncols()):
                    if not H[i, j].is_finite():
                        raise NotCertified
            if not self.layers:
                queries = list(range(n))
            return {k: arb_mat([[H[r, queries.index(k)]] for r in range(H.nrows())]) for k in positions}
        finally:
            flint.ctx.prec = prev

    def differences(self, token_ids, labels) -> list:
        """[(position, label row, [(class row, lower, upper) of (logit_label - logit_class)])] for
        labels = [(position, label row)]; raises NotCertified as stream() does."""
        import flint

        cols = self.stream(token_ids, [p for p, _ in labels])
        prev = flint.ctx.prec
        flint.ctx.prec = self.precision
        try:
            out = []
            C = self.model.W_O.shape[0]
            for pos, y in labels:
                h = cols[pos]
                out.append((pos, y, [(c, _lower(v), _upper(v)) for c in range(C) if c != y
                                     for v in [(self._diff_row(y, c) * h)[0, 0]]]))
            return out
        finally:
            flint.ctx.prec = prev

    def hidden_column(self, token_ids, position: int):
        return self.stream(token_ids, [position])[position]


def _attention_balls(S, kind: str, scale, causal: bool, queries, n: int):
    from flint import arb, arb_mat

    zero = arb(0)
    A = [[zero] * len(queries) for _ in range(n)]
    for k, q in enumerate(queries):
        keys = list(range(q + 1)) if causal else list(range(n))
        if kind == "relu":
            for j in keys:
                A[j][k] = _relu_ball(S[j, k])
        elif kind == "softmax":
            x = [S[j, k] * scale for j in keys]
            if not all(v.is_finite() for v in x):
                raise NotCertified
            shift = arb(max(v.mid() for v in x))
            e = [(v - shift).exp() for v in x]
            Z = sum(e[1:], e[0])
            for j, ej in zip(keys, e):
                A[j][k] = ej / Z
        else:  # hardmax: the argmax set must be certain
            s = [S[j, k] for j in keys]
            if not all(v.is_finite() for v in s):
                raise NotCertified
            cand = certain_maxima(s)
            if cand is None:
                raise NotCertified
            w = arb(1) / len(cand)
            for i in cand:
                A[keys[i]][k] = w
    return arb_mat(A)
