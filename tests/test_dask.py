"""`grade --executor dask://HOST:PORT`: a live Dask pool grades exactly as the local run does.

Skipped where Dask's ``distributed`` is not installed (it is in the ``dev`` extra, so CI runs it).
The cluster is a 2-worker ``LocalCluster`` on 127.0.0.1: no network beyond this machine.
"""

import csv
import hashlib
import shutil

import pytest
from harness import ROOT

from autograder.batch import CACHE, JOB_COLUMNS, JOBS
from autograder.cli import main
from autograder.course import lessons
from autograder.demo import build_demo_class
from autograder.executors import Job
from autograder.runner import Limits

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


@pytest.mark.slow
def test_a_two_worker_dask_pool_grades_like_the_local_run(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    from autograder.dask_executor import DaskExecutor

    submitted = build_demo_class(ROOT, tmp_path / "submitted")
    for student in list(submitted.iterdir()):
        if student.name not in STUDENTS:
            shutil.rmtree(student)
    assert main(["grade", str(submitted), "--out", str(tmp_path / "local"), "--jobs", "1", *OPTIONS]) == 0
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
    ) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        assert main(["grade", str(submitted), "--out", str(tmp_path / "dask"), "--executor", address, *OPTIONS]) == 0
        workers = set(cluster.scheduler_info["workers"])

        # a worker whose course differs from the grader's refuses every notebook
        with distributed.Client(cluster) as client:
            chosen = [lesson for lesson in lessons(ROOT) if lesson.assignment == "03-self-attention"]
            pool = DaskExecutor(client, ROOT, chosen, "none", "0" * 64)
            job = Job("ada-correct", chosen[0], submitted / "ada-correct" / "03-self-attention" / chosen[0].filename)
            try:
                with pytest.raises(RuntimeError, match="another version of the course"):
                    list(pool.run([job], Limits(wall_s=60, cell_s=5)))
            finally:
                pool.close()
    capsys.readouterr()
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert (dask / "grades.csv").read_bytes() == (local / "grades.csv").read_bytes()
    assert digest(dask) == digest(local)  # every report, the manifest included
    with open(dask / JOBS, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == JOB_COLUMNS and {r["student"] for r in rows} == STUDENTS
    for row in rows:
        if row["student"] in JUDGED_HERE:
            assert row["worker"] == "client"
        else:  # student code ran in a worker's fork server
            assert row["worker"] in workers
        assert row["queued_at"] <= row["started_at"] <= row["finished_at"] and float(row["wall_s"]) >= 0
