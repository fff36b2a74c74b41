"""The class's misconceptions: which mistakes how many students made, per assignment and exercise.

``write_misconceptions`` writes three files into a grading run's output folder, rebuilt with the
other reports from every assignment graded into it (``autograder.term_results.rebuild``):

* ``misconceptions.csv``: one row per (assignment, exercise, mistake): the mistake's words, how
  many students made it, and their ids joined with ``;``. Most common first within an exercise.
* ``misconceptions.png``: the most common mistakes of each assignment, one horizontal bar each
  (``plot_misconceptions``, a pure function: it returns ``(fig, ax)``).
* ``misconceptions.html``: for the instructor, per assignment and exercise, the most common
  mistakes and a link to where the lesson teaches the exercise.

Where the words come from. No identifier of a mistake travels from the grading child: its lines
carry the probe's data only (``autograder.protocol``); the ``kind`` of an error record is the
exception's type name, and ``explained`` is already part of the message. The verdict is made by
the check's judge in the grader's own process and is a message: a catalogued mistake's words or
a diagnosis, after what was tested (``what: ...``) and before the evidence (``Evidence: ...``).
So ``mistake_words`` derives the mistake from the message, here and nowhere else: its cause
sentence, numbers masked for grouping. A number that every student of a row shares (the test's
own input, such as ``sqrt(3)`` for ``head_dim=3``) stays in the words; one that differs between
them shows as ``#``.

Counted: every exercise ``failed`` or ``error`` (the test could not run), one mistake per
student and exercise (the first test that did not pass: a hidden test repeats the visible check
first). A blank answer ("not answered yet") is no misconception and is not counted.

The link: the release notebook (``notebooks/<assignment>/<notebook>.ipynb``, a ``file://``
address: it needs no network and no built book) with the exercise heading's anchor as JupyterLab
writes it (the heading's text, spaces made ``-``), which JupyterLab scrolls to.
"""

from __future__ import annotations

import csv
import html
import re
import urllib.parse
from pathlib import Path

from autograder.course import RELEASE, cell_source, lessons, nbgrader_meta
from autograder.grading import NotebookResult

CSV = "misconceptions.csv"
FIGURE = "misconceptions.png"
PAGE = "misconceptions.html"
COLUMNS = ["assignment", "exercise", "mistake", "students", "student_ids"]
COUNTED = ("failed", "error")
NOT_ANSWERED = "not answered yet"
#: bars per assignment in the figure, and mistakes per exercise on the page
TOP = 5
MAX_WORDS = 160
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w])")
MASK = "#"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
#: ``helpers.checks.evidence.first_mismatch``'s words, evidence inside a sentence ("(3 of 36 entries
#: differ; first at index (0, 1): expected 0.5, got 1)"): one student's values
_MISMATCH = r"\d+ of \d+ entries differ; first at index \([^()]*\): expected [^,;()]+, got [^;()]+(?:; largest difference [^;()]+)?"
_INLINE_EVIDENCE = re.compile(rf" ?\({_MISMATCH}\)|{_MISMATCH}")


def mistake_words(message: str) -> str | None:
    """The cause sentence of one test's message, or None for a blank answer or no message.

    The first sentence of the first line (the evidence, ``Evidence: ...`` or ``first_mismatch``'s
    words in brackets, left out); from
    ``raised`` on when the student's code raised (``... raised NameError: name 'x' is not
    defined``); else without what was tested, the text before the first ``: `` outside brackets
    (``AttentionHead(...) on x of shape (2, 6, 7): you forgot to scale ...``); at most
    ``MAX_WORDS`` characters. Numbers stay: ``group_key`` masks them for grouping."""
    text = (message or "").strip().split("\n", 1)[0].partition(" Evidence: ")[0].strip()
    if not text or text.startswith(NOT_ANSWERED):
        return None
    text = _SENTENCE_END.split(_INLINE_EVIDENCE.sub("", text), 1)[0].strip()
    colon = _top_level_colon(text)
    raised = text.find(" raised ")
    if raised >= 0 and (colon < 0 or raised < colon):
        text = text[raised + 1:]
    elif colon >= 0 and text[colon + 2:].strip():
        text = text[colon + 2:].strip()
    if len(text) > MAX_WORDS:
        text = text[: MAX_WORDS - 1].rstrip() + "…"
    return text


def _top_level_colon(text: str) -> int:
    """The index of the first ``": "`` outside brackets and quotes, or -1."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == ":" and depth == 0 and text[i + 1:i + 2] == " ":
            return i
    return -1


def group_key(words: str) -> str:
    """``words`` with every number masked: the same mistake of students whose numbers differ."""
    return NUMBER.sub(MASK, words)


def shared_words(variants: list[str]) -> str:
    """One text for the words of a group (equal but for numbers): each number kept where all
    variants have it, ``#`` where they differ."""
    parts = [NUMBER.split(v) for v in variants]
    numbers = [NUMBER.findall(v) for v in variants]
    out = []
    for i, text in enumerate(parts[0]):
        out.append(text)
        if i < len(numbers[0]):
            seen = {n[i] for n in numbers}
            out.append(numbers[0][i] if len(seen) == 1 else MASK)
    return "".join(out)


def mistakes(results: list[NotebookResult]) -> list[dict]:
    """The rows of ``misconceptions.csv`` (``COLUMNS``), sorted by assignment, exercise, then the
    most students first (ties by the words)."""
    groups: dict[tuple[str, str, str], dict[str, str]] = {}
    for result in results:
        for exercise in result.exercises:
            if exercise.status not in COUNTED:
                continue
            test = next((t for t in exercise.tests if t.status != "passed"), None)
            words = mistake_words(test.message if test is not None else "; ".join(exercise.notes))
            if words is None:
                continue
            key = (result.assignment, exercise.exercise, group_key(words))
            groups.setdefault(key, {})[result.student] = words
    rows = [{"assignment": a, "exercise": e, "mistake": shared_words([who[s] for s in sorted(who)]),
             "students": len(who), "student_ids": ";".join(sorted(who))}
            for (a, e, _), who in groups.items()]
    return sorted(rows, key=lambda r: (r["assignment"], r["exercise"], -r["students"], r["mistake"]))


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _wrapped(text: str, width: int = 60, lines: int = 2) -> str:
    """``text`` on at most ``lines`` lines of about ``width`` characters (a bar's label)."""
    words, out, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    out.append(line)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 1] + "…"
    return "\n".join(out)


def plot_misconceptions(rows: list[dict], top: int = TOP):
    """The ``top`` most common mistakes of each assignment as horizontal bars (students), the
    assignment and exercise in each label; returns ``(fig, ax)`` and shows nothing."""
    from matplotlib.figure import Figure

    chosen = []
    for assignment in sorted({r["assignment"] for r in rows}):
        mine = sorted((r for r in rows if r["assignment"] == assignment), key=lambda r: (-r["students"], r["exercise"], r["mistake"]))
        chosen += mine[:top]
    fig = Figure(figsize=(11, 1.2 + 0.55 * max(len(chosen), 1)))
    ax = fig.subplots()
    if not chosen:
        ax.text(0.5, 0.5, "no mistakes: every graded exercise passed or was left blank", ha="center", va="center")
        ax.set_axis_off()
        return fig, ax
    labels = [_wrapped(f"{r['assignment']} · {r['exercise']}: {r['mistake']}") for r in chosen]
    positions = list(range(len(chosen)))[::-1]  # the first row at the top
    palette = ["#3b528b", "#21918c", "#5ec962", "#fde725", "#440154"]
    order = sorted({r["assignment"] for r in chosen})
    colors = [palette[order.index(r["assignment"]) % len(palette)] for r in chosen]
    ax.barh(positions, [r["students"] for r in chosen], color=colors, edgecolor="white")
    ax.set_yticks(positions, labels, fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("students")
    ax.set_title(f"The most common mistakes (at most {top} per assignment)")
    fig.tight_layout()
    return fig, ax


def exercise_headings(notebook: dict) -> dict[str, str]:
    """Each exercise's heading text (``### Exercise N · ...`` without the ``#``s and backticks),
    by the grade_id of the answer cell that follows it."""
    found, heading = {}, None
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            match = re.search(r"^#{1,6}\s+(Exercise\b.*)$", cell_source(cell), re.M)
            heading = match.group(1).replace("`", "").replace("**", "").strip() if match else heading
        gid = nbgrader_meta(cell).get("grade_id")
        if gid and nbgrader_meta(cell).get("solution") and heading:
            found.setdefault(gid, heading)
    return found


def lesson_links(root: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(assignment, exercise) -> (address, text): the release notebook with JupyterLab's anchor
    of the exercise's heading (see the module's doc)."""
    links = {}
    for lesson in lessons(root):
        release = root / RELEASE / lesson.assignment / lesson.filename
        for gid, heading in exercise_headings(lesson.notebook).items():
            anchor = urllib.parse.quote(heading.replace(" ", "-"), safe="-")
            links[(lesson.assignment, gid)] = (f"{release.resolve().as_uri()}#{anchor}",
                                               f"{RELEASE}/{lesson.assignment}/{lesson.filename} · {heading}")
    return links


def misconceptions_html(rows: list[dict], links: dict[tuple[str, str], tuple[str, str]], top: int = TOP) -> str:
    """The instructor's page: per assignment and exercise, its ``top`` most common mistakes and
    the lesson section that teaches it."""
    esc = html.escape
    parts = ["<!doctype html><meta charset='utf-8'><title>The class's misconceptions</title>",
             "<style>body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #222; }"
             " table { border-collapse: collapse; width: 100%; } th, td { border: 1px solid #ccc; padding: .3rem .5rem;"
             " text-align: left; vertical-align: top; } td.n { text-align: right; }</style>",
             "<h1>The class's misconceptions</h1>",
             f"<p>Per exercise, the {top} most common mistakes (all of them in {CSV}), and where the lesson teaches "
             "it: the release notebook, at the exercise's heading when opened in JupyterLab.</p>"]
    if not rows:
        parts.append("<p>No mistakes: every graded exercise passed or was left blank.</p>")
    for assignment in sorted({r["assignment"] for r in rows}):
        parts.append(f"<h2>{esc(assignment)}</h2>")
        for exercise in sorted({r["exercise"] for r in rows if r["assignment"] == assignment}):
            mine = [r for r in rows if (r["assignment"], r["exercise"]) == (assignment, exercise)]
            href, text = links.get((assignment, exercise), ("", ""))
            where = f" · <a href='{esc(href)}'>{esc(text)}</a>" if href else ""
            parts.append(f"<h3>{esc(exercise)}{where}</h3>")
            parts.append("<table><tr><th>students</th><th>mistake</th><th>who</th></tr>")
            for r in mine[:top]:
                parts.append(f"<tr><td class='n'>{r['students']}</td><td>{esc(r['mistake'])}</td>"
                             f"<td>{esc(r['student_ids'].replace(';', ', '))}</td></tr>")
            parts.append("</table>")
            if len(mine) > top:
                parts.append(f"<p>and {len(mine) - top} more in {CSV}</p>")
    return "\n".join(parts) + "\n"


def write_misconceptions(results: list[NotebookResult], out: Path, root: Path | None) -> list[dict]:
    """Write ``misconceptions.csv``, ``.png`` and ``.html`` into ``out``; returns the rows. ``root``:
    the course, for the links (none without it)."""
    rows = mistakes(results)
    write_csv(rows, out / CSV)
    fig, _ = plot_misconceptions(rows)
    fig.savefig(out / FIGURE, dpi=100, metadata={"Software": None})  # no version: the same rows, the same bytes
    links = lesson_links(root) if root is not None else {}
    (out / PAGE).write_text(misconceptions_html(rows, links), encoding="utf-8")
    return rows
