"""The engine of a check of a function: the student's function called on each case, each output
judged against the reference's, a classic mistake named only when it explains every output.

A check of this kind is a :class:`Spec`, turned into the visible check and its hidden twin by
:func:`function_checks`. The probe calls the student's function on every case (``Spec.call``);
an error of the student's code becomes ``caught``'s record, a loop that never ends (with
``bounded``) a clear failure. The judge settles the cases in order, each in the same steps:

1. a loop that never ended;
2. an error of the student's code: ``raise_caught``, with ``on_error``'s hint;
3. an input the function changed in place (``changed``);
4. an output of the wrong kind (``form``);
5. expected vs got (``compare``: equal, or tensors within a tolerance by dtype); a right output
   may still fail for another reason (``right``: a dict in another order, a dtype not kept);
6. a wrong output: the classic mistakes whose output is the student's on every case that did not
   raise name it (:func:`named_mistakes`: the one place of that rule); otherwise ``wrong`` (by
   default: ``reading``'s words, or the first difference) says what the output establishes.

Data crosses as ``core.encode`` carries it (tensors included); a check whose outputs JSON cannot
hold as they are (a dict keyed by tuples) converts them in its ``call`` and back with ``read``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from helpers.checks.core import CheckFailed, expect_callable, runs, visible_and_hidden
from helpers.checks.diagnose import case_sizes, explain_mismatch
from helpers.checks.errors import caught, raise_caught
from helpers.checks.evidence import close, describe, first_mismatch
from helpers.checks.looping import Looping, bounded

__all__ = ["EXACT", "Compare", "Spec", "first_difference", "function_checks", "named_mistakes", "on_copy", "parting"]


@dataclass(frozen=True)
class Compare:
    """Expected vs got, item by item: tensors of one shape whose values agree within the tolerance
    of their dtypes (the looser of the two; none given: exactly), lists and tuples alike, dicts by
    key, anything else equal and of one type. A tensor's dtype is not compared: a check that
    wants it kept says so with a message of its own (``Spec.form`` or ``Spec.right``)."""

    tolerances: dict = field(default_factory=dict)

    def tolerance(self, *values) -> float:
        """The tolerance for these values: the largest of their dtypes' (0 for no tensor)."""
        return max((self.tolerances.get(v.dtype, 0.0) for v in values if isinstance(v, torch.Tensor)), default=0.0)

    def __call__(self, expected, got) -> bool:
        if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
            if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)) or expected.shape != got.shape:
                return False
            tol = self.tolerance(expected, got)
            return close(expected, got, tol, tol) if tol else torch.equal(expected, got)
        if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):  # a tuple arrives as a list
            return len(expected) == len(got) and all(self(e, g) for e, g in zip(expected, got, strict=True))
        if isinstance(expected, dict) and isinstance(got, dict):
            return expected.keys() == got.keys() and all(self(expected[k], got[k]) for k in expected)
        return type(expected) is type(got) and expected == got


EXACT = Compare()


@dataclass(frozen=True)
class Spec:
    """What a function check needs; the hooks' ``what`` is the call in words, "label(arguments)".

    Probe side: ``call(function, case) -> dict``, one run: ``{"out": ...}``, with ``"input_changed"``
    when the check watches its input (:func:`on_copy` does both; a string there is the call's own
    words for what changed, said instead of ``changed``); ``sizes(case)``: the legend's
    sizes that explain an error of the student's code; ``around(function)``: a context manager
    around all the calls; ``bounded``: a loop that runs too long fails (``helpers.checks.looping``).

    Judge side: ``expected(case)``, the reference's output; ``variants(case)``, each classic
    mistake's output by the words that name it; ``arguments(case)``, the arguments in words;
    ``summary``, what a pass checked (or a function of the cases); ``read(out)``, an output back
    from data; ``compare``; ``on_error(case, error) -> hint``; ``changed``, the words after ``what``
    for an input changed in place; ``form``, ``right`` and ``wrong(what, case, got, expected, run)``
    (``form`` without ``expected``): a message, or None to go on; ``reading(case, got,
    expected)``: words for a wrong output (the default ``wrong``'s); ``evidence(case, expected,
    got)``: the evidence a named mistake is shown with."""

    label: str
    call: Callable[[Any, Any], dict]
    expected: Callable[[Any], Any]
    variants: Callable[[Any], dict[str, Any]]
    arguments: Callable[[Any], str]
    summary: str | Callable[[Any], str]
    read: Callable[[Any], Any] | None = None
    compare: Compare = EXACT
    sizes: Callable[[Any], dict[str, int]] | None = None
    around: Callable[[Any], Any] | None = None
    bounded: bool = False
    on_error: Callable[[Any, str], str | None] | None = None
    changed: str = "changed its input in place: return a new value and leave the input alone."
    form: Callable[..., str | None] | None = None
    right: Callable[..., str | None] | None = None
    wrong: Callable[..., str] | None = None
    reading: Callable[[Any, Any, Any], str | None] | None = None
    evidence: Callable[[Any, Any, Any], str] | None = None


def function_checks(name: str, spec: Spec, cases, hidden_cases, vary=None):
    """The visible check ``name`` and its hidden twin: ``spec``'s probe and judge on each list of
    cases (``vary``: how grading varies a case, as in ``core.visible_and_hidden``)."""
    return visible_and_hidden(name, lambda group: _probe(spec, group), lambda group: _judge(spec, group), cases,
                              hidden_cases, vary)


def on_copy(function, first, *rest, plain=None) -> dict:
    """Probe side: ``function`` called on a copy of its first argument (a tensor, list or dict) and
    the rest: ``{"out": ..., "input_changed": whether it changed that copy in place}``. ``plain``:
    what the output becomes as data (by default, the output as it is)."""
    given = first.clone() if isinstance(first, torch.Tensor) else type(first)(first) if isinstance(first, (list, dict)) else first
    out = function(given, *rest)
    if isinstance(first, torch.Tensor):
        changed = given.shape != first.shape or not torch.equal(given, first)
    else:
        changed = given != first
    return {"out": plain(out) if plain else out, "input_changed": changed}


def _probe(spec: Spec, cases):
    def probe(function) -> dict:
        expect_callable(function, spec.label)
        found = []
        with spec.around(function) if spec.around else contextlib.nullcontext():
            for case in cases:
                sizes = spec.sizes(case) if spec.sizes else None
                try:
                    with bounded(function) if spec.bounded else contextlib.nullcontext(), \
                            case_sizes(sizes) if sizes is not None else contextlib.nullcontext():
                        found.append(spec.call(function, case))
                except Looping as exc:
                    found.append({"looping": exc.text()})
                except Exception as exc:  # noqa: BLE001 - the error is evidence
                    found.append(caught(exc, sizes))
        return {"runs": found}

    return probe


def named_mistakes(index: int, tables: list[dict], outputs: list, found: list[dict], compare: Compare) -> list[str]:
    """The mistakes of case ``index``'s table whose output is the student's (``outputs``) in every
    case that did not raise (``found``: the runs): a cause is named only when it is verified on
    every case checked. An error says nothing either way; a case whose table lacks a mistake
    does not verify it."""
    return [name for name in tables[index]
            if all(name in table and compare(table[name], out)
                   for table, out, run in zip(tables, outputs, found, strict=True) if "error" not in run)]


def _judge(spec: Spec, cases):
    def judge(data: dict) -> str:
        found = runs(data, len(cases))
        outputs = [spec.read(run.get("out")) if spec.read else run.get("out") for run in found]
        tables = None  # each case's mistakes, built when an output is wrong
        for index, (case, run) in enumerate(zip(cases, found, strict=True)):
            what = f"{spec.label}({spec.arguments(case)})"
            if "looping" in run:
                raise CheckFailed(f"{what} did not finish: {run['looping']}")
            if "error" in run:
                raise_caught(what, run, hint=(spec.on_error(case, str(run["error"])) if spec.on_error else None) or "")
            if changed := run.get("input_changed"):  # True, or the call's own words for what changed
                raise CheckFailed(f"{what} {changed if isinstance(changed, str) else spec.changed}")
            got = outputs[index]
            if spec.form and (message := spec.form(what, case, got, run)):
                raise CheckFailed(message)
            expected = spec.expected(case)
            if spec.compare(expected, got):
                if spec.right and (message := spec.right(what, case, got, expected, run)):
                    raise CheckFailed(message)
                continue
            tables = tables or [spec.variants(c) for c in cases]
            named = named_mistakes(index, tables, outputs, found, spec.compare)
            evidence = (spec.evidence or _evidence(spec.compare))(case, expected, got)
            if len(named) == 1:
                raise CheckFailed(f"{what}: {named[0]}. Evidence: {evidence}.")
            if named:
                raise CheckFailed(f"{what}: your output is what each of these mistakes gives, in every case of this "
                                  f"check: {'; or '.join(named[:3])}. Evidence: {evidence}.")
            raise CheckFailed((spec.wrong or _wrong(spec))(what, case, got, expected, run))
        return spec.summary(cases) if callable(spec.summary) else spec.summary

    return judge


def _evidence(compare: Compare):
    """The default evidence: a tensor's first difference, else both values (cut short)."""
    def evidence(case, expected, got) -> str:
        if isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor) and expected.shape == got.shape:
            tol = compare.tolerance(expected, got)
            return first_mismatch(expected, got, tol, tol)
        return f"expected {expected!r}, got {got!r}"[:700]

    return evidence


def _wrong(spec: Spec):
    """The default message for a wrong output no mistake names: ``reading``'s words, or the
    diagnosis of a tensor, or the first position where a sequence differs."""
    def wrong(what, case, got, expected, run) -> str:
        words = spec.reading(case, got, expected) if spec.reading else None
        if not words and isinstance(expected, torch.Tensor):
            tol = spec.compare.tolerance(expected, got)
            return explain_mismatch(expected, got, what=what, atol=tol, rtol=tol, sizes=spec.sizes(case) if spec.sizes else None)
        if not words:
            sequences = all(isinstance(v, (list, tuple, str)) for v in (expected, got))
            words = "wrong output: " + (first_difference(expected, got) if sequences else
                                        f"{describe(got)} where the reference returns {describe(expected)}")
        evidence = (spec.evidence or _evidence(spec.compare))(case, expected, got)
        return f"{what}: {words}{'' if words.endswith('?') else '.'} Evidence: {evidence}."

    return wrong


def parting(a, b) -> int:
    """The first position where two sequences differ (the shorter one's length when one starts the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def first_difference(expected, got) -> str:
    """Where the student's sequence first departs from the reference's, in words."""
    p = parting(expected, got)
    head = f"they agree up to position {p - 1}, then " if p else "they differ from the first position: "
    if p in (len(got), len(expected)):
        return head + (f"yours ends where the reference goes on with {expected[p:][:6]}" if p == len(got)
                       else f"yours goes on with {got[p:][:6]} after the reference's last item")
    return f"{head}position {p} is {got[p]!r} where the reference has {expected[p]!r}"
