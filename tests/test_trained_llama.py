"""The shipped Llama trained with transformers on modular addition (training/llama_modadd.py,
training/checkpoints/llama_modadd_p13/: RMSNorm, rotary, SwiGLU, grouped key/value heads, saved with
save_pretrained): its folder is what the script writes, `verify-model FOLDER --task modular-addition
--p 13 --compare-float` decides every input, an independent evaluator (tests/llama_oracle.py) and
transformers itself agree, and the "=" logit competes with the labels (a CausalLM's logits are over
its whole vocabulary).  The GPT-2 the same script trains (`--arch gpt2`, gpt2_modadd_p13/, shipped
for benchmarks/bench_trained_models.py) is decided the same way."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from cli_in_process import run_command
from depthcert.interop.checkpoint_files import read_safetensors, write_safetensors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, "training", "checkpoints", "llama_modadd_p13")
GPT2_FOLDER = os.path.join(ROOT, "training", "checkpoints", "gpt2_modadd_p13")
P = 13


def _verify(folder=FOLDER, *extra):
    code, out, err = run_command(["verify-model", folder, "--task", "modular-addition", "--p", str(P), "--json", *extra])
    assert code in (0, 1), err
    return code, json.loads(out)


def _enclosure(doc) -> tuple[Fraction, Fraction]:
    m = doc["min_margin"]
    return (Fraction(m["exact"]),) * 2 if "exact" in m else (Fraction(m["lower"]), Fraction(m["upper"]))


def _oracle(folder=FOLDER):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from llama_oracle import LlamaOracle

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    return LlamaOracle(cfg, read_safetensors(os.path.join(folder, "model.safetensors"))[0])


def test_the_shipped_folder_is_what_the_script_writes():
    """config.json holds the script's architecture (a Llama: rotary from rope_parameters, SwiGLU,
    GQA) at vocab_size p + 1; the state dict has exactly the parameters of that config, in float32;
    the folder stays small."""
    from depthcert.training.llama_modadd import ARCHITECTURE

    with open(os.path.join(FOLDER, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert {k: cfg[k] for k in ARCHITECTURE} == ARCHITECTURE and cfg["vocab_size"] == P + 1
    assert cfg["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
    sd, _ = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
    h, f, kv = ARCHITECTURE["hidden_size"], ARCHITECTURE["intermediate_size"], 2 * 8
    want = {"model.embed_tokens.weight": (P + 1, h), "lm_head.weight": (P + 1, h), "model.norm.weight": (h,),
            "model.layers.0.input_layernorm.weight": (h,), "model.layers.0.post_attention_layernorm.weight": (h,),
            "model.layers.0.self_attn.q_proj.weight": (h, h), "model.layers.0.self_attn.k_proj.weight": (kv, h),
            "model.layers.0.self_attn.v_proj.weight": (kv, h), "model.layers.0.self_attn.o_proj.weight": (h, h),
            "model.layers.0.mlp.gate_proj.weight": (f, h), "model.layers.0.mlp.up_proj.weight": (f, h),
            "model.layers.0.mlp.down_proj.weight": (h, f)}
    assert {k: v.shape for k, v in sd.items()} == want
    for name, arr in sd.items():  # float32 values (read back as float64): each one is its float32
        assert np.array_equal(arr, arr.astype(np.float32).astype(np.float64)), name
    assert sum(os.path.getsize(os.path.join(FOLDER, n)) for n in os.listdir(FOLDER)) < 100_000


def test_verify_model_decides_every_input_and_the_floats_agree():
    """The documented command (docs/results.md): all 169 inputs certainly correct, none undecided,
    a narrow certified enclosure of the minimum margin; --compare-float's float32 and true float64
    forwards agree with every decision."""
    code, d = _verify(FOLDER, "--compare-float")
    assert code == 0 and d["verdict"] == "verified"
    assert d["points"] == 169 and d["correct"] == 169 and d["wrong"] == 0 and d["undecided_points"] == 0
    low, high = _enclosure(d)
    assert 9 < low <= high < low + Fraction(1, 10**6)
    for name in ("float32", "float64"):
        f = d["float_comparison"][name]
        assert f["correct"] == 169 and f["disagreements"] == 0, (name, f)


def _float64_margins(folder=FOLDER) -> np.ndarray:
    """Every input's float64 margin (label logit minus the best other of all p + 1) by verify-model's
    own float64 forward (not a certificate)."""
    from depthcert.checkers.tasks import make_task
    from depthcert.interop import huggingface_llama as llama

    task = make_task("modular-addition", modulus=P)
    fwd = llama.llama_forward(*llama.read_float(folder), np.float64)
    ids, labels = task.decode(np.arange(task.size))
    lg = fwd.last_logits(ids)
    rows = np.arange(task.size)
    own = lg[rows, labels].copy()
    lg[rows, labels] = -np.inf
    return own - lg.max(axis=1)


def test_the_independent_evaluator_agrees_on_a_slice():
    """tests/llama_oracle.py (Fractions and mpmath, from modeling_llama.py) on every 13th input:
    each margin positive, at least the certified minimum's lower end, and equal to the float64
    forward's to 1e-9."""
    _, d = _verify()
    low, _ = _enclosure(d)
    oracle, m64 = _oracle(), _float64_margins()
    for i in range(0, P * P, P):
        a, b = divmod(i, P)
        m = oracle.margin([a, b, P], (a + b) % P)
        assert m > 0 and Fraction(str(m)) >= low - Fraction(1, 10**9), (i, m)
        assert abs(float(m) - m64[i]) < 1e-9 * abs(float(m)), (i, float(m), m64[i])


@pytest.mark.slow
def test_the_independent_evaluator_agrees_on_every_input():
    """The same evaluator on all 169 inputs: every margin positive, and their minimum inside the
    certified enclosure."""
    _, d = _verify()
    low, high = _enclosure(d)
    oracle = _oracle()
    least = min(oracle.margin([a, b, P], (a + b) % P) for a in range(P) for b in range(P))
    assert low <= Fraction(str(least)) <= high, (str(least), float(low), float(high))


def test_the_equals_logit_competes_with_the_labels(tmp_path):
    """Planted: lm_head's "=" row (token p) set to twice the row of class 0.  Wherever class 0's
    logit is positive, "=" now beats it, so the label-0 inputs (point 0 is "0 0 =") are certainly
    wrong: verify-model must refute there, as the independent evaluator says, never leave "=" out
    of the competition."""
    folder = tmp_path / "planted"
    shutil.copytree(FOLDER, folder)
    sd, meta = read_safetensors(str(folder / "model.safetensors"))
    sd = {k: v.astype(np.float32) for k, v in sd.items()}
    sd["lm_head.weight"][P] = 2 * sd["lm_head.weight"][0]
    write_safetensors(str(folder / "model.safetensors"), sd, meta)
    code, d = _verify(str(folder))
    assert code == 1 and d["verdict"] == "refuted" and d["first_wrong"][0] == 0
    assert _oracle(str(folder)).margin([0, 0, P], 0) < 0
    # the untouched folder's point 0 is right: the fault is what moved it
    assert _oracle().margin([0, 0, P], 0) > 0


def test_transformers_float64_logits_lie_near_the_certified_minimum():
    """transformers' own LlamaForCausalLM.from_pretrained of the folder, in float64 (eager attention;
    it keeps the rotary table, RMSNorm and softmax in float32): the same argmax on all 169 inputs, and
    its minimum margin within 1e-5 relative of the certified enclosure (the float32 parts' size)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    model = transformers.LlamaForCausalLM.from_pretrained(FOLDER, attn_implementation="eager").double().eval()
    i = torch.arange(P * P)
    x, y = torch.stack([i // P, i % P, torch.full_like(i, P)], 1), (i // P + i % P) % P
    with torch.no_grad():
        lg = model(x).logits[:, -1].numpy()
    assert (lg.argmax(1) == y.numpy()).all()
    rows = np.arange(P * P)
    own = lg[rows, y.numpy()].copy()
    lg[rows, y.numpy()] = -np.inf
    least = float((own - lg.max(axis=1)).min())
    _, d = _verify()
    low, high = _enclosure(d)
    assert float(low) * (1 - 1e-5) <= least <= float(high) * (1 + 1e-5), (least, float(low), float(high))


def test_the_gpt2_folder_is_decided_on_every_input():
    """gpt2_modadd_p13 (the script's --arch gpt2: GPT2LMHeadModel, LayerNorm, learned positions,
    gelu_new, tied lm_head, no dropout): its config is the script's, and verify-model --compare-float
    decides all 169 inputs correct, the float forwards agreeing."""
    from depthcert.training.llama_modadd import GPT2_ARCHITECTURE

    with open(os.path.join(GPT2_FOLDER, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["vocab_size"] == P + 1
    assert {k: cfg[k] for k in GPT2_ARCHITECTURE} == GPT2_ARCHITECTURE
    code, d = _verify(GPT2_FOLDER, "--compare-float")
    assert code == 0 and d["correct"] == 169 and d["undecided_points"] == 0
    low, high = _enclosure(d)
    assert 7 < low <= high < low + Fraction(1, 10**6)
    for name in ("float32", "float64"):
        assert d["float_comparison"][name]["disagreements"] == 0, name


@pytest.mark.slow
@pytest.mark.parametrize("arch,folder", [("llama", FOLDER), ("gpt2", GPT2_FOLDER)])
def test_the_script_trains_a_model_that_is_verified(tmp_path, arch, folder):
    """python -m depthcert.training.llama_modadd [--arch gpt2] (10-20 s): the same config.json as the
    shipped folder, and the model it trains is decided correct on every input (bit-identical weights
    are expected on this machine, not required elsewhere: float sums differ across CPUs)."""
    out = tmp_path / "retrained"
    r = subprocess.run([sys.executable, "-m", "depthcert.training.llama_modadd", "--arch", arch, "--out-dir", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "float32 accuracy 1.0000 on all 169 inputs" in r.stdout
    with open(out / "config.json", encoding="utf-8") as fh:
        got = json.load(fh)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
        shipped = json.load(fh)
    got.pop("transformers_version"), shipped.pop("transformers_version")
    assert got == shipped
    code, d = _verify(str(out))
    assert code == 0 and d["correct"] == 169


@pytest.mark.parametrize("argv,needle", [(["--p", "1"], "--p must be at least 2"),
                                         (["--steps", "-1"], "--steps at least 0"),
                                         (["--out-dir-is-a-file"], "exists and is not a folder"),
                                         (["--out-dir-unwritable"], "cannot write")])
def test_the_script_refuses_bad_input_in_one_line(tmp_path, argv, needle):
    """Exit 2, one line on stderr, nothing trained or written (each case returns before training)."""
    out = str(tmp_path / "out")
    if argv == ["--out-dir-is-a-file"]:
        (tmp_path / "out").write_text("")
        argv = []
    elif argv == ["--out-dir-unwritable"]:
        (tmp_path / "file").write_text("")
        out, argv = str(tmp_path / "file" / "sub"), []
    r = subprocess.run([sys.executable, "-m", "depthcert.training.llama_modadd", "--out-dir", out, *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.strip().count("\n") == 0 and needle in r.stderr, r.stderr
    assert not os.path.isdir(out) or os.listdir(out) == []
