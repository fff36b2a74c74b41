"""Every lesson: the solution runs and validates, the blank release fails every test, the release
is current and leaks nothing, and the notebooks follow the course's conventions."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_env import copy_course

from autograder import lesson_checks  # noqa: F401 - registers every check
from autograder.course import RELEASE, cell_source, check_calls, lessons, nbgrader_meta
from helpers.checks.core import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
LESSONS = lessons(ROOT)
IDS = [lesson.assignment for lesson in LESSONS]
BIN = str(Path(sys.executable).parent)


def tool_env():
    return dict(os.environ, PATH=os.pathsep.join([BIN, os.environ.get("PATH", "")]))


def nbgrader_validate(*args: str | Path) -> str:
    done = subprocess.run(  # its report and its log in the order they were written
        [sys.executable, "-m", "nbgrader", "validate", *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=dict(tool_env(), PYTHONUNBUFFERED="1"), timeout=900,
    )
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_solution_runs_top_to_bottom(lesson, lesson_runs):
    """The lesson's page as the book shows it (the solution without its hidden tests and
    self-check), run once for the whole test run: no cell raises."""
    failed = [f"cell {n} ({cell.get('id')}): {out.get('ename')}: {out.get('evalue')}"
              for n, cell in enumerate(lesson_runs.one(lesson).cells) if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_every_test_cell_passes_on_the_solution(lesson, lesson_runs):
    """What `nbgrader validate` decides on the solution's visible tests (nbgrader's own rule for
    a test cell's score), on the run above; the hidden tests run when the lesson's tests grade the
    solution, and the blank release below goes through the real command."""
    from nbgrader.utils import determine_grade, is_grade

    grades = {cell.metadata.nbgrader["grade_id"]: determine_grade(cell)
              for cell in lesson_runs.one(lesson).cells if is_grade(cell) and cell.cell_type == "code"}
    assert grades, "the lesson has test cells"
    failed = {gid: grade for gid, grade in grades.items() if grade[0] is not None and grade[0] < grade[1]}
    assert not failed, failed


@pytest.mark.slow
def test_no_test_passes_on_the_blank_release():
    """`nbgrader validate --invert` on every lesson's blank release, all in one call (nbgrader and
    its imports start once, not once per lesson); its report is read lesson by lesson."""
    paths = [ROOT / RELEASE / lesson.assignment / lesson.filename for lesson in LESSONS]
    out = nbgrader_validate("--invert", *paths)
    reports = re.split(r"^\[ValidateApp \| INFO\] Validating ", out, flags=re.M)[1:]
    assert len(reports) == len(LESSONS), out[-3000:]
    for lesson, report in zip(LESSONS, reports, strict=True):
        assert lesson.filename in report.splitlines()[0], report[:300]
        assert "Success! The notebook does not pass any tests." in report, f"{lesson.assignment}: {report[-3000:]}"


@pytest.mark.slow  # nbgrader releases every lesson: about a minute
def test_release_is_current_and_leaks_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "autograder.cli", "release", "--check"],
        cwd=ROOT, capture_output=True, text=True, env=tool_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_release_check_writes_nothing_and_names_what_is_stale(tmp_path):
    course = tmp_path / "course"
    copy_course(course)
    kept = {LESSONS[0].assignment, next(le.assignment for le in LESSONS if le.meta.get("reference_module") == "attention")}
    for lesson in LESSONS:  # two lessons are enough to show it, and all of them take a minute
        if lesson.assignment not in kept:
            shutil.rmtree(course / "solutions" / lesson.assignment)
            shutil.rmtree(course / RELEASE / lesson.assignment)
    reference = course / "helpers" / "reference" / "attention.py"
    reference.write_text(reference.read_text(encoding="utf-8") + "# edited by hand\n", encoding="utf-8")
    release_nb = course / RELEASE / LESSONS[0].assignment / LESSONS[0].filename
    release_nb.write_bytes(release_nb.read_bytes().replace(b"Exercise", b"Exercice", 1))
    before = {p: p.read_bytes() for p in course.rglob("*") if p.is_file()}
    done = subprocess.run(
        [sys.executable, "-m", "autograder.cli", "release", "--check"],
        cwd=course, capture_output=True, text=True, env=dict(tool_env(), TRANSFORMER_COURSE_ROOT=str(course)),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "helpers/reference/attention.py" in done.stdout and LESSONS[0].filename in done.stdout, done.stdout
    after = {p: p.read_bytes() for p in course.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {p: b for p, b in before.items() if "__pycache__" not in p.parts} == after, "release --check changed files"


@pytest.mark.slow
def test_a_lesson_nbgrader_refuses_is_named_and_the_lessons_before_it_are_released(tmp_path):
    """Every lesson is generated in one nbgrader process (autograder/nbgrader_generate.py): the
    first lesson nbgrader refuses stops it, and the error names that lesson with nbgrader's reason."""
    from autograder.course import CourseError
    from autograder.release import generate_release

    course = tmp_path / "course"
    copy_course(course)
    for lesson in LESSONS[2:]:
        shutil.rmtree(course / "solutions" / lesson.assignment)
    broken = course / "solutions" / LESSONS[1].assignment / LESSONS[1].filename
    nb = json.loads(broken.read_text(encoding="utf-8"))
    graded = next(c for c in nb["cells"] if nbgrader_meta(c).get("grade_id"))
    graded["metadata"]["nbgrader"]["schema_version"] = 99  # a metadata format newer than nbgrader's
    broken.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(CourseError, match=f"nbgrader could not release {LESSONS[1].assignment}:(.|\n)*newer version"):
        generate_release(course, tmp_path / "out")
    assert sorted(p.parent.name for p in (tmp_path / "out").rglob("*.ipynb")) == [LESSONS[0].assignment]


@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_conventions(lesson):
    meta = lesson.notebook["metadata"].get("course", {})
    assert meta.get("assignment") == lesson.assignment
    assert lesson.exercises, "a lesson has at least one exercise"
    for cell in lesson.notebook["cells"]:
        assert not cell.get("outputs") and not cell.get("execution_count"), f"{cell.get('id')} has outputs"
        nbg = nbgrader_meta(cell)
        if nbg.get("grade_id"):
            assert cell.get("id") == nbg["grade_id"], "cell id equals its grade id"
    for exercise in lesson.exercises.values():
        kinds = sorted(t.hidden for t in exercise.tests)
        assert kinds == [False, True], f"{exercise.grade_id}: one visible and one hidden test cell"
        for test in exercise.tests:
            assert test.points > 0
            assert test.checks, f"{test.grade_id} calls no check"
            assert "assert " not in test.source, f"{test.grade_id}: test cells call checks only"
            for name in test.checks:
                assert name in REGISTRY, f"{test.grade_id} calls unknown {name}"
            hidden_checks = [n for n in test.checks if REGISTRY[n].hidden]
            assert bool(hidden_checks) == test.hidden, f"{test.grade_id}: hidden checks only in hidden cells"
            if test.hidden:  # what the release keeps of a hidden cell must fail on a blank too
                released_part = test.source.split("### BEGIN HIDDEN TESTS")[0]
                assert check_calls(released_part), f"{test.grade_id}: repeat the visible check before the hidden block"
    text = "\n".join(cell_source(c) for c in lesson.notebook["cells"])
    assert "torch.manual_seed" in text, "lessons are seeded"
    assert "check_notebook(" in text, "a lesson ends with the self-check one-liner"


def test_release_notebooks_have_no_outputs():
    for path in sorted((ROOT / RELEASE).rglob("*.ipynb")):
        nb = json.loads(path.read_text())
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), path
