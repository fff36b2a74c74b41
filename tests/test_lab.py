"""``transformer-course lab`` without a browser: the student's workspace survives course updates,
and the student's and the instructor's labs are started with the right tools (see
test_labs_browser.py for what a browser then shows)."""

import json
import shutil
from pathlib import Path

import pytest

from autograder import cli
from autograder.course import RELEASE, CourseError
from autograder.lab import (
    CONFIG,
    INSTRUCTOR_PLUGINS,
    INSTRUCTOR_SERVER_EXTENSIONS,
    MANIFEST,
    STUDENT_KEPT_PLUGINS,
    STUDENT_SERVER_EXTENSIONS,
    lab_plan,
    resolve_workspace,
    student_page_config,
    sync_workspace,
    write_student_config,
)

ROOT = Path(__file__).resolve().parents[1]
LESSON_03 = "03-self-attention/03-self-attention.ipynb"


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


def test_cli_starts_the_student_lab_on_a_synced_workspace(tmp_path, monkeypatch, capsys):
    started = {}

    def fake_call(cmd, cwd, env):
        started.update(cmd=cmd, cwd=cwd, env=env)
        return 0

    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    monkeypatch.setenv("TRANSFORMER_COURSE_ROOT", str(ROOT))
    work = tmp_path / "mywork"
    assert cli.main(["lab", "--workspace", str(work), "--no-browser"]) == 0
    assert (work / LESSON_03).read_bytes() == (ROOT / RELEASE / LESSON_03).read_bytes()
    assert f"--ServerApp.root_dir={work.resolve()}" in started["cmd"]
    assert (work / CONFIG / "labconfig" / "page_config.json").is_file()
    assert "created your workspace" in capsys.readouterr().out

    assert cli.main(["lab", "--instructor", "--no-browser"]) == 0
    assert f"--ServerApp.root_dir={ROOT}" in started["cmd"]
    assert cli.main(["lab", "--instructor", "--workspace", str(work)]) == 2
