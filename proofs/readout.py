"""The max-margin linear read-out: a search whose answer is then verified like any other model.

Given a model's layers, its read-out W_O only has to separate the final hidden vectors at the
read position.  Among all W_O with every entry in [-1, 1] this module looks for one maximizing
the minimum margin over the distinct (hidden vector, label) pairs of the dataset:

    max t   subject to   (W_y - W_c) . x >= t   for every distinct (x, y) and class c != y,
                         -1 <= W[c, r] <= 1.

A margin means nothing without a scale (10^20 W_O has 10^20 times the margin), so every read-out
is compared by its *normalized* margin: the exact minimum margin over the dataset divided by the
largest absolute entry of its W_O.  The LP optimum is the largest normalized margin any linear
read-out reaches on these hidden vectors.

The LP is solved in floats (HiGHS) by constraint generation (each vector against its few
closest competitors, violated pairs added until none is left; one model kept across the rounds,
dual simplex warm-started from the last basis, within its share of a deterministic work budget that
grows with the dataset: lp_budget; past it, the LP's max-min game is played by multiplicative weights
over every pair with what is left, and the best read-out found, or its mix with the game's or a cheap
one, is kept),
its answer is rounded to a dyadic
grid 2^-b (the coarsest b whose exact margin on the vectors is within 2^-8 of the LP's), and
the model with that W_O is then verified exactly on every point, as usual: nothing here is a
verdict.

Distinct hidden vectors: computed exactly at one point per orbit when the task declares a token
symmetry and the layers are proven equivariant under it (checkers/symmetry.py on the layers);
the LP is then solved over read-outs with the same symmetry (tied entries W[kappa c, pi r] =
W[c, r]), which loses nothing (averaging an optimal W_O over the group keeps its margin and its
box) and makes the margin of a representative the margin of its whole orbit.  Otherwise every
point is evaluated.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Model

MAX_SCORE_ENTRIES = 50_000_000  # distinct vectors x classes held as float64 scores (400 MB)
# The LP's cost is bounded by design and grows with the dataset (a smaller size never gets a larger
# budget than a larger one).  One HiGHS model is kept across the rounds of constraint generation: the
# violated pairs are appended as rows and dual simplex restarts from the last optimal basis (a warm
# start: measured 4x less than a fresh interior-point LP per round on tm l = 5).  Its work is counted
# deterministically (never in seconds: the margins printed must not depend on the machine's load) as
# simplex iterations x (rows + columns) of the LP they run on, summed over the rounds, and capped by
# lp_budget(points, dim): LP_WORK_PER_POINT_DIM per dataset point and hidden dimension (the plain
# forward over the dataset costs about points x dim x layers x width) less LP_WORK_OFFSET, at least
# LP_WORK_MIN, at most LP_WORK_MAX.  Past the budget, the best W_O found so far (or the cheap read-out: lifting or cosine,
# mixed in) is kept, rounded and checked exactly as always.  (Measured: about 3e-8 s per work unit,
# so the fit costs at most about half the plain float64 forward at the tm rows of bench_all.)
MAX_LP_ROUNDS = 40
MAX_LP_ROWS = 10_000  # one LP never has more pairs than this (its memory), whatever the size
LP_WORK_PER_POINT_DIM = 8  # half of it for the LP, the rest for the game below
# less this offset: a whole run also builds, parses and proves things at a fixed cost of about 15 ms
# (tm l = 5), which small sizes pay out of the same allowance (whole run within 2x of a float64
# forward); above a few hundred thousand point x dim the offset is a small fraction of the budget
LP_WORK_OFFSET = 150_000
LP_WORK_MIN = 100_000  # about 3 ms
LP_WORK_MAX = 400_000_000  # about 12 s (half of it for the LP)
CENTRE_WORK_PER_SIZE = 200  # an interior-point solve of the converged LP, charged as 200 x (rows + columns) (an estimate)
ROUND_WORK = 10_000  # charged per round: its fixed cost (the rows built, a HiGHS call, the scores of every pair)
# few pairs per vector and round: each round's LP is solved to its optimum sooner, so a budget-limited
# fit ends on better read-outs (measured: tm l = 5 ternary 1.68 against 0.54 with 8, l = 6 heads the same),
# and small LPs reach the same optimum (tm l = 3, 4)
# The multiplicative-weights game (_game_readout): the pairs play multiplicative weights, W_O the best
# response sign(gradient) in the box, and the average of W_O's responses has a min margin within the
# pairs' regret of the LP optimum (the max-min theorem); a few hundred steps of N x C x d reach most of it
# where the LP's dual simplex is far from its first basis (measured: tm l = 6 heads 6.9 in 100 steps, bound
# 8.55, where the budget-limited LP ends at 3.7).  It runs on what the LP leaves of the budget; the LP gets
# the first 1 / LP_SHARE of it.
LP_SHARE = 2
GAME_STEP_WORK = 1_000  # a step's fixed cost, in work units
GAME_ENTRIES_PER_WORK = 32  # (vector, class, coordinate + 8) entries of a step per work unit (measured: a
# work unit of the LP and 32 such entries of a numpy step take about the same time)
COMPETITORS = 2  # first competitor classes per vector (nearest vectors of other labels)
ADDED_PER_ROUND = 2  # most violated competitor classes per vector added per round
GRID_BITS = (4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48)
STOP_GAP = 2.0**-12  # relative gap between the LP's bound and the fitted W_O's margin
CLOSE_ENOUGH = 1 - 2.0**-8  # accept the coarsest grid within this factor of the LP's margin


@dataclass(frozen=True)
class HiddenVectors:
    """Distinct (vector, label) pairs at the read position: X / den, label rows of the model."""

    X: np.ndarray  # (N, d) exact integer numerators (object ints)
    den: int
    labels: np.ndarray  # (N,) model class rows
    ties: tuple  # ((pi, kappa), ...): generator permutations a symmetric read-out must respect
    points: int  # dataset points evaluated to find them
    note: str


@dataclass(frozen=True)
class Readout:
    """A fitted read-out and how it was found (a search result, not a verdict)."""

    W_O: np.ndarray  # (C, d) Fractions, entries in [-1, 1]
    bits: int  # entries are multiples of 2^-bits
    lp_margin: float  # the LP's normalized margin on the vectors (floats)
    vector_margin: Fraction  # exact normalized margin on the distinct vectors
    vectors: int
    rounds: int
    note: str
    lp_work: int = 0  # simplex iterations x (rows + columns) spent, summed over the rounds
    lp_budget: int = 0  # the most it could spend (lp_budget)


def normalized_margin(margin: Fraction | None, W_O: np.ndarray) -> Fraction | None:
    """The exact margin divided by the largest absolute entry of W_O (None without a margin)."""
    if margin is None:
        return None
    from depthcert.checkers.evaluate import _int_matrix

    N, q = _int_matrix(np.asarray(W_O))  # W_O = N / q, each distinct entry object converted once
    flat = N.ravel().tolist()
    top = max(max(flat), -min(flat)) if flat else 0  # Python ints: compared in C
    return None if top == 0 else Fraction(margin) / Fraction(top, q)


def _probe(model: Model) -> Model:
    """The model with W_O = I: its logits are the final hidden vector at the read position."""
    from depthcert.checkers.layout import eye

    d = model.dim
    return replace(model, classes=tuple(f"h{r}" for r in range(d)), W_O=eye(d), name="probe")


def _generator_maps(model: Model, groups) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """(pi, kappa) per generator of the task's groups (stream rows, class rows), or None."""
    from depthcert.checkers.symmetry import generators, row_permutation

    class_index = {c: i for i, c in enumerate(model.classes)}
    maps = []
    for group in groups:
        for sigma in generators(group):
            pi = row_permutation(model, sigma)
            if pi is None:
                return None
            kappa = np.arange(len(model.classes))
            for c, i in class_index.items():
                if c in sigma:
                    if sigma[c] not in class_index:
                        return None
                    kappa[i] = class_index[sigma[c]]
            maps.append((pi, kappa))
    return maps


def hidden_vectors(model: Model, task, symmetry: str = "auto", max_points: int | None = None,
                   batch_size: int = 4096, table=None) -> HiddenVectors:
    """The distinct exact final hidden vectors at the read position, with their labels, read from a
    kernel table (checkers/hidden_table.py): `table` when it is this model's and holds the points
    needed (the verification's one pass), else a table of these points alone."""
    from depthcert.checkers.exhaustive import Plan, check_compatible
    from depthcert.checkers.hidden_table import hidden_table

    if model.outputs != "last":
        raise BadInput("a fitted read-out needs a model read at the last position (outputs \"last\")")
    if model.has_softmax:
        raise BadInput("a fitted read-out needs an exact model (this one has softmax heads)")
    check_compatible(model, task)
    ties: tuple = ()
    indices = None
    note = "every point evaluated"
    groups = task.symmetry_groups() if symmetry == "auto" else ()
    reps = task.orbit_representatives() if groups else None
    if reps is not None:
        from depthcert.checkers.symmetry import check_equivariance

        zero = np.full(model.W_O.shape, Fraction(0), dtype=object)
        report = check_equivariance(replace(model, W_O=zero), groups)
        maps = _generator_maps(model, groups) if report.ok else None
        if maps is not None:
            indices = np.asarray(reps[0], dtype=np.int64)
            ties = tuple(maps)
            note = (f"one point per orbit ({len(indices)} points; the layers are equivariant: {report.reason}); "
                    "the read-out is fitted with the same symmetry")
    n_points = task.size if indices is None else len(indices)
    guard_fit(min(n_points, len(model.classes)), len(model.classes))
    rows = None
    if table is not None and table.model is model and table.task is task:
        rows = table.rows_of_points(np.arange(task.size) if indices is None else indices)
    if rows is None:
        if max_points is not None and n_points > max_points:
            raise BadInput(f"fitting a read-out evaluates {n_points} points, above the limit {max_points}; "
                           f"raise it with --max-points {n_points}")
        table = hidden_table(model, task, Plan(indices, n_points, n_points, note), batch_size)
        rows = table.row_of
    # the distinct rows in the order the points first meet them
    _, first = np.unique(rows, return_index=True)
    pick = rows[np.sort(first)]
    X = np.empty((len(pick), model.dim), dtype=object)  # Python ints
    rows_X = table.X[pick]
    if rows_X.dtype.kind in "iu":  # numpy integers: their Python int values, all at once
        X[:, :] = rows_X.astype(object)
    else:
        for i, r in enumerate(pick.tolist()):
            X[i, :] = [int(v) for v in table.X[r]]
    return HiddenVectors(X, int(table.den), np.asarray(table.labels[pick], dtype=np.int64), ties, n_points, note)


LP_SECONDS_PER_SCORE = 2e-5  # constraint generation: ~10 rounds over N x C scores plus the LP (measured here)


def guard_fit(n_vectors: int, n_classes: int) -> None:
    """Refuse (before any point is evaluated) a fit whose score matrix or LP is out of budget."""
    from depthcert.checkers.budget import charge_seconds

    if n_classes < 2:
        return
    charge_seconds(n_vectors * n_classes * LP_SECONDS_PER_SCORE,
                   f"the max-margin read-out LP over up to {n_vectors:,} hidden vectors x {n_classes:,} classes")
    if n_vectors * n_classes > MAX_SCORE_ENTRIES:
        raise BadInput(f"a max-margin read-out for up to {n_vectors:,} distinct hidden vectors x {n_classes:,} classes "
                       f"needs {n_vectors * n_classes:,} scores, above the limit {MAX_SCORE_ENTRIES:,}; use "
                       "--readout lemma3 or smaller sizes")


def _tied_variables(C: int, d: int, ties) -> tuple[np.ndarray, int]:
    """var[c, r]: the LP variable of entry (c, r), equal for entries tied by the generators (the
    connected components of the graph with an edge from each entry to its image under each
    generator), numbered in the order of their smallest entry."""
    if not ties:
        return np.arange(C * d).reshape(C, d), C * d
    images = [(kappa[:, None] * d + pi[None, :]).ravel() for pi, kappa in ties]
    # every entry labelled with the smallest entry of its component: each round takes the smallest
    # label over an entry's edges (both directions), then jumps labels to their labels' labels until
    # they settle; it ends when a round changes nothing, i.e. labels are constant on every edge, and
    # a label is always an entry of the same component, its smallest once it is constant there
    entries = np.arange(C * d)
    label = entries
    while True:
        new = label.copy()
        for f in images:
            np.minimum(new, label[f], out=new)
            np.minimum.at(new, f, label)
        while True:
            jumped = new[new]
            if not (jumped != new).any():
                break
            new = jumped
        if not (new != label).any():
            break
        label = new
    # each component's smallest entry is the one labelled with itself: var numbers them in increasing order
    var = (np.cumsum(label == entries) - 1)[label].reshape(C, d)
    return var, int(var.max()) + 1


def _exact_scores(X: np.ndarray, Wq: np.ndarray) -> np.ndarray:
    """X (N, d) ints @ Wq^T (d, C) ints, exactly (float64 when every partial sum is below 2^53,
    else python-flint)."""
    xa = max((abs(int(v)) for v in X.flat), default=0)
    wa = int(np.abs(Wq).max()) if Wq.size else 0
    if xa * wa * X.shape[1] < 2**53:
        return (np.asarray(X, dtype=np.float64) @ Wq.T.astype(np.float64)).astype(np.int64)
    import flint

    P = flint.fmpz_mat([[int(v) for v in row] for row in X]) * flint.fmpz_mat(Wq.T.tolist())
    return np.array([[int(P[i, j]) for j in range(P.ncols())] for i in range(P.nrows())], dtype=object)


def _min_margin(S: np.ndarray, y: np.ndarray) -> int:
    """min over i and c != y_i of S[i, y_i] - S[i, c] (S exact)."""
    N = len(y)
    own = S[np.arange(N), y]
    other = S.copy()
    if other.dtype == object:
        other[np.arange(N), y] = None
        best = np.array([max(v for v in r if v is not None) for r in other], dtype=object)
    else:
        other[np.arange(N), y] = np.iinfo(np.int64).min
        best = other.max(axis=1)
    return int(min(own - best))


def _exact_min_margin(X: np.ndarray, Wq: np.ndarray, y: np.ndarray, Xf: np.ndarray | None = None,
                      xa: int | None = None, wa: int | None = None) -> int:
    """min over i and c != y_i of (Wq[y_i] - Wq[c]) . X[i], exactly.

    Wq = hi 2^k + lo with both halves small enough that X @ half^T is exact in float64; the
    margins hi part and lo part are then exact floats, their float combination locates the
    minimum up to a relative 2^-40, and the few candidates within that slack are combined in
    Python integers.  Falls back to exact scores when even the halves do not fit.  Xf: X as
    float64 (exact: the caller's copy, to save the conversion); xa: max |X|, wa: max |Wq| (the caller's)."""
    N, d = X.shape
    if xa is None:
        xa = max((abs(int(v)) for v in X.flat), default=0)
    if wa is None:
        wa = int(np.abs(Wq).max()) if Wq.size else 0
    lab = np.arange(N) * Wq.shape[0] + np.asarray(y)  # (i, y_i) in the flat (N, C) arrays

    Xf_ = [Xf]

    def margins(W):  # only where xa d < 2^52: X as float64 is exact (never a float of a larger integer)
        if Xf_[0] is None:
            Xf_[0] = np.asarray(X, dtype=np.float64)
        S = Xf_[0] @ W.T.astype(np.float64)
        M = S.ravel()[lab][:, None] - S  # exact: every |score| < 2^52, so |M| < 2^53
        M.ravel()[lab] = np.inf
        return M

    if xa * wa * d < 2**52:
        return int(margins(Wq).min())
    k = 52 - (xa * d).bit_length() - 1  # |X @ half| < 2 xa d 2^k <= 2^52
    if k < 8 or (wa >> k) * xa * d >= 2**52:
        return _min_margin(_exact_scores(X, Wq), y)
    hi = np.floor_divide(Wq, 2**k)  # Wq int64: lo = Wq - hi 2^k in [0, 2^k)
    lo = Wq - hi * 2**k
    Mh, Ml = margins(hi), margins(lo)
    approx = Mh * 2.0**k + Ml
    m = approx.min()
    slack = abs(m) * 2.0**-40 + 2.0 ** (k - 40) + 1
    cand = np.argwhere(approx <= m + slack)
    return min(int(Mh[i, c]) * 2**k + int(Ml[i, c]) for i, c in cand)


SECONDS_PER_WORK = 3e-8  # measured: one work unit of the LP (the guard of --fit-effort's budget)
MAX_FIT_EFFORT = 10_000


def lp_budget(points: int, dim: int, effort: int = 1) -> int:
    """The LP's work budget (simplex iterations x (rows + columns), summed over the rounds) for a
    dataset of `points` points whose hidden vectors have `dim` coordinates (LP_WORK_PER_POINT_DIM x
    points x dim less LP_WORK_OFFSET): non-decreasing in both,
    at least LP_WORK_MIN, at most LP_WORK_MAX; times `effort` (--fit-effort: a larger budget, a read-out
    closer to the LP's optimum, at that many times the LP's cost)."""
    if not (isinstance(effort, int) and 1 <= effort <= MAX_FIT_EFFORT):
        raise BadInput(f"--fit-effort must be an integer from 1 to {MAX_FIT_EFFORT}, got {effort!r}")
    grown = LP_WORK_PER_POINT_DIM * max(points, 0) * max(dim, 1) - LP_WORK_OFFSET
    return effort * int(min(LP_WORK_MAX, max(LP_WORK_MIN, grown)))


class _MarginLP:
    """max t subject to the active pairs' rows and the box, as one HiGHS model kept across rounds:
    new pairs are appended as rows and dual simplex restarts from the last basis (a warm start)."""

    def __init__(self, n_var: int, t_max: float):
        import highspy

        from depthcert.proofs.dependence import _quiet_highs

        self.h = h = _quiet_highs()
        h.setOptionValue("solver", "simplex")
        h.setOptionValue("simplex_strategy", 1)  # dual simplex: the added rows leave the last basis dual feasible
        h.setOptionValue("presolve", "off")  # so that every round starts from the last basis
        h.setOptionValue("random_seed", 0)
        self.n_col = n_var + 1
        cost = np.zeros(self.n_col)
        cost[-1] = -1.0
        inf = highspy.kHighsInf
        # t <= t_max = 2 max_i |x_i|_1, which every box-bounded W_O respects: the LP stays bounded even
        # where HiGHS drops a tiny coefficient
        h.addCols(self.n_col, cost, np.concatenate([-np.ones(n_var), [-inf]]), np.concatenate([np.ones(n_var), [t_max]]),
                  0, np.zeros(self.n_col + 1, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.rows = 0
        self.inf = inf

    def add(self, csr) -> None:
        """Append the rows A x >= 0 (csr: A's (indptr, indices, data), one row per pair)."""
        indptr, indices, data = csr
        P = len(indptr) - 1
        self.h.addRows(P, np.zeros(P), np.full(P, self.inf), len(data), indptr.astype(np.int32),
                       indices.astype(np.int32), data.astype(np.float64))
        self.rows += P

    def solve(self, max_iterations: int) -> tuple[str, np.ndarray, int]:
        """(status "optimal" / "limit" / other, the primal point, simplex iterations used)."""
        import highspy

        h = self.h
        h.setOptionValue("simplex_iteration_limit", int(max_iterations))
        h.run()
        st = h.getModelStatus()
        ok, its = h.getInfoValue("simplex_iteration_count")  # one value, not a copy of the whole info record
        its = int(its) if ok == highspy.HighsStatus.kOk else int(h.getInfo().simplex_iteration_count)
        sol = np.array(h.getSolution().col_value, dtype=np.float64)
        if st == highspy.HighsModelStatus.kOptimal:
            return "optimal", sol, its
        if st == highspy.HighsModelStatus.kIterationLimit:
            return "limit", sol, its
        return h.modelStatusToString(st), sol, its


def _pair_csr(pairs: np.ndarray, Xf: np.ndarray, y: np.ndarray, var: np.ndarray, n_var: int):
    """(indptr, indices, data) of the rows (W_y - W_c) . x_i - t >= 0 of the pairs (i, c) over the LP's
    variables (tied entries share a variable: their coefficients are summed), in canonical CSR form:
    each row's columns increasing, no zero.  These are the arrays scipy's csr_matrix((data, (rows,
    cols))) holds (its row-by-row layout, then sum_duplicates, then eliminate_zeros): without ties
    a row's columns are the disjoint increasing ranges of its two classes' rows and t's, put in
    order directly (nothing to sum); with ties scipy sorts and sums them (its summation order is
    its sort's, kept by going through it)."""
    I, Cc = pairs[:, 0], pairs[:, 1]
    P, d = len(pairs), Xf.shape[1]
    yI = y[I]
    idx = np.int32 if max(P * (2 * d + 1), n_var + 1) < 2**31 else np.int64
    untied = n_var == var.size and np.array_equal(var.ravel(), np.arange(var.size))
    XI = Xf[I]
    if untied:  # the smaller class's block first: its coefficients are -x_i when it is c
        lo_class, hi_class = np.minimum(yI, Cc), np.maximum(yI, Cc)
        XI = np.where((yI < Cc)[:, None], XI, -XI)
    else:
        lo_class, hi_class = yI, Cc
    data = np.empty((P, 2 * d + 1))
    data[:, :d] = XI
    np.negative(XI, out=data[:, d:2 * d])
    data[:, 2 * d] = -1.0
    cols = np.empty((P, 2 * d + 1), dtype=idx)
    cols[:, :d] = var[lo_class]
    cols[:, d:2 * d] = var[hi_class]
    cols[:, 2 * d] = n_var
    keep = data != 0
    indptr = np.zeros(P + 1, dtype=idx)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    data, cols = data[keep], cols[keep]
    if untied:
        return indptr, cols, data
    import scipy.sparse as sp

    A = sp.csr_matrix((data, cols, indptr), shape=(P, n_var + 1))  # each row in its entries' order
    A.sum_duplicates()
    A.eliminate_zeros()
    return A.indptr, A.indices, A.data


def _pair_rows(pairs: np.ndarray, Xf: np.ndarray, y: np.ndarray, var: np.ndarray, n_var: int):
    """_pair_csr's rows as a scipy CSR matrix."""
    import scipy.sparse as sp

    return sp.csr_matrix(_pair_csr(pairs, Xf, y, var, n_var)[::-1], shape=(len(pairs), n_var + 1))


def _coprime_fraction():
    """A maker of Fraction(n, d) for n, d already in lowest terms (d > 0), skipping the constructor's
    type checks and gcd: Fraction._from_coprime_ints where Python has it (3.12+), else the same two
    slots set directly; checked once here against the constructor (equal, same numerator and
    denominator, same hash), else the constructor itself."""
    make = getattr(Fraction, "_from_coprime_ints", None)
    if make is None:
        def make(n: int, d: int) -> Fraction:
            f = object.__new__(Fraction)
            f._numerator, f._denominator = n, d
            return f
    try:
        for n, d in ((-3, 4), (0, 1), (5, 1), (2**70 + 1, 2**64)):
            f, g = make(n, d), Fraction(n, d)
            if not (type(f) is Fraction and f == g and (f.numerator, f.denominator) == (n, d) and hash(f) == hash(g)
                    and str(f) == str(g)):
                return Fraction
    except Exception:  # a Fraction whose internals differ: the constructor
        return Fraction
    return make


_make_fraction = _coprime_fraction()


def _dyadic_fractions(values: np.ndarray, bits: int) -> list:
    """[Fraction(v, 2^bits) for v in values] (int64, |v| < 2^62, bits < 62): each v / 2^bits put in lowest
    terms in numpy (the common factor is 2^s, s the trailing zero bits of v capped at bits; 0 is 0/1)."""
    v = np.asarray(values, dtype=np.int64)
    if not (0 <= bits < 62) or (v.size and not -2**62 < int(v.min()) <= int(v.max()) < 2**62):
        return [Fraction(int(x), 2**bits) for x in values]  # outside those bounds: the constructor
    low = v & -v  # v's lowest set bit (0 for 0)
    tz = np.where(v == 0, bits, np.frexp(low.astype(np.float64))[1] - 1)  # low = 2^(exponent - 1), exact
    shift = np.minimum(tz, bits).astype(np.int64)
    nums = (v >> shift).tolist()  # exact: v is a multiple of 2^shift (or 0)
    dens = (np.int64(1) << (bits - shift)).tolist()
    return [_make_fraction(n, d) for n, d in zip(nums, dens)]


def _float_or_inf(q: Fraction) -> float:
    """float(q), or +-inf where q is beyond float64's range (Fraction's float raises OverflowError)."""
    try:
        return float(q)
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")


def _g4(q) -> str:
    """A rational in a note: 4 significant digits ("%.4g"), exact decimal digits beyond float64's range
    (a float would be inf, or 0 for a positive number below 1e-308)."""
    q = Fraction(q)
    x = _float_or_inf(q)
    if (x != 0 or q == 0) and abs(x) != float("inf"):
        return f"{x:.4g}"
    from depthcert.checkers.softmax_balls import _outward

    return _outward(q, up=q < 0, digits=4)


def fit_max_margin(hv: HiddenVectors, n_classes: int, points: int | None = None, effort: int = 1) -> Readout:
    """The LP above by constraint generation, rounded to the coarsest good dyadic grid.

    points: the dataset's size (the verification's cost), which sets the LP's budget (lp_budget);
    hv.points by default.  effort: the budget's multiple (--fit-effort), refused past --max-seconds."""
    N, d = hv.X.shape
    C = n_classes
    if C < 2:
        return Readout(np.full((C, d), Fraction(0), dtype=object), 0, 0.0, Fraction(0), N, 0,
                       "a single class: every read-out is correct")
    if N * C > MAX_SCORE_ENTRIES:
        raise BadInput(f"a max-margin read-out for {N:,} distinct hidden vectors x {C:,} classes needs "
                       f"{N * C:,} scores, above the limit {MAX_SCORE_ENTRIES:,}; use --readout lemma3 or smaller sizes")
    try:  # the exact integers in int64 when they fit (numpy's max), else Python's
        Xi = np.asarray(hv.X, dtype=np.int64).reshape(N, d)
        xa = int(np.abs(Xi).max()) if Xi.size else 0
        if xa < 0:  # -2^63 has no int64 absolute value
            raise OverflowError
    except OverflowError:
        Xi, xa = None, max((abs(int(v)) for v in hv.X.flat), default=0)
    scale = xa or 1
    # integers with no float64 value (float() would raise): the LP's input and its margins scaled exactly
    big = any(_float_or_inf(Fraction(v)) == float("inf") for v in (scale, hv.den))
    if Xi is not None and scale < 2**52:  # exact floats: each quotient rounded once, as int / int is
        Xint = Xi.astype(np.float64)
        Xf = Xint / scale
    else:
        Xint = None
        Xf = np.array([[int(v) / scale for v in row] for row in hv.X], dtype=np.float64).reshape(N, d)
    y = hv.labels
    var, n_var = _tied_variables(C, d, hv.ties)
    # first competitors: the classes of each vector's nearest vectors (Euclidean) of other labels
    found = []  # per chunk: (vector, class of its rank-th nearest, rank) for the finite distances, in order
    sq = (Xf * Xf).sum(axis=1)
    k = min(COMPETITORS, C - 1)
    for lo in range(0, N, 1024):
        D2 = sq[lo:lo + 1024, None] + sq[None, :] - 2 * Xf[lo:lo + 1024] @ Xf.T
        D2[y[lo:lo + 1024, None] == y[None, :]] = np.inf
        kk = min(k, N - 1)
        if kk < 1:
            break
        near = np.argpartition(D2, kk - 1, axis=1)[:, :kk]
        near = near[np.arange(len(near))[:, None], np.argsort(np.take_along_axis(D2, near, axis=1), axis=1)]
        rows, ranks = np.nonzero(np.isfinite(np.take_along_axis(D2, near, axis=1)))  # row by row, rank by rank
        found.append((rows + lo, np.asarray(y[near[rows, ranks]], dtype=np.int64), ranks))
    if found:
        fi, fc, fr = (np.concatenate(parts) for parts in zip(*found))
    else:
        fi = fc = fr = np.zeros(0, dtype=np.int64)
    # (i, c) -> rank of c among vector i's first competitors, the first met (a dict built from the last
    # occurrence to the first keeps the first)
    first_rank: dict = dict(zip(list(zip(fi.tolist(), fc.tolist()))[::-1], fr.tolist()[::-1]))
    # every vector meets at least one other class: (i, y_i + 1 mod C) added where neither (i, y_i - 1)
    # nor (i, y_i + 1) is a first competitor
    meets = np.zeros((N, C + 2), dtype=bool)  # column c + 1 holds class c; columns 0 and C + 1 none
    meets[fi, fc + 1] = True
    yl = np.asarray(y, dtype=np.int64)
    alone = ~(meets[np.arange(N), yl] | meets[np.arange(N), yl + 2])
    for i, c in zip(np.nonzero(alone)[0].tolist(), ((yl[alone] + 1) % C).tolist()):
        first_rank.setdefault((i, c), 0)
    active: set = set(first_rank)  # the pairs of the first LP
    W = None
    t = 0.0
    rounds = 0
    best_W, best_low = None, -np.inf  # the W_O with the largest true minimum margin so far
    converged = False
    mixed = None
    # the cheap read-out: the better (on every pair, floats) of the lifting of the nearest-mean rule
    # and the cosine read-out; the LP's iterates are mixed with it, and it is kept when no LP is solved
    fallbacks = [(name, _tied_average(W0, var, y, C)) for name, W0 in
                 (("lifting", _lifting(hv.X, Xf, y, C, Xi)), ("cosine", _cosine(Xf, y, C))) if W0 is not None]
    W_lift, M_lift, lift = None, None, None
    for name, W0 in fallbacks:
        S = Xf @ W0.T
        M0 = S[np.arange(N), y][:, None] - S
        M0[np.arange(N), y] = np.inf
        if M_lift is None or M0.min() > M_lift.min():
            W_lift, M_lift, lift = W0, M0, name
    budget = lp_budget(hv.points if points is None else points, d, effort)
    if effort > 1:
        from depthcert.checkers.budget import charge_seconds

        charge_seconds(budget * SECONDS_PER_WORK, f"the max-margin read-out LP at --fit-effort {effort} "
                       f"(a work budget of {budget:,})")
    work = 0  # simplex iterations x (rows + columns), summed over the rounds (the budget's measure)
    bound = None  # the last optimal round's t: the restricted LP bounds the optimum from above
    solved_rounds = 0
    over_cap = len(active) > MAX_LP_ROWS
    lp_cap = budget - budget // LP_SHARE  # the LP's share; the game gets what it leaves
    skipped = W_lift is not None and (over_cap or (lp_cap - ROUND_WORK) // (min(len(active), MAX_LP_ROWS) + n_var + 1) < 1)
    if skipped:  # even the first LP is over the cap or the budget: the cheap read-out is kept
        best_W, best_low = W_lift, float(M_lift.min())
    elif over_cap:  # no cheap read-out to fall back on: the first LP keeps each vector's nearest competitors first
        order = sorted(active, key=lambda p: (first_rank.get(p, COMPETITORS), p))
        active = set(order[:MAX_LP_ROWS])
    budget_left = True
    at_cap = False
    lp = None if skipped else _MarginLP(n_var, 2 * float(np.abs(Xf).sum(axis=1).max()) if N else 0.0)
    failed = None  # a status other than optimal or the iteration limit: the best so far is kept
    # the first LP's pairs as an (n, 2) array in increasing order (codes i C + c sort as (i, c) do)
    codes = np.unique(np.fromiter((i * C + c for i, c in active), dtype=np.int64, count=len(active)))
    new_pairs = np.stack([codes // C, codes % C], axis=1)
    is_active = np.zeros((N, C), dtype=bool)
    is_active[new_pairs[:, 0], new_pairs[:, 1]] = True
    max_rounds = MAX_LP_ROUNDS * effort  # more work, more rounds
    for rounds in range(1, 0 if skipped else max_rounds + 1):
        lp.add(_pair_csr(new_pairs, Xf, y, var, n_var))
        size = lp.rows + lp.n_col
        limit = (lp_cap - work - ROUND_WORK) // size
        if limit < 1 and best_W is not None:  # (with nothing to keep, one iteration past the budget)
            budget_left = False
            break
        work += ROUND_WORK  # a round's fixed cost, whatever its iterations
        status, sol, its = lp.solve(max(limit, 1))
        work += its * size
        if status not in ("optimal", "limit"):
            failed = status
            break
        solved_rounds = rounds
        W = np.clip(sol[:n_var], -1.0, 1.0)[var]  # an iteration-limited basis may leave the box
        S = Xf @ W.T
        M = S[np.arange(N), y][:, None] - S
        M[np.arange(N), y] = np.inf
        if best_W is None or M.min() > best_low:
            best_W, best_low, mixed = W, float(M.min()), None
        if status == "optimal":
            t = bound = float(sol[-1])
            # t bounds the optimum from above (fewer constraints), min M from below (this W on every
            # pair): stop when they agree to far better than the grid rounding below keeps
            if M.min() >= t - STOP_GAP * max(abs(t), 1e-12):
                converged = True
                break
        if lift is not None:  # the relaxed solution may break pairs it never saw: mix in the cheap read-out
            lam, low = _best_mix(M, M_lift)
            if low > best_low:
                best_W, best_low, mixed = (1 - lam) * W + lam * W_lift, low, lam
        if status == "limit":
            budget_left = False
            break
        # the active set grows by the violated pairs: each vector's most violated competitors, the
        # most violated first overall, as many as the cap on one LP leaves room for
        room = MAX_LP_ROWS - lp.rows
        bad = (M < t - STOP_GAP * max(abs(t), 1e-12)) & ~is_active
        Mc = np.where(bad, M, np.inf)
        take = np.argsort(Mc, axis=1, kind="stable")[:, :ADDED_PER_ROUND]  # ties: the smaller class first
        ii = np.repeat(np.arange(N), take.shape[1])
        cc = take.ravel()
        mm = Mc[ii, cc]
        ok = np.isfinite(mm)
        ii, cc, mm = ii[ok], cc[ok], mm[ok]
        if room <= 0:
            at_cap = True
        if not len(ii) or room <= 0:
            break
        order = np.lexsort((cc, ii, mm))[:room]  # the most violated first overall
        new_pairs = np.stack([ii[order], cc[order]], axis=1).astype(np.int64)
        active.update(zip(new_pairs[:, 0].tolist(), new_pairs[:, 1].tolist()))
        is_active[ii[order], cc[order]] = True
    if converged and active:
        # the optimal face: dual simplex stops at one of its vertices, and which one depends on the
        # HiGHS version (tm l=3 heads: 8 or 255/32 after rounding); the interior point solver without
        # crossover ends near the face's centre, which rounds to the same grid across versions.
        # Charged CENTRE_WORK_PER_SIZE per row and column; kept only if it is as good on every pair
        centre_work = CENTRE_WORK_PER_SIZE * (len(active) + n_var + 1)
        if work + centre_work <= lp_cap:
            from depthcert.proofs.dependence import _run_lp

            work += centre_work
            A = _pair_rows(np.array(sorted(active), dtype=np.int64).reshape(-1, 2), Xf, y, var, n_var)
            t_max = 2 * float(np.abs(Xf).sum(axis=1).max())
            st, sol = _run_lp(np.concatenate([np.zeros(n_var), [-1.0]]), A, np.zeros(A.shape[0]),
                              np.full(A.shape[0], np.inf), np.concatenate([-np.ones(n_var), [-np.inf]]),
                              np.concatenate([np.ones(n_var), [t_max]]), interior=True)
            if st == "optimal":
                Wc = np.clip(sol[:n_var], -1.0, 1.0)[var]
                S = Xf @ Wc.T
                Mc = S[np.arange(N), y][:, None] - S
                Mc[np.arange(N), y] = np.inf
                if Mc.min() >= best_low - STOP_GAP * max(abs(best_low), 1e-12):
                    best_W, best_low, mixed = Wc, float(Mc.min()), None
    game = None  # (its steps, weight of the game's read-out in the W_O kept) when the game's read-out is kept
    steps_note = None  # the game's steps, when it ran
    step_work = GAME_STEP_WORK + N * C * (d + 8) // GAME_ENTRIES_PER_WORK
    steps = (budget - work) // step_work if not converged and N and failed is None else 0
    if steps >= 1:
        from depthcert.checkers.evaluate import _one_blas_thread

        with _one_blas_thread():  # small products: on a loaded machine a second BLAS thread only waits (30x slower)
            Wg, Mg, played = _game_readout(Xf, y, C, var, n_var, steps)
        work += played * step_work
        steps_note = f"{played:,} steps over every pair" + (f", given up after {played:,} of {steps:,}: no "
                                                            "separating average in sight" if played < steps else "")
        if Wg is not None:
            if best_W is None:
                best_W, best_low, mixed, game = Wg, float(Mg.min()), None, (steps_note, 1.0)
            else:
                S = Xf @ best_W.T
                Mb = S[np.arange(N), y][:, None] - S
                Mb[np.arange(N), y] = np.inf
                lam, low = _best_mix(Mb, Mg)
                if lam > 0 and low > best_low:
                    best_W, best_low, game = (1 - lam) * best_W + lam * Wg, low, (steps_note, lam)
    rounds = solved_rounds
    t = bound if bound is not None else 0.0
    W = best_W if best_W is not None else np.zeros((C, d))
    if W.size:  # a vector added to every row changes no margin (and keeps the ties): centre each column
        W = W - (W.max(axis=0) + W.min(axis=0)) / 2
    wmax = float(np.abs(W).max()) if W.size else 0.0
    # the LP's optimum is the largest normalized margin of any read-out (rescale any W_O to a largest
    # entry of 1); t bounds it from above (the relaxation has fewer constraints)
    # in exact arithmetic: the LP ran on X / scale, and scale / den (the largest |hidden entry|) has no
    # float64 value when the stream's numbers pass 1.8e308 (never a float of an unbounded integer)
    unit = Fraction(scale, hv.den)
    lp_exact = Fraction(t) * unit if wmax > 0 and np.isfinite(t) else Fraction(0)
    lp_norm = _float_or_inf(lp_exact)
    # the grid is good enough once it keeps the chosen W_O's own margin (floats) up to CLOSE_ENOUGH
    own_norm = Fraction(best_low) * unit / Fraction(wmax) if wmax > 0 and np.isfinite(best_low) else Fraction(0)
    best = None
    good = own_norm * Fraction(CLOSE_ENOUGH) if own_norm > 0 else None  # the grid's target
    for bits in GRID_BITS:
        Wq = np.rint(W * 2.0**bits).astype(np.int64)
        top_q = int(np.abs(Wq).max())
        if top_q == 0:
            continue
        m = _exact_min_margin(hv.X, Wq, y, Xint, xa, top_q)
        norm = Fraction(m, hv.den * top_q)
        if best is None or norm > best[1]:
            best = (bits, norm, Wq)
        if good is not None and norm >= good:
            break
    if best is None:
        return Readout(np.full((C, d), Fraction(0), dtype=object), 0, lp_norm, Fraction(0), N, rounds,
                       "the LP found no read-out with a positive margin")
    bits, norm, Wq = best
    values, where = np.unique(Wq, return_inverse=True)  # one Fraction per distinct entry
    fractions = _dyadic_fractions(values, bits)
    W_O = np.fromiter(fractions, dtype=object, count=len(fractions))[where.reshape(C, d)]
    W_O.flags.writeable = False
    note = (f"max-margin read-out: LP over {N} distinct hidden vectors x {C} classes ({rounds} round{'s' if rounds != 1 else ''} of "
            f"constraint generation, warm-started dual simplex), entries multiples of 2^-{bits}")
    if skipped:
        why = (f"has {len(active):,} pairs, above the cap {MAX_LP_ROWS:,}" if over_cap else
               f"needs more than its work budget {budget:,} for one simplex iteration")
        found = (f"the {lift} read-out" if game is None else
                 f"the multiplicative-weights read-out ({game[0]})" if game[1] == 1.0 else
                 f"the {lift} read-out mixed with the multiplicative-weights read-out ({game[0]}, weight "
                 f"{game[1]:.6f})")
        note = (f"max-margin read-out: the LP over {N} distinct hidden vectors x {C} classes was not solved (its "
                f"first round {why}): {found}, entries multiples of 2^-{bits}, reaches "
                f"{_g4(norm)} ({work:,} of {budget:,} work units); no LP bound computed")
    elif not converged:
        why = ("at the LP's work budget " if not budget_left else f"at the cap of {MAX_LP_ROWS:,} pairs per LP "
               if at_cap else "after the round limit " if rounds == max_rounds else "")
        note += (f"; constraint generation stopped {why}({work:,} of {budget:,} work units: simplex iterations x "
                 f"LP size, then game steps; {lp.rows:,} pairs) before the LP optimum: the best W_O found "
                 + (f"(the multiplicative-weights read-out, {game[0]}) " if game is not None
                    and game[1] == 1.0 else
                    (f"(mixed with the {lift} read-out, weight {mixed:.6f}) " if mixed is not None else "")
                    + (f"(mixed with the multiplicative-weights read-out, {game[0]}, weight {game[1]:.6f}) "
                       if game is not None else ""))
                 + f"reaches {_g4(norm)}, "
                 + (f"the LP's bound is {_g4(lp_exact)}" if bound is not None else "no LP bound computed"))
    if big:
        note += (f"; the hidden vectors' integers have no float64 value (numerators of up to {scale.bit_length():,} "
                 f"bits over a denominator of {hv.den.bit_length():,} bits): the float LP ran on them divided by the "
                 f"largest, in exact arithmetic (each quotient rounded once), and every margin above is exact")
    if steps_note is not None and game is None:
        note += f"; the multiplicative-weights game ({steps_note}) raised no margin"
    if failed is not None:
        note += f"; the LP solver stopped with status {failed!r}"
    if bound is not None and lp_norm <= 0 and norm <= 0:
        # a float64 LP's optimum of 0 is no proof that no read-out separates the vectors (values far
        # beyond the solver's tolerances round to it): the note says what was found, nothing more
        note += "; the LP (float64) found no positive margin"
    return Readout(W_O, bits, lp_norm, norm, N, rounds, note, work, budget)


def _game_readout(Xf: np.ndarray, y: np.ndarray, C: int, var: np.ndarray, n_var: int, steps: int):
    """The max-min game of the LP played `steps` times: the pairs (i, c) by multiplicative weights on their
    margins, the read-out by its best response in the box (the sign of the weighted pairs' gradient, tied
    entries summed); the average of the read-out's responses after k steps has a min margin within
    O(R sqrt(log(N C) / k)) of the LP optimum (R = 2 max |x|_1, the range of a margin).  Given up early when
    the averages are far from separating the vectors (where the LP optimum is a small fraction of R, as on
    tm ternary, they stay far below 0; on tm heads they separate by half the steps).
    Returns the best average met (largest entry 1), its margins (N, C; +inf at the labels), or None, None;
    and the steps played."""
    N, d = Xf.shape
    ar = np.arange(N)
    R = 2 * float(np.abs(Xf).sum(axis=1).max())
    if N == 0 or R == 0 or C < 2:
        return None, None, 0
    eta = np.sqrt(8 * np.log(N * (C - 1)) / steps) / R if N * (C - 1) > 1 else 1.0 / R
    cum = np.zeros((N, C))  # the margins summed over the responses so far
    Wsum = np.zeros((C, d))
    flat = var.ravel()
    untied = n_var == C * d and np.array_equal(flat, np.arange(C * d))
    # the step's arithmetic, with the label entries addressed in the flat views (the same elements
    # as [ar, y]) and the constant masks made once: the same float operations in the same order
    lab = ar * C + y
    is_lab = np.zeros((N, C), dtype=bool)
    is_lab.ravel()[lab] = True
    cum_flat = cum.ravel()
    L = np.empty((N, C))
    L_flat = L.ravel()
    masked = np.empty((N, C))
    best, best_W = -np.inf, None
    for k in range(1, steps + 1):
        np.multiply(cum, -eta, out=L)
        L_flat[lab] = -np.inf
        L -= L.max()
        P = np.exp(L, out=L)
        P /= P.sum()
        L_flat[lab] = -P.sum(axis=1)  # the gradient of sum P (W_y - W_c) . x_i in W, as -(weights) x rows
        grad = -(P.T @ Xf)
        # tied entries summed (bincount adds each weight to a bin of 0.0; without ties, to its own)
        W = np.sign(grad + 0.0) if untied else np.sign(np.bincount(flat, weights=grad.ravel(), minlength=n_var))[var]
        S = Xf @ W.T
        cum += S.ravel()[lab][:, None] - S
        Wsum += W
        cum_flat[lab] = 0.0
        np.copyto(masked, cum)
        masked.ravel()[lab] = np.inf
        low = float(masked.min()) / k
        if low > best:
            best, best_W = low, Wsum / k
        # given up: no average within R / 100 of separating the vectors after an eighth of the steps, or
        # none separating them after half (measured, in units of R after an eighth: tm heads l = 4..7
        # -0.004 to +0.016, then separating; tm ternary l = 4..7 -0.018 to -0.053, never separating)
        if (k == max(steps // 8, 1) and best < -R / 100) or (k == steps // 2 and best < 0):
            break
    top = float(np.abs(best_W).max()) if best_W is not None else 0.0
    if top == 0:
        return None, None, k
    W = best_W / top
    S = Xf @ W.T
    M = S[ar, y][:, None] - S
    M[ar, y] = np.inf
    return W, M, k


def _lifting(X: np.ndarray, Xf: np.ndarray, y: np.ndarray, C: int, Xi: np.ndarray | None = None) -> np.ndarray | None:
    """A read-out that separates distinct single-vector classes when some coordinate is the same
    non-zero constant kappa on every vector (a bias): logit_c(x) = 2 m_c . x - |m_c|^2 =
    |x|^2 - |x - m_c|^2 with m_c the class mean (the lifting of the nearest-mean rule), classes
    without vectors -1; the bias spread over every constant coordinate and each column's range
    centred on 0 (neither changes a margin: the logits move by the same amount for every class),
    then scaled into the box.  None without a constant coordinate.  Xi: X in int64 when it fits (the
    same comparisons, in numpy)."""
    N, d = Xf.shape
    if Xi is not None:
        const = np.nonzero((Xi[0] != 0) & (Xi == Xi[0]).all(axis=0))[0].tolist() if N else []
    else:
        const = [j for j in range(d) if N and X[0, j] != 0 and all(X[i, j] == X[0, j] for i in range(N))]
    const = [j for j in const if Xf[0, j] != 0]  # a non-zero integer whose scaled float is 0: no use here
    if not const:
        return None
    j0 = const[0]
    kappa = Xf[0, j0]
    means = np.zeros((C, d))
    counts = np.bincount(y, minlength=C).astype(np.float64)
    np.add.at(means, y, Xf)
    used = counts > 0
    means[used] /= counts[used, None]
    W = 2 * means
    W[:, j0] -= (means * means).sum(axis=1) / kappa
    W[~used] = 0.0
    W[~used, j0] = -1.0 / kappa
    # the bias spread over every constant coordinate (its sum is what the logits see)
    kap = Xf[0, const]
    bias = W[:, const] @ kap
    W[:, const] = bias[:, None] * np.sign(kap)[None, :] / np.abs(kap).sum()
    # a vector added to every row changes no margin: centre each column's range on 0
    W -= (W.max(axis=0) + W.min(axis=0)) / 2
    top = np.abs(W).max()
    return W / top if top > 0 else None


def _cosine(Xf: np.ndarray, y: np.ndarray, C: int) -> np.ndarray | None:
    """The cosine read-out: row c is the unit mean direction of class c's vectors (0 without
    vectors).  With one vector per class it separates whenever no vector is a positive multiple of
    another class's: the margin of x_i against class c is |x_i| (1 - cos(x_i, x_c)) > 0.  None
    when some vector is 0."""
    norms = np.linalg.norm(Xf, axis=1)
    if not len(norms) or norms.min() == 0:
        return None
    W = np.zeros((C, Xf.shape[1]))
    np.add.at(W, y, Xf / norms[:, None])
    top = np.linalg.norm(W, axis=1)
    W[top > 0] /= top[top > 0, None]
    top = np.abs(W).max()
    return W / top if top > 0 else None


def _tied_average(W: np.ndarray | None, var: np.ndarray, y: np.ndarray, C: int) -> np.ndarray | None:
    """W with every tied entry set to the mean of its tie group over the classes that have vectors
    (a read-out with the symmetry the LP's ties impose); None stays None."""
    if W is None:
        return None
    seen = np.zeros(C, dtype=bool)
    seen[y] = True
    weight = np.repeat(seen.astype(np.float64), W.shape[1])  # seen[c] for each entry (c, r), row by row
    n = int(var.max()) + 1
    tot = np.bincount(var.ravel(), weights=W.ravel() * weight, minlength=n)
    cnt = np.bincount(var.ravel(), weights=weight, minlength=n)
    mean = np.where(cnt > 0, tot / np.where(cnt > 0, cnt, 1), 0.0)
    out = np.where(seen[:, None], mean[var], W)  # classes without vectors keep their own rows
    top = np.abs(out).max()
    return out / top if top > 0 else None


SMALL_LINES = 32  # lines few enough for the bisection's steps in Python floats (numpy's calls cost more)


def _bisect(a: np.ndarray, b: np.ndarray, steps: int) -> tuple[float, float]:
    """[lo, hi] after `steps` halvings of [0, 1], each keeping the half towards which the minimum of the lines
    a + m b rises: right of mid when the line first attaining the minimum at mid (np.argmin) has b > 0.

    With finite lines the lines that can no longer attain the minimum are dropped as the interval shrinks
    (_lines_below: every decision unchanged), then, if many are left, the later copies of equal lines
    (the first line attaining the minimum is a first copy, and its copies have its b; lines equal up to
    the sign of a zero give equal values and decisions), and once few are left the steps run on Python floats: the
    same IEEE double products and sums, the first line attaining the minimum kept as np.argmin keeps it
    (lines finite, so no value is NaN)."""
    lo, hi = 0.0, 1.0
    finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
    prune_at = 4 if finite else steps
    deduped = False
    for step in range(steps):
        if step == prune_at:  # pruned again every 4 steps while it halves the lines
            n = len(a)
            a, b = _lines_below(a, b, lo, hi)
            prune_at = step + 4 if len(a) <= n // 2 else steps
            if prune_at == steps and not deduped:  # many lines left: each distinct line's first copy only
                deduped = True
                _, first = np.unique(a + 1j * b, return_index=True)
                if len(first) < len(a):
                    first.sort()
                    a, b = a[first], b[first]
        if finite and len(a) <= SMALL_LINES:
            return _bisect_small(a.tolist(), b.tolist(), lo, hi, steps - step)
        mid = (lo + hi) / 2
        if b[int(np.argmin(a + mid * b))] > 0:  # the minimum still rises to the right of mid
            lo = mid
        else:
            hi = mid
    return lo, hi


def _bisect_small(a: list, b: list, lo: float, hi: float, steps: int) -> tuple[float, float]:
    """_bisect's steps on Python floats (a, b non-empty, finite), the lines pruned as in _lines_below
    every 4 steps while that halves them."""
    prune = True
    for step in range(steps):
        if prune and step % 4 == 0 and len(a) > 2:
            ends = [(ai + lo * bi, ai + hi * bi) for ai, bi in zip(a, b)]
            top = min(max(e) for e in ends)
            kept = [i for i, e in enumerate(ends) if min(e) <= top]
            prune = len(kept) <= len(a) // 2
            a, b = [a[i] for i in kept], [b[i] for i in kept]
        mid = (lo + hi) / 2
        low, slope = a[0] + mid * b[0], b[0]
        for i in range(1, len(a)):
            v = a[i] + mid * b[i]
            if v < low:  # strictly: the first line attaining the minimum, as np.argmin
                low, slope = v, b[i]
        if slope > 0:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _lines_below(a: np.ndarray, b: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The lines a + m b (floats, finite) that may be the first minimum at some m in [lo, hi], in their order.

    Exact for _bisect: the float value fl(a + fl(m b)) is monotone in m (rounding is), so
    line i is at least min(its values at lo and hi) on [lo, hi], and the line attaining
    U = min_j max(its values at lo and hi) is at most U there; a line whose least end value is above U
    is strictly above that line at every m in [lo, hi], never a minimum, and dropping it changes
    neither the minimum nor which line is first among those attaining it."""
    at_lo, at_hi = a + lo * b, a + hi * b
    keep = np.minimum(at_lo, at_hi) <= np.maximum(at_lo, at_hi).min()
    return a[keep], b[keep]


def _best_mix(M0: np.ndarray, M1: np.ndarray) -> tuple[float, float]:
    """lambda in [0, 1] maximizing min over pairs of (1 - lambda) M0 + lambda M1 (concave and
    piecewise linear in lambda: bisection on the slope of the line attaining the minimum), and that
    minimum."""
    finite = np.isfinite(M0)
    a, b = M0[finite], M1[finite] - M0[finite]
    if a.size:  # only pairs whose line dips below the best line's top can be the minimum somewhere
        top = np.maximum(a, a + b).min()
        keep = np.minimum(a, a + b) <= top
        a, b = a[keep], b[keep]

    if not a.size:
        return 0.0, np.inf

    def f(lam):
        return float((a + lam * b).min())

    lo, hi = _bisect(a, b, 50)
    return max(((lam, f(lam)) for lam in ((lo + hi) / 2, 0.0, 1.0)), key=lambda p: p[1])


def with_max_margin_readout(model: Model, task, symmetry: str = "auto", max_points: int | None = None,
                            effort: int = 1):
    """(model with the fitted W_O, Readout, HiddenVectors)."""
    hv = hidden_vectors(model, task, symmetry, max_points)
    fit = fit_max_margin(hv, len(model.classes), task.size, effort)
    return replace(model, W_O=fit.W_O), fit, hv
