"""Hints for a broadcasting clash: what, among the failing line's tensors, likely caused it (a
matrix that needs .T, a mask the other way round, a * between a matrix product's two sides, two 1-D
tensors met elementwise, a size read from the front, a reduction without keepdim (computed from the
line when it reduces a tensor of its own), a size-1 axis inside a shape, B and T flattened into one
axis, a per-row vector met by the last axis, an unsqueeze at the wrong place, .T on more than two
axes). A hint that names a cause has checked it against PyTorch's two sizes where it can.

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


_REDUCED_HERE = re.compile(r"([A-Za-z_][\w.]*)\.(sum|mean|amax|amin|var|std|norm|prod|logsumexp)\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)")


def _reduced_here(clash: Clash) -> Finding:
    """``exp / exp.sum(dim=-1)``: the line reduces one of its tensors over an axis without keepdim, and
    the shape that leaves, lined up against a tensor of the line, clashes at exactly PyTorch's two sizes."""
    code = clash.source.split("#")[0]
    tensors = {name: v for name, v in clash.values if isinstance(v, torch.Tensor)}
    for m in _REDUCED_HERE.finditer(code):
        name, how, dim = m.group(1), m.group(2), int(m.group(3))
        v = tensors.get(name)
        if v is None or v.dim() < 2 or not -v.dim() <= dim < v.dim():
            continue
        left = tuple(v.shape[:dim % v.dim()]) + tuple(v.shape[dim % v.dim() + 1:])
        for other, u in tensors.items():
            if u.dim() >= len(left) + 1 and _first_clash(left, u.shape) == {clash.a, clash.b}:
                kept = tuple(v.shape[:dim % v.dim()]) + (1,) + tuple(v.shape[dim % v.dim() + 1:])
                return Finding(f" `{m.group(0)}` has shape {left}: the {how} drops axis {dim}, so lined up from the right "
                               f"against {other} {tuple(u.shape)} its axes meet the wrong ones. keepdim=True keeps the "
                               f"axis as size 1, {kept}, and it broadcasts along it.", "a reduction without keepdim")
    return NOTHING


def _per_row_vector(clash: Clash) -> Finding:
    """A 1-D tensor whose length is the first axis of a tensor of the line, met at the last axis of
    the broadcast: one value per row lined up with the columns."""
    tensors = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor)]
    for name, v in tensors:
        if v.dim() != 1 or v.shape[0] not in (clash.a, clash.b) or clash.a == clash.b:
            continue
        n, met = int(v.shape[0]), clash.b if v.shape[0] == clash.a else clash.a
        rows = next(((o, u) for o, u in tensors if u.dim() >= 2 and u.shape[0] == n and u.shape[-1] != n), None)
        if rows is None:
            continue
        letter = _letter(n, clash.sizes)
        return Finding(f" {name} ({n},) lines up with the last axis of what it meets (size {met} there), not with its first: "
                       f"if it holds one value per row (its length is the first axis of {rows[0]} {tuple(rows[1].shape)}"
                       f"{f', {letter}' if letter else ''}), make it a column, {name}[:, None] of shape ({n}, 1), so that "
                       "it broadcasts along the rest.", "a per-row vector lined up with the last axis")
    return NOTHING


def _one_axis_misplaced(clash: Clash) -> Finding:
    """A tensor with a size-1 axis inside its shape ((T, 1, C)) that clashes with another of the line,
    and would broadcast against it with that axis first, or without it."""
    tensors = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor)]
    for name, v in tensors:
        ones = [i for i in range(1, v.dim()) if v.shape[i] == 1]
        for other, u in tensors:
            if u is v or u.dim() < v.dim() or _first_clash(v.shape, u.shape) != {clash.a, clash.b}:
                continue
            for i in ones:
                rest = tuple(v.shape[:i]) + tuple(v.shape[i + 1:])
                if _first_clash((1, *rest), u.shape) is None:
                    return Finding(f" {name} {tuple(v.shape)} has a size-1 axis at position {i}: lined up from the right "
                                   f"against {other} {tuple(u.shape)}, its other axes meet the wrong ones. With that axis "
                                   f"first, {(1, *rest)}, or without it, {rest}, it broadcasts.",
                                   "a size-1 axis at the wrong position")
    return NOTHING


def _merged_axes(clash: Clash) -> Finding:
    """An axis whose size is B × T (no letter of its own) on a line where another tensor keeps B and T
    apart: the two were flattened into one."""
    sizes = clash.sizes or {}
    B, T = sizes.get("B"), sizes.get("T")
    if not (isinstance(B, int) and isinstance(T, int) and B > 1 and T > 1) or B * T in sizes.values():
        return NOTHING
    tensors = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor)]
    for name, v in tensors:
        if B * T not in v.shape or B * T not in (clash.a, clash.b):
            continue
        for other, u in tensors:
            if u.dim() >= 2 and tuple(u.shape[:2]) == (B, T):
                return Finding(f" {name} {tuple(v.shape)} has an axis of {B * T} = B × T ({B} × {T}) where {other} "
                               f"{tuple(u.shape)} keeps B and T apart: were the two flattened into one (a view(-1) or "
                               "reshape over both, a repeat of a (T,) tensor B times)? Keep them as two axes, or leave the "
                               "batch axis out where every row gets the same values.", "B and T flattened into one axis")
    return NOTHING


#: the cause a hint reads off the failing line alone (its operator and its tensors' shapes): a check's
#: own guess about the error gives way to it (``helpers.checks.errors.caught``)
STAR_FOR_MATMUL = "an elementwise * where a matrix product was meant"


def _star_for_matmul(clash: Clash) -> Finding:
    """``B * A`` where B is (m, r) and A is (r, n): the shapes of a matrix product's two sides, met by
    an elementwise product (which lines up (m, r) with (r, n) from the right, and clashes)."""
    code = clash.source.split("#")[0]
    mats = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor) and v.dim() == 2]
    for (n1, v1), (n2, v2) in itertools.permutations(mats, 2):
        if v1.shape[1] != v2.shape[0] or {clash.a, clash.b} != (_first_clash(v1.shape, v2.shape) or set()):
            continue
        if re.search(rf"(?<![\w.]){re.escape(n1)}\s*\*\s*{re.escape(n2)}(?![\w.(])", code):
            return Finding(f" `{n1} * {n2}` multiplies entry by entry, and {tuple(v1.shape)} and {tuple(v2.shape)} are the "
                           f"shapes of a matrix product's two sides: {n1} @ {n2} is {(v1.shape[0], v2.shape[1])}. "
                           "Was @ meant?", STAR_FOR_MATMUL)
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
    batched = [(name, v) for name, v in clash.values if isinstance(v, torch.Tensor) and v.dim() > 2]
    for (n1, v1), (n2, v2) in itertools.product(mats, batched):  # a (T_total, T_new) mask against (..., T_new, T_total)
        if tuple(v1.shape) == tuple(reversed(v2.shape[-2:])) and _first_clash(v1.shape, v2.shape) == {clash.a, clash.b}:
            return Finding(f" {n1} {tuple(v1.shape)} has the last two axes of {n2} {tuple(v2.shape)} the other way round: "
                           f"was {n1} built transposed (its rows where its columns should be)?", "a matrix that needs .T")
    return NOTHING


def _outer_pair(clash: Clash) -> Finding:
    """Two 1-D tensors of different lengths met elementwise: maybe an outer combination was meant."""
    a, b, k, values = clash.a, clash.b, clash.k, clash.values
    ones = [(name, v.shape[0]) for name, v in values
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.shape[0] in (a, b)]
    made_here = "arange(" in clash.source.split("#")[0]  # a 1-D tensor the line makes: the tensors it names may be bystanders
    if k != 0 or not ones or (not made_here and any(isinstance(v, torch.Tensor) and v.dim() > 1 for _, v in values)):
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
    _copied_into_other_sizes, _star_for_matmul, _transposed_pair, _outer_pair, _built_from_batch, _reduced_here, _kept_no_axis,
    _one_axis_misplaced, _merged_axes, _per_row_vector, _unsqueezed, _dropped_axis,
]

#: every hint of a broadcasting clash (tests/test_diagnose_silence.py runs each where its cause is absent)
BROADCAST_HINTS: list[Callable[[Clash], Finding]] = [_reversed_axes, *ALTERNATIVES]


def broadcast_hints(clash: Clash) -> Finding:
    """What the clash's line establishes: ``.T`` on more than two axes, then the first alternative."""
    first = next((found for found in (hint(clash) for hint in ALTERNATIVES) if found), NOTHING)
    return _reversed_axes(clash) + first
