"""An error the student's code raised, explained: where it raised (their line, in which function),
the values that line names, a layer built outside the module, and what the message means.

``explain_error`` gives the lines and the cause they name; ``explain_parts`` the lines alone;
``explain_exception`` the text that ``Check`` shows (runs in the student's process, never raises).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers.checks.diagnose.casts import cast_origins
from helpers.checks.diagnose.meanings import _meaning
from helpers.checks.diagnose.outside import outside_told
from helpers.checks.diagnose.student_code import (
    _MISSING,
    _bad_indices,
    _chains,
    _describe_value,
    _is_student,
    _lookup,
    _source_line,
)
from helpers.checks.diagnose.words import TWICE_TELLS


@dataclass(frozen=True)
class Explained:
    """The lines of an error's explanation (without PyTorch's own message; may be empty) and the
    likely cause they name (``None`` when they only say where and what the message means)."""

    lines: list[str] = field(default_factory=list)
    cause: str | None = None


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
    return explain_error(exc, sizes, axes_of).lines


def explain_error(exc: BaseException, sizes=None, axes_of=None) -> Explained:
    """The lines of the explanation and the cause they name (a layer built outside the module, or
    the cause the meaning of the message names)."""
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
            lines.extend(_axis_too_many(described))
        if isinstance(exc, IndexError) and source:
            lines.extend(_bad_indices(frame, source))
    outside = outside_told(getattr(exc, "course_outside", None))  # the cause; what PyTorch says follows from it
    if outside:
        lines.append(outside[0].upper() + outside[1:])
    written = (_sizes_written_in(exc, source or "", values, sizes) or _tensor_in_list(source or "", values)
               or _truth_of_a_tensor(exc, source or "", values) or (cast_origins(exc, frame, lineno, values) if mine else []))
    lines.extend(written)
    meaning = _meaning(exc, sizes, values, source or "", guesses=not written)
    if meaning:
        lines.append(meaning.established)
    return Explained(lines, "a layer built outside the module" if outside else ESTABLISHED if written
                     else meaning.cause)


#: the cause of an explanation whose own lines read it off the failing line (a size written in, a
#: tensor looked up in a list): a check's own guesses about the error give way to it
ESTABLISHED = "established on the line"
#: the words of :func:`_sizes_written_in`'s finding
SIZE_WRITTEN_IN = "a size fixed in the code fits one model or text only"
_SHAPE_ERROR = re.compile(r"shape|size|must match|invalid for input|cannot be multiplied|out of range", re.I)
_SIZE_CALL = re.compile(r"\b(?:view|reshape|expand|repeat|Linear|Embedding|zeros|ones|empty|full|randn|rand|arange|"
                        r"new_zeros|new_ones|new_empty|split|unflatten)\s*\(([^()]*)\)")


def _tensor_in_list(source: str, values) -> list[str]:
    """``t in xs`` (or ``not in``) on the failing line, where ``t`` is a tensor and ``xs`` a list,
    tuple or set holding tensors: Python compares ``t`` with each of them by ``==``, which for
    tensors is elementwise (a broadcasting error, or a truth value that is ambiguous)."""
    named = dict(values)
    code = re.sub(r"#.*", "", source)
    for left, right in re.findall(r"(?<!for )(?<![\w.])([\w.\[\]]+)\s+(?:not\s+)?in\s+([\w.]+)", code):
        item, group = named.get(left), named.get(right)
        if isinstance(item, torch.Tensor) and isinstance(group, (list, tuple, set)) and any(
                isinstance(g, torch.Tensor) for g in group):
            return [f"`{left} in {right}` compares the tensor {left} with each tensor of {right} by ==, which for tensors "
                    "is elementwise (it broadcasts, or gives a tensor whose truth is ambiguous), not whether it is the "
                    f"same object. Compare identities: `id({left}) in {{id(q) for q in {right}}}`, or keep the ids "
                    "(or the names) in a set."]
    return []


def _truth_of_a_tensor(exc: BaseException, source: str, values) -> list[str]:
    """``if not mask:`` (``if mask``, ``mask or ...``, ``while x``) raised "Boolean value of Tensor with more
    than one value is ambiguous": the line asks for the truth value of a tensor of several values."""
    if "Boolean value of Tensor" not in str(exc):
        return []
    code = re.sub(r"#.*", "", source)
    for name, value in values:
        if not (isinstance(value, torch.Tensor) and value.numel() > 1):
            continue
        word = re.escape(name)
        if re.search(rf"\b(?:if|while|not|and|or)\s+{word}\b(?!\s*(?:is|==|!=|\.|\[|\())", code) or re.search(
                rf"(?<![\w.]){word}\s+(?:and|or)\b", code):
            return [f"The line asks for the truth value of {name}, a tensor of {value.numel()} values, which has none "
                    f"(only a tensor of one value reads as true or false). To ask whether an argument was given, "
                    f"compare it with None (`{name} is None`); to ask about its values, `.any()` or `.all()`."]
    return []


def _sizes_written_in(exc: BaseException, source: str, values, sizes) -> list[str]:
    """A shape error on a line that names a size the case does not have: a variable named after a
    legend letter (``C``, ``V``) holding another number than this case's, a view/reshape whose sizes
    are all written as numbers and do not hold the tensor (``view(1, 1)`` on a batch), or a number of
    two digits or more written into a call that takes sizes (``view(-1, 65)``) that is none of this
    case's sizes."""
    if not sizes or not source or not _SHAPE_ERROR.search(str(exc)):
        return []
    code = re.sub(r"#.*", "", re.sub(r"(['\"]).*?\1", "''", source))
    known = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    for name, value in values:
        if name in sizes and isinstance(value, int) and not isinstance(value, bool) and value != sizes[name]:
            return [f"{name} = {value} on that line, but this case's {name} is {sizes[name]} (the sizes here: {known}): "
                    f"{SIZE_WRITTEN_IN}, and one read from another object fits that object only. Take {name} from the "
                    "tensors this call is given (their .shape) or from the config."]
    entries = re.search(r"shape '\[([-\d, ]+)\]' is invalid for input of size (\d+)", str(exc))
    for call in re.finditer(r"\.(view|reshape)\(\s*(\d+(?:\s*,\s*\d+)*)\s*\)", code):
        asked = [int(v) for v in call.group(2).split(",")]
        if entries and asked == [int(v) for v in entries.group(1).split(",")]:
            held, room = entries.group(2), math.prod(asked)
            letters = [k for k, v in sizes.items() if str(v) == held]
            return [f"`.{call.group(1)}({call.group(2)})` writes every size as a number: they hold {room} "
                    f"entr{'y' if room == 1 else 'ies'}, and this tensor has {held}"
                    + (f" ({letters[0]} = {held})" if letters else "") + f". {SIZE_WRITTEN_IN[0].upper()}"
                    f"{SIZE_WRITTEN_IN[1:]}: read the sizes from the tensor, or let unsqueeze or [:, None] add "
                    "an axis of size 1."]
    for args in _SIZE_CALL.findall(code):
        for number in re.findall(r"(?<![\w.=])(\d{2,})(?![\w.])", args):
            if int(number) not in sizes.values():
                return [f"{number} is written into that line as a size, and no size of this case is {number} (the sizes "
                        f"here: {known}): {SIZE_WRITTEN_IN}. Read the size from the tensors (their .shape) or the config."]
    return []


def _axis_too_many(described: list[str]) -> list[str]:
    """A tensor on the failing line whose shape, in the case's letters, holds one letter twice ((B, B, nh, T, T))
    or a 1 in front of the batch ((1, B, T)): an axis more than it should have, said as what it shows. Said
    only of a tensor with more axes than every other tensor on the line: where another has as many, the
    letter seen twice is a size equal to that letter's by chance ((B, 3, T, B) for a last axis of 2 = B)."""
    shapes = [(m.group(1), [a.strip() for a in m.group(2).split(",")]) for m in
              (re.search(r"^(\S+): \w+ \(.*\) = \(([^)]*)\)", text) for text in described) if m]
    for name, letters in shapes:
        if any(len(other) >= len(letters) for n, other in shapes if n != name) and len(letters) > 2:
            continue
        named = [a for a in letters if a and not a.isdigit()]
        twice = next((a for a in named if named.count(a) > 1 and a in TWICE_TELLS), None)  # T, C: (T, T), (C, C) are fine
        if twice and len(letters) == 2:  # (B, B): two axes, as a (T, T) mask has, each the size of the wrong one
            return [f"{name} is ({twice}, {twice}): both of its sizes are {twice}'s. Was a size read from the "
                    f"{twice} axis (x.shape[0] of a batch, say) where another was meant?"]
        if twice or (len(letters) > 2 and letters[0] == "1" and letters[1] == "B"):
            what = f"{twice} twice" if twice else "a 1 in front of the batch axis B"
            return [f"{name} has {len(letters)} axes, ({', '.join(letters)}), with {what}: one axis more than "
                    "it should have. Was an axis added (unsqueeze, [None]) to a tensor that already had it, or did two "
                    "tensors with different numbers of axes broadcast into this one?"]
    return []


def explain_exception(exc: BaseException, sizes: dict[str, int] | None = None, axes_of=None) -> str:
    """Where the student's code raised ``exc``, the tensors on that line, what the message means.

    Runs in the student's process. The last line is the exception's own text; when nothing could
    be added, that line alone ("TypeName: message"). Never raises.
    """
    return explain_exception_cause(exc, sizes, axes_of)[0]


def explain_exception_cause(exc: BaseException, sizes: dict[str, int] | None = None,
                            axes_of=None) -> tuple[str, str | None]:
    """``explain_exception``'s text and the cause its lines name (``Explained.cause``; None when
    nothing could be added). Never raises."""
    try:
        plain = _plain(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        plain = type(exc).__name__
    try:
        found = explain_error(exc, sizes, axes_of)
    except Exception:  # noqa: BLE001
        return plain, None
    if not found.lines:
        return plain, None
    return "\n".join([*found.lines, f"(The error itself: {plain})"]), found.cause
