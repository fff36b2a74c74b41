"""A cell that swallows its alarm costs seconds, not the notebook's whole wall-clock limit.

`except BaseException:` (or a bare `except:`) around a retry loop catches the grader's per-cell
alarm and goes on. The fork server sees that step still running a few seconds after its alarm,
kills the job, and the runner grades the notebook again without that step: the other exercises
keep their points, and the stuck one is a timeout whose message says what happened.
"""

import copy
import json
import time

import pandas as pd
import pytest
from harness import ROOT, solution_answers

from autograder.catalogue import with_answers
from autograder.course import load_lesson
from autograder.grader import grade_notebook
from autograder.grading import judge_test
from autograder.protocol import Limits, Step
from autograder.reports import write_reports
from autograder.runner import run_steps

A = "03-self-attention"
NB = "03-self-attention.ipynb"
LESSON = load_lesson(ROOT / "solutions" / A / NB, A)
RELEASE = json.loads((ROOT / "notebooks" / A / NB).read_text())
ANSWERS = solution_answers(A)
SWALLOW = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass\n"
LIMITS = Limits(wall_s=300, cell_s=2)
TEST = next(iter(LESSON.exercises.values())).tests[0]  # a stuck step must cost about cell_s + grace, far below wall_s


def graded(tmp_path, notebook, whole=False):
    path = tmp_path / NB
    path.write_text(json.dumps(notebook), encoding="utf-8")
    start = time.monotonic()
    result = grade_notebook(LESSON, path, "student", LIMITS)
    if whole:
        return result
    return {e.exercise: e for e in result.exercises}, time.monotonic() - start


def test_a_stuck_step_is_killed_and_the_rest_runs_without_it():
    steps = [Step("code", "a", "x = 1"), Step("code", "stuck", SWALLOW), Step("code", "b", "y = x + 1")]
    start = time.monotonic()
    job = run_steps(steps, LIMITS)
    elapsed = time.monotonic() - start
    assert job.stuck == ["stuck"]
    assert job.step("stuck").status == "timeout" and job.step("stuck").stuck
    assert job.step("b").status == "ok" and job.step("__done__") is not None
    assert not job.timed_out
    assert elapsed < 60, f"{elapsed:.0f} s: the stuck step held the job until the wall-clock limit"


def test_a_stuck_step_with_a_replacement_runs_as_the_replacement():
    steps = [Step("code", "a", SWALLOW), Step("code", "b", "y = x + 1")]
    job = run_steps(steps, LIMITS, replacements={"a": "x = 41"})
    assert job.stuck == ["a"]
    assert job.step("a").status == "timeout" and job.step("a").stuck  # it still counts as stuck
    assert job.step("b").status == "ok", job.lines  # what came after could use its definitions


SNOOP = """
import gc, linecache, sys
needle = "SECRET" + "_ANSWER = 41"  # built here: this cell's own text does not contain it
seen = [text for text in (''.join(v[2]) for v in list(linecache.cache.values()) if len(v) > 2) if needle in text]
for obj in gc.get_objects():
    if isinstance(obj, (list, tuple)) and any(isinstance(i, (list, tuple)) and len(i) == 3 and needle in str(i[2]) for i in obj[:50]):
        seen.append("payload")
frame = sys._getframe()
while frame is not None:
    if any(isinstance(v, (bytes, str)) and needle.encode() in (v if isinstance(v, bytes) else v.encode())
           for k, v in frame.f_locals.items() if k != "needle"):
        seen.append("frame")
    frame = frame.f_back
print("SEEN" if seen else "NOTHING", seen[:3])
assert not seen, seen
"""


def test_a_replacement_is_gone_before_the_next_cell_and_the_output_is_not_shown():
    steps = [Step("code", "a", SWALLOW), Step("code", "snoop", SNOOP)]
    job = run_steps(steps, LIMITS, replacements={"a": "SECRET_ANSWER = 41"})
    assert job.step("snoop").status == "ok", job.step("snoop")  # the course's answer could not be read
    assert "SECRET" not in job.output_tail and "not shown" in job.output_tail


def test_reruns_share_the_notebooks_wall_clock_limit():
    slow = [Step("code", f"slow-{i}", "import time\ntime.sleep(2.5)") for i in range(3)]
    steps = [*slow, Step("code", "stuck-1", SWALLOW), *slow, Step("code", "stuck-2", SWALLOW), Step("code", "b", "y = 1")]
    limits = Limits(wall_s=15, cell_s=3)
    start = time.monotonic()
    job = run_steps(steps, limits)
    elapsed = time.monotonic() - start
    assert elapsed < 25, f"{elapsed:.0f} s: every rerun got the whole wall-clock limit again"
    assert job.step("b") is None and job.timed_out  # what the time did not reach timed out


def test_a_step_that_swallows_its_alarm_is_killed_within_seconds_of_it():
    job = run_steps([Step("code", "loop", SWALLOW)], LIMITS)
    line = job.step("loop")
    assert line.stuck and line.swallowed, job.lines
    assert job.wall_s < LIMITS.cell_s + 3, f"{job.wall_s:.1f} s after an alarm due at {LIMITS.cell_s} s"


def test_one_long_uninterruptible_call_is_not_called_a_swallowed_alarm():
    # sum() over a range loops in C without checking for signals, so the alarm cannot fire
    # before it returns; the step is killed all the same, and not blamed on an `except:`
    job = run_steps([Step("code", "sum", "sum(range(10**12))\n"), Step("code", "b", "y = 2")], LIMITS)
    assert job.step("sum").stuck and not job.step("sum").swallowed, job.lines
    assert job.step("b").status == "ok"
    message = judge_test(TEST, job, job.step("sum")).message
    assert "could not be interrupted" in message and "except" not in message, message


def test_a_replacement_that_is_stuck_too_is_left_out():
    steps = [Step("code", "a", SWALLOW), Step("code", "b", "y = 2")]
    job = run_steps(steps, LIMITS, replacements={"a": SWALLOW})
    assert job.stuck == ["a"] and job.step("b").status == "ok"


@pytest.mark.slow
def test_a_stuck_mask_leaves_the_head_that_uses_it_gradable(tmp_path):
    """The head calls the notebook's apply_causal_mask: with the stuck mask replaced by the
    course's own answer on the rerun, the head is graded on its own merits."""
    head = ANSWERS["attention-head"].replace('scores.masked_fill(future, float("-inf"))', "apply_causal_mask(scores)")
    assert head != ANSWERS["attention-head"]
    notebook = with_answers(RELEASE, dict(ANSWERS, **{"causal-mask": SWALLOW, "attention-head": head}))
    exercises, _ = graded(tmp_path, notebook)
    assert exercises["causal-mask"].status == "timeout" and exercises["causal-mask"].score == 0
    assert exercises["attention-head"].status == "passed", [t.message for t in exercises["attention-head"].tests]


@pytest.mark.slow
def test_a_stuck_answer_costs_only_its_exercise(tmp_path):
    notebook = with_answers(RELEASE, dict(ANSWERS, **{"attention-head": SWALLOW}))
    exercises, elapsed = graded(tmp_path, notebook)
    assert exercises["causal-mask"].status == "passed"
    head = exercises["attention-head"]
    assert head.status == "timeout" and head.score == 0
    assert any("except BaseException" in t.message for t in head.tests), [t.message for t in head.tests]
    assert elapsed < 90, f"{elapsed:.0f} s"


@pytest.mark.slow
def test_a_stuck_extra_cell_costs_nothing_when_nothing_needs_it(tmp_path):
    notebook = with_answers(RELEASE, ANSWERS)
    extra = {"cell_type": "code", "metadata": {}, "source": SWALLOW, "outputs": [], "execution_count": None}
    cells = copy.deepcopy(notebook["cells"])
    at = next(i for i, c in enumerate(cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "causal-mask")
    notebook["cells"] = cells[: at + 1] + [extra] + cells[at + 1 :]
    start = time.monotonic()
    result = graded(tmp_path, notebook, whole=True)
    elapsed = time.monotonic() - start
    assert {e.exercise: e.status for e in result.exercises} == {"causal-mask": "passed", "attention-head": "passed"}
    assert elapsed < 90, f"{elapsed:.0f} s"
    assert "ran past its alarm and was killed" in result.note  # said, and listed for the instructor
    write_reports([result], tmp_path / "out")
    eyes = pd.read_csv(tmp_path / "out" / "needs_attention.csv")
    assert list(eyes.exercise) == ["(notebook)"] and "ran past" in eyes.message[0]


def test_a_course_cell_has_its_own_limit_and_the_message_says_it():
    # the graded cell "quick" may run 1 s, every other cell 30 s: its loop is killed about 1 s in,
    # and the message gives that limit; an ungraded cell keeps the lesson's limit
    limits = Limits(wall_s=300, cell_s=30, steps=(("quick", 1.0),))
    job = run_steps([Step("code", "quick", SWALLOW), Step("code", "b", "import time\ntime.sleep(1.5)")], limits)
    line = job.step("quick")
    assert line.stuck and line.limit_s == 1.0, job.lines
    assert job.step("b").status == "ok", "1.5 s is within the lesson's 30 s for an ungraded cell"
    assert job.wall_s < 10, f"{job.wall_s:.1f} s: the graded cell's own 1 s limit was not used"
    assert "its time limit of 1 s" in judge_test(TEST, job, line).message


def test_limits_from_json_keep_their_steps_and_stay_hashable():
    limits = Limits(**json.loads(json.dumps({"wall_s": 9, "cell_s": 3, "steps": [["a", 1.5]]})))
    assert limits.cell_limit("a") == 1.5 and limits.cell_limit("other") == 3
    assert hash(limits) == hash(Limits(wall_s=9, cell_s=3, steps=(("a", 1.5),)))
