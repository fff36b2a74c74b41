"""The class's misconceptions (``autograder/misconceptions.py``): a test's message becomes its
mistake's words, students with the same mistake are one row, and the figure and the page show
the most common ones with a link to the lesson."""

import csv
import json
import urllib.parse

from harness import ROOT, lesson

from autograder import grading
from autograder.misconceptions import (
    CSV,
    FIGURE,
    PAGE,
    exercise_headings,
    group_key,
    lesson_links,
    misconceptions_html,
    mistake_words,
    mistakes,
    plot_misconceptions,
    write_misconceptions,
)
from autograder.term_results import rebuild, store

HEAD = "AttentionHead(emb_dim=7, head_dim=3) on x of shape (2, 6, 7)"
NO_SCALING = f"{HEAD}: you forgot to scale the scores by 1/sqrt(head_dim). Evidence: 27 of 36 entries differ; got {{}}"
FINITE = ("apply_causal_mask(scores) for scores of shape (6, 6): entry (0, 1) (query 0, key 1) is {}, a finite number. "
          "Use float('-inf'): exp(-inf) is exactly 0.")


def result(student, assignment, **exercises):
    """A notebook's result: ``exercise=(status, visible message, hidden message)``."""
    found = []
    for name, (status, visible, hidden) in exercises.items():
        tests = [grading.TestResult(f"{name}-check", False, "passed" if visible is None else status, 0.0, 1.0, visible or "passed"),
                 grading.TestResult(f"{name}-hidden", True, "passed" if hidden is None else status, 0.0, 1.0, hidden or "passed")]
        found.append(grading.ExerciseResult(name, status, 0.0, 2.0, tests))
    return grading.NotebookResult(student, assignment, f"{assignment}.ipynb", found)


def passed():
    return ("passed", None, None)


def failed(visible, hidden=None):
    return ("failed", visible, hidden if hidden is not None else visible)


CLASS = [
    result("ada", "03-self-attention", **{"attention-head": passed(), "causal-mask": passed()}),
    result("gus", "03-self-attention", **{"attention-head": failed(NO_SCALING.format("1.73543")),
                                          "causal-mask": failed(FINITE.format("-1e+09"))}),
    result("ian", "03-self-attention", **{"attention-head": failed(NO_SCALING.format("1.9")),
                                          "causal-mask": failed(FINITE.format("-10000.0"))}),
    result("ben", "03-self-attention", **{"attention-head": failed("not answered yet (your code raises NotImplementedError)"),
                                          "causal-mask": ("error", "your code raised NameError: name 'mask' is not defined\n"
                                                          "NameError in apply_causal_mask, line 3", None)}),
    # visible passes, the hidden test finds the mistake: its words count
    result("cai", "03-self-attention", **{"attention-head": failed(None, f"{HEAD}: you forgot to scale the scores by "
                                                                   "1/sqrt(head_dim). Evidence: 3 of 36 entries differ"),
                                          "causal-mask": passed()}),
    result("gus", "01-tokens-and-embeddings", **{"encode-decode": ("timeout", "your answer cell ran past its time limit", None)}),
]


def test_the_words_are_the_cause_without_what_was_tested_and_without_the_evidence():
    assert mistake_words(NO_SCALING.format("1.7")) == "you forgot to scale the scores by 1/sqrt(head_dim)."
    assert mistake_words(FINITE.format("-1e+09")) == "entry (0, 1) (query 0, key 1) is -1e+09, a finite number."
    assert mistake_words("your code raised NameError: name 'mask' is not defined\nNameError in f, line 3") == (
        "raised NameError: name 'mask' is not defined")
    assert mistake_words("sample_next on 8000 copies of one row (temperature=1.0) raised KeyError: 'x'") == "raised KeyError: 'x'"
    assert mistake_words("the test could not run: your answer cell raised RuntimeError: broken") == (
        "your answer cell raised RuntimeError: broken")
    assert mistake_words("the mask is inverted. Query 1 cannot see key 0.") == "the mask is inverted."
    assert mistake_words("apply_causal_mask(scores) for scores of shape (6, 6) changed its input in place (15 of 36 "
                         "entries differ; first at index (0, 1): expected -1.11975, got -inf). Return a new tensor.") == (
        "apply_causal_mask(scores) for scores of shape (6, 6) changed its input in place.")
    assert mistake_words("not answered yet (the cell still raises NotImplementedError)") is None
    assert mistake_words("") is None
    assert len(mistake_words("x: " + "word " * 100)) <= 160


def test_numbers_are_masked_for_grouping_but_not_inside_names():
    assert group_key("is -1e+09, query 0, sqrt(3), float16, top_k=5, dim=-1") == "is #, query #, sqrt(#), float16, top_k=#, dim=#"


def test_one_row_per_mistake_with_its_students_and_only_differing_numbers_masked():
    rows = mistakes(CLASS)
    by = {(r["assignment"], r["exercise"], r["mistake"]): r for r in rows}
    head = by[("03-self-attention", "attention-head", "you forgot to scale the scores by 1/sqrt(head_dim).")]
    assert (head["students"], head["student_ids"]) == (3, "cai;gus;ian")  # the hidden test's words count too
    mask = by[("03-self-attention", "causal-mask", "entry (0, 1) (query 0, key 1) is #, a finite number.")]
    assert (mask["students"], mask["student_ids"]) == (2, "gus;ian")  # their own mask values differ: masked
    raised = by[("03-self-attention", "causal-mask", "raised NameError: name 'mask' is not defined")]
    assert raised["students"] == 1
    # a blank answer, a pass and a timeout are no misconception; ben's blank head is not counted
    assert len(rows) == 3
    assert [r["exercise"] for r in rows] == ["attention-head", "causal-mask", "causal-mask"]
    assert rows[1]["students"] >= rows[2]["students"]  # the most common first within an exercise
    assert mistakes(list(reversed(CLASS))) == rows  # the order of the results (shards) changes nothing


def test_the_files_are_written_and_the_csv_reads_back(tmp_path):
    rows = write_misconceptions(CLASS, tmp_path, ROOT)
    with open(tmp_path / CSV, encoding="utf-8", newline="") as fh:
        read = list(csv.DictReader(fh))
    assert [dict(r, students=int(r["students"])) for r in read] == rows
    assert (tmp_path / FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = {p: (tmp_path / p).read_bytes() for p in (CSV, FIGURE, PAGE)}
    write_misconceptions(list(reversed(CLASS)), tmp_path, ROOT)
    assert {p: (tmp_path / p).read_bytes() for p in (CSV, FIGURE, PAGE)} == first  # the same bytes every time


def test_the_figure_is_pure_and_shows_the_top_mistakes_of_each_assignment():
    import matplotlib.pyplot as plt

    rows = mistakes(CLASS)
    before = plt.get_fignums()
    fig, ax = plot_misconceptions(rows, top=2)
    assert plt.get_fignums() == before  # never registered with pyplot, never shown
    assert [p.get_width() for p in ax.patches] == [3, 2]
    ticks = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True), reverse=True)
    labels = [label for _, label in ticks]
    assert "attention-head" in labels[0] and "forgot to scale" in labels[0]  # the most common at the top
    assert all(len(line) <= 61 for label in labels for line in label.split("\n"))  # wrapped to stay readable
    fig, ax = plot_misconceptions([])
    assert not ax.patches and "no mistakes" in ax.texts[0].get_text()


def test_the_page_links_each_exercise_to_its_heading_in_the_release_notebook():
    les = lesson("03-self-attention")
    headings = exercise_headings(les.notebook)
    assert headings["causal-mask"].startswith("Exercise 1 · the causal mask ·")
    links = lesson_links(ROOT)
    href, text = links[("03-self-attention", "causal-mask")]
    path, _, anchor = href.partition("#")
    release = ROOT / "notebooks" / "03-self-attention" / "03-self-attention.ipynb"
    assert path == release.resolve().as_uri() and release.is_file()
    # JupyterLab's heading id: the heading's text, spaces made '-'
    assert urllib.parse.unquote(anchor) == headings["causal-mask"].replace(" ", "-")
    cells = json.loads(release.read_text(encoding="utf-8"))["cells"]
    assert any(("### " + headings["causal-mask"]) in "".join(c["source"]).replace("`", "") for c in cells)
    assert text.startswith("notebooks/03-self-attention/03-self-attention.ipynb · Exercise 1")
    page = misconceptions_html(mistakes(CLASS), links, top=1)
    assert page.count("<h3>") == 2 and f"href='{href}'" in page.replace("&amp;", "&")
    assert "and 1 more in misconceptions.csv" in page and "cai, gus, ian" in page


def test_every_exercise_of_the_course_has_a_link():
    links = lesson_links(ROOT)
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        les = lesson(path.parent.name)
        for gid in les.exercises:
            assert (les.assignment, gid) in links, (les.assignment, gid)


def test_the_term_rebuild_covers_every_graded_assignment(tmp_path):
    store(tmp_path, ["03-self-attention"], [r for r in CLASS if r.assignment == "03-self-attention"], [])
    other = result("zoe", "02-language-models", mlp=failed("MLP(emb_dim=4): you left out the activation. Evidence: 1"))
    store(tmp_path, ["02-language-models"], [other], [])
    rebuild(tmp_path, None, ROOT)
    with open(tmp_path / CSV, encoding="utf-8", newline="") as fh:
        read = list(csv.DictReader(fh))
    assert sorted({r["assignment"] for r in read}) == ["02-language-models", "03-self-attention"]
    assert ("02-language-models", "mlp", "you left out the activation.", "zoe") in {
        (r["assignment"], r["exercise"], r["mistake"], r["student_ids"]) for r in read}
