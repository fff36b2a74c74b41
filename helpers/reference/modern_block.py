"""Reference implementation for lesson 11: From GPT-2 to a modern block: RMSNorm, SwiGLU, rotary positions and grouped-query attention.

Generated from solutions/11-modern-block/11-modern-block.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lessons 06 and 09; taken from the course's reference implementation.
from helpers.reference.fast_generation import apply_rope
from helpers.reference.transformer_lm import Config, TransformerLM


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned scale (Llama's norm).

    x: (..., C) -> (..., C): x / sqrt(mean(x ** 2 over C) + eps) * weight. No mean is subtracted and
    there is no bias. Parameters: weight (C,), starting at ones.
    """

    def __init__(self, emb_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(emb_dim))  # the learned scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return x * torch.rsqrt(mean_square + self.eps) * self.weight  # (..., C) * (..., 1) * (C,)


class SwiGLU(nn.Module):
    """Llama's feed-forward: down(silu(gate(x)) * up(x)), three bias-free maps.

    x: (..., C) -> (..., C), through a hidden size H = n_hidden.
    Parameters: gate.weight (H, C), up.weight (H, C), down.weight (C, H).
    """

    def __init__(self, emb_dim: int, n_hidden: int):
        super().__init__()
        self.gate = nn.Linear(emb_dim, n_hidden, bias=False)
        self.up = nn.Linear(emb_dim, n_hidden, bias=False)
        self.down = nn.Linear(n_hidden, emb_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated = F.silu(self.gate(x)) * self.up(x)  # (..., H) * (..., H) -> (..., H)
        return self.down(gated)  # (..., H) -> (..., C)


class RotaryGroupedAttention(nn.Module):
    """Causal grouped-query attention with rotary positions (lesson 09's two exercises, combined).

    x: (B, T, C) or (T, C) -> the same shape. nh = n_heads query heads; n_kv = n_kv_heads key and
    value heads, query head h reading key/value head h // (nh // n_kv). rope_base: queries and keys
    are turned by apply_rope at positions 0 ... T-1 with this base; None: no rotation.
    Parameters: query (C -> nh*hs), key and value (C -> n_kv*hs), to_output (nh*hs -> C), no biases.
    """

    def __init__(self, emb_dim, head_dim, n_heads, n_kv_heads, rope_base=10000.0):
        super().__init__()
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
        if rope_base is not None and head_dim % 2:
            raise ValueError(f"RoPE turns pairs of features: head_dim = {head_dim} must be even")
        self.head_dim, self.n_heads, self.n_kv_heads, self.rope_base = head_dim, n_heads, n_kv_heads, rope_base
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x):
        if x.dim() == 2:  # one sequence: (T, C) -> (1, T, C) -> (T, C)
            return self.forward(x.unsqueeze(0)).squeeze(0)
        B, T, C = x.shape
        nh, n_kv, hs = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.query(x).view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, nh, T, hs)
        k = self.key(x).view(B, T, n_kv, hs).transpose(1, 2)  # (B, T, n_kv*hs) -> (B, n_kv, T, hs)
        v = self.value(x).view(B, T, n_kv, hs).transpose(1, 2)  # (B, T, n_kv*hs) -> (B, n_kv, T, hs)
        if self.rope_base is not None:
            positions = torch.arange(T, device=x.device)  # (T,)
            q = apply_rope(q, positions, self.rope_base)  # (B, nh, T, hs)
            k = apply_rope(k, positions, self.rope_base)  # (B, n_kv, T, hs): turned once, before sharing
        group = nh // n_kv
        k = k.repeat_interleave(group, dim=1)  # (B, n_kv, T, hs) -> (B, nh, T, hs)
        v = v.repeat_interleave(group, dim=1)  # query head h reads key/value head h // group
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T): key j <= query i
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B, nh, T, T)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, nh, T, T)
        out = (weights @ v).transpose(1, 2).reshape(B, T, nh * hs)  # (B, nh, T, hs) -> (B, T, nh*hs)
        return self.to_output(out)  # (B, T, C)


class NoPositions(nn.Module):
    """Takes the place of pos_to_embedding in a model with rotary positions: adds nothing.

    positions: (T,) -> a zero of no shape (it broadcasts against (B, T, C) and keeps its dtype),
    on the positions' device. No parameters.
    """

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=positions.device)


def modern_options(block: nn.Module, config: Config) -> None:
    """Give a lesson-05 TransformerBlock the modern parts its config asks for, in place.

    config.norm == "rms": norm_before_attn and norm_before_mlp become RMSNorm(C, eps=config.norm_eps).
    config.positions == "rope", or n_kv_heads set and != n_heads: attention becomes
    RotaryGroupedAttention(C, head_dim, n_heads, n_kv, rope_base or None).
    config.mlp == "swiglu": mlp becomes SwiGLU(C, n_hidden). With the defaults nothing changes.
    """
    C = config.emb_dim
    if config.norm == "rms":
        block.norm_before_attn = RMSNorm(C, eps=config.norm_eps)  # weight (C,), no bias
        block.norm_before_mlp = RMSNorm(C, eps=config.norm_eps)
    n_kv = config.n_kv_heads or config.n_heads  # 0: one key/value head per query head
    if config.positions == "rope" or n_kv != config.n_heads:
        base = config.rope_base if config.positions == "rope" else None
        block.attention = RotaryGroupedAttention(C, config.head_dim, config.n_heads, n_kv, base)
    if config.mlp == "swiglu":
        block.mlp = SwiGLU(C, config.n_hidden)


def modern_lm(config: Config) -> TransformerLM:
    """Lesson 06's TransformerLM with the blocks its config describes (modern_options on each).

    positions == "rope": no table of positions (NoPositions). norm == "rms": the final norm is an
    RMSNorm too. Every weight gets GPT-2's initialisation again; the head is tied to the token
    table when config.tie_weights. With the defaults it is TransformerLM(config), unchanged.
    """
    model = TransformerLM(config)
    plain = ("layer", "mlp", "learned", config.n_heads)
    if (config.norm, config.mlp, config.positions, config.n_kv_heads or config.n_heads) == plain:
        return model  # the defaults: lesson 06's model, its weights as drawn
    for block in model.layers:
        modern_options(block, config)
    if config.positions == "rope":
        model.pos_to_embedding = NoPositions()  # lesson 06's forward adds pos_to_embedding(positions): zero
    if config.norm == "rms" and config.final_norm:
        model.final_norm = RMSNorm(config.emb_dim, eps=config.norm_eps)
    model.apply(model._init_weights)  # the new parts drew their own initial weights
    if config.tie_weights:
        model.lm_head.weight = model.word_to_embedding.weight  # one (V, C) tensor, used twice
    return model


@torch.no_grad()
def load_llama_state_dict(model: TransformerLM, state_dict: dict[str, torch.Tensor]) -> TransformerLM:
    """Copy a Llama checkpoint (LlamaForCausalLM's names) into a Llama-shaped modern_lm, in place.

    state_dict: model.embed_tokens.weight (V, C); per layer i, model.layers.i. input_layernorm (C,),
    self_attn.q_proj (nh*hs, C), k_proj and v_proj (n_kv*hs, C), o_proj (C, nh*hs),
    post_attention_layernorm (C,), mlp.gate_proj and up_proj (H, C), mlp.down_proj (C, H), each
    .weight; model.norm.weight (C,); lm_head.weight (V, C) when the head is not tied. nn.Linear
    layouts: nothing is transposed. A tied head stays tied. Returns the model.
    """
    names = {"input_layernorm": "norm_before_attn", "self_attn.q_proj": "attention.query",
             "self_attn.k_proj": "attention.key", "self_attn.v_proj": "attention.value",
             "self_attn.o_proj": "attention.to_output", "post_attention_layernorm": "norm_before_mlp",
             "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down"}
    model.word_to_embedding.weight.copy_(state_dict["model.embed_tokens.weight"])  # (V, C)
    for i, block in enumerate(model.layers):
        for theirs, ours in names.items():
            block.get_submodule(ours).weight.copy_(state_dict[f"model.layers.{i}.{theirs}.weight"])
    model.final_norm.weight.copy_(state_dict["model.norm.weight"])  # (C,)
    if not model.config.tie_weights:
        model.lm_head.weight.copy_(state_dict["lm_head.weight"])  # (V, C): its own matrix
    return model


def config_from_llama_json(hf: dict) -> Config:
    """The course's Config of a LlamaForCausalLM, from its config.json (read as a dict).

    Hugging Face's fields: vocab_size, max_position_embeddings, hidden_size, intermediate_size,
    num_attention_heads, num_key_value_heads, head_dim (when not hidden_size // heads),
    num_hidden_layers, tie_word_embeddings, rms_norm_eps, and RoPE's base as rope_theta (older
    files) or rope_parameters["rope_theta"] (newer ones).
    """
    n_heads = hf["num_attention_heads"]
    rope = hf.get("rope_parameters") or {}
    return Config(
        n_vocab=hf["vocab_size"], max_len=hf["max_position_embeddings"], emb_dim=hf["hidden_size"],
        n_hidden=hf["intermediate_size"], head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        n_heads=n_heads, n_layers=hf["num_hidden_layers"], tie_weights=hf.get("tie_word_embeddings", False),
        norm="rms", mlp="swiglu", positions="rope", n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        rope_base=rope.get("rope_theta", hf.get("rope_theta", 10000.0)), norm_eps=hf.get("rms_norm_eps", 1e-6),
    )
