"""A small Llama trained with Hugging Face transformers on modular addition and saved with
save_pretrained: the model of training/checkpoints/llama_modadd_p13/ (issue 43, item 4); with
`--arch gpt2` a GPT-2 of the same size by the same recipe (training/checkpoints/gpt2_modadd_p13/,
for benchmarks/bench_trained_models.py).

Model: LlamaForCausalLM, float32, one layer: RMSNorm (pre-norm and final), rotary positions
(rope_theta 10000, all of head_dim), four query heads sharing two key/value heads (grouped-query
attention), a SwiGLU MLP (silu, intermediate_size 64), hidden_size 32, untied lm_head, no biases;
vocab_size p + 1, max_position_embeddings 3.  `--arch gpt2`: GPT2LMHeadModel, float32, one layer,
LayerNorm, learned positions, four heads, a gelu_new MLP (n_inner 64), n_embd 32, tied lm_head,
n_positions 3, no dropout (the Llama has none either; GPT2Config's other defaults).

Task and tokens: the task modular-addition's (checkers/tasks/modular_addition.py): the input
"a b =" is the token ids a, b, p ("=" is token p), the label (a + b) mod p is a token id, read from
the last position's p + 1 next-token logits (the "=" logit competes too, as verify-model decides
it: a label must beat every token's logit).

Recipe: the training set is every one of the p^2 inputs (the task is finite; verify-model decides
each of them), full batch; AdamW (learning rate 3e-3, weight decay 0.1, betas (0.9, 0.98)),
cross-entropy of the last position's logits, 1000 steps; torch seed 0 and one thread (the same
weights on every run on one machine).  About 10 s on one core, with the imports.

    python -m depthcert.training.llama_modadd --out-dir training/checkpoints/llama_modadd_p13

writes config.json, generation_config.json and model.safetensors (about 41 KB); then

    verify-model training/checkpoints/llama_modadd_p13 --task modular-addition --p 13 --compare-float

and `... --arch gpt2 --out-dir training/checkpoints/gpt2_modadd_p13` the GPT-2 (about 38 KB).
"""
from __future__ import annotations

import argparse
import os
import sys

P = 13
STEPS = 1000
SEED = 0
RECIPE = {"lr": 3e-3, "weight_decay": 0.1, "betas": (0.9, 0.98)}
# LlamaConfig arguments besides vocab_size (p + 1)
ARCHITECTURE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 3, "hidden_act": "silu", "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
# GPT2Config arguments besides vocab_size (p + 1), for --arch gpt2
GPT2_ARCHITECTURE = {"n_embd": 32, "n_inner": 64, "n_layer": 1, "n_head": 4, "n_positions": 3,
                     "activation_function": "gelu_new", "tie_word_embeddings": True,
                     "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # no dropout, as the Llama
ARCHS = ("llama", "gpt2")


def inputs(p: int = P):
    """(ids (p^2, 3), labels (p^2,)) as torch tensors, in the task's index order i = a p + b."""
    import torch

    i = torch.arange(p * p)
    a, b = i // p, i % p
    return torch.stack([a, b, torch.full_like(a, p)], dim=1), (a + b) % p


def make_model(p: int = P, arch: str = "llama"):
    """A freshly initialised LlamaForCausalLM (rope_theta 10000: transformers' default, written into
    config.json) or GPT2LMHeadModel, from the torch seed set before."""
    import transformers

    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r} (expected one of {', '.join(ARCHS)})")
    ids = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if arch == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=p + 1, **ids, **GPT2_ARCHITECTURE))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=p + 1, **ids, **ARCHITECTURE))


def train(p: int = P, steps: int = STEPS, seed: int = SEED, log=None, arch: str = "llama"):
    """The trained model (eval mode) and its last (step, loss, accuracy) on every input, accuracy by
    float32 argmax over all p + 1 logits (observed, not certified)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = make_model(p, arch)
    x, y = inputs(p)
    opt = torch.optim.AdamW(model.parameters(), **RECIPE)
    for step in range(steps + 1):
        logits = model(x).logits[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, y)
        stats = (step, float(loss.detach()), float((logits.argmax(-1) == y).double().mean()))
        if log is not None and (step % 100 == 0 or step == steps):
            log(f"step {step:>5}  loss {stats[1]:.4g}  accuracy {stats[2]:.4f}")
        if step == steps:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train the small Llama (or GPT-2) on modular addition and save_pretrained it.")
    ap.add_argument("--arch", choices=ARCHS, default="llama", help="the architecture (default llama)")
    ap.add_argument("--out-dir", required=True, help="the folder save_pretrained writes")
    ap.add_argument("--p", type=int, default=P, help=f"the modulus (default {P})")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"AdamW steps (default {STEPS})")
    ap.add_argument("--seed", type=int, default=SEED, help=f"torch seed (default {SEED})")
    args = ap.parse_args(argv)
    if args.p < 2 or args.steps < 0:
        print("error: --p must be at least 2 and --steps at least 0", file=sys.stderr)
        return 2
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        print(f"error: --out-dir {args.out_dir} exists and is not a folder", file=sys.stderr)
        return 2
    made = not os.path.exists(args.out_dir)
    try:  # before training: a folder that cannot be written is found in a second, not after it
        os.makedirs(args.out_dir, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot write {args.out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        if made:
            os.rmdir(args.out_dir)
        print(f"error: training needs torch and transformers ({exc}); pip install -e \".[train,interop]\"",
              file=sys.stderr)
        return 2
    model, (step, loss, acc) = train(args.p, args.steps, args.seed, log=lambda s: print(s, file=sys.stderr),
                                     arch=args.arch)
    try:
        model.save_pretrained(args.out_dir)
    except OSError as exc:
        print(f"error: cannot write {args.out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out_dir}: {type(model).__name__} p={args.p}, {step} steps, loss {loss:.4g}, "
          f"float32 accuracy {acc:.4f} on all {args.p ** 2} inputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
