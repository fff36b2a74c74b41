"""Checks for lesson 12 (fine-tuning), exercise 1: ``LoRALinear``, a frozen linear map plus a
trainable low-rank update.

Shape legend: N the rows of x (any leading shape), n_in the base's input features, n_out its
output features, r the rank. The probe wraps an ``nn.Linear`` of known weights, reads what the new layer
holds (its parameters, which of them train, A's and B's first values), runs it as it starts, then
with known A and B, and takes the gradients. A cause is named only when its output, computed here,
is the student's (``identify``), or the parameters themselves show it.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_module_class,
    first_mismatch,
    identify,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import attempt, caught, raise_caught
from helpers.checks.verdict import tolerance

__all__ = ["check_lora_linear"]

# (seed, n_in, n_out, r, alpha, bias, leading shape of x, dtype): alpha / r, r / alpha, alpha and 1 all differ
LORA_CASES = [(150, 6, 5, 2, 3.0, True, (2, 4), torch.float64), (151, 7, 9, 3, 12.0, False, (5,), torch.float64)]
LORA_HIDDEN_CASES = [(152, 10, 4, 1, 2.5, True, (3, 2, 2), torch.float64),
                     (153, 8, 12, 4, 6.0, True, (6,), torch.float32)]


def _base(seed, n_in, n_out, bias) -> nn.Linear:
    g = torch.Generator().manual_seed(seed)
    base = nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        base.weight.copy_(torch.randn(n_out, n_in, generator=g) / math.sqrt(n_in))
        if bias:
            base.bias.copy_(0.5 * torch.randn(n_out, generator=g))
    return base


def _inputs(seed, n_in, n_out, r, lead):
    g = torch.Generator().manual_seed(seed + 50)
    x = torch.randn(*lead, n_in, generator=g, dtype=torch.float64)
    A = torch.randn(r, n_in, generator=g, dtype=torch.float64) / math.sqrt(n_in)
    B = torch.randn(n_out, r, generator=g, dtype=torch.float64)
    return x, A, B


def _what(n_in, n_out, r, alpha, bias) -> str:
    return f"LoRALinear(nn.Linear({n_in}, {n_out}, bias={bias}), r={r}, alpha={alpha:g})"


INPUT = "(input)"
_PRODUCTS = {"mm", "addmm", "bmm", "matmul", "einsum", "linear"}


class _Products(TorchDispatchMode):
    """The shapes of every matrix product computed while active."""

    def __init__(self):
        super().__init__()
        self.shapes: list[list[int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.split(".")[0] in _PRODUCTS and isinstance(out, torch.Tensor):
            self.shapes.append(list(out.shape))
        return out


def _grads(module, x) -> dict | str:
    """Gradients of a fixed weighting of module(x) for every parameter that requires one, and for x."""
    x = x.detach().clone().requires_grad_(True)
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad] + [(INPUT, x)]
    try:
        with torch.enable_grad():
            out = module(x)
            weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(out.dtype)
            found = torch.autograd.grad((out * weight).sum(), [p for _, p in named], allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - the error is evidence
        return f"{type(exc).__name__}: {exc}"[:500]
    return {n: None if g is None else g.detach() for (n, _), g in zip(named, found, strict=True)}


def _probe_lora(cases):
    def probe(lora_class) -> dict:
        expect_module_class(lora_class, "LoRALinear")
        found = []
        for seed, n_in, n_out, r, alpha, bias, lead, dtype in cases:
            base = _base(seed, n_in, n_out, bias).to(dtype)  # the layer as trained, in the case's dtype
            weight = base.weight.detach().clone()
            x, A, B = _inputs(seed, n_in, n_out, r, lead)
            with case_sizes({"n_in": n_in, "n_out": n_out, "r": r, **({"N": lead[-1]} if lead else {})}):
                torch.manual_seed(seed)
                try:
                    lora = lora_class(base, r, alpha)
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append({"built": False, **caught(exc)})
                    continue
                params = {n: {"shape": list(p.shape), "trains": bool(p.requires_grad), "dtype": str(p.dtype)[6:]}
                          for n, p in lora.named_parameters()}
                kept = getattr(lora, "base", None)
                run = {"built": True, "params": params, "base_kept": kept is base,
                       "base_same": isinstance(kept, nn.Linear) and kept.weight.shape == weight.shape
                       and torch.equal(kept.weight.detach(), weight),
                       "scale": getattr(lora, "scale", None) if isinstance(getattr(lora, "scale", None), (int, float)) else None,
                       # a module's requires_grad set as a plain attribute (its parameters untouched)
                       "flag_on_module": isinstance(kept, nn.Module) and "requires_grad" in vars(kept)}
                for name in ("lora_A", "lora_B"):
                    p = getattr(lora, name, None)
                    if isinstance(p, torch.Tensor):
                        run[f"{name}_start"] = p.detach().clone()
                start = attempt(lora, x.to(dtype))
                run["start"] = start.get("out") if "out" in start else start
                shapes_right = (params.get("lora_A", {}).get("shape") == [r, n_in] and params.get("lora_B", {}).get("shape") == [n_out, r])
                if shapes_right:
                    try:
                        with torch.no_grad():
                            lora.lora_A.copy_(A)
                            lora.lora_B.copy_(B)
                    except Exception as exc:  # noqa: BLE001
                        run.update(caught(exc))
                        found.append(run)
                        continue
                    xd = x.to(dtype)
                    before = xd.clone()
                    with _Products() as products:
                        run["trained"] = attempt(lora, xd)
                    run["products"] = products.shapes
                    run["x_changed"] = not torch.equal(before, xd)
                    run["grads"] = _grads(lora, before.clone())
                found.append(run)
        return {"runs": found}

    return probe


def lora_variants(x, W, b, A, B, r, alpha) -> dict[str, torch.Tensor]:
    """What LoRALinear returns with known A and B under each classic mistake (float64)."""
    base = x @ W.T + (b if b is not None else 0)
    update = x @ A.T @ B.T  # (..., n_out)
    out = {
        f"the update is scaled by r / alpha = {r / alpha:g}; the scale is alpha / r = {alpha / r:g}": base + update * (r / alpha),
        f"the update is scaled by alpha = {alpha:g} alone; the scale is alpha / r = {alpha / r:g}": base + update * alpha,
        f"the update is not scaled: it is multiplied by alpha / r = {alpha / r:g}": base + update,
        f"the update is scaled by alpha / sqrt(r) (rank-stabilised LoRA's scale); this exercise's is alpha / r = {alpha / r:g}":
            base + update * (alpha / math.sqrt(r)),
        "the base layer's output is missing: LoRALinear returns base(x) plus the scaled update": update * (alpha / r),
        "the update is subtracted from base(x); it is added": base - update * (alpha / r),
        "the scale multiplies base(x) as well; it belongs on the low-rank update alone": (base + update) * (alpha / r),
        f"the update is scaled twice ((alpha / r) ** 2 = {(alpha / r) ** 2:g})": base + update * (alpha / r) ** 2,
    }
    if b is not None:
        out["the bias is added twice (once by base(x), once more by you)"] = base + b + update * (alpha / r)
    return out


def _judge_start(case, run, what) -> None:
    seed, n_in, n_out, r, alpha, bias, lead, dtype = case
    params = need(run.get("params"), dict)
    want = {"base.weight": [n_out, n_in], **({"base.bias": [n_out]} if bias else {}), "lora_A": [r, n_in], "lora_B": [n_out, r]}
    got = {n: p.get("shape") if isinstance(p, dict) else None for n, p in params.items()}
    if set(got) != set(want):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        raise CheckFailed(f"{what} should hold exactly the parameters {', '.join(sorted(want))} (the layer it is given "
                          f"as self.base, A as self.lora_A, B as self.lora_B); missing: {', '.join(missing) or 'none'}, "
                          f"extra: {', '.join(extra) or 'none'}.")
    for name in ("lora_A", "lora_B"):
        if got[name] != want[name]:
            meaning = (f"A maps the {n_in} input features to r = {r}: shape (r, in_features), as the weight of nn.Linear({n_in}, {r})"
                       if name == "lora_A" else f"B maps r = {r} to the {n_out} output features: shape (out_features, r)")
            raise CheckFailed(f"{what}: {name} has shape {tuple(got[name])}, expected {tuple(want[name])}: {meaning}.")
    if not run.get("base_kept"):
        raise CheckFailed(f"{what}: self.base is not the nn.Linear passed in. Keep that layer itself (self.base = base): "
                          "its trained weights are what is being adapted" +
                          ("" if run.get("base_same") else "; yours holds other weights") + ".")
    if not run.get("base_same"):
        raise CheckFailed(f"{what} changed the base layer's weight while building: it must stay exactly as trained.")
    trains = {n: p.get("trains") for n, p in params.items() if isinstance(p, dict)}
    frozen_wrong = [n for n in want if n.startswith("base.") and trains.get(n) is not False]
    if frozen_wrong:
        flag = (" The base module has an attribute requires_grad of its own: `module.requires_grad = False` only "
                "sets an attribute on the module, and its parameters keep requires_grad True; the method "
                "requires_grad_(False) (or each parameter's requires_grad) freezes them." if run.get("flag_on_module") else "")
        raise CheckFailed(f"{what}: {' and '.join(frozen_wrong)} still require gradients: the base layer is frozen "
                          f"(requires_grad False), only lora_A and lora_B train.{flag}")
    stuck = [n for n in ("lora_A", "lora_B") if trains.get(n) is not True]
    if stuck:
        raise CheckFailed(f"{what}: {' and '.join(stuck)} {'do' if len(stuck) > 1 else 'does'} not require gradients: "
                          "the adapters are what trains (nn.Parameter requires them by default).")
    for name in ("lora_A", "lora_B"):
        dtype_name = params[name].get("dtype")
        if dtype_name != str(dtype)[6:]:
            raise CheckFailed(f"{what}: {name} is {dtype_name} while the base layer is {str(dtype)[6:]}: build A and B in "
                              "the base weight's dtype and on its device (dtype=base.weight.dtype, device=base.weight.device).")
    A0, B0 = run.get("lora_A_start"), run.get("lora_B_start")
    if not isinstance(A0, torch.Tensor) or not isinstance(B0, torch.Tensor):
        raise CheckFailed("the check's data is incomplete")
    bound = 1 / math.sqrt(n_in)
    a_zero, b_zero = not bool(A0.abs().gt(0).any()), not bool(B0.abs().gt(0).any())
    if a_zero and b_zero:
        raise CheckFailed(f"{what}: lora_A and lora_B both start at zero, so neither ever learns: B's gradient is "
                          "multiplied by A and A's by B. A starts random, B at zero.")
    if a_zero:
        raise CheckFailed(f"{what}: lora_A starts at zero and lora_B at {describe(B0)}: the other way round. A starts "
                          f"random (nn.Linear's own initialisation, uniform in +-1/sqrt(in_features) = +-{bound:.3g}) and "
                          "B at zero, so that the new layer computes exactly what the base layer did.")
    if not b_zero:
        raise CheckFailed(f"{what}: lora_B starts at {describe(B0)}, not at zero: a new LoRALinear must compute exactly "
                          "what the base layer did (B = 0 makes the update zero), so that fine-tuning starts from the "
                          "trained model.")
    if A0.numel() > 1 and float(A0.std()) == 0:
        raise CheckFailed(f"{what}: every entry of lora_A starts at {float(A0.reshape(-1)[0]):g}: A starts random.")
    if float(A0.abs().max()) > bound * (1 + 1e-5):
        top, wide = float(A0.abs().max()), math.sqrt(6 / n_in)
        seen = (f"; they stay within +-sqrt(6 / in_features) = +-{wide:.3g}, the bound of kaiming_uniform_ with its "
                "default a = 0" if top <= wide * (1 + 1e-5) else f"; their spread (standard deviation) is {float(A0.std()):.3g}")
        raise CheckFailed(f"{what}: lora_A starts with entries up to {top:.3g}, beyond nn.Linear's bound +-1/sqrt(in_features) "
                          f"= +-{bound:.3g}{seen}. Initialise it as nn.Linear initialises its own weight: kaiming_uniform_ "
                          "with a = sqrt(5).")
    scale = run.get("scale")
    if isinstance(scale, (int, float)) and not math.isclose(scale, alpha / r, rel_tol=1e-9):
        raise CheckFailed(f"{what}: self.scale is {scale:g}; it is alpha / r = {alpha:g} / {r} = {alpha / r:g}.")


def _judge_lora(cases):
    def judge(data: dict) -> str:
        from helpers.reference import fine_tuning as ref

        for case, run in zip(cases, runs(data, len(cases)), strict=True):
            seed, n_in, n_out, r, alpha, bias, lead, dtype = case
            what = _what(n_in, n_out, r, alpha, bias)
            if not run.get("built"):
                raise_caught(f"{what}, building it", run)
                raise CheckFailed("the check's data is incomplete")
            _judge_start(case, run, what)
            base = _base(seed, n_in, n_out, bias).double()
            x, A, B = _inputs(seed, n_in, n_out, r, lead)
            start = run.get("start")
            raise_caught(f"{what}, as it starts, on x of shape {tuple(x.shape)}", start if isinstance(start, dict) else {})
            with torch.no_grad():
                want_start = base(x.to(dtype).double())
            if not isinstance(start, torch.Tensor) or start.shape != want_start.shape:
                raise CheckFailed(f"{what}: as it starts (B = 0) it must compute exactly base(x), of shape "
                                  f"{tuple(want_start.shape)}; it returned {describe(start)}.")
            if not close(want_start, start, 1e-4, 1e-4):
                label = identify(start, {
                    "the base layer's output is missing: LoRALinear returns base(x) plus the scaled update": 0 * want_start,
                    "the scale multiplies base(x) as well; it belongs on the low-rank update alone": want_start * (alpha / r),
                    "base(x) is added twice": 2 * want_start,
                    **({"the base layer's bias is left out: self.base(x) includes it": want_start - base.bias.detach()}
                       if bias else {})}, 1e-4, 1e-4)
                raise CheckFailed(f"{what}: as it starts (B = 0, so the update is zero) it must compute exactly base(x)"
                                  + (f"; {label}" if label else "") + f". Evidence: {first_mismatch(want_start, start, 1e-4, 1e-4)}.")
            trained = need(run.get("trained"), dict)
            what_x = f"{what} with known lora_A and lora_B, on x of shape {tuple(x.shape)} ({str(dtype)[6:]})"
            raise_caught(what_x, trained)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what_x} changed its input x in place: compute new tensors.")
            module = ref.LoRALinear(base, r, alpha).double()
            with torch.no_grad():
                module.lora_A.copy_(A)
                module.lora_B.copy_(B)
                expected = module(x)
            out, tol = trained.get("out"), tolerance(dtype)
            if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
                raise CheckFailed(f"{what_x} should return shape {tuple(expected.shape)}, got {describe(out)}.")
            if out.dtype != dtype:
                raise CheckFailed(f"{what_x} returned {str(out.dtype)[6:]}: keep x's dtype.")
            if not close(expected, out, tol, tol):
                b = base.bias.detach() if bias else None
                label = identify(out, lora_variants(x, base.weight.detach(), b, A, B, r, alpha), tol, tol)
                if label:
                    raise CheckFailed(f"{what_x}: {label}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
                raise CheckFailed(explain_mismatch(expected, out, what=what_x, atol=tol, rtol=tol, dtype=dtype))
            built = [shape for shape in need(run.get("products") or [], list) if shape in ([n_out, n_in], [n_in, n_out])]
            if built:
                raise CheckFailed(f"{what_x}: the output is right, but forward builds a ({n_out}, {n_in}) matrix, B @ A, as "
                                  "large as the frozen weight itself: compute the update from x, x @ A.T (r numbers per "
                                  "row), then @ B.T, so that it costs r * (in + out) per row, not in * out.")
            grads = run.get("grads")
            if isinstance(grads, str):
                raise CheckFailed(f"{what_x}: the output is right, but backpropagating through it raised {grads}.")
            want = _grads(module, x)
            gtol = 1e-7 if dtype == torch.float64 else 1e-3
            for name in ("lora_A", "lora_B"):
                have = need(grads, dict).get(name)
                if not isinstance(have, torch.Tensor) or have.shape != want[name].shape:
                    raise CheckFailed(f"{what_x}: the output is right, but no gradient reaches {name}: the update must be "
                                      "computed from self.lora_A and self.lora_B themselves (no .detach(), .data or "
                                      "torch.no_grad()), or nothing trains.")
                if not close(want[name], have, gtol, gtol):
                    raise CheckFailed(f"{what_x}: the output is right, but the gradient that reaches {name} is wrong "
                                      f"({first_mismatch(want[name], have, gtol, gtol)}).")
            have = need(grads, dict).get(INPUT)
            if not isinstance(have, torch.Tensor) or have.shape != want[INPUT].shape or not close(want[INPUT], have, gtol, gtol):
                raise CheckFailed(f"{what_x}: the output is right, but the gradient that flows back to x is "
                                  + ("missing" if not isinstance(have, torch.Tensor) else
                                     f"wrong ({first_mismatch(want[INPUT], have, gtol, gtol)})" if have.shape == want[INPUT].shape
                                     else f"of shape {tuple(have.shape)}")
                                  + ": both paths, base(x) and the update, must stay in the graph (no .detach() or .data "
                                  "on x, and no torch.no_grad() around either: a frozen base needs no gradient for its "
                                  "weights, but x still gets one through it), or the layers before this one get a wrong "
                                  "gradient.")
        return ("LoRALinear: the base layer kept and frozen, A random within nn.Linear's bound and B zero (the new layer "
                "computes base(x)), scale alpha / r; outputs and the adapters' gradients match the reference.")

    return judge


check_lora_linear, check_lora_linear_hidden = visible_and_hidden(
    "check_lora_linear", _probe_lora, _judge_lora, LORA_CASES, LORA_HIDDEN_CASES)
