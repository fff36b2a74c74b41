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


def edited(assignment: str, exercise: str, edits: list[tuple[str, str]],
           also: dict[str, list[tuple[str, str]]] | None = None) -> dict[str, str]:
    """All solution answers, with ``edits`` applied to ``exercise`` (each ``old`` must occur).

    ``also``: edits of other exercises that keep them correct but make them lean on ``exercise``
    (lesson 03's head calling the notebook's ``apply_causal_mask``, say), so that a catalogue entry
    can show that a mistake still costs only its own exercise when the rest of the notebook uses it.
    """
    answers = solution_answers(assignment)
    raw = {nbgrader_meta(c)["grade_id"]: cell_source(c) for c in lesson(assignment).notebook["cells"]
           if nbgrader_meta(c).get("solution")}
    for other, other_edits in (also or {}).items():
        if other == exercise:
            raise ValueError(f"{other}: put the mistake's own edits in ``edits``")
        answers[other] = _answer(raw[other], other_edits)
    answers[exercise] = _answer(raw[exercise], edits)
    return answers


def mistake_submissions(assignment: str, mistakes: dict) -> dict[str, dict[str, str]]:
    """``{name: answers}`` for a catalogue ``{name: (exercise, edits, words[, also])}``."""
    return {name: edited(assignment, entry[0], entry[1], *entry[3:]) for name, entry in mistakes.items()}


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


def assert_costs_only_its_exercise(graded, student: str, exercise: str, words: str,
                                   lost: float | None = None) -> None:
    """The one rule of every lesson's catalogue: a mistake costs its own exercise and nothing else.

    ``student``'s row for ``exercise`` is ``failed``, names the mistake (``words`` in its message)
    and lost ``lost`` points (``None``: all of them); every other exercise of the lesson has a row,
    full marks and status ``passed``. A mistake whose consequence reaches another exercise (a wrong
    mask that breaks the head, a wrong LayerNorm that breaks the block) fails here.
    """
    rows = {r.exercise: r for r in graded[graded.student_id == student].itertuples()}
    assignments = set(graded[graded.student_id == student].assignment)
    assert len(assignments) == 1, f"{student}: graded for {sorted(assignments)}"
    expected = set(lesson(assignments.pop()).exercises)
    assert set(rows) == expected, f"{student}: graded exercises {sorted(rows)}, the lesson has {sorted(expected)}"
    assert exercise in rows, f"{exercise} is not an exercise of this lesson"
    own = rows[exercise]
    kept = 0 if lost is None else own.max_score - lost
    assert (own.score, own.status) == (kept, "failed"), (exercise, own.score, own.status, own.message)
    assert words in own.message, own.message
    others = {name: (r.score, r.max_score, r.status, r.message) for name, r in rows.items()
              if name != exercise and (r.score, r.status) != (r.max_score, "passed")}
    assert not others, f"{student}: a mistake in {exercise} also cost {others}"
