"""Reference implementation for lesson 8: Generation, and looking inside the model.

Generated from solutions/08-generation/08-generation.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Sharpen (temperature < 1) or flatten (temperature > 1) a distribution given by its logits.

    logits: (..., V); temperature > 0. Returns a new (..., V) tensor, the logits divided by the
    temperature; the input is left unchanged.
    """
    return logits / temperature  # (..., V)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k most likely tokens of every row; remove the others.

    logits: (..., V); k >= 1. Returns a new (..., V) tensor: each logit that is at least as large
    as the k-th largest of its row unchanged (so ties with the k-th are all kept), -inf elsewhere.
    With k >= V nothing is removed.
    """
    k = min(k, logits.shape[-1])
    kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))  # (..., V)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the fewest most likely tokens whose probabilities add up to p or more.

    logits: (..., V); 0 < p <= 1. Returns a new (..., V) tensor: the kept logits unchanged, -inf
    elsewhere. Tokens are taken from the most likely down, and the token that takes the total to
    p or beyond is kept; the most likely token is always kept.
    """
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)  # (..., V) each
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # (..., V): mass of the more likely tokens
    remove_sorted = mass_before >= p  # (..., V), in sorted order
    remove = remove_sorted.scatter(-1, order, remove_sorted)  # (..., V), back in vocabulary order
    return logits.masked_fill(remove, float("-inf"))  # (..., V)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Choose the next token of every row.

    logits: (V,) or (N, V). Returns the chosen ids, a long tensor of shape () or (N,).
    temperature == 0: greedy, the largest logit (no randomness). Otherwise: divide by the
    temperature, apply top_k_filter (unless top_k is None), then top_p_filter (unless top_p is
    None), and draw one token per row from the softmax with torch.multinomial, using generator.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)  # () or (N,)
    logits = apply_temperature(logits, temperature)  # (..., V)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    flat = probs.reshape(-1, probs.shape[-1])  # (N, V): multinomial wants one row per draw
    ids = torch.multinomial(flat, num_samples=1, generator=generator)  # (N, 1)
    return ids.reshape(logits.shape[:-1])  # () or (N,)


@torch.no_grad()
def generate(
    model: nn.Module,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend a prompt one token at a time with sample_next.

    ids: (T0,) or (B, T0) prompt ids -> (T0 + max_new_tokens,) or (B, T0 + max_new_tokens).
    The model sees at most its last config.max_len tokens (the window it was trained on).
    Runs in evaluation mode without gradients and puts the model back in the mode it was in.
    """
    was_training = model.training
    model.eval()
    unbatched = ids.dim() == 1
    if unbatched:
        ids = ids.unsqueeze(0)  # (T0,) -> (1, T0)
    for _ in range(max_new_tokens):
        context = ids[:, -model.config.max_len :]  # (B, T) with T <= max_len
        last = model(context)[:, -1, :]  # (B, T, V) -> (B, V): the scores for the next token
        next_ids = sample_next(last, temperature, top_k, top_p, generator)  # (B,)
        ids = torch.cat([ids, next_ids.unsqueeze(1)], dim=1)  # (B, T0 + generated so far)
    model.train(was_training)
    return ids.squeeze(0) if unbatched else ids
