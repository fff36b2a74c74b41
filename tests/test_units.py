"""Fast unit tests of the grader's delicate pure parts, on a five-cell toy lesson and hand-written
records: reading a lesson, building the program, decoding with budgets, judging, finding leaks.

No notebook runs here. One test per lesson starts a Python process (a check module imported the
way the grader's child imports it, torch included: a few seconds each); every other test runs in
this process, most in well under a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.course import CourseError, check_calls, lessons, load_lesson
from autograder.grading import STUCK_MESSAGE, judge_test
from autograder.protocol import StepLine
from autograder.release import find_leaks
from autograder.runner import JobResult
from autograder.submission import build_program
from helpers.checks.core import (
    MAX_ELEMENTS,
    REGISTRY,
    Check,
    CheckFailed,
    Unsupported,
    decode,
    encode,
    expect_callable,
    need,
    runs,
)
from helpers.checks.record import RECORD_KEYS, Record


def _judge_double(data: dict) -> str:
    got = data["out"]
    if not isinstance(got, torch.Tensor) or not torch.equal(got, torch.tensor([2.0, 4.0])):
        raise CheckFailed(f"double([1, 2]) should be [2, 4], got {got}")
    return "double: ok"


CHECK = Check("check_toy_double", lambda f: {"out": f(torch.tensor([1.0, 2.0]))}, _judge_double)
HIDDEN = Check("check_toy_double_hidden", lambda f: {"out": f(torch.tensor([1.0, 2.0]))}, _judge_double, hidden=True)


def cell(kind, source, grade_id=None, **nbgrader):
    c = {"cell_type": kind, "id": grade_id or f"c{len(source)}", "metadata": {}, "source": source}
    if kind == "code":
        c.update(outputs=[], execution_count=None)
    if grade_id:
        c["metadata"]["nbgrader"] = {"grade_id": grade_id, **nbgrader}
    return c


SOLUTION = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x  # the whole answer, doubled\n    ### END SOLUTION\n"
HIDDEN_TEST = (
    "check_toy_double(double)\n### BEGIN HIDDEN TESTS\ncheck_toy_double_hidden(double)  # secret second look\n"
    "### END HIDDEN TESTS\n"
)


def toy_notebook(answer: str = SOLUTION) -> dict:
    """Five cells: a title, an import, the answer, its visible test, its hidden test."""
    return {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"course": {"lesson": 99, "assignment": "99-toy"}},
        "cells": [
            cell("markdown", "# Toy lesson\n\n### Exercise 1 · double · 2 points · about 1 minute"),
            cell("code", "import torch"),
            cell("code", answer, "double", solution=True, grade=False),
            cell("code", "check_toy_double(double)", "double-check", grade=True, points=1, locked=True),
            cell("code", HIDDEN_TEST, "double-hidden", grade=True, points=1, locked=True),
        ],
    }


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "solutions" / "99-toy" / "99-toy.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(toy_notebook()), encoding="utf-8")
    return load_lesson(path, "99-toy")


# --- reading a lesson -----------------------------------------------------------------------


def test_a_lesson_is_read_into_exercises_and_tests(toy):
    assert list(toy.exercises) == ["double"]
    tests = toy.exercises["double"].tests
    assert [(t.grade_id, t.points, t.hidden, t.checks) for t in tests] == [
        ("double-check", 1.0, False, ["check_toy_double"]),
        ("double-hidden", 1.0, True, ["check_toy_double", "check_toy_double_hidden"]),
    ]
    assert toy.max_score == 2 and toy.exercise_of("double-hidden").grade_id == "double"
    assert [t.grade_id for t in toy.visible_only().tests()] == ["double-check"]


def test_a_test_that_names_no_exercise_is_an_error(tmp_path):
    nb = toy_notebook()
    nb["cells"][3]["metadata"]["nbgrader"]["grade_id"] = "triple-check"
    path = tmp_path / "99-toy.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(CourseError, match="triple-check"):
        load_lesson(path, "99-toy")


def test_check_calls_are_read_in_order_without_running_anything():
    assert check_calls("check_b(f)\nx = helpers.check_a(g)\nprint(check_c)") == ["check_b", "check_a"]


# --- building the program -------------------------------------------------------------------


def kinds_and_ids(steps):
    return [(s.kind, s.id) for s in steps]


def test_the_course_tests_replace_the_students_copies(toy):
    submission = toy_notebook("def double(x):\n    return x + x\n")
    submission["cells"][3]["source"] = "print('I passed!')"  # edited test: ignored
    steps, found = build_program(toy, submission)
    assert found == {"double"}
    assert kinds_and_ids(steps) == [("code", "cell-1"), ("code", "double"), ("test", "double-check"), ("test", "double-hidden")]
    assert steps[2].source == "check_toy_double(double)" and "secret" in steps[3].source


def test_tests_run_after_the_last_copy_of_a_moved_answer(toy):
    submission = toy_notebook()
    answer = submission["cells"].pop(2)
    wrong = dict(answer, source="def double(x):\n    return x\n")
    submission["cells"] = [wrong] + submission["cells"] + [answer]  # a wrong copy first, the right one last
    steps, _ = build_program(toy, submission)
    ids = [s.id for s in steps]
    assert ids.index("double-check") > max(i for i, s in enumerate(steps) if s.id == "double")


def test_a_deleted_answer_is_not_found_and_deleted_tests_still_run(toy):
    submission = toy_notebook()
    submission["cells"] = [c for c in submission["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") != "double"]
    steps, found = build_program(toy, submission)
    assert found == set() and {"double-check", "double-hidden"} <= {s.id for s in steps}
    no_tests = toy_notebook()
    no_tests["cells"] = no_tests["cells"][:3]
    steps, found = build_program(toy, no_tests)
    assert found == {"double"} and [s.id for s in steps][-2:] == ["double-check", "double-hidden"]


def test_a_retyped_answer_cell_is_still_the_answer(toy):
    submission = toy_notebook()
    submission["cells"][2]["cell_type"] = "markdown"
    steps, found = build_program(toy, submission)
    assert found == {"double"} and ("code", "double") in kinds_and_ids(steps)


# --- decoding untrusted data ----------------------------------------------------------------


def test_data_round_trips_and_odd_values_are_named():
    value = {"t": torch.arange(6, dtype=torch.float64).reshape(2, 3), "n": 3, "s": "x", "l": [1.5, None, True]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert torch.equal(back["t"], value["t"]) and back["t"].dtype == torch.float64
    assert back["n"] == 3 and back["l"] == [1.5, None, True]
    assert isinstance(decode(encode({"f": print})["f"]), Unsupported)
    half = torch.tensor([1.0, -2.5e-3, 3.4e38, float('-inf')], dtype=torch.bfloat16)  # kept as it is: dtype and bits
    assert torch.equal(decode(json.loads(json.dumps(encode(half)))), half)
    assert decode(encode(half)).dtype == torch.bfloat16


@pytest.mark.parametrize(
    "data, words",
    [
        ({"__tensor__": {"dtype": "float32", "shape": [2, 2], "data": [1, 2, 3]}}, "does not fit"),
        ({"__tensor__": {"dtype": "complex64", "shape": [1], "data": [1]}}, "malformed"),
        ({"__tensor__": {"dtype": "float32", "shape": [-1], "data": []}}, "shape"),
        ({"__tensor__": {"dtype": "float32", "shape": [1], "data": ["1"]}}, "numbers"),
        ({"__tensor__": {"dtype": "float32", "shape": [1], "data": [1], "extra": 1}}, "malformed"),
    ],
)
def test_malformed_tensors_are_refused(data, words):
    with pytest.raises(ValueError, match=words):
        decode(data)


def test_the_budget_counts_every_tensor_together():
    half = {"__tensor__": {"dtype": "int8", "shape": [MAX_ELEMENTS // 2 + 1], "data": [0] * (MAX_ELEMENTS // 2 + 1)}}
    decode([half])
    with pytest.raises(ValueError, match="too much data"):
        decode([half, half])


# --- judging hand-written records -----------------------------------------------------------


def job(*lines, exitcode=0, timed_out=False, done=True):
    """A job whose child wrote ``lines`` (as JSON): each is read back as the runner reads it."""
    written = [*lines, *([{"step": "__done__"}] if done else [])]
    return JobResult(lines=[StepLine.read(line) for line in written], exitcode=exitcode, timed_out=timed_out)


def result_line(records, status="ok", step="double-check", **extra):
    return {"step": step, "status": status, "records": records, **extra}


def record(values):
    return {"check": "check_toy_double", "data": encode({"out": torch.tensor(values)})}


@pytest.fixture
def visible(toy):
    return toy.exercises["double"].tests[0]


def test_right_data_passes_and_wrong_data_fails_with_the_judges_words(visible):
    assert judge_test(visible, job(result_line([record([2.0, 4.0])])), None).status == "passed"
    failed = judge_test(visible, job(result_line([record([1.0, 2.0])])), None)
    assert (failed.status, failed.points) == ("failed", 0) and "should be [2, 4]" in failed.message


@pytest.mark.parametrize(
    "the_job, answer, status, words",
    [
        (job(result_line([record([2.0, 4.0])]), result_line([record([2.0, 4.0])])), None, "tampered", "more than once"),
        (job(result_line([{"check": "check_other", "data": {}}])), None, "tampered", "did not run as written"),
        (job(result_line([{"check": "check_toy_double", "data": {"__tensor__": 1}}])), None, "tampered", "data was not"),
        (job(result_line([{"check": "check_toy_double", "error": "NotImplementedError: ", "not_implemented": True}])), None, "failed", "not answered yet"),
        (job(result_line([{"check": "check_toy_double", "error": "RuntimeError: shapes"}])), None, "failed", "RuntimeError: shapes"),
        (job(result_line([], status="error", error="NameError: name 'double' is not defined")), None, "error", "NameError"),
        (job(done=False, timed_out=True, exitcode=None), None, "timeout", "time limit before this test"),
        (job(done=False, exitcode=-11), None, "crashed", "SIGSEGV"),
        (job(), None, "tampered", "removed by the notebook"),
        (job(result_line([], status="timeout")), None, "timeout", "ran past its time limit"),
        (job(result_line([], status="timeout", stuck=True, swallowed=True, limit_s=2.5)), None, "timeout",
         "its time limit of 2.5 s and went on"),
        (job(result_line([], status="timeout", stuck=True, swallowed=True)), None, "timeout",
         STUCK_MESSAGE.format(what="the test (running your code)", limit="")),
        (job(result_line([], status="timeout", stuck=True)), None, "timeout", "could not be interrupted"),
        (job(result_line([record([2.0, 4.0])])), {"step": "double", "status": "timeout", "stuck": True, "swallowed": True},
         "timeout", "except BaseException"),
        # lines that are not what the child writes: forged, whatever they claim
        (job(result_line({"check": "check_toy_double"})), None, "tampered", "'records' is a list"),
        (job(result_line([record([2.0, 4.0])], passed=True)), None, "tampered", "no field 'passed'"),
        (job(result_line([record([2.0, 4.0])], status="passed")), None, "tampered", "status is one of ok"),
        (job(result_line([{**record([2.0, 4.0]), "failed": "no"}])), None, "tampered", "one of data, failed and error"),
        (job(result_line([{"check": "check_toy_double", "error": 3}])), None, "tampered", "'error' is a string"),
        (job(result_line([record([2.0, 4.0])], s="fast")), None, "tampered", "'s' is a number"),
        (job(result_line([{**record([2.0, 4.0]), "notes": "line 1"}])), None, "tampered", "'notes' is a list"),
        (job(result_line([{**record([2.0, 4.0]), "notes": ["x"] * 4}])), None, "tampered", "at most 3 strings"),
    ],
)
def test_every_way_a_test_can_go_wrong_has_its_status(visible, the_job, answer, status, words):
    result = judge_test(visible, the_job, answer if answer is None else StepLine.read(answer))
    assert result.status == status and words in result.message and result.points == 0


def test_notes_on_the_code_join_a_failing_message_and_never_a_pass(visible):
    noted = {"notes": ["line 2 of double, `x.mul(2)`, keeps nothing"]}
    failed = judge_test(visible, job(result_line([{**record([2.0, 5.0]), **noted}])), None)
    assert failed.status == "failed" and failed.message.endswith("\nIn your code: line 2 of double, `x.mul(2)`, keeps nothing")
    raised = judge_test(visible, job(result_line([{"check": "check_toy_double", "error": "TypeError: x", **noted}])), None)
    assert raised.status == "failed" and "In your code: line 2" in raised.message
    passed = judge_test(visible, job(result_line([{**record([2.0, 4.0]), **noted}])), None)
    assert (passed.status, passed.message) == ("passed", "passed")


def test_the_wire_reads_back_what_it_writes_and_nothing_else():
    """A step line and the checks' records survive the JSON round trip field for field; every field
    a record can write is one the reader knows (RECORD_KEYS), and what the reader does not know
    comes back marked, never dropped in silence."""
    records = (Record("check_a", data={"out": [1.0]}), Record("check_b", failed="not a function", notes=("line 3 ...",)),
               Record("check_c", error="NotImplementedError: ", not_implemented=True))
    line = StepLine("double-check", "error", s=0.25, error="ValueError: x", records=records, tampered=("json.dumps",))
    assert StepLine.read(json.loads(json.dumps(line.to_json()))) == line
    assert {key for r in records for key in r.to_json()} == set(RECORD_KEYS)
    assert StepLine.read({"status": "ok"}) is None and StepLine.read([1]) is None  # no step named: no line
    with pytest.raises(ValueError, match="not 0"):
        Record("check_a")


def test_a_missing_name_is_told_with_what_the_notebook_defines_instead(visible):
    line = result_line([], status="error", error="NameError: name 'double' is not defined")
    renamed = judge_test(visible, job(line), None, ("import torch", "def doubled(x):\n    return 2 * x")).message
    assert "The test uses double, the name the exercise gives, and your notebook defines doubled instead" in renamed
    late = judge_test(visible, job(line), None, ("%matplotlib inline\ndouble = lambda x: 2 * x",)).message
    assert "defines double only in a cell that comes after this test" in late
    gone = judge_test(visible, job(line), None, ("import torch",)).message
    assert "which no cell of your notebook defines" in gone
    answer = StepLine("double", "error", error="NameError: name 'y' is not defined")
    told = judge_test(visible, job(line), answer, ("def doubled(x):\n    return y",)).message
    assert "your answer cell raised NameError" in told and "The test uses" not in told  # the answer's own error


# --- finding leaks --------------------------------------------------------------------------


def test_a_solution_line_in_the_release_is_a_leak_named_by_its_cell(toy, tmp_path):
    root = tmp_path
    release = root / "release" / "99-toy"
    release.mkdir(parents=True)
    blank = toy_notebook("def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n")
    blank["cells"][4]["source"] = "check_toy_double(double)\n"
    (release / "99-toy.ipynb").write_text(json.dumps(blank), encoding="utf-8")
    assert find_leaks(root, root / "release") == []
    blank["cells"][1]["source"] = "import torch\nreturn 2 * x  # the whole answer, doubled\n"
    blank["cells"][4]["source"] = "check_toy_double(double)\n### BEGIN HIDDEN TESTS\n"
    (release / "99-toy.ipynb").write_text(json.dumps(blank), encoding="utf-8")
    leaks = find_leaks(root, root / "release")
    assert any("cell double" in leak and "the whole answer" in leak for leak in leaks), leaks
    assert any("BEGIN HIDDEN TESTS" in leak for leak in leaks), leaks


@pytest.mark.parametrize("value,kind,length", [(None, list, None), ([1], list, 2), ({"a": 1}, list, None), (3, float, None)])
def test_data_a_probe_did_not_give_fails_as_incomplete(value, kind, length):
    with pytest.raises(CheckFailed, match="the check's data is incomplete"):
        need(value, kind, length)


def test_what_a_judge_needs_is_returned_as_it_is():
    runs_ = [{"out": 1}, {"out": 2}]
    assert need(runs_, list, 2) is runs_ and runs({"runs": runs_}, 2) is runs_
    with pytest.raises(CheckFailed, match="incomplete"):
        runs({"runs": [{"out": 1}, "forged"]}, 2)
    with pytest.raises(CheckFailed, match="expected the function double, got int 3"):
        expect_callable(3, "double")


def test_the_toy_checks_are_registered_once():
    assert REGISTRY["check_toy_double"] is CHECK and REGISTRY["check_toy_double_hidden"].hidden


def test_nothing_after_the_last_test_runs(toy):
    submission = toy_notebook()
    submission["cells"].append(cell("code", "train_for_an_hour()"))
    steps, _ = build_program(toy, submission)
    assert steps[-1].id == "double-hidden" and all("train_for_an_hour" not in s.source for s in steps)


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("lesson", [le.assignment for le in lessons(ROOT)])
def test_every_check_module_imports_while_a_lesson_is_graded(lesson):
    """The grader's child imports every lesson's checks with the graded lesson's reference module
    and all later ones replaced by the hidden stub: a check module that uses a later lesson's
    reference at import time (subclassing one of its classes, say) would break every grading."""
    order = [le.assignment for le in lessons(ROOT)]
    hidden = [le.meta["reference_module"] for le in lessons(ROOT)[order.index(lesson):] if le.meta.get("reference_module")]
    program = (
        "import sys, types\n"
        "from autograder.sandbox import HIDDEN_STUB\n"
        f"for name in {hidden!r}:\n"
        "    module = types.ModuleType('helpers.reference.' + name)\n"
        "    exec(HIDDEN_STUB, module.__dict__)\n"
        "    sys.modules[module.__name__] = module\n"
        "import autograder.lesson_checks\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_lesson_check_module_is_at_most_350_lines():
    """A lesson's checks keep only what is particular to them; the machinery lives in the kit
    (core.py, diagnose.py, errors.py, verdict.py), which is exempt (CONTRIBUTING: one module per exercise)."""
    kit = {"__init__.py", "core.py", "diagnose.py", "errors.py", "verdict.py"}
    too_long = {path.name: n for path in sorted((ROOT / "helpers" / "checks").glob("*.py"))
                if path.name not in kit and (n := len(path.read_text(encoding="utf-8").splitlines())) > 350}
    assert not too_long, f"split these into modules per exercise: {too_long}"


# --- the sandbox's view of the machine ------------------------------------------------------


def test_the_sandbox_hides_homes_exchanges_and_mounts_and_puts_python_back(tmp_path):
    from autograder.sandbox import isolation

    private = tmp_path / "submitted"
    args = list(isolation("bwrap", ROOT, [], [private]).prefix)
    hidden = {args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"}
    for folder in ("/home", "/srv", "/mnt", "/media", "/tmp"):
        if Path(folder).is_dir():
            assert folder in hidden, folder
    # the course's solutions and catalogues, hidden by their own mount or by one above them
    assert any(h == ROOT.resolve() or h in ROOT.resolve().parents for h in map(Path, hidden))
    assert str(private) not in hidden, "inside /tmp, which is hidden already: two runs share one sandbox"
    assert args == list(isolation("bwrap", ROOT, [], [tmp_path / "graded"]).prefix)
    put_back = {args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"}
    assert str(Path(sys.prefix).resolve()) in put_back or not any(
        Path(sys.prefix).resolve().is_relative_to(h) for h in map(Path, hidden))


def test_the_sandbox_is_the_same_before_and_after_python_writes_its_caches(monkeypatch):
    """The hidden references' __pycache__ is mounted over (a stale .pyc would show the reference): its
    folder is made when the sandbox is, so that a fork server started before Python wrote a cache and
    one started after have the same sandbox, and the second run of a process reuses the first's servers."""
    from autograder import sandbox

    made = []
    monkeypatch.setattr(Path, "mkdir", lambda self, *a, **k: made.append(self))
    monkeypatch.setattr(Path, "is_dir", lambda self: self in made or self.exists() and not self.name == "__pycache__")
    args = list(sandbox.isolation("bwrap", ROOT, ["attention"], []).prefix)
    cache = str(sandbox.reference_files(["attention"])[0].parent / "__pycache__")
    assert cache in [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"], "made, then hidden"


def test_the_sandbox_hides_nbgraders_exchange(tmp_path, monkeypatch):
    """nbgrader's default exchange and the one the course's nbgrader_config.py names are hidden
    (every student's submission is there), unless a hidden folder already holds them."""
    from nbgrader.exchange.default.exchange import Exchange

    from autograder import sandbox

    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(tmp_path / 'ex')!r}\n")
    assert sandbox.exchange_roots(course) == {Path(Exchange.root.default_value), tmp_path / "ex"}

    elsewhere = Path("/var")  # an existing folder outside /home, /srv, /mnt, /media, /tmp
    monkeypatch.setattr(sandbox, "exchange_roots", lambda root: {elsewhere, tmp_path, Path("/nowhere/exchange")})
    args = list(sandbox.isolation("bwrap", ROOT, [], []).prefix)
    hidden = [args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"]
    assert str(elsewhere) in hidden
    assert str(tmp_path) not in hidden, "inside /tmp, which is hidden already"
    assert "/nowhere/exchange" not in hidden, "a folder that does not exist is not mounted over"


def test_the_grading_salt_is_the_course_secret_kept_in_a_private_file(tmp_path, monkeypatch):
    from autograder.batch import SECRET_ENV, SECRET_FILE, grading_salt

    monkeypatch.delenv(SECRET_ENV, raising=False)
    first = grading_salt(tmp_path)
    kept = tmp_path / SECRET_FILE
    assert kept.stat().st_mode & 0o777 == 0o600
    assert first != 0 and grading_salt(tmp_path) == first  # the same inputs on every run
    (tmp_path / "other").mkdir()
    assert grading_salt(tmp_path / "other") != first  # another course, another secret
    monkeypatch.setenv(SECRET_ENV, "given")
    assert grading_salt(tmp_path) not in (0, first)  # the environment's secret wins


def test_limits_carry_the_salt_but_a_manifest_does_not_say_it():
    from autograder.batch import with_salt
    from autograder.protocol import LessonLimits, Limits, limits_data

    limits = with_salt(LessonLimits(Limits(), (("01", Limits(cell_s=5)),)), 1234)
    assert limits.default.salt == 1234 and dict(limits.lessons)["01"].salt == 1234
    assert "salt" not in json.dumps(limits_data(limits)) and "1234" not in json.dumps(limits_data(limits))


def test_salted_cases_keep_the_written_ones_first_and_add_varied_ones():
    from helpers.checks.core import SaltedCases, reseed, salted

    written = [("a text case", 3), (7, (2,), 5)]
    cases = SaltedCases(written, reseed)
    assert list(cases) == written and len(cases) == 2  # a notebook: the inputs as written
    for salt in (98, 99):  # whichever case the salt starts from, the one with a seed is varied
        with salted(salt):
            now = list(cases)
            assert len(cases) == 3 and now[:2] == written  # the text case has no seed: never repeated
            assert now[2][1:] == ((2,), 5) and now[2][0] != 7
            assert list(cases) == now  # one salt, the same inputs (the probe's and the judge's)
    with salted(100):
        assert list(cases)[2] != now[2]
    assert list(cases) == written  # the salt ends with its block
    with salted(99):  # nothing to vary: the cases as written, none repeated
        assert list(SaltedCases([("text", 1)], reseed)) == [("text", 1)]


def test_the_book_without_its_tools_says_the_one_step_that_installs_them(monkeypatch, tmp_path):
    """README's book command starts with ./setup.sh --book; without it the build says so, whole."""
    import importlib.util

    from autograder import book
    from autograder.course import CourseError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "myst_nb" else real(name, *a))
    with pytest.raises(CourseError, match=r"myst_nb.*\./setup\.sh --book"):
        book.build_book(book.Path(__file__).resolve().parents[1], tmp_path / "out")
    readme = (book.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "./setup.sh --book && .venv/bin/transformer-course book" in readme


def test_feedback_carries_no_memory_address():
    """An object's repr in a message (a returned grad_fn, say) loses its address: feedback is the
    same on every run, so shards, resumed runs and repeated runs give the same bytes."""
    import torch

    from autograder.grading import without_addresses
    from helpers.checks.core import describe

    loss = (torch.ones(2, requires_grad=True) * 2).sum()
    assert "0x" not in describe(loss.grad_fn) and "SumBackward0" in describe(loss.grad_fn)
    assert without_addresses("got <NllLossBackward0 object at 0x7f3a2b1c> instead") == "got <NllLossBackward0 object> instead"


def test_the_test_schedule_runs_unmeasured_files_first_then_the_longest():
    from conftest import schedule_key

    durations = {"test_long.py": 300.0, "test_short.py": 2.0}
    files = ["test_short.py", "test_new_lesson.py", "test_long.py"]
    assert sorted(files, key=lambda f: schedule_key(f, durations)) == ["test_new_lesson.py", "test_long.py", "test_short.py"]


def test_release_regenerates_only_what_changed_since_it_wrote_it(tmp_path):
    """``release`` skips nbgrader for a lesson whose sources and release are what it stamped."""
    import shutil

    from autograder.release import current_lessons, write_stamps

    root = Path(__file__).resolve().parents[1]
    course = tmp_path / "course"
    for lesson in ("01-tokens-and-embeddings", "03-self-attention"):
        shutil.copytree(root / "solutions" / lesson, course / "solutions" / lesson)
        shutil.copytree(root / "notebooks" / lesson, course / "notebooks" / lesson)
    shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
    target = course / "notebooks"
    assert current_lessons(course, target) == set()  # nothing stamped yet: everything is made
    write_stamps(course, target)
    assert current_lessons(course, target) == {"01-tokens-and-embeddings", "03-self-attention"}

    solution = course / "solutions" / "01-tokens-and-embeddings" / "01-tokens-and-embeddings.ipynb"
    solution.write_text(solution.read_text(encoding="utf-8").replace("Tokens", "Tokens!", 1), encoding="utf-8")
    released = target / "03-self-attention" / "03-self-attention.ipynb"
    released.write_text(released.read_text(encoding="utf-8") + " ", encoding="utf-8")  # edited by hand
    assert current_lessons(course, target) == set()
    (course / "nbgrader_config.py").write_text("c = get_config()\n", encoding="utf-8")
    write_stamps(course, target)
    assert current_lessons(course, target) == {"01-tokens-and-embeddings", "03-self-attention"}
