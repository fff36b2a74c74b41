"""`grade --executor dask://HOST:PORT`: a live Dask pool grades exactly as the local run does,
keeps its fork servers from one run to the next, and starts new ones when the course changes.

Skipped where Dask's ``distributed`` is not installed (it is in the ``dev`` extra, so CI runs it).
The cluster is a 2-worker ``LocalCluster`` on 127.0.0.1: no network beyond this machine. It grades
a copy of the course (``TRANSFORMER_COURSE_ROOT``), which the test changes; the code is this checkout's.
"""

import csv
import hashlib
import shutil
from pathlib import Path

import pytest
from harness import ROOT

from autograder.cli import main
from autograder.course import course_fingerprint, lessons
from autograder.demo import build_demo_class
from autograder.executors import scheduler_address
from autograder.jobs import Job
from autograder.protocol import Limits
from autograder.run_folder import CACHE, JOB_COLUMNS, JOBS

STUDENTS = {"ada-correct", "ben-blank", "lea-raises", "max-not-a-notebook", "noa-nothing-submitted"}
# graded on the client, never sent to a worker: nothing of them runs
JUDGED_HERE = {"max-not-a-notebook", "noa-nothing-submitted"}
OPTIONS = ["--assignment", "03-self-attention", "--cell-timeout", "5", "--timeout", "60"]


def digest(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and CACHE not in p.relative_to(folder).parts and p.name != JOBS
    }


@pytest.mark.parametrize("spec", ["dask://", "dask:", "tcp://127.0.0.1:8786", "threads"])
def test_an_unknown_executor_is_one_line(tmp_path, capsys, spec):
    (tmp_path / "submitted" / "someone").mkdir(parents=True)
    assert main(["grade", str(tmp_path / "submitted"), "--out", str(tmp_path / "out"), "--executor", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "dask://HOST:PORT" in err


def test_a_scheduler_address_keeps_its_scheme():
    assert scheduler_address("dask://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert scheduler_address("dask://tls://grader:8786/") == "tls://grader:8786"


def course_copy(folder: Path) -> Path:
    """What grading reads of the course, copied: lessons, releases, references, checks, grader."""
    for part in ("solutions", "notebooks", "helpers", "autograder"):
        shutil.copytree(ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "nbgrader_config.py", folder / "nbgrader_config.py")
    return folder


def fork_servers(dask_worker) -> list[int]:
    """Run on each worker: the process ids of its fork servers (bubblewrap's processes included)."""
    import psutil

    return sorted(child.pid for child in psutil.Process().children(recursive=True)
                  if "autograder.forkserver" in " ".join(child.cmdline()))


def grade_on(address: str, submitted: Path, out: Path) -> None:
    assert main(["grade", str(submitted), "--out", str(out), "--executor", address, *OPTIONS]) == 0


@pytest.mark.slow
def test_a_two_worker_dask_pool_grades_like_the_local_run(tmp_path, capsys, monkeypatch):
    distributed = pytest.importorskip("distributed")
    from autograder.dask_executor import DaskExecutor

    course = course_copy(tmp_path / "course")
    monkeypatch.setenv("TRANSFORMER_COURSE_ROOT", str(course))  # the client's and (inherited) the workers'
    submitted = build_demo_class(course, tmp_path / "submitted")
    for student in list(submitted.iterdir()):
        if student.name not in STUDENTS:
            shutil.rmtree(student)
    assert main(["grade", str(submitted), "--out", str(tmp_path / "local"), "--jobs", "1", *OPTIONS]) == 0
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
    ) as cluster, distributed.Client(cluster) as client:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        grade_on(address, submitted, tmp_path / "dask")
        workers = set(cluster.scheduler_info["workers"])
        first = client.run(fork_servers)
        assert set(first) == workers and all(first.values())

        # the next run finds them: no fork server started, none stopped
        grade_on(address, submitted, tmp_path / "again")
        assert client.run(fork_servers) == first

        # a lesson changed in the checkout: each worker stops its servers and starts new ones
        notebook = next((course / "solutions" / "01-tokens-and-embeddings").glob("*.ipynb"))
        notebook.write_text(notebook.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        grade_on(address, submitted, tmp_path / "changed")
        changed = client.run(fork_servers)
        assert all(changed.values()) and all(not set(changed[w]) & set(first[w]) for w in workers)

        chosen = [lesson for lesson in lessons(course) if lesson.assignment == "03-self-attention"]
        job = Job("ada-correct", chosen[0], submitted / "ada-correct" / "03-self-attention" / chosen[0].filename)
        limits = Limits(wall_s=60, cell_s=5)

        # a worker whose course differs from the grader's refuses every notebook
        pool = DaskExecutor(client, chosen, "none", "0" * 64)
        with pytest.raises(RuntimeError, match="another version of the course"):
            list(pool.run([job], limits))

        # grading code the worker process imported changed: only a new process can run it
        checks = course / "helpers" / "checks" / "core.py"
        checks.write_text(checks.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        pool = DaskExecutor(client, chosen, "none", course_fingerprint(course))
        with pytest.raises(RuntimeError, match=r"helpers/checks/core\.py changed since .*restart the worker"):
            list(pool.run([job], limits))
    capsys.readouterr()
    local = tmp_path / "local"
    for dask in (tmp_path / "dask", tmp_path / "again", tmp_path / "changed"):
        assert (dask / "grades.csv").read_bytes() == (local / "grades.csv").read_bytes()
    for dask in (tmp_path / "dask", tmp_path / "again"):  # the same course as the local run
        assert digest(dask) == digest(local)  # every report, the manifest included
    with open(tmp_path / "dask" / JOBS, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == JOB_COLUMNS and {r["student"] for r in rows} == STUDENTS
    for row in rows:
        if row["student"] in JUDGED_HERE:
            assert row["worker"] == "client"
        else:  # student code ran in a worker's fork server
            assert row["worker"] in workers
        assert row["queued_at"] <= row["started_at"] <= row["finished_at"] and float(row["wall_s"]) >= 0
