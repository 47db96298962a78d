"""Rendering with provenance: a frame → the cells of a paper layout ("94.50 ± 0.31",
"*Exact* (x)", ``†k/n`` for rows with failed learning checks), Markdown and LaTeX with a
legend, and :func:`write_report` (``.csv`` + ``.md`` + ``.tex``, atomically, after the
:func:`provenance` preamble: command, scale, seeds, hardware, versions)."""

from __future__ import annotations

import itertools
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from pall_avalanche.catalog import (
    CLPU_SIZE,
    EMBEDDING_SIZE,
    HYPERNETWORK_SIZE,
    INDEPENDENT_SIZE,
    PAPER_BENCHMARKS,
    SUBNETWORK_SIZE,
    method_label,
)
from pall_avalanche.evaluation.metrics import METRIC_NAMES
from pall_avalanche.files import RunWarning, write_text_atomic
from pall_avalanche.reports.aggregate import (
    FAILED_MARK,
    failed_mark,
    model_size_symbol,
    or_zero,
    table1_frame,
)

#: Metric → the column header of the tables (arrows: which way is better).
COLUMNS = {"A_l": "A_l ↑", "A_u": "A_u ↓", "F_l": "F_l ↓", "F_u": "F_u ↓",
           "F_u_max": "F_u^max ↓"}


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
    marks = [failed_mark(int(or_zero(row.get("learning_failed"))), int(or_zero(row.get("seeds"))))
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
_LATEX_CELLS = {SUBNETWORK_SIZE: r"$d + M_i$", INDEPENDENT_SIZE: r"$d \times |\Omega_i|$",
                CLPU_SIZE: r"$d \times (1 + |\Omega_T|)$", EMBEDDING_SIZE: r"$d + E_i$",
                HYPERNETWORK_SIZE: r"$h + E_i$"}


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


def preamble(title: str, command: str, *, hardware: str, versions: Mapping[str, str],
             lines: Sequence[str] = ()) -> list[str]:
    """The first lines of every report: its title, the exact command, the report's own
    ``lines`` (its scale, seeds, code, ...), the hardware and the package versions (Markdown,
    each line ending in a hard break). :func:`provenance` gives a table's, a measurement
    script (no records) gives its own ``lines``."""
    return [f"# {title}", "", f"Command: `{command}`  ", *(f"{line}  " for line in lines),
            f"Hardware: {hardware}  ",
            "Versions: " + ", ".join(f"{k} {versions[k]}" for k in
                                     ("torch", "avalanche-lib", "python") if k in versions)
            + "  "]


def provenance(records: Sequence[dict], *, title: str, command: str,
               notes: Sequence[str] = (), changed: Iterable[str] = ()) -> str:
    """The Markdown preamble every report carries: title, exact command, scale (from the
    records' configurations: a digits or subsampled run is labelled reduced; a benchmark that
    is not one of the paper's (:data:`~pall_avalanche.catalog.PAPER_BENCHMARKS`) is named
    as such; a paper-benchmark run with ``changed`` keys names them; only a paper benchmark at
    its configuration is "the paper's protocol"), seeds, hardware and package versions, plus
    the script's own ``notes``.

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
    own = [b for b in benchmarks if b not in (*PAPER_BENCHMARKS, "digits")]
    if own:
        scale += (f" — {', '.join(own)}: not one of the paper's benchmarks "
                  f"({', '.join(PAPER_BENCHMARKS)}), so not the paper's protocol")
    elif reduced:
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
    lines = [*preamble(title, command, hardware="; ".join(devices),
                       versions=records[0].get("versions", {}),
                       lines=[f"Scale: {scale}", f"Seeds: {seeds} ({len(records)} runs)"]),
             "Reproducibility: the same seed, thread count, hardware and versions give the "
             "same numbers bit for bit; another CPU or torch build can move them "
             "(REPRODUCIBILITY.md)  "]
    lines += [f"{note}  " if i < len(notes) - 1 else note for i, note in enumerate(notes)]
    return "\n".join(lines) + "\n\n"


#: What a report consists of: its table's three files and its figures (``<stem>*.png``).
REPORT_SUFFIXES = (".md", ".csv", ".tex")


def _row_labels(markdown: str) -> set[str]:
    """The first cells of the rows of the first table in a report's Markdown."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|---")), len(lines))
    rows = itertools.takewhile(lambda line: line.startswith("| "), lines[start + 1:])
    return {row[2:].split(" | ")[0].strip() for row in rows}


def _keep_earlier_report(stem: Path, markdown: str) -> None:
    """When ``<stem>.md`` is there and has rows the new report (``markdown``) lacks (a run of
    fewer methods in the same folder), rename the earlier report's files — its table's and
    its figures ``<stem>.png``, ``<stem>_*.png`` — to ``<name>.before-<UTC time><suffix>``
    with a :class:`~pall_avalanche.files.RunWarning`, so the new report replaces nothing."""
    earlier = stem.with_name(stem.name + ".md")
    if not earlier.is_file():
        return
    lost = _row_labels(earlier.read_text()) - _row_labels(markdown)
    if not lost:
        return
    moment = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    files = [stem.with_name(stem.name + suffix) for suffix in (*REPORT_SUFFIXES, ".png")]
    files += stem.parent.glob(f"{stem.name}_*.png")
    for path in files:
        if path.is_file() and ".before-" not in path.name:
            os.replace(path, path.with_name(f"{path.stem}.before-{moment}{path.suffix}"))
    warnings.warn(f"{earlier} had rows this report lacks ({', '.join(sorted(lost))}); the "
                  f"earlier report is kept as {stem.name}.before-{moment}.md (with its CSV, "
                  "LaTeX and figures)", RunWarning, stacklevel=3)


def write_report(stem: str | Path, *, preamble: str, numbers: pd.DataFrame,
                 cells: pd.DataFrame, caption: str = "") -> str:
    """Write ``<stem>.csv`` (the numbers), ``<stem>.md`` (preamble + Markdown table +
    :func:`legend`) and ``<stem>.tex`` (the preamble as comments + booktabs table), each
    atomically; return the Markdown. An earlier report there with rows this one lacks is
    kept under another name, with a warning (:func:`_keep_earlier_report`): write the figures
    after the report."""
    stem = Path(stem)
    markdown = preamble + to_markdown(cells) + legend(cells)
    _keep_earlier_report(stem, markdown)
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


def model_size_note(numbers: pd.DataFrame) -> str:
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
