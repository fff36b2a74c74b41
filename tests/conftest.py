"""Settings for the whole test suite, and the real browser the browser tests drive."""

import os

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


# The longest test files run first, longest to shortest (minutes, then tens of seconds, on 2
# cores); the quick ones fill in at the end. The test command (`-n auto --dist loadfile`) hands
# whole files to the workers in this order, so the run does not end with one worker busy on a long
# file while the other waits. Only the order changes.
LONGEST_FIRST = ("test_lesson08.py", "test_lesson07.py", "test_lesson09.py", "test_grading.py",
                 "test_notebooks.py", "test_lesson10.py", "test_book.py", "test_lesson06.py",
                 "test_lesson04.py", "test_lesson03.py", "test_lesson05.py", "test_lesson02.py",
                 "test_lesson01.py", "test_adversarial.py", "test_labs_browser.py", "test_roundtrip.py",
                 "test_stuck_cells.py", "test_browser.py", "test_contributing.py", "test_shards.py",
                 "test_dask.py", "test_selfcheck_kernel.py", "test_limits.py")


def pytest_collection_modifyitems(items):
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


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
