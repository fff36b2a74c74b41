"""Default time limits come from the course: its own solution, timed in the grader's child."""

import json

import pytest
from harness import ROOT

from autograder.course import load_lesson
from autograder.limits import FACTOR, MIN_CELL_S, MIN_WALL_S, CalibrationError, _round_up, calibrate
from autograder.runner import Limits

A = "03-self-attention"
SOLUTION = ROOT / "solutions" / A / f"{A}.ipynb"


def test_limits_are_rounded_up_to_readable_numbers():
    assert [_round_up(s) for s in (0.0, 3.2, 10.0, 31.4, 87.0, 123.0, 1234.0)] == [0, 4, 10, 32, 87, 130, 1300]


@pytest.mark.slow
def test_the_solution_sets_the_limits():
    calibration = calibrate(load_lesson(SOLUTION, A), Limits(memory_mb=1234))
    limits = calibration.limits
    assert calibration.solution_s > 0 and calibration.slowest_step_s > 0
    assert limits.cell_s >= max(MIN_CELL_S, FACTOR * calibration.slowest_step_s)
    assert limits.wall_s >= max(MIN_WALL_S, FACTOR * calibration.solution_s)
    assert limits.memory_mb == 1234  # not measured: kept from the base limits
    # each answer and each test has its own limit, from its own time; other cells get the lesson's
    lesson = load_lesson(SOLUTION, A)
    graded = set(lesson.exercises) | {t.grade_id for t in lesson.tests()}
    assert {step for step, _ in limits.steps} == graded
    for step, seconds in limits.steps:
        assert MIN_CELL_S <= seconds <= limits.cell_s
        assert seconds >= FACTOR * calibration.steps_s[step]


@pytest.mark.slow
def test_a_solution_that_fails_in_the_grader_is_refused(tmp_path):
    nb = json.loads(SOLUTION.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "causal-mask":
            cell["source"] = "def apply_causal_mask(scores):\n    raise RuntimeError('broken on purpose')\n"
    broken = tmp_path / A / f"{A}.ipynb"
    broken.parent.mkdir()
    broken.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(CalibrationError, match="broken on purpose"):
        calibrate(load_lesson(broken, A), Limits())


@pytest.mark.slow
def test_a_run_measures_each_lesson_once_and_keeps_the_limits(tmp_path):
    from autograder.limits import course_limits

    chosen = ["01-tokens-and-embeddings", A]
    first = course_limits(ROOT, chosen, Limits(), "none", tmp_path)
    assert [a for a, _ in first.lessons] == chosen
    (saved,) = tmp_path.glob("limits-*.json")
    record = json.loads(saved.read_text())
    assert [c["assignment"] for c in record["calibrations"]] == chosen
    assert first.get(A).cell_s == record["limits"][A]["cell_s"] >= MIN_CELL_S
    assert dict(first.get(A).steps) == record["limits"][A]["steps"] and first.get(A).steps
    assert first.default.cell_s == max(lim.cell_s for _, lim in first.lessons)
    record["limits"][A]["cell_s"] = 999.0  # the kept file is what a second run uses: no new measurement
    saved.write_text(json.dumps(record))
    again = course_limits(ROOT, chosen, Limits(), "none", tmp_path)
    assert again.get(A).cell_s == 999.0 and again.get("01-tokens-and-embeddings").cell_s == first.get("01-tokens-and-embeddings").cell_s
