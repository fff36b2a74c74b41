"""What the plots accept: tensors, arrays or lists turned into numpy, checked, and token labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_VISIBLE_CHARS = {" ": "␣", "\n": "↵", "\t": "⇥"}
_MAX_TOKEN_CHARS = 12
# weights may stray this far outside [0, 1] through rounding before we call them wrong
_WEIGHT_TOLERANCE = 1e-4


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """A numpy copy of a tensor, array or nested list; tensors are detached and moved to CPU."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.is_complex():
            raise ValueError(f"{name} must be real, got a complex tensor of dtype {t.dtype}")
        if t.dtype == torch.bool:
            return t.numpy().copy()
        if t.is_floating_point():
            return t.to(torch.float64).numpy()
        return t.numpy().copy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # ragged lists and the like
        raise ValueError(f"{name} must be a tensor or array, got {type(x).__name__}") from err
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"{name} must be a tensor or numeric array, got {type(x).__name__}")
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must be real, got a complex array of dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        return arr.astype(np.float64)
    return arr.copy()


def _shape_str(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _matrix(x: Any, name: str) -> np.ndarray:
    """``x`` as a 2-D float array, or a ValueError that says what shape was expected."""
    arr = _to_numpy(x, name)
    if arr.ndim != 2:
        hint = ""
        if arr.ndim > 2:
            hint = " (pick one batch element and head first, e.g. x[0, 0])"
        raise ValueError(
            f"{name} must be a 2-D (queries x keys) matrix, got shape {_shape_str(arr.shape)}"
            + hint
        )
    if 0 in arr.shape:
        raise ValueError(f"{name} must not be empty, got shape {_shape_str(arr.shape)}")
    return arr.astype(np.float64)


def _check_weights(w: np.ndarray, name: str) -> None:
    """Raise a ValueError unless every entry of ``w`` is a number in [0, 1]."""
    nan_at = np.argwhere(np.isnan(w))
    if len(nan_at):
        where = _shape_str(tuple(int(i) for i in nan_at[0]))
        raise ValueError(
            f"{name} contain {len(nan_at)} NaN entries (first at index {where}); a softmax over "
            "a row whose scores are all -inf gives NaN"
        )
    lo, hi = float(np.min(w)), float(np.max(w))
    if lo < -_WEIGHT_TOLERANCE or hi > 1 + _WEIGHT_TOLERANCE:
        raise ValueError(
            f"{name} must lie in [0, 1], got values from {lo:.4g} to {hi:.4g}; "
            "did you forget the softmax? (use plot_query_key_products for raw scores)"
        )


def _render_token(tok: str) -> str:
    out = []
    for ch in tok:
        if ch in _VISIBLE_CHARS:
            out.append(_VISIBLE_CHARS[ch])
        elif not ch.isprintable():
            out.append(repr(ch)[1:-1])  # "\r", "\x00", ...
        else:
            out.append(ch)
    text = "".join(out) if out else "∅"
    if len(text) > _MAX_TOKEN_CHARS:
        text = text[: _MAX_TOKEN_CHARS - 1] + "…"
    # "$" would switch matplotlib into maths mode
    return text.replace("$", r"\$")


def _token_list(tokens: Any) -> list[str] | None:
    """``tokens`` as a list of strings (one per token), or None."""
    if tokens is None:
        return None
    if isinstance(tokens, str):
        return list(tokens)
    if isinstance(tokens, (torch.Tensor, np.ndarray)):
        tokens = tokens.tolist()
    if not isinstance(tokens, Sequence):
        raise ValueError(
            f"tokens must be a string or a list of strings, got {type(tokens).__name__}"
        )
    return [t if isinstance(t, str) else str(t) for t in tokens]


def _tick_labels(tokens: list[str] | None, n: int, axis: str) -> list[str]:
    """Tick labels "position: token" for an axis with ``n`` positions."""
    if tokens is None:
        return [str(i) for i in range(n)]
    if len(tokens) != n:
        raise ValueError(
            f"tokens has {len(tokens)} entries but the {axis} axis has {n} positions; "
            "pass one token per position"
        )
    return [f"{i}: {_render_token(t)}" for i, t in enumerate(tokens)]
