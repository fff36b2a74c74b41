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

Both labs preset JupyterLab's news off (no "Would you like to receive official Jupyter news?"
pop-up): a settings default in an app settings folder of the course's, the user's own settings
still first. The student's Assignments list uses nbgrader's exchange where one exists; where none
does (a reader working alone), an empty one of the workspace's, so the list is empty, not an error.

Everything here is a pure function of its arguments (paths, environment) except what writes
files (:func:`write_student_config`, :func:`write_app_settings`, and the workspace's
``lab_workspace.sync_workspace``) and what reads Jupyter's and nbgrader's installed config
(``lab_exchange.configured_exchange``, :func:`environment_app_settings_dir`); ``cli_commands.cmd_lab`` runs
the command they describe.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from autograder.environment import tool_env
from autograder.lab_exchange import Exchange
from autograder.lab_workspace import CONFIG

APP_SETTINGS = "lab/settings"  # in a CONFIG folder: the JupyterLab app settings dir of either lab
COURSE_OVERRIDES_FILE = "00-transformer-course.json"  # in APP_SETTINGS/overrides.d: first in name order
#: JupyterLab settings defaults of both labs (the user's own settings still win): no "Would you like
#: to receive official Jupyter news?" pop-up, no news fetched from the internet
COURSE_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}

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
#: the course's own server extension of the instructor's lab: Formgrader reads the gradebook afresh
#: at every request, so what `grade --gradebook` writes while it is open shows at once (formgrader_fresh.py)
FORMGRADER_FRESH = "autograder.formgrader_fresh"


# ---------------------------------------------------------------------------------------------
# Jupyter's configuration and command line


def student_page_config() -> dict:
    """``labconfig/page_config.json`` of the student's lab: instructor plugins off and locked."""
    off = dict.fromkeys(INSTRUCTOR_PLUGINS, True)
    return {"disabledExtensions": dict(off), "lockedExtensions": dict(off)}


def server_extension_args(enabled: dict[str, bool]) -> list[str]:
    """``--ServerApp.jpserver_extensions`` options; the command line outranks config.d files."""
    return [f"--ServerApp.jpserver_extensions={name}={value}" for name, value in enabled.items()]


def write_student_config(config_dir: Path, exchange: Exchange | None = None) -> Path:
    """Write the student lab's Jupyter config folder (rewritten at every start); returns it.

    With ``exchange``, also the ``nbgrader_config.py`` the Assignments list reads (the folder is on
    ``JUPYTER_CONFIG_PATH``): that exchange and the course's id; a course-local exchange is created.
    """
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(json.dumps(student_page_config(), indent=2) + "\n", encoding="utf-8")
    if exchange is not None:
        if exchange.local:
            exchange.root.mkdir(parents=True, exist_ok=True)
        (config_dir / "nbgrader_config.py").write_text(exchange.nbgrader_config(), encoding="utf-8")
    return config_dir


# ---------------------------------------------------------------------------------------------
# JupyterLab's settings defaults (both labs)


def environment_app_settings_dir(environ: dict[str, str] | None = None) -> Path:
    """The app settings folder JupyterLab uses when none is given: ``<app dir>/settings``, the app
    dir from ``JUPYTERLAB_DIR`` or else the installed JupyterLab's default (``<prefix>/share/jupyter/lab``)."""
    environ = os.environ if environ is None else environ
    if environ.get("JUPYTERLAB_DIR"):
        return Path(environ["JUPYTERLAB_DIR"]).expanduser().resolve() / "settings"
    from jupyterlab.commands import get_app_dir

    return Path(get_app_dir()) / "settings"


#: what JupyterLab reads from its app settings folder (jupyterlab_server: ``_get_overrides`` and
#: ``get_page_config``); ``overrides.d`` is read in name order, then ``overrides.json``, each outranking the last
APP_SETTINGS_FILES = ("overrides.d/*.json", "overrides.d/*.json5", "overrides.json", "overrides.json5",
                      "page_config.json", "page_config.json5")


def write_app_settings(settings_dir: Path, inherited: Path | None = None) -> Path:
    """Write a lab's app settings folder (passed as ``--LabApp.app_settings_dir``; rewritten at every
    start): ``COURSE_OVERRIDES`` as the first file of ``overrides.d``, and beside it copies of the
    files of the folder JupyterLab would otherwise use (``inherited``), so an administrator's
    defaults stay in force and outrank the course's. Overrides change only the defaults: a
    setting the user changed (``~/.jupyter/lab/user-settings``) still wins."""
    if settings_dir.is_dir() and not settings_dir.is_symlink():
        shutil.rmtree(settings_dir)
    (settings_dir / "overrides.d").mkdir(parents=True, exist_ok=True)
    if inherited is not None and inherited.is_dir() and inherited.resolve() != settings_dir.resolve():
        for pattern in APP_SETTINGS_FILES:
            for path in sorted(inherited.glob(pattern)):
                if path.is_file():
                    shutil.copy2(path, settings_dir / path.relative_to(inherited))
    (settings_dir / "overrides.d" / COURSE_OVERRIDES_FILE).write_text(json.dumps(COURSE_OVERRIDES, indent=2) + "\n",
                                                                     encoding="utf-8")
    return settings_dir


# ---------------------------------------------------------------------------------------------
# nbgrader's exchange (the student's Assignments list)

@dataclass
class LabPlan:
    """How to start one lab: the command, its working directory, its environment."""

    cmd: list[str]
    cwd: Path
    env: dict[str, str]
    root_dir: Path
    config_dir: Path | None = None  # the course-managed Jupyter config folder (student lab)
    app_settings_dir: Path | None = None  # the course-managed JupyterLab app settings folder (both labs)


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
    ``~/.jupyter`` settings stay in use). This Python's scripts folder goes first on PATH (nbgrader
    runs ``alembic`` by name). Each lab gets a JupyterLab app settings folder of the course's
    (:func:`write_app_settings`): the student's in the workspace's config folder, the
    instructor's in ``<root>/.jupyter-course``.
    """
    root = root.resolve()
    # without MPLBACKEND: a headless backend (the test suite's Agg) would keep every plot out of the notebook
    env = {k: v for k, v in tool_env(environ).items() if k != "MPLBACKEND"}
    env["TRANSFORMER_COURSE_ROOT"] = str(root)
    if instructor:
        root_dir, config_dir = root, None
        app_settings = root / CONFIG / APP_SETTINGS
        extensions = dict.fromkeys(STUDENT_SERVER_EXTENSIONS + INSTRUCTOR_SERVER_EXTENSIONS + (FORMGRADER_FRESH,), True)
    else:
        if workspace is None:
            raise ValueError("the student's lab needs a workspace")
        root_dir, config_dir = workspace, workspace / CONFIG
        app_settings = config_dir / APP_SETTINGS
        extensions = {**dict.fromkeys(STUDENT_SERVER_EXTENSIONS, True), **dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, False)}
        others = env.get("JUPYTER_CONFIG_PATH", "")
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(config_dir), *([others] if others else [])])
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={root_dir}", f"--LabApp.app_settings_dir={app_settings}",
           *server_extension_args(extensions)]
    if port:
        cmd.append(f"--ServerApp.port={port}")
    if no_browser:
        cmd.append("--no-browser")
    if as_root:
        cmd.append("--ServerApp.allow_root=True")
    return LabPlan(cmd=cmd, cwd=root, env=env, root_dir=root_dir, config_dir=config_dir, app_settings_dir=app_settings)
