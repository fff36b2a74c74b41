"""A run's output folder, as ``grade`` (``batch``) writes it and ``merge`` reads it: the cache
(``.cache/``, one JSON file per notebook, keyed by everything that decides the grade), the
manifest (``grading.json``, written last: what was graded, how, by which course), ``jobs.csv``
(the timings) and the shard rule (``shard_of``) that splits a class among N runs.

Moved here from ``batch`` so that ``merge`` reads the format through public names.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from autograder.course import CourseError, Lesson
from autograder.grading import NotebookResult
from autograder.jobs import Timing, notebook_result
from autograder.protocol import LessonLimits, Limits, limits_data, limits_for

CACHE = ".cache"
MANIFEST = "grading.json"  # what was graded, how, by which course; written last
MANIFEST_FORMAT = 1
SHARD_RULE = "sha256(student_id) mod N"
JOBS = "jobs.csv"
JOB_COLUMNS = ["student", "assignment", "worker", "queued_at", "started_at", "finished_at", "wall_s"]



def cache_key(fingerprint: str, lesson: Lesson, path: Path | None, limits: Limits | LessonLimits, mode: str) -> str:
    digest = hashlib.sha256(fingerprint.encode())
    own = dataclasses.asdict(limits_for(limits, lesson.assignment))
    digest.update(json.dumps([lesson.assignment, own, mode, path.name if path else None]).encode())
    digest.update(path.read_bytes() if path is not None and path.is_file() else b"<absent>")
    return digest.hexdigest()


def load_cached(cache_file: Path, key: str) -> NotebookResult | None:
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    try:
        return notebook_result(data["result"])
    except (KeyError, TypeError):
        return None


def store_cached(cache_file: Path, key: str, result: NotebookResult) -> None:
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "result": dataclasses.asdict(result)}), encoding="utf-8")
    os.replace(tmp, cache_file)


def cache_name(student: str, assignment: str) -> str:
    return f"{student}__{assignment}.json"


# ---------------------------------------------------------------------------------------------
# Shards: one class graded by N independent runs (Slurm array tasks, Kubernetes Indexed Job pods)


def shard_of(student: str, count: int) -> int:
    """The shard (0 .. count-1) that grades ``student``: SHA-256 of the student id, modulo count.

    A hash of the id alone, not a position in the sorted roster: a student added or dropped
    moves no other student to another shard (each shard's cache stays valid from one run to
    the next), and every machine computes the same split (unlike Python's salted ``hash``).
    The price: for a small class the shards are not exactly equal in size."""
    digest = hashlib.sha256(student.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` -> (i, N), with 0 <= i < N; CourseError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if match:
        index, count = int(match[1]), int(match[2])
        if 0 <= index < count:
            return index, count
    raise CourseError(
        f"--shard takes i/N with 0 <= i < N (e.g. 0/4 .. 3/4, as $SLURM_ARRAY_TASK_ID or "
        f"$JOB_COMPLETION_INDEX number them), not {text!r}"
    )


def roster_digest(students: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(students)).encode("utf-8")).hexdigest()


def manifest(fingerprint: str, limits: Limits | LessonLimits, mode: str, assignments: list[str], roster: list[str],
             shard: tuple[int, int] | None, graded: list[tuple[str, str, str]],
             not_graded: dict[str, str] | None = None) -> dict:
    """What ``MANIFEST`` says about a run. Nothing in it depends on time or place, so one
    unsharded run and the merge of its N shards write the same bytes. ``not_graded`` (lesson ->
    reason), the lessons left out of the run, appears only when there are some."""
    students = sorted({student for student, _, _ in graded}) if graded else []
    extra = {"not_graded": dict(not_graded)} if not_graded else {}
    return {
        "format": MANIFEST_FORMAT,
        "course_fingerprint": fingerprint,
        "limits": limits_data(limits),
        "sandbox": mode,
        "assignments": list(assignments),
        "class": {"students": len(roster), "digest": roster_digest(roster)},
        "shard": None if shard is None else {"index": shard[0], "count": shard[1], "rule": SHARD_RULE},
        "students": students,
        "graded": [list(item) for item in sorted(graded)],
        **extra,
    }


def write_manifest(out: Path, data: dict) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def _stamp(value: float | None) -> str:
    if value is None:
        return ""
    return datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timing_row(t: Timing) -> list[str]:
    wall = "" if t.started_at is None or t.finished_at is None else f"{t.finished_at - t.started_at:.3f}"
    return [t.student, t.assignment, t.worker, _stamp(t.queued_at), _stamp(t.started_at), _stamp(t.finished_at), wall]


def write_jobs(out: Path, rows: list[list[str]]) -> None:
    """``jobs.csv``: one row per notebook, sorted by student and assignment. The only file of a
    run that records time (UTC, ISO 8601) and place; notebooks taken from the cache say ``cache``."""
    with open(out / JOBS, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(JOB_COLUMNS)
        writer.writerows(sorted(rows, key=lambda row: (row[0], row[1])))
