"""Checks for lesson 02 (language models without context): cross_entropy(logits, targets), the
loss by hand: its value, its gradient, and finite values for large logits.

Shape legend: B batch, T sequence length, V vocabulary size (n_vocab), N positions (B*T). No two of
them are equal in any case.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.checks.core import (
    CheckFailed,
    close,
    describe,
    expect_callable,
    first_mismatch,
    identify,
    runs,
    visible_and_hidden,
)
from helpers.checks.diagnose import diagnose, explain_mismatch
from helpers.checks.errors import attempt, raise_caught
from helpers.checks.verdict import tolerance
from helpers.reference import language_models as ref

# ---------------------------------------------------------------------------------------------
# cross_entropy(logits (..., V), targets (...)) -> 0-d tensor

# (seed, leading shape, V, kind, dtype). kind: "normal" (randn * 3), "large" (every row near
# +1000: a naive exp overflows), "spread" (one row near +600, one near -600: a single maximum for
# the whole tensor underflows), "uniform" (all zeros: the loss is ln V), "far" (each target's
# logit 800 below its row's largest: its softmax underflows to 0, so log(softmax) is -inf),
# "transposed" (logits and targets not contiguous, as after a transpose: .view cannot flatten them).
CE_CASES = [
    (50, (2, 3), 7, "normal", torch.float64),
    (51, (4,), 9, "normal", torch.float64),
    (52, (3,), 5, "large", torch.float64),
    (53, (2,), 6, "spread", torch.float64),
]
CE_HIDDEN_CASES = [
    (54, (3, 4), 6, "normal", torch.float32),
    (55, (5,), 256, "uniform", torch.float64),
    (56, (2, 5), 3, "large", torch.float32),
    (57, (4, 2, 3), 11, "normal", torch.float64),
    (58, (3,), 5, "far", torch.float64),
    (59, (3, 4), 5, "transposed", torch.float32),
]
_LARGE = {torch.float32: 100.0, torch.float64: 1000.0}  # exp overflows beyond 88.7 and 709.8


def _ce_inputs(seed, lead, V, kind, dtype):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*lead, V, generator=g, dtype=torch.float64)
    targets = torch.randint(0, V, lead, generator=g)
    if kind == "large":
        logits = logits + _LARGE[dtype]
    elif kind == "spread":
        signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(lead[-1])], dtype=torch.float64)
        logits = logits + 600.0 * signs.reshape(*([1] * (len(lead) - 1)), lead[-1], 1)
    elif kind == "uniform":
        logits = torch.zeros_like(logits)
    elif kind == "far":
        rows = torch.arange(targets.numel())
        flat = logits.reshape(-1, V)  # (N, V), a view: the targets' logits drop far below their rows' largest
        flat[rows, targets.reshape(-1)] = flat.max(dim=-1).values - 800.0
    if kind == "transposed":  # the same numbers, laid out (T, B, ...) in memory: not contiguous, as after a transpose
        return logits.to(dtype).transpose(0, 1).contiguous().transpose(0, 1), targets.T.contiguous().T
    return logits.to(dtype), targets


def _ce_sizes(lead, V) -> dict[str, int]:
    return {**(dict(zip("BT", lead, strict=True)) if len(lead) == 2 else {}), "N": math.prod(lead), "V": V}


def _probe_ce(cases):
    def probe(cross_entropy) -> dict:
        expect_callable(cross_entropy, "cross_entropy")
        found = []
        for case in cases:
            logits, targets = _ce_inputs(*case)
            sizes, V = _ce_sizes(case[1], case[2]), case[2]
            logits.requires_grad_(True)
            run = attempt(cross_entropy, logits, targets, sizes=sizes)
            out = run.get("out")
            if isinstance(out, torch.Tensor) and out.numel() == 1:
                if out.requires_grad:
                    backward = attempt(lambda loss: loss.sum().backward(), out)
                    if "error" in backward:
                        run["backward_raised"] = backward["error"]
                    elif logits.grad is not None:
                        run["grad"] = logits.grad.clone()
                else:
                    run["no_grad"] = True
            # each row alone, as (1, V) logits: is one row's loss right, or only their combination wrong?
            rows, wanted = logits.detach().reshape(-1, V), targets.reshape(-1)
            run["alone"] = [attempt(cross_entropy, rows[i:i + 1].clone(), wanted[i:i + 1].clone(),
                                    sizes={"N": 1, "V": V}).get("out") for i in range(min(len(rows), 24))]
            if len(case[1]) > 1:  # the same values flattened to (N, V): does the shape alone make it raise?
                run["flat_raised"] = "error" in attempt(cross_entropy, rows.clone().requires_grad_(True), wanted.clone(),
                                                        sizes={"N": len(rows), "V": V})
            found.append(run)
        return {"runs": found}

    return probe


#: the words of a loss whose rows were regrouped by a reshape that re-reads memory in order
MEMORY_ORDER = ("the logits were regrouped with a reshape {how}, which re-reads the numbers in memory order: each "
                "'row' of V scores then mixes the scores of several positions, and the targets meet the wrong ones. "
                "reshape never moves an axis: flatten the (..., V) logits as they are, reshape(-1, V), or move the "
                "class axis with transpose / permute")


def memory_order_variants(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The mean cross-entropy of (B, T, V) logits regrouped in memory order where an axis was to move."""
    if logits.ndim != 3 or logits.shape[-1] == logits.shape[1]:
        return {}
    B, T, V = logits.shape
    y = targets.reshape(B, T)
    return {
        MEMORY_ORDER.format(how="(reshape(V, -1).T, as if it moved the class axis to the front)"):
            F.cross_entropy(logits.reshape(V, -1).T, y.reshape(-1)),
        MEMORY_ORDER.format(how="to (B, V, T), as if it moved the classes to dimension 1 (that is transpose(1, 2))"):
            F.cross_entropy(logits.reshape(B, V, T), y),
        MEMORY_ORDER.format(how="(-1, V) after the classes were moved to dimension 1 (permute(0, 2, 1)): after a "
                                "permute the last axis is T"):
            F.cross_entropy(logits.permute(0, 2, 1).reshape(-1, V), y.reshape(-1)),
    }


def ce_variants(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The loss under each classic mistake (float64 inputs)."""
    V = logits.shape[-1]
    rows, wanted = logits.reshape(-1, V), targets.reshape(-1)  # (N, V), (N,)
    N = rows.shape[0]

    def loss(log_probs):  # (N, V) -> the mean of -log p of the targets
        return -log_probs[torch.arange(N), wanted].mean()

    logp = torch.log_softmax(rows, dim=-1)  # (N, V)
    shifted = rows - rows.max(dim=-1, keepdim=True).values  # (N, V)
    by_column = rows - rows.max(dim=0, keepdim=True).values  # (N, V): one maximum per vocabulary entry
    lse = shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, 1)
    total = loss(logp) * N  # the sum of the N losses
    variants = {
        "you summed over the positions instead of taking the mean": total,
        f"you averaged over the vocabulary too (divided by N·V instead of N); the mean is over the {N} "
        "positions only": total / (N * V),
        "the sign is wrong: the loss is the *negative* log-probability": -loss(logp),
        "you used log base 2 (or 10); use the natural log": loss(logp) / math.log(2),
        "you used log base 10; use the natural log": loss(logp) / math.log(10),
        "the log of the sum of exponentials is taken in base 2 (log2): the normaliser is the natural log, "
        "like the rest of the loss": loss(shifted - lse / math.log(2)),
        "the log of the sum of exponentials is taken in base 10 (log10): the normaliser is the natural log, "
        "like the rest of the loss": loss(shifted - lse / math.log(10)),
        "you forgot the log: that is the mean of -p, not of -log p": -logp.exp()[torch.arange(N), wanted].mean(),
        "you took every target in every row (logp[:, targets]); pick one entry per row, "
        "logp[torch.arange(N), targets]": -logp[:, wanted].mean(),
        "you did not normalise: the logits themselves are not log-probabilities; subtract the log of the "
        "sum of exponentials": loss(rows),
        "you did not normalise: subtracting the row's maximum is not enough, the log of the sum of the "
        "exponentials must be subtracted too": loss(shifted),
        "the log of the sum of exponentials is added instead of subtracted": loss(shifted + lse),
        "you subtracted the sum of the exponentials, not its log": loss(shifted - lse.exp()),
        "you took log1p of the sum of exponentials, log(1 + sum): the normaliser is log(sum) itself":
            loss(shifted - lse.exp().log1p()),
        "the log-sum-exp is of the raw logits while the rest is shifted by the row's maximum: subtract the "
        "log-sum-exp of the same shifted values": loss(shifted - rows.exp().sum(dim=-1, keepdim=True).log()),
        "you took the mean of the exponentials inside the log instead of their sum: that makes every "
        f"loss smaller by ln V = ln {V}": loss(shifted - (lse - math.log(V))),
        "the softmax runs over the positions (dim 0 of the (N, V) rows), not over the vocabulary "
        "(dim=-1): every row must be normalised on its own": loss(torch.log_softmax(rows, dim=0)),
        "the maximum is taken over the positions (dim 0 of the (N, V) rows), not over each row "
        "(dim=-1): subtracting a different number from each entry of a row changes its softmax": loss(
            by_column - by_column.exp().sum(dim=-1, keepdim=True).log()),
        "the sum of the exponentials runs over the positions (dim 0 of the (N, V) rows), not over "
        "each row's vocabulary (dim=-1)": loss(shifted - shifted.exp().sum(dim=0, keepdim=True).log()),
        "you averaged the log-probabilities of every class, not only the target's: pick the one entry "
        "per row whose column is the target": -logp.mean(),
        "the targets are off by one: you picked column target - 1": loss(logp.roll(1, dims=-1)),
        "every target is read from the first row, logp[0, targets], as a gather with an index of shape (1, N) "
        "(targets.unsqueeze(0)) does: one target per row needs an index of shape (N, 1), targets.unsqueeze(1)":
            -logp[0, wanted].mean(),
        "the log-sum-exp is of the values shifted by the row's maximum, but it is subtracted from the unshifted "
        "logits: every log-probability comes out too large by its row's maximum; subtract it from the same "
        "shifted values": loss(rows - lse),
    }
    if N and int(wanted.max()) < N:  # a gather along the rows runs only when every target is a valid row
        variants["you gathered along dim 0, the rows: gather(0, t) picks logp[t[i], 0], column 0 of row t[i]; the "
                 "target is a column of each row: logp.gather(1, targets.unsqueeze(1)), or "
                 "logp[torch.arange(N), targets]"] = -logp.gather(0, wanted.unsqueeze(1)).squeeze(1).mean()
    variants.update(memory_order_variants(logits, targets))
    for dim in range(logits.ndim - 1) if logits.ndim >= 3 else ():
        wrong = torch.log_softmax(logits, dim=dim).reshape(-1, V)
        variants[f"the softmax runs over dimension {dim}, not over the vocabulary (the last dimension)"] = loss(wrong)
    for name, k in _ce_sizes(tuple(targets.shape), V).items():
        if k not in (1, N):
            variants[f"you divided the sum of the {N} losses by {name} = {k}; the mean divides by the number "
                     f"of positions, N = {N}"] = total / k
    return variants


def _ce_alone(what: str, run: dict, logits, targets, tol: float) -> str | None:
    """What the student's loss of each row alone establishes: whether one row's loss is right."""
    V = logits.shape[-1]
    rows, wanted = logits.double().reshape(-1, V), targets.reshape(-1)
    alone = run.get("alone")
    n = min(len(rows), 24)
    if not isinstance(alone, list) or len(alone) != n or not all(
            isinstance(a, torch.Tensor) and a.numel() == 1 for a in alone):
        return None
    mine = torch.stack([a.reshape(()).double() for a in alone])  # (n,)
    ours = -torch.log_softmax(rows[:n], dim=-1)[torch.arange(n), wanted[:n]]  # (n,)
    if close(ours, mine, tol, tol):
        return (f"{what}: each row alone, given as (1, V) logits, gets the right loss, but the rows together "
                "do not: the rows are combined wrongly (an operation across the rows, such as a max, a sum or "
                "a softmax over the positions instead of over dim=-1, or an average over something other "
                f"than the {len(rows)} positions).")
    rule, message = diagnose(ours, mine, what="the loss of each row given alone as (1, V) logits", atol=tol,
                             rtol=tol, axes=("N",), sizes={"N": n, "V": V})
    lnv = " (ln V: a mean where a sum belongs, or the reverse)" if f"{-math.log(V):.4g}" in message else ""
    return f"{what}: already wrong for a single row, so the mistake is in one row's loss: {message}{lnv}"


def _judge_ce(cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        for case, run in zip(cases, found, strict=True):
            seed, lead, V, kind, dtype = case
            logits, targets = _ce_inputs(*case)
            what = f"cross_entropy(logits {tuple(logits.shape)} {str(dtype).replace('torch.', '')}, targets {tuple(targets.shape)})"
            message = run.get("message", "")
            if "error" in run and len(lead) > 1 and run.get("flat_raised") is False:
                raise_caught(what, run, hint="The same values flattened, (N, V) logits and (N,) targets, give no error: "
                               "flatten first, logits.reshape(-1, V) and targets.reshape(-1).")
            if "in-place" in message or "inplace" in message:
                raise_caught(what, run, hint="The in-place change is the cause: do not change logits in place (x -= m); compute a new tensor (x - m).")
            raise_caught(what, run)
            out = run.get("out")
            if isinstance(out, float):
                raise CheckFailed(
                    f"{what} returned the Python float {out!r}; return the 0-d tensor (no .item()), so "
                    "that the loss can be differentiated."
                )
            if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(lead):
                raise CheckFailed(
                    f"{what} returned one loss per position, shape {tuple(out.shape)}; return their mean, "
                    "a single number (a 0-d tensor)."
                )
            if not isinstance(out, torch.Tensor) or out.numel() != 1:
                raise CheckFailed(f"{what} should return a 0-d tensor, got {describe(out)}.")
            expected = ref.cross_entropy(logits.double(), targets)
            tol, got = tolerance(dtype), out.reshape(())
            if not torch.isfinite(got):
                if kind == "large":
                    raise CheckFailed(
                        f"{what} returned {got.item()} for logits near {_LARGE[dtype]:.0f}: "
                        f"exp overflows to inf (in {str(dtype).replace('torch.', '')}, beyond "
                        f"exp({math.log(torch.finfo(dtype).max):.1f})) and inf/inf is nan. Subtract each "
                        f"row's maximum before exp. Expected {expected.item():.6g}."
                    )
                if kind == "spread":
                    raise CheckFailed(
                        f"{what} returned {got.item()} for one row of logits near +600 and one near -600: "
                        "you subtracted a single maximum for the whole tensor, so exp(-1200) underflows to 0 "
                        "and log(0) = -inf. Subtract each row's own maximum (max over dim=-1, keepdim=True). "
                        f"Expected {expected.item():.6g}."
                    )
                if kind == "far":
                    raise CheckFailed(
                        f"{what} returned {got.item()} where each target's logit is 800 below its row's "
                        "largest. Two computations give that: a log of a softmax (the target's softmax underflows "
                        "to 0, and log(0) = -inf), or an exp of logits shifted by anything but each row's largest "
                        "(what is left is hundreds, and its exp overflows). Compute the log-softmax directly, "
                        "shifted by each row's maximum: shifted - log(sum(exp(shifted))). "
                        f"Expected {expected.item():.6g}."
                    )
            cut = run.get("no_grad") and bool(torch.isfinite(got)) and close(expected, got, 1e-4, 1e-4)
            if (got.dtype != dtype and not cut) or not torch.isfinite(got):
                raise CheckFailed(explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, dtype=dtype))
            if not close(expected, got, tol, tol) and not cut:
                label = identify(got, ce_variants(logits.double(), targets), tol, tol)
                evidence = f"expected {expected.item():.10g}, got {got.item():.10g}"
                if label:
                    raise CheckFailed(f"{what}: {label}. Evidence: {evidence}.")
                raise CheckFailed(f"{_ce_alone(what, run, logits, targets, tol) or what + ':'} Evidence: {evidence}.")
            if run.get("no_grad"):
                raise CheckFailed(
                    f"{what} has the right value but is cut off from the logits (no grad_fn): do not use "
                    ".item(), .detach(), .data, numpy or torch.tensor(...) on the way"
                    + (f"; it also comes back as {got.dtype}, not {dtype}: torch.tensor(...) of a Python number is "
                       "float32" if got.dtype != dtype else "") + "."
                )
            if "backward_raised" in run:
                raise CheckFailed(f"{what}: backward() raised {run['backward_raised']}.")
            if out.dim() != 0:
                raise CheckFailed(
                    f"{what} has the right value, but as a tensor of shape {tuple(out.shape)}, not a 0-d "
                    "tensor (shape ()): a reduction with dim= (or a gather or indexing that keeps an axis) left "
                    "an axis of size 1. Average over every position at once, .mean() with no dim, or drop the "
                    "axis (f\"{loss:.3f}\" raises a TypeError for anything but a 0-d tensor)."
                )
            x = logits.detach().double().requires_grad_(True)
            ref.cross_entropy(x, targets).backward()
            grad = run.get("grad")
            if not isinstance(grad, torch.Tensor) or grad.shape != x.shape or not close(x.grad, grad, tol, tol):
                evidence = first_mismatch(x.grad, grad, tol, tol) if isinstance(grad, torch.Tensor) and \
                    grad.shape == x.shape else f"the gradient is {describe(grad)}"
                raise CheckFailed(f"{what}: the value is right but the gradient is not ({evidence}); something "
                                  "on the way is detached.")
        shapes = ", ".join(f"{(*c[1], c[2])} {c[3]}" for c in cases)
        return (
            f"cross_entropy: logits {shapes}: value and gradient match the reference, finite for large logits."
        )

    return judge


check_cross_entropy, check_cross_entropy_hidden = visible_and_hidden(
    "check_cross_entropy", _probe_ce, _judge_ce, CE_CASES, CE_HIDDEN_CASES
)
