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


_SUMMARY: dict = {}  # path -> ((mtime_ns, size), (layers, heads, causal, task, points) or None)


def _summary(path: str):
    """What decides whether a stored file can apply, read once per process and file version (the
    whole certificate is read again only when it applies)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    got = _SUMMARY.get(path)
    if got is not None and got[0] == stamp:
        return got[1]
    cert = _read(path)
    summary = None
    if isinstance(cert, dict) and cert.get("version") == 2 and isinstance(cert.get("points"), list) and all(
            isinstance(p, dict) and isinstance(p.get("tokens"), list) for p in cert["points"]):
        summary = (cert.get("layers"), cert.get("heads"), cert.get("causal"), cert.get("task"),
                   tuple((tuple(p["tokens"]), p.get("label")) for p in cert["points"]))
    _SUMMARY[path] = (stamp, summary)
    return summary


def _read(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def lifted(problem, layers: int, heads: int, store: str = STORE):
    """(certificate re-checked for this problem, check message, file name) of the first stored
    certificate (file-name order) of another instance whose points all lie in the dataset with the
    same labels, at these layers and heads and this mask; None when there is none."""
    index = None
    for path in sorted(glob.glob(os.path.join(store, "*.json"))):
        if path.endswith(".v1.json"):
            continue
        summary = _summary(path)
        if summary is None:
            continue
        c_layers, c_heads, c_causal, c_task, points = summary
        if (c_layers, c_heads, c_causal) != (layers, heads, problem.causal):
            continue
        if problem.task_ref is not None and c_task == problem.task_ref:
            continue  # this very instance: the search finds its own refutation
        if index is None:
            index = {tuple(tokens): label for tokens, label in problem.points}
        if not all(index.get(tokens) == label for tokens, label in points):
            continue
        cert = _read(path)
        if not isinstance(cert, dict):
            continue
        mine = {k: v for k, v in cert.items() if k != "task"}
        if problem.task_ref is not None:
            mine["task"] = problem.task_ref
        ok, msg = cd.check(mine)
        if ok:
            return mine, msg, os.path.basename(path)
    return None
