"""Lesson 05's classic mistakes, as what each would compute: the catalogues by which the judges
of ``layer_norm`` and ``transformer_block`` recognise a wrong output and name its cause."""

from __future__ import annotations

import math

import torch

from helpers.checks.core import close, first_mismatch

#: LayerNorm's default eps, the constructor's: a mistake is to use it in place of self.eps
DEFAULT_EPS = 1e-5


def _normalised(h: torch.Tensor, eps: float) -> torch.Tensor:
    """(h - mean) / sqrt(var + eps) over the last axis, no weight or bias."""
    return (h - h.mean(dim=-1, keepdim=True)) / (h.var(dim=-1, keepdim=True, correction=0) + eps).sqrt()


def layer_norm_variants(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    """What a LayerNorm computes under each classic mistake (float64, same weights and input)."""
    C = x.shape[-1]
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = x.var(dim=-1, keepdim=True, correction=0)  # (..., 1)
    unbiased = x.var(dim=-1, keepdim=True, correction=1)  # (..., 1)
    centred = x - mean  # (..., C)

    def affine(h):
        return h * w + b

    variants = {
        "eps sits outside the square root: you computed (x - mean) / (sqrt(var) + eps), but LayerNorm "
        "divides by sqrt(var + eps)": affine(centred / (var.sqrt() + eps)),
        f"you used the unbiased variance, dividing by C - 1 = {C - 1} (torch.var and torch.std do that "
        f"by default); LayerNorm divides by C = {C}: pass correction=0 (or unbiased=False), or take "
        "the mean of the squared deviations": affine(centred / (unbiased + eps).sqrt()),
        f"you divided by x.std() + eps: torch.std is unbiased by default (divides by C - 1 = {C - 1}, "
        f"not C = {C}) and eps belongs inside the square root, sqrt(var + eps)": affine(
            centred / (unbiased.sqrt() + eps)
        ),
        "eps is missing: divide by sqrt(var + eps)": affine(centred / var.sqrt()),
        "you forgot weight and bias (scale by self.weight, then shift by self.bias)": centred
        / (var + eps).sqrt(),
        "you forgot weight, the learned scale (multiply the normalised x by self.weight)": centred
        / (var + eps).sqrt()
        + b,
        "you forgot bias, the learned shift (add self.bias at the end)": centred / (var + eps).sqrt() * w,
        "weight and bias are swapped (scale by weight, then add bias)": centred / (var + eps).sqrt() * b + w,
        "the mean is not subtracted: x / sqrt(mean(x**2) + eps) is RMSNorm, not LayerNorm": affine(
            x / (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
        ),
        "you subtracted the mean inside the variance but not from x itself: normalise x - mean": affine(
            x / (var + eps).sqrt()
        ),
        "you divided by the variance instead of its square root (the standard deviation)": affine(
            centred / (var + eps)
        ),
        "mean and variance are swapped: torch.var_mean returns (var, mean), in that order": affine(
            (x - var) / (mean + eps).sqrt()
        ),
        "eps is added after the division, (x - mean) / sqrt(var), then + eps: it belongs inside the "
        "square root, sqrt(var + eps)": affine(centred / var.sqrt() + eps),
        "the bias is added before the scale, (normalised + bias) * weight: scale by weight first, "
        "then add bias": (centred / (var + eps).sqrt() + b) * w,
        "weight and bias are applied to x itself, not to the normalised values: normalised * weight + bias":
            affine(x),
        "x is multiplied by weight before it is normalised (the mean and variance are of x * weight): "
        "normalise x first, then scale by weight and add bias": _normalised(x * w, eps) + b,
        "the normalised values are scaled and shifted, then normalised again (weight and bias applied "
        "before a second normalisation?): normalise once, then scale and shift": _normalised(affine(centred / (var + eps).sqrt()), eps),
        f"you divided by the norm of x - mean, the square root of the sum of the squared deviations, "
        f"sqrt(C) = {math.sqrt(C):.3g} times the standard deviation: LayerNorm divides by the square root "
        "of their mean": affine(centred / (centred.norm(dim=-1, keepdim=True) + eps)),
    }
    for d in range(x.dim() - 1):  # one statistic over another axis than the features (both: a rule of its own)
        across = f"dim={d if d == 0 and x.dim() == 3 else d - x.dim()}, across the {'batch' if d == 0 and x.dim() == 3 else 'positions'}"
        m_d, v_d = x.mean(dim=d, keepdim=True), x.var(dim=d, keepdim=True, correction=0)
        variants[f"the mean is taken over {across}, not over the features (dim=-1); the variance is right"] = affine(
            (x - m_d) / (var + eps).sqrt())
        variants[f"the mean is taken over {across}, not over the features (dim=-1), and the variance around that "
                 "mean"] = affine((x - m_d) / ((x - m_d).pow(2).mean(dim=-1, keepdim=True) + eps).sqrt())
        variants[f"the variance is taken over {across}, not over the features (dim=-1); the mean is right"] = affine(
            centred / (v_d + eps).sqrt())
    if eps != DEFAULT_EPS:
        variants[
            f"you ignored self.eps: this LayerNorm was built with eps={eps:g}, but you used "
            f"{DEFAULT_EPS:g}; use self.eps"
        ] = affine(centred / (var + DEFAULT_EPS).sqrt())
    if x.dim() >= 2:
        dims = [(-2, "dim=-2, across the positions")]
        if x.dim() >= 3:
            dims.append((0, "dim=0, across the batch"))
        for dim, words in dims:
            m = x.mean(dim=dim, keepdim=True)
            v = x.var(dim=dim, keepdim=True, correction=0)
            label = (
                f"you normalised over the wrong dimension ({words}); LayerNorm normalises each position's "
                f"C = {C} features on their own: dim=-1"
            )
            variants[label] = affine((x - m) / (v + eps).sqrt())
        if x.dim() >= 3:  # a loop over x[i], or dim=(-2, -1): each sequence as a whole
            m, v = x.mean(dim=(-2, -1), keepdim=True), x.var(dim=(-2, -1), keepdim=True, correction=0)
            variants[
                "you normalised each sequence as a whole, its T positions and C features together (dim=(-2, -1), "
                f"or a loop over x[i]): LayerNorm normalises each position's C = {C} features on their own, dim=-1"
            ] = affine((x - m) / (v + eps).sqrt())
        m, v = x.mean(), x.var(correction=0)
        variants[
            "you normalised over every entry at once (x.mean() without dim=): take the statistics "
            f"over the last dimension only, dim=-1, keepdim=True (each position's C = {C} features)"
        ] = affine((x - m) / (v + eps).sqrt())
    return variants


def cancelled(what: str, expected: torch.Tensor, out: torch.Tensor, near, x: torch.Tensor, w: torch.Tensor,
              b: torch.Tensor, eps: float, tol: float) -> str:
    """The message for a LayerNorm that is wrong on rows far from 0: whether the same rows moved to
    mean 0 come out right (``near``), and whether the error is the size E[x²] − E[x]² makes."""
    evidence = first_mismatch(expected, out, tol, tol)
    if not isinstance(near, torch.Tensor) or near.shape != expected.shape or not close(expected, near, tol, tol):
        return f"{what} is wrong on rows whose mean is far from 0 (about 1e4, spread 1e-2). Evidence: {evidence}."
    x = x.double()
    mean = x.mean(dim=-1, keepdim=True)
    moments = ((x - mean) / ((x * x).mean(dim=-1, keepdim=True) - mean * mean + eps).sqrt()) * w.double() + b.double()
    theirs, ours = float((moments - expected).abs().max()), float((out.double() - expected).abs().max())
    said = (f"{what}: right on the same rows moved to mean 0 (x - 1e4: a LayerNorm's output does not depend on where a "
            "row sits, only on its deviations from its mean), but wrong on the rows themselves, whose mean is about 1e4 "
            "and spread 1e-2: the arithmetic loses precision far from 0.")
    if theirs > 0 and 0.02 <= ours / theirs <= 50:  # the same order as the cancellation's own error
        said += (" The error is of the size a variance taken as mean(x²) − mean(x)² makes here: both terms are near "
                 "1e8 and differ by only about 1e-4, so float64's rounding of 1e8 (about 1e-8) is a relative error of "
                 "1e-4 in the variance: they cancel. Take the mean of the squared deviations, mean((x − mean)²).")
    return f"{said} Evidence: {evidence}."


def worst_row(x: torch.Tensor, expected: torch.Tensor, out: torch.Tensor, eps: float, outside: bool) -> str:
    """Where eps matters most: the row with the largest error, and its variance next to eps."""
    C = x.shape[-1]
    error = (expected.double() - out.double()).abs().reshape(-1, C).amax(dim=-1)  # (rows,)
    row = int(error.argmax())
    var = x.reshape(-1, C)[row].var(correction=0).item()
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(row), x.shape[:-1]))
    where = f" (the outputs differ most for the position at {index}, whose variance is {var:.3g}, next to eps = {eps:g}"
    if not outside:
        return where + ")"
    return where + f": there sqrt(var + eps) = {math.sqrt(var + eps):.4g} but sqrt(var) + eps = {math.sqrt(var) + eps:.4g})"


def block_variants(parts, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a pre-LN block computes under each classic mistake; ``parts`` is a reference block."""
    attn, mlp = parts.attention, parts.mlp
    ln1, ln2 = parts.norm_before_attn, parts.norm_before_mlp

    def two_steps(first, second):
        h = first(x)
        return second(h)

    variants = {
        "post-LN: you normalised after adding the residual, norm(x + sublayer(x)) (the 2017 "
        "Transformer); a pre-LN block normalises only the sub-layer's input, x + sublayer(norm(x))": two_steps(
            lambda v: ln1(v + attn(v)), lambda h: ln2(h + mlp(h))
        ),
        "the residual is added after the norm: you replaced x by norm(x) and then added "
        "sublayer(norm(x)) to it; the residual stream x itself must never be normalised inside the "
        "block (x + sublayer(norm(x)))": two_steps(
            lambda v: ln1(v) + attn(ln1(v)), lambda h: ln2(h) + mlp(ln2(h))
        ),
        "the residual around the attention starts from norm(x), not x: you replaced x by "
        "norm_before_attn(x) and added attention(...) to that; the residual stream itself is never normalised "
        "(x + attention(norm_before_attn(x)))": two_steps(lambda v: ln1(v) + attn(ln1(v)), lambda h: h + mlp(ln2(h))),
        "the residual around the MLP starts from norm(x), not x: you replaced x by norm_before_mlp(x) and "
        "added mlp(...) to that; the residual stream itself is never normalised (x + mlp(norm_before_mlp(x)))":
            two_steps(lambda v: v + attn(ln1(v)), lambda h: ln2(h) + mlp(ln2(h))),
        "the residual connection around the attention is missing (x + attention(norm(x)))": two_steps(
            lambda v: attn(ln1(v)), lambda h: h + mlp(ln2(h))
        ),
        "the residual connection around the MLP is missing (x + mlp(norm(x)))": two_steps(
            lambda v: v + attn(ln1(v)), lambda h: mlp(ln2(h))
        ),
        "both residual connections are missing: each sub-layer's output must be added to its input": two_steps(
            lambda v: attn(ln1(v)), lambda h: mlp(ln2(h))
        ),
        "one norm is shared by both sub-layers: the MLP's input went through norm_before_attn; each "
        "sub-layer has its own norm (norm_before_mlp for the MLP)": two_steps(
            lambda v: v + attn(ln1(v)), lambda h: h + mlp(ln1(h))
        ),
        "one norm is shared by both sub-layers: the attention's input went through norm_before_mlp; "
        "each sub-layer has its own norm (norm_before_attn for the attention)": two_steps(
            lambda v: v + attn(ln2(v)), lambda h: h + mlp(ln2(h))
        ),
        "the MLP is applied to the un-normalised input: it should read norm_before_mlp(x)": two_steps(
            lambda v: v + attn(ln1(v)), lambda h: h + mlp(h)
        ),
        "the attention is applied to the un-normalised input: it should read norm_before_attn(x)": two_steps(
            lambda v: v + attn(v), lambda h: h + mlp(ln2(h))
        ),
        "you normalised the sub-layers' outputs, x + norm(sublayer(x)), instead of their inputs, "
        "x + sublayer(norm(x))": two_steps(lambda v: v + ln1(attn(v)), lambda h: h + ln2(mlp(h))),
        "the MLP reads the block's input instead of the stream after the attention: both sub-layers "
        "ran in parallel on x; the MLP must see x + attention(norm(x))": x + attn(ln1(x)) + mlp(ln2(x)),
        "the sub-layers are in the wrong order: attention first, then the MLP": two_steps(
            lambda v: v + mlp(ln2(v)), lambda h: h + attn(ln1(h))
        ),
    }
    return variants
