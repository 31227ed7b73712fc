"""Known hardmax models that find-depth tries before it searches (upper bounds; docs/depth.md).

Each builder returns a weights object (depthcert.weights version 2, hardmax) for a task at any size
it takes, or None; find-depth verifies it on every point like a searched model, so a builder is a
proposal, never a claim.

copy (training/copy_task.py): one layer of one head at every length n.  The query at the labelled
position n + i puts key position i strictly on top (W_QK[pos i, pos n + i] = 1, every other score
0), W_V copies the stream into a block, and the read-out reads that block's token rows: the label
x_i with margin 1.

a function of one token's count (parity, mod-count, or any dataset of one length whose label is a
function of how often some token t occurs): two layers of one head at every length n.  Layer 1
scores every key 0 (uniform), so the last position's layer-1 block holds c/n at t's row (c the
count of t).  Layer 2 scores key position j by 2 j c - j^2 = c^2 - (j - c)^2, which puts position
min(c, n - 1) strictly on top (no ties at integers c).  The read-out reads that position (a large
logit for the label of c = j) and c itself, which separates c = n from c = n - 1 (both select
position n - 1).

a count over some positions picks what to read (count_lookup): two layers of one head, for a
dataset of one length n when, for a token t and a set P of positions, every point's label is
decided by c = #{i in P: x_i = t} in one of two ways per value of c: the same class for every point
with that c, or the token at one position sigma(c) (a class of the same name).  Layer 1: the last
position attends uniformly to P (c/|P| at t's row), and one "carrier" position per value of c
attends to sigma(c) (or to itself), copying that token.  Layer 2 puts the carrier of c strictly on
top with the score 2 c' c - c'^2 of the carrier of c' (every other key is below all carriers), and
the read-out reads the carrier's copied token (or its position, for a constant class).  Parity of
the tokens at P, and ICTM with k = 2 templates of length 2 over two tokens (whether the query
matches the first template is the parity of four tokens), are of this form.

composition of two or three functions on [N] (composition_two_layers): two layers of one head at
every N; layer 1 looks up the next table's entry at every position, layer 2 the entry the last
position found (pointer doubling).
"""
from __future__ import annotations

from depthcert.proofs.depth_realize import Layout


def copy_into_block(layout, l: int) -> list:
    """W_V of head 0 of layer l in the copying layout: the previous stream (d[l-1] rows) copied into
    block (l, 0) (one head: no factor to undo)."""
    d = layout.d[-1]
    wv = [[0] * d for _ in range(d)]
    for r in range(layout.d[l - 1]):
        wv[layout.offset(l, 0) + r][r] = 1
    return wv


def copy_one_layer(vocab, classes, length: int, name: str = "copy-one-layer") -> dict:
    """The copy task's one-layer, one-head hardmax model (module docstring)."""
    n = length
    layout = Layout(vocab, 2 * n, 1, 1)
    d = layout.d[-1]
    qk = [[0] * d for _ in range(d)]
    for i in range(n):
        qk[layout.row(("p", i))][layout.row(("p", n + i))] = 1
    wv = copy_into_block(layout, 1)
    wo = [[0] * d for _ in classes]
    for c, t in enumerate(classes):
        wo[c][layout.row((1, 0, ("t", t)))] = 1
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": 2 * n,
            "classes": list(classes), "layers": [{"heads": [{"W_QK": qk, "W_V": wv, "attention": "hardmax"}],
                                                  "causal": True}],
            "W_O": wo, "outputs": "all"}


def count_function(points, vocab):
    """(token t, n, {count: label}) when every point has length n and its label is a function of
    the count of t (the first such token in vocabulary order), else None."""
    lengths = {len(tokens) for tokens, _ in points}
    if len(lengths) != 1:
        return None
    n = lengths.pop()
    for t in vocab:
        table = {}
        if all(table.setdefault(tokens.count(t), label) == label for tokens, label in points):
            return t, n, table
    return None


def count_two_layers(vocab, classes, token, n: int, table: dict, name: str = "count-two-layers") -> dict:
    """The two-layer, one-head model of a label that is a function of `token`'s count (module
    docstring); `table` maps each count that occurs to its label."""
    layout = Layout(vocab, n, 2, 1)
    d = layout.d[-1]
    zero = [[0] * d for _ in range(d)]
    qk2 = [[0] * d for _ in range(d)]
    count_row = layout.row((1, 0, ("t", token)))  # holds c / n at the last position
    for j in range(n):
        qk2[layout.row(("p", j))][count_row] = 2 * j * n
        qk2[layout.row(("p", j))][layout.row(("p", n - 1))] = -j * j
    wv1, wv2 = copy_into_block(layout, 1), copy_into_block(layout, 2)
    wo = [[0] * d for _ in classes]  # logits doubled, so every entry is an integer
    cls = {c: i for i, c in enumerate(classes)}
    for c, label in table.items():
        if c < n - 1:
            wo[cls[label]][layout.row((2, 0, ("p", c)))] += 4 * n
    if n - 1 in table:
        wo[cls[table[n - 1]]][layout.row((2, 0, ("p", n - 1)))] += 2 * n - 1
    if n in table:  # + c on the label of c = n: below n - 1/2 at c = n - 1, above it at c = n
        wo[cls[table[n]]][count_row] += 2 * n
    layer = {"heads": [{"W_QK": zero, "W_V": wv1, "attention": "hardmax"}], "causal": False}
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": n,
            "classes": list(classes),
            "layers": [layer, {"heads": [{"W_QK": qk2, "W_V": wv2, "attention": "hardmax"}], "causal": False}],
            "W_O": wo, "outputs": "all"}


MAX_LOOKUP_WORK = 50_000_000  # (token, position set, point) triples the count_lookup search may test


def count_lookup(points, vocab, classes):
    """(token, positions P, {count: ("class", label) or ("copy", position)}) for the first token and
    set P (fewest positions first, then in order) of the module docstring's form, with at most
    n - 1 values of the count (one carrier each, the last position excluded), else None.  The
    search tests at most MAX_LOOKUP_WORK (token, P, point) triples: the same answer on every machine."""
    import numpy as np

    lengths = {len(tokens) for tokens, _ in points}
    if len(lengths) != 1 or not points:
        return None
    n = lengths.pop()
    if len(vocab) * (2 ** n) * len(points) > MAX_LOOKUP_WORK:
        return None
    tok = {t: i for i, t in enumerate(vocab)}
    X = np.array([[tok[t] for t in tokens] for tokens, _ in points], dtype=np.int64)  # (points, n)
    names = sorted(set(classes) & set(vocab))
    labels = [y for _, y in points]
    # copyable[q, i]: point q's label is the token at position i
    copyable = np.array([[tokens[i] == y and y in names for i in range(n)] for tokens, y in points])
    lab = np.array([sorted(set(labels)).index(y) for y in labels])
    from itertools import combinations

    for t in vocab:
        hit = (X == tok[t])
        for size in range(1, n + 1):
            for P in combinations(range(n), size):
                c = hit[:, list(P)].sum(axis=1)
                values = np.unique(c)
                if len(values) > n - 1:
                    continue
                table = {}
                for v in values:
                    sel = c == v
                    if (lab[sel] == lab[sel][0]).all():
                        table[int(v)] = ("class", labels[int(np.argmax(sel))])
                        continue
                    where = np.flatnonzero(copyable[sel].all(axis=0))
                    if len(where) == 0:
                        break
                    table[int(v)] = ("copy", int(where[0]))
                else:
                    return t, P, table
    return None


def count_lookup_two_layers(vocab, classes, token, P, table: dict, n: int, name: str = "count-lookup") -> dict:
    """The two-layer, one-head model of count_lookup's form (module docstring)."""
    layout = Layout(vocab, n, 2, 1)
    d = layout.d[-1]
    last = layout.row(("p", n - 1))
    qk1 = [[0] * d for _ in range(d)]
    for i in P:  # the last position: uniform over P
        qk1[layout.row(("p", i))][last] = 1
    carriers = dict(zip(sorted(table), range(n - 1)))  # count value -> carrier position
    for v, j in carriers.items():
        kind, what = table[v]
        qk1[layout.row(("p", what if kind == "copy" else j))][layout.row(("p", j))] = 1
    qk2 = [[0] * d for _ in range(d)]
    count_row = layout.row((1, 0, ("t", token)))  # c / |P| at the last position
    below = len(P) ** 2 + 1  # every carrier scores at least -|P|^2
    for j in range(n):
        qk2[layout.row(("p", j))][last] = -below
    for v, j in carriers.items():
        qk2[layout.row(("p", j))][count_row] = 2 * v * len(P)
        qk2[layout.row(("p", j))][last] = -v * v
    wv1, wv2 = copy_into_block(layout, 1), copy_into_block(layout, 2)
    wo = [[0] * d for _ in classes]
    cls = {c: i for i, c in enumerate(classes)}
    for c in classes:  # the copied token of the selected carrier: +1 for the class of that name
        if c in layout.tok:
            wo[cls[c]][layout.row((2, 0, (1, 0, ("t", c))))] = 1
    for v, j in carriers.items():
        kind, what = table[v]
        if kind == "class":  # +2 for the constant class: above any copied token's +1
            wo[cls[what]][layout.row((2, 0, ("p", j)))] = 2
    layers = [{"heads": [{"W_QK": qk1, "W_V": wv1, "attention": "hardmax"}], "causal": False},
              {"heads": [{"W_QK": qk2, "W_V": wv2, "attention": "hardmax"}], "causal": False}]
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": n,
            "classes": list(classes), "layers": layers, "W_O": wo, "outputs": "all"}


def composition_two_layers(vocab, classes, L: int, N: int, name: str = "composition-two-layers") -> dict:
    """Composition of L = 2 or 3 functions on [N] (tables f_0 .. f_(L-1) at positions b N + j, then
    x): two layers of one head.  Layer 1: a query in table block b with token u puts position
    (b + 1) N + u strictly on top (score 10 for the next block, + 1 where the key position is u
    mod N), and the last position (x) puts position x of block 0 on top; so the last position holds
    f_0(x), and position N + j of block 1 holds f_2(f_1(j)).  Layer 2: the last position puts
    position N + f_0(x) on top (score 1 against its layer-1 token f_0(x)).  The read-out reads that
    position's token, f_1(f_0(x)) (L = 2), or its layer-1 token, f_2(f_1(f_0(x))) (L = 3): margin 1."""
    if L not in (2, 3):
        raise ValueError("composition_two_layers: L must be 2 or 3")
    n = L * N + 1
    layout = Layout(vocab, n, 2, 1)
    d = layout.d[-1]
    digit = [str(v) for v in range(N)]
    qk1 = [[0] * d for _ in range(d)]
    for b in range(L):  # queries in block b (the last block has no next one), and the last position
        for q in range(b * N, (b + 1) * N):
            if b + 1 < L:
                for j in range(N):
                    qk1[layout.row(("p", (b + 1) * N + j))][layout.row(("p", q))] = 10
    for j in range(N):
        qk1[layout.row(("p", j))][layout.row(("p", n - 1))] = 10
    for k in range(n - 1):  # + 1 where the key position is u mod N, u the query's token
        qk1[layout.row(("p", k))][layout.row(("t", digit[k % N]))] = 1
    qk2 = [[0] * d for _ in range(d)]
    for v in range(N):
        qk2[layout.row(("p", N + v))][layout.row((1, 0, ("t", digit[v])))] = 1
    wo = [[0] * d for _ in classes]
    for c, cls in enumerate(classes):
        if cls in layout.tok:
            inner = ("t", cls) if L == 2 else (1, 0, ("t", cls))
            wo[c][layout.row((2, 0, inner))] = 1
    layers = [{"heads": [{"W_QK": qk1, "W_V": copy_into_block(layout, 1), "attention": "hardmax"}], "causal": False},
              {"heads": [{"W_QK": qk2, "W_V": copy_into_block(layout, 2), "attention": "hardmax"}], "causal": False}]
    return {"format": "depthcert.weights", "version": 2, "name": name, "vocab": list(vocab), "max_length": n,
            "classes": list(classes), "layers": layers, "W_O": wo, "outputs": "all"}


def known_models(problem, layers: int):
    """(description, weights with one head per layer) of the known models with `layers` layers."""
    if problem.name == "copy" and layers == 1:
        yield ("copy: position n + i attends position i (one head, any length)",
               copy_one_layer(problem.vocab, problem.classes, problem.params["length"]))
    if layers == 2 and problem.name == "composition" and problem.params.get("L") in (2, 3):
        L, N = problem.params["L"], problem.params["N"]
        yield (f"composition of {L} functions: layer 1 looks up the next table's entry at every position, "
               "layer 2 reads the entry of block 1 the last position found (one head, any N)",
               composition_two_layers(problem.vocab, problem.classes, L, N))
    if layers == 2 and problem.name != "copy":
        found = count_function(problem.points, problem.vocab)
        if found is not None:
            token, n, table = found
            yield (f"the label is a function of the count of token {token!r}: layer 1 uniform, layer 2 selects "
                   "position min(count, n - 1) (one head, any length)",
                   count_two_layers(problem.vocab, problem.classes, token, n, table))
        found = count_lookup(problem.points, problem.vocab, problem.classes)
        if found is not None:
            token, P, table = found
            n = len(problem.points[0][0])
            yield (f"the count of token {token!r} at positions {list(P)} picks a class or the position to read: "
                   "layer 1 counts and copies, layer 2 selects (one head)",
                   count_lookup_two_layers(problem.vocab, problem.classes, token, P, table, n))
