"""``transformer-course lab`` without a browser: the student's workspace survives course updates,
and the student's and the instructor's labs are started with the right tools (see
test_labs_browser.py for what a browser then shows)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import cli, cli_commands
from autograder.course import RELEASE, CourseError
from autograder.environment import tool_env
from autograder.lab import (
    APP_SETTINGS,
    COURSE_OVERRIDES,
    COURSE_OVERRIDES_FILE,
    INSTRUCTOR_PLUGINS,
    INSTRUCTOR_SERVER_EXTENSIONS,
    STUDENT_KEPT_PLUGINS,
    STUDENT_SERVER_EXTENSIONS,
    lab_plan,
    student_page_config,
    write_app_settings,
    write_student_config,
)
from autograder.lab_exchange import choose_exchange, configured_exchange, nbgrader_default_exchange
from autograder.lab_workspace import (
    CONFIG,
    LOCAL_EXCHANGE,
    MANIFEST,
    resolve_workspace,
    sync_workspace,
)

ROOT = Path(__file__).resolve().parents[1]
LESSON_03 = "03-self-attention/03-self-attention.ipynb"
HERE_BIN = str(Path(sys.executable).parent)  # this Python's scripts: jupyter, nbgrader, alembic
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


@pytest.fixture
def release(tmp_path) -> Path:
    """A copy of the course's release, as an update of the course would replace it."""
    copy = tmp_path / "course" / RELEASE
    shutil.copytree(ROOT / RELEASE, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return copy


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MANIFEST}


def test_first_start_copies_every_lesson(release, tmp_path):
    work = tmp_path / "work"
    report = sync_workspace(release, work)
    assert report.created and report.kept == 0 and not report.added_files
    assert report.added_lessons == sorted(p.name for p in release.iterdir() if p.is_dir())
    assert tree(work) == tree(release)
    assert "created your workspace" in report.message()


def test_update_adds_the_new_lesson_and_keeps_the_students_work(release, tmp_path):
    work = tmp_path / "work"
    sync_workspace(release, work)
    mine = work / LESSON_03
    edited = json.loads(mine.read_text(encoding="utf-8"))
    edited["cells"][0]["source"] = "my own notes\n"
    mine.write_text(json.dumps(edited), encoding="utf-8")
    mine_bytes = mine.read_bytes()
    (work / "01-tokens-and-embeddings" / "scratch.py").write_text("print('mine')\n")
    (work / "02-language-models" / "02-language-models.ipynb").unlink()  # deleted on purpose

    # the course is updated: lesson 03 changes, and a lesson 09 and a file of lesson 01 appear
    updated = json.loads((release / LESSON_03).read_text(encoding="utf-8"))
    updated["cells"][0]["source"] = "a corrected introduction\n"
    (release / LESSON_03).write_text(json.dumps(updated), encoding="utf-8")
    (release / "09-new-lesson").mkdir()
    (release / "09-new-lesson" / "09-new-lesson.ipynb").write_text('{"cells": []}\n')
    (release / "01-tokens-and-embeddings" / "table.csv").write_text("a,b\n")

    report = sync_workspace(release, work)
    assert not report.created
    assert report.added_lessons == ["09-new-lesson"]
    assert report.added_files == ["01-tokens-and-embeddings/table.csv"]
    assert report.changed_in_release == [LESSON_03]
    assert mine.read_bytes() == mine_bytes, "an edited notebook is never overwritten"
    assert (work / "01-tokens-and-embeddings" / "scratch.py").read_text() == "print('mine')\n"
    assert not (work / "02-language-models" / "02-language-models.ipynb").exists(), "a deleted notebook stays deleted"
    assert (work / "09-new-lesson" / "09-new-lesson.ipynb").read_text() == '{"cells": []}\n'
    line = report.message().splitlines()[0]
    assert "09-new-lesson" in line and "existing work is kept" in line
    assert LESSON_03 in report.message()

    again = sync_workspace(release, work)  # a third start: nothing new
    assert (again.added_lessons, again.added_files) == ([], [])
    assert mine.read_bytes() == mine_bytes
    assert "no new lessons" in again.message()


def test_a_file_the_student_already_has_is_kept(release, tmp_path):
    work = tmp_path / "work"
    (work / "03-self-attention").mkdir(parents=True)
    (work / LESSON_03).write_text("not even a notebook")
    report = sync_workspace(release, work)
    assert (work / LESSON_03).read_text() == "not even a notebook"
    assert report.kept == 1 and "03-self-attention" not in report.added_lessons


def test_the_workspace_is_never_the_tracked_release(tmp_path):
    root = tmp_path / "course"
    for name in ("solutions", RELEASE):
        (root / name).mkdir(parents=True)
    assert resolve_workspace(root, None) == (root / "work").resolve()
    assert resolve_workspace(root, Path("mine"), cwd=tmp_path) == (tmp_path / "mine").resolve()
    for bad in (root / RELEASE, root / RELEASE / "03", root / "solutions", root, tmp_path):
        with pytest.raises(CourseError):
            resolve_workspace(root, bad)


def test_student_lab_locks_the_instructor_tools_out(tmp_path):
    work = tmp_path / "work"
    plan = lab_plan("/bin/jupyter", ROOT, workspace=work, environ={"PATH": "/bin", "MPLBACKEND": "Agg",
                                                                   "JUPYTER_CONFIG_PATH": "/etc/mine"},
                    port=8899, no_browser=True, as_root=True)
    assert plan.cmd[:2] == ["/bin/jupyter", "lab"]
    assert f"--ServerApp.root_dir={work}" in plan.cmd
    for name in INSTRUCTOR_SERVER_EXTENSIONS:
        assert f"--ServerApp.jpserver_extensions={name}=False" in plan.cmd
    for name in STUDENT_SERVER_EXTENSIONS:
        assert f"--ServerApp.jpserver_extensions={name}=True" in plan.cmd
    assert {"--ServerApp.port=8899", "--no-browser", "--ServerApp.allow_root=True"} <= set(plan.cmd)
    assert plan.cwd == ROOT, "nbgrader reads nbgrader_config.py from the working directory"
    assert plan.config_dir == work / CONFIG
    assert plan.env["JUPYTER_CONFIG_PATH"].split(":") == [str(work / CONFIG), "/etc/mine"]
    assert plan.env["TRANSFORMER_COURSE_ROOT"] == str(ROOT) and "MPLBACKEND" not in plan.env
    assert plan.env["PATH"].split(os.pathsep) == [HERE_BIN, "/bin"], "nbgrader runs alembic by name"
    assert plan.app_settings_dir == work / CONFIG / APP_SETTINGS
    assert f"--LabApp.app_settings_dir={work / CONFIG / APP_SETTINGS}" in plan.cmd

    config = student_page_config()
    assert set(config["disabledExtensions"]) == set(config["lockedExtensions"]) == set(INSTRUCTOR_PLUGINS)
    assert not set(STUDENT_KEPT_PLUGINS) & set(config["disabledExtensions"])
    write_student_config(plan.config_dir)
    written = json.loads((plan.config_dir / "labconfig" / "page_config.json").read_text())
    assert written == config


def test_instructor_lab_opens_the_course_root_with_formgrader():
    plan = lab_plan("/bin/jupyter", ROOT, instructor=True, environ={"PATH": "/bin"})
    assert f"--ServerApp.root_dir={ROOT}" in plan.cmd and plan.cwd == ROOT
    for name in INSTRUCTOR_SERVER_EXTENSIONS + STUDENT_SERVER_EXTENSIONS:
        assert f"--ServerApp.jpserver_extensions={name}=True" in plan.cmd
    assert plan.config_dir is None and "JUPYTER_CONFIG_PATH" not in plan.env
    assert "--no-browser" not in plan.cmd and "--ServerApp.allow_root=True" not in plan.cmd
    assert plan.env["PATH"].split(os.pathsep) == [HERE_BIN, "/bin"], "Formgrader's gradebook runs alembic by name"
    assert plan.app_settings_dir == ROOT / CONFIG / APP_SETTINGS
    assert f"--LabApp.app_settings_dir={ROOT / CONFIG / APP_SETTINGS}" in plan.cmd


# ---------------------------------------------------------------------------------------------
# the environment of every Jupyter and nbgrader process


def test_this_pythons_scripts_come_first_on_path():
    mine = {"PATH": os.pathsep.join(["/usr/bin", HERE_BIN, "/bin"]), "OTHER": "kept"}
    env = tool_env(mine)
    assert env["PATH"].split(os.pathsep) == [HERE_BIN, "/usr/bin", "/bin"] and env["OTHER"] == "kept"
    assert mine["PATH"].startswith("/usr/bin"), "the given environment is not changed"
    assert tool_env({})["PATH"] == HERE_BIN
    assert (Path(HERE_BIN) / "alembic").exists(), "nbgrader's gradebook needs alembic beside this Python"


def test_one_helper_sets_path_for_every_process_the_course_starts(tmp_path, monkeypatch):
    """``environment.tool_env`` is the only place that puts this Python's folder on a PATH:
    release's nbgrader, the labs and the book's kernels all go through it."""
    from autograder import book, release

    assert release.tool_env is tool_env
    own = ROOT / "autograder" / "environment.py"
    elsewhere = [p.name for p in (ROOT / "autograder").glob("*.py")
                 if p != own and "sys.executable).parent" in p.read_text(encoding="utf-8")]
    assert not elsewhere, f"use autograder.environment.tool_env in {elsewhere}"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # started by its full path, the environment not activated
    assert book._build_env(ROOT, tmp_path / "ipython")["PATH"].split(os.pathsep) == [HERE_BIN, "/usr/bin", "/bin"]


# ---------------------------------------------------------------------------------------------
# JupyterLab's news: off by default in both labs


def test_the_news_setting_exists_in_the_installed_jupyterlab():
    from jupyterlab.commands import get_app_dir

    schema = Path(get_app_dir()) / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json"
    fetch_news = json.loads(schema.read_text(encoding="utf-8"))["properties"]["fetchNews"]
    plugin, = COURSE_OVERRIDES
    assert plugin == NOTIFICATION
    assert COURSE_OVERRIDES[plugin]["fetchNews"] in {choice["const"] for choice in fetch_news["oneOf"]}
    assert COURSE_OVERRIDES[plugin]["fetchNews"] == "false", "Never: no pop-up asking, nothing fetched"


def test_the_app_settings_keep_the_environments_own_and_add_the_news_default(tmp_path):
    """JupyterLab reads the course's folder as it reads its own (jupyterlab_server's
    ``_get_overrides``): the news default is there, and the environment's overrides and page
    config are kept and outrank it (an administrator's choice stands)."""
    from jupyterlab_server.settings_utils import _get_overrides

    inherited = tmp_path / "env-settings"
    (inherited / "overrides.d").mkdir(parents=True)
    (inherited / "overrides.json").write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}))
    (inherited / "overrides.d" / "50-site.json").write_text(json.dumps({NOTIFICATION: {"checkForUpdates": False}}))
    (inherited / "page_config.json").write_text(json.dumps({"disabledExtensions": ["some-plugin"]}))
    mine = tmp_path / "course" / CONFIG / APP_SETTINGS
    (mine / "overrides.d").mkdir(parents=True)
    (mine / "overrides.d" / "stale.json").write_text("{}")  # from an earlier start: rewritten

    write_app_settings(mine, inherited)
    overrides, error = _get_overrides(str(mine))
    assert not error
    assert overrides[NOTIFICATION] == {"fetchNews": "false", "checkForUpdates": False}
    assert overrides["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert sorted(p.name for p in (mine / "overrides.d").iterdir()) == [COURSE_OVERRIDES_FILE, "50-site.json"]
    assert (mine / "page_config.json").read_bytes() == (inherited / "page_config.json").read_bytes()

    (inherited / "overrides.json").write_text(json.dumps({NOTIFICATION: {"fetchNews": "true"}}))
    write_app_settings(mine, inherited)
    assert _get_overrides(str(mine))[0][NOTIFICATION]["fetchNews"] == "true"
    write_app_settings(mine, None)  # no folder of the environment's
    assert _get_overrides(str(mine))[0] == COURSE_OVERRIDES


# ---------------------------------------------------------------------------------------------
# the student's Assignments list and nbgrader's exchange


@pytest.fixture
def person(tmp_path, monkeypatch) -> Path:
    """A HOME of its own, whose Jupyter folders are inside it (no config of this machine's user)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(home / ".jupyter"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(home / ".local" / "share" / "jupyter"))
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    return home


def test_the_exchange_is_read_from_nbgraders_config_files(tmp_path, person, monkeypatch):
    from nbgrader.exchange.default.exchange import Exchange

    course, work = tmp_path / "course", tmp_path / "work"
    course.mkdir()
    work.mkdir()
    assert nbgrader_default_exchange() == Path(Exchange.root.default_value) == Path("/usr/local/share/nbgrader/exchange")
    assert configured_exchange(course, work) == nbgrader_default_exchange()

    exchange_config(course, "/from/the/course")
    assert configured_exchange(course, work) == Path("/from/the/course")
    exchange_config(person / ".jupyter", "/from/the/user")  # Jupyter's config folders outrank the course's
    assert configured_exchange(course, work) == Path("/from/the/user")
    (work / CONFIG).mkdir()
    (work / CONFIG / "nbgrader_config.json").write_text(json.dumps({"Exchange": {"root": "/ours"}}))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(work / CONFIG))  # as lab_plan sets it: above ~/.jupyter
    assert configured_exchange(course, work) == Path("/ours")
    assert configured_exchange(course, work, skip=(work / CONFIG,)) == Path("/from/the/user"), "the course's own is skipped"
    (person / ".jupyter" / "nbgrader_config.py").unlink()
    assert configured_exchange(course, work, skip=(work / CONFIG,)) == Path("/from/the/course")
    exchange_config(work, "/in/the/workspace")  # the Assignments list's working directory outranks all
    assert configured_exchange(course, work) == Path("/in/the/workspace")


def test_without_an_exchange_the_assignments_list_is_empty_not_an_error(tmp_path, person, monkeypatch):
    """What the student's Assignments list asks nbgrader's server extension (its courses, its
    assignments) answers with success and an empty list when no exchange exists."""
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    work = tmp_path / "work"
    missing = tmp_path / "no-exchange"
    exchange = choose_exchange(missing, work)
    assert exchange.local and exchange.root == work / CONFIG / LOCAL_EXCHANGE and exchange.configured == missing
    line = exchange.message()
    assert "\n" not in line and str(missing) in line and "c.Exchange.root" in line and "instructor" in line

    work.mkdir()
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(work / CONFIG))  # as lab_plan sets it
    listing = AssignmentList()
    listing.root_dir = str(work)
    exchange_config(work / CONFIG, missing)  # whatever this machine has at nbgrader's default
    assert not listing.list_courses()["success"], "nbgrader's own answer: the exchange does not exist"

    write_student_config(work / CONFIG, exchange)
    assert exchange.root.is_dir() and not any(exchange.root.iterdir())
    assert listing.list_courses() == {"success": True, "value": []}
    assert listing.list_assignments(course_id="transformer-course") == {"success": True, "value": []}

    shared = tmp_path / "shared-exchange"
    shared.mkdir()
    found = choose_exchange(shared, work)
    assert not found.local and found.root == shared and str(shared) in found.message()
    write_student_config(work / CONFIG, found)
    assert f"c.Exchange.root = {str(shared)!r}" in (work / CONFIG / "nbgrader_config.py").read_text()


def exchange_config(folder: Path, root: str | Path) -> None:
    """An ``nbgrader_config.py`` in ``folder`` that names the exchange ``root``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(root)!r}\n")


# ---------------------------------------------------------------------------------------------
# git ignores nbgrader's working folders


def test_git_ignores_nbgraders_working_folders():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    ignored = ["submitted/ada/03/x.ipynb", "autograded/ada/x", "feedback/ada/x.html", "graded/grades.csv",
               "release/03/x.ipynb", "source/03/x.ipynb", "gradebook.db", "work/03/x.ipynb", f"{CONFIG}/{APP_SETTINGS}/x.json",
               ".grading-secret"]
    for path in ignored:
        assert not [t for t in tracked if t == path.split("/")[0] or t.startswith(path.split("/")[0] + "/")], \
            f"{path.split('/')[0]} is tracked: it cannot be ignored"
    done = subprocess.run(["git", "check-ignore", "--no-index", *ignored], cwd=ROOT, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(ignored), f"not ignored: {set(ignored) - set(done.stdout.split())}"
    kept = ["notebooks/03/x.ipynb", "solutions/03/x.ipynb", "helpers/feedback/x.py", "tests/graded/x.py"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *kept], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == [], "only the folders at the course root"


def test_the_plugin_ids_are_nbgrader_s_own():
    """The ids above are the ones nbgrader's installed labextension registers (a rename would
    silently re-enable a tool)."""
    import nbgrader

    bundle = Path(nbgrader.__file__).parent / "labextension" / "static"
    if not bundle.is_dir():  # installed as shared data instead
        import sys

        bundle = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader" / "static"
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in bundle.glob("*.js"))
    for plugin in INSTRUCTOR_PLUGINS + STUDENT_KEPT_PLUGINS:
        assert f'"{plugin}"' in text, f"nbgrader's labextension has no plugin {plugin}"


def test_cli_starts_the_student_lab_on_a_synced_workspace(tmp_path, monkeypatch, capsys, person):
    started = {}

    def fake_call(cmd, cwd, env):
        started.update(cmd=cmd, cwd=cwd, env=env)
        return 0

    monkeypatch.setattr(cli_commands.subprocess, "call", fake_call)
    monkeypatch.setenv("TRANSFORMER_COURSE_ROOT", str(ROOT))
    work = tmp_path / "mywork"
    assert cli.main(["lab", "--workspace", str(work), "--no-browser"]) == 0
    assert (work / LESSON_03).read_bytes() == (ROOT / RELEASE / LESSON_03).read_bytes()
    assert f"--ServerApp.root_dir={work.resolve()}" in started["cmd"]
    assert (work / CONFIG / "labconfig" / "page_config.json").is_file()
    assert (work / CONFIG / APP_SETTINGS / "overrides.d" / COURSE_OVERRIDES_FILE).is_file()
    assert started["env"]["PATH"].split(os.pathsep)[0] == HERE_BIN
    out = capsys.readouterr().out.splitlines()
    assert "created your workspace" in out[0]
    exchange_line = [line for line in out if line.startswith("Assignments list")]
    assert len(exchange_line) == 1, out
    if not nbgrader_default_exchange().is_dir():  # no exchange on this machine: an empty one of the workspace's
        assert str(nbgrader_default_exchange()) in exchange_line[0]
        assert (work / CONFIG / LOCAL_EXCHANGE).is_dir()
        assert str(work.resolve() / CONFIG / LOCAL_EXCHANGE) in (work / CONFIG / "nbgrader_config.py").read_text()

    course = tmp_path / "course"  # the instructor's lab writes its settings into the course root: not the checkout's
    (course / "solutions").mkdir(parents=True)
    monkeypatch.setenv("TRANSFORMER_COURSE_ROOT", str(course))
    assert cli.main(["lab", "--instructor", "--no-browser"]) == 0
    assert f"--ServerApp.root_dir={course.resolve()}" in started["cmd"]
    assert (course / CONFIG / APP_SETTINGS / "overrides.d" / COURSE_OVERRIDES_FILE).is_file()
    assert cli.main(["lab", "--instructor", "--workspace", str(work)]) == 2
