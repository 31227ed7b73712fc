"""Benchmark: the shipped trained models (grokked modular addition before and after grokking, the
LayerNorm induction model, and the Hugging Face folders of training/llama_modadd.py: a Llama and a
GPT-2 trained on modular addition p = 13) decided on every input by verify-model's certified run,
against a plain float64 forward over the same inputs, every time measured in this one run and this
one process.

    python benchmarks/bench_trained_models.py                 (every shipped model)
    python benchmarks/bench_trained_models.py --only grokking_p113_after
    python benchmarks/bench_trained_models.py --only llama_modadd_p13 --profile 15

The Hugging Face folders have only 169 inputs, so their whole run is mostly its fixed cost (reading
the weights into rationals, the exact RMSNorm/LayerNorm rows, the interval forward's set-up); the
rows `..._all_inputs` run the same folder over every input it can take (vocab_size^3 = 2,744
sequences of 3 tokens, labelled by the task max-of-k: timing only, most labels are not what the
model was trained for), where the cost per input shows.  `neox_random_2l` and `llama_random_2l`
are a GPT-NeoX and a Llama folder generated in a temporary directory (random_folder: seeded, the
same weights every run; 2 layers; partial rotary and parallel attention and MLP, or RMSNorm, rotary,
GQA and SwiGLU) over all 32,768 inputs of max-of-k (vocab 8, k 5).  A run under 2 s (either side) is timed
three times and the fastest kept; the first of them pays the imports.  `--profile N` prints the N
functions of the certified run with the most cumulative time (cProfile, one more run).

"certified" is verify-model's whole run: reading the checkpoint into the exact model (every float32
weight the rational it is, products in python-flint) and deciding every point
(checkers/accuracy.py).  "float64" is depthcert/interop/float_forward.py's numpy forward of the
same checkpoint over the same inputs (reading included; a Llama folder: huggingface_llama's
LlamaFloatForward, every operation in float64), counting a point correct when its label's
float logit is strictly the largest: a float brute force, which certifies nothing.  Both wall
seconds and CPU seconds of this process are printed (the machine is shared: wall time moves
with the load, CPU time much less); ratio = certified / float64.  A model the installed
verify-model refuses is printed with its one-line reason.  CPU seconds count every thread of the
process: the certified run's two deciding threads (checkers/softmax_intervals.py, BLAS held to one
thread there) and the BLAS worker threads of numpy's products in the float64 forward (which may
run in parallel, or spin while waiting; OPENBLAS_NUM_THREADS=1 gives a one-thread float64 forward).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CKPT = os.path.join(ROOT, "training", "checkpoints")
# name -> (checkpoint, task name, task options)
MODELS = {
    "grokking_p113_before": ("grokking_p113_before.safetensors", "modular-addition", {"modulus": 113}),
    "grokking_p113_after": ("grokking_p113_after.safetensors", "modular-addition", {"modulus": 113}),
    "induction_v5_n8_ln": ("induction_v5_n8_ln.safetensors", "induction", {"vocab": 5, "n": 8}),
    "llama_modadd_p13": ("llama_modadd_p13", "modular-addition", {"modulus": 13}),
    "gpt2_modadd_p13": ("gpt2_modadd_p13", "modular-addition", {"modulus": 13}),
    "llama_modadd_p13_all_inputs": ("llama_modadd_p13", "max-of-k", {"vocab": 14, "k": 3}),
    "gpt2_modadd_p13_all_inputs": ("gpt2_modadd_p13", "max-of-k", {"vocab": 14, "k": 3}),
    "neox_random_2l": ("neox", "max-of-k", {"vocab": 8, "k": 5}),  # generated: random_folder()
    "llama_random_2l": ("llama", "max-of-k", {"vocab": 8, "k": 5}),  # generated: random_folder()
}
GENERATED = ("neox", "llama")
REPEAT_UNDER = 2.0  # seconds: a run shorter than this is timed three times, the fastest kept


class _Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def _fastest(clocks: list) -> _Clock:
    return min(clocks, key=lambda c: c.wall)


def random_folder(path: str, family: str) -> str:
    """A Hugging Face folder written with numpy, the same bytes every time (seed 0), vocab 8 and 5
    positions, 2 layers, hidden 32, 4 heads of 8, weights N(0, 0.3^2) rounded to float32 (norm gains
    1 + N(0, 0.1^2)).  neox: GPTNeoXForCausalLM, partial rotary (factor 0.25: the first 2 of 8
    coordinates, theta 10000), parallel attention and MLP, gelu, biases, an untied lm_head, MLP 128.
    llama: LlamaForCausalLM, RMSNorm, full rotary (theta 10000), 2 key-value heads (GQA), SwiGLU MLP
    64, no biases, an untied lm_head.  Random, not trained: timing rows."""
    from depthcert.interop.huggingface import write_folder

    rope = {"rope_theta": 10000.0, "rope_type": "default"}
    if family == "neox":
        from depthcert.interop import huggingface_neox as hf

        cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 8,
               "hidden_size": 32, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "max_position_embeddings": 5, "layer_norm_eps": 1e-5, "hidden_act": "gelu",
               "tie_word_embeddings": False, "use_parallel_residual": True, "attention_bias": True,
               "rope_parameters": dict(rope, partial_rotary_factor=0.25)}
    else:
        from depthcert.interop import huggingface_llama as hf

        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8, "hidden_size": 32,
               "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 8, "max_position_embeddings": 5, "rms_norm_eps": 1e-6, "hidden_act": "silu",
               "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "rope_parameters": rope}
    rng = np.random.default_rng(0)
    sd = {}
    for k, shape in sorted(hf.expected_shapes(hf.config_from_dict(cfg)).items()):
        a = rng.standard_normal(shape)
        sd[k] = 1.0 + 0.1 * a if k.endswith("norm.weight") else 0.3 * a
    write_folder(path, cfg, sd)
    return path


def float_forward(path: str):
    """The plain float64 forward verify-model --compare-float runs on this checkpoint."""
    from depthcert.interop.float_forward import FloatForward

    if os.path.isdir(path):  # a Hugging Face folder
        from depthcert.interop import huggingface_llama as llama
        from depthcert.interop.huggingface import read_tl

        if llama.folder_family(path) is not None:
            return llama.llama_forward(*llama.read_float(path), np.float64)
        from depthcert.interop import huggingface_neox as neox

        if neox.folder_is_neox(path):
            return neox.neox_forward(*neox.read_float(path), np.float64)
        return FloatForward(*read_tl(path), np.float64)
    from depthcert.interop.transformerlens import read_checkpoint

    return FloatForward(*read_checkpoint(path), np.float64)


def bench(path: str, task_name: str, options: dict, profile: int = 0) -> dict:
    from depthcert.checkers.errors import BadInput
    from depthcert.checkers.exhaustive import check_compatible
    from depthcert.checkers.tasks import make_task
    from depthcert.cli.verify_model import load_any_model, run
    from depthcert.interop.float_forward import float_correct

    task = make_task(task_name, **options)
    reads, decides = [], []
    try:
        while True:
            with _Clock() as read:
                model = load_any_model(path, None, task)
            with _Clock() as decide:
                v = run(model, task, {"method": "auto"}, 65536, 8192)
            reads.append(read), decides.append(decide)
            if len(reads) == 3 or read.wall + decide.wall >= REPEAT_UNDER:
                break
    except BadInput as exc:
        return {"task": task, "refused": str(exc)}
    read, decide = min(zip(reads, decides), key=lambda rd: rd[0].wall + rd[1].wall)
    class_map = check_compatible(model, task)  # task class -> logit row, as the certified run reads them
    rows = np.array([class_map[i] for i in range(len(task.classes))], dtype=np.int64)
    floats = []
    while True:
        with _Clock() as flt:
            fwd = float_forward(path)
            ok = np.zeros(task.size, dtype=bool)
            for b in task.batches(4096):
                ok[b.index] = float_correct(fwd, b.ids, rows[b.labels])
        floats.append(flt)
        if len(floats) == 3 or flt.wall >= REPEAT_UNDER:
            break
    flt = _fastest(floats)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        run(load_any_model(path, None, task), task, {"method": "auto"}, 65536, 8192)
        prof.disable()
    wrong = np.zeros(task.size, dtype=bool)
    wrong[np.asarray(v.wrong, dtype=np.int64)] = True
    undecided = np.zeros(task.size, dtype=bool)
    undecided[np.asarray(v.undecided, dtype=np.int64)] = True
    disagree = int((~undecided & (ok == wrong)).sum())
    return {"task": task, "model": model, "v": v, "read": read, "decide": decide, "float": flt, "profile": prof,
            "float_correct": int(ok.sum()), "disagree": disagree}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", choices=sorted(MODELS), help="run only this model (repeatable)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print the N functions of the certified run with the most cumulative time")
    args = p.parse_args(argv)
    from depthcert.checkers.rational import exact_text

    print(f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}, numpy "
          f"{np.__version__}; one process, load average {os.getloadavg()[0]:.1f} at the start")
    tmp = tempfile.TemporaryDirectory()
    for name in args.only or list(MODELS):
        fname, task_name, options = MODELS[name]
        path = (random_folder(os.path.join(tmp.name, name), fname) if fname in GENERATED
                else os.path.join(CKPT, fname))
        if not os.path.exists(path):
            print(f"\n{name}: {os.path.relpath(path, ROOT)} is missing")
            continue
        r = bench(path, task_name, options, args.profile)
        task = r["task"]
        print(f"\n{name}: {task.describe()}, {task.size:,} inputs")
        if "refused" in r:
            print(f"  certified: refused by verify-model: {r['refused']}")
            continue
        v, rd, dc, fl = r["v"], r["read"], r["decide"], r["float"]
        cw, cc = rd.wall + dc.wall, rd.cpu + dc.cpu
        m = v.margin
        margin = "-" if m is None else exact_text(m[0]) if m[0] == m[1] else f"[{float(m[0]):.6g}, {float(m[1]):.6g}]"
        print(f"  model        {r['model'].kinds()}, d' = {r['model'].dim}; path {v.path}")
        print(f"  certified    {v.correct:,} correct, {len(v.wrong):,} wrong, {len(v.undecided):,} undecided; "
              f"min margin {margin}")
        print(f"  float64      {r['float_correct']:,} correct; {r['disagree']:,} disagreements with the certified decision")
        print(f"  {'':<12} {'wall s':>8} {'cpu s':>8}")
        print(f"  {'read exact':<12} {rd.wall:>8.3f} {rd.cpu:>8.3f}")
        print(f"  {'decide':<12} {dc.wall:>8.3f} {dc.cpu:>8.3f}")
        print(f"  {'certified':<12} {cw:>8.3f} {cc:>8.3f}")
        print(f"  {'float64':<12} {fl.wall:>8.3f} {fl.cpu:>8.3f}")
        print(f"  ratio certified / float64: {cw / fl.wall:.1f} (wall), {cc / max(fl.cpu, 1e-9):.1f} (cpu); "
              f"deciding alone {dc.cpu / max(fl.cpu, 1e-9):.1f} (cpu)")
        if r["profile"] is not None:
            import pstats

            print("  profile of one more certified run (reading and deciding), by cumulative time:")
            pstats.Stats(r["profile"], stream=sys.stdout).sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
