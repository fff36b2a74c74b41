"""Checks for lesson 05 (the transformer layer), first exercise: LayerNorm.

Shape legend: B batch, T sequence length, C embedding size (emb_dim). Every input is chosen so
that no two of its dimensions are equal. The classic mistakes, as what each would compute, are
in ``transformer_layer_mistakes``.
"""

from __future__ import annotations

import copy
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
from helpers.checks.diagnose import case_sizes, diagnose, precision_lost
from helpers.checks.invariants import FAR
from helpers.checks.transformer_layer_mistakes import (
    DEFAULT_EPS,
    cancelled,
    layer_norm_variants,
    worst_row,
)
from helpers.checks.verdict import WEAK, gradients, judge_gradients, unregistered
from helpers.reference import transformer_layer as ref

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.


# ---------------------------------------------------------------------------------------------
# LayerNorm(emb_dim, eps=1e-5): x (..., C) -> (..., C), normalised over the last dimension

# (seed, shape of x, eps passed to the constructor (None: use the default), dtype[, far]); far: every
# row's mean is FAR = 1e4 and its spread 1e-2 (an extreme the output must stay accurate at)
LN_CASES = [(30, (2, 3, 7), None, torch.float64), (31, (6, 4), 0.1, torch.float64), (35, (3, 5), None, torch.float64, True)]
LN_HIDDEN_CASES = [
    (32, (3, 2, 4, 9), 1e-3, torch.float64),
    (33, (5, 8), None, torch.float32),
    (34, (4, 3, 6), 0.5, torch.float32),
]
# the spread of each row of x (one row = one position's C features), cycled over the rows. In
# float64 some rows have a variance near eps, where sqrt(var + eps) and sqrt(var) + eps differ.
SCALES = {torch.float64: (1.0, 1e-3, 0.05, 4.0), torch.float32: (1.0, 0.5, 2.0)}


def _ln_inputs(seed: int, shape: tuple, dtype: torch.dtype, far: bool = False):
    """x (shape), weight (C,) and bias (C,), in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    C = shape[-1]
    rows = math.prod(shape[:-1])
    scales = torch.tensor([SCALES[dtype][i % len(SCALES[dtype])] for i in range(rows)], dtype=torch.float64)
    scales = torch.full((rows,), 1e-2, dtype=torch.float64) if far else scales
    offset_size = 3.0 if dtype == torch.float64 else 0.5
    offsets = FAR + 1e-2 * torch.randn(rows, 1, generator=g, dtype=torch.float64) if far else \
        offset_size * torch.randn(rows, 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, C, generator=g, dtype=torch.float64) * scales[:, None] + offsets  # (rows, C)
    weight = 1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
    bias = 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
    return x.reshape(shape).to(dtype), weight.to(dtype), bias.to(dtype)


def _ln_name(C: int, eps) -> str:
    return f"LayerNorm({C})" if eps is None else f"LayerNorm({C}, eps={eps:g})"


def _probe_layer_norm(cases):
    def probe(ln_class) -> dict:
        expect_module_class(ln_class, "LayerNorm")
        runs = []
        for seed, shape, eps, dtype, *far in cases:
            with case_sizes(_ln_sizes(shape)):
                runs.append(_run_layer_norm_case(ln_class, seed, shape, eps, dtype, *far))
        return {"runs": runs}

    return probe


def _ln_axes(shape: tuple) -> tuple[str, ...] | None:
    """The legend letters of x's axes: (B, T, C), (T, C); none for other shapes."""
    return {3: ("B", "T", "C"), 2: ("T", "C")}.get(len(shape))


def _ln_sizes(shape: tuple) -> dict[str, int]:
    axes = _ln_axes(shape)
    return dict(zip(axes, shape, strict=True)) if axes else {"C": shape[-1]}


def _library_norms_watched():
    """PyTorch's own layer norms, watched: the exercise asks for the arithmetic."""
    return calls_to((F, "layer_norm", "F.layer_norm"), (torch, "layer_norm", "torch.layer_norm"),
                    (nn.LayerNorm, "forward", "nn.LayerNorm"), kernels=("native_layer_norm", "layer_norm"))


def _run_layer_norm_case(ln_class, seed, shape, eps, dtype, far=False) -> dict:
    x, weight, bias = _ln_inputs(seed, shape, dtype, far)
    C = shape[-1]
    ln = ln_class(C) if eps is None else ln_class(C, eps=eps)
    expect_default_dtype(ln, _ln_name(C, eps))
    names = sorted(name for name, _ in ln.named_parameters())
    if names != ["bias", "weight"]:
        raise CheckFailed(
            f"{_ln_name(C, eps)} should have exactly two parameters, weight and bias, "
            f"each of shape ({C},); it has {names}.{unregistered(ln)}"
        )
    init = {"weight": ln.weight.detach().clone(), "bias": ln.bias.detach().clone()}
    ln = ln.to(dtype)
    with torch.no_grad():
        for name, value in (("weight", weight), ("bias", bias)):
            param = getattr(ln, name)
            if tuple(param.shape) != (C,):
                raise CheckFailed(f"{name} should have shape ({C},), got {tuple(param.shape)}.")
            param.copy_(value)
        x_before = x.clone()
        with _library_norms_watched() as library:
            out = ln(x)
        again = ln(x_before.clone())  # the same input once more: deterministic?
        near = ln(x_before - FAR) if far else None  # the same rows moved to mean 0 (exact): the output must not move
        # each batch element alone (a batch of one): does the norm mix the batch?
        alone = [ln(x_before[b : b + 1].clone()) for b in range(shape[0])] if len(shape) >= 3 else None
    x_changed = not torch.equal(x_before, x)
    grads = gradients(ln, x_before)  # to x, weight and bias: the judge compares them with the reference's
    return {"init": init, "out": out, "x_changed": x_changed, "grads": grads, "again": again, "alone": alone,
            "library": sorted(set(library), key=library.index), **({"near": near} if far else {})}


#: what the output, read back before weight and bias, can establish (a property of the normalisation)
_BEFORE_AFFINE = ("rule_factor", "rule_slice_factors", "rule_fibre_factors", "rule_slice_offsets", "rule_normalised_axis",
                  "rule_permuted", "rule_shifted", "rule_transposed")


def _layer_norm_mismatch(reference, expected, out, x_of_case, weight, bias, eps, run, what, tol, shape, dtype) -> str:
    """The message for a LayerNorm output that no catalogued mistake explains: what the output
    establishes, or else what it establishes once weight and bias are undone, (out - bias) / weight."""
    diagnosis = {"atol": tol, "rtol": tol, "axes": _ln_axes(shape), "sizes": _ln_sizes(shape), "dtype": dtype}
    rule, message = diagnose(expected, out, what=what, again=run.get("again"), alone=run.get("alone"), **diagnosis)
    w, b = weight.double(), bias.double()
    if rule not in WEAK or w.abs().min() < 1e-3:
        return message
    lost = precision_lost(expected, out, what, dtype, tol, lambda: copy.deepcopy(reference).float()(x_of_case.float()))
    if lost:
        return lost
    scale = tol / float(w.abs().min())
    want, have = (expected.double() - b) / w, (out.double() - b) / w  # (..., C): normalised x, before the affine
    rows_want, rows_have = want.reshape(-1, shape[-1]), have.reshape(-1, shape[-1])
    factors = (rows_want * rows_have).sum(dim=-1) / (rows_want * rows_want).sum(dim=-1)  # (rows,)
    if close(factors[:, None] * rows_want, rows_have, scale, scale):
        # every row is x - mean, divided by its own wrong amount: show the worst row's divisor
        row = int((factors.log().abs()).argmax()) if bool((factors > 0).all()) else int((factors - 1).abs().argmax())
        x = x_of_case.reshape(-1, shape[-1])[row].double()
        var = float(x.var(correction=0))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(row), tuple(shape[:-1])))
        right = math.sqrt(var + eps)
        divisors = _divisor_read(x_of_case.reshape(-1, shape[-1]).double(), factors, eps)
        if divisors:
            return (f"{what}: read back before weight and bias, as (out - bias) / weight, each position's "
                    f"{shape[-1]} values are x - mean, centred correctly, and divided at every position by "
                    f"{divisors} instead of sqrt(var + eps) (var the mean of the squared deviations over the last "
                    f"dimension); {first_mismatch(expected, out, tol, tol)}.")
        return (
            f"{what}: read back before weight and bias, as (out - bias) / weight, each position's "
            f"{shape[-1]} values are x - mean, centred correctly, but divided by the wrong amount, a "
            "different one for each position: compare what you divide by with sqrt(var + eps), var the "
            "mean of the squared deviations over the last dimension. Evidence: for the position at "
            f"{index}, var = {var:.4g} and sqrt(var + eps) = {right:.4g}, but your output divides by "
            f"{right / float(factors[row]):.4g}; {first_mismatch(expected, out, tol, tol)}."
        )
    label = "READ-BACK"
    rule_before, before = diagnose(want, have, what=label, **{**diagnosis, "atol": scale, "rtol": scale, "dtype": out.dtype})
    if rule_before not in _BEFORE_AFFINE:
        return message
    return f"{what}: read back before weight and bias, as (out - bias) / weight, {before.removeprefix(label + ': ')}"


def _divisor_read(rows: torch.Tensor, factors: torch.Tensor, eps: float) -> str | None:
    """What every row was divided by, when one formula of its variance gives it at every row: the
    output's divisor is sqrt(var + eps) / factor, compared with each formula to 1e-6 relative."""
    var = rows.var(dim=-1, correction=0)  # (rows,)
    unbiased = rows.var(dim=-1, correction=1) if rows.shape[-1] > 1 else var
    divided = (var + eps).sqrt() / factors.double()
    formulas = {
        "var + eps, with no square root (was the sqrt left out?)": var + eps,
        "(var + eps) ** 0.25, the square root taken twice (var already a standard deviation, then sqrt "
        "again?)": (var + eps).sqrt().sqrt(),
        "sqrt(var) + eps, eps outside the square root": var.sqrt() + eps,
        "sqrt(sqrt(var) + eps), the square root taken twice (var already a standard deviation, then "
        "sqrt(var + eps) again?)": (var.sqrt() + eps).sqrt(),
        "sqrt(var), with no eps": var.sqrt(),
        "sqrt(max(var, eps)) (eps a floor under var, a clamp, not added to it)": var.clamp(min=eps).sqrt(),
        "sqrt(mean(x ** 2) + eps), the mean square of x itself, which is var + mean ** 2 (is the mean still in "
        "the values whose squares are averaged: never taken out, or taken out twice?),": (rows.pow(2).mean(dim=-1) + eps).sqrt(),
        "sqrt(var + eps) of the unbiased variance (divided by C - 1, torch.var's default): LayerNorm divides "
        "by C (correction=0 or unbiased=False)": (unbiased + eps).sqrt(),
    }
    fits = [words for words, d in formulas.items() if bool(((d - divided).abs() <= 1e-6 * d.abs()).all())]
    return fits[0] if len(fits) == 1 else None


def _judge_layer_norm(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for (seed, shape, eps, dtype, *far), run in zip(cases, found, strict=True):
            x, weight, bias = _ln_inputs(seed, shape, dtype, *far)
            C = shape[-1]
            eps_used = DEFAULT_EPS if eps is None else eps
            what = f"{_ln_name(C, eps)} on x of shape {shape} ({str(dtype).replace('torch.', '')})"
            init = need(run.get("init"), dict)
            for name, start in (("weight", torch.ones(C)), ("bias", torch.zeros(C))):
                got = init.get(name)
                if not isinstance(got, torch.Tensor) or tuple(got.shape) != (C,) or not close(start, got, 0, 0):
                    raise CheckFailed(
                        f"{_ln_name(C, eps)}: {name} should start as torch.{'ones' if name == 'weight' else 'zeros'}"
                        f"({C}) (so that a new LayerNorm only normalises); it starts as {describe(got)}"
                        + (f" {got.tolist()}" if isinstance(got, torch.Tensor) and got.numel() <= 9 else "")
                        + "."
                    )
            library = run.get("library")
            if library:
                raise CheckFailed(
                    f"{what}: your forward calls {' and '.join(map(str, library))}. Do not call nn.LayerNorm "
                    "or F.layer_norm: the exercise is to write the arithmetic yourself (the mean and the "
                    "variance over the last dimension, the division by sqrt(var + eps), weight and bias)."
                )
            if run.get("x_changed") is not False:
                raise CheckFailed(
                    f"{what} modified its input x in place (x -= mean, x /= ...): the caller's tensor "
                    "changed. Compute new tensors instead."
                )
            out = expect_tensor(run["out"], shape, what)
            if out.dtype != dtype:
                raise CheckFailed(
                    f"{what} returned a {out.dtype} tensor; keep the input's dtype (a float64 input gives "
                    "a float64 output)."
                )
            with torch.no_grad():
                ln = ref.LayerNorm(C, eps=eps_used).double()
                ln.weight.copy_(weight.double())
                ln.bias.copy_(bias.double())
            tol = 1e-8 if dtype == torch.float64 else 1e-4
            expected = ln(x.detach().double())
            evidence = first_mismatch(expected.detach(), out, tol, tol)
            if not close(expected.detach(), out, tol, tol) and far:
                raise CheckFailed(cancelled(what, expected.detach(), out, run.get("near"), x, weight, bias, eps_used, tol))
            if not close(expected.detach(), out, tol, tol):
                variants = layer_norm_variants(x.double(), weight.double(), bias.double(), eps_used)
                label = identify(out, variants, tol, tol)
                if label and "eps" in label:
                    outside = "sqrt(var) + eps" in label or "std() + eps" in label
                    label += worst_row(x.double(), expected.detach(), out, eps_used, outside)
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
                raise CheckFailed(_layer_norm_mismatch(
                    ln, expected.detach(), out, x, weight, bias, eps_used, run, what, tol, shape, dtype
                ))
            judge_gradients(run.get("grads"), ln, x.detach().double(), what, dtype,
                            hint=" In a LayerNorm: the mean or the variance detached, or weight and bias read through .data.")
        shapes = ", ".join(str(c[1]) for c in cases)
        return (
            f"LayerNorm: x of shape {shapes} (rows of very different spreads, some far from 0, eps "
            f"{', '.join('default' if c[2] is None else f'{c[2]:g}' for c in cases)}): output and "
            "gradients match the reference; weight starts at ones, bias at zeros."
        )

    return judge


check_layer_norm, check_layer_norm_hidden = visible_and_hidden(
    "check_layer_norm", _probe_layer_norm, _judge_layer_norm, LN_CASES, LN_HIDDEN_CASES
)
