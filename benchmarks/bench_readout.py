"""The max-margin read-out's fit, and the whole verify-construction run, against a plain float64 forward.

    python benchmarks/bench_readout.py [--task tm|sc|ictm] [--l 7] [--alphabet 7] [--variant ternary|heads]

Runs `verify-construction TASK ... --symmetry off` (build, the LP read-out fit and the exact check
of every point) in this process, as bench_all.py does, then the fit alone (proofs/readout.py
fit_max_margin over the same hidden vectors the command fits, orbit representatives where the
layers are proven equivariant) and the plain float64 forward of the same model over the same
points; prints the times, the whole run's ratio (goal: at most 2), the fit's (goal: about 1/2),
the fit's deterministic LP work against its budget (lp_budget), the normalized margin and the note.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_all  # noqa: E402

SIZES = {"tm": lambda a: dict(l=a.l, alphabet=a.alphabet), "sc": lambda a: dict(length=a.l, alphabet=a.alphabet),
         "ictm": lambda a: dict(k=2, l=a.l, alphabet=a.alphabet, n_answers=3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="tm", choices=sorted(SIZES))
    p.add_argument("--l", type=int, default=7, help="tm: l; sc: --length; ictm: l (k = 2, 3 answers)")
    p.add_argument("--alphabet", type=int, default=7)
    p.add_argument("--variant", default=None, help="tm: ternary (default) or heads")
    a = p.parse_args()
    variant = a.variant or ("ternary" if a.task == "tm" else None)
    row = bench_all.Row(f"{a.task} {variant or ''} l={a.l}", a.task, SIZES[a.task](a), None, variant)
    d = bench_all.one_row(row, quick=False)
    print(f"$ {d['command']}")
    print(f"  verdict {d['verdict']}, {d['points']:,} points; read-out {d['readout']}: {d['readout_note']}")
    print(f"  normalized margins: {d['readout_margins']}")
    print(f"  whole run {d['whole_s']:.2f} s (evaluating {d['eval_s']:.2f} s); plain float64 forward "
          f"{d['float_s']:.3f} s; ratio {d['whole_ratio']:.2f} (goal <= 2)")
    from depthcert import constructions
    from depthcert.checkers.tasks import make_task
    from depthcert.proofs import readout as ro

    task = make_task(row.task, **row.sizes(False))
    model = constructions.build(task, variant, lemma3=False).model
    hv = ro.hidden_vectors(model, task, "auto")
    t0 = time.perf_counter()
    fit = ro.fit_max_margin(hv, len(model.classes), task.size)
    t_fit = time.perf_counter() - t0
    print(f"  the fit alone ({hv.X.shape[0]:,} vectors x {len(model.classes):,} classes, {fit.rounds} rounds, LP work "
          f"{fit.lp_work:,} of {fit.lp_budget:,}): {t_fit:.3f} s; fit / float64 {t_fit / d['float_s']:.2f} (goal about 0.5)")


if __name__ == "__main__":
    main()
