"""One training step of lesson 07's model with PyTorch's default thread count and with the course's.

PyTorch starts one thread per visible core; ``helpers`` chooses a count that fits the machine
(``helpers.threads``). This benchmark times the same step both ways, side by side, each in a
fresh process, optionally while other processes keep the cores busy (a shared machine):

    python benchmarks/threads.py                 # idle machine
    python benchmarks/threads.py --load 4        # four busy processes compete for the cores

The model is lesson 07's (C = 128, 4 layers of 4 heads, context 64, 65 characters, batch 12) on
random ids: no data is needed. Each line printed is one JSON object; the last compares the two.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time


def _spin(stop_at: float) -> None:
    """Keep one core busy until ``stop_at`` (a competing load; it stops by itself)."""
    while time.time() < stop_at:
        pass


def measure(steps: int) -> dict:
    """Median milliseconds of one training step, in this process, with the thread count set on import."""
    import torch

    import helpers
    from helpers.reference.transformer_lm import Config, TransformerLM

    torch.manual_seed(0)
    config = Config(n_vocab=65, emb_dim=128, n_heads=4, n_layers=4, max_len=64)
    model = TransformerLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 65, (12, 65))
    x, y = ids[:, :-1], ids[:, 1:]  # (B, T) each
    times = []
    for _ in range(steps + 3):
        start = time.perf_counter()
        logits = model(x)  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return {"threads": torch.get_num_threads(), "chosen": helpers.THREADS.line(),
            "step_ms": round(1000 * statistics.median(times[3:]), 2)}


def _child(threads: int | None, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMER_COURSE_THREADS"}
    if threads is not None:
        env["TRANSFORMER_COURSE_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps)], env=env,
                          capture_output=True, text=True, check=True, timeout=900)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, default=0, help="busy processes competing for the cores (0)")
    parser.add_argument("--steps", type=int, default=20, help="steps timed in each setting (20)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.steps)))
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    stop_at = time.time() + 600  # the load stops by itself even if this process dies
    load = [multiprocessing.Process(target=_spin, args=(stop_at,), daemon=True) for _ in range(args.load)]
    for process in load:
        process.start()
    try:
        time.sleep(2 if load else 0)  # let the load average see the load
        default = {"setting": "torch default", **_child(cores, args.steps)}
        print(json.dumps(default), flush=True)
        chosen = {"setting": "course's choice", **_child(None, args.steps)}
        print(json.dumps(chosen), flush=True)
    finally:
        for process in load:
            process.terminate()
    print(json.dumps({"load_processes": args.load, "cores": cores,
                      "default_over_chosen": round(default["step_ms"] / chosen["step_ms"], 2)}))


if __name__ == "__main__":
    main()
