"""Reference implementation for lesson 1: Tokens and embeddings.

Generated from solutions/01-tokens-and-embeddings/01-tokens-and-embeddings.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


N_VOCAB = 256  # ids 0..255, one row of the embedding table each


def encode(text: str) -> torch.Tensor:
    """Turn text into the ids that a character-level model reads.

    text: a str of T characters.
    Returns a (T,) torch.long tensor with ids[i] = ord(text[i]), the Unicode code point.
    Raises ValueError, naming the character and its position, when a code point is N_VOCAB
    (256) or more: the model has no row for it. encode("") is an empty (0,) long tensor.
    """
    codes = []
    for position, ch in enumerate(text):
        code = ord(ch)
        if code >= N_VOCAB:
            raise ValueError(
                f"{ch!r} (code point {code}) at position {position} is outside the "
                f"vocabulary of {N_VOCAB} ids (0 to {N_VOCAB - 1})"
            )
        codes.append(code)
    return torch.tensor(codes, dtype=torch.long)  # (T,)


def decode(ids: torch.Tensor) -> str:
    """The inverse of encode.

    ids: a (T,) integer tensor of code points.
    Returns the str of T characters with text[i] = chr(ids[i]).
    """
    return "".join(chr(code) for code in ids.tolist())


def shift_for_next_token(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ids into model inputs and next-token targets.

    ids: a window of T + 1 ids, a (T + 1,) or (B, T + 1) integer tensor.
    Returns (inputs, targets), each (T,) or (B, T), with
    inputs[..., t] = ids[..., t] and targets[..., t] = ids[..., t + 1].
    """
    inputs = ids[..., :-1]  # (B, T): every id but the last
    targets = ids[..., 1:]  # (B, T): every id but the first
    return inputs, targets


def embedding_and_head_parameters(
    n_vocab: int, emb_dim: int, tie_weights: bool = True, head_bias: bool = False
) -> int:
    """Trainable parameters of nn.Embedding(n_vocab, emb_dim) + nn.Linear(emb_dim, n_vocab, bias=head_bias).

    tie_weights: the head's (n_vocab, emb_dim) weight is the embedding table itself (counted once).
    Returns an int.
    """
    table = n_vocab * emb_dim  # the (V, C) embedding table
    head_weight = 0 if tie_weights else n_vocab * emb_dim  # a second (V, C) matrix, unless shared
    bias = n_vocab if head_bias else 0  # one bias per output score: (V,)
    return table + head_weight + bias
