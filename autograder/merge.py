"""``transformer-course merge``: the outputs of N ``grade --shard i/N`` runs, as one run writes them.

Each shard's output folder holds its reports, its cached results (``.cache/``, one JSON file per
notebook, keyed by everything that decides the grade), ``jobs.csv`` and, written last,
``grading.json`` (``run_folder.MANIFEST``): the course fingerprint, the limits and sandbox, the
assignments, the class roster's digest, ``i/N`` and the key of every notebook it graded.

The merge refuses, with one line, anything that would not give the result of one run: a folder
that is not a finished shard, shards of different courses, limits, sandboxes, assignments or
rosters, a shard given twice, a shard missing, a student in two shards, a result missing or not
the one the manifest names. Then it writes the reports from the union of the results with the
same code a run uses, copies the results into ``out/.cache`` (so a later unsharded run can
resume from them), concatenates ``jobs.csv`` and writes the manifest of one unsharded run:
every file but ``jobs.csv`` (timings) has the bytes one unsharded run writes.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

from autograder.course import CourseError, course_fingerprint, lessons
from autograder.protocol import limits_from_data
from autograder.run_folder import (
    CACHE,
    JOB_COLUMNS,
    JOBS,
    MANIFEST,
    MANIFEST_FORMAT,
    cache_name,
    load_cached,
    manifest,
    roster_digest,
    shard_of,
    write_jobs,
    write_manifest,
)
from autograder.term_results import (
    RESULTS,
    adopt_earlier,
    read_record,
    rebuild,
    record_file,
    store,
    submission_rows,
    write_submission_rows,
)

# fields every shard of one class must agree on, and how to name them in an error
AGREE = {
    "course_fingerprint": "course versions",
    "limits": "limits",
    "sandbox": "sandboxes",
    "assignments": "assignments",
    "class": "classes (the submissions folder changed between the shards' runs)",
}


class MergeError(CourseError):
    """Why the shards cannot be merged; one line."""


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise MergeError(f"{folder} is not a folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MergeError(
            f"{folder} has no {MANIFEST}: not the output of a finished `transformer-course grade --shard i/N` run"
        ) from None
    except (OSError, ValueError) as exc:
        raise MergeError(f"{path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise MergeError(f"{path} is not a manifest this version of the grader writes")
    if not isinstance(data.get("shard"), dict):
        raise MergeError(f"{folder} is the output of an unsharded run, not of `grade --shard i/N`")
    return data


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:12] if isinstance(value, str) and len(value) == 64 else text


def check_shards(folders: list[Path]) -> list[tuple[Path, dict]]:
    """Each shard's folder and manifest, in shard order, once every check has passed; MergeError otherwise."""
    if not folders:
        raise MergeError("no shard folders given")
    found = [(folder, read_manifest(folder)) for folder in folders]
    first_folder, first = found[0]
    for folder, data in found[1:]:
        for field, what in AGREE.items():
            if data.get(field) != first.get(field):
                raise MergeError(
                    f"the shards were graded with different {what}: {first_folder} has {_short(first.get(field))}, "
                    f"{folder} has {_short(data.get(field))}; grade every shard with the same checkout and options"
                )
    counts = {data["shard"]["count"] for _, data in found}
    if len(counts) != 1:
        raise MergeError(f"the shards split the class in different numbers of parts: {sorted(counts)}")
    (count,) = counts
    by_index: dict[int, Path] = {}
    for folder, data in found:
        index = data["shard"]["index"]
        if index in by_index:
            raise MergeError(f"shard {index}/{count} is given twice: {by_index[index]} and {folder}")
        by_index[index] = folder
    missing = [f"{i}/{count}" for i in range(count) if i not in by_index]
    if missing:
        raise MergeError(f"missing shard{'s' if len(missing) > 1 else ''} {', '.join(missing)}: give the output folders of all {count} shards")
    owner: dict[str, Path] = {}
    for folder, data in found:
        for student in data["students"]:
            if student in owner:
                raise MergeError(f"the student {student} was graded in two shards: {owner[student]} and {folder}")
            owner[student] = folder
    for folder, data in found:
        for student in data["students"]:
            if shard_of(student, count) != data["shard"]["index"]:
                raise MergeError(f"the student {student} is in {folder} but belongs to shard {shard_of(student, count)}/{count}")
    if roster_digest(list(owner)) != first["class"]["digest"] or len(owner) != first["class"]["students"]:
        raise MergeError(
            f"the shards hold {len(owner)} students but the class had {first['class']['students']}: a shard's output is incomplete"
        )
    return sorted(found, key=lambda item: item[1]["shard"]["index"])


def merge_shards(folders: list[Path], out: Path, *, gradebook: str | None = None, root: Path | None = None,
                 progress: bool = True):
    """Merge the shard outputs ``folders`` into ``out``; returns the long gradebook (as ``grade_class``)."""
    folders = [Path(f) for f in folders]
    out = Path(out)
    for folder in folders:
        if folder.resolve() == out.resolve():
            raise MergeError(f"--out {out} is one of the shards; merge into another folder")
    shards = check_shards(folders)
    first = shards[0][1]
    if gradebook:
        from autograder.course import find_course_root

        root = root or find_course_root()
        if course_fingerprint(root) != first["course_fingerprint"]:
            raise MergeError(
                f"the course in {root} is not the one the shards were graded with; write the gradebook from that checkout"
            )
    results, graded, rows, copies, attention, elsewhere = [], [], [], [], [], []
    for folder, data in shards:
        for assignment in data["assignments"]:
            path = record_file(folder, assignment)
            if not path.exists():
                raise MergeError(f"{folder} has no {RESULTS}/{assignment}.json: its output is incomplete")
            attention += read_record(path)["attention"]  # the rows of its own students
        elsewhere += submission_rows(folder)
        for student, assignment, key in data["graded"]:
            source = folder / CACHE / cache_name(student, assignment)
            result = load_cached(source, key)
            if result is None:
                raise MergeError(f"{folder} has no result for {student}/{assignment} (its {CACHE} folder is incomplete or changed)")
            results.append(result)
            graded.append((student, assignment, key))
            copies.append(source)
        rows += _job_rows(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    (out / CACHE).mkdir(exist_ok=True)
    for source in copies:
        shutil.copyfile(source, out / CACHE / source.name)
    # the merged folder is a term's folder too: its other assignments' results are kept
    known = [lesson.assignment for lesson in lessons(root or _course_root())]
    adopt_earlier(out, out / CACHE, known, set(first["assignments"]))
    store(out, first["assignments"], results, attention, first.get("not_graded"))
    write_submission_rows(out, elsewhere)
    # nbgrader's sidecar files (timestamp, submission secret) come from the shards' feedback/
    frame = rebuild(out, [folder / "feedback" for folder, _ in shards])
    write_jobs(out, rows)
    if gradebook:
        from autograder.gradebook import write_gradebook

        count = write_gradebook(gradebook, root, results)
        if progress:
            print(f"wrote {count} submissions into the nbgrader gradebook {gradebook}", file=sys.stderr)
    limits = limits_from_data(first["limits"])
    roster = sorted(student for _, data in shards for student in data["students"])
    write_manifest(out, manifest(first["course_fingerprint"], limits, first["sandbox"], first["assignments"],
                                 roster, None, graded))
    return frame


def _course_root() -> Path:
    from autograder.course import find_course_root

    return find_course_root()


def _job_rows(folder: Path) -> list[list[str]]:
    path = folder / JOBS
    if not path.exists():
        return []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header != JOB_COLUMNS:
            return []
        return [row for row in reader if len(row) == len(JOB_COLUMNS)]
