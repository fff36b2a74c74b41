"""The student's code at an error: which frames are the student's (``_is_student``), the sizes of
the case that was running (``case_sizes``), the failing line's names and their values in words."""

from __future__ import annotations

import ast
import linecache
import os
import re
import sysconfig
from contextlib import contextmanager
from typing import Any

import torch

from helpers.checks.diagnose.words import legend_shape

_HERE = os.path.dirname(os.path.abspath(__file__))  # helpers/checks/diagnose
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
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
    if isinstance(value, float):
        return f"{name} = {value:.6g} (a float)"
    if value is None:
        return f"{name} = None"
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
