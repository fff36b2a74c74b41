"""The student's workspace of ``transformer-course lab`` (see ``autograder.lab``): ``work/`` at the
course root, or ``--workspace DIR``, never the tracked release ``notebooks/``. It is made from the
release on first start, and an update of the course only *adds* to it (lessons new in the release
are copied in; a file the student already has is never touched)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import RELEASE, SOLUTIONS, CourseError

WORKSPACE = "work"
MANIFEST = ".transformer-course-sync.json"  # in the workspace: what was copied from which release
CONFIG = ".jupyter-course"  # in the workspace: the student lab's Jupyter config (hidden in the lab)
LOCAL_EXCHANGE = "exchange"  # in the workspace's CONFIG folder: the empty exchange of a lab without a class

_SKIP = {".ipynb_checkpoints", "__pycache__", ".DS_Store"}


@dataclass
class SyncReport:
    """What :func:`sync_workspace` did."""

    workspace: Path
    created: bool = False  # the workspace did not exist: everything was copied
    added_lessons: list[str] = field(default_factory=list)
    added_files: list[str] = field(default_factory=list)  # new files of lessons the student had
    kept: int = 0  # files of the release the student already has, left as they are
    changed_in_release: list[str] = field(default_factory=list)  # the release's copy differs from what was copied

    def message(self) -> str:
        """The one line printed at start (plus one for release files that changed, if any)."""
        if self.created:
            line = f"created your workspace {self.workspace} from {RELEASE}/ ({len(self.added_lessons)} lessons)"
        elif self.added_lessons or self.added_files:
            what = []
            if self.added_lessons:
                what.append("new lessons " + ", ".join(self.added_lessons))
            if self.added_files:
                what.append("new files " + ", ".join(self.added_files))
            line = f"added {' and '.join(what)} to {self.workspace}; your existing work is kept as it is"
        else:
            line = f"workspace {self.workspace}: no new lessons; your existing work is kept as it is"
        if self.changed_in_release:
            line += (f"\nchanged in the course since you got them (yours are kept; the new versions are in "
                     f"{RELEASE}/): " + ", ".join(self.changed_in_release))
        return line


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def release_files(release: Path) -> list[str]:
    """Every file of the release, as POSIX paths relative to it (checkpoints and caches left out)."""
    return sorted(
        path.relative_to(release).as_posix()
        for path in release.rglob("*")
        if path.is_file() and not _SKIP.intersection(path.relative_to(release).parts)
    )


def sync_workspace(release: Path, workspace: Path) -> SyncReport:
    """Create ``workspace`` from ``release``, or add to it what is new in the release.

    Never overwrites or deletes anything in the workspace. A release file is copied only when
    the workspace has never received it (the manifest ``MANIFEST`` remembers what was copied,
    so a notebook the student deleted or renamed on purpose does not come back) and no file of
    that name is there. A lesson is a top-level folder of the release.
    """
    if not release.is_dir():
        raise CourseError(f"{release} does not exist; run `transformer-course release`")
    report = SyncReport(workspace=workspace, created=not workspace.exists())
    workspace.mkdir(parents=True, exist_ok=True)
    manifest_path = workspace / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        manifest = {}
    had = {rel.split("/", 1)[0] for rel in manifest} | {p.name for p in workspace.iterdir()}
    added_lessons: set[str] = set()
    for rel in release_files(release):
        source, target = release / rel, workspace / rel
        digest = _digest(source)
        if rel in manifest:  # copied before: the student's now, whatever they did with it
            if manifest[rel] != digest and target.exists():
                report.changed_in_release.append(rel)
            continue
        if target.exists() or target.is_symlink():
            report.kept += 1
            manifest[rel] = digest
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        manifest[rel] = digest
        lesson = rel.split("/", 1)[0]
        if lesson in had:
            report.added_files.append(rel)
        else:
            added_lessons.add(lesson)
    report.added_lessons = sorted(added_lessons)
    tmp = manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"release": str(release), "files": dict(sorted(manifest.items()))}, indent=1) + "\n",
                   encoding="utf-8")
    os.replace(tmp, manifest_path)
    return report


def resolve_workspace(root: Path, given: Path | None, cwd: Path | None = None) -> Path:
    """The student's workspace: ``given`` (relative to ``cwd``) or ``<root>/work``; never the
    release, the solutions, the course root itself, or a folder that holds the course."""
    root = root.resolve()
    workspace = (root / WORKSPACE) if given is None else ((cwd or Path.cwd()) / given.expanduser())
    workspace = workspace.resolve()
    for tracked in (root / RELEASE, root / SOLUTIONS):
        if workspace == tracked or tracked in workspace.parents:
            raise CourseError(f"--workspace {workspace} is inside the course's {tracked.name}/, which updates replace; "
                              "choose a folder of your own")
    if workspace == root or workspace in root.parents:
        raise CourseError(f"--workspace {workspace} would hold the course checkout itself; choose a folder of your own")
    return workspace
