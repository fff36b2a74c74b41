"""Evidence for messages, shared by the checks' judges (``helpers.checks.core``) and the
diagnosis of a student's values and errors (``helpers.checks.diagnose``): what a student's function
returned, in words, and where two tensors differ. It imports nothing of the checks, so both can
import it.
"""

from __future__ import annotations

import re
from typing import Any

import torch


class Unsupported:
    """Stands for a value the probe could not turn into data (the judge says what it was)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"


def describe(value: Any) -> str:
    """A short description of what a student's function returned."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, Unsupported):
        numpy = (" (a NumPy value: return a Python number, int(...) or float(...), or a tensor, "
                 "torch.from_numpy(...))" if value.what.startswith("numpy.") else "")
        return f"a {value.what}{numpy}"
    if isinstance(value, (list, tuple)):  # a tuple arrives from the probe as a list
        items = ", ".join(describe(v) for v in value[:3]) + (", …" if len(value) > 3 else "")
        pair = (len(value) == 2 and all(isinstance(v, torch.Tensor) for v in value) and value[1].dtype == torch.int64
                and value[0].shape == value[1].shape)
        return (f"a tuple or list of {len(value)} items ({items})"[:300]
                + (" — torch.max, torch.min, torch.sort and torch.topk with dim= return a (values, indices) pair: "
                   "take .values or .indices (or use argmax)" if pair else ""))
    return re.sub(r" at 0x[0-9a-fA-F]+", "", f"{type(value).__name__} {value!r}")[:200]  # no address: same every run


def first_mismatch(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> str:
    """Where and by how much two same-shaped tensors first differ (for a failure message)."""
    exp, act = expected.double(), got.double()
    close = torch.isclose(act, exp, atol=atol, rtol=rtol, equal_nan=True)
    bad = (~close).nonzero()
    if len(bad) == 0:
        return "no mismatch"
    index = tuple(int(i) for i in bad[0])
    finite = torch.isfinite(exp) & torch.isfinite(act)
    diff = (exp - act).abs()[finite]
    worst = f"; largest difference {diff.max().item():.3g}" if diff.numel() and diff.max() > 0 else ""
    e, a = exp[index].item(), act[index].item()
    digits = 6 if f"{e:.6g}" != f"{a:.6g}" else 12
    return (
        f"{len(bad)} of {exp.numel()} entries differ; first at index {index}: "
        f"expected {e:.{digits}g}, got {a:.{digits}g}{worst}"
    )


def close(expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> bool:
    """``allclose`` in float64 that treats matching infinities and NaNs as equal."""
    return bool(
        torch.isclose(got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True).all()
    )
