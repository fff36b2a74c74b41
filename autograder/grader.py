"""Grade one submitted notebook: read it (``autograder.submission``), run its program in a sandboxed
child (``autograder.runner``), judge the child's data (``autograder.grading``), and give every
exercise a status; and find which notebook a student handed in."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Lesson
from autograder.grading import (
    SEVERITY,
    ExerciseResult,
    NotebookResult,
    judge_test,
    without_addresses,
)
from autograder.protocol import Limits, Step
from autograder.repair import wanted, with_repairs
from autograder.runner import JobResult, run_steps
from autograder.sandbox import Isolation
from autograder.submission import InvalidNotebook, build_program, read_notebook
from helpers.checks.core import salted


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
            result = _judged(lesson, path, student, steps, found, job)
    except Exception as exc:  # noqa: BLE001 - results no check above foresaw: this student's, not the class's
        return uniform("crashed", f"its results could not be judged ({type(exc).__name__}: {exc})")
    if limits.edits > 0 and any(wanted(exercise) for exercise in result.exercises):
        try:
            with salted(limits.salt):
                result = with_repairs(lesson, steps, result, job, limits, isolation)
        except Exception:  # noqa: BLE001, S110 - a repair only adds a sentence: the grade stands without it
            pass
    return result


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
        if answer_line and answer_line.status == "error":
            notes.append(f"your answer cell raised {answer_line.error}")
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
