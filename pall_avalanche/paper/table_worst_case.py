"""Table A8 of the paper: worst cases across seeds, A_l^min and F_u^max, for every method.

    python benchmarks/table_worst_case.py                     # digits, Table 1's methods
    python benchmarks/table_worst_case.py --benchmark cifar10 --device cuda

PALL with α = 1/T. Records are shared with Table 1 when the configuration matches (same --out).
Writes table_worst_case_<benchmark>.{md,csv,tex} beside the records (--out) or into
--report-dir.
"""

from __future__ import annotations

from pathlib import Path

from pall_avalanche.catalog import TABLE1_METHODS
from pall_avalanche.cli import main_guard
from pall_avalanche.experiments import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.report import format_table, summary_frame

NAME = "table_worst_case"


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=TABLE1_METHODS)
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint("default")], run)
    frame = summary_frame(records, ("method",))
    cells = format_table(frame, {"A_l_min": "A_l^min ↑", "F_u_max_max": "F_u^max ↓",
                                 "seeds": "Seeds"})
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A8 — worst case across seeds ({run.config['benchmark']}, "
              f"T={run.n_tasks})",
        notes=[f"PALL α = {run.config['alpha']:g}; A_l^min = min over seeds of A_l, "
               "F_u^max = max over seeds and unlearning requests"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
