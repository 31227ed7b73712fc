"""Plain reference definitions of the paper's tasks, for the property tests.

Written from the paper (arXiv 2404.01601 sections 4.1-4.4 and 7, Table 1, Definition 1) and the
dataset descriptions of docs/ and the enumerators' docstrings, NOT from the enumerators' code:
Python tuples and itertools, no numpy.  For each task:

  points(...)   the whole labelled dataset by brute force over the definition: a dict
                tokens -> label (small sizes only)
  label(...)    the label of a sequence, read off the sequence by the definition
  index(...)    the inverse of the enumerator's index order (the enumerators have none), from the
                index order their docstrings state
  size(...)     the size formula

Definitions (token names as in docs/semantics.md):

  sc        all M^L sequences over t0..t{M-1} (or a sample), then <cls>; pairwise distinct labels.
  icqa      q_0 = a_0 ... q_{k-1} = a_{k-1} q_c =  with k distinct questions (of n_q), k distinct
            answers (of n_a), c in [k]; label a_c.  Index ((qrank * A(n_a,k) + arank) * k + c),
            ranks lexicographic over k-permutations.
  tm        all m^l sequences over t0..t{m-1}, then <cls>; label = the template (first-occurrence
            pattern, "ABA"); index = the base-m number of the sequence.
  ictm      X_0 = a_0 ... X_{k-1} = a_{k-1} X_c =: k distinct templates t_i (ordered), X_i any
            sequence of t_i, k distinct answers, c in [k], the query X_c any sequence of t_c;
            label a_c (the answer of the context question with the query's template).
  multihop  x_0 > f(x_0) ... x_{k-1} > f(x_{k-1}) s >: k distinct sources (of N entities), f any
            function on the sources, s = x_c; label f^h(s).
  composition, parity, mod-count, word-problem, reachability: see their sections below
            (docs/composition.md, docs/logdepth.md).
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from math import perm

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def perm_rank(seq, n: int) -> int:
    """Lexicographic rank of the k-permutation `seq` (distinct ints in range(n))."""
    k = len(seq)
    rank, used = 0, set()
    for j, x in enumerate(seq):
        smaller = sum(1 for v in range(x) if v not in used)
        rank += smaller * perm(n - 1 - j, k - 1 - j)
        used.add(x)
    return rank


def num(token: str) -> int:
    """t3 -> 3, q0 -> 0, a12 -> 12."""
    return int(token[1:])


# ---- sequence classification (section 4.1)


def sc_tokens(index_value: int, L: int, M: int) -> tuple:
    digits = []
    for _ in range(L):
        digits.append(index_value % M)
        index_value //= M
    return tuple(f"t{d}" for d in reversed(digits)) + ("<cls>",)


def base_value(digits, base: int) -> int:
    """The base-`base` number with these digits, the first most significant."""
    v = 0
    for d in digits:
        v = v * base + d
    return v


def sc_value(tokens, M: int) -> int:
    """The base-M number of an SC sequence (first token most significant), CLS dropped."""
    assert tokens[-1] == "<cls>", tokens
    return base_value([num(t) for t in tokens[:-1]], M)


# ---- in-context QA (section 4.2)


def icqa_points(k: int, nq: int, na: int) -> dict:
    out = {}
    for qs in itertools.permutations(range(nq), k):
        for ans in itertools.permutations(range(na), k):
            for c in range(k):
                toks = []
                for q, a in zip(qs, ans):
                    toks += [f"q{q}", "=", f"a{a}"]
                out[tuple(toks + [f"q{qs[c]}", "="])] = f"a{ans[c]}"
    return out


def icqa_label(tokens) -> str:
    """The answer that follows the query question in the context."""
    k = (len(tokens) - 2) // 3
    query = tokens[-2]
    hits = [tokens[3 * i + 2] for i in range(k) if tokens[3 * i] == query]
    assert len(hits) == 1, tokens
    return hits[0]


def icqa_index(tokens, k: int, nq: int, na: int) -> int:
    qs = [num(tokens[3 * i]) for i in range(k)]
    ans = [num(tokens[3 * i + 2]) for i in range(k)]
    c = qs.index(num(tokens[-2]))
    return (perm_rank(qs, nq) * perm(na, k) + perm_rank(ans, na)) * k + c


def icqa_size(k: int, nq: int, na: int) -> int:
    return perm(nq, k) * perm(na, k) * k


# ---- templates (Definition 1, section 4.3)


def template_of(seq) -> tuple:
    """Canonical first-occurrence pattern: (x, y, x) -> (0, 1, 0)."""
    first: dict = {}
    return tuple(first.setdefault(t, len(first)) for t in seq)


def template_name(pattern) -> str:
    return "".join(LETTERS[v] for v in pattern)


@lru_cache(maxsize=None)
def templates(l: int, m: int) -> tuple:
    """The templates of length l that some sequence over m tokens follows, in lexicographic order."""
    return tuple(sorted({template_of(s) for s in itertools.product(range(m), repeat=l)}))


def n_wildcards(pattern) -> int:
    return max(pattern) + 1


def tm_points(l: int, m: int) -> dict:
    return {tuple(f"t{v}" for v in s) + ("<cls>",): template_name(template_of(s))
            for s in itertools.product(range(m), repeat=l)}


def tm_label(tokens) -> str:
    return template_name(template_of(tokens[:-1]))


def tm_index(tokens, l: int, m: int) -> int:
    return base_value([num(t) for t in tokens[:-1]], m)


# ---- in-context template matching (section 4.4)


def _sequences_of(pattern, m: int):
    """Every sequence (token ids) following the template: injective substitutions."""
    b = n_wildcards(pattern)
    for s in itertools.permutations(range(m), b):
        yield tuple(s[w] for w in pattern)


def ictm_points(k: int, l: int, m: int, na: int) -> dict:
    out = {}
    T = templates(l, m)
    for tup in itertools.permutations(T, k):
        for ans in itertools.permutations(range(na), k):
            for ctx in itertools.product(*[list(_sequences_of(t, m)) for t in tup]):
                for c in range(k):
                    for query in _sequences_of(tup[c], m):
                        toks = []
                        for X, a in zip(ctx, ans):
                            toks += [f"x{v}" for v in X] + ["=", f"a{a}"]
                        toks += [f"x{v}" for v in query] + ["="]
                        out[tuple(toks)] = f"a{ans[c]}"
    return out


def ictm_split(tokens, k: int, l: int):
    """(context questions, answers, query) of an ICTM sequence."""
    step = l + 2
    ctx = [tuple(tokens[i * step: i * step + l]) for i in range(k)]
    ans = [tokens[i * step + l + 1] for i in range(k)]
    query = tuple(tokens[k * step: k * step + l])
    return ctx, ans, query


def ictm_label(tokens, k: int, l: int) -> str:
    ctx, ans, query = ictm_split(tokens, k, l)
    hits = [a for X, a in zip(ctx, ans) if template_of(X) == template_of(query)]
    assert len(hits) == 1, tokens
    return hits[0]


@lru_cache(maxsize=None)
def _ictm_tuples(k: int, l: int, m: int):
    """Ordered k-tuples of distinct template ids (lexicographic) -> cumulative point counts
    (without the answers factor) before each tuple."""
    T = templates(l, m)
    N = [perm(m, n_wildcards(t)) for t in T]
    cum, total = {}, 0
    for tup in itertools.permutations(range(len(T)), k):
        cum[tup] = total
        prod = 1
        for t in tup:
            prod *= N[t]
        total += prod * sum(N[t] for t in tup)
    return T, N, cum, total


def _substitution_rank(X, m: int) -> int:
    """Rank of the substitution that produced X: the tokens of its wildcards in order,
    as a lexicographic k-permutation of the m tokens."""
    first = []
    for v in X:
        if v not in first:
            first.append(v)
    return perm_rank(first, m)


def ictm_index(tokens, k: int, l: int, m: int, na: int) -> int:
    """Index order (enumerator docstring): answers fastest, then the context questions (X_0
    fastest, each by its substitution rank), then (c, query), then the template tuple."""
    T, N, cum, _ = _ictm_tuples(k, l, m)
    tid = {t: i for i, t in enumerate(T)}
    ctx, ans, query = ictm_split(tokens, k, l)
    ctx = [tuple(num(t) for t in X) for X in ctx]
    query = tuple(num(t) for t in query)
    tup = tuple(tid[template_of(X)] for X in ctx)
    c = [template_of(X) for X in ctx].index(template_of(query))
    ctx_index, radix = 0, 1
    for X, t in zip(ctx, tup):
        ctx_index += _substitution_rank(X, m) * radix
        radix *= N[t]
    qpart = sum(N[t] for t in tup[:c]) + _substitution_rank(query, m)
    off = qpart * radix + ctx_index
    arank = perm_rank([num(a) for a in ans], na)
    return (cum[tup] + off) * perm(na, k) + arank


def ictm_size(k: int, l: int, m: int, na: int) -> int:
    return _ictm_tuples(k, l, m)[3] * perm(na, k)


# ---- multi-hop (section 7)


def entity(i: int, N: int) -> str:
    return chr(ord("a") + i) if N <= 26 else f"e{i}"


def multihop_points(hops: int, k: int, N: int) -> dict:
    out = {}
    for src in itertools.permutations(range(N), k):
        for tgt in itertools.product(range(k), repeat=k):
            for c in range(k):
                toks = []
                for i in range(k):
                    toks += [entity(src[i], N), ">", entity(src[tgt[i]], N)]
                cur = c
                for _ in range(hops):
                    cur = tgt[cur]
                out[tuple(toks + [entity(src[c], N), ">"])] = entity(src[cur], N)
    return out


def multihop_label(tokens, hops: int) -> str:
    """Follow the pairs `hops` times from the query entity."""
    k = (len(tokens) - 2) // 3
    f = {}
    for i in range(k):
        assert tokens[3 * i] not in f, tokens
        f[tokens[3 * i]] = tokens[3 * i + 2]
    cur = tokens[-2]
    for _ in range(hops):
        cur = f[cur]
    return cur


def multihop_index(tokens, k: int, N: int) -> int:
    names = [entity(i, N) for i in range(N)]
    src = [names.index(tokens[3 * i]) for i in range(k)]
    tgt = [src.index(names.index(tokens[3 * i + 2])) for i in range(k)]
    c = src.index(names.index(tokens[-2]))
    return (perm_rank(src, N) * k**k + base_value(tgt, k)) * k + c


def multihop_size(k: int, N: int) -> int:
    return perm(N, k) * k**k * k


# ---- sequential function composition (Chen, Peng & Wu, arXiv 2412.02975; docs/composition.md)
#
# L tables of functions [N] -> [N], then a query x: f_1(0) .. f_1(N-1) ... f_L(0) .. f_L(N-1) x;
# label f_L(...f_1(x)); every tuple of functions and every query once, N^(L N + 1) points, the
# index being the base-N number of the sequence (first token most significant).


def composition_points(L: int, N: int) -> dict:
    out = {}
    for seq in itertools.product(range(N), repeat=L * N + 1):
        out[tuple(str(v) for v in seq)] = composition_label(tuple(str(v) for v in seq), L, N)
    return out


def composition_label(tokens, L: int, N: int) -> str:
    tables = [[int(t) for t in tokens[i * N:(i + 1) * N]] for i in range(L)]
    cur = int(tokens[-1])
    for f in tables:
        cur = f[cur]
    return str(cur)


def composition_index(tokens, N: int) -> int:
    return base_value([int(t) for t in tokens], N)


# ---- Max-of-K (Gross et al.): all V^K sequences of K tokens "0".."V-1"; label: the largest
# token (as a number).  Index: the base-V numeral, the first token most significant.


def max_of_k_points(V: int, K: int) -> dict:
    out = {}
    for seq in itertools.product(range(V), repeat=K):
        toks = tuple(str(v) for v in seq)
        out[toks] = max_of_k_label(toks)
    return out


def max_of_k_label(tokens) -> str:
    return str(max(int(t) for t in tokens))


def max_of_k_index(tokens, V: int) -> int:
    return base_value([int(t) for t in tokens], V)


# ---- modular addition (Nanda et al.): all p^2 inputs "a b =" over "0".."p-1"; label (a + b) mod p.
# Index: a * p + b.


def modular_addition_points(p: int) -> dict:
    return {(str(a), str(b), "="): str((a + b) % p) for a in range(p) for b in range(p)}


def modular_addition_label(tokens, p: int) -> str:
    return str((int(tokens[0]) + int(tokens[1])) % p)


def modular_addition_index(tokens, p: int) -> int:
    return int(tokens[0]) * p + int(tokens[1])


# ---- induction (Olsson et al.): every sequence of n tokens over "0".."V-1" whose last token t
# occurs exactly once among the first n-2 positions (at j) and not at n-2; label: the token at
# j + 1.  Index: (t (n-2) + j) (V-1)^(n-2) + the base-(V-1) numeral of the other positions 0..n-2
# (in order, j left out), each token written as its rank among the tokens other than t.


def induction_points(V: int, n: int) -> dict:
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        toks = tuple(str(v) for v in seq)
        if [int(x) for x in toks[: n - 2]].count(seq[-1]) == 1 and seq[n - 2] != seq[-1]:
            out[toks] = induction_label(toks)
    return out


def induction_label(tokens) -> str:
    j = list(tokens[:-2]).index(tokens[-1])
    return tokens[j + 1]


def induction_index(tokens, V: int, n: int) -> int:
    t = int(tokens[-1])
    j = list(tokens[:-2]).index(tokens[-1])
    rest = [int(x) - (int(x) > t) for k, x in enumerate(tokens[: n - 1]) if k != j]
    return (t * (n - 2) + j) * (V - 1) ** (n - 2) + base_value(rest, V - 1)


# ---- the log-depth tasks (docs/logdepth.md): parity, mod-count, word problems, reachability
#
# parity / mod-count: all 2^n strings over "0", "1"; label: the number of 1s mod 2 / mod p.
# word-problem: all |T|^n words over a group's generating set T (tokens in cycle notation, e.g.
# "(01)", "(012)"; residues "0".."k-1" for the cyclic group c<k>); label: the product, applying
# the first token first, in cycle notation ("e" for the identity).  Index: the base-|T| numeral.
# reachability: the V x V adjacency bits row-major, then source and target vertices; label "yes"
# iff the target is reachable by a path of length >= 0.  Index (graph * V + s) * V + t.


def count_points(n: int, p: int) -> dict:
    return {s: str(s.count("1") % p) for s in itertools.product("01", repeat=n)}


def parse_cycles(text: str, degree: int) -> tuple:
    """"(01)(23)" or "(0,1,10)" -> the image tuple of the permutation; "e" -> identity."""
    img = list(range(degree))
    if text == "e":
        return tuple(img)
    for body in text[1:-1].split(")("):
        pts = [int(x) for x in (body.split(",") if "," in body else body)]
        for a, b in zip(pts, pts[1:] + pts[:1]):
            img[a] = b
    return tuple(img)


def cycle_name(img) -> str:
    """Canonical cycle notation: each cycle from its smallest point, cycles by smallest point,
    fixed points left out, "," between points when some point is >= 10, "e" for the identity."""
    sep = "," if len(img) > 10 else ""
    seen, out = set(), []
    for x in range(len(img)):
        if x in seen or img[x] == x:
            continue
        cyc, y = [], x
        while y not in seen:
            seen.add(y)
            cyc.append(str(y))
            y = img[y]
        out.append("(" + sep.join(cyc) + ")")
    return "".join(out) or "e"


def word_label(tokens, group: str) -> str:
    kind, k = group[0], int(group[1:])
    if kind == "c":
        return str(sum(int(t) for t in tokens) % k)
    cur = tuple(range(k))
    for t in tokens:
        g = parse_cycles(t, k)
        cur = tuple(g[cur[x]] for x in range(k))  # apply cur (the earlier tokens) first, then g
    return cycle_name(cur)


def reachability_label(tokens, V: int) -> str:
    edges = [[tokens[u * V + w] == "1" for w in range(V)] for u in range(V)]
    s, t = int(tokens[-2][1:]), int(tokens[-1][1:])
    seen, todo = {s}, [s]
    while todo:
        u = todo.pop()
        for w in range(V):
            if edges[u][w] and w not in seen:
                seen.add(w)
                todo.append(w)
    return "yes" if t in seen else "no"


def reachability_points(V: int) -> dict:
    out = {}
    for bits in itertools.product("01", repeat=V * V):
        for s in range(V):
            for t in range(V):
                toks = bits + (f"v{s}", f"v{t}")
                out[toks] = reachability_label(toks, V)
    return out


def reachability_index(tokens, V: int) -> int:
    graph = base_value([int(b) for b in tokens[: V * V]], 2)
    return (graph * V + int(tokens[-2][1:])) * V + int(tokens[-1][1:])


# ---- a task's points, from its enumerator (vectorized decode), as token tuples


def all_points(task) -> list:
    """[(tokens, label)] in index order, label a class name (per-position tasks: a tuple)."""
    out = []
    for b in task.batches(4096):
        for row, lab in zip(b.ids.tolist(), b.labels.tolist()):
            toks = tuple(task.vocab[t] for t in row)
            if isinstance(lab, list):
                out.append((toks, tuple(None if y < 0 else task.classes[y] for y in lab)))
            else:
                out.append((toks, task.classes[lab]))
    return out


# ---- orbits of the labelled dataset under the task's symmetry groups, by brute force


def group_elements(groups) -> list[dict]:
    """Every element of Sym(G_1) x ... x Sym(G_r) as a token -> token dict."""
    per = [[dict(zip(g, p)) for p in itertools.permutations(g)] for g in groups]
    out = []
    for combo in itertools.product(*per):
        sigma = {}
        for part in combo:
            sigma.update(part)
        out.append(sigma)
    return out


def orbits(points: list, groups) -> list[list[int]]:
    """Orbits (lists of indices) of the labelled dataset `points` under every group element.
    Asserts the dataset is closed: every image is a point, with the image of the label."""
    index = {toks: i for i, (toks, _) in enumerate(points)}
    elems = group_elements(groups)
    seen = [False] * len(points)
    out = []
    for i, (toks, lab) in enumerate(points):
        if seen[i]:
            continue
        orbit = set()
        for sigma in elems:
            img = tuple(sigma.get(t, t) for t in toks)
            j = index.get(img)
            assert j is not None, f"the image {img} of point {i} under {sigma} is not a dataset point"
            want = tuple(None if y is None else sigma.get(y, y) for y in lab) if isinstance(lab, tuple) \
                else sigma.get(lab, lab)
            assert points[j][1] == want, f"point {j} = image of point {i}: label {points[j][1]}, expected {want}"
            orbit.add(j)
        for j in orbit:
            assert not seen[j]
            seen[j] = True
        out.append(sorted(orbit))
    return out


def group_order(groups) -> int:
    from math import factorial

    out = 1
    for g in groups:
        out *= factorial(len(g))
    return out
