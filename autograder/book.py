"""``transformer-course book``: the course as a static website, built from the solution notebooks.

Each lesson's *solution* notebook becomes one page, executed during the build so that every
figure and printed shape is on the page (or run beforehand by ``execute_page`` and handed to
``build_book(executed=...)``, as the tests do, so that each lesson runs once). Before the build
each notebook is transformed so the book never gives away more than a reader should see (hidden
tests removed, answers folded, no self-check: ``autograder.book_pages``).

The build uses Sphinx, myst-nb, sphinx-book-theme and sphinx-design and needs no network. It
runs in a temporary source folder (``autograder.book_source``: a generated ``conf.py`` and
``index.md`` next to the transformed notebooks, and the MathJax the book serves itself); only the
HTML lands in ``--out``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.book_pages import book_notebook, plot_titles, select_lessons
from autograder.book_source import CELL_TIMEOUT_S, MATHJAX_PACKAGE, mathjax_dir, write_source
from autograder.course import SOLUTIONS, CourseError, Lesson, find_course_root
from autograder.environment import tool_env

BOOK_DIR = "_book"
#: the modules the build imports; ``./setup.sh --book`` installs them (pyproject's ``book`` extra)
BOOK_MODULES = ("sphinx", "myst_nb", "sphinx_book_theme", "sphinx_design")
#: what to run when they are missing: a plain ``./setup.sh`` leaves them out
INSTALL_HINT = "./setup.sh --book (or pip install -e '.[book]' in the course's environment)"
#: a build that does not finish in this time is stopped
BUILD_TIMEOUT_S = 3600


def execute_page(root: Path, lesson: Lesson, *, quick: bool = False, cell_timeout: int = CELL_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> dict:
    """The lesson's page (:func:`book_notebook`), run top to bottom in the lesson's folder with the
    build's kernel settings (figures inline, sharp when zoomed), errors kept as outputs: what
    ``build_book(executed=...)`` takes, so that a caller who also needs the run (the tests) runs
    each lesson once. ``env``: variables the kernel gets on top of this process's."""
    import nbformat
    from nbclient import NotebookClient

    page = nbformat.from_dict(book_notebook(lesson.notebook, plot_titles(root)))
    with tempfile.TemporaryDirectory(prefix="transformer-course-kernel-") as tmp:
        client = NotebookClient(page, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(lesson.path.parent)}})
        client.execute(env={**_build_env(root, Path(tmp), quick=quick), **(env or {})})
    return page


# ---------------------------------------------------------------------------------------------
# the build
# ---------------------------------------------------------------------------------------------


#: the kernels' IPython settings: figures at twice the pixels (sharp when zoomed), same size on the page
KERNEL_CONFIG = 'c.InlineBackend.figure_formats = {"retina"}\n'


def _build_env(root: Path, ipython_dir: Path, jobs: int = 1, quick: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if quick:
        env["TRANSFORMER_COURSE_QUICK"] = "1"
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text(KERNEL_CONFIG, encoding="utf-8")
    env["IPYTHONDIR"] = str(ipython_dir)  # also keeps the builder's own IPython settings out
    if jobs > 1 and "OMP_NUM_THREADS" not in env:  # notebooks run side by side share the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    env["TRANSFORMER_COURSE_ROOT"] = str(root)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(root), env.get("PYTHONPATH", "")] if p)
    env = tool_env(env)  # the kernels' jupyter, this Python's
    # a non-inline backend (MPLBACKEND=Agg in CI, say) would keep every figure off the page
    env.pop("MPLBACKEND", None)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: lines of a successful build worth showing: each notebook's run time, warnings, errors
SUMMARY = re.compile(r"Executed notebook in|WARNING|ERROR|CRITICAL")
#: lines of the build's output that say nothing useful
NOISE = ("Kernel is running over TCP without encryption",)


def _clean_log(text: str, src: Path) -> str:
    """The build's messages without colour codes, noise, or the temporary folder's name."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    lines = [line for line in lines if line.strip() and not any(n in line for n in NOISE)]
    return "\n".join(lines).replace(str(src) + os.sep, "")


def _failure(returncode: int, messages: str) -> str:
    """What went wrong: a notebook's failing cell and its error when that is the cause."""
    failed = re.search(r"ExecutionError: (\S+\.ipynb)", messages)
    cell = re.search(r"(CellExecutionError|CellTimeoutError|DeadKernelError): (.*?)(The above exception was|\Z)",
                     messages, re.S)
    if failed and cell:
        hint = ""
        if cell.group(1) == "CellTimeoutError":
            hint = "\n(give cells longer with --cell-timeout, or run training lessons short with --quick)"
        return f"{failed.group(1)} failed while the book executed it: {cell.group(2).strip()[-6000:]}{hint}"
    return f"the book did not build (sphinx exit code {returncode}):\n{messages[-8000:]}"


def _stop(proc: subprocess.Popen) -> None:
    """End the build's process group (Sphinx and what it started), SIGTERM first."""
    if os.name == "nt":  # no process groups to signal
        proc.kill()
        proc.wait()
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _replace_output(built: Path, out: Path) -> None:
    """Move the fresh HTML into ``out``, replacing an earlier book but nothing else."""
    if out.exists():
        if not out.is_dir():
            raise CourseError(f"{out} exists and is not a folder")
        if any(out.iterdir()) and not (out / ".buildinfo").exists():
            raise CourseError(f"{out} is not empty and does not hold an earlier book; choose another --out")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(built), str(out))


#: files of the built book that hold text a page shows (its figures, fonts and theme are left alone)
TEXT_SUFFIXES = (".html", ".js", ".txt", ".json")


def builder_paths() -> list[tuple[str, str]]:
    """What a page must not show of the machine that built it, and what it shows instead: the
    course's cache folder (where a lesson looks for its checkpoint) and the home folder, as ``~``."""
    from helpers.data import default_cache_dir

    home = str(Path.home())
    pairs = []
    cache = default_cache_dir()
    for form in {str(cache), str(cache.resolve())}:
        if not (home != os.sep and form.startswith(home + os.sep)):  # a cache outside the home folder
            pairs.append((form, "$XDG_CACHE_HOME/transformer-course"))
    if home not in (os.sep, ""):
        pairs += [(form, "~") for form in {home, str(Path(home).resolve())}]
    return sorted(pairs, key=lambda pair: -len(pair[0]))  # the longest first: the cache inside home before home


def hide_builder_paths(html: Path, pairs: list[tuple[str, str]] | None = None) -> int:
    """Write the builder's own folders (:func:`builder_paths`) as ``~`` in every text file of the
    built book; returns how many files changed. A lesson that prints where it looked for a file
    shows ``~/.cache/transformer-course/...``, not ``/home/<builder>/.cache/...``."""
    pairs = builder_paths() if pairs is None else pairs
    patterns = [(re.compile(re.escape(path) + r"(?![\w.-])"), shown) for path, shown in pairs if path]
    changed = 0
    for path in html.rglob("*"):
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or "_static" in path.relative_to(html).parts:
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = text
        for pattern, shown in patterns:
            new = pattern.sub(shown, new)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
            changed += 1
    return changed


def build_book(root: Path, out: Path, *, execute: bool = True, only: list[str] | None = None,
               jobs: int = 1, quick: bool = False, cell_timeout: int = CELL_TIMEOUT_S, log=None,
               executed: dict[str, dict] | None = None) -> Path:
    """Build the book of ``root``'s lessons into ``out`` and return the path of its index.html.

    ``execute`` runs every notebook (the slow part); ``only`` picks lessons by assignment name
    or number; ``jobs`` is Sphinx's ``-j`` (notebooks executed at once); ``quick`` runs lessons
    that train in their quick setting (``TRANSFORMER_COURSE_QUICK=1``); ``cell_timeout`` is the
    seconds one cell may run. ``executed``: every page already run by :func:`execute_page`, by
    assignment name; the build then runs nothing. ``out`` is replaced when it holds an earlier
    book; any other non-empty folder is refused. The index page says when the lessons ran in their
    quick setting, and no page shows the builder's home or cache folder (:func:`hide_builder_paths`).
    """
    root, out = Path(root).resolve(), Path(out).resolve()
    missing = [name for name in BOOK_MODULES if importlib.util.find_spec(name) is None]
    try:
        mathjax_dir()
    except CourseError:
        missing.append(MATHJAX_PACKAGE)
    if missing:
        raise CourseError(f"the book's tools are not installed ({', '.join(missing)}): a plain ./setup.sh leaves "
                          f"them out; run {INSTALL_HINT}")
    if out == root or out in root.parents or out == root / SOLUTIONS or (root / SOLUTIONS) in out.parents:
        raise CourseError(f"--out {out} would overwrite the course; choose a folder of its own")
    course = select_lessons(root, only)
    with tempfile.TemporaryDirectory(prefix="transformer-course-book-") as tmp:
        src, html, doctrees = Path(tmp) / "src", Path(tmp) / "html", Path(tmp) / "doctrees"
        src.mkdir()
        write_source(root, src, course, execute=execute, cell_timeout=cell_timeout, executed=executed, quick=quick)
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-T", "-j", str(max(1, jobs)),
               "-d", str(doctrees), str(src), str(html)]
        proc = subprocess.Popen(cmd, cwd=src, env=_build_env(root, Path(tmp) / "ipython", jobs, quick), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                encoding="utf-8", errors="replace", start_new_session=os.name != "nt")
        try:
            output, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except BaseException as exc:  # a timeout or Ctrl+C: stop the build and its kernels
            _stop(proc)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise CourseError(f"the book's build ran past {BUILD_TIMEOUT_S} s and was stopped") from None
            raise
        messages = _clean_log(output, src)
        if proc.returncode != 0 or not (html / "index.html").exists():
            raise CourseError(_failure(proc.returncode, messages))
        summary = [line.replace(" [mystnb]", "") for line in messages.splitlines() if SUMMARY.search(line)]
        if log is not None and summary:
            print("\n".join(summary), file=log)
        hide_builder_paths(html)
        _replace_output(html, out)
    return out / "index.html"


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------


def add_parser(subparsers) -> None:
    """Register ``transformer-course book`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "book",
        help="build the course website: every lesson run, solutions folded, hidden tests removed",
        description="Build the course as static HTML (Sphinx + myst-nb, offline) from the solution "
        "notebooks: each lesson executed, its answer cells folded, its hidden tests and "
        "self-check removed.",
    )
    p.add_argument("--out", type=Path, default=None, help=f"where the HTML goes (default: {BOOK_DIR}/ in the course)")
    p.add_argument("--lessons", nargs="+", metavar="LESSON", default=None,
                   help="only these lessons, by assignment (03-self-attention) or number (3)")
    p.add_argument("--no-execute", action="store_true", help="render without running the notebooks (fast; no outputs, no figures)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="notebooks built at once (default 1)")
    p.add_argument("--quick", action="store_true",
                   help="run lessons that train in their quick setting (TRANSFORMER_COURSE_QUICK=1)")
    p.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S,
                   help=f"seconds one cell may run (default {CELL_TIMEOUT_S})")
    p.set_defaults(func=cmd_book)


def cmd_book(args) -> int:
    root = find_course_root()
    out = args.out if args.out is not None else root / BOOK_DIR
    start = time.monotonic()
    what = "rendering" if args.no_execute else "executing and rendering"
    print(f"{what} the book into {out} ...", file=sys.stderr)
    index = build_book(root, out, execute=not args.no_execute, only=args.lessons, jobs=args.jobs,
                       quick=args.quick, cell_timeout=args.cell_timeout, log=sys.stderr)
    print(f"built in {time.monotonic() - start:.0f} s: {index}")
    return 0


__all__ = ["add_parser", "build_book", "builder_paths", "cmd_book", "execute_page", "hide_builder_paths"]
