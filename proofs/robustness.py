"""How far a verified model's weights can move: three searches, each step an exact check.

linf_radius        certified_lower: the largest eps = 2^-k such that the ball forward pass with
                   every weight widened to [w - eps, w + eps] (checkers/weight_balls.py) keeps
                   every point's strict argmax; broken_upper: an explicit model with every weight
                   within that distance that the exact evaluation refutes (W_O's label row and
                   runner-up row pushed by eps against the worst point's hidden vector: the
                   margin falls by exactly 2 eps |h|_1, so at eps = margin / (2 |h|_1) it ties).
min_fraction_bits  the fewest fractional bits b such that every weight rounded to the nearest
                   multiple of 2^-b (ties to even) still verifies (checkers.exhaustive.verify on
                   every point), every smaller b having been verified to fail.
formats            float16, bfloat16, float32: whether a forward pass in that format (weights
                   rounded to it, every operation rounded to nearest, any summation order)
                   provably gives the exact argmax on every point, with the worst point.

Points: one per orbit when the model's equivariance under the task's symmetry is proven
(checkers/symmetry.py), else every point.  This is sound for the ball passes too: the weight
box [w - eps, w + eps] of an equivariant model is mapped onto itself by the stream permutation,
so the worst case over the box at sigma X is the worst case at X; rounding to a format is done
entry by entry and the rounding bounds hold for every summation order.
"""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Model

MAX_BITS = 64
MAX_HALVINGS = 200
BALL_SECONDS_PER_POINT = 0.01  # ball forward pass, d' ~ 20 (measured here: ~2-6 ms)


def map_weights(model: Model, f) -> Model:
    """The model with f applied to every weight (heads, MLPs, W_O)."""
    def conv(M):
        out = np.empty(M.shape, dtype=object)
        for idx, v in np.ndenumerate(M):
            out[idx] = f(Fraction(v))
        out.flags.writeable = False
        return out

    layers = []
    for layer in model.layers:
        heads = tuple(replace(h, W_QK=conv(h.W_QK), W_V=conv(h.W_V)) for h in layer)
        mlp = layer.mlp
        if mlp is not None:
            mlp = replace(mlp, W1=conv(mlp.W1), b1=conv(mlp.b1), W2=conv(mlp.W2), b2=conv(mlp.b2))
        layers.append(replace(layer, heads=heads, mlp=mlp))
    return replace(model, layers=tuple(layers), W_O=conv(model.W_O))


def round_to_bits(model: Model, bits: int) -> Model:
    """Every weight rounded to the nearest multiple of 2^-bits, ties to even (Fraction.__round__
    rounds halves to even); bits may be negative."""
    scale = Fraction(2) ** bits
    return map_weights(model, lambda v: round(v * scale) / scale)


def _dyadic_bits(model: Model) -> int | None:
    """The b at which rounding changes nothing (every weight a multiple of 2^-b), or None."""
    top = 0
    for M in _matrices(model):
        for v in M.flat:
            q = Fraction(v).denominator
            if q & (q - 1):
                return None
            top = max(top, q.bit_length() - 1)
    return top


def _matrices(model: Model):
    for layer in model.layers:
        for h in layer:
            yield h.W_QK
            yield h.W_V
        if layer.mlp is not None:
            yield from (layer.mlp.W1, layer.mlp.b1, layer.mlp.W2, layer.mlp.b2)
    yield model.W_O


def _points(model, task, symmetry, max_points):
    from depthcert.checkers.exhaustive import plan_points

    plan = plan_points(model, task, symmetry, max_scan=max_points)
    if max_points is not None and plan.n_eval > max_points:
        raise BadInput(f"robustness checks {plan.n_eval} points, above the limit {max_points}; "
                       f"raise it with --max-points {plan.n_eval}")
    return plan


def _plan_batches(task, plan, size=512):
    return task.batches(size) if plan.indices is None else task.batches_of(plan.indices, size)


def min_fraction_bits(model: Model, task, symmetry: str = "auto", max_points: int | None = None) -> dict:
    """The scan starts where every weight rounds to 0 (all logits tie: refuted) and goes up, so
    the answer b always comes with b - 1 refuted (b may be negative: multiples of 2^|b|)."""
    from depthcert.checkers.exhaustive import verify

    top = max((abs(Fraction(v)) for M in _matrices(model) for v in M.flat), default=Fraction(0))
    start = -(math.floor(top).bit_length() + 1)  # 2^-start > 2 |w| for every w: all round to 0
    exact_at = _dyadic_bits(model)
    cap = MAX_BITS if exact_at is None else exact_at
    last_fail = None
    for b in range(start, cap + 1):
        rounded = round_to_bits(model, b)
        plan = _points(rounded, task, symmetry, max_points)
        v = verify(rounded, task, progress=False, plan=plan)
        if v.verified:
            return {"bits": b, "fails_at": b - 1,
                    "fails": (f"{b - 1} bits refuted at point {last_fail}" if last_fail is not None
                              else f"{b - 1} bits: every weight rounds to 0"),
                    "checked": f"b = {start}..{b}, each verified exactly on every point (orbit representatives "
                               "when the symmetry proof applies)"}
        last_fail = v.counterexample.index if v.counterexample is not None else v.verdict
    note = (f"every weight is a multiple of 2^-{exact_at}: rounding there changes nothing, and the model "
            "itself is not verified") if exact_at is not None else f"no b up to {MAX_BITS} verifies"
    return {"bits": None, "fails": f"b = {start}..{cap} refuted", "note": note}


def _failing(task, model, plan) -> int | str:
    from depthcert.checkers.exhaustive import verify

    v = verify(model, task, progress=False, plan=plan)
    return v.counterexample.index if v.counterexample is not None else v.verdict


def _ball_pass(model, task, plan, class_rows, tokens, eps=Fraction(0), fmt=None, stop_at_failure=True):
    """(all certified, min margin lower bound, its point index, overflow seen)."""
    from depthcert.checkers.weight_balls import BallForward

    bf = BallForward(model, eps, fmt)
    worst, worst_i, overflow = None, None, False
    for batch in _plan_batches(task, plan):
        ids = batch.ids if tokens is None else tokens[batch.ids]
        for row, y, index in zip(ids, batch.labels, batch.index):
            low, over = bf.margin_lower([int(t) for t in row], int(class_rows[int(y)]))
            overflow = overflow or over
            if worst is None or low < worst:
                worst, worst_i = low, int(index)
            if stop_at_failure and (low <= 0 or over):
                return False, worst, worst_i, overflow
    return (worst is not None and worst > 0 and not overflow), worst, worst_i, overflow


def _worst_point(model, task, plan, class_rows, tokens):
    """(index, label row, runner-up row, exact margin, exact hidden vector h) of the smallest margin."""
    from depthcert.checkers.evaluate import Evaluator

    ev = Evaluator(model)
    best = None
    for batch in _plan_batches(task, plan, 2048):
        ids = batch.ids if tokens is None else tokens[batch.ids]
        num, den = ev.logits(ids)
        for i in range(len(batch.index)):
            y = int(class_rows[int(batch.labels[i])])
            row = [int(v) for v in num[i]]
            c = max((k for k in range(len(row)) if k != y), key=lambda k: row[k])
            m = Fraction(row[y] - row[c], den)
            if best is None or m < best[3]:
                best = (int(batch.index[i]), y, c, m, ids[i])
    index, y, c, m, ids = best
    from depthcert.proofs.readout import _probe

    hnum, hden = Evaluator(_probe(model)).logits(np.asarray([ids]))
    h = [Fraction(int(v), hden) for v in hnum[0]]
    return index, y, c, m, h, ids


def linf_radius(model: Model, task, symmetry: str = "auto", max_points: int | None = None) -> dict:
    from depthcert.checkers.budget import charge_seconds
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.exhaustive import check_compatible, token_rows

    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    plan = _points(model, task, symmetry, max_points)
    if len(model.classes) < 2:
        return {"certified_lower": None, "broken_upper": None, "note": "a single class: nothing can break"}
    index, y, c, margin, h, ids = _worst_point(model, task, plan, class_rows, tokens)
    if margin <= 0:
        return {"certified_lower": None, "broken_upper": "0", "note": "the model itself is refuted"}
    norm1 = sum(abs(v) for v in h)
    upper = margin / (2 * norm1)
    sign = [Fraction((v > 0) - (v < 0)) for v in h]
    W = model.W_O.copy()
    for r in range(model.dim):
        W[y, r] = Fraction(W[y, r]) - upper * sign[r]
        W[c, r] = Fraction(W[c, r]) + upper * sign[r]
    W.flags.writeable = False
    broken = replace(model, W_O=W)
    num, den = Evaluator(broken).logits(np.asarray([ids]))
    row = [int(v) for v in num[0]]
    if not row[c] >= row[y]:
        raise RuntimeError("the explicit perturbation did not break the worst point")
    charge_seconds(plan.n_eval * BALL_SECONDS_PER_POINT * 8, f"ball forward passes over {plan.n_eval} points")
    k = max(0, math.floor(-math.log2(upper)))
    lower = None
    from depthcert.checkers.weight_balls import BallForward

    for _ in range(MAX_HALVINGS):
        eps = Fraction(1, 2**k)
        # the worst point first: a radius it cannot take is refused without a pass over every point
        low, _ = BallForward(model, eps).margin_lower([int(t) for t in ids], y)
        ok = low > 0 and _ball_pass(model, task, plan, class_rows, tokens, eps=eps)[0]
        if ok:
            lower = eps
            break
        k += 1
    from depthcert.checkers.rational import format_rational

    return {"certified_lower": None if lower is None else str(format_rational(lower)),
            "certified_lower_log2": None if lower is None else -k,
            "broken_upper": str(format_rational(upper)),
            "broken_at_point": index,
            "how": "lower: ball forward pass over weights in [w - eps, w + eps] on every point (orbit representatives "
                   "when the symmetry proof applies); upper: W_O's label and runner-up rows pushed by eps against "
                   "the worst point's hidden vector, refuted exactly at that point"}


def formats(model: Model, task, symmetry: str = "auto", max_points: int | None = None) -> dict:
    from depthcert.checkers.budget import charge_seconds
    from depthcert.checkers.exhaustive import check_compatible, token_rows
    from depthcert.checkers.rational import format_rational
    from depthcert.checkers.weight_balls import FORMATS

    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    plan = _points(model, task, symmetry, max_points)
    charge_seconds(plan.n_eval * BALL_SECONDS_PER_POINT * 3 * 3, f"float-format ball passes over {plan.n_eval} points")
    out = {}
    for name, fmt in FORMATS.items():
        try:
            ok, worst, worst_i, over = _ball_pass(model, task, plan, class_rows, tokens, fmt=fmt,
                                                  stop_at_failure=False)
        except ValueError as exc:  # a weight overflows the format
            out[name] = {"ok": False, "note": str(exc)}
            continue
        entry = {"ok": ok, "worst_margin_lower": None if worst is None else str(format_rational(worst)),
                 "worst_point": None if worst_i is None else {"index": worst_i,
                                                             "tokens": list(task.point(worst_i).tokens)}}
        if over:
            entry["note"] = "a value may exceed the format's largest finite number"
        out[name] = entry
    return out


def robustness_report(model: Model, task, verdict=None, symmetry: str = "auto", max_points: int | None = None) -> dict:
    if model.has_softmax or any(h.attention != "relu" for L in model.layers for h in L) or model.outputs != "last":
        raise BadInput("--robustness covers relu-attention models read at the last position")
    if verdict is not None and not verdict.verified:
        return {"note": "the model is not verified: nothing to be robust about"}
    return {"linf_radius": linf_radius(model, task, symmetry, max_points),
            "min_fraction_bits": min_fraction_bits(model, task, symmetry, max_points),
            "formats": formats(model, task, symmetry, max_points)}
