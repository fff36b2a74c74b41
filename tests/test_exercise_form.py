"""Lessons 08 to 12 as lessons 01 to 06 are: points that follow the work, hints that climb, a
"predict, then run" question, and outputs with nothing a student should not have to read.

* Points: an exercise's heading states the points its two test cells give, the first cell's table
  states the same points and minutes, and the points follow the estimated minutes on the course's
  scale (about one point per five minutes, at least 2, within one point: lessons 01 to 07 hold it).
* Hints: three, in order (a nudge, the key idea, the plan); the key idea names no call (no
  ``torch.…`` and no code span that calls a function): the operations are hint 3's.
* A "Predict, then run" question: a code cell where the student writes ``my_prediction`` (left at
  ``None``), then a cell that computes the answer and prints the guess beside it.
* The run (slow): no output is an object's repr (``<… at 0x…>``) and nothing is written to stderr.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.course import SOLUTIONS, cell_source, lessons, nbgrader_meta

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [lesson for lesson in lessons(ROOT, SOLUTIONS) if lesson.assignment[:2] in ("08", "09", "10", "11", "12")]
IDS = [lesson.assignment for lesson in LESSONS]

HEADING = re.compile(r"^### Exercise (\d+) · .*? · (\d+) points? · about (\d+) minutes", re.M)
TABLE_ENTRY = re.compile(r"Exercise (\d+) · (\d+) points? · ~(\d+) min")
HINT = re.compile(r"<details><summary>Hint (\d) · ([^<]*)</summary>(.*?)</details>", re.S)
#: a code span that calls something (`torch.topk(...)`, `.scatter(`), or names a torch function
CALL = re.compile(r"`[^`]*\b[A-Za-z_][\w.]*\([^`]*`|\btorch\.\w+")
REPR = re.compile(r"<[\w.]+ (?:object )?at 0x[0-9a-f]+>")


def exercises(lesson) -> list[dict]:
    """Each exercise: its number, stated points and minutes, its hints, and its test cells' points."""
    found, current = [], None
    for cell in lesson.notebook["cells"]:
        source = cell_source(cell)
        if cell["cell_type"] == "markdown":
            for match in HEADING.finditer(source):
                current = {"n": int(match[1]), "points": int(match[2]), "minutes": int(match[3]),
                           "hints": HINT.findall(source[match.end():]), "tests": 0.0}
                found.append(current)
        meta = nbgrader_meta(cell)
        if meta.get("grade") and current is not None:
            current["tests"] += float(meta.get("points", 0))
    return found


def expected_points(minutes: int) -> int:
    return max(2, round(minutes / 5))


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_points_are_the_tests_points_the_tables_and_follow_the_minutes(lesson):
    found = exercises(lesson)
    assert found, "the lesson has exercises"
    table = {int(n): (int(p), int(m)) for n, p, m in TABLE_ENTRY.findall(cell_source(lesson.notebook["cells"][0]))}
    for ex in found:
        assert ex["tests"] == ex["points"], f"Exercise {ex['n']}: the heading says {ex['points']}, its tests give {ex['tests']:g}"
        assert table.get(ex["n"]) == (ex["points"], ex["minutes"]), f"Exercise {ex['n']}: the first cell's table says {table.get(ex['n'])}"
        assert abs(ex["points"] - expected_points(ex["minutes"])) <= 1, (
            f"Exercise {ex['n']}: {ex['points']} points for about {ex['minutes']} minutes; the course's scale gives "
            f"{expected_points(ex['minutes'])}")
    assert sorted(table) == [ex["n"] for ex in found], "the table lists every exercise once"


def test_the_scale_is_the_one_lessons_01_to_07_keep():
    """The rule above is not new: every exercise of the earlier lessons meets it."""
    earlier = [lesson for lesson in lessons(ROOT, SOLUTIONS) if lesson.assignment[:2] < "08"]
    assert earlier
    off = [(lesson.assignment, ex["n"], ex["points"], ex["minutes"]) for lesson in earlier for ex in exercises(lesson)
           if abs(ex["points"] - expected_points(ex["minutes"])) > 1]
    assert not off, off


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_hints_climb_and_the_key_idea_names_no_call(lesson):
    for ex in exercises(lesson):
        hints = ex["hints"][:3]
        assert [(int(n), title.strip()) for n, title, _ in hints] == [
            (1, "a nudge"), (2, "the key idea"), (3, "the plan, shape by shape")], f"Exercise {ex['n']}"
        idea = hints[1][2]
        assert not CALL.search(idea), f"Exercise {ex['n']}: hint 2 names an operation: {CALL.search(idea)[0]!r}"
        assert CALL.search(hints[2][2]) or "`" in hints[2][2], f"Exercise {ex['n']}: hint 3 gives the operations"


def test_the_call_rule_catches_what_it_must():
    assert CALL.search("the last of `torch.topk(logits, k)`") and CALL.search("use torch.cumsum here")
    assert CALL.search("then `.scatter(-1, order, mask)` it back")
    assert not CALL.search("the error function of `x`, `Φ(x)`, and `1/base`")


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_a_predict_then_run_question(lesson):
    cells = lesson.notebook["cells"]
    asks = [i for i, cell in enumerate(cells) if cell["cell_type"] == "markdown" and "Predict, then run" in cell_source(cell)]
    assert asks, "a markdown cell asks for a prediction"
    guess = next((i for i in range(asks[0] + 1, len(cells)) if cells[i]["cell_type"] == "code"), None)
    assert guess is not None and re.search(r"^my_prediction = .*None", cell_source(cells[guess]), re.M), \
        "the next code cell is where the student writes the guess, left at None"
    answer = next((i for i in range(guess + 1, len(cells)) if cells[i]["cell_type"] == "code"), None)
    assert answer is not None and "my_prediction" in cell_source(cells[answer]) and "print(" in cell_source(cells[answer]), \
        "the cell after it computes the answer and prints the guess beside it"
    assert not nbgrader_meta(cells[guess]).get("grade"), "the prediction is not graded"


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_no_output_is_an_object_repr_or_stderr(lesson, lesson_runs):
    found = []
    for cell in lesson_runs.one(lesson).cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
                if out.get("name") == "stderr":
                    found.append(f"{cell.get('id')}: stderr {text[:120]!r}")
            else:
                text = "".join(out.get("data", {}).get("text/plain", ""))
            if REPR.search(text):
                found.append(f"{cell.get('id')}: {REPR.search(text)[0]}")
    assert not found, "\n".join(found)


def test_the_repr_rule_catches_a_bare_styler():
    import pandas as pd

    assert REPR.search(repr(pd.DataFrame({"a": [1]}).style))
    assert not REPR.search("a 0x1f byte, a tensor([0.5])")
