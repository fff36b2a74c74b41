"""The grading fork server: ``python -m autograder.forkserver`` (started by ``autograder.server_pool``).

It pays for the heavy imports once, then forks a child per job read from stdin. The child
confines itself and runs the job (``autograder.child.main``); it never returns here. The server
enforces the wall-clock limit: it kills the child's whole process group, then every process that
was orphaned under it (it is a "child subreaper", so escaped grandchildren come back to it).

It also watches which step the child is running (``protocol.PROGRESS``, rewritten before each step):
a step still running ``SWALLOWED_S`` after its alarm fired (the child marks the progress file
when it does) swallowed that alarm (``except BaseException`` around a loop does); a step still
running ``STUCK_GRACE_S`` after the alarm was due, without it firing, is stuck in one long
operation that Python cannot interrupt. Either way the server kills the job then and names the
step, instead of letting it hold a worker until the notebook's wall-clock limit. The runner
grades the notebook again without that step.
"""

import ctypes
import json
import os
import select
import signal
import sys
import time

from autograder import child, protocol
from autograder.protocol import Limits

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
STUCK_GRACE_S = 5.0  # after a step's alarm was due and has not fired: a long uninterruptible call
SWALLOWED_S = 1.0  # after a step's alarm fired: time for it to unwind before it counts as stuck
POLL_S = 0.25


def _send(out, message: dict) -> None:
    out.write((json.dumps(message) + "\n").encode())
    out.flush()


def _become_subreaper() -> None:
    """Orphans of a job come back to this server (to be killed), and its own /proc entries (its
    pipes to the grader, its memory) cannot be opened by a job: it is not dumpable, and the job
    drops every capability (``child._drop_privileges``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
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


def _running_step(path: str) -> tuple[int | None, bool]:
    """The index of the step the child runs now, and whether that step's alarm has fired."""
    try:
        with open(path, "rb") as fh:
            return protocol.read_progress(fh.read(64))
    except OSError:
        return None, False


def _watch(pid: int, limits: Limits, progress: str, step_ids: list[str]):
    """Wait for the child; returns (wait status or None, index of a stuck step or None, whether
    that step swallowed its alarm)."""
    deadline = time.monotonic() + limits.wall_s
    step, since, fired_at = None, time.monotonic(), None
    while True:
        status = _wait(pid, max(0.0, min(POLL_S, deadline - time.monotonic())))
        if status is not None:
            return status, None, False
        now = time.monotonic()
        if now >= deadline:
            return None, None, False
        current, fired = _running_step(progress)
        if current != step:
            step, since, fired_at = current, now, None
        if step is None:
            continue
        if fired and fired_at is None:
            fired_at = now
        if fired_at is not None and now - fired_at > SWALLOWED_S:
            return None, step, True
        own = limits.cell_limit(step_ids[step]) if 0 <= step < len(step_ids) else limits.cell_s
        if now - since > own + STUCK_GRACE_S:
            return None, step, fired_at is not None


def _orphans() -> list[int]:
    """The processes parented to this server (a subreaper: every orphan of a job comes back here)."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = fh.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if ppid == me:
            found.append(int(entry))
    return found


def _kill_leftovers(pid: int) -> int:
    """Kill the job's process group, then every process parented to this server, again and again:
    killing one orphans its children, which come back here, until none is left (a chain of
    processes that left the group, however deep, ends with the job)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed, deadline = 0, time.monotonic() + 10
    while time.monotonic() < deadline:
        left = _orphans()
        for orphan in left:
            try:
                os.kill(orphan, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        reaped = 0
        while True:  # reap what died, so that the next scan sees only the living
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not done:
                break
            reaped += 1
        if not left and not reaped:
            break
        time.sleep(0.01)
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
            del line  # the request's text: the job reads its steps from the payload, which forgets the course's
            try:
                child.main(request["payload"], request["workdir"], limits)
            finally:
                os._exit(70)
        step_ids = [str(step[1]) for step in request["payload"]]
        status, stuck, swallowed = _watch(pid, limits, os.path.join(request["workdir"], protocol.PROGRESS), step_ids)
        timed_out = status is None
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = _wait(pid, 30)
        _kill_leftovers(pid)
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        _send(stdout, {"exit": code, "timed_out": timed_out, "stuck": stuck, "swallowed": swallowed})


if __name__ == "__main__":
    serve()
