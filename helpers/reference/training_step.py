"""Reference implementation for lesson 7: Training a language model.

Generated from solutions/07-training/07-training.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


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
