"""Named measurements: bars (time per operator, speed per variant), curves (speed against context
length, loss against position), and the difference between two models at each sub-layer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from helpers.plotting._inputs import _shape_str, _to_numpy
from helpers.plotting._style import _LINE_COLORS, _MARKERS, _axes


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
