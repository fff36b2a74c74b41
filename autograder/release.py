"""``transformer-course release``: regenerate what is generated from ``solutions/``.

Two things are generated, and both are committed and checked by CI to be up to date:

* ``helpers/reference/<module>.py``: the cells of a lesson tagged ``reference``, with the solution
  markers removed. Later lessons and the checks import the reference from here, so every
  implementation has one source: the solution notebook.
* ``notebooks/<assignment>/<lesson>.ipynb``: the student release, made by nbgrader's
  ``generate_assignment``, then searched for leaked solution and hidden-test lines.

nbgrader takes seconds per lesson, so ``release`` remembers, in ``.release-stamps.json`` at the
course root (ignored by git), what each release notebook was made from: a lesson whose solution,
nbgrader configuration and release code are unchanged and whose release is the file it wrote is
not generated again. ``release --check`` (CI) trusts no stamp and regenerates everything.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from autograder.course import (
    RELEASE,
    RELEASE_BLOCKS,
    SOLUTIONS,
    CourseError,
    Lesson,
    cell_source,
    lessons,
    without_solution_markers,
)
from autograder.environment import tool_env
from autograder.nbgrader_generate import FAILED

REFERENCE_DIR = Path("helpers") / "reference"
TRIVIAL = re.compile(r"^(pass|return|else:|try:|\)|\]|\}|#.*|)$")
HEADER = '''"""Reference implementation for lesson {lesson}: {title}.

Generated from {source} by `transformer-course release`; do not edit by hand.
"""

import math  # noqa: F401

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401
'''


def reference_modules(root: Path) -> dict[Path, str]:
    """The text of every generated reference module, by path relative to ``root``."""
    modules: dict[Path, str] = {}
    for lesson in lessons(root):
        meta = lesson.meta
        module = meta.get("reference_module")
        cells = lesson.reference_cells()
        if not module:
            if cells:
                raise CourseError(f"{lesson.path}: cells are tagged reference but no reference_module is set")
            continue
        source = lesson.path.relative_to(root).as_posix()
        parts = [HEADER.format(lesson=meta.get("lesson", "?"), title=meta.get("title", ""), source=source)]
        for cell in cells:
            parts.append(without_solution_markers(cell_source(cell)).strip("\n") + "\n")
        path = REFERENCE_DIR / f"{module}.py"
        if path in modules:
            raise CourseError(f"two lessons write {path}")
        modules[path] = "\n\n".join(parts)
    return modules


def write_references(root: Path) -> list[Path]:
    written = []
    for rel, text in reference_modules(root).items():
        target = root / rel
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(rel)
    return written


def generate_release(root: Path, out_dir: Path, db_url: str | None = None, only: list[str] | None = None) -> None:
    """Run nbgrader's generate_assignment for every lesson (in one process,
    ``autograder.nbgrader_generate``), writing releases into ``out_dir`` and the assignments'
    cells into the gradebook ``db_url`` (a throw-away one by default)."""
    chosen = [lesson.assignment for lesson in lessons(root) if only is None or lesson.assignment in only]
    with tempfile.TemporaryDirectory() as tmp:
        if chosen:
            db = db_url or "sqlite:///" + str(Path(tmp) / "gradebook.db")
            cmd = [sys.executable, "-m", "autograder.nbgrader_generate", str(root), str(out_dir), db, *chosen]
            done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=tool_env())
            if done.returncode != 0:
                failed = next((line[len(FAILED):] for line in reversed(done.stderr.splitlines())
                               if line.startswith(FAILED)), "the lessons")
                raise CourseError(f"nbgrader could not release {failed}:\n{done.stderr[-3000:]}")
    for path in out_dir.rglob("*.ipynb"):  # one canonical form so regeneration is byte-identical
        nb = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def find_leaks(root: Path, release_dir: Path) -> list[str]:
    """Solution and hidden-test lines of ``solutions/`` that appear in a release, naming the cell."""
    leaks = []
    for lesson in lessons(root):
        released = release_dir / lesson.assignment / lesson.filename
        if not released.exists():
            leaks.append(f"{lesson.assignment}: no release notebook {released.name}")
            continue
        extra = sorted(p.name for p in released.parent.rglob("*") if p.is_file() and p != released)
        if extra:
            leaks.append(f"{lesson.assignment}: only the notebook is released, not {', '.join(extra)}")
        release_cells = json.loads(released.read_text(encoding="utf-8"))["cells"]
        release_lines = {line.strip() for c in release_cells for line in cell_source(c).splitlines()}
        release_text = "\n".join(cell_source(c) for c in release_cells)
        open_text = "\n".join(cell_source(c) for c in lesson.notebook["cells"])
        for begin, end in RELEASE_BLOCKS:
            open_text = re.sub(re.escape(begin) + r".*?" + re.escape(end), "", open_text, flags=re.S)
        open_lines = {line.strip() for line in open_text.splitlines()}
        for cell in lesson.notebook["cells"]:
            text = cell_source(cell)
            for begin, end in RELEASE_BLOCKS:
                for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S):
                    for line in block.splitlines():
                        line = line.strip()
                        if len(line) < 16 or TRIVIAL.match(line) or line in open_lines:
                            continue
                        if line in release_lines:
                            leaks.append(f"{lesson.assignment}, cell {cell.get('id')}: {line[:80]}")
        for begin, _ in RELEASE_BLOCKS:
            if begin in release_text:
                leaks.append(f"{lesson.assignment}: marker {begin!r} left in the release")
    return leaks


STAMPS = ".release-stamps.json"


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def made_from(root: Path, lesson: Lesson) -> str:
    """A digest of everything a lesson's release is made from: its solution notebook, the course's
    nbgrader configuration, this module and nbgrader's version."""
    config = root / "nbgrader_config.py"
    return _digest(lesson.path.read_bytes(), config.read_bytes() if config.exists() else b"",
                   Path(__file__).read_bytes(), version("nbgrader").encode())


def _stamps(root: Path) -> dict:
    try:
        data = json.loads((root / STAMPS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def current_lessons(root: Path, target: Path) -> set[str]:
    """The lessons whose release in ``target`` is what ``release`` wrote from their present sources."""
    stamps, current = _stamps(root), set()
    for lesson in lessons(root):
        released = target / lesson.assignment / lesson.filename
        stamp = stamps.get(lesson.assignment)
        if (isinstance(stamp, dict) and released.exists() and stamp.get("made_from") == made_from(root, lesson)
                and stamp.get("release") == _digest(released.read_bytes())):
            current.add(lesson.assignment)
    return current


def write_stamps(root: Path, target: Path) -> None:
    stamps = {}
    for lesson in lessons(root):
        released = target / lesson.assignment / lesson.filename
        if released.exists():
            stamps[lesson.assignment] = {"made_from": made_from(root, lesson), "release": _digest(released.read_bytes())}
    (root / STAMPS).write_text(json.dumps(stamps, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def release(root: Path, out_dir: Path | None = None, write_reference: bool = True) -> list[str]:
    """Regenerate references and the release; returns a line per changed file. Raises on a leak.

    ``write_reference=False`` leaves ``helpers/reference/`` alone (``release --check`` writes the
    release into a temporary ``out_dir`` and compares; it must change nothing in the course)."""
    changed = [f"wrote {p}" for p in write_references(root)] if write_reference else []
    target = out_dir or root / RELEASE
    current = current_lessons(root, target) if out_dir is None else set()  # a check trusts no stamp
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "release"
        staged.mkdir()
        todo = [lesson.assignment for lesson in lessons(root) if lesson.assignment not in current]
        if todo:
            generate_release(root, staged, only=todo)
        for assignment in current:  # the leak search and the copy below see every lesson
            shutil.copytree(target / assignment, staged / assignment)
        leaks = find_leaks(root, staged)
        if leaks:
            raise CourseError("refusing to release: solution lines would leak\n  " + "\n  ".join(leaks))
        for folder in staged.iterdir():
            dest = target / folder.name
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    out = dest / path.relative_to(folder)
                    if not out.exists() or out.read_bytes() != path.read_bytes():
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(path, out)
                        changed.append(f"wrote {out.relative_to(target.parent) if out_dir is None else out}")
        known = {p.name for p in staged.iterdir()}
        for stale in sorted(p for p in target.iterdir() if p.is_dir() and p.name not in known) if target.exists() else []:
            shutil.rmtree(stale)
            changed.append(f"removed {stale}")
    if out_dir is None:
        write_stamps(root, target)
    return changed


__all__ = ["find_leaks", "generate_release", "reference_modules", "release", "SOLUTIONS"]
