"""Where the notebooks of a grading run are graded: threads on this machine, or a Dask pool.

``grade_class`` makes the list of jobs (student × lesson, what the cache does not already hold)
and hands it to an executor, which yields each job's ``NotebookResult`` with its timing, in the
order they finish:

``local`` (the default)
    ``--jobs`` threads in this process; each thread hands its notebook to a fork server of this
    machine (``autograder.server_pool``), so student code runs in children of those servers, never here.

``dask://HOST:PORT``
    a running Dask ``distributed`` scheduler (``autograder.dask_executor``, optional extra ``dask``).

What both share (a job, its timing, the isolation of each lesson) is in ``autograder.jobs``.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from autograder.course import CourseError, Lesson
from autograder.grader import grade_notebook
from autograder.grading import NotebookResult
from autograder.job_queue import JobQueue
from autograder.jobs import Job, Timing, lesson_isolations
from autograder.protocol import Limits, limits_for
from autograder.server_pool import idle_count, run_ended

DASK_SCHEME = "dask://"


class LocalExecutor:
    """``jobs`` threads, each grading through a fork server of this machine."""

    def __init__(self, root: Path, course: list[Lesson], chosen: list[Lesson], mode: str, private: list[Path], jobs: int):
        self.jobs = max(1, jobs)
        self.isolations = lesson_isolations(mode, root, course, chosen, private)
        self.host = socket.gethostname()

    def describe(self) -> str:
        return f"{self.jobs} local job{'s' if self.jobs != 1 else ''}"

    def _one(self, job: Job, limits: Limits, queued: float) -> tuple[NotebookResult, Timing]:
        started = time.time()
        own = limits_for(limits, job.lesson.assignment)
        result = grade_notebook(job.lesson, job.path, job.student, own, self.isolations[job.lesson.assignment])
        where = f"{self.host}/{threading.current_thread().name}"
        return result, Timing(job.student, job.lesson.assignment, where, queued, started, time.time())

    def run(self, jobs: list[Job], limits: Limits) -> Iterator[tuple[NotebookResult, Timing]]:
        """Grade ``jobs`` on ``self.jobs`` threads, taken in ``JobQueue``'s order (as few fork servers
        started as will do); yields each result as it ends."""
        queued = time.time()
        order = JobQueue(jobs, lambda job: None if job.path is None else self.isolations[job.lesson.assignment].key,
                         servers={iso.key: idle_count(iso) for iso in self.isolations.values()})
        ended: queue.Queue = queue.Queue()

        def work() -> None:
            while (job := order.take()) is not None:
                try:
                    ended.put((True, self._one(job, limits, queued)))
                except BaseException as exc:  # noqa: BLE001 - the grader's own fault: raised in the caller
                    ended.put((False, exc))
                finally:
                    order.done(job)

        threads = [threading.Thread(target=work, name=f"grade_{n}", daemon=True) for n in range(min(self.jobs, len(jobs)))]
        for thread in threads:
            thread.start()
        try:
            for _ in jobs:
                ok, value = ended.get()
                if not ok:
                    raise value
                yield value
        finally:  # an error or Ctrl-C: drop what has not started instead of grading it first
            order.stop()
            for thread in threads:
                thread.join()

    def close(self) -> None:
        run_ended()  # the idle servers stay for the process's later runs, within the memory's means


def check_executor(spec: str) -> str:
    """``spec`` if it names an executor (``local`` or ``dask://HOST:PORT``); else CourseError."""
    if spec == "local":
        return spec
    if spec.startswith(DASK_SCHEME) and ":" in spec[len(DASK_SCHEME):].strip("/"):
        return spec
    raise CourseError(f"--executor takes `local` or `dask://HOST:PORT` (a Dask scheduler), not {spec!r}")


def scheduler_address(spec: str) -> str:
    """``dask://HOST:PORT`` -> ``tcp://HOST:PORT`` (another scheme given after ``dask://`` is kept)."""
    rest = check_executor(spec)[len(DASK_SCHEME):].strip("/")
    return rest if "://" in rest else f"tcp://{rest}"


def make_executor(spec, root: Path, course: list[Lesson], chosen: list[Lesson], mode: str, private: list[Path],
                  jobs: int, fingerprint: str):
    """The executor ``spec`` names; a ``distributed.Client`` is also accepted (a Dask pool)."""
    if isinstance(spec, str) and check_executor(spec) == "local":
        return LocalExecutor(root, course, chosen, mode, private, jobs)
    try:
        from autograder.dask_executor import DaskExecutor  # optional: Dask's distributed
    except ImportError as exc:
        raise CourseError(
            f"--executor {spec} needs Dask's distributed ({exc.name} is missing): pip install 'transformer-course[dask]'"
        ) from None
    return DaskExecutor(scheduler_address(spec) if isinstance(spec, str) else spec, chosen, mode, fingerprint)
