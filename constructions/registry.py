"""Which construction proves which task: task -> variant -> builder.

A builder takes the task object and `as_printed` (True: the weights exactly as the paper
prints them; False: the smallest correct fix, identical to the printed ones when they work)
and returns a `Construction` (constructions/construction.py).  The first variant listed for a
task is its default.

Registration is explicit: BUILDERS lists, in order, the members' tables
{task: {variant: builder}} (COT_BUILDERS the chain-of-thought models' tables), each named by a
plain attribute, so a reader or a tool follows a builder from here to its module.  A new
construction module adds its table here; members import construction.py, never this module.
"""
from __future__ import annotations

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import make_task
from depthcert.checkers.tasks.base import Task
from depthcert.constructions import (composition, copy_matching, group_tree, memorization, multihop,
                                     parsing_copying_matching, parsing_mapping, reachability)
from depthcert.constructions.construction import Builder, Construction

__all__ = ["BUILDERS", "COT_BUILDERS", "Builder", "Construction", "all_variants", "build", "builder_of", "cot_builders",
           "fits_readout", "variants"]

# In order: the first variant registered for a task is its default.
BUILDERS: tuple[dict[str, dict[str, Builder]], ...] = (
    {"sc": {"heads": memorization.build}},
    {"icqa": {"copy-matching": copy_matching.build}},
    parsing_mapping.BUILDERS,
    parsing_copying_matching.BUILDERS,
    multihop.BUILDERS,
    composition.BUILDERS,
    group_tree.BUILDERS,
    reachability.BUILDERS,
)
COT_BUILDERS: tuple[dict[str, dict[str, Builder]], ...] = (composition.COT_BUILDERS,)


def _merged(tables) -> dict[str, dict[str, Builder]]:
    table: dict[str, dict[str, Builder]] = {}
    for member in tables:
        for task, variants in member.items():
            table.setdefault(task, {}).update(variants)
    return table


def _builders() -> dict[str, dict[str, Builder]]:
    return _merged(BUILDERS)


def cot_builders() -> dict[str, dict[str, Builder]]:
    """task -> {variant: builder} of the chain-of-thought models (the members' COT_BUILDERS)."""
    return _merged(COT_BUILDERS)


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


def builder_of(task: Task | str, variant: str | None = None) -> Builder:
    """The builder registered for the task (a Task or a task name) and the variant (None: the default)."""
    name = task if isinstance(task, str) else task.name
    table = _builders().get(name)
    if not table:
        raise BadInput(f"no construction for task {name!r}")
    if variant is None:
        variant = next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {name}; known: {', '.join(table)}")
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
