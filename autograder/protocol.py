r"""What the grader's processes say to each other: one place for the files, lines and limits.

A grading job crosses three processes. The runner (the grader) sends the fork server a job: the
program's steps, a job folder and the limits. The server forks a child that runs the steps and
writes, in the job folder:

* ``RESULTS``: one JSON line per step, a :class:`StepLine` (how the step ended, its seconds, and
  for a test step the checks' :class:`~helpers.checks.record.Record`\ s), and a last line whose
  step is ``DONE`` when the program ran to its end;
* ``OUTPUT``: everything the student's code printed;
* ``PROGRESS``: the index of the step running now, followed by ``ALARM_MARK`` once that step's
  alarm has fired (the server reads it to kill a step that will not stop).

The server answers with the child's exit code and, for a step it killed, its index and whether
the step went on after its alarm. The judge (in the runner's process) reads the lines back with
``MAX_RESULTS_BYTES`` at most, through :meth:`StepLine.read`, and trusts none of them beyond
their decoded, checked fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from helpers.checks.record import (  # a check's record is the checks' own: helpers never import the grader
    MalformedRecord,
    Record,
)

RESULTS = "results.jsonl"
OUTPUT = "output.txt"
PROGRESS = "progress"
ALARM_MARK = b"!"
ALARM_OFFSET = 11  # PROGRESS holds the index right-aligned in 10 characters, a newline, then the mark
DONE = "__done__"
MAX_RESULTS_BYTES = 64 * 1024 * 1024

#: a step's line: how it ended
LINE_STATUSES = ("ok", "error", "timeout")


@dataclass(frozen=True)
class StepLine:
    """One line of ``RESULTS``: how one step ended. The child writes one per step it ran; the
    runner adds one for a step it killed (``stuck``); the judge reads them (:meth:`read`)."""

    step: str  # the step's id (``Step.id``), or DONE
    status: str = "ok"  # one of LINE_STATUSES
    s: float | None = None  # seconds the step ran (informative only)
    error: str = ""  # status "error": ``TypeName: message`` of what the step raised
    not_implemented: bool = False  # ... and it was the blank answer's NotImplementedError
    limit_s: float | None = None  # status "timeout": the step's limit
    records: tuple[Record, ...] | None = None  # a test step's checks, in the order they ran
    tampered: tuple[str, ...] = ()  # what the notebook replaced of the grader's (a test step)
    stuck: bool = False  # killed by the runner for running past its alarm (never written by the child)
    swallowed: bool = False  # ... and it went on after its alarm (a bare except swallowed it)
    #: set by the reader only: why the line as written is not a step line (the judge calls that tampering)
    malformed: str = ""

    def to_json(self) -> dict:
        """The line as written: every field that is not at its default (the step and its status always)."""
        line: dict[str, Any] = {"step": self.step, "status": self.status}
        for name in ("s", "limit_s"):
            if getattr(self, name) is not None:
                line[name] = getattr(self, name)
        for name in ("error", "not_implemented", "stuck", "swallowed"):
            if getattr(self, name):
                line[name] = getattr(self, name)
        if self.records is not None:
            line["records"] = [r.to_json() for r in self.records]
        if self.tampered:
            line["tampered"] = list(self.tampered)
        return line

    @classmethod
    def read(cls, value: Any) -> StepLine | None:
        """The step line in ``value`` (decoded JSON), ``None`` for what names no step; a line whose
        other fields are not what the child writes comes back with ``malformed`` saying why."""
        if not isinstance(value, dict) or not isinstance(value.get("step"), str):
            return None
        step = value["step"]
        try:
            return cls(step, **_fields(value))
        except (MalformedRecord, TypeError, ValueError) as exc:
            return cls(step, "error", malformed=str(exc))


def _fields(value: dict) -> dict:
    """``value``'s fields but its step, each checked; ``ValueError`` says which one is wrong."""
    unknown = sorted(set(value) - {"step", "status", "s", "error", "not_implemented", "limit_s", "records", "tampered",
                                   "stuck", "swallowed"})
    if unknown:
        raise ValueError(f"a step line has no field {unknown[0]!r}")
    status = value.get("status", "ok")
    if status not in LINE_STATUSES:
        raise ValueError(f"a step's status is one of {', '.join(LINE_STATUSES)}")
    found: dict[str, Any] = {"status": status}
    for name in ("s", "limit_s"):
        if name in value:
            number = value[name]
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ValueError(f"a step line's {name!r} is a number")
            found[name] = float(number)
    for name, kind in (("error", str), ("not_implemented", bool), ("stuck", bool), ("swallowed", bool)):
        if name in value:
            if not isinstance(value[name], kind):
                raise ValueError(f"a step line's {name!r} is a {kind.__name__}")
            found[name] = value[name]
    if "records" in value:
        if not isinstance(value["records"], list):
            raise ValueError("a step line's 'records' is a list")
        found["records"] = tuple(Record.from_json(r) for r in value["records"])
    if "tampered" in value:
        if not isinstance(value["tampered"], list):
            raise ValueError("a step line's 'tampered' is a list")
        found["tampered"] = tuple(str(t) for t in value["tampered"])
    return found


@dataclass(frozen=True)
class Limits:
    """Resource limits for one notebook run."""

    wall_s: float = 120.0  # the whole notebook, wall clock: the child is killed after this
    cell_s: float = 30.0  # one cell: an alarm raises CellTimeout inside it
    memory_mb: int = 2048  # address space the child may add to what the imports already use
    output_mb: int = 16  # largest file the child may write (its printed output included)
    #: largest submitted notebook the grader reads, MiB (``--max-notebook-mb``): a bigger one is
    #: ``invalid``, never parsed; not a limit of the child's, but it decides a grade, so it travels
    #: with the limits (into every cache key and manifest, to every Dask worker)
    notebook_mb: int = 20
    #: ``((grade_id, seconds), ...)``: the course's own cells (answers and tests) with a limit of
    #: their own, measured from the solution (``autograder.limits``); other cells get ``cell_s``
    steps: tuple[tuple[str, float], ...] = ()
    #: the course's grading salt: the checks draw their inputs from it
    #: (``helpers.checks.core.salted``); 0, the inputs as the checks write them. Not a limit, but
    #: it travels with them to every process that probes or judges; never written in a report
    salt: int = 0
    #: one-change variants of a failing answer tried for a verified repair (``autograder.repair``);
    #: 0: none tried. It changes what feedback says, so it travels with the limits too
    edits: int = 24

    def __post_init__(self):  # JSON gives lists: keep the limits hashable and comparable
        object.__setattr__(self, "steps", tuple((str(k), float(v)) for k, v in self.steps))

    def cell_limit(self, step_id: str) -> float:
        """Seconds step ``step_id`` may run before its alarm."""
        return dict(self.steps).get(step_id, self.cell_s)


@dataclass(frozen=True)
class LessonLimits:
    """Limits per lesson (measured from each lesson's own solution), and a default for the rest."""

    default: Limits
    lessons: tuple[tuple[str, Limits], ...] = ()

    def get(self, assignment: str) -> Limits:
        return dict(self.lessons).get(assignment, self.default)


def limits_for(limits: Limits | LessonLimits, assignment: str) -> Limits:
    """The limits one lesson's notebooks run under."""
    return limits.get(assignment) if isinstance(limits, LessonLimits) else limits


def limits_data(limits: Limits | LessonLimits) -> dict:
    """Plain data for a manifest or a cache key; ``limits_from_data`` reads it back."""
    def plain(lim: Limits) -> dict:  # the salt is the course's secret: not in a manifest
        return {k: v for k, v in asdict(lim).items() if k != "salt"}

    if isinstance(limits, LessonLimits):
        return {"default": plain(limits.default), "lessons": {a: plain(lim) for a, lim in limits.lessons}}
    return plain(limits)


def limits_from_data(data: dict) -> Limits | LessonLimits:
    if set(data) == {"default", "lessons"}:
        return LessonLimits(Limits(**data["default"]), tuple((a, Limits(**v)) for a, v in sorted(data["lessons"].items())))
    return Limits(**data)


#: the kind of a step that runs the course's own answer in place of a stuck one: the child runs it
#: like code, then forgets its source (the notebook's later cells must not read it)
COURSE = "course"


@dataclass(frozen=True)
class Step:
    """One thing for the child to run: a code cell of the student's, a course test cell, or the
    course's answer in place of a stuck one."""

    kind: str  # "code", "test" or COURSE
    id: str  # the cell's nbgrader grade_id, or "cell-<n>" for cells without one
    source: str


def progress_bytes(index: int) -> bytes:
    """What the child writes to ``PROGRESS`` when step ``index`` starts (its alarm not fired)."""
    return f"{index:>10}\n ".encode()


def read_progress(raw: bytes) -> tuple[int | None, bool]:
    """The step index in ``PROGRESS``'s bytes, and whether its alarm has fired."""
    try:
        return int(raw.split()[0]), raw[ALARM_OFFSET:ALARM_OFFSET + 1] == ALARM_MARK
    except (ValueError, IndexError):
        return None, False

