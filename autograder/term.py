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
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autograder.course import CourseError, Lesson, find_course_root
from autograder.grading import NotebookResult
from autograder.intake import handed_in
from autograder.jobs import notebook_result
from autograder.misconceptions import write_misconceptions
from autograder.reports import NOT_GRADED, attention_row, not_graded_row, write_reports

RESULTS = "results"
SUBMISSIONS = "_submissions.json"
RECORD_FORMAT = 1
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


# ---------------------------------------------------------------------------------------------
# Results kept per assignment


def _row_key(row: dict):
    return tuple(str(row.get(k) if row.get(k) is not None else "") for k in
                 ("student_id", "assignment", "exercise", "status", "message", "notebook"))


def _plain(result: NotebookResult) -> dict:
    """A result as data; its run time is left out (``jobs.csv`` has it): the same grades give the same bytes."""
    return {**dataclasses.asdict(result), "wall_s": 0.0}


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def record_file(out: Path, assignment: str) -> Path:
    return out / RESULTS / f"{assignment}.json"


def read_record(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != RECORD_FORMAT or not isinstance(data.get("results"), list):
            raise ValueError("not a record this version of the grader writes")
        data["results"] = [notebook_result(r) for r in data["results"]]
        data["attention"] = list(data.get("attention", []))
        return data
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CourseError(f"{path} cannot be read ({exc}): delete it and grade its assignment again") from None


def store(out: Path, assignments: list[str], results: list[NotebookResult], rows: list[dict],
          not_graded: dict[str, str] | None = None) -> None:
    """Replace the records of ``assignments`` (one run's) by ``results`` and ``rows``. An assignment
    this run could not grade (``not_graded``) keeps the results of an earlier record, with this
    run's ``not graded`` rows beside them."""
    for assignment in assignments:
        mine = sorted((r for r in results if r.assignment == assignment), key=lambda r: r.student)
        extra = [row for row in rows if row["assignment"] == assignment]
        path = record_file(out, assignment)
        if assignment in (not_graded or {}) and path.exists():
            earlier = read_record(path)
            if earlier["results"]:  # what was found this time was not graded: the earlier rows stay with their grades
                mine = earlier["results"]
                kept = " (the grades shown are those of an earlier run, kept)"
                extra = [row for row in earlier["attention"] if row.get("status") != NOT_GRADED] + [
                    {**row, "message": row["message"] + kept} for row in extra if row.get("status") == NOT_GRADED]
        _write_json(path, {"format": RECORD_FORMAT, "assignment": assignment, "results": [_plain(r) for r in mine],
                           "attention": sorted(extra, key=_row_key)})


def write_submission_rows(out: Path, rows: list[dict]) -> None:
    """What the last run found in the submissions folder outside the assignments it graded."""
    _write_json(out / RESULTS / SUBMISSIONS, {"format": RECORD_FORMAT, "attention": sorted(rows, key=_row_key)})


def submission_rows(folder: Path) -> list[dict]:
    path = folder / RESULTS / SUBMISSIONS
    if not path.exists():
        return []
    try:
        return list(json.loads(path.read_text(encoding="utf-8"))["attention"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise CourseError(f"{path} cannot be read ({exc}): delete it and grade again") from None


def adopt_earlier(out: Path, cache: Path, known: list[str], skip: set[str]) -> list[str]:
    """An output folder graded by a version of the grader that kept no records (it has a
    ``grades.csv`` but no ``results/``): a record for each assignment of ``known`` (not in ``skip``)
    whose results are in ``cache`` (one file per student × assignment), so that grading another
    assignment into it keeps them. Returns the assignments adopted."""
    if (out / RESULTS).exists() or not (out / "grades.csv").exists() or not cache.is_dir():
        return []
    found: dict[str, list[NotebookResult]] = {}
    for path in sorted(cache.glob("*__*.json")):
        student, _, assignment = path.stem.rpartition("__")
        if assignment not in known or assignment in skip:
            continue
        try:
            found.setdefault(assignment, []).append(notebook_result(json.loads(path.read_text(encoding="utf-8"))["result"]))
        except (OSError, ValueError, TypeError, KeyError):
            continue  # not a result (or a damaged one): that notebook is graded again with its assignment
    for assignment, results in sorted(found.items()):
        store(out, [assignment], results, [])
    return sorted(found)


def rebuild(out: Path, sources, root: Path | None = None) -> pd.DataFrame:
    """Every report of ``out``, from all its records; returns the long gradebook of the term.
    ``root``: the course (the misconceptions page links to its lessons), found when not given."""
    results: list[NotebookResult] = []
    rows: list[dict] = []
    folder = out / RESULTS
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name == SUBMISSIONS:
            continue
        data = read_record(path)
        results += data["results"]
        rows += data["attention"]
    rows += submission_rows(out)
    results.sort(key=lambda r: (r.assignment, r.student))
    frame = write_reports(results, out, sources, rows)
    if root is None:
        try:
            root = find_course_root()
        except CourseError:
            root = None  # the misconceptions page without links to the lessons
    write_misconceptions(results, out, root)
    return frame


def attention_counts(out: Path, statuses) -> str:
    """``"2 chosen, 1 misplaced"``: the rows of ``out``'s needs_attention.csv with ``statuses``; "" if none."""
    try:
        eyes = pd.read_csv(out / "needs_attention.csv", keep_default_na=False, dtype=str)
    except (OSError, ValueError):
        return ""
    counts = eyes["status"].value_counts() if "status" in eyes else {}
    return ", ".join(f"{counts[s]} {s}" for s in statuses if s in counts)
