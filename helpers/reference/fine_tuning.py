"""Reference implementation for lesson 12: Fine-tuning your model: all of it, a low-rank adapter, a classifier.

Generated from solutions/12-fine-tuning/12-fine-tuning.ipynb by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


# Built in lesson 06; taken from the course's reference implementation.
from helpers.reference.transformer_lm import Config, TransformerLM


class LoRALinear(nn.Module):
    """A trained nn.Linear, frozen, plus a trainable low-rank update (Hu et al., 2021).

    x: (..., in_features) -> (..., out_features): base(x) + (x @ A.T @ B.T) * alpha / r.
    Parameters: base.weight (out, in) and base.bias (out,) when base has one, both frozen;
    lora_A (r, in), starting as nn.Linear's weights start; lora_B (out, r), starting at zero.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base  # the trained layer: adapted, never changed
        self.r, self.alpha = r, alpha
        for p in base.parameters():
            p.requires_grad_(False)  # frozen: no gradient, no optimizer state
        self.scale = alpha / r
        like = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, **like))  # (r, in)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # uniform in +-1/sqrt(in), as nn.Linear's weight
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **like))  # (out, r): the update starts at 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low_rank = x @ self.lora_A.T  # (..., in) @ (in, r) -> (..., r)
        return self.base(x) + (low_rank @ self.lora_B.T) * self.scale  # (..., r) @ (r, out) -> (..., out)


def add_lora(model: nn.Module, targets: tuple[str, ...], r: int, alpha: float) -> list[str]:
    """Wrap, in place, every nn.Linear of model whose name ends in one of targets in a LoRALinear.

    A name's last part (after the last dot) is compared with targets: "query" chooses
    layers.0.attention.query, layers.1.attention.query, ... Every other parameter of the model is
    frozen: afterwards only the adapters' lora_A and lora_B train. Returns the wrapped modules' names.
    """
    model.requires_grad_(False)  # everything frozen first: the adapters built next still train
    chosen = [name for name, module in model.named_modules()
              if isinstance(module, nn.Linear) and name.rpartition(".")[2] in targets]
    for name in chosen:  # the names first, then the swaps: never change a module tree while walking it
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)  # "" is the model itself
        setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha))
    return chosen


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Replace, in place, every LoRALinear of model by a plain nn.Linear that computes the same.

    The new layer's weight is W + scale * B @ A, (out, in); its bias is the base's. Afterwards the
    model has the parameter names it had before add_lora. Returns the model.
    """
    wrapped = [name for name, module in model.named_modules() if isinstance(module, LoRALinear)]
    for name in wrapped:
        lora = model.get_submodule(name)
        lora.base.weight += lora.scale * (lora.lora_B @ lora.lora_A)  # (out, r) @ (r, in) -> (out, in)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, lora.base)  # the base layer, merged, in the adapter's place
    return model


class SpeakerClassifier(nn.Module):
    """A language model's pooled features, then a linear head: ids (B, T), lengths (B,) -> logits (B, K).

    pooling: "last", the hidden state at each row's last real position (lengths[b] - 1), or
    "mean", the mean over its real positions. The ids after lengths[b] are padding and never count.
    """

    def __init__(self, lm: TransformerLM, n_classes: int, pooling: str = "mean"):
        super().__init__()
        self.lm = lm
        self.lm.lm_head = nn.Identity()  # lm(ids) now returns the final hidden states (B, T, C), not logits
        self.pooling = pooling
        self.head = nn.Linear(lm.config.emb_dim, n_classes)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        hidden = self.lm(ids)  # (B, T, C)
        B, T, C = hidden.shape
        if self.pooling == "last":
            rows = torch.arange(B, device=ids.device)  # (B,)
            features = hidden[rows, lengths - 1]  # one position per row: (B, C)
        else:
            real = torch.arange(T, device=ids.device) < lengths[:, None]  # (T,) against (B, 1) -> (B, T)
            features = (hidden * real[..., None]).sum(dim=1) / lengths[:, None]  # (B, C) / (B, 1)
        return self.head(features)  # (B, C) -> (B, K)
