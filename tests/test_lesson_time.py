"""Every lesson states the time it takes a student, and the statement follows the notebook: its
reading measured on the notebook, its exercises' estimates added up, its running time as the
"How long it runs" paragraph gives it (``autograder/lesson_time.py``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from autograder import lesson_time
from autograder.course import SOLUTIONS, lessons

ROOT = Path(__file__).resolve().parents[1]
LESSONS = lessons(ROOT, SOLUTIONS)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.assignment)
def test_the_first_cell_states_the_time_the_notebook_takes(lesson):
    found = lesson_time.problems(lesson.notebook)
    assert not found, f"{lesson.assignment}: the 'Your time' sentence of the first cell:\n" + "\n".join(found)


def _notebook(first: str, *cells: dict) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": first}, *cells]}


FIRST = """# Lesson 99

| step | what | you write |
|---|---|---|
| 1 | a thing | Exercise 1 · 2 points · ~15 min |
| 2 | another | Exercise 2 · 3 points · ~20 min |

{sentence}

**How long it runs.** The whole notebook runs in under a minute on two CPU cores.
"""
PROSE = {"cell_type": "markdown", "source": "word " * 1200}  # 10 minutes at 120 words a minute
GIVEN = {"cell_type": "code", "metadata": {}, "source": "x = 1\n" * 150}  # 10 minutes at 15 lines a minute
SOLUTION = {"cell_type": "code", "metadata": {"nbgrader": {"solution": True, "grade_id": "a"}},
            "source": "y = 2\n" * 600}


def test_reading_counts_prose_and_the_code_given_not_the_solutions():
    notebook = _notebook(FIRST.format(sentence=""), PROSE, GIVEN, SOLUTION)
    words_in_first = len(notebook["cells"][0]["source"].split())
    assert lesson_time.reading_minutes(notebook) == pytest.approx(20 + words_in_first / 120)
    assert lesson_time.exercise_minutes(notebook) == 35


def test_the_expected_sentence_holds_and_each_wrong_figure_is_named():
    blank = _notebook(FIRST.format(sentence=""), PROSE, GIVEN, SOLUTION)
    sentence = lesson_time.expected_sentence(blank)
    assert sentence == ("**Your time.** About 55 min: 20 min of reading, 35 min for the exercises and under a "
                        "minute of running.")
    good = _notebook(FIRST.format(sentence=sentence), PROSE, GIVEN, SOLUTION)
    assert lesson_time.problems(good) == []
    assert lesson_time.stated(good) == lesson_time.Stated(total=55, reading=20, exercises=35, run=1.0)

    more_exercise = copy.deepcopy(good)
    more_exercise["cells"][0]["source"] = more_exercise["cells"][0]["source"].replace("~20 min", "~40 min")
    assert any("add up to 55 min" in p for p in lesson_time.problems(more_exercise))

    longer = copy.deepcopy(good)
    longer["cells"].append({"cell_type": "markdown", "source": "word " * 2400})  # 20 more minutes
    assert any("min of reading" in p for p in lesson_time.problems(longer))

    slow = copy.deepcopy(good)
    slow["cells"][0]["source"] = slow["cells"][0]["source"].replace("in under a minute", "in under 3 minutes")
    assert any("running time" in p for p in lesson_time.problems(slow))

    missing = _notebook(FIRST.format(sentence=""), PROSE)
    assert "no sentence" in lesson_time.problems(missing)[0]


@pytest.mark.parametrize("minutes, words", [(50, "50 min"), (60, "1 h"), (85, "1 h 25 min"), (125, "2 h 5 min")])
def test_durations_read_back_as_written(minutes, words):
    assert lesson_time.duration(minutes) == words
    assert lesson_time.parse_duration(words) == minutes


def test_the_release_states_the_same_time_as_the_solution():
    for lesson in LESSONS:
        release = ROOT / "notebooks" / lesson.assignment / lesson.filename
        said = lesson_time.stated(json.loads(release.read_text(encoding="utf-8")))
        assert said == lesson_time.stated(lesson.notebook), lesson.assignment
