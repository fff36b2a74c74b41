"""Notes on the names a student's function reads from the notebook (``code_notes``): a value the function
neither takes nor makes, where the cell that defines the function also sets it at its top level (a size,
a table or a setting left from trying the function out), where the function has one of its own by that
name (an argument's attribute, ``self.<name>``), or where one of its arguments is never read (renamed in
one place, not in the other). Such a function computes with the notebook's value at
every call, whatever it is given: right for the sizes it was tried on, wrong for others."""

from __future__ import annotations

import ast
import builtins
import functools
import linecache
import re
import types

import torch

from helpers.checks.diagnose.code_reading import Where
from helpers.checks.diagnose.student_code import _describe_value


def notebook_names(tree: ast.AST, fn: types.FunctionType, where: Where) -> list[str]:
    """One note per name of the notebook that ``fn`` reads where its own value is meant."""
    arguments = fn.__code__.co_varnames[:fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount]
    local = set(fn.__code__.co_varnames) | set(fn.__code__.co_cellvars) | _bound(tree)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unread = [a for a in arguments if a not in read and a not in ("self", "cls") and not a.startswith("_")]
    cell = "".join(linecache.getlines(fn.__code__.co_filename))
    top = _top_level(cell)
    notes, seen = [], set(_written_into(tree))  # a container the function fills is kept between calls: its own note
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        name = node.id
        if name in local or name in seen or hasattr(builtins, name) or name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if not _is_data(value):
            continue
        own = _own(name, arguments, cell)
        set_here = top.get(name) if not name.isupper() else None  # NAMES_IN_CAPITALS: constants, by convention
        if own is None and set_here is None and not unread:
            continue
        seen.add(name)
        shown = _describe_value(name, value, None) or f"{name}: a {type(value).__name__}"
        meant = (f"`{own}`" if own is not None else
                 f"`{unread[0]}` (an argument {fn.__name__} never reads)" if unread else "an argument (or a size read off one)")
        if own is not None or set_here is None:
            notes.append(f"{where.line(node)} reads `{name}` from the notebook (now {shown})"
                         + (f", not `{own}`, its own of that name" if own is not None else "")
                         + f": every call uses the notebook's value, whatever it is given. Was {meant} meant?")
        else:
            line, text = set_here
            notes.append(f"{where.line(node)} reads `{name}`, which {fn.__name__} neither takes nor sets: the cell "
                         f"sets it at its top (line {line}, `{text}`; now {shown}), so every call uses that one value, "
                         f"whatever it is given: right for the sizes it was tried on, not for others. Was {meant} meant?")
    return notes


#: methods that change the container they are called on
_FILLING = frozenset("append extend insert update setdefault add pop popitem remove discard clear".split())


def _written_into(tree: ast.AST) -> set[str]:
    """Names whose object the function changes: ``name[key] = ...``, ``name.append(...)``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and isinstance(node.value, ast.Name):
            found.add(node.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FILLING \
                and isinstance(node.func.value, ast.Name):
            found.add(node.func.value.id)
    return found


def arguments_overwritten(tree: ast.AST, fn: types.FunctionType, where: Where) -> list[str]:
    """An argument that the function's body, at its own level, sets before it ever reads it: what the
    caller passes is never used (a value kept from trying the function out)."""
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if func is None:
        return []
    arguments = {a.arg for a in (*func.args.args, *func.args.kwonlyargs, *func.args.posonlyargs)} - {"self", "cls"}
    notes, decided = [], set()
    for statement in func.body:
        reads = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value_reads = {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)} if statement.value else set()
            for target in targets:
                if isinstance(target, ast.Name) and target.id in arguments - decided and target.id not in value_reads:
                    notes.append(f"{where.line(statement)}, `{where.text(statement)}`, sets `{target.id}`, an argument "
                                 f"of {fn.__name__}, before anything reads it: the value the caller passes is never "
                                 "used. Was that line meant to stay?")
                    decided.add(target.id)
        decided |= reads & arguments
    return notes


def _bound(tree: ast.AST) -> set[str]:
    """Names the function's text binds (assignments, loops, imports, inner functions and classes)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # an inner function's arguments are ast.arg nodes, below
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


@functools.lru_cache(maxsize=64)
def _top_level(cell: str) -> dict[str, tuple[int, str]]:
    """The names the cell's own top level assigns: their line and statement, as the cell counts them
    (read once per cell: every check of every function the cell defines asks; callers only read it)."""
    try:
        tree = ast.parse(cell)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, tuple[int, str]] = {}
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            text = " ".join((ast.get_source_segment(cell, statement) or "").split())
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        found[n.id] = (statement.lineno, text if len(text) <= 70 else text[:67] + "...")
    return found


def _own(name: str, arguments: tuple[str, ...], cell: str) -> str | None:
    """The function's own value of that name, where the cell's text reads or sets one: ``self.<name>``, or
    ``<argument>(.<attribute>)*.<name>``."""
    for argument in arguments:
        match = re.search(rf"\b{re.escape(argument)}(?:\.\w+)*\.{re.escape(name)}\b", cell)
        if match:
            return match.group(0)
    return None


def _is_data(value) -> bool:
    """A value the function computes with (a number, a tensor, a table, a setting, a module), not code."""
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        return False
    if isinstance(value, (torch.dtype, torch.device)):
        return False
    return not callable(value) or isinstance(value, torch.nn.Module)
