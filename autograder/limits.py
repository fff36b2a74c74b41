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
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder.course import Lesson, lessons
from autograder.executors import lesson_isolations
from autograder.grading import build_program
from autograder.protocol import DONE
from autograder.runner import LessonLimits, Limits, run_steps, shutdown_servers
from autograder.sandbox import Isolation, resolve_mode

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
    failed = [line for line in job.lines if line.get("status") not in ("ok", None) and line.get("step") != DONE]
    if job.step(DONE) is None or failed:
        what = ", ".join(f"{line.get('step')} ({line.get('status')}: {line.get('error', '')[:120]})" for line in failed[:3])
        raise CalibrationError(
            f"{lesson.assignment}: the course's own solution did not run cleanly in the grader"
            f" ({what or 'it stopped early'}); pass --timeout and --cell-timeout to grade anyway"
        )
    timed = [(float(line.get("s", 0.0)), str(line.get("step"))) for line in job.lines if "s" in line]
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


def course_limits(root: Path, only: list[str] | None, base: Limits, sandbox: str, cache: Path | None = None,
                  jobs: int = 1) -> LessonLimits:
    """The limits of a grading run, lesson by lesson, each measured from that lesson's solution.

    Each solution runs in the same sandbox as the students' notebooks will. The result is kept in
    ``cache`` (keyed by the lessons' contents and the sandbox), so a resumed or repeated run does
    not measure again (``jobs`` lessons are measured at once). The default, for a lesson not
    measured, is the largest of them."""
    mode = resolve_mode(sandbox)
    chosen = [lesson for lesson in lessons(root) if not only or lesson.assignment in only]
    digest = hashlib.sha256(json.dumps([mode, FACTOR, MIN_CELL_S, MIN_WALL_S, dataclasses.asdict(base)]).encode())
    for lesson in chosen:
        digest.update(lesson.path.read_bytes())
    cache_file = cache / f"limits-{digest.hexdigest()[:16]}.json" if cache is not None else None
    if cache_file is not None and cache_file.is_file():
        saved = json.loads(cache_file.read_text(encoding="utf-8"))
        return _lesson_limits(base, {a: (float(v["cell_s"]), float(v["wall_s"]), v.get("steps", {}))
                                     for a, v in saved["limits"].items()})
    folder = Path(tempfile.mkdtemp(prefix="tc-limits-"))
    isolations = lesson_isolations(mode, root, folder, lessons(root), chosen, [], folder.name)
    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:  # each lesson has its own fork server
            found = list(pool.map(lambda lesson: calibrate(lesson, base, isolations[lesson.assignment]), chosen))
    finally:
        for key in {iso.key for iso in isolations.values()}:
            shutdown_servers(key)
        shutil.rmtree(folder, ignore_errors=True)
    measured = {c.assignment: (c.limits.cell_s, c.limits.wall_s, dict(c.limits.steps)) for c in found}
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        record = {"limits": {a: {"cell_s": cell, "wall_s": wall, "steps": steps}
                             for a, (cell, wall, steps) in measured.items()},
                  "calibrations": [dataclasses.asdict(c) for c in found]}
        cache_file.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return _lesson_limits(base, measured)


def _lesson_limits(base: Limits, measured: dict[str, tuple[float, float, dict]]) -> LessonLimits:
    default = dataclasses.replace(
        base,
        cell_s=max((cell for cell, _, _ in measured.values()), default=MIN_CELL_S),
        wall_s=max((wall for _, wall, _ in measured.values()), default=MIN_WALL_S),
    )
    return LessonLimits(default, tuple(sorted(
        (a, dataclasses.replace(base, cell_s=cell, wall_s=wall, steps=tuple(sorted(steps.items()))))
        for a, (cell, wall, steps) in measured.items()
    )))
