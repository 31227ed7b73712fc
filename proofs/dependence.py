"""Decide one-layer fittability exactly: a checked certificate or a verified one-layer model.

Paper section 11 (Def. 3, Props. 7-8): inside a group of points sharing (length, last token), a
one-layer attention-only transformer's last-position logits are o(X) = sum_j phi(j, x_j) for a
table phi: positions x tokens -> R^C; conversely every table is realised by one layer
(`build_one_layer_model`).  So a labelled dataset is one-layer fittable iff, per group, the LP

    sum_j phi(j, x_ij)[y_i] - sum_j phi(j, x_ij)[c] >= 1      (every point i, class c != y_i)

is feasible.  Farkas: otherwise there are mu[i, c] >= 0 with sum_{i: x_ij = v} w_i = 0 for every
(j, v) (w_i as in checkers/certificate.py), a paper-style dependence with a label contradiction.

Floats (HiGHS) only *search*.  Every verdict rests on exact objects: an integer certificate that
checkers/certificate.py accepts, or an integer model that checkers/exhaustive.verify accepts on
every point.
"""
from __future__ import annotations

import itertools
import random
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd
from typing import Hashable, Sequence

import numpy as np
import scipy.sparse as sp

from depthcert.checkers import certificate as certcheck
from depthcert.checkers.errors import BadInput

TOL = 1e-9


# ----------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class CertPoint:
    tokens: tuple
    label: Hashable
    mu: tuple  # ((class, positive int), ...)

    @property
    def total(self) -> int:
        return sum(k for _, k in self.mu)


@dataclass(frozen=True)
class Certificate:
    """Integer Farkas multipliers on a few points; `check()` re-runs the independent checker."""

    points: tuple[CertPoint, ...]
    task: str = ""

    def to_json(self, extra: dict | None = None) -> dict:
        classes = []
        for p in self.points:
            for c in [p.label] + [c for c, _ in p.mu]:
                if c not in classes:
                    classes.append(c)
        obj = {
            "format": certcheck.FORMAT,
            "version": certcheck.VERSION,
            "task": self.task,
            "classes": classes,
            "points": [
                {"tokens": list(p.tokens), "label": p.label, "mu": {str(c): int(k) for c, k in p.mu}}
                for p in self.points
            ],
        }
        if extra:
            obj.update(extra)
        return obj

    def check(self) -> tuple[bool, str]:
        return certcheck.check_certificate(self.to_json())

    def dependences(self) -> list[tuple[Hashable, tuple[int, ...]]]:
        """Per class c: lambda_i = w_i[c] (paper Def. 3), skipping all-zero ones."""
        classes = []
        for p in self.points:
            for c in [p.label] + [c for c, _ in p.mu]:
                if c not in classes:
                    classes.append(c)
        out = []
        for c in classes:
            lam = tuple((p.total if p.label == c else 0) - dict(p.mu).get(c, 0) for p in self.points)
            if any(lam):
                out.append((c, lam))
        return out


@dataclass(frozen=True)
class GroupFit:
    """An integer table for one group: logits(X) = sum_j table[(j, x_j)] (one int per class)."""

    length: int
    last: Hashable
    table: dict = field(compare=False)  # (j, token) -> tuple of ints per class


@dataclass(frozen=True)
class Decision:
    fittable: bool
    certificate: Certificate | None
    fits: tuple[GroupFit, ...] = ()
    points_searched: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------
# LP plumbing (HiGHS)


def _quiet_highs():
    """A Highs object that has written nothing and will write nothing.

    highspy >= 1.16 prints a banner on stdout (C level, not sys.stdout) when the first Highs
    object of a process is constructed, before any option can be set; so the construction runs
    with file descriptors 1 and 2 pointed at os.devnull, and output_flag is off before any solve.
    """
    import os

    import highspy

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
    saved = []
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        devnull = None
    try:
        if devnull is not None:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(devnull, fd)
                except OSError:
                    pass
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("log_to_console", False)
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        if devnull is not None:
            os.close(devnull)
    return h


def _run_lp(cost, A: sp.csc_matrix, row_lo, row_hi, col_lo, col_hi, time_limit: float | None = None,
            integer_cols=None, identity_hessian: bool = False, interior: bool = False):
    """Solve min cost.x, row_lo <= A x <= row_hi, col_lo <= x <= col_hi with dual simplex
    (identity_hessian: min cost.x + x.x/2 with HiGHS's QP solver; interior: the interior point
    solver without crossover, an optimal point that need not be a vertex, ~10x faster on
    large degenerate LPs).

    Returns (status, x) with status in {"optimal", "infeasible", "other"}.
    """
    import highspy

    A = sp.csc_matrix(A)
    A.sort_indices()
    h = _quiet_highs()
    if interior:
        h.setOptionValue("solver", "ipm")
        h.setOptionValue("run_crossover", "off")
    elif not identity_hessian:
        h.setOptionValue("solver", "simplex")
    h.setOptionValue("random_seed", 0)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    lp = highspy.HighsLp()
    lp.num_col_ = A.shape[1]
    lp.num_row_ = A.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_ = np.asarray(col_lo, dtype=np.float64)
    lp.col_upper_ = np.asarray(col_hi, dtype=np.float64)
    lp.row_lower_ = np.asarray(row_lo, dtype=np.float64)
    lp.row_upper_ = np.asarray(row_hi, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(np.float64)
    lp.a_matrix_.num_col_ = A.shape[1]
    lp.a_matrix_.num_row_ = A.shape[0]
    if integer_cols is not None:
        integ = np.zeros(A.shape[1], dtype=np.int32)
        integ[np.asarray(integer_cols)] = 1
        lp.integrality_ = [highspy.HighsVarType.kInteger if v else highspy.HighsVarType.kContinuous for v in integ]
        h.setOptionValue("mip_rel_gap", 0.0)
    h.passModel(lp)
    if identity_hessian:
        n = A.shape[1]
        h.passHessian(n, n, highspy.HessianFormat.kTriangular, np.arange(n + 1, dtype=np.int32),
                      np.arange(n, dtype=np.int32), np.ones(n))
    h.run()
    st = h.getModelStatus()
    if integer_cols is not None:
        sol = np.array(h.getSolution().col_value, dtype=np.float64)
        if st == highspy.HighsModelStatus.kInfeasible:
            return "infeasible", None
        if len(sol) == A.shape[1] and h.getInfo().primal_solution_status == 2:
            return ("optimal" if st == highspy.HighsModelStatus.kOptimal else "feasible"), sol
        return "other", None
    if st in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        # An infeasibility is only taken from a run without presolve: HiGHS 1.16's presolve calls
        # some feasible LPs infeasible (tests/test_dependence.py:
        # test_solver_infeasibility_is_confirmed), and presolve cannot tell infeasible from
        # unbounded (feasibility LPs here are never unbounded).  Either answer is still only a
        # search: certificates and models are checked exactly.
        h.setOptionValue("presolve", "off")
        h.run()
        st = h.getModelStatus()
    if st == highspy.HighsModelStatus.kOptimal:
        return "optimal", np.array(h.getSolution().col_value, dtype=np.float64)
    if st == highspy.HighsModelStatus.kInfeasible:
        return "infeasible", None
    return "other", None


class GroupProblem:
    """The LP data of one group: points X (N, n) of token ids, labels y (N,), C classes.

    Columns: phi(j, v, c) for the (position, token) pairs that occur.  Rows: pairs (i, c != y_i).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, n_classes: int):
        X = np.asarray(X, dtype=np.int64)
        y = np.asarray(y, dtype=np.int64)
        if X.ndim != 2 or len(X) != len(y) or len(X) == 0:
            raise ValueError("GroupProblem needs a non-empty (N, n) array and N labels")
        self.X, self.y, self.C = X, y, int(n_classes)
        N, n = X.shape
        self.N, self.n = N, n
        # compress (j, v) pairs that occur
        self.jv_keys = []
        jv_index = {}
        cols = np.empty((N, n), dtype=np.int64)
        for j in range(n):
            vals, inv = np.unique(X[:, j], return_inverse=True)
            base = len(self.jv_keys)
            for v in vals:
                jv_index[(j, int(v))] = len(self.jv_keys)
                self.jv_keys.append((j, int(v)))
            cols[:, j] = base + inv.reshape(-1)
        self.jv_cols = cols  # (N, n): index of (j, x_ij)
        self.n_vars = len(self.jv_keys) * self.C
        # rows: for each point i, each class c != y_i
        C = self.C
        pi = np.repeat(np.arange(N), C)
        pc = np.tile(np.arange(C), N)
        keep = pc != y[pi]
        self.row_point = pi[keep]
        self.row_class = pc[keep]
        R = len(self.row_point)
        rows = np.repeat(np.arange(R), n)
        jvc = cols[self.row_point].reshape(-1)
        plus = jvc * C + np.repeat(y[self.row_point], n)
        minus = jvc * C + np.repeat(self.row_class, n)
        data = np.concatenate([np.ones(R * n), -np.ones(R * n)])
        self.A = sp.csr_matrix(
            (data, (np.concatenate([rows, rows]), np.concatenate([plus, minus]))), shape=(R, self.n_vars)
        )

    def rows_of(self, points: np.ndarray) -> np.ndarray:
        mask = np.isin(self.row_point, points)
        return np.nonzero(mask)[0]

    # -- primal: a table phi with margin >= 1 on the given points
    def solve_primal(self, points: np.ndarray | None = None):
        rows = np.arange(self.A.shape[0]) if points is None else self.rows_of(points)
        if len(rows) == 0:
            return np.zeros(self.n_vars)
        A = self.A[rows]
        inf = np.inf
        st, x = _run_lp(
            np.zeros(self.n_vars), A.tocsc(), np.ones(len(rows)), np.full(len(rows), inf),
            np.full(self.n_vars, -inf), np.full(self.n_vars, inf),
        )
        if st == "optimal":
            return x
        if st == "infeasible":
            return None
        raise RuntimeError("HiGHS returned neither a solution nor infeasibility for the primal LP")

    # -- dual: mu >= 0 on rows of the given points, A^T mu = 0, sum(weight * mu) minimal, sum mu = 1
    def solve_dual(self, points: np.ndarray, point_weight: np.ndarray | None = None):
        rows = self.rows_of(points)
        if len(rows) == 0:
            return None, rows
        AT = self.A[rows].T.tocsr()
        used = np.nonzero(np.diff(AT.indptr))[0]
        AT = AT[used]
        M = sp.vstack([AT, sp.csr_matrix(np.ones((1, len(rows))))]).tocsc()
        lo = np.zeros(M.shape[0])
        lo[-1] = 1.0
        cost = np.ones(len(rows)) if point_weight is None else point_weight[self.row_point[rows]]
        st, mu = _run_lp(cost, M, lo, lo.copy(), np.zeros(len(rows)), np.full(len(rows), np.inf))
        if st == "optimal":
            return mu, rows
        if st == "infeasible":
            return None, rows
        raise RuntimeError("HiGHS returned neither a solution nor infeasibility for the dual LP")

    def solve_elastic(self, point_weight: np.ndarray | None = None):
        """min sum_i weight_i s_i  s.t.  margin rows of point i + s_i >= 1, s >= 0: (phi, s)."""
        R = self.A.shape[0]
        S = sp.csr_matrix((np.ones(R), (np.arange(R), self.row_point)), shape=(R, self.N))
        M = sp.hstack([self.A, S]).tocsc()
        inf = np.inf
        w = np.ones(self.N) if point_weight is None else point_weight
        cost = np.concatenate([np.zeros(self.n_vars), w])
        lo = np.concatenate([np.full(self.n_vars, -inf), np.zeros(self.N)])
        st, x = _run_lp(cost, M, np.ones(R), np.full(R, inf), lo, np.full(self.n_vars + self.N, inf))
        if st != "optimal":
            raise RuntimeError("HiGHS failed on the elastic LP")
        return x[: self.n_vars], x[self.n_vars :]

    def point_mass(self, mu: np.ndarray, rows: np.ndarray) -> np.ndarray:
        mass = np.zeros(self.N)
        np.add.at(mass, self.row_point[rows], mu)
        return mass


# ----------------------------------------------------------------------------------------------
# exact re-solve


def _exact_kernel_vector(prob: GroupProblem, rows: np.ndarray, mu_float: np.ndarray) -> list[int] | None:
    """Integer mu >= 0 (not all 0) on `rows` with A_rows^T mu = 0, near mu_float; None if none found."""
    import flint

    AT = prob.A[rows].T.tocsr()
    used = np.nonzero(np.diff(AT.indptr))[0]
    AT = AT[used].toarray().astype(np.int64)
    if AT.shape[0] == 0:
        AT = np.zeros((1, len(rows)), dtype=np.int64)
    M = flint.fmpz_mat(AT.tolist())
    K, nullity = M.nullspace()
    if nullity == 0:
        return None
    basis = [[int(K[r, c]) for r in range(len(rows))] for c in range(nullity)]
    candidates = []
    if nullity == 1:
        candidates.append(basis[0])
    else:
        B = np.array(basis, dtype=np.float64).T  # (len(rows), nullity)
        coef, *_ = np.linalg.lstsq(B, mu_float, rcond=None)
        for bound in (10, 100, 10**3, 10**4, 10**6, 10**9, 10**12):
            a = [Fraction(float(t)).limit_denominator(bound) for t in coef]
            vec = [sum(a[c] * basis[c][r] for c in range(nullity)) for r in range(len(rows))]
            den = 1
            for v in vec:
                den = den * v.denominator // gcd(den, v.denominator)
            candidates.append([int(v * den) for v in vec])
    for vec in candidates:
        if all(v <= 0 for v in vec):
            vec = [-v for v in vec]
        if any(v < 0 for v in vec) or not any(vec):
            continue
        g = 0
        for v in vec:
            g = gcd(g, v)
        return [v // g for v in vec]
    return None


def _support_points(prob: GroupProblem, mu, rows) -> np.ndarray:
    mass = prob.point_mass(mu, rows)
    return np.nonzero(mass > TOL * max(1.0, mass.max()))[0]


def minimal_certificate_rows(prob: GroupProblem, points: np.ndarray, deadline: float | None = None):
    """(rows, integer mu) of a certificate on an inclusion-minimal subset of `points`, or None.

    Reweighted L1 (fewer points), then a deletion filter (drop any point whose removal keeps the
    dual LP feasible), then an exact nullspace on the support of the last simplex vertex.
    """
    mu, rows = prob.solve_dual(points)
    if mu is None:
        return None
    support = _support_points(prob, mu, rows)
    for _ in range(3):
        mass = prob.point_mass(mu, rows)
        weight = 1.0 / (mass + 1e-3 * mass.max())
        mu2, rows2 = prob.solve_dual(support, weight)
        if mu2 is None:
            break
        s2 = _support_points(prob, mu2, rows2)
        if len(s2) >= len(support):
            mu, rows = mu2, rows2
            break
        mu, rows, support = mu2, rows2, s2
    # deletion filter (one pass suffices: a point whose removal made a superset fittable also
    # makes every subset fittable); the lightest points are tried first
    mass = prob.point_mass(mu, rows)
    for p in sorted(support.tolist(), key=lambda i: mass[i]):
        if deadline is not None and time.perf_counter() > deadline:
            break
        if p not in support:
            continue
        trial = support[support != p]
        if len(trial) == 0:
            continue
        mu2, rows2 = prob.solve_dual(trial)
        if mu2 is not None:
            mu, rows, support = mu2, rows2, _support_points(prob, mu2, rows2)
    # exact: support of the vertex, then all rows of the support points as a fallback
    keep = mu > TOL * max(1.0, mu.max())
    for sel_rows, sel_mu in ((rows[keep], mu[keep]), (prob.rows_of(support), None)):
        if sel_mu is None:
            pos = {r: k for k, r in enumerate(rows)}
            sel_mu = np.array([mu[pos[r]] if r in pos else 0.0 for r in sel_rows])
        vec = _exact_kernel_vector(prob, sel_rows, sel_mu)
        if vec is not None:
            nz = [k for k, v in enumerate(vec) if v]
            return sel_rows[nz], [vec[k] for k in nz]
    return None


def fewest_points_rows(prob: GroupProblem, points: np.ndarray, time_limit: float = 10.0, cap: float = np.inf):
    """Like `minimal_certificate_rows`, but first a MIP (HiGHS) for the fewest points.

    z_i binary, mu_(i,c) <= z_i, A^T mu = 0, sum mu = 1, minimise sum z_i.  The MIP's point set is
    then handed to `minimal_certificate_rows` for a simplex vertex and the exact re-solve.
    """
    rows = prob.rows_of(points)
    if len(rows) == 0:
        return None
    pts = np.unique(prob.row_point[rows])
    local = {int(p): k for k, p in enumerate(pts)}
    R, P = len(rows), len(pts)
    AT = prob.A[rows].T.tocsr()
    used = np.nonzero(np.diff(AT.indptr))[0]
    AT = AT[used]
    E = AT.shape[0]
    link = sp.hstack([sp.identity(R, format="csr"),
                      -sp.csr_matrix((np.ones(R), (np.arange(R), [local[int(p)] for p in prob.row_point[rows]])),
                                     shape=(R, P))])
    # valid cut: distinct sequences need >= 4 points (3 distinct sequences are never dependent:
    # a token that only one of them has at some position forces its coefficient to 0); with a
    # repeated sequence, >= 2.  With the cut, the MIP stops as soon as it meets the bound.
    distinct = len({prob.X[p].tobytes() for p in pts}) == len(pts)
    floor = 4.0 if distinct else 2.0
    M = sp.vstack([sp.hstack([AT, sp.csr_matrix((E, P))]),
                   sp.hstack([sp.csr_matrix(np.ones((1, R))), sp.csr_matrix((1, P))]),
                   link,
                   sp.hstack([sp.csr_matrix((1, R)), sp.csr_matrix(np.ones((1, P)))])]).tocsc()
    lo = np.concatenate([np.zeros(E), [1.0], np.full(R, -np.inf), [floor]])
    hi = np.concatenate([np.zeros(E), [1.0], np.zeros(R), [cap]])
    cost = np.concatenate([np.zeros(R), np.ones(P)])
    st, sol = _run_lp(cost, M, lo, hi, np.zeros(R + P), np.ones(R + P), time_limit=time_limit,
                      integer_cols=np.arange(R, R + P))
    if sol is None:
        return None
    chosen = pts[sol[R:] > 0.5]
    return minimal_certificate_rows(prob, chosen) if len(chosen) else None


# ----------------------------------------------------------------------------------------------
# rounding a table


def round_table(prob: GroupProblem, x: np.ndarray, points: np.ndarray | None = None) -> np.ndarray | None:
    """Integer table with every margin >= 1 on `points` (exact integer check), or None.

    Rounding (n+3) x loses at most n per margin while scaling a margin >= 1 - eps to > n + 2.
    """
    pts = np.arange(prob.N) if points is None else np.asarray(points)
    for scale in (prob.n + 3, 10 * (prob.n + 3), 1000 * (prob.n + 3)):
        T = np.rint(x * scale)
        if np.abs(T).max(initial=0) > 2**50:
            return None
        T = T.astype(np.int64).reshape(len(prob.jv_keys), prob.C)
        if len(pts) == 0 or margins_ok(prob, T, pts):
            return T
    return None


LDP_LIMIT = 4_000_000  # entries of the dense (variables + 1) x rows matrix of the NNLS fallback


def _least_distance_point(A) -> np.ndarray | None:
    """argmin |x| subject to A x >= 1 in floats, by Lawson and Hanson's reduction of least
    distance programming to non-negative least squares (Solving Least Squares Problems, 1974,
    ch. 23; scipy.optimize.nnls): with E = [A^T; 1^T] and f = (0, ..., 0, 1), the NNLS residual
    r = E u - f gives x = -r[:n] / r[n], and r = 0 means A x >= 1 is infeasible.  None when the
    matrix is too large or the problem looks infeasible.  Only a search: the caller re-solves
    exactly and checks every margin."""
    from scipy.optimize import nnls

    R, n = A.shape
    if R == 0 or (n + 1) * R > LDP_LIMIT:
        return None
    E = np.vstack([A.toarray().T.astype(np.float64), np.ones((1, R))])  # (n + 1, R)
    f = np.zeros(n + 1)
    f[n] = 1.0
    try:
        u, _ = nnls(E, f)
    except RuntimeError:  # iteration limit
        return None
    r = E @ u - f
    if abs(r[n]) < 1e-12:
        return None
    return -r[:n] / r[n]


CANONICAL_LIMIT = 1500  # active rows x variables beyond which the exact re-solve is skipped


def canonical_table(prob: GroupProblem) -> np.ndarray | None:
    """The minimum-norm table, exact and scaled to primitive integers, or None.

    Among all tables with every margin >= 1 (a closed convex set) exactly one has the least
    Euclidean norm, so the table depends on the dataset alone, never on which optimal vertex a
    solver returns.  HiGHS's QP solver finds it in floats; its active rows S (margin ~ 1) are then
    re-solved exactly: the least-norm point of {A_S x = 1} (x = R^T y for a basis R of the row
    space of A_S, rref in python-flint).  The exact answer is kept only if every margin is >= 1
    (checked exactly), and is then divided by the gcd of its numerators' content, so the same
    dataset always gives the same integer table.  None (the caller rounds an LP vertex instead)
    when both the QP and its NNLS fallback (_least_distance_point) fail, the active set is too
    large for an exact solve, or the check fails.
    """
    import flint

    inf = np.inf
    R = prob.A.shape[0]
    st, x = _run_lp(np.zeros(prob.n_vars), prob.A.tocsc(), np.ones(R), np.full(R, inf),
                    np.full(prob.n_vars, -inf), np.full(prob.n_vars, inf), identity_hessian=True)
    if st != "optimal" or x is None:
        # HiGHS 1.16.0's QP solver calls some feasible problems infeasible (tests/test_dependence.py::
        # test_least_norm_table_does_not_depend_on_the_qp_solver): the same point by another method
        x = _least_distance_point(prob.A)
        if x is None:
            return None
    act = np.nonzero(prob.A @ x <= 1 + 1e-6)[0]
    used = np.nonzero(np.asarray(abs(prob.A[act]).sum(axis=0)).ravel())[0]
    if len(act) == 0 or len(act) * len(used) > CANONICAL_LIMIT**2 // 4 or len(used) > CANONICAL_LIMIT:
        return None
    M = prob.A[act][:, used].toarray().astype(np.int64)  # (|S|, u); columns outside are 0 in x
    rref, rank = flint.fmpq_mat(M.tolist()).rref()
    basis = flint.fmpq_mat([[rref[r, c] for c in range(len(used))] for r in range(rank)])  # (rank, u)
    MR = flint.fmpq_mat(M.tolist()) * basis.transpose()  # (|S|, rank), full column rank
    normal = MR.transpose() * MR
    rhs = MR.transpose() * flint.fmpq_mat([[1] for _ in range(len(act))])
    try:
        yv = normal.solve(rhs)
    except ZeroDivisionError:
        return None
    xu = basis.transpose() * yv  # (u, 1)
    if any((MR * yv)[r, 0] != 1 for r in range(len(act))):
        return None  # the float active set was inconsistent
    vals = [Fraction(int(xu[k, 0].p), int(xu[k, 0].q)) for k in range(len(used))]
    den = 1
    for v in vals:
        den = den * v.denominator // gcd(den, v.denominator)
    ints = [int(v * den) for v in vals]
    g = 0
    for v in ints:
        g = gcd(g, v)
    if g == 0:
        return None
    T = np.zeros(prob.n_vars, dtype=object)
    T[used] = [v // g for v in ints]
    if max((abs(int(v)) for v in T), default=0) > 2**50:
        return None
    T = T.astype(np.int64).reshape(len(prob.jv_keys), prob.C)
    return T if margins_ok(prob, T, np.arange(prob.N)) else None


def logits_of_table(prob: GroupProblem, T: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Exact integer logits (object ints) of the given points under integer table T."""
    Tobj = T.astype(object)
    out = np.zeros((len(points), prob.C), dtype=object)
    for j in range(prob.n):
        out = out + Tobj[prob.jv_cols[points, j]]
    return out


def margins_ok(prob: GroupProblem, T: np.ndarray, points: np.ndarray) -> bool:
    L = logits_of_table(prob, T, points)
    return bool(all(correct(L[k], int(prob.y[p])) for k, p in enumerate(points)))


def correct(row, label: int) -> bool:
    return all(row[label] > row[c] for c in range(len(row)) if c != label)


# ----------------------------------------------------------------------------------------------
# labelled data in, decision out


class Data:
    """A labelled dataset as ids: tokens -> vocab ids, labels -> class ids, grouped by (n, last)."""

    def __init__(self, seqs: Sequence[Sequence], labels: Sequence, vocab: Sequence | None = None,
                 classes: Sequence | None = None):
        if len(seqs) != len(labels) or not seqs:
            raise BadInput("dataset: need as many labels as sequences, and at least one sequence")
        if vocab is None:
            vocab = []
            for s in seqs:
                for t in s:
                    if t not in vocab:
                        vocab.append(t)
        if classes is None:
            classes = []
            for lab in labels:
                if lab not in classes:
                    classes.append(lab)
        self.vocab, self.classes = list(vocab), list(classes)
        tid = {t: i for i, t in enumerate(self.vocab)}
        cid = {c: i for i, c in enumerate(self.classes)}
        self.seqs = [tuple(s) for s in seqs]
        self.labels = list(labels)
        self.groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(self.seqs):
            if not s:
                raise BadInput(f"dataset: sequence {i} is empty")
            self.groups.setdefault((len(s), s[-1]), []).append(i)
        self.ids = [np.array([tid[t] for t in s], dtype=np.int64) for s in self.seqs]
        self.y = np.array([cid[lab] for lab in self.labels], dtype=np.int64)

    @property
    def size(self) -> int:
        return len(self.seqs)

    def problem(self, members: Sequence[int]) -> GroupProblem:
        X = np.stack([self.ids[i] for i in members])
        return GroupProblem(X, self.y[list(members)], len(self.classes))

    def certificate(self, members: Sequence[int], prob: GroupProblem, rows, mu, task: str = "",
                    token_out=None, label_out=None) -> Certificate:
        token_out = token_out or (lambda t: t)
        label_out = label_out or (lambda c: c)
        per_point: dict[int, dict] = {}
        for r, k in zip(rows, mu):
            p = int(prob.row_point[r])
            c = self.classes[int(prob.row_class[r])]
            per_point.setdefault(p, {})
            per_point[p][c] = per_point[p].get(c, 0) + int(k)
        pts = []
        for p in sorted(per_point):
            i = members[p]
            mu_p = tuple((label_out(c), k) for c, k in per_point[p].items() if k)
            pts.append(CertPoint(tuple(token_out(t) for t in self.seqs[i]), label_out(self.labels[i]), mu_p))
        return Certificate(_order_points(tuple(pts)), task)


def _order_points(points: tuple[CertPoint, ...]) -> tuple[CertPoint, ...]:
    """Paper order: points with the first class's positive lambda first."""
    return tuple(sorted(points, key=lambda p: (str(p.label), [str(t) for t in p.tokens])))


def find_group_certificate(data: Data, members: Sequence[int], task: str = "", deadline=None,
                           mip_seconds: float = 0.0, **out):
    """Certificate (checked) for the points `members` of one group, or (None, float table).

    mip_seconds > 0: look for the fewest points with a time-limited MIP first.
    """
    prob = data.problem(members)
    x = prob.solve_primal()
    if x is not None:
        return None, (prob, x)
    res = minimal_certificate_rows(prob, np.arange(prob.N), deadline)
    if res is not None and mip_seconds > 0:
        k = len(np.unique(prob.row_point[res[0]]))
        if k > 4:
            better = fewest_points_rows(prob, np.arange(prob.N), mip_seconds, cap=k - 1)
            if better is not None and len(np.unique(prob.row_point[better[0]])) < k:
                res = better
    if res is None:
        raise RuntimeError("the LP is infeasible but no exact certificate was recovered; please report")
    rows, mu = res
    cert = data.certificate(members, prob, rows, mu, task, **out)
    ok, msg = cert.check()
    if not ok:
        raise RuntimeError(f"internal: recovered certificate does not check ({msg}); please report")
    return cert, None


def _neighbourhood(data: Data, members: Sequence[int], size: int, rng: random.Random, center: int | None = None) -> list[int]:
    """The `size` members nearest (Hamming) to `center` (default: a random member)."""
    X = np.stack([data.ids[i] for i in members])
    seed = rng.randrange(len(members)) if center is None else list(members).index(center)
    dist = (X != X[seed]).sum(axis=1)
    order = np.argsort(dist, kind="stable")[:size]
    return sorted(members[k] for k in order)


def memorization_fit(data: Data, members: Sequence[int]) -> GroupFit | None:
    """phi(j, v)[c] = 2 [x^(c)_j = v] when each class has exactly one sequence in the group and the
    sequences are distinct (paper Lemma 4 / Theorem 1 memorization): logit_c(X) = 2 * #agreements
    with x^(c), which is 2n for the own class and at most 2n - 2 for any other.  No LP needed;
    the verdict still comes from the exhaustive check of the built model."""
    seen_class, seen_seq = {}, set()
    for i in members:
        c = data.labels[i]
        if c in seen_class or data.seqs[i] in seen_seq:
            return None
        seen_class[c] = i
        seen_seq.add(data.seqs[i])
    cid = {c: k for k, c in enumerate(data.classes)}
    C = len(data.classes)
    table: dict = {}
    for c, i in seen_class.items():
        for j, v in enumerate(data.seqs[i]):
            row = table.setdefault((j, v), [0] * C)
            row[cid[c]] = 2
    n, last = len(data.seqs[members[0]]), data.seqs[members[0]][-1]
    return GroupFit(n, last, {k: tuple(v) for k, v in table.items()})


def _shrink(data: Data, members, cert: Certificate, rng, task: str, out, tries: int, mip_seconds: float) -> Certificate:
    """Fewer points: MIPs on 64-point Hamming neighbourhoods of the certificate's own points."""
    if len(cert.points) <= 4 or mip_seconds <= 0 or len(members) <= 4:
        return cert
    centers = _cert_members(data, members, cert, out)
    rng.shuffle(centers)
    centers = centers[:tries] + [None] * tries  # then neighbourhoods of random points
    for center in centers:
        sub = _neighbourhood(data, members, min(64, len(members)), rng, center)
        better, _ = find_group_certificate(data, sub, task, mip_seconds=mip_seconds, **out)
        if better is not None and len(better.points) < len(cert.points):
            cert = better
        if len(cert.points) <= 4:
            break
    return cert


def decide(data: Data, task: str = "", sample: int | None = 256, seed: int = 0, token_out=None,
           label_out=None, tries: int = 3, deadline: float | None = None, mip_seconds: float = 5.0) -> Decision:
    """Fittable with integer tables per group, or a checked certificate.

    Per group (length, last token): first Hamming neighbourhoods of random points (`tries` of them,
    the smallest certificate wins), then random samples growing 4x up to the whole group.  A
    certificate for a subset certifies the whole dataset; "fittable" needs the whole group's LP.
    """
    t0 = time.perf_counter()
    rng = random.Random(seed)
    out = {"token_out": token_out, "label_out": label_out}
    fits = []
    notes: list[str] = []
    searched = 0
    for (n, last), members in sorted(data.groups.items(), key=lambda kv: (-len(kv[1]), kv[0][0])):
        memo = memorization_fit(data, members)
        if memo is not None:
            fits.append(memo)
            continue
        best = None
        if sample is not None and len(members) > sample:
            for _ in range(tries):
                sub = _neighbourhood(data, members, sample, rng)
                searched = max(searched, len(sub))
                cert, _ = find_group_certificate(data, sub, task, deadline=deadline, **out)
                if cert is not None and (best is None or len(cert.points) < len(best.points)):
                    best = cert
                if best is not None and len(best.points) <= 4:
                    break
            if best is not None:
                best = _shrink(data, members, best, rng, task, out, tries, mip_seconds)
                return Decision(False, best, (), searched, time.perf_counter() - t0)
            if len(data.classes) > 2:
                # many classes make the full LP N (C-1) rows: first try two classes at a time
                pair = decide_by_class_pairs(data, task, seed=seed, groups=[((n, last), members)], **out)
                if pair is not None:
                    return Decision(False, pair.certificate, (), max(searched, pair.points_searched),
                                    time.perf_counter() - t0, pair.notes)
        size = len(members) if sample is None else min(sample, len(members))
        while True:
            sub = members if size >= len(members) else sorted(rng.sample(members, size))
            searched = max(searched, len(sub))
            small = mip_seconds if len(sub) <= 64 else 0.0
            cert, fit = find_group_certificate(data, sub, task, deadline=deadline, mip_seconds=small, **out)
            if cert is not None:
                cert = _shrink(data, members, cert, rng, task, out, tries, mip_seconds)
                return Decision(False, cert, (), searched, time.perf_counter() - t0)
            if size >= len(members):
                break
            size = min(len(members), size * 4)
        prob, x = fit
        T = canonical_table(prob)
        if T is None:
            T = round_table(prob, x)
            notes.append(f"group (length {n}, last {last!r}): the one-layer model is a rounded LP vertex, not "
                         "the canonical least-norm table (too large for its exact re-solve, or the re-solve "
                         "failed), so its heads and weights may differ between LP solver versions; its check "
                         "is exact all the same")
        if T is None:
            raise RuntimeError(f"could not round the LP solution of group (length {n}, last {last!r}); please report")
        table = {(j, data.vocab[v]): tuple(int(t) for t in T[k]) for k, (j, v) in enumerate(prob.jv_keys)}
        fits.append(GroupFit(n, last, table))
    return Decision(True, None, tuple(fits), searched, time.perf_counter() - t0, tuple(notes))


def decide_by_class_pairs(data: Data, task: str = "", seed: int = 0, pairs: int = 12, max_points: int = 2000,
                          groups=None, **out) -> Decision | None:
    """Certificate search restricted to two classes at a time (mu on c1, c2 only is still a valid
    certificate: the other classes' equations are 0 = 0).  For datasets with many classes, where
    the full LP has N (C-1) rows.  Returns a non-fittable Decision, or None if nothing was found."""
    t0 = time.perf_counter()
    groups = sorted(data.groups.items(), key=lambda kv: -len(kv[1])) if groups is None else groups
    for (n, last), members in groups:
        by_label: dict = {}
        for i in members:
            by_label.setdefault(data.labels[i], []).append(i)
        common = sorted(by_label, key=lambda c: -len(by_label[c]))[:6]
        freq_pairs = list(itertools.combinations(common, 2))[: pairs // 2]
        cand = []
        # pairs from Hamming neighbours: the label of a random point and the commonest other
        # label among its 32 nearest points (dependences live among near points)
        rng = random.Random(seed)
        X = np.stack([data.ids[i] for i in members])
        for _ in range(pairs):
            k = rng.randrange(len(members))
            order = np.argsort((X != X[k]).sum(axis=1), kind="stable")
            c1 = data.labels[members[k]]
            near = [data.labels[members[j]] for j in order[:64] if data.labels[members[j]] != c1][:32]
            if near:
                c2 = max(set(near), key=near.count)
                if (c1, c2) not in cand and (c2, c1) not in cand:
                    cand.append((c1, c2))
        cand += [p for p in freq_pairs if p not in cand and p[::-1] not in cand]
        best = None
        for c1, c2 in cand:
            sub = sorted(by_label[c1] + by_label[c2])[:max_points]
            small = Data([data.seqs[i] for i in sub], [data.labels[i] for i in sub], vocab=data.vocab, classes=[c1, c2])
            dec = decide(small, task, sample=256, seed=seed, **out)
            if not dec.fittable and (best is None or len(dec.certificate.points) < len(best.certificate.points)):
                best = dec
            if best is not None and len(best.certificate.points) <= 4:
                break
        if best is not None:
            return Decision(False, best.certificate, (), best.points_searched, time.perf_counter() - t0,
                            ("searched two classes at a time on sampled points",))
    return None


LOAD_LIMIT = 400_000


def _data_from_indices(task, indices) -> Data:
    seqs, labels = [], []
    for b in task.batches_of(indices, 8192):
        for row, lab in zip(b.ids.tolist(), b.labels.tolist()):
            seqs.append(tuple(task.vocab[t] for t in row))
            labels.append(task.classes[lab])
    return Data(seqs, labels, vocab=task.vocab, classes=task.classes)


def data_from_task(task, limit: int | None = None) -> Data:
    """All points of a task (token names in task.vocab, labels in task.classes)."""
    limit = LOAD_LIMIT if limit is None else limit
    if task.size > limit:
        raise BadInput(
            f"task {task.name} has {task.size} points; this loads all of them (limit {limit}): "
            f"use --max-points {task.size} or smaller options"
        )
    return _data_from_indices(task, range(task.size))


def window_indices(size: int, rng: random.Random, windows: int = 8, width: int = 4096) -> list[int]:
    """Contiguous index windows at random offsets: consecutive indices of the paper's tasks differ
    in their last few tokens (answers, query, last template letters), where dependences live."""
    out = set()
    for _ in range(windows):
        lo = rng.randrange(max(1, size - width))
        out.update(range(lo, min(size, lo + width)))
    return sorted(out)


@dataclass(frozen=True)
class TaskDecision:
    decision: Decision
    model: object | None  # checkers.model.Model when fittable
    verdict: object | None  # checkers.exhaustive.Verdict of the model on every point


def decide_task(task, sample: int | None = 256, seed: int = 0, progress: bool | None = None,
                load_limit: int | None = None) -> TaskDecision:
    """Decide a Task; a fittable verdict comes with an exhaustively verified one-layer model."""
    from depthcert.checkers.exhaustive import verify

    tok = getattr(task, "token_out", None)
    lab = getattr(task, "label_out", None)
    outs = {"token_out": (tok.get if tok else None), "label_out": (lab.get if lab else None)}
    limit = LOAD_LIMIT if load_limit is None else load_limit
    if task.size > limit:
        # too many points to load: a certificate on a subset still certifies the whole dataset
        idx = window_indices(task.size, random.Random(seed))
        dec = decide_by_class_pairs(_data_from_indices(task, idx), task.name, seed=seed, **outs)
        if dec is None or dec.fittable:
            raise BadInput(
                f"task {task.name} has {task.size} points (load limit {limit}); no certificate was found in "
                f"{len(idx)} sampled points, and deciding fittability needs every point: "
                f"use --max-points {task.size} or smaller options"
            )
        return TaskDecision(dec, None, None)
    data = data_from_task(task, limit)
    dec = decide(data, task.name, sample=sample, seed=seed, **outs)
    if not dec.fittable:
        return TaskDecision(dec, None, None)
    model = build_one_layer_model(task.vocab, task.classes, task.length, dec.fits, name=f"one-layer fit of {task.name}")
    verdict = verify(model, task, progress=progress)
    if not verdict.verified:
        raise RuntimeError(f"internal: the fitted one-layer model fails on point {verdict.counterexample.index}; please report")
    return TaskDecision(dec, model, verdict)


# ----------------------------------------------------------------------------------------------
# the explicit one-layer model


def build_one_layer_model(vocab: Sequence[str], classes: Sequence[str], max_length: int,
                          fits: Sequence[GroupFit], name: str = "one-layer fit"):
    """One layer, one ReLU head per (group, key position): the "if" direction of paper Prop. 7.

    Layout [token V | position P | slot_1 V | slot_2 V | ...], one slot per head.  Head
    (n, t, j) has the gate

        score(key, query) = [key pos = j] + [query token = t] + [query pos = n-1] - 2,

    which is 1 exactly for key position j of a query at the last position of a length-n sequence
    ending in t, and <= 0 otherwise.  H0 has no bias row, so every term is bilinear: [key pos = j]
    is row p_j of the (position, position) block (each query has one position one-hot), [query
    pos = n-1] is column p_{n-1} of that block, [query token = t] is column t of the (position,
    token) block (each key has one position one-hot), and -2 fills the (position, position) block.
    W_V copies the key's token one-hot into the head's slot (times m, undoing the 1/m), so at the
    last position slot (n, t, j) holds e_{x_j} for the sequence's own group and 0 for the others.
    W_O holds the table: W_O[c, slot (n, t, j), v] = phi_(n,t)(j, v)[c], so the logits are
    exactly sum_j phi(j, x_j) (the Lemma 4 memorization construction, with the table in W_O).
    """
    from depthcert.checkers.layout import BlockMatrix, Layout, zeros
    from depthcert.checkers.model import Head, Model

    vocab = tuple(vocab)
    classes = tuple(classes)
    V, P, C = len(vocab), max_length, len(classes)
    tid = {t: i for i, t in enumerate(vocab)}
    heads_spec = []
    for fit in fits:
        if fit.length > max_length:
            raise BadInput(f"a group has length {fit.length} > max_length {max_length}")
        for j in range(fit.length):
            col = {v: fit.table[(jj, v)] for (jj, v) in fit.table if jj == j}
            if any(any(vals) for vals in col.values()):
                heads_spec.append((fit.length, fit.last, j, col))
    if not heads_spec:  # a model needs at least one head; an all-zero table needs no slot content
        heads_spec.append((1, vocab[0], 0, {}))
    m = len(heads_spec)
    layout = Layout.of(("token", V), ("position", P), *[(f"slot{h}", V) for h in range(m)])
    heads = []
    WO = BlockMatrix(Layout.of(("classes", C)), layout)
    for h, (n, last, j, col) in enumerate(heads_spec):
        W = BlockMatrix(layout, layout)
        pp = np.full((P, P), Fraction(-2), dtype=object)
        pp[j, :] += 1  # key position j
        pp[:, n - 1] += 1  # query position n-1
        W.set("position", "position", pp)
        pt = zeros(P, V)
        pt[:, tid[last]] = Fraction(1)  # query token t
        W.set("position", "token", pt)
        Wv = BlockMatrix(layout, layout).set(f"slot{h}", "token", m)
        heads.append(Head(W.build(), Wv.build()))
        block = zeros(C, V)
        for v, vals in col.items():
            for c in range(C):
                block[c, tid[v]] = Fraction(vals[c])
        WO.set("classes", f"slot{h}", block)
    return Model(vocab, max_length, classes, layout, (tuple(heads),), WO.build(), name=name)


# ----------------------------------------------------------------------------------------------
# best provable accuracy when not fittable


@dataclass(frozen=True)
class AccuracyBounds:
    """lower_correct <= (best one-layer number of correct points) <= upper_correct, both exact.

    lower: an explicit one-layer model (`model`) that gets lower_correct points right, counted
    exactly on every point.  upper: `certificates` are pairwise disjoint and each checks, so every
    one-layer model errs at least once inside each: upper_correct = total - len(certificates).
    """

    total: int
    lower_correct: int
    upper_correct: int
    certificates: tuple[Certificate, ...]
    model: object
    upper_search_complete: bool
    seconds: float


def count_correct(model, task) -> int:
    """Exact count of points whose label logit is strictly above every other logit."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.exhaustive import check_compatible

    cmap = check_compatible(model, task)
    rows = np.array([cmap[i] for i in range(len(task.classes))], dtype=np.int64)
    ev = Evaluator(model)
    good = 0
    for b in task.batches(4096):
        num, _ = ev.logits(b.ids)
        for r, lab in zip(num, rows[b.labels]):
            vals = [int(v) for v in r]
            good += all(vals[lab] > v for c, v in enumerate(vals) if c != lab)
    return good


def _best_partial_table(prob: GroupProblem, rounds: int = 3) -> np.ndarray:
    """Integer table fitting many points: reweighted elastic LP, each candidate counted exactly."""
    best, best_good = None, -1
    weight = np.ones(prob.N)
    for _ in range(rounds):
        x, slack = prob.solve_elastic(weight)
        fitted = np.nonzero(slack <= 1e-7)[0]
        T = round_table(prob, x, fitted)
        if T is None:
            T = np.rint(x * (prob.n + 3)).astype(np.int64).reshape(len(prob.jv_keys), prob.C)
        L = logits_of_table(prob, T, np.arange(prob.N))
        good = sum(correct(L[i], int(prob.y[i])) for i in range(prob.N))
        if good > best_good:
            best, best_good = T, good
        weight = 1.0 / (slack + 0.1)
    return best


def _search_certificate(data: Data, remaining: list[int], rng, out, sample: int, name: str):
    """(certificate, None) for some subset of `remaining`, or (None, (prob, x)) when it is all fittable."""
    for size in (64, sample):
        if len(remaining) <= size:
            break
        sub = _neighbourhood(data, remaining, size, rng)
        cert, _ = find_group_certificate(data, sub, name, mip_seconds=(2.0 if size <= 64 else 0.0), **out)
        if cert is not None:
            return cert, None
    return find_group_certificate(data, remaining, name, mip_seconds=(2.0 if len(remaining) <= 64 else 0.0), **out)


def _cert_members(data: Data, remaining: list[int], cert: Certificate, out) -> list[int]:
    """Indices (in `remaining`) of the certificate's points, in certificate order."""
    tok = out["token_out"] or (lambda t: t)
    lab = out["label_out"] or (lambda c: c)
    where = {}
    for i in remaining:
        where.setdefault((tuple(tok(t) for t in data.seqs[i]), lab(data.labels[i])), i)
    idx = []
    for p in cert.points:
        key = (tuple(p.tokens), p.label)
        if key not in where:
            raise RuntimeError("internal: certificate point not found in the dataset")
        idx.append(where[key])
    return idx


def _embed_table(src: GroupProblem, T: np.ndarray, dst: GroupProblem) -> np.ndarray:
    """T (over src's (j, v) pairs) re-indexed over dst's pairs; pairs src never saw get 0."""
    where = {key: k for k, key in enumerate(src.jv_keys)}
    out = np.zeros((len(dst.jv_keys), dst.C), dtype=np.int64)
    for k, key in enumerate(dst.jv_keys):
        if key in where:
            out[k] = T[where[key]]
    return out


def _fittable_subset(data: Data, members: list[int], rng, out, sample: int, name: str, deadline: float, rule: int):
    """Delete one point of each certificate found until the rest fits, then add deleted points back
    while it still fits.  rule 0 deletes the heaviest certificate point, later rules a random one.
    Returns (problem, integer table) or None on timeout."""
    remaining = list(members)
    removed = []
    while time.perf_counter() < deadline:
        cert, fit = _search_certificate(data, remaining, rng, out, sample, name)
        if cert is None:
            rng.shuffle(removed)
            for p in removed:
                if time.perf_counter() > deadline:
                    break
                trial = data.problem(remaining + [p])
                xt = trial.solve_primal()
                if xt is not None:
                    remaining.append(p)
                    fit = (trial, xt)
            prob, x = fit
            return prob, round_table(prob, x)
        idx = _cert_members(data, remaining, cert, out)
        if rule == 0:
            k = max(range(len(idx)), key=lambda k: cert.points[k].total)
        else:
            k = rng.randrange(len(idx))
        remaining.remove(idx[k])
        removed.append(idx[k])
    return None


def accuracy_bounds(task, seconds: float = 30.0, seed: int = 0, sample: int = 256, load_limit: int | None = None,
                    max_rounds: int = 20, progress: bool = False) -> AccuracyBounds:
    """Exact bounds on the best accuracy of any one-layer model on `task` (see AccuracyBounds).

    upper: greedily collect pairwise disjoint certificates (each checked).
    lower: delete one point of each certificate found until the rest is fittable (paper 13.1: drop
    one of the four sequences and the other three fit), then count the fitted model's correct
    points exactly on the whole dataset; up to `max_rounds` randomised rounds, stopping early when
    the bounds meet.  Half the time budget each; on timeout both stay valid.
    """
    t0 = time.perf_counter()
    rng = random.Random(seed)
    data = data_from_task(task, load_limit)
    tok = getattr(task, "token_out", None)
    lab = getattr(task, "label_out", None)
    out = {"token_out": (tok.get if tok else None), "label_out": (lab.get if lab else None)}
    certs = []
    complete = True
    fits = []
    groups = sorted(data.groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
    upper_deadline = t0 + seconds / 2
    per_group_certs = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="disjoint certificates", unit="cert", leave=False, file=sys.stderr)
    for key, members in groups:
        remaining = list(members)
        per_group_certs[key] = 0
        while remaining:
            if time.perf_counter() > upper_deadline:
                complete = False
                break
            cert, _ = _search_certificate(data, remaining, rng, out, sample, task.name)
            if cert is None:
                break
            certs.append(cert)
            per_group_certs[key] += 1
            if bar is not None:
                bar.update(1)
            for i in _cert_members(data, remaining, cert, out):
                remaining.remove(i)
    if bar is not None:
        bar.close()
    for gi, ((n, last), members) in enumerate(groups):
        now = time.perf_counter()
        lower_deadline = now + max(0.0, (t0 + seconds - now)) / (len(groups) - gi)
        target = len(members) - per_group_certs[(n, last)]
        T, prob, best_good = None, None, -1
        for rule in range(max_rounds):
            if time.perf_counter() > lower_deadline:
                break
            got = _fittable_subset(data, members, rng, out, sample, task.name, lower_deadline, rule)
            if got is None:
                break
            p2, T2 = got
            if T2 is None:
                continue
            full = data.problem(members)
            Tf = _embed_table(p2, T2, full)
            Lf = logits_of_table(full, Tf, np.arange(full.N))
            good = sum(correct(Lf[i], int(full.y[i])) for i in range(full.N))
            if good > best_good:
                T, prob, best_good = Tf, full, good
            if good >= target:
                break
        if T is None:
            prob = data.problem(members)
            T = _best_partial_table(prob)
        fits.append(GroupFit(n, last, {(j, data.vocab[v]): tuple(int(t) for t in T[k])
                                       for k, (j, v) in enumerate(prob.jv_keys)}))
    model = build_one_layer_model(task.vocab, task.classes, task.length, fits, name=f"best partial one-layer fit of {task.name}")
    good = count_correct(model, task)
    return AccuracyBounds(task.size, good, task.size - len(certs), tuple(certs), model, complete,
                          time.perf_counter() - t0)
