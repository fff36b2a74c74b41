"""Reference implementation for lesson 5: The transformer layer: LayerNorm and residual connections.

Generated from solutions/05-transformer-layer/05-transformer-layer.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lessons 02 and 04; taken from the course's reference implementation.
from helpers.reference.language_models import MLP
from helpers.reference.multihead import CausalSelfAttention, MultiHeadAttention


class BareBonesTransformerLayer(nn.Module):
    """The seed lesson's layer: attention -> LayerNorm -> MLP -> LayerNorm, no residual connections.

    x: (B, T, C) -> (B, T, C). Kept to reproduce the seed's model and to compare with
    TransformerBlock; a real model should use TransformerBlock.
    Parameters: self_attention (MultiHeadAttention), norm_after_attn, mlp (MLP), norm_after_mlp;
    the norms are nn.LayerNorm, whose state_dict keys (weight, bias) match the course's LayerNorm.
    """

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int, n_hidden: int):
        super().__init__()
        self.self_attention = MultiHeadAttention(emb_dim, head_dim, n_heads)
        self.norm_after_attn = nn.LayerNorm(emb_dim)
        self.mlp = MLP(emb_dim, n_hidden)
        self.norm_after_mlp = nn.LayerNorm(emb_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm_after_attn(self.self_attention(x))  # (B, T, C)
        x = self.norm_after_mlp(self.mlp(x))  # (B, T, C)
        return x


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension, with a learned scale and shift.

    x: (..., C) -> (..., C), with C = emb_dim. Each position's C features are normalised to
    mean 0 and (biased) variance 1, dividing by sqrt(var + eps), then scaled by weight and
    shifted by bias. Parameters: weight (C,) starting at ones, bias (C,) starting at zeros,
    the same names and values as nn.LayerNorm(emb_dim, eps=eps).
    """

    def __init__(self, emb_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(emb_dim))  # gamma, the learned scale
        self.bias = nn.Parameter(torch.zeros(emb_dim))  # beta, the learned shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), divided by C: biased
        normalised = (x - mean) / torch.sqrt(var + self.eps)  # (..., C)
        return normalised * self.weight + self.bias  # (..., C)


class TransformerBlock(nn.Module):
    """A pre-LN transformer block: x + attention(norm(x)), then + mlp(norm(...)).

    x: (B, T, C) or (T, C) -> the same shape, with C = emb_dim.
    Parameters (their names are the interface): norm_before_attn, attention
    (CausalSelfAttention: query, key, value, to_output), norm_before_mlp, mlp (MLP: model.0, model.2).
    """

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int, n_hidden: int):
        super().__init__()
        self.norm_before_attn = LayerNorm(emb_dim)
        self.attention = CausalSelfAttention(emb_dim, head_dim, n_heads)
        self.norm_before_mlp = LayerNorm(emb_dim)
        self.mlp = MLP(emb_dim, n_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm_before_attn(x))  # (B, T, C): attention writes into the stream
        x = x + self.mlp(self.norm_before_mlp(x))  # (B, T, C): then the MLP, reading the updated stream
        return x
