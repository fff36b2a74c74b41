"""Generation with and without a KV cache (lesson 09), measured side by side in one run.

For each model and context length: greedy generation of ``--tokens`` new tokens that end at that
context, once with lesson 08's ``generate`` (the whole window every step) and once with lesson
09's ``generate_cached``; the two must return identical ids (asserted), and the table gives the
tokens per second of each and their ratio. Two models: lesson 07's trained model from the
course's cache (or, if it is missing, the same configuration with random weights: the time does
not depend on the weights), and a larger configuration with random weights (6 layers, C = 384,
context 256 by default). Then the cache's bytes for multi-head, grouped-query and multi-query
attention at the larger model's full context, from the formula and from the tensors, and one
attention call written out against ``F.scaled_dot_product_attention``.

    python benchmarks/kv_cache.py                 # about a minute or two on two cores
    python benchmarks/kv_cache.py --tokens 8      # quicker, noisier

The last line printed is one JSON object with every number of the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.reference.fast_generation import (  # noqa: E402
    CachedSelfAttention,
    GroupedQueryAttention,
    generate_cached,
)
from helpers.reference.multihead import CausalSelfAttention  # noqa: E402
from helpers.reference.sampling import generate  # noqa: E402
from helpers.reference.transformer_lm import Config, TransformerLM  # noqa: E402
from helpers.training import course_checkpoint_path, load_checkpoint  # noqa: E402


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def speed(model, contexts, n_new: int, repeats: int) -> list[dict]:
    """Tokens per second without and with the cache, for generations ending at each context."""
    rows = []
    V = model.config.n_vocab
    for context in contexts:
        prompt = torch.randint(0, V, (1, context - n_new), generator=torch.Generator().manual_seed(context))
        slow = generate(model, prompt, n_new, temperature=0.0)
        fast = generate_cached(model, prompt, n_new, temperature=0.0)
        assert torch.equal(slow, fast), f"context {context}: cached and uncached generation differ"
        t_slow = best_time(lambda p=prompt: generate(model, p, n_new, temperature=0.0), repeats)
        t_fast = best_time(lambda p=prompt: generate_cached(model, p, n_new, temperature=0.0), repeats)
        rows.append({"context": context, "uncached_tokens_per_s": n_new / t_slow, "cached_tokens_per_s": n_new / t_fast,
                     "ratio": t_slow / t_fast, "identical": True})
    return rows


def cache_bytes(config: Config) -> list[dict]:
    """The cache of one sequence at full context, by the formula and from the tensors (float32)."""
    nh, hs, T, L = config.n_heads, config.head_dim, config.max_len, config.n_layers
    x = torch.randn(1, T, config.emb_dim)  # (B, T, C)
    rows = []
    for name, n_kv in (("multi-head", nh), ("grouped-query", 2), ("multi-query", 1)):
        attention = GroupedQueryAttention(config.emb_dim, hs, nh, n_kv)
        with torch.no_grad():
            k, v = attention(x)[1]  # (1, n_kv, T, hs) each
        rows.append({"attention": name, "n_kv": n_kv, "formula_bytes": 2 * L * 1 * n_kv * T * hs * 4,
                     "tensor_bytes": L * (k.nbytes + v.nbytes)})
    return rows


def fused_forward(self, x, cache=None):
    B, T_new, _ = x.shape
    nh, hs = self.n_heads, self.head_dim
    q, k, v = (f(x).view(B, T_new, nh, hs).transpose(1, 2) for f in (self.query, self.key, self.value))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    mask = torch.ones(T_new, k.shape[2], dtype=torch.bool).tril(diagonal=k.shape[2] - T_new)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, nh, T_new, hs)
    return self.to_output(out.transpose(1, 2).reshape(B, T_new, nh * hs)), (k, v)


def attention_times(config: Config, batch: int, repeats: int) -> list[dict]:
    attention = CausalSelfAttention(config.emb_dim, config.head_dim, config.n_heads).eval()
    x = torch.randn(batch, config.max_len, config.emb_dim)
    rows = []
    with torch.no_grad():
        explicit, cache = CachedSelfAttention.forward(attention, x[:, :-1])
        fused, _ = fused_forward(attention, x[:, :-1])
        assert torch.allclose(explicit, fused, atol=1e-5), "explicit and fused attention differ"
        for name, chunk, past in (("prompt", x, None), ("decode step", x[:, -1:], cache)):
            t_explicit = best_time(lambda c=chunk, p=past: CachedSelfAttention.forward(attention, c, p), repeats)
            t_fused = best_time(lambda c=chunk, p=past: fused_forward(attention, c, p), repeats)
            rows.append({"call": name, "explicit_ms": 1000 * t_explicit, "fused_ms": 1000 * t_fused,
                         "explicit_over_fused": t_explicit / t_fused})
    return rows


def table(rows: list[dict], columns: list[str]) -> str:
    def cell(value):
        return f"{value:,.1f}" if isinstance(value, float) else str(value)

    widths = [max(len(c), *(len(cell(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell(r[c]).rjust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per generation (default 16)")
    parser.add_argument("--repeats", type=int, default=2, help="timings per measurement, the best is kept")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=384, help="C of the larger model (6 heads of C/6)")
    parser.add_argument("--context", type=int, default=256, help="max_len of the larger model")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    path = course_checkpoint_path()
    if path.exists():
        trained, trained_config, _ = load_checkpoint(path)
        trained_name = "lesson 07's trained model"
    else:
        trained_config = Config(n_vocab=65, max_len=64, emb_dim=128, n_hidden=512, head_dim=32, n_heads=4, n_layers=4)
        trained = TransformerLM(trained_config).eval()
        trained_name = "lesson 07's configuration, random weights (no checkpoint saved)"
    large_config = Config(n_vocab=65, max_len=args.context, emb_dim=args.width, n_hidden=4 * args.width,
                          head_dim=args.width // 6, n_heads=6, n_layers=args.layers)
    large = TransformerLM(large_config).eval()

    small_rows = speed(trained, [c for c in (16, 32, 64) if c > args.tokens and c <= trained_config.max_len],
                       args.tokens, args.repeats)
    large_rows = speed(large, [args.context // 8, args.context // 4, args.context // 2, args.context], args.tokens,
                       args.repeats)
    columns = ["context", "uncached_tokens_per_s", "cached_tokens_per_s", "ratio", "identical"]
    print(f"{trained_name}: {trained_config.n_layers} layers, C = {trained_config.emb_dim}, "
          f"{args.tokens} new tokens per row, {args.threads} threads")
    print(table(small_rows, columns))
    print(f"\nlarger configuration, random weights: {args.layers} layers, C = {args.width}, context {args.context}")
    print(table(large_rows, columns))
    memory = cache_bytes(large_config)
    print(f"\nthe cache of one sequence at context {args.context}, float32")
    print(table(memory, ["attention", "n_kv", "formula_bytes", "tensor_bytes"]))
    attention = attention_times(large_config, batch=4, repeats=5)
    print("\none attention layer of the larger configuration, batch 4: explicit against F.scaled_dot_product_attention")
    print(table(attention, ["call", "explicit_ms", "fused_ms", "explicit_over_fused"]))
    result = {
        "threads": args.threads, "tokens": args.tokens, "trained_model": trained_name,
        "trained": small_rows, "large": large_rows,
        "large_config": {"layers": args.layers, "emb_dim": args.width, "context": args.context},
        "full_context_ratio": large_rows[-1]["ratio"],
        "cache_bytes": memory, "attention": attention,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
