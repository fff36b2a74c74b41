"""Byte-pair encoding: how much the merges compress the text, and how long the tokens are."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from helpers.plotting._inputs import _to_numpy
from helpers.plotting._style import _LINE_COLORS, _axes


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
