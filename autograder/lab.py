"""``transformer-course lab``: the student's JupyterLab and the instructor's, kept apart.

The student's lab
    opens the student's *workspace* (``work/`` at the course root, or ``--workspace DIR``), never
    the tracked release ``notebooks/``: the workspace is made from the release on first start, and
    an update of the course only *adds* to it (lessons new in the release are copied in; a file
    the student already has is never touched). nbgrader's instructor tools are switched off twice:
    in the page (the JupyterLab plugins Formgrader, Create Assignment and Course List are disabled
    *and locked*, so JupyterLab's plugin manager cannot switch them back on) and on the server
    (the ``formgrader`` and ``course_list`` server extensions are not loaded: ``/formgrader``
    answers 404). The Assignments list (fetch, submit, fetch feedback) and Validate stay.

The instructor's lab (``--instructor``)
    opens the course root with every nbgrader tool, Formgrader included.

Everything here is a pure function of its arguments (paths, environment) except the two that
write files, :func:`sync_workspace` and :func:`write_student_config`; ``cli.cmd_lab`` runs the
command they describe.
"""

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

NBGRADER_LAB = "@jupyter/nbgrader"
# nbgrader 0.9.6's JupyterLab plugins (ids read from its labextension bundle):
#   :menu                 the "Nbgrader" menu; shows only the commands that exist
#   :assignment-list      "Assignment List": fetch, submit, fetch feedback  -> kept
#   :validate-assignment  the Validate button of the notebook toolbar      -> kept
#   :formgrader           "Formgrader" and "Formgrader (local)"            -> disabled, locked
#   :create-assignment    the "Create Assignment" side panel               -> disabled, locked
#   :course-list          "Course List" (the instructor's list of courses) -> disabled, locked
STUDENT_KEPT_PLUGINS = (f"{NBGRADER_LAB}:menu", f"{NBGRADER_LAB}:assignment-list", f"{NBGRADER_LAB}:validate-assignment")
INSTRUCTOR_PLUGINS = (f"{NBGRADER_LAB}:formgrader", f"{NBGRADER_LAB}:create-assignment", f"{NBGRADER_LAB}:course-list")
# nbgrader's server extensions, all enabled by its install (jupyter_server_config.d/nbgrader.json)
STUDENT_SERVER_EXTENSIONS = ("nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.validate_assignment")
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")

_SKIP = {".ipynb_checkpoints", "__pycache__", ".DS_Store"}


# ---------------------------------------------------------------------------------------------
# The student's workspace


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


# ---------------------------------------------------------------------------------------------
# Jupyter's configuration and command line


def student_page_config() -> dict:
    """``labconfig/page_config.json`` of the student's lab: instructor plugins off and locked."""
    off = dict.fromkeys(INSTRUCTOR_PLUGINS, True)
    return {"disabledExtensions": dict(off), "lockedExtensions": dict(off)}


def server_extension_args(enabled: dict[str, bool]) -> list[str]:
    """``--ServerApp.jpserver_extensions`` options; the command line outranks config.d files."""
    return [f"--ServerApp.jpserver_extensions={name}={value}" for name, value in enabled.items()]


def write_student_config(config_dir: Path) -> Path:
    """Write the student lab's Jupyter config folder (rewritten at every start); returns it."""
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(json.dumps(student_page_config(), indent=2) + "\n", encoding="utf-8")
    return config_dir


@dataclass
class LabPlan:
    """How to start one lab: the command, its working directory, its environment."""

    cmd: list[str]
    cwd: Path
    env: dict[str, str]
    root_dir: Path
    config_dir: Path | None = None  # the course-managed Jupyter config folder (student lab)


def lab_plan(
    jupyter: str,
    root: Path,
    *,
    instructor: bool = False,
    workspace: Path | None = None,
    environ: dict[str, str] | None = None,
    port: int | None = None,
    no_browser: bool = False,
    as_root: bool = False,
) -> LabPlan:
    """The command line and environment of the student's lab (``workspace``) or the instructor's.

    Both run from the course root, where nbgrader reads ``nbgrader_config.py``; kernels get
    ``TRANSFORMER_COURSE_ROOT`` so a notebook's self-check finds the course wherever the
    workspace is. The student's config folder goes first on ``JUPYTER_CONFIG_PATH`` (above the
    environment's and the system's config, where nbgrader enables its plugins; the student's own
    ``~/.jupyter`` settings stay in use).
    """
    root = root.resolve()
    # without MPLBACKEND: a headless backend (the test suite's Agg) would keep every plot out of the notebook
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if k != "MPLBACKEND"}
    env["TRANSFORMER_COURSE_ROOT"] = str(root)
    if instructor:
        root_dir, config_dir = root, None
        extensions = dict.fromkeys(STUDENT_SERVER_EXTENSIONS + INSTRUCTOR_SERVER_EXTENSIONS, True)
    else:
        if workspace is None:
            raise ValueError("the student's lab needs a workspace")
        root_dir, config_dir = workspace, workspace / CONFIG
        extensions = {**dict.fromkeys(STUDENT_SERVER_EXTENSIONS, True), **dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, False)}
        others = env.get("JUPYTER_CONFIG_PATH", "")
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(config_dir), *([others] if others else [])])
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={root_dir}", *server_extension_args(extensions)]
    if port:
        cmd.append(f"--ServerApp.port={port}")
    if no_browser:
        cmd.append("--no-browser")
    if as_root:
        cmd.append("--ServerApp.allow_root=True")
    return LabPlan(cmd=cmd, cwd=root, env=env, root_dir=root_dir, config_dir=config_dir)
