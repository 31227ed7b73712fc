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


Builder = Callable[[Task, bool], Construction]


def _builders() -> dict[str, dict[str, Builder]]:
    from depthcert.constructions import copy_matching, memorization

    table: dict[str, dict[str, Builder]] = {
        "sc": {"heads": memorization.build},
        "icqa": {"copy-matching": copy_matching.build},
    }
    for extra in ("depthcert.constructions.parsing_mapping", "depthcert.constructions.parsing_copying_matching", "depthcert.constructions.multihop"):
        try:
            mod = __import__(extra, fromlist=["BUILDERS"])
        except ModuleNotFoundError as exc:
            if exc.name != extra:
                raise
            continue
        for task, variants in mod.BUILDERS.items():
            table.setdefault(task, {}).update(variants)
    return table


def variants(task: str) -> tuple[str, ...]:
    return tuple(_builders().get(task, {}))


def build(task: Task, variant: str | None = None, as_printed: bool = False) -> Construction:
    table = _builders().get(task.name)
    if not table:
        raise BadInput(f"no construction for task {task.name!r}")
    if variant is None:
        variant = next(iter(table))
    if variant not in table:
        raise BadInput(f"unknown --variant {variant!r} for {task.name}; known: {', '.join(table)}")
    return table[variant](task, as_printed)
