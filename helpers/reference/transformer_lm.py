"""Reference implementation for lesson 6: The Transformer language model.

Generated from solutions/06-transformer-lm/06-transformer-lm.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lesson 05; taken from the course's reference implementation.
from dataclasses import dataclass

from helpers.reference.transformer_layer import BareBonesTransformerLayer, LayerNorm, TransformerBlock


def add_position_embeddings(x: torch.Tensor, pos_to_embedding: nn.Embedding) -> torch.Tensor:
    """Add learned absolute position embeddings to token embeddings.

    x: (B, T, C) or (T, C) token embeddings; pos_to_embedding: nn.Embedding(max_len, C), T <= max_len.
    Returns a new tensor of x's shape: x[..., t, :] + pos_to_embedding.weight[t] for t = 0 ... T-1,
    the same position vectors for every sequence of the batch. Positions are built on x's device.
    """
    T = x.shape[-2]
    positions = torch.arange(T, device=x.device)  # (T,): 0, 1, ..., T-1
    return x + pos_to_embedding(positions)  # (B, T, C) + (T, C) -> (B, T, C)


@dataclass
class Config:
    """The sizes of a TransformerLM. The defaults are the seed lesson's."""

    n_vocab: int = 256  # V: one token per byte value
    max_len: int = 50  # the longest sequence the position table covers
    emb_dim: int = 5  # C
    n_hidden: int = 16  # the MLP's hidden width
    head_dim: int = 256  # hs
    n_heads: int = 2  # nh
    n_layers: int = 1  # L: how many layers are stacked
    tie_weights: bool = True  # lm_head.weight is word_to_embedding.weight
    bare_bones: bool = False  # True: the seed's BareBonesTransformerLayer instead of TransformerBlock
    final_norm: bool = True  # a LayerNorm after the last layer (the seed's model has none)
    attn_bias: bool = False  # biases in attention's query, key, value and output maps (GPT-2's; lesson 10)
    activation: str = "relu"  # the MLP's nonlinearity: "relu", or GPT-2's "gelu_tanh" (lesson 10)
    dropout: float = 0.0  # dropout on each sub-layer's output while training (GPT-1 used 0.1)
    norm: str = "layer"  # the blocks' norms: "layer" (LayerNorm), or Llama's "rms" (RMSNorm; lesson 11)
    mlp: str = "mlp"  # the feed-forward: "mlp" (lesson 02's), or Llama's gated "swiglu" (lesson 11)
    positions: str = "learned"  # "learned" (pos_to_embedding), or "rope": rotary, inside attention (lesson 11)
    n_kv_heads: int = 0  # key/value heads of grouped-query attention (lessons 09, 11); 0: one per query head
    rope_base: float = 10000.0  # RoPE's base: the slowest pair turns by position * base ** (-(hs - 2) / hs)
    norm_eps: float = 1e-5  # the RMSNorms' epsilon (lesson 11); the LayerNorms keep their own 1e-5


def gpt2_options(block: nn.Module, config: Config) -> None:
    """Give a TransformerBlock the details in which GPT-2's blocks differ from ours (lesson 10).

    config.attn_bias: the attention's four nn.Linear maps get biases (query.bias ... to_output.bias).
    config.activation == "gelu_tanh": the MLP's nn.ReLU() becomes nn.GELU(approximate="tanh").
    config.dropout > 0: in training mode, the outputs of the attention and of the MLP (what each
    adds to the residual stream) go through nn.Dropout; in evaluation mode nothing changes.
    With the defaults (no biases, "relu", no dropout) it changes nothing and draws no random numbers.
    """
    if config.attn_bias:
        for name in ("query", "key", "value", "to_output"):
            plain = getattr(block.attention, name)  # nn.Linear(..., bias=False)
            setattr(block.attention, name, nn.Linear(plain.in_features, plain.out_features, bias=True))
    if config.activation == "gelu_tanh":
        block.mlp.model[1] = nn.GELU(approximate="tanh")  # no parameters: the state_dict keys stay the same
    elif config.activation != "relu":
        raise ValueError(f"activation must be 'relu' or 'gelu_tanh', got {config.activation!r}")
    if config.dropout > 0:  # a hook, not a module: the state_dict keys stay the same
        p = config.dropout
        for sublayer in (block.attention, block.mlp):  # each sub-layer's own train()/eval() switches it
            sublayer.register_forward_hook(lambda module, inputs, out: F.dropout(out, p, module.training))


class TransformerLM(nn.Module):
    """A decoder-only Transformer language model.

    input_ids: (B, T) or (T,) token ids in [0, n_vocab), T <= max_len
    -> logits (B, T, V) or (T, V): at position t, a score for every possible next token.
    Raises ValueError when T > max_len. state_dict keys: word_to_embedding.weight (V, C),
    pos_to_embedding.weight (max_len, C), layers.<i>.* (TransformerBlock, or
    BareBonesTransformerLayer when config.bare_bones), final_norm.weight and .bias (C,) when
    config.final_norm, lm_head.weight (V, C), the same tensor as word_to_embedding.weight when
    config.tie_weights.
    """

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        C = config.emb_dim
        self.word_to_embedding = nn.Embedding(config.n_vocab, C)
        self.pos_to_embedding = nn.Embedding(config.max_len, C)
        layer = BareBonesTransformerLayer if config.bare_bones else TransformerBlock
        self.layers = nn.ModuleList(
            [layer(C, config.head_dim, config.n_heads, config.n_hidden) for _ in range(config.n_layers)]
        )
        if not config.bare_bones:  # GPT-2's details (lesson 10); the defaults change nothing
            for block in self.layers:
                gpt2_options(block, config)
        self.final_norm = LayerNorm(C) if config.final_norm else nn.Identity()
        self.lm_head = nn.Linear(C, config.n_vocab, bias=False)
        self.apply(self._init_weights)
        if config.tie_weights:
            self.lm_head.weight = self.word_to_embedding.weight  # one (V, C) tensor, used twice

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialisation: small normal weights, zero biases (norms keep ones and zeros)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() == 1:  # one sequence: (T,) -> (1, T) -> logits (1, T, V) -> (T, V)
            return self.forward(input_ids.unsqueeze(0)).squeeze(0)
        B, T = input_ids.shape
        if T > self.config.max_len:
            raise ValueError(f"the input has {T} tokens, more than max_len = {self.config.max_len} positions")
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        x = self.word_to_embedding(input_ids) + self.pos_to_embedding(positions)  # (B, T, C) + (T, C) -> (B, T, C)
        for layer in self.layers:
            x = layer(x)  # (B, T, C) -> (B, T, C)
        x = self.final_norm(x)  # (B, T, C)
        return self.lm_head(x)  # (B, T, C) -> (B, T, V)
