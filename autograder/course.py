"""Where the course lives and what its notebooks contain: assignments, exercises, tests.

An *exercise* is one nbgrader answer cell (``solution: true``), named by its ``grade_id``.
Its tests are the nbgrader test cells (``grade: true``) whose ``grade_id`` starts with the
exercise's id and a dash: ``causal-mask`` is tested by ``causal-mask-check`` (visible) and
``causal-mask-hidden`` (hidden: its source holds ``### BEGIN HIDDEN TESTS``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SOLUTIONS = "solutions"
RELEASE = "notebooks"
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"


class CourseError(Exception):
    """A problem with the course files or the command's arguments; the message says what."""


def find_course_root(start: Path | None = None) -> Path:
    """The folder that holds ``solutions/``: ``$TRANSFORMER_COURSE_ROOT``, a parent of the
    working directory, or the checkout this package was installed from (editable install)."""
    env = os.environ.get("TRANSFORMER_COURSE_ROOT")
    candidates = [Path(env)] if env else []
    here = (start or Path.cwd()).resolve()
    candidates += [here, *here.parents, Path(__file__).resolve().parents[1]]
    for folder in candidates:
        if (folder / SOLUTIONS).is_dir():
            return folder
    raise CourseError(
        "cannot find the course: no solutions/ folder here or above; run inside the course "
        "checkout or set TRANSFORMER_COURSE_ROOT"
    )


def course_fingerprint(root: Path) -> str:
    """Changes whenever anything that decides a grade changes: lessons, checks, references, grader."""
    digest = hashlib.sha256()
    files = sorted((root / SOLUTIONS).rglob("*.ipynb"))
    for package in ("helpers", "autograder"):
        files += sorted((root / package).rglob("*.py"))
    for path in files:
        if ".ipynb_checkpoints" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def nbgrader_meta(cell: dict) -> dict:
    meta = cell.get("metadata", {})
    nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return nbg if isinstance(nbg, dict) else {}


def check_calls(source: str) -> list[str]:
    """Names of the ``check_*`` functions a test cell calls, in order (read, never run)."""
    tree = ast.parse(source)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name.startswith("check_"):
                names.append((node.lineno, node.col_offset, name))
    return [name for *_, name in sorted(names)]


@dataclass
class Test:
    grade_id: str
    source: str
    points: float
    hidden: bool
    checks: list[str]


#: a line ``### BEGIN SOLUTION`` or ``### END SOLUTION`` (nbgrader's markers in an answer cell)
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*(\n|$)", re.M)


#: a hidden-test block of a test cell, markers included
HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*(\n|$)", re.S | re.M)
#: the blocks that ``release`` takes out of the student's notebook, as (begin, end) markers
RELEASE_BLOCKS = (("### BEGIN SOLUTION", "### END SOLUTION"), (HIDDEN_BEGIN, "### END HIDDEN TESTS"))
#: the tag of cells whose code goes into the lesson's generated ``helpers/reference`` module
REFERENCE_TAG = "reference"


def without_solution_markers(source: str) -> str:
    """An answer cell's source as a student would have written it: the markers' lines removed."""
    return SOLUTION_MARKER.sub("", source)


def without_hidden_tests(source: str) -> str:
    """A test cell's source with its hidden block (markers included) removed."""
    return HIDDEN_BLOCK.sub("", source)


@dataclass
class Exercise:
    grade_id: str
    tests: list[Test] = field(default_factory=list)

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)


@dataclass
class Lesson:
    """One source notebook of ``solutions/``: an nbgrader assignment."""

    assignment: str
    path: Path
    notebook: dict
    exercises: dict[str, Exercise]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises.values())

    @property
    def meta(self) -> dict:
        """The notebook's ``course`` metadata: lesson, assignment, title, reference_module."""
        return self.notebook.get("metadata", {}).get("course", {})

    def reference_cells(self) -> list[dict]:
        """The cells tagged ``reference``, in order."""
        return [c for c in self.notebook["cells"] if REFERENCE_TAG in c.get("metadata", {}).get("tags", [])]

    def tests(self) -> list[Test]:
        return [t for e in self.exercises.values() for t in e.tests]

    def visible_only(self) -> "Lesson":
        """The same lesson without its hidden tests (for a student's self-check)."""
        exercises = {
            gid: Exercise(gid, [t for t in e.tests if not t.hidden]) for gid, e in self.exercises.items()
        }
        return Lesson(self.assignment, self.path, self.notebook, exercises)

    def solution_answers(self) -> dict[str, str]:
        """The course's own answer for every exercise, by grade_id (markers removed)."""
        return {
            gid: without_solution_markers(cell_source(cell))
            for cell in self.notebook["cells"]
            if (gid := nbgrader_meta(cell).get("grade_id")) in self.exercises
        }

    def exercise_of(self, test_id: str) -> Exercise:
        for exercise in self.exercises.values():
            if any(t.grade_id == test_id for t in exercise.tests):
                return exercise
        raise KeyError(test_id)


def load_lesson(path: Path, assignment: str | None = None) -> Lesson:
    notebook = json.loads(Path(path).read_text(encoding="utf-8"))
    exercises: dict[str, Exercise] = {}
    tests: list[Test] = []
    for cell in notebook["cells"]:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if meta.get("solution") and not meta.get("grade"):
            exercises[gid] = Exercise(gid)
        elif meta.get("grade") and cell["cell_type"] == "code":
            source = cell_source(cell)
            tests.append(Test(gid, source, float(meta.get("points", 0)), HIDDEN_BEGIN in source, check_calls(source)))
    for test in tests:
        owners = [e for gid, e in exercises.items() if test.grade_id.startswith(gid + "-")]
        if len(owners) != 1:
            raise CourseError(f"{path}: test cell {test.grade_id!r} does not name exactly one exercise")
        owners[0].tests.append(test)
    return Lesson(assignment or Path(path).parent.name, Path(path), notebook, exercises)


def lessons(root: Path, folder: str = SOLUTIONS) -> list[Lesson]:
    """Every lesson notebook under ``root/folder/<assignment>/``, in assignment order."""
    found = []
    for path in sorted((root / folder).glob("*/*.ipynb")):
        if ".ipynb_checkpoints" not in path.parts:
            found.append(load_lesson(path, path.parent.name))
    return found


#: the sentence of a lesson's first cell that states its run time, e.g. "about 2 to 4 minutes on
#: two CPU cores" or "in under a minute on two CPU cores"
RUN_TIME = re.compile(
    r"(?:(?P<low>\d+(?:\.\d+)?)\s*(?:to|–|-)\s*)?(?P<high>\d+(?:\.\d+)?|a|one)\s+(?P<unit>seconds?|minutes?)"
    r"[^.]*?\b(?:two|2)\b[^.]*?\bcores",
    re.I,
)


def stated_run_time_s(notebook: dict) -> float | None:
    """The upper bound, in seconds, that the lesson's first cell states for its full setting."""
    first = next((c for c in notebook["cells"] if c["cell_type"] == "markdown"), None)
    match = RUN_TIME.search(cell_source(first)) if first else None
    if not match:
        return None
    high = match["high"].lower()
    value = 1.0 if high in ("a", "one") else float(high)
    return value * (60.0 if match["unit"].lower().startswith("minute") else 1.0)
