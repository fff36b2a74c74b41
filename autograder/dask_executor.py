"""Grade on a live Dask ``distributed`` pool: ``transformer-course grade ... --executor dask://HOST:PORT``.

How the work is split between the machines:

* The grading machine (the Dask *client*) lists the jobs, keeps the cache, writes the reports.
  A notebook that is absent or unreadable is judged right there (no code of it runs anywhere);
  every other one is sent as its bytes, so workers need no shared filesystem.
* Each Dask *worker* process keeps one ``CourseService`` for its whole life: the course checkout
  it found when it started, that checkout's ``course_fingerprint``, and the fork servers
  (``autograder.runner``) of every lesson it has graded, ``--nthreads`` of them per lesson
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
not used). A worker that dies mid-job has its job run again elsewhere by Dask. Fork servers end
with the thread that started them (bubblewrap's --die-with-parent), so the service's own thread,
which lives as long as the worker, starts them; the worker's grading secret never reaches them
(the client sends the number derived from it with each task).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from distributed import Client, as_completed, get_worker

from autograder.course import CourseError, Lesson, course_fingerprint, find_course_root, lessons
from autograder.grader import grade_notebook
from autograder.grading import NotebookResult
from autograder.jobs import Job, Timing, lesson_isolations, notebook_result
from autograder.protocol import Limits, limits_for
from autograder.runner import shutdown_servers, start_servers
from autograder.sandbox import Isolation, resolve_mode
from autograder.submission import InvalidNotebook, read_notebook

READY_TIMEOUT_S = 600  # a lesson's fork servers must be up by then (importing torch on a busy machine)
WARM_ENV = "TRANSFORMER_COURSE_WARM"  # lessons whose servers a preloaded worker starts at once, or "all"
READY = "ready"  # what ``_admit`` answers when the worker may grade; anything else is why it refuses


@dataclasses.dataclass
class _Warming:
    """The fork servers of one lesson isolation on one worker: set once they are up or failed."""

    isolation: Isolation
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    error: str = ""


class CourseService:
    """The course as one Dask worker process holds it, from its start to its end."""

    def __init__(self, address: str, local_directory: str, threads: int):
        self.address = address
        scratch = Path(local_directory).resolve()  # .../dask-scratch-space/worker-xxxx
        self.scratch = scratch.parent if scratch.parent.name == "dask-scratch-space" else scratch
        self.threads = max(1, threads)
        self.root = find_course_root()
        self.own_code = own_code(self.root)  # what this process imported, as the checkout has it now
        self.base = Path(tempfile.mkdtemp(prefix="tc-dask-"))
        self.incoming = self.base / "incoming"
        self.incoming.mkdir(mode=0o700)
        self.servers_started = 0
        self.generation = 0  # how many times the course was read
        self._lock = threading.Lock()
        self._load()
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="transformer-course-servers", daemon=True)
        self._thread.start()

    def _load(self, fingerprint: str | None = None) -> list[_Warming]:
        """Read the course from the checkout (unless it is still ``fingerprint``): the fork servers
        started from now on run it. Returns the servers of the course read before."""
        course = lessons(self.root)
        with self._lock:
            if fingerprint is not None and fingerprint == self.fingerprint:
                return []  # another thread has read it already
            old = list(getattr(self, "_warming", {}).values())
            self.fingerprint = fingerprint or course_fingerprint(self.root)
            self.course = course
            self.lessons = {lesson.assignment: lesson for lesson in course}
            self.generation += 1  # new isolation keys: the old servers are never handed a job again
            self._isolations: dict[str, dict[str, Isolation]] = {}  # mode -> assignment -> isolation
            self._warming: dict[str, _Warming] = {}  # isolation key -> its servers
            self._admitted: set[str] = set()  # runs whose course this worker has checked
        return old

    def admit(self, run: dict) -> str:
        """``READY`` when this worker may grade ``run`` (its lessons' servers are then starting).
        CourseError when its checkout is another course, or when the code this process imported
        has changed since (it must be restarted); RuntimeError when its sandbox cannot work."""
        with self._lock:
            if run["id"] in self._admitted:
                return READY
        mine = course_fingerprint(self.root)
        if mine != run["fingerprint"]:
            raise CourseError(
                f"the Dask worker {self.address} has another version of the course ({self.root}, fingerprint "
                f"{mine[:12]}, the grader's is {run['fingerprint'][:12]}): run the same checkout or image everywhere"
            )
        if mine != self.fingerprint:  # the course changed under this worker
            changed = sorted(path for path, digest in own_code(self.root, self.own_code).items()
                             if digest != self.own_code[path])
            if changed:
                raise CourseError(
                    f"the Dask worker {self.address} still runs the grading code it imported when it started, "
                    f"and {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''} changed since in {self.root}: "
                    f"restart the worker")
            for warming in self._load(mine):  # once they have started (or failed), in the service's thread
                self._requests.put(("stop", warming))
        resolve_mode(run["mode"])  # bwrap must work here too
        for assignment in run["assignments"]:
            self._warm(run["mode"], assignment)
        with self._lock:
            self._admitted.add(run["id"])
        return READY

    def warm(self, mode: str, assignments: list[str]) -> None:
        """Start the fork servers of ``assignments`` now, in the service's thread."""
        resolve_mode(mode)
        for assignment in assignments:
            self._warm(mode, assignment)

    def _isolation(self, mode: str, assignment: str) -> Isolation:
        with self._lock:
            if mode not in self._isolations:
                found = lesson_isolations(mode, self.root, self.base, self.course, self.course,
                                          [self.incoming, self.scratch], f"{self.base.name}.{self.generation}")
                # Dask puts its scratch folders (every worker's) on sys.path, which the sandbox would show
                self._isolations[mode] = {a: _hide(iso, self.scratch) for a, iso in found.items()}
            return self._isolations[mode][assignment]

    def _warm(self, mode: str, assignment: str) -> _Warming:
        iso = self._isolation(mode, assignment)
        with self._lock:
            warming = self._warming.get(iso.key)
            if warming is None:
                warming = self._warming[iso.key] = _Warming(iso)
                self._requests.put(("start", warming))
            return warming

    def _serve(self) -> None:
        """Start the servers asked for, one isolation after the other, until ``close``. This
        thread lives as long as the servers it starts (bubblewrap's --die-with-parent)."""
        while (request := self._requests.get()) is not None:
            what, warming = request
            if what == "stop":
                warming.done.wait()
                shutdown_servers(warming.isolation.key)
                continue
            try:  # one server first: the lesson's first notebook need not wait for the others
                self.servers_started += start_servers(warming.isolation, 1)
            except BaseException as exc:  # noqa: BLE001 - told to every task that waits for them
                warming.error = f"the fork servers of the Dask worker {self.address} did not start: {type(exc).__name__}: {exc}"
                with self._lock:  # a later run tries again
                    self._warming.pop(warming.isolation.key, None)
            finally:
                warming.done.set()
            if not warming.error:
                try:  # one per worker thread
                    self.servers_started += start_servers(warming.isolation, self.threads)
                except Exception:  # noqa: BLE001 - a job that finds no idle server starts its own
                    pass
        with self._lock:
            keys = set(self._warming)
        for key in keys:
            shutdown_servers(key)
        shutil.rmtree(self.base, ignore_errors=True)

    def grade(self, run: dict, task: dict) -> dict:
        self.admit(run)
        warming = self._warm(run["mode"], task["assignment"])
        if not warming.done.wait(READY_TIMEOUT_S):
            raise RuntimeError(f"the fork servers of the Dask worker {self.address} did not start in {READY_TIMEOUT_S}s")
        if warming.error:
            raise RuntimeError(warming.error)
        lesson = self.lessons[task["assignment"]]
        started = time.time()
        with tempfile.TemporaryDirectory(dir=self.incoming) as folder:
            path = Path(folder) / Path(task["filename"]).name
            path.write_bytes(task["notebook"])
            result = grade_notebook(lesson, path, task["student"], Limits(**task["limits"]), warming.isolation)
        return {"result": dataclasses.asdict(result), "worker": self.address,
                "started_at": started, "finished_at": time.time()}

    def close(self, wait: float = 10) -> None:
        """Stop the fork servers and remove the worker's grading folder (the service's thread does it)."""
        self._requests.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(wait)


def own_code(root: Path, files: dict | None = None) -> dict[str, str]:
    """SHA-256 of each file of ``root`` that holds a module of the course this process has
    imported (``autograder``, ``helpers``), by its path in the checkout; of ``files`` instead
    when given (the same files, read again)."""
    if files is None:
        files = {}
        for name, module in list(sys.modules.items()):
            origin = getattr(module, "__file__", None)
            if name.split(".")[0] in ("autograder", "helpers") and origin:
                depth = name.count(".") + 1 + (Path(origin).stem == "__init__")  # a.b: a/b.py, a/b/__init__.py
                files[str(Path(*Path(origin).parts[-depth:]))] = ""
    found = {}
    for path in sorted(files):
        try:
            found[path] = hashlib.sha256((root / path).read_bytes()).hexdigest()
        except OSError:
            found[path] = "absent"
    return found


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


# --- in the worker process ---------------------------------------------------------------------

_services: dict[str, CourseService] = {}  # worker address -> its service (one worker per process, usually)
_services_lock = threading.Lock()


def service_for(worker) -> CourseService:
    """The ``CourseService`` of ``worker`` (a ``distributed.Worker``), made on first use."""
    with _services_lock:
        service = _services.get(worker.address)
        if service is None:
            service = _services[worker.address] = CourseService(
                worker.address, worker.local_directory, worker.state.nthreads)
        return service


@atexit.register
def _close_services() -> None:
    with _services_lock:
        services = list(_services.values())
        _services.clear()
    for service in services:
        service.close()


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
    with _services_lock:
        service = _services.pop(worker.address, None)
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
