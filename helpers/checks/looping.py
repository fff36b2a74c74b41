"""A bound on the lines a student's function runs: a loop that never ends becomes a clear failure
(what the loop held halfway and at the end, in words), not a timeout of the whole test.

Used by the engine of function checks (``helpers.checks.functions``) for the checks that ask for
it: lesson 10's BPE functions (``helpers.checks.bpe``), whose loops run to a fixed point and are
the likeliest to spin.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager


class Looping(Exception):
    """Raised into the student's code when it has run far more steps than any answer needs."""

    def text(self) -> str:
        """What the loop held halfway and at the end, in words."""
        steps, half, end, name = self.args
        same = [k for k, v in end.items() if half.get(k) == v]
        text = f"after {steps:,} lines of your code had run, {name} was still in its loop: the loop does not end."
        if same:
            held = "; ".join(f"{k} = {end[k]!r}"[:120] for k in same[:3])
            text += (f" At line {steps // 2:,} and at line {steps:,} it held the same {held}: nothing in the loop "
                     "changes them, so every round repeats the same step. What should change each round does not: "
                     "is the index advanced, is each step's result stored back (ids = merge(ids, pair, new_id)), and "
                     "is what the loop chooses from (the pairs and their counts) computed again from the current ids?")
        return text


@contextmanager
def bounded(function, steps=100_000):
    """While active, the student's code (``function``'s file) that runs ``steps`` lines raises
    ``Looping``, with what its int-list locals held halfway and at the end (a loop that makes
    no progress shows the same list twice)."""
    code = getattr(function, "__code__", None)
    filename, count, seen = getattr(code, "co_filename", None), [0], {}

    def lists(frame):
        found = {k: v for k, v in frame.f_locals.items() if type(v) is int}
        return found | {k: list(v) for k, v in frame.f_locals.items() if isinstance(v, (list, bytes)) and len(v) < 500}

    def outer(frame):  # a comprehension runs in a frame of its own: look at the function around it
        while frame.f_code.co_name.startswith("<") and frame.f_back and frame.f_back.f_code.co_filename == filename:
            frame = frame.f_back
        return frame

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == steps // 2:
                seen["half"] = lists(outer(frame))
            elif count[0] >= steps:
                raise Looping(steps, seen.get("half", {}), lists(outer(frame)), outer(frame).f_code.co_name)
        return local

    saved = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename == filename else None)
    try:
        yield
    finally:
        sys.settrace(saved)
