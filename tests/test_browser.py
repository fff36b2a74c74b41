"""What a student and a reader see, in a real browser (headless Chromium driven by Playwright):

* JupyterLab on the released lesson 03: Run All draws the attention plots, the blank exercise
  shows its NotImplementedError, and nbgrader's tools (the Validate button, the Nbgrader menu) work;
* the book: a solution and a hint are hidden until their toggle is clicked, and its math is
  typeset (MathJax from the book itself) with every request to another host blocked.

Everything runs on 127.0.0.1 with bounded waits; JupyterLab and the browser are always shut down.
Locally the tests are skipped when Playwright or Chromium is missing; with ``CI`` set they fail.
"""

import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from chromium import missing
from jupyter_env import LAB_DROP, ROOT, api, jupyter_server, person_env, this_python_first

from autograder.course import RELEASE, lessons, nbgrader_meta

LESSON = "03-self-attention"
KERNEL_IDLE_S = 120
RUN_ALL_S = 300
VALIDATE_S = 180

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------------
# JupyterLab


@dataclass
class Lab:
    url: str
    token: str
    root_dir: Path
    log: Path


def wait_for_kernel(lab: Lab, timeout_s: float) -> None:
    """Until the notebook's kernel is started, connected to the page and idle (REST, not the DOM)."""
    deadline, kernels = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        kernels = api(lab.url, lab.token, "/api/kernels") or []
        if any(k.get("execution_state") == "idle" and k.get("connections", 0) > 0 for k in kernels):
            return
        time.sleep(0.5)
    raise AssertionError(f"no connected idle kernel after {timeout_s:.0f} s: {kernels}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab as ``transformer-course lab`` starts it (course root as working directory, so
    nbgrader finds its config), on a temporary copy of notebooks/, on 127.0.0.1 with a token."""
    jupyter = shutil.which("jupyter", path=this_python_first())
    if jupyter is None:
        pytest.fail("jupyter is not installed in this environment")
    tmp = tmp_path_factory.mktemp("lab")
    home, root_dir = tmp / "home", tmp / "notebooks"
    home.mkdir()
    shutil.copytree(ROOT / RELEASE, root_dir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    token = secrets.token_urlsafe(24)
    log_path = tmp / "jupyter.log"

    def command(port: int) -> list[str]:
        cmd = [
            jupyter, "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root_dir}",
            f"--LabApp.workspaces_dir={home / 'workspaces'}", "--ServerApp.open_browser=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--ServerApp.allow_root=True")
        return cmd

    env = person_env(home, drop=LAB_DROP, TRANSFORMER_COURSE_ROOT=str(ROOT))
    with jupyter_server(command, cwd=ROOT, env=env, token=token, log=log_path,
                        failure="JupyterLab did not answer on /api/status") as port:
        yield Lab(f"http://127.0.0.1:{port}", token, root_dir, log_path)


JS_EXECUTION_STATE = """() => {
  const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
  const prompts = Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Cell .jp-InputPrompt'))
      .map(p => p.textContent.trim());
  return {
    status: indicator ? indicator.dataset.status : null,
    running: prompts.filter(p => p.includes('*')).length,
    executed: prompts.filter(p => /\\[\\d+\\]/.test(p)).length,
  };
}"""


def wait_until(page, predicate, timeout_s: float, what: str, poll_s: float = 0.5):
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        last = page.evaluate(JS_EXECUTION_STATE)
        if predicate(last):
            return last
        page.wait_for_timeout(poll_s * 1000)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last state {last}")


def run_all_cells(page) -> None:
    """Run → Run All Cells, through the menu bar (the command JupyterLab's menu runs)."""
    page.locator(".lm-MenuBar-item").filter(has_text="Run").first.click()
    item = page.locator('.lm-Menu-item[data-command="runmenu:run-all"]')
    if item.count() == 0:  # another JupyterLab version: find it by its label
        item = page.locator(".lm-Menu-item").filter(has=page.locator(".lm-Menu-itemLabel", has_text="Run All Cells")).first
    item.click()


def test_student_runs_lesson_03_in_jupyterlab(browser, page, lab, tmp_path):
    try:
        student_runs_lesson_03(page, lab, tmp_path)
    except Exception:
        try:
            page.screenshot(path=str(tmp_path / "jupyterlab-failure.png"))
            print(f"screenshot: {tmp_path / 'jupyterlab-failure.png'}")
        except Exception as exc:  # noqa: BLE001 - the first error is the one to report
            print(f"no screenshot: {exc}")
        print(f"JupyterLab's log:\n{lab.log.read_text()[-5000:]}")
        raise


def student_runs_lesson_03(page, lab: Lab, tmp_path: Path) -> None:
    path = f"{LESSON}/{LESSON}.ipynb"
    assert (lab.root_dir / path).exists(), f"no released notebook {path}"
    page.goto(f"{lab.url}/lab/tree/{path}?token={lab.token}", timeout=90_000)
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=90_000)
    wait_for_kernel(lab, KERNEL_IDLE_S)
    wait_until(page, lambda s: s["status"] == "idle", KERNEL_IDLE_S, "the page to show an idle kernel")

    # nbgrader's student tools are there
    toolbar = page.locator(".jp-NotebookPanel-toolbar")
    validate = toolbar.get_by_role("button", name="Validate")
    assert validate.count() == 1, "nbgrader's Validate button is in the notebook toolbar"
    assert page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").count() == 1, "the Nbgrader menu"

    for attempt in range(3):  # a click while the page is still wiring itself up can go unheard
        run_all_cells(page)
        try:
            wait_until(page, lambda s: s["executed"] > 0 or s["running"] > 0, 20, "Run All to start")
            break
        except AssertionError:
            if attempt == 2:
                raise
    state = wait_until(page, lambda s: s["status"] == "idle" and s["running"] == 0, RUN_ALL_S, "Run All to finish")
    assert state["executed"] >= 3, state

    # the attention plots drawn before the first exercise
    images = page.locator(".jp-NotebookPanel .jp-OutputArea-output img")
    assert images.count() >= 3, f"{images.count()} output images"
    decoded = page.evaluate("""() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output img'))
        .map(img => img.complete && img.naturalWidth > 100 && img.src.startsWith('data:image/png'))""")
    assert all(decoded), f"every output image is a loaded PNG: {decoded}"

    # the blank exercise: its visible test fails with the NotImplementedError of the stub
    errors = page.locator('.jp-NotebookPanel .jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]')
    texts = [errors.nth(i).text_content() for i in range(errors.count())]
    assert any("NotImplementedError" in t for t in texts), f"error outputs: {[t[:300] for t in texts]}"
    first_error = errors.filter(has_text="NotImplementedError").first
    first_error.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "jupyterlab-lesson03.png"))

    # Validate: nbgrader runs the saved (blank) notebook and reports the failing test cells
    validate.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible", timeout=VALIDATE_S * 1000)
    page.wait_for_function(
        "() => { const d = document.querySelector('.jp-Dialog'); return d && /failed|Success/.test(d.textContent); }",
        timeout=VALIDATE_S * 1000,
    )
    report = dialog.text_content()
    page.screenshot(path=str(tmp_path / "jupyterlab-validate.png"))
    assert "Validation Results" in report and "NotImplementedError" in report, report[:2000]
    assert "check_causal_mask_hidden" not in report, "a student's validation never shows hidden tests"
    page.keyboard.press("Escape")


# ---------------------------------------------------------------------------------------------
# the book


@pytest.fixture(scope="module")
def quick_book(tmp_path_factory) -> Path:
    """The book rendered without executing (seconds): enough to see what is folded."""
    for module in ("sphinx", "myst_nb", "sphinx_book_theme", "sphinx_design"):
        try:
            __import__(module)
        except ImportError:
            missing(f"{module} is not installed (the book's tools)")
    from autograder.book import build_book

    out = tmp_path_factory.mktemp("book") / "html"
    build_book(ROOT, out, execute=False)
    return out


@pytest.mark.parametrize("lesson", lessons(ROOT), ids=lambda lesson: lesson.assignment)
def test_book_hides_solutions_and_hints_until_clicked(browser, quick_book, page, tmp_path, lesson):
    n_solutions = sum(1 for c in lesson.notebook["cells"]
                      if c["cell_type"] == "code" and nbgrader_meta(c).get("solution"))
    page.goto((quick_book / lesson.assignment / f"{lesson.name}.html").as_uri())
    toggles = page.locator("details.hide.above-input")
    assert toggles.count() == n_solutions, "one folded solution per answer cell"
    for i in range(toggles.count()):
        code = toggles.nth(i).locator("pre")
        assert code.count() == 1 and not code.is_visible(), f"solution {i} is visible without a click"
    hints = page.locator("details").filter(has=page.locator("summary", has_text="Hint"))
    assert hints.count() >= 1
    body = hints.first.locator("p, ol, ul").first
    assert not body.is_visible(), "a hint's text is hidden until clicked"

    first = toggles.first
    first.locator("summary").click()
    code = first.locator("pre")
    code.wait_for(state="visible", timeout=5_000)
    assert code.is_visible() and code.text_content().strip()
    hints.first.locator("summary").click()
    body.wait_for(state="visible", timeout=5_000)
    code.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / f"book-{lesson.assignment}-unfolded.png"))


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
JS_MATH = """() => {
  const math = Array.from(document.querySelectorAll('article .math'));
  const prose = document.querySelector('article').cloneNode(true);
  prose.querySelectorAll('pre, code, .cell_input, .cell_output, mjx-assistive-mml').forEach(n => n.remove());
  return {
    math: math.length,
    typeset: math.filter(m => m.querySelector('mjx-container')).length,
    raw: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    prose: prose.textContent,
    sized: Array.from(document.querySelectorAll('article mjx-container'))
      .filter(c => c.getBoundingClientRect().width > 0).length,
  };
}"""
RAW_TEX = ("$$", "\\(", "\\)", "\\[", "\\]", "\\frac", "\\sum", "\\ln", "\\sqrt", "\\text{")


def block_the_network(page) -> list[str]:
    """Abort every request to another host (the reader is offline); returns the list of what
    was attempted, filled as the page loads."""
    attempted = []

    def handle(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOCAL_HOSTS:
            attempted.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.context.route("**/*", handle)
    return attempted


def test_book_math_is_typeset_offline(browser, quick_book, page, tmp_path):
    """Lesson 02 (the softmax, the loss) and every other page with math: MathJax, served by the
    book itself, turns each formula into rendered math; no TeX is left showing; nothing is fetched
    from another host."""
    attempted = block_the_network(page)
    pages = [p for p in sorted(quick_book.glob("*/*.html")) if not p.parent.name.startswith("_")
             and 'class="math' in p.read_text(encoding="utf-8")]
    assert any(p.parent.name.startswith("02-") for p in pages), f"lesson 02 has math; pages with math: {pages}"
    for path in pages:
        page.goto(path.as_uri())
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                   timeout=20_000)
        except Exception as exc:  # noqa: BLE001 - say why, not only that it timed out
            raise AssertionError(f"{path.name}: MathJax never started offline; the page asked the "
                                 f"network for {attempted}") from exc
        page.evaluate("() => MathJax.startup.promise")
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('article .math')).every(m => m.querySelector('mjx-container'))",
            timeout=30_000,
        )
        state = page.evaluate(JS_MATH)
        assert state["math"] > 0 and state["typeset"] == state["math"], f"{path.name}: raw math left: {state['raw']}"
        assert state["sized"] >= state["math"], f"{path.name}: typeset math takes up room on the page"
        shown = [tex for tex in RAW_TEX if tex in state["prose"]]
        assert not shown, f"{path.name}: TeX still visible in the text: {shown}"
        page.locator("article mjx-container").first.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / f"math-{path.parent.name}.png"))
    assert not attempted, f"the book asked the network for {attempted}"
