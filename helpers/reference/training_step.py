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


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups: [{"params": decayed, "weight_decay": weight_decay},
    {"params": the others, "weight_decay": 0.0}].

    A parameter is decayed exactly when it is the weight of an nn.Linear that no nn.Embedding
    holds (a tied lm_head shares the embedding table: not decayed). Every parameter of
    model.parameters() is in exactly one group, once.
    """
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}  # tied or not
    decayed = [m.weight for m in model.modules() if isinstance(m, nn.Linear) and id(m.weight) not in tables]
    chosen = {id(p) for p in decayed}
    others = [p for p in model.parameters() if id(p) not in chosen]  # parameters() gives a tied tensor once
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]


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


def estimate_loss(
    model: nn.Module,
    splits: dict[str, torch.Tensor],
    n_batches: int,
    batch_size: int,
    block_size: int,
    seed: int = 1234,
) -> dict[str, float]:
    """The mean cross-entropy (nats per token) of model on n_batches random batches of each split.

    splits: {name: ids}, each (N,). For each split a new generator seeded with seed cuts n_batches
    batches with get_batch(ids, batch_size, block_size, generator=...), x and y (B, T) each.
    Returns {name: the mean of its n_batches losses} as Python floats. Runs in evaluation mode
    without gradients and leaves the model in the mode it came in.
    """
    was_training = model.training  # the mode the model came in
    model.eval()
    estimates = {}
    for name, ids in splits.items():
        generator = torch.Generator().manual_seed(seed)  # the same batches at every call
        total = 0.0
        for _ in range(n_batches):
            x, y = get_batch(ids, batch_size, block_size, generator=generator)  # (B, T) each
            with torch.no_grad():  # nothing calls backward(): no graph
                logits = model(x)  # (B, T, V)
                B, T, V = logits.shape
                loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))  # (B*T, V) against (B*T,)
            total += loss.item()
        estimates[name] = total / n_batches
    model.train(was_training)  # back in the mode it came in
    return estimates
