"""Checks for lesson 07 (training): one training step, ``train_step(model, optimizer, x, y, grad_clip)``.

The probe trains a tiny language model with known float64 weights for a few steps with the
student's function, under SGD and under AdamW, with and without gradient clipping, and records
what each step returned, the parameters after it and whether the model was in training mode.
The judge replays the same steps with the reference and with each classic mistake.

Shape legend: B batch, T sequence length, V vocabulary size, C embedding size. No two are equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.checks.core import Check, CheckFailed, close, describe, first_mismatch

TOL = 1e-9  # float64 all the way: a correct step matches the reference to rounding


class TinyLM(nn.Module):
    """A small stand-in language model: ids (B, T) -> logits (B, T, V).

    Each position sees the mean of the embeddings up to it (so positions interact), then a
    linear layer with a bias, tanh and an output layer. It records, at every forward pass,
    whether it was in training mode.
    """

    def __init__(self, n_vocab: int, emb_dim: int):
        super().__init__()
        self.embed = nn.Embedding(n_vocab, emb_dim)
        self.mix = nn.Linear(emb_dim, emb_dim)
        self.head = nn.Linear(emb_dim, n_vocab, bias=False)
        self.modes: list[bool] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
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

    @property
    def label(self) -> str:
        opt = {"sgd": "SGD", "sgd-momentum": "SGD with momentum", "adamw": "AdamW"}[self.optimizer]
        clip = f", grad_clip={self.grad_clip}" if self.grad_clip is not None else ", grad_clip=None"
        return f"{self.steps} steps of {opt} on B={self.B}, T={self.T}, V={self.V}{clip}"


CASES = [
    Case(0, B=3, T=5, V=7, C=4, optimizer="sgd", grad_clip=None),
    Case(1, B=2, T=6, V=9, C=3, optimizer="sgd", grad_clip=0.3),
    Case(2, B=4, T=2, V=6, C=5, optimizer="adamw", grad_clip=None, start_in_eval=True),
]
HIDDEN_CASES = [
    Case(3, B=4, T=3, V=5, C=6, optimizer="sgd-momentum", grad_clip=0.2, start_in_eval=True),
    Case(4, B=1, T=7, V=8, C=2, optimizer="adamw", grad_clip=None, steps=4),
]


def build(case: Case) -> tuple[TinyLM, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The model with known weights, its optimizer and the batches (x, y) of every step."""
    g = torch.Generator().manual_seed(1000 + case.seed)
    model = TinyLM(case.V, case.C).double()
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            param.copy_(1.5 * torch.randn(param.shape, generator=g, dtype=torch.float64))
    if case.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    elif case.optimizer == "sgd-momentum":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    batches = []
    for _ in range(case.steps):
        seq = torch.randint(case.V, (case.B, case.T + 1), generator=g)  # (B, T+1)
        batches.append((seq[:, :-1].clone(), seq[:, 1:].clone()))  # x, y: (B, T) each
    if case.start_in_eval:
        model.eval()
    return model, optimizer, batches


def _returned(value) -> dict:
    """What a step returned, as data (never the tensor itself: it may hold a graph)."""
    if isinstance(value, float):
        return {"kind": "float", "value": value}
    if isinstance(value, torch.Tensor):
        info = {
            "kind": "tensor",
            "shape": list(value.shape),
            "requires_grad": bool(value.requires_grad),
            "has_graph": value.grad_fn is not None,
            "dtype": str(value.dtype),
        }
        if value.numel() == 1:
            info["value"] = float(torch.Tensor.detach(value).reshape(-1)[0])
        return info
    return {"kind": type(value).__name__, "text": repr(value)[:200]}


def _probe(cases):
    def probe(train_step) -> dict:
        if not callable(train_step):
            raise CheckFailed(f"expected the function train_step, got {describe(train_step)}")
        runs = []
        for case in cases:
            model, optimizer, batches = build(case)
            steps = []
            for x, y in batches:
                model.modes.clear()
                try:
                    out = train_step(model, optimizer, x, y, grad_clip=case.grad_clip)
                except Exception as exc:  # noqa: BLE001 - the judge explains the error
                    steps.append({"error": f"{type(exc).__name__}: {exc}"[:1500]})
                    break
                steps.append({
                    "returned": _returned(out),
                    "modes": list(model.modes),
                    "params": {name: p.detach().clone() for name, p in model.named_parameters()},
                })
            runs.append({"steps": steps})
        return {"runs": runs}

    return probe


# ---------------------------------------------------------------------------------------------
# What each classic mistake computes


def _loss_variants(logits: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The loss under each classic mistake in the loss line (same logits and batch)."""
    V = logits.shape[-1]
    flat, targets = logits.reshape(-1, V), y.reshape(-1)  # (B*T, V), (B*T,)
    return {
        "you summed the per-token losses instead of averaging them (reduction='sum'): the loss, and so "
        "the step size, grows with B*T": F.cross_entropy(flat, targets, reduction="sum"),
        "you shifted the targets a second time: y is already the next token of x (y[b, t] follows x[b, t]); "
        "compare logits with y as it is": F.cross_entropy(logits[:, :-1].reshape(-1, V), y[:, 1:].reshape(-1)),
        "you compared the logits with the inputs x instead of the targets y": F.cross_entropy(flat, x.reshape(-1)),
        "you applied a softmax before cross_entropy, which applies its own (log-)softmax: it takes raw logits":
            F.cross_entropy(torch.softmax(flat, dim=-1), targets),
        "you used nll_loss on raw logits: it expects log-probabilities (use F.cross_entropy, or log_softmax first)":
            F.nll_loss(flat, targets),
    }


# the ways a step can be put together: label -> (zero_grad, clip)
# zero_grad: "start" (before backward) | "never"
# clip: "norm" | "none" | "value" | "per_param"
PROCEDURES = {
    "reference": ("start", "norm"),
    "you never call optimizer.zero_grad(): PyTorch adds each backward() to the gradients already in "
    "p.grad, so from the second step on the update uses the sum of all gradients so far (gradients "
    "accumulate); clear them once per step, before backward()": ("never", "norm"),
    "the gradients are not clipped before the update: call torch.nn.utils.clip_grad_norm_(model.parameters(), "
    "grad_clip) between loss.backward() and optimizer.step() (clipping after step() changes nothing)":
        ("start", "none"),
    "you clipped each gradient entry (clip_grad_value_) instead of the global norm of all gradients "
    "together (clip_grad_norm_)": ("start", "value"),
    "you clipped each parameter's gradient norm on its own; clip_grad_norm_ must see all parameters "
    "at once, so that the whole gradient keeps its direction": ("start", "per_param"),
}


def _replay(case: Case, procedure: tuple[str, str]) -> list[dict]:
    """Run the whole case with a step put together as ``procedure``: losses and parameters."""
    zero, clip = procedure
    model, optimizer, batches = build(case)
    out = []
    for x, y in batches:
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
        out.append({"loss": loss.item(), "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


def _expected(case: Case) -> list[dict]:
    """The reference ``train_step`` on the case: losses and parameters after every step."""
    from helpers.reference.training_step import train_step

    model, optimizer, batches = build(case)
    out = []
    for x, y in batches:
        loss = train_step(model, optimizer, x, y, grad_clip=case.grad_clip)
        out.append({"loss": loss, "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


def _params_before(case: Case, expected: list[dict], k: int) -> TinyLM:
    model, _, _ = build(case)
    if k > 0:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(expected[k - 1]["params"][name])
    return model


def _same_params(want: dict, got: dict) -> bool:
    """Whether ``got`` holds every parameter of ``want``, equal to rounding."""
    for name, tensor in want.items():
        other = got.get(name)
        if not isinstance(other, torch.Tensor) or other.shape != tensor.shape or not close(tensor, other, TOL, TOL):
            return False
    return True


def _explain_error(error: str, what: str, k: int) -> str:
    at = f"{what}: step {k + 1} raised {error}"
    if "Expected target size" in error or "Expected input batch_size" in error or "spatial targets" in error:
        return (
            f"{at}. cross_entropy wants logits of shape (N, V) and targets of shape (N,): flatten the "
            "batch and time dimensions, logits.reshape(B * T, V) and y.reshape(B * T) (the loss was not reshaped)."
        )
    if "does not require grad" in error or "does not have a grad_fn" in error:
        return (
            f"{at}. backward() found no graph: the forward pass ran under torch.no_grad(), or the loss "
            "was detached or turned into a number before backward(). Keep the loss a tensor until "
            "after backward(); call .item() only for the value you return."
        )
    if "'float' object has no attribute 'backward'" in error:
        return (
            f"{at}. The loss became a Python float (.item()) before loss.backward(): a float has no "
            "graph to differentiate. Call backward() on the tensor, and .item() only for the value you return."
        )
    if "modified by an inplace operation" in error:
        return (
            f"{at}. optimizer.step() changed the parameters in place before loss.backward() used them: "
            "call loss.backward() first, then optimizer.step()."
        )
    if "backward through the graph a second time" in error:
        return f"{at}. Call loss.backward() once per step."
    if "NoneType" in error and ("clip" in error or "max_norm" in error or "float" in error):
        return f"{at}. When grad_clip is None, do not clip at all (if grad_clip is not None: ...)."
    return f"{at}."


def _judge(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        for case, run in zip(cases, runs, strict=True):
            what = f"train_step, {case.label}"
            steps = run.get("steps") if isinstance(run, dict) else None
            if not isinstance(steps, list) or not steps:
                raise CheckFailed("the check's data is incomplete")
            expected = _expected(case)
            for k, got in enumerate(steps):
                if not isinstance(got, dict):
                    raise CheckFailed("the check's data is incomplete")
                if "error" in got:
                    raise CheckFailed(_explain_error(str(got["error"]), what, k))
                _judge_returned(case, what, k, got.get("returned"), expected)
                modes = got.get("modes")
                if not isinstance(modes, list) or not modes:
                    raise CheckFailed(f"{what}: step {k + 1} never called the model (model(x)).")
                if not all(m is True for m in modes):
                    if case.start_in_eval:
                        raise CheckFailed(
                            f"{what}: the model came in evaluation mode and step {k + 1} ran its forward "
                            "pass in that mode. A training step must put the model in training mode "
                            "(model.train()) before the forward pass: dropout and similar layers behave "
                            "differently there."
                        )
                    raise CheckFailed(
                        f"{what}: step {k + 1} ran the forward pass in evaluation mode: do not call "
                        "model.eval() in a training step; call model.train() (evaluation mode switches "
                        "dropout off and is for measuring, not for learning)."
                    )
                params = got.get("params")
                if not isinstance(params, dict):
                    raise CheckFailed("the check's data is incomplete")
                if _same_params(expected[k]["params"], params):
                    continue
                before = expected[k - 1]["params"] if k else {n: p.detach() for n, p in build(case)[0].named_parameters()}
                if _same_params(before, params):
                    raise CheckFailed(
                        f"{what}: step {k + 1} did not change the parameters. Call optimizer.step() after "
                        "loss.backward(), and do not clear the gradients (zero_grad) between backward() "
                        "and step(): the optimizer then sees no gradient."
                    )
                for label, procedure in PROCEDURES.items():
                    if label == "reference" or (procedure[1] != "norm" and case.grad_clip is None):
                        continue
                    replay = _replay(case, procedure)
                    if _same_params(replay[k]["params"], params):
                        raise CheckFailed(f"{what}, step {k + 1}: {label}.")
                name = next(n for n in expected[k]["params"] if not _same_params(
                    {n: expected[k]["params"][n]}, params))
                got_p = params.get(name)
                evidence = (
                    first_mismatch(expected[k]["params"][name], got_p, TOL, TOL)
                    if isinstance(got_p, torch.Tensor) and got_p.shape == expected[k]["params"][name].shape
                    else f"got {describe(got_p)}"
                )
                raise CheckFailed(
                    f"{what}: after step {k + 1} the parameter {name} differs from the reference's "
                    f"({evidence}). The loss was right, so look at the order: zero_grad, backward, "
                    "clip, step, each once."
                )
            if len(steps) != len(expected):
                raise CheckFailed("the check's data is incomplete")
        return (
            "train_step: " + "; ".join(c.label for c in cases)
            + ": every returned loss and every parameter after every step match the reference (float64)."
        )

    return judge


def _judge_returned(case: Case, what: str, k: int, returned, expected: list[dict]) -> None:
    if not isinstance(returned, dict):
        raise CheckFailed("the check's data is incomplete")
    kind = returned.get("kind")
    if kind == "tensor":
        if returned.get("has_graph"):
            raise CheckFailed(
                f"{what}: step {k + 1} returned the loss tensor itself, which holds on to the whole graph "
                "of the forward pass (every activation of the batch): kept in a list of losses, the "
                "graphs pile up and memory grows every step. Return loss.item(), a Python float."
            )
        raise CheckFailed(
            f"{what}: step {k + 1} returned a tensor ({returned.get('dtype')}, shape "
            f"{tuple(returned.get('shape') or ())}); return a Python float: loss.item()."
        )
    if kind != "float":
        raise CheckFailed(
            f"{what}: step {k + 1} returned {kind} {returned.get('text', '')}; return the loss as a "
            "Python float: loss.item()."
        )
    value = returned.get("value")
    want = expected[k]["loss"]
    if isinstance(value, float) and abs(value - want) <= TOL * max(1.0, abs(want)):
        return
    model = _params_before(case, expected, k)
    model.train()
    _, _, batches = build(case)
    x, y = batches[k]
    with torch.no_grad():
        logits = model(x)  # (B, T, V)
        variants = _loss_variants(logits, x, y)
        after = _params_before(case, expected, k + 1)(x)  # (B, T, V), the logits after the update
        variants["you returned the loss after the update (a second forward pass after step()); "
                 "return the loss of the forward pass that made the gradients"] = F.cross_entropy(
            after.reshape(-1, case.V), y.reshape(-1))
    if isinstance(value, float):
        for label, variant in variants.items():
            if abs(variant.item() - value) <= 1e-7 * max(1.0, abs(value)):
                raise CheckFailed(f"{what}, step {k + 1}: {label}. The loss should be {want:.6f}, got {value:.6f}.")
    raise CheckFailed(
        f"{what}: step {k + 1} returned the loss {value!r}; the mean cross-entropy of model(x) against y "
        f"is {want:.6f}."
    )


check_train_step = Check("check_train_step", _probe(CASES), _judge(CASES))
check_train_step_hidden = Check("check_train_step_hidden", _probe(HIDDEN_CASES), _judge(HIDDEN_CASES), hidden=True)
