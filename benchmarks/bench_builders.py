"""Benchmark: finite builds through the set-indexed builders (constructions/indexed.py) against a
direct block-matrix build of the same model, measured in one run.

    python benchmarks/bench_builders.py

A finite build runs the builder once on the task held at its sizes (Size objects, every comparison
decided at that point) and instantiates the symbolic model into Fraction matrices.  The baseline
is the pre-issue-24 ICQA builder (checkers.layout.BlockMatrix written directly), kept here.  Also
printed: the symbolic run alone (the all-sizes proof's first step) for each ported construction,
and Theorem 1's build with its closed-form read-out against the printed one (Lemma 3's classifier,
fitted point by point) on the same dataset.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from depthcert import constructions  # noqa: E402
from depthcert.checkers.layout import BlockMatrix, Layout  # noqa: E402
from depthcert.checkers.model import Head, Model  # noqa: E402
from depthcert.checkers.tasks import make_task  # noqa: E402
from depthcert.constructions import (copy_matching, memorization, multihop, parsing_copying_matching,  # noqa: E402
                                     parsing_mapping)
from depthcert.constructions.attention import instructive_attention  # noqa: E402


def direct_icqa(task):
    """The ICQA model built block by block, without the symbolic layer (the baseline)."""
    lay = Layout.of(("question", task.n_q), ("response", 1), ("answer", task.n_a), ("position", task.length))
    ident = BlockMatrix(lay, lay)
    for b in lay.names:
        ident.set(b, b, 1)
    ident = ident.build()
    layer1 = Head(instructive_attention(lay, copy_matching.copy_map(task.k)), ident)
    layer2 = Head(BlockMatrix(lay, lay).set("question", "question", 1).build(), ident)
    W_O = BlockMatrix(Layout.of(("answer", task.n_a)), lay).set("answer", "answer", 1).build()
    return Model(task.vocab, task.length, task.classes, lay, ((layer1,), (layer2,)), W_O, name="copy-matching")


def best(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    print(f"python {sys.version.split()[0]}")
    for k, n in ((3, 10), (6, 30), (3, 100), (2, 400)):
        task = make_task("icqa", k=k, n_questions=n, n_answers=n)
        assert constructions.build(task).model == direct_icqa(task)
        a, b = best(lambda: constructions.build(task)), best(lambda: direct_icqa(task))
        print(f"icqa k={k} n={n} (d'={3 * k + 2 + 2 * n + 1}): set-indexed {a * 1e3:.2f} ms, direct {b * 1e3:.2f} ms, "
              f"ratio {a / b:.2f}")
    runs = [("icqa", lambda: constructions.build(copy_matching.symbolic_task())),
            ("multihop linear k=3", lambda: constructions.build(multihop.symbolic_task(3), "linear")),
            ("tm ternary l=4", lambda: constructions.build(parsing_mapping.symbolic_task(4), "ternary")),
            ("ictm k=2 l=2", lambda: constructions.build(parsing_copying_matching.symbolic_task(2, 2))),
            ("sc", lambda: constructions.build(memorization.symbolic_task()))]
    for name, fn in runs:
        print(f"symbolic run, {name}: {best(fn, 3) * 1e3:.1f} ms")
    for L, M in ((4, 3), (5, 3), (6, 3)):
        task = make_task("sc", length=L, alphabet=M)
        a, b = best(lambda: constructions.build(task), 2), best(lambda: constructions.build(task, as_printed=True), 1)
        print(f"sc L={L} M={M} ({M ** L} points): closed-form read-out {a * 1e3:.1f} ms, Lemma 3 (as printed) "
              f"{b * 1e3:.1f} ms, ratio {b / a:.1f}")


if __name__ == "__main__":
    main()
