"""Refutations lifted from stored certificates (docs/depth.md, section 3).

A version-2 certificate is a proof about its listed labelled points: no model of B(L, H) classifies
all of them.  So it refutes every dataset that contains those points with the same labels, at the
same L, H and mask.  find-depth tries the stored certificates of *other* instances (another size of
a task, another task, a dataset file: never the problem's own task and sizes, which its search
reproduces) before it searches.  Each candidate is re-labelled with this problem's task (or, for a
dataset file, keeps only its listed labelled points) and re-checked by proofs/check_depth.py; the
stored file is never trusted.  The points are compared as token tuples with their labels.
"""
from __future__ import annotations

import glob
import json
import os

from depthcert.proofs import check_depth as cd

STORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "certificates", "depth")


def lifted(problem, layers: int, heads: int, store: str = STORE):
    """(certificate re-checked for this problem, check message, file name) of the first stored
    certificate (file-name order) of another instance whose points all lie in the dataset with the
    same labels, at these layers and heads and this mask; None when there is none."""
    index = {tuple(tokens): label for tokens, label in problem.points}
    for path in sorted(glob.glob(os.path.join(store, "*.json"))):
        if path.endswith(".v1.json"):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                cert = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(cert, dict) or cert.get("version") != 2 or cert.get("layers") != layers:
            continue
        if cert.get("heads") != heads or cert.get("causal") != problem.causal:
            continue
        if problem.task_ref is not None and cert.get("task") == problem.task_ref:
            continue  # this very instance: the search finds its own refutation
        points = cert.get("points")
        if not isinstance(points, list) or not all(
                isinstance(p, dict) and isinstance(p.get("tokens"), list)
                and index.get(tuple(p["tokens"])) == p.get("label") for p in points):
            continue
        mine = {k: v for k, v in cert.items() if k != "task"}
        if problem.task_ref is not None:
            mine["task"] = problem.task_ref
        ok, msg = cd.check(mine)
        if ok:
            return mine, msg, os.path.basename(path)
    return None
