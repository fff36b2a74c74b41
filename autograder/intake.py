"""What a student handed in for a lesson: nbgrader's layout, and every way a submission strays from it.

nbgrader's layout is ``submitted/<student>/<assignment>/<notebook>.ipynb``. A submission that
strays from it is either graded right or listed in ``needs_attention.csv`` with what to do; it
never becomes a silent 0. The rules, in the order they apply:

* **Which notebook.** The candidates are the ``.ipynb`` files of the assignment's folder, those
  one folder deeper (a folder the student zipped and handed in whole), and a notebook with the
  lesson's own file name left in the student's folder itself. A notebook *holds work* when one of
  its code cells is not a cell of the released notebook (an answer written, a cell added).
  Graded: the expected name when it holds work; else the most recently modified candidate that
  holds work (``-Copy1`` beside a blank, two copies under other names, one folder too deep); else
  the expected name as it is (a blank is graded as blank, an unreadable file as ``invalid``); else
  the most recent candidate. Each choice other than "the expected name, and nothing newer holds
  work" is listed (``chosen``), with the files it was chosen among.
* **An older release.** Answer cells whose ``grade_id`` the lesson does not have are matched to
  the lesson's exercises whose answer cell is missing: by the names they define (``def
  causal_mask`` answers ``causal-mask``), then by position when the notebook has one answer cell
  per exercise in the lesson's order (or just one of each is left). The notebook is graded with the
  ids renamed, from a copy in the output folder (listed: ``chosen``); the older release's own test
  cells are left out, as every submitted test cell is. What cannot be matched unambiguously is
  listed (``misplaced``) and its exercises stay ``missing``.
* **A folder that is not an assignment** (``03-self-atention/``, ``week3/``) is not graded: it is
  listed (``misplaced``) with the assignment its name is closest to (``difflib``), or the one
  whose notebook it holds: "did you mean 03-self-attention?". So is a notebook left in the
  student's folder under a name that is no lesson's.

A file over the size cap (``--max-notebook-mb``) is never parsed here either: it can still be
chosen, and is then graded ``invalid`` with a message that names the option.

The matching of an older release's cell ids lives in ``older_release``; this module chooses the
notebook, checks its ids, and finds the folders and files that are no assignment's.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import RELEASE, Lesson, cell_source
from autograder.older_release import ids_may_differ, match_old_ids, rename_ids
from autograder.reports import attention_row
from autograder.submission import MAX_NOTEBOOK_MB, over_cap

#: needs_attention.csv statuses of what the grader found in the submissions folder
CHOSEN = "chosen"  # graded, but the grader chose the file, or matched an older release's cell ids
MISPLACED = "misplaced"  # not graded where it is: a folder that is no assignment, cells that match nothing

AT_PLACE, TOO_DEEP, OUTSIDE = "", "one folder too deep", "outside its assignment folder"


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _hidden(path: Path) -> bool:
    return path.name.startswith(".")


def notebooks_in(folder: Path) -> list[tuple[Path, str]]:
    """The notebooks of a folder and of its sub-folders (one level), each with how it strays."""
    if not folder.is_dir():
        return []
    top, deep = [], []
    for entry in sorted(folder.iterdir()):
        if _hidden(entry):
            continue  # .ipynb_checkpoints/, editors' lock files
        if entry.is_file() and entry.suffix == ".ipynb":
            top.append((entry, AT_PLACE))
        elif entry.is_dir():
            deep += [(p, TOO_DEEP) for p in sorted(entry.glob("*.ipynb")) if p.is_file() and not _hidden(p)]
    return top + deep


def handed_in(submitted: Path, student: str, assignment: str) -> bool:
    """Whether ``student`` handed in a notebook for ``assignment`` (in its folder, or one deeper)."""
    return bool(notebooks_in(submitted / student / assignment))


@dataclass
class Candidate:
    path: Path
    strays: str  # AT_PLACE, TOO_DEEP or OUTSIDE
    mtime: int
    notebook: dict | None = None  # None: not read (empty, over the cap, not a notebook)
    why: str = ""  # why it could not be read
    work: bool = False


@dataclass
class Pick:
    """What to grade for one student × lesson, and what the instructor should know about it."""

    path: Path | None  # the file to grade: None, nothing handed in; a copy when cell ids were matched
    source: Path | None  # the file in the submissions folder
    rows: list[dict] = field(default_factory=list)  # rows of needs_attention.csv


class Intake:
    """Reads a class's submissions for the lessons of one run; ``copies`` is where notebooks whose
    cell ids were matched are written (a folder of the output that the sandbox hides)."""

    def __init__(self, root: Path, submitted: Path, copies: Path, cap_mb: dict[str, float]):
        self.root, self.submitted, self.copies, self.cap_mb = root, submitted, copies, cap_mb
        self._given: dict[str, set[str] | None] = {}

    # --- one student × lesson ------------------------------------------------------------------

    def pick(self, student: str, lesson: Lesson) -> Pick:
        folder = self.submitted / student / lesson.assignment
        found = notebooks_in(folder)
        outside = self.submitted / student / lesson.filename
        if outside.is_file():
            found.append((outside, OUTSIDE))
        if not found:
            return Pick(None, None)
        expected = folder / lesson.filename
        if found == [(expected, AT_PLACE)]:  # the usual case: nothing to choose between
            return self._checked(student, lesson, expected, [])
        cands = [self._candidate(lesson, path, strays) for path, strays in found]
        chosen, rows = self._choose(student, lesson, expected, cands)
        return self._checked(student, lesson, chosen.path, rows, chosen.notebook)

    def _candidate(self, lesson: Lesson, path: Path, strays: str) -> Candidate:
        try:
            stat = path.stat()
        except OSError as exc:
            return Candidate(path, strays, 0, why=f"cannot be read ({exc.strerror})")
        cand = Candidate(path, strays, stat.st_mtime_ns)
        if stat.st_size == 0:
            cand.why = "is empty"
        elif over_cap(stat.st_size, self._cap(lesson)):
            cand.why = over_cap(stat.st_size, self._cap(lesson)).replace("the file is", "is", 1)
        else:
            cand.notebook = _read(path)
            cand.why = "" if cand.notebook is not None else "is not a readable notebook"
        if cand.notebook is not None:
            given = self._released_cells(lesson)
            sources = (_norm(cell_source(c)) for c in cand.notebook["cells"] if c.get("cell_type") == "code")
            cand.work = any(s and (given is None or s not in given) for s in sources)
        return cand

    def _cap(self, lesson: Lesson) -> float:
        return self.cap_mb.get(lesson.assignment, MAX_NOTEBOOK_MB)

    def _released_cells(self, lesson: Lesson) -> set[str] | None:
        """The code cells of the lesson's released notebook, normalised (None: no release to compare)."""
        if lesson.assignment not in self._given:
            release = _read(self.root / RELEASE / lesson.assignment / lesson.filename)
            self._given[lesson.assignment] = None if release is None else {
                _norm(cell_source(c)) for c in release["cells"] if c.get("cell_type") == "code"}
        return self._given[lesson.assignment]

    def _choose(self, student: str, lesson: Lesson, expected: Path, cands: list[Candidate]):
        def recent(c: Candidate):
            return (-c.mtime, c.strays != AT_PLACE, c.path.name)

        mine = next((c for c in cands if c.path == expected), None)
        worked = sorted((c for c in cands if c.work and c is not mine), key=recent)
        readable = sorted((c for c in cands if c.notebook is not None and c is not mine), key=recent)
        rest = sorted((c for c in cands if c.notebook is None and c is not mine), key=recent)
        if mine is not None and mine.work:
            chosen = mine
        elif worked:
            chosen = worked[0]
        elif mine is not None:
            chosen = mine
        else:
            chosen = (readable or rest)[0]
        rows = []
        where = self._rel(chosen.path)
        if chosen is mine:
            newer = [c for c in worked if c.mtime > mine.mtime]
            if newer:
                rows.append(self._row(student, lesson, chosen.path, CHOSEN,
                                      f"graded {where}, the expected name; {self._rel(newer[0].path)} was modified later and "
                                      f"also holds work: check which one {student} meant (if the other, rename it to "
                                      f"{lesson.filename} and grade again)"))
            return chosen, rows
        if mine is None:
            reason = f"no {lesson.filename} was handed in"
        elif mine.notebook is None:
            reason = f"{self._rel(mine.path)} {mine.why}"
        else:
            reason = f"{self._rel(mine.path)} is the blank release, no answer written"
        others = [self._rel(c.path) for c in cands if c is not chosen and c is not mine]
        how = ("the only notebook handed in" if len(cands) == 1
               else "the most recently modified notebook that holds work" if chosen.work
               else "the most recently modified notebook (none holds work)")
        strays = {TOO_DEEP: f", one folder too deep (nbgrader's layout is {student}/{lesson.assignment}/{lesson.filename})",
                  OUTSIDE: f", outside its assignment folder {lesson.assignment}/"}.get(chosen.strays, "")
        also = f"; also there: {', '.join(others)}" if others else ""
        if chosen.notebook is None:
            also += f"; it {chosen.why}"
        rows.append(self._row(student, lesson, chosen.path, CHOSEN,
                              f"graded {where}{strays}: {reason}, so the grader took {how}{also}. Check it is the work "
                              f"meant for {lesson.assignment}; if not, save the right one as "
                              f"{student}/{lesson.assignment}/{lesson.filename} and grade again"))
        return chosen, rows

    def _checked(self, student: str, lesson: Lesson, path: Path, rows: list[dict], notebook: dict | None = None) -> Pick:
        """The pick of ``path``, graded from a copy with matched ids when it has an older release's."""
        if notebook is None and ids_may_differ(path, lesson, self._cap(lesson)):
            notebook = _read(path)
        if notebook is None:
            return Pick(path, path, rows)
        mapping, unmatched, missing = match_old_ids(lesson, notebook)
        if mapping:
            renamed = rename_ids(lesson, notebook, mapping)
            target = self.copies / student / lesson.assignment / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(renamed, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
            said = ", ".join(f"{old} -> {new}" for old, new in sorted(mapping.items(), key=lambda kv: kv[1]))
            rows.append(self._row(student, lesson, path, CHOSEN,
                                  f"{self._rel(path)} has answer cells with an older release's ids, matched to this "
                                  f"lesson's exercises by the names they define or their position ({said}) and graded "
                                  "so: check the grade"))
            path_to_grade = target
        else:
            path_to_grade = path
        if unmatched:
            rows.append(self._row(student, lesson, path, MISPLACED,
                                  f"{self._rel(path)} has answer cells with ids this lesson does not have "
                                  f"({', '.join(unmatched)}: an older release's?) that could not be matched "
                                  f"unambiguously to its exercises {', '.join(missing)}, graded missing: have the "
                                  f"answers copied into the current release's {lesson.filename} and grade again"))
        return Pick(path_to_grade, path, rows)

    def _rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.submitted).as_posix()
        except ValueError:
            return str(path)

    def _row(self, student: str, lesson: Lesson, path: Path | None, status: str, message: str) -> dict:
        return attention_row(student, lesson.assignment, path.name if path else "", lesson.max_score, status, message)

    # --- a student's folder as a whole ---------------------------------------------------------

    def stray_folders(self, student: str, course: list[Lesson]) -> list[dict]:
        """Rows for the folders of ``student`` that are no assignment of the course."""
        known = [lesson.assignment for lesson in course]
        by_name = {lesson.assignment: lesson for lesson in course}
        files = {lesson.filename: lesson.assignment for lesson in course}
        rows = []
        home = self.submitted / student
        for folder in sorted(home.iterdir()) if home.is_dir() else []:
            if not folder.is_dir() or _hidden(folder) or folder.name in by_name:
                continue
            inside = [p for p, _ in notebooks_in(folder)]  # in it, and one folder deeper
            inside += [p for sub in sorted(folder.iterdir()) if sub.is_dir() and not _hidden(sub)
                       for p, strays in notebooks_in(sub) if strays == TOO_DEEP]  # two deeper
            close = difflib.get_close_matches(folder.name, known, n=1, cutoff=0.6)
            holds = sorted({files[p.name] for p in inside if p.name in files})
            guess = close[0] if close else holds[0] if len(holds) == 1 else None
            if not inside and not close:
                continue  # not a submission of anything
            shown = ", ".join(self._rel(p) for p in inside[:3]) + (" ..." if len(inside) > 3 else "")
            holding = f" It holds {shown}." if inside else " It holds no notebook."
            if guess:
                what = (f"{self._rel(folder)}/ is not an assignment of the course: did you mean {guess}?{holding} "
                        f"It was not graded: rename the folder to {student}/{guess}/ (nbgrader's layout is "
                        f"{student}/{guess}/{by_name[guess].filename}) and grade again")
            else:
                what = (f"{self._rel(folder)}/ is not an assignment of the course (it has {', '.join(known)}).{holding} "
                        "It was not graded: move the notebook into the folder of its assignment and grade again")
            max_score = by_name[guess].max_score if guess else None
            rows.append(attention_row(student, guess or folder.name, "", max_score, MISPLACED, what))
        for loose in sorted(home.glob("*.ipynb")) if home.is_dir() else []:
            if loose.name in files or _hidden(loose) or not loose.is_file():
                continue  # a lesson's own file name is taken as that lesson's (``pick``)
            near = difflib.get_close_matches(loose.stem, known, n=1, cutoff=0.6)
            where = f" (did you mean {near[0]}?)" if near else ""
            rows.append(attention_row(
                student, near[0] if near else "", loose.name, by_name[near[0]].max_score if near else None, MISPLACED,
                f"{self._rel(loose)} is in no assignment's folder{where}: it was not graded; move it into "
                f"{student}/<assignment>/ and grade again"))
        return rows


def _read(path: Path) -> dict | None:
    """The notebook at ``path`` as JSON with a list of cells, or None."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return None
    if not all(isinstance(c, dict) for c in data["cells"]):
        return None
    return data
