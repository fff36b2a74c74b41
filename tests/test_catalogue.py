"""The lessons' catalogues (``solutions/*/catalogue.toml``), read by ``autograder/catalogue.py``:
a toy one, each way one can be wrong, and every real one (all in seconds: nothing is graded here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_units import toy_notebook
from traitlets.config import Config

from autograder.catalogue import FILENAME, CatalogueError, load_catalogue
from autograder.course import RELEASE, lessons, load_lesson
from autograder.demo import demo_mistakes
from autograder.nbgrader_settings import configure
from autograder.release import find_leaks

ROOT = Path(__file__).resolve().parents[1]

TOY = """
[mistakes.triples]
exercise = "double"
feedback_says = "three times"
edits = [["return 2 * x", "return 3 * x"]]
demo = "tom-triples"

[hidden_only.in-place]
exercise = "double"
feedback_says = "in place"
edits = [["return 2 * x", "return x.mul_(2)"]]

[alternatives.added]
double = '''

def double(x):
    return x + x
'''

[requirements.double]
"must not change x" = "in-place"
"""


def toy_lesson(tmp_path: Path, catalogue: str | None = TOY):
    path = tmp_path / "solutions" / "99-toy" / "99-toy.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(toy_notebook()), encoding="utf-8")
    if catalogue is not None:
        (path.parent / FILENAME).write_text(catalogue, encoding="utf-8")
    return load_lesson(path, "99-toy")


def test_a_catalogue_is_read_and_builds_each_submission(tmp_path):
    catalogue = load_catalogue(toy_lesson(tmp_path))
    triples = catalogue.mistakes["triples"]
    assert (triples.exercise, triples.feedback_says, triples.demo, triples.hidden_only) == (
        "double", "three times", "tom-triples", False)
    assert catalogue.hidden_only["in-place"].hidden_only
    subs = catalogue.submissions()
    assert set(subs) == {"triples", "in-place", "added", "correct"}
    assert "return 3 * x  # the whole answer" in subs["triples"]["double"] and "###" not in subs["triples"]["double"]
    assert subs["added"]["double"] == "def double(x):\n    return x + x\n"
    assert "return 2 * x" in subs["correct"]["double"]
    assert catalogue.requirements == {"double": {"must not change x": ["in-place"]}}


def test_a_lesson_without_a_catalogue_has_an_empty_one(tmp_path):
    catalogue = load_catalogue(toy_lesson(tmp_path, None))
    assert catalogue.entries() == {} and catalogue.alternatives == {}


@pytest.mark.parametrize("text,words", [
    (TOY.replace('"return 2 * x", "return 3 * x"', '"return 4 * x", "return 3 * x"'), "triples: the edit expects 'return 4 * x'"),
    (TOY.replace('exercise = "double"', 'exercise = "triple"', 1), "'triple' is not an exercise"),
    (TOY.replace('feedback_says = "three times"\n', ""), "needs exercise, feedback_says and edits"),
    (TOY.replace('demo = "tom-triples"', 'student = "tom"'), "unknown keys: ['student']"),
    (TOY.replace("[alternatives.added]", "[alternative.added]"), "unknown tables"),
    (TOY.replace("[hidden_only.in-place]", "[hidden_only.triples]"), "both mistakes and hidden_only"),
    (TOY.replace('edits = [["return 2 * x", "return 3 * x"]]', 'edits = ["return 2 * x", "return 3 * x"]'), "[old, new]"),
    (TOY.replace('demo = "tom-triples"', 'also.double = [["2", "3"]]'), "not in `also`"),
    (TOY.replace('"must not change x" = "in-place"', '"must not change x" = 3'), "names of mistakes"),
    (TOY.replace('feedback_says = "three times"', 'feedback_says = ""'), "feedback_says is not empty"),
])
def test_a_catalogue_that_does_not_fit_its_lesson_is_refused_with_the_reason(tmp_path, text, words):
    with pytest.raises(CatalogueError) as error:
        load_catalogue(toy_lesson(tmp_path, text)).submissions()
    assert words in str(error.value), error.value


@pytest.mark.parametrize("lesson", lessons(ROOT), ids=lambda le: le.assignment)
def test_every_lessons_catalogue_builds_every_submission(lesson):
    """Every edit still finds its text in the solution (the slow tests then grade them)."""
    catalogue = load_catalogue(lesson)
    subs = catalogue.submissions()
    assert len(catalogue.mistakes) >= 3 * len(lesson.exercises)
    for name, mistake in catalogue.entries().items():
        assert subs[name][mistake.exercise] != subs["correct"][mistake.exercise], name


def test_the_demo_students_are_catalogue_mistakes_with_distinct_names():
    students = [s for by_student in demo_mistakes(ROOT).values() for s in by_student]
    assert len(students) == len(set(students)) >= 8


def test_no_catalogue_is_released():
    config = Config()
    configure(config)
    assert FILENAME in config.CourseDirectory.ignore
    released = {p.name for p in (ROOT / RELEASE).rglob("*") if p.is_file()}
    assert FILENAME not in released and all(name.endswith(".ipynb") for name in released), released


def test_a_file_beside_the_released_notebook_is_a_leak(tmp_path):
    lesson = toy_lesson(tmp_path)
    release = tmp_path / "release" / "99-toy"
    release.mkdir(parents=True)
    blank = toy_notebook("def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n")
    blank["cells"][4]["source"] = "check_toy_double(double)\n"
    (release / lesson.filename).write_text(json.dumps(blank), encoding="utf-8")
    assert find_leaks(tmp_path, tmp_path / "release") == []
    (release / FILENAME).write_text(TOY, encoding="utf-8")
    assert find_leaks(tmp_path, tmp_path / "release") == [f"99-toy: only the notebook is released, not {FILENAME}"]
