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

import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import AssignLatePenalties
from sqlalchemy import delete, insert, select

from autograder.course import lessons
from autograder.gradebook_inputs import COURSE_ID, nbgrader_config, notebook_digest, read_timestamp
from autograder.gradebook_notebook import plain_id, write_autograded
from autograder.gradebook_rows import (
    DIGESTS,
    add_submission,
    append_dropped,
    complete_submission,
    drop_manual,
    late_penalties,
    write_scores,
)
from autograder.grader import locate
from autograder.grading import NotebookResult
from autograder.release import generate_release


def write_gradebook(db_url: str, root: Path, results: list[NotebookResult], *, submitted: Path | None = None,
                    out: Path | None = None, paths: dict[tuple[str, str], Path | None] | None = None) -> int:
    """Record ``results`` in the gradebook at ``db_url``; returns the number of submissions written.

    ``submitted``: the submissions folder (nbgrader's ``<student>/<assignment>/`` layout). With it,
    the timestamps are read, the digests compared, and the autograded notebooks written into
    ``autograded/`` beside it; without it (scores only) timestamps are left as they are and manual
    grades are kept, marked for review. ``paths``: the notebook graded for (student, assignment)
    when the caller chose it (default: ``grader.locate``). ``out``: where
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
                complete_submission(gb, submission)
                digest = notebook_digest(path) if submitted is not None else None
                stored = gb.db.execute(select(DIGESTS.c.digest).where(
                    DIGESTS.c.assignment == result.assignment, DIGESTS.c.student == result.student)).scalar()
                unknown = not new and (digest is None or stored is None)
                drops = []
                if not new and digest is not None and stored is not None and stored != digest:
                    drops = drop_manual(submission, "the submission changed since it was graded by hand", when)
                if submitted is not None:
                    submission.timestamp = timestamp
                write_scores(gb, lesson, result, review_manual=unknown)
                if digest is not None:
                    gb.db.execute(delete(DIGESTS).where(
                        DIGESTS.c.assignment == result.assignment, DIGESTS.c.student == result.student))
                    gb.db.execute(insert(DIGESTS).values(assignment=result.assignment, student=result.student,
                                                         digest=digest))
                gb.db.commit()  # the notebooks' scores are read again, with the new grades
                if drops:  # listed as soon as they are gone from the gradebook
                    target = append_dropped(Path(out) if out is not None else Path.cwd(), drops)
                    dropped += drops
                late_penalties(gb, penalties, submission)
                gb.db.commit()
                written += 1
                if coursedir is not None and plain_id(result.student) and folder is not None and folder.is_dir():
                    write_autograded(gb, config, coursedir, db_url, lesson, result, path, folder,
                                      Path(tmp) / lesson.assignment / lesson.filename)
    if dropped:
        print(f"{len(dropped)} manual grades or comments of changed submissions were dropped: listed in {target}",
              file=sys.stderr)
    return written

