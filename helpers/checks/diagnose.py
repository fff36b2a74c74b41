"""The diagnosis layer: what a wrong output or an error establishes about its cause.

(Stub: the interface other modules may already call; the probes behind it are being written.)
"""

from __future__ import annotations

import torch

from helpers.checks.core import first_mismatch

__all__ = ["explain_mismatch"]


def explain_mismatch(
    expected: torch.Tensor,
    got: torch.Tensor,
    *,
    what: str,
    atol: float,
    rtol: float,
    axes: tuple[str, ...] | None = None,
    sizes: dict[str, int] | None = None,
    again: torch.Tensor | None = None,
    alone: list[torch.Tensor] | None = None,
) -> str:
    """The message for an output that no catalogued mistake explains."""
    return f"{what} differs from the reference. Evidence: {first_mismatch(expected, got, atol, rtol)}."
