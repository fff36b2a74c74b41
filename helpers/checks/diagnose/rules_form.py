"""Mismatch rules about the output's form: its shape (which axis, a missing or extra one, swapped
axes, a cat or slice along the wrong axis) and its dtype."""

from __future__ import annotations

import itertools

import torch

from helpers.checks.diagnose.case import _Case
from helpers.checks.diagnose.finding import Finding, named
from helpers.checks.diagnose.words import _axis, _letter, _name, legend_shape


def _cut_along(c: _Case, exp_shape: tuple, got_shape: tuple) -> str:
    """Two axes off by the same amount, one shorter and one longer: a slice made along the wrong axis."""
    off = [k for k, (a, b) in enumerate(zip(exp_shape, got_shape, strict=True)) if a != b]
    if len(off) != 2:
        return ""
    (i, j) = sorted(off, key=lambda k: got_shape[k] - exp_shape[k])
    cut = exp_shape[i] - got_shape[i]
    if cut <= 0 or got_shape[j] - exp_shape[j] != cut:
        return ""
    return (f" A{_axis(j, c.axes)[1:]} kept {cut} more and {_axis(i, c.axes)} {cut} fewer than expected: the "
            f"slice was made along the wrong axis (ids[1:] cuts the first axis, ids[..., 1:] the last).")


def rule_shape(c: _Case) -> Finding:
    """A wrong shape: which axis, named by the legend; a missing or extra axis; swapped axes."""
    return named(_shape(c), "wrong shape")


def _shape(c: _Case) -> str | None:
    exp_shape, got_shape = tuple(c.expected.shape), tuple(c.got.shape)
    if exp_shape == got_shape:
        return None
    sizes = c.sizes
    shapes = f"Evidence: expected shape {legend_shape(exp_shape, sizes)}, got {legend_shape(got_shape, sizes)}."
    if len(exp_shape) == len(got_shape):
        if sorted(exp_shape) == sorted(got_shape):
            return _swapped_axes(c, exp_shape, got_shape, shapes)
        parts = []
        for k, (want, have) in enumerate(zip(exp_shape, got_shape, strict=True)):
            if want == have:
                continue
            is_letter = _letter(have, sizes)
            want_letter = (c.letter(k) if c.letter(k) and c.letter(k) in (sizes or {}) else None) or _letter(want, sizes)
            which = f", which is {_name(is_letter)}" if is_letter else ""
            wanted = f"{want_letter} = {want}" if want_letter else f"size {want}"
            parts.append(f"axis {k} has size {have}{which}; {wanted} was expected there")
        hint = ""
        if c.got.numel() == c.expected.numel() and c.close(c.g, c.e.reshape(got_shape)):
            hint = " The entries are the right ones in the right order: only the final reshape/view is wrong."
        hint = hint or _joined_along(c, exp_shape, got_shape) or _cut_along(c, exp_shape, got_shape) or _stopped_early(
            c, exp_shape, got_shape)
        return f"the output has the wrong shape: {'; '.join(parts)}.{hint} {shapes}"
    if len(got_shape) == len(exp_shape) - 1:
        for k in range(len(exp_shape)):
            if exp_shape[:k] + exp_shape[k + 1:] == got_shape:
                if exp_shape[k] == 1:
                    return (
                        f"axis {k} of size 1 is missing from the output: a dimension that should be kept "
                        "was dropped (keepdim=True left out, or a squeeze). " + shapes
                    )
                letter = c.letter(k) or _letter(exp_shape[k], sizes)
                named = f" ({_name(letter)}, size {exp_shape[k]})" if letter else f" (size {exp_shape[k]})"
                return (
                    f"{_axis(k, None)}{named} is missing from the output: something summed, averaged, "
                    "indexed or squeezed it away. " + shapes
                )
    if len(got_shape) == len(exp_shape) + 1:
        for k in range(len(got_shape)):
            if got_shape[:k] + got_shape[k + 1:] == exp_shape:
                if got_shape[k] == 1:
                    return (
                        f"the output has an extra axis of size 1 at position {k}: a keepdim=True where the "
                        "dimension should be dropped, an unsqueeze, or a None index. " + shapes
                    )
                letter = _letter(got_shape[k], sizes)
                named = f" of size {got_shape[k]}" + (f", which is {_name(letter)}" if letter else "")
                return f"the output has an extra axis{named} at position {k}. " + shapes
    if c.got.numel() == c.expected.numel():
        same_order = c.close(c.g.reshape(-1), c.e.reshape(-1))
        tail = (
            " The entries are the right ones in the right order: only the final reshape/view is wrong."
            if same_order else " It has as many entries as expected, but not the same shape."
        )
        return f"the output has {len(got_shape)} axes, {len(exp_shape)} were expected.{tail} {shapes}"
    return f"the output has {len(got_shape)} axes, {len(exp_shape)} were expected. {shapes}"


def _joined_along(c: _Case, exp_shape, got_shape) -> str:
    """The reference's pieces along one axis joined along another: a cat along the wrong dim."""
    differ = [k for k, (w, h) in enumerate(zip(exp_shape, got_shape, strict=True)) if w != h]
    if len(differ) != 2:
        return ""
    for a, b in (differ, differ[::-1]):
        if got_shape[a] % exp_shape[a] or exp_shape[b] % got_shape[b]:
            continue
        k = got_shape[a] // exp_shape[a]
        if k < 2 or exp_shape[b] // got_shape[b] != k:
            continue
        if c.close(c.g, torch.cat(c.e.chunk(k, dim=b), dim=a)):
            return (f" The output is the reference's {k} pieces along axis {b} joined along axis {a} instead: a "
                    f"torch.cat (or stack) along axis {a} that belongs along axis {b} (torch.cat without dim= "
                    "joins along dim=0).")
    return ""


def _stopped_early(c: _Case, exp_shape, got_shape) -> str:
    """One axis shorter, and what is there is the reference's start along it: the work stopped early."""
    differ = [k for k, (w, h) in enumerate(zip(exp_shape, got_shape, strict=True)) if w != h]
    if len(differ) != 1 or not 0 < got_shape[differ[0]] < exp_shape[differ[0]]:
        return ""
    k, n = differ[0], got_shape[differ[0]]
    if not c.close(c.g, c.e.narrow(k, 0, n)):
        return ""
    return (f" The {n} entr{'y' if n == 1 else 'ies'} along axis {k} that came back are the reference's first "
            f"{n}, and the other {exp_shape[k] - n} are missing: the work stopped early. Does a loop end too soon "
            "(a return inside it, a range that stops short)?")


def _swapped_axes(c: _Case, exp_shape, got_shape, shapes: str) -> str:
    # every way to read got's axes as a reordering of expected's
    n = len(exp_shape)
    perms = [p for p in itertools.permutations(range(n)) if all(got_shape[i] == exp_shape[p[i]] for i in range(n))]
    moved = [i for i in range(n) if got_shape[i] != exp_shape[i]]
    names = [(c.letter(i) or _letter(exp_shape[i], c.sizes) or str(exp_shape[i])) for i in range(n)]
    for p in perms[:200]:
        if c.close(c.g, c.e.permute(*p)):
            order = ", ".join(names[i] for i in p)
            return (
                f"the axes are in the wrong order: the output is exactly the expected one with its axes "
                f"permuted to ({order}), a transpose/permute too many or one missing (not a data "
                f"problem). {shapes}"
            )
    if c.close(c.g, c.e.reshape(got_shape)):
        return (
            "the output holds the right entries in the right memory order, re-cut into the wrong shape: "
            "a view/reshape was used where a transpose (permute) was needed to move the axes. " + shapes
        )
    swapped = " and ".join(f"axis {i}" for i in moved)
    return f"{swapped} have swapped sizes (the values differ as well, not just the order of axes). {shapes}"


def rule_dtype(c: _Case) -> Finding:
    """A wrong dtype: a comparison returned, integers, precision lost or a conversion to float64."""
    return named(_dtype(c), "wrong dtype")


def _dtype(c: _Case) -> str | None:
    want, have = c.dtype, c.got.dtype
    if want == have:
        return None
    name = str(have).replace("torch.", "")
    wanted = str(want).replace("torch.", "")
    if have == torch.bool:
        return (
            f"the output is a bool tensor where {wanted} was expected: a comparison (==, <, >) was "
            "returned instead of the values. " + f"Evidence: dtype {name}, shape {tuple(c.got.shape)}."
        )
    if not have.is_floating_point and want.is_floating_point:
        return (
            f"the output is an integer tensor ({name}) where {wanted} was expected: an integer "
            "division (//), torch.arange/torch.tensor of whole numbers without dtype=, or .long() "
            f"turned the values into integers. Evidence: dtype {name}."
        )
    if have.is_floating_point and want.is_floating_point:
        agree = ""
        tol = 1e-4 if torch.finfo(have).eps > torch.finfo(want).eps else c.atol
        if c.got.shape == c.expected.shape and bool(
            torch.isclose(c.g, c.e, atol=tol, rtol=tol, equal_nan=True).all()
        ):
            agree = f" The values themselves agree to {name} precision."
        elif c.got.shape == c.expected.shape:
            agree = f" The values differ as well: {c.evidence()}."
        if torch.finfo(have).eps > torch.finfo(want).eps:
            reason = (
                f"precision was lost on the way: a {name} tensor was created without dtype= "
                "(torch.ones, torch.zeros, torch.tensor, torch.arange default to float32) and the "
                "result written into it, or a .float() call converted it; create new tensors with "
                "dtype=x.dtype"
            )
        else:
            reason = (f"something converted the result to {name}: a .double() call, or a tensor created as {name} "
                      "(dtype=torch.float64, or a NumPy array, float64 by default) mixed in "
                      "and never cast back: end with .to(x.dtype), or make such tensors with dtype=x.dtype")
        return f"the output is {name} for a {wanted} input: {reason}. Evidence: dtype {name}, expected {wanted}.{agree}"
    return f"the output's dtype is {name}, {wanted} was expected. Evidence: dtype {name}."
