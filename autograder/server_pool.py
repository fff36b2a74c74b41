"""The grader's side of the fork servers (``autograder.forkserver``): start one, send it a job and
read its answer, keep idle ones for later jobs, stop them.

A server costs seconds of CPU to start (it imports torch and every check), more than most
notebooks take to grade. So idle servers are kept for the process's later jobs, a later run's
included (the limits' measurement, then the grading; a test suite's many small classes): a job
takes an idle server started with the same sandbox and environment. Every server is started by one
thread that lives as long as the process (``_Starter``): a sandboxed server ends with the thread
that started it (bubblewrap's --die-with-parent), which is thus never a grading thread. Idle
servers beyond what the machine's memory allows (``keep_limit``), or idle for ``IDLE_S``, are stopped.

``runner`` keeps what a job is (its steps, limits and timing, the reruns after a stuck step) and
reads its results.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict

from autograder.protocol import Limits
from autograder.sandbox import JOB_BASE, Isolation, env_for_server, own_folder

#: seconds an idle server is kept for a later job before it is stopped
IDLE_S = 120.0
#: what one idle server holds (torch and the checks imported), to size ``keep_limit``
SERVER_MB = 400
#: idle servers kept at most, whatever the memory
MAX_KEPT = 16


class ServerLost(RuntimeError):
    """The fork server died or answered garbage in the middle of a job (a job that reached it)."""


class ForkServer:
    """A process that imports torch and the checks once, then forks one child per job.

    Protocol on its stdin/stdout, one JSON line each: the parent sends a job; the server answers
    ``{"exit": code, "timed_out": bool}`` once the child has ended or been killed for time. The
    server does the killing itself: inside a sandbox its process ids are not the grader's.
    """

    def __init__(self, isolation: Isolation, env: dict[str, str] | None = None):
        self.isolation = isolation
        self.env = env_for_server() if env is None else env
        self.job_base = tempfile.mkdtemp(prefix="server-", dir=own_folder())
        self.idle_since = time.monotonic()
        prefix = [part.replace(JOB_BASE, self.job_base) for part in isolation.prefix]
        command = [*prefix, sys.executable, "-m", "autograder.forkserver"]
        self.process = _starter.popen(command, self.env)
        ready = self._read(timeout=180)
        if ready != {"ready": True}:
            self.close()
            raise RuntimeError(f"the grading fork server did not start ({' '.join(command[:3])} ...)")

    def _read(self, timeout: float) -> dict | None:
        out = self.process.stdout
        ready, _, _ = select.select([out], [], [], max(0.0, timeout))
        if not ready:
            return None
        line = out.readline(64 * 1024)
        if not line:
            raise ServerLost("the grading fork server stopped")
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            raise ServerLost("the grading fork server said something that is not its answer") from None
        if not isinstance(answer, dict):
            raise ServerLost("the grading fork server said something that is not its answer")
        return answer

    def run(self, payload: list, workdir: str, limits: Limits) -> tuple[int | None, bool, int | None, bool]:
        """Run one job; returns (exit code or None if killed for time, timed_out, the index of
        the step that outlived its alarm and was killed, or None, and whether that step went on
        after its alarm fired rather than being stuck in one call)."""
        request = {"payload": payload, "workdir": workdir, "limits": asdict(limits)}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        answer = self._read(timeout=limits.wall_s + 60)
        if answer is None:  # the server itself is stuck: end it and everything under it
            self.close(force=True)
            return None, True, None, False
        stuck = answer.get("stuck")
        exit_code = answer.get("exit")
        if not isinstance(exit_code, (int, type(None))) or not isinstance(stuck, (int, type(None))):
            raise ServerLost("the grading fork server's answer is malformed")
        return (None if answer.get("timed_out") else exit_code), bool(answer.get("timed_out")), stuck, bool(answer.get("swallowed"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, force: bool = False) -> None:
        self._stop(force)
        shutil.rmtree(self.job_base, ignore_errors=True)

    def _stop(self, force: bool) -> None:
        if self.process.poll() is None and not force:
            self.process.stdin.close()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                force = True
        if force and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait(10)


class _Starter:
    """The one thread that starts every fork server of this process, alive until the process
    ends (a sandboxed server dies with the thread that started it), and stops idle servers that
    have waited ``IDLE_S``."""

    def __init__(self):
        self._requests: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="fork-server-starter", daemon=True)
                self._thread.start()
        started: Future = Future()
        self._requests.put((command, env, started))
        return started.result()

    def _serve(self) -> None:
        while True:
            try:
                command, env, started = self._requests.get(timeout=IDLE_S / 4)
            except queue.Empty:
                stop_idle(IDLE_S)
                continue
            try:
                started.set_result(subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True,
                ))
            except BaseException as exc:  # noqa: BLE001 - raised in the thread that asked
                started.set_exception(exc)


_starter = _Starter()
_idle: dict[tuple, list[ForkServer]] = {}  # by what makes servers interchangeable: ``_kind``
_all: list[ForkServer] = []
_lock = threading.Lock()


def _kind(isolation: Isolation, env: dict[str, str]) -> tuple:
    """What a server is started with, and its owner's key: two servers of one kind can take each
    other's jobs (a tagged key keeps an owner's servers its own, ``jobs.lesson_isolations``)."""
    return isolation.key, isolation.prefix, tuple(sorted(env.items()))


def acquire(isolation: Isolation) -> ForkServer:
    """An idle server started with ``isolation`` and today's environment, or a new one."""
    env = env_for_server()
    with _lock:
        pool = _idle.setdefault(_kind(isolation, env), [])
        while pool:
            server = pool.pop()
            if server.alive():
                return server
    server = ForkServer(isolation, env)
    with _lock:
        _all.append(server)
    return server


def release(server: ForkServer) -> None:
    """``server`` is idle: kept for a later job."""
    with _lock:
        if server.alive():
            server.idle_since = time.monotonic()
            _idle.setdefault(_kind(server.isolation, server.env), []).append(server)


def run_ended() -> None:
    """A run has ended: its idle servers stay for the process's later runs, as many as
    ``keep_limit`` allows (those that waited longest are stopped first)."""
    _trim(keep_limit())


def idle_count(isolation: Isolation) -> int:
    """How many servers of ``isolation`` (with today's environment) are idle now."""
    with _lock:
        return sum(1 for s in _idle.get(_kind(isolation, env_for_server()), []) if s.alive())


def keep_limit() -> int:
    """How many idle servers to keep: half the memory available now, at ``SERVER_MB`` each, at
    most ``MAX_KEPT``."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            available_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 2
    return max(1, min(MAX_KEPT, available_kb // 1024 // 2 // SERVER_MB))


def _trim(keep: int) -> None:
    """Stop the idle servers that waited longest until at most ``keep`` are idle."""
    _stop_idle_ones(lambda idle: idle[:max(0, len(idle) - keep)])


def stop_idle(older_than_s: float) -> None:
    """Stop the servers idle for ``older_than_s`` seconds or more."""
    now = time.monotonic()
    _stop_idle_ones(lambda idle: [s for s in idle if now - s.idle_since >= older_than_s])


def _stop_idle_ones(pick) -> None:
    """Stop the idle servers ``pick`` chooses from all of them, the longest idle first."""
    with _lock:
        chosen = pick(sorted((s for pool in _idle.values() for s in pool), key=lambda s: s.idle_since))
        _forget(chosen)
    for server in chosen:
        server.close()


def _forget(servers: list[ForkServer]) -> None:  # with _lock held
    for server in servers:
        if server in _all:
            _all.remove(server)
        for pool in _idle.values():
            if server in pool:
                pool.remove(server)


@atexit.register
def shutdown() -> None:
    """Stop every fork server (called at exit; safe to call twice)."""
    with _lock:
        servers = list(_all)
        _all.clear()
        _idle.clear()
    for server in servers:
        server.close()


def shutdown_servers(key: str) -> None:
    """Stop the fork servers of the isolations keyed ``key``, idle or not (their job folders go
    with them)."""
    with _lock:
        servers = [s for s in _all if s.isolation.key == key]
        _forget(servers)
    for server in servers:
        server.close()


def start_servers(isolation: Isolation, count: int) -> int:
    """Start fork servers of ``isolation`` until ``count`` of them are alive, and keep them for
    later jobs; returns how many it started."""
    with _lock:
        alive = sum(1 for s in _all if s.isolation.key == isolation.key and s.alive())
    started = 0
    for _ in range(count - alive):
        server = ForkServer(isolation)
        with _lock:
            _all.append(server)
        release(server)
        started += 1
    return started
