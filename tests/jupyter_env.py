"""What the browser and round-trip tests share: a person's own HOME and Jupyter folders as an
environment, a Jupyter server started on loopback (and always stopped), a copy of the course."""

import fnmatch
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autograder.course import RELEASE

ROOT = Path(__file__).resolve().parents[1]
SERVER_START_S = 120
PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")
#: what a lab's server does not inherit: it is reached on loopback, never through a proxy, and the
#: suite's MPLBACKEND=Agg would keep every figure out of the notebook
LAB_DROP = (*PROXIES, "MPLBACKEND")
#: what nbgrader's tools copy into a temporary course
COURSE = ("solutions", RELEASE, "helpers", "autograder", "nbgrader_config.py")


def this_python_first() -> str:
    """PATH with this Python's bin folder first (its jupyter, its nbgrader)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def person_env(home: Path, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """This process's environment without the variables that match a pattern of ``drop``
    (fnmatch, case-sensitive: "JUPYTER*"), with ``home`` as HOME and Jupyter's and IPython's
    folders inside it (no restored layout, no user settings, nobody else's nbgrader cache), this
    Python first on PATH, and ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not any(fnmatch.fnmatchcase(k, p) for p in drop)}
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / ".local" / "share" / "jupyter"),
        JUPYTER_RUNTIME_DIR=str(home / ".local" / "share" / "jupyter" / "runtime"),
        IPYTHONDIR=str(home / ".ipython"),
        PATH=this_python_first(),
        **extra,
    )
    return env


def copy_course(dest: Path, names: tuple[str, ...] = COURSE) -> None:
    """Copy the checkout's ``names`` (folders without __pycache__ or .ipynb_checkpoints, files)
    into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copyfile(source, dest / name)


def free_port() -> int:
    """A port of 127.0.0.1 free at the time of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(base: str, token: str, path: str):
    """GET a Jupyter REST endpoint on loopback (never through a proxy); None when it does not answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"token {token}"})
    try:
        with opener.open(request, timeout=3) as reply:
            return json.loads(reply.read() or b"null") if reply.status == 200 else None
    except (OSError, ValueError):
        return None


def server_answers(port: int, token: str) -> bool:
    """Whether a Jupyter server on ``port`` answers /api/status to ``token``."""
    return api(f"http://127.0.0.1:{port}", token, "/api/status") is not None


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (JupyterLab then shuts its kernels down), then SIGKILL to its process group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the server's own group: leftover kernels
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


@contextmanager
def jupyter_server(command: Callable[[int], list[str]], *, cwd: Path, env: dict[str, str], token: str,
                   log: Path, failure: str) -> Iterator[int]:
    """Run ``command(port)`` on a free port, in a session of its own, its output appended to
    ``log``; the port once the server answers /api/status to ``token``, and the server stopped
    afterwards. Three tries (another process may take the free port first), then the test fails
    with ``failure`` and the end of the log."""
    for _attempt in range(3):
        port = free_port()
        with open(log, "a") as out:
            proc = subprocess.Popen(command(port), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + SERVER_START_S
            while proc.poll() is None and time.monotonic() < deadline and not server_answers(port, token):
                time.sleep(0.5)
            if proc.poll() is None and server_answers(port, token):
                yield port
                return
        finally:
            stop(proc)
    pytest.fail(f"{failure}; its log:\n{log.read_text()[-4000:]}")
