"""The gradebook ``grade --gradebook`` writes: nbgrader's tables filled without SQLAlchemy's
"not in session" warnings, and a regrade replaces a student's earlier record."""

import warnings
from pathlib import Path

from nbgrader.api import Gradebook

from autograder import grading
from autograder.course import lessons
from autograder.gradebook import COURSE_ID, write_gradebook
from autograder.grading import ExerciseResult, NotebookResult

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "03-self-attention"


def results(points: float) -> list[NotebookResult]:
    """Made-up results of two students for lesson 03: one scores ``points`` on every test, one
    handed in nothing gradable."""
    lesson = next(lesson for lesson in lessons(ROOT) if lesson.assignment == ASSIGNMENT)
    exercises = [
        ExerciseResult(exercise.grade_id, "passed", points * len(exercise.tests), sum(t.points for t in exercise.tests),
                       [grading.TestResult(t.grade_id, t.hidden, "passed", points, t.points, "") for t in exercise.tests])
        for exercise in lesson.exercises.values()
    ]
    return [NotebookResult("ada", ASSIGNMENT, lesson.filename, exercises),
            NotebookResult("bo", ASSIGNMENT, lesson.filename, [])]


def test_the_gradebook_is_written_without_session_warnings(tmp_path):
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert write_gradebook(db, ROOT, results(1.0)) == 2
        assert write_gradebook(db, ROOT, results(0.0)) == 2  # a regrade
    said = [str(w.message) for w in caught if "session" in str(w.message).lower()]
    assert not said, said
    with Gradebook(db, COURSE_ID) as gb:
        assert [s.student.id for s in gb.assignment_submissions(ASSIGNMENT)] in (["ada", "bo"], ["bo", "ada"])
        assert gb.find_submission(ASSIGNMENT, "ada").score == 0.0, "the regrade replaced the first record"
        assert gb.find_submission(ASSIGNMENT, "bo").score == 0.0
