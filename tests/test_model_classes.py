"""verify() on the wider model classes against tests/independent_oracle.py, on random small models.

Every property draws a small model from plain integers (a list of (row, column, value) entries
per matrix, so a shrunk failure prints a readable model), a small user dataset whose labels
come from the oracle's own argmax (mostly; some labels are deliberately wrong, some positions
unlabelled), and checks:

  rational models (relu, hardmax, causal masks, MLPs, a constant row, outputs "last"/"all"):
    verify agrees exactly with the oracle on the verdict, the minimum margin (up to and
    including the first failing point), the first failing index and position, for the default
    settings, force_exact=True and batch sizes 1, 3, 2048; the counterexample's logits are the
    oracle's; the float64 fast path and the big-integer path give identical verdicts.
  softmax models: independent_oracle.softmax_cross_check (mpmath at 80 digits): every point
    verify decides is decided the same way, a tie is never verified, the margin enclosure
    contains the mpmath minimum margin.
  equivariant models (by construction, under a token swap, MLP hidden units permuted with it):
    check_equivariance accepts them, symmetry="auto" gives the verdict of symmetry="off".

Datasets are batched by length (DatasetTask); verify still reports the first failure in index
order (test_first_counterexample_is_first_in_index_order_across_lengths).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import BlockMatrix, Layout, zeros
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.checkers.symmetry import check_equivariance
from independent_oracle import Oracle, oracle_scan, softmax_cross_check

VOCAB = ("a", "b", "c")
CLASSES = ("p", "q", "r")
VALUES = (1, -1, 2, -2, Fraction(1, 2), 3, Fraction(-1, 3))
SCALES = (1, 2, Fraction(1, 2), 10)
BALLS = {"max_precision": 256}
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- specifications: plain integers, built into models in the test body


@dataclass(frozen=True)
class HeadSpec:
    kind: str
    scale: object
    qk: tuple  # ((row, col, value), ...)
    v: tuple


@dataclass(frozen=True)
class MLPSpec:
    width: int
    W1: tuple  # ((hidden, stream, value), ...)
    b1: tuple  # ((hidden, value), ...)
    W2: tuple  # ((stream, hidden, value), ...)
    b2: tuple  # ((stream, value), ...)


@dataclass(frozen=True)
class LayerSpec:
    heads: tuple
    causal: bool
    mlp: MLPSpec | None


@dataclass(frozen=True)
class Spec:
    V: int
    n: int  # max_length
    const: bool
    scratch: int
    C: int
    outputs: str
    layers: tuple
    W_O: tuple
    points: tuple  # per sequence: ((token, flip, hidden), ...) per position; flip 0 = the model's argmax

    @property
    def dim(self) -> int:
        return self.V + self.n + int(self.const) + self.scratch


def _entries(draw, rows: int, cols: int, max_size: int, values=VALUES) -> tuple:
    return tuple(draw(st.lists(st.tuples(st.integers(0, rows - 1), st.integers(0, cols - 1), st.sampled_from(values)),
                               max_size=max_size)))


def _vec_entries(draw, size: int, max_size: int, values=VALUES) -> tuple:
    return tuple(draw(st.lists(st.tuples(st.integers(0, size - 1), st.sampled_from(values)), max_size=max_size)))


@st.composite
def specs(draw, kinds=("relu",), causal=None, mlp="maybe", const=None, outputs=None, n_layers=(1, 3),
          mixed=False, need=None, values=VALUES):
    """kinds: attention kinds to draw from; causal/const: None = random; mlp: "never" | "maybe" |
    "always"; outputs: None = random; mixed: the first layer holds heads of two kinds; need: a
    kind that must occur (first head of the first layer); values: the weight entries."""
    V = draw(st.integers(2, 3))
    n = draw(st.integers(1, 4))
    const = draw(st.booleans()) if const is None else const
    scratch = draw(st.integers(0, 12 - V - n - int(const)))
    d = V + n + int(const) + scratch
    C = draw(st.integers(2, 3))
    out_kind = draw(st.sampled_from(("last", "all"))) if outputs is None else outputs
    layers = []
    for li in range(draw(st.integers(*n_layers))):
        has_mlp = mlp == "always" or (mlp == "maybe" and draw(st.booleans()))
        m = draw(st.integers(0 if has_mlp else 1, 2))
        if li == 0 and (mixed or need):
            m = max(m, 2 if mixed else 1)
        heads = []
        for hi in range(m):
            kind = draw(st.sampled_from(kinds))
            if li == 0 and hi == 0 and need:
                kind = need
            if li == 0 and mixed and hi == 1:
                kind = draw(st.sampled_from([k for k in kinds if k != heads[0].kind]))
            scale = draw(st.sampled_from(SCALES)) if kind == "softmax" else 1
            heads.append(HeadSpec(kind, scale, _entries(draw, d, d, d, values), _entries(draw, d, d, d, values)))
        spec_mlp = None
        if has_mlp:
            f = draw(st.integers(1, 3))
            spec_mlp = MLPSpec(f, _entries(draw, f, d, 2 * f, values), _vec_entries(draw, f, f, values),
                               _entries(draw, d, f, 2 * f, values), _vec_entries(draw, d, 2, values))
        layers.append(LayerSpec(tuple(heads), draw(st.booleans()) if causal is None else causal, spec_mlp))
    W_O = _entries(draw, C, d, 2 * d, values)
    length = st.integers(1, n)
    pos = st.tuples(st.integers(0, V - 1), st.integers(0, C - 1), st.booleans())
    noisy = draw(st.booleans())
    points = draw(st.lists(length.flatmap(lambda k: st.lists(pos, min_size=k, max_size=k).map(tuple)),
                           min_size=1, max_size=8))
    if not noisy:  # every label the model's own argmax: verified unless a tie
        points = [tuple((t, 0, h) for t, _, h in p) for p in points]
    return Spec(V, n, const, scratch, C, out_kind, tuple(layers), W_O, tuple(points))


def _matrix(rows: int, cols: int, entries) -> np.ndarray:
    M = zeros(rows, cols)
    for i, j, v in entries:
        M[i, j] = Fraction(v)
    return M


def _vector(size: int, entries) -> np.ndarray:
    v = np.array([Fraction(0)] * size, dtype=object)
    for i, x in entries:
        v[i] = Fraction(x)
    return v


def build_model(spec: Spec) -> Model:
    d = spec.dim
    blocks = [("token", spec.V), ("position", spec.n)] + [("one", 1)] * spec.const
    lay = Layout.of(*blocks, *((("scratch", spec.scratch),) if spec.scratch else ()))
    layers = []
    for L in spec.layers:
        heads = tuple(Head(_matrix(d, d, h.qk), _matrix(d, d, h.v), attention=h.kind, scale=Fraction(h.scale))
                      for h in L.heads)
        mlp = None
        if L.mlp is not None:
            f = L.mlp.width
            mlp = MLP(_matrix(f, d, L.mlp.W1), _vector(f, L.mlp.b1), _matrix(d, f, L.mlp.W2), _vector(d, L.mlp.b2))
        layers.append(Layer(heads, causal=L.causal, mlp=mlp))
    return Model(VOCAB[: spec.V], spec.n, CLASSES[: spec.C], lay, tuple(layers), _matrix(spec.C, d, spec.W_O),
                 outputs=spec.outputs, constant_row=spec.const)


def _argmax(o) -> int:
    """First index of the maximum (a tie makes the label fail: the model's logits tie)."""
    best = max(o)
    return next(i for i, v in enumerate(o) if v == best)


def build_task(spec: Spec, model: Model) -> DatasetTask:
    """Distinct sequences in order of length; labels = the oracle's argmax shifted by `flip`."""
    orc = Oracle(model)
    seen, seqs = set(), []
    for p in sorted(spec.points, key=len):
        toks = tuple(VOCAB[t] for t, _, _ in p)
        if toks not in seen:
            seen.add(toks)
            seqs.append((toks, p))
    sequences, labels = [], []
    for toks, p in seqs:
        sequences.append(list(toks))
        if spec.outputs == "last":
            y = (_argmax(orc.logits(toks)) + p[-1][1]) % spec.C
            labels.append(CLASSES[y])
        else:
            L = orc.logits_all(toks)
            lab = [None if hide else CLASSES[(_argmax(L[k]) + flip) % spec.C] for k, (_, flip, hide) in enumerate(p)]
            if all(y is None for y in lab):
                lab[-1] = CLASSES[(_argmax(L[-1]) + p[-1][1]) % spec.C]
            labels.append(lab)
    return DatasetTask(sequences, labels, per_position=spec.outputs == "all")


# ---- the checks


def _summary(v):
    ce = v.counterexample
    return v.verdict, v.min_margin, None if ce is None else ce.index, None if ce is None else ce.position


def check_rational(spec: Spec):
    model = build_model(spec)
    task = build_task(spec, model)
    want = oracle_scan(model, task)
    want_t = (want.verdict, want.min_margin, want.index, want.position)
    event(f"oracle: {want.verdict}")
    orc = Oracle(model)
    default = verify(model, task, progress=False)
    event(f"path: {default.path}")
    exact = verify(model, task, progress=False, force_exact=True)
    assert exact.path == "exact big integers"
    # the two paths: identical verdicts, counterexamples included
    assert _summary(default) == _summary(exact)
    assert default.counterexample == exact.counterexample
    assert default.points_checked == exact.points_checked
    runs = {"default": default, "force_exact": exact}
    for bs in (1, 3, 2048):
        runs[f"batch_size={bs}"] = verify(model, task, batch_size=bs, progress=False)
    runs["batch_size=3, force_exact"] = verify(model, task, batch_size=3, progress=False, force_exact=True)
    for name, v in runs.items():
        assert _summary(v) == want_t, (name, _summary(v), want_t)
    ce = default.counterexample
    if ce is not None:
        p = task.point(ce.index)
        pos = ce.position if ce.position is not None else len(p.tokens) - 1
        o = orc.logits_all(p.tokens)[pos]
        expected = p.labels[pos] if task.outputs == "all" else p.label
        assert ce.expected == expected
        assert list(ce.logits) == o
        e = model.classes.index(expected)
        best_other = max(v for c, v in enumerate(o) if c != e)
        assert o[model.classes.index(ce.predicted)] == best_other >= o[e]
        assert ce.tie == (best_other == o[e])
    return model, task


def check_softmax(spec: Spec):
    model = build_model(spec)
    task = build_task(spec, model)
    v = verify(model, task, progress=False, balls=BALLS)
    event(f"softmax: {v.verdict}")
    problems = softmax_cross_check(model, task, v, balls=BALLS)
    assert not problems, problems
    # the rational layers before the first softmax layer: float64 and big-integer prefixes agree
    w = verify(model, task, progress=False, balls=BALLS, force_exact=True, batch_size=3)
    assert (w.verdict, w.counterexample, w.undecided, w.undecided_count) == \
        (v.verdict, v.counterexample, v.undecided, v.undecided_count)
    # the two paths' balls may differ in their last bits (2^-52 here: a hypothesis example, seed
    # b'AXicRYqJCQAwDAK1KXQu918qj5ASUO+IQpeCjiiiAmis83geMcbhn/gwq83CmmpuAAlpnwrW'): both enclose the
    # true margin, so they must overlap
    if v.margin_enclosure is not None or w.margin_enclosure is not None:
        (a, b), (c, d) = v.margin_enclosure, w.margin_enclosure
        assert max(a, c) <= min(b, d), (v.margin_enclosure, w.margin_enclosure)


# ---- rational classes


@settings(max_examples=100, **SETTINGS)
@given(specs(kinds=("hardmax",), causal=False, mlp="never"))
def test_hardmax_agrees_with_oracle(spec):
    check_rational(spec)


@settings(max_examples=80, **SETTINGS)
@given(specs(kinds=("relu",), causal=True, mlp="never"))
def test_relu_causal_agrees_with_oracle(spec):
    check_rational(spec)


@settings(max_examples=80, **SETTINGS)
@given(specs(kinds=("hardmax",), causal=True, mlp="never"))
def test_hardmax_causal_agrees_with_oracle(spec):
    check_rational(spec)


@settings(max_examples=100, **SETTINGS)
@given(specs(kinds=("relu", "hardmax"), mlp="always"))
def test_mlp_layers_agree_with_oracle(spec):
    """Every layer has an MLP; some have no heads at all."""
    check_rational(spec)


@settings(max_examples=80, **SETTINGS)
@given(specs(kinds=("relu", "hardmax"), const=True))
def test_constant_row_agrees_with_oracle(spec):
    check_rational(spec)


@settings(max_examples=100, **SETTINGS)
@given(specs(kinds=("relu", "hardmax"), outputs="all"))
def test_per_position_outputs_agree_with_oracle(spec):
    check_rational(spec)


@settings(max_examples=80, **SETTINGS)
@given(specs(kinds=("relu", "hardmax"), mixed=True))
def test_mixed_relu_and_hardmax_heads_agree_with_oracle(spec):
    check_rational(spec)


# weights of mixed sizes, so that the magnitude bound lands on both sides of 2^53 and the
# float64 fast path is taken close to its limit
BIG_VALUES = (1, -1, 2**20, -(2**20) - 1, 2**26 + 3, Fraction(1, 2**12), Fraction(-5, 3), 7)


@settings(max_examples=60, **SETTINGS)
@given(specs(kinds=("relu", "hardmax"), values=BIG_VALUES))
def test_large_weights_float_and_integer_paths_agree_with_oracle(spec):
    check_rational(spec)


# ---- softmax


@settings(max_examples=80, **SETTINGS)
@given(specs(kinds=("softmax",), mlp="maybe", n_layers=(1, 2), need="softmax"))
def test_softmax_agrees_with_mpmath(spec):
    check_softmax(spec)


@settings(max_examples=60, **SETTINGS)
@given(specs(kinds=("relu", "hardmax", "softmax"), mlp="maybe", n_layers=(1, 2), need="softmax"))
def test_softmax_mixed_with_rational_heads_agrees_with_mpmath(spec):
    check_softmax(spec)


# ---- explicit softmax cases

# vocab (a, b, c), positions 3; one softmax head, query = the last position.  On "a b": key 0
# (token a) scores 0, key 1 (token b) scores 1 (W_QK[b, p1]); values copy the key's token into
# the "copy" block, so copy_a = w0 = 1/(1 + e^scale) and copy_b = w1 = 1 - w0.


def _copy_model(scale, W_O_rows, outputs="last", qk_entries=(("token", 1, "position", 1, 1),)):
    lay = Layout.of(("token", 3), ("position", 3), ("copy", 3))
    qk = BlockMatrix(lay, lay)
    for rb, i, cb, j, val in qk_entries:
        qk.entry(rb, i, cb, j, val)
    v = BlockMatrix(lay, lay).set("copy", "token", 1).build()
    W_O = zeros(len(W_O_rows), lay.dim)
    for c, row in enumerate(W_O_rows):
        for (blk, i), val in row.items():
            W_O[c, lay.index(blk, i)] = Fraction(val)
    classes = ("x", "y", "z")[: len(W_O_rows)]
    return Model(VOCAB, 3, classes, lay, ((Head(qk.build(), v, attention="softmax", scale=Fraction(scale)),),), W_O,
                 outputs=outputs)


def _mp_w0(scale):
    import mpmath

    with mpmath.workdps(80):
        return 1 / (1 + mpmath.exp(mpmath.mpf(scale)))


def _w0_digits(scale, digits: int = 55) -> Fraction:
    """w0 = 1/(1 + e^scale) truncated to `digits` decimals (within 10^-digits below w0)."""
    import mpmath

    with mpmath.workdps(80):
        return Fraction(int(mpmath.floor(_mp_w0(scale) * mpmath.mpf(10) ** digits)), 10**digits)


def test_softmax_tiny_positive_margin_is_verified():
    """x reads copy_a = w0 = 1/(1 + e^28) ~ 6.9e-13, y reads 0: margin ~ 6.9e-13 > 0.  A second
    model subtracts a rational q just below w0 through the token b row (margin ~ 1e-35), which
    64-bit balls cannot separate: verify must raise the precision and still verify."""
    data = DatasetTask([["a", "b"]], ["x"])
    m = _copy_model(28, [{("copy", 0): 1}, {}])
    v = verify(m, data, progress=False, balls=BALLS)
    assert v.verdict == "verified", v
    lo, hi = v.margin_enclosure
    w0 = _mp_w0(28)
    assert 0 < lo <= hi and abs(float(lo) - float(w0)) < 1e-20
    assert softmax_cross_check(m, data, v, balls=BALLS) == []
    q = _w0_digits(28) - Fraction(1, 10**35)  # w0 - q ~ 1e-35
    m2 = _copy_model(28, [{("copy", 0): 1}, {("token", 1): q}])
    v2 = verify(m2, data, progress=False, balls=BALLS)
    assert v2.verdict == "verified", v2
    assert "64 bits)" not in v2.path  # needed more than the first attempt's precision
    lo, hi = v2.margin_enclosure
    assert 0 < lo and float(lo) < 1e-34
    assert softmax_cross_check(m2, data, v2, balls=BALLS) == []


def test_softmax_certified_wrong_point_is_refuted_at_its_index():
    """Per-position labels: point 2 fails at position 1 by ~ -1e-35 (y reads q just above w0
    through token b); points 0, 1 are correct, point 3 is wrong too (later: not reported)."""
    q = _w0_digits(28) + Fraction(1, 10**35)
    m = _copy_model(28, [{("copy", 0): 1}, {("token", 1): q}, {("token", 2): 1}], outputs="all")
    # position 1 of "a b": x = w0, y = q > w0 (wrong by ~1e-35); of "a c": z = 1 wins (label z correct)
    seqs = [["a", "c"], ["a", "c", "c"], ["a", "b"], ["c", "b"]]
    labels = [[None, "z"], [None, "z", "z"], [None, "x"], ["z", "x"]]
    data = DatasetTask(seqs, labels)
    v = verify(m, data, progress=False, balls=BALLS)
    assert v.verdict == "refuted", v
    ce = v.counterexample
    assert (ce.index, ce.position, ce.expected, ce.predicted, ce.tie) == (2, 1, "x", "y", False)
    lo, hi = ce.logit_bounds[1]
    assert lo <= q <= hi
    assert softmax_cross_check(m, data, v, balls=BALLS) == []


def test_softmax_exact_tie_is_never_verified():
    """(1) A symmetric construction: on "a b c" the last query scores tokens a and b equally
    (1) and c lower (0), so copy_a = copy_b exactly, but through exp: the balls of x - y keep a
    positive radius at every precision; the exact tie decision (Lindemann-Weierstrass, collected
    coefficients all 0) proves the tie, and the point is refuted as one.  (2) Two identical W_O
    rows: the difference is exactly 0 (a radius-0 ball), a certified tie, which fails."""
    sym = _copy_model(1, [{("copy", 0): 1}, {("copy", 1): 1}, {("copy", 2): 1}],
                      qk_entries=(("token", 0, "position", 2, 1), ("token", 1, "position", 2, 1)))
    data = DatasetTask([["c", "c", "c"], ["a", "b", "c"], ["b", "c", "c"]], ["z", "x", "y"])
    v = verify(sym, data, progress=False, balls=BALLS)
    assert v.verdict == "refuted", v
    ce = v.counterexample
    assert (ce.index, ce.expected, ce.predicted, ce.tie) == (1, "x", "y", True)
    assert v.undecided is None and v.undecided_count == 0
    assert "exact tie decision (1 point)" in v.path
    lo, hi = v.margin_enclosure
    assert lo <= 0 <= hi
    assert softmax_cross_check(sym, data, v, balls=BALLS) == []

    same = _copy_model(1, [{("copy", 0): 1}, {("copy", 0): 1}])
    data = DatasetTask([["a", "b"]], ["x"])
    v = verify(same, data, progress=False, balls=BALLS)
    assert v.verdict == "refuted", v
    assert v.counterexample.tie and v.counterexample.index == 0
    assert softmax_cross_check(same, data, v, balls=BALLS) == []


# ---- equivariance under a token swap


class SwapTask(DatasetTask):
    """All sequences of one length over the vocabulary, declaring Sym({a, b}); orbit
    representatives (the smallest index of each orbit) found by brute force."""

    def __init__(self, sequences, labels, group, **kw):
        super().__init__(sequences, labels, name="swap", **kw)
        self.group = group
        a, b = group
        swap = {a: b, b: a}
        index = {tuple(s): i for i, s in enumerate(sequences)}
        reps, sizes = [], []
        for i, s in enumerate(sequences):
            j = index[tuple(swap.get(t, t) for t in s)]
            if i <= j:
                reps.append(i)
                sizes.append(1 if i == j else 2)
        assert sum(sizes) == len(sequences)
        self._reps = (np.array(reps, dtype=np.int64), np.array(sizes, dtype=np.int64))

    def symmetry_groups(self):
        return (self.group,)

    def orbit_representatives(self):
        return self._reps


@dataclass(frozen=True)
class SymSpec:
    V: int
    n: int
    length: int
    const: bool
    free: int  # untagged scratch rows (the two tagged rows swap with the tokens)
    token_classes: bool  # classes are the tokens (permuted by the swap), else p/q (fixed)
    outputs: str
    layers: tuple
    W_O: tuple
    flips: tuple  # one per sequence (per position for outputs "all"), 0 = the model's argmax

    @property
    def dim(self) -> int:
        return self.V + self.n + int(self.const) + 2 + self.free


@st.composite
def sym_specs(draw):
    V = draw(st.integers(2, 3))
    length = draw(st.integers(1, 3 if V == 2 else 2))
    n = draw(st.integers(length, 4))
    const = draw(st.booleans())
    free = draw(st.integers(0, 12 - V - n - int(const) - 2))
    d = V + n + int(const) + 2 + free
    token_classes = draw(st.booleans())
    C = V if token_classes else 2
    outputs = draw(st.sampled_from(("last", "all")))
    layers = []
    for _ in range(draw(st.integers(1, 2))):
        has_mlp = draw(st.booleans())
        heads = tuple(HeadSpec(draw(st.sampled_from(("relu", "hardmax"))), 1, _entries(draw, d, d, d),
                               _entries(draw, d, d, d))
                      for _ in range(draw(st.integers(0 if has_mlp else 1, 2))))
        mlp = None
        if has_mlp:
            f = draw(st.integers(1, 4))
            mlp = MLPSpec(f, _entries(draw, f, d, 2 * f), _vec_entries(draw, f, f), _entries(draw, d, f, 2 * f),
                          _vec_entries(draw, d, 2))
        layers.append(LayerSpec(heads, draw(st.booleans()), mlp))
    W_O = _entries(draw, C, d, 2 * d)
    size = V**length
    per = length if outputs == "all" else 1
    noisy = draw(st.booleans())
    flips = tuple(draw(st.lists(st.integers(0, C - 1), min_size=size * per, max_size=size * per))) if noisy else (0,) * (size * per)
    return SymSpec(V, n, length, const, free, token_classes, outputs, tuple(layers), W_O, flips)


def build_symmetric(spec: SymSpec):
    """(model, task): every matrix symmetrised, M + (M permuted by the swap), so that it is
    invariant under pi (tokens a <-> b, scratch rows tagged (s, a) <-> (s, b)), kappa on the
    classes, and (MLPs) the hidden permutation swapping units 0 and 1."""
    d, V = spec.dim, spec.V
    blocks = [("token", V), ("position", spec.n)] + [("one", 1)] * spec.const + [("s", 2)]
    blocks += [("free", spec.free)] if spec.free else []
    lay = Layout.of(*blocks)
    ra, rb = lay.index("s", 0), lay.index("s", 1)
    pi = np.arange(d)
    pi[[0, 1]] = [1, 0]
    pi[[ra, rb]] = [rb, ra]
    classes = VOCAB[:V] if spec.token_classes else ("p", "q")
    kappa = np.arange(len(classes))
    if spec.token_classes:
        kappa[[0, 1]] = [1, 0]

    def sym(M, rows, cols):
        return M + M[np.ix_(rows, cols)]

    layers = []
    for L in spec.layers:
        heads = tuple(Head(sym(_matrix(d, d, h.qk), pi, pi), sym(_matrix(d, d, h.v), pi, pi), attention=h.kind)
                      for h in L.heads)
        mlp = None
        if L.mlp is not None:
            f = L.mlp.width
            q = np.arange(f)
            if f >= 2:
                q[[0, 1]] = [1, 0]
            b1, b2 = _vector(f, L.mlp.b1), _vector(d, L.mlp.b2)
            mlp = MLP(sym(_matrix(f, d, L.mlp.W1), q, pi), b1 + b1[q], sym(_matrix(d, f, L.mlp.W2), pi, q), b2 + b2[pi])
        layers.append(Layer(heads, causal=L.causal, mlp=mlp))
    W_O = sym(_matrix(len(classes), d, spec.W_O), kappa, pi)
    model = Model(VOCAB[:V], spec.n, classes, lay, tuple(layers), W_O, outputs=spec.outputs,
                  constant_row=spec.const, notes={"row_tokens": {ra: ("s", "a"), rb: ("s", "b")}})
    # labels: the orbit representative's (argmax + flip), carried to its image by kappa
    orc = Oracle(model)
    seqs = [list(s) for s in itertools.product(VOCAB[:V], repeat=spec.length)]
    index = {tuple(s): i for i, s in enumerate(seqs)}
    swap_tok = {"a": "b", "b": "a"}
    swap_cls = {c: classes[kappa[i]] for i, c in enumerate(classes)}
    fixed_classes = [c for c in classes if swap_cls[c] == c]
    per = spec.length if spec.outputs == "all" else 1
    labels = [None] * len(seqs)
    for i, s in enumerate(seqs):
        if labels[i] is not None:
            continue
        j = index[tuple(swap_tok.get(t, t) for t in s)]
        L = orc.logits_all(s) if spec.outputs == "all" else [orc.logits(s)]
        lab = [classes[(_argmax(o) + spec.flips[i * per + k]) % len(classes)] for k, o in enumerate(L)]
        if i == j and any(swap_cls[y] != y for y in lab):
            # fixed by the swap, so its logits are kappa-invariant: a label moved by kappa is
            # inconsistent with the symmetry.  Without noise, leave the point out (its orbit is
            # itself, so the dataset stays closed under the swap); with noise, relabel it
            if not any(spec.flips) and len(seqs) > 1:
                labels[i] = "drop"
                continue
            lab = [y if swap_cls[y] == y else fixed_classes[0] for y in lab]
        labels[i] = lab
        labels[j] = [swap_cls[y] for y in lab]
    kept = [i for i in range(len(seqs)) if labels[i] != "drop"]
    seqs, labels = [seqs[i] for i in kept], [labels[i] for i in kept]
    if spec.outputs == "last":
        labels = [lab[0] for lab in labels]
    task = SwapTask(seqs, labels, ("a", "b"), per_position=spec.outputs == "all")
    return model, task


@settings(max_examples=100, **SETTINGS)
@given(sym_specs())
def test_equivariant_models_give_the_same_verdict_with_symmetry(spec):
    model, task = build_symmetric(spec)
    report = check_equivariance(model, task.symmetry_groups())
    assert report.ok, report.reason
    want = oracle_scan(model, task)
    want_t = (want.verdict, want.min_margin, want.index, want.position)
    event(f"oracle: {want.verdict}")
    off = verify(model, task, progress=False, symmetry="off")
    auto = verify(model, task, progress=False, symmetry="auto")
    assert any("equivariance proven" in note for note in auto.notes), auto.notes
    assert _summary(off) == want_t
    assert _summary(auto) == want_t
    if auto.verdict == "verified":
        assert auto.points_covered == task.size
        assert auto.points_checked == len(task.orbit_representatives()[0])


def test_symmetrised_model_with_a_broken_entry_is_not_used():
    """Sanity of the construction above: one non-symmetric entry makes check_equivariance fail
    (and verify then falls back to every point)."""
    spec = SymSpec(3, 2, 2, False, 1, True, "last",
                   (LayerSpec((HeadSpec("relu", 1, ((0, 3, 1),), ((5, 0, 1),)),), False,
                              MLPSpec(2, ((0, 5, 1),), ((0, -1),), ((7, 0, 2),), ())),),
                   ((0, 5, 1), (2, 7, 1)), (0,) * 9)
    model, task = build_symmetric(spec)
    assert check_equivariance(model, task.symmetry_groups()).ok
    broken = model.with_weight((0, "mlp", "b1", 1), 5)
    assert not check_equivariance(broken, task.symmetry_groups()).ok
    v = verify(broken, task, progress=False, symmetry="auto")
    assert v.points_covered == v.points_checked


# ---- regressions: disagreements with the specification found by these tests (fixed)


def test_first_counterexample_is_first_in_index_order_across_lengths():
    """Index 0 (length 2) fails with margin -1, index 1 (length 1) fails with margin -2: the
    first failing point in index order is 0, and the min margin up to it is -1 (verify used to
    report index 1 and margin -2: it checks the length-1 group first)."""
    lay = Layout.of(("token", 2), ("position", 2))
    W_O = zeros(2, 4)
    W_O[0, 2] = Fraction(3)  # x scores position 0
    W_O[1, 1] = Fraction(1)  # y scores token b
    model = Model(("a", "b"), 2, ("x", "y"), lay, (Layer((Head(zeros(4, 4), zeros(4, 4)),)),), W_O)
    data = DatasetTask([["a", "b"], ["b"]], ["x", "y"])
    # "a b", last column (b, p1): x = 0, y = 1, margin -1.  "b" (b, p0): x = 3, y = 1, margin -2
    want = oracle_scan(model, data)
    assert (want.verdict, want.min_margin, want.index) == ("refuted", -1, 0)
    assert _summary(verify(model, data, progress=False))[:3] == (want.verdict, want.min_margin, want.index)


def test_softmax_margin_enclosure_of_a_wrong_point_covers_its_best_other_class():
    """softmax_balls used to stop at the first negative (label - class) ball, so the enclosure of
    a wrong point could miss its true margin, and `predicted` was not the best other class."""
    lay = Layout.of(("token", 1), ("position", 1))
    W_O = zeros(3, 2)
    W_O[1, 0] = Fraction(1)  # y: logit 1
    W_O[2, 0] = Fraction(5)  # z: logit 5; label x: logit 0, so the margin is 0 - 5 = -5
    model = Model(("a",), 1, ("x", "y", "z"), lay, ((Head(zeros(2, 2), zeros(2, 2), attention="softmax"),),), W_O)
    v = verify(model, DatasetTask([["a"]], ["x"]), progress=False)
    assert v.verdict == "refuted" and v.counterexample.predicted == "z"
    lo, hi = v.margin_enclosure
    assert lo <= -5 <= hi, (lo, hi)


def test_hardmax_after_softmax_with_tied_scores_is_decided():
    """Layer 1 (softmax) writes the same non-exact value s into every column of "a a b"; layer 2
    (hardmax) scores every key by its s: three equal scores whose balls overlap at every
    precision.  The exact decision proves the three scores equal (their differences collect to
    0), so the argmax is all three keys: uniform weights, t = 1/3, logit x = 30 t = 10, margin 10
    (it used to stay undecided with an unknown margin)."""
    lay = Layout.of(("token", 2), ("position", 3), ("s", 1), ("t", 1))
    qk1 = BlockMatrix(lay, lay).set("token", "position", [[1, 1, 1], [0, 0, 0]]).build()
    v1 = BlockMatrix(lay, lay).entry("s", 0, "token", 0, 1).build()
    qk2 = BlockMatrix(lay, lay).set("s", "position", [[1, 1, 1]]).build()
    v2 = BlockMatrix(lay, lay).entry("t", 0, "token", 1, 1).build()
    W_O = BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "t", 0, 30).build()
    model = Model(("a", "b"), 3, ("x", "y"), lay,
                  ((Head(qk1, v1, attention="softmax"),), (Head(qk2, v2, attention="hardmax"),)), W_O)
    data = DatasetTask([["a", "a", "b"]], ["x"])
    assert float(Oracle(model).margin(("a", "a", "b"), "x")[0]) == pytest.approx(10)
    v = verify(model, data, progress=False, balls=BALLS)
    assert v.verdict == "verified", v
    assert v.margin_enclosure == (10, 10)  # the margin is the rational 30 * 1/3 exactly
    assert "exact tie decision (1 point)" in v.path
    assert softmax_cross_check(model, data, v, balls=BALLS) == []
