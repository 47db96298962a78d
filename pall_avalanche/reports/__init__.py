"""Reports: tables and figures from result records, the one path every paper script and the
audit take — :mod:`~pall_avalanche.reports.aggregate` (records → frames, torch-free),
:mod:`~pall_avalanche.reports.render` (cells, Markdown, LaTeX, provenance, files),
:mod:`~pall_avalanche.reports.figures` and :mod:`~pall_avalanche.reports.command` (the
command line).

- :func:`summary_frame` groups records (by method, sweep point, any key) and gives mean, std
  and worst cases of every metric, PALL's retrained-parameter statistics, timings and model
  size; :func:`table1_frame` is its Table 1 view (PALL once per α), :func:`table1_side_by_side`
  puts several benchmarks' Table 1 next to each other as the paper prints it.
- :func:`format_table` turns a summary into the cells of a paper layout ("94.50 ± 0.31",
  "*Exact* (x)"), :func:`wide_table` spreads a sweep over columns, :func:`to_markdown` /
  :func:`to_latex` render it, :func:`write_report` writes ``.csv`` + ``.md`` + ``.tex``
  atomically with a provenance preamble from :func:`provenance`.
- Figures: :func:`plot_accuracy_heatmaps`, :func:`plot_metrics_vs`,
  :func:`plot_timing_vs_tasks`, :func:`plot_table1`; each writes a PNG and returns its
  (closed) matplotlib Figure, whose artists hold what was drawn.
- Failed learning is never averaged silently: a row with records whose learning check failed
  (:func:`record_failed_learning`: a task left at chance right after it was learned) counts them in
  ``learning_failed`` (a CSV column), carries ``†k/n`` in its A_l cell (or its label when the
  table shows no A_l) with a legend line saying what it means, and its figure points are
  ringed in red with ``†k/n`` in their legend label.

``python -m pall_avalanche.reports RESULTS_DIR [RESULTS_DIR ...] --out reports/NAME`` reports
every record found under results folders; with ``--table1``, as the paper's Table 1 with the
benchmarks side by side.
"""

from pall_avalanche.reports.aggregate import (
    FAILED_MARK,
    chance_by_benchmark,
    failed_mark,
    label_rows,
    load_records,
    model_size_symbol,
    record_failed_learning,
    request_timings,
    summary_frame,
    table1_frame,
    table1_points,
)
from pall_avalanche.reports.command import cli, main
from pall_avalanche.reports.figures import (
    plot_accuracy_heatmaps,
    plot_metrics_vs,
    plot_table1,
    plot_timing_vs_tasks,
)
from pall_avalanche.reports.render import (
    COLUMNS,
    epochs_per_task,
    format_mean_std,
    format_table,
    preamble,
    provenance,
    table1_cells,
    table1_side_by_side,
    to_latex,
    to_markdown,
    wide_table,
    write_report,
)

__all__ = [
    "COLUMNS",
    "FAILED_MARK",
    "chance_by_benchmark",
    "cli",
    "epochs_per_task",
    "failed_mark",
    "format_mean_std",
    "format_table",
    "label_rows",
    "record_failed_learning",
    "load_records",
    "main",
    "model_size_symbol",
    "plot_accuracy_heatmaps",
    "plot_metrics_vs",
    "plot_table1",
    "plot_timing_vs_tasks",
    "preamble",
    "provenance",
    "request_timings",
    "summary_frame",
    "table1_cells",
    "table1_frame",
    "table1_points",
    "table1_side_by_side",
    "to_latex",
    "to_markdown",
    "wide_table",
    "write_report",
]
