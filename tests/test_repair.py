"""Verified repairs end to end (``autograder/repair.py``): the grader runs a failing answer again with
one change at a time and says a change only when it passes every test of the exercise; a mistake no
single change undoes gets no such sentence, a correct notebook no second run, and a variant that
loops for ever costs seconds, not the notebook's limit."""

from __future__ import annotations

import dataclasses

import pytest
from harness import LIMITS, grade_submissions, row, solution_answers

LESSON = "02-language-models"
REPAIRED = "Checked by running your code again with one change"
ON = dataclasses.replace(LIMITS, edits=24)  # the default of a real grading run


def answer(old: str, new: str, gid: str = "tied-lm") -> dict[str, str]:
    answers = solution_answers(LESSON)
    assert answers[gid].count(old) == 1, old
    return {**answers, gid: answers[gid].replace(old, new)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tie = "        if tie_weights:\n"
    assert solution_answers(LESSON)["tied-lm"].count(tie) == 1
    students = {
        "inverted": answer(tie, "        if not tie_weights:\n"),
        "copied": answer("self.lm_head.weight = self.word_to_embedding.weight",
                         "self.lm_head.weight = nn.Parameter(self.word_to_embedding.weight.clone())"),
        # the tie inverted, after a loop that a variant (its condition negated) makes run for ever
        "forever": answer(tie, "        while tie_weights is None:\n            pass\n        if not tie_weights:\n"),
        "correct": solution_answers(LESSON),
    }
    with_repair = grade_submissions(LESSON, students, tmp_path_factory.mktemp("on"), limits=ON)
    without = grade_submissions(LESSON, {"inverted": students["inverted"]}, tmp_path_factory.mktemp("off"),
                                limits=dataclasses.replace(ON, edits=0))
    return with_repair, without


@pytest.mark.slow
def test_the_change_that_passes_every_test_is_said_with_its_line(graded):
    message = row(graded[0], "inverted", "tied-lm").message
    assert f"{REPAIRED}: with `not tie_weights` (line" in message and "as `tie_weights`, it passes this exercise's visible and hidden tests" in message
    assert row(graded[0], "inverted", "tied-lm").score == 0  # the grade is the grade: the sentence only explains it


@pytest.mark.slow
def test_no_sentence_where_no_single_change_passes_or_nothing_failed(graded):
    assert REPAIRED not in row(graded[0], "copied", "tied-lm").message
    frame = graded[0]
    assert (frame[frame.student_id == "correct"].status == "passed").all()


@pytest.mark.slow
def test_no_repair_is_tried_when_the_limits_say_none(graded):
    assert REPAIRED not in row(graded[1], "inverted", "tied-lm").message


@pytest.mark.slow
def test_a_variant_that_runs_for_ever_is_stopped_and_the_rest_are_tried(graded):
    forever = row(graded[0], "forever", "tied-lm")
    assert forever.status == "failed" and "as `tie_weights`, it passes this exercise's visible and hidden tests" in forever.message
