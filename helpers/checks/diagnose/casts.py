"""Where a tensor of the wrong dtype got its dtype: the assignment, earlier in the student's
function, that cast it (``.float()``, ``.to(torch.float32)``, ``dtype=torch.float32``) or took its
dtype from another tensor (``.to(x)``, ``.type_as(x)``). Read off the code and checked against the
value the failing line holds, so what it says is established, never a guess.
"""

from __future__ import annotations

import linecache
import re

import torch

from helpers.checks.diagnose.student_code import _lookup

#: a method that casts to one dtype whatever the input's
_METHODS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
            "long": torch.int64, "int": torch.int32, "bool": torch.bool}
_NAMED = {"float32": torch.float32, "float": torch.float32, "float64": torch.float64, "double": torch.float64,
          "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64,
          "long": torch.int64, "int32": torch.int32, "int": torch.int32, "bool": torch.bool}
_DTYPE_ERROR = re.compile(r"expected scalar type|same dtype|[Ff]ound dtype|'indices' to have one of the following "
                          r"scalar types|expected both vectors to have same dtype")


def _assignment(frame, lineno: int, name: str) -> tuple[int, str] | None:
    """The last line before ``lineno`` in the frame's function that assigns ``name`` (``name = ...``)."""
    code = frame.f_code
    pattern = re.compile(rf"^\s*{re.escape(name)}\s*=(?!=)")
    for number in range(lineno - 1, code.co_firstlineno - 1, -1):
        text = linecache.getline(code.co_filename, number, frame.f_globals)
        if pattern.match(text):
            return number, text.strip()
    return None


def _cast_in(text: str, frame) -> tuple[str, torch.dtype, str | None] | None:
    """The cast an assignment's text makes: (its words, the dtype it gives, the tensor whose dtype it
    takes, or None for a fixed dtype)."""
    code = re.sub(r"#.*", "", text)
    for method, dtype in _METHODS.items():
        if re.search(rf"\.{method}\(\s*\)", code):
            return f".{method}()", dtype, None
    m = re.search(r"(?:\.to\(|dtype\s*=\s*)torch\.(\w+)", code)
    if m and m.group(1) in _NAMED:
        return m.group(0) + (")" if m.group(0).startswith(".to(") else ""), _NAMED[m.group(1)], None
    m = re.search(r"\.(to|type_as)\(\s*([\w.]+)\s*\)", code)
    if m:
        other = _lookup(m.group(2), frame)
        if isinstance(other, torch.Tensor):
            return f".{m.group(1)}({m.group(2)})", other.dtype, m.group(2)
    return None


def cast_origins(exc: BaseException, frame, lineno: int, values) -> list[str]:
    """For a dtype error: each tensor of the failing line whose dtype an earlier assignment of the
    function set by a cast, that line and what the cast does (one sentence each, at most two)."""
    if not _DTYPE_ERROR.search(str(exc)):
        return []
    found = []
    for name, value in values:
        if not (isinstance(value, torch.Tensor) and name.isidentifier()):
            continue
        assigned = _assignment(frame, lineno, name)
        cast = _cast_in(assigned[1], frame) if assigned else None
        if not cast or cast[1] != value.dtype:
            continue
        words, dtype, source = cast
        kind = str(dtype).replace("torch.", "")
        if source:
            found.append(f"{name} is {kind} because line {assigned[0]} made it with `{words}`, which takes "
                         f"{source}'s dtype ({kind}) as well as its device. To move a tensor to another's device only, "
                         f"`.to({source}.device)`.")
        else:
            found.append(f"{name} is {kind} because line {assigned[0]} cast it with `{words}`, {kind} whatever the "
                         "input's dtype. Was it meant to be cast back, or computed in the dtype of the tensors it meets?")
    return found[:2]
