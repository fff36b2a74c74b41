"""The mismatch diagnosis: the rules in order (``RULES``), ``explain_mismatch`` and ``diagnose``
that run them on a wrong output, and ``precision_lost`` for a float64 output computed in float32.

Every rule runs a probe on the data it is given (the reference's output, the student's, the
student's output on the same input a second time, on each batch element alone) and returns a
:class:`~helpers.checks.diagnose.finding.Finding`: what that probe established, with its evidence,
and the cause it names (``None`` for a rule that only says where). The first rule that establishes
something gives the message; when none does, the message is the plain comparison.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from helpers.checks.diagnose.case import _Case
from helpers.checks.diagnose.finding import NOTHING, Finding
from helpers.checks.diagnose.rules_form import rule_dtype, rule_shape
from helpers.checks.diagnose.rules_structure import (
    _correct,
    rule_fibre_factors,
    rule_localised,
    rule_permuted,
    rule_scrambled,
    rule_shifted,
    rule_slice_factors,
    rule_slice_offsets,
    rule_transposed,
)
from helpers.checks.diagnose.rules_values import (
    rule_batch,
    rule_determinism,
    rule_factor,
    rule_float32_precision,
    rule_nonfinite,
    rule_normalised_axis,
    rule_rounded,
)
from helpers.checks.evidence import close, describe, first_mismatch

#: every rule of the mismatch diagnosis, in the order they run (tests/test_diagnose_silence.py runs
#: each where its cause is absent); the rules that only describe, naming no cause, are ``DESCRIBE_ONLY``
RULES: list[Callable[[_Case], Finding]] = [
    rule_shape,
    rule_dtype,
    rule_nonfinite,
    rule_determinism,
    _correct,
    rule_batch,
    rule_rounded,  # before a factor: rounding to 0 everywhere is also "0 × the reference"
    rule_factor,
    rule_float32_precision,  # after a factor: a scale of 1 + 1e-6 is a factor, not rounding
    rule_transposed,  # an exact match of the data, before the properties a transpose also has
    rule_normalised_axis,
    rule_slice_factors,
    rule_fibre_factors,
    rule_slice_offsets,
    rule_permuted,
    rule_scrambled,
    rule_shifted,
    rule_localised,
]

#: the rules whose finding says where the output is wrong (or that it is right), never why
DESCRIBE_ONLY = (_correct, rule_localised)


def explain_mismatch(
    expected: torch.Tensor,
    got: Any,
    *,
    what: str,
    atol: float,
    rtol: float,
    axes: tuple[str, ...] | None = None,
    sizes: dict[str, int] | None = None,
    again: Any = None,
    alone: Any = None,
    dtype: torch.dtype | None = None,
) -> str:
    """The message for an output that no catalogued mistake explains (never raises).

    ``axes`` names the output's axes by legend letter, ``sizes`` the case's sizes by letter;
    ``again`` is the student's output on the same input a second time, ``alone`` the outputs for
    each batch element (index of axis 0) run alone; ``dtype`` the dtype the output should have
    (the input's: the reference often runs in float64 whatever the case's dtype). The message
    starts with ``what`` and states only what the rules below established.
    """
    try:
        return _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype)[1]
    except Exception:  # noqa: BLE001 - a diagnosis must never hide the failure it explains
        try:
            return f"{what} differs from the reference. Evidence: {first_mismatch(expected, got, atol, rtol)}."
        except Exception:  # noqa: BLE001
            return f"{what} differs from the reference."


def diagnose(expected, got, *, what, atol, rtol, axes=None, sizes=None, again=None, alone=None,
             dtype=None) -> tuple[str, str]:
    """``(rule, message)``: ``explain_mismatch``'s message and the name of the rule that
    established it ('generic' when none did, 'not_a_tensor', 'rule_shape', 'rule_localised'...)."""
    try:
        return _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype)
    except Exception:  # noqa: BLE001
        return "generic", explain_mismatch(expected, got, what=what, atol=atol, rtol=rtol)


def _explain(expected, got, what, atol, rtol, axes, sizes, again, alone, dtype) -> tuple[str, str]:
    if not isinstance(got, torch.Tensor):
        kind = describe(got) if isinstance(got, (list, tuple)) else f"a {getattr(got, 'what', None) or type(got).__name__}"
        extra = (" Return the output tensor alone: anything else you want to look at (weights, a cache) is not part "
                 "of the interface." if isinstance(got, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in got) else "")
        return "not_a_tensor", f"{what} should return a tensor of shape {tuple(expected.shape)}; it returned {kind}.{extra}"
    case = _Case(expected, got, atol, rtol, axes, sizes, again, alone, dtype)
    for rule in RULES:
        try:
            found = rule(case)
        except Exception:  # noqa: BLE001 - a rule that cannot run establishes nothing
            found = NOTHING
        if found:
            words = found.established
            note = getattr(case, "alone_note", "") if rule is rule_localised else ""
            if note and " Evidence:" in words:
                before, after = words.split(" Evidence:", 1)
                words = f"{before} {note} Evidence:{after}"
            return rule.__name__, f"{what}: {words}"
    note = getattr(case, "alone_note", "")
    note = f" {note}" if note else ""
    return "generic", f"{what} differs from the reference.{note} Evidence: {case.evidence()}."


def precision_lost(expected, got, what: str, dtype: torch.dtype, tol: float, in_float32) -> str | None:
    """For a float64 case: the message when ``got`` is no further from the reference than the
    reference's own float32 computation, ``in_float32()`` (a float64 result computed partly in
    float32), else None."""
    if dtype != torch.float64 or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    if close(expected, got, tol, tol) or not torch.isfinite(got).all():
        return None
    with torch.no_grad():
        noise = float((in_float32().double() - expected).abs().max())
    if float((got.double() - expected).abs().max()) > 10 * noise:
        return None
    return (
        f"{what}: the output is as close to the reference as a float32 computation of it (largest "
        f"difference within 10 times float32's {noise:.2g} here), but no closer: part of the computation ran "
        "in float32 (a .float() call, "
        "or a tensor created without dtype=, which is float32) before the result came back to "
        f"float64. Keep the input's dtype throughout. Evidence: {first_mismatch(expected, got, tol, tol)}."
    )
