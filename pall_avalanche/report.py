"""Tables from result records: Table 1 layout as a pandas frame, Markdown and CSV."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from pall_avalanche.evaluation.metrics import METRIC_NAMES, summarize_metrics
from pall_avalanche.records import write_text_atomic
from pall_avalanche.strategies import METHODS

__all__ = ["format_mean_std", "markdown_table", "table1_frame", "write_table"]

COLUMNS = {"A_l": "A_l ↑", "A_u": "A_u ↓", "F_l": "F_l ↓", "F_u": "F_u ↓",
           "F_u_max": "F_u^max ↓"}


def table1_frame(records: Iterable[dict], methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per method: mean and std over seeds of every metric, the worst cases
    (A_l^min, max F_u^max), the largest inference model size and the number of seeds."""
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    order = list(methods) if methods is not None else list(by_method)
    rows = []
    for method in order:
        runs = by_method.get(method, [])
        if not runs:
            continue
        row = {"method": method, "exact": bool(runs[0].get("exact", False)),
               "seeds": len(runs)}
        row.update(summarize_metrics(r["metrics"] for r in runs))
        del row["n_runs"]
        row["model_size_mb"] = max(r["model_size_mb"] for r in runs)
        rows.append(row)
    return pd.DataFrame(rows)


def format_mean_std(mean: float | None, std: float | None, digits: int = 2) -> str:
    """``"94.50 ± 0.31"``; ``"—"`` when undefined; the mean alone for one seed."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(frame: pd.DataFrame) -> str:
    """Table 1 as Markdown: exact methods' A_u reads "Exact" with the measured value."""
    header = ["Method", *COLUMNS.values(), "A_l^min", "Model size (MB)", "Seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in frame.to_dict("records"):
        spec = METHODS.get(row["method"])
        cells = [spec.label if spec else row["method"]]
        for name in METRIC_NAMES:
            cell = format_mean_std(row[f"{name}_mean"], row[f"{name}_std"])
            if name == "A_u" and row["exact"] and cell != "—":
                cell = f"*Exact* ({cell})"
            cells.append(cell)
        cells.append(format_mean_std(row["A_l_min"], None))
        cells.append(f"{row['model_size_mb']:.2f}")
        cells.append(str(row["seeds"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(frame: pd.DataFrame, path_stem: str | Path, preamble: str = "") -> str:
    """Write ``<stem>.csv`` (numbers) and ``<stem>.md`` (preamble + Markdown table)
    atomically; return the Markdown."""
    stem = Path(path_stem)
    markdown = markdown_table(frame)
    write_text_atomic(stem.with_suffix(".csv"), frame.to_csv(index=False))
    write_text_atomic(stem.with_suffix(".md"), preamble + markdown)
    return markdown
