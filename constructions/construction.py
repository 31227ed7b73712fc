"""What a builder returns: a `Construction` (the model, the theorem it proves, how it was built).

A builder takes the task object and `as_printed` (True: the weights exactly as the paper
prints them; False: the smallest correct fix, identical to the printed ones when they work).
Member modules import this module, never the registry, so the registry can import them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from depthcert.checkers.model import Model
from depthcert.checkers.tasks.base import Task


@dataclass(frozen=True)
class Construction:
    task: str
    variant: str
    theorem: str
    model: Model | None  # None only for a symbolic build (constructions/indexed.py)
    as_printed: bool
    description: str = ""
    notes: tuple[str, ...] = field(default=())
    readout: str = "paper"  # how W_O was made: "paper" (the construction's own read-out), "lemma3"
    # (Lemma 3's existence proof, followed literally) or "none" (W_O = 0, left for a fitted read-out)
    # the construction for every size (constructions/indexed.SymbolicModel) when the builder is
    # written with set-indexed blocks; `model` is then that object instantiated at the task's sizes
    symbolic: object = None


Builder = Callable[[Task, bool], Construction]
