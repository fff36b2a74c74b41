"""Verified repairs: one change to a failing answer that makes it pass every test of its exercise that ran.

The checks' messages say what a probe established, and name a cause where a rule could establish
one. For the rest (a condition read the other way, a sibling attribute in place of another, a
``return`` inside a loop...) the grader tries the student's own code with one change at a time: it
runs the notebook again in a fresh sandboxed child, up to the failing answer, then each variant of
that answer (``autograder.edits``) followed by the exercise's own tests, and judges them with the
same judges. A variant that passes every test is a repair, and the message says so, with its line:
a fact about the student's code as run, never a guess. Where more than ``MAX_SAID`` different
changes pass, none is said (the tests could not tell them apart).

This costs a second run, so it is made only for exercises that failed a check (not blank, not a
timeout, not an error of the test's own), at most ``MAX_EXERCISES`` per notebook, with at most
``Limits.edits`` variants each (0: no repair run), under a wall-clock limit of its own.
"""

from __future__ import annotations

from dataclasses import replace

from autograder.course import Lesson
from autograder.edits import Edit, edits
from autograder.grading import ExerciseResult, NotebookResult, TestResult, judge_test
from autograder.protocol import Limits, Step
from autograder.runner import JobResult, run_steps
from autograder.sandbox import Isolation

MAX_EXERCISES = 3  # failing exercises tried per notebook
MAX_SAID = 3  # more passing changes than this: none is said
WALL_S = 60.0  # the repair run's wall-clock limit (or the notebook's own, if lower)
MARK = "@edit"  # step ids of the variants: "<grade_id>@edit<n>"


def wanted(exercise: ExerciseResult) -> bool:
    """A check ran the student's answer and found a mistake (not a blank, a timeout or a broken test)."""
    return exercise.status == "failed" and not any(
        t.message.startswith("not answered yet") for t in exercise.tests if t.status != "passed")


def with_repairs(lesson: Lesson, steps: list[Step], result: NotebookResult, first: JobResult, limits: Limits,
                 isolation: Isolation | None) -> NotebookResult:
    """``result`` with a sentence added to each failing test of an exercise that one change repairs."""
    answers = {step.id: i for i, step in enumerate(steps) if step.kind == "code"}  # the last cell of each id
    todo: list[tuple[str, list[Edit]]] = []
    for exercise in result.exercises:
        if len(todo) >= MAX_EXERCISES or not wanted(exercise) or exercise.exercise not in answers:
            continue
        variants = edits(steps[answers[exercise.exercise]].source, lesson.solution_answers().get(exercise.exercise),
                         limits.edits)
        if variants:
            todo.append((exercise.exercise, variants))
    if not todo:
        return result
    program, step_limits = _program(lesson, steps, answers, todo, first, limits)
    budget = replace(limits, wall_s=min(limits.wall_s, WALL_S), steps=limits.steps + tuple(step_limits.items()))
    job = run_steps(program, budget, isolation)
    code = tuple(step.source for step in steps if step.kind == "code")
    said = {}
    for gid, variants in todo:
        tests = lesson.exercises[gid].tests
        passing = [edit for n, edit in enumerate(variants)
                   if all(_passes(t, n, gid, job, code) for t in tests)]
        descriptions = list(dict.fromkeys(edit.describe() for edit in passing))
        if 0 < len(descriptions) <= MAX_SAID:
            said[gid] = sentence(descriptions, _which(tests))
    if not said:
        return result
    exercises = [e if e.exercise not in said else replace(e, tests=[
        t if t.status == "passed" else replace(t, message=_with(t.message, said[e.exercise])) for t in e.tests])
        for e in result.exercises]
    return replace(result, exercises=exercises)


def _with(message: str, said: str) -> str:
    """``said`` after ``message``: on a line of its own after a message of several lines."""
    message = message.rstrip()
    return f"{message}\n{said}" if "\n" in message else f"{message} {said}"


def _which(tests) -> str:
    """The tests that ran, in words: a self-check runs the visible ones only."""
    hidden = any(t.hidden for t in tests)
    visible = any(not t.hidden for t in tests)
    kinds = "visible and hidden" if hidden and visible else "hidden" if hidden else "visible"
    return f"this exercise's {kinds} test{'s' if len(tests) > 1 else ''}"


def sentence(descriptions: list[str], which: str) -> str:
    if len(descriptions) == 1:
        return (f"Checked by running your code again with one change: with {descriptions[0]}, it passes {which}. "
                "That is the line to fix.")
    return ("Checked by running your code again with one change at a time: each of these makes it pass "
            f"{which}: {'; '.join(descriptions)}.")


def _passes(test, n: int, gid: str, job: JobResult, code: tuple[str, ...]) -> bool:
    mine = replace(test, grade_id=f"{test.grade_id}{MARK}{n}")
    verdict: TestResult = judge_test(mine, job, job.step(f"{gid}{MARK}{n}"), code)
    return verdict.status == "passed"


def _program(lesson: Lesson, steps: list[Step], answers: dict[str, int], todo, first: JobResult, limits: Limits):
    """The notebook's code cells in order (its tests left out); after each answer to try, every variant
    of it followed by the exercise's tests, then the answer as written again for the cells after it."""
    tried = dict(todo)
    last = max(answers[gid] for gid in tried)
    program: list[Step] = []
    step_limits: dict[str, float] = {}
    for i, step in enumerate(steps[: last + 1]):  # what comes after the last answer tried changes nothing
        if step.kind != "code":
            continue
        program.append(step)
        if step.id not in tried or answers[step.id] != i:
            continue
        for n, edit in enumerate(tried[step.id]):
            program.append(Step("code", f"{step.id}{MARK}{n}", edit.source))
            step_limits[f"{step.id}{MARK}{n}"] = limits.cell_limit(step.id)
            for test in lesson.exercises[step.id].tests:
                program.append(Step("test", f"{test.grade_id}{MARK}{n}", test.source))
                ran = first.step(test.grade_id)
                took = ran.s if ran is not None and ran.s is not None else limits.cell_limit(test.grade_id)
                # a variant that loops for ever costs a few times the test's own time, not its whole limit
                step_limits[f"{test.grade_id}{MARK}{n}"] = min(limits.cell_limit(test.grade_id), max(1.0, 4 * took + 0.5))
        if i < last:
            program.append(step)  # the answer as written: what later cells use
    return program, step_limits
