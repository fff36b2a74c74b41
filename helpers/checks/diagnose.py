"""The diagnosis layer: what a wrong output, or an error, establishes about its cause.

Every rule here runs a probe on the data it is given (the reference's output, the student's, the
student's output on the same input a second time, on each batch element alone) and says only
what that probe established, with its evidence. A rule that establishes nothing returns ``None``
and the next one runs; when none establishes anything, the message is the plain comparison.

* :func:`explain_mismatch` (judge side): why a tensor differs from the reference's.
* :func:`explain_exception` (student side, inside ``Check.record`` and ``Check.__call__``): where
  the student's code raised, what the tensors on that line were, what PyTorch's message means.
* :func:`trace` / :func:`first_divergence`: the intermediate outputs of a module's submodules,
  and the first one that departs from the reference's.

Shape legend: B batch, T time (sequence length), C embedding size (emb_dim), V vocabulary size
(n_vocab), nh heads (n_heads), hs head size (head_dim), H hidden size (n_hidden).
"""

from __future__ import annotations

import ast
import itertools
import linecache
import math
import os
import re
import sysconfig
from contextlib import contextmanager
from typing import Any, Callable

import torch

from helpers.checks.evidence import close, describe, first_mismatch

__all__ = [
    "CAUSE_HINTS",
    "LEGEND",
    "case_sizes",
    "diagnose",
    "difference_from",
    "explain_exception",
    "explain_mismatch",
    "first_divergence",
    "legend_shape",
    "outside_modules",
    "outside_told",
    "trace",
    "unused_outputs",
    "unused_told",
]

#: the course's shape legend: letter -> the constructor argument it stands for
LEGEND = {
    "B": "batch",
    "T": "time",
    "C": "emb_dim",
    "V": "n_vocab",
    "nh": "n_heads",
    "hs": "head_dim",
    "H": "n_hidden",
}


# ---------------------------------------------------------------------------------------------
# Words for shapes and positions


def _letter(size: int, sizes: dict[str, int] | None) -> str | None:
    """The legend letter whose size is ``size``, when exactly one has it (or a product nh·hs)."""
    if not sizes:
        return None
    names = [k for k, v in sizes.items() if isinstance(v, int) and v == size]
    if len(names) == 1:
        return names[0]
    if not names and "nh" in sizes and "hs" in sizes and sizes["nh"] * sizes["hs"] == size:
        return "nh·hs"
    return None


def _name(letter: str) -> str:
    """'C (emb_dim)', 'B (batch)'."""
    word = LEGEND.get(letter)
    return f"{letter} ({word})" if word else letter


def legend_shape(shape, sizes: dict[str, int] | None) -> str:
    """'(2, 6, 3) = (B, T, hs)' when ``sizes`` names every dimension, '(2, 6, 3)' when none."""
    shape = tuple(int(n) for n in shape)
    plain = str(shape) if len(shape) != 1 else f"({shape[0]},)"
    letters = [_letter(n, sizes) for n in shape]
    if not shape or not any(letters):
        return plain
    named = ", ".join(letter or str(n) for letter, n in zip(letters, shape, strict=True))
    return f"{plain} = ({named}{',' if len(shape) == 1 else ''})"


def _axis(k: int, axes: tuple[str, ...] | None) -> str:
    """'axis 1 (T)' or 'axis 1'."""
    if axes and 0 <= k < len(axes):
        return f"axis {k} ({axes[k]})"
    return f"axis {k}"


def _indices(found: list[int], n: int, axis_letter: str | None) -> str:
    """A set of positions along an axis of size n, in words: 'T ≥ 1', 'T = 5 (the last)', 'T in {0, 3}'."""
    label = axis_letter or "index"
    found = sorted(found)
    if len(found) == 1:
        i = found[0]
        last = " (the last)" if i == n - 1 and n > 1 else ""
        return f"{label} = {i}{last}"
    if found == list(range(found[0], n)):
        return f"{label} ≥ {found[0]}"
    if found == list(range(0, found[-1] + 1)):
        return f"{label} ≤ {found[-1]}"
    if found == list(range(found[0], found[-1] + 1)):
        return f"{found[0]} ≤ {label} ≤ {found[-1]}"
    shown = ", ".join(map(str, found[:8])) + (", …" if len(found) > 8 else "")
    return f"{label} in {{{shown}}}"


def _num(x: float) -> str:
    return f"{x:.4g}"


# ---------------------------------------------------------------------------------------------
# explain_mismatch


class _Case:
    """What one comparison has to go on: the tensors in float64, tolerances, names of axes."""

    def __init__(self, expected, got, atol, rtol, axes, sizes, again, alone, dtype):
        self.expected, self.got = expected, got
        self.atol, self.rtol = float(atol), float(rtol)
        self.axes = tuple(axes) if axes is not None and len(axes) == expected.dim() else None
        self.sizes = dict(sizes) if isinstance(sizes, dict) else None
        self.again, self.alone = again, alone
        self.dtype = dtype if isinstance(dtype, torch.dtype) else expected.dtype
        self.e = expected.detach().double()
        self.g = got.detach().double() if got.dtype != torch.bool else got.detach().double()

    def close(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """``a`` is within tolerance of ``b`` (b plays the reference), matching NaN and inf."""
        return a.shape == b.shape and bool(
            torch.isclose(a.double(), b.double(), atol=self.atol, rtol=self.rtol, equal_nan=True).all()
        )

    def letter(self, k: int) -> str | None:
        return self.axes[k] if self.axes else None

    def evidence(self) -> str:
        return first_mismatch(self.e, self.g, self.atol, self.rtol)

    def finite(self) -> bool:
        return self.e.dim() >= 1 and bool(torch.isfinite(self.e).all() and torch.isfinite(self.g).all())

    def axes_of(self, at_least: int):
        """``(k, n)`` for every axis ``k`` of the reference with ``n >= at_least`` entries."""
        return [(k, n) for k, n in enumerate(self.e.shape) if n >= at_least]

    def slices(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference and the output as ``(n, rest)``: one row per entry of axis ``k``."""
        n = self.e.shape[k]
        return self.e.movedim(k, 0).reshape(n, -1), self.g.movedim(k, 0).reshape(n, -1)


def explain_mismatch(
    expected: torch.Tensor,
    got: Any,
    *,
    what: str,
    atol: float,
    rtol: float,
    axes: tuple[str, ...] | None = None,
    sizes: dict[str, int] | None = None,
    again: Any = None,
    alone: Any = None,
    dtype: torch.dtype | None = None,
) -> str:
    """The message for an output that no catalogued mistake explains (never raises).

    ``axes`` names the output's axes by legend letter, ``sizes`` the case's sizes by letter;
    ``again`` is the student's output on the same input a second time, ``alone`` the outputs for
    each batch element (index of axis 0) run alone; ``dtype`` the dtype the output should have
    (the input's: the reference often runs in float64 whatever the case's dtype). The message
    starts with ``what`` and states only what the rules below established.
    """
    try:
        return _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype)[1]
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the failure it explains
        try:
            return f"{what} differs from the reference. Evidence: {first_mismatch(expected, got, atol, rtol)}."
        except Exception:  # noqa: BLE001
            return f"{what} differs from the reference."


def diagnose(expected, got, *, what, atol, rtol, axes=None, sizes=None, again=None, alone=None,
             dtype=None) -> tuple[str, str]:
    """``(rule, message)``: ``explain_mismatch``'s message and the name of the rule that
    established it ('generic' when none did, 'not_a_tensor', 'rule_shape', 'rule_localised'...)."""
    try:
        return _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype)
    except Exception:  # noqa: BLE001
        return "generic", explain_mismatch(expected, got, what=what, atol=atol, rtol=rtol)


def _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype) -> tuple[str, str]:
    if not isinstance(got, torch.Tensor):
        kind = describe(got) if isinstance(got, (list, tuple)) else f"a {getattr(got, 'what', None) or type(got).__name__}"
        extra = (" Return the output tensor alone: anything else you want to look at (weights, a cache) is not part "
                 "of the interface." if isinstance(got, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in got) else "")
        return "not_a_tensor", f"{what} should return a tensor of shape {tuple(expected.shape)}; it returned {kind}.{extra}"
    case = _Case(expected, got, atol, rtol, axes, sizes, again, alone, dtype)
    for rule in RULES:
        try:
            found = rule(case)
        except Exception:  # noqa: BLE001 - a rule that cannot run establishes nothing
            found = None
        if found:
            note = getattr(case, "alone_note", "") if rule is rule_localised else ""
            if note and " Evidence:" in found:
                before, after = found.split(" Evidence:", 1)
                found = f"{before} {note} Evidence:{after}"
            return rule.__name__, f"{what}: {found}"
    note = getattr(case, "alone_note", "")
    note = f" {note}" if note else ""
    return "generic", f"{what} differs from the reference.{note} Evidence: {case.evidence()}."


# Each rule takes a _Case and returns "cause. Evidence: ...." or None (nothing established).


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


def rule_shape(c: _Case) -> str | None:
    """A wrong shape: which axis, named by the legend; a missing or extra axis; swapped axes."""
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
        hint = hint or _joined_along(c, exp_shape, got_shape) or _cut_along(c, exp_shape, got_shape)
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


def rule_dtype(c: _Case) -> str | None:
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


def _where(mask: torch.Tensor, c: _Case, with_rest: bool = False) -> str:
    """Which positions along each axis a boolean mask touches, in words (only the axes where it
    touches some positions and not others): 'along axis 1 (T) only T ≥ 1 (T = 0 is not)'."""
    parts = []
    for k in range(mask.dim()):
        n = mask.shape[k]
        if n <= 1:
            continue
        hit = mask.movedim(k, 0).reshape(n, -1).any(dim=1)
        found = [int(i) for i in hit.nonzero().flatten()]
        if 0 < len(found) < n:
            letter = c.letter(k)
            text = f"along {_axis(k, c.axes)} only {_indices(found, n, letter)}"
            if with_rest:
                rest = [i for i in range(n) if i not in found]
                text += f" ({_indices(rest, n, letter)} is right)"
            parts.append(text)
    return "; ".join(parts)


def rule_nonfinite(c: _Case) -> str | None:
    e, g = c.e, c.g
    bad = ~torch.isfinite(g) & torch.isfinite(e)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        kind = "NaN" if torch.isnan(g[first]) else "infinite"
        nans, infs = int(torch.isnan(g)[bad].sum()), int(torch.isinf(g)[bad].sum())
        where = _where(bad, c)
        spread = f" ({where})" if where else ""
        counts = ", ".join(x for x in (f"{nans} NaN" if nans else "", f"{infs} inf" if infs else "") if x)
        causes = (" NaN comes from 0 × inf, inf - inf or 0 / 0 (a 0/1 mask multiplied by -inf gives NaN where it "
                  "is 0: use masked_fill or torch.where), a softmax over a row that is -inf everywhere, or the "
                  "sqrt or log of a negative number." if nans else
                  " An infinity comes from an overflow (exp of a large number: subtract the maximum first), a "
                  "division by zero or log(0).")
        return (
            f"the output has {kind} values where the reference is finite{spread}.{causes} Evidence: "
            f"{counts} of {g.numel()} entries; the first at index {first}, where {_num(e[first].item())} "
            "was expected."
        )
    missing = torch.isfinite(g) & ~torch.isfinite(e)
    if missing.any():
        first = tuple(int(i) for i in missing.nonzero()[0])
        where = _where(missing, c)
        spread = f" ({where})" if where else ""
        return (
            f"the output is finite where the reference is {_num(e[first].item())}{spread}. Evidence: "
            f"{int(missing.sum())} entries; the first at index {first}: expected {_num(e[first].item())}, "
            f"got {_num(g[first].item())}."
        )
    return None


def rule_determinism(c: _Case) -> str | None:
    again = c.again
    if not isinstance(again, torch.Tensor) or again.shape != c.got.shape:
        return None
    a = again.detach().double()
    if bool(torch.isclose(a, c.g, atol=c.atol, rtol=c.rtol, equal_nan=True).all()):
        return None
    return (
        "called twice on the very same input, it returned two different outputs, so the function is "
        "not deterministic: dropout left in training mode, random numbers drawn (torch.randn, "
        "torch.rand…) without the generator you were given, or state kept from one call to the next. "
        "Make it deterministic first; the values cannot be judged until then. Evidence: first call vs "
        f"second call: {first_mismatch(c.g, a, c.atol, c.rtol)}."
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


def rule_batch(c: _Case) -> str | None:
    outs = _alone_outputs(c)
    if outs is None:
        return None
    B = len(outs)
    right = [c.close(outs[b], c.e[b]) for b in range(B)]
    batched_right = [c.close(c.g[b], c.e[b]) for b in range(B)]
    name = c.letter(0) or "B"
    if all(right) and not all(batched_right):
        wrong = [b for b in range(B) if not batched_right[b]]
        b = wrong[0]
        return (
            f"each batch element run alone gives the right output, but run together they do not "
            f"(element{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} of {B}): the batch "
            f"elements are mixed, by an operation over axis 0 ({name}), a reshape/view that crosses the "
            "batch, or a mean/sum over the wrong axis (one that includes the batch). Evidence: element "
            f"{b} run alone matches; in the batch, {first_mismatch(c.e[b], c.g[b], c.atol, c.rtol)}."
        )
    if not all(right):
        b = right.index(False)
        c.alone_note = (
            f"This is not a batching problem: batch element {b} run alone (a batch of one) is "
            "already wrong."
        )
    return None


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


def rule_rounded(c: _Case) -> str | None:
    """Whole numbers where the reference has fractions: the reference rounded down (or toward 0)."""
    e, g = c.e, c.g
    if not c.finite() or not bool((g == g.round()).all()) or bool((e == e.round()).all()) or not bool(g.any()):
        return None  # (all zeros: as likely a missing term as a rounding)
    for how, rounded in (("rounded down", e.floor()), ("rounded toward 0", e.trunc())):
        if c.close(g, rounded):
            return (f"the output is the reference {how} to whole numbers: an integer division (//) or int() where / "
                    f"was meant, or a result stored in an integer dtype. Evidence: {c.evidence()}.")
    return None


def rule_factor(c: _Case) -> str | None:
    e, g = c.e, c.g
    if e.numel() < 2:  # any two numbers differ by some factor: one number establishes nothing
        return None
    if not (torch.isfinite(e).all() and torch.isfinite(g).all()):
        return None
    ee = float((e * e).sum())
    if ee == 0:
        return None
    factor = float((e * g).sum()) / ee
    if abs(factor - 1) > 1e-9 and c.close(g, factor * e) and not c.close(g, e):
        named = _name_factor(factor, c.sizes)
        if named and named[0] == "-1":
            return (
                "the output is the reference with its sign flipped (got = -expected everywhere): a "
                f"subtraction the wrong way round, or a stray minus. Evidence: {c.evidence()}."
            )
        if named:
            expr, reason = named
            value = "" if _num(factor) in expr.split(" = ") else f" = {_num(factor)}"
            return (
                f"the output is off by a constant factor {expr}{value} everywhere "
                f"(got = {expr} × expected): {reason}. Evidence: {c.evidence()}."
            )
        return (
            f"the output is off by a constant factor {_num(factor)} everywhere (got = {_num(factor)} × "
            f"expected), a factor that matches none of the case's sizes. Evidence: {c.evidence()}."
        )
    offset = float((g - e).mean())
    if offset != 0 and c.close(g, e + offset) and not c.close(g, e):
        return (
            f"the output is the reference shifted by a constant {_num(offset)} everywhere (got = expected "
            f"+ {_num(offset)}): a term added to every entry, or one left out. Evidence: {c.evidence()}."
        )
    return None


def rule_normalised_axis(c: _Case) -> str | None:
    """Softmax-like outputs: the reference's entries sum to 1 along one axis, the student's along another."""
    e, g = c.e, c.g
    if e.dim() < 2 or not (torch.isfinite(e).all() and torch.isfinite(g).all()) or (e < -1e-12).any():
        return None

    def sums_to_one(t, k):
        return bool(((t.sum(dim=k) - 1).abs() <= 1e-6 + c.atol).all())

    mine = [k for k in range(e.dim()) if sums_to_one(e, k) and e.shape[k] > 1]
    theirs = [k for k in range(g.dim()) if sums_to_one(g, k) and g.shape[k] > 1]
    if len(mine) != 1 or not theirs or mine[0] in theirs:
        return None
    k, j = mine[0], theirs[0]
    return (
        f"the output is normalised along {_axis(j, c.axes)} instead of {_axis(k, c.axes)}: its entries "
        f"sum to 1 along {_axis(j, c.axes)}, the reference's along {_axis(k, c.axes)} (a softmax or a "
        f"division by a sum over the wrong dim). Evidence: sums along {_axis(k, c.axes)} are "
        f"{_short(g.sum(dim=k))}, expected all 1."
    )


def _short(t: torch.Tensor) -> str:
    flat = t.reshape(-1)[:5].tolist()
    return "[" + ", ".join(_num(v) for v in flat) + (", …]" if t.numel() > 5 else "]")


def _per_row(c: _Case, em: torch.Tensor, gm: torch.Tensor, how: str) -> torch.Tensor | None:
    """The ``(rows,)`` factors (``how="factor"``) or offsets (``"offset"``) that take each row of the
    reference ``em`` to the output's row ``gm``: when every row has one and they are not all equal
    (one value for all is ``rule_factor``'s business); otherwise None."""
    if em.shape[0] < 2 or em.shape[1] < 2:
        return None
    if how == "factor":
        den = (em * em).sum(dim=1)
        if (den == 0).any():
            return None
        fit = (em * gm).sum(dim=1) / den
        model = fit[:, None] * em
    else:
        fit = (gm - em).mean(dim=1)
        model = em + fit[:, None]
    if not c.close(gm, model) or float(fit.max() - fit.min()) <= 1e-6 * max(1.0, float(fit.abs().max())):
        return None
    return fit


def _first_six(values: torch.Tensor) -> str:
    return ", ".join(_num(v) for v in values[:6].tolist()) + (", …" if values.numel() > 6 else "")


_SCALE_WRONG = ("is right but its scale is not, which is what a normalisation (a division by a norm, a std or "
                "a sum)")

#: the fits per part: (the parts are slices along an axis, or the vectors along it; "factor" or
#: "offset"; what it means, with {axis}, {letter}, {others}, {n} and {values} filled in)
_PER_PART = {
    "slice factors": ("slices", "factor", "each slice along {axis} is the reference times its own factor ({values} "
                      "for {letter} = 0, 1, …): the shape of each slice " + _SCALE_WRONG + " that is missing or "
                      "computed over the wrong axis does"),
    "slice offsets": ("slices", "offset", "each slice along {axis} is the reference plus its own constant ({values} "
                      "for {letter} = 0, 1, …): a term that depends only on the position along {axis} (a bias, an "
                      "offset per {letter}) is wrong or missing"),
    "fibre factors": ("vectors", "factor", "each vector along {axis} (one per ({others}) index) is the reference's "
                      "times its own factor ({values}): the direction of each vector " + _SCALE_WRONG + " computed "
                      "over other entries than the {n} along {axis} does"),
}


def _per_part(c: _Case, which: str) -> str | None:
    """The first axis whose parts (``_PER_PART``) are each the reference's part times, or plus, a value
    of their own, told in words."""
    parts, how, says = _PER_PART[which]
    if not c.finite():
        return None
    axes = c.axes_of(2) if parts == "slices" else reversed(c.axes_of(2))
    for k, n in axes:
        if parts == "slices":
            em, gm = c.slices(k)
        else:  # (rows, n): one row per index of the other axes
            em, gm = c.e.movedim(k, -1).reshape(-1, n), c.g.movedim(k, -1).reshape(-1, n)
        fit = _per_row(c, em, gm, how)
        if fit is not None:
            others = ", ".join(c.letter(i) or f"axis {i}" for i in range(c.e.dim()) if i != k)
            told = says.format(axis=_axis(k, c.axes), letter=c.letter(k) or "index", others=others, n=n,
                               values=_first_six(fit))
            return f"{told}. Evidence: {c.evidence()}."
    return None


def rule_slice_factors(c: _Case) -> str | None:
    """Each slice along one axis (all other indices varying) is the reference's times its own factor."""
    return _per_part(c, "slice factors")


def rule_fibre_factors(c: _Case) -> str | None:
    """Each vector along one axis (all other indices fixed) is the reference's times its own factor."""
    return _per_part(c, "fibre factors")


def rule_slice_offsets(c: _Case) -> str | None:
    """Each slice along one axis is the reference's plus its own constant."""
    return _per_part(c, "slice offsets")


def rule_transposed(c: _Case) -> str | None:
    e, g = c.e, c.g
    if e.dim() < 2 or e.shape[-1] != e.shape[-2] or e.shape[-1] < 2:
        return None
    t = e.transpose(-1, -2)
    if c.close(g, t) and not c.close(t, e):
        names = ""
        if c.axes:
            names = f" ({c.axes[-2]}, {c.axes[-1]})"
        return (
            f"the output is the reference with its last two axes{names} transposed: the two indices "
            f"of a square matrix are swapped (rows for columns). Evidence: {c.evidence()}."
        )
    return None


def rule_permuted(c: _Case) -> str | None:
    for k, n in c.axes_of(2):
        em, gm = c.slices(k)
        perm = []
        for i in range(n):
            match = [j for j in range(n) if c.close(gm[i], em[j])]
            if not match:
                break
            perm.append(match[0] if match[0] not in perm else next((j for j in match if j not in perm), match[0]))
        if len(perm) != n or sorted(perm) != list(range(n)) or perm == list(range(n)):
            continue
        if c.close(gm, em[perm]) and not c.close(gm, em):
            letter = c.letter(k) or "index"
            reversed_ = perm == list(range(n - 1, -1, -1))
            how = "reversed" if reversed_ else "reordered"
            return (
                f"the slices along {_axis(k, c.axes)} are right but {how}: output {letter} = i holds the "
                f"reference's {letter} = perm[i], with perm = {perm}. Evidence: {c.evidence()}."
            )
    return None


def rule_scrambled(c: _Case) -> str | None:
    """Same shape, but the data is the reference transposed and re-cut (a view/transpose mix-up)."""
    e, g = c.e, c.g
    shape = tuple(e.shape)
    for i, j in itertools.combinations(range(e.dim()), 2):
        if shape[i] == shape[j]:
            continue
        swapped = list(shape)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        recut = e.transpose(i, j).reshape(shape)  # transposed, then viewed back: the order changed
        uncut = e.reshape(swapped).transpose(i, j)  # viewed as swapped, then transposed back
        for candidate, how in (
            (recut, "transposed then reshaped back to the expected shape: a transpose where a "
                    "view/reshape alone was needed"),
            (uncut, "reshaped to the swapped shape then transposed: a view/reshape where a "
                    "transpose was needed"),
        ):
            if c.close(g, candidate) and not c.close(candidate, e):
                return (
                    f"the output holds the right numbers in a scrambled order, the reference's entries "
                    f"{how} ({_axis(i, c.axes)} and {_axis(j, c.axes)}). Evidence: {c.evidence()}."
                )
    return None


def rule_shifted(c: _Case) -> str | None:
    e, g = c.e, c.g
    for k, n in c.axes_of(3):
        for s in sorted(range(-(n - 2), n - 1), key=abs):
            if s == 0:
                continue
            # got[..., i] == expected[..., i + s] where i + s is inside the axis
            lo, hi = max(0, -s), min(n, n - s)
            if hi - lo < max(2, n // 2):
                continue
            gs, es = g.narrow(k, lo, hi - lo), e.narrow(k, lo + s, hi - lo)
            if c.close(gs, es) and not c.close(gs, e.narrow(k, lo, hi - lo)):
                letter = c.letter(k) or "i"
                sign = f"+ {s}" if s > 0 else f"- {-s}"
                return (
                    f"the output is shifted by {s:+d} along {_axis(k, c.axes)}: output {letter} = i holds the "
                    f"reference's {letter} = i {sign} (checked for every i where both exist), an "
                    f"off-by-{abs(s)} in positions or indices. Evidence: {c.evidence()}."
                )
    return None


def rule_localised(c: _Case) -> str | None:
    bad = ~torch.isclose(c.g, c.e, atol=c.atol, rtol=c.rtol, equal_nan=True)
    if not bad.any():
        return None
    if bad.all():
        return (
            "every entry of the output is wrong (no position along any axis is right). "
            f"Evidence: {c.evidence()}."
        )
    where = _where(bad, c, with_rest=True)
    if not where:
        return None
    return f"only part of the output is wrong: {where}. Evidence: {c.evidence()}."


def _correct(c: _Case) -> str | None:
    if c.close(c.g, c.e) and c.got.dtype == c.dtype:
        return "it matches the reference within tolerance (nothing to explain). Evidence: no mismatch."
    return None


RULES: list[Callable[[_Case], str | None]] = [
    rule_shape,
    rule_dtype,
    rule_nonfinite,
    rule_determinism,
    _correct,
    rule_batch,
    rule_rounded,  # before a factor: rounding to 0 everywhere is also "0 × the reference"
    rule_factor,
    rule_transposed,  # an exact match of the data, before the properties a transpose also has
    rule_normalised_axis,
    rule_slice_factors,
    rule_fibre_factors,
    rule_slice_offsets,
    rule_permuted,
    rule_scrambled,
    rule_shifted,
    rule_localised,
]


# ---------------------------------------------------------------------------------------------
# explain_exception


_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_NOT_STUDENT = tuple(
    os.path.join(p, "") for p in {
        os.path.join(_REPO, "helpers"),
        os.path.join(_REPO, "autograder"),
        os.path.dirname(os.path.abspath(torch.__file__)),
        *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    } if p
)


def _is_student(filename: str) -> bool:
    if not filename:
        return False
    # the grader's cells are "<cell N>" (autograder/child.py), IPython's "<ipython-input-...>"
    if filename == "<cell>" or filename.startswith(("<cell ", "<ipython-input-")):
        return True
    if filename.startswith("<"):  # <frozen ...>, <string>, <stdin>: not a notebook cell
        return False
    if re.search(r"ipykernel_\d+[/\\]\d+\.py$", filename):
        return True
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_NOT_STUDENT)


_STACK: list[dict[str, int]] = []


@contextmanager
def case_sizes(sizes: dict[str, int]):
    """Probe side: while active, an error raised inside is explained with these sizes (the legend
    of the case that was running). The sizes ride on the exception itself."""
    _STACK.append(dict(sizes))
    try:
        yield
    except Exception as exc:
        try:
            if getattr(exc, "course_sizes", None) is None:
                exc.course_sizes = dict(sizes)
        except Exception:  # noqa: BLE001 - exceptions that refuse attributes just go without
            pass
        raise
    finally:
        _STACK.pop()


def _module_text(module: torch.nn.Module) -> str:
    text = _describe_value("m", module, None)
    return text.removeprefix("m: ") if text else f"a {type(module).__name__}"


@contextmanager
def outside_modules(*roots):
    """Probe side: while active, the modules with weights (or a dropout in training mode) called that
    are not part of ``roots`` (a layer built inside forward, or kept outside the module) are listed in
    the list yielded, at most three; an error raised inside carries them too (``explain_parts``
    tells them). A parameter-free layer built in forward (nn.GELU()(x)) is harmless: not listed."""
    known = {id(m) for root in roots if isinstance(root, torch.nn.Module) for m in root.modules()}
    found: list[str] = []
    seen: set[int] = set()

    def before(module, args):
        weighty = any(True for _ in module.parameters()) or (isinstance(module, torch.nn.Dropout) and module.training)
        if weighty and id(module) not in known and id(module) not in seen and len(found) < 3:
            seen.update(id(m) for m in module.modules())  # its own children are part of it
            found.append(_module_text(module))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(before) if known else None
    try:
        yield found
    except Exception as exc:
        try:
            if found and getattr(exc, "course_outside", None) is None:
                exc.course_outside = list(found)
        except Exception:  # noqa: BLE001 - exceptions that refuse attributes just go without
            pass
        raise
    finally:
        if handle is not None:
            handle.remove()


def outside_told(found) -> str:
    """``outside_modules``' list in words, or ""."""
    if not isinstance(found, list) or not found:
        return ""
    return (f"forward called {', '.join(map(str, found[:3]))}, which {'is' if len(found) == 1 else 'are'} not part of "
            "the module: a layer built inside forward (or kept outside the module) gets new random weights at every "
            "call, is not one of the module's parameters and is never trained. Create it once in __init__ "
            "(self.name = nn.Linear(...)) and call that.")


def _source_line(frame, lineno: int) -> str:
    filename = frame.f_code.co_filename
    return linecache.getline(filename, lineno, frame.f_globals).strip()


def _chains(line: str) -> list[str]:
    """Names and attribute chains on a line of code, in order: 'x', 'self.query.weight'."""
    try:
        tree = ast.parse(line.strip().rstrip(":").removeprefix("return ").removeprefix("elif ").removeprefix("if "), mode="exec")
    except SyntaxError:
        try:
            tree = ast.parse(line.strip().rstrip(":").split("=", 1)[-1], mode="exec")
        except SyntaxError:
            return list(dict.fromkeys(re.findall(r"[A-Za-z_][\w.]*", line)))
    found = []

    def chain(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return ".".join([node.id, *reversed(parts)])
        return None

    for node in ast.walk(tree):
        # only what the line reads: an assignment's target has no value yet (a global of the
        # same name would be another tensor altogether)
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            name = chain(node)
            if name:
                found.append(name)
    # the longest chains first is not useful to read; keep source order by position
    found.sort(key=lambda n: line.find(n) if line.find(n) >= 0 else len(line))
    return list(dict.fromkeys(found))


_MISSING = object()


def _lookup(name: str, frame) -> Any:
    """The value of a name or attribute chain in a frame, without running properties' code."""
    first, *rest = name.split(".")
    value = frame.f_locals.get(first, _MISSING)
    if value is _MISSING:
        value = frame.f_globals.get(first, _MISSING)
    for attr in rest:
        if value is _MISSING:
            return _MISSING
        value = _attribute(value, attr)
    return value


def _attribute(obj: Any, attr: str) -> Any:
    if isinstance(obj, torch.nn.Module):
        for store in ("_parameters", "_buffers", "_modules"):
            found = obj.__dict__.get(store, {})
            if attr in found:
                return found[attr]
    if isinstance(obj, torch.Tensor):
        if attr in ("T", "mT", "grad", "data"):
            try:
                return getattr(obj, attr)
            except Exception:  # noqa: BLE001
                return _MISSING
        return _MISSING
    try:
        return vars(obj).get(attr, _MISSING)
    except TypeError:
        return _MISSING


def _describe_value(name: str, value: Any, sizes) -> str | None:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        device = "" if value.device.type == "cpu" else f" on {value.device}"
        return f"{name}: {dtype} {legend_shape(tuple(value.shape), sizes)}{device}"
    if isinstance(value, torch.nn.Linear):
        return f"{name}: nn.Linear(in_features={value.in_features}, out_features={value.out_features}) (weight {tuple(value.weight.shape)})"
    if isinstance(value, torch.nn.Embedding):
        return f"{name}: nn.Embedding({value.num_embeddings}, {value.embedding_dim})"
    if isinstance(value, torch.Size):
        return f"{name}: torch.Size({legend_shape(tuple(value), sizes)})"
    if isinstance(value, torch.nn.Sequential):
        return f"{name}: nn.Sequential of {len(value)} modules (indices 0 … {len(value) - 1})"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{name} = {value}"
    if isinstance(value, (list, tuple, bytes, str, dict)):
        shown = f" ({value!r})" if len(repr(value)) < 70 else ""
        return f"{name}: a {type(value).__name__} of length {len(value)}{shown}"
    if type(value).__name__ in ("generator", "map", "filter", "zip"):
        return f"{name}: a {type(value).__name__} object (not a list, bytes or str)"
    return None


def _bad_indices(frame, source: str) -> list[str]:
    """The plain subscripts on the failing line that read past the end of a list, str or tuple."""
    try:
        tree = ast.parse(source.strip().rstrip(":").removeprefix("if ").removeprefix("while ").removeprefix("elif "))
    except SyntaxError:
        return []
    plain = {k: v for k, v in frame.f_locals.items() if isinstance(v, (int, tuple, list))}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Subscript) or isinstance(node.slice, ast.Slice):
            continue
        base = _lookup(ast.unparse(node.value), frame)
        try:
            index = eval(compile(ast.Expression(node.slice), "<index>", "eval"), {"__builtins__": {}}, plain)
        except Exception:  # noqa: BLE001 - not a plain index
            continue
        if isinstance(base, (list, tuple, str, bytes)) and isinstance(index, int) and not -len(base) <= index < len(base):
            found.append(f"{ast.unparse(node)} reads index {index} of {ast.unparse(node.value)}, which has {len(base)} "
                         f"item{'s' if len(base) != 1 else ''} (valid indices 0 … {len(base) - 1}).")
    return found


def _kept_no_axis(values, source: str) -> str:
    """A tensor of the line whose shape is another's without its last axis: a reduction without
    keepdim (one that the line gives its axis back, ``.unsqueeze(-1)`` or ``[..., None]``, is not it)."""
    code = source.split("#")[0].replace(" ", "")
    tensors = [(name, v) for name, v in values if isinstance(v, torch.Tensor)]
    for name, v in tensors:
        if f"{name}.unsqueeze(-1)" in code or f"{name}[...,None]" in code or f"{name}.unsqueeze({v.dim()})" in code:
            continue
        for other, u in tensors:
            if u.dim() >= 2 and v.dim() == u.dim() - 1 and tuple(v.shape) == tuple(u.shape[:-1]) and u.shape[-1] != u.shape[-2]:
                return (f" {name} {tuple(v.shape)} is {other} {tuple(u.shape)} reduced over its last axis: a mean, sum "
                        "or var without keepdim=True drops that axis, and what is left lines up against the wrong "
                        "one; pass keepdim=True so that it stays as size 1 and broadcasts.")
    return ""


def _dropped_axis(a: int, b: int, values) -> str:
    """Sizes ``a`` and ``b`` clash where a tensor of the line, shape (..., a or b, b or a), met itself
    reduced over its last axis: a sum/mean/max without keepdim=True drops the axis, and what is left
    lines up against the wrong one."""
    for name, value in values:
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and a != b and {a, b} == set(value.shape[-2:]):
            left = tuple(value.shape[:-1])
            return (f" If one side is {name} {tuple(value.shape)} reduced over its last axis, it has shape {left}: "
                    "the reduction dropped that axis and the rest lines up wrongly; keep it with keepdim=True "
                    "(or index [..., None]) so that it broadcasts as size 1.")
    return ""


#: how the hints that name a likely cause of a broadcast clash begin (``_transposed_pair`` ...): a
#: check may count an error explained by one of them as a named mistake rather than a crash
CAUSE_HINTS = ("is the shape of", "Both sides are 1-D", "has the batch size B on every axis", "was meant. A size read",
               "on every axis, the size of axis", "inserts a size-1 axis",
               "reduced over its last axis", "reverses all", "would fit transposed", "Count the axes from the end")


def _transposed_pair(values) -> str:
    """Two matrices of the line whose shapes are each other's reversed: one of them needs a transpose."""
    mats = [(name, v) for name, v in values if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] != v.shape[1]]
    for (n1, v1), (n2, v2) in itertools.combinations(mats, 2):
        if tuple(v1.shape) == tuple(reversed(v2.shape)):
            return (f" {n1} {tuple(v1.shape)} is the shape of {n2} {tuple(v2.shape)} transposed: one of them needs .T "
                    "(nn.Linear stores its weight as (out_features, in_features)).")
    return ""


def _outer_pair(a: int, b: int, k: int, values) -> str:
    """Two 1-D tensors of different lengths met elementwise: maybe an outer combination was meant."""
    ones = [(name, v.shape[0]) for name, v in values
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.shape[0] in (a, b)]
    if k != 0 or not ones or any(isinstance(v, torch.Tensor) and v.dim() > 1 for _, v in values):
        return ""
    name, length = ones[0]
    other = next((f"{n} ({size},)" for n, size in ones[1:] if size != length), f"one of length {b if length == a else a}")
    return (f" Both sides are 1-D ({name} ({length},) and {other}): an elementwise operation pairs entry i with "
            "entry i. To combine every entry of one with every entry of the other (a table of shape (len(a), "
            "len(b))), make the first a column: a[:, None] + b.")


def _built_from_batch(values, sizes) -> str:
    """A square tensor of the line whose every axis has the batch size, or the size of another
    leading axis of a tensor on the line: a size read from the front; or a square whose last two
    axes have another size (C) beside a (..., T, T) one: a size read at a fixed position."""
    for name, v in values:
        if (sizes and "B" in sizes and isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape)) == 1
                and _letter(int(v.shape[0]), sizes) == "B"):
            return (f" {name} {tuple(v.shape)} has the batch size B on every axis: it was built from a size read "
                    "at the front of a batched tensor (x.shape[0] is B for (B, T, ...)); read sizes from the end, "
                    "x.shape[-1], so that one line serves a single input and a batch.")
    for name, v in values:  # the same, from another leading axis of a tensor on the line
        if not (isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape)) == 1):
            continue
        size = int(v.shape[0])
        for other, u in values:
            if isinstance(u, torch.Tensor) and u.dim() > v.dim() and int(u.shape[-1]) != size and size in u.shape[:-v.dim()]:
                k = list(u.shape[:-v.dim()]).index(size)
                return (f" {name} {tuple(v.shape)} has size {size} on every axis, the size of axis {k} of {other} "
                        f"{tuple(u.shape)}: it was built from a size read at the front ({other}.shape[{k}]); read it "
                        f"from the end, {other}.shape[-1], so that one line serves any number of leading axes.")
    squares = [(name, v, _letter(int(v.shape[-1]), sizes)) for name, v in values
               if isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape[-2:])) == 1]
    for name, v, letter in squares:  # a (T, T) square beside one built from another size (C, C)
        for other, u, wanted in squares:
            if letter and wanted == "T" and letter not in ("B", "T") and v.shape[-2:] != u.shape[-2:]:
                return (f" {name} {tuple(v.shape)} has the size {letter} where {other} {tuple(u.shape)} has {wanted}: "
                        f"it was built from {letter} where {wanted} was meant. A size read at a fixed position "
                        "(x.shape[1]) lands on another axis when the input has one axis fewer or more: read it "
                        "from the end (T is x.shape[-2] for (..., T, C)).")
    return ""


def _unsqueezed(source: str) -> str:
    """An unsqueeze on a line whose broadcast failed: where the new axis went."""
    m = re.search(r"\.unsqueeze\((-?\d+)\)", source.split("#")[0])
    if not m:
        return ""
    return (f" .unsqueeze({m.group(1)}) inserts a size-1 axis at position {m.group(1)}; after it the axes must line "
            "up from the end: a (T, C) tensor already broadcasts against (B, T, C) as it is, while "
            "(T, C).unsqueeze(1) is (T, 1, C), which puts T against B.")


def _operation(source: str) -> str:
    """What a broadcasting clash on ``source`` (the failing line) came from, in words."""
    source = source.split("#")[0]  # a shape comment may show a product the line does not compute
    if "@" in source or re.search(r"\b(matmul|bmm|einsum)\(", source):
        return ("A matrix product (@) lines up the axes before the last two like an elementwise operation "
                "(from the end)")
    if re.search(r"\.copy_\(", source):
        return "copy_ needs the source to broadcast to the destination's shape, lining the axes up from the end"
    return "An elementwise operation (+, -, *, /, masked_fill, where…) lines two tensors up from their last axis"


def _reversed_axes(values) -> str:
    """``t.T`` on a tensor of more than two axes reverses them all: rarely what was meant."""
    for name, value in values:
        if name.endswith(".T") and isinstance(value, torch.Tensor) and value.dim() > 2:
            return (f" {name} reverses all {value.dim()} axes of {name[:-2]} (shape {tuple(value.shape)}); to swap the "
                    "last two only, use .transpose(-2, -1) (or .mT).")
    return ""


def _ids_into_linear(values, linear: bool) -> str:
    """An integer tensor (token ids) on a line that calls an nn.Linear: the embedding lookup was skipped."""
    ids = next((name for name, v in values if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point
                and not v.dtype.is_complex and v.dtype != torch.bool), None)
    if not (linear and ids):
        return ""
    return (f" {ids} holds integers (token ids), not vectors: a linear layer takes the (..., C) embeddings, the "
            "output of the embedding lookup, never the ids themselves.")


def _meaning(exc: BaseException, sizes, values=(), source: str = "") -> str | None:
    """What PyTorch's (or Python's) message says should have matched, in the course's words;
    ``values``: (name, value) of what the failing line names; ``source``: that line."""
    text = str(exc)

    def n(size) -> str:
        letter = _letter(int(size), sizes)
        return f"{size} ({letter})" if letter else str(size)

    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text)
    if m:
        a, b, c, d = m.groups()
        linear = any(isinstance(v, torch.nn.Linear) for _, v in values)
        flipped = next((name for name, v in values if isinstance(v, torch.Tensor) and v.dim() == 2
                        and tuple(v.shape) == (int(c), int(d))), None) if b == d and c != d else None
        return (
            f"A matrix product (@, torch.matmul or an nn.Linear) needs the left factor's last axis to equal "
            f"the right factor's first: here the left factor (flattened to {a}x{b}) ends in {n(b)}, the "
            f"right one ({c}x{d}) starts with {n(c)}. "
            + (f"{flipped} ({c}, {d}) would fit transposed: {flipped}.T is ({d}, {c}), the layout x @ W.T that "
               "nn.Linear computes with its (out_features, in_features) weight." if flipped and not linear else
               f"For an nn.Linear, the right factor is the weight transposed: the layer expects inputs whose "
               f"last axis has size {n(c)}, and got {n(b)}.")
            + _ids_into_linear(values, linear)
        )
    m = re.search(
        r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]", text
    )
    if m:
        b1, k1, b2, k2 = m.groups()
        if k1 != k2:
            return (
                f"In a batched matrix product a @ b, b's second-to-last axis must have the size of a's last "
                f"axis: a ends in {n(k1)}, b's second-to-last axis has {n(k2)}."
            )
        return f"In a batched matrix product a @ b, the batch sizes differ: {n(b1)} and {n(b2)}."
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", text)
    if m:
        a, b, k = m.groups()
        return (
            f"{_operation(source)}: at dimension {k} of the broadcast shape one has size {n(a)}, the other "
            f"{n(b)}; they must be equal, or one of them 1." + _reversed_axes(values)
            + (_transposed_pair(values) or _outer_pair(int(a), int(b), int(k), values)
               or _built_from_batch(values, sizes) or _kept_no_axis(values, source) or _unsqueezed(source)
               or _dropped_axis(int(a), int(b), values))
        )
    m = re.search(r"expected scalar type (\w+) but found (\w+)", text) or re.search(
        r"expected (?:m1 and m2|mat1 and mat2|both vectors|self and \w+) to have the same dtype, but got:? (\w+) != (\w+)", text
    ) or re.search(r"[Ff]ound dtype (\w+) but expected (\w+)", text) or re.search(
        r"must have the same dtype, but got (\w+) and (\w+)", text
    )
    if m:
        a, b = m.groups()
        ids = _ids_into_linear(values, any(isinstance(v, torch.nn.Linear) for _, v in values))
        if ids:
            return f"Two tensors of different dtypes ({a} and {b}) met in one operation.{ids}"
        return (
            f"Two tensors of different dtypes ({a} and {b}) met in one operation. A tensor created without "
            "dtype= is float32 (torch.ones, torch.zeros, torch.tensor, torch.arange of floats) or int64 "
            "(of whole numbers); create new tensors with dtype=x.dtype so that they match the input."
        )
    m = re.search(r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)", text)
    if m:
        lo, hi, got = (int(v) for v in m.groups())
        ndim = hi + 1
        return (
            f"dim={got} does not exist: the tensor has only {ndim} ax{'is' if ndim == 1 else 'es'} (valid "
            f"dims {lo} to {hi}). The tensor has fewer axes than the code assumes (an unbatched input, "
            "or an axis summed away earlier)."
            + (" Count the axes from the end (dim=-1 for the last, -2 for the one before it): the same line "
               "then serves a single input and a batch." if got > hi else "")
        )
    m = re.search(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)", text)
    if m:
        dims, total = m.groups()
        return (
            f"A view/reshape to [{dims}] cannot hold the {total} entries the tensor has: the sizes asked for "
            "must multiply to the tensor's number of entries (check which sizes you split or merged)."
        )
    if "view size is not compatible with input tensor's size and stride" in text:
        return (
            "After a transpose/permute the tensor's entries are no longer in row order in memory, and "
            ".view cannot re-cut it: use .reshape(...), or call .contiguous() before .view(...)."
        )
    if "Expected all tensors to be on the same device" in text:
        return (
            "Two tensors on different devices met in one operation: create new tensors with "
            "device=x.device (and move modules with .to(device))."
        )
    m = re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", text)
    if m:
        index, dim, size = m.groups()
        return (
            f"An index {index} was used on an axis of size {n(size)} (dimension {dim} of the tensor indexed), "
            f"whose valid indices are 0 … {int(size) - 1}: the index was computed from another axis's size, "
            "or the tensor has its axes in another order than the code assumes."
            + (" An index counted from the front lands on another axis when the input has more axes (a batch): "
               "index from the end, x[..., i, j]." if _letter(int(size), sizes) in ("B", "nh") else "")
        )
    m = re.search(r"too many indices for tensor of dimension (\d+)", text)
    if m:
        d = int(m.group(1))
        return (f"The subscript reads more axes than the tensor has ({d}): x[:, a:b] reads two axes, and a single "
                "sequence (T,) has one. Index from the end with an Ellipsis, x[..., a:b], which works for (T,) and "
                "(B, T) alike.")
    if "only supports boolean masks" in text:
        return ("masked_fill needs a boolean mask, True where the value is replaced: create the mask with "
                "dtype=torch.bool (torch.ones(T, T) alone is float).")
    if "slice indices must be integers" in text and "/" in source.split("#")[0]:
        return "In Python / always gives a float (12 / 12 is 1.0): use * or // to compute a slice bound."
    if "must be tuple of ints,but got float" in text:
        return "A size given to view/reshape is a float (a / division makes one): sizes are ints, use //."
    if "'indices' to have one of the following scalar types" in text:
        return ("An embedding looks its rows up by integer index, and the indices given to it are not integers: "
                "torch.arange(T) makes int64 positions; a dtype= of a float type makes them floats.")
    if "index out of range in self" in text:
        vocab = f" (V = {sizes['V']})" if sizes and "V" in sizes else ""
        seen = []
        for name, value in values:
            if isinstance(value, torch.Tensor) and not value.dtype.is_floating_point and value.numel():
                seen.append(f"the largest index in {name} is {int(value.max())}")
            elif isinstance(value, torch.nn.Embedding):
                seen.append(f"{name} has {value.num_embeddings} rows")
        found = f" Here {', '.join(seen)}." if seen else ""
        return (
            "An embedding lookup (or index_select) got an index at least as large as its number of rows: "
            f"token ids must lie in 0 … V - 1{vocab}, and positions in 0 … (context length) - 1.{found}"
        )
    m = re.search(r"argument '(\w+)' \(position \d+\) must be Tensor, not (\w+)", text)
    if m:
        arg, kind = m.groups()
        return (
            f"A torch function got a Python {kind} where it needs a tensor (its argument {arg!r}): "
            "torch.sqrt, torch.exp, torch.log … take tensors only. For a plain number use math.sqrt, "
            "math.exp …, or put the number inside the tensor expression (torch.sqrt(var + eps))."
        )
    if "received an invalid combination of arguments" in text:
        called = re.search(r"^(\S+?)\(\) received", text)
        fn = called.group(1) if called else "the function"
        if re.search(r"\b(axis|keepdims)=", text) or re.search(r"\bnp\.\w+\(", source.split("#")[0]):
            return (f"{fn} got numpy's keyword names (axis=, keepdims=): a numpy function given a tensor (np.max, "
                    "np.sum …) calls the tensor's own method with numpy's words, which PyTorch does not take. "
                    "Use the tensor's methods with PyTorch's names: x.max(dim=-1, keepdim=True).values, "
                    "x.sum(dim=-1, keepdim=True).")
        return (
            f"{fn} was called with arguments it does not take together (PyTorch lists the forms it accepts "
            "below): for instance keepdim=True needs a dim= too, and a dim must be an int or a tuple of ints."
        )
    if re.search(r"'(int|float|bool)' object is not iterable", text) and ".squeeze()" in source.split("#")[0]:
        return ("squeeze() without a dim removes every axis of size 1: one id (T = 1) becomes a 0-d tensor, whose "
                ".tolist() is a plain number, not a list. Squeeze only the axis you mean (squeeze(0)), or none.")
    m = re.search(r"Sizes of tensors must match except in dimension (-?\d+)\. Expected size (\d+) but got size (\d+)", text)
    if m:
        d, want, got = m.groups()
        unsq = re.search(r"\.unsqueeze\((-?\d+)\)", source.split("#")[0])
        return (f"torch.cat joins tensors along dim {d}: every other axis must have the same size in all of them, and "
                f"one tensor has {n(got)} where the first has {n(want)}."
                + (f" .unsqueeze({unsq.group(1)}) put the new size-1 axis at position {unsq.group(1)}: to join a (B,) "
                   f"tensor to a (B, T) one along dim 1, make it (B, 1) with unsqueeze(1) (or [:, None])."
                   if unsq else ""))
    if "before Module.__init__() call" in text:
        return ("The layer's __init__ assigned a sub-module, a parameter or a buffer before nn.Module set itself up: "
                "call super().__init__() as the first line of __init__.")
    m = re.search(r"missing (\d+) required positional arguments?: (.+)$", text, re.M)
    if m:
        return (
            f"The call left out {m.group(2)}: PyTorch cannot guess it. For softmax, say along which axis "
            "the probabilities must sum to 1 (dim=-1: over the last axis)."
            if '"dim"' in m.group(2) or "'dim'" in m.group(2) else f"The call left out {m.group(2)}."
        )
    m = re.search(r"'(\w+)' object has no attribute '(\w+)'", text)
    module_kind = m and (isinstance(getattr(torch.nn, m.group(1), None), type) or any(
        type(v).__name__ == m.group(1) for _, v in values if isinstance(v, torch.nn.Module)))
    if m and isinstance(exc, AttributeError) and module_kind:  # a layer of a model, not the one meant
        kind, attr = m.groups()
        modules = [f"{name} is {type(v).__name__}" for name, v in values if isinstance(v, torch.nn.Module)][:3]
        seen = f" On that line {', '.join(modules)}." if modules else ""
        return (f"The object reached here is a {kind}, which has no {attr}: the code picked another part than it "
                f"meant (a wrong index or name into a model, say).{seen} print(model) lists every sub-module "
                "with its index.")
    if re.search(r"'[<>]=?' not supported between instances of '\w+' and '\w+'", text) and "NoneType" in text:
        if ".get" in source.split("#")[0]:
            return ("A None was compared with < or >: dict.get returns None for a key that is not in the dict, and "
                    "min, max and sorted compare what their key= returns. Give get a default of the right kind, "
                    "d.get(key, default) (for a min, one that sorts after every real value, such as math.inf).")
        return ("A None was compared with < or >: a function without a return statement gives None, and so does "
                "a lookup that found nothing (dict.get).")
    m = re.search(r"For 1D input, 1D target must have size 1|Expected input batch_size \((\d+)\) to match target "
                  r"batch_size \((\d+)\)", text)
    if m:
        return ("F.cross_entropy takes logits of shape (N, V), one row of V scores per prediction, and targets of "
                "shape (N,), one class id per row (a 1-D input is read as the scores of a single prediction). "
                "Flatten both the same way and keep the vocabulary axis: logits.reshape(-1, V) and "
                "targets.reshape(-1); .view(-1) on the logits merges V into the rest.")
    m = re.search(r"not enough values to unpack \(expected (\d+), got (\d+)\)", text) or re.search(
        r"too many values to unpack \(expected (\d+)(?:, got (\d+))?\)", text
    )
    if m:
        want, got = m.groups()
        return (
            f"The line unpacks {want} values from something that has {got or 'more'}: for `B, T, C = x.shape`, "
            "the tensor has a different number of axes than the names on the left (an unbatched input "
            "(T, C) has 2). Use x.shape[-1], x.shape[-2], … to read sizes from the end."
        )
    return None


def _plain(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_ANONYMOUS = {"<listcomp>": "a list comprehension", "<dictcomp>": "a dict comprehension", "<setcomp>": "a set "
              "comprehension", "<genexpr>": "a generator expression", "<lambda>": "a lambda"}


def _in_frame(name: str, outer: list[str]) -> str:
    """'in your cell', 'in forward', 'in a list comprehension in encode'."""
    if name == "<module>":
        return "in your cell"
    if name in _ANONYMOUS:
        around = next((n for n in reversed(outer) if n not in _ANONYMOUS), None)
        return f"in {_ANONYMOUS[name]}" + (f" in {around}" if around and around != "<module>" else "")
    return f"in {name}"


def explain_parts(exc: BaseException, sizes=None, axes_of=None) -> list[str]:
    """The lines of the explanation (without PyTorch's own message): may be empty."""
    sizes = getattr(exc, "course_sizes", None) or sizes
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    lines: list[str] = []
    values: list[tuple[str, Any]] = []
    source = ""
    mine = [(f, ln) for f, ln in frames if _is_student(f.f_code.co_filename)]
    if mine:
        frame, lineno = mine[-1]
        source = _source_line(frame, lineno)
        where = _in_frame(frame.f_code.co_name, [f.f_code.co_name for f, _ in mine[:-1]])
        raised_here = frame is frames[-1][0]
        how = "raised" if raised_here else "failed inside a call"
        lines.append(
            f"{type(exc).__name__} {where}, line {lineno}: {how}"
            + (f" at `{source[:200]}`" if source else "")
            + "."
        )
        described = []
        for name in _chains(source)[:20] if source else []:
            value = _lookup(name, frame)
            if value is _MISSING:
                continue
            values.append((name, value))
            if callable(axes_of) and isinstance(value, torch.Tensor):
                try:
                    named = axes_of(name, value)
                except Exception:  # noqa: BLE001
                    named = None
                if named:
                    described.append(f"{name}: {str(value.dtype).replace('torch.', '')} {tuple(value.shape)} = {named}")
                    continue
            text = _describe_value(name, value, sizes)
            if text:
                described.append(text)
        if described:
            lines.append("On that line: " + "; ".join(described[:10]) + ".")
        if isinstance(exc, IndexError) and source:
            lines.extend(_bad_indices(frame, source))
    outside = outside_told(getattr(exc, "course_outside", None))  # the cause; what PyTorch says follows from it
    if outside:
        lines.append(outside[0].upper() + outside[1:])
    meaning = _meaning(exc, sizes, values, source or "")
    if meaning:
        lines.append(meaning)
    return lines


def explain_exception(exc: BaseException, sizes: dict[str, int] | None = None, axes_of=None) -> str:
    """Where the student's code raised ``exc``, the tensors on that line, what the message means.

    Runs in the student's process. The last line is the exception's own text; when nothing could
    be added, that line alone ("TypeName: message"). Never raises.
    """
    try:
        plain = _plain(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        plain = type(exc).__name__
    try:
        lines = explain_parts(exc, sizes, axes_of)
    except Exception:  # noqa: BLE001
        return plain
    if not lines:
        return plain
    return "\n".join([*lines, f"(The error itself: {plain})"])


# ---------------------------------------------------------------------------------------------
# Intermediate values


def trace(module: torch.nn.Module, *inputs, with_inputs: bool = False, **kwargs) -> dict[str, torch.Tensor]:
    """Probe side: run ``module(*inputs)`` under ``torch.no_grad`` and return the output of every
    named submodule that returned a tensor, detached, in the order the calls finished (the first
    call of each submodule only). ``with_inputs``: also each submodule's first tensor argument,
    as ``"<name> (input)"``, in the order the calls started."""
    seen: dict[str, torch.Tensor] = {}
    handles = []

    def before_for(name):
        def before(mod, args):
            key = f"{name} (input)"
            if key not in seen and args and isinstance(args[0], torch.Tensor):
                seen[key] = args[0].detach().clone()
        return before

    def after_for(name):
        def after(mod, args, output):
            if name not in seen and isinstance(output, torch.Tensor):
                seen[name] = output.detach().clone()
        return after

    try:
        for name, sub in module.named_modules():
            if name:
                if with_inputs:
                    handles.append(sub.register_forward_pre_hook(before_for(name)))
                handles.append(sub.register_forward_hook(after_for(name)))
        with torch.no_grad():
            module(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def unused_outputs(module: torch.nn.Module, *inputs, limit: int = 48, depth: int = 8) -> list[str]:
    """Probe side: the named submodules (at most ``limit``, at most ``depth`` names deep) whose output
    ``module``'s forward does not use: the submodule is called and returns a tensor, but a fixed
    pseudo-random change to what it returns (in every call) leaves ``module(*inputs)`` exactly as
    it was. Only the outermost of nested names is listed."""
    with torch.no_grad():
        base = module(*inputs)
    if not isinstance(base, torch.Tensor):
        return []
    names = [n for n in trace(module, *inputs) if n.count(".") < depth][:limit]  # one forward pass each
    unused: list[str] = []
    for seed, name in enumerate(sorted(names, key=lambda n: n.count("."))):
        sub = module.get_submodule(name)
        if any(name.startswith(f"{outer}.") for outer in unused):
            continue
        called = []

        def bump(mod, args, output, seed=seed, called=called):
            if isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel():
                called.append(True)
                g = torch.Generator().manual_seed(1000 + seed)
                noise = torch.randn(output.shape, generator=g, dtype=torch.float64).to(output.dtype)
                return output + noise * (1 + output.detach().abs().mean())
            return None

        handle = sub.register_forward_hook(bump)
        try:
            with torch.no_grad():
                out = module(*inputs)
        except Exception:  # noqa: BLE001 - a forward that cannot take the change uses the output
            continue
        finally:
            handle.remove()
        if called and isinstance(out, torch.Tensor) and out.shape == base.shape and torch.equal(out, base):
            unused.append(name)
    return unused


def unused_told(ignored, reference: torch.nn.Module, inputs: tuple) -> str | None:
    """Judge side: the submodules whose output the student's forward ignores (``unused_outputs``'s
    list) while the reference's output depends on them, in words; None when there is none."""
    if not isinstance(ignored, list) or not ignored:
        return None
    theirs = set(unused_outputs(reference, *inputs))
    called = trace(reference, *inputs)
    names = [n for n in ignored if isinstance(n, str) and n in called and n not in theirs]
    if not names:
        return None
    labels = [f"{n} ({_gloss(n)})" if _gloss(n) else n for n in names[:3]]
    listed = " and ".join(labels) if len(labels) < 3 else ", ".join(labels[:-1]) + f" and {labels[-1]}"
    return (
        f"it calls {listed} but never uses what {'it returns' if len(names) == 1 else 'they return'}: "
        "changing that output leaves your module's output exactly as it was, while the reference's output "
        "depends on it. Another tensor stands where that output belongs (a variable used twice, or the "
        "wrong one of two similar names)"
    )


_GLOSS = {
    "attn": "the attention", "attention": "the attention", "self_attention": "the attention",
    "sa": "the attention", "mlp": "the MLP", "ffwd": "the MLP", "feed_forward": "the MLP",
    "query": "the query projection", "key": "the key projection", "value": "the value projection",
    "to_output": "the attention's output projection", "proj": "the output projection",
    "ln": "the LayerNorm", "ln1": "the first LayerNorm", "ln2": "the second LayerNorm",
    "ln_f": "the final LayerNorm", "norm_before_attn": "the norm before the attention",
    "norm_before_mlp": "the norm before the MLP", "lm_head": "the output layer (logits)",
    "token_embedding": "the token embedding", "tok_emb": "the token embedding",
    "position_embedding": "the position embedding", "pos_emb": "the position embedding",
    "heads": "the heads",
}
_CONTAINERS = {"blocks": "block", "layers": "layer", "heads": "head", "h": "block"}


def _gloss(name: str) -> str:
    parts = name.split(".")
    words = []
    i = 0
    head = None
    while i < len(parts):
        part = parts[i]
        if part in _CONTAINERS and i + 1 < len(parts) and parts[i + 1].isdigit():
            words.append(f"{_CONTAINERS[part]} {parts[i + 1]}")
            i += 2
            continue
        if i == len(parts) - 1:
            head = _GLOSS.get(part)
            if part.isdigit() and i > 0:
                head = None
        i += 1
    if head is None:
        return ""
    return head + "".join(f" of {w}" for w in reversed(words))


def _as_multiple(diff: torch.Tensor, candidates: dict[str, torch.Tensor], atol: float, rtol: float) -> str | None:
    """'1 × the output of attention' when ``diff`` is a constant multiple of one candidate."""
    d = diff.double()
    if not torch.isfinite(d).all():
        return None
    # the outermost name first: mlp's output before mlp.model.2's, which is the same tensor
    for name, cand in sorted(candidates.items(), key=lambda item: item[0].count(".")):
        if not isinstance(cand, torch.Tensor) or cand.shape != d.shape:
            continue
        t = cand.double()
        tt = float((t * t).sum())
        if tt == 0 or not torch.isfinite(t).all():
            continue
        k = float((t * d).sum()) / tt
        if abs(k) > 1e-6 and bool(torch.isclose(d, k * t, atol=atol, rtol=rtol).all()):
            size = "" if abs(abs(k) - 1) < 1e-9 else f"{_num(abs(k))} × "
            square = (1 + k) ** 2  # 1 + k = sqrt(n): a term scaled by a square root where it is added as it is
            root = (f" (1 + {_num(k)} = sqrt({round(square)}): {name} is scaled by a square root, e.g. sqrt(C), where "
                    "the reference adds it as it is)") if k > 0 and round(square) >= 2 and abs(square - round(square)) < 1e-3 * square \
                and abs((1 + k) - round(1 + k)) > 1e-3 else ""
            return f"{'minus ' if k < 0 else ''}{size}{name}{root}"
    return None


def _residual_around(extra: str | None, want: torch.Tensor, earlier: dict, atol: float, rtol: float) -> str:
    """When a sub-module's input is the reference's plus the input of the sub-module called just
    before, whose output the reference passes on: a residual connection added around that one."""
    if not extra or not extra.startswith("the input of "):
        return ""
    around = extra.removeprefix("the input of ")
    output = earlier.get(f"the output of {around}")
    if not isinstance(output, torch.Tensor) or output.shape != want.shape or not torch.isclose(
            output.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True).all():
        return ""
    name = around.split(" (")[0]
    return (f" That is {name}'s output added to its own input, x + {name}(x): a residual connection around {name} "
            f"that the reference does not have (where the reference passes on {name}(x) alone, {name} adds its own "
            "residual inside).")


def first_divergence(
    student_trace: dict[str, torch.Tensor], reference_trace: dict[str, torch.Tensor], atol: float, rtol: float,
    known: dict[str, torch.Tensor] | None = None,
) -> str | None:
    """Judge side: the first value, in the reference's order, that departs from the reference's
    (a submodule's output, or its input when ``trace`` recorded inputs); ``None`` when every value
    the reference recorded matches. ``known``: other values of the reference's forward pass by
    name (its input, say): when the departure is exactly a multiple of one of them, or of a value
    recorded before it, the message says so."""
    if not isinstance(student_trace, dict) or not isinstance(reference_trace, dict):
        return None
    earlier = dict(known or {})
    for key, want in reference_trace.items():
        is_input = key.endswith(" (input)")
        name = key.removesuffix(" (input)")
        gloss = _gloss(name)
        label = f"{name} ({gloss})" if gloss else name
        value = f"the input of {label}" if is_input else f"the output of {label}"
        before = (
            "every submodule's output before it matches, so the wrong step is in the code between "
            "those calls" if is_input else "everything before it matches"
        )
        have = student_trace.get(key)
        if not isinstance(have, torch.Tensor):
            return (
                f"the reference calls {label}, but in your module {name} was never called with a tensor "
                "(or it has another name); everything before it matches."
            )
        if tuple(have.shape) != tuple(want.shape):
            return (
                f"the first value that departs from the reference is {value}: shape {tuple(have.shape)}, "
                f"expected {tuple(want.shape)}; {before}."
            )
        if not bool(torch.isclose(have.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True).all()):
            extra = _as_multiple(have.double() - want.double(), earlier, atol, rtol)
            exactly = f" It is the reference's value {'' if extra.startswith('minus') else 'plus '}{extra}." if extra else ""
            exactly += _residual_around(extra, want, earlier, atol, rtol) if is_input else ""
            return (
                f"the first value that departs from the reference is {value}; {before}.{exactly} Evidence: "
                f"{first_mismatch(want, have, atol, rtol)}."
            )
        earlier.setdefault(value, want)
    return None


def difference_from(got: torch.Tensor, expected: torch.Tensor, reference_trace: dict[str, torch.Tensor],
                    atol: float, rtol: float, known: dict[str, torch.Tensor] | None = None) -> str | None:
    """When the whole output departs from the reference's by a multiple of one value the
    reference computed on the way ('plus minus 0.5 × the output of mlp'), that value; else None."""
    candidates = dict(known or {})
    for key, value in reference_trace.items():
        is_input = key.endswith(" (input)")
        name = key.removesuffix(" (input)")
        gloss = _gloss(name)
        label = f"{name} ({gloss})" if gloss else name
        candidates.setdefault(f"the input of {label}" if is_input else f"the output of {label}", value)
    return _as_multiple(got.double() - expected.double(), candidates, atol, rtol)


def precision_lost(expected, got, what: str, dtype: torch.dtype, tol: float, in_float32) -> str | None:
    """For a float64 case: the message when ``got`` is no further from the reference than the
    reference's own float32 computation, ``in_float32()`` (a float64 result computed partly in
    float32), else None."""
    if dtype != torch.float64 or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    if close(expected, got, tol, tol) or not torch.isfinite(got).all():
        return None
    with torch.no_grad():
        noise = float((in_float32().double() - expected).abs().max())
    if float((got.double() - expected).abs().max()) > 10 * noise:
        return None
    return (
        f"{what}: the output is as close to the reference as a float32 computation of it (largest "
        f"difference within 10 times float32's {noise:.2g} here), but no closer: part of the computation ran "
        "in float32 (a .float() call, "
        "or a tensor created without dtype=, which is float32) before the result came back to "
        f"float64. Keep the input's dtype throughout. Evidence: {first_mismatch(expected, got, tol, tol)}."
    )
