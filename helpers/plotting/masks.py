"""Masks: which keys each query may see, for a causal mask and for each sequence of a padded batch."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.patches import Rectangle

from helpers.plotting._heatmap import (
    _axis_titles,
    _cell_separators,
    _hatch_cells,
    _heatmap_figsize,
    _set_ticks,
)
from helpers.plotting._inputs import _shape_str, _tick_labels, _to_numpy, _token_list
from helpers.plotting._style import (
    COLUMN_WIDTH_IN,
    MASKED_COLOR,
    MASKED_HATCH_COLOR,
    VISIBLE_COLOR,
    _axes,
)


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
    side = min(max(2.2, 0.42 * T_k + 1.2), COLUMN_WIDTH_IN / B)  # all the prompts side by side in a notebook column
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
