"""Grade a whole class: every student × lesson, in parallel, resumable, isolated per lesson."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from autograder.course import CourseError, Lesson, lessons
from autograder.grading import ExerciseResult, NotebookResult, TestResult, grade_notebook, locate
from autograder.reports import write_reports
from autograder.runner import Limits, shutdown_servers
from autograder.sandbox import isolation, resolve_mode

CACHE = ".cache"


def course_fingerprint(root: Path) -> str:
    """Changes whenever anything that decides a grade changes: lessons, checks, references, grader."""
    digest = hashlib.sha256()
    files = sorted((root / "solutions").rglob("*.ipynb"))
    for package in ("helpers", "autograder"):
        files += sorted((root / package).rglob("*.py"))
    for path in files:
        if ".ipynb_checkpoints" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _key(fingerprint: str, lesson: Lesson, path: Path | None, limits: Limits, mode: str) -> str:
    digest = hashlib.sha256(fingerprint.encode())
    digest.update(json.dumps([lesson.assignment, dataclasses.asdict(limits), mode, path.name if path else None]).encode())
    digest.update(path.read_bytes() if path is not None and path.is_file() else b"<absent>")
    return digest.hexdigest()


def _load(cache_file: Path, key: str) -> NotebookResult | None:
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("key") != key:
        return None
    result = data["result"]
    exercises = [
        ExerciseResult(**{**e, "tests": [TestResult(**t) for t in e["tests"]]}) for e in result.pop("exercises")
    ]
    return NotebookResult(**result, exercises=exercises)


def _store(cache_file: Path, key: str, result: NotebookResult) -> None:
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "result": dataclasses.asdict(result)}), encoding="utf-8")
    os.replace(tmp, cache_file)


def grade_class(
    root: Path,
    submitted: Path,
    out: Path,
    *,
    jobs: int = 1,
    limits: Limits | None = None,
    only: list[str] | None = None,
    sandbox: str = "auto",
    resume: bool = True,
    progress: bool = True,
    gradebook: str | None = None,
):
    """Grade every student × lesson; write the reports into ``out``; return the long gradebook.

    Finished notebooks are cached in ``out/.cache``: an interrupted run picks up where it
    stopped, and a notebook is graded again only when it, or the course, changed.
    """
    limits = limits or Limits()
    mode = resolve_mode(sandbox)
    course = lessons(root)
    chosen = [lesson for lesson in course if not only or lesson.assignment in only]
    if only and len(chosen) != len(set(only)):
        known = ", ".join(lesson.assignment for lesson in course)
        raise CourseError(f"unknown assignment in {only}; the course has {known}")
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not students:
        raise CourseError(f"{submitted} has no student folders (<student>/<assignment>/<notebook>.ipynb)")
    fingerprint = course_fingerprint(root)
    job_base = Path(tempfile.mkdtemp(prefix="tc-grading-"))
    order = [lesson.assignment for lesson in course]
    isolations = {}
    for lesson in chosen:
        later = course[order.index(lesson.assignment):]
        hidden = [m for m in (le.notebook["metadata"].get("course", {}).get("reference_module") for le in later) if m]
        isolations[lesson.assignment] = isolation(mode, root, job_base, hidden, [submitted, out])
    work = [(s, lesson) for lesson in chosen for s in students]
    results: list[NotebookResult] = []
    todo = []
    for student, lesson in work:
        path = locate(submitted, student, lesson)
        key = _key(fingerprint, lesson, path, limits, mode)
        cache_file = out / CACHE / f"{student}__{lesson.assignment}.json"
        cached = _load(cache_file, key) if resume else None
        if cached is not None:
            results.append(cached)
        else:
            todo.append((student, lesson, path, key, cache_file))
    if progress and results:
        print(f"resuming: {len(results)} of {len(work)} notebooks already graded", file=sys.stderr)
    start = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {
                pool.submit(grade_notebook, lesson, path, student, limits, isolations[lesson.assignment]): (key, cache_file)
                for student, lesson, path, key, cache_file in todo
            }
            for done, future in enumerate(as_completed(futures), start=1):
                result = future.result()
                key, cache_file = futures[future]
                _store(cache_file, key, result)
                results.append(result)
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
        for iso in isolations.values():
            shutdown_servers(iso.key)
        shutil.rmtree(job_base, ignore_errors=True)
    frame = write_reports(results, out)
    if gradebook:
        from autograder.gradebook import write_gradebook

        count = write_gradebook(gradebook, root, results)
        if progress:
            print(f"wrote {count} submissions into the nbgrader gradebook {gradebook}", file=sys.stderr)
    return frame
