"""Checks for lesson 07 (training): one training step, ``train_step(model, optimizer, x, y, grad_clip)``.

The probe trains a tiny language model with known float64 weights for a few steps with the
student's function, under SGD and under AdamW, with and without gradient clipping, and records
what each step returned, the parameters after it and whether the model was in training mode.
The judge replays the same steps with the reference and with each classic mistake (the model,
the optimizers and the replays are in ``helpers.checks.training_replay``).

Shape legend: B batch, T sequence length, V vocabulary size, C embedding size. No two are equal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers.checks.core import (
    CheckFailed,
    close,
    expect_callable,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.cross_entropy import memory_order_variants
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.invariants import rng_watch
from helpers.checks.training_replay import (
    LR,
    MODEL_ONLY,
    TOL,
    Case,
    _params_before,
    _replay,
    _same_params,
    build,
)

CASES = [
    Case(0, B=3, T=5, V=7, C=4, optimizer="sgd", grad_clip=None, stale_grads=True),
    Case(1, B=2, T=6, V=9, C=3, optimizer="sgd", grad_clip=0.3),
    Case(2, B=4, T=2, V=6, C=5, optimizer="adamw", grad_clip=None, start_in_eval=True),
]
HIDDEN_CASES = [
    Case(3, B=4, T=3, V=5, C=6, optimizer="sgd-momentum", grad_clip=0.2, start_in_eval=True),
    Case(4, B=1, T=7, V=8, C=2, optimizer="adamw", grad_clip=None, steps=4),
]


def _sizes(case: Case) -> dict[str, int]:
    return {"B": case.B, "T": case.T, "V": case.V, "C": case.C}


def _returned(value) -> dict:
    """What a step returned, as data (never the tensor itself: it may hold a graph)."""
    if isinstance(value, float):
        return {"kind": "float", "value": value}
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "shape": list(value.shape), "has_graph": value.grad_fn is not None,
                "dtype": str(value.dtype)}
    return {"kind": type(value).__name__, "text": repr(value)[:200]}


def _probe(cases):
    def probe(train_step) -> dict:
        expect_callable(train_step, "train_step")
        runs = []
        for case in cases:
            model, optimizer, batches = build(case)
            steps = []
            for x, y in batches:
                model.modes.clear()
                try:
                    # the model here has no dropout: a step draws nothing from PyTorch's global generator
                    with case_sizes(_sizes(case)), rng_watch() as rng:
                        out = train_step(model, optimizer, x, y, grad_clip=case.grad_clip)
                except Exception as exc:  # noqa: BLE001 - the judge explains the error
                    steps.append(caught(exc, _sizes(case)))
                    break
                steps.append({
                    "returned": _returned(out),
                    "modes": list(model.modes),
                    "params": {name: p.detach().clone() for name, p in model.named_parameters()},
                    "rng": rng,
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
        "you flattened the targets in another order than the logits (y transposed, or the logits transposed "
        "before the reshape): row b * T + t of the logits must meet y[b, t]":
            F.cross_entropy(flat, y.transpose(0, 1).reshape(-1)),
        "every target was scored under the first position's distribution (logits[:, 0] for every t). "
        "gather(-1, index) reads, at each place of index, along the last axis: with y.unsqueeze(-1), of shape "
        "(B, T, 1), each position's own target; an index of shape (B, 1, T) reads position 0 only":
            -torch.log_softmax(logits[:, :1], dim=-1).expand_as(logits).gather(-1, y.unsqueeze(-1)).mean(),
        **memory_order_variants(logits, y),
        **{f"you used label smoothing ({eps}): this loss is the plain cross-entropy, F.cross_entropy(logits, y)":
           F.cross_entropy(flat, targets, label_smoothing=eps) for eps in (0.1, 0.05, 0.2, 0.01)},
    }


# the ways a step can be put together: label -> (zero_grad, clip)
# zero_grad: "start" (before backward) | "end" (after step) | "never"
# clip: "norm" | "none" | "value" | "per_param"
PROCEDURES = {
    "reference": ("start", "norm"),
    "you never call optimizer.zero_grad(): PyTorch adds each backward() to the gradients already in "
    "p.grad (those the model came with, then every earlier step's), so each update uses the sum of all "
    "gradients so far (gradients accumulate); clear them once per step, before backward()": ("never", "norm"),
    "the gradients are not clipped before the update: call torch.nn.utils.clip_grad_norm_(model.parameters(), "
    "grad_clip) between loss.backward() and optimizer.step() (clipping after step() changes nothing)":
        ("start", "none"),
    "you clipped each gradient entry (clip_grad_value_) instead of the global norm of all gradients "
    "together (clip_grad_norm_)": ("start", "value"),
    "you clipped each parameter's gradient norm on its own; clip_grad_norm_ must see all parameters "
    "at once, so that the whole gradient keeps its direction": ("start", "per_param"),
    "you clear the gradients after optimizer.step() instead of before backward(): this step was handed a model "
    "whose parameters already held gradients (a backward() of the caller's), and your update added its own to "
    "them. A step cannot know what the caller left in p.grad: clear it at the start, before backward()":
        ("end", "norm"),
}

ERROR_HINTS = [
    (("Expected target size", "Expected input batch_size", "spatial targets"), "cross_entropy wants logits of "
     "shape (N, V) and targets of shape (N,): flatten the batch and time dimensions, logits.reshape(B * T, V) "
     "and y.reshape(B * T) (the loss was not reshaped)."),
    (("does not require grad", "does not have a grad_fn"), "backward() found no graph: the forward pass ran "
     "under torch.no_grad(), or the loss was detached or turned into a number before backward(). Keep the "
     "loss a tensor until after backward(); call .item() only for the value you return."),
    ("'float' object has no attribute 'backward'", "The loss became a Python float (.item()) before "
     "loss.backward(): a float has no graph to differentiate."),
    ("modified by an inplace operation", "optimizer.step() changed the parameters in place before "
     "loss.backward() used them: call loss.backward() first, then optimizer.step()."),
    ("backward through the graph a second time", "Call loss.backward() once per step."),
    ("NoneType", "When grad_clip is None, do not clip at all (if grad_clip is not None: ...)."),
]


def _flat(tensors: dict, names) -> torch.Tensor:
    return torch.cat([tensors[n].reshape(-1).double() for n in names])


def _update_pattern(case: Case, what: str, k: int, expected: list[dict], params: dict) -> str:
    """The loss was right but the parameters after step k are not: how the update departs."""
    model = _params_before(case, expected, k)
    x, y = build(case)[2][k]
    F.cross_entropy(model(x).reshape(-1, case.V), y.reshape(-1)).backward()  # the raw gradient
    names = [n for n, _ in model.named_parameters()]
    before = {n: p.detach() for n, p in model.named_parameters()}
    where = f"{what}: after step {k + 1}, with the right loss,"
    if all(isinstance(params.get(n), torch.Tensor) and params[n].shape == before[n].shape for n in names):
        grad = _flat({n: p.grad for n, p in model.named_parameters()}, names)
        mine = _flat(params, names) - _flat(before, names)  # the student's update
        right = _flat(expected[k]["params"], names) - _flat(before, names)
        if case.optimizer != "sgd" and close(-LR[case.optimizer] * grad, mine, TOL, TOL):
            return (f"{where} every parameter moved by -lr × its gradient, a plain SGD step, not the "
                    f"{case.optimizer} optimizer's update (which keeps its own state): call optimizer.step().")
        c = float(mine @ right / (right @ right))
        if abs(c - 1) > 1e-6 and close(c * right, mine, TOL, TOL):
            said = f"{where} every parameter moved in the right direction but {c:.4g} × as far as the reference's update"
            if case.optimizer == "sgd" and case.grad_clip is not None:
                norm = float(grad.norm())
                scale = c * min(1.0, case.grad_clip / norm)  # what the student's clipping multiplied the gradient by
                for label, value in (("its L2 norm to 1.0 (a number written out instead of grad_clip)", scale * norm - 1),
                                     ("its L1 norm (norm_type=1) instead of the L2 norm", scale * float(grad.abs().sum()) - case.grad_clip),
                                     ("its largest entry (norm_type=inf) instead of the L2 norm", scale * float(grad.abs().max()) - case.grad_clip),
                                     ("the sum of the parameters' own gradient norms instead of the norm of all the "
                                      "gradients together (the square root of the sum of their squares)",
                                      scale * sum(float(p.grad.norm()) for p in model.parameters() if p.grad is not None)
                                      - case.grad_clip)):
                    if abs(value) < 1e-6:
                        return f"{said}: the gradient was clipped by {label}; clip_grad_norm_(model.parameters(), grad_clip)."
                return (f"{said}: after clipping, the gradient's norm is {scale * norm:.4g}; clip_grad_norm_ brings it to "
                        f"min(norm, grad_clip) = {min(norm, case.grad_clip):.4g}.")
            if case.optimizer == "sgd" and abs(c - 2) < 1e-6:
                return (f"{said}: twice the step, as when optimizer.step() runs twice, or backward() twice so that the "
                        "gradients add up. Each once per step.")
            return f"{said}."
    name = next(n for n in names if not _same_params({n: expected[k]["params"][n]}, params))
    return explain_mismatch(expected[k]["params"][name], params.get(name), atol=TOL, rtol=TOL,
                            what=f"{where} the parameter {name}", sizes=_sizes(case),
                            axes=("V", "C") if name.startswith("embed") else None)


def _judge(cases):
    def judge(data: dict) -> str:
        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            what = f"train_step, {case.label}"
            steps = need(run.get("steps"), list)
            expected = _replay(case)
            for k, got in enumerate(steps):
                need(got, dict)
                raise_caught(f"{what}: step {k + 1}", got, ERROR_HINTS)
                _judge_returned(case, what, k, got, expected)
                modes = got.get("modes")
                if not isinstance(modes, list) or not modes:
                    raise CheckFailed(f"{what}: step {k + 1} never called the model (model(x)).")
                if MODEL_ONLY in modes:
                    raise CheckFailed(
                        f"{what}: step {k + 1} ran its forward pass with the model's own training flag on and its "
                        "layers' off (they stayed in the evaluation mode the model came in): the flag was set on the "
                        "model alone. model.training = True does that; model.train() sets it on every layer, and "
                        "each layer (dropout, say) reads its own.")
                if not all(m is True for m in modes):
                    raise CheckFailed(f"{what}: " + (
                        f"the model came in evaluation mode and step {k + 1} ran its forward pass in that mode. "
                        "A training step must put the model in training mode (model.train()) before the forward "
                        "pass: dropout and similar layers behave differently there." if case.start_in_eval else
                        f"step {k + 1} ran the forward pass in evaluation mode: do not call model.eval() in a "
                        "training step; it runs in training mode, model.train() (evaluation mode switches dropout off "
                        "and is for measuring, not for learning)."))
                params = need(got.get("params"), dict)
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
                    replay = _replay(case, procedure)  # named only when it gives every step the student's made
                    if all(_same_params(r["params"], s.get("params") or {}) for r, s in zip(replay, steps, strict=False)
                           if isinstance(s, dict) and "params" in s):
                        raise CheckFailed(f"{what}, step {k + 1}: {label}.")
                raise CheckFailed(_update_pattern(case, what, k, expected, params))
            need(steps, list, len(expected))
            _judge_global_generator(what, steps)
        return (
            "train_step: " + "; ".join(c.label for c in cases)
            + ": every returned loss and every parameter after every step match the reference (float64)."
        )

    return judge


def _judge_global_generator(what: str, steps: list) -> None:
    """The stand-in model has no dropout: a step that still moves PyTorch's global generator reseeds it
    (:func:`rng_watch` reads the seed it set) or draws from it."""
    moved = [s["rng"] for s in steps if isinstance(s, dict) and isinstance(s.get("rng"), dict) and s["rng"].get("moved")]
    if not moved:
        return
    seeded = moved[0].get("seeded")
    if isinstance(seeded, int) and not isinstance(seeded, bool):
        raise CheckFailed(f"{what}: the steps are right, but each one reseeds PyTorch's global generator: after a step "
                          f"its seed is {seeded}, as a torch.manual_seed({seeded}) in the step leaves it. With dropout, "
                          "every step would then draw the same masks, and the caller's random numbers start over after "
                          "each step. Seeding is the caller's, once, before training.")
    raise CheckFailed(f"{what}: the steps are right, but they draw from PyTorch's global generator (its state moved) "
                      "although this model has no dropout and a step has nothing to draw: is a random number taken "
                      "in the step?")


def _judge_returned(case: Case, what: str, k: int, got: dict, expected: list[dict]) -> None:
    returned = need(got.get("returned"), dict)
    kind = returned.get("kind")
    if kind == "tensor":
        if returned.get("has_graph"):
            raise CheckFailed(f"{what}: step {k + 1} returned the loss tensor itself, which holds on to the whole "
                              "graph of the forward pass (every activation of the batch): kept in a list of losses, "
                              "the graphs pile up and memory grows every step. Return loss.item(), a Python float.")
        raise CheckFailed(f"{what}: step {k + 1} returned a tensor ({returned.get('dtype')}, shape "
                          f"{tuple(returned.get('shape') or ())}); return a Python float: loss.item().")
    if kind != "float":
        raise CheckFailed(f"{what}: step {k + 1} returned {kind} {returned.get('text', '')}; return the loss "
                          "as a Python float: loss.item().")
    value = returned.get("value")
    want = expected[k]["loss"]
    if isinstance(value, float) and abs(value - want) <= TOL * max(1.0, abs(want)):
        return
    model = _params_before(case, expected, k)
    x, y = build(case)[2][k]
    with torch.no_grad():
        logits = model(x)  # (B, T, V)
        variants = _loss_variants(logits, x, y)
        after = _params_before(case, expected, k + 1)(x)  # (B, T, V), the logits after the update
        variants["you returned the loss after the update (a second forward pass after step()); "
                 "return the loss of the forward pass that made the gradients"] = F.cross_entropy(
            after.reshape(-1, case.V), y.reshape(-1))
    need(value, float)
    for label, variant in variants.items():
        if abs(variant.item() - value) <= 1e-7 * max(1.0, abs(value)):
            raise CheckFailed(f"{what}, step {k + 1}: {label}. The loss should be {want:.6f}, got {value:.6f}.")
    ratio = value / want
    sizes = {"B": case.B, "T": case.T, "B * T": case.B * case.T, "V": case.V}
    factor = next((f"1/{n}" for n, v in sizes.items() if abs(ratio * v - 1) < 1e-9), None) or next(
        (n for n, v in sizes.items() if abs(ratio - v) < 1e-9), None)
    said = f"{what}: step {k + 1} returned the loss {value:.6f}; the mean cross-entropy of model(x) against y is {want:.6f}"
    if factor:
        summed = {"T": "the per-position losses summed and divided by B only (a loss per sequence)",
                  "B": "the per-position losses summed and divided by T only",
                  "B * T": "the per-position losses summed (reduction='sum')"}.get(factor)
        reading = f"{summed} is {factor} × the mean; or is there " if summed else ""
        raise CheckFailed(f"{said}, and yours is {factor} × it: {reading}a division or a multiplication by "
                          f"{factor.removeprefix('1/')} too many{'?' if summed else ''} (cross_entropy already averages "
                          "over the B * T positions).")
    params = got.get("params")
    if isinstance(params, dict) and _same_params(expected[k]["params"], params):
        raise CheckFailed(f"{said}. The update itself is right, so the loss you backpropagate is: return its "
                          "value, loss.item(), not another number.")
    raise CheckFailed(f"{said} ({ratio:.6g} × it).")


check_train_step, check_train_step_hidden = visible_and_hidden("check_train_step", _probe, _judge, CASES, HIDDEN_CASES)
