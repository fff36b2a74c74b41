"""Each lesson's page, run once for the whole test run and shared by the test files that read it.

``tests/test_notebooks.py`` checks that every cell of a solution runs and that its visible tests
pass; ``tests/test_book.py`` builds the book from the same runs (``build_book(executed=...)``). The
test command spreads test files over worker processes, so the runs are kept in a folder every
worker of this run sees, one file per lesson, made under a lock: whichever worker asks first runs
the lesson, the other reads the file. ``all_of`` takes the lessons from the last one, and skips for now any
that another worker is running, so two workers that need every lesson share the work.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import nbformat

from autograder.book import execute_page
from autograder.course import Lesson

ROOT = Path(__file__).resolve().parents[1]
#: what a network request from a lesson would go through: nothing listens there
NO_NETWORK = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
              "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "ALL_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}


def shared_folder(basetemp: Path) -> Path:
    """A folder for this run alone that all its worker processes share (a worker's own base
    folder sits in the run's; without workers, the run's base folder is its own)."""
    return (basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp) / "lesson-runs"


class LessonRuns:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._read: dict[str, nbformat.NotebookNode] = {}

    def one(self, lesson: Lesson) -> nbformat.NotebookNode:
        """The lesson's run: made now, or read from the file another worker made."""
        return self._get(lesson, wait=True)

    def all_of(self, course: list[Lesson]) -> dict[str, nbformat.NotebookNode]:
        """Every lesson's run by assignment name; a lesson another worker is running now waits
        until the others are done."""
        found, pending = {}, list(course)
        while pending:
            for lesson in list(reversed(pending)):  # from the last: test_notebooks.py goes from the first
                page = self._get(lesson, wait=False)
                if page is not None:
                    found[lesson.assignment] = page
                    pending.remove(lesson)
            if pending:
                time.sleep(0.5)
        return found

    def _get(self, lesson: Lesson, *, wait: bool) -> nbformat.NotebookNode | None:
        if lesson.assignment in self._read:
            return self._read[lesson.assignment]
        path = self.folder / f"{lesson.assignment}.ipynb"
        with open(self.folder / f"{lesson.assignment}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None
            if not path.exists():
                page = _run(lesson)
                part = path.with_suffix(".part")
                part.write_text(json.dumps(page), encoding="utf-8")
                os.replace(part, path)
        self._read[lesson.assignment] = nbformat.read(path, as_version=4)
        return self._read[lesson.assignment]


def _run(lesson: Lesson) -> dict:
    return execute_page(ROOT, lesson, quick=True, cell_timeout=600, env=NO_NETWORK)
