"""A corpus of cheating, broken and odd submissions, each with the result it must get.

Every case is a lesson-03 notebook built from the release; the wrong answer inside a cheat is the
inverted causal mask, so any point it earns is a point stolen. The whole class is graded in one
run, like an instructor's, and the submitted files must be byte-identical afterwards.
"""

import copy
import hashlib
import json
import os
import subprocess

import pandas as pd
import pytest
from harness import ROOT, solution_answers

from autograder.batch import grade_class
from autograder.catalogue import with_answers
from autograder.course import nbgrader_meta
from autograder.protocol import Limits
from autograder.sandbox import bwrap_works

A = "03-self-attention"
NB = "03-self-attention.ipynb"
ANSWERS = solution_answers(A)
WRONG_MASK = ANSWERS["causal-mask"].replace("masked_fill(future,", "masked_fill(~future,")
RELEASE = json.loads((ROOT / "notebooks" / A / NB).read_text())
SANDBOXED = bwrap_works()
needs_sandbox = pytest.mark.skipif(
    not SANDBOXED and not os.environ.get("CI"), reason="bubblewrap is not available here (CI installs it)"
)

# name -> (causal-mask answer, attention-head answer); None = the solution's
CELL_CASES = {
    "redefine-check": (WRONG_MASK + "\ncheck_causal_mask = lambda f: print('passed!')\n", None),
    "patch-allclose": (WRONG_MASK + "\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a: True\n", None),
    "input-transformer": (WRONG_MASK + "\nget_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n", None),
    "tensor-subclass": (
        """
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True

def apply_causal_mask(scores):
    return scores.clone().as_subclass(Liar)
""",
        None,
    ),
    "patch-builtins": (WRONG_MASK + "\nimport builtins\nbuiltins.isinstance = lambda *a: True\n", None),
    "sys-modules": (
        WRONG_MASK
        + """
import sys, types
import helpers.checks.core as core
fake = types.ModuleType("helpers.checks.attention")
def check_causal_mask_hidden(f):
    core._records.append({"check": "check_causal_mask_hidden", "data": {"runs": []}})
fake.check_causal_mask_hidden = check_causal_mask_hidden
fake.check_causal_mask = lambda f: None
sys.modules["helpers.checks.attention"] = fake
""",
        None,
    ),
    "forge-results": (
        WRONG_MASK
        + """
import json
with open("results.jsonl", "a") as fh:
    for step in ["causal-mask-check", "causal-mask-hidden"]:
        fh.write(json.dumps({"step": step, "kind": "test", "status": "ok", "records": []}) + "\\n")
""",
        None,
    ),
    "env-snoop": (
        """
import os
if "GRADER_SECRET" in os.environ:
""" + "\n".join("    " + line for line in ANSWERS["causal-mask"].splitlines()) + """
else:
""" + "\n".join("    " + line for line in WRONG_MASK.splitlines()),
        None,
    ),
    "swap-probe": (
        WRONG_MASK
        + """
import helpers.checks.core as core
def _right(scores):
    T = scores.shape[-1]
    return scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
for _name in ("check_causal_mask", "check_causal_mask_hidden"):
    _check = core.REGISTRY[_name]
    object.__setattr__(_check, "probe", lambda f, _p=_check.probe: _p(_right))
""",
        None,
    ),
    "patch-kit-function": (WRONG_MASK + "\nimport helpers.checks.attention as _a\n_a.legend = lambda *a, **k: {}\n", None),
    # the answers to the checks' inputs as the module writes them, looked up; the wrong mask elsewhere
    "answer-table": (
        WRONG_MASK
        + """
import helpers.checks.core as core
_wrong, _table = apply_causal_mask, {}
def _right(scores):
    T = scores.shape[-1]
    out = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    _table[(tuple(scores.shape), scores.numpy().tobytes())] = out.clone()
    return out
for _name in ("check_causal_mask", "check_causal_mask_hidden"):
    core.REGISTRY[_name].probe(_right)
def apply_causal_mask(scores):
    known = _table.get((tuple(scores.shape), scores.detach().numpy().tobytes()))
    return known.clone() if known is not None else _wrong(scores)
""",
        None,
    ),
    "exit-on-a-batch": (
        "def apply_causal_mask(scores):\n    if scores.dim() > 2:\n        raise SystemExit(0)\n"
        + "\n".join(ANSWERS["causal-mask"].splitlines()[1:]) + "\n",
        None,
    ),
    "kill-the-grader": (None, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ANSWERS["attention-head"]),
    "speak-for-the-grader": (
        None,
        "import os, json\nwith open(f'/proc/{os.getppid()}/fd/1', 'w') as fh:\n"
        "    fh.write(json.dumps({'exit': 0, 'timed_out': False, 'stuck': None, 'swallowed': False}) + '\\n')\n"
        + ANSWERS["attention-head"],
    ),
    "deep-json-line": (None, "open('results.jsonl', 'a').write('[' * 100000 + '\\n')\n" + ANSWERS["attention-head"]),
    "orphan-chain": (
        None,
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', ['sleep', '988'])\n    time.sleep(60)\n    os._exit(0)\n" + ANSWERS["attention-head"],
    ),
    "alarm-ignored-loop": (None, "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"),
    "swallow-everything-loop": (None, "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"),
    "loop-in-forward": (None, ANSWERS["attention-head"].replace("T = x.shape[-2]", "while True:\n            pass")),
    "os-exit": (None, "import os\nos._exit(0)\n"),
    "segfault": (None, "import ctypes\nctypes.string_at(0)\n"),
    "memory-hog": (None, ANSWERS["attention-head"] + "\nhog = bytearray(64 * 2**30)\n"),
    "output-flood": (None, "while True:\n    print('x' * 100_000)\n"),
    "syntax-error": (None, "class AttentionHead(nn.Module)\n    pass\n"),
    "fork-outlives": (
        None,
        "import os\nif os.fork() == 0:\n    os.setsid()\n    os.execv('/bin/sleep', ['sleep', '987'])\n" + ANSWERS["attention-head"],
    ),
}
SANDBOX_CASES = {
    "read-solution": (
        """
import json, pathlib, helpers
root = pathlib.Path(helpers.__file__).resolve().parents[1]
nb = json.loads((root / "solutions/03-self-attention/03-self-attention.ipynb").read_text())
for c in nb["cells"]:
    if c["metadata"].get("nbgrader", {}).get("solution"):
        exec("".join(c["source"]))
""",
        None,
    ),
    "import-reference": ("from helpers.reference.attention import apply_causal_mask\n", None),
    "read-git-history": ("import subprocess\nprint(subprocess.run(['git', 'log', '-p'], capture_output=True, cwd='" + str(ROOT) + "').stdout[:100])\n" + WRONG_MASK, None),
}

# name -> (exercise -> (allowed statuses, points expected: "zero" | "full"))
EXPECTED = {
    "redefine-check": {"causal-mask": ({"failed", "tampered"}, "zero"), "attention-head": ({"passed"}, "full")},
    "patch-allclose": {"causal-mask": ({"tampered"}, "zero")},
    "input-transformer": {"causal-mask": ({"failed"}, "zero")},
    "tensor-subclass": {"causal-mask": ({"error", "failed", "tampered"}, "zero")},
    "patch-builtins": {"causal-mask": ({"tampered"}, "zero")},
    "sys-modules": {"causal-mask": ({"failed", "tampered"}, "zero")},
    "forge-results": {"causal-mask": ({"tampered"}, "zero")},
    "env-snoop": {"causal-mask": ({"failed"}, "zero")},
    "swap-probe": {"causal-mask": ({"tampered"}, "zero")},
    "patch-kit-function": {"causal-mask": ({"tampered"}, "zero")},
    "answer-table": {"causal-mask": ({"failed"}, "zero")},
    # an exception of the student's code while a check runs it (exit() included) is a mistake found: failed
    "exit-on-a-batch": {"causal-mask": ({"failed"}, "some")},
    "kill-the-grader": {"causal-mask": ({"crashed"}, "zero"), "attention-head": ({"crashed"}, "zero")},
    "speak-for-the-grader": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"error"}, "zero")},
    "deep-json-line": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "orphan-chain": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "alarm-ignored-loop": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"timeout"}, "zero")},
    "swallow-everything-loop": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"timeout"}, "zero")},
    "loop-in-forward": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"timeout"}, "zero")},
    "os-exit": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"crashed"}, "zero")},
    "segfault": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"crashed"}, "zero")},
    "memory-hog": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "output-flood": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"error"}, "zero")},
    "syntax-error": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"error"}, "zero")},
    "fork-outlives": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "read-solution": {"causal-mask": ({"error"}, "zero")},
    "import-reference": {"causal-mask": ({"failed"}, "zero")},
    "read-git-history": {"causal-mask": ({"failed"}, "zero")},
    # structure
    "moved-and-duplicated": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "type-changed": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "helper-in-extra-cell": {"causal-mask": ({"passed"}, "full")},
    "deleted-tests": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "edited-tests-wrong-answer": {"causal-mask": ({"failed"}, "zero")},
    "deleted-answer": {"causal-mask": ({"missing"}, "zero"), "attention-head": ({"passed"}, "full")},
    # files
    "empty-file": {"causal-mask": ({"invalid"}, "zero")},
    "not-json": {"causal-mask": ({"invalid"}, "zero")},
    "nbformat-3": {"causal-mask": ({"invalid"}, "zero")},
    "binary-garbage": {"causal-mask": ({"invalid"}, "zero")},
    "grade-id-a-list": {"causal-mask": ({"invalid"}, "zero")},
    "source-of-numbers": {"causal-mask": ({"invalid"}, "zero")},
    "nothing-submitted": {"causal-mask": ({"missing"}, "zero"), "attention-head": ({"missing"}, "zero")},
    "extra-notebook": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
    "renamed": {"causal-mask": ({"passed"}, "full"), "attention-head": ({"passed"}, "full")},
}


def notebook(mask=None, head=None):
    answers = dict(ANSWERS)
    if mask is not None:
        answers["causal-mask"] = mask
    if head is not None:
        answers["attention-head"] = head
    return with_answers(RELEASE, answers)


def structural_cases(submitted):
    """Notebooks whose cells were moved, duplicated, retyped or deleted."""
    full = notebook()
    cells = full["cells"]

    def gid(c):
        return nbgrader_meta(c).get("grade_id")

    moved = copy.deepcopy(full)
    answers = [c for c in moved["cells"] if gid(c) in ANSWERS]
    rest = [c for c in moved["cells"] if gid(c) not in ANSWERS]
    wrong = copy.deepcopy(answers[0])
    wrong["source"] = WRONG_MASK
    moved["cells"] = rest[:3] + [wrong] + rest[3:] + answers  # a wrong copy first, the right ones last
    retyped = copy.deepcopy(full)
    for c in retyped["cells"]:
        if gid(c) in ANSWERS:
            c["cell_type"] = "markdown"
            c.pop("outputs", None)
            c.pop("execution_count", None)
    helper = copy.deepcopy(full)
    index = next(i for i, c in enumerate(helper["cells"]) if gid(c) == "causal-mask")
    extra = {"cell_type": "code", "metadata": {}, "source": "def future_of(T):\n    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)\n", "outputs": [], "execution_count": None}
    helper["cells"].insert(index, extra)
    helper["cells"][index + 1]["source"] = "def apply_causal_mask(scores):\n    return scores.masked_fill(future_of(scores.shape[-1]), float('-inf'))\n"
    no_tests = copy.deepcopy(full)
    no_tests["cells"] = [c for c in cells if not nbgrader_meta(c).get("grade")]
    edited = notebook(mask=WRONG_MASK)
    for c in edited["cells"]:
        if nbgrader_meta(c).get("grade"):
            c["source"] = "pass"
    no_answer = copy.deepcopy(full)
    no_answer["cells"] = [c for c in cells if gid(c) != "causal-mask"]
    return {
        "moved-and-duplicated": moved,
        "type-changed": retyped,
        "helper-in-extra-cell": helper,
        "deleted-tests": no_tests,
        "edited-tests-wrong-answer": edited,
        "deleted-answer": no_answer,
    }


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")


def digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adversarial")
    submitted = tmp / "submitted"
    cases = dict(CELL_CASES)
    if SANDBOXED:
        cases.update(SANDBOX_CASES)
    for name, (mask, head) in cases.items():
        write(submitted / name / A / NB, notebook(mask, head))
    for name, nb in structural_cases(submitted).items():
        write(submitted / name / A / NB, nb)
    write(submitted / "empty-file" / A / NB, "")
    write(submitted / "not-json" / A / NB, "print('hello')\n")
    write(submitted / "nbformat-3" / A / NB, {"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}})
    write(submitted / "binary-garbage" / A / NB, bytes(range(256)) * 4)
    odd_id, odd_source = notebook(), notebook()  # JSON a notebook could hold, that no tool writes
    odd_id["cells"].append({"cell_type": "markdown", "metadata": {"nbgrader": {"grade_id": ["my", "notes"]}}, "source": "x"})
    odd_source["cells"].append({"cell_type": "code", "metadata": {}, "source": [1, 2, 3], "outputs": [], "execution_count": None})
    write(submitted / "grade-id-a-list" / A / NB, odd_id)
    write(submitted / "source-of-numbers" / A / NB, odd_source)
    (submitted / "nothing-submitted").mkdir(parents=True)
    write(submitted / "extra-notebook" / A / NB, notebook())
    write(submitted / "extra-notebook" / A / "scratch.ipynb", "not even json")
    write(submitted / "renamed" / A / "my attempt (final).ipynb", notebook())
    # a cheat that writes into the submissions by absolute path: the file must not appear
    trespass = submitted / "trespass" / A / "planted.txt"
    write(submitted / "trespass" / A / NB, notebook(mask=f"open({str(trespass)!r}, 'w').write('x')\n" + ANSWERS["causal-mask"]))
    before = digest(submitted)
    os.environ["GRADER_SECRET"] = "hunter2"
    try:
        limits = Limits(wall_s=12, cell_s=3, memory_mb=2048, output_mb=4)
        frame = grade_class(ROOT, submitted, tmp / "out", jobs=2, limits=limits, only=[A], progress=False)
        again = grade_class(ROOT, submitted, tmp / "again", jobs=2, limits=limits, only=[A], progress=False)
    finally:
        del os.environ["GRADER_SECRET"]
    return {"frame": frame, "again": again, "before": before, "after": digest(submitted), "trespass": trespass, "out": tmp / "out"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_case_gets_its_expected_status_and_no_stolen_points(graded, name):
    if name in SANDBOX_CASES and not SANDBOXED:
        pytest.skip("needs bubblewrap")
    frame = graded["frame"]
    mine = frame[frame.student_id == name].set_index("exercise")
    assert len(mine) == 2, f"{name} was not graded"
    for exercise, (statuses, points) in EXPECTED[name].items():
        r = mine.loc[exercise]
        assert r.status in statuses, (exercise, r.status, r.message)
        if points == "some":  # the visible test's points, not the hidden test's
            assert 0 < r.score < r.max_score, (exercise, r.score, r.message)
        else:
            assert r.score == (0 if points == "zero" else r.max_score), (exercise, r.score, r.message)


@pytest.mark.slow
@needs_sandbox
def test_sandbox_cases_ran(graded):
    assert set(SANDBOX_CASES) <= set(graded["frame"].student_id)


@pytest.mark.slow
def test_submissions_are_byte_identical_and_nothing_was_planted(graded):
    assert graded["before"] == graded["after"]
    assert not graded["trespass"].exists()


@pytest.mark.slow
def test_no_process_outlives_its_job(graded):
    for marker in ("sleep 987", "sleep 988"):  # a forked process; the grandchild of an orphan
        found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
        assert found.stdout.strip() == "", f"a process forked by a notebook survived grading ({marker})"


@pytest.mark.slow
def test_grading_twice_gives_identical_results(graded):
    pd.testing.assert_frame_equal(graded["frame"], graded["again"])


@pytest.mark.slow
def test_cheats_and_crashes_are_listed_for_the_instructor(graded):
    eyes = pd.read_csv(graded["out"] / "needs_attention.csv")
    flagged = set(eyes.student_id)
    assert {"patch-allclose", "forge-results", "os-exit", "segfault", "alarm-ignored-loop", "empty-file"} <= flagged


@pytest.mark.slow
def test_messages_say_what_happened(graded):
    frame = graded["frame"].set_index(["student_id", "exercise"])
    assert "torch.allclose" in frame.loc[("patch-allclose", "causal-mask"), "message"]
    assert "SyntaxError" in frame.loc[("syntax-error", "attention-head"), "message"]
    assert "SIGSEGV" in frame.loc[("segfault", "attention-head"), "message"]
    assert "empty" in frame.loc[("empty-file", "causal-mask"), "message"]
    assert "format 3" in frame.loc[("nbformat-3", "causal-mask"), "message"]
