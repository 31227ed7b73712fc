"""Train on the copy task and measure head redundancy two ways (OBSERVED, not proven).

Two model families:
  transformer     the standard softmax transformer with LayerNorm and MLP (training/copy_model.py),
                  as in the depth-and-heads study (shared/paper/related); AdamW.
  attention-only  depthcert's class (training/model.py: ReLU attention, no LayerNorm, no MLP)
                  with a causal mask and outputs at every position, which the exact checker accepts: `--exact-check`
                  rounds its weights and decides every input (training/copy_exact.py).

Redundancy ratio of a trained model, over all its heads:
  gradient   a head is "inactive" when the norm of the loss gradient with respect to its own
             parameters, on a fixed held-out batch after training, is below GRAD_REL of the
             largest head's (the study's definition, "gradient norm about 0", made scale-free);
  ablation   a head is redundant when zeroing its output (its gate) lowers held-out accuracy by
             less than ABLATE_DROP.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from depthcert.checkers.errors import BadInput
from depthcert.training.copy_task import IGNORE, CopyTask
from depthcert.training.train import seed_everything

ARCHS = ("transformer", "attention-only")
GRAD_REL = 0.05  # gradient-norm redundancy: norm < 5% of the model's largest head norm
ABLATE_DROP = 0.01  # ablation redundancy: accuracy drop < 1 percentage point
EVAL_SIZE = 512


@dataclass(frozen=True)
class CopyConfig:
    length: int = 8
    alphabet: int = 10
    noise: float = 0.0
    arch: str = "transformer"
    layers: int = 2
    heads: int = 4
    width: int = 64
    steps: int = 1000
    seed: int = 0
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_size: int = EVAL_SIZE

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise BadInput(f"unknown --arch {self.arch!r}; known: {', '.join(ARCHS)}")
        for name, low in (("layers", 1), ("heads", 1), ("width", 1), ("steps", 1), ("batch_size", 1),
                          ("eval_every", 1), ("eval_size", 1), ("warmup", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise BadInput(f"--{name.replace('_', '-')} must be an integer >= {low}, got {v!r}")
        if self.seed < 0:
            raise BadInput(f"--seed must be >= 0, got {self.seed}")
        if not (0 < self.lr < float("inf")):
            raise BadInput(f"--lr must be positive and finite, got {self.lr}")
        if not (self.grad_clip >= 0 and self.weight_decay >= 0):
            raise BadInput("--grad-clip and --weight-decay must be >= 0")
        self.task  # noqa: B018  (validates length, alphabet, noise)

    @property
    def task(self) -> CopyTask:
        return CopyTask(self.length, self.alphabet, self.noise)


@dataclass(frozen=True)
class CopyEval:
    step: int
    train_loss: float  # mean over the batches since the previous evaluation
    loss: float  # held-out, at the task's noise
    acc: float  # held-out token accuracy at the task's noise (labelled positions)
    clean_acc: float  # held-out token accuracy with noise 0


@dataclass
class CopyResult:
    config: CopyConfig
    evals: list
    seconds: float
    final: dict = field(default_factory=dict)
    redundancy: dict = field(default_factory=dict)
    exact_check: dict | None = None

    def to_json(self) -> dict:
        return {
            "status": "OBSERVED (trained, not proven)",
            "task": "copy",
            "config": asdict(self.config),
            "ceiling": self.config.task.ceiling,
            "seconds": round(self.seconds, 3),
            "final": self.final,
            "evals": [asdict(e) for e in self.evals],
            "redundancy": self.redundancy,
            **({"exact_check": self.exact_check} if self.exact_check else {}),
        }


def build_copy_model(config: CopyConfig, generator: torch.Generator):
    task = config.task
    if config.arch == "transformer":
        from depthcert.training.copy_model import CopyShape, CopyTransformer

        model = CopyTransformer(CopyShape(len(task.vocab), len(task.classes), task.seq_len, config.width,
                                          config.layers, config.heads))
        model.init_weights(generator)
        return model
    from depthcert.training.model import AttentionOnly, ModelShape, initialize

    width = max(config.width, len(task.vocab) + task.seq_len)
    model = AttentionOnly(ModelShape(len(task.vocab), task.seq_len, width, (config.heads,) * config.layers,
                                     len(task.classes), "relu", outputs="all", causal=True))
    initialize(model, generator, "normal", "identity", "normal", 0.02)
    return model


def _loss_acc(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    C = logits.shape[-1]
    loss = nn.functional.cross_entropy(logits.reshape(-1, C), labels.reshape(-1), ignore_index=IGNORE)
    mask = labels != IGNORE
    ok = int(((logits.argmax(-1) == labels) & mask).sum())
    return loss, ok, int(mask.sum())


def evaluate_copy(model, ids: np.ndarray, labels: np.ndarray, batch: int = 1024) -> tuple[float, float]:
    """(mean loss over labelled positions, token accuracy) on a fixed set."""
    tot, ok, cnt = 0.0, 0, 0
    with torch.no_grad():
        for lo in range(0, len(ids), batch):
            x, y = torch.as_tensor(ids[lo:lo + batch]), torch.as_tensor(labels[lo:lo + batch])
            loss, o, c = _loss_acc(model(x), y)
            tot += float(loss) * c
            ok += o
            cnt += c
    return tot / cnt, ok / cnt


def redundancy(model, config: CopyConfig, ev_noisy, ev_clean) -> dict:
    """Per-head gradient norms and ablation drops, and the two redundancy ratios."""
    if config.arch != "transformer":
        return {}
    ids, labels = (torch.as_tensor(a) for a in ev_noisy)
    model.zero_grad()
    loss, _, _ = _loss_acc(model(ids), labels)
    loss.backward()
    norms = model.head_grad_norms()
    model.zero_grad()
    flat = [g for layer in norms for g in layer]
    top = max(flat) if flat else 0.0
    inactive = [[g < GRAD_REL * top for g in layer] for layer in norms]
    _, base = evaluate_copy(model, *ev_clean)
    drops = []
    for li, layer in enumerate(norms):
        row = []
        for hi in range(len(layer)):
            model.set_gate(li, hi, 0.0)
            _, acc = evaluate_copy(model, *ev_clean)
            model.set_gate(li, hi, 1.0)
            row.append(base - acc)
        drops.append(row)
    total = len(flat)
    by_grad = sum(map(sum, inactive)) / total
    by_ablation = sum(d < ABLATE_DROP for row in drops for d in row) / total
    return {
        "heads_total": total,
        "grad_norms": norms,
        "grad_rel_threshold": GRAD_REL,
        "ratio_grad": by_grad,
        "ablation_base_acc": base,
        "ablation_drops": drops,
        "ablation_threshold": ABLATE_DROP,
        "ratio_ablation": by_ablation,
        "max_single_drop": max(d for row in drops for d in row),
        "grad_over_max_median": float(np.median([g / top for g in flat])) if top > 0 else None,
    }


def train_copy(config: CopyConfig, progress: bool = False):
    """One run; returns (CopyResult, model)."""
    gen = seed_everything(config.seed)
    task = config.task
    rng = np.random.default_rng(config.seed)
    eval_rng = np.random.default_rng(10_000 + config.seed)  # held-out sets: their own stream
    ev_noisy = task.sample(eval_rng, config.eval_size)[:2]
    ev_clean = task.sample(eval_rng, config.eval_size, noise=0.0)[:2]
    model = build_copy_model(config, gen)
    if config.arch == "transformer":
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        other = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                 {"params": other, "weight_decay": 0.0}], lr=config.lr, betas=(0.9, 0.98))
    else:
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, config.warmup)))
    bar = None
    if progress:
        from depthcert.training.progress import Progress

        bar = Progress(config.steps, f"copy n={config.length} L={config.layers} H={config.heads} d={config.width}")
    evals, window = [], []
    t0 = time.perf_counter()
    for step in range(1, config.steps + 1):
        ids, labels, _ = task.sample(rng, config.batch_size)
        loss, _, _ = _loss_acc(model(torch.as_tensor(ids)), torch.as_tensor(labels))
        opt.zero_grad()
        loss.backward()
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        sched.step()
        window.append(float(loss.detach()))
        if step % config.eval_every == 0 or step == config.steps:
            el, ea = evaluate_copy(model, *ev_noisy)
            _, ca = evaluate_copy(model, *ev_clean)
            evals.append(CopyEval(step, float(np.mean(window)), el, ea, ca))
            window = []
            if bar is not None:
                bar.set_postfix(loss=f"{el:.3f}", acc=f"{ea:.3f}", clean=f"{ca:.3f}")
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    f = evals[-1]
    final = {"step": f.step, "loss": f.loss, "acc": f.acc, "clean_acc": f.clean_acc, "ceiling": task.ceiling,
             "steps_to_90pct_of_ceiling": next((e.step for e in evals if e.acc >= 0.9 * task.ceiling), None)}
    result = CopyResult(config, evals, seconds, final)
    result.redundancy = redundancy(model, config, ev_noisy, ev_clean)
    return result, model


def exact_check_copy(model, config: CopyConfig, bits: int | None) -> dict:
    """An attention-only copy model as exact rationals (its float32 weights, or rounded to multiples
    of 2^-bits); depthcert.verify on every clean input."""
    from depthcert.training.copy_exact import verify_weights
    from depthcert.training.export import to_exact

    if config.arch != "attention-only":
        raise BadInput("--exact-check needs --arch attention-only: the standard transformer has LayerNorm "
                       "and GELU, which depthcert's exact checker does not support")
    task = config.task
    if task.size > 200_000:
        raise BadInput(f"--exact-check: the copy task has {task.size} inputs; at most 200000 are checked")
    exact = to_exact(model, task, bits)
    v = verify_weights(exact, config.length, config.alphabet)
    ce = v.counterexample
    return {
        "status": "EXACT for " + ("the trained float32 weights" if bits is None else "these rounded weights")
                  + " (depthcert.verify), every clean input of the copy task",
        "bits": bits, "verdict": v.verdict, "points": v.points_total, "checked": v.points_checked,
        "min_margin": str(v.min_margin) if v.min_margin is not None else None,
        "counterexample": None if ce is None else {"tokens": list(ce.tokens), "position": ce.position,
                                                    "expected": ce.expected, "predicted": ce.predicted},
        "evaluator": v.path,
    }
