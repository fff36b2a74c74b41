"""``transformer-course check NOTEBOOK``: a student's own check, with the grader's diagnoses.

It runs the notebook the way grading does (a separate process, the course's own test cells),
but only the visible tests: hidden tests are neither run nor shown. Unlike ``nbgrader validate``,
it exits non-zero when anything fails, so it can sit in a script.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from autograder.course import CourseError, find_course_root, lessons, nbgrader_meta
from autograder.grading import InvalidNotebook, grade_notebook, read_notebook
from autograder.runner import Limits

MARKS = {"passed": "PASS", "failed": "FAIL"}


def match_lesson(path: Path, notebook: dict, root: Path):
    """The lesson a notebook belongs to: by its answer cells' ids, else by its file name."""
    ids = {nbgrader_meta(c).get("grade_id") for c in notebook["cells"]} - {None}
    course = lessons(root)
    best = max(course, key=lambda lesson: len(ids & set(lesson.exercises)), default=None)
    if best is not None and ids & set(best.exercises):
        return best
    for lesson in course:
        if lesson.filename == path.name:
            return lesson
    raise CourseError(f"{path} does not look like a lesson of this course (no exercise cells found)")


def check_notebook(path: str | Path) -> None:
    """The one-liner for the last cell of a lesson: check the *saved* notebook and print a report."""
    from autograder import child

    if child.IN_SANDBOX or os.environ.get("NBGRADER_EXECUTION"):  # being graded or validated
        print("(self-check skipped: the grader runs the tests itself)")
        return None
    try:
        report(Path(path))
    except CourseError as exc:
        print(f"cannot check: {exc}")
    return None


def report(path: Path, *, cell_s: float = 60.0, out=None) -> int:
    """Print a per-exercise report for ``path``; returns 0 when every visible test passes."""
    out = out or sys.stdout
    if not path.exists():
        raise CourseError(f"{path}: no such file")
    if path.is_dir() or path.suffix != ".ipynb":
        raise CourseError(f"{path}: not a notebook (expected a .ipynb file)")
    try:
        notebook = read_notebook(path)
    except InvalidNotebook as exc:
        raise CourseError(f"{path}: {exc}") from None
    root = find_course_root()
    full = match_lesson(path, notebook, root)
    lesson = full.visible_only()
    result = grade_notebook(lesson, path, "you", Limits(wall_s=max(600.0, 4 * cell_s), cell_s=cell_s))
    print(f"{full.assignment} · {path.name}", file=out)
    hidden_points = full.max_score - lesson.max_score
    failures = 0
    for exercise in result.exercises:
        mark = MARKS.get(exercise.status, exercise.status.upper())
        print(f"\n[{mark}] {exercise.exercise}: {exercise.score:g}/{exercise.max_score:g} visible points", file=out)
        for note in exercise.notes:
            print(f"    {note}", file=out)
        for test in exercise.tests:
            if test.status != "passed":
                print(f"    {test.grade_id}: {test.message}", file=out)
        failures += exercise.status != "passed"
    print(
        f"\nvisible tests: {result.score:g}/{result.max_score:g} points. Hidden tests "
        f"({hidden_points:g} more points) run when your work is graded.",
        file=out,
    )
    return 1 if failures else 0
