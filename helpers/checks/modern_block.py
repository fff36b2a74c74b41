"""Checks for lesson 11 (a modern block), exercises 1 and 2: RMSNorm and the SwiGLU feed-forward.

Shape legend: B batch, T time, C embedding size (emb_dim), H the feed-forward's hidden size
(n_hidden). No two sizes of a case are equal. A mistake is named only when its output, computed
here, is the student's on the case (``identify``); otherwise the message says what the diagnosis
established.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.core import (
    CheckFailed,
    calls_to,
    close,
    describe,
    expect_default_dtype,
    expect_module_class,
    expect_tensor,
    first_mismatch,
    identify,
    need,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.verdict import (
    gradients,
    judge_gradients,
    judge_output,
    load_weights,
    run_module,
    tolerance,
)
from helpers.reference import modern_block as ref

__all__ = ["check_rms_norm", "check_swiglu"]

RMS_DEFAULT_EPS = 1e-6  # RMSNorm(emb_dim)'s own eps, as in Hugging Face's LlamaRMSNorm

# ---------------------------------------------------------------------------------------------
# RMSNorm(emb_dim, eps=1e-6): x (..., C) -> x / sqrt(mean(x^2) + eps) * weight

# (seed, shape of x, eps given to the constructor (None: its default), dtype); the rows' spreads
# go down to 0.05, where eps = 0.01 moves the output and sqrt(ms) + eps differs from sqrt(ms + eps)
RMS_CASES = [(110, (2, 3, 7), None, torch.float64), (111, (5, 6), 0.01, torch.float64)]
RMS_HIDDEN_CASES = [(112, (3, 2, 4, 9), 0.05, torch.float64), (113, (4, 11), None, torch.float32)]
SPREADS = (1.0, 0.05, 3.0, 0.2)


def _rms_inputs(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    rows = math.prod(shape[:-1])
    spread = torch.tensor([SPREADS[i % len(SPREADS)] for i in range(rows)], dtype=torch.float64)[:, None]
    x = (torch.randn(rows, shape[-1], generator=g, dtype=torch.float64) + 0.7) * spread  # (rows, C), mean not 0
    weight = 1 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    return x.reshape(shape).to(dtype), weight.to(dtype)


def _rms_name(C, eps):
    return f"RMSNorm({C})" if eps is None else f"RMSNorm({C}, eps={eps:g})"


def _probe_rms(cases):
    def probe(rms_class) -> dict:
        expect_module_class(rms_class, "RMSNorm")
        found = []
        for seed, shape, eps, dtype in cases:
            x, weight = _rms_inputs(seed, shape, dtype)
            C = shape[-1]
            with case_sizes({"C": C, **({"T": shape[-2]} if len(shape) > 1 else {})}):
                norm = rms_class(C) if eps is None else rms_class(C, eps=eps)
                expect_default_dtype(norm, _rms_name(C, eps))
                init = {n: p.detach().clone() for n, p in norm.named_parameters()}
                try:
                    load_weights(norm, {"weight": torch.ones(C)}, _rms_name(C, eps))
                except CheckFailed as failed:
                    found.append({"init": init, "layout": str(failed)})
                    continue
                norm = norm.to(dtype)
                with torch.no_grad():
                    norm.weight.copy_(weight)
                before = x.clone()
                try:
                    with calls_to((F, "rms_norm", "F.rms_norm"), (nn.RMSNorm, "forward", "nn.RMSNorm"),
                                  kernels=("rms_norm", "_fused_rms_norm")) as library, torch.no_grad():
                        out = norm(x)
                    again = norm(before.clone()).detach()
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append({"init": init, **caught(exc)})
                    continue
                found.append({"init": init, "out": out.detach(), "again": again, "x_changed": not torch.equal(before, x),
                              "library": sorted(set(library)), "grads": gradients(norm, before)})
        return {"runs": found}

    return probe


def rms_variants(x: torch.Tensor, w: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    """What RMSNorm returns under each classic mistake (float64)."""
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
    centred = x - x.mean(dim=-1, keepdim=True)
    out = {
        "you subtracted the mean first, as LayerNorm does: RMSNorm does not centre, it divides x itself by "
        "its root mean square, sqrt(mean(x^2) + eps)": centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * w,
        "eps is added outside the square root, sqrt(mean(x^2)) + eps; it belongs inside, sqrt(mean(x^2) + eps)":
            x / (ms.sqrt() + eps) * w,
        "you divided by the square root of the sum of the squares: RMSNorm takes their mean (divide the sum by C)":
            x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
        "you divided by mean(x^2) + eps itself: the square root is missing": x / (ms + eps) * w,
        "you multiplied by the root mean square instead of dividing by it": x * torch.sqrt(ms + eps) * w,
        "you averaged the absolute values, mean(|x|), where RMSNorm averages the squares": x * torch.rsqrt(x.abs().mean(-1, keepdim=True) + eps) * w,
        "the learned scale weight is not applied": x * torch.rsqrt(ms + eps),
        "the scale is applied as (1 + weight), Gemma's convention (its stored weight is the offset from 1): here, "
        "as in Llama, the weight is the scale itself (it starts at ones), x / rms * weight":
            x * torch.rsqrt(ms + eps) * (1 + w),
        "eps is missing: divide by sqrt(mean(x^2) + eps); the eps keeps a position of near-zero features "
        "from a division by almost nothing": x * torch.rsqrt(ms) * w,
    }
    if x.dim() >= 2:
        over = x.pow(2).mean(dim=-2, keepdim=True)
        out["the mean square is taken over the positions (dim=-2), not over each position's C features (dim=-1)"] = \
            x * torch.rsqrt(over + eps) * w
    if eps != RMS_DEFAULT_EPS:
        out[f"the eps given to the constructor ({eps:g}) is not used: store it (self.eps) and add that"] = \
            x * torch.rsqrt(ms + RMS_DEFAULT_EPS) * w
    return out


def _judge_rms(cases):
    def judge(data: dict) -> str:
        for (seed, shape, eps, dtype), run in zip(cases, runs(data, len(cases)), strict=True):
            C = shape[-1]
            what = f"{_rms_name(C, eps)} on x of shape {shape} ({str(dtype)[6:]})"
            init = need(run.get("init"), dict)
            start = init.get("weight")
            if isinstance(start, torch.Tensor) and start.shape == (C,) and not close(torch.ones(C), start, 0, 0):
                raise CheckFailed(f"{_rms_name(C, eps)}: weight should start as torch.ones({C}) (a new norm only "
                                  f"normalises); it starts as {describe(start)}.")
            if run.get("layout"):
                raise CheckFailed(str(run["layout"]))
            raise_caught(what, run)
            if run.get("library"):
                raise CheckFailed(f"{what}: your forward calls {' and '.join(map(str, run['library']))}; the exercise is "
                                  "to write the arithmetic yourself (the cell after the test compares yours with PyTorch's).")
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed its input x in place (x *= ..., x /= ...): compute a new tensor.")
            out = expect_tensor(run.get("out"), shape, what)
            if out.dtype != dtype:
                raise CheckFailed(f"{what} returned {str(out.dtype)[6:]}: keep x's dtype.")
            x, weight = _rms_inputs(seed, shape, dtype)
            used = RMS_DEFAULT_EPS if eps is None else eps
            norm = ref.RMSNorm(C, eps=used).double()
            with torch.no_grad():
                norm.weight.copy_(weight.double())
                expected = norm(x.double())
            tol = tolerance(dtype)
            if not close(expected, out, tol, tol):
                label = identify(out, rms_variants(x.double(), weight.double(), used), tol, tol)
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {first_mismatch(expected, out, tol, tol)}.")
                raise CheckFailed(explain_mismatch(expected, out, what=what, atol=tol, rtol=tol, again=run.get("again"),
                                                   dtype=dtype))
            judge_gradients(run.get("grads"), norm, x.double(), what, dtype)
        return ("RMSNorm: rows of very different spreads, the default eps and others: outputs and gradients match "
                "the reference; weight starts at ones; x untouched.")

    return judge


check_rms_norm, check_rms_norm_hidden = visible_and_hidden("check_rms_norm", _probe_rms, _judge_rms, RMS_CASES, RMS_HIDDEN_CASES)

# ---------------------------------------------------------------------------------------------
# SwiGLU(emb_dim, n_hidden): x (..., C) -> down(silu(gate(x)) * up(x))

# (seed, batch shape, T, C, H, dtype)
SWIGLU_CASES = [(120, (2,), 5, 6, 11, torch.float64)]
SWIGLU_HIDDEN_CASES = [(121, (), 7, 4, 9, torch.float64), (122, (3,), 4, 10, 13, torch.float32)]


def _swiglu_inputs(seed, batch, T, C, H, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {"gate.weight": torch.randn(H, C, generator=g, dtype=torch.float64) * 1.5 / math.sqrt(C),
               "up.weight": torch.randn(H, C, generator=g, dtype=torch.float64) / math.sqrt(C),
               "down.weight": torch.randn(C, H, generator=g, dtype=torch.float64) / math.sqrt(H)}
    x = 1.5 * torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype)


def _swiglu_sizes(batch, T, C, H):
    return {**({"B": batch[0]} if batch else {}), "T": T, "C": C, "H": H}


def _probe_swiglu(cases):
    def probe(swiglu_class) -> dict:
        expect_module_class(swiglu_class, "SwiGLU")
        found = []
        for seed, batch, T, C, H, dtype in cases:
            weights, x = _swiglu_inputs(seed, batch, T, C, H, dtype)
            sizes = _swiglu_sizes(batch, T, C, H)
            with case_sizes(sizes):
                module = swiglu_class(C, H)
                expect_default_dtype(module, f"SwiGLU({C}, {H})")
                module = module.to(dtype)
                load_weights(module, weights, f"SwiGLU({C}, {H})")
                before = x.clone()
                run = run_module(module, x, sizes, batched=bool(batch))
                run["x_changed"] = not torch.equal(before, x)
                found.append(run)
        return {"runs": found}

    return probe


def swiglu_variants(x, w) -> dict[str, torch.Tensor]:
    """What SwiGLU returns under each classic mistake (float64 weights by name)."""
    gate, up, down = x @ w["gate.weight"].T, x @ w["up.weight"].T, w["down.weight"].T
    return {
        "the SiLU is applied to up's output, not gate's: silu(gate(x)) * up(x)": (gate * F.silu(up)) @ down,
        "the gate goes through a sigmoid: SwiGLU's gate is silu(z) = z * sigmoid(z), not sigmoid(z)":
            (torch.sigmoid(gate) * up) @ down,
        "the gate goes through a ReLU (that is ReGLU); SwiGLU uses silu(z) = z * sigmoid(z)": (torch.relu(gate) * up) @ down,
        "the gate goes through a GELU (that is GEGLU); SwiGLU uses silu(z) = z * sigmoid(z)": (F.gelu(gate) * up) @ down,
        "the SiLU is applied after the product, silu(gate(x) * up(x)); it belongs on gate(x) alone": F.silu(gate * up) @ down,
        "the two branches are added, silu(gate(x)) + up(x); SwiGLU multiplies them": (F.silu(gate) + up) @ down,
        "up's branch is missing: down(silu(gate(x))) is lesson 02's MLP with a SiLU": F.silu(gate) @ down,
        **{f"the gate goes through {name}, not SiLU (F.silu, z * sigmoid(z))": (f(gate) * up) @ down
           for name, f in (("SELU (F.selu)", F.selu), ("ELU (F.elu)", F.elu), ("tanh", torch.tanh),
                           ("Softplus (F.softplus)", F.softplus), ("Mish (F.mish)", F.mish))},
    }


def _judge_swiglu(cases):
    def judge(data: dict) -> str:
        for (seed, batch, T, C, H, dtype), run in zip(cases, runs(data, len(cases)), strict=True):
            weights, x = _swiglu_inputs(seed, batch, T, C, H, dtype)
            what = f"SwiGLU(emb_dim={C}, n_hidden={H}) on x of shape {(*batch, T, C)} ({str(dtype)[6:]})"
            raise_caught(what, run)
            if run.get("x_changed") is not False:
                raise CheckFailed(f"{what} changed its input x in place: compute new tensors.")
            module = ref.SwiGLU(C, H).double()
            w64 = {k: v.double() for k, v in weights.items()}
            module.load_state_dict(w64)
            with torch.no_grad():
                expected = module(x.double())
            diagnosis = {"what": what, "atol": tolerance(dtype), "rtol": tolerance(dtype), "dtype": dtype,
                         "again": run.get("again"), "alone": run.get("alone"), "sizes": _swiglu_sizes(batch, T, C, H),
                         "axes": ("B", "T", "C") if batch else ("T", "C")}
            judge_output(run, expected, diagnosis, variants=lambda x=x, w64=w64: swiglu_variants(x.double(), w64), reference=module,
                         inputs=(x.double(),), noun="SwiGLU", dtype_too=True)
        return ("SwiGLU: known gate, up and down weights, batched and single sequences in float64 and float32: outputs "
                "and gradients match the reference.")

    return judge


check_swiglu, check_swiglu_hidden = visible_and_hidden("check_swiglu", _probe_swiglu, _judge_swiglu, SWIGLU_CASES, SWIGLU_HIDDEN_CASES)

