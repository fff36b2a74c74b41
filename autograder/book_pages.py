"""The course's notebooks as the book shows them (``transformer-course book``, see ``autograder.book``).

Each lesson's *solution* notebook is transformed so the book never gives away more than a reader
should see:

* hidden tests (``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS``) are removed, as
  nbgrader's release does; the open part of those cells stays;
* answer cells (nbgrader ``solution: true``) lose their ``### BEGIN/END SOLUTION`` marker lines
  and are tagged ``hide-input``: the page shows them folded, behind a "Show solution" toggle;
* the final self-check cell (``check_notebook(...)``) and the "Check all your answers" text
  introducing it are removed: a reader of the book has no saved notebook to check.

Every figure a code cell draws gets alt text from the titles of its ``plot_*`` calls.
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

from autograder.course import (
    SOLUTIONS,
    CourseError,
    Lesson,
    cell_source,
    lessons,
    nbgrader_meta,
    without_hidden_tests,
    without_solution_markers,
)

#: the tag that makes myst-nb fold a cell's code into a closed <details> element
FOLD_TAG = "hide-input"

SELF_CHECK = re.compile(r"\bcheck_notebook\s*\(")
SELF_CHECK_HEADING = re.compile(r"^\s*#+\s*Check all your answers", re.I)


def plot_titles(root: Path) -> dict[str, str]:
    """The default ``title`` of each ``plot_*`` function in the modules of ``helpers/plotting/``
    (read, not run)."""
    titles = {}
    for path in sorted((root / "helpers" / "plotting").glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("plot_"):
                args = node.args
                named = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults, strict=True))
                named += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
                for arg, default in named:
                    if arg.arg == "title" and isinstance(default, ast.Constant) and isinstance(default.value, str):
                        titles[node.name] = default.value
    return titles


def figure_alt(source: str, defaults: dict[str, str] | None = None) -> str:
    """Alt text for the figures a code cell draws: the titles of its ``plot_*`` calls (the
    ``title=`` given, else the function's default title, else its name in words), or a plain
    description."""
    defaults = defaults or {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    titles = []
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name.startswith("plot_"):
                title = next((k.value.value for k in node.keywords if k.arg in ("title", "suptitle")
                              and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), None)
                title = title or defaults.get(name) or name[5:].replace("_", " ").capitalize()
                titles.append((node.lineno, node.col_offset, title))
    if not titles:
        return "Figure drawn by the code cell above"
    return "Figure: " + "; ".join(title for *_, title in sorted(titles))


def _is_self_check(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and bool(SELF_CHECK.search(cell_source(cell)))


def book_notebook(notebook: dict, plot_defaults: dict[str, str] | None = None) -> dict:
    """A copy of a solution notebook as the book shows it: no hidden tests, no solution markers,
    answer cells folded (tagged ``hide-input``), no self-check; outputs cleared."""
    nb = copy.deepcopy(notebook)
    cells = []
    for cell in nb["cells"]:
        if _is_self_check(cell):
            if cells and cells[-1]["cell_type"] == "markdown" and SELF_CHECK_HEADING.match(cell_source(cells[-1])):
                cells.pop()  # "Check all your answers": it only introduces the self-check cell
            continue
        source = cell_source(cell)
        source = without_hidden_tests(source)
        meta = cell.setdefault("metadata", {})
        if nbgrader_meta(cell).get("solution"):
            source = without_solution_markers(source)
            if cell["cell_type"] == "code":
                tags = meta.setdefault("tags", [])
                if FOLD_TAG not in tags:
                    tags.append(FOLD_TAG)
            else:  # a written answer: fold the text itself
                source = f"<details><summary>Show solution</summary>\n\n{source.strip()}\n\n</details>"
        cell["source"] = source.rstrip("\n") if cell["cell_type"] == "code" else source
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            image = meta.setdefault("mystnb", {}).setdefault("image", {})
            image.setdefault("alt", figure_alt(source, plot_defaults))
        cells.append(cell)
    nb["cells"] = cells
    return nb


def lesson_title(lesson: Lesson) -> str:
    """``Lesson 03 · Self-attention, step by step`` from the notebook's ``course`` metadata,
    else its first heading, else the assignment name."""
    meta = lesson.meta
    if meta.get("title"):
        number = meta.get("lesson")
        return f"Lesson {int(number):02d} · {meta['title']}" if isinstance(number, int) else str(meta["title"])
    for cell in lesson.notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for line in cell_source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return lesson.assignment


def select_lessons(root: Path, only: list[str] | None = None) -> list[Lesson]:
    """The lessons of ``solutions/`` in order; ``only`` keeps those named by assignment
    (``03-self-attention``) or number (``03`` or ``3``)."""
    course = lessons(root, SOLUTIONS)
    if not course:
        raise CourseError(f"{root / SOLUTIONS} holds no lesson notebooks")
    if not only:
        return course
    chosen, unknown = [], []
    for name in only:
        hits = [
            lesson for lesson in course
            if name == lesson.assignment or (name.isdigit() and lesson.assignment.split("-")[0].lstrip("0") == name.lstrip("0"))
        ]
        if not hits:
            unknown.append(name)
        chosen += [lesson for lesson in hits if lesson not in chosen]
    if unknown:
        known = ", ".join(lesson.assignment for lesson in course)
        raise CourseError(f"no lesson {', '.join(unknown)}; the course has {known}")
    return [lesson for lesson in course if lesson in chosen]


__all__ = ["FOLD_TAG", "book_notebook", "figure_alt", "lesson_title", "plot_titles", "select_lessons"]
