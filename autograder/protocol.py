"""What the grader's processes say to each other: one place for the files, lines and limits.

A grading job crosses three processes. The runner (the grader) sends the fork server a job: the
program's steps, a job folder and the limits. The server forks a child that runs the steps and
writes, in the job folder:

* ``RESULTS``: one JSON line per step, ``{"step": id, "kind": "code" | "test", "status": ...,
  "s": seconds}``, plus ``records`` for a test step (each a check's probe data, see
  ``RECORD_KEYS``), and a last line ``{"step": DONE}`` when the program ran to its end;
* ``OUTPUT``: everything the student's code printed;
* ``PROGRESS``: the index of the step running now, followed by ``ALARM_MARK`` once that step's
  alarm has fired (the server reads it to kill a step that will not stop).

The server answers with the child's exit code and, for a step it killed, its index and whether
the step went on after its alarm. The judge (in the runner's process) reads the lines back with
``MAX_RESULTS_BYTES`` at most and trusts none of them beyond their decoded, checked fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

RESULTS = "results.jsonl"
OUTPUT = "output.txt"
PROGRESS = "progress"
ALARM_MARK = b"!"
ALARM_OFFSET = 11  # PROGRESS holds the index right-aligned in 10 characters, a newline, then the mark
DONE = "__done__"
MAX_RESULTS_BYTES = 64 * 1024 * 1024

#: a step's line: how it ended
LINE_STATUSES = ("ok", "error", "timeout")
#: the keys of one check's record in a test step's line (``helpers.checks.core.Check.record``):
#: ``check`` always; then ``data`` (the probe's JSON-ready data), or ``failed`` (the probe found
#: the object unusable), or ``error``/``not_implemented``/``traceback`` (the student's code raised)
RECORD_KEYS = ("check", "data", "failed", "error", "not_implemented", "traceback")


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

