"""Training curves: loss against step, from a training log or a dict of losses, with reference lines."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from helpers.plotting._inputs import _shape_str, _to_numpy
from helpers.plotting._style import _LINE_COLORS, _MARKERS, _REFERENCE_DASHES, _axes


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
