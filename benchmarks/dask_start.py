"""How long a Dask run waits before its first notebook starts: a first run, then a second one on
the same cluster, side by side.

    python benchmarks/dask_start.py [--n 20] [--runs 2] [--preload] [--sandbox auto]

One 2-worker ``LocalCluster`` (one thread each, separate processes, 127.0.0.1) grades the same
class of lesson 03 (made as ``grading_class.py`` makes it) ``--runs`` times, each run into a fresh
output folder (nothing comes from the cache). For each run it prints the seconds from the call
of ``grade_class`` to the first notebook starting on a worker (``jobs.csv``'s earliest
``started_at``), the run's wall time, and how many fork servers the workers started during
it. With ``--preload`` the workers start with ``--preload autograder.dask_executor`` and
``TRANSFORMER_COURSE_WARM=<the lesson>``, and the benchmark waits until they report their
servers started before the first run. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from grading_class import ASSIGNMENT, LIMITS, build_class

from autograder.batch import grade_class
from autograder.course import find_course_root
from autograder.run_folder import JOBS


def servers_started(dask_worker) -> int:
    """Run on each worker: the fork servers its course service has started so far."""
    from autograder.dask_worker import service_at

    service = service_at(dask_worker.address)
    return 0 if service is None else service.servers_started


def first_start(out: Path) -> float:
    """The earliest time a notebook started on a worker (Unix seconds), from ``jobs.csv``."""
    with open(out / JOBS, newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["worker"] not in ("client", "cache")]
    return min(datetime.fromisoformat(row["started_at"]).timestamp() for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="submissions in the class (default 20)")
    parser.add_argument("--runs", type=int, default=2, help="runs on the same cluster (default 2)")
    parser.add_argument("--preload", action="store_true", help="workers start their fork servers when they start")
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "none"], default="auto")
    args = parser.parse_args()
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        sys.exit("distributed is not installed: pip install 'transformer-course[dask]'")
    root = find_course_root()
    extra = {}
    if args.preload:
        os.environ["TRANSFORMER_COURSE_WARM"] = ASSIGNMENT  # the workers inherit it
        extra = {"preload": ["autograder.dask_executor"]}
    runs = []
    with tempfile.TemporaryDirectory(prefix="dask-start-") as tmp:
        work = Path(tmp)
        submitted = build_class(root, work / "submitted", args.n)
        print(f"{args.n} submissions of {ASSIGNMENT}; {os.cpu_count()} CPUs; preload: {args.preload}", file=sys.stderr)
        start = time.perf_counter()
        with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address=None, **extra) as cluster, Client(cluster) as client:
            if args.preload:  # until every worker has started its servers
                while sum(client.run(servers_started).values()) < 2:
                    time.sleep(0.2)
            cluster_s = time.perf_counter() - start
            address = cluster.scheduler_address.replace("tcp://", "dask://")
            for i in range(args.runs):
                before = sum(client.run(servers_started).values())
                out = work / f"run-{i + 1}"
                began = time.time()
                grade_class(root, submitted, out, only=[ASSIGNMENT], limits=LIMITS, sandbox=args.sandbox,
                            resume=False, progress=False, executor=address)
                wall = time.time() - began
                runs.append({"run": i + 1, "first_notebook_s": round(first_start(out) - began, 2),
                             "wall_s": round(wall, 2),
                             "servers_started": sum(client.run(servers_started).values()) - before})
        grades = {(work / f"run-{r['run']}" / "grades.csv").read_bytes() for r in runs}
    print(f"(starting the cluster{' and its fork servers' if args.preload else ''}: {cluster_s:.1f} s)")
    print(f"{'run':>4s} {'first notebook s':>17s} {'wall s':>8s} {'servers started':>16s}")
    for r in runs:
        print(f"{r['run']:4d} {r['first_notebook_s']:17.2f} {r['wall_s']:8.2f} {r['servers_started']:16d}")
    if len(runs) > 1:
        print(f"run 2 / run 1: first notebook {runs[1]['first_notebook_s'] / runs[0]['first_notebook_s']:.3f}x, "
              f"wall {runs[1]['wall_s'] / runs[0]['wall_s']:.3f}x")
    print(f"same grades.csv every run: {len(grades) == 1}")
    print(json.dumps({"n": args.n, "assignment": ASSIGNMENT, "cpus": os.cpu_count(), "preload": args.preload,
                      "cluster_start_s": round(cluster_s, 2), "runs": runs, "identical_grades": len(grades) == 1}))


if __name__ == "__main__":
    main()
