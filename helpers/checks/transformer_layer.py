"""Checks for lesson 05 (the transformer layer): LayerNorm and the pre-LN TransformerBlock.

Shape legend: B batch, T sequence length, C embedding size (emb_dim), hs head size (head_dim),
nh heads (n_heads). Every input is chosen so that no two of its dimensions are equal.

The reference is imported inside the judges only: the probes never need it, and this module can
be imported (as every check module is, to fill the registry) before the reference is generated.
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
    expect_tensor,
    first_mismatch,
    identify,
    visible_and_hidden,
)
from helpers.checks.diagnose import (
    _gloss,
    case_sizes,
    diagnose,
    difference_from,
    first_divergence,
    precision_lost,
    trace,
)

# Check.__call__ and Check.record run every probe and judge inside torch.random.fork_rng: building
# modules here draws random numbers without moving the notebook's.


def _ref():
    from helpers.reference import transformer_layer

    return transformer_layer


# ---------------------------------------------------------------------------------------------
# LayerNorm(emb_dim, eps=1e-5): x (..., C) -> (..., C), normalised over the last dimension

DEFAULT_EPS = 1e-5
# (seed, shape of x, eps passed to the constructor (None: use the default), dtype)
LN_CASES = [(30, (2, 3, 7), None, torch.float64), (31, (6, 4), 0.1, torch.float64)]
LN_HIDDEN_CASES = [
    (32, (3, 2, 4, 9), 1e-3, torch.float64),
    (33, (5, 8), None, torch.float32),
    (34, (4, 3, 6), 0.5, torch.float32),
]
# the spread of each row of x (one row = one position's C features), cycled over the rows. In
# float64 some rows have a variance near eps, where sqrt(var + eps) and sqrt(var) + eps differ.
SCALES = {torch.float64: (1.0, 1e-3, 0.05, 4.0), torch.float32: (1.0, 0.5, 2.0)}


def _ln_inputs(seed: int, shape: tuple, dtype: torch.dtype):
    """x (shape), weight (C,), bias (C,) and r (shape, the upstream gradient), in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    C = shape[-1]
    rows = math.prod(shape[:-1])
    scales = torch.tensor([SCALES[dtype][i % len(SCALES[dtype])] for i in range(rows)], dtype=torch.float64)
    offset_size = 3.0 if dtype == torch.float64 else 0.5
    offsets = offset_size * torch.randn(rows, 1, generator=g, dtype=torch.float64)
    x = torch.randn(rows, C, generator=g, dtype=torch.float64) * scales[:, None] + offsets  # (rows, C)
    weight = 1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
    bias = 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
    r = torch.randn(*shape, generator=g, dtype=torch.float64)
    return x.reshape(shape).to(dtype), weight.to(dtype), bias.to(dtype), r.to(dtype)


def _ln_name(C: int, eps) -> str:
    return f"LayerNorm({C})" if eps is None else f"LayerNorm({C}, eps={eps:g})"


def _probe_layer_norm(cases):
    def probe(ln_class) -> dict:
        if not isinstance(ln_class, type) or not issubclass(ln_class, nn.Module):
            raise CheckFailed(f"expected the class LayerNorm (an nn.Module), got {describe(ln_class)}")
        runs = []
        for seed, shape, eps, dtype in cases:
            with case_sizes(_ln_sizes(shape)):
                runs.append(_run_layer_norm_case(ln_class, seed, shape, eps, dtype))
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
                    (nn.LayerNorm, "forward", "nn.LayerNorm"))


def _run_layer_norm_case(ln_class, seed, shape, eps, dtype) -> dict:
    x, weight, bias, r = _ln_inputs(seed, shape, dtype)
    C = shape[-1]
    ln = ln_class(C) if eps is None else ln_class(C, eps=eps)
    names = sorted(name for name, _ in ln.named_parameters())
    if names != ["bias", "weight"]:
        raise CheckFailed(
            f"{_ln_name(C, eps)} should have exactly two parameters, weight and bias, "
            f"each of shape ({C},); it has {names}."
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
        # each batch element alone (a batch of one): does the norm mix the batch?
        alone = [ln(x_before[b : b + 1].clone()) for b in range(shape[0])] if len(shape) >= 3 else None
    x_changed = not torch.equal(x_before, x)
    # the same call with gradients: d(sum(out * r)) / d(x, weight, bias)
    xg = x_before.clone().requires_grad_(True)
    for param in ln.parameters():
        param.grad = None
    grads = None
    try:
        (ln(xg) * r).sum().backward()
        grads = {"x": xg.grad, "weight": ln.weight.grad, "bias": ln.bias.grad}
    except Exception as exc:  # noqa: BLE001 - the judge reports it
        grads = f"{type(exc).__name__}: {exc}"[:500]
    return {"init": init, "out": out, "x_changed": x_changed, "grads": grads, "again": again, "alone": alone,
            "library": sorted(set(library), key=library.index)}


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
        f"you divided by the norm of x - mean, the square root of the sum of the squared deviations, "
        f"sqrt(C) = {math.sqrt(C):.3g} times the standard deviation: LayerNorm divides by the square root "
        "of their mean": affine(centred / (centred.norm(dim=-1, keepdim=True) + eps)),
    }
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
        m, v = x.mean(), x.var(correction=0)
        variants[
            "you normalised over every entry at once (x.mean() without dim=): take the statistics "
            f"over the last dimension only, dim=-1, keepdim=True (each position's C = {C} features)"
        ] = affine((x - m) / (v + eps).sqrt())
    return variants


def _worst_row(x: torch.Tensor, expected: torch.Tensor, out: torch.Tensor, eps: float, outside: bool) -> str:
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


#: what the output, read back before weight and bias, can establish (a property of the normalisation)
_BEFORE_AFFINE = ("rule_factor", "rule_slice_factors", "rule_fibre_factors", "rule_slice_offsets", "rule_normalised_axis",
                  "rule_permuted", "rule_shifted", "rule_transposed")


def _layer_norm_mismatch(reference, expected, out, x_of_case, weight, bias, eps, run, what, tol, shape, dtype) -> str:
    """The message for a LayerNorm output that no catalogued mistake explains: what the output
    establishes, or else what it establishes once weight and bias are undone, (out - bias) / weight."""
    diagnosis = {"atol": tol, "rtol": tol, "axes": _ln_axes(shape), "sizes": _ln_sizes(shape), "dtype": dtype}
    rule, message = diagnose(expected, out, what=what, again=run.get("again"), alone=run.get("alone"), **diagnosis)
    w, b = weight.double(), bias.double()
    if rule not in ("generic", "rule_localised") or w.abs().min() < 1e-3:
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


def _judge_layer_norm(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        ref = _ref()
        for (seed, shape, eps, dtype), run in zip(cases, runs, strict=True):
            x, weight, bias, r = _ln_inputs(seed, shape, dtype)
            C = shape[-1]
            eps_used = DEFAULT_EPS if eps is None else eps
            what = f"{_ln_name(C, eps)} on x of shape {shape} ({str(dtype).replace('torch.', '')})"
            init = run.get("init")
            if not isinstance(init, dict):
                raise CheckFailed("the check's data is incomplete")
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
            xg = x.detach().double().requires_grad_(True)
            expected = ln(xg)
            evidence = first_mismatch(expected.detach(), out, tol, tol)
            if not close(expected.detach(), out, tol, tol):
                variants = layer_norm_variants(x.double(), weight.double(), bias.double(), eps_used)
                label = identify(out, variants, tol, tol)
                if label and "eps" in label:
                    outside = "sqrt(var) + eps" in label or "std() + eps" in label
                    label += _worst_row(x.double(), expected.detach(), out, eps_used, outside)
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
                raise CheckFailed(_layer_norm_mismatch(
                    ln, expected.detach(), out, x, weight, bias, eps_used, run, what, tol, shape, dtype
                ))
            grads = run.get("grads")
            if isinstance(grads, str):
                raise CheckFailed(
                    f"{what}: the output is right, but backpropagating through it raised {grads}. "
                    "A layer must be differentiable: use torch operations on tensors (no .item(), "
                    "no numpy, no in-place changes of x)."
                )
            (ln(xg) * r.double()).sum().backward()
            wanted = {"x": xg.grad, "weight": ln.weight.grad, "bias": ln.bias.grad}
            for name, grad in wanted.items():
                got = grads.get(name) if isinstance(grads, dict) else None
                if not isinstance(got, torch.Tensor) or got.shape != grad.shape:
                    raise CheckFailed(
                        f"{what}: the output is right, but no gradient reached {name} "
                        f"(got {describe(got)}): is a part of the computation detached?"
                    )
                if not close(grad, got, tol * 10, tol * 10):
                    raise CheckFailed(
                        f"{what}: the output is right, but the gradient with respect to {name} is not: "
                        f"{first_mismatch(grad, got, tol * 10, tol * 10)}. Did you detach the mean or "
                        "the variance (.detach(), .item(), torch.no_grad)?"
                    )
        shapes = ", ".join(str(c[1]) for c in cases)
        return (
            f"LayerNorm: x of shape {shapes} (rows of very different spreads, eps "
            f"{', '.join('default' if c[2] is None else f'{c[2]:g}' for c in cases)}): output and "
            "gradients match the reference; weight starts at ones, bias at zeros."
        )

    return judge


check_layer_norm, check_layer_norm_hidden = visible_and_hidden(
    "check_layer_norm", _probe_layer_norm, _judge_layer_norm, LN_CASES, LN_HIDDEN_CASES
)

# ---------------------------------------------------------------------------------------------
# TransformerBlock(emb_dim, head_dim, n_heads, n_hidden): pre-LN, x (B, T, C) -> (B, T, C)

# (seed, batch shape, T, C, hs, nh, n_hidden, dtype)
BLOCK_CASES = [(40, (2,), 5, 6, 3, 4, 7, torch.float64)]
BLOCK_HIDDEN_CASES = [
    (41, (), 7, 5, 4, 2, 9, torch.float64),
    (42, (4,), 6, 10, 3, 2, 13, torch.float32),
]
NORMS = ("norm_before_attn", "norm_before_mlp")


def block_parameter_shapes(C: int, hs: int, nh: int, n_hidden: int) -> dict[str, tuple[int, ...]]:
    """The parameters of TransformerBlock(C, hs, nh, n_hidden), by name: part of the interface."""
    return {
        "norm_before_attn.weight": (C,),
        "norm_before_attn.bias": (C,),
        "attention.query.weight": (nh * hs, C),
        "attention.key.weight": (nh * hs, C),
        "attention.value.weight": (nh * hs, C),
        "attention.to_output.weight": (C, nh * hs),
        "norm_before_mlp.weight": (C,),
        "norm_before_mlp.bias": (C,),
        "mlp.model.0.weight": (n_hidden, C),
        "mlp.model.0.bias": (n_hidden,),
        "mlp.model.2.weight": (C, n_hidden),
        "mlp.model.2.bias": (C,),
    }


def _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype):
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in block_parameter_shapes(C, hs, nh, n_hidden).items():
        noise = torch.randn(*shape, generator=g, dtype=torch.float64)
        if name.startswith("norm") and name.endswith(".weight"):
            weights[name] = 1 + 0.3 * noise  # two different norms: a shared norm shows
        elif len(shape) == 1:
            weights[name] = 0.3 * noise
        else:
            weights[name] = noise / math.sqrt(shape[1])
    x = 2 * torch.randn(*batch, T, C, generator=g, dtype=torch.float64) + 0.5
    replacement = torch.randn(*batch, T, C, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in weights.items()}, x.to(dtype), replacement.to(dtype)


def _block_sizes(batch, T, C, hs, nh, n_hidden) -> dict[str, int]:
    """The case's sizes by legend letter (no two equal: a size names its dimension)."""
    return {**({"B": batch[0]} if len(batch) == 1 else {}), "T": T, "C": C, "hs": hs, "nh": nh, "H": n_hidden}


def _probe_block(cases):
    def probe(block_class) -> dict:
        if not isinstance(block_class, type) or not issubclass(block_class, nn.Module):
            raise CheckFailed(f"expected the class TransformerBlock (an nn.Module), got {describe(block_class)}")
        runs = []
        for seed, batch, T, C, hs, nh, n_hidden, dtype in cases:
            with case_sizes(_block_sizes(batch, T, C, hs, nh, n_hidden)):
                runs.append(_run_block_case(block_class, seed, batch, T, C, hs, nh, n_hidden, dtype))
        return {"runs": runs}

    return probe


def _run_block_case(block_class, seed, batch, T, C, hs, nh, n_hidden, dtype) -> dict:
    weights, x, replacement = _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype)
    block = block_class(C, hs, nh, n_hidden)
    names = sorted(name for name, _ in block.named_parameters())
    if names != sorted(weights):
        raise CheckFailed(
            f"{block_class.__name__}({C}, {hs}, {nh}, {n_hidden}) should have exactly the parameters "
            f"{', '.join(weights)} (keep the constructor as given); it has {names}."
        )
    # Known-good norms in place of the student's LayerNorm (same names, same arithmetic),
    # so that a mistake in the LayerNorm exercise does not cost this exercise's points.
    for attr in NORMS:
        setattr(block, attr, nn.LayerNorm(C, eps=DEFAULT_EPS))
    block = block.to(dtype)
    with torch.no_grad():
        for name, param in block.named_parameters():
            param.copy_(weights[name])
        x_before = x.clone()
        out = block(x)
        x_changed = not torch.equal(x_before, x)
        again = block(x_before.clone())  # the same input once more: deterministic?
        # each batch element alone (a batch of one): does the block mix the batch?
        alone = [block(x_before[b : b + 1].clone()) for b in range(batch[0])] if len(batch) == 1 else None
        leaks = []
        for j in range(1, T):
            changed = x_before.clone()
            changed[..., j, :] = replacement[..., j, :]
            leaks.append(block(changed))
    # what each sub-layer received and returned, for the judge to find where the block goes wrong
    steps = trace(block, x_before.clone(), with_inputs=True)
    return {"out": out, "x_changed": x_changed, "leaks": leaks, "again": again, "alone": alone, "steps": steps,
            "calls": calls(block, x_before.clone())}


def calls(module: nn.Module, *inputs, most: int = 3) -> dict:
    """Probe side: run ``module(*inputs)`` without gradients and return, for each direct child,
    how often it was called and the tensors its first ``most`` calls returned (``trace`` keeps
    only each submodule's first call; a sub-layer called twice is a mistake of its own)."""
    counts = {name: 0 for name, _ in module.named_children()}
    outputs: dict[str, list] = {name: [] for name in counts}

    def hook_for(name):
        def hook(_module, _args, output):
            counts[name] += 1
            if isinstance(output, torch.Tensor) and len(outputs[name]) < most:
                outputs[name].append(output.detach().clone())
        return hook

    handles = [child.register_forward_hook(hook_for(name)) for name, child in module.named_children()]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return {"counts": counts, "outputs": outputs}


def calls_note(recorded, out: torch.Tensor, x: torch.Tensor, tol: float, once: bool = True) -> str:
    """Judge side: what ``calls`` recorded says about a wrong output, in words: the sub-layers
    called more than once (when the reference calls each ``once``), and which recorded value
    (or the input ``x``) the output is exactly; "" when it says nothing."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("counts"), dict):
        return ""

    def label(name):
        return f"{name} ({_gloss(name)})" if _gloss(name) else name

    notes = []
    twice = [f"{label(n)} {k} times" for n, k in recorded["counts"].items() if isinstance(k, int) and k > 1]
    if once and twice:
        notes.append(f"Your forward calls {', '.join(twice)}; the reference calls each sub-layer once.")
    same = [
        f"the output of call {i + 1} of {label(name)}"
        for name, outs in (recorded.get("outputs") or {}).items() if isinstance(outs, list)
        for i, value in enumerate(outs)
        if isinstance(value, torch.Tensor) and value.shape == out.shape and close(value, out, tol, tol)
    ]
    if close(x, out, tol, tol):
        same.insert(0, "its own input x, unchanged")
    if same:
        notes.append(f"It returns exactly {same[0]}.")
    return " ".join(notes)


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


def _block_mismatch(block, xd, expected, out, run, diagnosis) -> str:
    """The message for a block output that no catalogued mistake explains: what the output itself
    establishes, and where inside the block the first value departs from the reference's."""
    rule, message = diagnose(expected, out, **diagnosis)
    steps, tol = run.get("steps"), diagnosis["atol"]
    if rule not in ("generic", "rule_localised") or not isinstance(steps, dict):
        return message
    lost = precision_lost(expected, out, diagnosis["what"], diagnosis["dtype"], tol, lambda: copy.deepcopy(block).float()(xd.float()))
    if lost:
        return lost
    ours = trace(block, xd, with_inputs=True)
    known = {"the block's input x": xd}
    inside = first_divergence(steps, ours, tol, tol, known=known)
    note = calls_note(run.get("calls"), out, xd, tol)
    if inside is None:  # every sub-layer saw and returned the reference's values (on its first call)
        extra = difference_from(out, expected, ours, tol, tol, known=known)
        exactly = f" The output is the reference's {'' if extra.startswith('minus') else 'plus '}{extra}." if extra else ""
        inside = (
            "every sub-layer received and returned exactly what the reference's did"
            + (" on its first call." if "calls" in note else ", so the difference comes from forward's own "
               "arithmetic after the last sub-layer call.")
            + exactly
        )
        note = f"{note} Evidence: {first_mismatch(expected, out, tol, tol)}.".strip()
    inside = f"{inside} {note}".strip()
    lead, _, _ = message.partition(" Evidence: ")
    if rule == "generic":
        lead = f"{diagnosis['what']} is wrong"
    return f"{lead.rstrip('.')}. Inside the block, {inside}"


def _judge_block(cases):
    def judge(data: dict) -> str:
        runs = data.get("runs")
        if not isinstance(runs, list) or len(runs) != len(cases):
            raise CheckFailed("the check's data is incomplete")
        ref = _ref()
        for (seed, batch, T, C, hs, nh, n_hidden, dtype), run in zip(cases, runs, strict=True):
            weights, x, replacement = _block_inputs(seed, batch, T, C, hs, nh, n_hidden, dtype)
            shape = (*batch, T, C)
            what = (
                f"TransformerBlock(emb_dim={C}, head_dim={hs}, n_heads={nh}, n_hidden={n_hidden}) "
                f"on x of shape {shape} ({str(dtype).replace('torch.', '')})"
            )
            if run.get("x_changed") is not False:
                raise CheckFailed(
                    f"{what} modified its input x in place: `x += ...` writes into the caller's tensor "
                    "(in a model, the embeddings). Write x = x + ... instead."
                )
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            with torch.no_grad():
                block = ref.TransformerBlock(C, hs, nh, n_hidden).double()
                for name, param in block.named_parameters():
                    param.copy_(weights[name].double())
                xd = x.double()
                expected = block(xd)
            diagnosis = {
                "what": what, "atol": tol, "rtol": tol, "axes": (*("B" * len(batch)), "T", "C"),
                "sizes": _block_sizes(batch, T, C, hs, nh, n_hidden), "again": run.get("again"),
                "alone": run.get("alone"), "dtype": dtype,
            }
            out = run["out"]
            rule, message = diagnose(expected, out, **diagnosis)
            # a wrong shape; not deterministic (a leak or a mismatch found below would only be noise);
            # right alone but wrong together (a leak found below would be its echo)
            if rule in ("not_a_tensor", "rule_shape", "rule_determinism", "rule_batch"):
                raise CheckFailed(message)
            leaks = run.get("leaks")
            if not isinstance(leaks, list) or len(leaks) != T - 1:
                raise CheckFailed("the check's data is incomplete")
            leak = None
            for j, changed in enumerate(leaks, start=1):
                changed = expect_tensor(changed, shape, what)
                moved = ~torch.isclose(changed[..., :j, :].double(), out[..., :j, :].double(), atol=tol, rtol=tol)
                if moved.any():
                    i = int(moved.nonzero()[0][-2])
                    leak = f"changing only token {j} changed the output at position {i}, an earlier one"
                    break
            if close(expected, out, tol, tol) and leak is None:
                continue
            with torch.no_grad():
                label = identify(out, block_variants(block, xd), tol, tol)
            evidence = first_mismatch(expected, out, tol, tol)
            if label:
                raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
            if leak:
                raise CheckFailed(
                    f"{what}: {leak}. A block must stay causal: only the attention mixes positions, "
                    "and only with the past."
                )
            raise CheckFailed(_block_mismatch(block, xd, expected, out, run, diagnosis))
        shapes = ", ".join(f"x{(*c[1], c[2], c[3])}" for c in cases)
        return (
            f"TransformerBlock: {shapes} with known weights match the reference pre-LN block "
            "x + attention(norm(x)), then + mlp(norm(...)); the input is untouched and no output "
            "moves when a later token changes."
        )

    return judge


check_transformer_block, check_transformer_block_hidden = visible_and_hidden(
    "check_transformer_block", _probe_block, _judge_block, BLOCK_CASES, BLOCK_HIDDEN_CASES
)
