"""The student's code raised: the error as data on the probe's side, and as a verdict on the judge's.

Two pairs, for two shapes of probe:

* ``attempt``/``fail_if_raised``: one call of the student's function per case, the error kept with
  its type, message and explanation (lessons 01 and 02);
* ``caught``/``raise_caught``: an error caught by a probe that goes on drawing more cases, with a
  hint chosen by the words of the error (lessons 07 and 08).

In both, ``explain_exception`` says where it was raised (the student's line), the tensors on that
line in the legend, and what the message means; an unfinished answer (``NotImplementedError``
raised outside PyTorch) and a check's own verdict pass through.
"""

from __future__ import annotations

import os

import torch

from helpers.checks.core import CheckFailed
from helpers.checks.diagnose import case_sizes, explain_exception


def attempt(fn, *args, sizes: dict[str, int] | None = None) -> dict:
    """Call the student's ``fn`` on one case of ``sizes``; an exception becomes data: its type,
    message and explanation (where it was raised, the tensors on that line). ``NotImplementedError``
    passes through: the exercise is not answered yet."""
    try:
        with case_sizes(sizes or {}):
            return {"out": fn(*args)}
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - any error of the student's code is data here
        explained = explain_exception(exc, sizes)
        return {"raised": type(exc).__name__, "message": str(exc)[:500], "value_error": isinstance(exc, ValueError),
                "explained": explained.rpartition("\n(The error itself:")[0][:1500]}


def fail_if_raised(what: str, run: dict, hint: str = "") -> None:
    """The student's code raised: say where and what it means (``hint``: the likely cause)."""
    if "raised" in run:
        kind, message, explained = run["raised"], run.get("message", ""), run.get("explained") or ""
        raise CheckFailed("\n".join(x for x in (f"{what} raised {kind}: {message}{hint}", explained) if x))


def caught(exc: BaseException, sizes: dict[str, int] | None = None) -> dict:
    """Probe side: an error of the student's code as data: its text, and ``explain_exception``'s
    account of it (their line, the tensors on it in the legend, what the message means). An
    unfinished answer (a NotImplementedError not raised by PyTorch) and a check's verdict go on."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    in_torch = tb is not None and tb.tb_frame.f_code.co_filename.startswith(os.path.dirname(torch.__file__))
    if isinstance(exc, CheckFailed) or (isinstance(exc, NotImplementedError) and not in_torch):
        raise exc
    explained = explain_exception(exc, sizes=sizes)  # ends with "TypeName: message", in brackets when explained
    head, _, plain = explained.rpartition("(The error itself: ")
    return {"error": (plain[:-1] if head else explained)[:1500], "explained": explained[:2500]}


def raise_caught(what: str, run, hints=()) -> None:
    """Judge side: fail when ``run`` holds an error (``caught``): where it was raised and what it
    means, then the hint of the first ``(needles, hint)`` with a needle in the error's text."""
    if not isinstance(run, dict) or "error" not in run:
        return
    error, explained = str(run["error"]), str(run.get("explained") or run["error"])
    hint = next((h for needle, h in hints if any(n in error for n in ([needle] if isinstance(needle, str) else needle))), None)
    raise CheckFailed("\n".join([f"{what} raised {error.split(':', 1)[0]}.", explained, *([hint] if hint else [])]))
