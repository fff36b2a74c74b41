"""A whole class with cells that will not stop, graded with the default settings, timed.

A bare ``except:`` (or ``except BaseException:``) around a retry loop swallows the grader's alarm.
This builds a class of ``--students`` students (default 20) who each hand in all the lessons,
solved; every ``--every``-th student (default 4) also has, in every lesson, a loop that swallows
the alarm: in an extra cell after their first answer for half of them, inside their first answer
for the other half. It then runs ``transformer-course grade --jobs 2`` with no limits given (so
the limits are measured from the course's own solutions) as a whole process, and prints the wall
time and how the stuck students' exercises came out.

    python benchmarks/grading_stuck.py                 # 20 students x every lesson
    python benchmarks/grading_stuck.py --lessons 8     # 20 students x the first 8 lessons
    python benchmarks/grading_stuck.py --students 8    # smaller

The last line is one JSON object: ``wall_s``, ``notebooks``, ``statuses`` (counts) and whether
every exercise not holding a loop kept its points.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from autograder.catalogue import with_answers
from autograder.course import RELEASE, find_course_root, lessons, nbgrader_meta

LOOP = "\nimport time\nwhile True:  # retry until it works\n    try:\n        time.sleep(0.01)\n    except:  # noqa: E722\n        pass\n"


def build_class(root: Path, folder: Path, students: int, every: int, n_lessons: int | None = None) -> dict[str, str]:
    """Write the class; returns {student: "extra" | "answer" | "none"}, where their loops are."""
    kinds = {}
    for n in range(students):
        kind = "none" if n % every else ("extra" if (n // every) % 2 == 0 else "answer")
        student = f"s{n:02d}-{kind}"
        kinds[student] = kind
        for lesson in lessons(root)[:n_lessons]:
            release = json.loads((root / RELEASE / lesson.assignment / lesson.filename).read_text(encoding="utf-8"))
            answers = lesson.solution_answers()
            first = next(iter(answers))
            if kind == "answer":
                answers[first] = LOOP + answers[first]
            notebook = with_answers(release, answers)
            if kind == "extra":
                at = next(i for i, c in enumerate(notebook["cells"]) if nbgrader_meta(c).get("grade_id") == first)
                notebook["cells"].insert(at + 1, {"cell_type": "code", "execution_count": None, "id": "retry-loop",
                                                  "metadata": {}, "outputs": [], "source": LOOP})
            target = folder / student / lesson.assignment / lesson.filename
            target.parent.mkdir(parents=True)
            target.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--every", type=int, default=4, help="every N-th student has the loops (4)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--lessons", type=int, default=None, help="only the first N lessons (default: all)")
    args = parser.parse_args(argv)
    root = find_course_root()
    with tempfile.TemporaryDirectory(prefix="grading-stuck-") as tmp:
        kinds = build_class(root, Path(tmp) / "submitted", args.students, args.every, args.lessons)
        out = Path(tmp) / "graded"
        start = time.perf_counter()
        chosen = [arg for les in lessons(root)[:args.lessons] for arg in ("--assignment", les.assignment)]
        done = subprocess.run([sys.executable, "-m", "autograder.cli", "grade", str(Path(tmp) / "submitted"),
                               "--out", str(out), "--jobs", str(args.jobs), *(chosen if args.lessons else [])],
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-3000:])
        limits_line = next((line for line in done.stderr.splitlines() if line.startswith("limits")), "")
        grades = pd.read_csv(out / "grades.csv")
    grades["kind"] = grades.student_id.map(kinds)
    first = {les.assignment: next(iter(les.exercises)) for les in lessons(root)[:args.lessons]}
    holds_loop = (grades.kind == "answer") & (grades.exercise == grades.assignment.map(first))
    kept = bool((grades[~holds_loop].score == grades[~holds_loop].max_score).all())
    statuses = grades[holds_loop].status.value_counts().to_dict()
    lost = grades[~holds_loop & (grades.score < grades.max_score)]
    for row in lost.itertuples():
        print(f"  lost points outside the loop: {row.student_id} {row.assignment} {row.exercise} {row.status}: {row.message[:160]}")
    notebooks = len(grades[["student_id", "assignment"]].drop_duplicates())
    print(limits_line)
    print(f"{notebooks} notebooks ({sum(k != 'none' for k in kinds.values())} students with a loop in every lesson) "
          f"graded in {wall:.0f} s with --jobs {args.jobs}; exercises holding a loop: {statuses}; "
          f"every other exercise kept its points: {kept}")
    print(json.dumps({"wall_s": round(wall, 1), "notebooks": notebooks, "jobs": args.jobs,
                      "statuses_of_looping_exercises": statuses, "others_kept_their_points": kept}))
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
