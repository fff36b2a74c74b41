"""``transformer-course``: release, grade, check, open the lab, and grade a demo class."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.book import add_parser as add_book_parser
from autograder.course import RELEASE, CourseError, find_course_root

DESCRIPTION = """\
Tools for the Transformer course.

  release   regenerate notebooks/ (and helpers/reference/) from solutions/, refusing leaks
  grade     grade a class's submissions: grades.csv, feedback HTML, a summary
  check     check your own notebook: every visible test, with its diagnosis
  lab       open JupyterLab on the student notebooks
  demo      grade a bundled demo class and print the gradebook
"""


class UsageError(Exception):
    """A wrong argument: printed as one line, exit code 2."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="transformer-course", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/ and refuse leaks")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if notebooks/ or helpers/reference/ is stale")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("grade", help="grade submissions in nbgrader's layout <student>/<assignment>/<notebook>.ipynb")
    p.add_argument("submitted", type=Path, help="the folder of submissions (never written to)")
    p.add_argument("--out", type=Path, required=True, help="where grades.csv, feedback/ and the reports go")
    p.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds one cell may run (default 60)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one notebook may run (default 600)")
    p.add_argument("--memory-mb", type=int, default=3072, help="memory one notebook may add, MiB (default 3072)")
    p.add_argument(
        "--sandbox", choices=["auto", "bwrap", "none"], default="auto",
        help="isolation of student code: bwrap (bubblewrap), none (limits only), auto (bwrap where it works)",
    )
    p.add_argument("--fresh", action="store_true", help="grade everything again, ignoring results kept from an earlier run")
    p.add_argument(
        "--gradebook", metavar="DB_URL",
        help="also write the scores into this nbgrader gradebook (e.g. sqlite:///gradebook.db) for formgrader and `nbgrader export`",
    )
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("check", help="run a notebook's visible tests and explain what fails")
    p.add_argument("notebook", type=Path, help="your notebook (.ipynb), saved")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds one cell may run (default 60)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("lab", help="open JupyterLab on notebooks/ with nbgrader's student tools")
    p.add_argument("--port", type=int, default=None, help="port (default: Jupyter's choice)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser("demo", help="grade a bundled demo class (correct, blank, buggy and broken submissions)")
    p.add_argument("--out", type=Path, default=None, help="keep the submissions and reports here (default: a temporary folder)")
    p.add_argument("--jobs", type=int, default=2, help="notebooks graded at once (default 2)")
    p.set_defaults(func=cmd_demo)
    add_book_parser(sub)

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except (UsageError, CourseError, RuntimeError) as exc:
        print(f"transformer-course {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"transformer-course {args.command}: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------------------------------------


def cmd_release(args) -> int:
    from autograder.release import release

    root = find_course_root()
    if args.check:
        return _release_check(root)
    changes = release(root)
    print("\n".join(changes) if changes else "notebooks/ and helpers/reference/ are up to date")
    return 0


def _release_check(root: Path) -> int:
    from autograder.release import reference_modules, release

    stale = [str(rel) for rel, text in reference_modules(root).items()
             if not (root / rel).exists() or (root / rel).read_text(encoding="utf-8") != text]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / RELEASE
        fresh.mkdir()
        release(root, out_dir=fresh, write_reference=False)  # also refuses leaks; writes only into tmp
        committed = root / RELEASE
        for path in sorted(fresh.rglob("*")):
            if path.is_file():
                rel = path.relative_to(fresh)
                mine = committed / rel
                if not mine.exists() or mine.read_bytes() != path.read_bytes():
                    stale.append(f"{RELEASE}/{rel}")
        for path in sorted(committed.rglob("*")) if committed.exists() else []:
            if path.is_file() and not (fresh / path.relative_to(committed)).exists():
                stale.append(f"{RELEASE}/{path.relative_to(committed)} (not generated)")
    if stale:
        print("stale, run `transformer-course release`:\n  " + "\n  ".join(stale))
        return 1
    print("notebooks/ and helpers/reference/ match solutions/; no solution line leaks")
    return 0


def cmd_grade(args) -> int:
    from autograder.runner import Limits

    submitted = args.submitted
    if not submitted.is_dir():
        raise UsageError(f"{submitted} is not a folder of submissions")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    out = args.out.resolve()
    if out == submitted.resolve() or submitted.resolve() in out.parents:
        raise UsageError("--out must not be inside the submissions folder (it is never written to)")
    limits = Limits(wall_s=args.timeout, cell_s=args.cell_timeout, memory_mb=args.memory_mb)
    from autograder.batch import grade_class

    frame = grade_class(
        find_course_root(), submitted, out, jobs=args.jobs, limits=limits, only=args.assignment,
        sandbox=args.sandbox, resume=not args.fresh, gradebook=args.gradebook,
    )
    from autograder.reports import summary

    print(summary(frame))
    print(f"\nwrote {out / 'grades.csv'}, feedback/ and reports in {out}")
    return 0


def cmd_check(args) -> int:
    from autograder.selfcheck import report

    return report(args.notebook, cell_s=args.cell_timeout)


def cmd_lab(args) -> int:
    root = find_course_root()
    notebooks = root / RELEASE
    if not notebooks.is_dir():
        raise UsageError(f"{notebooks} does not exist; run `transformer-course release`")
    jupyter = shutil.which("jupyter", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if jupyter is None:
        raise UsageError("jupyter is not installed in this environment (pip install -e .)")
    cmd = [jupyter, "lab", f"--ServerApp.root_dir={notebooks}"]
    if args.port:
        cmd.append(f"--ServerApp.port={args.port}")
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--ServerApp.allow_root=True")
    print("starting:", " ".join(cmd), file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # a headless backend would hide every plot
    return subprocess.call(cmd, cwd=root, env=env)


def cmd_demo(args) -> int:
    from autograder.batch import grade_class
    from autograder.demo import build_demo_class
    from autograder.reports import summary
    from autograder.runner import Limits

    root = find_course_root()
    keep = args.out is not None
    base = args.out.resolve() if keep else Path(tempfile.mkdtemp(prefix="transformer-course-demo-"))
    try:
        submitted = build_demo_class(root, base / "submitted")
        print(f"demo class written to {submitted}; grading with {args.jobs} jobs ...", file=sys.stderr)
        limits = Limits(wall_s=300, cell_s=20)
        frame = grade_class(root, submitted, base / "graded", jobs=args.jobs, limits=limits)
        print(frame[["student_id", "assignment", "exercise", "score", "max_score", "status"]].to_string(index=False))
        print()
        print(summary(frame))
        for row in frame[frame.status != "passed"].drop_duplicates("student_id").itertuples():
            print(f"\n{row.student_id} · {row.exercise} · {row.status}: {row.message[:400]}")
        if keep:
            print(f"\nreports in {base / 'graded'}")
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
