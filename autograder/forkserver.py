"""The grading fork server: ``python -m autograder.forkserver`` (started by ``autograder.runner``).

It pays for the heavy imports once, then forks a child per job read from stdin. The child
confines itself and runs the job (``autograder.child.main``); it never returns here. The server
enforces the wall-clock limit: it kills the child's whole process group, then every process that
was orphaned under it (it is a "child subreaper", so escaped grandchildren come back to it).
"""

import ctypes
import json
import os
import select
import signal
import sys
import time

from autograder import child
from autograder.runner import Limits

PR_SET_CHILD_SUBREAPER = 36


def _send(out, message: dict) -> None:
    out.write((json.dumps(message) + "\n").encode())
    out.flush()


def _become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init as usual
        pass


def _wait(pid: int, timeout: float):
    """The child's wait status, or None if it is still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(0.005, left))
    finally:
        if fd is not None:
            os.close(fd)


def _kill_leftovers(pid: int) -> int:
    """Kill the job's process group and every process still parented to this server."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = 0
    me = str(os.getpid())
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = fh.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if ppid == me:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    while True:  # reap whatever is left
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not done:
            if killed:
                time.sleep(0.01)
                killed = 0
                continue
            break
    return killed


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent; we end with stdin
    _become_subreaper()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _send(stdout, {"ready": True})
    for line in stdin:
        request = json.loads(line)
        limits = Limits(**request["limits"])
        pid = os.fork()
        if pid == 0:
            try:
                child.main(request["payload"], request["workdir"], limits)
            finally:
                os._exit(70)
        status = _wait(pid, limits.wall_s)
        timed_out = status is None
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = _wait(pid, 30)
        _kill_leftovers(pid)
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        _send(stdout, {"exit": code, "timed_out": timed_out})


if __name__ == "__main__":
    serve()
