"""Attention as heatmaps: query-key products, attention weights, and a grid of heads (and layers)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import Normalize

from helpers.plotting._heatmap import (
    _annotate,
    _axis_titles,
    _cell_separators,
    _hatch_cells,
    _heatmap_figsize,
    _set_ticks,
)
from helpers.plotting._inputs import (
    _check_weights,
    _matrix,
    _shape_str,
    _tick_labels,
    _to_numpy,
    _token_list,
)
from helpers.plotting._style import (
    ANNOTATE_MAX_CELLS,
    COLUMN_WIDTH_IN,
    DIVERGING_CMAP,
    MASKED_COLOR,
    MASKED_NOTE,
    MIN_GRID_LABEL_PT,
    WEIGHTS_CMAP,
    WEIGHTS_LABEL,
    _axes,
)


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

    # inches: a panel, the room its tick labels and axis label take, the title above it; the
    # figure no wider than a notebook column (a wider one would be shown scaled down, its labels
    # too small to read): panels shrink to fit, and their labels thin out rather than shrink
    label_in = 0.3 + max(len(t) for t in row_labels + col_labels) * 8 * 0.6 / 72
    extra_in = label_in + 1.1  # the y labels, the colorbar and the margins
    panel_in = float(np.clip(0.28 * max(n_q, n_k) + 1.2, 2.4, 4.5))
    panel_in = min(panel_in, (COLUMN_WIDTH_IN - extra_in) / ncols)
    # an incomplete last row leaves x labels on panels of the row above it too
    x_label_rows = 1 if n_panels == nrows * ncols else 2
    figsize = (
        ncols * panel_in + extra_in,
        nrows * (panel_in + 0.35) + x_label_rows * label_in + 0.6,
    )
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    cell_pt = 0.9 * panel_in * 72 / max(n_q, n_k)  # a panel's cell once laid out (its title takes some room)

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
            ax, n_q, n_k, row_labels, col_labels, show_x=bottom, show_y=left, max_fontsize=8.0,
            min_fontsize=MIN_GRID_LABEL_PT, cell_points=cell_pt,
        )
        _axis_titles(ax, toks is not None, x=bottom, y=left)

    colorbar = fig.colorbar(image, ax=axes, shrink=min(1.0, 0.5 + 0.25 * nrows), pad=0.02, fraction=0.05)
    colorbar.set_label(WEIGHTS_LABEL)
    if suptitle is None:
        suptitle = default_suptitle
    if suptitle:
        fig.suptitle(suptitle)
    return fig, axes


def plot_head_scores(scores, *, ax=None, title="A score per head", label="score", vmin=0.0, vmax=1.0):
    """Heatmap of one number per head of a model, an (L, H) matrix: a row per layer, a column per
    head, each axis ticked at every integer index (``layer 0``, ``1``, ...; never a half).

    The colour map is sequential ("Blues") from ``vmin`` to ``vmax`` (default 0 to 1, for scores
    that are shares of attention), with a colorbar labelled ``label``. With at most
    ``ANNOTATE_MAX_CELLS`` cells every value is written in its cell. The figure is no wider than
    a notebook column. Returns ``(fig, ax)``; the image is ``ax.images[0]``.
    """
    values = _matrix(scores, "scores")
    if not np.isfinite(values).all():
        raise ValueError("scores must be finite: one number per head")
    n_layers, n_heads = values.shape
    side = float(np.clip(0.45 * max(n_layers, n_heads), 0.35, 0.6))  # inches per cell
    figsize = (min(COLUMN_WIDTH_IN, n_heads * side + 2.4), n_layers * side + 1.4)
    fig, ax = _axes(ax, figsize)
    image = ax.imshow(values, cmap="Blues", vmin=vmin, vmax=vmax, interpolation="nearest", aspect="equal")
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label(label)
    ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)])
    ax.set_yticks(range(n_layers), [str(layer) for layer in range(n_layers)])
    ax.set(xlabel="head", ylabel="layer", title=title)
    _cell_separators(ax, n_layers, n_heads)
    if values.size <= ANNOTATE_MAX_CELLS:
        _annotate(ax, values, image)
    return fig, ax
