"""Nothing a student reads is unfinished: no `?` where a number belongs, no "to be measured", no
TODO, and no empty "What we measured", in any markdown cell of the solutions or of the release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autograder.course import RELEASE, SOLUTIONS, cell_source, lessons, stated_run_time_s

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [(folder, lesson) for folder in (SOLUTIONS, RELEASE) for lesson in lessons(ROOT, folder)]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# a question mark that stands alone: not the end of a question (a word before it), not inside a word
LONE_QUESTION_MARK = re.compile(r"(?:^|(?<=[\s(*:=~≈]))\?+(?=$|[\s)*,.;:%/]|\s*(?:s|ms|min|minutes|%)\b)", re.M)
WORDS = [
    (re.compile(r"\bto be (measured|computed|filled in|determined|confirmed)\b", re.I), "an unfinished promise"),
    (re.compile(r"\b(TODO|TBD|FIXME|XXX)\b"), "a to-do marker"),
]
MEASURED = re.compile(r"what we measured", re.I)
MIN_LETTERS_AFTER_MEASURED = 20


def prose(markdown: str) -> str:
    """The text a reader reads as prose: fenced code blocks removed, inline code as one word."""
    return CODE_SPAN.sub("code", FENCE.sub("", markdown))


def placeholders(markdown: str) -> list[str]:
    """Every sign of unfinished prose in one markdown cell, each described with its context."""
    text = prose(markdown)
    found = []
    for match in LONE_QUESTION_MARK.finditer(text):
        context = text[max(0, match.start() - 40) : match.end() + 40].replace("\n", " ")
        found.append(f"a '?' where a number belongs: …{context}…")
    for pattern, what in WORDS:
        for match in pattern.finditer(text):
            found.append(f"{what}: {match.group(0)!r}")
    for match in MEASURED.finditer(text):
        after = re.split(r"^#+ ", text[match.end() :], maxsplit=1, flags=re.M)[0]
        if len(re.findall(r"[A-Za-z]", after)) < MIN_LETTERS_AFTER_MEASURED:
            found.append(f"an empty 'What we measured': {after.strip()[:40]!r}")
    return found


@pytest.mark.parametrize(
    "text",
    [
        "It takes about ? minutes on a laptop CPU (measured: ? on two cores).",
        "The loss falls from ? to about ? and ends at **?**.",
        "? is the spread of a 200-batch estimate.",
        "mostly invented words (?)",
        "The ladder's result (to be measured).",
        "TODO: rerun the ladder",
        "This needs a figure. FIXME",
        "**What we measured**: ?",
        "## What we measured\n\n?\n",
        "The spread is ≈ ? after training.",
        "It took ?s.",
    ],
)
def test_the_rule_finds_a_placeholder(text):
    assert placeholders(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Which ones matter? Train a ladder and see.",
        "Why divide by √hs? Because the variance grows with hs.",
        "`x[?]` is code, and so is\n```python\nprint('?')\n```\n",
        "**What we measured** (full setting): the table above, computed by the cell before.",
        "Is it 1.80? On another machine, expect 1.78 to 1.83.",
        "See the [docs](https://example.org/page?x=1).",
    ],
)
def test_the_rule_accepts_finished_prose(text):
    assert not placeholders(text), placeholders(text)


@pytest.mark.parametrize("folder, lesson", NOTEBOOKS, ids=[f"{f}/{lesson.assignment}" for f, lesson in NOTEBOOKS])
def test_no_placeholder_ships(folder, lesson):
    problems = []
    for cell in lesson.notebook["cells"]:
        if cell["cell_type"] == "markdown":
            problems += [f"cell {cell.get('id')}: {p}" for p in placeholders(cell_source(cell))]
    assert not problems, f"{folder}/{lesson.assignment}:\n" + "\n".join(problems)


@pytest.mark.parametrize("folder, lesson", [n for n in NOTEBOOKS if n[0] == SOLUTIONS], ids=lambda v: getattr(v, "assignment", v))
def test_the_first_cell_states_how_long_the_lesson_runs(folder, lesson):
    # benchmarks/lesson_times.py runs every lesson in its full setting and compares with this
    assert stated_run_time_s(lesson.notebook), (
        f"{lesson.assignment}: the first markdown cell must say how long the full setting runs "
        "'on two CPU cores' (e.g. 'in under a minute on two CPU cores')"
    )


@pytest.mark.parametrize("folder, lesson", [n for n in NOTEBOOKS if n[0] == SOLUTIONS], ids=lambda v: getattr(v, "assignment", v))
def test_a_lesson_with_a_quick_setting_asks_helpers_for_it(folder, lesson):
    # quick_setting() is on under TRANSFORMER_COURSE_QUICK=1 (CI, the grader) and while nbgrader's Validate
    # runs the notebook; reading the variable alone would run minutes of training under Validate's cell limit
    cells = [c for c in lesson.notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    code = "\n".join(cell_source(c) for c in lesson.notebook["cells"] if c["cell_type"] == "code")
    if not cells and "QUICK" not in code:
        return
    assert len(cells) == 1, f"{lesson.assignment}: one cell tagged 'parameters' holds the quick setting"
    source = cell_source(cells[0])
    assert "QUICK = quick_setting()" in source, f"{lesson.assignment}: QUICK = quick_setting() in the parameters cell"
    assert "TRANSFORMER_COURSE_QUICK" in source and "Validate" in source, (
        f"{lesson.assignment}: the parameters cell's comment says when the quick setting is on")
    assert 'os.environ.get("TRANSFORMER_COURSE_QUICK")' not in code
