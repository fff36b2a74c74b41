"""Settings for the whole test suite, and the real browser the browser tests drive."""

import json
import os
from pathlib import Path

import pytest
from chromium import CHROMIUM, CHROMIUM_ARGS, missing
from harness import generate_catalogue_tests
from lesson_runs import LessonRuns, shared_folder

# Lessons that train read this: tests run them in their quick setting (seconds, not minutes).
os.environ.setdefault("TRANSFORMER_COURSE_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Tiny tensors on a busy 2-core machine run far faster on one thread; kernels started by the
# notebook tests inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Grading draws the checks' inputs from the course's secret (autograder/batch.py): the tests
# grade with this fixed one, so every run sees the same inputs, and none of them as written.
os.environ.setdefault("TRANSFORMER_COURSE_SECRET", "the test suite's fixed grading secret")


def pytest_generate_tests(metafunc):
    generate_catalogue_tests(metafunc)  # one test per entry of a lesson's catalogue (tests/harness.py)


# The longest test files run first, longest to shortest; the quick ones fill in at the end. The
# test command (`-n auto --dist loadfile`) hands whole files to the workers in this order, so the
# run does not end with one worker busy on a long file while the other waits. Only the order
# changes. The order comes from tests/durations.json, each file's seconds in a whole run, written
# by a run with TRANSFORMER_COURSE_RECORD_DURATIONS=1; a file not in it yet (a new lesson's tests)
# counts as the longest and runs first.
DURATIONS = Path(__file__).with_name("durations.json")
RECORD_DURATIONS = "TRANSFORMER_COURSE_RECORD_DURATIONS"


def measured_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def schedule_key(name: str, durations: dict[str, float]) -> float:
    """Sort key of a test file: longest first, unknown files before all."""
    return -durations.get(name, float("inf"))


def pytest_collection_modifyitems(items):
    durations = measured_durations()
    items.sort(key=lambda item: schedule_key(item.path.name, durations))  # stable: a file's tests keep their order


_spent: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if os.environ.get(RECORD_DURATIONS) == "1":
        name = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        _spent[name] = _spent.get(name, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(RECORD_DURATIONS) == "1" and _spent and not hasattr(session.config, "workerinput"):
        DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(_spent.items())}, indent=1) + "\n",
                             encoding="utf-8")


@pytest.fixture(scope="session")
def lesson_runs(tmp_path_factory) -> LessonRuns:
    """Each lesson's page, run once for the whole test run (tests/lesson_runs.py)."""
    return LessonRuns(shared_folder(tmp_path_factory.getbasetemp()))


# the real browser (tests/chromium.py) that tests/test_browser.py and
# tests/test_labs_browser.py drive
@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        missing(f"no Chromium at {CHROMIUM} (set TRANSFORMER_COURSE_CHROMIUM)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    try:
        yield context.new_page()
    finally:
        context.close()
