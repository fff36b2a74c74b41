"""How long a lesson takes a student: reading, the exercises, running, as each first cell states it.

Every lesson's first markdown cell carries one sentence of the form::

    **Your time.** About 1 h 25 min: 45 min of reading, 35 min for the exercises and under a
    minute of running.

The exercise time is the sum of the estimates in the same cell's table (``~15 min``); the reading
time is measured on the notebook at ``WORDS_PER_MIN`` words of prose and ``CODE_LINES_PER_MIN``
lines of the code the lesson gives (a student writes the solutions, so those are not read); the
running time is the full setting's, which the cell's "How long it runs" paragraph states and
``benchmarks/lesson_times.py`` checks. README's lesson table repeats the total.
``tests/test_lesson_time.py`` compares all of them, so an edit that makes a lesson longer makes
its stated time follow.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autograder.course import cell_source, nbgrader_meta, stated_run_time_s

WORDS_PER_MIN = 120  # technical prose with formulas, read to be understood, not skimmed
CODE_LINES_PER_MIN = 15  # code read line by line, its shapes followed
#: a stated reading time may differ from the measured one by this much before it must be restated
READING_SLACK = 0.15

EXERCISE_ESTIMATE = re.compile(r"Exercise \d+[^|\n]*?~(\d+) min")
YOUR_TIME = re.compile(
    r"\*\*Your time\.\*\* About (?P<total>[^:]+): (?P<reading>[^,]+) of reading, (?P<exercises>.+?) for the "
    r"exercises and (?P<run>.+?) of running\."
)
DURATION = re.compile(r"^(?:(?P<h>\d+) h)?\s*(?:(?P<m>\d+) min)?$")


@dataclass(frozen=True)
class Stated:
    """The figures of a first cell's "Your time" sentence, in minutes (run: the stated upper bound)."""

    total: int
    reading: int
    exercises: int
    run: float


def first_cell(notebook: dict) -> str:
    first = next((c for c in notebook["cells"] if c["cell_type"] == "markdown"), None)
    return cell_source(first) if first else ""


def exercise_minutes(notebook: dict) -> int:
    """The sum of the exercise estimates in the first cell's table."""
    return sum(int(m) for m in EXERCISE_ESTIMATE.findall(first_cell(notebook)))


def reading_minutes(notebook: dict) -> float:
    """Minutes to read the notebook: its markdown words and the lines of code it gives (not the
    solutions a student writes), at the rates above."""
    words = lines = 0
    for cell in notebook["cells"]:
        source = cell_source(cell)
        if cell["cell_type"] == "markdown":
            words += len(source.split())
        elif cell["cell_type"] == "code" and not nbgrader_meta(cell).get("solution"):
            lines += sum(1 for line in source.splitlines() if line.strip())
    return words / WORDS_PER_MIN + lines / CODE_LINES_PER_MIN


def rounded(minutes: float, step: int = 5) -> int:
    return max(step, step * round(minutes / step))


def duration(minutes: int) -> str:
    """``50 min``, ``1 h``, ``1 h 25 min``."""
    hours, rest = divmod(minutes, 60)
    return " ".join(part for part in (f"{hours} h" if hours else "", f"{rest} min" if rest else "") if part)


def parse_duration(text: str) -> int | None:
    match = DURATION.match(text.strip())
    if not match or not (match["h"] or match["m"]):
        return None
    return 60 * int(match["h"] or 0) + int(match["m"] or 0)


def run_words(seconds: float) -> str:
    return "under a minute" if seconds <= 60 else f"up to {math.ceil(seconds / 60)} minutes"


def expected_sentence(notebook: dict) -> str:
    """The sentence the first cell should carry, from the notebook as it is now."""
    reading, exercises = rounded(reading_minutes(notebook)), exercise_minutes(notebook)
    run_s = stated_run_time_s(notebook) or 0.0
    total = rounded(reading + exercises + run_s / 60)
    return (f"**Your time.** About {duration(total)}: {duration(reading)} of reading, {duration(exercises)} "
            f"for the exercises and {run_words(run_s)} of running.")


def stated(notebook: dict) -> Stated | None:
    """The figures the first cell states, or None when it has no "Your time" sentence."""
    match = YOUR_TIME.search(first_cell(notebook))
    if not match:
        return None
    values = [parse_duration(match[k]) for k in ("total", "reading", "exercises")]
    if None in values:
        return None
    run = match["run"].strip()
    limit = re.fullmatch(r"up to (\d+) minutes", run)
    run_min = 1.0 if run == "under a minute" else float(limit[1]) if limit else math.nan
    return Stated(*values, run=run_min)


def problems(notebook: dict) -> list[str]:
    """What disagrees between a first cell's "Your time" sentence and the notebook; empty when it holds."""
    said = stated(notebook)
    want = expected_sentence(notebook)
    if said is None:
        return [f"the first cell has no sentence of the form {want!r}"]
    found = []
    measured = reading_minutes(notebook)
    if abs(said.reading - measured) > max(5.0, READING_SLACK * measured):
        found.append(f"it states {said.reading} min of reading; the notebook measures {measured:.0f} min")
    if said.exercises != exercise_minutes(notebook):
        found.append(f"it states {said.exercises} min for the exercises; its table's estimates add up to "
                     f"{exercise_minutes(notebook)} min")
    run_s = stated_run_time_s(notebook) or 0.0
    if said.run * 60 < run_s or math.isnan(said.run):
        found.append(f"its running time disagrees with the 'How long it runs' paragraph ({run_words(run_s)})")
    if abs(said.total - (said.reading + said.exercises + said.run)) > 5:
        found.append(f"its total, {duration(said.total)}, is not reading + exercises + running")
    if found:
        found.append(f"for example: {want}")
    return found
