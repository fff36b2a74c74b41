"""Reference implementation for lesson 4: Attention modules: many heads, one matrix product.

Generated from solutions/04-attention-modules/04-attention-modules.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Lesson 03's masked head, taken from the course's reference implementation.
# AttentionHead(emb_dim, head_dim): x (..., T, C) -> (..., T, hs); query, key, value: nn.Linear(C, hs).
from helpers.reference.attention import AttentionHead


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention, one head after the other.

    x: (T, C) or (B, T, C) -> the same shape, with C = emb_dim.
    n_heads heads (each C -> hs, hs = head_dim) run on the same x; their outputs are concatenated
    in order (head h in columns h*hs:(h+1)*hs) and to_output maps nh*hs -> C.
    """

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int):
        super().__init__()
        self.head_dim = head_dim
        self.n_heads = n_heads
        # an nn.ModuleList, not a Python list: it registers every head's weights with this module
        self.heads = nn.ModuleList([AttentionHead(emb_dim, head_dim) for _ in range(n_heads)])
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        head_outputs = [head(x) for head in self.heads]  # nh tensors, each (B, T, hs)
        concatenated = torch.cat(head_outputs, dim=-1)  # (B, T, nh*hs)
        return self.to_output(concatenated)  # (B, T, C)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention with all heads in the same matrix products.

    x: (T, C) or (B, T, C) -> the same shape, with C = emb_dim.
    query, key, value: nn.Linear(C, nh*hs); head h uses their output features h*hs:(h+1)*hs.
    Computes what MultiHeadAttention computes, without a Python loop over the heads.
    """

    def __init__(self, emb_dim: int, head_dim: int, n_heads: int):
        super().__init__()
        self.head_dim = head_dim
        self.n_heads = n_heads
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unbatched = x.dim() == 2
        if unbatched:
            x = x.unsqueeze(0)  # (T, C) -> (1, T, C)
        B, T, C = x.shape
        nh, hs = self.n_heads, self.head_dim
        q = self.query(x).view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, T, nh, hs) -> (B, nh, T, hs)
        k = self.key(x).view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, T, nh, hs) -> (B, nh, T, hs)
        v = self.value(x).view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, T, nh, hs) -> (B, nh, T, hs)
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)  # (T, T)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)  # (B, nh, T, T)
        out = weights @ v  # (B, nh, T, hs)
        out = out.transpose(1, 2).reshape(B, T, nh * hs)  # (B, nh, T, hs) -> (B, T, nh, hs) -> (B, T, nh*hs)
        out = self.to_output(out)  # (B, T, C)
        return out.squeeze(0) if unbatched else out


@torch.no_grad()
def fuse_heads(mha: MultiHeadAttention) -> "CausalSelfAttention":
    """A CausalSelfAttention with the weights of ``mha``: both compute the same function.

    Head h's query, key and value weights, each (hs, C), become rows h*hs:(h+1)*hs of the
    stacked (nh*hs, C) weights; the output projection (C, nh*hs) is copied unchanged.
    """
    n_heads = len(mha.heads)
    head_dim, emb_dim = mha.heads[0].query.weight.shape
    fused = CausalSelfAttention(emb_dim, head_dim, n_heads).to(mha.to_output.weight)  # same dtype, device
    for name in ("query", "key", "value"):
        stacked = torch.cat([getattr(head, name).weight for head in mha.heads], dim=0)  # (nh*hs, C)
        getattr(fused, name).weight.copy_(stacked)
    fused.to_output.weight.copy_(mha.to_output.weight)  # (C, nh*hs)
    return fused
