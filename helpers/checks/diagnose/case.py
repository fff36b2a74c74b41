"""What one comparison has to go on (:class:`_Case`), and where in it a mask falls, in words."""

from __future__ import annotations

import torch

from helpers.checks.diagnose.words import _axis, _indices
from helpers.checks.evidence import first_mismatch


class _Case:
    """What one comparison has to go on: the tensors in float64, tolerances, names of axes."""

    def __init__(self, expected, got, atol, rtol, axes, sizes, again, alone, dtype):
        self.expected, self.got = expected, got
        self.atol, self.rtol = float(atol), float(rtol)
        self.axes = tuple(axes) if axes is not None and len(axes) == expected.dim() else None
        self.sizes = dict(sizes) if isinstance(sizes, dict) else None
        self.again, self.alone = again, alone
        self.dtype = dtype if isinstance(dtype, torch.dtype) else expected.dtype
        self.e = expected.detach().double()
        self.g = got.detach().double() if got.dtype != torch.bool else got.detach().double()

    def close(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """``a`` is within tolerance of ``b`` (b plays the reference), matching NaN and inf."""
        return a.shape == b.shape and bool(
            torch.isclose(a.double(), b.double(), atol=self.atol, rtol=self.rtol, equal_nan=True).all()
        )

    def letter(self, k: int) -> str | None:
        return self.axes[k] if self.axes else None

    def evidence(self) -> str:
        return first_mismatch(self.e, self.g, self.atol, self.rtol)

    def finite(self) -> bool:
        return self.e.dim() >= 1 and bool(torch.isfinite(self.e).all() and torch.isfinite(self.g).all())

    def axes_of(self, at_least: int):
        """``(k, n)`` for every axis ``k`` of the reference with ``n >= at_least`` entries."""
        return [(k, n) for k, n in enumerate(self.e.shape) if n >= at_least]

    def slices(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference and the output as ``(n, rest)``: one row per entry of axis ``k``."""
        n = self.e.shape[k]
        return self.e.movedim(k, 0).reshape(n, -1), self.g.movedim(k, 0).reshape(n, -1)


def _where(mask: torch.Tensor, c: _Case, with_rest: bool = False) -> str:
    """Which positions along each axis a boolean mask touches, in words (only the axes where it
    touches some positions and not others): 'along axis 1 (T) only T ≥ 1 (T = 0 is not)'."""
    parts = []
    for k in range(mask.dim()):
        n = mask.shape[k]
        if n <= 1:
            continue
        hit = mask.movedim(k, 0).reshape(n, -1).any(dim=1)
        found = [int(i) for i in hit.nonzero().flatten()]
        if 0 < len(found) < n:
            letter = c.letter(k)
            text = f"along {_axis(k, c.axes)} only {_indices(found, n, letter)}"
            if with_rest:
                rest = [i for i in range(n) if i not in found]
                text += f" ({_indices(rest, n, letter)} is right)"
            parts.append(text)
    return "; ".join(parts)
