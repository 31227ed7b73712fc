"""Per task: how rows, positions and classes form families (model level and point level), which
points represent the dataset, and the count identity that shows they cover it.

ICQA (Theorem 3) is lumped in all three sizes: the questions Q (n_q), the answers A (n_a) and
the k position triples T are sets; the group Sym(Q) x Sym(A) x Sym(T) (a triple permutation
moves the three positions of a triple together) maps the labelled dataset onto itself and acts
on it with one orbit.  The other tasks are lumped in their vocabularies only, at a fixed
structural size: the unused tokens of each token group form one set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp

from depthcert.checkers.model import Model
from depthcert.proofs.all_sizes_families import PointFamily, PointView, View
from depthcert.proofs.all_sizes_lumped import Family, Space


def _space_builder():
    fams: list[Family] = []
    index: dict[str, int] = {}

    def fam(name: str, sort: str | None) -> int:
        if name not in index:
            index[name] = len(fams)
            fams.append(Family(name, sort))
        return index[name]

    return fams, fam


def model_view(task, model: Model, groups: dict[str, tuple[str, ...]], sort_sizes: dict[str, int],
               position: Callable[[int], tuple[str, str | None, int]] | None = None) -> View:
    """Families of a concrete model.  groups: set name -> its tokens (each a symmetric token
    group of the task); position(j) -> (family suffix, set or None, element) for position j
    (default: every position its own row).  Rows tagged with a group token
    (notes["row_tokens"]) form one family per block; other rows are single rows named
    block[i] by the model's layout."""
    position = position or (lambda j: (str(j), None, 0))
    group_of = {t: (g, i) for g, toks in groups.items() for i, t in enumerate(toks)}
    V, n = len(model.vocab), model.max_length
    fams, fam = _space_builder()
    row_of = []
    tags = (model.notes or {}).get("row_tokens", {})
    lay = model.layout
    for r in range(model.dim):
        if r < V:
            tok = model.vocab[r]
            if tok in group_of:
                g, i = group_of[tok]
                row_of.append((fam(f"tok:{g}", g), i))
            else:
                row_of.append((fam(f"tok:{tok}", None), 0))
        elif r < V + n:
            name, s, e = position(r - V)
            row_of.append((fam(f"pos{name}", s), e))
        elif r in tags and tags[r][1] in group_of:
            block, tok = tags[r]
            g, i = group_of[tok]
            row_of.append((fam(block, g), i))
        else:
            block = next(b for b in lay.names if lay.offset(b) <= r < lay.offset(b) + lay.size(b))
            row_of.append((fam(f"{block}[{r - lay.offset(block)}]", None), 0))
    cfams, cfam = _space_builder()
    col_of = []
    for j in range(task.length):
        name, s, e = position(j)
        col_of.append((cfam(f"col{name}", s), e))
    kfams, kfam = _space_builder()
    class_of = []
    for c in model.classes:
        if c in group_of:
            g, i = group_of[c]
            class_of.append((kfam(f"cls:{g}", g), i))
        else:
            class_of.append((kfam(f"cls:{c}", None), 0))
    return View(Space(tuple(fams)), tuple(row_of), Space(tuple(cfams)), tuple(col_of), Space(tuple(kfams)),
                tuple(class_of), dict(sort_sizes), tuple(model.classes))


def point_view(view: View, by_sort: dict, sorts: dict, parts: dict, label_class: str) -> PointView:
    """Split every model family indexed by a set into the point families its elements fall in.

    by_sort[S][element] = ('fixed', label) or ('sort', point set, point element); parts[S] = the
    specs a family of S always gets (so that a part empty at some size still has its family)."""

    def split(space: Space, of):
        fams: list[PointFamily] = []
        mapping = {}
        for f in space.families:
            specs = [("fixed", f.name)] if f.sort is None else list(parts[f.sort])
            for spec in specs:
                name = f.name if f.sort is None else f"{f.name}@{spec[1]}"
                fams.append(PointFamily(name, f.name, spec))
        for f_idx, e in of:
            f = space.families[f_idx]
            if f.sort is None:
                mapping[(f.name, e)] = (f.name, 0)
            else:
                s = by_sort[f.sort][e]
                mapping[(f.name, e)] = (f"{f.name}@{s[1]}", s[2] if s[0] == "sort" else 0)
        return tuple(fams), mapping

    rows, row_map = split(view.rows, view.row_of)
    cols, col_map = split(view.cols, view.col_of)
    classes, class_map = split(view.classes, view.class_of)
    f, e = view.col_of[-1]
    last = col_map[(view.cols.families[f].name, e)][0]
    i = view.class_names.index(label_class)
    f, e = view.class_of[i]
    label = class_map[(view.classes.families[f].name, e)][0]
    return PointView(rows, cols, classes, dict(sorts), last, label, row_map, col_map, class_map)


# ----------------------------------------------------------------------------- ICQA


ICQA_SIZES = {"Q": "n_q", "A": "n_a", "T": "k"}


def icqa_position(k: int):
    def position(j: int):
        if j < 3 * k:
            return (str(j % 3), "T", j // 3)
        return ("F" + str(j - 3 * k), None, 0)

    return position


def icqa_view(task, model: Model) -> View:
    return model_view(task, model, {"Q": task.questions, "A": task.answers},
                      {"Q": task.n_q, "A": task.n_a, "T": task.k}, icqa_position(task.k))


def icqa_point(task, view: View, index: int) -> PointView:
    """Point `index` with its query triple c fixed: the other triples form the set Tr (k - 1); a
    triple's question and answer are the same Tr-element as the triple; the unused questions
    and answers form Uq (n_q - k) and Ua (n_a - k)."""
    point = task.point(index)
    toks, k = point.tokens, task.k
    c = next(t for t in range(k) if toks[3 * t] == toks[3 * k])
    others = [t for t in range(k) if t != c]
    spec_T = {c: ("fixed", "c")}
    spec_T.update({t: ("sort", "Tr", i) for i, t in enumerate(others)})
    qspec, aspec = {}, {}
    for t in range(k):
        qspec[task.questions.index(toks[3 * t])] = spec_T[t]
        aspec[task.answers.index(toks[3 * t + 2])] = spec_T[t]
    for spec, size, u in ((qspec, task.n_q, "Uq"), (aspec, task.n_a, "Ua")):
        free = [i for i in range(size) if i not in spec]
        for r, i in enumerate(free):
            spec[i] = ("sort", u, r)
    parts = {"T": (("fixed", "c"), ("sort", "Tr")), "Q": (("fixed", "c"), ("sort", "Tr"), ("sort", "Uq")),
             "A": (("fixed", "c"), ("sort", "Tr"), ("sort", "Ua"))}
    return point_view(view, {"T": spec_T, "Q": qspec, "A": aspec}, {"Tr": "k - 1", "Uq": "n_q - k", "Ua": "n_a - k"},
                      parts, point.label)


def icqa_orbit_identity() -> tuple[str, bool]:
    """|G| / |Stab| = n_q! n_a! k! / ((n_q-k)! (n_a-k)! (k-1)!) equals the dataset size
    A(n_q,k) A(n_a,k) k (sympy, for symbolic k, n_q, n_a)."""
    k, nq, na = sp.symbols("k n_q n_a", integer=True, positive=True)
    orbit = sp.factorial(nq) * sp.factorial(na) * sp.factorial(k) / (
        sp.factorial(nq - k) * sp.factorial(na - k) * sp.factorial(k - 1))
    size = sp.FallingFactorial(nq, k) * sp.FallingFactorial(na, k) * k
    diff = sp.simplify(sp.combsimp(orbit - sp.combsimp(size.rewrite(sp.factorial))))
    text = "n_q! n_a! k! / ((n_q-k)! (n_a-k)! (k-1)!) = A(n_q,k) A(n_a,k) k"
    return text, diff == 0


def icqa_orbit_bruteforce(task) -> tuple[int, int]:
    """(points reached from point 0 by the generators of Sym(Q) x Sym(A) x Sym(T), dataset size)
    at one small size, by breadth-first search over the whole enumerated dataset."""
    import numpy as np

    from depthcert.checkers.symmetry import generators

    ids, _ = task.decode(np.arange(task.size, dtype=np.int64))
    labels = task.decode(np.arange(task.size, dtype=np.int64))[1]
    index = {(tuple(row), int(y)): i for i, (row, y) in enumerate(zip(ids.tolist(), labels.tolist()))}
    V = len(task.vocab)
    k = task.k
    moves = []
    for group in (task.questions, task.answers):
        for sigma in generators(group):
            tmap = list(range(V))
            for a, b in sigma.items():
                tmap[task.vocab.index(a)] = task.vocab.index(b)
            moves.append(("tok", tmap))
    for sigma in generators(tuple(range(k))):
        moves.append(("tri", sigma))
    seen = {0}
    todo = [0]
    n_q = task.n_q
    while todo:
        i = todo.pop()
        row, y = ids[i].tolist(), int(labels[i])
        for kind, mv in moves:
            if kind == "tok":
                new = [mv[t] for t in row]
                ny = mv[y + n_q + 1] - n_q - 1
            else:
                new = list(row)
                for t in range(k):
                    new[3 * mv.get(t, t): 3 * mv.get(t, t) + 3] = row[3 * t: 3 * t + 3]
                ny = y
            j = index.get((tuple(new), ny))
            if j is None:
                raise RuntimeError("a generator maps a point outside the dataset")
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen), task.size


# ----------------------------------------------------------------------------- vocabulary sets


def vocab_point(view: View, groups: dict[str, tuple[str, ...]], sort_polys: dict[str, str], tokens,
                label: str) -> PointView:
    """A point with its used tokens fixed; the unused tokens of group g form the set U<g>
    (size: the group's size minus the tokens used)."""
    used = {g: [] for g in groups}
    for t in list(tokens) + [label]:
        for g, toks in groups.items():
            if t in toks and t not in used[g]:
                used[g].append(t)
    by_sort, sorts, parts = {}, {}, {}
    for g, toks in groups.items():
        spec = {toks.index(t): ("fixed", t) for t in used[g]}
        free = [i for i in range(len(toks)) if i not in spec]
        for r, i in enumerate(free):
            spec[i] = ("sort", "U" + g, r)
        by_sort[g] = spec
        sorts["U" + g] = f"{sort_polys[g]} - {len(used[g])}"
        parts[g] = tuple(("fixed", t) for t in used[g]) + (("sort", "U" + g),)
    return point_view(view, by_sort, sorts, parts, label)


def canonical(tokens, groups: dict[str, tuple[str, ...]]) -> tuple:
    """Tokens with each group's tokens renamed in first-occurrence order (an orbit invariant)."""
    seen = {g: {} for g in groups}
    out = []
    for t in tokens:
        for g, toks in groups.items():
            if t in toks:
                out.append((g, seen[g].setdefault(t, len(seen[g]))))
                break
        else:
            out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class Coverage:
    """The orbits of the representatives add up to the dataset: the sum of the orbit sizes
    (products of falling factorials) equals the dataset size, as polynomials (sympy)."""

    text: str
    ok: bool


def vocab_coverage(orbit_terms: list, size_expr, names: str) -> Coverage:
    total = sp.expand(sp.expand_func(sp.Add(*orbit_terms)))
    want = sp.expand(sp.expand_func(size_expr))
    ok = sp.expand(total - want) == 0
    return Coverage(f"the {len(orbit_terms)} orbits add up to {names} = {sp.factor(want)}", ok)


def ictm_size_expr(template_blocks: list[int], k: int, m, na):
    """A(n_a, k) * sum over ordered k-tuples of distinct templates of prod N(t_i) * sum N(t_i),
    N(t) = A(m, b(t)) (the task's size formula, as a polynomial in m and n_a)."""
    from itertools import permutations

    total = 0
    for tup in permutations(range(len(template_blocks)), k):
        Ns = [sp.ff(m, template_blocks[t]) for t in tup]
        total += sp.Mul(*Ns) * sp.Add(*Ns)
    return sp.ff(na, k) * total
