"""A demo class: one correct student, one who handed in the blank, realistic mistakes, and
submissions that break in every way a grader must survive.

The mistakes are the entries of the lessons' catalogues (``solutions/*/catalogue.toml``) that
name a ``demo`` student: edits of the solution's answer cells, so they follow the solution when it
changes. The test suite grades the same class and checks every row.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.catalogue import Mistake, load_catalogue, with_answers
from autograder.course import RELEASE, lessons


def demo_mistakes(root: Path) -> dict[str, dict[str, Mistake]]:
    """``{assignment: {student: mistake}}``: each mistake lives in one exercise and must cost
    exactly that exercise's points."""
    found: dict[str, dict[str, Mistake]] = {}
    for lesson in lessons(root):
        for mistake in load_catalogue(lesson).entries().values():
            if mistake.demo:
                found.setdefault(lesson.assignment, {})[mistake.demo] = mistake
    return found

# student -> what they handed in, for every assignment
SPECIAL = {
    "ada-correct": "solution",
    "ben-blank": "release",
    "kai-infinite-loop": "loop",
    "lea-raises": "raises",
    "max-not-a-notebook": "not-json",
    "noa-nothing-submitted": "absent",
}
#: the one lesson whose first answer loops forever in kai's hand-in (elsewhere kai hands in the
#: solution): a loop costs its cell's whole time limit of CPU, and one shows what every lesson
#: would (the timed-out exercise scores 0, the rest of the lesson is graded)
LOOP_LESSON = "03-self-attention"


def build_demo_class(root: Path, out: Path) -> Path:
    """Write the demo submissions in nbgrader's layout under ``out``; returns ``out``."""
    everyone = demo_mistakes(root)
    for lesson in lessons(root):
        release_path = root / RELEASE / lesson.assignment / lesson.filename
        release_nb = json.loads(release_path.read_text(encoding="utf-8"))
        catalogue = load_catalogue(lesson)
        full = lesson.solution_answers()
        students: dict[str, dict | str | None] = {}
        for student, kind in SPECIAL.items():
            if kind == "solution":
                students[student] = with_answers(release_nb, full)
            elif kind == "release":
                students[student] = release_nb
            elif kind == "loop" and lesson.assignment != LOOP_LESSON:
                students[student] = with_answers(release_nb, full)
            elif kind == "loop":
                first = next(iter(full))
                looping = full[first] + "\n\nwhile True:  # never ends\n    pass\n"
                students[student] = with_answers(release_nb, {**full, first: looping})
            elif kind == "raises":
                first = next(iter(full))
                broken = {**full, first: "raise RuntimeError('my code is broken')\n" + full[first]}
                students[student] = with_answers(release_nb, broken)
            elif kind == "not-json":
                students[student] = "this is not a notebook\n"
            else:
                students[student] = None
        for mistakes in everyone.values():  # who makes a mistake elsewhere gets this lesson right
            for student in mistakes:
                students[student] = with_answers(release_nb, full)
        for student, mistake in everyone.get(lesson.assignment, {}).items():
            students[student] = with_answers(release_nb, catalogue.answers(mistake))
        for student, content in students.items():
            if content is None:
                (out / student).mkdir(parents=True, exist_ok=True)
                continue
            target = out / student / lesson.assignment / lesson.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            text = content if isinstance(content, str) else json.dumps(content, indent=1, ensure_ascii=False)
            target.write_text(text, encoding="utf-8")
    return out
