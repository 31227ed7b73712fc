"""Independent audit of this wave's speed-ups (checkers/evaluate.py's last-query one-hot pass,
_int_matrix's pointer-table grouping and the int64 classifier; symmetry's value codes; readout's
tied variables and normalized margin; indexed's block slices): each against a reference written
here from the definitions (a Fraction forward pass from checkers/model.py's semantics, a
union-find, direct entry comparisons), on random models at the float64 limits."""
from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction
from math import gcd, lcm

import numpy as np
import pytest

from depthcert.checkers import evaluate
from depthcert.checkers.evaluate import Evaluator, _int64_or_none, _int_matrix, _int_parts, integerize
from depthcert.checkers.layout import Layout
from depthcert.checkers.model import MLP, Head, Layer, Model


# ---------------------------------------------------------------- an independent Fraction forward

def _matvec(M, x):
    return [sum((M[a, b] * x[b] for b in range(len(x)) if x[b]), Fraction(0)) for a in range(M.shape[0])]


def _reference_logits(model: Model, toks) -> list[Fraction]:
    """h_k += (1/m) sum_i sum_j w_ijk W_V,i h_j (relu(h_j^T W_QK h_k), or 1/|argmax| on the argmax
    set; keys j <= k under a causal mask), then h += W2 relu(W1 h + b1) + b2; logits W_O h_last."""
    n, V, d = len(toks), len(model.vocab), model.dim
    H = [[Fraction(0)] * d for _ in range(n)]
    for p, t in enumerate(toks):
        H[p][t] = H[p][V + p] = Fraction(1)
        if model.constant_row:
            H[p][V + model.max_length] = Fraction(1)
    for L in model.layers:
        new = [row[:] for row in H]
        for h in L:
            QK = [_matvec(h.W_QK, H[k]) for k in range(n)]
            VH = [_matvec(h.W_V, H[j]) for j in range(n)]
            for k in range(n):
                keys = [j for j in range(n) if not L.causal or j <= k]
                s = {j: sum(H[j][a] * QK[k][a] for a in range(d)) for j in keys}
                if h.attention == "relu":
                    w = {j: max(Fraction(0), s[j]) for j in keys}
                else:
                    top = max(s.values())
                    at = [j for j in keys if s[j] == top]
                    w = {j: Fraction(int(j in at), len(at)) for j in keys}
                for a in range(d):
                    new[k][a] += sum(w[j] * VH[j][a] for j in keys) / len(L)
        H = new
        if L.mlp is not None:
            mp = L.mlp
            for k in range(n):
                z = [max(Fraction(0), v + mp.b1[i]) for i, v in enumerate(_matvec(mp.W1, H[k]))]
                o = _matvec(mp.W2, z)
                H[k] = [H[k][a] + o[a] + mp.b2[a] for a in range(d)]
    return [sum((model.W_O[c, a] * H[-1][a] for a in range(d) if H[-1][a]), Fraction(0))
            for c in range(len(model.classes))]


def _objects(ints, rng, share: bool, dens=(1, 1, 2, 3)) -> np.ndarray:
    """Fractions of these integers over random denominators; equal values one shared object or not."""
    out = np.empty(np.shape(ints), dtype=object)
    pool: dict = {}
    for idx, v in np.ndenumerate(np.asarray(ints)):
        key = (int(v), dens[int(rng.integers(len(dens)))])
        out[idx] = pool[key] if share and key in pool else pool.setdefault(key, Fraction(*key))
    return out


def _random_model(rng, n_layers: int = 1) -> Model:
    """V 2..3 tokens, max_length 1..4, maybe a constant row and scratch rows, 1..4 relu/hardmax heads
    per layer (some with all-zero scores), causal or not, maybe an MLP, mixed denominators."""
    V, n, const = int(rng.integers(2, 4)), int(rng.integers(1, 5)), bool(rng.integers(0, 2))
    scratch = int(rng.integers(0, 3))
    d = V + n + const + scratch
    blocks = [("token", V), ("position", n)] + [("one", 1)] * const + [("scratch", scratch)] * bool(scratch)
    share = bool(rng.integers(0, 2))
    layers = []
    for _ in range(n_layers):
        heads = []
        for _ in range(int(rng.integers(1, 5))):
            A = rng.integers(-2, 3, (d, d)) * (rng.random((d, d)) < 0.6) * int(rng.integers(0, 4) > 0)
            B = rng.integers(-3, 4, (d, d)) * (rng.random((d, d)) < 0.5)
            heads.append(Head(_objects(A, rng, share), _objects(B, rng, share),
                              attention=("relu", "hardmax")[int(rng.integers(0, 2))]))
        mlp = None
        if rng.integers(0, 3) == 0:
            f = int(rng.integers(1, 4))
            mlp = MLP(*(_objects(rng.integers(-2, 3, s), rng, share) for s in ((f, d), f, (d, f), d)))
        layers.append(Layer(tuple(heads), causal=bool(rng.integers(0, 2)), mlp=mlp))
    C = int(rng.integers(2, 4))
    return Model(vocab=tuple("abc"[:V]), max_length=n, classes=tuple("pqr"[:C]), layout=Layout.of(*blocks),
                 layers=tuple(layers), W_O=_objects(rng.integers(-2, 3, (C, d)), rng, share), constant_row=const)


def _scaled(model: Model, key: str, s: int) -> Model:
    return replace(model, layers=tuple(
        Layer(tuple(replace(h, **{key: np.array([[v * s for v in r] for r in getattr(h, key)], dtype=object)}) for h in L),
              L.causal, L.mlp) for L in model.layers))


def _largest_float_scale(make) -> int:
    lo, hi = 1, 2**62
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if integerize(make(mid)).use_float else (lo, mid)
    return lo


def _agree(model: Model, rng, n_reference: int = 12) -> Evaluator:
    """Logits and margins of Evaluator(model) equal the big-integer pass's at every sequence of the two
    longest lengths, and the Fraction reference's at some of them."""
    fast, exact = Evaluator(model), Evaluator(model, force_exact=True)
    V, n, C = len(model.vocab), model.max_length, len(model.classes)
    for length in sorted({n, max(1, n - 1)}):
        ids = np.array(list(itertools.product(range(V), repeat=length)), dtype=np.int64)
        a, da = fast.logits(ids)
        b, db = exact.logits(ids)
        got = [[int(x) for x in r] for r in a]
        assert da == db and got == [[int(x) for x in r] for r in b]
        fa, _ = fast.logits_all(ids)  # every query (the every-query one-hot pass, or the dense one)
        fb, _ = exact.logits_all(ids)
        assert [[[int(x) for x in r] for r in q] for q in fa] == [[[int(x) for x in r] for r in q] for q in fb]
        assert [[int(x) for x in q[-1]] for q in fa] == got
        rows = np.arange(len(ids)) % C
        ma, dm, _ = fast.margins_last(ids, rows)
        mb, dmb, _ = exact.margins_last(ids, rows)
        assert dm == dmb and [int(x) for x in ma] == [int(x) for x in mb]
        for p in rng.choice(len(ids), min(n_reference, len(ids)), replace=False):
            want = _reference_logits(model, ids[p].tolist())
            assert [Fraction(v, da) for v in got[p]] == want
            assert Fraction(int(ma[p]), dm) == min(want[rows[p]] - want[c] for c in range(C) if c != rows[p])
    return fast


@pytest.fixture
def last_calls(monkeypatch):
    calls = []
    real = evaluate._attention_onehot_last
    monkeypatch.setattr(evaluate, "_attention_onehot_last", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("seed", range(6))
def test_last_query_onehot_pass_at_the_float_limits(seed, last_calls):
    """Random one-layer models with value weights, then score weights, scaled to the largest factor the
    a-priori bound admits (and its negative), and with an idle relu head (zero scores) whose coef_i B_i
    entries are just below 2^53 / 3, just above it, and just below 2^53 (the every-query one-hot flag
    off): logits and margins on the proven float path are the reference's."""
    rng = np.random.default_rng(seed)
    base = _random_model(rng)
    models = []
    for key in ("W_V", "W_QK"):
        top = _largest_float_scale(lambda s: _scaled(base, key, s))
        models += [_scaled(base, key, top), _scaled(base, key, -top)]
    d, den, L = base.dim, int(rng.integers(1, 4)), base.layers[0]

    def with_idle(x):
        idle = Head(np.full((d, d), Fraction(0), dtype=object),
                    np.array([[Fraction(x * ((i == j) - ((i + 1) % d == j)), den) for j in range(d)]
                              for i in range(d)], dtype=object))
        return replace(base, layers=(Layer(L.heads + (idle,), L.causal, L.mlp),))
    coef = integerize(with_idle(1)).layers[0].coef[-1]  # coef_i of the idle head (x coprime to den)
    for big, step in (((2**53 - 1) // 3, -1), (2**53 // 3 + 1, 1), (2**53 - 1, -1)):
        x = big // coef if step < 0 else -(-big // coef)  # coef x just below / just past the limit
        while gcd(x, den) != 1:
            x += step
        models.append(with_idle(x))
    flag_off = 0
    for model in models:
        before = len(last_calls)
        fast = _agree(model, rng)
        fw = evaluate._fused_weights(integerize(model).layers[0])
        assert fast.use_float and fw is not None and len(last_calls) > before
        flag_off += not fw[3]
    assert flag_off >= 2  # the idle heads past 2^53 / 3 (the one-layer exception to the flag)


@pytest.mark.parametrize("seed", range(3))
def test_two_layer_models_agree_with_the_reference(seed):
    _agree(_random_model(np.random.default_rng(100 + seed), n_layers=2), np.random.default_rng(seed))


# ---------------------------------------------------------------- _int_matrix and the int64 classifier

def _reference_int_matrix(M):
    flat = [Fraction(int(v)) if isinstance(v, np.integer) else Fraction(v) for v in np.asarray(M, dtype=object).ravel().tolist()]
    q = lcm(*[f.denominator for f in flat]) if flat else 1
    return [int(f * q) for f in flat], q


EDGE = [0, 1, -1, Fraction(1, 2), Fraction(-3, 7), 2**70, 2**70 + 1, -(2**63), 2**63 - 1, 2**63, -(2**63) + 1,
        2**53, 2**53 + 1, np.int64(5), np.int64(-(2**63)), np.int8(-3), True, np.uint64(2**64 - 1), Fraction(2**100, 3)]


def test_int_matrix_on_views_and_mixed_entries():
    """_int_matrix (and its int64 form) of object arrays that are transposed, sliced, reversed, fancy
    indexed, read-only, 0-d or empty, with entries shared or equal-but-distinct, numpy ints, bools,
    huge ints and Fractions, few or many distinct objects: the integers and denominator computed
    entry by entry; the int64 form exactly when every |v| < 2^63 and -2^63 < v."""
    rng = np.random.default_rng(0)
    cases = 0
    for _ in range(300):
        pool = [EDGE[i] for i in rng.choice(len(EDGE), int(rng.integers(1, 13)), replace=False)]
        shape = [(0,), (0, 3), (1,), (5,), (2, 3), (4, 5), (3, 4, 2), (30, 7)][int(rng.integers(8))]
        M = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            v = pool[int(rng.integers(len(pool)))]
            fresh = rng.random() < 0.3 and type(v) in (int, Fraction)
            M[idx] = (Fraction(v) if type(v) is int else Fraction(v.numerator, v.denominator)) if fresh else v
        ro = M.copy()
        ro.flags.writeable = False
        views = [M, ro, M.ravel()[::3], M[M != 0]]
        if M.ndim >= 2:
            views += [M.T, M[::2, ::-1], M[np.arange(2 * M.shape[0]) % M.shape[0]]]
        if M.size:
            views.append(np.array(M.flat[0], dtype=object))
        for X in views:
            N, q = _int_matrix(X)
            want, wq = _reference_int_matrix(X)
            assert N.shape == np.shape(X) and q == wq
            assert N.ravel().tolist() == want and {type(v) for v in N.ravel().tolist()} <= {int}
            num, which, _ = _int_parts(X)
            C64 = _int64_or_none(num, which, np.shape(X))
            fits = all(-(2**63) < v < 2**63 for v in want)
            assert (C64 is not None) == fits
            if fits:
                assert C64.dtype == np.int64 and C64.ravel().tolist() == want
            cases += 1
    assert cases > 1500


@pytest.mark.parametrize("seed", range(4))
def test_classifier_at_2_53_and_2_63(seed):
    """W_O entries at 2^53 - 1, 2^53, 2^63 - 1, -2^63, 2^63, 2^64, ...: logits and margins are the
    Fraction reference's (the int64 classifier, the float copy and the big-integer classifier)."""
    rng = np.random.default_rng(seed)
    vals = [2**53 - 1, 2**53, -(2**53), 2**62, 2**63 - 1, -(2**63), -(2**63) + 1, 2**63, 2**64, Fraction(2**63 - 1, 3)]
    base = _random_model(rng)
    for trial in range(4):
        pick = [vals[i] for i in rng.choice(len(vals), 2, replace=False)]
        W = np.array([[Fraction(pick[int(rng.integers(2))]) if rng.random() < 0.5 else Fraction(int(rng.integers(-2, 3)))
                       for _ in range(base.dim)] for _ in base.classes], dtype=object)
        model = replace(base, W_O=W)
        im = integerize(model)
        fits = all(-(2**63) < int(v) < 2**63 for v in im.C.ravel().tolist())
        assert (im.C64 is not None) == fits
        assert im.classifier_below_2_53 == all(abs(int(v)) < 2**53 for v in im.C.ravel().tolist())
        ev = Evaluator(model)
        ids = np.array(list(itertools.product(range(len(model.vocab)), repeat=model.max_length)), dtype=np.int64)
        a, da = ev.logits(ids)
        rows = np.arange(len(ids)) % len(model.classes)
        ma, dm, _ = ev.margins_last(ids, rows)
        for p in rng.choice(len(ids), min(6, len(ids)), replace=False):
            want = _reference_logits(model, ids[p].tolist())
            assert [Fraction(int(v), da) for v in a[p]] == want
            assert Fraction(int(ma[p]), dm) == min(want[rows[p]] - w for c, w in enumerate(want) if c != rows[p])


# ---------------------------------------------------------------- readout, symmetry, indexed

def _union_find_variables(C: int, d: int, ties):
    parent = list(range(C * d))

    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for pi, kappa in ties:
        for c in range(C):
            for r in range(d):
                a, b = root(c * d + r), root(int(kappa[c]) * d + int(pi[r]))
                parent[max(a, b)] = min(a, b)
    roots = [root(x) for x in range(C * d)]
    number = {r: i for i, r in enumerate(sorted(set(roots)))}
    return [number[r] for r in roots], len(number)


def test_tied_variables_are_the_components():
    """proofs/readout._tied_variables (label propagation): the connected components of the tie graph,
    numbered in the order of their smallest entry, as a union-find gives them (permutations and
    arbitrary maps, several generators)."""
    from depthcert.proofs.readout import _tied_variables

    rng = np.random.default_rng(0)
    for _ in range(400):
        C, d = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        ties = [(rng.permutation(d), rng.permutation(C)) if rng.random() < 0.7 else
                (rng.integers(0, d, d), rng.integers(0, C, C)) for _ in range(int(rng.integers(0, 4)))]
        var, count = _tied_variables(C, d, ties)
        want, wcount = _union_find_variables(C, d, ties)
        assert count == wcount and var.ravel().tolist() == want


def test_normalized_margin_is_margin_over_the_largest_entry():
    from depthcert.proofs.readout import normalized_margin

    rng = np.random.default_rng(1)
    pool = [0, 1, -1, Fraction(1, 2), Fraction(-7, 3), 2**70, -(2**70) - 1, Fraction(-(2**80), 7), Fraction(1, 2**60)]
    for _ in range(300):
        shape = [(0, 3), (1, 1), (2, 3), (5, 4)][int(rng.integers(4))]
        W = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            W[idx] = pool[int(rng.integers(len(pool)))]
        top = max((abs(Fraction(v)) for v in W.ravel().tolist()), default=0)
        for margin in (None, Fraction(3, 5), 2):
            want = None if margin is None or top == 0 else Fraction(margin) / top
            assert normalized_margin(margin, W) == want


def test_equivariance_codes_catch_near_equal_entries():
    """check_equivariance (value codes) gives the verdict and reason of comparing the entries one by one,
    on the ICQA construction with one entry changed by 2^-80, to 2^70 beside 2^70 + 1, or to an equal
    but distinct Fraction object (which must stay equivariant)."""
    from depthcert.checkers import symmetry
    from depthcert.checkers.tasks import ICQA
    from depthcert.constructions import registry

    def direct(model, groups):
        """The claim checked entry by entry (models without MLPs): (ok, which matrix failed first)."""
        classes = {c: i for i, c in enumerate(model.classes)}
        for group in groups:
            for sigma in symmetry.generators(group):
                pi = symmetry.row_permutation(model, sigma)
                kappa = [classes[sigma.get(c, c)] for c in model.classes]
                for li, layer in enumerate(model.layers):
                    assert layer.mlp is None
                    for hi, head in enumerate(layer):
                        for key in ("W_QK", "W_V"):
                            W = getattr(head, key)
                            if any(W[pi[i], pi[j]] != W[i, j] for i in range(len(pi)) for j in range(len(pi))):
                                return False, f"layer {li + 1} head {hi + 1} {key}"
                W = model.W_O
                if any(W[kappa[c], pi[j]] != W[c, j] for c in range(len(kappa)) for j in range(len(pi))):
                    return False, "W_O"
        return True, None

    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for k, nq, na in [(2, 3, 3), (3, 3, 4)]:
        task = ICQA(k=k, n_questions=nq, n_answers=na)
        model, groups = registry.build(task).model, task.symmetry_groups()
        moved = sorted({r for g in groups for sigma in symmetry.generators(g)
                        for r, p in enumerate(symmetry.row_permutation(model, sigma)) if p != r})
        for t in range(40):
            if t % 4 == 0:
                i, j = int(rng.integers(model.W_O.shape[0])), int(rng.integers(model.W_O.shape[1]))
                v = model.W_O[i, j]
                new = [v + Fraction(1, 2**80), Fraction(2**70 + 1), Fraction(v.numerator, v.denominator)][t // 4 % 3]
                m = model.with_weight(("W_O", i, j), new)
            else:
                li = int(rng.integers(len(model.layers)))
                hi = int(rng.integers(len(model.layers[li])))
                key = ("W_QK", "W_V")[t % 2]
                W = getattr(model.layers[li].heads[hi], key)
                i, j = (int(x) for x in rng.choice(moved, 2)) if t % 8 < 6 else (int(rng.integers(W.shape[0])), 0)
                v = W[i, j]
                new = [v + Fraction(1, 2**80), Fraction(2**70), Fraction(v.numerator, v.denominator)][t % 3]
                m = model.with_weight((li, hi, key, i, j), new)
                if t % 3 == 1:
                    m = m.with_weight((li, hi, key, j, i), Fraction(2**70 + 1))
            got, want = symmetry.check_equivariance(m, groups), direct(m, groups)
            assert got.ok == want[0] and (got.ok or got.reason.startswith(want[1]))
            seen[got.ok] += 1
            seen[key if t % 4 and not got.ok else "other"] = seen.get(key if t % 4 and not got.ok else "other", 0) + 1
    assert seen[True] and seen[False] and seen.get("W_QK") and seen.get("W_V")  # broken heads' matrices caught


def test_block_index_assigns_the_same_block_as_ix():
    from depthcert.constructions.indexed import _block_index

    rng = np.random.default_rng(0)
    for _ in range(1000):
        def pick():
            k = int(rng.integers(1, 8))
            if rng.random() < 0.5:
                s = int(rng.integers(0, 6))
                return list(range(s, s + k))
            if rng.random() < 0.5:
                return sorted(set(rng.integers(0, 12, k).tolist()))
            return rng.integers(0, 12, k).tolist()  # any order, repeats
        rows, cols = pick(), pick()
        a, b = np.zeros((20, 20), dtype=object), np.zeros((20, 20), dtype=object)
        x = Fraction(int(rng.integers(1, 9)), 3)
        a[_block_index(rows, cols)] = x
        b[np.ix_(rows, cols)] = x
        assert (a == b).all()


def test_abs_matvec_max_is_exact_past_int64():
    """magnitude_bound's last step max(|C| hb) with C as int64: exact when the int64 product could
    wrap (entries near 2^62 and 2^53, large hb), against Python integers."""
    from depthcert.checkers.evaluate import _abs_matvec_max

    rng = np.random.default_rng(0)
    for _ in range(200):
        C64 = rng.integers(-(2**62), 2**62, (3, 5)) >> int(rng.integers(0, 62))
        C64[0, 0] = [2**63 - 1, -(2**63) + 1, 2**53, 0][int(rng.integers(4))]
        hb = np.array([int(v) << int(rng.integers(0, 40)) for v in rng.integers(0, 9, 5)], dtype=object)
        want = max(sum(abs(int(c)) * int(h) for c, h in zip(row, hb)) for row in C64.tolist())
        assert _abs_matvec_max(C64.astype(object), hb, C64) == want
