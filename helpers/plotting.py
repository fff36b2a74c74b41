"""Pictures of attention: query-key products, attention weights, causal masks, head grids, losses,
and how many tokens a sampling filter keeps.

Every function takes tensors (``torch.Tensor``; numpy arrays and nested lists work too), draws
one figure and returns ``(fig, ax)`` (``(fig, axes)`` for grids). Nothing here calls
``plt.show()`` or changes matplotlib's global settings, so the functions are safe in notebooks,
in tests and in the rendered book. Pass ``ax=`` to draw into an axes you made yourself; the
function then returns ``(ax.figure, ax)``. Tensors may require grad and may live on a GPU: they
are detached and copied to the CPU before drawing.

Shapes (the letters used in the docstrings and error messages):

====  ==========================================================
T     sequence length (number of tokens)
T_q   number of query positions (rows of a score or weight matrix)
T_k   number of key positions (columns)
H     number of attention heads in a layer
L     number of layers
====  ==========================================================

Row ``i``, column ``j`` of a matrix is "query ``i`` looking at key ``j``"; queries run down the
y axis, keys along the x axis, position 0 at the top left.

``tokens`` labels the axes. It is either a string (one character per token, as in a character
level model) or a list of strings (one per token); its length must equal the number of positions.
Characters that would be invisible are drawn as symbols: space as ``␣``, newline as ``↵``, tab as
``⇥``. Tick labels read ``"position: token"``, e.g. ``"0: T"``.

Accessibility: the colour maps are readable in greyscale and by colour-blind readers ("RdBu_r"
for signed scores, "cividis" for weights), small matrices have their values written in the cells,
masked (-inf) cells are light grey *and* hatched, and every colour scale has a labelled colorbar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.collections import PatchCollection
from matplotlib.colors import BoundaryNorm, ListedColormap, Normalize, to_rgba
from matplotlib.patches import Rectangle

__all__ = [
    "plot_attention_grid",
    "plot_bars",
    "plot_attention_weights",
    "plot_causal_mask",
    "plot_loss_curves",
    "plot_query_key_products",
    "plot_tokens_kept",
]

#: colour of masked (-inf) cells and of hidden positions in a causal mask
MASKED_COLOR = "#d4d4d4"
#: colour of the hatching drawn over masked cells, so they stand out in greyscale too
MASKED_HATCH_COLOR = "#8c8c8c"
#: colour of visible positions in a causal mask (dark, so it contrasts with the light grey)
VISIBLE_COLOR = "#1d3f6e"
#: colour map for signed query-key products (diverging, colour-blind safe, light at 0)
DIVERGING_CMAP = "RdBu_r"
#: colour map for attention weights in [0, 1] (sequential, colour-blind safe, monotone lightness)
WEIGHTS_CMAP = "cividis"
#: write each value in its cell when the matrix has at most this many cells
ANNOTATE_MAX_CELLS = 144
#: colorbar label of attention weights
WEIGHTS_LABEL = "weight (each row sums to 1)"
#: the label that says what grey means, added to the colorbar when a matrix has -inf entries
MASKED_NOTE = "grey = masked (-inf)"

# Okabe-Ito colours: distinguishable by colour-blind readers (black is left for references).
_LINE_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_REFERENCE_DASHES = [(0, (6, 3)), (0, (2, 2)), (0, (8, 3, 2, 3)), (0, (4, 4))]
_VISIBLE_CHARS = {" ": "␣", "\n": "↵", "\t": "⇥"}
_MAX_TOKEN_CHARS = 12
# weights may stray this far outside [0, 1] through rounding before we call them wrong
_WEIGHT_TOLERANCE = 1e-4


# ---------------------------------------------------------------------------------------------
# input handling
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# drawing helpers
# ---------------------------------------------------------------------------------------------


def _heatmap_figsize(n_rows: int, n_cols: int) -> tuple[float, float]:
    width = min(12.0, max(4.8, 0.5 * n_cols + 3.0))
    height = min(11.0, max(4.0, 0.5 * n_rows + 2.0))
    return width, height


def _axes(ax, figsize: tuple[float, float]):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax


def _cell_points(ax, n_rows: int, n_cols: int) -> float:
    """Rough size of one cell in points (before the layout engine has run)."""
    fig = ax.figure
    pos = ax.get_position()
    try:
        fig_w, fig_h = fig.get_size_inches()
    except AttributeError:  # a SubFigure
        fig_w, fig_h = fig.figure.get_size_inches()
    cell_w = fig_w * pos.width * 72 / n_cols
    cell_h = fig_h * pos.height * 72 / n_rows
    return max(1.0, min(cell_w, cell_h))


def _set_ticks(
    ax,
    n_rows: int,
    n_cols: int,
    row_labels: list[str],
    col_labels: list[str],
    *,
    show_x: bool = True,
    show_y: bool = True,
    max_fontsize: float = 10.0,
) -> None:
    """Put one tick per position (thinned out when cells are tiny) with readable labels."""
    cell = _cell_points(ax, n_rows, n_cols)
    fontsize = float(np.clip(cell * 0.75, 5.0, max_fontsize))
    step = max(1, math.ceil(fontsize * 1.1 / cell))
    ys = list(range(0, n_rows, step))
    xs = list(range(0, n_cols, step))
    ax.set_yticks(ys, [row_labels[i] for i in ys] if show_y else [""] * len(ys))
    ax.set_xticks(xs, [col_labels[i] for i in xs] if show_x else [""] * len(xs))
    ax.tick_params(axis="both", labelsize=fontsize, length=2)
    widest = max(len(col_labels[i]) for i in xs)
    if widest * fontsize * 0.58 > cell * step:
        ax.tick_params(axis="x", labelrotation=90)


def _axis_titles(ax, has_tokens: bool, *, x: bool = True, y: bool = True) -> None:
    if x:
        ax.set_xlabel("key (position: token)" if has_tokens else "key position")
    if y:
        ax.set_ylabel("query (position: token)" if has_tokens else "query position")


def _cell_separators(ax, n_rows: int, n_cols: int) -> None:
    """Thin white lines between cells, so neighbouring cells of similar colour stay apart."""
    if max(n_rows, n_cols) > 24:
        return
    ax.set_xticks(np.arange(-0.5, n_cols, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, n_rows, 1.0), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.grid(which="major", visible=False)
    ax.tick_params(which="minor", length=0)


def _relative_luminance(rgba) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _text_color(background) -> str:
    """Black or white, whichever contrasts more with ``background`` (WCAG contrast ratio)."""
    lum = _relative_luminance(to_rgba(background))
    on_black = (lum + 0.05) / 0.05
    on_white = 1.05 / (lum + 0.05)
    return "black" if on_black >= on_white else "white"


def _format_value(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    text = f"{v:.2f}"
    return "0.00" if text == "-0.00" else text


def _annotate(ax, values: np.ndarray, image) -> None:
    """Write each value in its cell, in black or white for contrast with the cell's colour."""
    texts = [[_format_value(float(v)) for v in row] for row in values]
    widest = max(len(t) for row in texts for t in row)
    cell = _cell_points(ax, *values.shape)
    fontsize = float(np.clip(0.9 * cell / (0.62 * widest), 4.5, 10.0))
    colours = image.to_rgba(image.get_array())
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=fontsize,
                color=_text_color(colours[i, j]),
            )


def _hatch_cells(ax, cells: np.ndarray) -> None:
    """Hatch the given (row, column) cells so they stand out without colour."""
    if len(cells) == 0:
        return
    rects = [Rectangle((j - 0.5, i - 0.5), 1.0, 1.0) for i, j in cells]
    hatching = PatchCollection(
        rects,
        facecolor="none",
        edgecolor=MASKED_HATCH_COLOR,
        linewidth=0.0,
        hatch="///",
        zorder=1.5,
    )
    ax.add_collection(hatching, autolim=False)


# ---------------------------------------------------------------------------------------------
# the plots
# ---------------------------------------------------------------------------------------------


def plot_query_key_products(scores, tokens=None, *, ax=None, title="Query-key products"):
    """Heatmap of a (T_q, T_k) matrix of query-key products (attention scores before softmax).

    The colour map is diverging and centred on 0 (limits +-max |finite entry|): positive scores
    are red, negative ones blue, zero is white. Entries that are -inf (masked) are light grey and
    hatched, and the colorbar label then says ``"grey = masked (-inf)"``. With at most
    ``ANNOTATE_MAX_CELLS`` cells every value is written in its cell (2 decimals, ``-inf`` for
    masked entries).

    Returns ``(fig, ax)``; the image is ``ax.images[0]`` and its colorbar ``ax.images[0].colorbar``.
    """
    values = _matrix(scores, "scores")
    n_q, n_k = values.shape
    toks = _token_list(tokens)
    row_labels = _tick_labels(toks, n_q, "query")
    col_labels = _tick_labels(toks, n_k, "key")

    finite = np.isfinite(values)
    limit = float(np.max(np.abs(values[finite]))) if finite.any() else 0.0
    if not limit > 0:  # all zero, all masked: any symmetric range will do
        limit = 1.0
    masked = np.ma.masked_invalid(values)
    cmap = plt.get_cmap(DIVERGING_CMAP).with_extremes(bad=MASKED_COLOR)
    norm = Normalize(vmin=-limit, vmax=limit)

    fig, ax = _axes(ax, _heatmap_figsize(n_q, n_k))
    image = ax.imshow(masked, cmap=cmap, norm=norm, interpolation="nearest", aspect="equal")
    _hatch_cells(ax, np.argwhere(~finite))

    label = "query·key product"
    notes = []
    if np.isneginf(values).any():
        notes.append(MASKED_NOTE)
    if np.isnan(values).any() or np.isposinf(values).any():
        notes.append("grey = nan / +inf")
    if notes:
        label += "\n" + ", ".join(notes)
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label(label)

    _set_ticks(ax, n_q, n_k, row_labels, col_labels)
    _axis_titles(ax, toks is not None)
    _cell_separators(ax, n_q, n_k)
    ax.set_title(title)
    if values.size <= ANNOTATE_MAX_CELLS:
        _annotate(ax, values, image)
    return fig, ax


def plot_attention_weights(weights, tokens=None, *, ax=None, title="Attention weights"):
    """Heatmap of a (T_q, T_k) matrix of attention weights (softmax of the scores, rows sum to 1).

    The colour map is sequential ("cividis") from 0 (dark) to 1 (light), fixed so that plots can
    be compared. Values must lie in [0, 1] and must not be NaN; otherwise a ValueError says what
    is wrong. With at most ``ANNOTATE_MAX_CELLS`` cells every weight is written in its cell.

    Returns ``(fig, ax)``; the image is ``ax.images[0]`` and its colorbar ``ax.images[0].colorbar``.
    """
    values = _matrix(weights, "weights")
    _check_weights(values, "weights")
    n_q, n_k = values.shape
    toks = _token_list(tokens)
    row_labels = _tick_labels(toks, n_q, "query")
    col_labels = _tick_labels(toks, n_k, "key")

    fig, ax = _axes(ax, _heatmap_figsize(n_q, n_k))
    image = ax.imshow(
        values, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal"
    )
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label(WEIGHTS_LABEL)

    _set_ticks(ax, n_q, n_k, row_labels, col_labels)
    _axis_titles(ax, toks is not None)
    _cell_separators(ax, n_q, n_k)
    ax.set_title(title)
    if values.size <= ANNOTATE_MAX_CELLS:
        _annotate(ax, values, image)
    return fig, ax


def _mask_visibility(mask_or_seq_len) -> np.ndarray:
    """A (T_q, T_k) bool array, True where the query may attend to the key."""
    if isinstance(mask_or_seq_len, (bool, np.bool_)):
        raise ValueError("mask_or_seq_len must be a sequence length (int) or a mask, got a bool")
    if isinstance(mask_or_seq_len, (int, np.integer)):
        n = int(mask_or_seq_len)
        if n < 1:
            raise ValueError(f"the sequence length must be at least 1, got {n}")
        return np.tril(np.ones((n, n), dtype=bool))

    arr = _to_numpy(mask_or_seq_len, "mask")
    if arr.ndim != 2:
        hint = " (e.g. mask[0, 0] for a (1, 1, T, T) buffer)" if arr.ndim > 2 else ""
        raise ValueError(
            f"mask must be a 2-D (queries x keys) matrix, got shape {_shape_str(arr.shape)}" + hint
        )
    if 0 in arr.shape:
        raise ValueError(f"mask must not be empty, got shape {_shape_str(arr.shape)}")
    if arr.dtype == np.bool_:
        return arr
    if np.issubdtype(arr.dtype, np.integer):
        if not np.isin(arr, (0, 1)).all():
            raise ValueError("an integer mask must contain only 0 (hidden) and 1 (visible)")
        return arr == 1
    # floating point
    if np.isnan(arr).any():
        raise ValueError("mask contains NaN; use -inf for hidden positions")
    if not np.isneginf(arr).any() and np.isin(arr, (0.0, 1.0)).all() and (arr == 1.0).any():
        return arr == 1.0  # a 0/1 mask such as torch.tril(torch.ones(T, T))
    return ~np.isneginf(arr)  # scores or an additive mask: -inf is hidden


def plot_causal_mask(mask_or_seq_len, tokens=None, *, ax=None, title="Causal mask"):
    """Which keys each query may attend to, in two colours: dark = visible, light grey = hidden.

    ``mask_or_seq_len`` is one of

    * an int ``T``: the standard causal mask, key ``j`` visible to query ``i`` iff ``j <= i``;
    * a bool tensor of shape (T_q, T_k): True = may attend;
    * a float tensor of shape (T_q, T_k) of scores or an additive mask: -inf = hidden, any other
      value = visible. (A float tensor of only 0s and 1s, such as ``torch.tril(torch.ones(T, T))``,
      is read as 1 = visible, 0 = hidden.) Integer tensors of 0s and 1s are read the same way.

    Hidden cells are also hatched. The colorbar's two ticks name the colours: "visible" and
    "hidden (future)". Returns ``(fig, ax)``; the image is ``ax.images[0]`` (1 = visible, 0 = hidden).
    """
    visible = _mask_visibility(mask_or_seq_len)
    n_q, n_k = visible.shape
    toks = _token_list(tokens)
    row_labels = _tick_labels(toks, n_q, "query")
    col_labels = _tick_labels(toks, n_k, "key")

    fig, ax = _axes(ax, _heatmap_figsize(n_q, n_k))
    cmap = ListedColormap([MASKED_COLOR, VISIBLE_COLOR], name="causal_mask")
    norm = BoundaryNorm([-0.5, 0.5, 1.5], ncolors=2)
    image = ax.imshow(
        visible.astype(float), cmap=cmap, norm=norm, interpolation="nearest", aspect="equal"
    )
    _hatch_cells(ax, np.argwhere(~visible))

    colorbar = fig.colorbar(image, ax=ax, ticks=[0, 1], shrink=0.35, aspect=6)
    colorbar.ax.set_yticklabels(["hidden (future)", "visible"])
    colorbar.ax.tick_params(length=0)
    # hatch the "hidden" half of the colorbar too, as in the matrix
    colorbar.ax.add_patch(
        Rectangle(
            (0.0, 0.0),
            1.0,
            0.5,
            transform=colorbar.ax.transAxes,
            facecolor="none",
            edgecolor=MASKED_HATCH_COLOR,
            linewidth=0.0,
            hatch="///",
        )
    )
    _set_ticks(ax, n_q, n_k, row_labels, col_labels)
    _axis_titles(ax, toks is not None)
    _cell_separators(ax, n_q, n_k)
    ax.set_title(title)
    return fig, ax


def plot_attention_grid(weights, tokens=None, *, titles=None, ncols=None, suptitle=None):
    """One attention-weight heatmap per head: (H, T, T) for one layer, (L, H, T, T) for a model.

    For (H, T, T) the heads fill a grid of ``ncols`` columns (default: up to 4), row by row, and
    panels are titled ``"head h"``. For (L, H, T, T) there is one row per layer and one column
    per head (``ncols`` must then be None or H), titled ``"layer l, head h"``. ``titles`` replaces
    the panel titles (one per head, in that order). ``suptitle`` is the figure title; None gives
    a description of the layout, "" gives none.

    All panels share one colour scale (0 to 1, "cividis") and one colorbar. Token labels are on
    the outer axes only. Returns ``(fig, axes)`` with ``axes`` a 2-D numpy array of Axes (unused
    cells of an incomplete last row are switched off).
    """
    arr = _to_numpy(weights, "weights")
    if arr.ndim == 3:
        n_layers, n_heads = 1, arr.shape[0]
        panels = arr.astype(np.float64)
        default_titles = [f"head {h}" for h in range(n_heads)]
        if ncols is None:
            ncols = min(n_heads, 4)
        if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
            raise ValueError(f"ncols must be a positive int, got {ncols!r}")
        ncols = int(min(ncols, n_heads))
        nrows = math.ceil(n_heads / ncols)
        default_suptitle = "Attention weights, one panel per head"
    elif arr.ndim == 4:
        n_layers, n_heads = arr.shape[:2]
        panels = arr.astype(np.float64).reshape(n_layers * n_heads, *arr.shape[2:])
        default_titles = [
            f"layer {lay}, head {h}" for lay in range(n_layers) for h in range(n_heads)
        ]
        if ncols is not None and ncols != n_heads:
            raise ValueError(
                f"ncols={ncols!r} does not apply to (L, H, T, T) weights: they are drawn with one "
                f"row per layer and one column per head (H = {n_heads})"
            )
        nrows, ncols = n_layers, n_heads
        default_suptitle = "Attention weights: rows are layers, columns are heads"
    else:
        raise ValueError(
            "weights must have shape (H, T, T) (heads of one layer) or (L, H, T, T) "
            f"(layers x heads), got shape {_shape_str(arr.shape)}"
        )
    if 0 in arr.shape:
        raise ValueError(f"weights must not be empty, got shape {_shape_str(arr.shape)}")
    _check_weights(panels, "weights")
    n_panels, n_q, n_k = panels.shape

    if titles is None:
        titles = default_titles
    else:
        titles = [str(t) for t in titles]
        if len(titles) != n_panels:
            raise ValueError(f"titles has {len(titles)} entries but there are {n_panels} panels")
    toks = _token_list(tokens)
    row_labels = _tick_labels(toks, n_q, "query")
    col_labels = _tick_labels(toks, n_k, "key")

    # inches: a panel, the room its tick labels and axis label take, the title above it
    panel_in = float(np.clip(0.28 * max(n_q, n_k) + 1.2, 2.4, 4.5))
    label_in = 0.3 + max(len(t) for t in row_labels + col_labels) * 8 * 0.6 / 72
    # an incomplete last row leaves x labels on panels of the row above it too
    x_label_rows = 1 if n_panels == nrows * ncols else 2
    figsize = (
        ncols * panel_in + label_in + 1.3,
        nrows * (panel_in + 0.35) + x_label_rows * label_in + 0.6,
    )
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")

    image = None
    for k in range(nrows * ncols):
        r, c = divmod(k, ncols)
        ax = axes[r, c]
        if k >= n_panels:
            ax.set_axis_off()
            continue
        image = ax.imshow(
            panels[k],
            cmap=WEIGHTS_CMAP,
            vmin=0.0,
            vmax=1.0,
            interpolation="nearest",
            aspect="equal",
        )
        ax.set_title(titles[k], fontsize=10)
        # the bottom panel of its column: nothing drawn below it
        bottom = k + ncols >= n_panels
        left = c == 0
        _set_ticks(
            ax, n_q, n_k, row_labels, col_labels, show_x=bottom, show_y=left, max_fontsize=8.0
        )
        _axis_titles(ax, toks is not None, x=bottom, y=left)

    colorbar = fig.colorbar(image, ax=axes, shrink=min(1.0, 0.5 + 0.25 * nrows), pad=0.02)
    colorbar.set_label(WEIGHTS_LABEL)
    if suptitle is None:
        suptitle = default_suptitle
    if suptitle:
        fig.suptitle(suptitle)
    return fig, axes


def _loss_series(log) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], str]:
    """(label, steps, losses) for each curve in ``log``, and the x axis label."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency of the course
        pd = None
    if pd is not None and isinstance(log, pd.DataFrame):
        if "step" not in log.columns:
            raise ValueError(
                f"log must have a 'step' column; its columns are {list(map(str, log.columns))}"
            )
        others = [c for c in log.columns if c != "step"]
        numeric = [c for c in others if pd.api.types.is_numeric_dtype(log[c])]
        losses = [c for c in numeric if "loss" in str(c).lower()] or numeric
        if not losses:
            raise ValueError(
                "log has no numeric loss column besides 'step'; its columns are "
                f"{list(map(str, log.columns))}"
            )
        steps = pd.to_numeric(log["step"], errors="coerce").to_numpy(dtype=np.float64)
        series = []
        for col in losses:
            values = log[col].to_numpy(dtype=np.float64)
            series.append((str(col), steps, values))
        return series, "step"
    if isinstance(log, Mapping):
        if not log:
            raise ValueError("log is an empty dict; map each label to a sequence of losses")
        series = []
        for label, seq in log.items():
            values = _to_numpy(seq, f"log[{label!r}]").astype(np.float64)
            if values.ndim != 1:
                raise ValueError(
                    f"log[{label!r}] must be a 1-D sequence of losses, got shape "
                    f"{_shape_str(values.shape)}"
                )
            series.append((str(label), np.arange(len(values), dtype=np.float64), values))
        return series, "step"
    raise ValueError(
        "log must be a pandas DataFrame with a 'step' column or a dict mapping label -> losses, "
        f"got {type(log).__name__}"
    )


def plot_loss_curves(
    log,
    *,
    ax=None,
    title="Loss",
    ylabel="cross-entropy (nats)",
    reference: dict[str, float] | None = None,
):
    """Loss against training step, one line per loss column, with optional reference lines.

    ``log`` is either

    * a pandas DataFrame with a ``step`` column and one or more loss columns: every numeric column
      whose name contains "loss" (or, if none does, every numeric column but ``step``). NaN marks a
      step where that loss was not measured; only measured points are drawn, and a column measured
      at only some steps (e.g. ``val_loss``) gets a marker at each measurement; or
    * a dict mapping label -> sequence of losses (list, array or tensor), plotted against
      0, 1, 2, ...

    ``reference`` maps a label to a loss value, e.g. ``{"uniform guess ln 256": math.log(256)}``;
    each is drawn as a dashed horizontal line and named in the legend.
    """
    series, xlabel = _loss_series(log)
    fig, ax = _axes(ax, (7.0, 4.2))
    drawn = 0
    for k, (label, steps, values) in enumerate(series):
        ok = np.isfinite(steps) & np.isfinite(values)
        sparse = ok.sum() < len(values) or ok.sum() <= 20
        ax.plot(
            steps[ok],
            values[ok],
            color=_LINE_COLORS[k % len(_LINE_COLORS)],
            marker=_MARKERS[k % len(_MARKERS)] if sparse else None,
            markersize=4,
            linewidth=1.6,
            label=label,
        )
        drawn += int(ok.sum())
    if drawn == 0:
        raise ValueError("log has no measured (finite) loss values to plot")

    for k, (label, value) in enumerate((reference or {}).items()):
        value = float(value)
        ax.axhline(
            value,
            color="0.25",
            linestyle=_REFERENCE_DASHES[k % len(_REFERENCE_DASHES)],
            linewidth=1.2,
            label=f"{label} ({value:.3g})",
        )

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(frameon=False)
    return fig, ax


def plot_tokens_kept(
    kept,
    tokens=None,
    *,
    p=None,
    k=None,
    n_vocab=None,
    ax=None,
    title="Tokens kept at each position: top-p adapts, top-k does not",
):
    """How many tokens a top-p filter keeps at each position of a text, against a fixed top-k.

    ``kept``: a 1-D sequence of T counts, position t's count being how many tokens top-p
    filtering keeps for the token that comes after position t (e.g.
    ``(top_p_filter(logits, p) > float("-inf")).sum(dim=-1)`` for logits of shape (T, V)).
    It is drawn as steps, one level per position, with a marker at each position.
    ``tokens``: the text, one token per position, for the x tick labels ("position: token", the
    token the model has just read). ``p``: names the top-p line in the legend. ``k``: draws top-k's
    count, the same at every position, as a flat dashed line. ``n_vocab``: draws the vocabulary size
    (what no filter at all keeps) as a dotted line.

    Returns ``(fig, ax)``; the top-p steps are ``ax.get_lines()[0]`` and the top-k line, if any,
    the next one.
    """
    counts = _to_numpy(kept, "kept")
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(
            f"kept must be a non-empty 1-D sequence (one count per position), got shape "
            f"{_shape_str(counts.shape)}"
        )
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("kept must hold counts: finite numbers >= 0")
    for name, value in (("k", k), ("n_vocab", n_vocab)):
        if value is not None and (isinstance(value, bool) or not float(value) >= 1):
            raise ValueError(f"{name} must be a number >= 1 or None, got {value!r}")
    if p is not None and not 0 < float(p) <= 1:
        raise ValueError(f"p must lie in (0, 1], got {p!r}")
    n = counts.size
    positions = np.arange(n)
    toks = _token_list(tokens)
    labels = _tick_labels(toks, n, "x")

    fig, ax = _axes(ax, (min(14.0, max(6.0, 0.28 * n + 2.0)), 4.0))
    top_p_label = "top-p" if p is None else f"top-p (p = {float(p):g})"
    ax.step(
        positions,
        counts,
        where="mid",
        color=_LINE_COLORS[0],
        marker=_MARKERS[0],
        markersize=3.5,
        linewidth=1.6,
        label=top_p_label,
    )
    top = float(np.max(counts))
    if k is not None:
        ax.plot(
            [positions[0] - 0.5, positions[-1] + 0.5],
            [float(k), float(k)],
            color=_LINE_COLORS[1],
            linestyle="--",
            linewidth=1.6,
            label=f"top-k (k = {float(k):g})",
        )
        top = max(top, float(k))
    if n_vocab is not None:
        ax.axhline(
            float(n_vocab),
            color="0.25",
            linestyle=":",
            linewidth=1.2,
            label=f"no filter (all {float(n_vocab):g})",
        )
        top = max(top, float(n_vocab))

    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(0, top * 1.08 + 0.5)
    _set_ticks_1d(ax, n, labels)
    ax.set_xlabel("position: the token just read" if toks is not None else "position")
    ax.set_ylabel("tokens kept for the next position")
    ax.set_title(title)
    ax.grid(True, axis="y", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(frameon=False)
    return fig, ax


def _set_ticks_1d(ax, n: int, labels: list[str]) -> None:
    """One x tick per position, thinned out when there are many, with readable labels."""
    fig = ax.figure
    try:
        fig_w = fig.get_size_inches()[0]
    except AttributeError:  # a SubFigure
        fig_w = fig.figure.get_size_inches()[0]
    cell = max(1.0, fig_w * ax.get_position().width * 72 / n)
    fontsize = float(np.clip(cell * 0.75, 6.0, 10.0))
    step = max(1, math.ceil(fontsize * 1.1 / cell))
    xs = list(range(0, n, step))
    ax.set_xticks(xs, [labels[i] for i in xs])
    ax.tick_params(axis="x", labelsize=fontsize, length=2, labelrotation=90)


def plot_bars(labels, values, *, unit="", ax=None, title="", decimals=1):
    """Named quantities as horizontal bars, the first label at the top, each value written at its
    bar's end: the time per operator of a profiled step, the speed of each variant of a model.

    ``labels``: N strings; ``values``: N finite numbers >= 0 (a tensor, array or list). ``unit``
    labels the x axis. Returns ``(fig, ax)``; the bars are ``ax.patches`` in the order given.
    """
    names = [str(label) for label in labels]
    numbers = _to_numpy(values, "values").astype(float)
    if numbers.ndim != 1 or numbers.size != len(names) or not names:
        raise ValueError(f"labels and values must be two non-empty lists of the same length, got {len(names)} "
                         f"labels and values of shape {_shape_str(numbers.shape)}")
    if not np.all(np.isfinite(numbers)) or np.any(numbers < 0):
        raise ValueError("values must be finite numbers >= 0")
    n = len(names)
    fig, ax = _axes(ax, (8.0, 0.9 + 0.38 * n))
    rows = np.arange(n)[::-1]  # the first label on top
    ax.barh(rows, numbers, color=_LINE_COLORS[0], height=0.7)
    ax.set_yticks(rows, names)
    top = float(numbers.max()) if numbers.max() > 0 else 1.0
    for row, number in zip(rows, numbers, strict=True):
        ax.text(number + 0.01 * top, row, f"{number:,.{decimals}f}", va="center", fontsize=9)
    ax.set_xlim(0, top * 1.15)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.grid(True, axis="x", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def plot_series(x, series, *, xlabel="", ylabel="", vline=None, vline_label=None, ax=None, title="", logy=False):
    """Several named curves on one axes: speed against context length, loss against position.

    ``series``: a mapping from a label to N values (a tensor, array or list). ``x``: the N values
    on the x axis shared by every curve, or a mapping with one x sequence per label (curves may
    then have different lengths). ``vline``: an x value marked by a dashed vertical line, named
    ``vline_label`` in the legend. ``logy``: a logarithmic y axis. Returns ``(fig, ax)``; the
    curves are ``ax.get_lines()`` in the order of ``series``.
    """
    if not isinstance(series, Mapping) or not series:
        raise ValueError("series must be a non-empty mapping from a label to a sequence of values")
    fig, ax = _axes(ax, (8.0, 4.2))
    for index, (label, values) in enumerate(series.items()):
        ys = _to_numpy(values, f"series[{label!r}]").astype(float).reshape(-1)
        xs = _to_numpy(x[label] if isinstance(x, Mapping) else x, "x").astype(float).reshape(-1)
        if xs.size != ys.size or ys.size == 0:
            raise ValueError(f"series {label!r} has {ys.size} values for {xs.size} x values")
        ax.plot(xs, ys, color=_LINE_COLORS[index % len(_LINE_COLORS)], marker=_MARKERS[index % len(_MARKERS)],
                markersize=3.5 if ys.size > 20 else 5.0, linewidth=1.6, label=str(label))
    if vline is not None:
        ax.axvline(float(vline), color="0.3", linestyle="--", linewidth=1.2, label=vline_label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(frameon=False)
    return fig, ax


def plot_batch_mask(mask, real=None, *, suptitle=None):
    """One attention mask per sequence of a batch, side by side: who may look at whom.

    ``mask``: (B, T_q, T_k) booleans (or (B, 1, T_q, T_k)), True where query i may look at key j,
    the last T_q of the T_k positions being the queries. ``real``: optional (B, T_k) booleans, True
    at real tokens; padding columns are then labelled "pad". Visible cells are dark, hidden ones
    light grey and hatched, as in ``plot_causal_mask``. Returns ``(fig, axes)``, one axes per row.
    """
    m = _to_numpy(mask, "mask")
    if m.ndim == 4 and m.shape[1] == 1:
        m = m[:, 0]
    if m.ndim != 3 or 0 in m.shape:
        raise ValueError(f"mask must have shape (B, T_q, T_k), got {_shape_str(m.shape)}")
    m = m.astype(bool)
    B, T_q, T_k = m.shape
    r = None if real is None else _to_numpy(real, "real").astype(bool)
    if r is not None and r.shape != (B, T_k):
        raise ValueError(f"real must have shape (B, T_k) = ({B}, {T_k}), got {_shape_str(r.shape)}")
    side = max(2.2, 0.42 * T_k + 1.2)
    fig, axes = plt.subplots(1, B, figsize=(side * B, max(2.4, 0.42 * T_q + 1.6)), squeeze=False,
                             layout="constrained")
    axes = axes[0]
    cmap = ListedColormap([MASKED_COLOR, VISIBLE_COLOR])
    for b, ax in enumerate(axes):
        ax.imshow(m[b].astype(int), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        _hatch_cells(ax, np.argwhere(~m[b]))
        keys = [("pad" if r is not None and not r[b, j] else str(j)) for j in range(T_k)]
        queries = [keys[T_k - T_q + i] for i in range(T_q)]
        ax.set_xticks(range(T_k), keys, fontsize=8, rotation=90)
        ax.set_yticks(range(T_q), queries, fontsize=8)
        n_real = "" if r is None else f", {int(r[b].sum())} real tokens"
        ax.set_title(f"row {b}{n_real}", fontsize=10)
        ax.set_xlabel("key")
        if b == 0:
            ax.set_ylabel("query")
    if suptitle:
        fig.suptitle(suptitle + " (dark: may attend; grey, hatched: masked)")
    return fig, axes


__all__ += ["plot_batch_mask", "plot_series"]


def plot_bpe_compression(merges, chars_per_token, *, ax=None, title="Characters per token against the number of merges"):
    """How much byte-pair encoding compresses: characters per token after the first n merges.

    ``merges``: N merge counts (x); ``chars_per_token``: N values > 0. Returns ``(fig, ax)``.
    """
    xs = _to_numpy(merges, "merges").astype(float).reshape(-1)
    ys = _to_numpy(chars_per_token, "chars_per_token").astype(float).reshape(-1)
    if xs.size != ys.size or xs.size == 0:
        raise ValueError(f"merges and chars_per_token must have the same non-zero length, got {xs.size} and {ys.size}")
    fig, ax = _axes(ax, (6.5, 4.0))
    ax.plot(xs, ys, color=_LINE_COLORS[0], marker="o", markersize=3.5, linewidth=1.6)
    ax.set(xlabel="merges learnt", ylabel="characters per token", title=title)
    ax.set_ylim(0, max(ys.max() * 1.1, 1.1))
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def plot_token_lengths(lengths, *, ax=None, title="How long the tokens are"):
    """Histogram of token lengths in bytes, one series per vocabulary.

    ``lengths``: a mapping from a label to a sequence of lengths (ints >= 1). Returns ``(fig, ax)``.
    """
    if not isinstance(lengths, Mapping) or not lengths:
        raise ValueError("lengths must be a non-empty mapping from a label to a sequence of lengths")
    series = {str(k): _to_numpy(v, f"lengths[{k!r}]").astype(int).reshape(-1) for k, v in lengths.items()}
    longest = max(int(v.max()) for v in series.values() if v.size)
    fig, ax = _axes(ax, (6.5, 4.0))
    bins = np.arange(0.5, longest + 1.5)
    width = 0.8 / len(series)
    for index, (label, values) in enumerate(series.items()):
        counts, _ = np.histogram(values, bins=bins)
        share = counts / max(1, values.size)
        ax.bar(np.arange(1, longest + 1) + (index - (len(series) - 1) / 2) * width, share, width=width,
               color=_LINE_COLORS[index % len(_LINE_COLORS)], label=f"{label} ({values.size} tokens)")
    ax.set(xlabel="token length (bytes)", ylabel="share of the tokens", title=title)
    ax.set_xticks(range(1, longest + 1))
    ax.grid(True, axis="y", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(frameon=False)
    return fig, ax


def plot_sublayer_differences(differences, *, ax=None, title="Largest difference per sub-layer", floor=1e-17):
    """The largest difference between two models' outputs at every sub-layer, in the order they
    run, on a log scale: where a loading mistake first shows.

    ``differences``: a mapping from a sub-layer's name to a number >= 0. Values below ``floor``
    (exact agreement) are drawn at ``floor`` and labelled "equal". Returns ``(fig, ax)``.
    """
    if not isinstance(differences, Mapping) or not differences:
        raise ValueError("differences must be a non-empty mapping from a sub-layer name to a number")
    names = [str(k) for k in differences]
    values = np.array([float(v) for v in differences.values()])
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("differences must be finite numbers >= 0")
    shown = np.maximum(values, floor)
    fig, ax = _axes(ax, (max(6.5, 0.45 * len(names) + 2), 4.2))
    colors = [_LINE_COLORS[0] if v <= 1e-9 else "#D55E00" for v in values]
    ax.bar(range(len(names)), shown, color=colors, bottom=floor * 0.5)
    for i, v in enumerate(values):
        if v < floor:
            ax.text(i, floor, "equal", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    ax.set(ylabel="largest |difference| (log scale)", title=title)
    ax.grid(True, axis="y", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax
