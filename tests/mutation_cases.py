"""Shared by tests/test_mutation.py and benchmarks/mutation_report.py: which constructions to
mutate (everything constructions/registry.py offers, at small sizes) and which single-entry
mutations to apply (seeded, mostly non-zero entries and entries inside used blocks).

`wider_models()` adds hand-built models outside the paper's class (hardmax, softmax, causal
masks, MLPs, a constant row, per-position outputs) on small user datasets; `mutations()` also
mutates their MLP weights and biases."""
from __future__ import annotations

import itertools
import random
import zlib
from fractions import Fraction

import numpy as np

from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.checkers.tasks import make_task
from depthcert.constructions import all_variants, build

# Small dataset per task (every task name make_task knows).  Sizes: sc 9, icqa 24, tm 27,
# ictm 64, multihop 16 points.
SMALL = {
    "sc": dict(length=2, alphabet=3),
    "icqa": dict(k=2, n_questions=2, n_answers=3),
    "tm": dict(l=3, alphabet=3),
    "ictm": dict(k=2, l=2, alphabet=2, n_answers=2),
    "multihop": dict(hops=2, k=2, n_entities=2),
    "parity": dict(n=3),  # 8 points, 2 tree levels
    "mod-count": dict(n=3, modulus=3),  # 8 points
    "word-problem": dict(group="s3", n=3),  # 8 points, non-abelian, 2 tree levels
    "reachability": dict(vertices=2),  # 64 points, length 6
    "composition": dict(n_functions=3, domain=2),  # 128 points, length 7 (preimage and forward heads)
}

# Mutations per construction in the test suite; the oracle is slow on long sequences with many
# heads, so those get fewer (the report script uses many more, without the oracle).
PER_CASE = 30
PER_CASE_TASK = {"composition": 6, "ictm": 12}


def constructions():
    """[(label, task, Construction)] for every task / variant / as_printed the registry offers."""
    out = []
    for name, variants in sorted(all_variants().items()):
        if name not in SMALL:
            raise KeyError(f"registry offers task {name!r} with no small size in tests/mutation_cases.SMALL")
        task = make_task(name, **SMALL[name])
        for variant in variants:
            for as_printed in (False, True):
                c = build(task, variant, as_printed)
                label = f"{name}/{variant}" + ("/printed" if as_printed else "")
                out.append((label, task, c))
    return out


def matrices(model):
    """[(matrix name, where-prefix, matrix)] over every weight matrix of the model (MLP W1 / W2
    included; the bias vectors are in `vectors`)."""
    out = []
    for li, layer in enumerate(model.layers):
        for hi, head in enumerate(layer):
            out.append((f"L{li}H{hi}.W_QK", (li, hi, "W_QK"), head.W_QK))
            out.append((f"L{li}H{hi}.W_V", (li, hi, "W_V"), head.W_V))
        mlp = getattr(layer, "mlp", None)
        if mlp is not None:
            out.append((f"L{li}.mlp.W1", (li, "mlp", "W1"), mlp.W1))
            out.append((f"L{li}.mlp.W2", (li, "mlp", "W2"), mlp.W2))
    out.append(("W_O", ("W_O",), model.W_O))
    return out


def vectors(model):
    """[(vector name, where-prefix, vector)]: the MLP biases b1, b2 of every layer."""
    out = []
    for li, layer in enumerate(model.layers):
        mlp = getattr(layer, "mlp", None)
        if mlp is not None:
            out.append((f"L{li}.mlp.b1", (li, "mlp", "b1"), mlp.b1))
            out.append((f"L{li}.mlp.b2", (li, "mlp", "b2"), mlp.b2))
    return out


NUDGES_NONZERO = (
    ("+1/7", lambda w: w + Fraction(1, 7)),
    ("-1/7", lambda w: w - Fraction(1, 7)),
    ("flip", lambda w: -w),
    ("zero", lambda w: Fraction(0)),
    ("x2", lambda w: 2 * w),
    ("x1/2", lambda w: w / 2),
    ("+1", lambda w: w + 1),
    ("-1", lambda w: w - 1),
)
NUDGES_ZERO = (
    ("+1/7", lambda w: Fraction(1, 7)),
    ("-1/7", lambda w: Fraction(-1, 7)),
    ("+1", lambda w: Fraction(1)),
    ("-1", lambda w: Fraction(-1)),
    ("-3/2", lambda w: Fraction(-3, 2)),
)


def mutations(label: str, model, count: int, seed: int = 0):
    """`count` seeded single-entry mutations: [(matrix name, where, old, kind, new)].

    A weight matrix is drawn first (uniformly, so W_O and every head's W_QK / W_V get their
    share), then an entry of it: ~60% a non-zero entry, ~25% a zero entry inside the used
    block (a row and a column of that matrix that carry some non-zero entry), ~15% anywhere.
    Matrices that are entirely zero only get the "anywhere" draws.  MLP bias vectors are drawn
    like matrices (a bias vector is a one-column matrix; its "used block" is its non-zero rows)."""
    rng = random.Random(zlib.crc32(label.encode()) + seed)
    pools = []
    for name, prefix, M in matrices(model):
        rows = {i for i in range(M.shape[0]) for j in range(M.shape[1]) if M[i, j] != 0}
        cols = {j for i in range(M.shape[0]) for j in range(M.shape[1]) if M[i, j] != 0}
        nonzero, used_zero, anywhere = [], [], []
        for i in range(M.shape[0]):
            for j in range(M.shape[1]):
                entry = (name, prefix + (i, j), Fraction(M[i, j]))
                anywhere.append(entry)
                if M[i, j] != 0:
                    nonzero.append(entry)
                elif i in rows and j in cols:
                    used_zero.append(entry)
        pools.append((nonzero, used_zero, anywhere))
    for name, prefix, v in vectors(model):
        nonzero, used_zero, anywhere = [], [], []
        for i in range(v.shape[0]):
            entry = (name, prefix + (i,), Fraction(v[i]))
            anywhere.append(entry)
            if v[i] != 0:
                nonzero.append(entry)
        pools.append((nonzero, used_zero, anywhere))
    out = []
    for _ in range(count):
        nonzero, used_zero, anywhere = rng.choice(pools)
        r = rng.random()
        pool = nonzero if (r < 0.6 and nonzero) else used_zero if (r < 0.85 and used_zero) else anywhere
        name, where, old = rng.choice(pool)
        kind, f = rng.choice(NUDGES_NONZERO if old != 0 else NUDGES_ZERO)
        out.append((name, where, old, kind, f(old)))
    return out


# ---- models outside the paper's class, on small user datasets (points in order of length, so
# index order is also the order verify visits DatasetTask's length groups)

WIDER_PER_CASE = 40  # mutations per wider model in tests/test_mutation.py
WIDER_PER_CASE_SOFTMAX = 16  # softmax mutants are cross-checked point by point: fewer of them


def _sequences(tokens, lengths):
    return [list(s) for n in lengths for s in itertools.product(tokens, repeat=n)]


def prev_copy(kind: str = "hardmax", scale=1, causal: bool = True, n: int = 3) -> tuple[DatasetTask, Model]:
    """Every position k >= 1 predicts the previous token (outputs "all"; position 0 unlabelled).
    One head: score 1 for key k-1 (a position shift), value = the key's token into "prev"."""
    toks = ("a", "b", "c")
    lay = Layout.of(("token", 3), ("position", n), ("prev", 3))
    shift = [[1 if j == k - 1 else 0 for k in range(n)] for j in range(n)]
    qk = BlockMatrix(lay, lay).set("position", "position", shift).build()
    v = BlockMatrix(lay, lay).set("prev", "token", 1).build()
    out = BlockMatrix(Layout.of(("class", 3)), lay).set("class", "prev", 1).build()
    head = Head(qk, v, attention=kind, scale=Fraction(scale))
    model = Model(toks, n, toks, lay, (Layer((head,), causal=causal),), out, name=f"prev-copy/{kind}",
                  outputs="all")
    seqs = _sequences(toks, range(2, n + 1))
    return DatasetTask(seqs, [[None] + s[:-1] for s in seqs], name="prev-copy"), model


def seen_a(n: int = 3) -> tuple[DatasetTask, Model]:
    """Prefix OR, every position labelled: has an "a" appeared at or before this position?
    A causal relu head scores key token a against the query's constant row (score 1), and
    writes the count of a's so far into "seen"; class "no" reads 1/2 off the constant row."""
    toks = ("a", "b", "c")
    lay = Layout.of(("token", 3), ("position", n), ("one", 1), ("seen", 1))
    qk = BlockMatrix(lay, lay).entry("token", 0, "one", 0, 1).build()
    v = BlockMatrix(lay, lay).entry("seen", 0, "token", 0, 1).build()
    out = (BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "one", 0, Fraction(1, 2))
           .entry("class", 1, "seen", 0, 1).build())
    model = Model(toks, n, ("no", "yes"), lay, (Layer((Head(qk, v),), causal=True),), out, name="seen-a",
                  outputs="all", constant_row=True)
    seqs = _sequences(toks, range(1, n + 1))
    labels = [["yes" if "a" in s[: k + 1] else "no" for k in range(len(s))] for s in seqs]
    return DatasetTask(seqs, labels, name="seen-a"), model


def parity2(split: bool, n: int = 3) -> tuple[DatasetTask, Model]:
    """XOR of the last two bits (outputs "last").  A causal hardmax head copies the previous
    token's bit into "prev"; a ReLU MLP computes x + y - 2 relu(x + y - 1) into "xor".
    split=False: head and MLP in one layer, biases in b1 / b2.  split=True: an attention layer,
    then an MLP-only layer whose biases come from a constant row (b1 = 0)."""
    lay = Layout.of(("token", 2), ("position", n), *((("one", 1),) if split else ()), ("prev", 1),
                    ("half", 1), ("xor", 1))
    shift = [[1 if j == k - 1 else 0 for k in range(n)] for j in range(n)]
    qk = BlockMatrix(lay, lay).set("position", "position", shift).build()
    v = BlockMatrix(lay, lay).entry("prev", 0, "token", 1, 1).build()
    hidden = Layout.of(("u", 2))
    W1 = BlockMatrix(hidden, lay).entry("u", 0, "token", 1, 1).entry("u", 0, "prev", 0, 1)
    W1.entry("u", 1, "token", 1, 1).entry("u", 1, "prev", 0, 1)
    if split:
        W1.entry("u", 1, "one", 0, -1)
    W2 = BlockMatrix(lay, hidden).entry("xor", 0, "u", 0, 1).entry("xor", 0, "u", 1, -2).build()
    b1 = np.array([Fraction(0), Fraction(0 if split else -1)], dtype=object)
    b2 = np.array([Fraction(0)] * lay.dim, dtype=object)
    b2[lay.index("half", 0)] = Fraction(1, 2)
    mlp = MLP(W1.build(), b1, W2, b2)
    out = (BlockMatrix(Layout.of(("class", 2)), lay).entry("class", 0, "half", 0, 1)
           .entry("class", 1, "xor", 0, 1).build())
    head = Head(qk, v, attention="hardmax")
    if split:
        layers = (Layer((head,), causal=True), Layer((), mlp=mlp))
    else:
        layers = (Layer((head,), causal=True, mlp=mlp),)
    model = Model(("0", "1"), n, ("0", "1"), lay, layers, out, name="parity2", constant_row=split)
    seqs = _sequences((0, 1), range(2, n + 1))
    return DatasetTask(seqs, [s[-1] ^ s[-2] for s in seqs], name="parity2"), model


def wider_models():
    """[(label, task, model)]: hand-built models outside the paper's class, each verified
    unmutated: hardmax, softmax, relu with a causal mask and a constant row, MLPs (inside an
    attention layer and as an MLP-only layer), per-position and last-position outputs."""
    out = []
    task, model = prev_copy("hardmax", causal=True)
    out.append(("prev-copy/hardmax-causal", task, model))
    task, model = prev_copy("hardmax", causal=False)
    out.append(("prev-copy/hardmax", task, model))
    task, model = prev_copy("softmax", scale=20, causal=True)
    out.append(("prev-copy/softmax20-causal", task, model))
    task, model = seen_a()
    out.append(("seen-a/relu-causal-constant-row", task, model))
    task, model = parity2(split=False)
    out.append(("parity2/hardmax-causal-mlp", task, model))
    task, model = parity2(split=True)
    out.append(("parity2/mlp-only-layer-constant-row", task, model))
    return out
