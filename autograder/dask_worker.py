"""The course as one Dask worker process holds it (``CourseService``), from its start to its end:
its checkout and fingerprint, the fork servers of every lesson it has graded (started in the
service's own thread), the check that a run's course is its own, and one notebook graded per task.

Moved here from ``dask_executor``, which keeps the client (``DaskExecutor``) and the hooks Dask
calls in the worker (``dask_setup``, ``dask_teardown``, the functions a run sends it); the
module docstring there tells how the work is split between the machines.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.course import CourseError, course_fingerprint, find_course_root, lessons
from autograder.grader import grade_notebook
from autograder.jobs import lesson_isolations
from autograder.protocol import Limits
from autograder.sandbox import Isolation, resolve_mode
from autograder.server_pool import shutdown_servers, start_servers

READY_TIMEOUT_S = 600  # a lesson's fork servers must be up by then (importing torch on a busy machine)
WARM_ENV = "TRANSFORMER_COURSE_WARM"  # lessons whose servers a preloaded worker starts at once, or "all"
READY = "ready"  # what ``dask_executor._admit`` answers when the worker may grade; anything else is why it refuses


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
                found = lesson_isolations(mode, self.root, self.course, self.course,
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
        """Start the servers asked for, one isolation after the other, until ``close``."""
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


def service_at(address: str) -> CourseService | None:
    """The ``CourseService`` of the worker at ``address``, if it has one yet (none is made)."""
    with _services_lock:
        return _services.get(address)


def drop_service(address: str) -> CourseService | None:
    """Forget the service of the worker at ``address`` (it is closing) and return it, if it had one."""
    with _services_lock:
        return _services.pop(address, None)
