"""Grade on a live Dask ``distributed`` pool: ``transformer-course grade ... --executor dask://HOST:PORT``.

How the work is split between the machines:

* The grading machine (the Dask *client*) lists the jobs, keeps the cache, writes the reports.
  A notebook that is absent or unreadable is judged right there (no code of it runs anywhere);
  every other one is sent as its bytes, so workers need no shared filesystem.
* Every Dask *worker* gets a plugin (``GraderPlugin``) when the run starts. In a thread of its
  own it finds the worker's own course checkout, refuses it unless it is the very course the
  client grades with (the same ``course_fingerprint``), and starts one fork server per lesson
  isolation (``autograder.runner``): torch is imported there once per worker, not per job. (The
  worker process imports it too, once, for the judges: trusted code that reads the JSON the
  child wrote, as the local grader's own process does.)
* A task only writes the notebook into a private folder of the worker, hands it to that fork
  server through ``grade_notebook`` (the student's code runs in a child forked from the server,
  under the same limits and sandbox as a local run, never in the Dask worker process), and
  returns the ``NotebookResult`` as plain data with when and where it ran.
* At the end the client removes the plugin, which stops the fork servers; the pool stays up.

Workers must run this course's code (the same checkout, e.g. the same container image) so the
fingerprints match; with ``--sandbox bwrap`` (or ``auto`` resolving to it on the client) they
need bubblewrap too. Concurrency is the pool's: one notebook per worker thread (``--jobs`` is
not used). A worker that dies mid-job has its job run again elsewhere by Dask. Fork servers
end with the thread that started them (bubblewrap's --die-with-parent), so the plugin's own
thread starts them and lives until the run ends; Dask's task threads live as long as the worker.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from distributed import Client, WorkerPlugin, as_completed, get_worker

from autograder.course import CourseError, Lesson
from autograder.executors import DASK_SCHEME, Job, Timing, lesson_isolations, notebook_result
from autograder.grading import InvalidNotebook, NotebookResult, grade_notebook, read_notebook
from autograder.runner import Limits, limits_for, run_steps, shutdown_servers
from autograder.sandbox import Isolation

READY_TIMEOUT_S = 600  # a worker's fork servers must be up by then (importing torch on a busy machine)


class GraderPlugin(WorkerPlugin):
    """Lives in each Dask worker for one grading run: owns that worker's fork servers."""

    idempotent = False

    def __init__(self, name: str, fingerprint: str, mode: str, assignments: list[str]):
        self.name = name
        self.fingerprint = fingerprint
        self.mode = mode
        self.assignments = list(assignments)

    # --- in the worker process ---------------------------------------------------------------

    def setup(self, worker) -> None:
        # called in the worker's event loop: start the servers in a thread, never block it
        self.address = worker.address
        scratch = Path(worker.local_directory).resolve()  # .../dask-scratch-space/worker-xxxx
        self.scratch = scratch.parent if scratch.parent.name == "dask-scratch-space" else scratch
        self.ready = threading.Event()
        self.closing = threading.Event()
        self.error: str | None = None
        self.base: Path | None = None
        self.isolations = {}
        threading.Thread(target=self._serve, name=self.name, daemon=True).start()

    def _serve(self) -> None:
        """Start the fork servers, wait for the end of the run, stop them. One thread does it all
        and lives as long as the servers: bubblewrap's --die-with-parent ends a sandbox when the
        thread that started it ends."""
        try:
            self._start()
        except BaseException as exc:  # noqa: BLE001 - reported by every task on this worker
            self.error = str(exc) if isinstance(exc, CourseError) else f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()
        self.closing.wait()
        for key in {iso.key for iso in self.isolations.values()}:
            shutdown_servers(key)
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)

    def _start(self) -> None:
        from autograder.batch import course_fingerprint
        from autograder.course import find_course_root, lessons
        from autograder.sandbox import resolve_mode

        root = find_course_root()
        mine = course_fingerprint(root)
        if mine != self.fingerprint:
            raise CourseError(
                f"the Dask worker {self.address} has another version of the course ({root}, fingerprint "
                f"{mine[:12]}, the grader's is {self.fingerprint[:12]}): run the same checkout or image everywhere"
            )
        resolve_mode(self.mode)  # bwrap must work here too
        course = lessons(root)
        chosen = [lesson for lesson in course if lesson.assignment in self.assignments]
        self.lessons = {lesson.assignment: lesson for lesson in chosen}
        self.base = Path(tempfile.mkdtemp(prefix="tc-dask-"))
        self.incoming = self.base / "incoming"
        self.incoming.mkdir(mode=0o700)
        isolations = lesson_isolations(self.mode, root, self.base, course, chosen,
                                       [self.incoming, self.scratch], self.name)
        # Dask puts its scratch folders (every worker's) on sys.path, which the sandbox would show
        self.isolations = {a: _hide(iso, self.scratch) for a, iso in isolations.items()}
        warmed = set()
        for iso in self.isolations.values():  # one fork server per isolation, started now
            if iso.key not in warmed:
                run_steps([], Limits(), iso)
                warmed.add(iso.key)

    def grade(self, task: dict) -> dict:
        if not self.ready.wait(READY_TIMEOUT_S):
            raise RuntimeError(f"the fork servers of the Dask worker {self.address} did not start in {READY_TIMEOUT_S}s")
        if self.error:
            raise RuntimeError(self.error)
        lesson = self.lessons[task["assignment"]]
        started = time.time()
        with tempfile.TemporaryDirectory(dir=self.incoming) as folder:
            path = Path(folder) / Path(task["filename"]).name
            path.write_bytes(task["notebook"])
            result = grade_notebook(lesson, path, task["student"], Limits(**task["limits"]),
                                    self.isolations[lesson.assignment])
        return {"result": dataclasses.asdict(result), "worker": self.address,
                "started_at": started, "finished_at": time.time()}

    def teardown(self, worker) -> None:
        self.closing.set()  # the plugin's thread stops the servers (never block the event loop)


def _hide(iso: Isolation, folder: Path) -> Isolation:
    """``iso`` without the read-only binds that would show ``folder`` or anything in it."""
    args, kept, i = list(iso.prefix), [], 0
    while i < len(args):
        if args[i] == "--ro-bind" and i + 2 < len(args) and args[i + 1] == args[i + 2]:
            bound = Path(args[i + 1])
            if bound == folder or folder in bound.parents:
                i += 3
                continue
        kept.append(args[i])
        i += 1
    return dataclasses.replace(iso, prefix=tuple(kept))


def _grade_task(plugin: str, task: dict) -> dict:
    """A Dask task: runs in a worker thread; the notebook itself runs in the worker's fork server."""
    found = get_worker().plugins.get(plugin)
    if found is None:
        raise RuntimeError(f"the Dask worker has no grader plugin {plugin!r} (it joined after the run ended?)")
    return found.grade(task)


# --- on the grading machine --------------------------------------------------------------------


def scheduler_address(spec: str) -> str:
    """``dask://HOST:PORT`` -> ``tcp://HOST:PORT``."""
    rest = spec[len(DASK_SCHEME):].strip("/")
    return rest if "://" in rest else f"tcp://{rest}"


class DaskExecutor:
    """Sends each notebook to a Dask pool; yields results as they finish."""

    def __init__(self, spec, root: Path, chosen: list[Lesson], mode: str, fingerprint: str):
        if isinstance(spec, str):
            address = scheduler_address(spec)
            try:
                self.client = Client(address, timeout="30s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise RuntimeError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
            self.owned = True
        else:  # a distributed.Client made by the caller (tests, notebooks)
            self.client, self.owned = spec, False
        self.address = self.client.scheduler.address
        self.mode = mode
        self.name = f"transformer-course-{uuid.uuid4().hex[:12]}"
        plugin = GraderPlugin(self.name, fingerprint, mode, [lesson.assignment for lesson in chosen])
        self.client.register_plugin(plugin, name=self.name)
        self.registered = True

    def describe(self) -> str:
        threads = self.client.nthreads()
        return f"the Dask pool at {self.address} ({len(threads)} workers, {sum(threads.values())} threads)"

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
            future = self.client.submit(_grade_task, self.name, task, pure=False, key=key)
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
                data = future.result()  # a worker's error (e.g. another course version) is raised here
                _, job, queued = meta.pop(future.key)
                submit_next()
                timing = Timing(job.student, job.lesson.assignment, data["worker"], queued,
                                data["started_at"], data["finished_at"])
                yield notebook_result(data["result"]), timing
        finally:
            if meta:
                self.client.cancel([future for future, _, _ in meta.values()])

    def close(self) -> None:
        try:
            if self.registered:
                self.client.unregister_worker_plugin(self.name)
                self.registered = False
        finally:
            if self.owned:
                self.client.close()
