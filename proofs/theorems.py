"""The paper's claims, each tied to how depthcert establishes it.

A construction claim (Theorems 1, 3, 5, 6, multi-hop) is established by building the weights and
checking every point of the dataset (`verify`, with the symmetry reduction only where the
model's equivariance is proven on the weights).  An impossibility claim (Theorems 2, 4, and the
one-layer parts for ICTM and multi-hop) is established by a certificate that the independent
checker `checkers/certificate.py` accepts and whose points are all points of the task's dataset
with their dataset labels: a certificate for a subset of the dataset rules out every one-layer
model on the whole dataset.  Stored certificates live in proofs/certificates/; when a claim has
none stored, the search (`checkers.dependence`) runs and its result is checked the same way.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from depthcert.checkers.errors import BadInput
from depthcert.checkers.rational import format_rational

CERT_DIR = os.path.join(os.path.dirname(__file__), "certificates")


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str  # where the paper states it
    statement: str
    method: str  # "construction" or "certificate"
    task: str
    options: dict = field(default_factory=dict)
    variant: str | None = None
    certificate: str | None = None  # file name in proofs/certificates/


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    verdict: str  # "verified", "certified", "refuted", "not established"
    detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict in ("verified", "certified")


CLAIMS: tuple[Claim, ...] = (
    Claim("theorem1", "Theorem 1 / Lemma 4", "one layer (n heads) memorizes sequence classification",
          "construction", "sc", {"length": 3, "alphabet": 3}),
    Claim("theorem2", "Theorem 2", "no one-layer transformer solves in-context QA",
          "certificate", "icqa", {"k": 2, "n_questions": 2, "n_answers": 2}, certificate="theorem2_icqa.json"),
    Claim("theorem3", "Theorem 3", "two layers (1 head) solve in-context QA, at the paper's 100-token scale",
          "construction", "icqa", {"k": 3, "n_questions": 100, "n_answers": 100}),
    Claim("theorem4", "Theorem 4", "no one-layer transformer solves template matching",
          "certificate", "tm", {"l": 2, "alphabet": 2}, certificate="theorem4_tm.json"),
    Claim("theorem5-heads", "Theorem 5 (memorization head variant)", "two layers solve template matching",
          "construction", "tm", {"l": 3, "alphabet": 4}, variant="heads"),
    Claim("theorem5-ternary", "Theorem 5 (ternary encoding variant)", "two layers, one head solve template matching",
          "construction", "tm", {"l": 3, "alphabet": 4}, variant="ternary"),
    Claim("theorem6", "Theorem 6", "three layers (2l heads in layer 3) solve in-context template matching",
          "construction", "ictm", {"k": 2, "l": 2, "alphabet": 3, "n_answers": 2}),
    Claim("ictm-one-layer", "Section 5.4", "no one-layer transformer solves in-context template matching",
          "certificate", "ictm", {"k": 2, "l": 2, "alphabet": 2, "n_answers": 2}, certificate="ictm_one_layer.json"),
    Claim("multihop-paper", "Section 7 (suggested)", "2h layers (copy-matching h times) solve h-hop in-context QA",
          "construction", "multihop", {"hops": 3}, variant="paper"),
    Claim("multihop-linear", "Section 7 (depthcert)", "h+1 layers: one copying layer, then h matching layers",
          "construction", "multihop", {"hops": 3}, variant="linear"),
    Claim("multihop-doubling", "Section 7 (depthcert)", "pointer doubling: about log2(h)+2 layers",
          "construction", "multihop", {"hops": 3}, variant="doubling"),
    Claim("multihop-one-layer", "Section 7", "no one-layer transformer solves 2-hop in-context QA",
          "certificate", "multihop", {"hops": 2}, certificate="multihop_one_layer.json"),
)


def dataset_points(task, limit: int = 2_000_000) -> dict[tuple[str, ...], str]:
    """tokens -> label for every point (used to check that a certificate speaks about the task)."""
    if task.size > limit:
        raise BadInput(f"{task.describe()} has {task.size} points, too many to index (limit {limit})")
    out = {}
    for b in task.batches(8192):
        for row, lab in zip(b.ids.tolist(), b.labels.tolist()):
            out[tuple(task.vocab[t] for t in row)] = task.classes[lab]
    return out


def certificate_speaks_about(cert: dict, task) -> str | None:
    """None if every certificate point is a dataset point with its dataset label, else why not."""
    points = dataset_points(task)
    for i, p in enumerate(cert.get("points", [])):
        toks = tuple(str(t) for t in p["tokens"])
        if toks not in points:
            return f"certificate point {i} ({' '.join(toks)}) is not in the {task.name} dataset"
        if points[toks] != str(p["label"]):
            return f"certificate point {i} has label {p['label']} but the dataset says {points[toks]}"
    return None


def _check_construction(claim: Claim, task) -> tuple[str, str]:
    from depthcert.checkers.exhaustive import verify
    from depthcert.constructions import registry

    c = registry.build(task, claim.variant, as_printed=False)
    v = verify(c.model, task, symmetry="auto", progress=False)
    heads = ",".join(str(h) for h in c.model.heads)
    detail = (f"{c.model.n_layers} layers, heads {heads}, d'={c.model.dim}; {v.points_covered}/{v.points_total} points "
              f"covered ({v.points_checked} evaluated), min margin {format_rational(v.min_margin) if v.min_margin is not None else '-'}")
    if not v.verified:
        ce = v.counterexample
        detail += f"; counterexample point {ce.index}: {' '.join(ce.tokens)} expected {ce.expected} got {ce.predicted}"
    return ("verified" if v.verified else "refuted"), detail


def _check_certificate_claim(claim: Claim, task) -> tuple[str, str]:
    from depthcert.checkers.certificate import check_certificate

    path = os.path.join(CERT_DIR, claim.certificate) if claim.certificate else None
    source = "stored"
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            cert = json.load(fh)
    else:
        from depthcert.checkers.dependence import decide_task

        source = "searched"
        dec = decide_task(task, progress=False)
        if dec.decision.fittable:
            return "refuted", f"the dataset is one-layer fittable: an explicit one-layer model verifies on all {task.size} points"
        cert = dec.decision.certificate.to_json()
    ok, msg = check_certificate(cert)
    if not ok:
        return "not established", f"{source} certificate rejected by the independent checker: {msg}"
    why = certificate_speaks_about(cert, task)
    if why:
        return "not established", why
    n = sum(1 for p in cert["points"] if any(int(v) > 0 for v in p.get("mu", {}).values()))
    return "certified", f"{source} certificate with {n} points, accepted by checkers/certificate.py; all are dataset points"


def check_claim(claim: Claim) -> ClaimResult:
    from depthcert.checkers.tasks import make_task

    t0 = time.perf_counter()
    try:
        task = make_task(claim.task, **claim.options)
        if claim.method == "construction":
            verdict, detail = _check_construction(claim, task)
        else:
            verdict, detail = _check_certificate_claim(claim, task)
    except BadInput as exc:
        verdict, detail = "not established", f"error: {exc}"
    return ClaimResult(claim, verdict, detail, time.perf_counter() - t0)


def sizes_text(claim: Claim) -> str:
    return " ".join(f"{k}={v}" for k, v in claim.options.items())
