"""The grader's side of the fork servers (``autograder.forkserver``): start one, send it a job and
read its answer, keep idle ones per isolation for later jobs, stop them.

Moved here from ``runner``, which keeps what a job is (its steps, limits and timing, the reruns
after a stuck step) and reads its results.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict

from autograder.protocol import Limits
from autograder.sandbox import JOB_BASE, Isolation, env_for_server


class ServerLost(RuntimeError):
    """The fork server died or answered garbage in the middle of a job (a job that reached it)."""


class ForkServer:
    """A process that imports torch and the checks once, then forks one child per job.

    Protocol on its stdin/stdout, one JSON line each: the parent sends a job; the server answers
    ``{"exit": code, "timed_out": bool}`` once the child has ended or been killed for time. The
    server does the killing itself: inside a sandbox its process ids are not the grader's.
    """

    def __init__(self, isolation: Isolation):
        self.isolation = isolation
        self.job_base = tempfile.mkdtemp(prefix="server-", dir=isolation.base)
        prefix = [part.replace(JOB_BASE, self.job_base) for part in isolation.prefix]
        command = [*prefix, sys.executable, "-m", "autograder.forkserver"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env_for_server(), start_new_session=True,
        )
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


_idle: dict[str, list[ForkServer]] = {}
_all: list[ForkServer] = []
_lock = threading.Lock()


def acquire(isolation: Isolation) -> ForkServer:
    with _lock:
        pool = _idle.setdefault(isolation.key, [])
        while pool:
            server = pool.pop()
            if server.alive():
                return server
    server = ForkServer(isolation)
    with _lock:
        _all.append(server)
    return server


def release(server: ForkServer) -> None:
    with _lock:
        if server.alive():
            _idle.setdefault(server.isolation.key, []).append(server)


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
    """Stop the fork servers of one isolation (their job folders go with them)."""
    with _lock:
        servers = [s for s in _all if s.isolation.key == key]
        for server in servers:
            _all.remove(server)
        _idle.pop(key, None)
    for server in servers:
        server.close()


def start_servers(isolation: Isolation, count: int) -> int:
    """Start fork servers of ``isolation`` in this thread until ``count`` of them are alive, and keep
    them for later jobs; returns how many it started. A sandboxed server ends with the thread that
    started it (bubblewrap's --die-with-parent): call this from a thread that outlives the servers."""
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
