"""nbgrader's round trip, end to end, on one machine: an instructor and two students (each with a
HOME of their own) share an exchange folder.

release_assignment -> fetch_assignment -> the students answer and validate -> submit -> collect
-> ``transformer-course grade --gradebook`` -> feedback in nbgrader's layout -> release_feedback
-> fetch_feedback: each student gets their own feedback, with their own scores, and nobody
else's; hidden tests appear by name and message, never by code.

The instructor works in a copy of the course (its own CourseDirectory root: solutions/ is
nbgrader's source, notebooks/ its release, as nbgrader_config.py arranges), never in the checkout.
"""

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from harness import ROOT, catalogue, solution_answers
from jupyter_env import copy_course, person_env

from autograder.catalogue import with_answers
from autograder.course import RELEASE
from autograder.grading import ExerciseResult, NotebookResult
from autograder.grading import TestResult as CellResult
from autograder.reports import write_reports

ASSIGNMENT = "03-self-attention"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
COURSE_ID = "transformer-course"
#: nobody inherits the suite's Jupyter settings or course root
OWN = ("JUPYTER*", "TRANSFORMER_COURSE_ROOT")
CORRECT, MISTAKEN = "alice", "bob"
BOB_MISTAKE = catalogue(ASSIGNMENT).mistakes["head-no-scaling"]  # the head forgets to divide by sqrt(head_dim)


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    log = f"$ {' '.join(args)}\n{done.stdout}{done.stderr}"
    assert done.returncode == 0, log
    return done.stdout + done.stderr


def nbgrader(*args: str, cwd: Path, env: dict[str, str], exchange: Path) -> str:
    return run([sys.executable, "-m", "nbgrader", *args, f"--Exchange.root={exchange}"], cwd, env)


@pytest.mark.slow
def test_release_submit_grade_and_feedback_round_trip(tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    copy_course(course)
    exchange.mkdir(mode=0o777)
    exchange.chmod(0o777)
    teacher = person_env(tmp_path / "instructor", drop=OWN, TRANSFORMER_COURSE_ROOT=str(course))

    out = nbgrader("release_assignment", ASSIGNMENT, cwd=course, env=teacher, exchange=exchange)
    assert (exchange / COURSE_ID / "outbound" / ASSIGNMENT / NOTEBOOK).is_file(), out

    answers = {CORRECT: solution_answers(ASSIGNMENT), MISTAKEN: catalogue(ASSIGNMENT).answers(BOB_MISTAKE)}
    homes = {}
    for student, mine in answers.items():
        home = homes[student] = tmp_path / student
        home.mkdir()
        env = person_env(home, drop=OWN)
        nbgrader("fetch_assignment", ASSIGNMENT, f"--course={COURSE_ID}", cwd=home, env=env, exchange=exchange)
        path = home / ASSIGNMENT / NOTEBOOK
        fetched = json.loads(path.read_text(encoding="utf-8"))
        assert fetched == json.loads((ROOT / RELEASE / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
        path.write_text(json.dumps(with_answers(fetched, mine), indent=1), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(path)], cwd=home, env=env,
                              capture_output=True, text=True, timeout=600)
        report = done.stdout + done.stderr
        if student == CORRECT:
            assert "Success! Your notebook passes all the tests." in report, report[-3000:]
        else:
            assert "VALIDATION FAILED" in report and "CheckFailed: AttentionHead" in report, report[-3000:]
            assert "check_attention_head_hidden" not in report, "a student's validation never shows hidden tests"
        nbgrader("submit", ASSIGNMENT, f"--course={COURSE_ID}", f"--student={student}", cwd=home, env=env,
                 exchange=exchange)

    nbgrader("collect", "--update", ASSIGNMENT, cwd=course, env=teacher, exchange=exchange)  # as README writes it
    for student in answers:
        assert (course / "submitted" / student / ASSIGNMENT / NOTEBOOK).is_file()
        assert (course / "submitted" / student / ASSIGNMENT / "submission_secret.txt").is_file()

    db = course / "gradebook.db"
    run([sys.executable, "-m", "autograder.cli", "grade", "submitted", "--out", "graded", "--jobs", "2",
         f"--assignment={ASSIGNMENT}", f"--gradebook=sqlite:///{db}", "--fresh"], course, teacher)
    feedback = course / "graded" / "feedback"
    for student in answers:
        folder = feedback / student / ASSIGNMENT
        assert (folder / f"{ASSIGNMENT}.html").is_file(), sorted(p.name for p in feedback.rglob("*"))
        for sidecar in ("timestamp.txt", "submission_secret.txt"):  # release_feedback reads both
            assert (folder / sidecar).is_file(), (
                f"no {sidecar} next to {student}'s feedback: grade must copy it from the submission "
                "(batch.grade_class calls write_reports(results, out, submitted=submitted))")
            assert (folder / sidecar).read_bytes() == (course / "submitted" / student / ASSIGNMENT / sidecar).read_bytes()
    with sqlite3.connect(db) as con:
        scores = dict(con.execute(
            "SELECT student.id, SUM(grade.auto_score) FROM grade JOIN submitted_notebook ON grade.notebook_id = "
            "submitted_notebook.id JOIN submitted_assignment ON submitted_notebook.assignment_id = "
            "submitted_assignment.id JOIN student ON submitted_assignment.student_id = student.id GROUP BY student.id"))
    assert scores == {CORRECT: 6.0, MISTAKEN: 2.0}

    nbgrader("release_feedback", ASSIGNMENT, "--CourseDirectory.feedback_directory=graded/feedback",
             cwd=course, env=teacher, exchange=exchange)
    pages = {}
    for student, home in homes.items():
        out = nbgrader("fetch_feedback", ASSIGNMENT, f"--course={COURSE_ID}", f"--student={student}",
                       cwd=home, env=person_env(home, drop=OWN), exchange=exchange)
        fetched = sorted((home / ASSIGNMENT / "feedback").rglob("*.html"))
        assert [p.name for p in fetched] == [f"{ASSIGNMENT}.html"], out
        pages[student] = fetched[0].read_text(encoding="utf-8")

    alice, bob = pages[CORRECT], pages[MISTAKEN]
    assert "Feedback for alice" in alice and "bob" not in alice
    assert "Feedback for bob" in bob and "alice" not in bob
    assert re.search(r"6 / 6 points", alice) and not re.search(r"2 / 6 points", alice)
    assert re.search(r"2 / 6 points", bob) and not re.search(r"6 / 6 points", bob)
    for page in (alice, bob):
        assert "attention-head-hidden" in page, "hidden tests are named"
        assert "### BEGIN HIDDEN TESTS" not in page and "import check_attention_head_hidden" not in page
    assert "sqrt" in bob.split("attention-head-hidden", 1)[1], "the hidden test's message explains the mistake"
    assert "class='failed'" not in alice and "class='failed'" in bob


def test_feedback_is_also_written_in_nbgrader_s_layout(tmp_path):
    """Without a grading run: one page per student × notebook, with collect's two files beside it."""
    def result(student, points):
        status = "passed" if points else "failed"
        tests = [CellResult("attention-head-check", False, status, points, 2.0, "a message"),
                 CellResult("attention-head-hidden", True, status, points, 2.0, "hidden says")]
        return NotebookResult(student, ASSIGNMENT, NOTEBOOK, [ExerciseResult("attention-head", status, 2 * points, 4.0, tests)])

    submitted = tmp_path / "submitted"
    (submitted / "ann" / ASSIGNMENT).mkdir(parents=True)
    (submitted / "ann" / ASSIGNMENT / "timestamp.txt").write_text("2026-01-01 10:00:00.000000 UTC")
    (submitted / "ann" / ASSIGNMENT / "submission_secret.txt").write_text("s3cret")
    write_reports([result("ann", 2.0), result("ben", 0.0)], tmp_path / "graded", submitted=submitted)
    feedback = tmp_path / "graded" / "feedback"
    ann, ben = feedback / "ann" / ASSIGNMENT, feedback / "ben" / ASSIGNMENT
    assert (ann / "submission_secret.txt").read_text() == "s3cret" and (ann / "timestamp.txt").is_file()
    page = (ann / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert "Feedback for ann" in page and "4 / 4 points" in page and "ben" not in page
    assert "0 / 4 points" in (ben / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert not (ben / "timestamp.txt").exists(), "nothing invented for a submission nbgrader did not collect"
    assert (feedback / "ann.html").is_file(), "the one page per student stays"
