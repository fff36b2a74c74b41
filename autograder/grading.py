"""Grade submitted notebooks: find the answers, run them, judge the data, give every exercise a status.

Statuses, per student × assignment × exercise (never a silent zero):

========  ==========================================================================
passed    every test of the exercise passed
failed    a test found a mistake (its message names it), or the answer is still blank
error     the student's code raised an exception (the message shows it)
timeout   a cell ran past its time limit, or the notebook past its wall-clock limit
crashed   the process died (segfault, ``os._exit``, memory limit) before the test ran
missing   the notebook was not submitted, or the exercise's answer cell is gone
invalid   the file is not a readable Jupyter notebook (not JSON, wrong nbformat...)
tampered  the notebook replaced what the tests rely on (comparison functions, the checks,
          builtins) or forged test results; no points, and the instructor should look
========  ==========================================================================

Tests never come from the submission: the course's own test cells (visible and hidden) are run
in place of the student's copies, so a deleted or edited test cell changes nothing.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from autograder import lesson_checks  # noqa: F401 - fills the registry of checks
from autograder.course import Lesson, Test, cell_source, nbgrader_meta
from autograder.names import missing_name_hint
from autograder.protocol import DONE
from autograder.runner import JobResult, Limits, Step, run_steps
from autograder.sandbox import Isolation
from helpers.checks.core import REGISTRY, CheckFailed, decode, salted

STUCK_MESSAGE = (
    "{what} ran past its time limit{limit} and went on after being told to stop, so it was killed and the "
    "notebook was graded again without it (an infinite loop inside `except:` or `except BaseException:`?)"
)
UNINTERRUPTIBLE_MESSAGE = (
    "{what} ran past its time limit{limit} inside one long operation that could not be interrupted (a "
    "huge tensor or matrix product?), so it was killed and the notebook was graded again without it"
)


def _limit(line: dict) -> str:
    """`` of N s`` for a step line that says its limit (decoded defensively: the child wrote it)."""
    value = line.get("limit_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6:
        return f" of {value:g} s"
    return ""


def _stuck_message(line: dict, what: str) -> str:
    template = STUCK_MESSAGE if line.get("swallowed", True) else UNINTERRUPTIBLE_MESSAGE
    return template.format(what=what, limit=_limit(line))
STATUSES = ("passed", "failed", "error", "timeout", "crashed", "missing", "invalid", "tampered")
# when tests of one exercise disagree, the exercise shows the most serious status
SEVERITY = {s: i for i, s in enumerate(STATUSES)}
MAX_NOTEBOOK_MB = Limits.notebook_mb  # the default of ``--max-notebook-mb``
#: the option that raises the cap, named in the message of a notebook over it
CAP_OPTION = "--max-notebook-mb"


class InvalidNotebook(Exception):
    """The submitted file cannot be read as a notebook; the message says why, in one line."""


@dataclass
class TestResult:
    grade_id: str
    hidden: bool
    status: str
    points: float
    max_points: float
    message: str


@dataclass
class ExerciseResult:
    exercise: str
    status: str
    score: float
    max_score: float
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        parts, said = list(self.notes), {}
        for t in self.tests:
            if t.status == "passed":
                continue
            if t.message in said:  # the hidden test repeats the visible check first: say it once
                parts.append(f"{t.grade_id}: the same as {said[t.message]}")
            else:
                said[t.message] = t.grade_id
                parts.append(f"{t.grade_id}: {t.message}")
        return " | ".join(parts)


@dataclass
class NotebookResult:
    student: str
    assignment: str
    notebook: str
    exercises: list[ExerciseResult]
    wall_s: float = 0.0
    output_tail: str = ""
    note: str = ""
    #: cells of the student's own (no exercise's) killed for running past their alarm
    stuck_cells: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)


# ---------------------------------------------------------------------------------------------
# Reading a submission


def over_cap(size: int, max_mb: float) -> str:
    """Why a file of ``size`` bytes is not read, or "" when it is within ``max_mb`` MiB."""
    if size <= max_mb * 2**20:
        return ""
    return (f"the file is {size / 2**20:.0f} MiB; notebooks over {max_mb:g} MiB are not graded (most of such a file "
            f"is saved output: grade it with {CAP_OPTION} {int(size / 2**20) + 1}, or ask for it saved with its "
            "outputs cleared)")


def read_notebook(path: Path, max_mb: float = MAX_NOTEBOOK_MB) -> dict:
    """Parse ``path`` as an nbformat-4 notebook, or raise InvalidNotebook with the reason.

    A file over ``max_mb`` MiB is not read (``--max-notebook-mb``; the message names the option)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidNotebook(f"cannot read the file: {exc.strerror}") from None
    if size == 0:
        raise InvalidNotebook("the file is empty")
    if over_cap(size, max_mb):
        raise InvalidNotebook(over_cap(size, max_mb))
    try:
        nb = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidNotebook("the file is not text (not UTF-8)") from None
    except ValueError as exc:
        raise InvalidNotebook(f"the file is not JSON ({exc})") from None
    if not isinstance(nb, dict):
        raise InvalidNotebook("the file is JSON but not a Jupyter notebook")
    if nb.get("nbformat") != 4:
        raise InvalidNotebook(f"notebook format {nb.get('nbformat')!r} is not supported; save it with Jupyter (format 4)")
    if not isinstance(nb.get("cells"), list):
        raise InvalidNotebook("the file is JSON but not a Jupyter notebook (no list of cells)")
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidNotebook(f"cell {i} is malformed")
        source = cell.get("source", "")
        if not isinstance(source, (str, list)) or (isinstance(source, list) and not all(isinstance(s, str) for s in source)):
            raise InvalidNotebook(f"cell {i} has no readable source (text, or a list of lines of text)")
        meta = cell.get("metadata", {})
        nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
        if isinstance(nbg, dict) and not isinstance(nbg.get("grade_id", ""), str):
            raise InvalidNotebook(f"cell {i} has a grade_id that is not text ({type(nbg['grade_id']).__name__})")
    return nb


def build_program(lesson: Lesson, submission: dict) -> tuple[list[Step], set[str]]:
    """The steps to run: the submission's code cells in their order, with the course's tests in
    place of the student's test cells. Returns the steps and the exercises whose answers exist.

    Answers are found by their nbgrader ``grade_id``, whatever the cell's type or position; a
    student's extra cells run too (helpers they wrote), up to the last test: nothing after it runs. A test runs where its cell is, or after
    the last cell of its exercise's answer if the student moved that below it (or deleted the test).
    """
    tests = {t.grade_id: t for t in lesson.tests()}
    answer_ids = set(lesson.exercises)
    code: list[Step] = []
    test_after: dict[str, int] = {}  # test id -> number of code steps that precede it
    last_answer: dict[str, int] = {}
    for n, cell in enumerate(submission["cells"]):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in tests:
            test_after.setdefault(gid, len(code))
            continue
        if gid not in answer_ids and cell.get("cell_type") != "code":
            continue
        code.append(Step("code", gid or f"cell-{n}", cell_source(cell)))
        if gid in answer_ids:
            last_answer[gid] = len(code)
    found = set(last_answer)
    placed = []
    for order, (gid, test) in enumerate(tests.items()):
        owner = lesson.exercise_of(gid).grade_id
        at = max(test_after.get(gid, 0), last_answer.get(owner, 0))
        if gid not in test_after and owner not in last_answer:
            at = len(code)
        placed.append((at, order, Step("test", gid, test.source)))
    steps: list[Step] = []
    placed.sort(key=lambda item: (item[0], item[1]))
    i = 0
    for index in range(len(code) + 1):
        while i < len(placed) and placed[i][0] == index:
            steps.append(placed[i][2])
            i += 1
        if index < len(code):
            steps.append(code[index])
    # what comes after the last test cannot change any result: a long training run or a demo at
    # the end of a lesson costs the grader nothing, and a loop there cannot make a test time out
    last_test = max((i for i, step in enumerate(steps) if step.kind == "test"), default=len(steps) - 1)
    return steps[: last_test + 1], found


# ---------------------------------------------------------------------------------------------
# Judging

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def without_addresses(message: str) -> str:
    """``message`` without the memory addresses of object reprs (``<... object at 0x7f…>``): they
    change from run to run, and feedback must not (shards, resumed and repeated runs compare bytes)."""
    return _ADDRESS.sub("", message)


def judge_test(test: Test, job: JobResult, answer_line: dict | None, code: tuple[str, ...] = ()) -> TestResult:
    """The result of one test from the child's lines; ``code``: the notebook's code cells, read for
    the names they define when the test could not find one."""
    def result(status: str, message: str) -> TestResult:
        points = test.points if status == "passed" else 0.0
        return TestResult(test.grade_id, test.hidden, status, points, test.points, without_addresses(message))

    if job.lost:
        return result("crashed", f"the notebook {job.lost}")
    line = job.step(test.grade_id)
    if job.count(test.grade_id) > 1:
        return result("tampered", "the results of this test were written more than once: forged by the notebook")
    if answer_line and answer_line.get("status") == "timeout":
        if answer_line.get("stuck"):
            return result("timeout", _stuck_message(answer_line, "your answer cell"))
        return result("timeout", f"your answer cell ran past its time limit{_limit(answer_line)} (an infinite loop?)")
    if line is None:
        if job.timed_out:
            return result("timeout", "the notebook ran past its time limit before this test")
        if job.exitcode not in (0, None):
            return result("crashed", f"the notebook's process died ({_exit_reason(job.exitcode)}) before this test")
        if job.step(DONE) is not None:
            return result("tampered", "the results of this test were removed by the notebook")
        return result("crashed", "the notebook stopped before this test ran")
    if line.get("status") == "timeout":
        if line.get("stuck"):
            return result("timeout", _stuck_message(line, "the test (running your code)"))
        return result("timeout", f"the test ran past its time limit{_limit(line)} (an infinite loop in your code?)")
    if line.get("tampered"):
        return result("tampered", "the notebook replaced what the tests rely on: " + ", ".join(map(str, line["tampered"]))[:500])
    records = line.get("records")
    if not isinstance(records, list):
        records = []
    names = [r.get("check") for r in records if isinstance(r, dict)]
    if line.get("status") == "error" and not records:
        cause = str(line.get("error", "an error"))
        if answer_line and answer_line.get("status") == "error":
            cause = f"your answer cell raised {answer_line.get('error')}"
        if line.get("not_implemented"):
            return result("failed", "not answered yet (the cell still raises NotImplementedError)")
        hint = "" if cause.startswith("your answer cell") else missing_name_hint(cause, code)
        return result("error", f"the test could not run: {cause}{'' if not hint or cause.endswith('.') else '.'}{hint}")
    if names != test.checks:
        return result(
            "tampered",
            f"the test's checks did not run as written (expected {test.checks}, got {names}): "
            "the notebook replaced them",
        )
    for record in records:
        if "error" in record:
            if record.get("not_implemented"):
                return result("failed", "not answered yet (your code raises NotImplementedError)")
            return result("error", f"your code raised {record['error']}")
        if "failed" in record:
            return result("failed", str(record["failed"]))
        try:
            data = decode(record.get("data"))
            REGISTRY[record["check"]].judge(data)
        except CheckFailed as exc:
            return result("failed", str(exc))
        except Exception as exc:  # noqa: BLE001 - malformed data: not what a probe writes
            return result("tampered", f"the test's data was not what the check produces ({type(exc).__name__}: {exc})")
    if line.get("status") == "error":
        return result("error", f"the test raised {line.get('error')}")
    return result("passed", "passed")


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def grade_notebook(
    lesson: Lesson, path: Path | None, student: str, limits: Limits | None = None, isolation: Isolation | None = None
) -> NotebookResult:
    """Grade one student's notebook for ``lesson``; ``path`` None means not submitted."""
    limits = limits or Limits()

    def uniform(status: str, note: str) -> NotebookResult:
        exercises = [
            ExerciseResult(e.grade_id, status, 0.0, e.max_score, notes=[note]) for e in lesson.exercises.values()
        ]
        return NotebookResult(student, lesson.assignment, lesson.filename, exercises, note=note)

    if path is None:
        return uniform("missing", f"no {lesson.filename} was submitted")
    try:
        submission = read_notebook(path, limits.notebook_mb)
    except InvalidNotebook as exc:
        return uniform("invalid", f"{path.name}: {exc}")
    try:
        steps, found = build_program(lesson, submission)
    except Exception as exc:  # noqa: BLE001 - a notebook no check above foresaw: this student's, not the class's
        return uniform("invalid", f"{path.name}: its cells could not be read as a program ({type(exc).__name__}: {exc})")
    # a stuck answer is replaced by the course's own answer on the rerun (it still scores a
    # timeout): later exercises that use what it defines are graded on their own merits
    job = run_steps(steps, limits, isolation, replacements=lesson.solution_answers())
    try:
        with salted(limits.salt):  # the inputs the child's probes drew
            return _judged(lesson, path, student, steps, found, job)
    except Exception as exc:  # noqa: BLE001 - results no check above foresaw: this student's, not the class's
        return uniform("crashed", f"its results could not be judged ({type(exc).__name__}: {exc})")


def _judged(lesson: Lesson, path: Path, student: str, steps: list[Step], found: set[str], job: JobResult) -> NotebookResult:
    """The notebook's result from its job's lines."""
    code = tuple(step.source for step in steps if step.kind == "code")
    exercises = []
    for exercise in lesson.exercises.values():
        if exercise.grade_id not in found:
            exercises.append(
                ExerciseResult(exercise.grade_id, "missing", 0.0, exercise.max_score,
                               notes=[f"the answer cell {exercise.grade_id!r} is not in the notebook"])
            )
            continue
        answer_line = job.step(exercise.grade_id)
        tests = [judge_test(t, job, answer_line, code) for t in exercise.tests]
        status = max((t.status for t in tests), key=SEVERITY.__getitem__)
        notes = []
        if answer_line and answer_line.get("status") == "error":
            notes.append(f"your answer cell raised {answer_line.get('error')}")
        exercises.append(
            ExerciseResult(exercise.grade_id, status, sum(t.points for t in tests), exercise.max_score, tests, notes)
        )
    notes = []
    if path.name != lesson.filename:
        notes.append(f"graded {path.name} (expected the name {lesson.filename})")
    ours = set(lesson.exercises) | {t.grade_id for t in lesson.tests()}
    extra = [step for step in job.stuck if step not in ours]  # a cell of the student's own, no exercise's
    if extra:
        notes.append(f"{', '.join(extra)} ran past {'its' if len(extra) == 1 else 'their'} alarm and "
                     f"{'was' if len(extra) == 1 else 'were'} killed; the notebook was graded without "
                     f"{'it' if len(extra) == 1 else 'them'}")
    return NotebookResult(student, lesson.assignment, lesson.filename, exercises, job.wall_s,
                          without_addresses(job.output_tail), "; ".join(notes), extra)


def locate(submitted: Path, student: str, lesson: Lesson) -> Path | None:
    """The student's notebook for ``lesson``: the expected name, else a single renamed notebook."""
    folder = submitted / student / lesson.assignment
    exact = folder / lesson.filename
    if exact.is_file():
        return exact
    if not folder.is_dir():
        return None
    others = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    return others[0] if len(others) == 1 else None
