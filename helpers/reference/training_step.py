"""Reference implementation for lesson 7: Training a language model.

Generated from solutions/07-training/07-training.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


def get_batch(
    ids: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """batch_size random windows of block_size ids, and their next-character targets.

    ids: (N,), the whole text as ids. Returns x and y, both (B, T) with B = batch_size and
    T = block_size: x[b] = ids[s : s + T] for a random start s of its own, and
    y[b] = ids[s + 1 : s + T + 1], so that y[b, t] is the character after x[b, t]. Every start
    from 0 to N - T - 1 is possible. The starts come from `generator` (the global generator
    when it is None): a seeded generator gives the same batch every time.
    """
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,), 0 .. N-T-1
    positions = starts[:, None] + torch.arange(block_size)  # (B, 1) + (T,) -> (B, T)
    x = ids[positions]  # (B, T)
    y = ids[positions + 1]  # (B, T): the character after each one of x
    return x, y


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    grad_clip: float | None = None,
) -> float:
    """One update of the model's parameters on the batch (x, y); returns the loss as a float.

    x: (B, T) token ids; y: (B, T) targets, already shifted: y[b, t] is the token after x[b, t].
    Puts the model in training mode, computes the mean cross-entropy of model(x), (B, T, V),
    against y, clears the old gradients, backpropagates, clips the global gradient norm to
    grad_clip (not when grad_clip is None) and lets the optimizer update the parameters.
    Returns the loss before the update as a Python float.
    """
    model.train()
    logits = model(x)  # (B, T, V)
    B, T, V = logits.shape
    loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))  # (B*T, V) against (B*T,)
    optimizer.zero_grad(set_to_none=True)  # forget the previous step's gradients
    loss.backward()  # fills p.grad for every parameter p
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()  # p <- p - (a step computed from p.grad)
    return loss.item()  # a float: the graph behind `loss` can be freed


def learning_rate(step: int, config) -> float:
    """The learning rate of update `step` (0-based) under `config`, a TrainConfig.

    Linear warm-up over the first config.warmup_steps updates: lr * (step + 1) / warmup_steps.
    Then, with config.cosine, half a cosine wave from config.lr at step warmup_steps down to
    config.min_lr at the last update, step config.steps - 1, and min_lr after it; without
    config.cosine, config.lr after the warm-up. Returns a Python float.
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps  # lr / warmup_steps at step 0
    if not config.cosine:
        return config.lr
    decay_steps = max(1, config.steps - 1 - config.warmup_steps)  # from warmup_steps to the last update
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)  # 0 -> 1, then stays at 1
    factor = 0.5 * (1 + math.cos(math.pi * progress))  # 1 -> 0
    return config.min_lr + factor * (config.lr - config.min_lr)
