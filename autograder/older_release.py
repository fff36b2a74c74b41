r"""A notebook handed in from an older release of a lesson: its answer cells carry ``grade_id``\ s the
lesson does not have. They are matched to the lesson's exercises whose answer cell is missing, by
the names they define, then by position, and the notebook is graded from a copy with the ids
renamed and the older release's test cells left out (the rules: ``intake``'s docstring).

Moved here from ``intake``, which keeps the rules for choosing a notebook and calls these.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from autograder.course import Lesson, cell_source, nbgrader_meta
from autograder.names import defined_names
from autograder.submission import over_cap


def _is_answer(cell: dict) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("solution")) and not meta.get("grade")


def _own_names(source: str) -> set[str]:
    return {name for name, how in defined_names([source]).items() if how == "defined"}


def ids_may_differ(path: Path, lesson: Lesson, cap_mb: float) -> bool:
    """False when the file names every exercise's grade_id (read as bytes, not parsed): the usual
    case costs no parse; True when one is absent (or the file cannot be judged so cheaply)."""
    try:
        size = path.stat().st_size
        if not size or over_cap(size, cap_mb):
            return False
        raw = path.read_bytes()
    except OSError:
        return False
    return not all(re.search(rb'"grade_id"\s*:\s*"' + re.escape(gid.encode()) + rb'"', raw) for gid in lesson.exercises)


def match_old_ids(lesson: Lesson, notebook: dict) -> tuple[dict[str, str], list[str], list[str]]:
    """``({old id: exercise}, [old ids left unmatched], [exercises left missing])`` for a notebook
    whose answer cells carry ids the lesson does not have (see ``intake``'s rules)."""
    answers = [(nbgrader_meta(c).get("grade_id"), cell_source(c)) for c in notebook["cells"] if _is_answer(c)]
    answers = [(gid, src) for gid, src in answers if isinstance(gid, str)]
    ours = list(lesson.exercises)
    have = {gid for gid, _ in answers}
    missing = [e for e in ours if e not in have]
    strangers = [(gid, src) for gid, src in answers if gid not in lesson.exercises]
    if not missing or not strangers or len({gid for gid, _ in strangers}) != len(strangers):
        return {}, [], []
    solution = lesson.solution_answers()
    wanted = {e: _own_names(solution.get(e, "")) for e in missing}
    offered = {gid: _own_names(src) for gid, src in strangers}
    mapping: dict[str, str] = {}
    for gid, names in offered.items():  # by content: the names both define, one to one
        fits = [e for e in missing if names & wanted[e]]
        if len(fits) == 1 and [g for g, n in offered.items() if n & wanted[fits[0]]] == [gid]:
            mapping[gid] = fits[0]
    left = [gid for gid, _ in strangers if gid not in mapping]
    needed = [e for e in missing if e not in mapping.values()]
    if left and len(left) == len(needed):  # by position
        order = [mapping.get(gid, gid) for gid, _ in answers]
        trial = dict(zip(left, needed, strict=True))
        if len(left) == 1 or [trial.get(gid, gid) for gid in order] == ours:
            mapping.update(trial)
    left = [gid for gid, _ in strangers if gid not in mapping]
    needed = [e for e in missing if e not in mapping.values()]
    return mapping, left, needed


def rename_ids(lesson: Lesson, notebook: dict, mapping: dict[str, str]) -> dict:
    """A copy of ``notebook`` with its answer cells' ids renamed by ``mapping``, without the older
    release's test cells (the course's own tests run in their place, as for every submission)."""
    ours = {t.grade_id for t in lesson.tests()}
    renamed = copy.deepcopy(notebook)
    kept = []
    for cell in renamed["cells"]:
        meta = nbgrader_meta(cell)
        gid = meta.get("grade_id")
        if _is_answer(cell) and gid in mapping:
            meta["grade_id"] = mapping[gid]
        elif meta.get("grade") and not meta.get("solution") and cell.get("cell_type") == "code" and gid not in ours:
            continue
        kept.append(cell)
    renamed["cells"] = kept
    return renamed
