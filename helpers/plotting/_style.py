"""The plots' shared look: colours, colour maps, line styles, and the figure a plot draws into."""

from __future__ import annotations

import matplotlib.pyplot as plt

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
#: the widest figure a notebook column shows at its own size, in inches (960 px at matplotlib's
#: 100 dpi): a wider one is scaled down, and its labels with it
COLUMN_WIDTH_IN = 9.6
#: the smallest tick label of a grid of heatmaps, in points: where the cells are smaller, the
#: labels are thinned out rather than shrunk
MIN_GRID_LABEL_PT = 7.0

# Okabe-Ito colours: distinguishable by colour-blind readers (black is left for references).
_LINE_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_REFERENCE_DASHES = [(0, (6, 3)), (0, (2, 2)), (0, (8, 3, 2, 3)), (0, (4, 4))]


def _axes(ax, figsize: tuple[float, float]):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax
