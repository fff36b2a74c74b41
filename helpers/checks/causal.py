"""Judging a causal attention layer: shared by the checks of lessons 03 (the head) and 04 (the
multi-head modules).

A case runs the student's layer on inputs where no two sizes are equal (``student_case``,
``run_causal``: the output, the same input again, each batch element alone, a trace of the
sub-modules, and the outputs after each later token is changed); ``judge_causal`` then names,
through the kit's ``verdict.judge_output``, in order, what the diagnosis layer establishes (shape,
determinism, batch mixing), a leak from the future, attention's classic mistakes
(``attention_variants``: scale, mask, softmax axis), and where inside the layer the values depart.
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager

import torch

from helpers.checks import diagnose as layer
from helpers.checks.core import CheckFailed, close, first_mismatch
from helpers.checks.diagnose import case_sizes, explain_error
from helpers.checks.verdict import first_leak, gradients, judge_output


def legend(batch: tuple, **sizes: int) -> dict[str, int]:
    """A case's sizes by legend letter (B only for one batch dimension)."""
    return {**({"B": batch[0]} if len(batch) == 1 else {}), **sizes}


def changed_at(x: torch.Tensor, replacement: torch.Tensor, j: int) -> torch.Tensor:
    """``x`` with only token ``j`` replaced: a later token must not move an earlier output."""
    changed = x.clone()
    changed[..., j, :] = replacement[..., j, :]
    return changed


#: errors that name a mistake of these exercises (their meaning is in the diagnosis layer): the
#: check fails with that meaning, instead of reporting a crash; so does an error whose explanation
#: names a likely cause (``diagnose.explain_error(...).cause``)
NAMED_ERRORS = ("only supports boolean masks", "must be tuple of ints,but got float", "is out of bounds for dimension")


@contextmanager
def student_case(sizes: dict, reason=None):
    """Probe side: one case of a check. An error of the student's code is explained in the case's
    legend (``case_sizes``); ``reason(exc)`` may name the mistake that the error establishes."""
    try:
        with case_sizes(sizes):
            yield
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as exc:
        lead = reason(exc) if reason else None
        explained = explain_error(exc, sizes)
        parts = explained.lines
        if (lead is None and not any(needle in str(exc) for needle in NAMED_ERRORS) and not getattr(exc, "course_outside", None)
                and explained.cause is None):
            raise  # Check explains it in the case's legend: nothing to add
        lines = [lead, *parts, f"(The error itself: {type(exc).__name__}: {exc})"]
        raise CheckFailed("\n".join(line for line in lines if line)) from None


def run_causal(module, x: torch.Tensor, replacement: torch.Tensor) -> dict:
    """Probe side: the output, on the same input again (deterministic?), each batch element alone
    (is the batch mixed?), with one later token changed at a time, and the sub-modules' values."""
    x_before = x.clone()
    with torch.no_grad():
        with layer.outside_modules(module) as outside:
            out = module(x)
        x_changed = not torch.equal(x_before, x)
        again = module(x_before.clone())
        alone = [module(x_before[b : b + 1].clone()) for b in range(x.shape[0])] if x.dim() == 3 else None
        leaks = [module(changed_at(x_before, replacement, j)) for j in range(1, x.shape[-2])]
    steps = layer.trace(module, x_before.clone(), with_inputs=True)
    return {"out": out, "x_changed": x_changed, "again": again, "alone": alone, "leaks": leaks, "steps": steps,
            "ignored": layer.unused_outputs(module, x_before.clone()), "grads": gradients(module, x_before),
            "outside": outside, "longer": _longer(module, x_before)}


def _longer(module, x: torch.Tensor) -> dict:
    """The module, already called on x, called on x with one token more: its first T rows (causal:
    they must equal the output on x), or the error; a mask or table kept from the first call shows."""
    T = x.shape[-2]
    try:
        with torch.no_grad():
            out = module(torch.cat([x, x[..., :1, :]], dim=-2))  # (..., T + 1, C)
        return {"out": out[..., :T, :] if isinstance(out, torch.Tensor) and out.dim() >= 2 else out}
    except Exception as exc:  # noqa: BLE001 - the judge says what it means
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


KEPT = ("the layer keeps something from its first call (a mask or table built once, sized for the first input, "
        "and kept on self or in a global): build it in forward for each input's own T (or build it once for the "
        "largest T and slice it)")


@functools.lru_cache(maxsize=16)
def _future(T: int) -> torch.Tensor:
    """(T, T) True where key j > query i (made once per T: a search calls ``attend`` hundreds of times;
    never written to)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def attend(q, k, v, *, scale, mask="causal", dim=-1, transposed=False, softmaxes=1):
    """Attention, q, k, v (..., T, hs) -> (..., T, hs), under a named mistake (float64)."""
    T = q.shape[-2]
    future = _future(T)
    hidden = (future if mask == "causal" else future.T if mask == "inverted"
              else future | torch.eye(T, dtype=torch.bool) if mask == "diagonal" else future & ~future)
    scores = (k @ q.transpose(-2, -1) if transposed else q @ k.transpose(-2, -1)) * scale  # (..., T, T)
    weights = scores.masked_fill(hidden, float("-inf"))
    for _ in range(softmaxes):  # two: the weights put through a softmax again
        weights = torch.softmax(weights, dim=dim)
    return (weights.masked_fill(future, 0.0) if mask == "after" else weights) @ v


def attention_variants(run, *, C: int, T: int, hs: int, over=None, got=None) -> dict[str, torch.Tensor]:
    """The classic mistakes of scaled, masked attention: ``run(**kwargs)`` computes the layer with
    ``attend``'s keyword arguments. ``over``: (dim, its name) a softmax without dim= picks; ``got``:
    the student's output, for a scale of the scores that none of them lists (``fitted_scale``)."""
    s = 1 / math.sqrt(hs)
    sizes = {"emb_dim": C, "T, the sequence length": T, "2 × head_dim": 2 * hs}

    def also(n: int, own: str) -> str:  # a case's sizes can coincide: say so rather than guess
        others = [name for name, value in sizes.items() if value == n and name != own]
        return f" ({n} is also {' and '.join(others)} here: check which one you used)" if others else ""

    variants = {
        f"you divided the scores by sqrt(emb_dim) = sqrt({C}) instead of sqrt(head_dim) = sqrt({hs}){also(C, 'emb_dim')}":
            run(scale=1 / math.sqrt(C)),
        "you forgot to scale the scores by 1/sqrt(head_dim)": run(scale=1.0),
        f"you divided the scores by head_dim = {hs}, not by its square root": run(scale=1 / hs),
        "you multiplied the scores by sqrt(head_dim) instead of dividing": run(scale=math.sqrt(hs)),
        f"you divided the scores by sqrt(T) = sqrt({T}), the sequence length, instead of sqrt(head_dim) = "
        f"sqrt({hs}){also(T, 'T, the sequence length')}": run(scale=1 / math.sqrt(T)),
        "you divided the output by sqrt(head_dim) instead of the scores: the scale belongs inside the "
        "softmax, on q @ k.T": run(scale=1.0) * s,
        "you applied the mask after the softmax (zeroing weights leaves rows that no longer sum to 1); "
        "mask the scores, then take the softmax": run(scale=s, mask="after"),
        "you took the softmax over the queries (dim=-2) instead of over the keys (dim=-1)": run(scale=s, dim=-2),
        "you forgot the causal mask": run(scale=s, mask="none"),
        "the mask is inverted: it hides the past and shows the future": run(scale=s, mask="inverted"),
        "the mask also hides the diagonal: a token may attend to itself": run(scale=s, mask="diagonal"),
        "you computed k @ q.T instead of q @ k.T (the scores are transposed)": run(scale=s, transposed=True),
        "the softmax is applied twice: the weights, put through a softmax again, give the masked (future) keys a "
        "weight and flatten the rest; one softmax, of the masked scores": run(scale=s, softmaxes=2),
    }
    if over:
        variants[
            f"you took the softmax over axis {over[0]}, {over[1]}, instead of over the keys (dim=-1): "
            f"F.softmax without dim= picks dim={over[0]} for a {3 + over[0]}-D tensor"
        ] = run(scale=s, dim=over[0])
    variants.update(fitted_scale(run, got, C=C, T=T, hs=hs))
    return variants


def fitted_scale(run, got, *, C: int, T: int, hs: int) -> dict[str, torch.Tensor]:
    """``{message: output}`` for the scale of the scores that reproduces ``got`` (within 1e-4; the
    caller compares at the case's tolerance), found by a search: a log-spaced grid from 1e-4 to 100,
    then a golden-section refinement. Any other factor than 1/sqrt(head_dim), named by the sizes it
    matches; ``{}`` when there is none."""
    if not isinstance(got, torch.Tensor) or not got.is_floating_point() or not bool(torch.isfinite(got).all()):
        return {}
    g = got.detach().double()
    outputs: dict[float, torch.Tensor] = {}  # by log-scale: every layer output is computed once

    def gap(log_scale: float) -> float:
        out = outputs.setdefault(log_scale, run(scale=math.exp(log_scale)))
        return float((out - g).abs().max()) if out.shape == g.shape else math.inf

    lo, hi, n = math.log(1e-4), math.log(100.0), 60  # neighbouring scales 1.26 apart
    grid = [lo + (hi - lo) * i / n for i in range(n + 1)]
    best = min(range(n + 1), key=lambda i: gap(grid[i]))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, n)]
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    for _ in range(50):  # golden section (the bracket shrinks 1e10-fold): each step keeps one of its two points and computes one new
        if gap(c) <= gap(d):
            b, d = d, c
            c = b - ratio * (b - a)
        else:
            a, c = c, d
            d = a + ratio * (b - a)
    log_scale = (a + b) / 2
    scale = math.exp(log_scale)
    if abs(scale * math.sqrt(hs) - 1) < 1e-6 or gap(log_scale) > 1e-4 * max(1.0, float(g.abs().max())):
        return {}  # the right scale, or none reproduces got (the caller compares at the case's tolerance)
    divisor = 1 / scale
    readings = {f"{hs} = head_dim": hs, f"{2 * hs} = 2 × head_dim": 2 * hs, f"{hs / 2:g} = head_dim / 2": hs / 2,
                f"{hs * hs} = head_dim²": hs * hs, f"{C} = emb_dim": C, f"{T} = T": T,
                f"sqrt({C}) = sqrt(emb_dim)": math.sqrt(C), f"sqrt({T}) = sqrt(T)": math.sqrt(T)}
    named = [text for text, value in readings.items() if abs(divisor - value) <= 1e-4 * value]
    how = f"divided by {' or '.join(named)}" if named else f"multiplied by {scale:.6g} (divided by {divisor:.6g})"
    precedence = ("; `x / head_dim ** 1/2` divides by head_dim and then by 2, and `x / (head_dim ** 1/2)` by "
                  "head_dim / 2: ** binds tighter than /, so 1/2 is not the exponent: write head_dim ** 0.5 or "
                  "math.sqrt(head_dim)" if any(abs(divisor - v) <= 1e-4 * v for v in (2 * hs, hs / 2)) else "")
    return {f"the scores are {how} where they should be divided by sqrt(head_dim) = sqrt({hs}) "
            f"= {math.sqrt(hs):.6g}{precedence}": outputs[log_scale]}


def judge_causal(run: dict, expected: torch.Tensor, variants, diagnosis: dict, *, reference, x, noun) -> None:
    """Judge side, for a causal layer's output: the kit's ``judge_output``, with a leak from the
    future found first (shape, determinism and batch come before it: a leak would be their echo)."""
    what, tol, out = diagnosis["what"], diagnosis["atol"], run.get("out")
    judge_output(run, expected, diagnosis, variants=variants, reference=reference, inputs=(x,),
                 known={"the input x": x}, noun=noun,
                 leak=lambda: first_leak(out, run.get("leaks"), tol, what, tail=": query {i} attends to key {j}"),
                 leak_means=", so the layer lets the future in: the causal mask is missing or wrong, an operation "
                 "mixes time steps, or the masked keys keep a weight (a softmax written by hand must subtract the "
                 "maximum inside the exp, exp(score - max), where exp(-inf) stays 0).")
    longer, T = run.get("longer"), x.shape[-2]
    if isinstance(longer, dict) and "error" in longer:
        raise CheckFailed(f"{what}: right on this input, but then called on a longer one (T + 1 = {T + 1} tokens) it "
                          f"raised {longer['error']}: {KEPT}.")
    got = longer.get("out") if isinstance(longer, dict) else None
    if isinstance(got, torch.Tensor) and (got.shape != expected.shape or not close(expected, got, tol, tol)):
        evidence = first_mismatch(expected, got, tol, tol) if got.shape == expected.shape else f"shape {tuple(got.shape)}"
        raise CheckFailed(f"{what}: right on this input, but then called on the same tokens and one more (T + 1 = "
                          f"{T + 1}), its outputs for the first {T} positions changed, which a causal layer's cannot: "
                          f"{KEPT}. Evidence: {evidence}.")
