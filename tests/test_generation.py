"""checkers/generation.py: exact verification of autoregressive generation.

The claim under test: for a model that is causal in every layer, one teacher-forced pass per
prompt gives exactly the verdict, first failing (prompt, step) and margins of the literal
autoregressive run; for other models every prefix is run.  The reference here is a literal loop:
run the model (checkers/trace.py, Fractions) on the prompt, take the strict argmax at the last
position, append the generated token, run again."""
from __future__ import annotations

import itertools
import random
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers import generation
from depthcert.checkers.tasks.composition import Composition
from depthcert.checkers.errors import BadInput
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.generation import Prefix, TeacherForced, verify_generation
from depthcert.checkers.layout import BlockMatrix, Layout
from depthcert.checkers.model import MLP, Head, Layer, Model
from depthcert.checkers.tasks import Task
from depthcert.checkers.trace import trace
from depthcert.constructions.composition import build_cot

TOKENS = ("a", "b", "c")


class Toy(Task):
    """Prompts: every sequence of length P over a b c.  Steps: v_1 = last prompt token,
    v_{s+1} = the prompt token at position s mod P (so later steps depend on the prompt)."""

    name = "toy"

    def __init__(self, P: int = 2, S: int = 3):
        self.P, self.S = P, S
        self.vocab = self.classes = TOKENS
        self.length = P
        self.size = 3**P
        self.params = {"P": P, "S": S}

    def decode(self, index):
        index = np.asarray(index, dtype=np.int64)
        ids = np.array([list(np.unravel_index(i, (3,) * self.P)) for i in index], dtype=np.int64).reshape(len(index), self.P)
        return ids, self.cot_steps(index)[:, -1]

    def cot_steps(self, index):
        ids = np.array([list(np.unravel_index(i, (3,) * self.P)) for i in np.asarray(index)], dtype=np.int64)
        out = np.empty((len(ids), self.S), dtype=np.int64)
        out[:, 0] = ids[:, -1]
        for s in range(1, self.S):
            out[:, s] = ids[:, s % self.P]
        return out


def literal_run(model: Model, task) -> tuple[str, int | None, int | None, Fraction | None]:
    """(verdict, first failing point, its step, min margin up to it) by generating token by token."""
    tok = {c: c for c in task.classes}
    min_margin, steps_all = None, task.cot_steps(np.arange(task.size))
    for i in range(task.size):
        seq = list(task.point(i).tokens)
        for s in range(1, steps_all.shape[1] + 1):
            logits = trace(model, seq).logits
            y = model.classes.index(task.classes[steps_all[i, s - 1]])
            margin = logits[y] - max(q for c, q in enumerate(logits) if c != y)
            min_margin = margin if min_margin is None else min(min_margin, margin)
            if margin <= 0:
                return "refuted", i, s, min_margin
            seq.append(tok[model.classes[logits.index(max(logits))]])  # the generated token
    return "verified", None, None, min_margin


def checked(model, task):
    g = verify_generation(model, task, progress=False)
    ce = g.verdict.counterexample
    return g.status, None if ce is None else ce.index, g.failing_step, g.verdict.min_margin


def random_model(rng: random.Random, task, causal: bool, max_length: int) -> Model:
    lay = Layout.of(("token", 3), ("position", max_length), ("s", 3))
    d = lay.dim

    def mat(rows, cols, p=0.3):
        M = np.full((rows, cols), Fraction(0), dtype=object)
        for idx in itertools.product(range(rows), range(cols)):
            if rng.random() < p:
                M[idx] = Fraction(rng.choice((-2, -1, 1, 2)), rng.choice((1, 2)))
        return M

    layers = []
    for _ in range(rng.choice((1, 2))):
        heads = tuple(Head(mat(d, d), mat(d, d), attention=rng.choice(("relu", "hardmax")))
                      for _ in range(rng.choice((1, 2))))
        mlp = None
        if rng.random() < 0.3:
            mlp = MLP(mat(2, d), mat(2, 1)[:, 0], mat(d, 2), mat(d, 1)[:, 0])
        layers.append(Layer(heads, causal=causal, mlp=mlp))
    W_O = mat(3, d, 0.5)
    return Model(TOKENS, max_length, TOKENS, lay, tuple(layers), W_O, outputs=rng.choice(("all", "last")))


def mutated_cot(rng: random.Random, task: Composition) -> Model:
    """The composition chain-of-thought model with one weight nudged (often a late-step failure)."""
    m = build_cot(task).model
    W = m.layers[0][0].W_QK if rng.random() < 0.6 else m.layers[0][0].W_V
    key = "W_QK" if W is m.layers[0][0].W_QK else "W_V"
    nz = [idx for idx in itertools.product(*map(range, W.shape)) if W[idx] != 0]
    i, j = rng.choice(nz) if rng.random() < 0.7 else (rng.randrange(W.shape[0]), rng.randrange(W.shape[1]))
    return m.with_weight((0, 0, key, i, j), W[i, j] + rng.choice((-1, 1, Fraction(1, 2))))


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_teacher_forcing_equals_the_literal_autoregressive_run(seed, mutate_cot):
    rng = random.Random(seed)
    if mutate_cot:
        task = Composition(2, 2)
        model = mutated_cot(rng, task)
    else:
        task = Toy(2, 3)
        model = random_model(rng, task, causal=True, max_length=4)
    assert generation.is_causal(model)
    assert checked(model, task) == literal_run(model, task)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**9))
def test_prefix_mode_equals_the_literal_run_for_models_that_are_not_causal(seed):
    rng = random.Random(seed)
    task = Toy(2, 3)
    model = random_model(rng, task, causal=False, max_length=4)
    if generation.is_causal(model):
        return
    g = verify_generation(model, task, progress=False)
    assert g.mode == generation.PREFIX
    assert checked(model, task) == literal_run(model, task)


def test_both_modes_agree_on_causal_models(monkeypatch):
    """Forcing the prefix-by-prefix mode on causal models changes nothing (the claim, exactly)."""
    rng = random.Random(7)
    task = Composition(2, 3)
    cot = build_cot(task).model
    r, q = cot.layout.index("position", task.table_position(2, 0)), cot.layout.index("position", task.length - 1)
    step1 = cot.with_weight((0, 0, "W_QK", r, q), 0)  # step 1 may also read f_2(0)
    models = [cot, step1] + [mutated_cot(rng, task) for _ in range(12)]
    tf = [checked(m, task) for m in models]
    monkeypatch.setattr(generation, "is_causal", lambda model: False)
    assert [checked(m, task) for m in models] == tf
    assert {t[0] for t in tf} == {"verified", "refuted"} and {t[2] for t in tf} >= {1, 2}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**9))
def test_causal_columns_depend_only_on_their_prefix(seed):
    """Part (a) of the claim: logits at position t of a causal model = logits of tokens 0..t."""
    rng = random.Random(seed)
    model = random_model(rng, Toy(), causal=True, max_length=5)
    seq = [rng.choice(TOKENS) for _ in range(5)]
    full = trace(model, seq).logits_all
    for t in range(5):
        assert trace(model, seq[: t + 1]).logits == full[t]


def look_ahead_model() -> Model:
    """Not causal: query t reads the token at t+1.  Under teacher forcing step 1 sees v_1 (which
    equals the last prompt token here) and is right; the autoregressive run has no position P yet."""
    lay = Layout.of(("token", 3), ("position", 3), ("out", 3))
    shift = [[1 if j == k + 1 else 0 for k in range(3)] for j in range(3)]
    qk = BlockMatrix(lay, lay).set("position", "position", shift).build()
    v = BlockMatrix(lay, lay).set("out", "token", 1).build()
    W_O = BlockMatrix(Layout.of(("class", 3)), lay).set("class", "out", 1).build()
    return Model(TOKENS, 3, TOKENS, lay, (Layer((Head(qk, v),), causal=False),), W_O, outputs="all")


def test_teacher_forcing_is_wrong_for_a_model_that_looks_ahead():
    task = Toy(1, 2)  # prompt x, steps x, x
    model = look_ahead_model()
    naive = verify(model, TeacherForced(task), progress=False)  # what teacher forcing alone would say
    assert naive.verdict == "refuted" and naive.counterexample.position == 1  # step 1 passed, step 2 failed
    g = verify_generation(model, task, progress=False)
    assert g.mode == generation.PREFIX and g.status == "refuted" and g.failing_step == 1
    assert checked(model, task) == literal_run(model, task)


def test_prefix_and_teacher_forced_tasks():
    task = Composition(2, 2)
    tf = TeacherForced(task)
    ids, labels = tf.decode(np.arange(task.size))
    steps = task.cot_steps(np.arange(task.size))
    assert tf.length == task.length + 1 and (labels[:, : task.length - 1] == -1).all()
    assert (labels[:, task.length - 1:] == steps).all() and (ids[:, -1] == steps[:, 0]).all()
    for s in (1, 2):
        p = Prefix(task, s)
        ids_s, y = p.decode(np.arange(task.size))
        assert (ids_s == ids[:, : task.length + s - 1]).all() and (y == steps[:, s - 1]).all()
    with pytest.raises(BadInput, match="step 3"):
        Prefix(task, 3)


def test_bad_inputs():
    task = Composition(2, 2)
    from depthcert.constructions.composition import build_linear

    short = build_linear(task).model  # max_length = the prompt's 5 positions
    with pytest.raises(BadInput, match="needs 6"):
        verify_generation(short, task, progress=False)
    from depthcert.checkers.tasks import ICQA

    with pytest.raises(BadInput, match="no generation steps"):
        verify_generation(build_cot(task).model, ICQA(2), progress=False)


def softmax_cot(task: Composition, scale) -> Model:
    m = build_cot(task).model
    h = m.layers[0][0]
    return replace(m, layers=(replace(m.layers[0], heads=(Head(h.W_QK, h.W_V, "softmax", Fraction(scale)),)),))


def test_softmax_generation_in_certified_balls(monkeypatch):
    task = Composition(2, 2)
    g = verify_generation(softmax_cot(task, 30), task, progress=False, balls={"max_precision": 256})
    assert g.verified and g.verdict.margin_enclosure is not None and 0 < g.verdict.margin_enclosure[0] < 1
    soft = softmax_cot(task, Fraction(1, 4))
    g = verify_generation(soft, task, progress=False, balls={"max_precision": 256})
    assert g.status == "refuted" and g.failing_step in (1, 2)
    ce = g.verdict.counterexample
    # the same point and step prefix by prefix (each prefix its own ball pass)
    monkeypatch.setattr(generation, "is_causal", lambda model: False)
    g2 = verify_generation(soft, task, progress=False, balls={"max_precision": 256})
    assert (g2.status, g2.verdict.counterexample.index, g2.failing_step) == ("refuted", ce.index, g.failing_step)
