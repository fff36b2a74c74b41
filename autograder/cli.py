"""``transformer-course``: release, grade, check, open the lab, and grade a demo class.

The command line is here; the commands are in ``autograder.cli_commands`` (release, check, lab),
``autograder.cli_grade`` (grade, merge, demo) and ``autograder.book`` (book)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.book import add_parser as add_book_parser
from autograder.cli_commands import UsageError, cmd_check, cmd_lab, cmd_release
from autograder.cli_grade import cmd_demo, cmd_grade, cmd_merge
from autograder.course import CourseError

DESCRIPTION = """\
Tools for the Transformer course.

  release   regenerate notebooks/ (and helpers/reference/) from solutions/, refusing leaks
  grade     grade a class's submissions: grades.csv, feedback HTML, a summary
  merge     combine the outputs of `grade --shard i/N` runs into what one run writes
  check     check your own notebook: every visible test, with its diagnosis
  lab       open JupyterLab: the student's (your workspace) or the instructor's (--instructor)
  demo      grade a bundled demo class and print the gradebook
"""


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
    p.add_argument("--cell-timeout", type=float, default=None,
                   help="seconds one cell may run (default: 10x that cell's own time in the lesson's solution, or for other cells 10x its slowest cell; at least 5)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one notebook may run (default: 10x the slowest solution notebook, at least 60)")
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
    p.add_argument(
        "--shard", metavar="i/N",
        help="grade only shard i of N (0 <= i < N; students split by a hash of their id), for "
        "`transformer-course merge` to combine; e.g. $SLURM_ARRAY_TASK_ID/8 or $JOB_COMPLETION_INDEX/8",
    )
    p.add_argument(
        "--executor", default="local", metavar="local|dask://HOST:PORT",
        help="where notebooks run: `local` (default: --jobs fork servers here) or a Dask scheduler "
        "(each worker starts its own fork servers; needs the `dask` extra; --jobs is not used)",
    )
    p.add_argument("--roster", type=Path, metavar="CSV",
                   help="the class: a CSV with an `id` column (as `nbgrader db student import` reads); a student on it "
                        "who handed nothing in is graded `missing` (with --gradebook, its students count too)")
    p.add_argument("--exchange", type=Path, metavar="DIR",
                   help="nbgrader's exchange (its Exchange.root), where `release_assignment` shows what was released "
                        "(default: the one nbgrader's config names, and nbgrader's default)")
    p.add_argument("--max-notebook-mb", type=int, default=None, metavar="MB",
                   help="largest notebook graded, MiB (default 20); a bigger one is `invalid`, listed in needs_attention.csv")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("merge", help="combine the outputs of `grade --shard i/N` runs into what one run writes")
    p.add_argument("shards", nargs="+", type=Path, help="the --out folders of all N shards (e.g. graded-*/)")
    p.add_argument("--out", type=Path, required=True, help="where the merged grades.csv, feedback/ and reports go")
    p.add_argument(
        "--gradebook", metavar="DB_URL",
        help="also write the scores into this nbgrader gradebook (e.g. sqlite:///gradebook.db)",
    )
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("check", help="run a notebook's visible tests and explain what fails")
    p.add_argument("notebook", type=Path, help="your notebook (.ipynb), saved")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds one cell may run (default 60)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("lab", help="open JupyterLab: the student's on your workspace, or the instructor's (--instructor)")
    p.add_argument("--workspace", type=Path, default=None,
                   help="your folder of lessons (default: work/ in the course); made from notebooks/ on first "
                        "start, only added to by updates of the course")
    p.add_argument("--instructor", action="store_true", help="open the course root with Formgrader and every nbgrader tool")
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


if __name__ == "__main__":
    sys.exit(main())
