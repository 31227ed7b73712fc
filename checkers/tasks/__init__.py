"""What a dataset is, one module per task family; a verdict is about the dataset a task defines.

    base.py            Task, Batch, Point, bounded index arithmetic (what every family builds on)
    classification.py  sequence classification (sc)
    icqa.py            in-context question answering (icqa)
    template.py        template matching (tm) and in-context template matching (ictm)
    multihop.py        multi-hop reasoning (multihop)
    logdepth.py        parity, mod-count, word-problem, reachability
    composition.py     function composition (composition)
    max_of_k.py        Max-of-K, the largest of K tokens (max-of-k; Gross et al.)
    modular_addition.py  a + b mod p on "a b =" (modular-addition; Nanda et al.)
    induction.py       the token after the last token's earlier occurrence (induction; Olsson et al.)
    dataset_file.py    a user's dataset file (format, reader, writer) as a task

This module holds the task names (aliases included) and `make_task`, which builds a task by name
through plain imports of the family modules.
"""
from __future__ import annotations

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import composition, induction, logdepth, max_of_k, modular_addition, multihop, template
from depthcert.checkers.tasks.base import CLS, RESPONSE, UNLABELLED, Batch, Point, Task
from depthcert.checkers.tasks.classification import SequenceClassification
from depthcert.checkers.tasks.icqa import ICQA

__all__ = ["CLS", "ICQA", "RESPONSE", "TASK_ALIASES", "UNLABELLED", "Batch", "Point", "SequenceClassification",
           "Task", "canonical_task", "make_task"]

TASK_ALIASES = {
    "sc": "sc",
    "classification": "sc",
    "sequence-classification": "sc",
    "icqa": "icqa",
    "ic-qa": "icqa",
    "qa": "icqa",
    "tm": "tm",
    "template": "tm",
    "template-matching": "tm",
    "ictm": "ictm",
    "ic-tm": "ictm",
    "multihop": "multihop",
    "multi-hop": "multihop",
    "parity": "parity",
    "mod-count": "mod-count",
    "modcount": "mod-count",
    "word-problem": "word-problem",
    "wordproblem": "word-problem",
    "word": "word-problem",
    "reachability": "reachability",
    "connectivity": "reachability",
    "composition": "composition",
    "compose": "composition",
    "max-of-k": "max-of-k",
    "maxofk": "max-of-k",
    "max": "max-of-k",
    "modular-addition": "modular-addition",
    "modadd": "modular-addition",
    "mod-add": "modular-addition",
    "induction": "induction",
}
def canonical_task(name: str) -> str:
    key = str(name).strip().lower()
    if key not in TASK_ALIASES:
        known = ", ".join(dict.fromkeys(TASK_ALIASES.values()))
        raise BadInput(f"unknown task {name!r}; known: {known}")
    return TASK_ALIASES[key]


def make_task(name: str, **options) -> Task:
    """Build a task by name (aliases allowed) from the options a user gave (None = default)."""
    key = canonical_task(name)
    opts = {k: v for k, v in options.items() if v is not None}

    def take(*allowed):
        extra = sorted(set(opts) - set(allowed))
        if extra:
            raise BadInput(f"option --{extra[0].replace('_', '-')} does not apply to task {key}")
        return {k: opts[k] for k in allowed if k in opts}

    if key == "sc":
        return SequenceClassification(**take("length", "alphabet", "seed", "n_points"))
    if key == "icqa":
        return ICQA(**take("k", "n_questions", "n_answers"))
    if key in ("tm", "ictm"):
        return template.make(key, take)
    if key == "multihop":
        return multihop.make(take)
    if key in ("parity", "mod-count", "word-problem", "reachability"):
        return logdepth.make(key, take)
    if key == "composition":
        return composition.make(key, take)
    if key == "max-of-k":
        return max_of_k.make(key, take)
    if key == "modular-addition":
        return modular_addition.make(key, take)
    if key == "induction":
        return induction.make(key, take)
    raise BadInput(f"unknown task {name!r}")
