"""The autograded notebook Formgrader shows (``autograder.gradebook``): the submission put through
nbgrader's own sanitizing preprocessors, each test cell given the course's result as its output and
in ``metadata.transformer_course``; the release notebook with a note when the submission cannot
be read. Written into ``autograded/<student>/<assignment>/`` with the submission's timestamp."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import ClearOutput, DeduplicateIds, OverwriteCells
from traitlets.config import Config

from autograder.course import Lesson
from autograder.gradebook_inputs import TIMESTAMP
from autograder.grading import NotebookResult

#: our own metadata key of a cell of an autograded notebook
META_KEY = "transformer_course"
MESSAGE_CHARS = 20_000

#: what nbgrader's preprocessors say while sanitizing ("Attribute 'checksum' for cell ... has
#: changed!" for every hidden test put back): expected here, so only their errors are kept
QUIET = logging.getLogger("autograder.gradebook.nbgrader")
QUIET.setLevel(logging.ERROR)


def _sanitize(gb: Gradebook, config: Config, nb, notebook_id: str, assignment: str, student: str, db_url: str):
    """nbgrader's sanitizing step of ``autograde`` (ClearOutput, DeduplicateIds, OverwriteKernelspec,
    OverwriteCells, CheckCellMetadata), run on our open gradebook. A cell whose nbgrader id the
    assignment does not have loses its nbgrader metadata first (nbgrader's own step would fail)."""
    source = gb.find_notebook(notebook_id, assignment)
    known = {cell.name for cell in source.source_cells}
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        if nbg is not None and (not isinstance(nbg, dict) or nbg.get("grade_id") not in known):
            del meta["nbgrader"]
    resources = {"nbgrader": {"notebook": notebook_id, "assignment": assignment, "student": student, "db_url": db_url}}
    nb, resources = ClearOutput(config=config, log=QUIET).preprocess(nb, resources)
    nb, resources = DeduplicateIds(config=config, log=QUIET).preprocess(nb, resources)
    if source.kernelspec:
        nb.metadata["kernelspec"] = json.loads(source.kernelspec)
    overwrite = OverwriteCells(config=config, log=QUIET)
    overwrite.gradebook, overwrite.notebook_id, overwrite.assignment_id = gb, notebook_id, assignment
    nb, resources = Preprocessor.preprocess(overwrite, nb, resources)  # its cell by cell step, on our gradebook
    if overwrite.add_missing_cells:
        nb, resources = overwrite.add_missing_grade_cells(nb, resources)
        nb, resources = overwrite.add_missing_task_cells(nb, resources)
    MetadataValidator().validate_nb(nb)
    return nb


def _test_output(status: str, points: float, max_points: float, message: str) -> dict:
    said = f"{points:g} of {max_points:g} point{'s' if max_points != 1 else ''}"
    if status == "passed":
        return nbformat.v4.new_output("stream", name="stdout", text=f"passed: {said}\n")
    message = message[:MESSAGE_CHARS]
    return nbformat.v4.new_output("error", ename=status, evalue=message, traceback=[f"{status}: {message}", said])


def add_results(nb, lesson: Lesson, result: NotebookResult) -> None:
    """Put the course's result of every test cell into it: as its only output, and with the
    exercise's in ``metadata.transformer_course`` of test and answer cells."""
    by_exercise = {e.exercise: e for e in result.exercises}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in lesson.exercises:
            mine = by_exercise.get(gid)
            cell.metadata[META_KEY] = {
                "status": mine.status if mine else "missing", "score": mine.score if mine else 0.0,
                "max_score": lesson.exercises[gid].max_score, "message": (mine.message if mine else "")[:MESSAGE_CHARS],
            }
            continue
        try:
            exercise = lesson.exercise_of(gid) if isinstance(gid, str) else None
        except KeyError:
            exercise = None
        if exercise is None or cell.cell_type != "code":
            continue
        test = next(t for t in exercise.tests if t.grade_id == gid)
        mine = by_exercise.get(exercise.grade_id)
        own = next((t for t in mine.tests if t.grade_id == gid), None) if mine else None
        if own is not None:
            status, points, message = own.status, own.points, own.message
        else:  # the exercise was not run (missing, invalid): its status says why
            status, points = (mine.status if mine else "missing"), 0.0
            message = (mine.message if mine else "") or "no result for this test"
        cell.outputs = [nbformat.from_dict(_test_output(status, points, test.points, message))]
        cell.metadata[META_KEY] = {"status": status, "points": points, "max_points": test.points,
                                   "message": message[:MESSAGE_CHARS]}


def autograded_notebook(gb: Gradebook, config: Config, db_url: str, lesson: Lesson, result: NotebookResult,
                        path: Path | None, release: Path):
    """The page Formgrader shows for ``result``: the submission at ``path`` sanitized as nbgrader's
    autograde does, with the course's results; the ``release`` notebook, with a note on top, when
    the submission cannot be read. None when neither can."""
    reason = ""
    invalid = [e for e in result.exercises if e.status == "invalid"]
    if invalid and len(invalid) == len(result.exercises):
        reason = result.note or invalid[0].message
    nb = None
    if not reason and path is not None:
        try:
            nb = _read_notebook(path)
            nb = _sanitize(gb, config, nb, lesson.name, lesson.assignment, result.student, db_url)
        except Exception as exc:  # noqa: BLE001 - a student's file: anything can be wrong with it
            reason, nb = f"nbgrader cannot read its cells ({type(exc).__name__}: {str(exc)[:300]})", None
    if nb is None:
        try:
            nb = _read_notebook(release)
            nb = _sanitize(gb, config, nb, lesson.name, lesson.assignment, result.student, db_url)
        except Exception as exc:  # noqa: BLE001
            print(f"warning: no autograded notebook for {result.student}/{lesson.assignment}: {exc}", file=sys.stderr)
            return None
        name = path.name if path is not None else lesson.filename
        reason = reason or "it is not a notebook"
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**transformer-course grade:** the submitted {name} could not be shown ({reason}). This is the "
            "release notebook, with the course's results in its test cells; grade the submission by hand."))
    elif result.note:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"**transformer-course grade:** {result.note[:MESSAGE_CHARS]}"))
    add_results(nb, lesson, result)
    return nb


def _read_notebook(path: Path):
    with warnings.catch_warnings():  # nbformat's schema complaints about a student's file: not ours to print
        warnings.simplefilter("ignore")
        return nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)


def _write_notebook(nb, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = nbformat.writes(nb)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)


def plain_id(student: str) -> bool:
    return bool(student) and not student.startswith(".") and "/" not in student and "\\" not in student


def write_autograded(gb: Gradebook, config: Config, coursedir: CourseDirectory, db_url: str, lesson: Lesson,
                      result: NotebookResult, path: Path | None, folder: Path, release: Path) -> None:
    """``autograded/<student>/<assignment>/``: the notebook Formgrader shows (none when nothing was
    handed in), and the submission's ``timestamp.txt``, as nbgrader's autograde leaves them."""
    dest = Path(coursedir.format_path(coursedir.autograded_directory, result.student, result.assignment))
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / lesson.filename
    nb = autograded_notebook(gb, config, db_url, lesson, result, path, release) if path is not None else None
    if nb is not None:
        _write_notebook(nb, target)
    else:
        target.unlink(missing_ok=True)  # no page of an earlier submission stays
    if (folder / TIMESTAMP).is_file():
        shutil.copyfile(folder / TIMESTAMP, dest / TIMESTAMP)
    else:
        (dest / TIMESTAMP).unlink(missing_ok=True)
