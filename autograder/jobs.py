"""What every executor shares: a grading job, its timing, its result as plain data, and the
isolation each lesson's notebooks run under.

``autograder.executors`` (threads on this machine) and ``autograder.dask_executor`` (a Dask pool)
both build on this module and on nothing of each other's but what ``executors.make_executor``
chooses between them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from autograder.course import Lesson
from autograder.grading import ExerciseResult, NotebookResult, TestResult
from autograder.sandbox import Isolation, isolation


@dataclass
class Job:
    """One notebook to grade: ``path`` None means the student handed nothing in."""

    student: str
    lesson: Lesson
    path: Path | None


@dataclass
class Timing:
    """When and where one job ran: a row of ``jobs.csv`` (times are Unix seconds)."""

    student: str
    assignment: str
    worker: str
    queued_at: float | None = None  # handed to the executor (the grading machine's clock)
    started_at: float | None = None  # began on its worker (the worker's clock)
    finished_at: float | None = None


def notebook_result(data: dict) -> NotebookResult:
    """A ``NotebookResult`` from its plain-data form (``dataclasses.asdict``)."""
    data = dict(data)
    exercises = [
        ExerciseResult(**{**e, "tests": [TestResult(**t) for t in e["tests"]]}) for e in data.pop("exercises")
    ]
    return NotebookResult(**data, exercises=exercises)


def lesson_isolations(
    mode: str, root: Path, course: list[Lesson], chosen: list[Lesson], private: list[Path], tag: str | None = None
) -> dict[str, Isolation]:
    """The isolation of each chosen lesson: its own reference module and later ones hidden.

    ``tag`` makes the isolation keys (which group fork servers) private to one owner, who may
    then stop its servers (``server_pool.shutdown_servers``) without stopping another's; without
    it, the process's runs share their idle servers."""
    order = [lesson.assignment for lesson in course]
    found = {}
    for lesson in chosen:
        later = course[order.index(lesson.assignment):]
        hidden = [m for m in (le.meta.get("reference_module") for le in later) if m]
        iso = isolation(mode, root, hidden, private)
        found[lesson.assignment] = iso if tag is None else dataclasses.replace(iso, key=f"{iso.key}@{tag}")
    return found
