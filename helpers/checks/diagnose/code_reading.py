"""The student's code as text, for the notes: a function's lines as the notebook counts them, a node's
own words, and the name a call calls."""

from __future__ import annotations

import ast


class Where:
    """Line numbers as the notebook's cell counts them, and a node's own text."""

    def __init__(self, name: str, first: int, source: str):
        self.name, self.first, self.source = name, first, source

    def line(self, node: ast.AST) -> str:
        return f"line {self.first + node.lineno - 1} of {self.name}"

    def text(self, node: ast.AST) -> str:
        code = ast.get_source_segment(self.source, node) or ast.unparse(node)
        code = " ".join(code.split())
        return code if len(code) <= 90 else code[:87] + "..."


def called_name(call: ast.Call) -> tuple[str | None, str | None]:
    """(the object's dotted name, the called name): ``x.add(...)`` -> ("x", "add"); ``f(...)`` -> (None, "f")."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return ast.unparse(func.value), func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None
