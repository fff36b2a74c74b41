"""The gradebook ``grade --gradebook`` writes, from made-up results (nothing is run): nbgrader's
tables filled without SQLAlchemy's "not in session" warnings; the autograded notebooks, timestamps
and flags Formgrader reads; manual grades kept across a regrade of an unchanged submission and
dropped (and listed) for a changed one; a late submission's penalty in ``nbgrader export``."""

import csv
import json
import os
import shutil
import subprocess
import sys
import warnings
from datetime import datetime
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbgrader.api import Gradebook
from nbgrader.apps.api import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator

from autograder import grading
from autograder.catalogue import with_answers
from autograder.course import RELEASE, lessons
from autograder.gradebook import write_gradebook
from autograder.gradebook_inputs import COURSE_ID, notebook_digest, read_timestamp
from autograder.gradebook_notebook import META_KEY
from autograder.gradebook_rows import DROPPED
from autograder.grading import ExerciseResult, NotebookResult

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "03-self-attention"
LESSON = next(lesson for lesson in lessons(ROOT) if lesson.assignment == ASSIGNMENT)
DUE = "2026-12-12 17:00:00 UTC"
ON_TIME = "2026-12-10 12:00:00.000000 UTC"  # what `nbgrader collect` writes into timestamp.txt
LATE = "2026-12-13 09:30:00.123456 UTC"


def results(points: float) -> list[NotebookResult]:
    """Made-up results of two students for lesson 03: one scores ``points`` on every test, one
    handed in nothing gradable."""
    return [NotebookResult("ada", ASSIGNMENT, LESSON.filename, exercises("passed" if points else "failed", points)),
            NotebookResult("bo", ASSIGNMENT, LESSON.filename, [])]


def exercises(status: str, points: float, message: str = "") -> list[ExerciseResult]:
    """Every exercise of lesson 03 with ``status``, each test scoring ``points``."""
    return [
        ExerciseResult(exercise.grade_id, status, points * len(exercise.tests), exercise.max_score,
                       [grading.TestResult(t.grade_id, t.hidden, status, points, t.points,
                                           "" if status == "passed" else f"{message or status} in {t.grade_id}")
                        for t in exercise.tests])
        for exercise in LESSON.exercises.values()
    ]


def nbgrader_env() -> dict[str, str]:
    return dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))


def test_the_gradebook_is_written_without_session_warnings(tmp_path):
    """Scores only (no submissions folder, as ``merge`` writes it): a regrade updates the same
    records, and a manual score it cannot tell is still right is kept and marked for review."""
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert write_gradebook(db, ROOT, results(1.0)) == 2
        with Gradebook(db, COURSE_ID) as gb:
            first = gb.find_submission(ASSIGNMENT, "ada").id
            gb.find_grade("causal-mask-check", LESSON.name, ASSIGNMENT, "ada").manual_score = 0.5
            gb.db.commit()
        assert write_gradebook(db, ROOT, results(0.0)) == 2  # a regrade
    said = [str(w.message) for w in caught if "session" in str(w.message).lower()]
    assert not said, said
    with Gradebook(db, COURSE_ID) as gb:
        assert [s.student.id for s in gb.assignment_submissions(ASSIGNMENT)] in (["ada", "bo"], ["bo", "ada"])
        assert gb.find_submission(ASSIGNMENT, "ada").id == first, "a regrade never removes a submission"
        kept = gb.find_grade("causal-mask-check", LESSON.name, ASSIGNMENT, "ada")
        assert (kept.auto_score, kept.manual_score, kept.needs_manual_grade) == (0.0, 0.5, True)
        assert gb.find_submission(ASSIGNMENT, "ada").score == 0.5
        assert gb.find_submission(ASSIGNMENT, "bo").score == 0.0


# ---------------------------------------------------------------------------------------------
# A course folder as nbgrader's `collect` leaves it, graded with --gradebook


def hand_in(course: Path, student: str, notebook: dict | str, stamp: str | None) -> None:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LESSON.filename).write_text(notebook if isinstance(notebook, str) else json.dumps(notebook), encoding="utf-8")
    if stamp is not None:
        (folder / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")


def graded_as(status: str, message: str = "") -> list[ExerciseResult]:
    """Every exercise of lesson 03 with ``status``: all its points when passed, none otherwise."""
    full = status == "passed"
    return [ExerciseResult(e.grade_id, status, e.max_score if full else 0.0, e.max_score,
                           [grading.TestResult(t.grade_id, t.hidden, status, t.points if full else 0.0, t.points,
                                               "" if full else message) for t in e.tests])
            for e in LESSON.exercises.values()]


def class_results() -> list[NotebookResult]:
    """ada: right, on time; kai: right, late; lea: her first exercise timed out (flagged), the
    other right; max: not a notebook (flagged); bo: nothing handed in."""
    lea = [graded_as("timeout", "ran past 3 s")[0], *graded_as("passed")[1:]]
    invalid = [ExerciseResult(e.grade_id, "invalid", 0.0, e.max_score, notes=[f"{LESSON.filename}: not JSON"])
               for e in LESSON.exercises.values()]
    return [NotebookResult("ada", ASSIGNMENT, LESSON.filename, graded_as("passed")),
            NotebookResult("kai", ASSIGNMENT, LESSON.filename, graded_as("passed")),
            NotebookResult("lea", ASSIGNMENT, LESSON.filename, lea, note="a cell ran past its limit"),
            NotebookResult("max", ASSIGNMENT, LESSON.filename, invalid, note=f"{LESSON.filename}: not JSON"),
            NotebookResult("bo", ASSIGNMENT, LESSON.filename, [])]


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """A course folder: the due date set with README's command, four submissions (``timestamp.txt``
    in collect's format), graded once with --gradebook."""
    course = tmp_path_factory.mktemp("course")
    release = json.loads((ROOT / RELEASE / ASSIGNMENT / LESSON.filename).read_text(encoding="utf-8"))
    right = with_answers(release, LESSON.solution_answers())
    hand_in(course, "ada", right, ON_TIME)
    hand_in(course, "kai", right, LATE)
    hand_in(course, "lea", right, ON_TIME)
    hand_in(course, "max", "this is not a notebook\n", ON_TIME)
    db = f"sqlite:///{course / 'gradebook.db'}"
    subprocess.run([sys.executable, "-m", "nbgrader", "db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}",
                    f"--CourseDirectory.db_url={db}", f"--CourseDirectory.root={course}"],
                   cwd=course, check=True, capture_output=True, env=nbgrader_env())
    assert write_gradebook(db, ROOT, class_results(), submitted=course / "submitted", out=course / "graded") == 5
    return course


def copy_of(course: Path, dest: Path) -> tuple[Path, str]:
    shutil.copytree(course, dest)
    return dest, f"sqlite:///{dest / 'gradebook.db'}"


def cells_by_id(path: Path) -> dict[str, dict]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"] if "nbgrader" in c["metadata"]}


def test_the_autograded_notebooks_are_nbgraders_with_our_results(graded):
    autograded = graded / "autograded"
    assert sorted(p.name for p in autograded.iterdir()) == ["ada", "kai", "lea", "max"], "nothing for bo: no folder"
    solution = {t.grade_id: t for t in LESSON.tests()}
    for student in ("ada", "kai", "lea", "max"):
        path = autograded / student / ASSIGNMENT / LESSON.filename
        MetadataValidator().validate_nb(nbformat.read(path, as_version=4))  # what nbgrader's CheckCellMetadata requires
        assert (path.parent / "timestamp.txt").read_text() == (graded / "submitted" / student / ASSIGNMENT / "timestamp.txt").read_text()
        cells = cells_by_id(path)
        with Gradebook(f"sqlite:///{graded / 'gradebook.db'}", COURSE_ID) as gb:
            source = {c.name: c for c in gb.find_notebook(LESSON.name, ASSIGNMENT).source_cells}
        for gid, test in solution.items():
            cell, meta = cells[gid], cells[gid]["metadata"]["nbgrader"]
            assert "".join(cell["source"]) == test.source, "the course's test cell, hidden tests included"
            assert (meta["grade"], meta["points"], meta["locked"], meta["checksum"]) == (True, test.points, True, source[gid].checksum)
            assert len(cell["outputs"]) == 1 and cell["metadata"][META_KEY]["max_points"] == test.points
    ada = cells_by_id(autograded / "ada" / ASSIGNMENT / LESSON.filename)
    passed = ada["causal-mask-check"]["outputs"][0]
    assert (passed["output_type"], passed["name"], "".join(passed["text"])) == ("stream", "stdout", "passed: 1 of 1 point\n")
    assert ada["causal-mask"]["metadata"][META_KEY]["status"] == "passed"
    assert "return scores.masked_fill" in "".join(ada["causal-mask"]["source"]), "the student's own answer"
    lea = cells_by_id(autograded / "lea" / ASSIGNMENT / LESSON.filename)
    error = lea["causal-mask-check"]["outputs"][0]
    assert (error["output_type"], error["ename"], error["evalue"]) == ("error", "timeout", "ran past 3 s")
    assert lea["causal-mask-check"]["metadata"][META_KEY] == {"status": "timeout", "points": 0.0, "max_points": 1.0,
                                                             "message": "ran past 3 s"}
    assert "".join(lea["attention-head-check"]["outputs"][0]["text"]) == "passed: 2 of 2 points\n"
    shown = json.loads((autograded / "max" / ASSIGNMENT / LESSON.filename).read_text(encoding="utf-8"))
    assert "could not be shown" in "".join(shown["cells"][0]["source"]), "the release, with a note"
    assert cells_by_id(autograded / "max" / ASSIGNMENT / LESSON.filename)["causal-mask-check"]["outputs"][0]["ename"] == "invalid"


def test_formgrader_counts_every_submission_autograded_with_its_timestamp(graded):
    """What Formgrader's API (nbgrader's NbGraderAPI) reads: autograded, timestamps from
    timestamp.txt, a page per notebook, the flagged ones needing a manual grade."""
    coursedir = CourseDirectory(root=str(graded), db_url=f"sqlite:///{graded / 'gradebook.db'}", course_id=COURSE_ID)
    api = NbGraderAPI(coursedir)
    submissions = {s["student"]: s for s in api.get_submissions(ASSIGNMENT)}
    assert {s for s, sub in submissions.items() if sub["autograded"]} == {"ada", "bo", "kai", "lea", "max"}
    assert submissions["ada"]["timestamp"] == "2026-12-10T12:00:00"
    assert submissions["kai"]["timestamp"] == "2026-12-13T09:30:00.123456"
    assert submissions["bo"]["timestamp"] is None
    assert {s: sub["needs_manual_grade"] for s, sub in submissions.items()} == {
        "ada": False, "bo": False, "kai": False, "lea": True, "max": True}
    notebooks = api.get_notebook_submissions(ASSIGNMENT, LESSON.name)
    assert sorted(n["student"] for n in notebooks) == ["ada", "kai", "lea", "max"]
    with Gradebook(coursedir.db_url, COURSE_ID) as gb:
        lea = {g.name: g for g in gb.find_submission_notebook(LESSON.name, ASSIGNMENT, "lea").grades}
        assert lea["causal-mask-check"].needs_manual_grade and not lea["attention-head-check"].needs_manual_grade
        comment = gb.find_comment("causal-mask", LESSON.name, ASSIGNMENT, "lea").auto_comment
        assert comment.startswith("[timeout] causal-mask-check: ran past 3 s")


def test_timestamps_are_read_as_nbgrader_reads_them(tmp_path):
    assert read_timestamp(tmp_path) == (None, "")  # no file
    (tmp_path / "timestamp.txt").write_text(LATE + "\n")
    assert read_timestamp(tmp_path) == (datetime(2026, 12, 13, 9, 30, 0, 123456), "")
    for other in ("2026-12-13 10:30:00 Europe/Paris", "2026-12-13T10:30:00+01:00"):  # converted to UTC
        (tmp_path / "timestamp.txt").write_text(other)
        assert read_timestamp(tmp_path)[0] == datetime(2026, 12, 13, 9, 30)
    (tmp_path / "timestamp.txt").write_text("   \n")
    assert read_timestamp(tmp_path) == (None, "")
    (tmp_path / "timestamp.txt").write_text("yesterday-ish")
    when, problem = read_timestamp(tmp_path)
    assert when is None and "not a time" in problem


def test_a_digest_ignores_outputs_and_sees_code(tmp_path):
    nb = json.loads((ROOT / RELEASE / ASSIGNMENT / LESSON.filename).read_text(encoding="utf-8"))
    path = tmp_path / "a.ipynb"
    path.write_text(json.dumps(nb))
    before = notebook_digest(path)
    nb["cells"][1].setdefault("outputs", []).append({"output_type": "stream", "name": "stdout", "text": "hi"})
    nb["metadata"]["widgets"] = {}
    path.write_text(json.dumps(nb, indent=2))
    assert notebook_digest(path) == before
    nb["cells"][1]["source"] = "x = 1"
    path.write_text(json.dumps(nb))
    assert notebook_digest(path) != before
    assert notebook_digest(None) == notebook_digest(tmp_path / "missing.ipynb") == "absent"


def test_manual_grades_survive_an_unchanged_submission_and_are_listed_when_dropped(graded, tmp_path):
    course, db = copy_of(graded, tmp_path / "course")
    with Gradebook(db, COURSE_ID) as gb:
        for student in ("lea", "max"):
            grade = gb.find_grade("causal-mask-check", LESSON.name, ASSIGNMENT, student)
            grade.manual_score, grade.needs_manual_grade = 1.0, False  # as Formgrader stores a manual score
            gb.find_comment("causal-mask", LESSON.name, ASSIGNMENT, student).manual_comment = f"{student}: looked by hand"
        gb.db.commit()
        ids = {s.student.id: s.id for s in gb.assignment_submissions(ASSIGNMENT)}
    # lea hands in again (one more cell); max's file is untouched
    again = json.loads((course / "submitted" / "lea" / ASSIGNMENT / LESSON.filename).read_text(encoding="utf-8"))
    again["cells"].append({"cell_type": "code", "id": "more", "metadata": {}, "source": "print('more')", "outputs": [],
                           "execution_count": None})
    hand_in(course, "lea", again, ON_TIME)
    write_gradebook(db, ROOT, class_results(), submitted=course / "submitted", out=course / "graded")
    with Gradebook(db, COURSE_ID) as gb:
        assert {s.student.id: s.id for s in gb.assignment_submissions(ASSIGNMENT)} == ids, "no submission removed"
        kept = gb.find_grade("causal-mask-check", LESSON.name, ASSIGNMENT, "max")
        assert (kept.manual_score, kept.needs_manual_grade) == (1.0, False)
        assert gb.find_comment("causal-mask", LESSON.name, ASSIGNMENT, "max").manual_comment == "max: looked by hand"
        assert gb.find_submission(ASSIGNMENT, "max").score == 1.0
        dropped = gb.find_grade("causal-mask-check", LESSON.name, ASSIGNMENT, "lea")
        assert (dropped.manual_score, dropped.needs_manual_grade) == (None, True), "flagged again, for the new answer"
        assert gb.find_comment("causal-mask", LESSON.name, ASSIGNMENT, "lea").manual_comment is None
    with open(course / "graded" / DROPPED, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["student_id"], r["cell"], r["field"], r["value"]) for r in rows] == [
        ("lea", "causal-mask-check", "manual_score", "1"), ("lea", "causal-mask", "manual_comment", "lea: looked by hand")]
    assert "changed" in rows[0]["reason"]


def test_a_late_submission_is_penalised_in_nbgrader_export(graded, tmp_path):
    """The due date from README's ``nbgrader db assignment add``, the course's LateSubmissionPlugin
    (``zero``): kai handed in after it and exports with nothing; ada, on time, keeps her points."""
    course, db = copy_of(graded, tmp_path / "course")
    subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.db_url={db}",
                    f"--CourseDirectory.root={course}"], cwd=course, check=True, capture_output=True, env=nbgrader_env())
    exported = pd.read_csv(course / "grades.csv", keep_default_na=False).set_index("student_id")
    assert exported.loc["kai", "timestamp"] == "2026-12-13 09:30:00.123456"
    assert exported.loc["kai", "duedate"] == "2026-12-12 17:00:00"
    assert (exported.loc["kai", "raw_score"], exported.loc["kai", "late_submission_penalty"], exported.loc["kai", "score"]) \
        == (LESSON.max_score, LESSON.max_score, 0.0)
    assert (exported.loc["ada", "raw_score"], exported.loc["ada", "late_submission_penalty"], exported.loc["ada", "score"]) \
        == (LESSON.max_score, 0.0, LESSON.max_score)
