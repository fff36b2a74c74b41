"""The two labs of ``transformer-course lab``, in a real browser (headless Chromium, Playwright):

* the student's: no instructor tool anywhere (no Formgrader, Create Assignment or Course List in
  the menus, the launcher, the command palette or the side bars; ``/formgrader`` answers 404; the
  disabled plugins are locked, so JupyterLab's plugin manager refuses to switch them back on),
  while the Assignments list and the Validate button are there;
* the instructor's (``--instructor``): Formgrader opens and lists the course's assignments,
  started as an instructor types it, ``.venv/bin/transformer-course lab --instructor`` with the
  environment not activated (its folder not on PATH: nbgrader must still find ``alembic``);
* in both, JupyterLab never asks about (or fetches) Jupyter's news; in the student's, the
  Assignments list is empty, not an error, where no nbgrader exchange exists.

Both are started by the real command, on 127.0.0.1 with a token, in a temporary HOME; the
instructor's on a temporary copy of the course, so nothing is written into the checkout. Locally the tests are skipped without Playwright or Chromium; with
``CI`` set they fail (see test_browser.py).
"""

import json
import os
import secrets
import sqlite3
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from jupyter_env import LAB_DROP, ROOT, copy_course, jupyter_server, person_env

from autograder.course import RELEASE
from autograder.lab import COURSE_OVERRIDES, INSTRUCTOR_PLUGINS
from autograder.lab_exchange import nbgrader_default_exchange

APP_READY_S = 120
# what a student must never be offered, as JupyterLab labels it
INSTRUCTOR_LABELS = ("Formgrader", "Create assignment", "Create Assignment", "Course List", "Courses")
NOTIFICATION = "@jupyterlab/apputils-extension:notification"
NEWS_PROMPT = "official Jupyter news"  # "Would you like to get notified about official Jupyter news?"
#: what nbgrader's Assignments list shows when the exchange folder does not exist
EXCHANGE_ERRORS = ("Error fetching courses", "exchange directory does not exist")

pytestmark = pytest.mark.slow


@dataclass
class Lab:
    url: str
    token: str
    log: Path
    workspace: Path | None = None  # the student's
    course: Path | None = None  # the instructor's course root


def http(lab: Lab, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
    """Status and text of a request to the lab on loopback (never through a proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{lab.url}{path}", data=data, method=method,
                                     headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=10) as reply:
            return reply.status, reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")


def start_lab(tmp: Path, args: list[str], course: Path, *, by_script: bool = False):
    """``transformer-course lab ARGS`` on a free port; yields a Lab, then stops it. ``by_script``:
    started by the environment's ``transformer-course`` script with its folder off PATH, as
    ``.venv/bin/transformer-course`` is run from a shell that did not activate the environment."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    token = secrets.token_urlsafe(24)
    env = person_env(home, drop=LAB_DROP, JUPYTER_TOKEN=token, TRANSFORMER_COURSE_ROOT=str(course))
    log_path = tmp / "lab.log"
    here = Path(sys.executable).parent
    script = here / "transformer-course"
    if by_script and script.exists():
        env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != here)
        start = [str(script)]
    else:
        start = [sys.executable, "-m", "autograder.cli"]

    def command(port: int) -> list[str]:
        return [*start, "lab", *args, "--no-browser", f"--port={port}"]

    with jupyter_server(command, cwd=course, env=env, token=token, log=log_path,
                        failure=f"`transformer-course lab {' '.join(args)}` did not answer") as port:
        yield Lab(f"http://127.0.0.1:{port}", token, log_path)


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("student-lab")
    for lab in start_lab(tmp, ["--workspace", str(tmp / "work")], ROOT):
        lab.workspace = tmp / "work"
        yield lab


@pytest.fixture(scope="module")
def instructor_lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("instructor-lab")
    course = tmp / "course"  # formgrader writes its gradebook.db into the course root: never the checkout's
    copy_course(course)
    for lab in start_lab(tmp, ["--instructor"], course, by_script=True):
        lab.course = course
        yield lab


def open_lab(page, lab: Lab, path: str = "") -> None:
    page.goto(f"{lab.url}/lab{path}?token={lab.token}", timeout=90_000)
    page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first.wait_for(state="visible", timeout=APP_READY_S * 1000)


def menu_labels(page, menu: str) -> list[str]:
    """The labels of the visible items of a menu of the menu bar (the menu is closed again)."""
    page.locator(".lm-MenuBar-item").filter(has_text=menu).first.click()
    page.locator(".lm-Menu").first.wait_for(state="visible")
    labels = page.evaluate("""() => Array.from(document.querySelectorAll('.lm-Menu .lm-Menu-item'))
        .filter(item => item.offsetParent !== null)
        .map(item => (item.querySelector('.lm-Menu-itemLabel') || item).textContent.trim())""")
    page.keyboard.press("Escape")
    return labels


def palette_labels(page, query: str) -> list[str]:
    """What the command palette offers for ``query``."""
    palette = page.locator(".lm-CommandPalette-input")
    if not palette.is_visible():
        page.keyboard.press("Control+Shift+C")
        palette.wait_for(state="visible", timeout=10_000)
    palette.fill(query)
    page.wait_for_timeout(500)
    labels = page.evaluate("""() => Array.from(document.querySelectorAll('.lm-CommandPalette-item'))
        .filter(item => item.offsetParent !== null)
        .map(item => item.querySelector('.lm-CommandPalette-itemLabel').textContent.trim())""")
    palette.fill("")
    return labels


def news_checks(page, lab: Lab) -> None:
    """The news setting's default is "false" (Never) on the server, and the open lab shows no
    news prompt (JupyterLab asks right after the app is restored when it is "none")."""
    status, reply = http(lab, f"/lab/api/settings/{NOTIFICATION}")
    assert status == 200, reply[:500]
    default = json.loads(reply)["schema"]["properties"]["fetchNews"]["default"]
    assert default == COURSE_OVERRIDES[NOTIFICATION]["fetchNews"] == "false", default
    page.wait_for_timeout(3000)  # the prompt would be up by now
    assert page.get_by_text(NEWS_PROMPT).count() == 0, "JupyterLab asks about Jupyter's news"


def screenshot_on_failure(page, lab: Lab, tmp_path: Path, name: str):
    try:
        page.screenshot(path=str(tmp_path / f"{name}-failure.png"))
        print(f"screenshot: {tmp_path / f'{name}-failure.png'}")
    except Exception as exc:  # noqa: BLE001 - the first error is the one to report
        print(f"no screenshot: {exc}")
    print(f"the lab's log:\n{lab.log.read_text()[-5000:]}")


def test_student_lab_has_no_instructor_tool(page, student_lab, tmp_path):
    lab = student_lab
    try:
        student_lab_checks(page, lab, tmp_path)
    except Exception:
        screenshot_on_failure(page, lab, tmp_path, "student-lab")
        raise


def student_lab_checks(page, lab: Lab, tmp_path: Path) -> None:
    # the workspace was made from the release, and the lab opens it (not notebooks/)
    notebook = "01-tokens-and-embeddings/01-tokens-and-embeddings.ipynb"
    assert (lab.workspace / notebook).read_bytes() == (ROOT / RELEASE / notebook).read_bytes()
    status, listing = http(lab, "/api/contents")
    assert status == 200 and "01-tokens-and-embeddings" in listing, listing[:500]

    # the server: no formgrader, no instructor course list; the student's handlers answer
    assert http(lab, "/formgrader")[0] == 404, "formgrader's server extension is not loaded"
    assert http(lab, "/formgraders")[0] == 404, "course_list's server extension is not loaded"
    assert http(lab, "/nbgrader_version?version=0.9.6")[0] == 200
    # the disabled plugins are locked: JupyterLab's plugin manager refuses to enable them
    status, locks = http(lab, "/lab/api/plugins")
    assert status == 200 and set(INSTRUCTOR_PLUGINS) <= set(json.loads(locks)["lockRules"]), locks
    status, reply = http(lab, "/lab/api/plugins", "POST", {"cmd": "enable", "plugin_name": INSTRUCTOR_PLUGINS[0]})
    assert status >= 400 or json.loads(reply).get("status") == "error", reply

    open_lab(page, lab)
    launcher = page.locator(".jp-Launcher")
    launcher.first.wait_for(state="visible", timeout=60_000)
    launcher_text = launcher.first.text_content()
    assert "Notebook" in launcher_text
    news_checks(page, lab)
    for label in INSTRUCTOR_LABELS:
        assert label not in launcher_text, f"the launcher offers {label}"

    nbgrader_menu = menu_labels(page, "Nbgrader")
    assert "Assignment List" in nbgrader_menu, nbgrader_menu
    for menu in ("File", "View", "Nbgrader", "Help"):
        labels = menu_labels(page, menu)
        assert not [x for x in labels if any(w in x for w in INSTRUCTOR_LABELS)], f"{menu} menu: {labels}"

    assert "Assignment List" in palette_labels(page, "assignment list"), "the palette works and lists nbgrader"
    for query in ("formgrader", "create assignment", "course list"):
        offered = palette_labels(page, query)
        assert not [x for x in offered if any(w.lower() in x.lower() for w in INSTRUCTOR_LABELS)], (query, offered)
    page.keyboard.press("Escape")
    assert page.evaluate("() => document.getElementById('nbgrader-create_assignemnt')") is None, \
        "no Create Assignment side panel"
    sidebar = page.evaluate("() => Array.from(document.querySelectorAll('.lm-TabBar-tab')).map(t => t.title + ' ' + t.textContent)")
    assert not [t for t in sidebar if "Create Assignment" in t or "Formgrader" in t], sidebar

    # the Assignments list opens, and a notebook has nbgrader's Validate button
    page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first.click()
    page.locator(".lm-Menu-item").filter(has_text="Assignment List").first.click()
    assignments = page.locator("#nbgrader-assignment-list")
    assignments.wait_for(state="visible", timeout=30_000)
    assert "Released assignments" in assignments.text_content()
    if not nbgrader_default_exchange().is_dir():  # no exchange here: an empty list, not an error
        status, reply = http(lab, "/courses")
        assert status == 200 and json.loads(reply) == {"success": True, "value": []}, reply[:500]
        page.wait_for_timeout(2000)  # the list asks the server for its courses
        shown = page.locator("body").text_content()
        assert not [e for e in EXCHANGE_ERRORS if e in shown], [e for e in EXCHANGE_ERRORS if e in shown]

    open_lab(page, lab, f"/tree/{notebook}")
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=90_000)
    validate = page.locator(".jp-NotebookPanel-toolbar").get_by_role("button", name="Validate")
    validate.wait_for(state="visible", timeout=30_000)
    assert validate.count() == 1
    page.screenshot(path=str(tmp_path / "student-lab.png"))


def test_instructor_lab_opens_formgrader(page, instructor_lab, tmp_path):
    lab = instructor_lab
    try:
        assert http(lab, "/formgrader")[0] == 200
        # Formgrader's first page made the gradebook: with alembic found, it has its version table
        assert http(lab, "/formgrader/api/assignments")[0] == 200
        with sqlite3.connect(lab.course / "gradebook.db") as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "alembic_version" in tables, sorted(tables)
        open_lab(page, lab)
        news_checks(page, lab)
        labels = menu_labels(page, "Nbgrader")
        assert {"Assignment List", "Formgrader", "Course List"} <= set(labels), labels
        page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first.click()
        page.locator(".lm-Menu-item").filter(has=page.locator(".lm-Menu-itemLabel", has_text="Formgrader")).first.click()
        page.locator("#formgrader").wait_for(state="visible", timeout=30_000)
        frame = page.frame_locator("#formgrader iframe")
        frame.get_by_text("Manage Assignments").first.wait_for(state="visible", timeout=60_000)
        frame.get_by_text("03-self-attention").first.wait_for(state="visible", timeout=60_000)
        page.screenshot(path=str(tmp_path / "instructor-formgrader.png"))
    except Exception:
        screenshot_on_failure(page, lab, tmp_path, "instructor-lab")
        raise
