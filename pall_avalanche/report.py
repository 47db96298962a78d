"""Tables and figures from result records: the one aggregation path of every paper script.

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
  (:func:`learning_failed`: a task left at chance right after it was learned) counts them in
  ``learning_failed`` (a CSV column), carries ``†k/n`` in its A_l cell (or its label when the
  table shows no A_l) with a legend line saying what it means, and its figure points are
  ringed in red with ``†k/n`` in their legend label.

``python -m pall_avalanche.report RESULTS_DIR [RESULTS_DIR ...] --out reports/NAME`` reports
every record found under results folders; with ``--table1``, as the paper's Table 1 with the
benchmarks side by side.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pall_avalanche.catalog import (
    ABLATION_METHODS,
    INDEPENDENT_SIZE,
    METHOD_INFO,
    SUBNETWORK_SIZE,
    TABLE1_METHODS,
    method_label,
)
from pall_avalanche.cli import Parser, main_guard
from pall_avalanche.config import config_hash
from pall_avalanche.evaluation.metrics import METRIC_NAMES, summarize_metrics
from pall_avalanche.records import read_record, write_atomic, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "COLUMNS",
    "FAILED_MARK",
    "chance_by_benchmark",
    "epochs_per_task",
    "failed_mark",
    "format_mean_std",
    "format_table",
    "label_rows",
    "learning_failed",
    "load_records",
    "main",
    "model_size_symbol",
    "plot_accuracy_heatmaps",
    "plot_metrics_vs",
    "plot_table1",
    "plot_timing_vs_tasks",
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

COLUMNS = {"A_l": "A_l ↑", "A_u": "A_u ↓", "F_l": "F_l ↓", "F_u": "F_u ↓",
           "F_u_max": "F_u^max ↓"}
#: Per-unlearning-request statistics a strategy may store (PALL: Table A2).
STAT_NAMES = ("redrawn", "retrained", "retrained_fraction", "retrained_mean_abs_change")
_TIMINGS = ("learn_seconds_per_epoch", "unlearn_seconds")
#: The mark of a row with records whose learning check failed: ``†k/n`` (:func:`failed_mark`).
FAILED_MARK = "†"
#: Heatmaps per row of :func:`plot_accuracy_heatmaps`' grid.
HEATMAP_COLUMNS = 6
#: The order of Table 1's rows: its methods, the ablations, then any other registered method.
TABLE1_ORDER = tuple(dict.fromkeys([*TABLE1_METHODS, *ABLATION_METHODS, *METHOD_INFO]))


def _mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), (float(np.std(values, ddof=1)) if len(values) > 1 else None)


def learning_failed(record: Mapping) -> bool:
    """Whether a learning request of ``record`` left its task at chance (a ``failed`` entry of
    its ``learning_checks``)."""
    return any(check.get("failed") for check in record.get("learning_checks") or ())


def failed_mark(failed: int, n: int) -> str:
    """``"†k/n"``: ``failed`` of the ``n`` records of a row failed a learning check; ``""``
    when none did."""
    return f"{FAILED_MARK}{int(failed)}/{int(n)}" if failed else ""


def _key(record: Mapping, name: str) -> Any:
    """A record's field, else its configuration's key (``n_unlearn``, ``alpha`` ...)."""
    return record[name] if name in record else record["config"].get(name)


def summary_frame(records: Iterable[dict], by: Sequence[str] = ("method",), *,
                  extra: Mapping[str, Callable[[dict], float | None]] | None = None
                  ) -> pd.DataFrame:
    """One row per group of records (``by``: record fields or configuration keys), in order
    of first appearance: ``label``, ``exact``, ``seeds``, ``learning_failed`` (the
    records failing a learning check: :func:`learning_failed`), ``<metric>_mean/_std`` of every
    metric, ``A_l_min`` (the worst seed's A_l), ``<stat>_mean/_std``
    of the strategy's per-request unlearning statistics (pooled over requests and seeds),
    ``<timing>_mean/_std`` and the largest inference ``model_size_mb``.

    :param records: result records (as written by the runner, optionally with ``point``).
    :param by: the grouping keys; they become the first columns.
    :param extra: more per-record values to aggregate, name → function of a record
        (``None`` skips the record); gives ``<name>_mean/_std``.
    """
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(_key(record, k) for k in by), []).append(record)
    rows = []
    for key, runs in groups.items():
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["label"] = method_label(runs[0]["method"])
        row["exact"] = bool(runs[0].get("exact", False))
        row["seeds"] = len(runs)
        row["learning_failed"] = sum(learning_failed(r) for r in runs)
        summary = summarize_metrics(r["metrics"] for r in runs)
        del summary["n_runs"]
        row.update(summary)
        stats = [s for r in runs for s in (r.get("unlearning_stats") or [])]
        for name in STAT_NAMES:
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(s[name]) for s in stats if s.get(name) is not None])
        for name in _TIMINGS:
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(r["timings"][name]) for r in runs if r["timings"].get(name) is not None])
        for name, value_of in (extra or {}).items():
            values = [value_of(r) for r in runs]
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(
                [float(v) for v in values if v is not None])
        row["model_size_mb"] = max(r["model_size_mb"] for r in runs)
        rows.append(row)
    return pd.DataFrame(rows)


def _varying_keys(configs: Sequence[Mapping]) -> list[str]:
    """The configuration keys whose values differ among ``configs``, sorted."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True, default=str)
                                    for c in configs}) > 1]


def table1_frame(records: Iterable[dict], methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per benchmark and method, PALL's once per α (``alpha``, empty for the other
    methods): ``row`` (the printed label, PALL's with its α), mean and std over seeds of every
    metric, the worst seed's A_l (A_l^min), the model size (MB, at |Ω| = T) and the
    number of seeds and of records that failed a learning check (``learning_failed``). Rows
    follow ``methods`` (default :data:`TABLE1_ORDER`; other methods are
    left out), PALL's by α.

    :raises ValueError: when one row's records come from different configurations (seeds
        aside): a row averages the seeds of one configuration.
    """
    records = [{**r, "alpha": _key(r, "alpha") if r["method"] == "pall" else None}
               for r in records]
    configs: dict[tuple, dict[str, Mapping]] = {}
    for r in records:
        configs.setdefault((_key(r, "benchmark"), r["method"], r["alpha"]), {})[
            config_hash(r["config"])] = r["config"]
    for (benchmark, method, _), found in configs.items():
        if len(found) > 1:
            raise ValueError(
                f"the {method} records of {benchmark} come from {len(found)} configurations "
                f"(differing in {_varying_keys(list(found.values()))}); a Table 1 row averages "
                "the seeds of one: give folders that hold one Table 1 run per benchmark (the --out "
                "of benchmarks/table1.py)")
    frame = summary_frame(records, ("benchmark", "method", "alpha"))
    if frame.empty:
        return frame
    rank = {m: i for i, m in enumerate(methods if methods is not None else TABLE1_ORDER)}
    frame = frame[frame["method"].isin(rank)]
    frame = frame.assign(rank=frame["method"].map(rank)).sort_values(["rank", "alpha"],
                                                                     kind="stable")
    columns = ["method", "benchmark", "alpha", "row", "exact", "seeds",
               *[c for n in METRIC_NAMES for c in (f"{n}_mean", f"{n}_std")
                 + (("A_l_min",) if n == "A_l" else ())], "model_size_mb", "learning_failed"]
    return label_rows(frame, "alpha", "α")[columns].reset_index(drop=True)


def label_rows(frame: pd.DataFrame, key: str, symbol: str,
               methods: Sequence[str] = ("pall",)) -> pd.DataFrame:
    """A copy with a ``row`` column: the method's label, plus ``" (<symbol>=<value of key>)"``
    for ``methods`` (e.g. PALL (α=0.2), PALL (β=0.5))."""
    rows = [f"{label} ({symbol}={value:g})" if method in methods and value is not None
            else label for label, method, value in zip(frame["label"], frame["method"],
                                                        frame[key], strict=True)]
    return frame.assign(row=rows)


def format_mean_std(mean: float | None, std: float | None, digits: int = 2) -> str:
    """``"94.50 ± 0.31"``; ``"—"`` when undefined; the mean alone for one seed."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    mean = round(float(mean), digits) + 0.0           # + 0.0: no "-0.00"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def format_table(frame: pd.DataFrame, values: Mapping[str, str], *,
                 index: Mapping[str, str] | None = None, digits: int = 2,
                 exact_a_u: bool = True) -> pd.DataFrame:
    """The printed cells of a summary: one string column per entry of ``values``.

    :param frame: from :func:`summary_frame`.
    :param values: column → header. A column with ``_mean``/``_std`` in the frame prints as
        mean ± std; any other prints as a number (or as is).
    :param index: leading label columns, frame column → header (default: ``label`` →
        ``Method``).
    :param digits: decimals.
    :param exact_a_u: print exact methods' A_u as ``*Exact* (x)``.

    A row whose ``learning_failed`` is positive gets ``†k/n`` (:func:`failed_mark`, k of its
    ``seeds`` records) after its A_l cell, or after its first label when ``values`` has no A_l.
    """
    index = dict(index or {"label": "Method"})
    out = pd.DataFrame({header: frame[column].astype(str) for column, header in index.items()})
    for column, header in values.items():
        cells = []
        for row in frame.to_dict("records"):
            if f"{column}_mean" in row:
                cell = format_mean_std(row[f"{column}_mean"], row.get(f"{column}_std"), digits)
                if column == "A_u" and exact_a_u and row.get("exact") and cell != "—":
                    cell = f"*Exact* ({cell})"
            else:
                value = row[column]
                if isinstance(value, bool | np.bool_):
                    cell = "✓" if value else "✗"
                elif isinstance(value, str) or value is None:
                    cell = "—" if value is None else value
                elif isinstance(value, int | np.integer):
                    cell = str(int(value))
                else:
                    cell = format_mean_std(float(value), None, digits)
            cells.append(cell)
        out[header] = cells
    marks = [failed_mark(int(_or_zero(row.get("learning_failed"))), int(_or_zero(row.get("seeds"))))
             for row in frame.to_dict("records")]
    marked = values["A_l"] if "A_l" in values else next(iter(index.values()))
    out[marked] = [f"{cell} {mark}" if mark else cell
                   for cell, mark in zip(out[marked], marks, strict=True)]
    return out


def wide_table(cells: pd.DataFrame, *, row: str, column: str) -> pd.DataFrame:
    """Spread a formatted table over a sweep: one row per ``row`` value, the value columns
    repeated per ``column`` value (headers ``"<column value> <header>"``), orders kept."""
    values = [c for c in cells.columns if c not in (row, column)]
    rows = list(dict.fromkeys(cells[row]))
    cols = list(dict.fromkeys(cells[column]))
    out = pd.DataFrame({row: rows})
    for col in cols:
        part = cells[cells[column] == col].set_index(row)
        for value in values:
            out[f"{col} {value}"] = [part[value].get(r, "—") if r in part.index else "—"
                                     for r in rows]
    return out


def to_markdown(cells: pd.DataFrame) -> str:
    """A GitHub Markdown table of string cells."""
    header = [str(c) for c in cells.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v).replace("|", r"\|") for v in row) + " |"
              for row in cells.itertuples(index=False)]
    return "\n".join(lines) + "\n"


_LATEX = {"↑": r"$\uparrow$", "↓": r"$\downarrow$", "±": r"$\pm$", "—": "--", "_": r"\_",
          "%": r"\%", "&": r"\&", "#": r"\#", "^": r"\^{}", "α": r"$\alpha$", "β": r"$\beta$",
          "θ̄": r"$\bar{\theta}$", "|": r"$|$", "✓": r"\cmark", "✗": r"\xmark",
          FAILED_MARK: r"\dag{}"}


#: Whole cells with a LaTeX form of their own (Table 1's symbolic model sizes).
_LATEX_CELLS = {SUBNETWORK_SIZE: r"$d + M_i$", INDEPENDENT_SIZE: r"$d \times |\Omega_i|$"}


def _latex_escape(text: str) -> str:
    if text in _LATEX_CELLS:
        return _LATEX_CELLS[text]
    text = text.replace("*Exact*", r"\textit{\textbf{Exact}}")
    return "".join(_LATEX.get(ch, ch) for ch in text.replace("θ̄", "\x00")).replace(
        "\x00", r"$\bar{\theta}$")


#: Metric names in headers, typeset in math mode (longest first: F_u^max before F_u).
_LATEX_METRICS = {"F_u^max": r"$F_u^{\max}$", "A_l^min": r"$A_l^{\min}$", "A_l": "$A_l$",
                  "A_u": "$A_u$", "F_l": "$F_l$", "F_u": "$F_u$"}


def _latex_header(text: str) -> str:
    """A column header in LaTeX: metric names in math mode, the rest escaped."""
    parts = [text]
    for name in _LATEX_METRICS:
        parts = [piece for part in parts for piece in
                 ([part] if part in _LATEX_METRICS else _split_keep(part, name))]
    return "".join(_LATEX_METRICS.get(part) or _latex_escape(part) for part in parts if part)


def _split_keep(text: str, token: str) -> list[str]:
    """``text`` split around ``token``, the tokens kept as their own pieces."""
    pieces = text.split(token)
    return [x for i, piece in enumerate(pieces) for x in ((token, piece) if i else (piece,))]


#: What each column symbol means, printed under every table that shows it.
LEGEND = {
    "A_l": "A_l ↑: mean accuracy (%) on the tasks still learned at the end",
    "A_u": "A_u ↓: mean accuracy on the unlearned tasks; *Exact* (x): the method unlearns "
           "exactly, so A_u is chance by design (x: the measured value)",
    "F_l": "F_l ↓: mean drop of the learned tasks' accuracy when a new task is learned",
    "F_u": "F_u ↓: mean drop of the remaining tasks' accuracy when a task is unlearned",
    "F_u^max": "F_u^max ↓: the largest drop of a remaining task's accuracy at any unlearning "
               "request",
    "A_l^min": "A_l^min: the worst A_l over seeds",
}
#: The legend line of :data:`FAILED_MARK`.
FAILED_LEGEND = (f"{FAILED_MARK}k/n: k of the n records of this row left a task at chance right "
                 "after learning it (see the records' learning_checks); the row's numbers "
                 "include them")


def legend(cells: pd.DataFrame) -> str:
    """The legend of the metric symbols among ``cells``' headers (one Markdown line each),
    plus how cells read, plus :data:`FAILED_LEGEND` when a cell carries :data:`FAILED_MARK`;
    empty when the table shows neither."""
    headers = " ".join(map(str, cells.columns))
    # a symbol counts where it is not the start of a longer one (A_l in A_l^min)
    found = [name for name in LEGEND if re.search(re.escape(name) + r"(?![\w^])", headers)]
    lines = [LEGEND[name] for name in found]
    if found:
        lines.append("Cells: mean ± standard deviation over seeds; — undefined (e.g. A_u "
                     "without an unlearning request)")
    if any(FAILED_MARK in str(cell) for cell in cells.to_numpy().ravel()):
        lines.append(FAILED_LEGEND)
    if not lines:
        return ""
    return "\n" + "".join(f"- {line}\n" for line in lines)


def to_latex(cells: pd.DataFrame, caption: str = "") -> str:
    """A booktabs ``tabular`` of string cells (the paper's table style), with ``caption`` as
    a LaTeX comment above it."""
    spec = "l" + "c" * (len(cells.columns) - 1)
    lines = [f"% {caption}"] if caption else []
    lines += [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
              " & ".join(_latex_header(str(c)) for c in cells.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(_latex_escape(str(v)) for v in row) + r" \\"
              for row in cells.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def epochs_per_task(records: Sequence[dict]) -> str:
    """``"10 epochs/task"``, or with per-method exceptions ``"10 epochs/task (ER: 5)"``: the
    epochs the records' learning requests really ran (the most common count first)."""
    by_method: dict[str, int] = {r["method"]: int(r["config"]["epochs"]) for r in records}
    counts = list(by_method.values())
    usual = max(set(counts), key=counts.count)
    others = [f"{method_label(m)}: {e}"
              for m, e in by_method.items() if e != usual]
    return f"{usual} epochs/task" + (f" ({', '.join(others)})" if others else "")


def provenance(records: Sequence[dict], *, title: str, command: str,
               notes: Sequence[str] = (), changed: Iterable[str] = ()) -> str:
    """The Markdown preamble every report carries: title, exact command, scale (from the
    records' configurations: a digits or subsampled run is labelled reduced; a paper-benchmark
    run with ``changed`` keys names them), seeds, hardware and package versions, plus the
    script's own ``notes``.

    :param changed: configuration keys set on the command line (``data_root`` does not count).
    """
    if not records:
        raise ValueError("provenance needs at least one record")
    configs = [r["config"] for r in records]
    benchmarks = sorted({c["benchmark"] for c in configs})
    tasks = sorted({int(c["n_tasks"]) for c in configs})
    epochs = sorted({int(c["epochs"]) for c in configs})
    per_task = sorted({str(c.get("train_per_task")) for c in configs})
    reduced = "digits" in benchmarks or per_task != ["None"]
    scale = (f"benchmark {', '.join(benchmarks)}; T = {', '.join(map(str, tasks))}; "
             f"{', '.join(map(str, epochs))} epochs per learning request; train_per_task "
             f"{', '.join(per_task)}; model {', '.join(sorted({c['model'] for c in configs}))}")
    changed = sorted(set(changed) - {"data_root"})
    if reduced:
        scale += (" — a REDUCED CPU-scale run, not the paper's protocol; numbers are not "
                  "comparable to the paper's")
    elif changed:
        scale += (f" — the paper's configuration with {', '.join(changed)} changed on the "
                  "command line: not the paper's protocol as such")
    else:
        scale += " — the paper's protocol"
    seeds = sorted({int(r["seed"]) for r in records})
    devices = sorted({f"{r['device']['type']} ({r['device']['name']}"
                      + (f", {r['device']['threads']} threads" if "threads" in r["device"]
                         else "") + ")" for r in records})
    versions = records[0].get("versions", {})
    lines = [f"# {title}", "", f"Command: `{command}`  ", f"Scale: {scale}  ",
             f"Seeds: {seeds} ({len(records)} runs)  ", f"Hardware: {'; '.join(devices)}  ",
             "Versions: " + ", ".join(f"{k} {versions[k]}" for k in
                                      ("torch", "avalanche-lib", "python") if k in versions)
             + "  ",
             "Reproducibility: the same seed, thread count, hardware and versions give the "
             "same numbers bit for bit; another CPU or torch build can move them "
             "(REPRODUCIBILITY.md)  "]
    lines += [f"{note}  " if i < len(notes) - 1 else note for i, note in enumerate(notes)]
    return "\n".join(lines) + "\n\n"


def write_report(stem: str | Path, *, preamble: str, numbers: pd.DataFrame,
                 cells: pd.DataFrame, caption: str = "") -> str:
    """Write ``<stem>.csv`` (the numbers), ``<stem>.md`` (preamble + Markdown table +
    :func:`legend`) and ``<stem>.tex`` (the preamble as comments + booktabs table), each
    atomically; return the Markdown."""
    stem = Path(stem)
    markdown = preamble + to_markdown(cells) + legend(cells)
    write_text_atomic(stem.with_name(stem.name + ".csv"), numbers.to_csv(index=False))
    write_text_atomic(stem.with_name(stem.name + ".md"), markdown)
    comments = "".join(f"% {line}\n" for line in preamble.strip().splitlines() if line.strip())
    write_text_atomic(stem.with_name(stem.name + ".tex"), comments + to_latex(cells, caption))
    return markdown


def table1_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 1's formatted cells (a :func:`table1_frame` of one benchmark): exact methods'
    A_u reads "Exact" with the measured value, plus A_l^min, model size and the number of
    seeds."""
    return format_table(frame, {**{n: COLUMNS[n] for n in METRIC_NAMES},
                                "A_l_min": "A_l^min", "model_size_mb": "Model size (MB)",
                                "seeds": "Seeds"}, index={"row": "Method"})


def model_size_symbol(method: str) -> str:
    """Table 1's model size of a registered method: :data:`DENSE_SIZE` (``d``),
    :data:`SUBNETWORK_SIZE` (``d + M_i``: PackNet, WSN, PALL, the sparse subnetworks) or
    :data:`INDEPENDENT_SIZE` (``d × |Ω_i|``)."""
    return METHOD_INFO[method].size


def table1_side_by_side(records: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 1 of every benchmark in ``records`` side by side, as the paper prints it: one
    row per method (PALL once per α), the symbolic model size (:func:`model_size_symbol`),
    then A_l, A_u, F_l, F_u per benchmark, benchmarks in order of appearance.

    :returns: (the numbers: a :func:`table1_frame`, one row per benchmark and method with the
        measured ``model_size_mb``; the formatted cells).
    """
    numbers = table1_frame(records)
    cells = format_table(numbers, {n: COLUMNS[n] for n in ("A_l", "A_u", "F_l", "F_u")},
                         index={"row": "Method", "benchmark": "Benchmark"})
    wide = wide_table(cells, row="Method", column="Benchmark")
    symbols = dict(zip(numbers["row"], numbers["method"].map(model_size_symbol), strict=True))
    wide.insert(1, "Model size", wide["Method"].map(symbols))
    return numbers, wide


def _model_size_note(numbers: pd.DataFrame) -> str:
    """The measured sizes behind the symbolic column of :func:`table1_side_by_side`."""
    parts = []
    for benchmark, part in numbers.groupby("benchmark", sort=False):
        sizes: dict[str, dict[str, None]] = {}
        for method, mb in zip(part["method"], part["model_size_mb"], strict=True):
            sizes.setdefault(model_size_symbol(method), {})[f"{mb:.2f}"] = None
        parts.append(f"{benchmark}: " + ", ".join(f"{symbol} = {' / '.join(values)}"
                                                  for symbol, values in sizes.items()))
    return ("Model size: d = the network, M_i = one mask per active task (1 bit per maskable "
            "entry), |Ω_i| = the active tasks; measured at |Ω| = T in MB (2^20 bytes, "
            f"model_size_mb in the CSV): {'; '.join(parts)}")


def request_timings(record: Mapping, learn_index: int, unlearn_index: int
                    ) -> tuple[float, float]:
    """(seconds per epoch of request ``learn_index``, seconds of request ``unlearn_index``)
    of one record; raises ValueError when those requests are not a learning and an
    unlearning request."""
    timings = record["timings"]["per_request"]
    if not (0 <= learn_index < len(timings) and 0 <= unlearn_index < len(timings)):
        raise ValueError(f"request indices {learn_index}, {unlearn_index} outside the "
                         f"{len(timings)} requests of the record")
    learn, unlearn = timings[learn_index], timings[unlearn_index]
    if learn["kind"] != "learn" or unlearn["kind"] != "unlearn":
        raise ValueError(f"request {learn_index} is {learn['kind']!r} and request "
                         f"{unlearn_index} is {unlearn['kind']!r}; expected learn and unlearn")
    return float(learn["seconds_per_epoch"]), float(unlearn["seconds"])


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
        acc = np.asarray(record["accuracy"], dtype=float)
        image = ax.imshow(acc, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(record["requests"])),
                      [("L" if r["kind"] == "learn" else "U") + str(r["task"])
                       for r in record["requests"]], fontsize=7)
        ax.set_xticks(range(acc.shape[1]), range(acc.shape[1]), fontsize=7)
        ax.set_xlabel("task")
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


def table1_points(frame: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """What the Table 1 figure draws, per benchmark of a :func:`table1_frame`: one point per
    row with an unlearning request (``row``, ``exact``, ``failed``: its :func:`failed_mark`,
    mean and std of A_l and A_u), in the table's order."""
    points: dict[str, list[dict[str, Any]]] = {}
    for _, r in frame.iterrows():
        if pd.isna(r["A_u_mean"]):
            continue
        points.setdefault(r["benchmark"], []).append({
            "row": r["row"], "exact": bool(r["exact"]),
            "failed": failed_mark(int(r["learning_failed"]), int(r["seeds"])),
            "A_l": float(r["A_l_mean"]), "A_l_std": _or_zero(r["A_l_std"]),
            "A_u": float(r["A_u_mean"]), "A_u_std": _or_zero(r["A_u_std"])})
    return points


def _or_zero(value: Any) -> float:
    return 0.0 if value is None or pd.isna(value) else float(value)


def chance_by_benchmark(records: Iterable[dict]) -> dict[str, float]:
    """Benchmark → chance accuracy (percent: 100 / classes per task) of ``records``."""
    return {r["benchmark"]: 100.0 / r["split"]["classes_per_task"] for r in records}


def plot_table1(frame: pd.DataFrame, chance: Mapping[str, float], path: str | Path,
                title: str = "") -> Figure:
    """Table 1 as a figure, one panel per benchmark: A_l (x, higher is better) against A_u
    (y, chance is ideal) per row, mean ± std over seeds; exact methods drawn as filled stars,
    the others as open circles; a dashed line at chance; a row with records whose learning
    check failed ringed in red, ``†k/n`` after its label. Written atomically as PNG.

    :param frame: a :func:`table1_frame`.
    :param chance: benchmark → chance accuracy (percent: 100 / classes per task).
    """
    plt = _pyplot()
    points = table1_points(frame)
    fig, axes = plt.subplots(1, max(len(points), 1), figsize=(6.6 * max(len(points), 1), 4.2),
                             squeeze=False)
    colours = plt.get_cmap("tab20").colors
    for ax, (benchmark, rows) in zip(axes[0], points.items(), strict=False):
        for i, point in enumerate(rows):
            exact = point["exact"]
            colour = colours[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20]
            ax.errorbar(point["A_l"], point["A_u"], xerr=point["A_l_std"],
                        yerr=point["A_u_std"], fmt="*" if exact else "o", color=colour,
                        markersize=12 if exact else 7, capsize=2, elinewidth=0.8,
                        mfc=colour if exact else "none",
                        label=f"{point['row']} {point['failed']}".strip())
            if point["failed"]:
                _ring(ax, [point["A_l"]], [point["A_u"]])
        ax.axhline(chance[benchmark], color="grey", linestyle="--", linewidth=1,
                   label=f"chance ({chance[benchmark]:.0f} %)")
        ax.set_xlabel("A_l (%), higher is better")
        ax.set_ylabel("A_u (%), chance is ideal")
        ax.set_title(f"{benchmark}: ★ exact unlearning, ○ approximate", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
                 if t["kind"] == "learn"]
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


# ------------------------------------------------------------------------------------ CLI
def load_records(results_dir: str | Path) -> list[dict]:
    """Every result record (``seed*.json``) under ``results_dir``, in path order. A file
    that is not a complete record (truncated or invalid JSON, required keys missing) is
    skipped with a :class:`~pall_avalanche.records.RunWarning` naming it (one line each); it
    is left in place (a run on that folder sets it aside and computes the record again)."""
    import warnings

    from pall_avalanche.records import CorruptFileError, RunWarning, load_record

    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder {root} does not exist")
    records = []
    for path in sorted(root.rglob("seed*.json")):
        record = read_record(path)
        if record is not None:
            records.append(record)
            continue
        try:
            load_record(path)  # why it is no record
        except CorruptFileError as err:
            warnings.warn(f"skipped {err}", RunWarning, stacklevel=2)
    return records


def _settings(records: Sequence[dict]) -> list[dict]:
    """Label each record with the configuration keys that vary among its method's records."""
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    out = []
    for runs in by_method.values():
        varying = _varying_keys([r["config"] for r in runs])
        for r in runs:
            label = ", ".join(f"{k}={r['config'].get(k)}" for k in varying) or "default"
            out.append({**r, "point": r.get("point", label)})
    return out


_TABLE1_HELP = """\
--table1: the paper's Table 1 with every benchmark found side by side, e.g. after

    python benchmarks/table1.py --benchmark cifar10 --data-root ~/data --device cuda
    python benchmarks/table1.py --benchmark cifar100 --data-root ~/data --device cuda

(records under results/table1/<benchmark>, the script's default --out):

    python -m pall_avalanche.report --table1 results/table1/cifar10 results/table1/cifar100 \
        --out reports/table1_paper

Rows: the methods in Table 1's order, PALL once per α; column "Model size" symbolic (d,
d + M_i for the subnetwork methods, d × |Ω_i| for Independent; the measured MB at |Ω| = T
are in the preamble and the CSV's model_size_mb); then A_l, A_u, F_l, F_u per benchmark.
The CSV has one row per benchmark and method. Every row must come from one configuration
(seeds aside): folders that mix runs of other settings are refused.
"""


def main(argv: Sequence[str] | None = None) -> str:
    """``python -m pall_avalanche.report RESULTS_DIR [RESULTS_DIR ...] [--out reports/NAME]``:
    a table (.md, .csv, .tex) of every (method, setting) found, accuracy heatmaps (first seed
    of each), A_l/F_u against N_u when several N_u were run, and learning time per task; with
    ``--table1``, the paper's Table 1 with the benchmarks side by side
    (:func:`table1_side_by_side`)."""
    parser = Parser(prog="python -m pall_avalanche.report",
                    description=" ".join(main.__doc__.split("\n\n")[0].split()),
                    epilog=_TABLE1_HELP,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="+",
                        help="folders of result records (seed*.json), searched recursively")
    parser.add_argument("--table1", action="store_true",
                        help="the paper's Table 1 layout, benchmarks side by side (see below)")
    parser.add_argument("--out", type=Path,
                        help="report path stem (default: <first results folder>/report, or "
                             "/table1 with --table1: beside the records, never over a "
                             "committed report)")
    parser.add_argument("--title", help="report title (default: Results, or Table 1's)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = args.results[0] / ("table1" if args.table1 else "report")
    records = [r for folder in args.results for r in load_records(folder)]
    if not records:
        raise ValueError("no result records (seed*.json) under "
                         + ", ".join(map(str, args.results)))
    command = "python -m pall_avalanche.report " + shlex.join(argv)
    if args.table1:
        frame, cells = table1_side_by_side(records)
        title = args.title or ("Table 1 — " + ", ".join(dict.fromkeys(frame["benchmark"]))
                               + " side by side")
        plot_table1(frame, chance_by_benchmark(records), f"{args.out}.png", title)
        notes = [_model_size_note(frame), f"Figure: {args.out.name}.png (A_l against A_u per "
                 "row and benchmark, exact methods as stars, chance dashed)"]
    else:
        frame, cells, title, notes = _results_report(records, args.out, args.title or "Results")
    preamble = provenance(records, title=title, command=command, notes=notes)
    markdown = write_report(args.out, preamble=preamble, numbers=frame, cells=cells,
                            caption=title)
    print(markdown)
    return markdown


def _results_report(records: list[dict], out: Path, title: str
                    ) -> tuple[pd.DataFrame, pd.DataFrame, str, list[str]]:
    """The generic report of :func:`main`: (numbers, cells, title, notes), figures written
    next to ``out``."""
    records = sorted(_settings(records), key=lambda r: (r["method"], str(r["point"]), r["seed"]))
    frame = summary_frame(records, ("benchmark", "method", "point"))
    cells = format_table(frame, {n: COLUMNS[n] for n in METRIC_NAMES} | {
        "A_l_min": "A_l^min", "model_size_mb": "Model size (MB)", "seeds": "Seeds"},
        index={"benchmark": "Benchmark", "label": "Method", "point": "Setting"})
    figures = [f"{out.name}_heatmaps.png", f"{out.name}_timing.png"]
    first = {}
    for record in records:
        first.setdefault((record["method"], record["point"]), record)
    plot_accuracy_heatmaps(list(first.values()), f"{out}_heatmaps.png", title)
    plot_timing_vs_tasks(records, f"{out}_timing.png", title)
    by_nu = summary_frame(records, ("method", "n_unlearn"))
    if by_nu["n_unlearn"].nunique() > 1:
        plot_metrics_vs(by_nu, "n_unlearn", ("A_l", "F_u"), f"{out}_vs_nu.png", xlabel="N_u")
        figures.append(f"{out.name}_vs_nu.png")
    return frame, cells, title, [f"Figures: {', '.join(figures)}"]


def cli(argv: Sequence[str] | None = None) -> None:
    """The command: ``python -m pall_avalanche.report``, installed as ``pall-report``."""
    main_guard(main, argv, prog="python -m pall_avalanche.report")


if __name__ == "__main__":
    cli()
