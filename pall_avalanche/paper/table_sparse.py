"""Table 2 of the paper: independent static / dynamic sparse subnetworks vs PALL.

    python benchmarks/table_sparse.py                         # digits: T=5 only
    python benchmarks/table_sparse.py --benchmark tinyimagenet --task-counts 40 100 \
        --alphas 0.01 0.025 0.05 --device cuda

Columns A_l, F_u per T; PALL with N_f = 10 (the paper's choice here) and α = 1/T unless
--alphas is given. Writes table_sparse_<benchmark>.{md,csv,tex} beside the records (--out) or
into --report-dir.
"""

from __future__ import annotations

from pathlib import Path

from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.reports import format_table, label_rows, summary_frame, wide_table

NAME = "table_sparse"
METHODS = ("static_sparse", "dynamic_sparse", "pall", "independent")


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=METHODS)
    parser.add_argument("--task-counts", type=int, nargs="+",
                        help="values of T (default: the configuration's n_tasks; the paper "
                             "uses 40 and 100 on tinyimagenet)")
    parser.add_argument("--alphas", type=float, nargs="+",
                        help="PALL's α values (default 1/T)")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("n_retrain_iters", 10)
    counts = run.args.task_counts or [run.n_tasks]
    points = []
    for t in counts:
        points.append(GridPoint(f"T={t}", {"n_tasks": t},
                                methods=[m for m in METHODS if m != "pall"]))
        for alpha in run.args.alphas or [1 / t]:
            points.append(GridPoint(f"T={t} α={alpha:g}", {"n_tasks": t, "alpha": alpha},
                                    methods=("pall",)))
    records = run_grid(points, run)
    frame = label_rows(summary_frame(records, ("point", "method", "n_tasks", "alpha")),
                       "alpha", "α")
    if not run.args.alphas:   # α = 1/T differs per T: one PALL row
        frame["row"] = frame["label"]
    frame["T"] = [f"T={t}" for t in frame["n_tasks"]]
    cells = format_table(frame, {"A_l": "A_l ↑", "F_u": "F_u ↓"},
                         index={"row": "Method", "T": "T"})
    notes = [f"PALL N_f = {run.value('n_retrain_iters')}, α = "
             + (", ".join(f"{a:g}" for a in run.args.alphas) if run.args.alphas else "1/T")]
    if run.config["benchmark"] == "digits":
        notes.append("digits has 10 classes, so T=5 is the largest T: the paper's T=40/100 "
                     "columns need --benchmark tinyimagenet --task-counts 40 100 (GPU)")
    return finish_report(
        run, records, name=NAME, numbers=frame, notes=notes,
        cells=wide_table(cells, row="Method", column="T"),
        title=f"Table 2 — independent sparse subnetworks vs PALL ({run.config['benchmark']})")


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
