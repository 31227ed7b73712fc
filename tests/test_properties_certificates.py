"""Properties of one-layer impossibility certificates (checkers/certificate.py) and of the one-layer
decision (proofs/dependence.py decide / decide_task).

  the checker is the definition   on certificates mutated at random from valid ones (a coefficient
                                  bumped, a token or label changed, a point dropped, duplicated or
                                  added, coefficients scaled, fields added, ...), classify() says
                                  valid / invalid / malformed exactly when a direct re-computation
                                  of the definition in this file does (structure, then the per-group
                                  occurrence sums); every certificate it accepts satisfies the
                                  soundness identity sum_i sum_c mu_ic (o_i[y_i] - o_i[c]) = 0 on
                                  random one-layer multi-head ReLU models (independent oracle);
  decisions are checked outcomes  on random small labelled datasets (one or two groups), decide_task
                                  says "fittable" exactly when an LP solved independently here
                                  (scipy.optimize.linprog, HiGHS) is feasible; every certificate it
                                  emits is accepted by the independent checker and by the
                                  re-computation, and speaks about points of the dataset with their
                                  labels; every "fittable" model it emits is correct on every point
                                  (verify with the big-integer path, and the independent oracle);
  the paper's tasks               the same on small enumerated tasks (tm, icqa, multihop, ictm, sc).
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from scipy.optimize import linprog

from depthcert.checkers.certificate import classify
from depthcert.checkers.tasks.dataset_file import DatasetTask
from depthcert.proofs.dependence import decide_task
from depthcert.checkers.exhaustive import verify
from depthcert.checkers.layout import Layout, zeros
from depthcert.checkers.model import Head, Model
from depthcert.checkers.tasks import make_task
from independent_oracle import Oracle
from proptools import prop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORED_DIR = os.path.join(ROOT, "proofs", "certificates")
STORED = sorted(os.path.join(STORED_DIR, f) for f in os.listdir(STORED_DIR) if f.endswith(".json"))
ALLOWED_POINT_FIELDS = {"tokens", "label", "mu", "name", "coefficient", "index"}


# ---- the definition, re-computed (docs/impossibility.md, checkers/certificate.py docstring)


def _atom(x) -> bool:
    """A token or label: a string or an int, not a bool."""
    return isinstance(x, (str, int)) and not isinstance(x, bool)


def reference_status(obj) -> str:
    """"valid" | "invalid" | "malformed" straight from the definition."""
    if not isinstance(obj, dict) or obj.get("format") != "depthcert.certificate":
        return "malformed"
    if type(obj.get("version")) is not int or obj["version"] != 1:
        return "malformed"
    pts = obj.get("points")
    if not isinstance(pts, list) or not pts or not all(isinstance(p, dict) for p in pts):
        return "malformed"
    if not all(_atom(p.get("label")) for p in pts):
        return "malformed"
    kinds = {type(p["label"]) for p in pts}
    if len(kinds) > 1:
        return "malformed"
    int_labels = kinds == {int}
    classes = set()
    parsed = []
    positive = False
    for p in pts:
        if set(p) - ALLOWED_POINT_FIELDS:
            return "malformed"
        toks = p.get("tokens")
        if not isinstance(toks, list) or not toks or not all(_atom(t) for t in toks):
            return "malformed"
        label = str(p["label"])
        classes.add(label)
        mu = p.get("mu")
        if not isinstance(mu, dict):
            return "malformed"
        coeffs = {}
        for key, k in mu.items():
            if not isinstance(key, str):
                return "malformed"
            if int_labels:
                if not re.fullmatch(r"-?[0-9]+", key):
                    return "malformed"
                key = str(int(key))
            if type(k) is not int or k < 0 or key == label or key in coeffs:
                return "malformed"
            coeffs[key] = k
            classes.add(key)
            positive |= k > 0
        parsed.append(([(type(t), t) for t in toks], label, coeffs))
    if "classes" in obj:
        cl = obj["classes"]
        if not isinstance(cl, list) or not all(_atom(c) for c in cl):
            return "malformed"
        if not classes <= {str(c) for c in cl}:
            return "malformed"
    if not positive:
        return "malformed"
    sums: dict = {}
    for toks, label, coeffs in parsed:
        w = {label: sum(coeffs.values())}
        for c, k in coeffs.items():
            w[c] = w.get(c, 0) - k
        group = (len(toks), toks[-1])
        for j, t in enumerate(toks):
            for c, v in w.items():
                key = (group, j, t, c)
                sums[key] = sums.get(key, 0) + v
    return "valid" if all(v == 0 for v in sums.values()) else "invalid"


def soundness_identity(obj, rng: np.random.Generator) -> Fraction:
    """sum_i sum_c mu_ic (o_i[y_i] - o_i[c]) on a random one-layer multi-head ReLU model (the
    proof's identity: 0 for every such model when the certificate is valid)."""
    pts = obj["points"]
    tok_name = lambda t: f"{type(t).__name__}:{t}"
    vocab = tuple(dict.fromkeys(tok_name(t) for p in pts for t in p["tokens"]))
    classes = tuple(dict.fromkeys([str(p["label"]) for p in pts] +
                                  [str(int(k)) if isinstance(p["label"], int) else k for p in pts for k in p["mu"]]))
    n = max(len(p["tokens"]) for p in pts)
    d = len(vocab) + n + 2
    lay = Layout.of(("token", len(vocab)), ("position", n), ("scratch", 2))

    def rand(shape):
        M = zeros(*shape)
        for idx in np.ndindex(*shape):
            if rng.random() < 0.5:
                M[idx] = Fraction(int(rng.integers(-3, 4)), int(rng.integers(1, 3)))
        return M

    heads = tuple(Head(rand((d, d)), rand((d, d))) for _ in range(int(rng.integers(1, 4))))
    model = Model(vocab, n, classes, lay, (heads,), rand((len(classes), d)))
    orc = Oracle(model)
    total = Fraction(0)
    for p in pts:
        o = orc.logits([tok_name(t) for t in p["tokens"]])
        y = classes.index(str(p["label"]))
        for c, k in p["mu"].items():
            total += k * (o[y] - o[classes.index(str(int(c)) if isinstance(p["label"], int) else c)])
    return total


# ---- valid certificates: stored ones, and random "rectangles" (valid by construction)


def _stored(i):
    with open(STORED[i]) as fh:
        return json.load(fh)


@st.composite
def rectangles(draw):
    """Two sequences u, v of one group and the two that swap them on a set S of positions:
    u + v = u_S v_rest + v_S u_rest position by position, so labels p, p, q, q with mu q, q, p, p
    (times an integer) make a valid certificate (paper Theorem 2's shape)."""
    ints = draw(st.booleans())
    pool = [0, 1, 2, 3] if ints else ["a", "b", "c", "1"]
    n = draw(st.integers(1, 3))
    u = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    v = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    S = draw(st.sets(st.integers(0, n - 1)))
    last = draw(st.sampled_from(pool))
    a = [u[j] if j in S else v[j] for j in range(n)]
    b = [v[j] if j in S else u[j] for j in range(n)]
    p, q = draw(st.sampled_from(((0, 1), (1, 0), (2, 7)) if draw(st.booleans()) else (("x", "y"), ("y", "x"), ("1", "x"))))
    k = draw(st.integers(1, 3))
    key = lambda c: str(c)
    pts = [{"tokens": u + [last], "label": p, "mu": {key(q): k}}, {"tokens": v + [last], "label": p, "mu": {key(q): k}},
           {"tokens": a + [last], "label": q, "mu": {key(p): k}}, {"tokens": b + [last], "label": q, "mu": {key(p): k}}]
    return {"format": "depthcert.certificate", "version": 1, "points": draw(st.permutations(pts))}


valid_certificates = st.one_of(st.integers(0, len(STORED) - 1).map(_stored), rectangles())


# ---- mutations

MUTATIONS = ("bump", "scale", "new class", "token", "label", "drop", "duplicate", "swap tokens", "zero point",
             "field", "classes", "append zero point", "merge", "bool", "last token")


def mutate(obj: dict, kind: str, draw) -> dict:
    obj = copy.deepcopy(obj)
    pts = obj["points"]
    i = draw(st.integers(0, len(pts) - 1))
    p = pts[i]
    tokens = sorted({t for q in pts for t in q["tokens"]}, key=repr)
    labels = sorted({str(q["label"]) for q in pts} | {c for q in pts for c in q["mu"]})
    if kind == "bump":
        if p["mu"]:
            c = draw(st.sampled_from(sorted(p["mu"])))
            p["mu"][c] += draw(st.sampled_from((-2, -1, 1, 2)))
    elif kind == "scale":
        f = draw(st.integers(2, 3))
        for q in pts:
            q["mu"] = {c: f * k for c, k in q["mu"].items()}
    elif kind == "new class":
        c = draw(st.sampled_from(labels + ["zz", "5"]))
        p["mu"][c] = p["mu"].get(c, 0) + draw(st.integers(0, 2))
    elif kind == "token":
        j = draw(st.integers(0, len(p["tokens"]) - 1))
        p["tokens"][j] = draw(st.sampled_from(tokens + ["zz", 1, "1"]))
    elif kind == "label":
        new = draw(st.sampled_from(labels + ["zz"]))
        p["label"] = int(new) if isinstance(p["label"], int) and re.fullmatch(r"-?[0-9]+", new) else new
    elif kind == "drop" and len(pts) > 1:
        del pts[i]
    elif kind == "duplicate":
        pts.append(copy.deepcopy(p))
    elif kind == "swap tokens":
        j = draw(st.integers(0, len(pts) - 1))
        p["tokens"], pts[j]["tokens"] = pts[j]["tokens"], p["tokens"]
    elif kind == "zero point":
        p["mu"] = {}
    elif kind == "field":
        p[draw(st.sampled_from(("name", "index", "weight", "comment")))] = "x"
    elif kind == "classes":
        cl = labels[:]
        if draw(st.booleans()) and cl:
            cl.pop(draw(st.integers(0, len(cl) - 1)))
        obj["classes"] = cl
    elif kind == "append zero point":
        pts.append({"tokens": copy.deepcopy(p["tokens"]), "label": p["label"], "mu": {}})
    elif kind == "merge":
        other = draw(valid_certificates)
        pts.extend(other["points"])
    elif kind == "bool":
        if p["mu"]:
            p["mu"][draw(st.sampled_from(sorted(p["mu"])))] = True
    elif kind == "last token":
        p["tokens"][-1] = draw(st.sampled_from(tokens + ["zz"]))
    return obj


@pytest.mark.slow
@prop(300)
@given(valid_certificates, st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), st.data())
def test_checker_agrees_with_the_definition_on_mutated_certificates(obj, kinds, data):
    assert reference_status(obj) == "valid" and classify(obj)[0] == "valid"
    for kind in kinds:
        obj = mutate(obj, kind, data.draw)
    want = reference_status(obj)
    got, msg = classify(obj)
    event(f"{'+'.join(kinds) or 'unchanged'}: {want}")
    assert got == want, (kinds, msg)
    if got == "valid":
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        assert soundness_identity(obj, rng) == 0


# ---- the decision against an independent LP


def lp_fittable(seqs, labels) -> bool:
    """Per group (length, last token): is there a table phi(j, token)[class] with
    sum_j phi(j, x_j)[y] - sum_j phi(j, x_j)[c] >= 1 for every point and class c != y?
    scipy.optimize.linprog (HiGHS), written here from docs/impossibility.md section 1."""
    classes = sorted(set(labels))
    groups: dict = {}
    for s, y in zip(seqs, labels):
        groups.setdefault((len(s), s[-1]), []).append((s, y))
    for members in groups.values():
        var = {}
        for s, _ in members:
            for j, t in enumerate(s):
                for c in classes:
                    var.setdefault((j, t, c), len(var))
        rows = []
        for s, y in members:
            for c in classes:
                if c == y:
                    continue
                row = np.zeros(len(var))
                for j, t in enumerate(s):
                    row[var[(j, t, y)]] -= 1
                    row[var[(j, t, c)]] += 1
                rows.append(row)
        if not rows:
            continue
        res = linprog(np.zeros(len(var)), A_ub=np.array(rows), b_ub=-np.ones(len(rows)),
                      bounds=[(None, None)] * len(var), method="highs")
        assert res.status in (0, 2), res.message
        if res.status == 2:
            return False
    return True


def check_decision(task, seqs, labels, res):
    """The decision of decide_task is a checked outcome about this dataset."""
    dec = res.decision
    labelled = {tuple(s): y for s, y in zip(seqs, labels)}
    if dec.fittable:
        assert dec.certificate is None and res.model is not None and len(res.model.layers) == 1
        assert res.verdict.verified and res.verdict.points_covered == task.size
        exact = verify(res.model, task, progress=False, force_exact=True)
        assert exact.verified and exact.points_checked == task.size
        orc = Oracle(res.model)
        for s, y in labelled.items():
            m, _ = orc.margin(list(s), y)
            assert m is None or m > 0, (s, y, m)
    else:
        obj = dec.certificate.to_json()
        assert classify(obj)[0] == "valid"
        assert reference_status(obj) == "valid"
        for p in obj["points"]:
            assert labelled[tuple(p["tokens"])] == p["label"], p
        assert res.model is None


RULES = ("random", "equal", "xor", "copy", "constant")


@st.composite
def datasets(draw):
    """(sequences, labels): one or two groups (length, last token), each a random subset of the
    sequences over a small alphabet, labelled by a rule (random; "do positions i, j hold the same
    token" or their XOR, which are not additive; copy position i, constant, which are) with a
    few labels flipped, so that both outcomes are common."""
    classes = "pqt"[: draw(st.integers(2, 3))]
    seqs, labels = [], []
    for last in "rs"[: draw(st.integers(1, 2))]:
        n = draw(st.sampled_from((2, 3, 1)))
        alphabet = "abc"[: draw(st.integers(2, 3 if n < 3 else 2))]
        bodies = [list(b) for b in itertools.product(alphabet, repeat=n)]
        order = draw(st.permutations(range(len(bodies))))
        chosen = order[: draw(st.integers(max(1, len(bodies) - 2), len(bodies)))]
        rule = draw(st.sampled_from(RULES))
        i = draw(st.integers(0, n - 1))
        j = (i + draw(st.integers(1, n - 1))) % n if n > 1 else i
        flips = draw(st.sets(st.sampled_from(range(len(bodies))), max_size=2))
        for b in sorted(chosen):
            x = bodies[b]
            if rule == "random":
                y = draw(st.sampled_from(classes))
            elif rule == "equal":
                y = classes[x[i] == x[j]]
            elif rule == "xor":
                y = classes[(x[i] == "a") != (x[j] == "a")]
            elif rule == "copy":
                y = classes["abc".index(x[i]) % len(classes)]
            else:
                y = classes[0]
            if b in flips:
                y = classes[(classes.index(y) + 1) % len(classes)]
            seqs.append(x + [last])
            labels.append(y)
    return seqs, labels


@pytest.mark.slow
@prop(80)
@given(datasets())
def test_decision_agrees_with_an_independent_lp_on_random_datasets(data):
    seqs, labels = data
    task = DatasetTask(seqs, labels)
    res = decide_task(task, progress=False)
    want = lp_fittable([tuple(s) for s in seqs], labels)
    event(f"{'fittable' if want else 'not fittable'}, {len({(len(s), s[-1]) for s in seqs})} group(s)")
    assert res.decision.fittable == want
    check_decision(task, seqs, labels, res)


TASK_CONFIGS = (
    ("tm", {"l": 2, "alphabet": 2}),
    ("tm", {"l": 2, "alphabet": 3}),
    ("tm", {"l": 3, "alphabet": 2}),
    ("icqa", {"k": 1, "n_questions": 2, "n_answers": 2}),
    ("icqa", {"k": 2, "n_questions": 2, "n_answers": 2}),
    ("icqa", {"k": 2, "n_questions": 3, "n_answers": 2}),
    ("multihop", {"hops": 1, "k": 2, "n_entities": 2}),
    ("multihop", {"hops": 2, "k": 2, "n_entities": 3}),
    ("ictm", {"k": 1, "l": 2, "alphabet": 2, "n_answers": 2}),
    ("sc", {"length": 2, "alphabet": 2}),
    ("sc", {"length": 2, "alphabet": 3, "n_points": 5, "seed": 3}),
)


@prop(11)
@given(st.sampled_from(TASK_CONFIGS))
def test_decision_on_small_paper_tasks_is_checked_and_agrees_with_the_lp(cfg):
    name, opts = cfg
    task = make_task(name, **opts)
    pts = [task.point(i) for i in range(task.size)]
    seqs = [list(p.tokens) for p in pts]
    labels = [p.label for p in pts]
    res = decide_task(task, progress=False)
    event(f"{name}: {'fittable' if res.decision.fittable else 'certificate'}")
    assert res.decision.fittable == lp_fittable([tuple(s) for s in seqs], labels)
    check_decision(task, seqs, labels, res)
