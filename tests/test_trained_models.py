"""Trained models decided exactly: Max-of-K, TransformerLens in and out, verify-model, certified tables."""
from __future__ import annotations

import json
import os
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcert.checkers.accuracy import decide_all
from depthcert.checkers.errors import BadInput
from depthcert.checkers.tasks import make_task
from depthcert.cli.verify_model import verify_model_main
from depthcert.interop import transformerlens as tl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "docs", "examples")
CHECKPOINT = os.path.join(ROOT, "training", "checkpoints", "max_of_k_v64_k4.safetensors")
torch = pytest.importorskip("torch")
from depthcert.training.tl_forward import TLTransformer  # noqa: E402


def tiny_config(**kw):
    cfg = dict(n_layers=1, d_model=8, n_heads=2, d_head=4, d_vocab=6, d_vocab_out=6, n_ctx=3, attn_only=True,
               normalization_type=None, attention_dir="causal")
    cfg.update(kw)
    return cfg


def random_tl(cfg, seed: int, spread: float = 0.3) -> TLTransformer:
    """A TL-shaped model with float32 weights (stored as float64, exactly)."""
    m = TLTransformer(cfg, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    m.init_weights(g)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * spread)
            p.copy_(p.float().double())
    return m


def ball_logits(model, ids):
    """Certified enclosures (lo, hi) of every class logit at the last position, from arb."""
    from depthcert.checkers import softmax_balls as sb
    from depthcert.checkers.evaluate import Evaluator

    dec = sb.SoftmaxDecider(model)
    H, den = Evaluator(dec.prefix_model()).logits_all(ids)
    n = ids.shape[1]
    out = []
    for i in range(len(ids)):
        d = dec.decide(H[i], den, [(n - 1, 0)], logits=True)
        out.append([(float(a), float(b)) for a, b in d.logits])
    return np.array(out)  # (B, C, 2)


# ---------------------------------------------------------------------------- the task

def test_max_of_k_task_enumerates_every_sequence_with_its_maximum():
    t = make_task("max-of-k", vocab=8, k=3)
    assert t.size == 8**3 and t.length == 3 and t.classes == t.vocab
    ids, labels = t.decode(np.arange(t.size))
    assert len({tuple(r) for r in ids}) == t.size
    assert (labels == ids.max(axis=1)).all()
    assert t.point(8**3 - 1).tokens == ("7", "7", "7")


@pytest.mark.parametrize("opts, msg", [({"vocab": 1}, "--vocab must be >= 2"), ({"vocab": 2**20, "k": 2}, "<="),
                                       ({"vocab": 64, "k": 20}, r"2\^62"), ({"alphabet": 3}, "does not apply")])
def test_max_of_k_sizes_are_guarded(opts, msg):
    with pytest.raises(BadInput, match=msg):
        make_task("max-of-k", **opts)


# ---------------------------------------------------------------------------- TransformerLens in

def test_reader_is_exact_and_matches_the_float64_forward():
    """Every float32 weight becomes its dyadic rational; the certified logits enclose TL's float64 ones."""
    cfg = tiny_config()
    m = random_tl(cfg, 0)
    model = tl.model_from_state_dict(cfg, {k: v.float() for k, v in m.state_dict().items()})
    assert model.kinds() == "softmax+causal+constant-row" and model.dim == 6 + 3 + 1 + 8
    ids = make_task("max-of-k", vocab=6, k=3).decode(np.arange(0, 216, 17))[0]
    with torch.no_grad():
        ref = m(torch.tensor(ids))[:, -1].numpy()
    enc = ball_logits(model, ids)
    assert (enc[..., 0] - 1e-12 <= ref).all() and (ref <= enc[..., 1] + 1e-12).all()


def test_mlp_models_are_read_and_decided():
    cfg = tiny_config(attn_only=False, d_mlp=5, act_fn="relu", n_layers=2, attention_dir="bidirectional")
    m = random_tl(cfg, 1)
    model = tl.model_from_state_dict(cfg, m.state_dict())
    assert model.n_layers == 2 and all(L.mlp is not None and not L.causal for L in model.layers)
    ids = make_task("max-of-k", vocab=6, k=3).decode(np.arange(0, 216, 31))[0]
    with torch.no_grad():
        ref = m(torch.tensor(ids))[:, -1].numpy()
    enc = ball_logits(model, ids)
    assert (enc[..., 0] - 1e-12 <= ref).all() and (ref <= enc[..., 1] + 1e-12).all()


@pytest.mark.parametrize("change, msg", [
    ({"normalization_type": "BatchNorm"}, "normalization_type 'BatchNorm' is not supported"),
    ({"normalization_type": "LN", "eps": 0.0}, "eps must be a positive finite number"),
    ({"normalization_type": "RMS", "eps": float("inf")}, "eps must be a positive finite number"),
    ({"normalization_type": "LN", "eps": True}, "eps must be a positive finite number"),
    ({"attn_only": False, "d_mlp": 4, "act_fn": "solu_ln"}, "act_fn 'solu_ln' is not supported"),
    ({"attn_only": False, "d_mlp": 4, "act_fn": "relu2"}, "act_fn 'relu2' is not supported"),
    ({"normalization_type": "RMS", "original_architecture": "Olmo2ForCausalLM"}, "post-norm"),
    ({"use_qk_norm": True}, "QK normalization"),
    ({"positional_embedding_type": "rotary"}, "rotary"),
    ({"n_key_value_heads": 1}, "grouped-query"),
    ({"attn_scale": 3.0}, "attn_scale"),
    ({"d_model": None}, "d_model must be an integer"),
])
def test_unsupported_configurations_are_refused_in_one_line(change, msg):
    with pytest.raises(BadInput, match=msg):
        tl.config_from_dict(tiny_config(**change))


def test_a_config_without_the_sizes_is_refused_by_name():
    with pytest.raises(BadInput, match="lacks d_model, d_head"):
        tl.config_from_dict({k: v for k, v in tiny_config().items() if k not in ("d_model", "d_head")})
    with pytest.raises(BadInput, match="lacks n_layers, d_model, n_heads, d_head, d_vocab, n_ctx"):
        tl.config_from_dict({})


def test_state_dict_problems_are_refused():
    cfg = tiny_config()
    sd = {k: v.numpy() for k, v in random_tl(cfg, 0).state_dict().items()}
    with pytest.raises(BadInput, match="lacks blocks.0.attn.W_Q"):
        tl.model_from_state_dict(cfg, {k: v for k, v in sd.items() if k != "blocks.0.attn.W_Q"})
    with pytest.raises(BadInput, match="has shape"):
        tl.model_from_state_dict(cfg, {**sd, "unembed.b_U": np.zeros(7)})
    with pytest.raises(BadInput, match="normalization weights .* that normalization_type None does not have"):
        tl.model_from_state_dict(cfg, {**sd, "blocks.0.ln1.w": np.ones(8)})
    bad = sd["embed.W_E"].copy()
    bad[0, 0] = np.nan
    with pytest.raises(BadInput, match="NaN"):
        tl.model_from_state_dict(cfg, {**sd, "embed.W_E": bad})


def test_safetensors_checkpoint_round_trips_float32_bits(tmp_path):
    cfg = tiny_config()
    sd = {k: v.float().numpy() for k, v in random_tl(cfg, 2).state_dict().items()}
    path = str(tmp_path / "m.safetensors")
    tl.write_checkpoint(path, cfg, sd)
    cfg2, sd2 = tl.read_checkpoint(path)
    assert cfg2["d_model"] == 8
    for k, v in sd.items():
        assert (sd2[k] == v.astype(np.float64)).all()


# ---------------------------------------------------------------------------- certified tables

@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), heads=st.integers(1, 2), spread=st.sampled_from([0.1, 1.0, 4.0]),
       causal=st.booleans())
def test_tables_decide_exactly_as_arb_does(seed, heads, spread, causal):
    """The certified float64 tables and arb point by point give the same wrong points, and enclosures
    of the minimum margin that overlap, on random small one-layer models."""
    cfg = tiny_config(n_heads=heads, d_vocab=4, d_vocab_out=4, n_ctx=3,
                      attention_dir="causal" if causal else "bidirectional")
    model = tl.model_from_state_dict(cfg, random_tl(cfg, seed, spread).state_dict())
    task = make_task("max-of-k", vocab=4, k=3)
    a = decide_all(model, task)
    b = decide_all(model, task, method="balls")
    c = decide_all(model, task, method="intervals")
    assert a.by_tables + a.by_balls == task.size and b.by_tables == 0
    for x in (a, c):
        assert (x.wrong == b.wrong).all() and (x.undecided == b.undecided).all() and x.correct == b.correct
        if x.margin is not None:
            assert x.margin[0] <= b.margin[1] and b.margin[0] <= x.margin[1]


def test_points_near_a_tie_go_to_arb():
    """A tie is never decided in float: the tables leave it to arb, where the exact tie decision
    (checkers/softmax_ties.py) proves it a tie, which counts as wrong."""
    from depthcert.checkers.tasks.dataset_file import load_dataset
    from depthcert.checkers.weights_file import load_weights

    task = load_dataset(os.path.join(EXAMPLES, "softmax-tie-data.json"))
    model = load_weights(os.path.join(EXAMPLES, "softmax-tie-weights.json"), task)
    v = decide_all(model, task, max_precision=128)
    assert v.by_tables == 0 and v.by_balls == 1 and list(v.wrong) == [0] and v.correct == 0


# ---------------------------------------------------------------------------- verify-model

def run(argv, capsys):
    code = verify_model_main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_reference_checkpoint_on_a_smaller_k_counts_every_point(capsys, tmp_path):
    wrong = tmp_path / "wrong.json"
    code, out, _ = run([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--wrong-out", str(wrong)], capsys)
    assert code == 1  # refuted: 76 points wrong
    line = next(ln for ln in out.splitlines() if ln.startswith("certified accuracy"))
    correct, total = (int(x.replace(",", "")) for x in line.split()[2].split("/"))
    listed = json.loads(wrong.read_text())
    assert total == 64**2 and correct + len(listed["wrong"]) == total and listed["undecided"] == []
    assert all(row[1].split()[-1] != "x" for row in listed["wrong"])


def test_require_all_refutes_and_exit_codes(capsys, tmp_path):
    code, out, _ = run([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--require-all"], capsys)
    assert code == 1 and "verdict        refuted" in out
    from depthcert.checkers.weights_file import model_to_json
    from test_weights_v2 import near_tie_model  # class a beats b by about 10^-60, beyond 128-bit balls

    (tmp_path / "w.json").write_text(json.dumps(model_to_json(near_tie_model())))
    (tmp_path / "d.json").write_text(json.dumps({"format": "depthcert.dataset", "version": 1,
                                                 "sequences": [["x", "y"]], "labels": ["a"]}))
    argv = [str(tmp_path / "w.json"), "--dataset", str(tmp_path / "d.json")]
    code, out, _ = run(argv + ["--max-precision", "128"], capsys)
    assert code == 3 and "undecided      1" in out and "point 0: x y  label a" in out
    code, out, _ = run(argv + ["--require-all"], capsys)  # the default cap separates it
    assert code == 0 and "certified accuracy 1/1" in out
    code, out, _ = run([os.path.join(EXAMPLES, "prev-token-hardmax.json"), "--dataset",
                        os.path.join(EXAMPLES, "prev-token-data.json"), "--require-all"], capsys)
    assert code == 0 and "certified accuracy 81/81" in out and "verified" in out


@pytest.mark.parametrize("argv, msg", [
    (["missing.safetensors", "--task", "max-of-k"], "No such file"),
    ([CHECKPOINT, "--task", "max-of-k", "--vocab", "0"], "--vocab"),
    ([CHECKPOINT, "--task", "nosuch"], "unknown task"),
    ([CHECKPOINT, "--task", "icqa", "--k", "1"], "vocabulary lacks"),
    ([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "5", "--max-points", "2000000000"], "positions"),
    ([CHECKPOINT, "--task", "max-of-k", "--workers", "2"], "--workers applies with --dask"),
    ([CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "6"], "more than --max-points"),
    ([CHECKPOINT, "--task", "max-of-k", "--show", "-1"], "--show"),
    ([os.path.join(EXAMPLES, "prev-token-data.json"), "--task", "max-of-k"], "depthcert.weights"),
])
def test_bad_input_is_one_line_exit_2(argv, msg, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_layernorm_checkpoint_is_decided_and_its_weights_are_checked(tmp_path, capsys):
    cfg = tiny_config(normalization_type="LN")
    sd = {k: v.float().numpy() for k, v in random_tl(tiny_config(), 0).state_dict().items()}
    sd.update({"blocks.0.ln1.w": np.ones(8, np.float32), "blocks.0.ln1.b": np.zeros(8, np.float32),
               "ln_final.w": np.ones(8, np.float32), "ln_final.b": np.zeros(8, np.float32)})
    path = str(tmp_path / "ln.safetensors")
    tl.write_checkpoint(path, cfg, sd)
    code, out, err = run([path, "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == (1 if "verdict        refuted" in out else 0) and "layernorm" in out and "/216" in out, err
    del sd["ln_final.b"]  # a missing normalization parameter, and one the config does not have
    tl.write_checkpoint(path, cfg, sd)
    code, out, err = run([path, "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == 2 and out == "" and "lacks ln_final.b" in err and len(err.strip().splitlines()) == 1
    sd["ln_final.b"] = np.zeros(8, np.float32)
    tl.write_checkpoint(path, tiny_config(normalization_type="RMS"), sd)
    code, out, err = run([path, "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == 2 and out == "" and "(blocks.0.ln1.b)" in err and len(err.strip().splitlines()) == 1


def test_pt_checkpoint_with_separate_config(tmp_path, capsys):
    cfg = tiny_config()
    m = random_tl(cfg, 3)
    pt = str(tmp_path / "m.pt")
    torch.save({k: v.float() for k, v in m.state_dict().items()}, pt)
    code, _, err = run([pt, "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == 2 and "--config" in err
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    code, out, _ = run([pt, "--config", str(tmp_path / "cfg.json"), "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == (1 if "verdict        refuted" in out else 0) and "/216" in out


def test_pt_checkpoint_with_the_config_as_transformer_lens_writes_it(tmp_path, capsys):
    """torch.save({"config": cfg.to_dict(), "state_dict": ...}): cfg.to_dict() holds attn_scale as a
    numpy float64 and dtype as a torch dtype, which the weights-only load must accept."""
    cfg = tiny_config(d_head=3)
    m = random_tl(cfg, 4)
    pt = str(tmp_path / "m.pt")
    torch.save({"config": {**cfg, "attn_scale": np.sqrt(3.0), "dtype": torch.float32},
                "state_dict": {k: v.float() for k, v in m.state_dict().items()}}, pt)
    code, out, err = run([pt, "--task", "max-of-k", "--vocab", "6", "--k", "3", "--json"], capsys)
    assert code == (1 if json.loads(out)["verdict"] == "refuted" else 0), err
    same = tl.model_from_state_dict(cfg, {k: v.float() for k, v in m.state_dict().items()})
    v = decide_all(same, make_task("max-of-k", vocab=6, k=3))
    assert json.loads(out)["correct"] == v.correct


def test_transformer_lens_checkpoints_with_layernorm_or_gelu_are_decided(tmp_path, capsys):
    """HookedTransformers made by transformer-lens and saved as its users save them (.pt with the
    config, safetensors with the config in the metadata): LayerNorm, the LNPre that fold_ln leaves,
    RMSNorm and GELU are decided, as the same model without them is; solu is refused in one line."""
    pytest.importorskip("transformer_lens")
    from depthcert.interop.checkpoint_files import write_safetensors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        def make(**kw):
            c = dict(n_layers=1, d_model=8, n_heads=2, d_head=3, d_vocab=5, n_ctx=3, attn_only=True,
                     normalization_type=None, act_fn=None, seed=0)
            return HookedTransformer(HookedTransformerConfig(**{**c, **kw}))

        folded = make(normalization_type="LN")
        folded.process_weights_(fold_ln=True)
        cases = [(make(normalization_type="LN"), None), (folded, None), (make(normalization_type="RMS"), None),
                 (make(attn_only=False, d_mlp=4, act_fn="gelu"), None),
                 (make(attn_only=False, d_mlp=4, act_fn="gelu_new", normalization_type="LN"), None),
                 (make(attn_only=False, d_mlp=4, act_fn="solu_ln"), "act_fn 'solu_ln' is not supported"),
                 (make(attn_only=False, d_mlp=4, act_fn="relu"), None)]
    argv = ["--task", "max-of-k", "--vocab", "5", "--k", "3"]
    for i, (ht, msg) in enumerate(cases):
        pt, st = str(tmp_path / f"m{i}.pt"), str(tmp_path / f"m{i}.safetensors")
        torch.save({"config": ht.cfg.to_dict(), "state_dict": ht.state_dict()}, pt)
        write_safetensors(st, {k: v.float().numpy() for k, v in ht.state_dict().items() if v.is_floating_point()},
                          {tl.CONFIG_KEY: json.dumps(tl._plain(ht.cfg.to_dict()))})
        for path in (pt, st):
            code, out, err = run([path] + argv, capsys)
            if msg is None:
                assert code == (1 if "verdict        refuted" in out else 0) and "certified accuracy" in out, err
            else:
                assert code == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1


def test_journal_resumes_to_the_same_counts(tmp_path, capsys):
    j = str(tmp_path / "run.journal")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "1000", "--json", "--journal", j]
    code, out1, _ = run(argv, capsys)
    lines = open(j).read().splitlines()
    assert code == (1 if json.loads(out1)["verdict"] == "refuted" else 0) and len(lines) == 1 + 5
    with open(j, "w") as fh:  # keep two chunks and a torn line, as after a crash
        fh.write("\n".join(lines[:3]) + "\n" + lines[3][:20])
    code, out2, _ = run(argv, capsys)
    a, b = json.loads(out1), json.loads(out2)
    assert code == 1 and (a["correct"], a["wrong"], a["min_margin"]) == (b["correct"], b["wrong"], b["min_margin"])
    other = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "3", "--chunk-points", "1000", "--journal", j]
    code, _, err = run(other, capsys)
    assert code == 2 and "another" in err


def _journal_lines(j):
    return [json.loads(x) for x in open(j).read().splitlines()]


def _rewrite(j, number: int, resum: bool, **changes):
    """Line `number` of journal `j` with `changes`, its checksum recomputed when `resum`."""
    from depthcert.checkers.journal import line_checksum

    lines = open(j).read().splitlines()
    obj = dict(json.loads(lines[number - 1]), **changes)
    if resum:
        obj["sum"] = line_checksum(obj)
    lines[number - 1] = json.dumps(obj)
    open(j, "w").write("\n".join(lines) + "\n")
    return obj


@pytest.mark.parametrize("edit, resum, needle", [
    (lambda r: {"margin": ["1/1000000", "1/500000"]}, True, "recorded margin upper end 2e-06, decided again, has "
                                                            "margin in"),
    (lambda r: {"margin": [str(2 * Fraction(r["margin"][1]))] * 2}, True, "recorded margin lower end"),
    (lambda r: {"wrong": r["wrong"][1:], "correct": r["correct"] + 1}, False, "checksum mismatch"),
    (lambda r: {"correct": r["correct"] + 1}, True, "do not add up"),
    (lambda r: {"low_index": r["wrong"][0]}, True, "is not a correct point of the chunk"),
    (lambda r: {"high_index": -1}, True, "is not a correct point of the chunk"),
    (lambda r: {"high_index": str(r["high_index"])}, True, "must be integers"),
    (lambda r: {"wrong": r["wrong"][::-1]}, True, "increasing"),
    (lambda r: {"run": "0" * 64}, True, "another run"),
])
def test_journal_lines_cannot_lie(tmp_path, capsys, edit, resum, needle):
    """A verify-model journal line edited (raw: the checksum catches it; with the checksum
    recomputed: the validation, or the margin's two named points decided again, catch it) gives
    exit 2 and one line naming the journal line, never the forged accuracy or margin."""
    j = str(tmp_path / "run.journal")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "1000", "--json", "--journal", j]
    code, out1, _ = run(argv, capsys)
    assert code == 1  # refuted: the model gets some points wrong
    line = _journal_lines(j)[2]
    assert line["wrong"] and line["margin"] and line["lo"] <= line["low_index"] < line["hi"]
    _rewrite(j, 3, resum, **edit(line))
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert err.startswith(f"error: journal {j} line 3: ") and needle in err, err


def test_honest_journal_resumes_and_old_version_is_refused(tmp_path, capsys):
    """Resumed from every chunk: the same counts, wrong points and margin as a fresh run; the
    margin points of every chunk are decided again (nothing else).  A version 1 header is refused."""
    j = str(tmp_path / "run.journal")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "700", "--json", "--journal", j]
    code, out1, _ = run(argv, capsys)
    code2, out2, err = run(argv, capsys)
    a, b = json.loads(out1), json.loads(out2)
    assert code == code2 == 1 and err == ""  # refuted, resumed or not
    assert (a["correct"], a["wrong"], a["min_margin"]) == (b["correct"], b["wrong"], b["min_margin"])
    lines = _journal_lines(j)
    assert len(lines) == 1 + 6 and lines[0]["version"] == 2
    lines[0]["version"] = 1
    open(j, "w").write("\n".join(json.dumps(x) for x in lines) + "\n")
    code, out, err = run(argv, capsys)
    assert code == 2 and "version 1" in err and "start a new journal file" in err


# ---------------------------------------------------------------------------- TransformerLens out

def test_export_refuses_relu_and_hardmax(capsys):
    from depthcert.checkers.weights_file import load_weights

    model = load_weights(os.path.join(EXAMPLES, "prev-token-hardmax.json"))
    with pytest.raises(BadInput, match="only softmax attention, this model has hardmax heads"):
        tl.export_state_dict(model)


def test_export_computes_the_exact_models_logits():
    """Export -> the torch HookedTransformer forward: logits inside depthcert's certified enclosures
    (up to the float64 rounding of the exported weights); import of the export -> the same verdicts."""
    from depthcert.checkers.tasks.dataset_file import load_dataset
    from depthcert.checkers.weights_file import load_weights

    model = load_weights(os.path.join(EXAMPLES, "prev-token-softmax-1.json"))
    cfg, sd = tl.export_state_dict(model, np.float64)
    t = TLTransformer(cfg, dtype=torch.float64)
    t.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    task = load_dataset(os.path.join(EXAMPLES, "prev-token-data.json"))
    ids = task.decode(np.arange(task.size))[0]
    with torch.no_grad():
        out = t(torch.tensor(ids))[:, -1].numpy()
    enc = ball_logits(model, ids)
    assert (np.abs(out - enc.mean(axis=2)) <= 1e-12 + (enc[..., 1] - enc[..., 0])).all()
    back = tl.model_from_state_dict(cfg, sd, model.vocab, model.classes, outputs="all")  # read back exactly
    a, b = decide_all(model, task), decide_all(back, task)
    assert a.correct == b.correct and (a.wrong == b.wrong).all()


# ---------------------------------------------------------------------------- with transformer-lens (interop extra)

@pytest.mark.parametrize("extra, dtype", [
    ({}, "float32"),
    ({"n_layers": 2, "n_heads": 3, "d_head": 3, "attn_only": False, "d_mlp": 5, "act_fn": "relu",
      "attention_dir": "bidirectional"}, "bfloat16"),
    ({"n_layers": 2, "n_heads": 1, "d_head": 5, "attn_only": False, "d_mlp": 3, "act_fn": "relu"}, "float16"),
])
def test_round_trip_through_transformer_lens(extra, dtype):
    """In: a live HookedTransformer (biases, MLPs, 1/sqrt(d_head) irrational, float16/bfloat16 weights)
    -> exact Model, certified logits enclose TransformerLens's float64 logits; out: the export loaded
    into a HookedTransformer reproduces depthcert's logits."""
    pytest.importorskip("transformer_lens")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        cfg = tiny_config(d_vocab=5, d_vocab_out=5, **extra)
        ht = HookedTransformer(HookedTransformerConfig(**{"act_fn": None, **cfg, "dtype": torch.float64, "seed": 0}))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ht.parameters():
            p.add_(torch.randn(p.shape, dtype=p.dtype, generator=g) * 0.3)
            p.copy_(p.to(getattr(torch, dtype)).double())
    model = tl.model_from_hooked_transformer(ht)
    assert model.n_layers == cfg["n_layers"] and all((L.mlp is not None) == (not cfg["attn_only"]) for L in model.layers)
    ids = make_task("max-of-k", vocab=5, k=3).decode(np.arange(0, 125, 7))[0]
    with torch.no_grad():
        ref = ht(torch.tensor(ids))[:, -1].numpy()
        mine = TLTransformer(cfg, torch.float64)
        mine.load_state_dict({k: v for k, v in ht.state_dict().items() if k in mine.state_dict()})
        assert np.abs(mine(torch.tensor(ids))[:, -1].numpy() - ref).max() < 1e-12
    enc = ball_logits(model, ids)
    assert (enc[..., 0] - 1e-12 <= ref).all() and (ref <= enc[..., 1] + 1e-12).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = tl.to_hooked_transformer(model, torch.float64)
    with torch.no_grad():
        again = back(torch.tensor(ids))[:, -1].numpy()
    assert (np.abs(again - enc.mean(axis=2)) <= 1e-9).all()


def test_dask_shards_give_the_single_process_counts(capsys):
    pytest.importorskip("dask.distributed")
    argv = [CHECKPOINT, "--task", "max-of-k", "--vocab", "64", "--k", "2", "--chunk-points", "1000", "--json"]
    code, one, _ = run(argv, capsys)
    code2, two, _ = run(argv + ["--dask", "--workers", "2"], capsys)
    a, b = json.loads(one), json.loads(two)
    assert code == code2 == 1  # refuted, sharded or not
    assert (a["correct"], a["wrong"], a["min_margin"], a["first_wrong"]) == (b["correct"], b["wrong"], b["min_margin"], b["first_wrong"])


def test_tables_flush_far_keys_soundly():
    """Scores 2000 apart: every other key's weight is below e^-690 and flushed to 0 in the tables;
    the verdicts still equal arb's, and a model that would overflow exp in the tables is left to
    the general intervals and arb."""
    from fractions import Fraction

    from depthcert.checkers.attention_tables import OneLayerTables
    from depthcert.checkers.layout import BlockMatrix, Layout
    from depthcert.checkers.model import Head, Layer, Model

    lay = Layout.of(("token", 3), ("position", 3), ("one", 1), ("out", 3))
    qk = BlockMatrix(lay, lay).set("token", "token", np.eye(3, dtype=int) * 2000).build()
    v = BlockMatrix(lay, lay).set("out", "token", np.array([[1, 0, 0], [0, 3, 0], [0, 0, 2]])).build()
    W_O = BlockMatrix(Layout.of(("class", 3)), lay).set("class", "out", np.eye(3, dtype=int)).entry(
        "class", 0, "one", 0, Fraction(1, 3)).build()
    model = Model(("0", "1", "2"), 3, ("0", "1", "2"), lay, (Layer((Head(qk, v, attention="softmax"),), causal=True),),
                  W_O, constant_row=True)
    tab = OneLayerTables(model, 3)
    assert tab.flushed > 0
    task = make_task("max-of-k", vocab=3, k=3)
    a, b = decide_all(model, task), decide_all(model, task, method="balls")
    assert a.by_tables > 0 and a.correct == b.correct and (a.wrong == b.wrong).all()
    qk_neg = BlockMatrix(lay, lay).set("token", "token", np.eye(3, dtype=int) * -2000).build()
    over = Model(model.vocab, 3, model.classes, lay, (Layer((Head(qk_neg, v, attention="softmax"),), causal=True),),
                 W_O, constant_row=True)
    with pytest.raises(OverflowError):
        OneLayerTables(over, 3)
    small = make_task("max-of-k", vocab=3, k=2)
    c, d = decide_all(over, small), decide_all(over, small, method="balls")  # intervals, then arb
    assert c.by_tables + c.by_balls == 9 and c.correct == d.correct and (c.wrong == d.wrong).all()


def test_export_command_round_trips_through_a_float32_checkpoint(tmp_path, capsys):
    """export-transformerlens writes the model with its names; verify-model reads the float32 export
    back exactly and decides it (the same verdict as the exact original here); hardmax is refused."""
    from depthcert.cli.export_transformerlens import export_transformerlens_main

    out = str(tmp_path / "pt.safetensors")
    assert export_transformerlens_main([os.path.join(EXAMPLES, "prev-token-softmax-20.json"), out]) == 0
    assert "HookedTransformer n_layers=1 n_heads=1 d_model=10" in capsys.readouterr().out
    code, text, _ = run([out, "--dataset", os.path.join(EXAMPLES, "prev-token-data.json"), "--require-all"], capsys)
    assert code == 0 and "certified accuracy 81/81" in text
    code = export_transformerlens_main([os.path.join(EXAMPLES, "prev-token-hardmax.json"), str(tmp_path / "h.safetensors")])
    err = capsys.readouterr().err
    assert code == 2 and "has hardmax heads" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "h.safetensors")


@pytest.mark.parametrize("where, value, msg", [
    (("heads", 0, "scale"), "1" + "0" * 400, "scale .* too large for a float"),
    (("heads", 0, "W_V", 0, 0), "1" + "0" * 400, "a weight is too large for a float"),
    (("heads", 0, "W_V", 0, 0), "1" + "0" * 39, "blocks.0.attn.W_V has a weight beyond the range of float32"),
])
def test_export_refuses_weights_beyond_float_range(tmp_path, capsys, where, value, msg):
    """A scale or weight that has no finite float (or float32) value is bad input, exit 2 and one
    line, not an OverflowError (exit 4) nor an inf written into the checkpoint; nothing is written."""
    import re

    from depthcert.cli.export_transformerlens import export_transformerlens_main

    w = json.load(open(os.path.join(EXAMPLES, "prev-token-softmax-20.json")))
    node = w["layers"][0]
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    src, out = tmp_path / "w.json", tmp_path / "w.safetensors"
    src.write_text(json.dumps(w))
    code = export_transformerlens_main([str(src), str(out)])
    err = capsys.readouterr().err
    assert code == 2 and re.search(msg, err) and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("argv, msg", [(["--k", "0"], "--k"), (["--vocab", "x"], "--vocab"), ([], "--out")])
def test_train_max_of_k_bad_input_is_one_line_exit_2(argv, msg, capsys):
    """python -m depthcert.cli.train_max_of_k refuses bad options before torch trains anything."""
    from depthcert.cli.train_max_of_k import main

    code = main(argv if not argv or argv[0] == "--out" else ["--out", "x.safetensors"] + argv)
    err = capsys.readouterr().err
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1


def test_max_of_k_training_is_seeded_and_reproducible(tmp_path, capsys):
    """The reference model's training, at a small size: the same seed writes the same bytes, another
    seed other weights; the checkpoint is read back exactly and decided."""
    from depthcert.cli.train_max_of_k import main

    paths = [str(tmp_path / f"m{i}.safetensors") for i in range(3)]
    for path, seed in zip(paths, (0, 0, 1)):
        assert main(["--out", path, "--vocab", "6", "--k", "3", "--n-train", "3000", "--seed", str(seed)]) == 0
    capsys.readouterr()
    blobs = [open(p, "rb").read() for p in paths]
    assert blobs[0] == blobs[1] and blobs[0] != blobs[2]
    code, out, _ = run([paths[0], "--task", "max-of-k", "--vocab", "6", "--k", "3"], capsys)
    assert code == (1 if "verdict        refuted" in out else 0) and "/216" in out
