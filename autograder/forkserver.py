"""The grading fork server: ``python -m autograder.forkserver`` (started by ``autograder.runner``).

It pays for the heavy imports once, then forks a child per job read from stdin. The child
confines itself and runs the job (``autograder.child.main``); it never returns here.
"""

import json
import os
import signal
import sys

from autograder import child
from autograder.runner import Limits


def _send(out, message: dict) -> None:
    out.write((json.dumps(message) + "\n").encode())
    out.flush()


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent; we end with stdin
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _send(stdout, {"ready": True})
    for line in stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                child.main(request["payload"], request["workdir"], Limits(**request["limits"]))
            finally:
                os._exit(70)
        _send(stdout, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(stdout, {"exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
