"""Formgrader on the grades of ``transformer-course grade --gradebook``, in a real browser.

A copy of the course with two submissions of lesson 03 in nbgrader's layout (``timestamp.txt`` as
``collect`` writes it): ada's right, kai's first answer loops forever (``timeout``: flagged for a
manual grade). It is graded by the real command, then ``transformer-course lab --instructor``
serves it. Every Formgrader view answers 200 and shows our scores; on kai's page (opened through
the notebook's list of submissions, as an instructor does) a manual score and a comment are set in
the page's own boxes; a regrade keeps both, the page shows them again, and ``nbgrader export``
counts the manual score. Slow (a grading run and a lab); skipped without Playwright or Chromium
locally, failed in CI (see test_browser.py).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from jupyter_env import ROOT, copy_course, this_python_first
from test_labs_browser import Lab, http, open_lab, screenshot_on_failure, start_lab

from autograder.catalogue import with_answers
from autograder.course import RELEASE, lessons

pytestmark = pytest.mark.slow

ASSIGNMENT = "03-self-attention"
LESSON = next(lesson for lesson in lessons(ROOT) if lesson.assignment == ASSIGNMENT)
FLAGGED_TEST = "causal-mask-check"  # kai's first exercise: its test cell gets the manual score
ANSWER = "causal-mask"  # ... and its answer cell the comment
MANUAL_SCORE, COMMENT = 0.5, "The mask is right; only the loop after it never ends."


def grade(course: Path) -> subprocess.CompletedProcess:
    """README's command, run at the course root (limits given: none measured)."""
    env = dict(os.environ, TRANSFORMER_COURSE_ROOT=str(course), PATH=this_python_first())
    done = subprocess.run(
        [sys.executable, "-m", "autograder.cli", "grade", "submitted/", "--out", "graded/", "--assignment", ASSIGNMENT,
         "--gradebook", "sqlite:///gradebook.db", "--timeout", "180", "--cell-timeout", "10", "--jobs", "2"],
        cwd=course, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def graded_lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("formgrader")
    course = tmp / "course"
    copy_course(course)
    release = json.loads((ROOT / RELEASE / ASSIGNMENT / LESSON.filename).read_text(encoding="utf-8"))
    answers = LESSON.solution_answers()
    looping = {**answers, ANSWER: answers[ANSWER] + "\n\nwhile True:  # never ends\n    pass\n"}
    for student, notebook in (("ada", with_answers(release, answers)), ("kai", with_answers(release, looping))):
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / LESSON.filename).write_text(json.dumps(notebook), encoding="utf-8")
        (folder / "timestamp.txt").write_text("2026-12-10 12:00:00.000000 UTC\n", encoding="utf-8")
    grade(course)
    for lab in start_lab(tmp, ["--instructor"], course, by_script=True):
        lab.course = course
        yield lab


def api(lab: Lab, path: str):
    status, text = http(lab, path)
    assert status == 200, (path, status, text[:500])
    return json.loads(text)


def ready(page) -> None:
    """Wait until the page's script has fetched the grades and comments and bound their boxes
    (it sets their placeholders: the auto score, the auto comment); typing earlier is not saved."""
    page.wait_for_function(f"""() => {{
        const score = document.querySelector('input.score#{FLAGGED_TEST}');
        const comment = document.querySelector('textarea.comment#{ANSWER}-comment');
        return score && comment && score.placeholder !== '' && comment.placeholder !== '';
    }}""", timeout=60_000)


def wait_for(check, what: str, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_formgrader_shows_our_grades_and_keeps_a_manual_grade_through_a_regrade(page, graded_lab, tmp_path):
    lab = graded_lab
    try:
        formgrader_checks(page, lab, tmp_path)
    except Exception:
        screenshot_on_failure(page, lab, tmp_path, "formgrader")
        raise


def formgrader_checks(page, lab: Lab, tmp_path: Path) -> None:
    # every view answers, and the API behind them has our grades
    for view in ("/formgrader/manage_assignments", f"/formgrader/manage_submissions/{ASSIGNMENT}",
                 "/formgrader/gradebook", f"/formgrader/gradebook/{ASSIGNMENT}",
                 f"/formgrader/gradebook/{ASSIGNMENT}/{LESSON.name}", "/formgrader/manage_students",
                 "/formgrader/manage_students/kai", f"/formgrader/manage_students/kai/{ASSIGNMENT}"):
        assert http(lab, view)[0] == 200, view
    submissions = {s["student"]: s for s in api(lab, f"/formgrader/api/submissions/{ASSIGNMENT}")}
    assert {s: (sub["autograded"], sub["timestamp"]) for s, sub in submissions.items()} == {
        "ada": (True, "2026-12-10T12:00:00"), "kai": (True, "2026-12-10T12:00:00")}
    assert submissions["ada"]["score"] == LESSON.max_score and not submissions["ada"]["needs_manual_grade"]
    assert submissions["kai"]["needs_manual_grade"]
    notebooks = {n["student"]: n for n in api(lab, f"/formgrader/api/submitted_notebooks/{ASSIGNMENT}/{LESSON.name}")}
    assert sorted(notebooks) == ["ada", "kai"]
    kai = notebooks["kai"]["id"]
    status, html = http(lab, f"/formgrader/submissions/{kai}/")
    assert status == 200 and "timeout" in html and FLAGGED_TEST in html, html[:500]

    # the instructor opens kai's page from the notebook's list of submissions
    open_lab(page, lab)  # signs the browser in
    page.goto(f"{lab.url}/formgrader/gradebook/{ASSIGNMENT}/{LESSON.name}")
    link = page.locator(f'a[href$="/formgrader/submissions/{kai}"]:visible').first  # "Submission #N": names hidden
    link.wait_for(state="visible", timeout=60_000)
    link.click()
    score = page.locator(f"input.score#{FLAGGED_TEST}")
    comment = page.locator(f"textarea.comment#{ANSWER}-comment")
    score.wait_for(state="visible", timeout=60_000)
    ready(page)
    assert page.get_by_text("timeout: ").count() > 0, "our message is the test cell's output"
    assert score.get_attribute("placeholder") == "0", "our auto score"
    assert comment.get_attribute("placeholder").startswith("[timeout]"), "our status is the answer's comment"
    score.fill(str(MANUAL_SCORE))
    score.press("Tab")
    comment.fill(COMMENT)
    comment.press("Tab")

    def saved() -> bool:
        grades = {g["name"]: g for g in api(lab, f"/formgrader/api/grades?submission_id={kai}")}
        comments = {c["name"]: c for c in api(lab, f"/formgrader/api/comments?submission_id={kai}")}
        return grades[FLAGGED_TEST]["manual_score"] == MANUAL_SCORE and comments[ANSWER]["manual_comment"] == COMMENT

    wait_for(saved, "Formgrader saved the manual score and the comment")
    page.screenshot(path=str(tmp_path / "formgrader-manual-grade.png"))

    # a regrade of the unchanged class keeps them, and the page shows them again
    grade(lab.course)
    assert saved(), "the regrade kept the manual score and the comment"
    page.reload()
    score.wait_for(state="visible", timeout=60_000)
    ready(page)
    wait_for(lambda: score.input_value() == str(MANUAL_SCORE) and comment.input_value() == COMMENT,
             "the page shows the manual score and the comment after the regrade")

    # nbgrader export counts the manual score
    env = dict(os.environ, PATH=this_python_first())
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--log-level=WARN"], cwd=lab.course, env=env,
                   check=True, capture_output=True)
    exported = pd.read_csv(lab.course / "grades.csv").set_index("student_id")["score"]
    ours = pd.read_csv(lab.course / "graded" / "grades.csv").groupby("student_id")["score"].sum()
    assert exported["kai"] == ours["kai"] + MANUAL_SCORE, (exported["kai"], ours["kai"])
    assert exported["ada"] == ours["ada"] == LESSON.max_score
