"""Independent checker for clausal depth certificates (version 3) of the exact class B(L, H).

Standard library only; imports nothing (proofs/check_depth.py parses the certificate, re-derives
the points' labels and calls `check_proof`; the exceptions and exact numbers of both are defined
here).  docs/depth.md, section 2, has the argument.

A version-2 certificate is a case split: its size is at least the number of feasible selection
combinations of a point, exponential in the length.  A version-3 certificate is a propositional
refutation instead, in three parts:

* atoms: Boolean variables with a meaning for every model of B(L, H) on the listed points,
    ["g", l, h, p, i, a, b]  head (l, h) at query position i of point p scores key a >= key b;
    ["s", l, h, p, i, j]     key j is in that head's maximal set at query i of point p.
  A layer-1 score depends only on the (token, position) pairs of the query and the two keys, so
  layer-1 "g" atoms are shared: one atom stands for every (p, i, a, b) with the same three pairs,
  and the certificate lists one representative of each.
* the base clauses, which the checker derives itself from the points (never read from the file):
  for each point p, layer l, head h and query position i (every position below the last layer,
  the last position at layer L), with K the keys visible from i:
    s_j <-> AND_(j' in K, j' != j) g(j, j')        (j is maximal iff it beats or ties every key)
    OR_j s_j                                         (a maximal set is not empty)
    g(a, b) OR g(b, a)                               (scores are totally preordered)
    NOT g(a, b) OR NOT g(b, c) OR g(a, c)            (transitively)
  Each holds in every model, for every choice of weights.
* lemmas: clauses C, each with an exact Farkas vector showing that no weights satisfy the facts
  "NOT literal" for the literals of C.  A head lemma: the facts are score comparisons of head
  (l, h), each linear in that head's matrix M: g(a, b) gives (v_a - v_b)^T M v_q >= 0, NOT g(a, b)
  gives (v_b - v_a)^T M v_q >= 1 (by scaling M, > 0 and >= 1 are equally feasible); the vectors
  are the layer-(l-1) vectors of docs/depth.md, and the clause must determine them: for every
  position whose vector is used, its maximal sets at every lower layer are given by "s" literals
  of C.  A read-out lemma: facts W_(label p) . z_p - W_c . z_p >= 1 for listed (point, class),
  z_p the last position's layer-L vector, determined by C's "s" literals the same way.  The check:
  y >= 0, sum y_k row_k = 0 in every coordinate, sum y_k rhs_k > 0 -- then the facts would give
  0 = sum y_k row_k . M >= sum y_k rhs_k > 0.
* steps: clauses, each implied by the base clauses, the lemmas and the earlier steps by unit
  propagation (RUP, the DRUP format's check); the last step is the empty clause.

So every model that classifies all listed points satisfies the base clauses and every lemma,
hence every step, hence the empty clause: no model of B(L, H) classifies all listed points.
The size of a version-3 certificate is its atoms + lemmas + steps; nothing in it is a product
over a point's positions.
"""
from fractions import Fraction
from itertools import combinations, permutations


class Malformed(ValueError):
    """The certificate is not well-formed; the message names the field."""


class Invalid(ValueError):
    """The certificate is well-formed but does not prove its claim; the message says where."""


def frac(v, where):
    """An exact number of a certificate: an int or a 'p/q' string (never a float)."""
    if isinstance(v, bool):
        raise Malformed(where + ": expected an int or a 'p/q' string")
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, str):
        try:
            num, _, den = v.partition("/")
            out = Fraction(int(num), int(den)) if den else Fraction(int(num))
        except (ValueError, ZeroDivisionError):
            raise Malformed(where + ": not an exact number: " + repr(v)) from None
        return out
    raise Malformed(where + ": expected an int or a 'p/q' string")

MAX_BASE_CLAUSES = 5_000_000  # a certificate whose base clauses would exceed this is refused


def _lit_int(x, n_atoms, where):
    if isinstance(x, bool) or not isinstance(x, int) or x == 0 or abs(x) > n_atoms:
        raise Malformed(where + ": expected a literal: a non-zero int of absolute value at most " + str(n_atoms))
    return x


class Clausal:
    """The atoms, base clauses and vectors of one certificate's points."""

    def __init__(self, points, layers, heads, causal):
        self.points, self.layers, self.heads, self.causal = points, layers, heads, causal
        self.labels = {lab for _, lab in points}

    def visible(self, p, i):
        n = len(self.points[p][0])
        return list(range(i + 1)) if self.causal else list(range(n))

    def queries(self, p, l):
        n = len(self.points[p][0])
        return range(n) if l < self.layers else [n - 1]

    def type_key(self, p, i, a, b):
        toks = self.points[p][0]
        return ((toks[i], i), (toks[a], a), (toks[b], b))

    def parse_atoms(self, raw):
        """id -> atom tuple; the index of g atoms by their meaning."""
        if not isinstance(raw, list) or not raw:
            raise Malformed("proof.atoms: expected a non-empty list")
        self.atoms = [None]
        self.g_index, self.s_index = {}, {}
        for k, a in enumerate(raw):
            w = "proof.atoms[" + str(k) + "]"
            if not isinstance(a, list) or not a or a[0] not in ("g", "s") or len(a) != (7 if a[0] == "g" else 6):
                raise Malformed(w + ": expected [\"g\", l, h, p, i, a, b] or [\"s\", l, h, p, i, j]")
            if any(isinstance(x, bool) or not isinstance(x, int) for x in a[1:]):
                raise Malformed(w + ": expected ints after the kind")
            l, h, p, i = a[1:5]
            if not 1 <= l <= self.layers or not 0 <= h < self.heads or not 0 <= p < len(self.points):
                raise Malformed(w + ": layer, head or point out of range")
            if i not in self.queries(p, l):
                raise Malformed(w + ": position " + str(i) + " is not a query of layer " + str(l))
            keys = set(self.visible(p, i))
            if any(j not in keys for j in a[5:]) or (a[0] == "g" and a[5] == a[6]):
                raise Malformed(w + ": keys must be distinct positions visible from the query")
            if a[0] == "g":
                name = ("g", l, h) + (self.type_key(p, i, a[5], a[6]) if l == 1 else (p, i, a[5], a[6]))
                index = self.g_index
            else:
                name = ("s", l, h, p, i, a[5])
                index = self.s_index
            if name in index:
                raise Malformed(w + ": the same atom twice (layer-1 atoms are keyed by token and position)")
            index[name] = k + 1
            self.atoms.append(tuple(a))
        return len(raw)

    def g(self, l, h, p, i, a, b):
        name = ("g", l, h) + (self.type_key(p, i, a, b) if l == 1 else (p, i, a, b))
        got = self.g_index.get(name)
        if got is None:
            raise Invalid("proof.atoms: no atom for head (" + str(l) + ", " + str(h) + ") at point " + str(p)
                          + ", query " + str(i) + ", keys " + str(a) + " and " + str(b))
        return got

    def s(self, l, h, p, i, j):
        got = self.s_index.get(("s", l, h, p, i, j))
        if got is None:
            raise Invalid("proof.atoms: no selection atom (" + ", ".join(map(str, (l, h, p, i, j))) + ")")
        return got

    def base_clauses(self):
        """The base clauses, derived from the points (a set of sorted tuples)."""
        out = set()
        for p in range(len(self.points)):
            for l in range(1, self.layers + 1):
                for h in range(self.heads):
                    for i in self.queries(p, l):
                        K = self.visible(p, i)
                        size = len(out) + len(K) ** 3 + len(K) ** 2
                        if size > MAX_BASE_CLAUSES:
                            raise Invalid("the base clauses exceed " + str(MAX_BASE_CLAUSES))
                        g = {(a, b): self.g(l, h, p, i, a, b) for a in K for b in K if a != b}
                        for j in K:
                            sj = self.s(l, h, p, i, j)
                            others = [g[j, b] for b in K if b != j]
                            for x in others:
                                out.add(tuple(sorted((-sj, x))))
                            out.add(tuple(sorted([sj] + [-x for x in others])))
                        out.add(tuple(sorted(self.s(l, h, p, i, j) for j in K)))
                        for a, b in combinations(K, 2):
                            out.add(tuple(sorted((g[a, b], g[b, a]))))
                        for a, b, c in permutations(K, 3):
                            out.add(tuple(sorted((-g[a, b], -g[b, c], g[a, c]))))
        used = {abs(x) for cl in out for x in cl}
        unused = [k for k in range(1, len(self.atoms)) if k not in used]
        if unused:
            raise Malformed("proof.atoms[" + str(unused[0] - 1) + "]: an atom no base clause uses")
        return out

    # ---------------------------------------------------------------- vectors of a lemma's branch

    def branch_sets(self, facts):
        """(l, h, p, i) -> the maximal set, from the branch's "s" facts (only complete ones)."""
        by = {}
        for lit in facts:
            a = self.atoms[abs(lit)]
            if a[0] == "s":
                by.setdefault(a[1:5], {})[a[5]] = lit > 0
        sets = {}
        for key, got in by.items():
            l, h, p, i = key
            K = self.visible(p, i)
            if set(got) == set(K):
                sets[key] = [j for j in K if got[j]]
        return sets

    def vector(self, sets, l, p, i, where, memo):
        """Position i of point p after layer l: {coordinate: Fraction} (docs/depth.md)."""
        got = memo.get((l, p, i))
        if got is not None:
            return got
        if l == 0:
            tok = self.points[p][0][i]
            v = {("t", tok): Fraction(1), ("p", i): Fraction(1)}
        else:
            v = dict(self.vector(sets, l - 1, p, i, where, memo))
            for h in range(self.heads):
                S = sets.get((l, h, p, i))
                if not S:
                    raise Invalid(where + ": the maximal set of head (" + str(l) + ", " + str(h) + ") at point "
                                  + str(p) + ", position " + str(i) + " is not determined by the clause")
                for j in S:
                    for c, x in self.vector(sets, l - 1, p, j, where, memo).items():
                        key = (l, h) + c
                        v[key] = v.get(key, 0) + x / len(S)
        memo[(l, p, i)] = v
        return v


def _coeff(entry, where):
    v = frac(entry, where)
    if v < 0:
        raise Invalid(where + ": negative coefficient")
    return v


def check_lemma(C, lemma, n_atoms, where):
    if not isinstance(lemma, dict) or set(lemma) not in ({"clause", "head"}, {"clause", "readout"}):
        raise Malformed(where + ": expected {clause, head} or {clause, readout}")
    clause = lemma["clause"]
    if not isinstance(clause, list) or not clause:
        raise Malformed(where + ".clause: expected a non-empty list of literals")
    clause = [_lit_int(x, n_atoms, where + ".clause") for x in clause]
    facts = [-x for x in clause]  # what holds on the branch the lemma closes
    if len(set(abs(x) for x in facts)) != len(facts):
        raise Malformed(where + ".clause: an atom twice")
    sets = C.branch_sets(facts)
    memo = {}
    total, positive = {}, Fraction(0)
    if "head" in lemma:
        spec = lemma["head"]
        if not isinstance(spec, dict) or sorted(spec) != ["head", "layer", "y"]:
            raise Malformed(where + ".head: expected {layer, head, y}")
        l, h = spec["layer"], spec["head"]
        if isinstance(l, bool) or not isinstance(l, int) or not 1 <= l <= C.layers or \
                isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < C.heads:
            raise Malformed(where + ".head: layer or head out of range")
        if not isinstance(spec["y"], list) or not spec["y"]:
            raise Malformed(where + ".head.y: expected a non-empty list of [literal index, coefficient]")
        seen = set()
        for k, entry in enumerate(spec["y"]):
            w = where + ".head.y[" + str(k) + "]"
            if not isinstance(entry, list) or len(entry) != 2 or isinstance(entry[0], bool) or \
                    not isinstance(entry[0], int) or not 0 <= entry[0] < len(facts) or entry[0] in seen:
                raise Malformed(w + ": expected [a distinct index into the clause, coefficient]")
            seen.add(entry[0])
            y = _coeff(entry[1], w)
            fact = facts[entry[0]]
            atom = C.atoms[abs(fact)]
            if atom[0] != "g" or atom[1] != l or atom[2] != h:
                raise Invalid(w + ": the literal is not a score comparison of head (" + str(l) + ", " + str(h) + ")")
            _, _, _, p, i, a, b = atom
            if fact < 0:
                a, b = b, a  # NOT g(a, b): b strictly above a, a row >= 1
            vq = C.vector(sets, l - 1, p, i, w, memo)
            va = C.vector(sets, l - 1, p, a, w, memo)
            vb = C.vector(sets, l - 1, p, b, w, memo)
            for c in set(va) | set(vb):
                d = va.get(c, 0) - vb.get(c, 0)
                if d:
                    for cq, xq in vq.items():
                        key = (c, cq)
                        total[key] = total.get(key, 0) + y * d * xq
            if fact < 0:
                positive += y
    else:
        spec = lemma["readout"]
        if not isinstance(spec, list) or not spec:
            raise Malformed(where + ".readout: expected a non-empty list of [point, class, coefficient]")
        for k, entry in enumerate(spec):
            w = where + ".readout[" + str(k) + "]"
            if not isinstance(entry, list) or len(entry) != 3 or isinstance(entry[0], bool) or \
                    not isinstance(entry[0], int) or not 0 <= entry[0] < len(C.points) or not isinstance(entry[1], str):
                raise Malformed(w + ": expected [point, class, coefficient]")
            p, c = entry[0], entry[1]
            y = _coeff(entry[2], w)
            lab = C.points[p][1]
            if c == lab or c not in C.labels:
                raise Invalid(w + ": class " + repr(c) + " must be another listed point's label")
            z = C.vector(sets, C.layers, p, len(C.points[p][0]) - 1, w, memo)
            for coord, x in z.items():
                for cls, sign in ((lab, 1), (c, -1)):
                    key = (cls, coord)
                    total[key] = total.get(key, 0) + sign * y * x
            positive += y
    if positive <= 0:
        raise Invalid(where + ": the strict rows' coefficients sum to 0")
    for key, val in total.items():
        if val != 0:
            raise Invalid(where + ": coordinate " + repr(key) + " sums to " + str(val) + ", not 0")
    return clause


class _Propagator:
    """Unit propagation over a growing clause set (two watched literals)."""

    def __init__(self, n_atoms):
        self.val = [0] * (n_atoms + 1)
        self.watch = {}
        self.clauses = []
        self.trail = []
        self.inconsistent = False

    def value(self, lit):
        v = self.val[abs(lit)]
        return v if lit > 0 else -v

    def _assign(self, lit):
        self.val[abs(lit)] = 1 if lit > 0 else -1
        self.trail.append(lit)

    def _propagate(self, start):
        """Propagate the trail from index start; True on a conflict."""
        k = start
        while k < len(self.trail):
            false_lit = -self.trail[k]
            k += 1
            ws = self.watch.get(false_lit, [])
            keep = []
            conflict = False
            for idx, ci in enumerate(ws):
                if conflict:
                    keep.append(ci)
                    continue
                cl = self.clauses[ci]
                if cl[0] == false_lit:
                    cl[0], cl[1] = cl[1], cl[0]
                if self.value(cl[0]) == 1:
                    keep.append(ci)
                    continue
                for m in range(2, len(cl)):
                    if self.value(cl[m]) != -1:
                        cl[1], cl[m] = cl[m], cl[1]
                        self.watch.setdefault(cl[1], []).append(ci)
                        break
                else:
                    keep.append(ci)
                    if self.value(cl[0]) == -1:
                        conflict = True
                    else:
                        self._assign(cl[0])
            self.watch[false_lit] = keep
            if conflict:
                return True
        return False

    def add(self, clause):
        if self.inconsistent:
            return
        cl = sorted(set(clause), key=lambda x: (self.value(x) == -1, abs(x)))
        if any(-x in cl for x in cl):
            return
        if not cl or self.value(cl[0]) == -1:
            self.inconsistent = True
            return
        if len(cl) == 1 or self.value(cl[1]) == -1:
            if self.value(cl[0]) == 0:
                start = len(self.trail)
                self._assign(cl[0])
                if self._propagate(start):
                    self.inconsistent = True
            if len(cl) == 1:
                return
        ci = len(self.clauses)
        self.clauses.append(cl)
        self.watch.setdefault(cl[0], []).append(ci)
        self.watch.setdefault(cl[1], []).append(ci)

    def implied(self, clause):
        """RUP: assigning every literal of the clause false propagates to a conflict."""
        if self.inconsistent:
            return True
        start = len(self.trail)
        ok = False
        for lit in clause:
            v = self.value(lit)
            if v == 1:
                ok = True
                break
            if v == 0:
                self._assign(-lit)
        if not ok:
            ok = self._propagate(start)
        for lit in self.trail[start:]:
            self.val[abs(lit)] = 0
        del self.trail[start:]
        return ok


def check_proof(points, layers, heads, causal, proof):
    """Check a version-3 proof; (atoms, lemmas, steps) or raise Malformed / Invalid."""
    if not isinstance(proof, dict) or sorted(proof) != ["atoms", "lemmas", "steps"]:
        raise Malformed("proof: expected {atoms, lemmas, steps}")
    C = Clausal(points, layers, heads, causal)
    n_atoms = C.parse_atoms(proof["atoms"])
    base = C.base_clauses()
    prop = _Propagator(n_atoms)
    for cl in sorted(base):
        prop.add(list(cl))
    lemmas, steps = proof["lemmas"], proof["steps"]
    if not isinstance(lemmas, list) or not isinstance(steps, list) or not steps:
        raise Malformed("proof: lemmas must be a list and steps a non-empty list")
    for k, lemma in enumerate(lemmas):
        prop.add(check_lemma(C, lemma, n_atoms, "proof.lemmas[" + str(k) + "]"))
    for k, step in enumerate(steps):
        w = "proof.steps[" + str(k) + "]"
        if not isinstance(step, list):
            raise Malformed(w + ": expected a list of literals")
        cl = [_lit_int(x, n_atoms, w) for x in step]
        if not prop.implied(cl):
            raise Invalid(w + ": not implied by unit propagation")
        prop.add(cl)
    if steps[-1] != []:
        raise Invalid("proof.steps: the last step is not the empty clause")
    return n_atoms, len(lemmas), len(steps)
