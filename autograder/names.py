"""A test that could not run because a name is missing: which name, and what the notebook defines instead.

A test cell calls the exercise's check on the name the exercise gives (``check_mlp(MLP)``). When
the student renamed the class, or deleted or never ran the cell that defines it, the test raises
``NameError`` before any check runs. The grader reads the notebook's own code cells (never runs
them again) for the names they define at the top level, and says which one looks like the missing
name.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable

_MISSING = re.compile(r"NameError: name '(\w+)' is not defined")
_LINE = re.compile(r"^(?:def|class)\s+(\w+)|^(\w+)\s*(?::[^=]*)?=(?!=)", re.M)


def defined_names(sources: Iterable[str]) -> dict[str, str]:
    """The names the cells define at their top level, each with how: "defined" (a function, a class,
    an assignment) or "imported"."""
    names: dict[str, str] = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a magic line or a broken cell: read its lines as text
            names.update({a or b: "defined" for a, b in _LINE.findall(source)})
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = "defined"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update({n.id: "defined" for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update({(a.asname or a.name).split(".")[0]: "imported" for a in node.names})
    return names


def missing_name_hint(error: str, sources: Iterable[str]) -> str:
    """For a test that raised ``NameError``: what the notebook defines instead, in a sentence; "" otherwise."""
    found = _MISSING.search(error or "")
    if not found:
        return ""
    name = found.group(1)
    defined = defined_names(sources)
    if name in defined:  # defined, but not by the time the test ran: a cell after it, or one that raised
        return (f" Your notebook defines {name} only in a cell that comes after this test or that stopped "
                "before reaching it: define it in the exercise's answer cell, above the test.")
    own = sorted(n for n, how in defined.items() if how == "defined")  # the course's imports are not renamings
    near = difflib.get_close_matches(name, own, n=1, cutoff=0.75)
    if near:
        return (f" The test uses {name}, the name the exercise gives, and your notebook defines "
                f"{near[0]} instead: keep the exercise's name.")
    return (f" The test uses {name}, which no cell of your notebook defines: the exercise's answer cell "
            "defines it (was its first line changed, or the cell deleted?).")
