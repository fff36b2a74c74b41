"""A first `grade` run stopped partway (Ctrl-C in the terminal) and run again: only the notebooks it
had not finished are graded again, and the outputs are those of a run never interrupted.

The course must not change while this runs: its fingerprint is part of every cache key and of
grading.json, so an edit between the runs rightly makes the next run grade everything again."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from harness import ROOT
from test_shards import report_digest, small_class

from autograder.run_folder import CACHE, JOBS, MANIFEST

ASSIGNMENT = "03-self-attention"
#: a correct answer, a blank one, three mistakes and an infinite loop (seconds, until its alarm): the
#: run cannot finish between the second finished notebook and the interruption
CLASS = {"ada-correct", "ben-blank", "gus-no-scaling", "ivo-in-place", "kai-infinite-loop", "lea-raises"}
GRADE = [sys.executable, "-m", "autograder.cli", "grade"]


def grade(submitted, out, **popen):
    """`transformer-course grade` in a process of its own, in a session of its own (so that the
    test can signal it, its fork server and its workers at once, as a terminal's Ctrl-C does);
    the limits are measured from the solution, as an instructor's run does."""
    argv = [*GRADE, str(submitted), "--out", str(out), "--assignment", ASSIGNMENT, "--sandbox", "none", "--jobs", "1"]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)


def finished(out):
    return sorted((out / CACHE).glob(f"*__{ASSIGNMENT}.json"))


def interrupt_after(proc, out, count, limit_s=300):
    """Ctrl-C the run once ``count`` notebooks are finished (in its cache); returns its exit code."""
    deadline = time.monotonic() + limit_s
    while len(finished(out)) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the first run ended before {count} notebooks were finished: {proc.communicate()}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the interrupted run did not stop within 60 s of Ctrl-C")
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid):  # its fork server and workers stop with it
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("processes of the interrupted run were still running 10 s after it ended")
        time.sleep(0.1)
    return proc.returncode


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def results_of(out):
    """Each finished notebook's cache file without its run time: (file name, key, result)."""
    found = {}
    for path in finished(out):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["result"].pop("wall_s")
        found[path.name] = data
    return found


def jobs_rows(out):
    with open(out / JOBS, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_an_interrupted_first_run_grades_only_the_unfinished_notebooks_again(tmp_path):
    submitted = small_class(tmp_path, CLASS)
    out = tmp_path / "interrupted"
    code = interrupt_after(grade(submitted, out), out, 2)
    assert code == 130  # `grade` says it was interrupted
    done = len(finished(out))
    assert 2 <= done < len(CLASS) and not (out / MANIFEST).exists()  # stopped partway: no manifest yet
    measured = sorted((out / CACHE).glob("limits-*.json"))
    assert len(measured) == 1  # the limits measured before the notebooks, kept for the next run

    again = grade(submitted, out)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"resuming: {done} of {len(CLASS)} notebooks already graded" in err, err
    assert f"grading {len(CLASS) - done} notebooks with" in err, err
    rows = jobs_rows(out)
    assert sum(r["worker"] == "cache" for r in rows) == done
    assert len(rows) == len(CLASS)

    # a run never interrupted, under the same measured limits (measuring again would time them anew)
    one = tmp_path / "one"
    (one / CACHE).mkdir(parents=True)
    shutil.copyfile(measured[0], one / CACHE / measured[0].name)
    whole = grade(submitted, one)
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 0, err
    assert "resuming" not in err and f"grading {len(CLASS)} notebooks with" in err, err
    assert report_digest(out) == report_digest(one)
    assert results_of(out) == results_of(one)
