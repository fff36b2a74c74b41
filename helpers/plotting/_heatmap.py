"""Drawing a matrix cell by cell: its size, its ticks, lines between cells, values written in
the cells in a contrasting colour, hatching over masked cells.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from helpers.plotting._style import COLUMN_WIDTH_IN, MASKED_HATCH_COLOR


def _heatmap_figsize(n_rows: int, n_cols: int) -> tuple[float, float]:
    width = min(COLUMN_WIDTH_IN, max(4.8, 0.5 * n_cols + 3.0))
    height = min(11.0, max(4.0, 0.5 * n_rows + 2.0))
    return width, height


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
    min_fontsize: float = 5.0,
    cell_points: float | None = None,
) -> None:
    """Put one tick per position (thinned out when cells are tiny) with readable labels, never
    smaller than ``min_fontsize`` points. ``cell_points``: a cell's size when the caller knows it
    (else estimated from the axes before the layout has run, which underestimates it)."""
    cell = cell_points if cell_points is not None else _cell_points(ax, n_rows, n_cols)
    fontsize = float(np.clip(cell * 0.75, min_fontsize, max(min_fontsize, max_fontsize)))
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
