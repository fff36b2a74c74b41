"""A check's record: what its probe sends to its judge when the grader runs a test cell.

The grader runs the probe next to the student's code, in a throw-away process, and the judge in
its own process: the record is what crosses between them, inside the child's line for the test
step (``autograder.protocol.StepLine``). It holds exactly one outcome:

* ``data``: the probe's JSON-ready data (``helpers.checks.core.encode``), for the judge;
* ``failed``: the probe found the student's object unusable (a wrong type, a missing method);
* ``error``: the student's code raised. The first line is ``TypeName: message``; what the course's
  diagnosis says the error means follows (``helpers.checks.diagnose.explain_exception``).
  ``not_implemented``: it was the blank answer's own ``NotImplementedError``.

With any outcome, ``notes``: what the student's code shows on its face (``diagnose.code_notes``: a
result thrown away, a loop that ends in its first pass...), added to the message when it fails.

The reader (:meth:`Record.from_json`) trusts nothing: the child's process ran the student's code,
so a field of the wrong type or a record with no outcome or two is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

_MISSING = object()


class MalformedRecord(ValueError):
    """Data that is not a record as :meth:`Record.to_json` writes it."""


@dataclass(frozen=True)
class Record:
    """One check's outcome in one test step: data for the judge, or why there is none."""

    check: str
    data: Any = _MISSING
    failed: str | None = None
    error: str | None = None
    not_implemented: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        outcomes = [self.data is not _MISSING, self.failed is not None, self.error is not None]
        if sum(outcomes) != 1:
            raise MalformedRecord(f"a record holds one of data, failed and error, not {sum(outcomes)}")

    @property
    def has_data(self) -> bool:
        return self.data is not _MISSING

    def to_json(self) -> dict:
        """The record as the child writes it: ``check`` and the fields of its one outcome."""
        notes = {"notes": list(self.notes)} if self.notes else {}
        if self.has_data:
            return {"check": self.check, "data": self.data, **notes}
        if self.failed is not None:
            return {"check": self.check, "failed": self.failed, **notes}
        return {"check": self.check, "error": self.error, "not_implemented": self.not_implemented, **notes}

    @classmethod
    def from_json(cls, value: Any) -> Record:
        """The record in ``value`` (decoded JSON), or :class:`MalformedRecord` saying what is wrong."""
        if not isinstance(value, dict):
            raise MalformedRecord(f"a record is an object, not {type(value).__name__}")
        unknown = sorted(set(value) - set(RECORD_KEYS))
        if unknown:
            raise MalformedRecord(f"a record has no field {unknown[0]!r}")
        if not isinstance(value.get("check"), str):
            raise MalformedRecord("a record names its check with a string")
        for key in ("failed", "error"):
            if key in value and not isinstance(value[key], str):
                raise MalformedRecord(f"a record's {key!r} is a string")
        if not isinstance(value.get("not_implemented", False), bool):
            raise MalformedRecord("a record's 'not_implemented' is true or false")
        notes = value.get("notes", [])
        if not isinstance(notes, list) or len(notes) > MAX_NOTES or not all(
                isinstance(n, str) and len(n) <= MAX_NOTE_CHARS for n in notes):
            raise MalformedRecord(f"a record's 'notes' is a list of at most {MAX_NOTES} strings")
        return cls(value["check"], value.get("data", _MISSING), value.get("failed"), value.get("error"),
                   value.get("not_implemented", False), tuple(notes))

    def with_notes(self, message: str) -> str:
        """A failing message with what the student's code shows on its face (``diagnose.code_notes``)."""
        return with_notes(message, self.notes)


def with_notes(message: str, notes) -> str:
    if not notes:
        return message
    return f"{message}\nIn your code: " + " ".join(notes)


#: the notes a record may carry, and their length (what ``diagnose.code_notes`` writes fits)
MAX_NOTES, MAX_NOTE_CHARS = 3, 1000
#: the fields a record may hold on the wire
RECORD_KEYS = tuple(f.name for f in fields(Record))
