"""Mismatch rules about the output's values as a whole: non-finite entries, a second call that
differs, batch elements mixed, whole numbers, a constant factor or offset, normalised along
another axis."""

from __future__ import annotations

import math
from typing import Callable

import torch

from helpers.checks.diagnose.case import _Case, _where
from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.words import _axis, _num, _short
from helpers.checks.evidence import first_mismatch


def rule_nonfinite(c: _Case) -> Finding:
    e, g = c.e, c.g
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        kind = "NaN" if torch.isnan(g[first]) else "infinite"
        nans, infs = int(torch.isnan(g)[bad].sum()), int(torch.isinf(g)[bad].sum())
        where = _where(bad, c)
        spread = f" ({where})" if where else ""
        counts = ", ".join(x for x in (f"{nans} NaN" if nans else "", f"{infs} inf" if infs else "") if x)
        causes = (" NaN comes from 0 × inf, inf - inf, 0 / 0 or inf / inf (a 0/1 mask multiplied by -inf gives NaN "
                  "where it is 0: use masked_fill or torch.where; exp of a large number on both sides of a fraction, as "
                  "a tanh or a softmax written out with exp has, is inf / inf), a softmax over a row that is "
                  "-inf everywhere, or the sqrt or log of a negative number." if nans else
                  " An infinity comes from an overflow (exp of a large number: subtract the maximum first), a "
                  "division by zero or log(0).")
        return Finding(
            f"the output has {kind} values where the reference is finite{spread}.{causes} Evidence: "
            f"{counts} of {g.numel()} entries; the first at index {first}, where {_num(e[first].item())} "
            "was expected.", f"{kind} values"
        )
    missing = torch.isfinite(g) & ~torch.isfinite(e)
    if missing.any():
        first = tuple(int(i) for i in missing.nonzero()[0])
        where = _where(missing, c)
        spread = f" ({where})" if where else ""
        return Finding(
            f"the output is finite where the reference is {_num(e[first].item())}{spread}. Evidence: "
            f"{int(missing.sum())} entries; the first at index {first}: expected {_num(e[first].item())}, "
            f"got {_num(g[first].item())}.", "finite where the reference is not"
        )
    return NOTHING


def rule_determinism(c: _Case) -> Finding:
    again = c.again
    if not isinstance(again, torch.Tensor) or again.shape != c.got.shape:
        return NOTHING
    a = again.detach().double()
    if bool(torch.isclose(a, c.g, atol=c.atol, rtol=c.rtol, equal_nan=True).all()):
        return NOTHING
    return Finding(
        "called twice on the very same input, it returned two different outputs, so the function is "
        "not deterministic: dropout left in training mode, random numbers drawn (torch.randn, "
        "torch.rand…) without the generator you were given, or state kept from one call to the next. "
        "Make it deterministic first; the values cannot be judged until then. Evidence: first call vs "
        f"second call: {first_mismatch(c.g, a, c.atol, c.rtol)}.", "not deterministic"
    )


def _alone_outputs(c: _Case) -> list[torch.Tensor] | None:
    alone = c.alone
    if not isinstance(alone, list) or c.expected.dim() == 0 or len(alone) != c.expected.shape[0]:
        return None
    row = tuple(c.expected.shape[1:])
    outs = []
    for out in alone:
        if not isinstance(out, torch.Tensor):
            return None
        if tuple(out.shape) == (1, *row):
            out = out[0]
        if tuple(out.shape) != row:
            return None
        outs.append(out.detach().double())
    return outs


def rule_batch(c: _Case) -> Finding:
    outs = _alone_outputs(c)
    if outs is None:
        return NOTHING
    B = len(outs)
    right = [c.close(outs[b], c.e[b]) for b in range(B)]
    batched_right = [c.close(c.g[b], c.e[b]) for b in range(B)]
    name = c.letter(0) or "B"
    if all(right) and not all(batched_right):
        wrong = [b for b in range(B) if not batched_right[b]]
        b = wrong[0]
        return Finding(
            f"each batch element run alone gives the right output, but run together they do not "
            f"(element{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} of {B}): the batch "
            f"elements are mixed, by an operation over axis 0 ({name}), a reshape/view that crosses the "
            "batch, or a mean/sum over the wrong axis (one that includes the batch). Evidence: element "
            f"{b} run alone matches; in the batch, {first_mismatch(c.e[b], c.g[b], c.atol, c.rtol)}.", "batch mixed"
        )
    if not all(right):
        b = right.index(False)
        c.alone_note = (
            f"This is not a batching problem: batch element {b} run alone (a batch of one) is "
            "already wrong."
        )
    return NOTHING  # (the note is said with the message: no cause)


_FACTOR_NAMES: list[tuple[str, Callable[[float], float]]] = [
    ("sqrt({k})", math.sqrt),
    ("1/sqrt({k})", lambda s: 1 / math.sqrt(s)),
    ("{k}", float),
    ("1/{k}", lambda s: 1 / s),
]


def _name_factor(factor: float, sizes: dict[str, int] | None) -> tuple[str, str] | None:
    """(expression, likely reason) when ``factor`` equals an expression of the sizes within 1e-3."""
    candidates = [("-1", -1.0), ("2", 2.0), ("1/2", 0.5)]
    for letter, s in (sizes or {}).items():
        if isinstance(s, int) and s > 1:
            for pattern, fn in _FACTOR_NAMES:
                candidates.append((pattern.format(k=letter), fn(s)))
    found = [(expr, v) for expr, v in candidates if abs(factor - v) <= 1e-3 * abs(v)]
    if not found:
        return None
    names = [expr for expr, _ in found]  # 2 is also sqrt(C) when C = 4: name every reading, assert none
    label = " = ".join(names)
    if names[0] == "-1":
        return label, "the sign is flipped (a subtraction the wrong way round, or a stray minus)"
    if names[0].startswith("1/") or names[0] == "1/2":
        bases = " or ".join(n[2:] if n.startswith("1/") else f"1/({n})" for n in names)
        return label, (
            f"the output is divided by {bases} once too often (or a multiplication by it is missing)"
        )
    bases = " or ".join(names)
    return label, f"the output is missing a division by {bases} (or has an extra multiplication by it)"


def rule_rounded(c: _Case) -> Finding:
    """Whole numbers where the reference has fractions: the reference rounded down (or toward 0)."""
    e, g = c.e, c.g
    if not c.finite() or not bool((g == g.round()).all()) or bool((e == e.round()).all()) or not bool(g.any()):
        return NOTHING  # (all zeros: as likely a missing term as a rounding)
    for how, rounded in (("rounded down", e.floor()), ("rounded toward 0", e.trunc())):
        if c.close(g, rounded):
            return Finding(f"the output is the reference {how} to whole numbers: an integer division (//) or int() "
                           f"where / was meant, or a result stored in an integer dtype. Evidence: {c.evidence()}.",
                           "rounded to whole numbers")
    return NOTHING


def rule_factor(c: _Case) -> Finding:
    e, g = c.e, c.g
    if e.numel() < 2:  # any two numbers differ by some factor: one number establishes nothing
        return NOTHING
    if not (torch.isfinite(e).all() and torch.isfinite(g).all()):
        return NOTHING
    ee = float((e * e).sum())
    if ee == 0:
        return NOTHING
    factor = float((e * g).sum()) / ee
    if abs(factor - 1) > 1e-9 and c.close(g, factor * e) and not c.close(g, e):
        named = _name_factor(factor, c.sizes)
        if named and named[0] == "-1":
            return Finding(
                "the output is the reference with its sign flipped (got = -expected everywhere): a "
                f"subtraction the wrong way round, or a stray minus. Evidence: {c.evidence()}.", "sign flipped"
            )
        if named:
            expr, reason = named
            value = "" if _num(factor) in expr.split(" = ") else f" = {_num(factor)}"
            return Finding(
                f"the output is off by a constant factor {expr}{value} everywhere "
                f"(got = {expr} × expected): {reason}. Evidence: {c.evidence()}.", f"factor {expr}"
            )
        return Finding(
            f"the output is off by a constant factor {_num(factor)} everywhere (got = {_num(factor)} × "
            f"expected), a factor that matches none of the case's sizes. Evidence: {c.evidence()}.", "constant factor"
        )
    offset = float((g - e).mean())
    if offset != 0 and c.close(g, e + offset) and not c.close(g, e):
        return Finding(
            f"the output is the reference shifted by a constant {_num(offset)} everywhere (got = expected "
            f"+ {_num(offset)}): a term added to every entry, or one left out. Evidence: {c.evidence()}.",
            "constant offset"
        )
    return NOTHING


def rule_normalised_axis(c: _Case) -> Finding:
    """Softmax-like outputs: the reference's entries sum to 1 along one axis, the student's along another."""
    e, g = c.e, c.g
    if e.dim() < 2 or not (torch.isfinite(e).all() and torch.isfinite(g).all()) or (e < -1e-12).any():
        return NOTHING

    def sums_to_one(t, k):
        return bool(((t.sum(dim=k) - 1).abs() <= 1e-6 + c.atol).all())

    mine = [k for k in range(e.dim()) if sums_to_one(e, k) and e.shape[k] > 1]
    theirs = [k for k in range(g.dim()) if sums_to_one(g, k) and g.shape[k] > 1]
    if len(mine) != 1 or not theirs or mine[0] in theirs:
        return NOTHING
    k, j = mine[0], theirs[0]
    return Finding(
        f"the output is normalised along {_axis(j, c.axes)} instead of {_axis(k, c.axes)}: its entries "
        f"sum to 1 along {_axis(j, c.axes)}, the reference's along {_axis(k, c.axes)} (a softmax or a "
        f"division by a sum over the wrong dim). Evidence: sums along {_axis(k, c.axes)} are "
        f"{_short(g.sum(dim=k))}, expected all 1.", "normalised along another axis"
    )


def rule_float32_precision(c: _Case) -> Finding:
    """A float64 case whose output agrees with the reference to float32's precision and no better,
    with errors of both signs relative to each entry (rounding, not a factor or an offset such as
    another eps gives)."""
    if c.dtype != torch.float64 or c.got.dtype != torch.float64 or c.got.shape != c.expected.shape or not c.finite():
        return NOTHING
    e, g = c.e, c.g
    if e.numel() < 8 or not bool(torch.isclose(g, e, rtol=2e-6, atol=2e-6 * float(e.abs().max())).all()):
        return NOTHING
    nonzero = e.abs() > 1e-3 * float(e.abs().max())
    relative, absolute = ((g - e) / e)[nonzero], (g - e)[nonzero]

    def mixed(d: torch.Tensor) -> bool:  # errors of both signs: not a factor (relative) nor an offset (absolute)
        return min(float((d > 0).double().mean()), float((d < 0).double().mean())) >= 0.15

    if relative.numel() < 8 or float(relative.abs().max()) < 1e-9 or not (mixed(relative) and mixed(absolute)):
        return NOTHING
    return Finding(
        "the values agree with the reference to about float32's precision and no better (relative errors of "
        f"up to {float(relative.abs().max()):.2g}, of both signs, where float64 keeps about 16 digits): part of "
        "the computation ran in float32 and came back as float64. Is there a .float() call, a tensor made "
        "without dtype= (torch.ones, torch.arange, torch.tensor give float32), or a float32 weight mixed in? "
        f"Compute in x's dtype throughout. Evidence: {c.evidence()}.", "float32 precision in a float64 case")
