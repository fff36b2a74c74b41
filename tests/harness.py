"""Shared tools for the lesson tests: build submissions from the solution and grade them.

A *mistake* is a list of ``(old, new)`` text edits applied to one exercise's solution cell; an
*alternative* is a full, differently written, correct answer. Both become notebooks in
nbgrader's layout and go through the real grader, exactly as a class's submissions would.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.batch import grade_class
from autograder.course import RELEASE, cell_source, load_lesson, nbgrader_meta
from autograder.demo import _answer, _with_answers
from autograder.runner import Limits

ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(wall_s=300, cell_s=30)


def lesson(assignment: str):
    (path,) = sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))
    return load_lesson(path, assignment)


def solution_answers(assignment: str) -> dict[str, str]:
    """The solution's answer cells, markers removed, by grade_id."""
    nb = lesson(assignment).notebook
    return {
        nbgrader_meta(c)["grade_id"]: _answer(cell_source(c), [])
        for c in nb["cells"]
        if nbgrader_meta(c).get("solution")
    }


def edited(assignment: str, exercise: str, edits: list[tuple[str, str]]) -> dict[str, str]:
    """All solution answers, with ``edits`` applied to ``exercise`` (each ``old`` must occur)."""
    answers = solution_answers(assignment)
    raw = {nbgrader_meta(c)["grade_id"]: cell_source(c) for c in lesson(assignment).notebook["cells"]
           if nbgrader_meta(c).get("solution")}
    answers[exercise] = _answer(raw[exercise], edits)
    return answers


def grade_submissions(assignment: str, submissions: dict[str, dict[str, str]], tmp: Path, jobs: int = 2):
    """Grade ``{student: {grade_id: answer source}}`` against the release; returns the gradebook."""
    les = lesson(assignment)
    release = json.loads((ROOT / RELEASE / assignment / les.filename).read_text(encoding="utf-8"))
    submitted = tmp / "submitted"
    for student, answers in submissions.items():
        target = submitted / student / assignment / les.filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(_with_answers(release, answers)), encoding="utf-8")
    return grade_class(ROOT, submitted, tmp / "graded", jobs=jobs, limits=LIMITS, only=[assignment], progress=False)


def row(frame, student: str, exercise: str):
    (match,) = frame[(frame.student_id == student) & (frame.exercise == exercise)].itertuples()
    return match
