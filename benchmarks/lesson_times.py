"""Run every solution notebook top to bottom in its full setting and compare with what it promises.

Each lesson's first cell states how long the full setting takes on two CPU cores ("… in about 2
to 4 minutes on two CPU cores"). This script executes the solution notebooks in order, in their own
folders, with ``TRANSFORMER_COURSE_QUICK`` unset and two threads, times each one as a whole kernel
run, and prints the measured time next to the stated upper bound. Lesson 07 keeps its trained model
in a temporary checkpoint file (``TRANSFORMER_COURSE_CHECKPOINT``) that lesson 08 then loads, as a
student's run would; ``--fresh-08`` removes it first, to time lesson 08 training its own model.

    python benchmarks/lesson_times.py                    # every lesson (about 15 minutes)
    python benchmarks/lesson_times.py 03 07              # some lessons, by number or name
    python benchmarks/lesson_times.py --quick            # the quick setting (what CI and grading run)

The last line printed is one JSON object: ``{"lessons": [{"lesson", "seconds", "stated_max_s",
"within"}, ...], "threads", "quick"}``. The exit status is 1 when a lesson took longer than it says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder.course import find_course_root, lessons, stated_run_time_s


def run(path: Path, env: dict[str, str], timeout: float) -> float:
    nb = nbformat.read(path, as_version=4)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        start = time.perf_counter()
        client.execute()
        return time.perf_counter() - start
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
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one cell may run (1800)")
    args = parser.parse_args(argv)

    root = find_course_root()
    chosen = [les for les in lessons(root)
              if not args.lessons or any(les.assignment.startswith(w.zfill(2)) or w == les.assignment for w in args.lessons)]
    if not chosen:
        parser.error(f"no lesson matches {args.lessons}")
    checkpoint = Path(tempfile.mkdtemp(prefix="lesson-times-")) / "shakespeare-char.pt"
    env = {"TRANSFORMER_COURSE_QUICK": "1" if args.quick else "0", "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "TRANSFORMER_COURSE_CHECKPOINT": str(checkpoint),
           "MPLBACKEND": "Agg"}
    rows = []
    for lesson in chosen:
        if args.fresh_08 and lesson.assignment.startswith("08"):
            checkpoint.unlink(missing_ok=True)
        limit = None if args.quick else stated_run_time_s(lesson.notebook)
        seconds = run(lesson.path, env, args.timeout)
        within = None if limit is None else seconds <= limit
        rows.append({"lesson": lesson.assignment, "seconds": round(seconds, 1), "stated_max_s": limit, "within": within})
        verdict = "no stated time" if limit is None else ("within" if within else "OVER")
        print(f"{lesson.assignment:28s} {seconds:7.1f} s   stated at most {limit or float('nan'):6.0f} s   {verdict}", flush=True)
    print(json.dumps({"lessons": rows, "threads": args.threads, "quick": args.quick}))
    return 0 if all(r["within"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
