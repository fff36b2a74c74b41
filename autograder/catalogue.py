"""A lesson's catalogue: the mistakes its checks must name, and correct answers written differently.

Each lesson keeps one in ``solutions/<assignment>/catalogue.toml``, beside its notebook. The
lesson's tests grade every entry (``tests/harness.py``), the demo class hands in the entries that
name a ``demo`` student (``autograder/demo.py``) and ``benchmarks/mutations.py`` counts them. The
entries quote the solution, so the file is never released (nbgrader's ``CourseDirectory.ignore``).

The format, one table an entry::

    [mistakes.head-no-scaling]            # a mistake; its name is a test's name
    exercise = "attention-head"           # the answer cell (grade_id) it is made in
    feedback_says = "forgot to scale"     # words the feedback for that exercise must contain
    edits = [[" / math.sqrt(self.head_dim)", ""]]   # (old, new) text edits of the solution's cell
    also.causal-mask = [["...", "..."]]   # optional: edits of other exercises that keep them
                                          # correct but make them use this one
    demo = "gus-no-scaling"               # optional: the demo class's student who hands it in

    [hidden_only.name]                    # the same, for a mistake only the hidden tests can see:
                                          # it loses the hidden tests' points, no more
    [alternatives.head-einsum]            # a correct answer written differently: full marks
    attention-head = '''...the whole answer cell...'''

    [requirements.attention-head]         # each "must" / "do not" sentence of the exercise's task
    "must work on a single sequence" = ["head-softmax-no-dim"]   # -> the mistakes that break it

Every mistake costs exactly its own exercise. An edit whose ``old`` text is no longer in the
solution raises :class:`CatalogueError` at once, so the catalogue follows the solution.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from autograder.course import Lesson, nbgrader_meta

FILENAME = "catalogue.toml"

Edits = tuple[tuple[str, str], ...]


class CatalogueError(ValueError):
    """A catalogue that does not fit its lesson."""


@dataclass(frozen=True)
class Mistake:
    name: str
    exercise: str
    edits: Edits
    feedback_says: str
    also: dict[str, Edits] = field(default_factory=dict)
    demo: str | None = None
    hidden_only: bool = False


@dataclass(frozen=True)
class Catalogue:
    lesson: Lesson
    mistakes: dict[str, Mistake]
    hidden_only: dict[str, Mistake]
    alternatives: dict[str, dict[str, str]]
    requirements: dict[str, dict[str, list[str]]]

    @property
    def assignment(self) -> str:
        return self.lesson.assignment

    def entries(self) -> dict[str, Mistake]:
        return {**self.mistakes, **self.hidden_only}

    def answers(self, mistake: Mistake) -> dict[str, str]:
        """Every answer of the lesson as the course wrote it, but with ``mistake`` made."""
        try:
            return answers_with(self.lesson, {**mistake.also, mistake.exercise: mistake.edits})
        except CatalogueError as exc:
            raise CatalogueError(f"{self.assignment}: {mistake.name}: {exc}") from None

    def alternative_answers(self, name: str) -> dict[str, str]:
        return {**self.lesson.solution_answers(), **self.alternatives[name]}

    def submissions(self) -> dict[str, dict[str, str]]:
        """``{name: answers}``: each mistake, each alternative, and ``correct``, the solution."""
        subs = {name: self.answers(m) for name, m in self.entries().items()}
        subs.update({name: self.alternative_answers(name) for name in self.alternatives})
        subs["correct"] = self.lesson.solution_answers()
        return subs


def apply_edits(text: str, edits: Edits) -> str:
    """``text`` (an answer cell, markers removed) with each ``(old, new)`` made; ``old`` must occur."""
    for old, new in edits:
        if old not in text:
            raise CatalogueError(f"the edit expects {old!r} in the solution")
        text = text.replace(old, new)
    return text


def answers_with(lesson: Lesson, edits: dict[str, Edits]) -> dict[str, str]:
    """The lesson's answers by grade_id, with ``edits`` ``{grade_id: edits}`` made."""
    answers = lesson.solution_answers()
    unknown = set(edits) - set(answers)
    if unknown:
        raise CatalogueError(f"{lesson.assignment} has no exercise {sorted(unknown)}")
    return {gid: apply_edits(source, edits.get(gid, ())) for gid, source in answers.items()}


def with_answers(release_nb: dict, answers: dict[str, str]) -> dict:
    """A copy of the released notebook with its answer cells replaced by ``answers``."""
    nb = copy.deepcopy(release_nb)
    for cell in nb["cells"]:
        gid = nbgrader_meta(cell).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    return nb


def _edits(value, where: str) -> Edits:
    if not isinstance(value, list) or not all(
        isinstance(e, list) and len(e) == 2 and all(isinstance(t, str) for t in e) for e in value
    ):
        raise CatalogueError(f"{where}: edits must be a list of [old, new] text pairs")
    return tuple((old, new) for old, new in value)


def _mistake(name: str, entry: dict, lesson: Lesson, hidden_only: bool) -> Mistake:
    where = f"{lesson.assignment}: {name}"
    extra = set(entry) - {"exercise", "feedback_says", "edits", "also", "demo"}
    if extra or not {"exercise", "feedback_says", "edits"} <= set(entry):
        raise CatalogueError(f"{where}: needs exercise, feedback_says and edits (unknown keys: {sorted(extra)})")
    if not all(isinstance(entry.get(key, ""), str) for key in ("exercise", "feedback_says", "demo")) \
            or not entry["feedback_says"].strip():
        raise CatalogueError(f"{where}: exercise, feedback_says and demo are text, and feedback_says is not empty")
    if entry["exercise"] not in lesson.exercises:
        raise CatalogueError(f"{where}: {entry['exercise']!r} is not an exercise of the lesson")
    also = {ex: _edits(e, f"{where}, also.{ex}") for ex, e in entry.get("also", {}).items()}
    if entry["exercise"] in also:
        raise CatalogueError(f"{where}: put the mistake's own edits in `edits`, not in `also`")
    return Mistake(name, entry["exercise"], _edits(entry["edits"], where), entry["feedback_says"], also,
                   entry.get("demo"), hidden_only)


def load_catalogue(lesson: Lesson, path: Path | None = None) -> Catalogue:
    """The catalogue beside ``lesson``'s notebook, or at ``path`` (an empty one where there is none)."""
    path = Path(path) if path is not None else Path(lesson.path).parent / FILENAME
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    unknown = set(data) - {"mistakes", "hidden_only", "alternatives", "requirements"}
    if unknown:
        raise CatalogueError(f"{path}: unknown tables {sorted(unknown)}")
    mistakes = {n: _mistake(n, e, lesson, False) for n, e in data.get("mistakes", {}).items()}
    hidden = {n: _mistake(n, e, lesson, True) for n, e in data.get("hidden_only", {}).items()}
    if set(mistakes) & set(hidden):
        raise CatalogueError(f"{path}: {sorted(set(mistakes) & set(hidden))} are both mistakes and hidden_only")
    alternatives = {}
    for name, answers in data.get("alternatives", {}).items():
        if not set(answers) <= set(lesson.exercises):
            raise CatalogueError(f"{path}: alternative {name} answers {sorted(set(answers) - set(lesson.exercises))}")
        alternatives[name] = {gid: source.strip() + "\n" for gid, source in answers.items()}
    requirements: dict[str, dict[str, list[str]]] = {}
    for ex, sentences in data.get("requirements", {}).items():
        for sentence, names in sentences.items():
            names = [names] if isinstance(names, str) else names
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise CatalogueError(f"{path}: requirements.{ex}: {sentence!r} must give names of mistakes")
            requirements.setdefault(ex, {})[sentence] = names
    return Catalogue(lesson, mistakes, hidden, alternatives, requirements)


__all__ = ["Catalogue", "CatalogueError", "FILENAME", "Mistake", "answers_with", "apply_edits", "load_catalogue",
           "with_answers"]
