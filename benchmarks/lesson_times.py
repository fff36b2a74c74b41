"""Run every solution notebook top to bottom in its full setting and compare with what it promises.

Each lesson's first cell states how long the full setting takes on two CPU cores ("… in about 2
to 4 minutes on two CPU cores"). This script executes the solution notebooks in order, in their own
folders, with ``TRANSFORMER_COURSE_QUICK`` unset and two threads, times each one as a whole kernel
run, and prints the measured time next to the stated upper bound. Lesson 07 keeps its trained model
in a temporary checkpoint file (``TRANSFORMER_COURSE_CHECKPOINT``) that lesson 08 then loads, as a
student's run would; ``--fresh-08`` removes it first, to time lesson 08 training its own model, and
``--checkpoint FILE`` starts from a copy of a trained model, to time lessons 08 to 12 without 07.

The stated times are for idle cores, and a shared machine is rarely idle. So each line also says
how busy the machine was: ``others`` is how many CPUs other processes kept busy on average while
the lesson ran (all the CPU time ``/proc/stat`` counts, less the kernel's own and this process's),
and ``cpu`` the CPU seconds of the kernel and its children. With ``others`` well above 0 the wall
time is inflated, and the verdict says so. The kernel draws its figures as a student's does (the
inline backend, not Agg): the live loss curve's redraws are part of the time.

    python benchmarks/lesson_times.py                    # every lesson (about 15 minutes)
    python benchmarks/lesson_times.py 03 07              # some lessons, by number or name
    python benchmarks/lesson_times.py --quick            # the quick setting (what CI and grading run)

The last line printed is one JSON object: ``{"lessons": [{"lesson", "seconds", "stated_max_s",
"within", "cpu_s", "others_busy_cpus", "load_1min"}, ...], "threads", "quick"}``. The exit status
is 1 when a lesson took longer than it says.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder.course import find_course_root, lessons, stated_run_time_s

#: above this many CPUs kept busy by other processes, a time is reported as measured on a busy machine
BUSY = 0.25


def busy_cpu_s(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds all processes have used since boot, all CPUs together; None where unknown."""
    try:
        fields = [int(v) for v in stat.read_text(encoding="ascii").splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def own_cpu_s() -> tuple[float, float]:
    """CPU seconds of this process, and of its children reaped so far (the kernels, once shut down)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def run(path: Path, env: dict[str, str], timeout: float) -> dict[str, float | None]:
    """Execute one notebook; its wall time, the kernel's CPU time and how busy other processes kept the CPUs."""
    nb = nbformat.read(path, as_version=4)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        load = os.getloadavg()[0]
        busy0, (me0, kids0) = busy_cpu_s(), own_cpu_s()
        start = time.perf_counter()
        client.execute()  # starts the kernel, runs every cell, shuts the kernel down (and reaps it)
        seconds = time.perf_counter() - start
        busy1, (me1, kids1) = busy_cpu_s(), own_cpu_s()
        others = None
        if busy0 is not None and busy1 is not None:
            others = max(0.0, (busy1 - busy0) - (kids1 - kids0) - (me1 - me0)) / seconds
        return {"seconds": seconds, "cpu_s": kids1 - kids0, "others_busy_cpus": others, "load_1min": load}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lessons", nargs="*", help="lesson numbers or names (default: all)")
    parser.add_argument("--quick", action="store_true", help="run the quick setting instead of the full one")
    parser.add_argument("--threads", type=int, default=2, help="OMP/MKL threads for the kernels (2)")
    parser.add_argument("--fresh-08", action="store_true", help="no checkpoint for lesson 08: it trains its own")
    parser.add_argument("--checkpoint", type=Path, help="a trained model (lesson 07's, as the course's cache keeps it) "
                        "that the later lessons load when lesson 07 is not run first")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one cell may run (1800)")
    args = parser.parse_args(argv)

    root = find_course_root()
    chosen = [les for les in lessons(root)
              if not args.lessons or any(les.assignment.startswith(w.zfill(2)) or w == les.assignment for w in args.lessons)]
    if not chosen:
        parser.error(f"no lesson matches {args.lessons}")
    checkpoint = Path(tempfile.mkdtemp(prefix="lesson-times-")) / "shakespeare-char.pt"
    if args.checkpoint:
        shutil.copyfile(args.checkpoint, checkpoint)
    env = {"TRANSFORMER_COURSE_QUICK": "1" if args.quick else "0", "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "TRANSFORMER_COURSE_CHECKPOINT": str(checkpoint)}
    os.environ.pop("MPLBACKEND", None)  # the kernel's own inline backend: figures are drawn, as for a student
    rows = []
    for lesson in chosen:
        if args.fresh_08 and lesson.assignment.startswith("08"):
            checkpoint.unlink(missing_ok=True)
        limit = None if args.quick else stated_run_time_s(lesson.notebook)
        measured = run(lesson.path, env, args.timeout)
        seconds, others = measured["seconds"], measured["others_busy_cpus"]
        within = None if limit is None else seconds <= limit
        rows.append({"lesson": lesson.assignment, "seconds": round(seconds, 1), "stated_max_s": limit, "within": within,
                     "cpu_s": round(measured["cpu_s"], 1), "load_1min": round(measured["load_1min"], 2),
                     "others_busy_cpus": None if others is None else round(others, 2)})
        verdict = "no stated time" if limit is None else ("within" if within else "OVER")
        if others is not None and others > BUSY:
            verdict += " (a busy machine: the time is inflated)"
        busy = "unknown" if others is None else f"{others:.2f}"
        print(f"{lesson.assignment:28s} {seconds:7.1f} s   stated at most {limit or float('nan'):6.0f} s   "
              f"cpu {measured['cpu_s']:6.1f} s   others {busy} CPUs   load {measured['load_1min']:.2f}   {verdict}",
              flush=True)
    print(json.dumps({"lessons": rows, "threads": args.threads, "quick": args.quick}))
    return 0 if all(r["within"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
