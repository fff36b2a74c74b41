"""Reference implementation for lesson 3: Self-attention, step by step.

Generated from solutions/03-self-attention/03-self-attention.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


def apply_causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """Hide every query's future keys.

    scores: (..., T, T) query-key scores, row i = query i, column j = key j.
    Returns a new (..., T, T) tensor: -inf where j > i, the input's value elsewhere.
    """
    T = scores.shape[-1]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=scores.device), diagonal=1)  # (T, T)
    return scores.masked_fill(future, float("-inf"))  # (..., T, T)


class AttentionHead(nn.Module):
    """One causal self-attention head.

    x: (T, C) or (B, T, C) -> (T, hs) or (B, T, hs), with C = emb_dim, hs = head_dim.
    Query i attends to keys j <= i only.
    """

    def __init__(self, emb_dim: int, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.query = nn.Linear(emb_dim, head_dim, bias=False)
        self.key = nn.Linear(emb_dim, head_dim, bias=False)
        self.value = nn.Linear(emb_dim, head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        q = self.query(x)  # (B, T, hs)
        k = self.key(x)  # (B, T, hs)
        v = self.value(x)  # (B, T, hs)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (B, T, T)
        return weights @ v  # (B, T, hs)
