"""Hints for a broadcasting clash: what, among the failing line's tensors, likely caused it (a
matrix that needs .T, two 1-D tensors met elementwise, a size read from the front, a reduction
without keepdim, an unsqueeze at the wrong place, .T on more than two axes).

Every hint takes a :class:`Clash` and returns a :class:`~helpers.checks.diagnose.finding.Finding`
that names its cause, or nothing; ``BROADCAST_HINTS`` lists them in the order they are tried.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.words import _letter


@dataclass(frozen=True)
class Clash:
    """A broadcasting clash: the failing line's names and values, its source, the case's sizes,
    and PyTorch's numbers: sizes ``a`` and ``b`` met at dimension ``k`` of the broadcast shape."""

    values: list[tuple[str, Any]]
    source: str = ""
    sizes: dict[str, int] | None = None
    a: int = 0
    b: int = 0
    k: int = 0


def _kept_no_axis(clash: Clash) -> Finding:
    """A tensor of the line whose shape is another's without its last axis: a reduction without
    keepdim (one that the line gives its axis back, ``.unsqueeze(-1)`` or ``[..., None]``, is not it)."""
    values = clash.values
    code = clash.source.split("#")[0].replace(" ", "")
    tensors = [(name, v) for name, v in values if isinstance(v, torch.Tensor)]
    for name, v in tensors:
        if f"{name}.unsqueeze(-1)" in code or f"{name}[...,None]" in code or f"{name}.unsqueeze({v.dim()})" in code:
            continue
        for other, u in tensors:
            if (u.dim() >= 2 and v.dim() == u.dim() - 1 and tuple(v.shape) == tuple(u.shape[:-1]) and u.shape[-1] != u.shape[-2]
                    and _first_clash(v.shape, u.shape) == {clash.a, clash.b}):  # the pair that raised, not two bystanders
                return Finding(f" {name} {tuple(v.shape)} has the shape of {other} {tuple(u.shape)} without its last "
                               "axis (what a mean, sum or var without keepdim=True leaves), so against it its axes line up "
                               f"from the right with the wrong ones: give {name} a size-1 last axis (keepdim=True where it "
                               f"is reduced, or {name}[..., None]) so that it broadcasts.",
                               "a reduction without keepdim")
    return NOTHING


def _first_clash(one, other) -> set[int] | None:
    """The two sizes that clash first when shapes ``one`` and ``other`` are lined up from their last
    axis (None when they broadcast)."""
    for p, q in zip(reversed(tuple(one)), reversed(tuple(other)), strict=False):  # the shorter one ends first
        if p != q and 1 not in (p, q):
            return {p, q}
    return None


_REDUCTION = re.compile(r"\.(sum|mean|max|min|amax|amin|var|std|norm|prod|logsumexp|argmax|argmin)\(|"
                        r"\btorch\.(sum|mean|max|min|amax|amin|var|std|norm|prod|logsumexp)\(")


def _dropped_axis(clash: Clash) -> Finding:
    """Sizes ``a`` and ``b`` clash where a tensor of the line, shape (..., a or b, b or a), met itself
    reduced over its last axis: a sum/mean/max without keepdim=True drops the axis, and what is left
    lines up against the wrong one. Only on a line that reduces something without keepdim=True."""
    code = clash.source.split("#")[0]
    if not _REDUCTION.search(code) or "keepdim=True" in code.replace(" ", ""):
        return NOTHING
    a, b = clash.a, clash.b
    for name, value in clash.values:
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and a != b and {a, b} == set(value.shape[-2:]):
            left = tuple(value.shape[:-1])
            return Finding(f" If one side is {name} {tuple(value.shape)} reduced over its last axis, it has shape "
                           f"{left}: the reduction dropped that axis and the rest lines up wrongly; keep it with "
                           "keepdim=True (or index [..., None]) so that it broadcasts as size 1.",
                           "a reduction without keepdim")
    return NOTHING


def _transposed_pair(clash: Clash) -> Finding:
    """Two matrices of the line whose shapes are each other's reversed: one of them needs a transpose."""
    mats = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] != v.shape[1]]
    for (n1, v1), (n2, v2) in itertools.combinations(mats, 2):
        if n1.removesuffix(".T") == n2.removesuffix(".T"):  # one tensor, written with and without .T
            continue
        if tuple(v1.shape) == tuple(reversed(v2.shape)):
            return Finding(f" {n1} {tuple(v1.shape)} is the shape of {n2} {tuple(v2.shape)} transposed: one of them "
                           "needs .T (nn.Linear stores its weight as (out_features, in_features)).",
                           "a matrix that needs .T")
    return NOTHING


def _outer_pair(clash: Clash) -> Finding:
    """Two 1-D tensors of different lengths met elementwise: maybe an outer combination was meant."""
    a, b, k, values = clash.a, clash.b, clash.k, clash.values
    ones = [(name, v.shape[0]) for name, v in values
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.shape[0] in (a, b)]
    if k != 0 or not ones or any(isinstance(v, torch.Tensor) and v.dim() > 1 for _, v in values):
        return NOTHING
    name, length = ones[0]
    other = next((f"{n} ({size},)" for n, size in ones[1:] if size != length), f"one of length {b if length == a else a}")
    return Finding(f" Both sides are 1-D ({name} ({length},) and {other}): an elementwise operation pairs entry i "
                   "with entry i. To combine every entry of one with every entry of the other (a table of shape "
                   "(len(a), len(b))), make the first a column: a[:, None] + b.", "an outer combination meant")


def _built_from_batch(clash: Clash) -> Finding:
    """A square tensor of the line whose every axis has the batch size, or the size of another
    leading axis of a tensor on the line: a size read from the front; or a square whose last two
    axes have another size (C) beside a (..., T, T) one: a size read at a fixed position."""
    values, sizes = clash.values, clash.sizes
    for name, v in values:
        if (sizes and "B" in sizes and isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape)) == 1
                and _letter(int(v.shape[0]), sizes) == "B"):
            return Finding(f" {name} {tuple(v.shape)} has the batch size B on every axis: it was built from a size "
                           "read at the front of a batched tensor (x.shape[0] is B for (B, T, ...)); read sizes from "
                           "the end, x.shape[-1], so that one line serves a single input and a batch.",
                           "a size read from the front")
    for name, v in values:  # the same, from another leading axis of a tensor on the line
        if not (isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape)) == 1):
            continue
        size = int(v.shape[0])
        for other, u in values:
            if (isinstance(u, torch.Tensor) and u.dim() > v.dim() and int(u.shape[-1]) != size and size in u.shape[:-v.dim()]
                    and size not in u.shape[-v.dim():]):  # a size the trailing axes also have may have come from them
                k = list(u.shape[:-v.dim()]).index(size)
                return Finding(f" {name} {tuple(v.shape)} has size {size} on every axis, the size of axis {k} of "
                               f"{other} {tuple(u.shape)}: it was built from a size read at the front ({other}.shape"
                               f"[{k}]); read it from the end, {other}.shape[-1], so that one line serves any number "
                               "of leading axes.", "a size read from the front")
    squares = [(name, v, _letter(int(v.shape[-1]), sizes)) for name, v in values
               if isinstance(v, torch.Tensor) and v.dim() >= 2 and len(set(v.shape[-2:])) == 1]
    for name, v, letter in squares:  # a (T, T) square beside one built from another size (C, C)
        for other, u, wanted in squares:
            if letter and wanted == "T" and letter not in ("B", "T") and v.shape[-2:] != u.shape[-2:]:
                return Finding(f" {name} {tuple(v.shape)} has the size {letter} where {other} {tuple(u.shape)} has "
                               f"{wanted}: it was built from {letter} where {wanted} was meant. A size read at a fixed "
                               "position (x.shape[1]) lands on another axis when the input has one axis fewer or "
                               "more: read it from the end (T is x.shape[-2] for (..., T, C)).",
                               "a size read at a fixed position")
    return NOTHING


def _unsqueezed(clash: Clash) -> Finding:
    """An unsqueeze on a line whose broadcast failed: where the new axis went."""
    m = re.search(r"\.unsqueeze\((-?\d+)\)", clash.source.split("#")[0])
    if not m:
        return NOTHING
    return Finding(f" .unsqueeze({m.group(1)}) inserts a size-1 axis at position {m.group(1)}; after it the axes "
                   "must line up from the end: a (T, C) tensor already broadcasts against (B, T, C) as it is, while "
                   "(T, C).unsqueeze(1) is (T, 1, C), which puts T against B.", "an unsqueeze at the wrong position")


def _operation(source: str, values=()) -> str:
    """What a broadcasting clash on ``source`` (the failing line) came from, in words. A product of
    tensors of two axes or fewer never broadcasts (it raises its own error), so where every tensor
    on the line is such, the clash is the line's elementwise operation even when it also has an @."""
    source = source.split("#")[0]  # a shape comment may show a product the line does not compute
    tensors = [v for _, v in values if isinstance(v, torch.Tensor)]
    batched = not tensors or any(t.dim() > 2 for t in tensors)
    if batched and ("@" in source or re.search(r"\b(matmul|bmm|einsum)\(", source)):
        return ("A matrix product (@) lines up the axes before the last two like an elementwise operation "
                "(from the end)")
    if re.search(r"\.copy_\(", source):
        return "copy_ needs the source to broadcast to the destination's shape, lining the axes up from the end"
    return "An elementwise operation (+, -, *, /, masked_fill, where…) lines two tensors up from their last axis"


def _copied_into_other_sizes(clash: Clash) -> Finding:
    """``dest.weight.copy_(...)`` where ``dest`` is an nn.Linear and another nn.Linear of the line,
    whose weight is copied, has other sizes: the destination layer was built with the wrong sizes."""
    m = re.search(r"([\w.]+)\.weight\.copy_\(", clash.source.split("#")[0])
    layers = {name: v for name, v in clash.values if isinstance(v, torch.nn.Linear)}
    dest = layers.get(m.group(1)) if m else None
    if dest is None:
        return NOTHING
    for name, layer in layers.items():
        if layer is not dest and f"{name}.weight" in clash.source and layer.weight.shape != dest.weight.shape:
            return Finding(f" {m.group(1)} is nn.Linear(in_features={dest.in_features}, out_features={dest.out_features}), "
                           f"but {name}, whose weight this line copies, is nn.Linear(in_features={layer.in_features}, "
                           f"out_features={layer.out_features}): {m.group(1)} was built with other sizes. Build it with "
                           f"{name}'s: nn.Linear({name}.in_features, {name}.out_features).",
                           "a layer built with other sizes")
    return NOTHING


def _reversed_axes(clash: Clash) -> Finding:
    """``t.T`` on a tensor of more than two axes reverses them all: rarely what was meant."""
    for name, value in clash.values:
        if name.endswith(".T") and isinstance(value, torch.Tensor) and value.dim() > 2:
            return Finding(f" {name} reverses all {value.dim()} axes of {name[:-2]} (shape {tuple(value.shape)}); to "
                           "swap the last two only, use .transpose(-2, -1) (or .mT).", ".T on more than two axes")
    return NOTHING


def _ids_into_linear(values, linear: bool) -> str:
    """An integer tensor (token ids) on a line that calls an nn.Linear: the embedding lookup was skipped."""
    ids = next((name for name, v in values if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point
                and not v.dtype.is_complex and v.dtype != torch.bool), None)
    if not (linear and ids):
        return ""
    return (f" {ids} holds integers (token ids), not vectors: a linear layer takes the (..., C) embeddings, the "
            "output of the embedding lookup, never the ids themselves.")


#: the hints tried one after another: the first that finds something is told
ALTERNATIVES: list[Callable[[Clash], Finding]] = [
    _copied_into_other_sizes, _transposed_pair, _outer_pair, _built_from_batch, _kept_no_axis, _unsqueezed, _dropped_axis,
]

#: every hint of a broadcasting clash (tests/test_diagnose_silence.py runs each where its cause is absent)
BROADCAST_HINTS: list[Callable[[Clash], Finding]] = [_reversed_axes, *ALTERNATIVES]


def broadcast_hints(clash: Clash) -> Finding:
    """What the clash's line establishes: ``.T`` on more than two axes, then the first alternative."""
    first = next((found for found in (hint(clash) for hint in ALTERNATIVES) if found), NOTHING)
    return _reversed_axes(clash) + first
