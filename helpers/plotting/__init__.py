"""Pictures of attention: query-key products, attention weights, causal masks, head grids, losses,
how many tokens a sampling filter keeps, and the course's other measurements.

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

The functions live in one module per topic; import them from here (``from helpers.plotting import
plot_attention_weights``), which stays true whichever module holds them:

=================  ==========================================================================
``attention``      ``plot_query_key_products``, ``plot_attention_weights``, ``plot_attention_grid``,
                   ``plot_head_scores``
``masks``          ``plot_causal_mask``, ``plot_batch_mask``
``losses``         ``plot_loss_curves``
``sampling``       ``plot_tokens_kept``
``tokenizer``      ``plot_bpe_compression``, ``plot_token_lengths``
``charts``         ``plot_bars``, ``plot_series``, ``plot_sublayer_differences``
``tables``         ``Table``: a styled pandas table as the lab and the book show it, and as plain text
``_style``         colours and colour maps (``MASKED_COLOR``, ``WEIGHTS_CMAP``, ... also named here),
                   the width of a notebook column, line styles, the figure a plot draws into
``_inputs``        tensors to numpy, the checks on shapes and weights, token labels
``_heatmap``       drawing a matrix cell by cell: ticks, separators, values, hatching
=================  ==========================================================================
"""

from helpers.plotting._style import (
    ANNOTATE_MAX_CELLS,
    COLUMN_WIDTH_IN,
    DIVERGING_CMAP,
    MASKED_COLOR,
    MASKED_HATCH_COLOR,
    MASKED_NOTE,
    VISIBLE_COLOR,
    WEIGHTS_CMAP,
    WEIGHTS_LABEL,
)
from helpers.plotting.attention import (
    plot_attention_grid,
    plot_attention_weights,
    plot_head_scores,
    plot_query_key_products,
)
from helpers.plotting.charts import plot_bars, plot_series, plot_sublayer_differences
from helpers.plotting.confusion import confusion_counts, plot_confusion
from helpers.plotting.losses import plot_loss_curves
from helpers.plotting.masks import plot_batch_mask, plot_causal_mask
from helpers.plotting.sampling import plot_tokens_kept
from helpers.plotting.tables import Table
from helpers.plotting.tokenizer import plot_bpe_compression, plot_token_lengths

__all__ = [
    "ANNOTATE_MAX_CELLS",
    "COLUMN_WIDTH_IN",
    "DIVERGING_CMAP",
    "MASKED_COLOR",
    "MASKED_HATCH_COLOR",
    "MASKED_NOTE",
    "VISIBLE_COLOR",
    "WEIGHTS_CMAP",
    "WEIGHTS_LABEL",
    "Table",
    "confusion_counts",
    "plot_attention_grid",
    "plot_attention_weights",
    "plot_bars",
    "plot_batch_mask",
    "plot_bpe_compression",
    "plot_causal_mask",
    "plot_confusion",
    "plot_head_scores",
    "plot_loss_curves",
    "plot_query_key_products",
    "plot_series",
    "plot_sublayer_differences",
    "plot_token_lengths",
    "plot_tokens_kept",
]
