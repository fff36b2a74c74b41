"""The student's code raised: the error as data on the probe's side, and as a verdict on the judge's.

One record for an error of the student's code, in every check: ``caught`` turns an exception into ``{"error": "TypeName: message",
"kind": "TypeName", "message": ..., "value_error": ..., "explained": ..., "established": ...}``, where
``explained`` is ``explain_exception``'s account without the error's own line: where the student's
line raised, the tensors on that line in the case's legend, and what the message means; and
``established`` says whether those lines read the cause off the failing line (then the check's own
guesses are left out; only a size written in, a tensor looked up in a list and an elementwise ``*``
between the two sides of a matrix product set it: a cause the
message's meaning names, such as an attribute that is None, stands beside the guesses). ``attempt`` calls the
student's function once and returns ``{"out": value}`` (with ``outside``: the layers with weights it
called that are not part of the module, a layer built inside forward) or that record. On the judge's side,
``raise_caught`` turns a record into the failure message, with a hint chosen by the error's words,
and ``same_behaviour`` / ``outcome`` compare and describe what a case did when a mistake may make
the student's code raise on some inputs and not on others.

An unfinished answer (``NotImplementedError`` raised outside PyTorch) and a check's own verdict are
not data: they pass through.
"""

from __future__ import annotations

import os

import torch

from helpers.checks.core import CheckFailed, close, describe
from helpers.checks.diagnose import (
    ESTABLISHED,
    STAR_FOR_MATMUL,
    case_sizes,
    explain_exception_cause,
    outside_modules,
)

_ITSELF = "\n(The error itself: "


def caught(exc: BaseException, sizes: dict[str, int] | None = None) -> dict:
    """Probe side: an error of the student's code as data (see the module's docstring)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    in_torch = tb is not None and tb.tb_frame.f_code.co_filename.startswith(os.path.dirname(torch.__file__))
    if isinstance(exc, CheckFailed) or (isinstance(exc, NotImplementedError) and not in_torch):
        raise exc
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        message = ""
    explained, cause = explain_exception_cause(exc, sizes=sizes)
    return {"error": f"{type(exc).__name__}: {message}"[:600], "kind": type(exc).__name__, "message": message[:500],
            "value_error": isinstance(exc, ValueError),
            "explained": explained.rpartition(_ITSELF)[0][:2000] if _ITSELF in explained else "",
            "established": cause in (ESTABLISHED, STAR_FOR_MATMUL)}


def attempt(fn, *args, sizes: dict[str, int] | None = None) -> dict:
    """Call the student's ``fn`` on one case of ``sizes``: ``{"out": value}``, or ``caught``'s record.
    When ``fn`` is a module, or modules are among ``args``, ``outside`` lists the modules it called
    that are not part of them (a layer built inside forward)."""
    try:
        with case_sizes(sizes or {}), outside_modules(fn, *args) as outside:
            found = {"out": fn(*args)}
        return {**found, "outside": outside} if outside else found
    except Exception as exc:  # noqa: BLE001 - any error of the student's code is data here
        return caught(exc, sizes)


def raise_caught(what: str, run, hints=(), hint: str = "") -> None:
    """Judge side: fail when ``run`` holds an error: "``what`` raised TypeName: message", where it was
    raised and what it means, then ``hint`` (what the check established about the error) and the hint
    of the first ``(needles, hint)`` of ``hints`` with a needle in the error's text."""
    if not isinstance(run, dict) or "error" not in run:
        return
    error = str(run["error"])
    explained = run.get("explained") if isinstance(run.get("explained"), str) else ""
    told = f"{error}\n{explained}"  # the error and the explanation's lines (the tensors on the failing line)
    matched = None if run.get("established") is True else next(  # a cause read off the line: no guess beside it
        (h for needle, h in hints if any(n in told for n in ([needle] if isinstance(needle, str) else needle))), None)
    raise CheckFailed("\n".join(x for x in (f"{what} raised {error}", explained, hint.strip(), matched) if x))


def same_behaviour(got, wanted, tol: float) -> bool:
    """``got`` (a tensor or ``caught``'s record) behaves like ``wanted`` (a tensor, or the exception a
    catalogued mistake raises: the same error, word for word)."""
    if isinstance(wanted, BaseException):
        return isinstance(got, dict) and got.get("error") == f"{type(wanted).__name__}: {wanted}"[:600]
    return isinstance(got, torch.Tensor) and got.shape == wanted.shape and close(wanted, got, tol, tol)


def outcome(value) -> str:
    """What a case did, for a message: "raised TypeName: message" or "returned <description>"."""
    if isinstance(value, dict) and "error" in value:
        return f"raised {value['error']}"
    return f"returned {describe(value)}"
