"""Time limits measured from the course itself, so that an instructor need not guess them.

Before grading a lesson, the grader runs the lesson's own solution once, in the same kind of child
and on the same machine as the students' notebooks, and times every step. A student's notebook may
then take ``FACTOR`` times as long as the solution, per cell and in all, but never less than the
floors below: a correct answer written another way (a Python loop where the solution is vectorised)
is slower, and a busy machine slows everything.

The course's own cells (each answer and each test, found by its grade id) get a limit of their
own, from their own time in the solution; other cells (given code, the student's extra cells) get
the lesson's, from its slowest cell. A cell that will not stop therefore costs its own few seconds,
not the limit of the lesson's slowest cell.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder.course import Lesson, lessons
from autograder.grading import exit_reason
from autograder.jobs import lesson_isolations
from autograder.protocol import DONE, LessonLimits, Limits, StepLine
from autograder.runner import run_steps
from autograder.sandbox import Isolation, data_problem, resolve_mode
from autograder.server_pool import run_ended
from autograder.submission import build_program

FACTOR = 10.0
MIN_CELL_S = 5.0
MIN_WALL_S = 60.0
#: the limits of the calibrating run itself: generous, since it is the course's own code
CALIBRATION = Limits(wall_s=900.0, cell_s=300.0)


@dataclasses.dataclass(frozen=True)
class Calibration:
    assignment: str
    solution_s: float  # the whole solution notebook, in the grader's child
    slowest_step_s: float  # its slowest cell
    slowest_step: str
    limits: Limits
    steps_s: dict = dataclasses.field(default_factory=dict)  # each graded step's own time, by grade id


class CalibrationError(RuntimeError):
    """The course's own solution did not run cleanly in the grader: grading it would be unfair.

    ``reason`` says what went wrong, the first failing cell's error in full; ``fix`` is the one
    thing to do about it. The message is the lesson, the reason and, on a line of its own, the fix."""

    def __init__(self, assignment: str, reason: str, fix: str):
        super().__init__(f"{assignment}: the course's own solution did not run cleanly in the grader: {reason}\n"
                         f"What to do: {fix}")
        self.assignment = assignment
        self.reason = reason
        self.fix = fix


#: what to do when the solution ran, but past the calibrating run's own limits
SLOW_FIX = (
    "The solution ran, but too slowly on this machine to measure its limits: to grade this lesson anyway, "
    "give `transformer-course grade` --timeout and --cell-timeout (seconds a notebook and a cell may run)."
)
#: what to do when a cell of the solution raised, by the exception's name
ERROR_FIXES = {
    "DataUnavailableError": "The lesson's data could not be found: provide it in one of the ways its message "
                            "above lists (`export TRANSFORMER_COURSE_DATA=/path/to/the/file` before running always "
                            "works: the grader hands that file to the notebooks it runs), then run again.",
    "ModuleNotFoundError": "A package the lesson imports is not installed where the grader runs: install it "
                           "(`pip install -e .` in the course's environment), then run again.",
    "MemoryError": "The solution ran out of memory: give `transformer-course grade` a larger --memory-mb, "
                   "then run again.",
}
ERROR_FIX = "Fix what the error says (the course's own solution must run in the grader), then run again."
CRASH_FIX = ("Its process died without an error of its own (memory, or a signal): give `transformer-course grade` "
             "a larger --memory-mb, or run the solution notebook by hand to see what stops it, then run again.")


def _round_up(seconds: float) -> float:
    """Round a limit up to a readable number (2 significant digits), always a float.

    Always a float: a limit read back from the kept measurement (JSON) is one, and a limit is
    part of every cached result's key, so ``5`` here and ``5.0`` there would grade everything again."""
    if seconds <= 0:
        return 0.0
    scale = 10 ** max(0, math.floor(math.log10(seconds)) - 1)
    return float(math.ceil(seconds / scale) * scale)


def _failure(job) -> tuple[str, str] | None:
    """What went wrong in a calibrating run, and what to do about it; None if it ran cleanly.

    The first failing cell is reported with its whole error: the cells that fail after it mostly
    fail because of it (a name it should have defined), so they are only counted."""
    failed = [line for line in job.lines if line.status != "ok" and line.step != DONE]
    if failed:
        first, later = failed[0], [line.step for line in failed[1:]]
        reason = _step_reason(first)
        if later:
            shown = ", ".join(later[:5]) + (", ..." if len(later) > 5 else "")
            reason += f"\n({len(later)} later cell{'s' if len(later) != 1 else ''} failed after it: {shown})"
        return reason, _step_fix(first)
    if job.step(DONE) is not None:
        return None
    if job.timed_out:
        return f"it ran past the calibration's limit of {CALIBRATION.wall_s:g} s for the whole notebook", SLOW_FIX
    if job.lost:
        return f"it broke the grader's channel ({job.lost})", ERROR_FIX
    how = "it was stopped" if job.exitcode is None else exit_reason(job.exitcode)
    return f"it stopped early ({how}) without an error of its own", CRASH_FIX


def _step_reason(line: StepLine) -> str:
    """One failed step of the solution, in words, its error whole."""
    step = line.step
    if line.status == "timeout":
        limit = line.limit_s if line.limit_s is not None else CALIBRATION.cell_s
        return f"{step} ran past the calibration's limit of {limit:g} s a cell"
    error = line.error or "; ".join(line.tampered) or line.malformed or "an error without a message"
    problem = data_problem()
    if str(error).startswith("DataUnavailableError") and problem is not None:
        # the child looked in its own throwaway home; the grader's lookup names the real places
        error = f"DataUnavailableError (the grader could not get the text either): {problem}"
    return f"{step} raised {error}"


def _step_fix(line: StepLine) -> str:
    """The one step that fixes a failed step of the solution: it depends on how it failed."""
    if line.status == "timeout":
        return SLOW_FIX
    name = line.error.split(":", 1)[0].strip()
    return ERROR_FIXES.get(name, ERROR_FIX)


def calibrate(lesson: Lesson, base: Limits, isolation: Isolation | None = None) -> Calibration:
    """Run ``lesson``'s solution in a grading child; derive its cell and wall-clock limits.

    ``base`` supplies the memory and output limits, which are not measured."""
    steps, _ = build_program(lesson, lesson.notebook)
    job = run_steps(steps, dataclasses.replace(base, wall_s=CALIBRATION.wall_s, cell_s=CALIBRATION.cell_s), isolation)
    failure = _failure(job)
    if failure is not None:
        raise CalibrationError(lesson.assignment, *failure)
    timed = [(line.s, line.step) for line in job.lines if line.s is not None]
    slowest_s, slowest = max(timed, default=(0.0, ""))
    total = sum(s for s, _ in timed)
    graded = set(lesson.exercises) | {t.grade_id for t in lesson.tests()}
    own = {step: s for s, step in timed if step in graded}
    limits = dataclasses.replace(
        base,
        cell_s=_round_up(max(MIN_CELL_S, FACTOR * slowest_s)),
        wall_s=_round_up(max(MIN_WALL_S, FACTOR * total)),
        steps=tuple(sorted((step, _round_up(max(MIN_CELL_S, FACTOR * s))) for step, s in own.items())),
    )
    return Calibration(lesson.assignment, round(total, 2), round(slowest_s, 2), slowest, limits,
                       {step: round(s, 3) for step, s in sorted(own.items())})


@dataclasses.dataclass(frozen=True)
class Measured:
    """The limits of a grading run, and the lessons whose solution could not be measured.

    A lesson in ``failed`` has no limits of its own and must not be graded: its
    ``CalibrationError`` says why, and what fixes it."""

    limits: LessonLimits
    failed: dict[str, CalibrationError] = dataclasses.field(default_factory=dict)


def measure_limits(root: Path, only: list[str] | None, base: Limits, sandbox: str, cache: Path | None = None,
                   jobs: int = 1) -> Measured:
    """The limits of a grading run, lesson by lesson, each measured from that lesson's solution.

    Each solution runs in the same sandbox as the students' notebooks will (``jobs`` lessons at
    once). A lesson whose solution does not run cleanly is left out of the limits and named in
    ``failed``; the others are measured all the same. What was measured is kept in ``cache``
    (keyed by the lessons' contents and the sandbox), so a resumed or repeated run measures only
    what it lacks: a lesson that failed is tried again. The default, for a lesson not measured,
    is the largest of the limits."""
    mode = resolve_mode(sandbox)
    chosen = [lesson for lesson in lessons(root) if not only or lesson.assignment in only]
    cache_file = _cache_file(cache, chosen, mode, base)
    kept, calibrations = _read_kept(cache_file)
    todo = [lesson for lesson in chosen if lesson.assignment not in kept]
    found, failed = _calibrate_all(root, mode, todo, base, jobs) if todo else ([], {})
    measured = {**kept, **{c.assignment: (c.limits.cell_s, c.limits.wall_s, dict(c.limits.steps)) for c in found}}
    order = [lesson.assignment for lesson in chosen]
    measured = {a: measured[a] for a in order if a in measured}
    if cache_file is not None and found:
        calibrations += [dataclasses.asdict(c) for c in found]
        calibrations.sort(key=lambda c: order.index(c["assignment"]) if c["assignment"] in order else len(order))
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        record = {"limits": {a: {"cell_s": cell, "wall_s": wall, "steps": steps}
                             for a, (cell, wall, steps) in measured.items()},
                  "calibrations": calibrations}
        cache_file.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return Measured(_lesson_limits(base, measured), {a: failed[a] for a in order if a in failed})


def course_limits(root: Path, only: list[str] | None, base: Limits, sandbox: str, cache: Path | None = None,
                  jobs: int = 1) -> LessonLimits:
    """``measure_limits``'s limits, for a run that needs every lesson: the first lesson whose
    solution could not be measured raises its ``CalibrationError``."""
    measured = measure_limits(root, only, base, sandbox, cache, jobs)
    for error in measured.failed.values():
        raise error
    return measured.limits


def _cache_file(cache: Path | None, chosen: list[Lesson], mode: str, base: Limits) -> Path | None:
    """Where the measurement of ``chosen`` is kept: named by everything it depends on."""
    if cache is None:
        return None
    digest = hashlib.sha256(json.dumps([mode, FACTOR, MIN_CELL_S, MIN_WALL_S, dataclasses.asdict(base)]).encode())
    for lesson in chosen:
        digest.update(lesson.path.read_bytes())
    return cache / f"limits-{digest.hexdigest()[:16]}.json"


def _read_kept(cache_file: Path | None) -> tuple[dict[str, tuple[float, float, dict]], list[dict]]:
    """The limits kept by an earlier run, by lesson, and its calibrations; nothing if there are none."""
    if cache_file is None or not cache_file.is_file():
        return {}, []
    try:
        saved = json.loads(cache_file.read_text(encoding="utf-8"))
        kept = {a: (float(v["cell_s"]), float(v["wall_s"]), dict(v.get("steps", {}))) for a, v in saved["limits"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, []  # unreadable: measure again
    return kept, list(saved.get("calibrations", []))


def _calibrate_all(root: Path, mode: str, chosen: list[Lesson], base: Limits,
                   jobs: int) -> tuple[list[Calibration], dict[str, CalibrationError]]:
    """Calibrate each of ``chosen``, ``jobs`` at once: the calibrations, and the lessons that failed."""
    isolations = lesson_isolations(mode, root, lessons(root), chosen, [])

    def one(lesson: Lesson) -> Calibration | CalibrationError:
        try:
            return calibrate(lesson, base, isolations[lesson.assignment])
        except CalibrationError as exc:  # this lesson's trouble: the others are measured all the same
            return exc

    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:  # each lesson has its own fork server
            outcomes = list(pool.map(one, chosen))
    finally:
        run_ended()  # the servers stay for the grading that follows, within the memory's means
    found = [o for o in outcomes if isinstance(o, Calibration)]
    failed = {o.assignment: o for o in outcomes if isinstance(o, CalibrationError)}
    return found, failed


def _lesson_limits(base: Limits, measured: dict[str, tuple[float, float, dict]]) -> LessonLimits:
    """The ``LessonLimits`` of the measured lessons, every limit a float (measured or read back
    from JSON, the same limits give the same cache keys)."""
    default = dataclasses.replace(
        base,
        cell_s=float(max((cell for cell, _, _ in measured.values()), default=MIN_CELL_S)),
        wall_s=float(max((wall for _, wall, _ in measured.values()), default=MIN_WALL_S)),
    )
    return LessonLimits(default, tuple(sorted(
        (a, dataclasses.replace(base, cell_s=float(cell), wall_s=float(wall), steps=tuple(sorted(steps.items()))))
        for a, (cell, wall, steps) in measured.items()
    )))
