"""Seconds per submission for a whole class, four ways, side by side in one run:

* ``local x1``: ``transformer-course grade --jobs 1``;
* ``local x2``: ``--jobs 2``;
* ``2 shards``: ``grade --shard 0/2`` and ``--shard 1/2`` run at the same time (as two Slurm array
  tasks or two pods would, here on one machine, one job each), then ``merge``; merge included;
* ``dask x2``: a 2-worker Dask ``LocalCluster`` (one thread each) as a live pool:
  ``--executor dask://...``; the time includes starting the run's fork servers on the workers,
  not starting the cluster (printed apart).

    python benchmarks/grading_class.py [--n 200] [--sandbox auto]

The class: ``--n`` submissions of lesson 03 made from the solution the way ``autograder.demo``
makes them: correct, each of the demo's realistic mistakes, blank, raising (no infinite loop:
a timeout would measure the limit, not the grader). Every way must give the same grades.csv;
the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.batch import grade_class
from autograder.catalogue import load_catalogue, with_answers
from autograder.course import RELEASE, find_course_root, lessons
from autograder.demo import demo_mistakes
from autograder.merge import merge_shards
from autograder.protocol import Limits
from autograder.server_pool import shutdown

ASSIGNMENT = "03-self-attention"
LIMITS = Limits(wall_s=600, cell_s=60, memory_mb=3072)  # the defaults of `transformer-course grade`


def build_class(root: Path, folder: Path, n: int) -> Path:
    """``n`` students, cycling through the kinds of submission."""
    (lesson,) = [le for le in lessons(root) if le.assignment == ASSIGNMENT]
    release_nb = json.loads((root / RELEASE / ASSIGNMENT / lesson.filename).read_text(encoding="utf-8"))
    full = lesson.solution_answers()
    first = next(iter(full))
    kinds = [("correct", with_answers(release_nb, full))]
    for name, mistake in demo_mistakes(root)[ASSIGNMENT].items():
        kinds.append((name.split("-", 1)[1], with_answers(release_nb, load_catalogue(lesson).answers(mistake))))
    kinds.append(("blank", release_nb))
    kinds.append(("raises", with_answers(release_nb, {**full, first: "raise RuntimeError('broken')\n" + full[first]})))
    for i in range(n):
        name, notebook = kinds[i % len(kinds)]
        target = folder / f"s{i:04d}-{name}" / ASSIGNMENT / lesson.filename
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return folder


def timed(what, *args, **kwargs) -> float:
    start = time.perf_counter()
    what(*args, **kwargs)
    elapsed = time.perf_counter() - start
    shutdown()  # every measurement starts its fork servers from scratch
    return elapsed


def local(root: Path, submitted: Path, out: Path, jobs: int, sandbox: str) -> None:
    grade_class(root, submitted, out, jobs=jobs, only=[ASSIGNMENT], limits=LIMITS, sandbox=sandbox,
                resume=False, progress=False)


def shards(root: Path, submitted: Path, work: Path, sandbox: str) -> None:
    command = [sys.executable, "-m", "autograder.cli", "grade", str(submitted), "--assignment", ASSIGNMENT,
               "--jobs", "1", "--fresh", "--sandbox", sandbox, "--timeout", str(LIMITS.wall_s),
               "--cell-timeout", str(LIMITS.cell_s), "--memory-mb", str(LIMITS.memory_mb)]
    running = [
        subprocess.Popen([*command, "--out", str(work / f"graded-{i}"), "--shard", f"{i}/2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root)
        for i in range(2)
    ]
    for process in running:
        _, err = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"a shard failed: {err.decode()[-2000:]}")
    merge_shards([work / "graded-0", work / "graded-1"], work / "shards", progress=False)


def dask(root: Path, submitted: Path, out: Path, sandbox: str) -> tuple[float | None, float | None]:
    """(cluster start seconds, grading seconds), or (None, None) without distributed."""
    try:
        from distributed import LocalCluster
    except ImportError:
        print("distributed is not installed: no Dask measurement (pip install 'transformer-course[dask]')", file=sys.stderr)
        return None, None
    start = time.perf_counter()
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster:
        started = time.perf_counter() - start
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        elapsed = timed(grade_class, root, submitted, out, only=[ASSIGNMENT], limits=LIMITS, sandbox=sandbox,
                        resume=False, progress=False, executor=address)
    return started, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="submissions in the class (default 200)")
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "none"], default="auto")
    args = parser.parse_args()
    root = find_course_root()
    with tempfile.TemporaryDirectory(prefix="grading-class-") as tmp:
        work = Path(tmp)
        submitted = build_class(root, work / "submitted", args.n)
        print(f"{args.n} submissions of {ASSIGNMENT}; {os.cpu_count()} CPUs", file=sys.stderr)
        seconds = {}
        seconds["local x1"] = timed(local, root, submitted, work / "local1", 1, args.sandbox)
        seconds["local x2"] = timed(local, root, submitted, work / "local2", 2, args.sandbox)
        seconds["2 shards"] = timed(shards, root, submitted, work, args.sandbox)
        cluster_s, seconds["dask x2"] = dask(root, submitted, work / "dask", args.sandbox)
        reference = (work / "local1" / "grades.csv").read_bytes()
        outputs = {"local x1": "local1", "local x2": "local2", "2 shards": "shards", "dask x2": "dask"}
        identical = all(
            (work / folder / "grades.csv").read_bytes() == reference
            for name, folder in outputs.items() if seconds[name] is not None
        )
    print(f"{'':10s} {'seconds':>9s} {'s/submission':>13s}")
    for name, value in seconds.items():
        if value is None:
            print(f"{name:10s} {'-':>9s} {'-':>13s}")
        else:
            print(f"{name:10s} {value:9.1f} {value / args.n:13.3f}")
    if cluster_s is not None:
        print(f"(starting the Dask cluster, not counted above: {cluster_s:.1f} s)")
    print(f"same grades.csv every way: {identical}")
    per = {name: (None if v is None else round(v / args.n, 4)) for name, v in seconds.items()}
    print(json.dumps({"n": args.n, "assignment": ASSIGNMENT, "cpus": os.cpu_count(), "seconds_per_submission": per,
                      "dask_cluster_start_s": None if cluster_s is None else round(cluster_s, 2),
                      "identical_grades": identical}))


if __name__ == "__main__":
    main()
