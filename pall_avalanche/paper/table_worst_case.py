"""Table A8 of the paper: the worst seed's A_l (A_l^min) and the mean F_u^max, every method.

    python benchmarks/table_worst_case.py                     # digits, Table 1's methods
    python benchmarks/table_worst_case.py --benchmark cifar10 --device cuda

A_l^min is the worst seed's A_l; F_u^max is, as in the paper's Table A8 (whose PALL cells are
Table A1's N_f = 50 cells), the mean over seeds of each seed's F_u^max: the largest drop
a_{i-1,t} − a_{i,t} of a remaining task t at any of the seed's unlearning requests i.
PALL with α = 1/T. Records are shared with Table 1 when the configuration matches (same --out).
Writes table_worst_case_<benchmark>.{md,csv,tex} beside the records (--out) or into
--report-dir.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from pall_avalanche.catalog import TABLE1_METHODS
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.reports import format_table, summary_frame

NAME = "table_worst_case"


def worst_case_table(records: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, cells) of Table A8, one row per method: A_l^min, the minimum over seeds of
    each seed's A_l, and F_u^max as mean ± std over seeds of each seed's F_u^max."""
    frame = summary_frame(records, ("method",))
    cells = format_table(frame, {"A_l_min": "A_l^min ↑",
                                 "F_u_max": "F_u^max ↓ (mean over seeds)", "seeds": "Seeds"})
    return frame, cells


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=TABLE1_METHODS)
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint("default")], run)
    frame, cells = worst_case_table(records)
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A8 — worst case across seeds ({run.config['benchmark']}, "
              f"T={run.n_tasks})",
        notes=[f"PALL α = {run.value('alpha'):g}; A_l^min = min over seeds of each seed's "
               "A_l; F_u^max = mean ± std over seeds of each seed's F_u^max (the largest drop "
               "of a remaining task's accuracy at any of its unlearning requests), as the "
               "paper's Table A8"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
