"""How far a verified model's weights can move: three searches, each step an exact check.

(verify-construction: relu models read at the last position, below; verify-model and verify-tracr:
any model, model_robustness_report at the end, "keeps the verdict" = the same set of correct points.)

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


def _bar(progress: bool, total: int | None, desc: str, unit: str = "pt"):
    """A tqdm bar on stderr for one robustness pass (verify-model shows it on a terminal, never
    under --json), or None."""
    if not progress:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)


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


def min_fraction_bits(model: Model, task, symmetry: str = "auto", max_points: int | None = None,
                      progress: bool = False) -> dict:
    """The scan starts where every weight rounds to 0 (all logits tie: refuted) and goes up, so
    the answer b always comes with b - 1 refuted (b may be negative: multiples of 2^|b|)."""
    from depthcert.checkers.exhaustive import verify

    top = max((abs(Fraction(v)) for M in _matrices(model) for v in M.flat), default=Fraction(0))
    start = -(math.floor(top).bit_length() + 1)  # 2^-start > 2 |w| for every w: all round to 0
    exact_at = _dyadic_bits(model)
    cap = MAX_BITS if exact_at is None else exact_at
    last_fail = None
    bar = _bar(progress, cap + 1 - start, "robustness: fractional bits", unit="b")
    for b in range(start, cap + 1):
        rounded = round_to_bits(model, b)
        plan = _points(rounded, task, symmetry, max_points)
        v = verify(rounded, task, progress=False, plan=plan)
        if bar is not None:
            bar.update(1)
        if v.verified:
            if bar is not None:
                bar.close()
            return {"bits": b, "fails_at": b - 1,
                    "fails": (f"{b - 1} bits refuted at point {last_fail}" if last_fail is not None
                              else f"{b - 1} bits: every weight rounds to 0"),
                    "checked": f"b = {start}..{b}, each verified exactly on every point (orbit representatives "
                               "when the symmetry proof applies)"}
        last_fail = v.counterexample.index if v.counterexample is not None else v.verdict
    if bar is not None:
        bar.close()
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


def linf_radius(model: Model, task, symmetry: str = "auto", max_points: int | None = None,
                progress: bool = False) -> dict:
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
    k = max(0, -_ceil_log2(upper))
    lower = None
    from depthcert.checkers.weight_balls import BallForward

    bar = _bar(progress, None, "robustness: radius", unit="radius")
    for _ in range(MAX_HALVINGS):
        eps = Fraction(1, 2**k)
        # the worst point first: a radius it cannot take is refused without a pass over every point
        low, _ = BallForward(model, eps).margin_lower([int(t) for t in ids], y)
        ok = low > 0 and _ball_pass(model, task, plan, class_rows, tokens, eps=eps)[0]
        if bar is not None:
            bar.update(1)
        if ok:
            lower = eps
            break
        k += 1
    if bar is not None:
        bar.close()
    from depthcert.checkers.rational import format_rational

    return {"certified_lower": None if lower is None else str(format_rational(lower)),
            "certified_lower_log2": None if lower is None else -k,
            "broken_upper": str(format_rational(upper)),
            "broken_at_point": index,
            "how": "lower: ball forward pass over weights in [w - eps, w + eps] on every point (orbit representatives "
                   "when the symmetry proof applies); upper: W_O's label and runner-up rows pushed by eps against "
                   "the worst point's hidden vector, refuted exactly at that point"}


def formats(model: Model, task, symmetry: str = "auto", max_points: int | None = None,
            progress: bool = False) -> dict:
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
    bar = _bar(progress, len(FORMATS), "robustness: float formats", unit="format")
    for name, fmt in FORMATS.items():
        if bar is not None:
            bar.update(1)
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
    if bar is not None:
        bar.close()
    return out


def robustness_report(model: Model, task, verdict=None, symmetry: str = "auto", max_points: int | None = None,
                      progress: bool = False) -> dict:
    """--robustness for verify-construction (relu models read at the last position); `progress`: a
    tqdm bar on stderr per search."""
    if model.has_softmax or any(h.attention != "relu" for L in model.layers for h in L) or model.outputs != "last":
        raise BadInput("--robustness covers relu-attention models read at the last position")
    if verdict is not None and not verdict.verified:
        return {"note": "the model is not verified: nothing to be robust about"}
    return {"linf_radius": linf_radius(model, task, symmetry, max_points, progress),
            "min_fraction_bits": min_fraction_bits(model, task, symmetry, max_points, progress),
            "formats": formats(model, task, symmetry, max_points, progress)}


# ---------------------------------------------------------------------------- any model (verify-model)
MODEL_MAX_POINTS = 200_000  # ball passes over more points than this are refused (one line, exit 2)


def _same_set_check(verdict_b, ref_wrong: set) -> tuple[str, object]:
    """("keeps", None) when the rounded model's correct points are exactly the reference's (every
    point decided); ("changes", first point decided differently); ("undecided", how many)."""
    wrong_b, und = {int(i) for i in verdict_b.wrong}, {int(i) for i in verdict_b.undecided}
    changed = sorted((wrong_b ^ ref_wrong) - und)
    if changed:
        return "changes", changed[0]
    if und:
        return "undecided", len(und)
    return "keeps", None


def _ceil_log2(q: Fraction) -> int:
    """ceil(log2 q) of a positive rational, exactly (a float log2 of a value below 1e-308 is log2(0))."""
    q = Fraction(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()  # 2^(e-1) < q < 2^(e+1)
    return e if Fraction(2) ** e >= q and Fraction(2) ** (e - 1) < q else (e + 1 if Fraction(2) ** e < q else e - 1)


def model_min_fraction_bits(model: Model, task, verdict, opts: dict, progress: bool = False) -> dict:
    """The fewest fractional bits b such that the model with every weight rounded to a multiple of
    2^-b (ties to even) has exactly the same set of correct points as the model itself (every point
    decided by the certified path of verify-model, checkers/accuracy.py).  The scan starts where
    every weight rounds to 0 and goes up; b - 1 is reported as it was decided (a point whose
    verdict changed, or points the certified path left undecided)."""
    from depthcert.checkers.accuracy import decide_all

    ref_wrong = {int(i) for i in verdict.wrong}
    top = max((abs(Fraction(v)) for M in _matrices(model) for v in M.flat), default=Fraction(0))
    start = -(math.floor(top).bit_length() + 1)  # 2^-start > 2 |w| for every w: all round to 0
    exact_at = _dyadic_bits(model)
    cap = MAX_BITS if exact_at is None else max(exact_at, start)
    below = None
    bar = _bar(progress, cap + 1 - start, "robustness: fractional bits", unit="b")
    for b in range(start, cap + 1):
        status, what = _same_set_check(decide_all(round_to_bits(model, b), task, **opts), ref_wrong)
        if bar is not None:
            bar.update(1)
        if status == "keeps":
            if bar is not None:
                bar.close()
            fails = ("-" if below is None else
                     f"{b - 1} bits: point {below[1]} decided differently" if below[0] == "changes" else
                     f"{b - 1} bits: {below[1]} points undecided (not shown to fail)")
            return {"bits": b, "fails_at": b - 1 if below is not None and below[0] == "changes" else None,
                    "fails": fails, "keeps": "the same set of correct points",
                    "checked": f"b = {start}..{b}, every point decided by the certified path"}
        below = (status, what)
    if bar is not None:
        bar.close()
    return {"bits": None, "fails": f"b = {start}..{cap}: none keeps the same set of correct points",
            "keeps": "the same set of correct points"}


def _robust_point(wb, ids, labels, wrong: bool) -> bool:
    """Every model in the weight box keeps this point's verdict: correct points keep every
    difference ball above 0, wrong points keep some class certainly above the label."""
    from depthcert.checkers.weight_balls import NotCertified

    try:
        diffs = wb.differences(ids, labels)
    except NotCertified:
        return False
    if wrong:
        return any(hi < 0 for _, _, cs in diffs for _, _, hi in cs)
    return all(lo > 0 for _, _, cs in diffs for _, lo, _ in cs)


def _all_points(model, task):
    from depthcert.checkers.exhaustive import _ball_labels, check_compatible, token_rows

    class_map = check_compatible(model, task)
    class_rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    tokens = token_rows(model, task)
    out = []
    for batch in task.batches(4096):
        ids = batch.ids if tokens is None else tokens[batch.ids]
        for i in range(len(batch.index)):
            out.append((int(batch.index[i]), [int(t) for t in ids[i]], _ball_labels(batch.labels[i], class_rows, ids.shape[1])))
    return out


def model_linf_radius(model: Model, task, verdict, opts: dict, progress: bool = False) -> dict:
    """certified_lower: the largest eps = 2^-k such that a ball forward pass with every weight in
    [w - eps, w + eps] (checkers/weight_balls.py: WeightBallForward, arb exp for softmax) keeps
    every point's verdict (correct points correct, wrong points wrong); broken_upper: an explicit
    model with every weight within that distance (W_O's label and runner-up rows pushed against
    the hidden vector of the correct point with the smallest margin) whose certified decision of
    that point is wrong."""
    from depthcert.checkers.accuracy import PointDecider
    from depthcert.checkers.rational import format_rational
    from depthcert.checkers.weight_balls import WeightBallForward, NotCertified, _lower, _upper

    if len(model.classes) < 2:
        return {"certified_lower": None, "broken_upper": None, "note": "a single class: nothing can break"}
    ref_wrong = {int(i) for i in verdict.wrong}
    points = _all_points(model, task)
    wb0 = WeightBallForward(model)
    worst = None  # (lower margin, index, ids, position, label row, runner-up row)
    bar = _bar(progress, len(points), "robustness: smallest margin")
    for index, ids, labels in points:
        if bar is not None:
            bar.update(1)
        if index in ref_wrong:
            continue
        try:
            diffs = wb0.differences(ids, labels)
        except NotCertified:
            continue
        for pos, y, cs in diffs:
            for c, lo, _ in cs:
                if worst is None or lo < worst[0]:
                    worst = (lo, index, ids, pos, y, c)
    if bar is not None:
        bar.close()
    upper, broken_at = None, None
    if worst is not None and worst[0] > 0:
        import flint

        _, index, ids, pos, y, c = worst
        prev = flint.ctx.prec
        flint.ctx.prec = wb0.precision
        try:
            h = wb0.hidden_column(ids, pos)
            signs = [1 if h[r, 0].mid() > 0 else -1 if h[r, 0].mid() < 0 else 0 for r in range(h.nrows())]
            D = sum((h[r, 0] * s for r, s in enumerate(signs) if s), flint.arb(0))
            m = (wb0._diff_row(y, c) * h)[0, 0]
            d_low, m_up = _lower(D), _upper(m)
        finally:
            flint.ctx.prec = prev
        if d_low > 0:
            q = m_up / (2 * d_low) * Fraction(1025, 1024)
            unit = Fraction(2) ** (_ceil_log2(q) - 13)
            eps = math.ceil(q / unit) * unit  # a short dyadic at or above q
            for _ in range(8):
                W = model.W_O.copy()
                for r, s in enumerate(signs):
                    W[y, r] = Fraction(W[y, r]) - eps * s
                    W[c, r] = Fraction(W[c, r]) + eps * s
                W.flags.writeable = False
                broken = replace(model, W_O=W)
                res = PointDecider(broken, task, **opts).chunk(index, index + 1, 1)
                if index in {int(i) for i in res.wrong}:
                    upper, broken_at = eps, index
                    break
                eps *= 2
    k = 0 if upper is None else max(0, -_ceil_log2(upper))
    lower = None
    hard: list = []  # points that failed at a larger radius: checked first
    for _ in range(MAX_HALVINGS):
        eps = Fraction(1, 2**k)
        wb = WeightBallForward(model, eps)
        ok = True
        bar = _bar(progress, len(hard) + len(points), f"robustness: radius 2^-{k}")
        for p in hard + points:
            if bar is not None:
                bar.update(1)
            if not _robust_point(wb, p[1], p[2], p[0] in ref_wrong):
                if p not in hard:
                    hard.insert(0, p)
                ok = False
                break
        if bar is not None:
            bar.close()
        if ok:
            lower = eps
            break
        k += 1
    out = {"certified_lower": None if lower is None else str(format_rational(lower)),
           "certified_lower_log2": None if lower is None else -k,
           "broken_upper": None if upper is None else str(format_rational(upper)),
           "broken_at_point": broken_at,
           "keeps": "the same set of correct points",
           "how": "lower: arb ball forward pass (softmax exp included) over weights in [w - eps, w + eps] on every "
                  "point: correct points stay correct, wrong points stay wrong; upper: W_O's label and runner-up rows "
                  "pushed by eps against the hidden vector of the correct point with the smallest margin, that point "
                  "then decided wrong by the certified path"}
    if upper is None:
        out["note"] = ("no explicit perturbation found" if worst is not None else
                       "no correct point to break" if verdict.correct == 0 else
                       # correct points whose margins the unperturbed ball pass could not bound
                       # (an infinite ball: weights of 1e300 give scores of 1e600 inside exp)
                       "the ball pass bounds no correct point's margin: nothing to push against")
    return out


def model_robustness_report(model: Model, task, verdict, opts: dict, progress: bool = False) -> dict:
    """--robustness for verify-model: any model class (relu, hardmax, softmax; any read-out
    positions), 'keeps the verdict' meaning the same set of correct points.  `progress`: a tqdm
    bar on stderr per pass (a terminal run is never silent for a minute)."""
    if task.size > MODEL_MAX_POINTS:
        raise BadInput(f"--robustness covers at most {MODEL_MAX_POINTS:,} points (ball passes); "
                       f"this task has {task.size:,}")
    if model.has_norm_or_smooth:  # the weight balls know no LayerNorm/RMSNorm nor gelu/silu
        raise BadInput("--robustness is not available for models with LayerNorm/RMSNorm or a gelu/silu MLP")
    if len(verdict.undecided):
        return {"note": "some points are undecided: the set of correct points is not known"}
    rational_last = (not model.has_softmax and model.outputs == "last"
                     and all(h.attention == "relu" for L in model.layers for h in L))
    if rational_last and verdict.correct == verdict.points:
        fm = formats(model, task, symmetry="off")
    else:
        why = ("softmax heads: the float rounding of exp is not bounded here, so no format is certified"
               if model.has_softmax else
               "hardmax heads: the format passes cover relu attention only"
               if any(h.attention != "relu" for L in model.layers for h in L) else
               "the format passes cover models read at the last position" if model.outputs != "last" else
               "the format passes cover models correct on every point")
        fm = {"available": False, "reason": why}
    return {"linf_radius": model_linf_radius(model, task, verdict, opts, progress),
            "min_fraction_bits": model_min_fraction_bits(model, task, verdict, opts, progress),
            "formats": fm}
