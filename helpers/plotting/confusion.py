"""A classifier's confusion matrix (lesson 12)."""

from __future__ import annotations

import numpy as np

from helpers.plotting._inputs import _to_numpy
from helpers.plotting._style import _axes

__all__ = ["confusion_counts", "plot_confusion"]


def confusion_counts(labels, predictions, n_classes: int) -> np.ndarray:
    """``counts[i, j]``: how many examples of class ``i`` were predicted as class ``j``."""
    true = _to_numpy(labels, "labels").astype(int).reshape(-1)
    guess = _to_numpy(predictions, "predictions").astype(int).reshape(-1)
    if true.shape != guess.shape:
        raise ValueError(f"labels has {true.size} entries, predictions {guess.size}")
    if true.size and (min(true.min(), guess.min()) < 0 or max(true.max(), guess.max()) >= n_classes):
        raise ValueError(f"every label and prediction must be in 0 ... {n_classes - 1}")
    counts = np.zeros((n_classes, n_classes), dtype=int)
    np.add.at(counts, (true, guess), 1)
    return counts


def plot_confusion(labels, predictions, names, *, ax=None, title="Confusion matrix"):
    """Rows: the true class; columns: the predicted one; each cell the count and its share of the
    row (the row's recall on the diagonal). ``names``: the classes' names, in label order.
    Returns ``(fig, ax)``."""
    names = [str(n) for n in names]
    counts = confusion_counts(labels, predictions, len(names))
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    fig, ax = _axes(ax, (1.3 * len(names) + 2.6, 1.1 * len(names) + 1.6))
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, f"{counts[i, j]}\n{shares[i, j]:.0%}", ha="center", va="center", fontsize=9,
                    color="white" if shares[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="share of the true class's examples")
    return fig, ax
