"""An instructor's term in one output folder: assignments graded week by week all stay, the roster
is the class, only what was handed in (and released) is graded, and every way a submission strays
from nbgrader's layout is graded right or listed in needs_attention.csv, never a silent 0
(autograder/term.py, autograder/intake.py)."""

import copy
import json
import os
import shutil

import pandas as pd
import pytest
from harness import ROOT, lesson

from autograder.batch import grade_class, with_notebook_cap
from autograder.catalogue import with_answers
from autograder.cli import main
from autograder.course import RELEASE, CourseError
from autograder.intake import CHOSEN, MISPLACED
from autograder.older_release import match_old_ids, rename_ids
from autograder.protocol import LessonLimits, Limits
from autograder.reports import NOT_GRADED, RENAMED, page_names
from autograder.term import OFF_ROSTER, gradebook_students, read_roster
from autograder.term_results import RESULTS, read_record, record_file, store

A, B = "03-self-attention", "02-language-models"  # two lessons that grade in a second or two
LIMITS = Limits(wall_s=60, cell_s=3)
NOW = 1_700_000_000  # the submissions' modification times, in seconds before it


def release(assignment):
    return json.loads((ROOT / RELEASE / assignment / lesson(assignment).filename).read_text(encoding="utf-8"))


def solved(assignment, **edits):
    return with_answers(release(assignment), {**lesson(assignment).solution_answers(), **edits})


def put(path, content, age=0):
    """Write a notebook (or any text) at ``path``, modified ``age`` seconds before NOW."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    os.utime(path, (NOW - age, NOW - age))
    return path


def older_release(notebook):
    """The notebook as an older release had it: other grade_ids for the answer and test cells."""
    nb = copy.deepcopy(notebook)
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id", "")
        for new, old in (("causal-mask", "mask-v1"), ("attention-head", "head-v1")):
            if gid == new or gid.startswith(new + "-"):
                meta["grade_id"] = old + gid[len(new):]
    return nb


def read(out, name="grades.csv"):
    return pd.read_csv(out / name, keep_default_na=False)


def rows(frame, student, assignment=None):
    mine = frame[frame.student_id == student]
    return mine if assignment is None else mine[mine.assignment == assignment]


# ---------------------------------------------------------------------------------------------
# One class, graded week by week into one folder: lesson 03, then lesson 02, then 03 again


FILE_A = lesson(A).filename
ROSTER = ["ann", "ben-copy", "cy-two", "dan-newer", "dee-old", "eve-deep", "fay-typo", "Mary Jane", "Mary_Jane", "hal"]


def build_class(submitted):
    sub = submitted
    put(sub / "ann" / A / FILE_A, solved(A), age=10)
    put(sub / "ann" / A / "03-self-attention-Copy1.ipynb", solved(A), age=500)  # older: no question
    # the right name left blank, the work in an (older) copy
    put(sub / "ben-copy" / A / FILE_A, release(A), age=0)
    put(sub / "ben-copy" / A / "03-self-attention-Copy1.ipynb", solved(A), age=300)
    # two copies, neither with the right name: the newer one is graded
    broken = "raise RuntimeError('my first try')\n"
    put(sub / "cy-two" / A / "attention (old).ipynb", solved(A, **{"attention-head": broken}), age=900)
    put(sub / "cy-two" / A / "attention.ipynb", solved(A), age=100)
    # the right name holds work, and a newer copy too: the right name is graded, the copy named
    put(sub / "dan-newer" / A / FILE_A, solved(A, **{"attention-head": broken}), age=900)
    put(sub / "dan-newer" / A / "03-self-attention-Copy2.ipynb", solved(A), age=5)
    put(sub / "dee-old" / A / FILE_A, older_release(solved(A)))  # an older release's cell ids
    put(sub / "eve-deep" / A / A / FILE_A, solved(A))  # one folder too deep
    put(sub / "fay-typo" / "03-self-atention" / FILE_A, solved(A))  # a misspelled assignment folder
    (sub / "Mary Jane").mkdir(parents=True)  # two ids that make the same file name
    (sub / "Mary_Jane").mkdir()
    put(sub / "ivy" / A / FILE_A, "not a notebook")  # handed in, not on the roster
    return sub


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("term")
    submitted = build_class(tmp / "submitted")
    roster = tmp / "roster.csv"
    roster.write_text("id,first_name,last_name,email\n" + "".join(f"{s},,,\n" for s in ROSTER), encoding="utf-8")
    out = tmp / "graded"
    ids = read_roster(roster)
    seen = {}

    def run(name, only):
        grade_class(ROOT, submitted, out, jobs=2, limits=LIMITS, only=[only], progress=False, roster=ids)
        seen[name] = {"grades": read(out), "eyes": read(out, "needs_attention.csv"),
                      "totals": read(out, "totals.csv"), "ann": (out / "feedback" / "ann.html").read_text()}

    run("03", A)
    put(submitted / "ann" / B / lesson(B).filename, solved(B))
    run("03+02", B)
    # ann hands in again, with a mistake: the regrade of 03 shows it
    put(submitted / "ann" / A / FILE_A, solved(A, **{"attention-head": "raise RuntimeError('oops')\n"}), age=0)
    run("03 again", A)
    return {"out": out, "submitted": submitted, **seen}


@pytest.mark.slow
def test_grading_a_second_assignment_into_the_folder_keeps_the_first(term):
    first, both = term["03"], term["03+02"]
    assert set(first["grades"].assignment) == {A}
    assert set(both["grades"].assignment) == {A, B}
    pd.testing.assert_frame_equal(both["grades"][both["grades"].assignment == A].reset_index(drop=True),
                                  first["grades"].reset_index(drop=True))
    assert {A, B} <= set(both["totals"].columns)
    out = term["out"]
    assert (out / f"wide_{A}.csv").exists() and (out / f"wide_{B}.csv").exists()
    assert sorted(p.name for p in (out / RESULTS).glob("0*.json")) == [f"{B}.json", f"{A}.json"]
    # one feedback page per student covers every assignment graded so far; nbgrader's layout keeps one per notebook
    assert A in both["ann"] and B in both["ann"] and A in first["ann"] and B not in first["ann"]
    assert (out / "feedback" / "ann" / A / FILE_A.replace(".ipynb", ".html")).is_file()
    assert (out / "feedback" / "ann" / B / "02-language-models.html").is_file()
    # what needed attention in 03 is still listed after 02 was graded
    assert set(first["eyes"].student_id) <= set(both["eyes"].student_id)


@pytest.mark.slow
def test_a_regrade_replaces_only_its_own_assignment(term):
    before, after = term["03+02"]["grades"], term["03 again"]["grades"]
    pd.testing.assert_frame_equal(after[after.assignment == B].reset_index(drop=True),
                                  before[before.assignment == B].reset_index(drop=True))
    assert set(rows(before, "ann", A).status) == {"passed"}
    assert rows(after, "ann", A).set_index("exercise").status.to_dict() == {"attention-head": "error", "causal-mask": "passed"}
    others = after[(after.assignment == A) & (after.student_id != "ann")].reset_index(drop=True)
    pd.testing.assert_frame_equal(others, before[(before.assignment == A) & (before.student_id != "ann")].reset_index(drop=True))
    page = term["03 again"]["ann"]
    assert "oops" in page and B in page, "ann's page shows the regrade of 03 and still 02"


@pytest.mark.slow
def test_the_roster_is_the_class(term):
    grades, totals = term["03+02"]["grades"], term["03+02"]["totals"]
    hal = rows(grades, "hal")
    assert set(hal.assignment) == {A, B} and set(hal.status) == {"missing"}  # on the roster, handed nothing in
    assert "hal" in set(totals.student_id)
    assert set(rows(grades, "ann", B).status) == {"passed"} and set(rows(grades, "ben-copy", B).status) == {"missing"}
    eyes = term["03"]["eyes"]
    (ivy,) = eyes[eyes.status == OFF_ROSTER].itertuples()
    assert ivy.student_id == "ivy" and "not on the roster" in ivy.message
    assert set(rows(term["03"]["grades"], "ivy").status) == {"invalid"}  # graded all the same


def chosen(eyes, student, status=CHOSEN):
    found = eyes[(eyes.student_id == student) & (eyes.status == status)]
    assert len(found) == 1, (student, status, found.to_dict("records"))
    return found.message.iloc[0]


@pytest.mark.slow
def test_a_blank_right_name_beside_a_worked_copy_grades_the_copy(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert set(rows(grades, "ben-copy").status) == {"passed"}
    message = chosen(eyes, "ben-copy")
    assert "03-self-attention-Copy1.ipynb" in message and "blank" in message and "grade again" in message
    assert set(rows(grades, "ann").status) == {"passed"}
    assert not len(eyes[eyes.student_id == "ann"]), "the right name holds work and nothing newer does: nothing to say"


@pytest.mark.slow
def test_two_copies_neither_rightly_named_grade_the_newer_one(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert set(rows(grades, "cy-two").status) == {"passed"}
    message = chosen(eyes, "cy-two")
    assert message.startswith("graded cy-two/03-self-attention/attention.ipynb") and "attention (old).ipynb" in message


@pytest.mark.slow
def test_a_newer_copy_beside_the_worked_right_name_is_named(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert rows(grades, "dan-newer").set_index("exercise").loc["attention-head", "status"] == "error"
    assert "03-self-attention-Copy2.ipynb" in chosen(eyes, "dan-newer")


@pytest.mark.slow
def test_an_older_release_is_matched_by_its_cells(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert set(rows(grades, "dee-old").status) == {"passed"}
    message = chosen(eyes, "dee-old")
    assert "mask-v1 -> causal-mask" in message and "head-v1 -> attention-head" in message
    assert (term["submitted"] / "dee-old" / A / FILE_A).read_text() == json.dumps(older_release(solved(A)))


@pytest.mark.slow
def test_a_notebook_one_folder_too_deep_is_found_and_named(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert set(rows(grades, "eve-deep").status) == {"passed"}
    assert "one folder too deep" in chosen(eyes, "eve-deep")


@pytest.mark.slow
def test_a_misspelled_assignment_folder_is_listed_with_the_right_name(term):
    grades, eyes = term["03"]["grades"], term["03"]["eyes"]
    assert set(rows(grades, "fay-typo").status) == {"missing"}
    message = chosen(eyes, "fay-typo", MISPLACED)
    assert "did you mean 03-self-attention?" in message and "03-self-atention" in message
    assert eyes[eyes.status == MISPLACED].assignment.tolist() == [A]


@pytest.mark.slow
def test_ids_that_make_one_file_name_get_pages_of_their_own(term):
    out, eyes = term["out"], term["03"]["eyes"]
    pages = page_names(["Mary Jane", "Mary_Jane"])
    assert pages["Mary_Jane"] == "Mary_Jane.html" and pages["Mary Jane"].startswith("Mary_Jane-")
    for student, page in pages.items():
        assert f"Feedback for {student}<" in (out / "feedback" / page).read_text()
    assert pages["Mary Jane"] in chosen(eyes, "Mary Jane", RENAMED)


# ---------------------------------------------------------------------------------------------
# Quick: no notebook runs (unreadable or absent submissions are judged without running anything)


def small_class(tmp_path, handed):
    """``{student: [assignments]}``: each an unreadable notebook (graded `invalid` at once)."""
    submitted = tmp_path / "submitted"
    for student, assignments in handed.items():
        (submitted / student).mkdir(parents=True, exist_ok=True)
        for assignment in assignments:
            put(submitted / student / assignment / lesson(assignment).filename, "not a notebook")
    return submitted


def quick(submitted, out, **options):
    return grade_class(ROOT, submitted, out, **{"limits": LIMITS, "sandbox": "none", "progress": False, **options})


def test_without_assignment_only_what_was_handed_in_is_graded(tmp_path):
    submitted = small_class(tmp_path, {"ann": [A, B], "bob": [A], "cat": []})
    frame = quick(submitted, tmp_path / "out")
    assert set(frame.assignment) == {A, B}, "never the lessons nobody handed in"
    assert set(rows(frame, "cat").status) == {"missing"} and set(rows(frame, "bob", B).status) == {"missing"}


def test_with_an_exchange_only_what_was_released_is_graded(tmp_path):
    submitted = small_class(tmp_path, {"ann": [A, B], "bob": [A]})
    exchange = tmp_path / "exchange"
    (exchange / "transformer-course" / "outbound" / B).mkdir(parents=True)  # what `nbgrader release_assignment` makes
    frame = quick(submitted, tmp_path / "out", exchanges=[exchange])
    assert set(frame.assignment) == {B}
    eyes = read(tmp_path / "out", "needs_attention.csv")
    early = eyes[eyes.assignment == A]
    assert sorted(early.student_id) == ["ann", "bob"] and set(early.status) == {NOT_GRADED}
    assert all("not released" in m and f"--assignment {A}" in m for m in early.message)


def test_the_command_says_when_there_is_nothing_to_grade(tmp_path, capsys):
    submitted = small_class(tmp_path, {"ann": []})
    assert main(["grade", str(submitted), "--out", str(tmp_path / "out"), "--cell-timeout", "3", "--timeout", "60",
                 "--exchange", str(tmp_path / "no-exchange")]) == 2
    err = capsys.readouterr().err
    assert "nothing to grade" in err and "--assignment" in err and err.count("\n") == 1
    assert main(["grade", str(submitted), "--out", str(tmp_path / "out"), "--assignment", "03-self-atention"]) == 2
    assert "did you mean 03-self-attention?" in capsys.readouterr().err


def test_the_command_grades_a_roster_with_the_released_assignments(tmp_path, capsys):
    submitted = small_class(tmp_path, {"ann": [A, B]})
    exchange = tmp_path / "exchange"
    (exchange / "transformer-course" / "outbound" / A).mkdir(parents=True)
    roster = tmp_path / "students.csv"
    roster.write_text("\ufeffid,first_name,last_name,email\nann,Ann,A,\nzoe,Zoe,Z,zoe@example.org\n", encoding="utf-8")
    put(submitted / "ann" / "03-self-atention" / FILE_A, "misspelled")
    put(submitted / "ann" / "my attention.ipynb", "loose in the student's folder")
    out = tmp_path / "out"
    assert main(["grade", str(submitted), "--out", str(out), "--cell-timeout", "3", "--timeout", "60", "--sandbox", "none",
                 "--roster", str(roster), "--exchange", str(exchange)]) == 0
    printed = capsys.readouterr()
    grades = read(out)
    assert set(grades.assignment) == {A} and set(rows(grades, "zoe").status) == {"missing"}
    assert "zoe" in set(read(out, "totals.csv").student_id)
    assert f"grading {A}: handed in and released" in printed.err
    assert "in needs_attention.csv with what to do: 2 misplaced" in printed.out
    eyes = read(out, "needs_attention.csv")
    loose = eyes[eyes.notebook == "my attention.ipynb"]
    assert list(loose.status) == [MISPLACED] and "in no assignment's folder" in loose.message.iloc[0]


def test_the_roster_is_read_as_nbgrader_imports_it(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("id,email\n ann ,a@x\n\nbob,\nann,\n", encoding="utf-8")
    assert read_roster(path) == ["ann", "bob"]
    path.write_text("student,email\nann,\n", encoding="utf-8")
    with pytest.raises(CourseError, match="no `id` column"):
        read_roster(path)
    path.write_text("id\n../etc\n", encoding="utf-8")
    with pytest.raises(CourseError, match="line 2"):
        read_roster(path)


def test_the_gradebook_s_students_are_the_class(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    from autograder.environment import tool_env

    monkeypatch.setenv("PATH", tool_env()["PATH"])  # nbgrader runs `alembic` to make a new gradebook
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert gradebook_students(db) == [] and not (tmp_path / "gradebook.db").exists(), "read, never made"
    with Gradebook(db, "transformer-course") as gb:
        gb.add_student("ann")
        gb.add_student("dot")  # imported with `nbgrader db student import`, handed nothing in
    written = {}
    monkeypatch.setattr("autograder.gradebook.write_gradebook",
                        lambda url, root, results, **_: written.setdefault(url, sorted((r.student, r.assignment) for r in results)))
    frame = quick(small_class(tmp_path, {"ann": [A]}), tmp_path / "out", gradebook=db)
    assert set(rows(frame, "dot").status) == {"missing"}
    assert written[db] == [("ann", A), ("dot", A)]


def _one_big_notebook(tmp_path):
    """ann's solved notebook with 1.5 MiB of saved output: the submissions folder."""
    big = solved(A)
    big["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": 1, "source": "print('x')",
                         "outputs": [{"output_type": "stream", "name": "stdout", "text": "x" * (3 * 2**20 // 2)}]})
    submitted = tmp_path / "submitted"
    put(submitted / "ann" / A / FILE_A, big)
    return submitted


def test_a_notebook_over_the_size_cap_names_the_option(tmp_path):
    submitted = _one_big_notebook(tmp_path)
    frame = quick(submitted, tmp_path / "out", limits=Limits(wall_s=60, cell_s=3, notebook_mb=1), only=[A])
    assert set(frame.status) == {"invalid"}
    message = frame.message.iloc[0]
    assert "over 1 MiB" in message and "--max-notebook-mb 2" in message
    eyes = read(tmp_path / "out", "needs_attention.csv")
    assert set(eyes.status) == {"invalid"} and eyes.message.str.contains("--max-notebook-mb").all()
    limits = with_notebook_cap(LessonLimits(LIMITS, ((A, LIMITS),)), 2)
    assert limits.default.notebook_mb == 2 and limits.get(A).notebook_mb == 2


@pytest.mark.slow
def test_a_notebook_under_a_raised_cap_is_graded(tmp_path):
    submitted = _one_big_notebook(tmp_path)
    frame = quick(submitted, tmp_path / "out", limits=Limits(wall_s=60, cell_s=3, notebook_mb=2), only=[A])
    assert set(frame.status) == {"passed"}


@pytest.mark.slow
def test_an_older_release_that_cannot_be_matched_is_listed(tmp_path):
    nb = older_release(solved(A))
    for cell in nb["cells"]:  # answers that define nothing a solution defines, and one answer cell too many
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in ("mask-v1", "head-v1"):
            cell["source"] = "x = 1\n"
    extra = copy.deepcopy(next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "head-v1"))
    extra["metadata"]["nbgrader"]["grade_id"] = "bonus-v1"
    nb["cells"].append(extra)
    mapping, left, missing = match_old_ids(lesson(A), nb)
    assert mapping == {} and sorted(left) == ["bonus-v1", "head-v1", "mask-v1"] and missing == ["causal-mask", "attention-head"]
    put(tmp_path / "submitted" / "ann" / A / FILE_A, nb)
    frame = quick(tmp_path / "submitted", tmp_path / "out", only=[A])
    assert set(frame.status) == {"missing"}  # what could not be matched is not guessed ...
    eyes = read(tmp_path / "out", "needs_attention.csv")
    (message,) = eyes[eyes.status == MISPLACED].message
    assert "could not be matched" in message and "causal-mask, attention-head" in message  # ... but listed


def test_an_older_release_is_matched_by_position_when_its_cells_name_nothing():
    nb = older_release(solved(A))
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in ("mask-v1", "head-v1"):
            cell["source"] = "pass\n"
    mapping, left, missing = match_old_ids(lesson(A), nb)
    assert mapping == {"mask-v1": "causal-mask", "head-v1": "attention-head"} and not left and not missing
    renamed = rename_ids(lesson(A), nb, mapping)
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in renamed["cells"]]
    assert "causal-mask" in ids and "attention-head" in ids and not any(i and "-v1" in i for i in ids)


def test_grading_another_assignment_into_a_folder_of_an_earlier_version_keeps_its_grades(tmp_path):
    submitted = small_class(tmp_path, {"ann": [A, B], "bob": [A]})
    out = tmp_path / "out"
    quick(submitted, out, only=[A])
    shutil.rmtree(out / RESULTS)  # as an earlier version left it: reports and .cache, no records
    frame = quick(submitted, out, only=[B])
    assert set(frame.assignment) == {A, B} and set(read(out).assignment) == {A, B}


def test_an_assignment_that_could_not_be_graded_again_keeps_its_earlier_grades(tmp_path):
    submitted = small_class(tmp_path, {"ann": [A]})
    out = tmp_path / "out"
    quick(submitted, out, only=[A])
    before = read(out)
    quick(submitted, out, only=[A], not_graded={A: "its solution did not run"})
    assert read(out).equals(before)
    eyes = read(out, "needs_attention.csv")
    (message,) = eyes[eyes.status == NOT_GRADED].message
    assert "its solution did not run" in message and "earlier run" in message
    store(out, [A], [], [])  # a regrade with nothing in it replaces the record
    assert read_record(record_file(out, A))["results"] == []


def test_merging_shards_into_a_term_folder_keeps_its_other_assignments(tmp_path, capsys):
    submitted = small_class(tmp_path, {"ann": [A, B], "bob": [A, B], "cy": [A]})
    fixed = ["--cell-timeout", "60", "--timeout", "600", "--sandbox", "none"]  # the shards' fixed limits
    term = tmp_path / "term"
    assert main(["grade", str(submitted), "--out", str(term), "--assignment", B, *fixed]) == 0
    shards = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, folder in enumerate(shards):
        assert main(["grade", str(submitted), "--out", str(folder), "--assignment", A, "--shard", f"{i}/2", *fixed]) == 0
    assert main(["merge", *map(str, shards), "--out", str(term)]) == 0
    capsys.readouterr()
    grades = read(term)
    assert set(grades.assignment) == {A, B} and set(rows(grades, "cy", B).status) == {"missing"}
    one = tmp_path / "one"
    assert main(["grade", str(submitted), "--out", str(one), "--assignment", A, *fixed]) == 0
    assert main(["grade", str(submitted), "--out", str(one), "--assignment", B, *fixed]) == 0
    capsys.readouterr()
    assert (term / "grades.csv").read_bytes() == (one / "grades.csv").read_bytes()
    assert (term / "needs_attention.csv").read_bytes() == (one / "needs_attention.csv").read_bytes()


def test_page_names_never_clash():
    pages = page_names(["Mary Jane", "Mary_Jane", "Ann", "ann", "bo", "a/b"])
    assert len(set(pages.values())) == len(pages)
    assert pages["bo"] == "bo.html" and pages["Mary_Jane"] == "Mary_Jane.html"
    assert pages["Ann"] != "Ann.html" and pages["ann"] != "ann.html"  # one file on a case-blind disk
    assert page_names(["Mary Jane"]) == {"Mary Jane": pages["Mary Jane"]}, "the same id, the same page, whoever else is in the class"
