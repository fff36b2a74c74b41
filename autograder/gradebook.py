"""Write the trusted scores into an nbgrader gradebook, so Formgrader and ``nbgrader export`` show them.

nbgrader stays the front end (its gradebook, Formgrader, export); only the scores come from our
grader. ``grade --gradebook`` leaves what nbgrader's own ``autograde`` leaves:

* **Scores.** Each test cell's score goes into its ``Grade.auto_score``; each exercise's status
  and message into the ``auto_comment`` of its answer cell. Crashed, timed-out, invalid and
  tampered exercises are marked ``needs_manual_grade``, so Formgrader lists them for a person.
* **The autograded notebooks**, ``autograded/<student>/<assignment>/<notebook>.ipynb`` beside the
  submissions folder (nbgrader's ``CourseDirectory`` layout: the course root when the folder is
  the course's ``submitted/``): the submission put through nbgrader's own sanitizing
  preprocessors (outputs cleared, duplicate ids dropped, the kernelspec and every test cell
  overwritten with the course's, a deleted test cell put back), and each test cell given the
  course's result as its output (a stream for a pass, an error with the message otherwise) and in
  ``metadata.transformer_course``. A file that cannot be read is shown as the release notebook
  with a note. Formgrader renders these pages.
* **Timestamps**, from ``timestamp.txt`` of the submission (what ``nbgrader collect`` writes),
  parsed by nbgrader's ``parse_utc``: Formgrader counts a submission as autograded only when its
  gradebook timestamp equals that file's, and the due date (``nbgrader db assignment add
  ... --duedate=...``) makes a later one late.
* **Late penalties** by nbgrader's own mechanism, as its ``AssignLatePenalties`` preprocessor
  applies them: the plugin the course's nbgrader config names (``LateSubmissionPlugin`` by
  default) sets each late notebook's ``late_submission_penalty``, which ``nbgrader export`` subtracts.

A regrade never removes a submission. It updates the auto scores and comments and keeps what
people wrote (manual scores, extra credit, manual comments) while the submission is unchanged,
decided by a digest of the graded notebook (its cells' types, ids and sources: re-running it or
saving it again changes nothing) kept in a table of its own in the gradebook's database
(``transformer_course_digest``, keyed by assignment and student). When the submission changed,
its manual grades are dropped, and each one is appended to ``manual_grades_dropped.csv`` in the
output folder. A submission the table does not know yet (written by nbgrader, or before this
table) keeps its manual grades, marked for review as nbgrader's ``SaveAutoGrades`` does.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from jupyter_core.paths import jupyter_config_path
from nbconvert.preprocessors import Preprocessor
from nbgrader.api import Comment, Grade, Gradebook, MissingEntry, SubmittedNotebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import AssignLatePenalties, ClearOutput, DeduplicateIds, OverwriteCells
from nbgrader.utils import parse_utc
from sqlalchemy import Column, MetaData, String, Table, delete, insert, select
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.course import Lesson, lessons
from autograder.grading import NotebookResult, locate
from autograder.release import generate_release
from autograder.reports import NEEDS_EYES

COURSE_ID = "transformer-course"
TIMESTAMP = "timestamp.txt"  # beside a submission, written by `nbgrader collect`
#: in the output folder: every manual grade or comment a regrade dropped (appended, never rewritten)
DROPPED = "manual_grades_dropped.csv"
DROPPED_COLUMNS = ["dropped_at", "student_id", "assignment", "notebook", "cell", "field", "value", "reason"]
#: our own metadata key of a cell of an autograded notebook
META_KEY = "transformer_course"
MESSAGE_CHARS = 20_000

#: what nbgrader's preprocessors say while sanitizing ("Attribute 'checksum' for cell ... has
#: changed!" for every hidden test put back): expected here, so only their errors are kept
QUIET = logging.getLogger("autograder.gradebook.nbgrader")
QUIET.setLevel(logging.ERROR)

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


# ---------------------------------------------------------------------------------------------
# What nbgrader reads: its config, a submission's timestamp


def nbgrader_config(root: Path) -> Config:
    """The nbgrader config the course's own nbgrader commands see: every ``nbgrader_config.py`` of
    Jupyter's config path (lowest priority first), then the course root's."""
    config = Config()
    folders = [*reversed(jupyter_config_path()), str(root)]
    for folder in folders:
        if (Path(folder) / "nbgrader_config.py").is_file():
            try:
                config.merge(PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config())
            except Exception as exc:  # noqa: BLE001 - nbgrader, too, warns and goes on
                print(f"warning: {Path(folder) / 'nbgrader_config.py'} could not be read ({exc}); left out",
                      file=sys.stderr)
    return config


def read_timestamp(folder: Path) -> tuple[datetime | None, str]:
    """The submission time in ``folder/timestamp.txt`` as nbgrader reads it (naive UTC), and a
    problem to report ("" when none). No file or an empty one: no time, as in nbgrader."""
    path = folder / TIMESTAMP
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot be read ({exc})"
    if not text:
        return None, ""
    try:
        return parse_utc(text), ""
    except (ValueError, OverflowError) as exc:
        return None, f"{path}: not a time nbgrader can read ({text[:60]!r}: {exc})"


def notebook_digest(path: Path | None) -> str:
    """What decides whether a submission changed: its cells' types, nbgrader ids and sources
    (outputs, execution counts and other metadata left out); the file's bytes when it is no
    readable notebook; "absent" when nothing was handed in."""
    if path is None or not path.is_file():
        return "absent"
    data = path.read_bytes()
    try:
        cells = json.loads(data.decode("utf-8"))["cells"]
        summary = [[c.get("cell_type"), ((c.get("metadata") or {}).get("nbgrader") or {}).get("grade_id"),
                    "".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source")] for c in cells]
        return "cells:" + hashlib.sha256(json.dumps(summary, sort_keys=True).encode("utf-8")).hexdigest()
    except (ValueError, KeyError, TypeError, AttributeError):
        return "bytes:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# The autograded notebook


def _sanitize(gb: Gradebook, config: Config, nb, notebook_id: str, assignment: str, student: str, db_url: str):
    """nbgrader's sanitizing step of ``autograde`` (ClearOutput, DeduplicateIds, OverwriteKernelspec,
    OverwriteCells, CheckCellMetadata), run on our open gradebook. A cell whose nbgrader id the
    assignment does not have loses its nbgrader metadata first (nbgrader's own step would fail)."""
    source = gb.find_notebook(notebook_id, assignment)
    known = {cell.name for cell in source.source_cells}
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        if nbg is not None and (not isinstance(nbg, dict) or nbg.get("grade_id") not in known):
            del meta["nbgrader"]
    resources = {"nbgrader": {"notebook": notebook_id, "assignment": assignment, "student": student, "db_url": db_url}}
    nb, resources = ClearOutput(config=config, log=QUIET).preprocess(nb, resources)
    nb, resources = DeduplicateIds(config=config, log=QUIET).preprocess(nb, resources)
    if source.kernelspec:
        nb.metadata["kernelspec"] = json.loads(source.kernelspec)
    overwrite = OverwriteCells(config=config, log=QUIET)
    overwrite.gradebook, overwrite.notebook_id, overwrite.assignment_id = gb, notebook_id, assignment
    nb, resources = Preprocessor.preprocess(overwrite, nb, resources)  # its cell by cell step, on our gradebook
    if overwrite.add_missing_cells:
        nb, resources = overwrite.add_missing_grade_cells(nb, resources)
        nb, resources = overwrite.add_missing_task_cells(nb, resources)
    MetadataValidator().validate_nb(nb)
    return nb


def _test_output(status: str, points: float, max_points: float, message: str) -> dict:
    said = f"{points:g} of {max_points:g} point{'s' if max_points != 1 else ''}"
    if status == "passed":
        return nbformat.v4.new_output("stream", name="stdout", text=f"passed: {said}\n")
    message = message[:MESSAGE_CHARS]
    return nbformat.v4.new_output("error", ename=status, evalue=message, traceback=[f"{status}: {message}", said])


def add_results(nb, lesson: Lesson, result: NotebookResult) -> None:
    """Put the course's result of every test cell into it: as its only output, and with the
    exercise's in ``metadata.transformer_course`` of test and answer cells."""
    by_exercise = {e.exercise: e for e in result.exercises}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in lesson.exercises:
            mine = by_exercise.get(gid)
            cell.metadata[META_KEY] = {
                "status": mine.status if mine else "missing", "score": mine.score if mine else 0.0,
                "max_score": lesson.exercises[gid].max_score, "message": (mine.message if mine else "")[:MESSAGE_CHARS],
            }
            continue
        try:
            exercise = lesson.exercise_of(gid) if isinstance(gid, str) else None
        except KeyError:
            exercise = None
        if exercise is None or cell.cell_type != "code":
            continue
        test = next(t for t in exercise.tests if t.grade_id == gid)
        mine = by_exercise.get(exercise.grade_id)
        own = next((t for t in mine.tests if t.grade_id == gid), None) if mine else None
        if own is not None:
            status, points, message = own.status, own.points, own.message
        else:  # the exercise was not run (missing, invalid): its status says why
            status, points = (mine.status if mine else "missing"), 0.0
            message = (mine.message if mine else "") or "no result for this test"
        cell.outputs = [nbformat.from_dict(_test_output(status, points, test.points, message))]
        cell.metadata[META_KEY] = {"status": status, "points": points, "max_points": test.points,
                                   "message": message[:MESSAGE_CHARS]}


def autograded_notebook(gb: Gradebook, config: Config, db_url: str, lesson: Lesson, result: NotebookResult,
                        path: Path | None, release: Path):
    """The page Formgrader shows for ``result``: the submission at ``path`` sanitized as nbgrader's
    autograde does, with the course's results; the ``release`` notebook, with a note on top, when
    the submission cannot be read. None when neither can."""
    reason = ""
    invalid = [e for e in result.exercises if e.status == "invalid"]
    if invalid and len(invalid) == len(result.exercises):
        reason = result.note or invalid[0].message
    nb = None
    if not reason and path is not None:
        try:
            nb = _read_notebook(path)
            nb = _sanitize(gb, config, nb, lesson.name, lesson.assignment, result.student, db_url)
        except Exception as exc:  # noqa: BLE001 - a student's file: anything can be wrong with it
            reason, nb = f"nbgrader cannot read its cells ({type(exc).__name__}: {str(exc)[:300]})", None
    if nb is None:
        try:
            nb = _read_notebook(release)
            nb = _sanitize(gb, config, nb, lesson.name, lesson.assignment, result.student, db_url)
        except Exception as exc:  # noqa: BLE001
            print(f"warning: no autograded notebook for {result.student}/{lesson.assignment}: {exc}", file=sys.stderr)
            return None
        name = path.name if path is not None else lesson.filename
        reason = reason or "it is not a notebook"
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**transformer-course grade:** the submitted {name} could not be shown ({reason}). This is the "
            "release notebook, with the course's results in its test cells; grade the submission by hand."))
    elif result.note:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"**transformer-course grade:** {result.note[:MESSAGE_CHARS]}"))
    add_results(nb, lesson, result)
    return nb


def _read_notebook(path: Path):
    with warnings.catch_warnings():  # nbformat's schema complaints about a student's file: not ours to print
        warnings.simplefilter("ignore")
        return nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)


def _write_notebook(nb, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = nbformat.writes(nb)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)


def _plain_id(student: str) -> bool:
    return bool(student) and not student.startswith(".") and "/" not in student and "\\" not in student


# ---------------------------------------------------------------------------------------------
# The gradebook's rows


def _complete(gb: Gradebook, submission) -> None:
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


def _drop_manual(submission, why: str, when: str) -> list[dict]:
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


def _score(gb: Gradebook, lesson: Lesson, result: NotebookResult, review_manual: bool) -> None:
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


def _late_penalties(gb: Gradebook, penalties: AssignLatePenalties, submission) -> None:
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


def write_gradebook(db_url: str, root: Path, results: list[NotebookResult], *, submitted: Path | None = None,
                    out: Path | None = None, paths: dict[tuple[str, str], Path | None] | None = None) -> int:
    """Record ``results`` in the gradebook at ``db_url``; returns the number of submissions written.

    ``submitted``: the submissions folder (nbgrader's ``<student>/<assignment>/`` layout). With it,
    the timestamps are read, the digests compared, and the autograded notebooks written into
    ``autograded/`` beside it; without it (scores only) timestamps are left as they are and manual
    grades are kept, marked for review. ``paths``: the notebook graded for (student, assignment)
    when the caller chose it (default: ``grading.locate``). ``out``: where
    ``manual_grades_dropped.csv`` goes (the current folder without it)."""
    course = {lesson.assignment: lesson for lesson in lessons(root)}
    assignments = sorted({r.assignment for r in results})
    config = nbgrader_config(root)
    coursedir = None
    if submitted is not None:
        submitted = Path(submitted).resolve()
        coursedir = CourseDirectory(config=config, root=str(submitted.parent))
    penalties = AssignLatePenalties(config=config)
    penalties.init_plugin()
    when = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    dropped: list[dict] = []
    written = 0
    with tempfile.TemporaryDirectory() as tmp:  # puts the assignments and their cells into the db
        generate_release(root, Path(tmp), db_url=db_url, only=assignments)
        with Gradebook(db_url, COURSE_ID) as gb:
            DIGESTS.create(gb.engine, checkfirst=True)
            for result in sorted(results, key=lambda r: (r.assignment, r.student)):
                lesson = course[result.assignment]
                key = (result.student, result.assignment)
                folder = submitted / result.student / result.assignment if submitted is not None else None
                if paths is not None and key in paths:
                    path = paths[key]
                else:
                    path = locate(submitted, result.student, lesson) if submitted is not None else None
                timestamp, problem = read_timestamp(folder) if folder is not None else (None, "")
                if problem:
                    print(f"warning: {problem}; the submission is recorded without a time", file=sys.stderr)
                gb.update_or_create_student(result.student)
                try:
                    submission = gb.find_submission(result.assignment, result.student)
                    new = False
                except MissingEntry:
                    add_submission(gb, result.assignment, result.student,
                                   **({"timestamp": timestamp} if timestamp else {}))
                    submission, new = gb.find_submission(result.assignment, result.student), True
                _complete(gb, submission)
                digest = notebook_digest(path) if submitted is not None else None
                stored = gb.db.execute(select(DIGESTS.c.digest).where(
                    DIGESTS.c.assignment == result.assignment, DIGESTS.c.student == result.student)).scalar()
                unknown = not new and (digest is None or stored is None)
                drops = []
                if not new and digest is not None and stored is not None and stored != digest:
                    drops = _drop_manual(submission, "the submission changed since it was graded by hand", when)
                if submitted is not None:
                    submission.timestamp = timestamp
                _score(gb, lesson, result, review_manual=unknown)
                if digest is not None:
                    gb.db.execute(delete(DIGESTS).where(
                        DIGESTS.c.assignment == result.assignment, DIGESTS.c.student == result.student))
                    gb.db.execute(insert(DIGESTS).values(assignment=result.assignment, student=result.student,
                                                         digest=digest))
                gb.db.commit()  # the notebooks' scores are read again, with the new grades
                if drops:  # listed as soon as they are gone from the gradebook
                    target = append_dropped(Path(out) if out is not None else Path.cwd(), drops)
                    dropped += drops
                _late_penalties(gb, penalties, submission)
                gb.db.commit()
                written += 1
                if coursedir is not None and _plain_id(result.student) and folder is not None and folder.is_dir():
                    _write_autograded(gb, config, coursedir, db_url, lesson, result, path, folder,
                                      Path(tmp) / lesson.assignment / lesson.filename)
    if dropped:
        print(f"{len(dropped)} manual grades or comments of changed submissions were dropped: listed in {target}",
              file=sys.stderr)
    return written


def _write_autograded(gb: Gradebook, config: Config, coursedir: CourseDirectory, db_url: str, lesson: Lesson,
                      result: NotebookResult, path: Path | None, folder: Path, release: Path) -> None:
    """``autograded/<student>/<assignment>/``: the notebook Formgrader shows (none when nothing was
    handed in), and the submission's ``timestamp.txt``, as nbgrader's autograde leaves them."""
    dest = Path(coursedir.format_path(coursedir.autograded_directory, result.student, result.assignment))
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / lesson.filename
    nb = autograded_notebook(gb, config, db_url, lesson, result, path, release) if path is not None else None
    if nb is not None:
        _write_notebook(nb, target)
    else:
        target.unlink(missing_ok=True)  # no page of an earlier submission stays
    if (folder / TIMESTAMP).is_file():
        shutil.copyfile(folder / TIMESTAMP, dest / TIMESTAMP)
    else:
        (dest / TIMESTAMP).unlink(missing_ok=True)
