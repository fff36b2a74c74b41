"""Time limits measured from the course itself, so that an instructor need not guess them.

Before grading a lesson, the grader runs the lesson's own solution once, in the same kind of child
and on the same machine as the students' notebooks, and times every step. A student's notebook may
then take ``FACTOR`` times as long as the solution, per cell and in all, but never less than the
floors below: a correct answer written another way (a Python loop where the solution is vectorised)
is slower, and a busy machine slows everything.
"""

from __future__ import annotations

import dataclasses
import math

from autograder.course import Lesson
from autograder.grading import build_program
from autograder.runner import Limits, run_steps
from autograder.sandbox import Isolation

FACTOR = 10.0
MIN_CELL_S = 10.0
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


class CalibrationError(RuntimeError):
    """The course's own solution did not run cleanly in the grader: grading it would be unfair."""


def _round_up(seconds: float) -> float:
    """Round a limit up to a readable number (2 significant digits)."""
    if seconds <= 0:
        return 0.0
    scale = 10 ** max(0, math.floor(math.log10(seconds)) - 1)
    return math.ceil(seconds / scale) * scale


def calibrate(lesson: Lesson, base: Limits, isolation: Isolation | None = None) -> Calibration:
    """Run ``lesson``'s solution in a grading child; derive its cell and wall-clock limits.

    ``base`` supplies the memory and output limits, which are not measured."""
    steps, _ = build_program(lesson, lesson.notebook)
    job = run_steps(steps, dataclasses.replace(base, wall_s=CALIBRATION.wall_s, cell_s=CALIBRATION.cell_s), isolation)
    failed = [line for line in job.lines if line.get("status") not in ("ok", None) and line.get("step") != "__done__"]
    if job.step("__done__") is None or failed:
        what = ", ".join(f"{line.get('step')} ({line.get('status')}: {line.get('error', '')[:120]})" for line in failed[:3])
        raise CalibrationError(
            f"{lesson.assignment}: the course's own solution did not run cleanly in the grader"
            f" ({what or 'it stopped early'}); pass --timeout and --cell-timeout to grade anyway"
        )
    timed = [(float(line.get("s", 0.0)), str(line.get("step"))) for line in job.lines if "s" in line]
    slowest_s, slowest = max(timed, default=(0.0, ""))
    total = sum(s for s, _ in timed)
    limits = dataclasses.replace(
        base,
        cell_s=_round_up(max(MIN_CELL_S, FACTOR * slowest_s)),
        wall_s=_round_up(max(MIN_WALL_S, FACTOR * total)),
    )
    return Calibration(lesson.assignment, round(total, 2), round(slowest_s, 2), slowest, limits)
