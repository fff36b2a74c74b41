"""What grading says: every exercise's status and score, judged from the data a notebook's child wrote.

A notebook is read by ``autograder.submission``, run by ``autograder.runner`` and graded as a
whole by ``autograder.grader``; here are its results and the judging of each test.

Statuses, per student × assignment × exercise (never a silent zero):

========  ==========================================================================
passed    every test of the exercise passed
failed    a test found a mistake, or the answer is still blank. An exception the student's code
          raised while a check ran it is a mistake found too, whichever way the check met it:
          the message says where it raised, what the error means, and the likely cause where
          the check could establish one
error     the test itself could not run: a name it needs was never defined, or the test cell
          raised outside the checks (the message shows the error)
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

import re
import signal
from dataclasses import dataclass, field

from autograder import lesson_checks  # noqa: F401 - fills the registry of checks
from autograder.course import Test
from autograder.names import missing_name_hint
from autograder.protocol import DONE, StepLine
from autograder.runner import JobResult
from helpers.checks.core import REGISTRY, CheckFailed, decode

STATUSES = ("passed", "failed", "error", "timeout", "crashed", "missing", "invalid", "tampered")
# when tests of one exercise disagree, the exercise shows the most serious status
SEVERITY = {s: i for i, s in enumerate(STATUSES)}

STUCK_MESSAGE = (
    "{what} ran past its time limit{limit} and went on after being told to stop, so it was killed and the "
    "notebook was graded again without it (an infinite loop inside `except:` or `except BaseException:`?)"
)
UNINTERRUPTIBLE_MESSAGE = (
    "{what} ran past its time limit{limit} inside one long operation that could not be interrupted (a "
    "huge tensor or matrix product?), so it was killed and the notebook was graded again without it"
)


def _limit(line: StepLine) -> str:
    """`` of N s`` for a step line that says a plausible limit (the child wrote it)."""
    value = line.limit_s
    return f" of {value:g} s" if value is not None and 0 < value < 1e6 else ""


def _stuck_message(line: StepLine, what: str) -> str:
    template = STUCK_MESSAGE if line.swallowed else UNINTERRUPTIBLE_MESSAGE
    return template.format(what=what, limit=_limit(line))


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
# Judging

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def without_addresses(message: str) -> str:
    """``message`` without the memory addresses of object reprs (``<... object at 0x7f…>``): they
    change from run to run, and feedback must not (shards, resumed and repeated runs compare bytes)."""
    return _ADDRESS.sub("", message)


def judge_test(test: Test, job: JobResult, answer_line: StepLine | None, code: tuple[str, ...] = ()) -> TestResult:
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
    if answer_line and answer_line.status == "timeout":
        if answer_line.stuck:
            return result("timeout", _stuck_message(answer_line, "your answer cell"))
        return result("timeout", f"your answer cell ran past its time limit{_limit(answer_line)} (an infinite loop?)")
    if line is None:
        if job.timed_out:
            return result("timeout", "the notebook ran past its time limit before this test")
        if job.exitcode not in (0, None):
            return result("crashed", f"the notebook's process died ({exit_reason(job.exitcode)}) before this test")
        if job.step(DONE) is not None:
            return result("tampered", "the results of this test were removed by the notebook")
        return result("crashed", "the notebook stopped before this test ran")
    if line.malformed:
        return result("tampered", f"the results of this test were not what the grader writes ({line.malformed}): "
                      "forged by the notebook")
    if line.status == "timeout":
        if line.stuck:
            return result("timeout", _stuck_message(line, "the test (running your code)"))
        return result("timeout", f"the test ran past its time limit{_limit(line)} (an infinite loop in your code?)")
    if line.tampered:
        return result("tampered", "the notebook replaced what the tests rely on: " + ", ".join(line.tampered)[:500])
    records = line.records or ()
    names = [r.check for r in records]
    if line.status == "error" and not records:
        cause = line.error or "an error"
        if answer_line and answer_line.status == "error":
            cause = f"your answer cell raised {answer_line.error}"
        if line.not_implemented:
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
        if record.error is not None:
            if record.not_implemented:
                return result("failed", "not answered yet (your code raises NotImplementedError)")
            return result("failed", record.with_notes(f"your code raised {record.error}"))  # the one rule: see STATUSES
        if record.failed is not None:
            return result("failed", record.with_notes(record.failed))
        try:
            data = decode(record.data)
            REGISTRY[record.check].judge(data)
        except CheckFailed as exc:
            return result("failed", record.with_notes(str(exc)))
        except Exception as exc:  # noqa: BLE001 - data no probe writes, or a fault of the judge's own
            return result("tampered", f"the test's data was not what the check produces ({type(exc).__name__}: {exc}): "
                          "the notebook forged it, or the check has a fault; either way the instructor should look")
    if line.status == "error":
        return result("error", f"the test raised {line.error}")
    return result("passed", "passed")


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
