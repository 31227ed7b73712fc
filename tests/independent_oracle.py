"""An independent oracle for verdicts: the model's forward pass evaluated point by point.

Written from the specification (the paper's eq. 1-3 and the module docstring of
checkers/model.py), not from checkers/evaluate.py or checkers/softmax_balls.py, and deliberately
plain: Python lists, `fractions.Fraction`, no numpy arithmetic, no common denominators, no
magnitude bounds.  It reads only the model's public fields (vocab, max_length, classes,
constant_row, outputs, layers of heads with W_QK / W_V / attention / scale, the layers' causal
flag and MLP, W_O) and the task's points (tokens, label or per-position labels) in index order.

    H0 = [X; P; 1?; 0]        one-hot token (vocab order), one-hot position, optional row of
                              ones at row V + max_length (constant_row), zeros
    per layer, m heads (skipped when m = 0):
      h_k <- h_k + (1/m) sum_i sum_{j visible from k} (W_Vi h_j) A_i[j, k]
          s_jk = h_j^T W_QKi h_k
          relu     A[j, k] = relu(s_jk)
          hardmax  A[j, k] = 1/|M_k| for j in M_k = argmax over visible keys, else 0
          softmax  A[j, k] = exp(c s_jk) / sum_{visible j'} exp(c s_j'k)
          visible: every key, or (causal layer) the keys j <= k
    then, if the layer has an MLP, every column: h <- h + W2 relu(W1 h + b1) + b2
    o_k = W_O h_k             at the last column (outputs "last") or at every column ("all")

A point is correct iff at every checked position o[label] > o[c] for every other class c (ties
fail); a position's margin is o[label] - max_{c != label} o[c], a point's margin the minimum
over its labelled positions.  `oracle_verdict` scans points in index order and stops at the
first failure, reporting the minimum margin over the points seen up to and including it.

Rational models (relu, hardmax, MLPs) are evaluated exactly in Fractions.  Softmax models are
evaluated exactly up to their first softmax layer, then in mpmath floating point at `DPS`
decimal digits (80 by default): a cross-check, NOT a certificate (exact ties come out as tiny
numbers of either sign; hardmax after a softmax layer treats scores within ~10^-(DPS-20) of the
maximum as tied).  `softmax_cross_check` compares such an evaluation with a softmax Verdict.

Speed: weight rows, the keys' values and each query's W_QK h_k are used sparsely (only non-zero
entries), and in the last layer of an outputs-"last" model only the last column is computed past
the attention keys (the classifier reads nothing else).  Both are exact identities.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from fractions import Fraction

ZERO = Fraction(0)
ONE = Fraction(1)
DPS = 80  # mpmath decimal digits for softmax models
TIE = 1e-40  # |mpmath margin| <= TIE: treated as an exact tie by the softmax cross-check


def _sparse_rows(M) -> list[list[tuple[int, Fraction]]]:
    """Rows of a matrix as lists of (column, non-zero Fraction)."""
    rows = []
    for i in range(M.shape[0]):
        row = []
        for j in range(M.shape[1]):
            v = Fraction(M[i, j])
            if v != 0:
                row.append((j, v))
        rows.append(row)
    return rows


def _vector(v) -> list[Fraction]:
    return [Fraction(x) for x in list(v)]


def _mp():
    import mpmath

    return mpmath


@dataclass
class _Head:
    W_QK: list
    W_V: list
    attention: str
    scale: Fraction
    sqrt_divisor: Fraction = Fraction(1)  # softmax weights exp(scale / sqrt(sqrt_divisor) * score)


@dataclass
class _Layer:
    heads: list
    causal: bool
    mlp: tuple | None  # (W1 rows, b1, W2 rows, b2)
    softmax: bool = False


class Oracle:
    def __init__(self, model, dps: int = DPS):
        self.vocab = list(model.vocab)
        self.tok = {t: i for i, t in enumerate(self.vocab)}
        self.classes = list(model.classes)
        self.d = model.dim
        self.max_length = model.max_length
        self.constant_row = bool(getattr(model, "constant_row", False))
        self.outputs = getattr(model, "outputs", "last")
        self.dps = dps
        self.layers = []
        for layer in model.layers:
            heads = [
                _Head(_sparse_rows(h.W_QK), _sparse_rows(h.W_V), getattr(h, "attention", "relu"),
                      Fraction(getattr(h, "scale", 1)), Fraction(getattr(h, "scale_sqrt_divisor", 1)))
                for h in layer
            ]
            mlp = getattr(layer, "mlp", None)
            if mlp is not None:
                mlp = (_sparse_rows(mlp.W1), _vector(mlp.b1), _sparse_rows(mlp.W2), _vector(mlp.b2))
            self.layers.append(_Layer(heads, bool(getattr(layer, "causal", False)), mlp,
                                      any(h.attention == "softmax" for h in heads)))
        self.W_O = _sparse_rows(model.W_O)
        self.has_softmax = any(L.softmax for L in self.layers)

    # ---- arithmetic helpers: work on Fractions and (after a softmax layer) on mpf alike

    @staticmethod
    def _apply(rows, h):
        """W h for sparse rows W and a dense list h."""
        out = []
        zero = 0 * h[0]  # Fraction(0) or mpf(0): never mix the two
        for row in rows:
            s = zero
            for j, w in row:
                x = h[j]
                if x:
                    s += w * x
            out.append(s)
        return out

    def _is_max(self, s, best, approx: bool) -> bool:
        if not approx:
            return s == best
        mp = _mp()
        tol = mp.mpf(10) ** (-(self.dps - 20)) * max(1, abs(best))
        return s >= best - tol

    # ---- the forward pass

    def embed(self, tokens) -> list[list[Fraction]]:
        """H0 as a list of columns."""
        n = len(tokens)
        assert 1 <= n <= self.max_length, f"sequence of length {n}, model has {self.max_length} positions"
        V = len(self.vocab)
        H = []
        for p, t in enumerate(tokens):
            col = [ZERO] * self.d
            col[self.tok[t]] = ONE
            col[V + p] = ONE
            if self.constant_row:
                col[V + self.max_length] = ONE
            H.append(col)
        return H

    def hidden(self, tokens, last_only: bool = False) -> list:
        """The final H as a list of columns (entries Fraction, or mpf once a softmax layer ran).
        last_only: past the last layer's attention keys only the last column is computed (the
        others come back as None)."""
        n = len(tokens)
        H = self.embed(tokens)
        approx = False
        for li, layer in enumerate(self.layers):
            if layer.softmax and not approx:
                mp = _mp()
                approx = True
                with mp.workdps(self.dps):
                    H = [[mp.mpf(x.numerator) / x.denominator for x in col] for col in H]
            if approx:
                with _mp().workdps(self.dps):
                    H = self._layer(layer, H, n, li == len(self.layers) - 1 and last_only, approx)
            else:
                H = self._layer(layer, H, n, li == len(self.layers) - 1 and last_only, approx)
        return H

    def _layer(self, layer: _Layer, H, n: int, last_only: bool, approx: bool):
        queries = [n - 1] if last_only else list(range(n))
        zero = 0 * H[0][0]
        m = len(layer.heads)
        new = {k: H[k][:] for k in queries}
        for head in layer.heads:
            # each key's value W_V h_j as its non-zero entries (a, value): the zeros add nothing
            values = [[(a, x) for a, x in enumerate(self._apply(head.W_V, H[j])) if x] for j in range(n)]
            for k in queries:
                u = self._apply(head.W_QK, H[k])
                u_nonzero = [(a, x) for a, x in enumerate(u) if x]
                keys = list(range(k + 1)) if layer.causal else list(range(n))
                scores = []
                for j in keys:
                    hj = H[j]
                    s = zero
                    for a, x in u_nonzero:
                        if hj[a]:
                            s += hj[a] * x
                    scores.append(s)
                weights = self._weights(head, scores, approx, zero)
                col = new[k]
                for j, w in zip(keys, weights):
                    if not w:
                        continue
                    coef = w / m
                    for a, x in values[j]:
                        col[a] += coef * x
        if last_only:
            H = [None] * (n - 1) + [new[n - 1]]
        else:
            H = [new[k] for k in range(n)]
        if layer.mlp is not None:
            W1, b1, W2, b2 = layer.mlp
            for k in queries:
                h = H[k]
                pre = self._apply(W1, h)
                z = [p + b if p + b > 0 else zero for p, b in zip(pre, b1)]
                out = self._apply(W2, z)
                H[k] = [x + o + b for x, o, b in zip(h, out, b2)]
        return H

    def _weights(self, head: _Head, scores, approx: bool, zero):
        if head.attention == "relu":
            return [s if s > 0 else zero for s in scores]
        if head.attention == "hardmax":
            best = max(scores)
            winners = [self._is_max(s, best, approx) for s in scores]
            count = sum(winners)
            return [(ONE / count if not approx else _mp().mpf(1) / count) if w else zero for w in winners]
        if head.attention == "softmax":
            mp = _mp()
            c = mp.mpf(head.scale.numerator) / head.scale.denominator
            c /= mp.sqrt(mp.mpf(head.sqrt_divisor.numerator) / head.sqrt_divisor.denominator)
            x = [c * s for s in scores]
            top = max(x)
            e = [mp.exp(v - top) for v in x]
            Z = mp.fsum(e)
            return [v / Z for v in e]
        raise ValueError(f"unknown attention kind {head.attention!r}")

    # ---- logits and margins

    def _precision(self):
        """mpmath's working precision for softmax models (every public method runs inside it)."""
        return _mp().workdps(self.dps) if self.has_softmax else nullcontext()

    def logits(self, tokens) -> list:
        """Logits at the last column."""
        with self._precision():
            return self._apply(self.W_O, self.hidden_last(tokens))

    def logits_all(self, tokens) -> list[list]:
        """Logits at every column."""
        with self._precision():
            return [self._apply(self.W_O, h) for h in self.hidden(tokens)]

    def hidden_last(self, tokens) -> list:
        """The last column of the final H (what a last-position classifier reads)."""
        return self.hidden(tokens, last_only=True)[len(tokens) - 1]

    def _margin_of(self, o, label):
        y = self.classes.index(label)
        others = [v for c, v in enumerate(o) if c != y]
        if not others:
            return None
        return o[y] - max(others)

    def margin(self, tokens, label):
        """(margin at the last column, logits there); margin None with a single class."""
        with self._precision():
            o = self.logits(tokens)
            return self._margin_of(o, label), o

    def point_margin(self, tokens, labels) -> "PointResult":
        """labels: one label (checked at the last column) or one label or None per position.
        The point's margin is the minimum over its labelled positions; `position` is its first
        failing position (margin <= 0), else the first position of the smallest margin."""
        with self._precision():
            return self._point_margin(tokens, labels)

    def _point_margin(self, tokens, labels) -> "PointResult":
        if isinstance(labels, (tuple, list)):
            L = self.logits_all(tokens)
            per = []
            for k, y in enumerate(labels):
                if y is not None:
                    per.append((k, self._margin_of(L[k], y), L[k]))
            if not per:
                raise ValueError("a point labels no position")
        else:
            o = self.logits(tokens)
            per = [(len(tokens) - 1, self._margin_of(o, labels), o)]
        if per[0][1] is None:
            return PointResult(None, per[0][0], per[0][2], tuple((k, m) for k, m, _ in per))
        failing = [p for p in per if p[1] <= 0]
        pick = failing[0] if failing else min(per, key=lambda p: p[1])
        return PointResult(min(p[1] for p in per), pick[0], pick[2], tuple((k, m) for k, m, _ in per))


@dataclass(frozen=True)
class PointResult:
    margin: object  # Fraction (rational models), mpf (softmax), None (a single class)
    position: int  # first failing position, else the first position of the smallest margin
    logits: list  # logits at `position`
    per_position: tuple = ()  # ((position, margin), ...) over labelled positions


@dataclass(frozen=True)
class OracleResult:
    verdict: str  # "verified" | "refuted"
    min_margin: object
    index: int | None  # first failing point
    position: int | None  # its first failing position (None for last-position tasks)
    points: list = field(default_factory=list)  # [(index, PointResult)] of the points seen


def _labels_of(task, p):
    return p.labels if getattr(task, "outputs", "last") == "all" else p.label


def oracle_scan(model, task, limit: int | None = None, stop: bool = True) -> OracleResult:
    """Every point in index order (up to `limit`); stop at the first failure unless stop=False
    (then min_margin, index and position still describe the scan up to the first failure)."""
    orc = Oracle(model)
    per_position = getattr(task, "outputs", "last") == "all"
    best, first, first_pos = None, None, None
    seen = []
    size = task.size if limit is None else min(limit, task.size)
    for i in range(size):
        p = task.point(i)
        r = orc.point_margin(p.tokens, _labels_of(task, p))
        seen.append((i, r))
        if first is not None or r.margin is None:
            continue
        best = r.margin if best is None else min(best, r.margin)
        if r.margin <= 0:
            first, first_pos = i, (r.position if per_position else None)
            if stop:
                break
    verdict = "verified" if first is None else "refuted"
    return OracleResult(verdict, best, first, first_pos, seen)


def oracle_verdict(model, task, limit: int | None = None):
    """("verified" | "refuted", min margin up to and including the first failure, its index)."""
    r = oracle_scan(model, task, limit)
    return r.verdict, r.min_margin, r.index


def oracle_verdict_positions(model, task, limit: int | None = None):
    """As oracle_verdict, plus the first failing position (None for last-position tasks or when
    no point fails): (verdict, min margin, first failing index, its first failing position)."""
    r = oracle_scan(model, task, limit)
    return r.verdict, r.min_margin, r.index, r.position


# ---- softmax models: compare a Verdict with the mpmath evaluation (a cross-check)


def _single_point_task(task, p):
    from depthcert.checkers.tasks.dataset_file import DatasetTask

    if getattr(task, "outputs", "last") == "all":
        return DatasetTask([list(p.tokens)], [list(p.labels)], per_position=True)
    return DatasetTask([list(p.tokens)], [p.label])


def softmax_cross_check(model, task, verdict, per_point: bool = True, balls: dict | None = None,
                        tie: float = TIE) -> list[str]:
    """Problems (an empty list if none) between a softmax model's Verdict and mpmath:

    - "verified" while some point's mpmath margin is <= tie (wrong or an exact tie);
    - a counterexample whose predicted class is not above the expected one in mpmath (or, for a
      certified tie, not within `tie` of it), or whose logit_bounds miss the mpmath logits;
    - an undecided point whose reported margin interval does not contain its mpmath margin (an
      unknown interval, None, is allowed only when a hardmax head follows a softmax layer: its
      argmax may be unsettled; then margin_enclosure must be None too);
    - margin_enclosure not containing the mpmath minimum margin over the points up to and
      including the first wrong one (index order);
    - per_point: every point verified alone (verify on a one-point dataset) must have mpmath
      margin > tie, every point refuted alone margin <= tie (wrong, or a certified tie).
    """
    from depthcert.checkers.exhaustive import verify

    mp = _mp()
    slack = mp.mpf(10) ** (-(DPS - 20))
    problems = []
    scan = oracle_scan(model, task, stop=False)
    orc = Oracle(model)
    with mp.workdps(DPS):
        margins = {i: r.margin for i, r in scan.points}
        if verdict.verdict == "verified":
            bad = [i for i, m in margins.items() if m is not None and m <= tie]
            if bad:
                problems.append(f"verified, but mpmath margin of point {bad[0]} is {mp.nstr(margins[bad[0]], 8)}")
        ce = verdict.counterexample
        if ce is not None:
            p = task.point(ce.index)
            pos = ce.position if ce.position is not None else len(p.tokens) - 1
            o = orc.logits_all(p.tokens)[pos]
            e, c = model.classes.index(ce.expected), model.classes.index(ce.predicted)
            if ce.tie and not abs(o[c] - o[e]) <= tie:
                problems.append(f"refuted at point {ce.index} position {pos} as a tie of {ce.predicted} with "
                                f"{ce.expected}, but the mpmath difference is {mp.nstr(o[c] - o[e], 8)}")
            if not ce.tie and not o[c] - o[e] > tie:
                problems.append(f"refuted at point {ce.index} position {pos}: {ce.predicted} above {ce.expected}, "
                                f"but the mpmath difference is {mp.nstr(o[c] - o[e], 8)}")
            if not margins[ce.index] <= tie:
                problems.append(f"refuted at point {ce.index}, but its mpmath margin is {mp.nstr(margins[ce.index], 8)}")
            if ce.logit_bounds:
                for k, (lo, hi) in enumerate(ce.logit_bounds):
                    if not (mp.mpf(lo.numerator) / lo.denominator - slack <= o[k]
                            <= mp.mpf(hi.numerator) / hi.denominator + slack):
                        problems.append(f"counterexample logit {k} bounds [{float(lo)}, {float(hi)}] miss mpmath "
                                        f"{mp.nstr(o[k], 12)}")
        u = verdict.undecided
        first_soft = next((li for li, L in enumerate(orc.layers) if L.softmax), len(orc.layers))
        hardmax_after = any(h.attention == "hardmax" for L in orc.layers[first_soft:] for h in L.heads)
        if u is not None and u.margin is None:
            if not hardmax_after:
                problems.append(f"undecided point {u.index} with an unknown margin, but no hardmax follows softmax")
            if verdict.margin_enclosure is not None:
                problems.append("an undecided point's margin is unknown, yet margin_enclosure is given")
        elif u is not None:
            m = margins[u.index]  # the interval encloses the point's margin (min over its positions)
            lo, hi = u.margin
            if not (mp.mpf(lo.numerator) / lo.denominator - slack <= m <= mp.mpf(hi.numerator) / hi.denominator + slack):
                problems.append(f"undecided point {u.index}: margin interval [{float(lo)}, {float(hi)}] misses "
                                f"mpmath margin {mp.nstr(m, 12)}")
        if verdict.margin_enclosure is not None:
            upto = ce.index if ce is not None else None
            ms = [m for i, m in margins.items() if m is not None and (upto is None or i <= upto)]
            if ms:
                true_min = min(ms)
                lo, hi = verdict.margin_enclosure
                lo_mp = mp.mpf(lo.numerator) / lo.denominator - slack
                hi_mp = mp.mpf(hi.numerator) / hi.denominator + slack
                if not lo_mp <= true_min <= hi_mp:
                    problems.append(f"margin_enclosure [{float(lo)}, {float(hi)}] misses the mpmath min margin "
                                    f"{mp.nstr(true_min, 12)}")
    if per_point:
        for i in range(task.size):
            m = margins[i]
            if m is None:
                continue
            v = verify(model, _single_point_task(task, task.point(i)), progress=False, balls=balls)
            if v.verdict == "verified" and not m > tie:
                problems.append(f"point {i} alone verified, mpmath margin {mp.nstr(m, 8)}")
            if v.verdict == "refuted" and not m <= tie:  # wrong, or a certified exact tie
                problems.append(f"point {i} alone refuted, mpmath margin {mp.nstr(m, 8)}")
    return problems
