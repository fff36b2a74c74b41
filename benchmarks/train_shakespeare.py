"""Train the course's TransformerLM on Tiny Shakespeare, characters as tokens, on a CPU.

The same code as the lessons: the reference ``TransformerLM`` of lesson 06 and the training loop
of ``helpers.training``, whose step is lesson 07's reference ``train_step``. The defaults are
nanoGPT's small CPU run (``config/train_shakespeare_char.py`` with its CPU overrides):
context 64, batch 12, 4 layers, 4 heads, 128 dimensions, 2000 iterations, no dropout, AdamW
with lr 1e-3 warmed up over 100 steps and decayed to 1e-4, gradient clipping at 1.0.

    python benchmarks/train_shakespeare.py                      # nanoGPT's settings
    python benchmarks/train_shakespeare.py --preset fast        # ours: nanoGPT's loss in its time
    python benchmarks/train_shakespeare.py --save          # also keep it as lesson 08's model (the cache)
    python benchmarks/train_shakespeare.py --steps 50 --eval-batches 5   # a smoke test

The validation loss is the mean over ``--eval-batches`` batches of the last 10 % of the text.
The last line printed is one JSON object: ``val_loss``, ``wall_s`` (seconds of training,
evaluation excluded), ``tokens_per_s``, ``params``, ``threads`` and the settings.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

from helpers.data import shakespeare_dataset
from helpers.fast import Speedups, accelerate, autocast_step, bf16_supported
from helpers.params import num_parameters
from helpers.reference.transformer_lm import Config, TransformerLM
from helpers.training import (
    TrainConfig,
    course_checkpoint_path,
    estimate_loss,
    save_checkpoint,
    seed_everything,
    train,
)

#: ``--preset fast``: our own settings, tuned to reach nanoGPT's validation loss in its wall time
#: with the course's (slower per step) reference model: more tokens per step, fewer steps, a
#: higher learning rate, a shorter warm-up. Explicit options still override them.
PRESETS = {
    "nanogpt": {},
    "fast": {"steps": 1000, "batch_size": 16, "lr": 4e-3, "min_lr": 4e-4, "warmup": 50},
    # the fast path (helpers.fast), bfloat16 where the CPU has the units for it, and a smaller
    # model: at this budget two blocks learn more per second than four (1.815 to 1.832 over three
    # seeds in about 17 s of training on two cores, against 1.84 in 29 s with four), and an MLP
    # three times C wide instead of four, 1000 steps instead of 1100 (on a CPU with bfloat16 units:
    # 1.844, 1.851 and 1.868 over three seeds, against 1.819 and 1.836 with four times C and
    # 1100 steps, in about 0.8 of the time); under bfloat16 the explicit attention, whose backward
    # is about 1.7 times cheaper per step there than the fused operator's (1.843, 1.852 and 1.854)
    "fastest": {"steps": 1000, "batch_size": 16, "lr": 4e-3, "min_lr": 4e-4, "warmup": 50, "layers": 2,
                "mlp_ratio": 3, "fused": True, "bf16": "auto", "attention": "auto"},
}


#: --save without a path: the course's cache file of the text trained on (``course_checkpoint_path``),
#: known once the text is read; not a string, so that argparse keeps this very object
COURSE_CACHE = Path("(the course's cache)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fused", action="store_true",
                   help="the fast path (helpers.fast): F.layer_norm, F.scaled_dot_product_attention, one qkv matmul")
    p.add_argument("--attention", choices=["sdpa", "explicit", "auto"], default="sdpa",
                   help="with --fused: F.scaled_dot_product_attention (sdpa, the default), the course's explicit "
                        "attention (matmul, mask, softmax), or auto: explicit under bfloat16 autocast, where PyTorch's "
                        "CPU backward of sdpa is slow, sdpa otherwise")
    p.add_argument("--bf16", choices=["auto", "on", "off"], default="off",
                   help="bfloat16 autocast for the forward pass; auto: only where the CPU has bfloat16 units (off)")
    p.add_argument("--compile", action="store_true", help="torch.compile every block (its time counts in wall_s)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="nanogpt",
                   help="nanogpt: nanoGPT's CPU settings (the default); fast, fastest: ours, see PRESETS")
    p.add_argument("--steps", type=int, default=2000, help="optimiser updates (2000)")
    p.add_argument("--batch-size", type=int, default=12, help="B, windows per batch (12)")
    p.add_argument("--block-size", type=int, default=64, help="T, characters per window (64)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads per block (4)")
    p.add_argument("--emb-dim", type=int, default=128, help="C, the embedding size (128)")
    p.add_argument("--mlp-ratio", type=int, default=4, help="the MLP's hidden width, in units of C (4)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (1e-3)")
    p.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the end of the cosine (1e-4)")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps (100)")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decay on matrices (0.1)")
    p.add_argument("--beta2", type=float, default=0.99, help="AdamW's beta2 (0.99)")
    p.add_argument("--grad-clip", type=float, default=1.0, help="clip the gradient norm; 0: off (1.0)")
    p.add_argument("--eval-batches", type=int, default=200, help="validation batches for the final loss (200)")
    p.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps; 0: only at the end")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (2)")
    p.add_argument("--seed", type=int, default=1337, help="seeds the initialisation and the batches (1337)")
    p.add_argument("--untied", action="store_true", help="separate input and output embeddings")
    p.add_argument("--save", type=Path, nargs="?", const=COURSE_CACHE, default=None,
                   help=f"write a checkpoint here (no path: the course's cache, {course_checkpoint_path()} for "
                        "the text read now, which lesson 08 loads)")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    preset = p.parse_known_args(argv)[0].preset
    p.set_defaults(**PRESETS[preset])
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    data = shakespeare_dataset()
    if args.save is COURSE_CACHE:  # the file of the text just read: a model of one text never loads for another
        args.save = course_checkpoint_path(data.corpus)
    seed_everything(args.seed)
    head_dim, rest = divmod(args.emb_dim, args.heads)
    if rest:
        raise SystemExit(f"--emb-dim {args.emb_dim} is not a multiple of --heads {args.heads}")
    config = Config(
        n_vocab=len(data.vocab),
        max_len=args.block_size,
        emb_dim=args.emb_dim,
        n_hidden=args.mlp_ratio * args.emb_dim,
        head_dim=head_dim,
        n_heads=args.heads,
        n_layers=args.layers,
        tie_weights=not args.untied,
    )
    model = TransformerLM(config)
    bf16 = args.bf16 == "on" or (args.bf16 == "auto" and bf16_supported())
    sdpa = args.fused and (args.attention == "sdpa" or (args.attention == "auto" and not bf16))
    if args.fused or args.compile:
        accelerate(model, Speedups(fused_norm=args.fused, fused_attention=sdpa,
                                   fused_qkv=args.fused,
                                   compile=args.compile))
    settings = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        block_size=args.block_size,
        lr=args.lr,
        min_lr=args.min_lr,
        warmup_steps=args.warmup,
        weight_decay=args.weight_decay,
        betas=(0.9, args.beta2),
        grad_clip=args.grad_clip or None,
        eval_every=args.eval_every,
        eval_batches=args.eval_batches,
        eval_at_start=False,
        log_every=100,
        seed=args.seed,
        progress=args.progress,
    )
    log = train(model, data, settings, step_fn=autocast_step() if bf16 else None)
    train_s = log.attrs["train_s"]
    started = time.perf_counter()
    val_loss = estimate_loss(
        model, data.val, batch_size=args.batch_size, block_size=args.block_size, n_batches=args.eval_batches
    )
    eval_s = time.perf_counter() - started
    for row in log.itertuples():
        if not math.isnan(row.val_loss):
            print(f"step {row.step:5d}  train {row.train_loss:.4f}  val {row.val_loss:.4f}  {row.elapsed_s:7.1f} s")
    result = {
        "val_loss": round(val_loss, 4),
        "train_loss": round(float(log["train_loss"].iloc[-1]), 4),
        "wall_s": round(train_s, 1),
        "eval_s": round(eval_s, 1),
        "ms_per_step": round(1000 * train_s / args.steps, 1),
        "tokens_per_s": round(args.steps * args.batch_size * args.block_size / train_s),
        "params": num_parameters(model),
        "bf16": bf16,
        "attention": "sdpa" if sdpa else "explicit",
        "threads": torch.get_num_threads(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }
    if args.save is not None:
        extra = {"val_loss": val_loss, "corpus": data.corpus, "command": "python benchmarks/train_shakespeare.py " + " ".join(argv or sys.argv[1:])}
        save_checkpoint(args.save, model, config, data.vocab, extra=extra)
        result["checkpoint"] = str(args.save)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
