"""The max-margin fit's fast paths give exactly what the plain computations they replace give.

Each speed-up in proofs/readout.py (pair rows as CSR arrays, the pruned bisection of _best_mix,
W_O's Fractions in lowest terms from numpy, the game's flat label addressing, hidden_vectors' ints)
is checked here bit for bit against the straightforward version, written out in this file."""
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from depthcert.proofs import readout as ro


def _pair_rows_reference(pairs, Xf, y, var, n_var):
    """The rows through scipy's (data, (rows, cols)) constructor, as the fit built them before."""
    I, Cc = pairs[:, 0], pairs[:, 1]
    P, d = len(pairs), Xf.shape[1]
    data = np.concatenate([Xf[I], -Xf[I], -np.ones((P, 1))], axis=1).ravel()
    cols = np.concatenate([var[y[I]], var[Cc], np.full((P, 1), n_var)], axis=1).ravel()
    rowi = np.repeat(np.arange(P), 2 * d + 1)
    keep = data != 0
    A = sp.csr_matrix((data[keep], (rowi[keep], cols[keep])), shape=(P, n_var + 1))
    A.sum_duplicates()
    A.eliminate_zeros()
    return A


def _cyclic_ties(C, d):
    """One generator: classes and coordinates both shifted by one (entries tied along the diagonals)."""
    return ((np.roll(np.arange(d), 1), np.roll(np.arange(C), 1)),)


@pytest.mark.parametrize("tied", [False, True])
def test_pair_csr_is_scipys_canonical_csr(tied):
    rng = np.random.default_rng(3)
    for trial in range(60):
        N, C, d = (int(v) for v in rng.integers(2, 9, size=3))
        Xf = rng.normal(size=(N, d)) * (rng.random((N, d)) < 0.7)  # some exact zeros
        if trial % 3 == 0:
            Xf = np.round(Xf * 4) / 4  # coefficients that cancel when tied entries are summed
        y = rng.integers(0, C, size=N)
        var, n_var = ro._tied_variables(C, d, _cyclic_ties(C, d) if tied else ())
        I = rng.integers(0, N, size=40)
        Cc = rng.integers(0, C, size=40)
        pairs = np.stack([I, Cc], axis=1)[Cc != y[I]]
        ref = _pair_rows_reference(pairs, Xf, y, var, n_var)
        indptr, indices, data = ro._pair_csr(pairs, Xf, y, var, n_var)
        assert indptr.tobytes() == ref.indptr.astype(indptr.dtype).tobytes()
        assert indices.astype(np.int32).tobytes() == ref.indices.astype(np.int32).tobytes()
        assert data.tobytes() == ref.data.tobytes()
        A = ro._pair_rows(pairs, Xf, y, var, n_var)
        assert A.shape == ref.shape and (A != ref).nnz == 0


def _best_mix_reference(M0, M1):
    """_best_mix as first written: 50 bisection steps over every candidate line."""
    finite = np.isfinite(M0)
    a, b = M0[finite], M1[finite] - M0[finite]
    if a.size:
        top = np.maximum(a, a + b).min()
        keep = np.minimum(a, a + b) <= top
        a, b = a[keep], b[keep]
    if not a.size:
        return 0.0, np.inf
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if b[int(np.argmin(a + mid * b))] > 0:
            lo = mid
        else:
            hi = mid
    return max(((lam, float((a + lam * b).min())) for lam in ((lo + hi) / 2, 0.0, 1.0)), key=lambda p: p[1])


def test_best_mix_matches_the_plain_bisection():
    rng = np.random.default_rng(11)
    for trial in range(1500):
        N, C = (int(v) for v in rng.integers(1, 12 if trial % 2 else 60, size=2))
        kind = trial % 5
        if kind == 0:
            M0, M1 = rng.normal(size=(N, C)), rng.normal(size=(N, C))
        elif kind == 1:  # small integers: many equal lines and ties
            M0, M1 = (rng.integers(-3, 4, size=(2, N, C))).astype(float)
        elif kind == 2:  # a dyadic grid: lines crossing exactly at bisection points
            M0, M1 = rng.integers(-8, 9, size=(2, N, C)) / 8.0
        elif kind == 3:  # magnitudes far apart
            M0 = rng.normal(size=(N, C)) * 10.0 ** rng.integers(-300, 300, size=(N, C))
            M1 = rng.normal(size=(N, C)) * 10.0 ** rng.integers(-300, 300, size=(N, C))
        else:  # nearly equal read-outs
            M0 = rng.normal(size=(N, C))
            M1 = M0 + rng.normal(size=(N, C)) * 1e-12
        if trial % 3 == 0:
            M0[0, 0] = M1[0, 0] = np.inf  # a label entry
        assert repr(ro._best_mix(M0, M1)) == repr(_best_mix_reference(M0, M1))


def test_dyadic_fractions_are_the_constructors():
    rng = np.random.default_rng(5)
    for bits in (0, 1, 4, 20, 48, 61):
        top = 2 ** min(bits + 3, 61)
        v = np.unique(np.concatenate([rng.integers(-top, top, size=300), [0, 1, -1, 2**bits, -(2**bits), 3]]))
        got = ro._dyadic_fractions(v, bits)
        for x, f in zip(v.tolist(), got):
            g = Fraction(x, 2**bits)
            assert type(f) is Fraction and f == g and hash(f) == hash(g)
            assert (f.numerator, f.denominator) == (g.numerator, g.denominator)
            assert type(f.numerator) is int and type(f.denominator) is int
    # outside its bounds: the constructor itself
    assert ro._dyadic_fractions(np.array([-(2**63), 6]), 2) == [Fraction(-(2**63), 4), Fraction(3, 2)]


def _game_reference(Xf, y, C, var, n_var, steps):
    """_game_readout's loop as first written (fancy indexing, bincount, masks rebuilt each step)."""
    N, d = Xf.shape
    ar = np.arange(N)
    R = 2 * float(np.abs(Xf).sum(axis=1).max())
    eta = np.sqrt(8 * np.log(N * (C - 1)) / steps) / R if N * (C - 1) > 1 else 1.0 / R
    cum = np.zeros((N, C))
    Wsum = np.zeros((C, d))
    flat = var.ravel()
    best, best_W = -np.inf, None
    for k in range(1, steps + 1):
        L = cum * -eta
        L[ar, y] = -np.inf
        L -= L.max()
        P = np.exp(L, out=L)
        P /= P.sum()
        P[ar, y] = -P.sum(axis=1)
        grad = -(P.T @ Xf)
        W = np.sign(np.bincount(flat, weights=grad.ravel(), minlength=n_var))[var]
        S = Xf @ W.T
        cum += S[ar, y][:, None] - S
        Wsum += W
        cum[ar, y] = 0.0
        low = float(np.where(np.arange(C)[None, :] == y[:, None], np.inf, cum).min()) / k
        if low > best:
            best, best_W = low, Wsum / k
        if (k == max(steps // 8, 1) and best < -R / 100) or (k == steps // 2 and best < 0):
            break
    top = float(np.abs(best_W).max())
    W = best_W / top
    S = Xf @ W.T
    M = S[ar, y][:, None] - S
    M[ar, y] = np.inf
    return W, M, k


@pytest.mark.parametrize("tied", [False, True])
def test_game_readout_matches_its_plain_loop(tied):
    rng = np.random.default_rng(7)
    for trial in range(12):
        N, C, d = int(rng.integers(3, 12)), int(rng.integers(2, 6)), int(rng.integers(2, 7))
        Xf = rng.integers(-4, 5, size=(N, d)) / 4.0
        y = rng.integers(0, C, size=N)
        var, n_var = ro._tied_variables(C, d, _cyclic_ties(C, d) if tied else ())
        W, M, k = ro._game_readout(Xf, y, C, var, n_var, 60)
        if W is None:
            continue
        Wr, Mr, kr = _game_reference(Xf, y, C, var, n_var, 60)
        assert k == kr and W.tobytes() == Wr.tobytes() and M.tobytes() == Mr.tobytes()


def test_hidden_vectors_hold_python_ints():
    from depthcert.checkers.tasks import make_task
    from depthcert.constructions import registry

    for variant in ("ternary", "heads"):
        task = make_task("tm", l=4, alphabet=4)
        model = registry.build(task, variant, lemma3=False).model
        hv = ro.hidden_vectors(model, task)
        assert hv.X.dtype == object and all(type(v) is int for v in hv.X.flat)


def test_tied_variables_number_components_by_their_smallest_entry():
    rng = np.random.default_rng(2)
    for trial in range(200):
        C, d = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        ties = tuple((rng.permutation(d) if trial % 3 else rng.integers(0, d, size=d),
                      rng.permutation(C) if trial % 5 else rng.integers(0, C, size=C))
                     for _ in range(int(rng.integers(1, 4))))
        var, n_var = ro._tied_variables(C, d, ties)
        # the components by brute force: union-find over the edges entry -> image
        parent = list(range(C * d))

        def find(e):
            while parent[e] != e:
                e = parent[e]
            return e

        for pi, kappa in ties:
            for c in range(C):
                for r in range(d):
                    a, b = find(c * d + r), find(int(kappa[c]) * d + int(pi[r]))
                    parent[max(a, b)] = min(a, b)
        roots = [find(e) for e in range(C * d)]  # each component's smallest entry
        order = {root: i for i, root in enumerate(sorted(set(roots)))}
        assert var.ravel().tolist() == [order[root] for root in roots] and n_var == len(order)
