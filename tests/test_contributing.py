"""CONTRIBUTING.md, followed to the letter, adds a lesson that every tool accepts.

A copy of the course gets a toy lesson written the way CONTRIBUTING says (course metadata, a
first cell that states its run time, an exercise of four cells with climbing hints, a check with
a probe and a judge in ``helpers/checks/``, the self-check cell at the end, a catalogue beside
the notebook). Then, in that copy: ``release`` generates the student's notebook and the reference
module and leaves the catalogue out, nbgrader validates the solution, ``validate --invert`` finds
no test passing on the blank release, the self-check passes the solution, and grading gives the
solution full marks, the blank none, and the catalogue's mistake none, with its words. If a rule of
CONTRIBUTING no longer matches what the tools do, this test is where it shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from jupyter_env import copy_course

from autograder.catalogue import load_catalogue, with_answers
from autograder.course import load_lesson

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent)
A = "99-toy"

CHECK_MODULE = '''"""Checks for the toy lesson 99: center(x) subtracts each row's mean."""

from __future__ import annotations

import torch

from helpers.checks.functions import Compare, Spec, function_checks, on_copy
from helpers.reference import toy as ref

CASES = [(0, (3, 5))]
HIDDEN_CASES = [(1, (2, 4, 7)), (2, (6,))]


def _x(seed, shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _variants(case):
    x = _x(*case)
    return {"you subtracted the mean of the whole tensor; take each row's (dim=-1)": x - x.mean()}


CENTER = Spec(
    label="center",
    call=lambda center, case: on_copy(center, _x(*case)),
    expected=lambda case: ref.center(_x(*case)),
    variants=_variants,
    arguments=lambda case: f"x of shape {case[1]}",
    summary="center: every row's mean is subtracted, for one row and for batches.",
    compare=Compare({torch.float64: 1e-8}),
)
check_center, check_center_hidden = function_checks("check_center", CENTER, CASES, HIDDEN_CASES)
'''


CATALOGUE = """[mistakes.whole-tensor-mean]
exercise = "center"
feedback_says = "mean of the whole tensor"
edits = [["x.mean(dim=-1, keepdim=True)", "x.mean()"]]

[alternatives.keepdim-by-hand]
center = '''
def center(x):
    return x - x.mean(dim=-1).unsqueeze(-1)
'''
"""


def _cell(kind: str, source: str, cell_id: str, nbgrader: dict | None = None, tags: list | None = None) -> dict:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    if nbgrader is not None:
        cell["metadata"]["nbgrader"] = {"schema_version": 3, "task": False, **nbgrader}
    if tags:
        cell["metadata"]["tags"] = tags
    return cell


def toy_notebook() -> dict:
    answer = {"grade": False, "grade_id": "center", "locked": False, "solution": True}
    visible = {"grade": True, "grade_id": "center-check", "locked": True, "points": 1, "solution": False}
    hidden = {"grade": True, "grade_id": "center-hidden", "locked": True, "points": 1, "solution": False}
    cells = [
        _cell("markdown", "# Lesson 99 · A toy\n\nRuns in a few seconds on two CPU cores.", "l99-01"),
        _cell("code", "import torch\n\nfrom helpers.checks.toy import check_center\n\ntorch.manual_seed(0)", "l99-02"),
        _cell("markdown", (
            "### Exercise 1 · centre the rows · 2 points · about 5 minutes\n\n"
            "Write `center(x)`: `x` of shape `(..., C)` minus the mean of each row.\n\n"
            "<details><summary>Hint 1 · a nudge</summary>A row is the last axis.</details>\n\n"
            "<details><summary>Hint 2 · the key idea</summary>Keep the axis you average over, so it broadcasts.</details>\n\n"
            "<details><summary>Hint 3 · the plan, shape by shape</summary>(..., C) → means (..., 1) → (..., C).</details>"
        ), "l99-03"),
        _cell("code", (
            "def center(x: torch.Tensor) -> torch.Tensor:\n"
            '    """x: (..., C) -> (..., C), each row minus its mean."""\n'
            "    ### BEGIN SOLUTION\n"
            "    return x - x.mean(dim=-1, keepdim=True)  # (..., C) - (..., 1)\n"
            "    ### END SOLUTION"
        ), "center", answer, ["reference"]),
        _cell("code", "# Visible test (1 point)\ncheck_center(center)", "center-check", visible),
        _cell("code", (
            "# Hidden test (1 point): the visible check again, then other shapes\n"
            "check_center(center)\n"
            "### BEGIN HIDDEN TESTS\n"
            "from helpers.checks.toy import check_center_hidden\n\n"
            "check_center_hidden(center)\n"
            "### END HIDDEN TESTS"
        ), "center-hidden", hidden),
        _cell("markdown", "## Check all your answers", "l99-04"),
        _cell("code", 'from autograder.selfcheck import check_notebook\n\ncheck_notebook("99-toy.ipynb")', "l99-selfcheck"),
        _cell("markdown", "## What you built\n\n- `center`.\n\n## Next\n\nNothing: it is a toy.", "l99-05"),
    ]
    metadata = {
        "course": {"assignment": A, "lesson": 99, "reference_module": "toy", "title": "A toy"},
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course whose only lesson is the toy, written as CONTRIBUTING says."""
    course = tmp_path_factory.mktemp("contributing") / "course"
    copy_course(course, names=("autograder", "helpers", "nbgrader_config.py"))
    (course / "helpers" / "checks" / "toy.py").write_text(CHECK_MODULE, encoding="utf-8")
    folder = course / "solutions" / A
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_text(json.dumps(toy_notebook(), indent=1) + "\n", encoding="utf-8")
    (folder / "catalogue.toml").write_text(CATALOGUE, encoding="utf-8")
    (course / "notebooks").mkdir()
    return course


def run(course: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(course), TRANSFORMER_COURSE_ROOT=str(course),
               PATH=os.pathsep.join([BIN, os.environ.get("PATH", "")]))
    return subprocess.run([sys.executable, *args], cwd=cwd or course, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_a_lesson_written_as_contributing_says_goes_through_every_tool(course, tmp_path):
    done = run(course, "-m", "autograder.cli", "release")
    assert done.returncode == 0, done.stdout + done.stderr
    release = course / "notebooks" / A / f"{A}.ipynb"
    assert release.is_file() and "x.mean(dim=-1" not in release.read_text(encoding="utf-8")
    reference = (course / "helpers" / "reference" / "toy.py").read_text(encoding="utf-8")
    assert "def center" in reference and "### BEGIN" not in reference
    assert sorted(p.name for p in release.parent.iterdir()) == [release.name], "only the notebook is released"

    solution = course / "solutions" / A / f"{A}.ipynb"
    done = run(course, "-m", "nbgrader", "validate", str(solution))
    assert "Success! Your notebook passes all the tests." in done.stdout + done.stderr, done.stdout + done.stderr
    done = run(course, "-m", "nbgrader", "validate", "--invert", str(release))
    assert "Success! The notebook does not pass any tests." in done.stdout + done.stderr, done.stdout + done.stderr

    done = run(course, "-m", "autograder.cli", "check", str(solution))
    assert done.returncode == 0 and "center" in done.stdout, done.stdout + done.stderr

    submitted = tmp_path / "submitted"
    for student, source in (("ada", solution), ("ben", release)):
        (submitted / student / A).mkdir(parents=True)
        shutil.copyfile(source, submitted / student / A / f"{A}.ipynb")
    catalogue = load_catalogue(load_lesson(solution, A))
    mistaken = with_answers(json.loads(release.read_text(encoding="utf-8")),
                            catalogue.answers(catalogue.mistakes["whole-tensor-mean"]))
    (submitted / "cal" / A).mkdir(parents=True)
    (submitted / "cal" / A / f"{A}.ipynb").write_text(json.dumps(mistaken), encoding="utf-8")
    done = run(course, "-m", "autograder.cli", "grade", str(submitted), "--out", str(tmp_path / "graded"),
               "--timeout", "60", "--cell-timeout", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    grades = pd.read_csv(tmp_path / "graded" / "grades.csv").set_index("student_id")
    assert (grades.loc["ada", "score"], grades.loc["ada", "max_score"]) == (2, 2), grades
    assert grades.loc["ben", "score"] == 0 and grades.loc["ben", "status"] == "failed", grades
    assert grades.loc["cal", "score"] == 0 and "mean of the whole tensor" in grades.loc["cal", "message"], grades
