"""Lesson 12's known-good LoRA layer and the small models its checks adapt.

Shape legend: B batch, T time, C embedding size, V vocabulary, nh heads, hs head size, L layers,
r the adapters' rank.

While lesson 12 is graded its reference is a stub, so the probes of ``add_lora`` and
``merge_lora`` use this written-out ``LoRALinear`` in place of the student's (a mistake in
exercise 1 then costs nothing in exercises 2 and 3): ``known_good_lora(fn)`` puts it under the
name ``LoRALinear`` in the namespace ``fn`` reads while ``fn`` runs. ``tests/test_lesson12.py``
compares it with the reference.
"""

from __future__ import annotations

import inspect
import math
from contextlib import contextmanager

import torch
from torch import nn

from helpers.reference import transformer_lm

__all__ = ["LoRALinear", "adapter_values", "known_good_lora", "shallow_wrapped", "small_lm", "wrap_known_good"]


class LoRALinear(nn.Module):
    """base(x) + (x A^T B^T) * alpha / r, with base frozen: lesson 12's exercise 1, written out."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=base.weight.dtype, device=base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=base.weight.dtype, device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # uniform in +-1/sqrt(in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low_rank = x @ self.lora_A.T  # (..., in) -> (..., r)
        return self.base(x) + (low_rank @ self.lora_B.T) * self.scale  # (..., out)


@contextmanager
def known_good_lora(fn):
    """The known-good ``LoRALinear`` under that name in the namespace ``fn`` reads, while it runs;
    the student's own is put back after."""
    scope = getattr(inspect.unwrap(fn), "__globals__", None)
    scope = scope if isinstance(scope, dict) and not scope.get("__name__", "").startswith("torch") else {}
    missing = object()
    saved = scope.get("LoRALinear", missing)
    scope["LoRALinear"] = LoRALinear
    try:
        yield
    finally:
        if saved is missing:
            scope.pop("LoRALinear", None)
        else:
            scope["LoRALinear"] = saved


def small_lm(seed: int, V: int, C: int, nh: int, hs: int, L: int, H: int, max_len: int, bias: bool = False):
    """Lesson 06's reference TransformerLM at these sizes, its weights drawn from ``seed``."""
    torch.manual_seed(seed)
    config = transformer_lm.Config(n_vocab=V, max_len=max_len, emb_dim=C, n_hidden=H, head_dim=hs, n_heads=nh,
                                   n_layers=L, attn_bias=bias)
    model = transformer_lm.TransformerLM(config)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # larger than GPT-2's 0.02, so that every layer moves the output
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 1 / math.sqrt(p.shape[-1])))
    return model


def adapter_values(name: str, A_shape, B_shape, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed float64 values for the adapters of the module ``name``: A (r, in), B (out, r)."""
    g = torch.Generator().manual_seed(seed + sum(map(ord, name)))
    A = torch.randn(A_shape, generator=g, dtype=torch.float64) / math.sqrt(A_shape[1])
    B = torch.randn(B_shape, generator=g, dtype=torch.float64) / math.sqrt(B_shape[1])
    return A, B


def wrap_known_good(model: nn.Module, names: list[str], r: int, alpha: float, seed: int) -> nn.Module:
    """Wrap the modules ``names`` of ``model`` in the known-good LoRALinear, in place, with the
    adapters set to ``adapter_values`` (B not zero, so that the adapters change the output)."""
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        lora = LoRALinear(getattr(owner, child), r, alpha)
        A, B = adapter_values(name, lora.lora_A.shape, lora.lora_B.shape, seed)
        with torch.no_grad():
            lora.lora_A.copy_(A)
            lora.lora_B.copy_(B)
        setattr(owner, child, lora)
    return model


def shallow_wrapped(add_lora) -> list[str] | None:
    """Probe side: which of two maps named query, one a direct child of the model and one inside a
    block, ``add_lora`` wraps (a walk of the direct children alone finds the first only); None when
    it raises."""
    model = nn.Module()
    model.query = nn.Linear(4, 3)
    model.block = nn.Module()
    model.block.query = nn.Linear(4, 3)
    try:
        with known_good_lora(add_lora):
            add_lora(model, ("query",), 2, 2.0)
    except Exception:  # noqa: BLE001 - the checks' own cases say what the error means
        return None
    return sorted(n for n, m in model.named_modules() if isinstance(m, LoRALinear))
