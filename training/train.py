"""Train the attention-only transformer on a task with SGD + cross-entropy (paper appendix 9.1).

Everything trained here is OBSERVED behaviour of one optimisation run, not a proof.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import Task, make_task
from depthcert.training.data import Sampler, split_for
from depthcert.training.model import AttentionOnly, ModelShape, construction_qk, initialize, parsing_qk

OPTIMIZERS = ("sgd", "adam")
TORCH_THREADS = 1  # fixed thread count: CPU reductions are then done in one fixed order


def seed_everything(seed: int) -> torch.Generator:
    """Make a CPU run a function of its seed: Python, NumPy and torch seeded, deterministic
    algorithms only (an op without a deterministic kernel raises instead of varying), one torch
    thread.  Returns a torch generator seeded with `seed` for the initialisation."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # only read by CUDA builds
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(TORCH_THREADS)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def parse_heads(value) -> int | tuple[int, ...]:
    """--heads 4 (every layer) or --heads 1,1,4 (per layer, the paper's [h1, h2, ...])."""
    if isinstance(value, (int, tuple)):
        return value
    parts = [p.strip() for p in str(value).strip("[]").split(",") if p.strip()]
    try:
        got = tuple(int(p) for p in parts)
    except ValueError:
        raise BadInput(f"--heads must be an integer or a comma-separated list of integers, got {value!r}") from None
    if not got:
        raise BadInput("--heads is empty")
    return got[0] if len(got) == 1 else got


@dataclass(frozen=True)
class TrainConfig:
    """One training run.  task_options are the make_task keyword options (None = default)."""

    task: str
    layers: int = 2
    heads: int | tuple[int, ...] = 1  # every layer, or one count per layer (paper appendix 9.2)
    width: int | None = None  # d'; default vocabulary + positions (no padding), as in the paper
    steps: int = 1000
    seed: int = 0
    batch_size: int = 64
    lr: float = 0.02
    momentum: float = 0.9
    optimizer: str = "sgd"
    attention: str = "relu"
    qk_init: str = "normal"
    v_init: str = "identity"
    out_init: str = "normal"
    init_scale: float = 0.02
    construction_variant: str | None = None
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_size: int = 1000
    task_options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        if isinstance(self.heads, (tuple, list)):
            object.__setattr__(self, "heads", tuple(self.heads))
            if len(self.heads) != self.layers:
                raise BadInput(f"--heads lists {len(self.heads)} layers but --layers is {self.layers}")
            if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.heads):
                raise BadInput(f"every layer needs an integer number of heads >= 1, got {list(self.heads)}")
        for name, low in (("layers", 1), ("steps", 1), ("batch_size", 1), ("eval_every", 1), ("eval_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise BadInput(f"--{name.replace('_', '-')} must be an integer >= {low}, got {v!r}")
        if self.seed < 0:
            raise BadInput(f"--seed must be >= 0, got {self.seed}")
        if not (self.lr > 0 and self.lr < float("inf")):
            raise BadInput(f"--lr must be positive and finite, got {self.lr}")
        if not (self.init_scale >= 0 and self.init_scale < float("inf")):
            raise BadInput(f"--init-scale must be a finite number >= 0, got {self.init_scale}")
        if not (self.grad_clip >= 0 and self.momentum >= 0):
            raise BadInput("--grad-clip and --momentum must be >= 0")
        if self.optimizer not in OPTIMIZERS:
            raise BadInput(f"unknown --optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")

        if not isinstance(self.heads, tuple) and (isinstance(self.heads, bool) or not isinstance(self.heads, int)
                                                  or self.heads < 1):
            raise BadInput(f"--heads must be an integer >= 1, got {self.heads!r}")

    def options(self) -> dict:
        return dict(self.task_options)

    @property
    def layer_heads(self) -> tuple[int, ...]:
        """Heads per layer."""
        return self.heads if isinstance(self.heads, tuple) else (self.heads,) * self.layers


@dataclass(frozen=True)
class EvalPoint:
    step: int
    train_loss: float  # mean over the last eval_every training batches
    train_acc: float
    test_loss: float
    test_acc: float


@dataclass(frozen=True)
class TrainResult:
    config: TrainConfig
    task_params: dict
    shape: ModelShape
    split: str
    steps: tuple[tuple[int, float, float], ...]  # (step, batch loss, batch accuracy) every step
    evals: tuple[EvalPoint, ...]
    seconds: float
    diverged: bool = False
    notes: tuple[str, ...] = field(default=())
    eval_points: int = 0  # size of the held-out evaluation set

    @property
    def final(self) -> EvalPoint:
        return self.evals[-1]

    def to_json(self) -> dict:
        return {
            "status": "OBSERVED (trained, not proven)",
            "config": {**asdict(self.config), "task_options": self.config.options()},
            "task_params": self.task_params,
            "model": asdict(self.shape),
            "split": self.split,
            "seconds": round(self.seconds, 3),
            "diverged": self.diverged,
            "final": asdict(self.final),
            "evals": [asdict(e) for e in self.evals],
            "steps": [{"step": s, "loss": lo, "acc": ac} for s, lo, ac in self.steps],
            "notes": list(self.notes),
            "eval_points": self.eval_points,
        }


def build_task(config: TrainConfig) -> Task:
    return make_task(config.task, **config.options())


def build_model(config: TrainConfig, task: Task, generator: torch.Generator) -> AttentionOnly:
    """A freshly initialised model for the task (layer 1 W_QK from the construction if asked)."""
    width = config.width if config.width is not None else len(task.vocab) + task.length
    shape = ModelShape(len(task.vocab), task.length, width, config.layer_heads, len(task.classes), config.attention)
    model = AttentionOnly(shape)
    first = None
    if config.qk_init == "construction":
        from depthcert import constructions

        cons = constructions.build(task, config.construction_variant, as_printed=False)
        if tuple(cons.model.vocab) != tuple(task.vocab) or cons.model.max_length != task.length:
            raise BadInput(f"the {task.name} construction uses a different vocabulary or length than the task")
        first = construction_qk(cons.model, width)
    elif config.qk_init == "parsing":
        first = parsing_qk(task, width)
    initialize(model, generator, config.qk_init, config.v_init, config.out_init, config.init_scale, first)
    return model


def evaluate(model: AttentionOnly, ids: np.ndarray, labels: np.ndarray, batch: int = 2048) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on a fixed set."""
    tot_loss, tot_ok = 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(ids), batch):
            x = torch.as_tensor(ids[lo : lo + batch])
            y = torch.as_tensor(labels[lo : lo + batch])
            out = model(x)
            tot_loss += float(nn.functional.cross_entropy(out, y, reduction="sum"))
            tot_ok += int((out.argmax(1) == y).sum())
    return tot_loss / len(ids), tot_ok / len(ids)


def train(config: TrainConfig, progress: bool = False, task: Task | None = None) -> tuple[TrainResult, AttentionOnly]:
    """Run one training job; returns the result (history) and the trained model."""
    gen = seed_everything(config.seed)
    task = task or build_task(config)
    rng = np.random.default_rng(config.seed)
    model = build_model(config, task, gen)
    sampler = Sampler(task, rng)
    _, ev_x, ev_y = sampler.eval_set(config.eval_size)
    if config.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    steps, evals = [], []
    window = []
    diverged = False
    bar = None
    if progress:
        from depthcert.training.progress import Progress

        heads = ",".join(map(str, config.layer_heads))
        bar = Progress(config.steps, f"{task.name} L={config.layers} H={heads} seed={config.seed}")
    t0 = time.perf_counter()
    for step in range(1, config.steps + 1):
        _, x, y = sampler.train_batch(config.batch_size)
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        if not torch.isfinite(loss):
            diverged = True
        else:
            opt.zero_grad()
            loss.backward()
            if config.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            opt.step()
        acc = float((out.argmax(1) == y).float().mean())
        lval = float(loss.detach()) if not diverged else float("nan")
        steps.append((step, lval, acc))
        window.append((lval, acc))
        if step % config.eval_every == 0 or step == config.steps or diverged:
            tl, ta = (evaluate(model, ev_x, ev_y) if not diverged else (float("nan"), 0.0))
            evals.append(
                EvalPoint(step, float(np.mean([w[0] for w in window])), float(np.mean([w[1] for w in window])), tl, ta)
            )
            window = []
            if bar is not None:
                bar.set_postfix(loss=f"{tl:.3f}", acc=f"{ta:.3f}")
        if bar is not None:
            bar.update(1)
        if diverged:
            break
    if bar is not None:
        bar.close()
    notes = ("diverged (non-finite loss); stopped",) if diverged else ()
    result = TrainResult(
        config,
        dict(task.params),
        model.shape,
        split_for(task).description,
        tuple(steps),
        tuple(evals),
        time.perf_counter() - t0,
        diverged,
        notes,
        len(ev_y),
    )
    return result, model
