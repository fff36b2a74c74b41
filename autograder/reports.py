"""What a grading run writes: the long gradebook, per-student feedback, tables and plots."""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

import pandas as pd

from autograder.grading import STATUSES, NotebookResult

COLUMNS = ["student_id", "assignment", "notebook", "exercise", "score", "max_score", "status", "message"]
NEEDS_EYES = ("crashed", "timeout", "invalid", "tampered")
#: a submission of a lesson whose own solution could not run in the grader: not graded at all, so
#: it is in neither grades.csv nor the totals, only in needs_attention.csv, with the reason
NOT_GRADED = "not graded"


#: a student whose feedback page is not ``feedback/<id>.html`` (the id is not a plain file name, or
#: another id differs from it only in case): the row says which page is theirs
RENAMED = "renamed"


def attention_row(student: str, assignment: str, notebook: str, max_score: float | None, status: str, message: str,
                  exercise: str = "(submission)") -> dict:
    """A row of ``needs_attention.csv`` that is no exercise's result: no score (not a 0)."""
    return {"student_id": student, "assignment": assignment, "notebook": notebook, "exercise": exercise,
            "score": None, "max_score": max_score, "status": status, "message": message}


def not_graded_row(student: str, assignment: str, notebook: str, max_score: float, reason: str) -> dict:
    """The row of ``needs_attention.csv`` for one submission that was not graded: no score, not a 0."""
    return attention_row(student, assignment, notebook, max_score, NOT_GRADED, reason, exercise="(notebook)")


def page_names(students) -> dict[str, str]:
    """Each student's feedback page, a file name no other student's can clash with.

    ``<id>.html`` when the id is a plain file name (letters, digits, ``-_.``) that no other id equals
    but for case; otherwise the id made plain plus the first 8 hex digits of its SHA-256
    (``Mary Jane`` -> ``Mary_Jane-<hash>.html``, next to ``Mary_Jane.html``): the same id always
    gets the same page, whoever else is in the class."""
    students = sorted(set(students))
    folded: dict[str, int] = {}
    for student in students:
        folded[student.casefold()] = folded.get(student.casefold(), 0) + 1
    names = {}
    for student in students:
        plain = _safe(student)
        if plain == student and folded[student.casefold()] == 1:
            names[student] = f"{plain}.html"
        else:
            names[student] = f"{plain}-{hashlib.sha256(student.encode('utf-8')).hexdigest()[:8]}.html"
    return names


def gradebook(results: list[NotebookResult]) -> pd.DataFrame:
    """One row per student × assignment × exercise (long form), sorted."""
    rows = [
        {
            "student_id": r.student,
            "assignment": r.assignment,
            "notebook": r.notebook,
            "exercise": e.exercise,
            "score": e.score,
            "max_score": e.max_score,
            "status": e.status,
            "message": e.message,
        }
        for r in results
        for e in r.exercises
    ]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["student_id", "assignment", "exercise"], kind="stable").reset_index(drop=True)


def totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Wide table: one row per student, one column per assignment, and the total. An assignment a
    student was never graded for (they joined after it was graded) is empty, not 0."""
    wide = frame.pivot_table(index="student_id", columns="assignment", values="score", aggfunc="sum")
    wide["total"] = wide.sum(axis=1)
    wide.columns.name = None
    return wide


def pass_rates(frame: pd.DataFrame) -> pd.DataFrame:
    """Per exercise: how many students got each status, and the share that passed."""
    counts = frame.pivot_table(index=["assignment", "exercise"], columns="status", values="score", aggfunc="count", fill_value=0)
    counts = counts.reindex(columns=[s for s in STATUSES if s in counts.columns])
    counts["pass_rate"] = counts.get("passed", 0) / counts.sum(axis=1)
    counts.columns.name = None
    return counts


def write_reports(results: list[NotebookResult], out: Path, submitted: Path | list[Path] | None = None,
                  not_graded: list[dict] = ()) -> pd.DataFrame:
    """Write every report of a run into ``out``; returns the long gradebook.

    ``not_graded``: rows (``attention_row``, ``not_graded_row``) that are no exercise's result: a
    submission that was not graded, a notebook the grader chose; they go into
    ``needs_attention.csv`` only, after the graded ones. A feedback page of a student or a
    submission no longer among ``results`` is removed (a regrade without them)."""
    out.mkdir(parents=True, exist_ok=True)
    frame = gradebook(results)
    frame.to_csv(out / "grades.csv", index=False)
    if not frame.empty:
        totals(frame).to_csv(out / "totals.csv")
        for assignment, part in frame.groupby("assignment"):
            wide = part.pivot_table(index="student_id", columns="exercise", values="score", aggfunc="sum")
            wide["total"] = wide.sum(axis=1)
            wide.columns.name = None
            wide.to_csv(out / f"wide_{assignment}.csv")
        pass_rates(frame).to_csv(out / "pass_rates.csv")
        _histogram(frame, out / "scores.png")
    eyes = frame[frame["status"].isin(NEEDS_EYES)]
    stuck = [{"student_id": r.student, "assignment": r.assignment, "notebook": r.notebook, "exercise": "(notebook)",
              "score": 0.0, "max_score": 0.0, "status": "timeout", "message": r.note}
             for r in results if r.stuck_cells]  # a cell of its own that was killed: no exercise shows it
    by_student: dict[str, list[NotebookResult]] = {}
    for result in results:
        by_student.setdefault(result.student, []).append(result)
    pages = page_names(by_student)
    renamed = [attention_row(student, "", "", None, RENAMED, _renamed_message(student, page, pages), "(feedback)")
               for student, page in pages.items() if page != f"{student}.html"]
    extra = pd.DataFrame(stuck + list(not_graded) + renamed, columns=frame.columns)
    if not extra.empty:
        eyes = extra if eyes.empty else pd.concat([eyes, extra], ignore_index=True)
    eyes.to_csv(out / "needs_attention.csv", index=False)
    feedback = out / "feedback"
    feedback.mkdir(exist_ok=True)
    for student, mine in by_student.items():
        (feedback / pages[student]).write_text(feedback_html(student, mine), encoding="utf-8")
    for stale in sorted(feedback.glob("*.html")):
        if stale.name not in set(pages.values()):
            stale.unlink()
    write_nbgrader_feedback(results, feedback, submitted)
    return frame


def _renamed_message(student: str, page: str, pages: dict[str, str]) -> str:
    if _safe(student) != student:
        why = "the id is not a plain file name"
    else:
        same = sorted(s for s in pages if s != student and s.casefold() == student.casefold())
        why = f"another id differs from it only in case: {', '.join(same)}"
    plain = _safe(student) + ".html"
    owner = [s for s, name in pages.items() if name == plain]
    also = f"; feedback/{plain} is {owner[0]}'s" if owner else ""
    return (f"{student}'s feedback page is feedback/{page} ({why}{also}); nbgrader's layout keeps the id as it is: "
            f"feedback/{student}/<assignment>/")


NBGRADER_SIDECARS = ("timestamp.txt", "submission_secret.txt")


def write_nbgrader_feedback(results: list[NotebookResult], feedback: Path,
                            submitted: Path | list[Path] | None = None) -> None:
    """The same feedback in nbgrader's layout, ``<student>/<assignment>/<notebook>.html``, one page
    per notebook, so that ``nbgrader release_feedback`` hands each student their own page.

    ``release_feedback`` also reads the ``timestamp.txt`` and ``submission_secret.txt`` that
    ``nbgrader collect`` put next to each submission (the secret is how the student's
    ``fetch_feedback`` finds their page): they are copied from ``submitted``, the folder that was
    graded, or the first of several folders in the same ``<student>/<assignment>/`` layout
    (a merge passes its shards' ``feedback/`` folders).
    """
    sources = [] if submitted is None else [submitted] if isinstance(submitted, (str, Path)) else list(submitted)
    graded = {(r.student, r.assignment) for r in results}
    for folder in sorted(feedback.glob("*/*/")):  # a page of a submission no longer graded (a regrade without it)
        student, assignment = folder.parent.name, folder.name
        if assignment in {a for _, a in graded} and (student, assignment) not in graded:
            for page in [*folder.glob("*.html"), *(folder / name for name in NBGRADER_SIDECARS)]:
                page.unlink(missing_ok=True)
    for r in results:
        if not r.student or r.student.startswith(".") or "/" in r.student or "\\" in r.student:
            continue  # never a path outside feedback/ (student ids are folder names of submitted/)
        folder = feedback / r.student / r.assignment
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{Path(r.notebook).stem}.html").write_text(feedback_html(r.student, [r]), encoding="utf-8")
        for name in NBGRADER_SIDECARS:
            found = [Path(s) / r.student / r.assignment / name for s in sources]
            found = [p for p in found if p.is_file()]
            if found:
                (folder / name).write_bytes(found[0].read_bytes())


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _histogram(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    per_student = frame.groupby("student_id")[["score", "max_score"]].sum()
    share = 100 * per_student["score"] / per_student["max_score"].where(per_student["max_score"] > 0, 1)
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.hist(share, bins=range(0, 105, 5), color="#3b528b", edgecolor="white")
    ax.set_xlabel("score (% of the points of the graded assignments)")
    ax.set_ylabel("students")
    ax.set_title(f"Scores of {len(per_student)} students")
    fig.tight_layout()
    # no version or date in the file: the same scores give the same bytes (a merge of shards
    # writes exactly what one run writes)
    fig.savefig(path, dpi=100, metadata={"Software": None})


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #222; }
table { border-collapse: collapse; width: 100%; margin-bottom: 1.5rem; }
th, td { border: 1px solid #ccc; padding: .4rem .6rem; text-align: left; vertical-align: top; }
.passed { color: #1a6d1a; } .failed, .error { color: #a3000b; } .timeout, .crashed, .missing, .invalid, .tampered { color: #8a4b00; }
td.msg { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: .85rem; }
"""


def feedback_html(student: str, results: list[NotebookResult]) -> str:
    """Per exercise: status, score, and every test's name and message (never a test's code)."""
    esc = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback for {esc(student)}</title><style>{STYLE}</style>"]
    parts.append(f"<h1>Feedback for {esc(student)}</h1>")
    for r in sorted(results, key=lambda r: r.assignment):
        parts.append(f"<h2>{esc(r.assignment)} · {r.score:g} / {r.max_score:g} points</h2>")
        if r.note:
            parts.append(f"<p>{esc(r.note)}</p>")
        parts.append("<table><tr><th>exercise</th><th>status</th><th>points</th><th>tests</th></tr>")
        for e in r.exercises:
            tests = "".join(
                f"<div><b>{esc(t.grade_id)}</b> ({'hidden' if t.hidden else 'visible'}, "
                f"{t.points:g}/{t.max_points:g}): <span class='{esc(t.status)}'>{esc(t.status)}</span>"
                + ("" if t.status == "passed" else f"<br>{esc(t.message)}")
                + "</div>"
                for t in e.tests
            )
            notes = "".join(f"<div>{esc(n)}</div>" for n in e.notes)
            parts.append(
                f"<tr><td>{esc(e.exercise)}</td><td class='{esc(e.status)}'>{esc(e.status)}</td>"
                f"<td>{e.score:g} / {e.max_score:g}</td><td class='msg'>{notes}{tests}</td></tr>"
            )
        parts.append("</table>")
        if r.output_tail.strip():
            parts.append(
                "<details><summary>The end of what your notebook printed while it was graded</summary>"
                f"<pre>{esc(r.output_tail[-4000:])}</pre></details>"
            )
    return "\n".join(parts) + "\n"


def summary(frame: pd.DataFrame, not_graded: dict[str, str] | None = None) -> str:
    """The text printed at the end of a run; ``not_graded`` (lesson -> reason) ends it, each
    lesson once with its whole reason."""
    lines = ["nothing was graded"] if frame.empty else _graded_summary(frame)
    if not_graded:
        several = len(not_graded) != 1
        lines.append(f"NOT GRADED: {len(not_graded)} lesson{'s' if several else ''} (each submission of "
                     f"{'them' if several else 'it'} is in needs_attention.csv with the status `not graded`):")
        for reason in not_graded.values():
            lines.append("  " + reason.replace("\n", "\n    "))
    return "\n".join(lines)


def _graded_summary(frame: pd.DataFrame) -> list[str]:
    """The totals, the statuses and the submissions an instructor should look at."""
    lines = [totals(frame).to_string(float_format=lambda v: "" if v != v else f"{v:g}", na_rep="")]
    counts = frame["status"].value_counts()
    lines.append("exercises: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts))
    eyes = frame[frame["status"].isin(NEEDS_EYES)]
    if not eyes.empty:
        lines.append("needs an instructor's eyes: " + ", ".join(
            sorted({f"{r.student_id}/{r.assignment} ({r.status})" for r in eyes.itertuples()})
        ))
    return lines
