"""Default time limits come from the course: its own solution, timed in the grader's child."""

import json

import pytest
from harness import ROOT

from autograder.course import load_lesson
from autograder.limits import (
    ERROR_FIX,
    ERROR_FIXES,
    FACTOR,
    MIN_CELL_S,
    MIN_WALL_S,
    SLOW_FIX,
    CalibrationError,
    _round_up,
    calibrate,
    course_limits,
    measure_limits,
)
from autograder.protocol import Limits

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


# --- A solution that cannot run: what the instructor is told, and the rest of the class ---------
# The calibrating run is replaced by a made-up job (``run_steps`` in ``autograder.limits``): these
# tests run no notebook and take a second.

TRAINING = "07-training"
FIX_IT = ("To fix it, do one of these:\n  * download https://example.org/tinyshakespeare.txt\n"
          "    and save it as /home/someone/.cache/transformer-course/tinyshakespeare.txt\n"
          "  * or save it anywhere and tell the course where it is:\n"
          "    export TRANSFORMER_COURSE_DATA=/path/to/tinyshakespeare.txt")
MISSING_DATA = ("DataUnavailableError: Could not get Tiny Shakespeare (tinyshakespeare.txt).\nTried:\n"
                "  * an explicit path: none given\n  * the download: no network\n" + FIX_IT)


def fake_job(steps, failing=None, *, done=True, timed_out=False):
    """A calibrating run of ``steps`` that went well, but for ``failing`` (step id -> line fields)."""
    from autograder.protocol import DONE, StepLine
    from autograder.runner import JobResult

    failing = failing or {}
    lines = [{"step": s.id, "status": "ok", "s": 0.04, **failing.get(s.id, {})} for s in steps]
    written = lines + ([{"step": DONE}] if done else [])
    return JobResult([StepLine.read(line) for line in written], exitcode=0 if done else None, timed_out=timed_out)


def data_missing(steps):
    """Lesson 07's first cell that reads the data raises; two later cells fail for want of its names."""
    return fake_job(steps, {"cell-6": {"status": "error", "error": MISSING_DATA},
                            "cell-12": {"status": "error", "error": "NameError: name 'data' is not defined"},
                            "cell-14": {"status": "error", "error": "NameError: name 'V' is not defined"}})


def lesson_07_lacks_its_data(steps, limits=None, isolation=None, replacements=None):
    """``run_steps`` for calibration: lesson 07 (the one with a ``get-batch`` step) lacks its data."""
    return data_missing(steps) if any(s.id == "get-batch" for s in steps) else fake_job(steps)


def calibrate_with(monkeypatch, job, assignment=TRAINING):
    monkeypatch.setattr("autograder.limits.run_steps", lambda steps, *args, **kwargs: job(steps))
    return calibrate(load_lesson(ROOT / "solutions" / assignment / f"{assignment}.ipynb", assignment), Limits())


def test_a_failing_cell_is_reported_whole_and_the_cells_after_it_only_counted(monkeypatch):
    with pytest.raises(CalibrationError) as caught:
        calibrate_with(monkeypatch, data_missing)
    message = str(caught.value)
    assert message.startswith(f"{TRAINING}: the course's own solution did not run cleanly in the grader: cell-6 raised")
    assert MISSING_DATA in message and FIX_IT in message  # the whole error: the way to fix it included
    assert "NameError" not in message and "2 later cells failed after it: cell-12, cell-14" in message
    assert caught.value.fix == ERROR_FIXES["DataUnavailableError"] and message.endswith(caught.value.fix)
    assert "--timeout" not in message  # more time would not bring the data


def test_only_a_slow_solution_is_told_to_grade_with_limits_of_its_own(monkeypatch):
    slow_cell = {"cell-6": {"status": "timeout", "limit_s": 300.0}}
    with pytest.raises(CalibrationError, match="cell-6 ran past the calibration's limit of 300 s a cell") as caught:
        calibrate_with(monkeypatch, lambda steps: fake_job(steps, slow_cell))
    assert caught.value.fix == SLOW_FIX and "--timeout and --cell-timeout" in str(caught.value)
    with pytest.raises(CalibrationError, match="for the whole notebook") as caught:
        calibrate_with(monkeypatch, lambda steps: fake_job(steps[:3], done=False, timed_out=True))
    assert caught.value.fix == SLOW_FIX
    raised = {"cell-6": {"status": "error", "error": "ValueError: the solution is wrong"}}
    with pytest.raises(CalibrationError, match="cell-6 raised ValueError: the solution is wrong") as caught:
        calibrate_with(monkeypatch, lambda steps: fake_job(steps, raised))
    assert caught.value.fix == ERROR_FIX and "--timeout" not in str(caught.value)
    with pytest.raises(CalibrationError, match="stopped early") as caught:
        calibrate_with(monkeypatch, lambda steps: fake_job(steps[:3], done=False))
    assert "--timeout" not in str(caught.value)


def test_a_lesson_that_cannot_be_measured_leaves_the_others_measured(monkeypatch, tmp_path):
    monkeypatch.setattr("autograder.limits.run_steps", lesson_07_lacks_its_data)
    measured = measure_limits(ROOT, [A, TRAINING], Limits(), "none", tmp_path)
    assert [a for a, _ in measured.limits.lessons] == [A] and list(measured.failed) == [TRAINING]
    assert MISSING_DATA in str(measured.failed[TRAINING])
    with pytest.raises(CalibrationError, match="Could not get Tiny Shakespeare"):
        course_limits(ROOT, [A, TRAINING], Limits(), "none", tmp_path)
    # once the data is there, only the lesson that failed is measured again
    seen = []
    monkeypatch.setattr("autograder.limits.run_steps", lambda steps, *a, **k: seen.append(steps) or fake_job(steps))
    again = measure_limits(ROOT, [A, TRAINING], Limits(), "none", tmp_path)
    assert not again.failed and [a for a, _ in again.limits.lessons] == [A, TRAINING]
    assert len(seen) == 1 and any(s.id == "get-batch" for s in seen[0])
    assert again.limits.get(A) == measured.limits.get(A)


def test_limits_measured_and_limits_read_back_give_the_same_cache_keys(monkeypatch, tmp_path):
    from autograder.batch import with_salt
    from autograder.protocol import limits_data
    from autograder.run_folder import cache_key

    monkeypatch.setattr("autograder.limits.run_steps", lambda steps, *a, **k: fake_job(steps))
    fresh = course_limits(ROOT, [A], Limits(), "none", tmp_path)  # measured: 10 x 0.04 s, rounded up to 5 s
    monkeypatch.setattr("autograder.limits.run_steps", lambda *a, **k: pytest.fail("measured again"))
    kept = course_limits(ROOT, [A], Limits(), "none", tmp_path)  # read back from the JSON it kept
    assert fresh.get(A).cell_s == 5.0 and isinstance(fresh.get(A).cell_s, float)
    assert json.dumps(limits_data(fresh)) == json.dumps(limits_data(kept))
    lesson = load_lesson(SOLUTION, A)
    assert cache_key("course", lesson, None, with_salt(fresh, 7), "none") == cache_key("course", lesson, None, with_salt(kept, 7), "none")


def test_grade_skips_the_lesson_it_cannot_measure_and_grades_the_rest(monkeypatch, tmp_path, capsys):
    import pandas as pd

    from autograder.cli import main
    from autograder.cli_grade import NOT_ALL_GRADED
    from autograder.run_folder import JOBS, MANIFEST

    submitted = tmp_path / "submitted"
    for student in ("ann", "bob"):  # not notebooks: graded as `invalid` without running anything
        for assignment in (A, TRAINING):
            (submitted / student / assignment).mkdir(parents=True)
            (submitted / student / assignment / f"{assignment}.ipynb").write_text("not a notebook")
    (submitted / "cat").mkdir()  # handed in nothing
    monkeypatch.setattr("autograder.limits.run_steps", lesson_07_lacks_its_data)
    command = ["grade", str(submitted), "--out", str(tmp_path / "out"), "--sandbox", "none",
               "--assignment", A, "--assignment", TRAINING]
    assert main(command) == NOT_ALL_GRADED
    printed = capsys.readouterr()
    grades = pd.read_csv(tmp_path / "out" / "grades.csv")
    assert set(grades.assignment) == {A} and set(grades.student_id) == {"ann", "bob", "cat"}
    eyes = pd.read_csv(tmp_path / "out" / "needs_attention.csv", keep_default_na=False)
    skipped = eyes[eyes.assignment == TRAINING]
    assert sorted(skipped.student_id) == ["ann", "bob", "cat"] and set(skipped.status) == {"not graded"}
    assert all(MISSING_DATA in message for message in skipped.message) and set(skipped.score) == {""}
    assert set(skipped.notebook) == {f"{TRAINING}.ipynb", ""}  # cat handed nothing in
    assert printed.out.count("Could not get Tiny Shakespeare") == 1  # once, and whole (its lines indented)
    assert all(line.strip() in printed.out for line in FIX_IT.splitlines()) and ERROR_FIXES["DataUnavailableError"] in printed.out
    assert "NOT GRADED: 1 lesson" in printed.out and "NameError" not in printed.out
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["not_graded"] == {TRAINING: str(skipped.message.iloc[0])}
    # the data is back: the run resumes, measures lesson 07, grades it and takes lesson 03 from its cache
    monkeypatch.setattr("autograder.limits.run_steps", lambda steps, *a, **k: fake_job(steps))
    assert main(command) == 0
    jobs = pd.read_csv(tmp_path / "out" / JOBS)
    assert set(jobs[jobs.assignment == A].worker) == {"cache"} and set(jobs[jobs.assignment == TRAINING].worker) != {"cache"}
    assert set(pd.read_csv(tmp_path / "out" / "grades.csv").assignment) == {A, TRAINING}
    assert "not graded" not in set(pd.read_csv(tmp_path / "out" / "needs_attention.csv").status)
