"""Reference implementation for lesson 2: Language models without context.

Generated from solutions/02-language-models/02-language-models.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class BareBonesLM(nn.Module):
    """An embedding followed directly by an output layer: nothing in between.

    input_ids: (T,) or (B, T) long tensor -> logits (T, V) or (B, T, V), V = n_vocab.
    With tie_weights=True, lm_head.weight and word_to_embedding.weight are ONE nn.Parameter.
    """

    def __init__(self, n_vocab: int, emb_dim: int, tie_weights: bool = True):
        super().__init__()
        self.word_to_embedding = nn.Embedding(n_vocab, emb_dim)  # weight: (V, C)
        self.lm_head = nn.Linear(emb_dim, n_vocab, bias=False)  # weight: (V, C)
        if tie_weights:
            self.lm_head.weight = self.word_to_embedding.weight  # the same Parameter object

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeddings = self.word_to_embedding(input_ids)  # (B, T, C)
        return self.lm_head(embeddings)  # (B, T, V)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean negative log-probability of the targets, computed stably.

    logits: (..., V) float, e.g. (B, T, V) or (N, V).
    targets: (...) long class indices in [0, V), e.g. (B, T) or (N,).
    Returns a 0-d tensor: mean over all positions of -log softmax(logits)[target].
    """
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)  # (N, V), N = B*T
    wanted = targets.reshape(-1)  # (N,)
    shifted = rows - rows.max(dim=-1, keepdim=True).values  # (N, V): each row's largest entry is 0
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, V)
    picked = log_probs[torch.arange(wanted.shape[0]), wanted]  # (N,)
    return -picked.mean()


class MLP(nn.Module):
    """Linear -> ReLU -> Linear, applied to every position on its own.

    x: (..., C) -> (..., C), C = emb_dim, with n_hidden units in between.
    self.model = nn.Sequential(Linear(C, n_hidden), ReLU(), Linear(n_hidden, C)), so the parameters are
    model.0.weight (n_hidden, C), model.0.bias (n_hidden,), model.2.weight (C, n_hidden), model.2.bias (C,).
    """

    def __init__(self, emb_dim: int, n_hidden: int):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(emb_dim, n_hidden),  # (..., C) -> (..., n_hidden)
            nn.ReLU(),
            nn.Linear(n_hidden, emb_dim),  # (..., n_hidden) -> (..., C)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)  # (..., C)


class FeedForwardLM(BareBonesLM):
    """BareBonesLM with an MLP between the embedding and the head. Still no context.

    input_ids: (T,) or (B, T) long tensor -> logits (T, V) or (B, T, V).
    """

    def __init__(self, n_vocab: int, emb_dim: int, n_hidden: int, tie_weights: bool = True):
        super().__init__(n_vocab, emb_dim, tie_weights=tie_weights)  # word_to_embedding, lm_head, tying
        self.model = MLP(emb_dim, n_hidden)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_to_embedding(input_ids)  # (B, T, C)
        x = self.model(x)  # (B, T, C): each position on its own
        return self.lm_head(x)  # (B, T, V)
