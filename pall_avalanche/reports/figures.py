"""Figures: each plot writes a PNG atomically and returns its (closed) matplotlib Figure,
whose artists hold what was drawn; rows with failed learning checks are ringed in red."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pall_avalanche.catalog import METHOD_INFO, method_label
from pall_avalanche.files import write_atomic
from pall_avalanche.heatmap import draw_accuracy
from pall_avalanche.reports.aggregate import FAILED_MARK, failed_mark, table1_points
from pall_avalanche.reports.render import COLUMNS
from pall_avalanche.requests import Request, RequestKind

if TYPE_CHECKING:
    from matplotlib.figure import Figure


#: Heatmaps per row of :func:`plot_accuracy_heatmaps`' grid.
HEATMAP_COLUMNS = 6


# ---------------------------------------------------------------------------------- figures
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_heatmaps(records: Sequence[dict], path: str | Path, title: str = ""
                           ) -> Figure:
    """One heatmap per record (request × task accuracy, requests labelled L3/U1), every
    record in a grid of at most :data:`HEATMAP_COLUMNS` per row; written atomically as PNG."""
    plt = _pyplot()
    n = len(records)
    columns = min(n, HEATMAP_COLUMNS)
    rows = math.ceil(n / columns)
    fig, grid = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.8 * rows),
                             squeeze=False, gridspec_kw={"hspace": 0.45})
    axes = grid.flatten()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax, record in zip(axes, records, strict=False):
        image = draw_accuracy(ax, np.asarray(record["accuracy"], dtype=float),
                              [str(Request(**r)) for r in record["requests"]])
        ax.set_title(f"{record.get('point', '')} {method_label(record['method'])} "
                     f"s{record['seed']}".strip(), fontsize=8)
    fig.colorbar(image, ax=axes[:n].tolist(), shrink=0.8, label="accuracy (%)")
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def plot_metrics_vs(frame: pd.DataFrame, x: str, metrics: Sequence[str], path: str | Path,
                    *, xlabel: str | None = None, title: str = "") -> Figure:
    """One panel per metric: mean ± std of ``metric`` against column ``x``, one line per
    method (or ``row``, see :func:`label_rows`; exact methods solid, others dashed, as in
    the paper's Fig. 3); points of rows with records whose learning check failed ringed in
    red, ``†k/n`` (over the line's rows) after the line's label."""
    plt = _pyplot()
    line_key = "row" if "row" in frame else "method"
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for _, part in frame.groupby(line_key, sort=False):
            part = part.sort_values(x)
            mean = part[f"{metric}_mean"].astype(float)
            std = part[f"{metric}_std"].astype(float).fillna(0.0)
            failed = part["learning_failed"] > 0
            mark = failed_mark(part["learning_failed"].sum(), part["seeds"].sum())
            ax.errorbar(part[x], mean, yerr=std, marker="o", capsize=3,
                        linestyle="-" if bool(part["exact"].iloc[0]) else "--",
                        label=f"{part[line_key if line_key == 'row' else 'label'].iloc[0]} "
                              f"{mark}".strip())
            if failed.any():
                _ring(ax, part[x][failed], mean[failed])
        values = sorted(frame[x].dropna().unique())
        if all(float(v).is_integer() for v in values):     # N_u, T: integer ticks only
            ax.set_xticks(values, [str(int(v)) for v in values])
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(COLUMNS.get(metric, metric))
        ax.set_title(f"{COLUMNS.get(metric, metric)} vs {xlabel or x}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _ring(ax, x, y) -> None:
    """Ring points in red: rows with records whose learning check failed."""
    ax.plot(x, y, linestyle="none", marker="o", markersize=15, mfc="none", mec="red",
            mew=1.5, gid=FAILED_MARK)


#: Table 1's markers, one per row in its order: filled ones for the exact methods, open ones
#: for the others, each shape once per kind (rows whose points coincide stay told apart).
EXACT_MARKERS = ("*", "P", "D", "X", "p", "h", "8", "H")
APPROXIMATE_MARKERS = ("o", "s", "^", "v", "<", ">", "d", "H")


def _spread(value: float, std: float) -> list[list[float]]:
    """The error bar of ``value`` ± ``std``, clipped at 0 and 100 %: [[below], [above]]."""
    return [[min(std, value)], [min(std, 100.0 - value)]]


def plot_table1(frame: pd.DataFrame, chance: Mapping[str, float], path: str | Path,
                title: str = "") -> Figure:
    """Table 1 as a figure, one panel per benchmark: A_l (x, higher is better) against A_u
    (y, chance is ideal) per row, mean ± std over seeds (the bars clipped at 0 and 100 %);
    exact methods drawn with filled markers, the others with open ones, a shape of its own
    per row (:data:`EXACT_MARKERS`, :data:`APPROXIMATE_MARKERS`) and half transparent, so
    rows on one spot stay visible; a dashed line at chance; a row with records whose learning
    check failed ringed in red, ``†k/n`` after its label, the ring in the legend. Written
    atomically as PNG.

    :param frame: a :func:`table1_frame`.
    :param chance: benchmark → chance accuracy (percent: 100 / classes per task).
    """
    plt = _pyplot()
    points = table1_points(frame)
    fig, axes = plt.subplots(1, max(len(points), 1), figsize=(6.6 * max(len(points), 1), 4.2),
                             squeeze=False)
    colours = plt.get_cmap("tab20").colors
    for ax, (benchmark, rows) in zip(axes[0], points.items(), strict=False):
        shown = {True: 0, False: 0}
        for i, point in enumerate(rows):
            exact = point["exact"]
            markers = EXACT_MARKERS if exact else APPROXIMATE_MARKERS
            marker = markers[shown[exact] % len(markers)]
            shown[exact] += 1
            colour = colours[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20]
            ax.errorbar(point["A_l"], point["A_u"], xerr=_spread(point["A_l"], point["A_l_std"]),
                        yerr=_spread(point["A_u"], point["A_u_std"]), fmt=marker, color=colour,
                        markersize=12 if marker == "*" else 8, capsize=2, elinewidth=0.8,
                        mfc=colour if exact else "none", alpha=0.75,
                        label=f"{point['row']} {point['failed']}".strip())
            if point["failed"]:
                _ring(ax, [point["A_l"]], [point["A_u"]])
        ax.axhline(chance[benchmark], color="grey", linestyle="--", linewidth=1,
                   label=f"chance ({chance[benchmark]:.0f} %)")
        if any(point["failed"] for point in rows):
            ax.plot([], [], linestyle="none", marker="o", markersize=12, mfc="none", mec="red",
                    mew=1.5, label="† red ring: a record whose learning check failed")
        ax.set_xlabel("A_l (%), higher is better")
        ax.set_ylabel("A_u (%), chance is ideal")
        ax.set_title(f"{benchmark}: filled, exact unlearning; open, approximate", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if not points:
        axes[0][0].text(0.5, 0.5, "nothing to draw: no row has both A_l and A_u (a sequence "
                        "without an unlearning request, or with no task learned at the end)",
                        ha="center", va="center", wrap=True, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def plot_timing_vs_tasks(records: Sequence[dict], path: str | Path, title: str = ""
                         ) -> Figure:
    """Seconds per learning epoch against the number of tasks learned so far (mean over the
    records of each method)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    by_method: dict[str, list[list[float]]] = {}
    for record in records:
        learn = [t["seconds_per_epoch"] for t in record["timings"]["per_request"]
                 if t["kind"] == RequestKind.LEARN]
        by_method.setdefault(record["method"], []).append(learn)
    for method, runs in by_method.items():
        length = min(len(r) for r in runs)
        mean = np.mean([r[:length] for r in runs], axis=0)
        ax.plot(range(1, length + 1), mean, marker="o",
                linestyle="-" if METHOD_INFO[method].exact else "--", label=method_label(method))
    ax.set_xlabel("task learning request (number of tasks learned)")
    ax.set_ylabel("seconds per epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return _save(fig, path)


def _save(fig: Figure, path: str | Path) -> Figure:
    """Write ``fig`` atomically as PNG to ``path`` and close it; return it (closed, its
    artists and their data intact: what was drawn)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    write_atomic(path, lambda f: f.write(buffer.getvalue()), binary=True)
    return fig
