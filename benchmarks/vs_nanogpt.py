"""The course's training against nanoGPT's own CPU run, side by side in one run, whole processes.

nanoGPT is not part of the course: give a local copy of its repository (``--nanogpt DIR`` or
``NANOGPT_DIR``). The script copies what nanoGPT's ``train.py`` needs into a temporary folder,
writes Tiny Shakespeare there in nanoGPT's character format (``train.bin``, ``val.bin``,
``meta.pkl``: the sorted characters, the first 90 % for training), and times, each as a whole
process with the same number of threads:

1. nanoGPT with the CPU settings its README gives (context 64, batch 12, 4 layers, 4 heads,
   128 dimensions, 2000 iterations, no dropout, ``--eval_iters=20``);
2. the course at nanoGPT's exact settings on the fast path (``train_shakespeare.py --fused``):
   the step time against nanoGPT's;
3. the course's fastest preset (``train_shakespeare.py --preset fastest``): its validation loss
   and wall time against nanoGPT's.

    python benchmarks/vs_nanogpt.py --nanogpt ~/src/nanoGPT            # about 4 minutes on 2 cores
    python benchmarks/vs_nanogpt.py --nanogpt ~/src/nanoGPT --quick    # 100 iterations each, a smoke test

The last line is one JSON object with every measurement and the two ratios: ``wall_ratio`` (the
fastest preset's whole process over nanoGPT's) and ``step_ratio`` (our median step at nanoGPT's
settings over nanoGPT's median iteration).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from helpers.data import load_tiny_shakespeare

HERE = Path(__file__).resolve().parent
NANOGPT_FILES = ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"]
NANOGPT_CPU = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
    "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
    "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0",
]


def prepare_nanogpt(source: Path, work: Path) -> Path:
    """A working copy of nanoGPT's training code with the data in its format; returns its folder."""
    missing = [name for name in NANOGPT_FILES if not (source / name).is_file()]
    if missing:
        raise SystemExit(f"{source} does not look like nanoGPT's repository: missing {', '.join(missing)}")
    for name in NANOGPT_FILES:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, work / name)
    text = load_tiny_shakespeare()
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([index[ch] for ch in text], dtype=np.uint16)
    split = int(0.9 * len(ids))
    data = work / "data" / "shakespeare_char"
    data.mkdir(parents=True, exist_ok=True)
    ids[:split].tofile(data / "train.bin")
    ids[split:].tofile(data / "val.bin")
    with open(data / "meta.pkl", "wb") as fh:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": index}, fh)
    return work


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return wall, done.stdout


def nanogpt_result(stdout: str) -> dict:
    evals = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", stdout)
    iters = [float(ms) for n, ms in re.findall(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms", stdout) if int(n) >= 10]
    return {"val_loss": float(evals[-1][2]), "step": int(evals[-1][0]), "median_step_ms": round(statistics.median(iters), 1)}


def matmul_peak_gflops(dtype, threads: int, n: int = 1024, repeats: int = 20) -> float:
    """The machine's matrix-product speed: the best of ``repeats`` (n, n) @ (n, n) products."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def model_gflops(result: dict, tokens_per_s: float) -> float:
    """Achieved GFLOP/s of a training run: per token, 6 multiply-adds counted twice for every weight
    of the matrices (forward, and two products backward) plus attention's scores and weighted sum
    (6 * 2 * layers * T * C per token, forward and backward)."""
    s = result["settings"]
    layers, C, T, V = s["layers"], s["emb_dim"], s["block_size"], 65
    matrices = layers * (4 * C * C + 2 * C * s["mlp_ratio"] * C) + V * C  # attention, MLP, the output layer
    per_token = 6 * matrices + 12 * layers * T * C
    return per_token * tokens_per_s / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nanogpt", type=Path, default=os.environ.get("NANOGPT_DIR"),
                        help="a local copy of nanoGPT's repository (or NANOGPT_DIR)")
    parser.add_argument("--threads", type=int, default=2, help="threads for both (2)")
    parser.add_argument("--quick", action="store_true", help="100 iterations each: checks the plumbing, not the targets")
    args = parser.parse_args(argv)
    if args.nanogpt is None:
        parser.error("give a local copy of nanoGPT with --nanogpt DIR or NANOGPT_DIR")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    iters = ["--max_iters=100", "--lr_decay_iters=100", "--warmup_iters=10", "--eval_interval=50"] if args.quick else []
    ours_quick = ["--steps", "100", "--eval-batches", "20"] if args.quick else []
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="vs-nanogpt-") as tmp:
        work = prepare_nanogpt(args.nanogpt.expanduser().resolve(), Path(tmp))
        nano_wall, nano_out = timed([python, "train.py", *NANOGPT_CPU, *iters, f"--out_dir={tmp}/out"], work, env)
        nano = nanogpt_result(nano_out) | {"wall_s": round(nano_wall, 1)}
        print(f"nanoGPT (its CPU settings):       val {nano['val_loss']:.4f}  {nano_wall:6.1f} s whole process, "
              f"median iteration {nano['median_step_ms']} ms", flush=True)
        threads = ["--threads", str(args.threads)]
        same_wall, same_out = timed([python, str(HERE / "train_shakespeare.py"), "--fused", *threads, *ours_quick], HERE.parent, env)
        same = json.loads(same_out.strip().splitlines()[-1])
        print(f"ours at nanoGPT's settings, fused: val {same['val_loss']:.4f}  {same_wall:6.1f} s whole process, "
              f"{same['ms_per_step']} ms a step", flush=True)
        fast_wall, fast_out = timed([python, str(HERE / "train_shakespeare.py"), "--preset", "fastest", *threads, *ours_quick],
                                    HERE.parent, env)
        fast = json.loads(fast_out.strip().splitlines()[-1])
        print(f"ours, --preset fastest:           val {fast['val_loss']:.4f}  {fast_wall:6.1f} s whole process, "
              f"{fast['ms_per_step']} ms a step", flush=True)
    peaks = {"float32": round(matmul_peak_gflops(__import__("torch").float32, args.threads), 1),
             "bfloat16": round(matmul_peak_gflops(__import__("torch").bfloat16, args.threads), 1)}
    same_gflops, fast_gflops = model_gflops(same, same["tokens_per_s"]), model_gflops(fast, fast["tokens_per_s"])
    print(f"achieved: {same_gflops:.1f} GFLOP/s at nanoGPT's settings, {fast_gflops:.1f} with --preset fastest; "
          f"the machine's (1024 x 1024) matmul peak: {peaks['float32']} GFLOP/s float32, {peaks['bfloat16']} bfloat16")
    result = {
        "nanogpt": nano,
        "ours_nanogpt_settings": {k: same[k] for k in ("val_loss", "wall_s", "ms_per_step", "tokens_per_s")} | {"process_s": round(same_wall, 1)},
        "ours_fastest": {k: fast[k] for k in ("val_loss", "wall_s", "ms_per_step", "tokens_per_s", "bf16")} | {"process_s": round(fast_wall, 1)},
        "gflops": {"ours_nanogpt_settings": round(same_gflops, 1), "ours_fastest": round(fast_gflops, 1),
                   "matmul_peak": peaks},
        "wall_ratio": round(fast_wall / nano_wall, 3),
        "step_ratio": round(same["ms_per_step"] / nano["median_step_ms"], 3),
        "threads": args.threads,
        "quick": args.quick,
    }
    print(f"fastest preset / nanoGPT, whole process: {result['wall_ratio']:.2f}   "
          f"our step / nanoGPT's at its settings: {result['step_ratio']:.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
