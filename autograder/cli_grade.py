"""``transformer-course grade``, ``merge`` and ``demo`` (see ``autograder.cli``): a class graded
under limits given on the command line or measured from the course's own solutions, shards
merged, a demo class graded; and the exit status that says a lesson was not graded."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.cli_commands import UsageError
from autograder.course import find_course_root, lessons

#: `grade` and `demo` graded what they could, but at least one lesson not at all: its own solution
#: did not run in the grader (the summary says why and what to do; 0 means everything was graded)
NOT_ALL_GRADED = 3

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
    from autograder.batch import grade_class
    from autograder.executors import check_executor
    from autograder.run_folder import parse_shard

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
    from autograder.term import OFF_ROSTER
    from autograder.term_results import attention_counts

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
    from autograder.protocol import Limits

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
    from autograder.protocol import LessonLimits

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


def cmd_demo(args) -> int:
    from autograder.batch import grade_class
    from autograder.demo import build_demo_class
    from autograder.limits import measure_limits
    from autograder.protocol import Limits
    from autograder.reports import summary

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
