"""Shared tools for the lesson tests: grade a lesson's catalogue (``solutions/*/catalogue.toml``,
read by ``autograder/catalogue.py``) and check every row.

A *mistake* is a list of ``(old, new)`` text edits applied to one exercise's solution cell; an
*alternative* is a full, differently written, correct answer. Both become notebooks in
nbgrader's layout and go through the real grader, exactly as a class's submissions would.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from autograder.batch import grade_class
from autograder.catalogue import Catalogue, load_catalogue, with_answers
from autograder.course import RELEASE, cell_source, load_lesson, nbgrader_meta
from autograder.protocol import Limits

ROOT = Path(__file__).resolve().parents[1]
# no repair runs (autograder/repair.py) while a catalogue is graded: its checks' own messages are
# what the catalogue's words test, and a second run per mistake would double the suite's time;
# tests/test_repair.py grades with them
LIMITS = Limits(wall_s=300, cell_s=30, edits=0)


@functools.cache
def lesson(assignment: str):
    (path,) = sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))
    return load_lesson(path, assignment)


@functools.cache
def catalogue(assignment: str) -> Catalogue:
    """The lesson's ``solutions/<assignment>/catalogue.toml``."""
    return load_catalogue(lesson(assignment))


def solution_answers(assignment: str) -> dict[str, str]:
    """The solution's answer cells, markers removed, by grade_id."""
    return lesson(assignment).solution_answers()


def grade_submissions(assignment: str, submissions: dict[str, dict[str, str]], tmp: Path, jobs: int = 2,
                      limits: Limits = LIMITS):
    """Grade ``{student: {grade_id: answer source}}`` against the release; returns the gradebook."""
    les = lesson(assignment)
    release = json.loads((ROOT / RELEASE / assignment / les.filename).read_text(encoding="utf-8"))
    submitted = tmp / "submitted"
    for student, answers in submissions.items():
        target = submitted / student / assignment / les.filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(with_answers(release, answers)), encoding="utf-8")
    return grade_class(ROOT, submitted, tmp / "graded", jobs=jobs, limits=limits, only=[assignment], progress=False)


def row(frame, student: str, exercise: str):
    (match,) = frame[(frame.student_id == student) & (frame.exercise == exercise)].itertuples()
    return match


def assert_costs_only_its_exercise(graded, student: str, exercise: str, words: str,
                                   lost: float | None = None) -> None:
    """The one rule of every lesson's catalogue: a mistake costs its own exercise and nothing else.

    ``student``'s row for ``exercise`` is ``failed``, names the mistake (``words`` in its message)
    and lost ``lost`` points (``None``: all of them); every other exercise of the lesson has a row,
    full marks and status ``passed``. A mistake whose consequence reaches another exercise (a wrong
    mask that breaks the head, a wrong LayerNorm that breaks the block) fails here.
    """
    rows = {r.exercise: r for r in graded[graded.student_id == student].itertuples()}
    assignments = set(graded[graded.student_id == student].assignment)
    assert len(assignments) == 1, f"{student}: graded for {sorted(assignments)}"
    expected = set(lesson(assignments.pop()).exercises)
    assert set(rows) == expected, f"{student}: graded exercises {sorted(rows)}, the lesson has {sorted(expected)}"
    assert exercise in rows, f"{exercise} is not an exercise of this lesson"
    own = rows[exercise]
    kept = 0 if lost is None else own.max_score - lost
    assert (own.score, own.status) == (kept, "failed"), (exercise, own.score, own.status, own.message)
    assert words in own.message, own.message
    others = {name: (r.score, r.max_score, r.status, r.message) for name, r in rows.items()
              if name != exercise and (r.score, r.status) != (r.max_score, "passed")}
    assert not others, f"{student}: a mistake in {exercise} also cost {others}"


# ---------------------------------------------------------------------------------------------
# The standard tests of a lesson's catalogue, written once


class CatalogueTests:
    """Subclass in a lesson's test module with ``catalogue = catalogue(assignment)``: its
    submissions are graded once (by the real grader), then one test per mistake, hidden-only
    mistake and alternative (``conftest.pytest_generate_tests`` spreads the names)."""

    catalogue: Catalogue

    @pytest.fixture(scope="class")
    def graded(self, tmp_path_factory):
        return grade_submissions(self.catalogue.assignment, self.catalogue.submissions(),
                                 tmp_path_factory.mktemp(self.catalogue.assignment[:2]))

    def test_every_must_in_an_exercise_is_checked(self):
        """Each "must" / "do not" sentence of an exercise's task names a requirement, and a
        catalogued mistake that breaks it (which the slow tests prove is caught and named)."""
        entries = self.catalogue.entries()
        stated = requirement_sentences(self.catalogue.assignment)
        for exercise, sentences in stated.items():
            declared = self.catalogue.requirements.get(exercise, {})
            for sentence in sentences:
                keys = [k for k in declared if k.lower() in sentence.lower()]
                assert keys, f"{exercise}: no requirement declared for {sentence!r}"
            for key, names in declared.items():
                assert any(key.lower() in s.lower() for s in sentences), f"{exercise}: {key!r} is in no 'must' sentence"
                names = [names] if isinstance(names, str) else names
                assert names, f"{exercise}: {key!r} has no mistake behind it"
                for name in names:
                    assert name in entries and entries[name].exercise == exercise, f"{exercise}: {name!r} is not its mistake"
        assert set(self.catalogue.requirements) <= set(stated), "requirements of exercises that state none"

    def test_catalogue_names_at_least_three_mistakes_per_exercise(self):
        for exercise in self.catalogue.lesson.exercises:
            assert sum(m.exercise == exercise for m in self.catalogue.mistakes.values()) >= 3, exercise

    def test_every_exercise_has_a_correct_alternative(self):
        for exercise in self.catalogue.lesson.exercises:
            assert any(exercise in answers for answers in self.catalogue.alternatives.values()), exercise

    @pytest.mark.slow
    def test_solution_gets_full_marks(self, graded):
        for r in graded[graded.student_id == "correct"].itertuples():
            assert (r.score, r.status) == (r.max_score, "passed"), (r.exercise, r.message)

    @pytest.mark.slow
    def test_mistake_loses_exactly_its_exercise(self, graded, mistake):
        m = self.catalogue.mistakes[mistake]
        assert_costs_only_its_exercise(graded, mistake, m.exercise, m.feedback_says)

    @pytest.mark.slow
    def test_hidden_only_mistake_loses_the_hidden_points(self, graded, hidden_only):
        m = self.catalogue.hidden_only[hidden_only]
        hidden = sum(t.points for t in self.catalogue.lesson.exercises[m.exercise].tests if t.hidden)
        assert_costs_only_its_exercise(graded, hidden_only, m.exercise, m.feedback_says, lost=hidden)

    @pytest.mark.slow
    def test_alternative_correct_answers_get_full_marks(self, graded, alternative):
        for exercise in self.catalogue.alternatives[alternative]:
            r = row(graded, alternative, exercise)
            assert (r.score, r.status) == (r.max_score, "passed"), r.message


OBLIGATION = re.compile(r"\b(must|do not|don't)\b", re.I)


def requirement_sentences(assignment: str) -> dict[str, list[str]]:
    """``{exercise: [sentences of its task that say "must" or "do not"]}``: the markdown from
    the exercise's heading to its answer cell, hints left out."""
    found: dict[str, list[str]] = {}
    text = None
    for cell in lesson(assignment).notebook["cells"]:
        source = cell_source(cell)
        if cell["cell_type"] == "markdown" and "### Exercise" in source:
            text = re.sub(r"<details>.*?</details>", "", source, flags=re.S)
        elif nbgrader_meta(cell).get("solution") and text is not None:
            sentences = re.split(r"(?<=[.!?:])\s+|\n\s*[-*] |\n\n", text)
            found[nbgrader_meta(cell)["grade_id"]] = [
                " ".join(s.split()) for s in sentences if OBLIGATION.search(s)
            ]
            text = None
    return {k: v for k, v in found.items() if v}


def generate_catalogue_tests(metafunc) -> None:
    """Parametrize ``CatalogueTests``' tests by the names in the class's catalogue."""
    catalogue = getattr(metafunc.cls, "catalogue", None)
    if not isinstance(catalogue, Catalogue):
        return
    for argument, names in (("mistake", catalogue.mistakes), ("hidden_only", catalogue.hidden_only),
                            ("alternative", catalogue.alternatives)):
        if argument in metafunc.fixturenames:
            if not names:  # shown as one skipped test that says why, not silently absent
                metafunc.parametrize(argument, [pytest.param(None, marks=pytest.mark.skip(
                    reason=f"{catalogue.assignment}'s catalogue has no {argument.replace('_', '-')} entry"))])
                continue
            metafunc.parametrize(argument, sorted(names))
