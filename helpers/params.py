"""Counting parameters."""

from torch import nn


def num_parameters(model: nn.Module) -> int:
    """The number of trainable parameters; a tensor shared by two layers counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
