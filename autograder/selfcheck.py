"""``transformer-course check NOTEBOOK``: a student's own check, with the grader's diagnoses.

It runs the notebook the way grading does (a separate process, the course's own test cells),
but only the visible tests: hidden tests are neither run nor shown. Unlike ``nbgrader validate``,
it exits non-zero when anything fails, so it can sit in a script.

In a notebook, ``check_notebook("NN-name.ipynb")`` runs that same check in a process of its own
(``python -m autograder.selfcheck``) and prints its report into the cell: the grading machinery
(a headless matplotlib backend, its environment, its fork servers) never touches the student's
kernel, so the plots drawn after the check still show.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from autograder.course import CourseError, find_course_root, lessons, nbgrader_meta
from autograder.grader import grade_notebook
from autograder.protocol import Limits
from autograder.submission import InvalidNotebook, read_notebook

MARKS = {"passed": "PASS", "failed": "FAIL"}


def match_lesson(path: Path, notebook: dict, root: Path):
    """The lesson a notebook belongs to: by its answer cells' ids, else by its file name."""
    ids = {nbgrader_meta(c).get("grade_id") for c in notebook["cells"]} - {None}
    course = lessons(root)
    best = max(course, key=lambda lesson: len(ids & set(lesson.exercises)), default=None)
    if best is not None and ids & set(best.exercises):
        return best
    for lesson in course:
        if lesson.filename == path.name:
            return lesson
    raise CourseError(f"{path} does not look like a lesson of this course (no exercise cells found)")


#: seconds the one-liner waits for the check's process before it stops it
CHECK_TIMEOUT_S = 1800


def _being_graded() -> bool:
    """True inside a grading child or ``nbgrader validate``/``autograde``: they run the tests
    themselves. (Looked up without importing the child module: importing it switches matplotlib
    to a headless backend.)"""
    child = sys.modules.get("autograder.child")
    return bool(getattr(child, "IN_SANDBOX", False)) or bool(os.environ.get("NBGRADER_EXECUTION"))


def check_notebook(path: str | Path) -> None:
    """The one-liner for the last cell of a lesson: check the *saved* notebook and print a report.

    The check runs in a separate process (the kernel keeps its matplotlib backend, environment
    and modules as they were); its report is printed here, as ``transformer-course check`` would
    print it.
    """
    if _being_graded():
        print("(self-check skipped: the grader runs the tests itself)")
        return None
    package_root = str(Path(__file__).resolve().parents[1])  # this course's autograder, not another
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [package_root, env.get("PYTHONPATH", "")] if p)
    env["PYTHONIOENCODING"] = "utf-8"
    env["MPLBACKEND"] = "Agg"  # the kernel's inline backend means nothing outside the kernel
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder.selfcheck", str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        start_new_session=os.name != "nt",
    )
    try:
        out, err = proc.communicate(timeout=CHECK_TIMEOUT_S)
    except BaseException as exc:  # Ctrl+C (interrupt the kernel) or the timeout: stop the check
        _stop(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            print(f"cannot check: the check ran past {CHECK_TIMEOUT_S} s and was stopped")
            return None
        raise
    sys.stdout.write(out.decode("utf-8", errors="replace"))
    sys.stdout.flush()
    if err.strip():
        sys.stderr.write(err.decode("utf-8", errors="replace"))
        sys.stderr.flush()
    return None


def _stop(proc: subprocess.Popen) -> None:
    """Ask the check's process to stop (it then ends its fork servers), then end what is left of
    its session."""
    if os.name == "nt":  # no process groups to signal
        proc.kill()
        proc.wait()
        return
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _check_here(path: Path) -> int:
    """What ``check_notebook`` runs in its own process: the report, or why there is none."""
    try:
        return report(path)
    except CourseError as exc:
        print(f"cannot check: {exc}")
        return 2


def report(path: Path, *, cell_s: float = 60.0, out=None) -> int:
    """Print a per-exercise report for ``path``; returns 0 when every visible test passes."""
    out = out or sys.stdout
    if not path.exists():
        raise CourseError(f"{path}: no such file")
    if path.is_dir() or path.suffix != ".ipynb":
        raise CourseError(f"{path}: not a notebook (expected a .ipynb file)")
    try:
        notebook = read_notebook(path)
    except InvalidNotebook as exc:
        raise CourseError(f"{path}: {exc}") from None
    root = find_course_root()
    full = match_lesson(path, notebook, root)
    lesson = full.visible_only()
    result = grade_notebook(lesson, path, "you", Limits(wall_s=max(600.0, 4 * cell_s), cell_s=cell_s))
    print(f"{full.assignment} · {path.name}", file=out)
    hidden_points = full.max_score - lesson.max_score
    failures = 0
    for exercise in result.exercises:
        mark = MARKS.get(exercise.status, exercise.status.upper())
        print(f"\n[{mark}] {exercise.exercise}: {exercise.score:g}/{exercise.max_score:g} visible points", file=out)
        for note in exercise.notes:
            print(f"    {note}", file=out)
        for test in exercise.tests:
            if test.status != "passed":
                print(f"    {test.grade_id}: {test.message}", file=out)
        failures += exercise.status != "passed"
    print(
        f"\nvisible tests: {result.score:g}/{result.max_score:g} points. Hidden tests "
        f"({hidden_points:g} more points) run when your work is graded.",
        file=out,
    )
    return 1 if failures else 0


if __name__ == "__main__":  # ``check_notebook``'s process
    if len(sys.argv) != 2:
        sys.exit("usage: python -m autograder.selfcheck NOTEBOOK")
    sys.exit(_check_here(Path(sys.argv[1])))
