"""A whole term in one output folder: who is in the class, what to grade, and results kept per assignment.

An instructor grades week by week into one ``--out`` folder. Each run keeps the results of the
assignments it graded in ``results/<assignment>.json`` (every notebook's result, and the rows of
``needs_attention.csv`` that belong to that assignment); a later run replaces only the files of the
assignments it grades. Every report (``grades.csv``, ``totals.csv``, ``pass_rates.csv``,
``wide_*.csv``, ``scores.png``, ``needs_attention.csv``, ``feedback/``, ``misconceptions.*``) is then rebuilt from all
of them, so it covers every assignment graded into the folder so far. ``results/_submissions.json``
holds what the last run found in the submissions folder that belongs to no graded assignment (a
folder that is no assignment, an assignment not released, a student not on the roster).

The class is the union of the submissions folder's student folders, ``--roster FILE`` (a CSV with
an ``id`` column, as ``nbgrader db student import`` reads) and, with ``--gradebook``, nbgrader's
student table: a student on the roster who handed nothing in is graded ``missing``.

Without ``--assignment``, the assignments graded are those at least one student handed in (a
notebook in ``<student>/<assignment>/``), and, where nbgrader's exchange shows what was released
(``<exchange>/transformer-course/outbound/<assignment>/``, which ``nbgrader release_assignment``
writes), only those also released: a submission of an assignment not released is listed, not
graded. So nobody is scored 0 for an assignment that no one handed in.

The results kept per assignment, and the reports rebuilt from them, live in ``term_results``;
this module is the class and what to grade.
"""

from __future__ import annotations

import csv
import difflib
import io
from dataclasses import dataclass
from pathlib import Path

from autograder.course import CourseError, Lesson
from autograder.intake import handed_in
from autograder.reports import attention_row, not_graded_row

COURSE_ID = "transformer-course"  # nbgrader's course id (nbgrader_settings.py)
#: needs_attention.csv: a student folder of the submissions that is not on the roster (graded)
OFF_ROSTER = "off roster"


# ---------------------------------------------------------------------------------------------
# The class


def student_folders(submitted: Path) -> list[str]:
    return sorted(p.name for p in submitted.iterdir() if p.is_dir() and not p.name.startswith("."))


def check_student_id(student: str, where: str) -> str:
    """``student`` if it can be a student id (it names a folder in nbgrader's layout); else CourseError."""
    if not student or student != student.strip() or student.startswith(".") or "/" in student or "\\" in student:
        raise CourseError(f"{where}: {student!r} cannot be a student id (nbgrader's layout makes it a folder name)")
    return student


def read_roster(path: Path) -> list[str]:
    """The student ids of a CSV with an ``id`` column (nbgrader's ``db student import`` format:
    ``id,first_name,last_name,email``; the other columns are not read)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise CourseError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    column = next((name for name in reader.fieldnames or [] if name and name.strip() == "id"), None)
    if column is None:
        raise CourseError(f"the roster {path} has no `id` column (a CSV as `nbgrader db student import` reads: "
                          "id,first_name,last_name,email)")
    ids = set()
    for line, row in enumerate(reader, start=2):
        value = (row.get(column) or "").strip()
        if value or any((v or "").strip() for v in row.values() if isinstance(v, str)):
            ids.add(check_student_id(value, f"the roster {path}, line {line}"))
    return sorted(ids)


def gradebook_students(db_url: str) -> list[str]:
    """The ids in nbgrader's student table of the gradebook at ``db_url`` (``nbgrader db student
    import``), read only: a gradebook that does not exist yet has none (and is not made here)."""
    import sqlalchemy

    url = sqlalchemy.engine.make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") and not Path(url.database).exists():
        return []  # connecting would make the file
    engine = sqlalchemy.create_engine(url)
    try:
        if not sqlalchemy.inspect(engine).has_table("student"):
            return []
        with engine.connect() as db:
            return sorted(str(row[0]) for row in db.execute(sqlalchemy.text("SELECT id FROM student")))
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise CourseError(f"cannot read the students of the gradebook {db_url}: {exc}") from None
    finally:
        engine.dispose()


def roster_rows(students: list[str], folders: list[str], listed: list[str], source: str) -> list[dict]:
    """Rows for the student folders of ``students`` that are not on the roster ``listed``."""
    if not listed:
        return []
    rows = []
    for student in students:
        if student in folders and student not in listed:
            near = difflib.get_close_matches(student, listed, n=1, cutoff=0.75)
            hint = (f" (did you mean {near[0]}? then rename the folder and grade again)" if near else "")
            rows.append(attention_row(student, "", "", None, OFF_ROSTER,
                                      f"{student} handed in work but is not on the roster ({source}){hint}: graded; "
                                      "add them to the roster if they are in the class"))
    return rows


# ---------------------------------------------------------------------------------------------
# What to grade


@dataclass
class Plan:
    """The assignments a run grades, and why."""

    chosen: list[Lesson]
    rule: str  # one line for the instructor
    what: str  # what the assignments chosen are: "handed in", "handed in and released", "given"
    unreleased: dict[str, list[str]]  # assignment -> students who handed it in, though it is not released


def exchange_folders(root: Path, given: Path | None = None) -> list[Path]:
    """Where ``nbgrader release_assignment`` puts releases: ``given`` (``--exchange``), else the
    exchange nbgrader's config names and nbgrader's default."""
    if given is not None:
        return [Path(given)]
    from autograder.lab_exchange import configured_exchange, nbgrader_default_exchange

    return sorted({Path(configured_exchange(root, root)), nbgrader_default_exchange()})


def released(exchanges) -> set[str]:
    """The assignments an exchange holds in this course's ``outbound/``: released to the students."""
    found = set()
    for exchange in exchanges:
        outbound = Path(exchange) / COURSE_ID / "outbound"
        try:
            found |= {p.name for p in outbound.iterdir() if p.is_dir()}
        except OSError:
            continue
    return found


def unknown_assignment(name: str, known: list[str]) -> str:
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"unknown assignment {name}" + (f": did you mean {near[0]}?" if near else f"; the course has {', '.join(known)}")


def choose_assignments(course: list[Lesson], submitted: Path, folders: list[str], only: list[str] | None,
                       exchanges=()) -> Plan:
    """The assignments to grade: ``only`` (``--assignment``), or the rule of this module's doc."""
    known = [lesson.assignment for lesson in course]
    if only:
        wrong = [a for a in only if a not in known]
        if wrong:
            raise CourseError("; ".join(unknown_assignment(a, known) for a in wrong))
        return Plan([lesson for lesson in course if lesson.assignment in only], "given with --assignment", "given", {})
    handed = {a: [s for s in folders if handed_in(submitted, s, a)] for a in known}
    handed = {a: who for a, who in handed.items() if who}
    out = released(exchanges)
    if out:
        chosen = [a for a in known if a in handed and a in out]
        unreleased = {a: who for a, who in handed.items() if a not in out}
        where = ", ".join(str(Path(e) / COURSE_ID / "outbound") for e in exchanges if released([e]))
        rule = f"handed in and released (in {where})"
    else:
        chosen, unreleased = [a for a in known if a in handed], {}
        rule = "handed in by at least one student (no nbgrader exchange here shows what was released)"
    what = "handed in and released" if out else "handed in"
    return Plan([lesson for lesson in course if lesson.assignment in chosen], rule, what, unreleased)


def unreleased_rows(plan: Plan, students: list[str], course: list[Lesson]) -> list[dict]:
    by_name = {lesson.assignment: lesson for lesson in course}
    rows = []
    for assignment, who in plan.unreleased.items():
        for student in who:
            if student in students:
                rows.append(not_graded_row(
                    student, assignment, "", by_name[assignment].max_score,
                    f"{assignment} is not released (not in nbgrader's exchange outbound/), so it was not graded; "
                    f"grade it with --assignment {assignment} if it was handed out another way"))
    return rows
