"""The accuracy heat-map: one run's accuracy matrix (rows: requests, columns: tasks) drawn on a
matplotlib axis, the one drawing of it that the reports' figure
(:func:`~pall_avalanche.reports.figures.plot_accuracy_heatmaps`) and the W&B image
(:class:`~pall_avalanche.runs.wandb_logging.WandbRun`) use. A module of the lowest layer, so
both can import it; matplotlib is the caller's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["draw_accuracy"]


def draw_accuracy(ax: Any, accuracy: Sequence[Sequence[float]], row_labels: Sequence[str], *,
                  values: bool = False, fontsize: int = 7) -> Any:
    """Draw ``accuracy`` (percent; 0 to 100 on viridis) on the matplotlib axis ``ax``, the
    requests labelled ``row_labels`` and the tasks by number; with ``values``, each cell's
    value written in it. Returns the image (for a colour bar)."""
    n_rows, n_cols = len(accuracy), len(accuracy[0])
    image = ax.imshow(accuracy, vmin=0, vmax=100, cmap="viridis", aspect="auto")
    ax.set_yticks(range(n_rows), list(row_labels), fontsize=fontsize)
    ax.set_xticks(range(n_cols), range(n_cols), fontsize=fontsize)
    ax.set_xlabel("task")
    if values:
        for i, row in enumerate(accuracy):
            for t, value in enumerate(row):
                ax.text(t, i, f"{value:.0f}", ha="center", va="center", fontsize=fontsize,
                        color="white" if value < 60 else "black")
    return image
