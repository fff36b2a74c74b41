"""Write the trusted scores into an nbgrader gradebook, so `nbgrader export` and formgrader show them.

nbgrader stays the front end (its gradebook, formgrader, export); only the scores come from our
grader. Each test cell's score goes into its nbgrader ``Grade.auto_score``; each exercise's status
and message into the ``auto_comment`` of its answer cell. Submissions that crashed, timed out or
tampered are marked ``needs_manual_grade`` so formgrader lists them for the instructor. A regrade
replaces a student's earlier submission record, so no stale score survives.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from autograder.course import lessons
from autograder.grading import NotebookResult
from autograder.release import generate_release
from autograder.reports import NEEDS_EYES

COURSE_ID = "transformer-course"


def add_submission(gb: Gradebook, assignment: str, student: str) -> None:
    """``gb.add_submission`` without SQLAlchemy's "not in session" warnings.

    nbgrader 0.9.6 builds the new submission's objects (the submission, a submitted notebook per
    notebook, a grade or comment per cell) while reading the assignment's notebooks and cells
    from the database; each of those reads flushes the session first (autoflush), while the new
    objects are attached to stored ones but not yet added to the session: SQLAlchemy 2 warns
    "not in session, add operation ... will not proceed" for each. Here the whole graph is built
    with autoflush off, added to the session, and written in one commit.
    """
    with gb.db.no_autoflush:
        gb.add_submission(assignment, student)


def write_gradebook(db_url: str, root: Path, results: list[NotebookResult]) -> int:
    """Record ``results`` in the gradebook at ``db_url``; returns the number of submissions written."""
    course = {lesson.assignment: lesson for lesson in lessons(root)}
    assignments = sorted({r.assignment for r in results})
    with tempfile.TemporaryDirectory() as tmp:  # puts the assignments and their cells into the db
        generate_release(root, Path(tmp), db_url=db_url, only=assignments)
    written = 0
    with Gradebook(db_url, COURSE_ID) as gb:
        for result in sorted(results, key=lambda r: (r.assignment, r.student)):
            lesson = course[result.assignment]
            notebook = lesson.name
            gb.update_or_create_student(result.student)
            try:
                gb.remove_submission(result.assignment, result.student)
            except MissingEntry:
                pass
            add_submission(gb, result.assignment, result.student)
            by_exercise = {e.exercise: e for e in result.exercises}
            for exercise in lesson.exercises.values():
                mine = by_exercise.get(exercise.grade_id)
                scores = {t.grade_id: t.points for t in mine.tests} if mine else {}
                eyes = mine is not None and mine.status in NEEDS_EYES
                for test in exercise.tests:
                    grade = gb.find_grade(test.grade_id, notebook, result.assignment, result.student)
                    grade.auto_score = scores.get(test.grade_id, 0.0)
                    grade.needs_manual_grade = eyes
                comment = gb.find_comment(exercise.grade_id, notebook, result.assignment, result.student)
                status = mine.status if mine else "missing"
                comment.auto_comment = f"[{status}] {mine.message if mine else ''}".strip()[:4000]
            gb.db.commit()
            written += 1
    return written
