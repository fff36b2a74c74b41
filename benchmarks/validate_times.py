"""Time nbgrader's Validate on every finished lesson, as a student's button press runs it.

Each solution notebook (every exercise answered) is copied into a fresh folder outside the course
root, so nbgrader runs with its own defaults (a 30 s limit per cell, no course configuration), and
``nbgrader validate`` runs on it with ``TRANSFORMER_COURSE_QUICK`` unset: the lessons find out by
themselves that they are being validated and run their quick setting (``helpers.notebook``).
Printed per lesson: the wall time, nbgrader's verdict, and whether any cell hit the time limit.

    python benchmarks/validate_times.py            # every lesson (a few minutes on 2 cores)
    python benchmarks/validate_times.py 07 10      # some lessons, by number or name

The last line is one JSON object: ``{"lessons": [{"lesson", "seconds", "success", "timeouts"}],
"limit_s"}``. The exit status is 1 when a lesson took longer than ``--limit`` (60 s) or failed.
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

from autograder.course import find_course_root, lessons


def validate(notebook: Path, env: dict[str, str]) -> tuple[float, bool, int, str]:
    """Seconds, nbgrader's verdict, the number of cells that hit its time limit, its last words."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nbgrader", "validate", notebook.name], cwd=notebook.parent,
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    text = done.stdout + done.stderr
    success = done.returncode == 0 and "Success!" in text
    return seconds, success, text.count("Timeout waiting for execute reply"), text.strip().splitlines()[-1:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("which", nargs="*", help="lessons by number or name (default: all)")
    p.add_argument("--limit", type=float, default=60.0, help="the most seconds a lesson may take (60)")
    args = p.parse_args(argv)
    root = find_course_root(Path.cwd())
    env = dict(os.environ)
    env.pop("TRANSFORMER_COURSE_QUICK", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # nbgrader's alembic
    rows = []
    for lesson in lessons(root):
        if args.which and not any(lesson.assignment.startswith(w) or w in lesson.assignment for w in args.which):
            continue
        with tempfile.TemporaryDirectory(prefix="validate-") as tmp:
            notebook = Path(tmp) / lesson.filename
            shutil.copyfile(lesson.path, notebook)
            seconds, success, timeouts, last = validate(notebook, env)
        rows.append({"lesson": lesson.assignment, "seconds": round(seconds, 1), "success": success,
                     "timeouts": timeouts})
        print(f"{lesson.assignment:26s} {seconds:6.1f} s  {'Success' if success else 'FAILED: ' + ' '.join(last)}"
              f"{f'  ({timeouts} cell time limits hit)' if timeouts else ''}", flush=True)
    print(json.dumps({"lessons": rows, "limit_s": args.limit}))
    return 0 if all(r["success"] and r["seconds"] <= args.limit for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
