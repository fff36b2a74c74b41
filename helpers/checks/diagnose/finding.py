"""What one rule of the diagnosis layer established, and whether that names a cause.

Every rule (a mismatch rule of ``rules_*``, a broadcast hint of ``clashes``, the table of error
meanings) returns a :class:`Finding`: its words, and the cause those words name, or ``None`` when
they only describe (where the output is wrong, what PyTorch's message means) or say nothing. A
caller asks ``finding.cause``, never the words.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NOTHING", "Finding", "named"]


@dataclass(frozen=True)
class Finding:
    """``established``: what the rule's probe established, in words ("" when nothing); ``cause``:
    the likely mistake those words name (a short key such as ``"sign flipped"``), or ``None``."""

    established: str = ""
    cause: str | None = None

    def __bool__(self) -> bool:
        return bool(self.established)

    def __add__(self, more: Finding) -> Finding:
        """Both texts, one after the other; the first cause named."""
        return Finding(self.established + more.established, self.cause or more.cause)


#: a rule that established nothing
NOTHING = Finding()


def named(words: str | None, cause: str) -> Finding:
    """A rule whose words, when it has any, name ``cause``."""
    return Finding(words, cause) if words else NOTHING
