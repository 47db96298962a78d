"""The command line: ``python -m pall_avalanche.reports RESULTS_DIR [RESULTS_DIR ...]
[--out reports/NAME]`` (installed as ``pall-report``) reports every record found under
results folders; with ``--table1``, as the paper's Table 1 with the benchmarks side by side."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from pall_avalanche.cli import Parser
from pall_avalanche.evaluation.metrics import METRIC_NAMES
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.reports.aggregate import (
    chance_by_benchmark,
    load_records,
    summary_frame,
    varying_keys,
)
from pall_avalanche.reports.figures import (
    plot_accuracy_heatmaps,
    plot_metrics_vs,
    plot_table1,
    plot_timing_vs_tasks,
)
from pall_avalanche.reports.render import (
    COLUMNS,
    format_table,
    model_size_note,
    provenance,
    table1_side_by_side,
    write_report,
)


def _settings(records: Sequence[dict]) -> list[dict]:
    """Label each record with the configuration keys that vary among its method's records."""
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    out = []
    for runs in by_method.values():
        varying = varying_keys([r["config"] for r in runs])
        for r in runs:
            label = ", ".join(f"{k}={r['config'].get(k)}" for k in varying) or "default"
            out.append({**r, "point": r.get("point", label)})
    return out


_TABLE1_HELP = """\
--table1: the paper's Table 1 with every benchmark found side by side, e.g. after

    python benchmarks/table1.py --benchmark cifar10 --data-root ~/data --device cuda
    python benchmarks/table1.py --benchmark cifar100 --data-root ~/data --device cuda

(records under results/table1/<benchmark>, the script's default --out):

    python -m pall_avalanche.reports --table1 results/table1/cifar10 results/table1/cifar100 \
        --out reports/table1_paper

Rows: the methods in Table 1's order, PALL once per α; column "Model size" symbolic (d,
d + M_i for the subnetwork methods, d × |Ω_i| for Independent; the measured MB at |Ω| = T
are in the preamble and the CSV's model_size_mb); then A_l, A_u, F_l, F_u per benchmark.
The CSV has one row per benchmark and method. Every row must come from one configuration
(seeds aside): folders that mix runs of other settings are refused.
"""


def main(argv: Sequence[str] | None = None) -> str:
    """``python -m pall_avalanche.reports RESULTS_DIR [RESULTS_DIR ...] [--out reports/NAME]``:
    a table (.md, .csv, .tex) of every (method, setting) found, accuracy heatmaps (first seed
    of each), A_l/F_u against N_u when several N_u were run, and learning time per task; with
    ``--table1``, the paper's Table 1 with the benchmarks side by side
    (:func:`table1_side_by_side`)."""
    parser = Parser(prog="python -m pall_avalanche.reports",
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
    command = "python -m pall_avalanche.reports " + shlex.join(argv)
    if args.table1:
        frame, cells = table1_side_by_side(records)
        title = args.title or ("Table 1 — " + ", ".join(dict.fromkeys(frame["benchmark"]))
                               + " side by side")
        notes = [model_size_note(frame), f"Figure: {args.out.name}.png (A_l against A_u per "
                 "row and benchmark, exact methods filled, chance dashed)"]
        figures = [partial(plot_table1, frame, chance_by_benchmark(records), f"{args.out}.png",
                           title)]
    else:
        frame, cells, title, notes, figures = _results_report(records, args.out,
                                                              args.title or "Results")
    preamble = provenance(records, title=title, command=command, notes=notes)
    markdown = write_report(args.out, preamble=preamble, numbers=frame, cells=cells,
                            caption=title)
    for draw in figures:          # after the report, which may keep an earlier one's figures
        draw()
    print(markdown)
    return markdown


def _results_report(records: list[dict], out: Path, title: str
                    ) -> tuple[pd.DataFrame, pd.DataFrame, str, list[str], list[Callable]]:
    """The generic report of :func:`main`: (numbers, cells, title, notes, the functions that
    draw its figures next to ``out``)."""
    records = sorted(_settings(records), key=lambda r: (r["method"], str(r["point"]), r["seed"]))
    frame = summary_frame(records, ("benchmark", "method", "point"))
    cells = format_table(frame, {n: COLUMNS[n] for n in METRIC_NAMES} | {
        "A_l_min": "A_l^min", "model_size_mb": "Model size (MB)", "seeds": "Seeds"},
        index={"benchmark": "Benchmark", "label": "Method", "point": "Setting"})
    names = [f"{out.name}_heatmaps.png", f"{out.name}_timing.png"]
    first = {}
    for record in records:
        first.setdefault((record["method"], record["point"]), record)
    draws = [partial(plot_accuracy_heatmaps, list(first.values()), f"{out}_heatmaps.png", title),
             partial(plot_timing_vs_tasks, records, f"{out}_timing.png", title)]
    by_nu = summary_frame(records, ("method", "n_unlearn"))
    if by_nu["n_unlearn"].nunique() > 1:
        draws.append(partial(plot_metrics_vs, by_nu, "n_unlearn", ("A_l", "F_u"),
                             f"{out}_vs_nu.png", xlabel="N_u"))
        names.append(f"{out.name}_vs_nu.png")
    return frame, cells, title, [f"Figures: {', '.join(names)}"], draws


def cli(argv: Sequence[str] | None = None) -> None:
    """The command: ``python -m pall_avalanche.reports``, installed as ``pall-report``."""
    main_guard(main, argv, prog="python -m pall_avalanche.reports")
