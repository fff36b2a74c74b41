"""Grade a whole class: every student × lesson, in parallel, resumable, isolated per lesson.

The run folder's format (the cache, the manifest, ``jobs.csv``, the shard rule) lives in
``run_folder``, shared with ``merge``; this module is the run itself and the course's grading salt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import sys
import time
from pathlib import Path

from autograder.course import CourseError, course_fingerprint, lessons
from autograder.executors import check_executor, make_executor
from autograder.grading import NotebookResult
from autograder.intake import Intake
from autograder.jobs import Job, Timing
from autograder.protocol import LessonLimits, Limits, limits_for
from autograder.reports import not_graded_row
from autograder.run_folder import (
    CACHE,
    MANIFEST,
    cache_key,
    cache_name,
    load_cached,
    manifest,
    shard_of,
    store_cached,
    timing_row,
    write_jobs,
    write_manifest,
)
from autograder.sandbox import resolve_mode
from autograder.term import (
    choose_assignments,
    gradebook_students,
    roster_rows,
    student_folders,
    unreleased_rows,
)
from autograder.term_results import adopt_earlier, rebuild, store, write_submission_rows

SECRET_FILE = ".grading-secret"
SECRET_ENV = "TRANSFORMER_COURSE_SECRET"


def grading_salt(root: Path) -> int:
    """The course's grading salt (``Limits.salt``), from its secret: ``$TRANSFORMER_COURSE_SECRET``,
    else ``root/.grading-secret``, made at random on the first run and kept (never released): every
    run of this course draws the same inputs, and none that a notebook could have read in
    the checks' source."""
    secret = os.environ.get(SECRET_ENV, "")
    path = root / SECRET_FILE
    if not secret:
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            secret = secrets.token_hex(16)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(secret + "\n")
            except FileExistsError:  # another run made it first: use that one
                secret = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise CourseError(f"cannot keep the course's grading secret in {path} ({exc}): set ${SECRET_ENV}") from None
        if not secret:
            raise CourseError(f"{path} is empty: delete it (a new secret is made) or set ${SECRET_ENV}")
    return int(hashlib.sha256(secret.encode("utf-8")).hexdigest()[:16], 16) or 1


def with_salt(limits: Limits | LessonLimits, salt: int) -> Limits | LessonLimits:
    if isinstance(limits, LessonLimits):
        return LessonLimits(dataclasses.replace(limits.default, salt=salt),
                            tuple((a, dataclasses.replace(lim, salt=salt)) for a, lim in limits.lessons))
    return dataclasses.replace(limits, salt=salt)



# ---------------------------------------------------------------------------------------------


def grade_class(
    root: Path,
    submitted: Path,
    out: Path,
    *,
    jobs: int = 1,
    limits: Limits | LessonLimits | None = None,
    only: list[str] | None = None,
    sandbox: str = "auto",
    resume: bool = True,
    progress: bool = True,
    gradebook: str | None = None,
    shard: tuple[int, int] | None = None,
    executor="local",
    not_graded: dict[str, str] | None = None,
    roster: list[str] | None = None,
    exchanges=(),
):
    """Grade every student × lesson; write the reports into ``out``; return the long gradebook of
    every assignment graded into ``out`` so far (``autograder.term_results``: a run replaces only the
    results of the assignments it grades, and the reports are rebuilt from all of them).

    Finished notebooks are cached in ``out/.cache``: an interrupted run picks up where it
    stopped, and a notebook is graded again only when it, or the course, changed.
    ``shard=(i, N)`` grades only the students ``shard_of`` puts in shard i (``merge`` combines
    the N outputs); ``executor`` is ``"local"`` (``jobs`` threads here) or ``"dask://HOST:PORT"``.
    The last file written is ``MANIFEST``: its presence says the run finished.
    ``not_graded`` (lesson -> reason: its solution could not run in the grader) names lessons that
    are not graded at all: each of their submissions is listed in ``needs_attention.csv`` with
    the reason, and none is scored, cached or written into the gradebook.
    The class is the student folders of ``submitted``, the ids of ``roster`` and, with
    ``gradebook``, nbgrader's student table. Without ``only``, the assignments handed in (and
    released, where one of ``exchanges`` shows what was: ``term.choose_assignments``) are graded.
    Each notebook is found by ``intake.Intake``: what it chose, and what it could not place, goes
    into ``needs_attention.csv``.
    """
    limits = with_salt(limits or Limits(), grading_salt(root))
    mode = resolve_mode(sandbox)
    if isinstance(executor, str):
        check_executor(executor)
    course = lessons(root)
    if shard is not None and gradebook:
        raise CourseError("--gradebook with --shard: write the gradebook once, with `transformer-course merge ... --gradebook`")
    folders = student_folders(submitted)
    given, enrolled = sorted(set(roster or ())), gradebook_students(gradebook) if gradebook else []
    listed = sorted(set(given) | set(enrolled))
    source = " and ".join(name for name, ids in (("--roster", given), ("the gradebook's students", enrolled)) if ids)
    roster = sorted(set(folders) | set(listed))
    if not roster:
        raise CourseError(f"{submitted} has no student folders (<student>/<assignment>/<notebook>.ipynb) and no roster was given")
    plan = choose_assignments(course, submitted, folders, only, exchanges)
    chosen = plan.chosen
    if not chosen:
        raise CourseError(f"nothing to grade: no assignment was {plan.what} ({submitted}); name one with --assignment")
    if progress and not only:
        print(f"grading {', '.join(lesson.assignment for lesson in chosen)}: {plan.rule}", file=sys.stderr)
    students = roster if shard is None else [s for s in roster if shard_of(s, shard[1]) == shard[0]]
    fingerprint = course_fingerprint(root)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # written again last, once this run has finished
    intake = Intake(root, submitted, out / CACHE / "intake",
                    {lesson.assignment: limits_for(limits, lesson.assignment).notebook_mb for lesson in chosen})
    picks = {(s, lesson.assignment): intake.pick(s, lesson) for lesson in chosen for s in students}
    attention = [row for pick in picks.values() for row in pick.rows]
    elsewhere = [row for s in students if s in folders for row in intake.stray_folders(s, course)]
    elsewhere += unreleased_rows(plan, students, course)
    elsewhere += roster_rows(students, folders, listed, source)
    not_graded = {a: reason for a, reason in (not_graded or {}).items() if a in {le.assignment for le in chosen}}
    work = [(s, lesson) for lesson in chosen if lesson.assignment not in not_graded for s in students]
    attention += [not_graded_row(s, lesson.assignment, _name(picks[(s, lesson.assignment)].source),
                                 lesson.max_score, not_graded[lesson.assignment])
                  for lesson in chosen if lesson.assignment in not_graded for s in students]
    results: list[NotebookResult] = []
    rows: list[list[str]] = []
    graded: list[tuple[str, str, str]] = []
    todo: list[Job] = []
    keys: dict[tuple[str, str], tuple[str, Path]] = {}
    # a notebook whose key is another's of this run (the same bytes, lesson and limits: the blank
    # release handed in by several students, say) is graded once, and its result given to each
    twins: dict[str, list[tuple[str, Path]]] = {}
    for student, lesson in work:
        path = picks[(student, lesson.assignment)].path
        key = cache_key(fingerprint, lesson, path, limits, mode)
        cache_file = out / CACHE / cache_name(student, lesson.assignment)
        graded.append((student, lesson.assignment, key))
        cached = load_cached(cache_file, key) if resume else None
        if cached is not None:
            results.append(cached)
            rows.append(timing_row(Timing(student, lesson.assignment, "cache")))
        elif key in twins:
            twins[key].append((student, cache_file))
        else:
            todo.append(Job(student, lesson, path))
            keys[(student, lesson.assignment)] = (key, cache_file)
            twins[key] = []
    if progress and shard is not None:
        print(f"shard {shard[0]}/{shard[1]}: {len(students)} of {len(roster)} students", file=sys.stderr)
    if progress and results:
        print(f"resuming: {len(results)} of {len(work)} notebooks already graded", file=sys.stderr)
    if todo:
        pool = make_executor(executor, root, course, chosen, mode, [submitted, out], jobs, fingerprint)
        try:
            same = sum(map(len, twins.values()))
            if progress:
                print(f"grading {len(todo) + same} notebooks with {pool.describe()}"
                      + (f" ({same} of them the same file as another's: each such file is graded once)" if same else ""),
                      file=sys.stderr)
            start = time.monotonic()
            for done, (result, timing) in enumerate(pool.run(todo, limits), start=1):
                key, cache_file = keys[(result.student, result.assignment)]
                store_cached(cache_file, key, result)
                results.append(result)
                rows.append(timing_row(timing))
                for twin, twin_cache in twins[key]:
                    copy = dataclasses.replace(result, student=twin)
                    store_cached(twin_cache, key, copy)
                    results.append(copy)
                    rows.append(timing_row(Timing(twin, result.assignment, f"same file as {result.student}")))
                if progress:
                    elapsed = time.monotonic() - start
                    eta = elapsed / done * (len(todo) - done)
                    statuses = ",".join(sorted({e.status for e in result.exercises}))
                    print(
                        f"[{done}/{len(todo)}] {result.student} {result.assignment}: "
                        f"{result.score:g}/{result.max_score:g} ({statuses}) ETA {eta:.0f}s",
                        file=sys.stderr,
                    )
        finally:
            pool.close()
    assignments = [lesson.assignment for lesson in chosen]
    adopted = adopt_earlier(out, out / CACHE, [lesson.assignment for lesson in course], set(assignments))
    if adopted and progress:
        print(f"kept the results of {', '.join(adopted)}, graded into {out} by an earlier version (from {CACHE}/)",
              file=sys.stderr)
    store(out, assignments, results, attention, not_graded)
    write_submission_rows(out, elsewhere)
    frame = rebuild(out, submitted, root)
    write_jobs(out, rows)
    if gradebook:
        from autograder.gradebook import write_gradebook

        count = write_gradebook(gradebook, root, results, submitted=submitted, out=out,
                                paths={key: pick.path for key, pick in picks.items()})
        if progress:
            print(f"wrote {count} submissions into the nbgrader gradebook {gradebook}", file=sys.stderr)
    write_manifest(out, manifest(fingerprint, limits, mode, assignments, roster, shard, graded, not_graded))
    return frame


def _name(path: Path | None) -> str:
    """The file name of a submission; empty when nothing was handed in."""
    return path.name if path is not None else ""


def with_notebook_cap(limits: Limits | LessonLimits, megabytes: float | None) -> Limits | LessonLimits:
    """``limits`` with the largest notebook read set to ``megabytes`` (``--max-notebook-mb``; None keeps it)."""
    if megabytes is None:
        return limits
    if isinstance(limits, LessonLimits):
        return LessonLimits(dataclasses.replace(limits.default, notebook_mb=megabytes),
                            tuple((a, dataclasses.replace(lim, notebook_mb=megabytes)) for a, lim in limits.lessons))
    return dataclasses.replace(limits, notebook_mb=megabytes)
