"""Words for shapes, axes and positions: the course's shape legend, a set of indices in words.

Shape legend: B batch, T time (sequence length), C embedding size (emb_dim), V vocabulary size
(n_vocab), nh heads (n_heads), hs head size (head_dim), H hidden size (n_hidden).
"""

from __future__ import annotations

import torch

__all__ = ["LEGEND", "legend_shape"]

#: the course's shape legend: letter -> the constructor argument it stands for
LEGEND = {
    "B": "batch",
    "T": "time",
    "C": "emb_dim",
    "V": "n_vocab",
    "nh": "n_heads",
    "hs": "head_dim",
    "H": "n_hidden",
}


#: letters a shape may show twice without a square matrix's reason: a second B, nh or n_kv is itself what
#: ``exceptions._axis_too_many`` reads (an axis added to a tensor that already had it)
TWICE_TELLS = ("B", "nh", "n_kv")


def _letter(size: int, sizes: dict[str, int] | None) -> str | None:
    """The legend letter whose size is ``size``, when exactly one has it (or one product, nh·hs or B·T,
    when no letter has it: heads side by side, or a batch flattened with its time axis)."""
    if not sizes:
        return None
    names = [k for k, v in sizes.items() if isinstance(v, int) and v == size]
    if len(names) == 1:
        return names[0]
    products = [f"{a}·{b}" for a, b in (("nh", "hs"), ("B", "T")) if isinstance(sizes.get(a), int)
                and isinstance(sizes.get(b), int) and sizes[a] > 1 and sizes[b] > 1 and sizes[a] * sizes[b] == size]
    return products[0] if not names and len(products) == 1 else None


def _name(letter: str) -> str:
    """'C (emb_dim)', 'B (batch)'."""
    word = LEGEND.get(letter)
    return f"{letter} ({word})" if word else letter


def legend_shape(shape, sizes: dict[str, int] | None) -> str:
    """'(2, 6, 3) = (B, T, hs)' when ``sizes`` names every dimension, '(2, 6, 3)' when none."""
    shape = tuple(int(n) for n in shape)
    plain = str(shape) if len(shape) != 1 else f"({shape[0]},)"
    letters = [_letter(n, sizes) for n in shape]
    for i, letter in enumerate(letters[:-1]):  # one letter twice: kept as a square matrix's two axes, (T, T), or
        square = i == len(shape) - 2 and letters[-1] == letter  # as an axis too many (TWICE_TELLS)
        if letter and letter in letters[i + 1:] and not square and letter not in TWICE_TELLS:
            letters[i] = None  # a size that coincides with a letter already used further on: its number only
    if not shape or not any(letters):
        return plain
    named = ", ".join(letter or str(n) for letter, n in zip(letters, shape, strict=True))
    return f"{plain} = ({named}{',' if len(shape) == 1 else ''})"


def _axis(k: int, axes: tuple[str, ...] | None) -> str:
    """'axis 1 (T)' or 'axis 1'."""
    if axes and 0 <= k < len(axes):
        return f"axis {k} ({axes[k]})"
    return f"axis {k}"


def _indices(found: list[int], n: int, axis_letter: str | None) -> str:
    """A set of positions along an axis of size n, in words: 'T ≥ 1', 'T = 5 (the last)', 'T in {0, 3}'."""
    label = axis_letter or "index"
    found = sorted(found)
    if len(found) == 1:
        i = found[0]
        last = " (the last)" if i == n - 1 and n > 1 else ""
        return f"{label} = {i}{last}"
    if found == list(range(found[0], n)):
        return f"{label} ≥ {found[0]}"
    if found == list(range(0, found[-1] + 1)):
        return f"{label} ≤ {found[-1]}"
    if found == list(range(found[0], found[-1] + 1)):
        return f"{found[0]} ≤ {label} ≤ {found[-1]}"
    shown = ", ".join(map(str, found[:8])) + (", …" if len(found) > 8 else "")
    return f"{label} in {{{shown}}}"


def _num(x: float) -> str:
    return f"{x:.4g}"


def _short(t: torch.Tensor) -> str:
    flat = t.reshape(-1)[:5].tolist()
    return "[" + ", ".join(_num(v) for v in flat) + (", …]" if t.numel() > 5 else "]")


def _first_six(values: torch.Tensor) -> str:
    return ", ".join(_num(v) for v in values[:6].tolist()) + (", …" if values.numel() > 6 else "")
