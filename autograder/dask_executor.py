"""Grade on a live Dask ``distributed`` pool: ``transformer-course grade ... --executor dask://HOST:PORT``.

How the work is split between the machines:

* The grading machine (the Dask *client*) lists the jobs, keeps the cache, writes the reports.
  A notebook that is absent or unreadable is judged right there (no code of it runs anywhere);
  every other one is sent as its bytes, so workers need no shared filesystem.
* Each Dask *worker* process keeps one ``CourseService`` (``autograder.dask_worker``) for its whole
  life: the course checkout it found when it started, that checkout's ``course_fingerprint``, and the fork servers
  (``autograder.server_pool``) of every lesson it has graded, ``--nthreads`` of them per lesson
  isolation. A fork server imports torch once; it is started once per worker, not once per run.
  The service is made by ``dask worker --preload autograder.dask_executor`` when the worker
  starts (``dask_setup`` below; ``$TRANSFORMER_COURSE_WARM`` names lessons whose servers start
  then, or ``all``), else by the first run that reaches the worker.
* At the start of every run the client asks each worker (``_admit``) whether its checkout is the
  very course the client grades with. A worker whose checkout differs is refused, with a message
  that says so. A worker whose checkout has become the client's since its fork servers started
  (the course was updated under it) stops them and starts new ones from the checkout as it is
  now. Its own process cannot reload the code it imported (the judges, in ``helpers.checks``):
  when one of those files changed, the worker refuses and asks to be restarted.
  A worker that says yes starts the servers of the run's lessons that it does not have yet, in
  the service's own thread; a warm worker has them all and grades the first notebook at once.
* A task only writes the notebook into a private folder of the worker, hands it to a fork
  server of its lesson through ``grade_notebook`` (the student's code runs in a child forked from
  that server, under the same limits and sandbox as a local run, never in the Dask worker
  process), and returns the ``NotebookResult`` as plain data with when and where it ran.

Workers must run this course's code (the same checkout, e.g. the same container image) so the
fingerprints match; with ``--sandbox bwrap`` (or ``auto`` resolving to it on the client) they
need bubblewrap too. Concurrency is the pool's: one notebook per worker thread (``--jobs`` is
not used). A worker that dies mid-job has its job run again elsewhere by Dask. The worker's
grading secret never reaches its fork servers (the client sends the number derived from it with
each task).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Iterator

from distributed import Client, as_completed, get_worker

from autograder.course import CourseError, Lesson
from autograder.dask_worker import READY, WARM_ENV, drop_service, service_for
from autograder.grader import grade_notebook
from autograder.grading import NotebookResult
from autograder.jobs import Job, Timing, notebook_result
from autograder.protocol import Limits, limits_for
from autograder.sandbox import resolve_mode
from autograder.submission import InvalidNotebook, read_notebook


def dask_setup(worker) -> None:
    """``dask worker --preload autograder.dask_executor``: the worker reads its course as it starts
    (each run checks it against the grading machine's) and starts the fork servers of the lessons
    in ``$TRANSFORMER_COURSE_WARM`` (comma-separated assignments, or ``all``) in the sandbox
    ``grade`` uses by default (``auto``)."""
    service = service_for(worker)
    wanted = [a.strip() for a in os.environ.get(WARM_ENV, "").split(",") if a.strip()]
    if wanted == ["all"]:
        wanted = list(service.lessons)
    unknown = sorted(set(wanted) - set(service.lessons))
    if unknown:
        raise CourseError(f"${WARM_ENV} names {', '.join(unknown)}, not lessons of {service.root} "
                          f"(they are {', '.join(service.lessons)}, or `all`)")
    service.warm(resolve_mode("auto"), wanted)


def dask_teardown(worker) -> None:
    """The worker is closing: its service's thread stops the servers (the event loop does not wait)."""
    service = drop_service(worker.address)
    if service is not None:
        service.close(wait=0)


async def _admit(run: dict, dask_worker) -> str:
    """Run on every worker by ``Client.run`` at the start of a run: ``READY``, or why the worker refuses."""
    def check() -> str:
        try:
            return service_for(dask_worker).admit(run)
        except CourseError as exc:  # its message names the worker
            return str(exc)
        except (RuntimeError, ValueError, OSError) as exc:  # e.g. no bubblewrap there
            return f"the Dask worker {dask_worker.address} cannot grade: {exc}"

    return await asyncio.to_thread(check)  # never block the worker's event loop


def _grade_task(run: dict, task: dict) -> dict:
    """A Dask task: runs in a worker thread; the notebook itself runs in a fork server of the worker."""
    return service_for(get_worker()).grade(run, task)


# --- on the grading machine --------------------------------------------------------------------


class DaskExecutor:
    """Sends each notebook to a Dask pool; yields results as they finish."""

    def __init__(self, spec, chosen: list[Lesson], mode: str, fingerprint: str):
        """``spec``: the scheduler's address (``tcp://HOST:PORT``) or a ``distributed.Client``."""
        if isinstance(spec, str):
            try:
                self.client = Client(spec, timeout="30s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise RuntimeError(f"cannot reach the Dask scheduler at {spec}: {exc}") from None
            self.owned = True
        else:  # a distributed.Client made by the caller (tests, notebooks)
            self.client, self.owned = spec, False
        self.address = self.client.scheduler.address
        self.run_info = {"id": uuid.uuid4().hex, "fingerprint": fingerprint, "mode": mode,
                         "assignments": [lesson.assignment for lesson in chosen]}

    def describe(self) -> str:
        threads = self.client.nthreads()
        return f"the Dask pool at {self.address} ({len(threads)} workers, {sum(threads.values())} threads)"

    def admit_workers(self) -> None:
        """Check every worker's course before any notebook is sent (each starts the servers of
        the run's lessons that it lacks, and new ones where the course changed under it)."""
        answers = self.client.run(_admit, self.run_info)
        refused = sorted(answer for answer in answers.values() if answer != READY)
        if refused:
            raise RuntimeError(refused[0] + (f" (and {len(refused) - 1} more workers)" if len(refused) > 1 else ""))

    def run(self, jobs: list[Job], limits: Limits) -> Iterator[tuple[NotebookResult, Timing]]:
        remote, here = [], []
        for job in jobs:
            try:
                if job.path is not None:
                    read_notebook(job.path, limits_for(limits, job.lesson.assignment).notebook_mb)
                    remote.append(job)
                    continue
            except InvalidNotebook:
                pass
            here.append(job)  # absent or unreadable: judged here (nothing of it runs anywhere)
        if remote:
            self.admit_workers()
        todo = iter(remote)
        # a window of tasks in flight: notebooks travel as bytes, so never all of them at once
        window = max(32, 4 * sum(self.client.nthreads().values()))
        flying = as_completed(loop=self.client.loop)
        meta: dict[str, tuple] = {}

        def submit_next() -> None:
            job = next(todo, None)
            if job is None:
                return
            task = {"student": job.student, "assignment": job.lesson.assignment, "filename": job.path.name,
                    "notebook": job.path.read_bytes(),
                    "limits": dataclasses.asdict(limits_for(limits, job.lesson.assignment))}
            key = f"grade-{job.lesson.assignment}-{uuid.uuid4().hex}"
            future = self.client.submit(_grade_task, self.run_info, task, pure=False, key=key)
            meta[future.key] = (future, job, time.time())
            flying.add(future)

        for _ in range(window):
            submit_next()
        try:
            for job in here:  # while the pool works
                queued = time.time()
                result = grade_notebook(job.lesson, job.path, job.student, limits_for(limits, job.lesson.assignment))
                yield result, Timing(job.student, job.lesson.assignment, "client", queued, queued, time.time())
            for future in flying:
                data = future.result()  # a worker's error is raised here
                _, job, queued = meta.pop(future.key)
                submit_next()
                timing = Timing(job.student, job.lesson.assignment, data["worker"], queued,
                                data["started_at"], data["finished_at"])
                yield notebook_result(data["result"]), timing
        finally:
            if meta:
                self.client.cancel([future for future, _, _ in meta.values()])

    def close(self) -> None:
        """The pool and its workers' fork servers stay up for the next run."""
        if self.owned:
            self.client.close()
