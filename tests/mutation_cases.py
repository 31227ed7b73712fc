"""Shared by tests/test_mutation.py and benchmarks/mutation_report.py: which constructions to
mutate (everything constructions/registry.py offers, at small sizes) and which single-entry
mutations to apply (seeded, mostly non-zero entries and entries inside used blocks)."""
from __future__ import annotations

import random
import zlib
from fractions import Fraction

from depthcert.checkers.tasks import make_task
from depthcert.constructions import registry

# Small dataset per task (every task name make_task knows).  Sizes: sc 9, icqa 24, tm 27,
# ictm 64, multihop 16 points.
SMALL = {
    "sc": dict(length=2, alphabet=3),
    "icqa": dict(k=2, n_questions=2, n_answers=3),
    "tm": dict(l=3, alphabet=3),
    "ictm": dict(k=2, l=2, alphabet=2, n_answers=2),
    "multihop": dict(hops=2, k=2, n_entities=2),
}

# Mutations per construction in the test suite; the oracle is slow on long sequences with many
# heads, so those get fewer (the report script uses many more, without the oracle).
PER_CASE = 30
PER_CASE_TASK = {"ictm": 12}


def constructions():
    """[(label, task, Construction)] for every task / variant / as_printed the registry offers."""
    out = []
    for name, variants in sorted(registry._builders().items()):
        if name not in SMALL:
            raise KeyError(f"registry offers task {name!r} with no small size in tests/mutation_cases.SMALL")
        task = make_task(name, **SMALL[name])
        for variant in variants:
            for as_printed in (False, True):
                c = registry.build(task, variant, as_printed)
                label = f"{name}/{variant}" + ("/printed" if as_printed else "")
                out.append((label, task, c))
    return out


def matrices(model):
    """[(matrix name, where-prefix, matrix)] over every weight matrix of the model."""
    out = []
    for li, layer in enumerate(model.layers):
        for hi, head in enumerate(layer):
            out.append((f"L{li}H{hi}.W_QK", (li, hi, "W_QK"), head.W_QK))
            out.append((f"L{li}H{hi}.W_V", (li, hi, "W_V"), head.W_V))
    out.append(("W_O", ("W_O",), model.W_O))
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
    Matrices that are entirely zero only get the "anywhere" draws."""
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
    out = []
    for _ in range(count):
        nonzero, used_zero, anywhere = rng.choice(pools)
        r = rng.random()
        pool = nonzero if (r < 0.6 and nonzero) else used_zero if (r < 0.85 and used_zero) else anywhere
        name, where, old = rng.choice(pool)
        kind, f = rng.choice(NUDGES_NONZERO if old != 0 else NUDGES_ZERO)
        out.append((name, where, old, kind, f(old)))
    return out
