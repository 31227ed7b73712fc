"""Symmetry reduction that is itself a proof.

Claim.  Let G be a group of token permutations under which the labelled dataset is closed
(sigma X is in the dataset with label kappa_sigma(y) whenever X is, with label y).  Suppose that
for a generating set of G there are coordinate permutations Pi of the residual stream with

    Pi H0(X) = H0(sigma X)                       (token rows follow sigma; position rows and the
                                                 constant row are fixed: checked on pi)
    Pi^T W_QK Pi = W_QK,  Pi W_V Pi^T = W_V      (every head of every layer)
    W1 Pi = Q W1, Q b1 = b1, W2 Q = Pi W2, Pi b2 = b2   (every MLP, for some permutation Q of
                                                 its hidden units, found by matching units)
    K W_O Pi^T = W_O                             (K permutes the classes by kappa_sigma)

Then by induction on layers H_l(sigma X) = Pi H_l(X): scores are unchanged
((Pi h_j)^T W_QK (Pi h_k) = h_j^T W_QK h_k), so relu, hardmax and softmax weights and the causal
mask (a function of positions only) are unchanged, the attention output moves by Pi; and
relu(W1 Pi h + b1) = Q relu(W1 h + b1), so the MLP output moves by Pi as well.  Hence
o_k(sigma X) = K o_k(X) at every position k: the margins of sigma X equal those of X.  So
checking one point per orbit checks every point, and the minimum margin over the orbit
representatives is the minimum over the whole dataset.

How Pi is found: token rows move with sigma; a construction may tag other rows with the token
they carry (Model.notes["row_tokens"]: {row: token}), and a row tagged (block b, token t) moves
to the row of the same block tagged sigma(t).  Untagged rows are fixed.  Pi is only a candidate:
the equations above are checked exactly on the weights, and if any fails the caller falls back
to full enumeration.  The group is the full symmetric group on each token group the task
declares; a transposition and an n-cycle generate it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthcert.checkers.model import Model


class EnumerationError(RuntimeError):
    """The task's orbit enumerator returned something the check refutes: a bug in depthcert
    (the commands exit 4 with this one line)."""


@dataclass(frozen=True)
class OrbitCheck:
    """What check_orbits established about a task's orbit representatives."""

    indices: np.ndarray
    sizes: tuple[int, ...]  # re-derived here, equal to the enumerator's
    labels_rederived: bool  # each label recomputed from the task's rule (False: the labels are data)
    text: str


def first_occurrence_form(tokens, groups: tuple[tuple[str, ...], ...]) -> tuple:
    """The tokens with each group's members renamed (group number, 0, 1, ...) in order of first
    occurrence; a token of no group stays itself.  A complete invariant of the orbits of the
    product of the groups' symmetric groups."""
    where = {t: g for g, toks in enumerate(groups) for t in toks}
    seen: list[dict] = [{} for _ in groups]
    out = []
    for t in tokens:
        g = where.get(t)
        out.append(t if g is None else (g, seen[g].setdefault(t, len(seen[g]))))
    return tuple(out)


def orbit_size(tokens, groups: tuple[tuple[str, ...], ...]) -> int:
    """prod_g A(|g|, u_g), u_g the distinct members of group g among `tokens`: |G| / |Stab|."""
    from math import perm

    present = set(tokens)
    out = 1
    for toks in groups:
        out *= perm(len(toks), sum(1 for t in set(toks) if t in present))
    return out


def _labels_as_tokens(task, labels) -> list:
    """A decoded label (a class index, or per position an array with UNLABELLED) as class names."""
    if getattr(task, "outputs", "last") == "all":
        return [None if int(y) < 0 else task.classes[int(y)] for y in labels]
    return [task.classes[int(labels)]]


def _decoded(task, idx, size: int = 4096):
    """(indices, token ids, labels) for the points `idx` in their order, in pieces of equal sequence
    length (a dataset file may hold sequences of several lengths; decode takes one length)."""
    lengths = getattr(task, "_lengths", None)
    lo = 0
    while lo < len(idx):
        hi = min(lo + size, len(idx))
        if lengths is not None:  # cut the piece where the length changes
            first = int(lengths[int(idx[lo])])
            hi = next((k for k in range(lo + 1, hi) if int(lengths[int(idx[k])]) != first), hi)
        part = idx[lo:hi]
        ids, labels = task.decode(part)
        yield part, ids, labels
        lo = hi


def _objects(values) -> np.ndarray:
    """A 1-d object array of the values as they are."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


class _Forms:
    """first_occurrence_form and orbit_size of many points at once, in numpy.

    Every distinct value a point's form may hold (a token, a class name, None for an unlabelled
    position) gets a number e < E (equal strings, e.g. a class named like a token, one number).
    A point's row of numbers (tokens, then labels) becomes its form row: a value of no group stays
    e; a member of group g becomes E + F * G + g, F the position of its first occurrence in the row.
    Two points have equal first-occurrence forms exactly when their form rows are equal: the form's
    (g, rank) pairs and the rows' (g, F) pairs determine each other (rank = the number of distinct
    g-members whose first occurrence comes before F; F = the first position holding the same
    (g, rank)), and values of no group are compared as themselves in both.  The orbit size is
    prod_g A(|g|, u_g) as in orbit_size, u_g the distinct members of g among the row's values
    (None left out), counted at their first occurrences."""

    def __init__(self, task, groups: tuple[tuple[str, ...], ...]):
        self.per_position = getattr(task, "outputs", "last") == "all"
        number: dict = {}
        self.vocab, self.classes = _objects(task.vocab), _objects(task.classes)
        self.tok_num = np.array([number.setdefault(t, len(number)) for t in task.vocab], dtype=np.int64)
        self.cls_num = np.array([number.setdefault(c, len(number)) for c in task.classes], dtype=np.int64)
        self.none_num = number.setdefault(None, len(number))
        self.number = number
        values = list(number)
        where = {t: g for g, toks in enumerate(groups) for t in toks}  # as first_occurrence_form
        self.group = np.array([where.get(v, -1) for v in values], dtype=np.int64)
        # member[e, g]: value e counts towards u_g (orbit_size: None is left out)
        self.member = np.zeros((len(values), len(groups)), dtype=bool)
        for g, toks in enumerate(groups):
            for t in set(toks):
                if t is not None and t in number:  # a member that is no token or class is never present
                    self.member[number[t], g] = True
        self.E, self.G = len(values), len(groups)
        self.group_len = [len(toks) for toks in groups]
        self._sizes: dict = {}

    def rows(self, n_points: int, ids, labels):
        """(tokens, labels as class names, form keys, orbit sizes) of one decoded piece of
        n_points points, or None when the piece is not plain (ids or labels out of range, other
        types or shapes): the caller then reads it point by point."""
        if not isinstance(ids, np.ndarray) or ids.ndim != 2 or ids.dtype.kind not in "iu":
            return None
        B, n = ids.shape
        y = np.asarray(labels)
        C = len(self.classes)
        if y.dtype.kind not in "iu" or y.ndim != (2 if self.per_position else 1) or len(y) != B:
            return None
        if B == 0 or B != n_points or (n and (int(ids.min()) < 0 or int(ids.max()) >= len(self.vocab))):
            return None
        if self.per_position:
            if y.size and int(y.max()) >= C:
                return None
            lab_num = np.where(y < 0, self.none_num, self.cls_num[np.maximum(y, 0)] if C else self.none_num)
            lab_names = np.where(y < 0, None, self.classes[np.clip(y, 0, max(C - 1, 0))] if C else None)
        else:
            if int(y.min()) < -C or int(y.max()) >= C:
                return None
            y = np.where(y < 0, y + C, y)[:, None]
            lab_num, lab_names = self.cls_num[y], self.classes[y]
        keys, sizes = self.encode(np.concatenate([self.tok_num[ids], lab_num], axis=1))
        return self.vocab[ids].tolist(), lab_names.tolist(), keys, sizes

    def of_values(self, values: list) -> tuple:
        """(form key, orbit size) of one point given as its values (tokens, then labels)."""
        keys, sizes = self.encode(np.array([[self.number[v] for v in values]], dtype=np.int64).reshape(1, len(values)))
        return keys[0], sizes[0]

    def encode(self, X: np.ndarray) -> tuple[list, list]:
        """(form keys, orbit sizes) of the rows of X (B, L): value numbers, tokens then labels."""
        B, L = X.shape
        code = np.empty((B, L), dtype=np.int64)
        counts = np.zeros((B, self.G), dtype=np.int64)
        step = max(1, (1 << 20) // max(1, L * L))  # rows at a time: B x L x L comparisons bounded
        pos = np.arange(L)
        for lo in range(0, B if L else 0, step):
            x = X[lo:lo + step]
            first = (x[:, :, None] == x[:, None, :]).argmax(axis=2)  # first position holding the same value
            g = self.group[x]
            code[lo:lo + step] = np.where(g < 0, x, self.E + first * self.G + g)
            fresh = (first == pos)[:, :, None] & self.member[x]
            counts[lo:lo + step] = fresh.sum(axis=1)
        keys = np.ascontiguousarray(code).view(np.dtype((np.void, 8 * L))).ravel().tolist() if L else [b""] * B
        return keys, [self._size(c) for c in map(tuple, counts.tolist())]

    def _size(self, used: tuple) -> int:
        got = self._sizes.get(used)
        if got is None:
            from math import perm

            got = 1
            for n, u in zip(self.group_len, used):
                got *= perm(n, u)
            self._sizes[used] = got
        return got


def _points(task, forms: _Forms, part, ids, labels):
    """(index, tokens, labels as class names, form key, orbit size) per point of a decoded piece:
    from _Forms.rows, or (a piece that is not plain) point by point as the tokens and labels are
    read one at a time (what that raises is raised when the point is reached)."""
    got = forms.rows(len(part), ids, labels)
    if got is not None:
        return zip(part.tolist(), *got)
    return _one_by_one(task, forms, part, ids, labels)


def _one_by_one(task, forms: _Forms, part, ids, labels):
    """_points of a piece that is not plain: each point read as the task's values when it is reached."""
    for i, row, y in zip(part.tolist(), ids.tolist(), labels):
        toks = [task.vocab[t] for t in row]
        labs = _labels_as_tokens(task, y)
        yield (i, toks, labs, *forms.of_values(toks + labs))


def check_orbits(task, indices, sizes) -> OrbitCheck:
    """Check the orbit representatives (indices, orbit sizes) of `task` under its symmetry groups
    (the module docstring says what is checked); raises EnumerationError naming the first fault.

    Points are checked in order, each point's label before its orbit: the first fault met is the
    one named.  The forms and orbit sizes are computed a decoded piece at a time (_Forms: equal
    exactly where first_occurrence_form is equal, sizes as orbit_size); labels are recomputed
    point by point by the task's rule."""
    from depthcert.checkers.label_rules import RuleViolation, rule_for

    groups = tuple(tuple(g) for g in task.symmetry_groups())
    idx = np.asarray(indices, dtype=np.int64)
    given = [int(s) for s in sizes]
    where = f"{task.describe()}: orbit representatives"
    if idx.ndim != 1 or len(idx) != len(given) or len(idx) == 0:
        raise EnumerationError(f"{where}: {len(idx)} indices and {len(given)} orbit sizes")
    if int(idx.min()) < 0 or int(idx.max()) >= task.size:
        raise EnumerationError(f"{where}: an index outside the dataset (0 .. {task.size - 1})")
    rule = rule_for(task)
    coder = _Forms(task, groups)
    forms: dict = {}
    derived = []
    for part, ids, labels in _decoded(task, idx):
        for i, toks, labs, form, size in _points(task, coder, part, ids, labels):
            if rule is not None:
                try:
                    want = rule(toks)
                except RuleViolation as exc:
                    raise EnumerationError(f"{where}: point {i} ({' '.join(toks)}) is not a point of the task: "
                                           f"{exc}") from None
                if want != labs[0]:
                    raise EnumerationError(f"{where}: point {i} ({' '.join(toks)}) is labelled {labs[0]}, the "
                                           f"task's rule gives {want}")
            if form in forms:
                raise EnumerationError(f"{where}: points {forms[form]} and {i} are in one orbit (equal "
                                       "first-occurrence forms): a duplicate representative")
            forms[form] = i
            derived.append(size)
    for i, (mine, theirs) in enumerate(zip(derived, given)):
        if mine != theirs:
            raise EnumerationError(f"{where}: point {int(idx[i])} has an orbit of {mine} points (prod A(|g|, used)), "
                                   f"the enumerator says {theirs}")
    total = sum(derived)
    if total != task.size:
        raise EnumerationError(f"{where}: the orbits of the {len(idx)} representatives add up to {total} points, "
                               f"the dataset has {task.size}")
    n = len(idx)
    text = (f"{n} representative{'s' if n != 1 else ''} checked: pairwise in different orbits (first-occurrence "
            f"forms), orbit sizes re-derived (prod A(|g|, used)) adding up to the {task.size} points"
            + (", labels recomputed from the task's rule" if rule is not None else ", labels are the dataset's"))
    return OrbitCheck(idx, tuple(derived), rule is not None, text)


def checked_orbits(task) -> OrbitCheck | None:
    """task.orbit_representatives(), checked (check_orbits); None when the task declares no
    symmetry or no representatives."""
    if not task.symmetry_groups():
        return None
    reps = task.orbit_representatives()
    if reps is None:
        return None
    return check_orbits(task, *reps)


@dataclass(frozen=True)
class EquivarianceReport:
    ok: bool
    groups: tuple[tuple[str, ...], ...]
    reason: str  # why it failed, or what was checked


def generators(group: tuple[str, ...]) -> list[dict[str, str]]:
    """A transposition and a full cycle: together they generate Sym(group)."""
    n = len(group)
    if n < 2:
        return []
    swap = {group[0]: group[1], group[1]: group[0]}
    cycle = {group[i]: group[(i + 1) % n] for i in range(n)}
    return [swap] if n == 2 else [swap, cycle]


def row_permutation(model: Model, sigma: dict[str, str]) -> np.ndarray | None:
    """pi with Pi e_r = e_pi[r], or None if a tagged row has no partner."""
    d = model.dim
    pi = np.arange(d)
    vocab_index = {t: i for i, t in enumerate(model.vocab)}
    for t, s in sigma.items():
        if t not in vocab_index or s not in vocab_index:
            return None
        pi[vocab_index[t]] = vocab_index[s]
    tags = model.notes.get("row_tokens", {}) if model.notes else {}
    by_tag = {(blk, tok): r for r, (blk, tok) in tags.items()}
    for r, (blk, tok) in tags.items():
        if tok in sigma:
            partner = by_tag.get((blk, sigma[tok]))
            if partner is None:
                return None
            pi[r] = partner
    if len(set(pi.tolist())) != d:
        return None
    # Pi H0(X) = H0(sigma X): rows that H0 can set (positions, the constant row) must stay put;
    # a tag on one of them would move it and break the claim
    for r in range(len(model.vocab), model.input_rows):
        if pi[r] != r:
            return None
    return pi


def hidden_permutation(mlp, pi: np.ndarray, coded=None) -> np.ndarray | None:
    """q with W1[q[a], pi[r]] = W1[a, r], b1[q[a]] = b1[a], W2[pi[s], q[a]] = W2[s, a], or None.

    Hidden unit a must go to a unit whose (W1 row, b1, W2 column) is unit a's with the stream
    coordinates permuted by pi; units are matched by that exact signature, compared as the
    entries' value codes (equal exactly where the entries are; `coded`: W -> _value_codes(W))."""
    coded = _value_codes if coded is None else coded
    inv = np.empty_like(pi)
    inv[pi] = np.arange(len(pi))
    W1, b1, W2 = coded(mlp.W1), coded(mlp.b1), coded(mlp.W2)
    # unit a's row of W1, b1 and column of W2: as it is, and read through inv
    have = _row_keys(np.concatenate([W1, b1[:, None], W2.T], axis=1))
    want = _row_keys(np.concatenate([W1[:, inv], b1[:, None], W2[inv, :].T], axis=1))
    pool: dict = {}
    for a, key in enumerate(have):
        pool.setdefault(key, []).append(a)
    q = np.empty(len(want), dtype=np.int64)
    for a, key in enumerate(want):
        # unit b = q[a] needs W1[b, pi[r]] = W1[a, r], i.e. W1[b, :] = W1[a, inv] (same for W2)
        free = pool.get(key)
        if not free:
            return None
        q[a] = free.pop()
    return q


def _row_keys(C: np.ndarray) -> list:
    """One bytes key per row of an int64 matrix, equal exactly where the rows are."""
    C = np.ascontiguousarray(C, dtype=np.int64)
    if C.shape[1] == 0:
        return [b""] * C.shape[0]
    return C.view(np.dtype((np.void, 8 * C.shape[1]))).ravel().tolist()


def _value_codes(W: np.ndarray) -> np.ndarray:
    """int64 codes of W's entries, equal exactly where the entries are equal (==, as exact values:
    an int and an equal Fraction share a code).  Each distinct object is looked up once (entries
    often share objects), so a comparison of entries is a comparison of codes, in numpy."""
    flat = np.asarray(W, dtype=object).ravel().tolist()
    ids = list(map(id, flat))
    index: dict = {}
    code_of_id = {k: index.setdefault(v, len(index)) for k, v in dict(zip(ids, flat)).items()}
    return np.fromiter(map(code_of_id.__getitem__, ids), dtype=np.int64, count=len(ids)).reshape(np.shape(W))


def _invariant(W: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> bool:
    """W[rows[i], cols[j]] == W[i, j] for all i, j (W: exact entries, or their _value_codes)."""
    return bool((W[np.ix_(rows, cols)] == W).all())


class _Objects:
    """A matrix of exact entries with the ids of its entry objects (one pass over the entries)."""

    def __init__(self, W: np.ndarray):
        self.W = np.asarray(W, dtype=object)
        flat = self.W.ravel().tolist()
        self.ids = np.fromiter(map(id, flat), dtype=np.uint64, count=len(flat)).reshape(np.shape(W))

    def invariant(self, rows: np.ndarray, cols: np.ndarray) -> bool:
        """W[rows[i], cols[j]] == W[i, j] for all i, j: where the two entries are one object they
        are equal; the other pairs are compared as exact values (==)."""
        differ = self.ids[np.ix_(rows, cols)] != self.ids
        if not differ.any():
            return True
        i, j = np.nonzero(differ)
        moved = self.W[rows[i], cols[j]].tolist()
        return all(a == b for a, b in zip(moved, self.W[i, j].tolist()))


def check_equivariance(model: Model, groups: tuple[tuple[str, ...], ...]) -> EquivarianceReport:
    """Exact check of the claim's equations for every generator of every group.  Each matrix is
    read once per call (_Objects: entries that are one object are equal, others are compared
    exactly; the MLPs' hidden units are matched by value codes)."""
    class_index = {c: i for i, c in enumerate(model.classes)}
    seen: dict = {}
    if model.has_rotary or model.has_gated_mlp or model.has_parallel:  # W_QK alone: not a rotary head's scores
        return EquivarianceReport(False, groups, "rotary heads, gated MLPs and parallel layers: equivariance is not "
                                  "checked for them")
    def read(W, how):  # computed once per matrix: every generator compares the same matrices
        got = seen.get((id(W), how))
        if got is None:
            got = seen[(id(W), how)] = (W, _Objects(W) if how == "objects" else _value_codes(W))  # W kept: its id stays its own
        return got[1]

    def coded(W):
        return read(W, "codes")

    def invariant(W, rows, cols):
        return read(W, "objects").invariant(rows, cols)

    for group in groups:
        for sigma in generators(group):
            pi = row_permutation(model, sigma)
            if pi is None:
                return EquivarianceReport(False, groups, f"no residual-stream permutation follows {_show(sigma)}")
            kappa = np.arange(len(model.classes))
            for c, i in class_index.items():
                if c in sigma:
                    if sigma[c] not in class_index:
                        return EquivarianceReport(False, groups, f"class {c} maps outside the classes")
                    kappa[i] = class_index[sigma[c]]
            for li, layer in enumerate(model.layers):
                for hi, head in enumerate(layer):
                    if not invariant(head.W_QK, pi, pi):
                        return EquivarianceReport(False, groups, f"layer {li + 1} head {hi + 1} W_QK is not invariant under {_show(sigma)}")
                    if not invariant(head.W_V, pi, pi):
                        return EquivarianceReport(False, groups, f"layer {li + 1} head {hi + 1} W_V is not invariant under {_show(sigma)}")
                if layer.mlp is not None:
                    mlp = layer.mlp
                    q = hidden_permutation(mlp, pi, coded)
                    if q is None or not (_invariant(coded(mlp.W1), q, pi) and _invariant(coded(mlp.W2), pi, q)
                                         and bool((mlp.b1[q] == mlp.b1).all()) and bool((mlp.b2[pi] == mlp.b2).all())):
                        return EquivarianceReport(False, groups, f"layer {li + 1} MLP is not equivariant under {_show(sigma)}")
            if not invariant(model.W_O, kappa, pi):
                return EquivarianceReport(False, groups, f"W_O is not equivariant under {_show(sigma)}")
    n_gen = sum(len(generators(g)) for g in groups)
    return EquivarianceReport(True, groups, f"{n_gen} generator{'s' if n_gen != 1 else ''} of {len(groups)} symmetric "
                                                  f"group{'s' if len(groups) != 1 else ''} checked exactly")


def _show(sigma: dict[str, str]) -> str:
    items = list(sigma.items())
    if len(items) == 2 and items[0][1] == items[1][0]:
        return f"({items[0][0]} {items[0][1]})"
    return "(" + " ".join(k for k, _ in items[:4]) + (" ..." if len(items) > 4 else "") + ")"
