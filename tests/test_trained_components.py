"""LayerNorm / RMSNorm / GELU / SiLU TransformerLens checkpoints decided by verify-model, checked two ways:

  * against a live HookedTransformer (the `interop` extra): the certified enclosures of every logit
    (arb) and of every margin (float64 intervals) contain TransformerLens's own float64 values;
  * against an independent evaluator (tests/tl_oracle.py: Fractions and mpmath, written from
    TransformerLens's definitions, importing nothing of depthcert) on 500+ random tiny checkpoints,
    including near-ties of 1e-12 and below, exact ties, epsilon-dominated LayerNorms and
    zero-variance (constant) rows: every point's verdict agrees.
"""
from __future__ import annotations

import os
import sys
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from depthcert.checkers.accuracy import decide_all
from depthcert.checkers.tasks import make_task
from depthcert.interop import transformerlens as tl

sys.path.insert(0, os.path.dirname(__file__))
from tl_oracle import TIE, TLOracle  # noqa: E402

NORMS = (None, "LN", "LNPre", "RMS", "RMSPre")
ACTS = ("relu", "gelu", "gelu_new", "gelu_fast", "silu", "gelu_pytorch_tanh")


def _shapes(c: dict) -> dict:
    """The state dict of a HookedTransformerConfig (written here, not taken from the reader)."""
    dm, H, dh, V, n = c["d_model"], c["n_heads"], c["d_head"], c["d_vocab"], c["n_ctx"]
    out = {"embed.W_E": (V, dm), "pos_embed.W_pos": (n, dm), "unembed.W_U": (dm, c.get("d_vocab_out", V)),
           "unembed.b_U": (c.get("d_vocab_out", V),)}
    norm = c["normalization_type"]
    params = {"LN": ("w", "b"), "RMS": ("w",)}.get(norm, ())
    final = params
    if norm in ("LN", "LNPre") and c.get("final_rms"):
        final = ("w",) if norm == "LN" else ()
    out.update({f"ln_final.{w}": (dm,) for w in final})
    for li in range(c["n_layers"]):
        p = f"blocks.{li}."
        out.update({p + "attn.W_Q": (H, dm, dh), p + "attn.W_K": (H, dm, dh), p + "attn.W_V": (H, dm, dh),
                    p + "attn.b_Q": (H, dh), p + "attn.b_K": (H, dh), p + "attn.b_V": (H, dh),
                    p + "attn.W_O": (H, dh, dm), p + "attn.b_O": (dm,)})
        lns = ("ln1",) if c["attn_only"] else ("ln1", "ln2")
        out.update({f"{p}{ln}.{w}": (dm,) for ln in lns for w in params})
        if not c["attn_only"]:
            out.update({p + "mlp.W_in": (dm, c["d_mlp"]), p + "mlp.b_in": (c["d_mlp"],),
                        p + "mlp.W_out": (c["d_mlp"], dm), p + "mlp.b_out": (dm,)})
    return out


def random_checkpoint(rng, vocab: int = 2, n_ctx: int = 2, kind: str | None = None):
    """(cfg, state dict of float64 arrays) of a tiny random model, with one of the hard cases:
    near-tie (two read-out columns 1e-12 .. 2^-60 apart, or equal with biases that close, or
    exactly equal), eps-dominated (tiny embeddings, large eps), constant rows (zero variance)."""
    norm = NORMS[rng.integers(len(NORMS))]
    attn_only = bool(rng.integers(5) == 0)
    c = dict(n_layers=int(rng.choice([1, 1, 1, 2])), d_model=int(rng.choice([3, 4])), n_heads=int(rng.choice([1, 2])),
             d_head=2, d_vocab=vocab, d_vocab_out=vocab, n_ctx=n_ctx, d_mlp=3, attn_only=attn_only,
             act_fn=None if attn_only else str(ACTS[rng.integers(len(ACTS))]), normalization_type=norm,
             eps=float(rng.choice([1e-5, 1e-3, 0.25, 7.0])), final_rms=bool(rng.integers(4) == 0),
             attention_dir=str(rng.choice(["causal", "bidirectional"])), positional_embedding_type="standard")
    sd = {}
    for key, shape in _shapes(c).items():
        a = rng.standard_normal(shape) * 0.7
        if key.endswith(".w"):
            a += 1.0
        if rng.integers(3) == 0:
            a = a.astype(np.float32)  # float32 weights, read back as their float64 values
        sd[key] = a.astype(np.float64)
    kind = kind or str(rng.choice(["plain", "near", "bias", "tie", "eps", "constant"]))
    W, b = sd["unembed.W_U"], sd["unembed.b_U"]
    if kind == "near":  # logit 1 - logit 0 = delta * (y . r): a point-dependent near-tie
        delta = float(rng.choice([1e-12, 1e-14, 2.0 ** -60]))
        W[:, 1] = W[:, 0] + delta * rng.standard_normal(W.shape[0])
        b[1] = b[0]
    elif kind == "bias":  # logit 1 - logit 0 = delta exactly at every point
        W[:, 1] = W[:, 0]
        b[1] = b[0] + float(rng.choice([1e-12, -1e-13, 2.0 ** -50, 2.0 ** -70]))
    elif kind == "tie":  # logits 0 and 1 equal at every point: every point labelled 0 or 1 is a tie
        W[:, 1] = W[:, 0]
        b[1] = b[0]
    elif kind == "eps":  # var << eps: the normalization is epsilon-dominated
        sd["embed.W_E"] *= 1e-4
        sd["pos_embed.W_pos"] *= 1e-4
        c["eps"] = float(rng.choice([1e-5, 1.0, 100.0]))
    elif kind == "constant":  # token 0 embeds as a constant vector, positions as 0: zero variance
        sd["embed.W_E"][0] = float(rng.choice([0.0, 0.5, -1.25]))
        sd["pos_embed.W_pos"][:] = 0.0
    return c, sd


def _check_agreement(cfg, sd, task, oracle_cache=None):
    """Every point's verdict (and the margin enclosure) against the oracle; returns the counts."""
    model = tl.model_from_state_dict(cfg, sd)
    v = decide_all(model, task)
    oracle = TLOracle(cfg, sd)
    wrong, undecided = set(int(i) for i in v.wrong), set(int(i) for i in v.undecided)
    least = None
    for i in range(task.size):
        pt = task.point(i)
        m = oracle.margin([int(t) for t in pt.tokens], int(pt.label))
        where = f"point {i} {pt.tokens} of {cfg} (margin {mpmath.nstr(m, 5)})"
        if abs(m) <= TIE:  # an exact tie (up to the oracle's precision): never correct
            assert i in wrong or i in undecided, "a tie certified correct: " + where
        elif m > 0:
            assert i not in wrong and i not in undecided, "a correct point not certified correct: " + where
            least = m if least is None else min(least, m)
        else:
            assert i in wrong, "a wrong point not certified wrong: " + where
    assert v.correct + len(wrong) + len(undecided) == task.size
    if least is not None and v.margin is not None:
        lo, hi = (mpmath.mpf(x.numerator) / x.denominator for x in v.margin)
        assert lo - TIE <= least <= hi + TIE, f"min margin {least} outside [{lo}, {hi}] for {cfg}"
    return v.correct, len(wrong), len(undecided)


@pytest.mark.slow
def test_500_random_checkpoints_agree_with_the_independent_evaluator():
    rng = np.random.default_rng(2024)
    task = make_task("max-of-k", vocab=2, k=2)
    totals = np.zeros(3, dtype=int)
    kinds = ["plain", "near", "bias", "tie", "eps", "constant"]
    for i in range(510):
        cfg, sd = random_checkpoint(rng, kind=kinds[i % len(kinds)])
        totals += _check_agreement(cfg, sd, task)
    correct, wrong, undecided = totals
    assert correct > 500 and wrong > 300  # both verdicts are exercised (ties are wrong)
    assert undecided == 0  # near-ties down to 2^-70 are decided; exact ties through the read-out are wrong


def test_a_larger_vocabulary_and_three_positions_agree_too():
    rng = np.random.default_rng(7)
    task = make_task("max-of-k", vocab=3, k=3)
    for kind in ("plain", "near", "eps", "constant", "tie"):
        cfg, sd = random_checkpoint(rng, vocab=3, n_ctx=3, kind=kind)
        _check_agreement(cfg, sd, task)


def test_zero_variance_row_reads_exactly_the_bias():
    """A constant embedding under LayerNorm: x - mean = 0 exactly, so ln1 gives exactly its bias b;
    the arb stage computes it exactly (no ball around 0), and the verdict agrees with the oracle."""
    from depthcert.checkers.norm_activation_balls import NormBall

    rng = np.random.default_rng(3)
    cfg, sd = random_checkpoint(rng, kind="constant")
    cfg.update(normalization_type="LN", n_layers=1)
    sd = {k: v for k, v in sd.items()}
    model = tl.model_from_state_dict(cfg, {**{k: v for k, v in _fill(cfg, sd, rng).items()}})
    N = model.layers[0].norm_attn
    import flint

    ball = NormBall(N, model.constant_index, model.dim).at(64)
    h = [0] * model.dim
    h[0], h[len(model.vocab)], h[model.constant_index] = 1, 1, 1  # token 0 at position 0
    G = ball.exact(flint.fmpq_mat([[v] for v in h]))
    assert all(G[N.offset + i, 0].is_exact() and G[N.offset + i, 0].is_zero() for i in range(N.size))
    assert G[model.constant_index, 0] == 1
    # the float stage: the first norm from exact rationals, exactly 0 with radius 0 for this row
    from depthcert.checkers.norm_activation_intervals import NormMatrices, normalize_exact

    nm = NormMatrices(N, model.constant_index, model.dim)
    other = list(h)
    other[0], other[1] = 0, 1  # token 1 at position 0: not constant
    Gf = normalize_exact(np.array([[h, other]], dtype=np.int64), 1, nm)
    block = slice(N.offset, N.offset + N.size)
    assert (Gf.m[0, 0, block] == 0).all() and (Gf.r[0, 0, block] == 0).all()
    assert Gf.m[0, 0, model.constant_index] == 1 and Gf.r[0, 0, model.constant_index] == 0
    assert (Gf.m[0, 1, block] != 0).any() and (Gf.r[0, 1, block] < 1e-15 * (1 + abs(Gf.m[0, 1, block]))).all()


def _fill(cfg, sd, rng):
    """sd completed to the shapes of cfg (new entries random)."""
    out = {}
    for key, shape in _shapes(cfg).items():
        out[key] = sd[key] if key in sd and sd[key].shape == shape else rng.standard_normal(shape) + (key.endswith(".w"))
    return out


def test_epsilon_is_the_exact_float64_of_the_config():
    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, n_ctx=2, attn_only=True, normalization_type="LNPre",
               eps=1e-5)
    rng = np.random.default_rng(0)
    model = tl.model_from_state_dict(cfg, _fill(cfg, {}, rng))
    assert model.layers[0].norm_attn.eps == Fraction(1e-5) != Fraction(1, 100000)
    assert model.norm_final.kind == "layernorm" and model.layers[0].norm_attn.kind == "layernorm"
    rms = tl.model_from_state_dict({**cfg, "normalization_type": "LN", "final_rms": True},
                                   _fill({**cfg, "normalization_type": "LN", "final_rms": True}, {}, rng))
    assert rms.norm_final.kind == "rmsnorm" and rms.layers[0].norm_attn.kind == "layernorm"


def test_exact_ties_through_gelu_are_undecided_with_the_reason():
    """A tie that arises inside the model (two classes whose read-outs differ but whose logits
    agree by symmetry) cannot be proven through erf; the balls' decision stands and an
    unresolvable point says why."""
    from depthcert.checkers.norm_activation_balls import tie_reason

    rng = np.random.default_rng(5)
    cfg, sd = random_checkpoint(rng, kind="plain")
    cfg.update(attn_only=False, act_fn="gelu", normalization_type="LN")
    model = tl.model_from_state_dict(cfg, _fill(cfg, sd, rng))
    assert "erf" in tie_reason(model) or "gelu" in tie_reason(model)
    cfg.update(attn_only=True, act_fn=None)
    model = tl.model_from_state_dict(cfg, _fill(cfg, sd, rng))
    assert "square roots" in tie_reason(model)


def test_scipy_erfc_is_within_erfc_rel_of_arb():
    """norm_activation_intervals assumes |erfc(x) - scipy.special.erfc(x)| <= ERFC_REL erfc(x) on
    [ERFC_LOW, ERFC_HIGH]: checked against arb on 6,000 arguments (random, the ends, integers)."""
    import flint
    from scipy.special import erfc

    from depthcert.checkers.norm_activation_intervals import ERFC_HIGH, ERFC_LOW, ERFC_REL

    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(ERFC_LOW, ERFC_HIGH, 4000), rng.uniform(-1, 1, 1000) * 1e-3,
                         np.arange(ERFC_LOW, ERFC_HIGH + 1), [ERFC_LOW, ERFC_HIGH, np.nextafter(ERFC_HIGH, 0)],
                         rng.uniform(-3, 3, 1000)])
    old = flint.ctx.prec
    flint.ctx.prec = 160
    try:
        for x in xs:
            exact = flint.arb(flint.fmpq(*Fraction(float(x)).as_integer_ratio())).erfc()
            got = flint.arb(flint.fmpq(*Fraction(float(erfc(x))).as_integer_ratio()))
            assert abs(got - exact) < exact * ERFC_REL, x
        assert flint.arb(int(ERFC_HIGH)).erfc() < flint.arb(2) ** -980
    finally:
        flint.ctx.prec = old


# ---------------------------------------------------------------------------- a live HookedTransformer

CONFIGS = [dict(normalization_type="LN", attn_only=True), dict(normalization_type="LN", act_fn="gelu"),
           dict(normalization_type="LN", act_fn="gelu_new", final_rms=True), dict(normalization_type="RMS", act_fn="silu"),
           dict(normalization_type="RMSPre", act_fn="gelu_fast"), dict(normalization_type=None, act_fn="gelu"),
           dict(normalization_type="LN", act_fn="relu", fold=True), dict(normalization_type="RMS", act_fn="gelu", fold=True),
           dict(normalization_type="LNPre", act_fn="gelu_pytorch_tanh", eps=0.5)]


@pytest.mark.parametrize("change", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_certified_enclosures_contain_a_live_hooked_transformers_logits(change):
    pytest.importorskip("transformer_lens")
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        change = dict(change)
        fold = change.pop("fold", False)
        base = dict(n_layers=2, d_model=6, n_heads=2, d_head=3, d_vocab=4, n_ctx=3, d_mlp=5, act_fn="relu",
                    attn_only=False, dtype=torch.float64, seed=11, device="cpu")
        ht = HookedTransformer(HookedTransformerConfig(**{**base, **change}))
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for k, v in ht.state_dict().items():
                if v.is_floating_point() and not k.endswith(("mask", "IGNORE")):
                    v.add_(torch.randn(v.shape, generator=g, dtype=v.dtype) * 0.4)
        if fold:  # what TransformerLens users load: LN folded into the weights (LNPre / RMSPre)
            ht.process_weights_(fold_ln=True, center_writing_weights=True, center_unembed=True)
        task = make_task("max-of-k", vocab=4, k=3)
        ids = task.decode(np.arange(task.size))[0]
        with torch.no_grad():
            ref = ht(torch.tensor(ids))[:, -1].numpy()
    model = tl.model_from_hooked_transformer(ht)
    if fold:
        assert ht.cfg.normalization_type.endswith("Pre")
    # float64 intervals: the margin (label = TransformerLens's argmax) of every input
    from depthcert.checkers.softmax_balls import SoftmaxDecider
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_intervals import IntervalForward

    dec = SoftmaxDecider(model)
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    labels = np.full(ids.shape, -1)
    labels[:, -1] = ref.argmax(axis=1)
    status, lo, hi, _ = IntervalForward(model, dec.first).decide(H, den, labels)
    srt = np.sort(ref, axis=1)
    margin = srt[:, -1] - srt[:, -2]
    slack = 1e-12 * (1 + np.abs(ref).max())  # TransformerLens's own float64 rounding
    ok = status == 1
    assert ok.mean() > 0.9
    assert ((lo[ok] <= margin[ok] + slack) & (margin[ok] <= hi[ok] + slack)).all()
    # arb: every logit's enclosure, on a spread of inputs
    for i in range(0, len(ids), 7):
        d = dec.decide(H[i], den, [(ids.shape[1] - 1, int(labels[i, -1]))], logits=True)
        for c, (a, b) in enumerate(d.logits):
            assert float(a) - slack <= ref[i, c] <= float(b) + slack, (i, c, float(a), ref[i, c], float(b))


def test_cli_decides_a_layernorm_checkpoint_and_refuses_what_it_cannot_do(capsys):
    """verify-model on the shipped LayerNorm example: decided (exit 0); --method tables and
    --robustness (the weight balls know no norms) are refused in one line, exit 2."""
    from depthcert.cli.common import run_main
    from depthcert.cli.verify_model import verify_model_main

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "examples",
                        "layernorm-tiny.safetensors")
    argv = [path, "--task", "max-of-k", "--vocab", "4", "--k", "3"]
    assert run_main(verify_model_main, argv + ["--json"]) == 1  # refuted: some points wrong
    out = capsys.readouterr().out
    assert '"correct": 19' in out and '"undecided_points": 0' in out
    for extra, msg in ((["--method", "tables"], "LayerNorm/RMSNorm"), (["--robustness"], "LayerNorm/RMSNorm")):
        assert run_main(verify_model_main, argv + extra) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1


def test_a_tie_through_a_layernorm_is_undecided_with_the_reason():
    """The final LNPre's output sums to exactly 0, so read-out columns that differ by a constant
    vector give exactly equal logits; the difference row is not 0, the scores are algebraic, so
    no exact decision applies: undecided at the cap, never correct, the reason in `limit`."""
    from depthcert.checkers.evaluate import Evaluator
    from depthcert.checkers.softmax_balls import SoftmaxDecider

    cfg = dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, n_ctx=2, attn_only=True,
               normalization_type="LNPre", eps=1e-5)
    rng = np.random.default_rng(4)
    sd = _fill(cfg, {}, rng)
    sd["unembed.W_U"] = np.round(sd["unembed.W_U"] * 1024) / 1024  # so that + 0.5 is exact in float64
    sd["unembed.W_U"][:, 1] = sd["unembed.W_U"][:, 0] + 0.5  # + a constant vector: n . 1 = 0 exactly
    sd["unembed.b_U"][1] = sd["unembed.b_U"][0]
    model = tl.model_from_state_dict(cfg, sd)
    task = make_task("max-of-k", vocab=2, k=2)
    v = decide_all(model, task, max_precision=256)
    assert v.correct == 0 and len(v.undecided) > 0  # every point ties classes 0 and 1 exactly
    oracle = TLOracle(cfg, sd)
    for i in v.undecided:
        pt = task.point(int(i))
        assert abs(oracle.margin([int(t) for t in pt.tokens], int(pt.label))) <= TIE
    dec = SoftmaxDecider(model, 64, 256)
    ids = task.decode(np.array([int(v.undecided[0])]))[0]
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    d = dec.decide(H[0], den, [(1, int(task.point(int(v.undecided[0])).label))])
    assert d.status == "undecided" and "square roots" in d.limit and "precision cap (256 bits)" in d.limit


def test_the_support_table_names_every_config_field():
    """docs/trained-models.md's table lists every field of HookedTransformerConfig.to_dict() (so a
    field added by a new TransformerLens release is noticed), and no field twice."""
    pytest.importorskip("transformer_lens")
    import re

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens import HookedTransformerConfig

        fields = set(HookedTransformerConfig(n_layers=1, d_model=4, n_heads=1, d_head=4, d_vocab=3, n_ctx=2,
                                             act_fn="relu").to_dict())
    doc = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                            "trained-models.md")).read()
    table = doc.split("### What is supported: every field of `HookedTransformerConfig`")[1].split("\n\n")[2]
    named = []
    for line in table.splitlines()[2:]:
        named += re.findall(r"`(\w+)`", line.split(" | ")[0])
    assert len(named) == len(set(named))
    assert set(named) == fields, (sorted(fields - set(named)), sorted(set(named) - fields))


def test_norm_and_gelu_models_are_not_exported_nor_written_as_weights_files():
    from depthcert.checkers.errors import BadInput
    from depthcert.checkers.weights_file import model_to_json

    rng = np.random.default_rng(9)
    for change in ({"normalization_type": "RMS"}, {"attn_only": False, "d_mlp": 3, "act_fn": "gelu"}):
        cfg = {**dict(n_layers=1, d_model=3, n_heads=1, d_head=2, d_vocab=2, n_ctx=2, attn_only=True,
                      normalization_type=None), **change}
        model = tl.model_from_state_dict(cfg, _fill(cfg, {}, rng))
        with pytest.raises(BadInput, match="LayerNorm/RMSNorm or gelu/silu"):
            tl.export_state_dict(model)
        with pytest.raises(BadInput, match="LayerNorm/RMSNorm or gelu/silu"):
            model_to_json(model)
