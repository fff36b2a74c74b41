"""No import cycles among the course's modules (``autograder/`` and ``helpers/``).

The graph is read from the source with ``ast``, never by importing: every ``import`` and ``from
... import`` counts, those inside functions too (an import moved into a function still ties the
two modules together; it only hides the cycle until that function runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness import ROOT

PACKAGES = ("autograder", "helpers")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``PACKAGES`` (a package is its ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` (read from ``path``) imports, anywhere in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the submodule; `from mod import name` the module
            names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:  # `import a.b.c` of a module we do not list: its package
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    return {module: imported(module, path, set(files)) for module, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Each group of modules that import each other, directly or not (a strongly connected
    component, by Tarjan's algorithm), with one cycle through it as ``[a, b, ..., a]``; none when
    the graph has no cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the number of modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [(frozenset(group), _cycle_in(graph, group)) for group in groups]


def _cycle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle through the group's first module, staying inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for after in sorted(graph[node] & group):
                if after == start:
                    return paths[node] + [start]
                if after not in paths:
                    paths[after] = paths[node] + [after]
                    following.append(after)
        frontier = following
    raise AssertionError(f"{sorted(group)} is not a cycle")


def show(cycle: list[str]) -> str:
    return " -> ".join(cycle)


def test_the_graph_sees_imports_inside_functions(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found, and a
    graph without cycles has none."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "autograder" / "a.py").write_text("from autograder.b import thing\n")
    (tmp_path / "autograder" / "b.py").write_text("thing = 1\n\ndef later():\n    from . import a\n    return a\n")
    (tmp_path / "helpers" / "c.py").write_text("import autograder.b\nimport os\n")
    graph = import_graph(tmp_path)
    assert graph["autograder.b"] == {"autograder.a"} and graph["helpers.c"] == {"autograder.b"}
    assert [show(c) for _, c in cycles(graph)] == ["autograder.a -> autograder.b -> autograder.a"]
    (tmp_path / "autograder" / "b.py").write_text("thing = 1\n")
    assert cycles(import_graph(tmp_path)) == []


def test_no_import_cycles():
    found = [c for _, c in cycles(import_graph())]
    assert not found, "import cycles (break each one; an import inside a function does not):\n" + "\n".join(
        show(c) for c in found)
