"""What lesson 07's train_step check (``helpers.checks.training_step``) trains and compares with:
a tiny language model with known float64 weights, the optimizer and the batches of each case, and
every step of a case replayed, with the reference's ``train_step`` or with a step put together
the way a classic mistake puts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.checks.core import close
from helpers.checks.invariants import stale_gradients
from helpers.reference import training_step as ref

TOL = 1e-9  # float64 all the way: a correct step matches the reference to rounding


#: a forward pass's mode when the model's own flag was on and a layer's off
MODEL_ONLY = "the model's flag alone"


class TinyLM(nn.Module):
    """A small stand-in language model: ids (B, T) -> logits (B, T, V). Each position sees the mean
    of the embeddings up to it, then Linear, tanh, Linear; every forward pass records the mode."""

    def __init__(self, n_vocab: int, emb_dim: int):
        super().__init__()
        self.embed = nn.Embedding(n_vocab, emb_dim)
        self.mix = nn.Linear(emb_dim, emb_dim)
        self.head = nn.Linear(emb_dim, n_vocab, bias=False)
        self.modes: list[bool | str] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        layers = {m.training for m in self.children()}
        # the model's own flag, or MODEL_ONLY where it is on and a layer's is off (set on the model alone)
        self.modes.append(MODEL_ONLY if self.training and False in layers else self.training)
        x = self.embed(ids)  # (B, T, C)
        counts = torch.arange(1, x.shape[-2] + 1, dtype=x.dtype).unsqueeze(-1)  # (T, 1)
        prefix_mean = x.cumsum(dim=-2) / counts  # (B, T, C)
        return self.head(torch.tanh(self.mix(prefix_mean)))  # (B, T, V)


@dataclass(frozen=True)
class Case:
    seed: int
    B: int
    T: int
    V: int
    C: int
    optimizer: str  # "sgd", "sgd-momentum" or "adamw"
    grad_clip: float | None
    steps: int = 3
    start_in_eval: bool = False  # hand the model over in evaluation mode
    stale_grads: bool = False  # hand it over with gradients already in p.grad (a caller's backward())

    @property
    def label(self) -> str:
        opt = {"sgd": "SGD", "sgd-momentum": "SGD with momentum", "adamw": "AdamW"}[self.optimizer]
        clip = f", grad_clip={self.grad_clip}" if self.grad_clip is not None else ", grad_clip=None"
        return f"{self.steps} steps of {opt} on B={self.B}, T={self.T}, V={self.V}{clip}"


LR = {"sgd": 0.3, "sgd-momentum": 0.2, "adamw": 0.05}  # the optimizers' learning rates


def build(case: Case) -> tuple[TinyLM, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model with known weights, its optimizer and the batches (x, y) of every step."""
    g = torch.Generator().manual_seed(1000 + case.seed)
    model = TinyLM(case.V, case.C).double()
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            param.copy_(1.5 * torch.randn(param.shape, generator=g, dtype=torch.float64))
    lr = LR[case.optimizer]
    optimizer = (torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1) if case.optimizer == "adamw" else
                 torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if case.optimizer == "sgd-momentum" else 0))
    batches = []
    for _ in range(case.steps):
        seq = torch.randint(case.V, (case.B, case.T + 1), generator=g)  # (B, T+1)
        batches.append((seq[:, :-1].clone(), seq[:, 1:].clone()))  # x, y: (B, T) each
    if case.start_in_eval:
        model.eval()
    if case.stale_grads:  # drawn apart from g: the batches stay those of the case
        stale_gradients(model, torch.Generator().manual_seed(3000 + case.seed))
    return model, optimizer, batches


def _replay(case: Case, procedure: tuple[str, str] | None = None) -> list[dict]:
    """The losses and parameters after every step of the case, with the reference's ``train_step``
    (``procedure`` None) or with a step put together as ``procedure``."""
    model, optimizer, batches = build(case)
    out = []
    for x, y in batches:
        if procedure is None:
            loss = ref.train_step(model, optimizer, x, y, grad_clip=case.grad_clip)
            out.append({"loss": loss, "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
            continue
        zero, clip = procedure  # zero: "start" (before backward), "end" (after step) or "never"
        model.train()
        if zero == "start":
            optimizer.zero_grad(set_to_none=True)
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, case.V), y.reshape(-1))
        loss.backward()
        if case.grad_clip is not None:
            if clip == "norm":
                torch.nn.utils.clip_grad_norm_(model.parameters(), case.grad_clip)
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(model.parameters(), case.grad_clip)
            elif clip == "per_param":
                for p in model.parameters():
                    torch.nn.utils.clip_grad_norm_([p], case.grad_clip)
        optimizer.step()
        if zero == "end":
            optimizer.zero_grad(set_to_none=True)
        out.append({"loss": loss.item(), "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


def _params_before(case: Case, expected: list[dict], k: int) -> TinyLM:
    """The model in training mode, with the reference's parameters before step k."""
    model = build(case)[0].train()
    model.zero_grad(set_to_none=True)  # the raw gradient of step k alone
    with torch.no_grad():
        for name, p in model.named_parameters() if k > 0 else ():
            p.copy_(expected[k - 1]["params"][name])
    return model


def _same_params(want: dict, got: dict) -> bool:
    """Whether ``got`` holds every parameter of ``want``, equal to rounding."""
    return all(isinstance(got.get(n), torch.Tensor) and got[n].shape == t.shape and close(t, got[n], TOL, TOL)
               for n, t in want.items())
