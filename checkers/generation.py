"""verify_generation(model, task): multi-step autoregressive generation, checked exactly on
every input and every step.

A generation task is a prompt task (a Task with one label per point; its sequences are the
prompts, length P) with `cot_steps(index) -> (B, S)`: the class ids of the expected tokens
v_1 .. v_S, v_S being the point's label.  Every class must be a token of the vocabulary (the
generated token is the vocabulary token named like the class).  The autoregressive run on a
prompt p: step s feeds p + g_1 .. g_{s-1} to the model and reads the logits at its last
position; step s is correct iff v_s's logit is strictly above every other one (ties fail), and
g_s is then v_s.  A point is correct iff every step is; its margin is the minimum over its steps
up to and including its first wrong one (after a wrong step the run has left the expected
sequence: later steps are not part of the verdict).

Claim (causal teacher forcing).  If every layer of the model is causal, checking the single
teacher-forced sequence T = p + v_1 .. v_{S-1} (length P + S - 1), step s at position
P + s - 2, gives exactly the verdict, the first failing step and the margins of the
autoregressive run.
Proof.  (a) In a causal model column t of every layer depends only on tokens 0..t: H0's column t
is the embedding of token t at position t (and the constant row); a causal attention sublayer
computes query t from the scores and values of keys j <= t only (masked relu weights are 0, the
hardmax maximum and the softmax sum run over j <= t), all read from columns <= t of the
previous layer; an MLP acts column by column.  Induction on the layers.  (b) Induction on s:
if steps 1 .. s-1 of the run are correct, each generated g_j is exactly v_j (a strict argmax
picks the label), so the input of step s is T's prefix of length P + s - 1, and by (a) the
logits at its last position are those at position P + s - 2 of the one pass over T.  So the
first step failing under teacher forcing is the first wrong step of the run (same logits, same
margin), and if none fails every step of the run is correct with the same margins.  Positions
after a point's first failure are ignored, as in the run.  For softmax models a step decided
"correct" certifies that the argmax is v_s, so the same induction holds; a point's run stops at
its first wrong or undecided step (after an undecided step the generated token is unknown).
tests/test_generation.py checks the claim against a literal autoregressive loop.

Models with a layer that is not causal: (a) fails (an earlier column can read a later token), so
each prefix p + v_1 .. v_{s-1} is run separately and its last position read: the same induction
without (a).

The verdict has the semantics of checkers/exhaustive.verify (strict argmax, exact margins over
the model's common denominator, points in index order, the first failing point as the
counterexample, which names the failing step); each step is checked by exhaustive.check_batch.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.evaluate import Evaluator
from depthcert.checkers.exhaustive import (Counterexample, UndecidedPoint, Verdict, check_batch, check_compatible,
                                           token_rows)
from depthcert.checkers.model import Model
from depthcert.checkers.tasks.base import UNLABELLED, Batch, Task

TEACHER_FORCED = "teacher-forced"
PREFIX = "prefix by prefix"


def is_causal(model: Model) -> bool:
    """Every layer has the causal mask (a model without layers is causal too)."""
    return all(layer.causal for layer in model.layers)


def step_tokens(task: Task) -> np.ndarray:
    """class id -> token id of the token the model generates for it."""
    if not hasattr(task, "cot_steps"):
        raise BadInput(f"task {task.name} defines no generation steps (chain of thought)")
    if getattr(task, "outputs", "last") != "last":
        raise BadInput(f"task {task.name} labels every position; a generation task labels its prompts")
    index = {t: i for i, t in enumerate(task.vocab)}
    missing = [c for c in task.classes if c not in index]
    if missing:
        raise BadInput(f"class {missing[0]!r} of task {task.name} is not a token: generation cannot append it")
    return np.array([index[c] for c in task.classes], dtype=np.int64)


def n_steps(task: Task) -> int:
    return int(task.cot_steps(np.zeros(1, dtype=np.int64)).shape[1])


class TeacherForced(Task):
    """The per-position task of a generation task: prompt + v_1 .. v_{S-1}, the label v_s at
    position P + s - 2 (s = 1 .. S), every prompt position before P - 1 unlabelled."""

    def __init__(self, task: Task):
        self.base = task
        self._tok = step_tokens(task)
        self.S = n_steps(task)
        self.P = task.length
        self.name, self.theorem = task.name, task.theorem
        self.vocab, self.classes = task.vocab, task.classes
        self.length = self.P + self.S - 1
        self.size, self.params = task.size, dict(task.params)
        self.outputs = "all"

    @property
    def size_formula(self) -> str:
        return self.base.size_formula

    def sequences(self, index) -> tuple[np.ndarray, np.ndarray]:
        """(T (B, P + S - 1) token ids, steps (B, S) class ids)."""
        prompt, _ = self.base.decode(index)
        steps = np.asarray(self.base.cot_steps(index), dtype=np.int64)
        if steps.shape != (len(prompt), self.S):
            raise RuntimeError(f"task {self.name}: cot_steps gave shape {steps.shape}, expected {(len(prompt), self.S)}")
        return np.concatenate([prompt, self._tok[steps[:, :-1]]], axis=1), steps

    def decode(self, index):
        ids, steps = self.sequences(index)
        labels = np.full(ids.shape, UNLABELLED, dtype=np.int64)
        labels[:, self.P - 1:] = steps
        return ids, labels

    def render(self, tokens) -> str:
        return self.base.render(tokens)


class Prefix(Task):
    """Step s of a generation task as a last-position task: prompt + v_1 .. v_{s-1}, label v_s."""

    def __init__(self, task: Task, s: int):
        self.tf = TeacherForced(task)
        if not 1 <= s <= self.tf.S:
            raise BadInput(f"step {s} is outside 1 .. {self.tf.S}")
        self.s = s
        self.name, self.theorem = task.name, task.theorem
        self.vocab, self.classes = task.vocab, task.classes
        self.length = self.tf.P + s - 1
        self.size, self.params = task.size, dict(task.params)

    def decode(self, index):
        ids, steps = self.tf.sequences(index)
        return ids[:, : self.length], steps[:, self.s - 1]

    def render(self, tokens) -> str:
        return self.tf.base.render(tokens)


@dataclass(frozen=True)
class GenerationVerdict:
    """The verdict over prompts (points = prompts), plus what the run generated."""

    verdict: Verdict  # counterexample.position = the failing step's position in T
    steps: int  # S, tokens generated per prompt
    mode: str  # TEACHER_FORCED or PREFIX
    failing_step: int | None = None  # 1-based step of the counterexample
    undecided_step: int | None = None  # 1-based step of the first undecided point

    @property
    def verified(self) -> bool:
        return self.verdict.verified

    @property
    def status(self) -> str:
        return self.verdict.verdict


class _Fixed:
    """An evaluator stand-in returning logits already computed (one step's position of the
    teacher-forced pass), so that check_batch decides each step."""

    def __init__(self, num, den):
        self.num, self.den = num, den

    def logits(self, ids):
        return self.num, self.den


def check_model(model: Model, task: Task) -> tuple[np.ndarray, np.ndarray | None, TeacherForced]:
    """(class rows, token rows or None, the teacher-forced task); BadInput when the model cannot
    run the generation (vocabulary, classes, positions)."""
    tf = TeacherForced(task)
    class_map = check_compatible(model, task)
    if model.max_length < tf.length:
        raise BadInput(f"model has {model.max_length} positions but generating {tf.S} tokens after a prompt of "
                       f"{tf.P} needs {tf.length}")
    rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    return rows, token_rows(model, tf), tf


def step_margins(ev: Evaluator, tf: TeacherForced, index: np.ndarray, rows: np.ndarray, tokens, causal: bool):
    """(T ids, steps, margins (B, S) numerators over ev.denominator (None entries: one class),
    numerators per step [(B, C)]) for the prompts `index`."""
    ids, steps = tf.sequences(index)
    B, S, P = len(index), tf.S, tf.P
    M = np.empty((B, S), dtype=object)
    nums = []
    if causal:
        num_all, den = ev.logits_all(ids if tokens is None else tokens[ids])
    for s in range(1, S + 1):
        batch = Batch(index, ids[:, : P + s - 1], steps[:, s - 1])
        if causal:
            fixed = _Fixed(num_all[:, P + s - 2, :], den)
            margins, _, _, num, _ = check_batch(fixed, batch, rows)
        else:
            margins, _, _, num, _ = check_batch(ev, batch, rows, tokens)
        M[:, s - 1] = margins
        nums.append(num)
    if B and M[0, 0] is not None and all(num.dtype != object for num in nums):
        M = M.astype(np.int64)  # the float64 path: exact integers (checkers/evaluate.py)
    return ids, steps, M, nums


def verify_generation(model: Model, task: Task, batch_size: int = 2048, progress: bool | None = None,
                      force_exact: bool = False, balls: dict | None = None) -> GenerationVerdict:
    """Check every step of the autoregressive run on every prompt of `task` (module docstring)."""
    t0 = time.perf_counter()
    rows, tokens, tf = check_model(model, task)
    causal = is_causal(model)
    mode = TEACHER_FORCED if causal else PREFIX
    note = (f"generation: {tf.S} step(s) per prompt; " +
            ("every layer causal: one teacher-forced pass per prompt (checkers/generation.py)" if causal
             else "a layer is not causal: every prefix run separately"))
    if model.has_softmax:
        return _verify_balls(model, tf, rows, tokens, causal, batch_size, progress, force_exact, t0, note, mode,
                             **(balls or {}))
    ev = Evaluator(model, force_exact=force_exact)
    bar = _bar(progress, task)
    checked, min_num, counter, fail_step = 0, None, None, None
    for lo in range(0, task.size, batch_size):
        index = np.arange(lo, min(task.size, lo + batch_size), dtype=np.int64)
        ids, steps, M, nums = step_margins(ev, tf, index, rows, tokens, causal)
        if M[0, 0] is None:  # a single class: nothing to compare, every step correct
            checked += len(index)
            continue
        fail = np.asarray(M <= 0, dtype=bool)  # (B, S)
        failed = np.nonzero(fail.any(axis=1))[0]
        bad_point = int(failed[0]) if len(failed) else -1
        upto = len(index) if bad_point < 0 else bad_point
        if upto:
            m = M[:upto].min()
            min_num = m if min_num is None else min(min_num, m)
        if bad_point >= 0:  # its margin: the steps up to and including its first failing one
            bad_step = int(fail[bad_point].argmax())
            m = M[bad_point, : bad_step + 1].min()
            min_num = m if min_num is None else min(min_num, m)
        if bad_point < 0:
            checked += len(index)
            if bar is not None:
                bar.update(len(index))
            continue
        checked += bad_point + 1
        counter = _counterexample(model, tf, index[bad_point], ids[bad_point], steps[bad_point], bad_step,
                                  nums[bad_step][bad_point], ev.denominator, rows)
        fail_step = bad_step + 1
        break
    if bar is not None:
        bar.close()
    min_margin = None if min_num is None else Fraction(int(min_num), ev.denominator)
    v = Verdict(task.name, task.size, checked, checked, min_margin, counter, ev.path, time.perf_counter() - t0,
                (note,))
    return GenerationVerdict(v, tf.S, mode, fail_step)


def _bar(progress, task):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=task.size, unit="pt", desc=f"verify {task.name} generation", leave=False, file=sys.stderr)


def _counterexample(model, tf: TeacherForced, index, ids, steps, s0: int, num_row, den, rows) -> Counterexample:
    """Step s0 + 1 (0-based s0) of prompt `index` fails: the sequence up to its position."""
    pos = tf.P - 1 + s0
    row = [int(v) for v in num_row]
    exp_row = int(rows[int(steps[s0])])
    pred = max((i for i in range(len(row)) if i != exp_row), key=lambda i: row[i])
    tokens = tuple(tf.vocab[t] for t in ids[: pos + 1])
    return Counterexample(int(index), tokens, tf.classes[int(steps[s0])], model.classes[pred],
                          tuple(Fraction(v, den) for v in row), row[pred] == row[exp_row], tuple(model.classes), pos)


def _verify_balls(model, tf: TeacherForced, rows, tokens, causal, batch_size, progress, force_exact, t0, note, mode,
                  start_precision: int | None = None, max_precision: int | None = None) -> GenerationVerdict:
    """Softmax models: every step of every prompt decided in certified balls, in step order; a
    point stops at its first wrong or undecided step; the first wrong point (index order) refutes."""
    from depthcert.checkers import softmax_balls as sb

    decider = sb.SoftmaxDecider(model, start_precision or sb.START_PRECISION, max_precision or sb.MAX_PRECISION)
    prefix = Evaluator(decider.prefix_model(), force_exact=force_exact)
    task = tf.base
    P, S = tf.P, tf.S
    bar = _bar(progress, task)
    low = high = None
    unknown = False
    checked, wrong, undecided, n_undecided = 0, None, None, 0
    for lo in range(0, task.size, batch_size):
        index = np.arange(lo, min(task.size, lo + batch_size), dtype=np.int64)
        ids, steps = tf.sequences(index)
        mids = ids if tokens is None else tokens[ids]
        if causal:
            H_all, den = prefix.logits_all(mids)  # causal: column t of the prefix stream is that of the prefix run
        for b in range(len(index)):
            checked += 1
            for s in range(1, S + 1):
                n = P + s - 1
                if causal:
                    H = H_all[b, :n]
                else:
                    H, den = prefix.logits_all(mids[b: b + 1, :n])
                    H = H[0]
                d = decider.decide(H, den, [(n - 1, int(rows[int(steps[b, s - 1])]))])
                if d.margin is None:
                    unknown = unknown or d.status != "correct"
                else:
                    low = d.margin[0] if low is None else min(low, d.margin[0])
                    high = d.margin[1] if high is None else min(high, d.margin[1])
                if d.status == "correct":
                    continue
                if d.status == "undecided":
                    n_undecided += 1
                    if undecided is None:
                        undecided = (int(index[b]), ids[b], steps[b], s, d)
                else:
                    wrong = (int(index[b]), ids[b], steps[b], s, d)
                break
            if wrong is not None:
                break
        if bar is not None:
            bar.update(len(index))
        if wrong is not None:
            break
    if bar is not None:
        bar.close()
    counter = undec = None
    if wrong is not None:
        i, ids_b, steps_b, s, d = wrong
        pos = P + s - 2
        counter = Counterexample(i, tuple(tf.vocab[t] for t in ids_b[: pos + 1]), tf.classes[int(steps_b[s - 1])],
                                 model.classes[d.other], (), d.tie, tuple(model.classes), pos, d.logits)
    if undecided is not None:
        i, ids_b, steps_b, s, d = undecided
        pos = P + s - 2
        other = model.classes[d.other] if d.other >= 0 else "unknown (an argmax after a softmax layer)"
        undec = UndecidedPoint(i, tuple(tf.vocab[t] for t in ids_b[: pos + 1]), tf.classes[int(steps_b[s - 1])], pos,
                               other, d.margin, d.precision, d.logits, tuple(model.classes))
    bits = sorted(decider.precisions_used)
    path = (f"certified balls (arb, {bits[0]}" + (f"-{bits[-1]}" if len(bits) > 1 else "") + " bits)") if bits \
        else "certified balls (arb)"
    enclosure = None if (unknown or low is None) else (low, high)
    v = Verdict(task.name, task.size, checked, checked, None, counter, path, time.perf_counter() - t0, (note,),
                undec, n_undecided, enclosure)
    return GenerationVerdict(v, S, mode, None if wrong is None else wrong[3], None if undecided is None else undecided[3])
