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
from depthcert.checkers.rational import exact_text

CERT_DIR = os.path.join(os.path.dirname(__file__), "certificates")


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str  # where the paper states it
    statement: str
    method: str  # "construction", "certificate", or "fittable" (a scope finding: one layer suffices)
    task: str
    options: dict = field(default_factory=dict)
    variant: str | None = None
    certificate: str | None = None  # file name in proofs/certificates/
    # what the paper prints for it: "same" (depthcert builds exactly the printed weights),
    # "differs" (the printed weights are built too, with --as-printed, and checked separately),
    # "none" (the paper prints no weights for it), "dependence" (an impossibility claim)
    printed: str = "same"
    kind: str = "claim"  # "claim": the paper's; "scope": a finding of ours about a claim's scope
    dataset: str | None = None  # a dataset file under docs/examples/ instead of a task


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    verdict: str  # "verified", "certified", "fittable", "refuted", "not_established"
    detail: str
    seconds: float
    printed_verdict: str = ""  # the printed weights' verdict when they differ: "refuted" / "verified"
    printed_detail: str = ""
    readout: str | None = None  # constructions: the read-out checked ("lemma3", "paper"), named by the command
    printed_readout: str | None = None

    def command(self, as_printed: bool = False) -> str:
        """The command line that prints exactly this result's numbers (read-out included)."""
        return command(self.claim, as_printed, self.printed_readout if as_printed else self.readout)

    @property
    def ok(self) -> bool:
        if self.claim.method == "fittable":
            return self.verdict == "fittable"
        return self.verdict in ("verified", "certified")


CLAIMS: tuple[Claim, ...] = (
    Claim("theorem1", "Theorem 1 / Lemma 4", "one layer (n heads) memorizes sequence classification",
          "construction", "sc", {"length": 3, "alphabet": 3}, printed="differs"),
    Claim("theorem2", "Theorem 2", "no one-layer transformer solves in-context QA",
          "certificate", "icqa", {"k": 2, "n_questions": 2, "n_answers": 2}, certificate="theorem2_icqa.json",
          printed="dependence"),
    Claim("theorem3", "Theorem 3", "two layers (1 head) solve in-context QA, at the paper's 100-token scale",
          "construction", "icqa", {"k": 3, "n_questions": 100, "n_answers": 100}),
    Claim("theorem4", "Theorem 4", "no one-layer transformer solves template matching",
          "certificate", "tm", {"l": 2, "alphabet": 2}, certificate="theorem4_tm.json", printed="dependence"),
    Claim("theorem5-heads", "Theorem 5 (memorization head variant)", "two layers solve template matching",
          "construction", "tm", {"l": 3, "alphabet": 4}, variant="heads", printed="differs"),
    Claim("theorem5-ternary", "Theorem 5 (ternary encoding variant)", "two layers, one head solve template matching",
          "construction", "tm", {"l": 3, "alphabet": 4}, variant="ternary", printed="differs"),
    Claim("theorem6", "Theorem 6", "three layers (2l heads in layer 3) solve in-context template matching",
          "construction", "ictm", {"k": 2, "l": 2, "alphabet": 3, "n_answers": 2}, printed="differs"),
    Claim("ictm-one-layer", "Section 5.4", "no one-layer transformer solves in-context template matching",
          "certificate", "ictm", {"k": 2, "l": 2, "alphabet": 2, "n_answers": 2}, certificate="ictm_one_layer.json",
          printed="dependence"),
    # section 4.4's "a new mapping function" for the query, read as: the query differs from its
    # context question (the default dataset lets it repeat it; docs/theorem6.md)
    Claim("theorem6-new-query", "Theorem 6 (query reading \"new\")",
          "three layers solve in-context template matching when the query differs from its context question",
          "construction", "ictm", {"k": 2, "l": 2, "alphabet": 3, "n_answers": 2, "query": "new"}, printed="differs"),
    Claim("ictm-one-layer-new-query", "Section 5.4 (query reading \"new\")",
          "no one-layer transformer solves it when the query differs from its context question",
          "certificate", "ictm", {"k": 2, "l": 2, "alphabet": 2, "n_answers": 2, "query": "new"},
          printed="dependence"),
    Claim("multihop-paper", "Section 7 (suggested)", "2h layers (copy-matching h times) solve h-hop in-context QA",
          "construction", "multihop", {"hops": 3}, variant="paper", printed="none"),
    Claim("multihop-one-layer", "Section 7", "no one-layer transformer solves 2-hop in-context QA",
          "certificate", "multihop", {"hops": 2}, certificate="multihop_one_layer.json", printed="dependence"),
    # findings of ours about the scope of the paper's claims (not errata: the paper states them
    # for the sizes where they hold)
    Claim("scope-theorem2-k1", "Theorem 2 (scope: k >= 2)",
          "with a single (question, answer) pair, in-context QA is one-layer fittable",
          "fittable", "icqa", {"k": 1}, kind="scope"),
    Claim("scope-theorem4-one-substitution", "Theorem 4 (scope: every substitution)",
          "template matching with one sequence (one substitution map) per template is one-layer fittable",
          "fittable", "tm", {}, kind="scope", dataset="tm-one-substitution-l3.json"),
    # depthcert's improvements on the paper's sufficiency claim for multi-hop (docs/findings.md)
    Claim("multihop-linear", "Section 7 (depthcert, fewer layers)", "h+1 layers: one copying layer, then h matching layers",
          "construction", "multihop", {"hops": 3}, variant="linear", kind="finding"),
    Claim("multihop-doubling", "Section 7 (depthcert, fewer layers)", "pointer doubling: floor(log2 h)+2 layers",
          "construction", "multihop", {"hops": 3}, variant="doubling", kind="finding"),
)

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the example files: installed as package data (depthcert/examples/), or docs/examples/ of a checkout
EXAMPLES_DIR = next((d for d in (os.path.join(_PACKAGE_ROOT, "examples"), os.path.join(_PACKAGE_ROOT, "docs", "examples"))
                     if os.path.isdir(d)), os.path.join(_PACKAGE_ROOT, "docs", "examples"))


def command(claim: Claim, as_printed: bool = False, readout: str | None = None) -> str:
    """The command line that checks the claim (what a reader runs to see it); `readout`: the
    construction's read-out, named with --readout (ClaimResult.command gives the one checked)."""
    if claim.method in ("certificate", "fittable"):
        if claim.dataset:
            return f"find-dependence --dataset docs/examples/{claim.dataset}"
        opts = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in claim.options.items())
        return f"find-dependence --task {claim.task} {opts}".strip()
    opts = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in claim.options.items())
    var = f" --variant {claim.variant}" if claim.variant else ""
    return (f"verify-construction {claim.task} {opts}{var}" + (" --as-printed" if as_printed else "")
            + (f" --readout {readout}" if readout else ""))


def dataset_points(task, limit: int = 2_000_000) -> dict[tuple[str, ...], str]:
    """tokens -> label for every point (used to check that a certificate speaks about the task)."""
    if task.size > limit:
        raise BadInput(f"{task.describe()} has {task.size} points, too many to index (limit {limit})")
    out = {}
    for b in task.batches(8192):
        for row, lab in zip(b.ids.tolist(), b.labels.tolist()):
            out[tuple(task.vocab[t] for t in row)] = task.classes[lab]
    return out


def certificate_speaks_about(cert: dict, task, limit: int = 2_000_000) -> str | None:
    """None if every certificate point is a dataset point with its dataset label, else why not."""
    points = dataset_points(task, limit)
    for i, p in enumerate(cert.get("points", [])):
        toks = tuple(str(t) for t in p["tokens"])
        if toks not in points:
            return f"certificate point {i} ({' '.join(toks)}) is not in the {task.name} dataset"
        if points[toks] != str(p["label"]):
            return f"certificate point {i} has label {p['label']} but the dataset says {points[toks]}"
    return None


def _check_construction(claim: Claim, task, as_printed: bool = False) -> tuple[str, str, str]:
    """(verdict, detail, read-out): the construction as the paper defines it, its classifier
    included (Lemma 3's where the paper takes it from Lemma 3: `--readout lemma3`, not the
    command line's default max-margin fit)."""
    from depthcert.checkers.exhaustive import verify
    from depthcert import constructions

    c = constructions.build(task, claim.variant, as_printed=as_printed)
    readout = "lemma3" if c.readout in ("lemma3", "none") else c.readout
    v = verify(c.model, task, symmetry="auto", progress=False)
    heads = ",".join(str(h) for h in c.model.heads)
    detail = (f"{c.model.n_layers} layer{'s' if c.model.n_layers != 1 else ''}, heads {heads}, d'={c.model.dim}; {v.points_covered}/{v.points_total} points "
              f"covered ({v.points_checked} evaluated), min margin {exact_text(v.min_margin) if v.min_margin is not None else '-'}")
    if not v.verified:
        ce = v.counterexample
        detail += f"; counterexample point {ce.index}: {' '.join(ce.tokens)} expected {ce.expected} got {ce.predicted}"
    return ("verified" if v.verified else "refuted"), detail, readout


def _check_certificate_claim(claim: Claim, task) -> tuple[str, str]:
    from depthcert.checkers.certificate import check_certificate

    path = os.path.join(CERT_DIR, claim.certificate) if claim.certificate else None
    source = "stored"
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            cert = json.load(fh)
    else:
        from depthcert.proofs.dependence import decide_task

        source = "searched"
        dec = decide_task(task, progress=False)
        if dec.decision.fittable:
            return "refuted", f"the dataset is one-layer fittable: an explicit one-layer model verifies on all {task.size} points"
        cert = dec.decision.certificate.to_json()
    ok, msg = check_certificate(cert)
    if not ok:
        return "not_established", f"{source} certificate rejected by the independent checker: {msg}"
    why = certificate_speaks_about(cert, task)
    if why:
        return "not_established", why
    n = sum(1 for p in cert["points"] if any(int(v) > 0 for v in p.get("mu", {}).values()))
    return "certified", f"{source} certificate with {n} points, accepted by checkers/certificate.py; all are dataset points"


def _check_fittable(claim: Claim, task) -> tuple[str, str]:
    """A scope finding: the one-layer decision finds an explicit model, verified on every point."""
    from depthcert.proofs.dependence import decide_task

    dec = decide_task(task, progress=False).decision
    if not dec.fittable:
        return "refuted", f"not fittable: a {len(dec.certificate.points)}-point certificate"
    return "fittable", f"an explicit one-layer model verifies exactly on all {task.size} points"


def check_claim(claim: Claim) -> ClaimResult:
    from depthcert.checkers.tasks import make_task

    t0 = time.perf_counter()
    printed_verdict = printed_detail = ""
    readout = printed_readout = None
    try:
        if claim.dataset:
            from depthcert.checkers.tasks.dataset_file import load_dataset

            task = load_dataset(os.path.join(EXAMPLES_DIR, claim.dataset))
        else:
            task = make_task(claim.task, **claim.options)
        if claim.method == "construction":
            verdict, detail, readout = _check_construction(claim, task)
            if claim.printed == "differs":
                printed_verdict, printed_detail, printed_readout = _check_construction(claim, task, as_printed=True)
        elif claim.method == "fittable":
            verdict, detail = _check_fittable(claim, task)
        else:
            verdict, detail = _check_certificate_claim(claim, task)
    except BadInput as exc:
        verdict, detail = "not_established", f"error: {exc}"
    return ClaimResult(claim, verdict, detail, time.perf_counter() - t0, printed_verdict, printed_detail, readout,
                       printed_readout)


def sizes_text(claim: Claim) -> str:
    return " ".join(f"{k}={v}" for k, v in claim.options.items())
