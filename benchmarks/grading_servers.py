"""The demo class graded three times, side by side: with a plain pool of threads that take the jobs
in the order given, with the grader's own order (``autograder.job_queue``), which starts as few
fork servers as will do, and with that order and the servers that measured the limits kept for
the grading (``autograder.server_pool``). Prints the fork servers started and the wall time of each.

    python benchmarks/grading_servers.py [--jobs 2]

Each run measures the limits from the course's solutions first (one fork server per lesson), as
``transformer-course demo`` does; the first two stop those servers before grading, as the grader
did before it kept them.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import autograder.server_pool as server_pool
from autograder.batch import grade_class
from autograder.demo import build_demo_class
from autograder.executors import LocalExecutor
from autograder.limits import measure_limits
from autograder.protocol import Limits

ROOT = Path(__file__).resolve().parents[1]


def plain_pool_run(self, jobs, limits):
    """The jobs in the order given, each to the next free thread (what a thread pool does)."""
    pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="grade")
    try:
        pending = {pool.submit(self._one, job, limits, time.time()) for job in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def one_run(jobs: int, keep: bool) -> tuple[int, float]:
    """(fork servers started, seconds) for the demo class graded from scratch; ``keep``: the
    servers that measured the limits grade too."""
    started = [0]
    original = server_pool.ForkServer.__init__

    def counted(self, isolation, env=None):
        started[0] += 1
        original(self, isolation, env)

    server_pool.ForkServer.__init__ = counted
    folder = Path(tempfile.mkdtemp(prefix="grading-servers-"))
    try:
        begin = time.perf_counter()
        submitted = build_demo_class(ROOT, folder / "submitted")
        measured = measure_limits(ROOT, None, Limits(), "auto", folder / "graded" / ".cache", jobs=jobs)
        if not keep:
            server_pool.shutdown()
        grade_class(ROOT, submitted, folder / "graded", jobs=jobs, limits=measured.limits, progress=False)
        return started[0], time.perf_counter() - begin
    finally:
        server_pool.ForkServer.__init__ = original
        server_pool.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    ours = LocalExecutor.run
    rows = []
    for name, run, keep in (("a plain thread pool", plain_pool_run, False), ("the grader's order", ours, False),
                            ("order, servers kept", ours, True)):
        LocalExecutor.run = run
        try:
            rows.append((name, *one_run(args.jobs, keep)))
        finally:
            LocalExecutor.run = ours
    print(f"the demo class, {args.jobs} jobs, limits measured first")
    print(f"{'order':<22}{'fork servers':>14}{'wall s':>10}")
    for name, servers, seconds in rows:
        print(f"{name:<22}{servers:>14}{seconds:>10.1f}")
    print(f"wall ratio (grader's order / plain pool): {rows[1][2] / rows[0][2]:.2f}")
    print(f"wall ratio (servers kept / not kept): {rows[2][2] / rows[1][2]:.2f}")


if __name__ == "__main__":
    main()
