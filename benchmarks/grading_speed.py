"""Seconds per submission: `transformer-course grade` (1 and 2 jobs) against `nbgrader autograde`,
on the same submissions, measured side by side in one run.

    python benchmarks/grading_speed.py [--copies 3] [--assignment 03-self-attention]

The class is the demo class without its infinite loop (a timeout measures the limit, not the
grader), copied ``--copies`` times. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.batch import grade_class
from autograder.course import find_course_root
from autograder.demo import build_demo_class
from autograder.protocol import Limits
from autograder.server_pool import shutdown


def build_class(root: Path, folder: Path, copies: int, assignment: str) -> int:
    demo = build_demo_class(root, folder / "demo")
    count = 0
    for n in range(copies):
        for student in sorted(demo.iterdir()):
            if "loop" in student.name or not (student / assignment).is_dir():
                continue
            target = folder / "submitted" / f"{student.name}-{n}" / assignment
            shutil.copytree(student / assignment, target)
            count += 1
    shutil.rmtree(demo)
    return count


def time_ours(root: Path, submitted: Path, out: Path, jobs: int, assignment: str) -> float:
    start = time.perf_counter()
    grade_class(root, submitted, out, jobs=jobs, only=[assignment], limits=Limits(), resume=False, progress=False)
    elapsed = time.perf_counter() - start
    shutdown()  # the next measurement starts its fork servers from scratch too
    return elapsed


def time_nbgrader(root: Path, work: Path, submitted: Path, assignment: str) -> float:
    course = work / "nbgrader-course"
    shutil.copytree(root / "solutions" / assignment, course / "source" / assignment)
    shutil.copytree(submitted, course / "submitted")
    shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    common = ["--CourseDirectory.source_directory=source", "--CourseDirectory.release_directory=release", f"--CourseDirectory.root={course}"]
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force", *common],
                   cwd=course, env=env, check=True, capture_output=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--force", *common],
                          cwd=course, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--assignment", default="03-self-attention")
    args = parser.parse_args()
    root = find_course_root()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        n = build_class(root, work, args.copies, args.assignment)
        submitted = work / "submitted"
        ours_1 = time_ours(root, submitted, work / "out1", 1, args.assignment)
        ours_2 = time_ours(root, submitted, work / "out2", 2, args.assignment)
        theirs = time_nbgrader(root, work, submitted, args.assignment)
    per = {"ours_jobs1_s": ours_1 / n, "ours_jobs2_s": ours_2 / n, "nbgrader_s": theirs / n}
    print(f"{n} submissions of {args.assignment}, {os.cpu_count()} cores")
    for name, value in per.items():
        print(f"  {name:14s} {value:6.3f} s per submission")
    print(f"  ours (1 job) takes {per['ours_jobs1_s'] / per['nbgrader_s']:.2f} of nbgrader's time; "
          f"2 jobs are {ours_1 / ours_2:.2f}x faster than 1")
    print(json.dumps({"submissions": n, **{k: round(v, 4) for k, v in per.items()},
                      "ratio_ours_to_nbgrader": round(per["ours_jobs1_s"] / per["nbgrader_s"], 4),
                      "speedup_2_jobs": round(ours_1 / ours_2, 3)}))


if __name__ == "__main__":
    main()
