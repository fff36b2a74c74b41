"""Reading a submission: the file checked as a Jupyter notebook (never trusted: ``InvalidNotebook``
says what is wrong with it, in one line), and the program the child runs built from its cells
with the course's own tests in place of the student's copies."""

from __future__ import annotations

import json
from pathlib import Path

from autograder.course import Lesson, cell_source, nbgrader_meta
from autograder.protocol import Limits, Step

MAX_NOTEBOOK_MB = Limits.notebook_mb  # the default of ``--max-notebook-mb``
#: the option that raises the cap, named in the message of a notebook over it
CAP_OPTION = "--max-notebook-mb"


class InvalidNotebook(Exception):
    """The submitted file cannot be read as a notebook; the message says why, in one line."""


def over_cap(size: int, max_mb: float) -> str:
    """Why a file of ``size`` bytes is not read, or "" when it is within ``max_mb`` MiB."""
    if size <= max_mb * 2**20:
        return ""
    return (f"the file is {size / 2**20:.0f} MiB; notebooks over {max_mb:g} MiB are not graded (most of such a file "
            f"is saved output: grade it with {CAP_OPTION} {int(size / 2**20) + 1}, or ask for it saved with its "
            "outputs cleared)")


def read_notebook(path: Path, max_mb: float = MAX_NOTEBOOK_MB) -> dict:
    """Parse ``path`` as an nbformat-4 notebook, or raise InvalidNotebook with the reason.

    A file over ``max_mb`` MiB is not read (``--max-notebook-mb``; the message names the option)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidNotebook(f"cannot read the file: {exc.strerror}") from None
    if size == 0:
        raise InvalidNotebook("the file is empty")
    if over_cap(size, max_mb):
        raise InvalidNotebook(over_cap(size, max_mb))
    try:
        nb = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidNotebook("the file is not text (not UTF-8)") from None
    except ValueError as exc:
        raise InvalidNotebook(f"the file is not JSON ({exc})") from None
    if not isinstance(nb, dict):
        raise InvalidNotebook("the file is JSON but not a Jupyter notebook")
    if nb.get("nbformat") != 4:
        raise InvalidNotebook(f"notebook format {nb.get('nbformat')!r} is not supported; save it with Jupyter (format 4)")
    if not isinstance(nb.get("cells"), list):
        raise InvalidNotebook("the file is JSON but not a Jupyter notebook (no list of cells)")
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidNotebook(f"cell {i} is malformed")
        source = cell.get("source", "")
        if not isinstance(source, (str, list)) or (isinstance(source, list) and not all(isinstance(s, str) for s in source)):
            raise InvalidNotebook(f"cell {i} has no readable source (text, or a list of lines of text)")
        meta = cell.get("metadata", {})
        nbg = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
        if isinstance(nbg, dict) and not isinstance(nbg.get("grade_id", ""), str):
            raise InvalidNotebook(f"cell {i} has a grade_id that is not text ({type(nbg['grade_id']).__name__})")
    return nb


def build_program(lesson: Lesson, submission: dict) -> tuple[list[Step], set[str]]:
    """The steps to run: the submission's code cells in their order, with the course's tests in
    place of the student's test cells. Returns the steps and the exercises whose answers exist.

    Answers are found by their nbgrader ``grade_id``, whatever the cell's type or position; a
    student's extra cells run too (helpers they wrote), up to the last test: nothing after it runs. A test runs where its cell is, or after
    the last cell of its exercise's answer if the student moved that below it (or deleted the test).
    """
    tests = {t.grade_id: t for t in lesson.tests()}
    answer_ids = set(lesson.exercises)
    code: list[Step] = []
    test_after: dict[str, int] = {}  # test id -> number of code steps that precede it
    last_answer: dict[str, int] = {}
    for n, cell in enumerate(submission["cells"]):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in tests:
            test_after.setdefault(gid, len(code))
            continue
        if gid not in answer_ids and cell.get("cell_type") != "code":
            continue
        code.append(Step("code", gid or f"cell-{n}", cell_source(cell)))
        if gid in answer_ids:
            last_answer[gid] = len(code)
    found = set(last_answer)
    placed = []
    for order, (gid, test) in enumerate(tests.items()):
        owner = lesson.exercise_of(gid).grade_id
        at = max(test_after.get(gid, 0), last_answer.get(owner, 0))
        if gid not in test_after and owner not in last_answer:
            at = len(code)
        placed.append((at, order, Step("test", gid, test.source)))
    steps: list[Step] = []
    placed.sort(key=lambda item: (item[0], item[1]))
    i = 0
    for index in range(len(code) + 1):
        while i < len(placed) and placed[i][0] == index:
            steps.append(placed[i][2])
            i += 1
        if index < len(code):
            steps.append(code[index])
    # what comes after the last test cannot change any result: a long training run or a demo at
    # the end of a lesson costs the grader nothing, and a loop there cannot make a test time out
    last_test = max((i for i, step in enumerate(steps) if step.kind == "test"), default=len(steps) - 1)
    return steps[: last_test + 1], found
