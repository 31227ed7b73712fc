"""Which construction proves which task: task -> variant -> builder.

A builder takes the task object and `as_printed` (True: the weights exactly as the paper
prints them; False: the smallest correct fix, identical to the printed ones when they work)
and returns a `Construction`.  The first variant listed for a task is its default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from depthcert.checkers.errors import BadInput
from depthcert.checkers.model import Model
from depthcert.checkers.tasks import Task


@dataclass(frozen=True)
class Construction:
    task: str
    variant: str
    theorem: str
    model: Model
    as_printed: bool
    description: str = ""
    notes: tuple[str, ...] = field(default=())
    readout: str = "paper"  # how W_O was made: "paper" (the construction's own read-out), "lemma3"
    # (Lemma 3's existence proof, followed literally) or "none" (W_O = 0, left for a fitted read-out)


Builder = Callable[[Task, bool], Construction]


# Modules that register builders with a BUILDERS = {task: {variant: builder}} table, in order
# (the first variant registered for a task is its default).  Every other module of this package
# that defines BUILDERS is found too, after these (so a new construction module registers itself).
ORDERED = ("parsing_mapping", "parsing_copying_matching", "multihop")


def _builders() -> dict[str, dict[str, Builder]]:
    import importlib
    import pkgutil

    import depthcert.constructions as package
    from depthcert.constructions import copy_matching, memorization

    table: dict[str, dict[str, Builder]] = {
        "sc": {"heads": memorization.build},
        "icqa": {"copy-matching": copy_matching.build},
    }
    others = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in ORDERED)
    for name in ORDERED + tuple(others):
        mod = importlib.import_module(f"depthcert.constructions.{name}")
        for task, variants in getattr(mod, "BUILDERS", {}).items():
            table.setdefault(task, {}).update(variants)
    return table


def variants(task: str) -> tuple[str, ...]:
    return tuple(_builders().get(task, {}))


def fits_readout(builder: Builder) -> bool:
    """Whether the builder's read-out is Lemma 3 (an existence proof, no read-out of the paper's
    own): such builders take `lemma3=False` and then leave W_O = 0 for a fitted read-out."""
    import inspect

    return "lemma3" in inspect.signature(builder).parameters


def builder_of(task: Task, variant: str | None = None) -> Builder:
    table = _builders().get(task.name)
    if not table:
        raise BadInput(f"no construction for task {task.name!r}")
    if variant is None:
        variant = next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {task.name}; known: {', '.join(table)}")
    return table[variant]


def build(task: Task, variant: str | None = None, as_printed: bool = False, lemma3: bool = True) -> Construction:
    """lemma3=False: a Lemma 3 construction is built without its classifier (W_O = 0, readout
    "none"), for proofs/readout.py to fit one; other constructions are built as usual."""
    if not lemma3:
        builder = builder_of(task, variant)
        if fits_readout(builder):
            return builder(task, as_printed, lemma3=False)
    table = _builders().get(task.name)
    if not table:
        raise BadInput(f"no construction for task {task.name!r}")
    if variant is None:
        variant = next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {task.name}; known: {', '.join(table)}")
    return table[variant](task, as_printed)
