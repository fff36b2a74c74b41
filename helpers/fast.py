"""The same TransformerLM, faster: fused kernels, one query-key-value matmul, bfloat16, compile.

The lessons teach the explicit model (``helpers.reference``): attention as scores, mask, softmax
and a second matmul; LayerNorm as a mean, a variance and a division. Each of those is several
small kernels, forward and backward. This module swaps in PyTorch's fused versions **without
changing the parameters**: the same modules hold the same tensors under the same names, so a
``state_dict`` loads into either path, and the tests check that both compute the same function.

    from helpers.fast import Speedups, accelerate, autocast_step
    model = accelerate(TransformerLM(config), Speedups())          # fused, float32
    log = train(model, data, settings, step_fn=autocast_step())   # + bfloat16 autocast

Switches (``Speedups``):

* ``fused_norm``: ``F.layer_norm`` instead of lesson 05's elementary operations;
* ``fused_attention``: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` (lesson 04);
* ``fused_qkv``: one ``(C, 3·nh·hs)`` matmul instead of three ``(C, nh·hs)`` ones; the weight is
  the three ``nn.Linear`` weights stacked at every call, so the parameters stay separate;
* ``compile``: ``torch.compile`` of every block (needs a C compiler on a CPU; the first steps pay
  for the compilation).

bfloat16 is not a property of the model but of the step: ``autocast_step`` runs the forward pass
and the loss under ``torch.autocast("cpu", dtype=torch.bfloat16)`` and the backward pass outside
it; the weights and the optimiser stay float32. bfloat16 keeps float32's exponent range, so,
unlike float16, it needs no gradient scaler.

Shape legend: ``B`` batch, ``T`` time, ``C`` embedding size, ``nh`` heads, ``hs`` head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.reference.multihead import CausalSelfAttention
from helpers.reference.transformer_layer import LayerNorm

__all__ = ["FusedCausalSelfAttention", "FusedLayerNorm", "Speedups", "accelerate", "autocast_step", "bf16_supported"]


@dataclass(frozen=True)
class Speedups:
    """Which fast paths ``accelerate`` switches on. All of them keep the parameters as they are."""

    fused_norm: bool = True
    fused_attention: bool = True
    fused_qkv: bool = True
    compile: bool = False


class FusedLayerNorm(LayerNorm):
    """Lesson 05's LayerNorm, computed by ``F.layer_norm``: same parameters, same function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)  # (..., C)


class FusedCausalSelfAttention(CausalSelfAttention):
    """Lesson 04's CausalSelfAttention with fused kernels: same parameters, same function."""

    fused_attention: bool = True
    fused_qkv: bool = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unbatched = x.dim() == 2
        if unbatched:
            x = x.unsqueeze(0)  # (T, C) -> (1, T, C)
        B, T, C = x.shape
        nh, hs = self.n_heads, self.head_dim
        if self.fused_qkv:
            weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3*nh*hs, C)
            q, k, v = F.linear(x, weight).split(nh * hs, dim=-1)  # (B, T, 3*nh*hs) -> 3 x (B, T, nh*hs)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)  # 3 x (B, T, nh*hs)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, T, nh, hs) -> (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, T, nh*hs) -> (B, nh, T, hs)
        if self.fused_attention:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        else:
            scores = q @ k.transpose(-2, -1) / hs**0.5  # (B, nh, T, T)
            future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)  # (T, T)
            out = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v  # (B, nh, T, hs)
        out = out.transpose(1, 2).reshape(B, T, nh * hs)  # (B, nh, T, hs) -> (B, T, nh, hs) -> (B, T, nh*hs)
        out = self.to_output(out)  # (B, T, C)
        return out.squeeze(0) if unbatched else out


def _retype(module: nn.Module, cls: type) -> None:
    """Give ``module`` the faster subclass of its class: its parameters and buffers stay put."""
    module.__class__ = cls


def accelerate(model: nn.Module, speedups: Speedups | None = None) -> nn.Module:
    """Switch ``model`` (a reference TransformerLM, or any module built from the reference parts)
    to the fast paths in place and return it. ``state_dict()`` keys and tensors are unchanged."""
    speedups = speedups or Speedups()
    for module in model.modules():
        if speedups.fused_norm and type(module) is LayerNorm:
            _retype(module, FusedLayerNorm)
        if type(module) is CausalSelfAttention and (speedups.fused_attention or speedups.fused_qkv):
            _retype(module, FusedCausalSelfAttention)
            module.fused_attention = speedups.fused_attention
            module.fused_qkv = speedups.fused_qkv
    if speedups.compile:
        for block in getattr(model, "layers", []):
            block.compile()  # in place: the module keeps its parameters and its state_dict keys
    return model


def bf16_supported() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AVX-512 BF16 or AMX on x86)."""
    checker = getattr(torch.backends.cpu, "get_cpu_capability", None)
    capability = checker() if checker is not None else ""
    if "AVX512" in capability.upper():
        try:
            with open("/proc/cpuinfo") as fh:
                flags = fh.read()
            return "avx512_bf16" in flags or "amx_bf16" in flags
        except OSError:
            return False
    return False


def autocast_step(dtype: torch.dtype = torch.bfloat16):
    """A ``train_step`` for ``helpers.training.train`` that runs the forward pass and the loss in
    ``dtype`` (autocast) and the backward pass and the update in float32, as lesson 07's step does.
    """

    def step(model, optimizer, x, y, grad_clip=None) -> float:
        model.train()
        with torch.autocast("cpu", dtype=dtype):
            logits = model(x)  # (B, T, V), in dtype
            B, T, V = logits.shape
            loss = F.cross_entropy(logits.reshape(B * T, V).float(), y.reshape(B * T))  # the loss in float32
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        return loss.item()

    return step
