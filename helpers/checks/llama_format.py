"""Lesson 11's known-good parts and Llama's checkpoint format, for the probes.

Shape legend: B batch, T time, C embedding size, V vocabulary, nh query heads, n_kv key/value
heads, hs head size, H the feed-forward's hidden size, L layers.

While lesson 11 is graded its reference is a stub, so the probes build the modern model from
these written-out parts (``tests/test_lesson11.py`` compares them with the reference): an RMSNorm,
a SwiGLU, causal grouped-query attention with rotary positions, ``known_good_options`` (what the
exercise's ``modern_options`` does to a lesson-05 block) and ``known_good_modern_lm`` (lesson 06's
TransformerLM made modern, as the lesson's ``modern_lm``). ``llama_format_checkpoint`` writes
random weights under the names Hugging Face's ``LlamaForCausalLM`` uses.
"""

from __future__ import annotations

import inspect
import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.rope_known import known_good_rope
from helpers.reference import transformer_lm

__all__ = ["KnownGoodRMSNorm", "KnownGoodRotaryAttention", "KnownGoodSwiGLU", "NoPositionTable", "known_good_modern_lm",
           "known_good_options", "known_good_parts", "llama_config", "llama_format_checkpoint", "llama_sublayer_outputs", "LLAMA_NAMES"]

#: Llama's names inside a layer (``model.layers.i.``) -> the course's (``layers.i.``); weights only
LLAMA_NAMES = {"input_layernorm": "norm_before_attn", "self_attn.q_proj": "attention.query",
               "self_attn.k_proj": "attention.key", "self_attn.v_proj": "attention.value",
               "self_attn.o_proj": "attention.to_output", "post_attention_layernorm": "norm_before_mlp",
               "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down"}


class KnownGoodRMSNorm(nn.Module):
    def __init__(self, emb_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(emb_dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight  # (..., C)


class KnownGoodSwiGLU(nn.Module):
    def __init__(self, emb_dim: int, n_hidden: int):
        super().__init__()
        self.gate = nn.Linear(emb_dim, n_hidden, bias=False)
        self.up = nn.Linear(emb_dim, n_hidden, bias=False)
        self.down = nn.Linear(n_hidden, emb_dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (..., H) -> (..., C)


class KnownGoodRotaryAttention(nn.Module):
    def __init__(self, emb_dim, head_dim, n_heads, n_kv_heads, rope_base=10000.0):
        super().__init__()
        self.head_dim, self.n_heads, self.n_kv_heads, self.rope_base = head_dim, n_heads, n_kv_heads, rope_base
        self.query = nn.Linear(emb_dim, n_heads * head_dim, bias=False)
        self.key = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.value = nn.Linear(emb_dim, n_kv_heads * head_dim, bias=False)
        self.to_output = nn.Linear(n_heads * head_dim, emb_dim, bias=False)

    def forward(self, x):
        if x.dim() == 2:  # (T, C) -> (1, T, C)
            return self.forward(x.unsqueeze(0)).squeeze(0)
        B, T, C = x.shape
        nh, n_kv, hs = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.query(x).view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, nh, T, hs)
        k = self.key(x).view(B, T, n_kv, hs).transpose(1, 2)  # (B, T, n_kv*hs) -> (B, n_kv, T, hs)
        v = self.value(x).view(B, T, n_kv, hs).transpose(1, 2)  # (B, T, n_kv*hs) -> (B, n_kv, T, hs)
        if self.rope_base is not None:
            positions = torch.arange(T)  # lesson 09's rotation (halves convention) at 0 ... T-1
            q, k = known_good_rope(q, positions, self.rope_base), known_good_rope(k, positions, self.rope_base)
        k = k.repeat_interleave(nh // n_kv, dim=1)  # (B, nh, T, hs)
        v = v.repeat_interleave(nh // n_kv, dim=1)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))  # (B, nh, T, T)
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, nh*hs)
        return self.to_output(out)


class NoPositionTable(nn.Module):
    def forward(self, positions):
        return torch.zeros((), device=positions.device)


def known_good_options(block: nn.Module, config) -> None:
    """What ``modern_options(block, config)`` does to a lesson-05 TransformerBlock."""
    C, nh = config.emb_dim, config.n_heads
    if config.norm == "rms":
        block.norm_before_attn = KnownGoodRMSNorm(C, eps=config.norm_eps)
        block.norm_before_mlp = KnownGoodRMSNorm(C, eps=config.norm_eps)
    n_kv = config.n_kv_heads or nh
    if config.positions == "rope" or n_kv != nh:
        base = config.rope_base if config.positions == "rope" else None
        block.attention = KnownGoodRotaryAttention(C, config.head_dim, nh, n_kv, base)
    if config.mlp == "swiglu":
        block.mlp = KnownGoodSwiGLU(C, config.n_hidden)


def known_good_modern_lm(config) -> nn.Module:
    """Lesson 06's TransformerLM with modern blocks, as the lesson's ``modern_lm`` builds it."""
    model = transformer_lm.TransformerLM(config)
    if (config.norm, config.mlp, config.positions, config.n_kv_heads or config.n_heads) == ("layer", "mlp", "learned", config.n_heads):
        return model
    for block in model.layers:
        known_good_options(block, config)
    if config.positions == "rope":
        model.pos_to_embedding = NoPositionTable()
    if config.norm == "rms" and config.final_norm:
        model.final_norm = KnownGoodRMSNorm(config.emb_dim, eps=config.norm_eps)
    model.apply(model._init_weights)
    if config.tie_weights:
        model.lm_head.weight = model.word_to_embedding.weight
    return model


def llama_config(V: int, C: int, L: int, nh: int, n_kv: int, H: int, tie: bool = False, **more):
    """A Llama-shaped Config: RMSNorm, SwiGLU, rotary positions, grouped-query attention, no biases."""
    return transformer_lm.Config(n_vocab=V, max_len=more.pop("max_len", 32), emb_dim=C, n_hidden=H, head_dim=C // nh,
                                 n_heads=nh, n_layers=L, tie_weights=tie, norm="rms", mlp="swiglu", positions="rope",
                                 n_kv_heads=n_kv, **more)


def llama_format_checkpoint(config, seed: int, dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Random weights under LlamaForCausalLM's names, every norm away from ones; no lm_head.weight
    when the config ties the head (as Llama checkpoints with tied embeddings are saved)."""
    g = torch.Generator().manual_seed(seed)
    C, H, V = config.emb_dim, config.n_hidden, config.n_vocab
    q, kv = config.n_heads * config.head_dim, (config.n_kv_heads or config.n_heads) * config.head_dim
    shapes = {"input_layernorm": (C,), "self_attn.q_proj": (q, C), "self_attn.k_proj": (kv, C),
              "self_attn.v_proj": (kv, C), "self_attn.o_proj": (C, q), "post_attention_layernorm": (C,),
              "mlp.gate_proj": (H, C), "mlp.up_proj": (H, C), "mlp.down_proj": (C, H)}

    def draw(*shape):
        if len(shape) == 1:
            return 1 + 0.3 * torch.randn(*shape, generator=g, dtype=torch.float64)
        return torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])

    out = {"model.embed_tokens.weight": torch.randn(V, C, generator=g, dtype=torch.float64)}
    for i in range(config.n_layers):
        out.update({f"model.layers.{i}.{name}.weight": draw(*shape) for name, shape in shapes.items()})
    out["model.norm.weight"] = draw(C)
    if not config.tie_weights:
        out["lm_head.weight"] = draw(V, C)
    return {name: t.to(dtype) for name, t in out.items()}


def llama_sublayer_outputs(model: nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every sub-layer's output, in the order they run: the embeddings, then per layer the norm
    before attention, attention, the norm before the feed-forward, the feed-forward; the final
    norm; the logits."""
    places = {"embeddings": model.word_to_embedding}
    for i, block in enumerate(model.layers):
        places.update({f"layer {i} input_layernorm": block.norm_before_attn, f"layer {i} attention": block.attention,
                       f"layer {i} post_attention_layernorm": block.norm_before_mlp, f"layer {i} mlp": block.mlp})
    places["final norm"] = model.final_norm
    found: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_hook(lambda _m, _a, out, name=name: found.setdefault(name, out.detach().clone()))
             for name, m in places.items()]
    try:
        with torch.no_grad():
            found["logits"] = model(ids).detach().clone()
    finally:
        for hook in hooks:
            hook.remove()
    return found


KNOWN_GOOD_PARTS = {"RMSNorm": KnownGoodRMSNorm, "SwiGLU": KnownGoodSwiGLU, "RotaryGroupedAttention": KnownGoodRotaryAttention}


@contextmanager
def known_good_parts(fn):
    """The known-good RMSNorm, SwiGLU and RotaryGroupedAttention under their names in the namespace
    ``fn`` reads, while it runs; the student's own are put back after."""
    scope = getattr(inspect.unwrap(fn), "__globals__", None)
    scope = scope if isinstance(scope, dict) and not scope.get("__name__", "").startswith("torch") else {}
    saved = {name: scope[name] for name in KNOWN_GOOD_PARTS if name in scope}
    scope.update(KNOWN_GOOD_PARTS)
    try:
        yield
    finally:
        for name in KNOWN_GOOD_PARTS:
            scope.pop(name, None)
        scope.update(saved)
