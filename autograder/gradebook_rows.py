"""The gradebook's rows for one submission (``autograder.gradebook``): the grades and comments it
lacks, our auto scores and comments, the manual grades a changed submission loses (and the CSV
that lists them), the late penalties nbgrader's plugin assigns, and the table of digests."""

from __future__ import annotations

import csv
from pathlib import Path

from nbgrader.api import Comment, Grade, Gradebook, SubmittedNotebook
from nbgrader.preprocessors import AssignLatePenalties
from sqlalchemy import Column, MetaData, String, Table

from autograder.course import Lesson
from autograder.grading import NotebookResult
from autograder.reports import NEEDS_EYES

#: in the output folder: every manual grade or comment a regrade dropped (appended, never rewritten)
DROPPED = "manual_grades_dropped.csv"
DROPPED_COLUMNS = ["dropped_at", "student_id", "assignment", "notebook", "cell", "field", "value", "reason"]

_TABLES = MetaData()
DIGESTS = Table(
    "transformer_course_digest", _TABLES,
    Column("assignment", String(128), primary_key=True),
    Column("student", String(128), primary_key=True),
    Column("digest", String(80), nullable=False),
)


def add_submission(gb: Gradebook, assignment: str, student: str, **kwargs) -> None:
    """``gb.add_submission`` without SQLAlchemy's "not in session" warnings.

    nbgrader 0.9.6 builds the new submission's objects (the submission, a submitted notebook per
    notebook, a grade or comment per cell) while reading the assignment's notebooks and cells
    from the database; each of those reads flushes the session first (autoflush), while the new
    objects are attached to stored ones but not yet added to the session: SQLAlchemy 2 warns
    "not in session, add operation ... will not proceed" for each. Here the whole graph is built
    with autoflush off, added to the session, and written in one commit.
    """
    with gb.db.no_autoflush:
        gb.add_submission(assignment, student, **kwargs)



def complete_submission(gb: Gradebook, submission) -> None:
    """Add the grades and comments a submission lacks (cells the course gained since it was written)."""
    with gb.db.no_autoflush:
        have = {nb.notebook.name: nb for nb in submission.notebooks}
        for notebook in submission.assignment.notebooks:
            nb = have.get(notebook.name)
            if nb is None:
                nb = SubmittedNotebook(notebook=notebook, assignment=submission)
                gb.db.add(nb)
            graded = {g.cell_id for g in nb.grades}
            commented = {c.cell_id for c in nb.comments}
            for cell in [*notebook.grade_cells, *notebook.task_cells]:
                if cell.id not in graded:
                    gb.db.add(Grade(cell_id=cell.id, notebook=nb))
            for cell in [*notebook.solution_cells, *notebook.task_cells]:
                if cell.id not in commented:
                    gb.db.add(Comment(cell_id=cell.id, notebook=nb))
    gb.db.commit()


def drop_manual(submission, why: str, when: str) -> list[dict]:
    """Clear every manual score, extra credit and manual comment of ``submission``; the rows of
    what was cleared."""
    rows = []

    def row(nb, cell, field, value):
        rows.append({"dropped_at": when, "student_id": submission.student.id, "assignment": submission.assignment.name,
                     "notebook": nb.notebook.name, "cell": cell, "field": field, "value": value, "reason": why})

    for nb in submission.notebooks:
        for grade in nb.grades:
            for field in ("manual_score", "extra_credit"):
                if getattr(grade, field) is not None:
                    row(nb, grade.cell.name, field, f"{getattr(grade, field):g}")
                    setattr(grade, field, None)
        for comment in nb.comments:
            if comment.manual_comment:
                row(nb, comment.cell.name, "manual_comment", comment.manual_comment)
            comment.manual_comment = None
    return rows


def write_scores(gb: Gradebook, lesson: Lesson, result: NotebookResult, review_manual: bool) -> None:
    """Our scores and comments into the submission's cells. ``needs_manual_grade``: a flagged
    status with no manual score yet, or (``review_manual``) a manual score to look at again."""
    notebook = lesson.name
    by_exercise = {e.exercise: e for e in result.exercises}
    for exercise in lesson.exercises.values():
        mine = by_exercise.get(exercise.grade_id)
        scores = {t.grade_id: t.points for t in mine.tests} if mine else {}
        eyes = mine is not None and mine.status in NEEDS_EYES
        for test in exercise.tests:
            grade = gb.find_grade(test.grade_id, notebook, result.assignment, result.student)
            grade.auto_score = scores.get(test.grade_id, 0.0)
            manual = grade.manual_score is not None
            grade.needs_manual_grade = (eyes and not manual) or (manual and review_manual)
        comment = gb.find_comment(exercise.grade_id, notebook, result.assignment, result.student)
        status = mine.status if mine else "missing"
        comment.auto_comment = f"[{status}] {mine.message if mine else ''}".strip()[:4000]


def late_penalties(gb: Gradebook, penalties: AssignLatePenalties, submission) -> None:
    """What nbgrader's ``AssignLatePenalties.preprocess`` does for each notebook, on our gradebook."""
    late = submission.total_seconds_late
    for nb in submission.notebooks:
        nb.late_submission_penalty = None
        if late > 0:
            penalty = penalties.plugin_inst.late_submission_penalty(submission.student.id, nb.score, late)
            if penalty is not None:
                nb.late_submission_penalty = penalties._check_late_penalty(nb, penalty)


def append_dropped(out: Path, rows: list[dict]) -> Path:
    """Append ``rows`` to ``out/manual_grades_dropped.csv`` (its header written once); returns its path."""
    path = out / DROPPED
    new = not path.exists()
    out.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, DROPPED_COLUMNS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return path

