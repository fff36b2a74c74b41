"""Generation: how many tokens a top-p filter keeps at each position, against a fixed top-k."""

from __future__ import annotations

import math

import numpy as np

from helpers.plotting._inputs import _shape_str, _tick_labels, _to_numpy, _token_list
from helpers.plotting._style import _LINE_COLORS, _MARKERS, COLUMN_WIDTH_IN, _axes


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

    fig, ax = _axes(ax, (min(COLUMN_WIDTH_IN, max(6.0, 0.28 * n + 2.0)), 4.0))
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
