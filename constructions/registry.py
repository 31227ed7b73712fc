"""Which construction proves which task: task -> variant -> builder.

A builder takes the task object and `as_printed` (True: the weights exactly as the paper
prints them; False: the smallest correct fix, identical to the printed ones when they work)
and returns a `Construction` (constructions/construction.py).  The first variant listed for a
task is its default.

Discovery is explicit: MEMBERS lists, in order, the modules that register builders through a
BUILDERS = {task: {variant: builder}} table (and chain-of-thought models through COT_BUILDERS).
A new construction module is added to MEMBERS; members import construction.py, never this module.
"""
from __future__ import annotations

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import make_task
from depthcert.checkers.tasks.base import Task
from depthcert.constructions import (composition, copy_matching, group_tree, memorization, multihop,
                                     parsing_copying_matching, parsing_mapping, reachability)
from depthcert.constructions.construction import Builder, Construction

__all__ = ["Builder", "Construction", "MEMBERS", "all_variants", "build", "builder_of", "cot_builders", "fits_readout",
           "variants"]

# In order: the first variant registered for a task is its default.
MEMBERS = (parsing_mapping, parsing_copying_matching, multihop, composition, group_tree, reachability)


def _builders() -> dict[str, dict[str, Builder]]:
    table: dict[str, dict[str, Builder]] = {
        "sc": {"heads": memorization.build},
        "icqa": {"copy-matching": copy_matching.build},
    }
    for mod in MEMBERS:
        for task, variants in getattr(mod, "BUILDERS", {}).items():
            table.setdefault(task, {}).update(variants)
    return table


def cot_builders() -> dict[str, dict[str, Builder]]:
    """task -> {variant: builder} of the chain-of-thought models (the members' COT_BUILDERS)."""
    table: dict = {}
    for mod in MEMBERS:
        for task, variants in getattr(mod, "COT_BUILDERS", {}).items():
            table.setdefault(task, {}).update(variants)
    return table


def variants(task: str) -> tuple[str, ...]:
    return tuple(_builders().get(task, {}))


def all_variants() -> dict[str, tuple[str, ...]]:
    """task -> its variants (the default first), for every task with a construction."""
    return {task: tuple(table) for task, table in _builders().items()}


def fits_readout(builder: Builder) -> bool:
    """Whether the builder's read-out is Lemma 3 (an existence proof, no read-out of the paper's
    own): such builders take `lemma3=False` and then leave W_O = 0 for a fitted read-out."""
    import inspect

    return "lemma3" in inspect.signature(builder).parameters


def builder_of(task: Task, variant: str | None = None) -> Builder:
    """The builder registered for the task's name and the variant (None: the default)."""
    table = _builders().get(task.name)
    if not table:
        raise BadInput(f"no construction for task {task.name!r}")
    if variant is None:
        variant = next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {task.name}; known: {', '.join(table)}")
    return table[variant]


def build(task: Task | str, variant: str | None = None, as_printed: bool = False, *, lemma3: bool = True,
          **sizes) -> Construction:
    """The construction for a task (a Task, or a task name with its sizes as keywords).

    lemma3=False: a Lemma 3 construction is built without its classifier (W_O = 0, readout
    "none"), for proofs/readout.py to fit one; other constructions are built as usual."""
    if isinstance(task, str):
        task = make_task(task, **sizes)
    elif sizes:
        raise BadInput(f"sizes given with a task object: {', '.join(sorted(sizes))}")
    builder = builder_of(task, variant)
    if not lemma3 and fits_readout(builder):
        return builder(task, as_printed, lemma3=False)
    return builder(task, as_printed)
