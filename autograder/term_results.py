"""A term's results, kept per assignment in one output folder, and the reports rebuilt from them.

Each run keeps the results of the assignments it graded in ``results/<assignment>.json`` (every
notebook's result, and the rows of ``needs_attention.csv`` that belong to that assignment); a later
run replaces only the files of the assignments it grades, and every report is rebuilt from all of
them. ``results/_submissions.json`` holds what the last run found outside the assignments it graded.

Moved here from ``term``, which keeps the class (the roster) and what to grade.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pandas as pd

from autograder.course import CourseError, find_course_root
from autograder.grading import NotebookResult
from autograder.jobs import notebook_result
from autograder.misconceptions import write_misconceptions
from autograder.reports import NOT_GRADED, write_reports

RESULTS = "results"
SUBMISSIONS = "_submissions.json"
RECORD_FORMAT = 1


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
