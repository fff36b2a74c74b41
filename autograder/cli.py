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
from autograder.course import RELEASE, CourseError, find_course_root, lessons

DESCRIPTION = """\
Tools for the Transformer course.

  release   regenerate notebooks/ (and helpers/reference/) from solutions/, refusing leaks
  grade     grade a class's submissions: grades.csv, feedback HTML, a summary
  merge     combine the outputs of `grade --shard i/N` runs into what one run writes
  check     check your own notebook: every visible test, with its diagnosis
  lab       open JupyterLab: the student's (your workspace) or the instructor's (--instructor)
  demo      grade a bundled demo class and print the gradebook
"""


class UsageError(Exception):
    """A wrong argument: printed as one line, exit code 2."""


#: `grade` and `demo` graded what they could, but at least one lesson not at all: its own solution
#: did not run in the grader (the summary says why and what to do; 0 means everything was graded)
NOT_ALL_GRADED = 3


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


FIXED_TIMEOUT_S = 600.0
FIXED_CELL_TIMEOUT_S = 60.0


def cmd_grade(args) -> int:
    submitted = args.submitted
    if not submitted.is_dir():
        raise UsageError(f"{submitted} is not a folder of submissions")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    out = args.out.resolve()
    if out == submitted.resolve() or submitted.resolve() in out.parents:
        raise UsageError("--out must not be inside the submissions folder (it is never written to)")
    from autograder.batch import grade_class, parse_shard
    from autograder.executors import check_executor

    shard = parse_shard(args.shard) if args.shard is not None else None
    executor = check_executor(args.executor)  # every usage error before the limits are measured or printed
    if shard is not None and args.gradebook:
        raise UsageError("--gradebook with --shard: write the gradebook once, with `transformer-course merge ... --gradebook`")
    if args.max_notebook_mb is not None and args.max_notebook_mb < 1:
        raise UsageError("--max-notebook-mb must be at least 1")
    from autograder.batch import with_notebook_cap
    from autograder.term import choose_assignments, exchange_folders, read_roster, student_folders

    root = find_course_root()
    roster = read_roster(args.roster) if args.roster is not None else None
    exchanges = exchange_folders(root, args.exchange)
    folders = student_folders(submitted)
    if not folders and not roster and not args.gradebook:
        raise UsageError(f"{submitted} has no student folders (<student>/<assignment>/<notebook>.ipynb) and no --roster was given")
    plan = choose_assignments(lessons(root), submitted, folders, args.assignment, exchanges)
    if not plan.chosen:
        raise UsageError(f"nothing to grade: no assignment was {plan.what} in {submitted}; name one with --assignment")
    # only the assignments this run grades are measured
    measured = argparse.Namespace(**{**vars(args), "assignment": [lesson.assignment for lesson in plan.chosen]})
    limits, not_graded = _grading_limits(measured, out, shard)
    frame = grade_class(
        root, submitted, out, jobs=args.jobs, limits=with_notebook_cap(limits, args.max_notebook_mb),
        only=args.assignment, sandbox=args.sandbox, resume=not args.fresh, gradebook=args.gradebook, shard=shard,
        executor=executor, not_graded=not_graded, roster=roster, exchanges=exchanges,
    )
    from autograder.reports import summary

    print(summary(frame, not_graded))
    from autograder.intake import CHOSEN, MISPLACED
    from autograder.reports import RENAMED
    from autograder.term import OFF_ROSTER, attention_counts

    found = attention_counts(out, (CHOSEN, MISPLACED, OFF_ROSTER, RENAMED))
    if found:
        print(f"submissions that stray from nbgrader's layout, in needs_attention.csv with what to do: {found}")
    print(f"\nwrote {out / 'grades.csv'}, feedback/ and reports in {out}")
    if shard is not None:
        print(f"this is shard {shard[0]}/{shard[1]}: `transformer-course merge` combines all {shard[1]} shards")
    return _exit_status(not_graded)


def _exit_status(not_graded: dict[str, str]) -> int:
    """0 when every lesson was graded; ``NOT_ALL_GRADED`` when some were not, said on stderr too."""
    if not not_graded:
        return 0
    print(f"\nnot every lesson was graded ({', '.join(not_graded)}): see NOT GRADED above; exit status {NOT_ALL_GRADED}",
          file=sys.stderr)
    return NOT_ALL_GRADED


def _grading_limits(args, out: Path, shard):
    """The limits given on the command line; where one is not given, measured from the course's
    own solutions (``autograder.limits``), or the fixed defaults for a shard (every shard of a
    class must grade under the same limits, and separate measurements could differ).

    Also returns the lessons that cannot be graded (lesson -> why, and what to do): those whose
    own solution did not run cleanly when it was measured."""
    from autograder.runner import Limits

    base = Limits(memory_mb=args.memory_mb)
    if args.timeout is not None and args.cell_timeout is not None:
        return Limits(wall_s=args.timeout, cell_s=args.cell_timeout, memory_mb=args.memory_mb), {}
    if shard is not None:
        wall = args.timeout if args.timeout is not None else FIXED_TIMEOUT_S
        cell = args.cell_timeout if args.cell_timeout is not None else FIXED_CELL_TIMEOUT_S
        print(f"shard: limits {cell:.0f} s a cell, {wall:.0f} s a notebook (give --cell-timeout and --timeout to change them)",
              file=sys.stderr)
        return Limits(wall_s=wall, cell_s=cell, memory_mb=args.memory_mb), {}
    from autograder.limits import measure_limits
    from autograder.runner import LessonLimits

    root = find_course_root()
    # only the lessons handed in are measured (a class that submitted two lessons waits for two)
    handed_in = {p.name for p in Path(args.submitted).glob("*/*") if p.is_dir()}
    known = [lesson.assignment for lesson in lessons(root)]
    only = args.assignment or [a for a in known if a in handed_in] or None
    measured = measure_limits(root, only, base, args.sandbox, out / ".cache", jobs=getattr(args, "jobs", 1))
    limits = LessonLimits(
        _override(measured.limits.default, args),
        tuple((assignment, _override(own, args)) for assignment, own in measured.limits.lessons),
    )
    _say_limits(limits, measured.failed)
    return limits, {a: str(error) for a, error in measured.failed.items()}


def _say_limits(limits, failed: dict) -> None:
    """One line on stderr: the measured limits, and the lessons that will not be graded."""
    shown = ", ".join(f"{a[:2]}: {lim.cell_s:.0f} s" for a, lim in limits.lessons)
    print(f"limits a cell ({shown or 'none measured'}), a notebook up to {limits.default.wall_s:.0f} s: measured from "
          "the course's own solutions; --cell-timeout and --timeout override", file=sys.stderr)
    if failed:
        print(f"not graded: {', '.join(failed)} (the course's own solution did not run in the grader; the summary at the end "
              "says why and what to do); the other lessons are graded", file=sys.stderr)


def _override(limits, args):
    import dataclasses

    if args.timeout is not None:
        limits = dataclasses.replace(limits, wall_s=args.timeout)
    if args.cell_timeout is not None:  # one limit for every cell, the course's own included
        limits = dataclasses.replace(limits, cell_s=args.cell_timeout, steps=())
    return limits


def cmd_merge(args) -> int:
    from autograder.merge import merge_shards
    from autograder.reports import summary

    out = args.out.resolve()
    frame = merge_shards(args.shards, out, gradebook=args.gradebook)
    print(summary(frame))
    print(f"\nmerged {len(args.shards)} shards: wrote {out / 'grades.csv'}, feedback/ and reports in {out}")
    return 0


def cmd_check(args) -> int:
    from autograder.selfcheck import report

    return report(args.notebook, cell_s=args.cell_timeout)


def cmd_lab(args) -> int:
    from autograder.environment import tool_env
    from autograder.lab import (
        environment_app_settings_dir,
        lab_plan,
        write_app_settings,
        write_student_config,
    )
    from autograder.lab_exchange import choose_exchange, configured_exchange
    from autograder.lab_workspace import resolve_workspace, sync_workspace

    root = find_course_root()
    jupyter = shutil.which("jupyter", path=tool_env()["PATH"])
    if jupyter is None:
        raise UsageError("jupyter is not installed in this environment (pip install -e .)")
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    options = dict(port=args.port, no_browser=args.no_browser, as_root=as_root)
    if args.instructor:
        if args.workspace is not None:
            raise UsageError("--workspace is the student's folder; the instructor's lab opens the course root")
        plan = lab_plan(jupyter, root, instructor=True, **options)
    else:
        workspace = resolve_workspace(root, args.workspace)
        print(sync_workspace(root / RELEASE, workspace).message())
        plan = lab_plan(jupyter, root, workspace=workspace, **options)
        exchange = choose_exchange(configured_exchange(root, workspace, skip=(plan.config_dir,)), workspace)
        write_student_config(plan.config_dir, exchange)
        print(exchange.message())
    write_app_settings(plan.app_settings_dir, environment_app_settings_dir(plan.env))
    print("starting:", " ".join(plan.cmd), file=sys.stderr)
    sys.stdout.flush()  # the lines above before the lab's own, also where stdout is a file
    return subprocess.call(plan.cmd, cwd=plan.cwd, env=plan.env)


def cmd_demo(args) -> int:
    from autograder.batch import grade_class
    from autograder.demo import build_demo_class
    from autograder.limits import measure_limits
    from autograder.reports import summary
    from autograder.runner import Limits

    root = find_course_root()
    keep = args.out is not None
    base = args.out.resolve() if keep else Path(tempfile.mkdtemp(prefix="transformer-course-demo-"))
    try:
        submitted = build_demo_class(root, base / "submitted")
        print(f"demo class written to {submitted}; grading with {args.jobs} jobs ...", file=sys.stderr)
        # the limits `grade` uses by default: measured from the course's own solutions
        measured = measure_limits(root, None, Limits(), "auto", base / "graded" / ".cache", jobs=args.jobs)
        _say_limits(measured.limits, measured.failed)
        not_graded = {a: str(error) for a, error in measured.failed.items()}
        frame = grade_class(root, submitted, base / "graded", jobs=args.jobs, limits=measured.limits,
                            not_graded=not_graded)
        if not frame.empty:
            print(frame[["student_id", "assignment", "exercise", "score", "max_score", "status"]].to_string(index=False))
            print()
        print(summary(frame, not_graded))
        for row in frame[frame.status != "passed"].drop_duplicates("student_id").itertuples():
            print(f"\n{row.student_id} · {row.exercise} · {row.status}: {row.message[:400]}")
        if keep:
            print(f"\nreports in {base / 'graded'}")
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    return _exit_status(not_graded)


if __name__ == "__main__":
    sys.exit(main())
