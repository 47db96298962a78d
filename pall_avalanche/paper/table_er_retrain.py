"""Table A5 of the paper, ER (Retraining): retraining from scratch on the buffers vs PALL.

    python benchmarks/table_er_retrain.py                     # digits
    python benchmarks/table_er_retrain.py --benchmark cifar10 --device cuda

Rows Independent, PALL (α = 1/T), ER (Retraining), ER. Writes
table_er_retrain_<benchmark>.{md,csv,tex} beside the records (--out) or into --report-dir.
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
from pall_avalanche.reports import COLUMNS, format_table, summary_frame

NAME = "table_er_retrain"
METHODS = ("independent", "pall", "er_retrain", "er")


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=METHODS)
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint("default")], run)
    frame = summary_frame(records, ("method",))
    retrain_epochs = next((r["config"].get("retrain_epochs") for r in records
                           if r["method"] == "er_retrain"), None)
    cells = format_table(frame, {k: COLUMNS[k] for k in ("A_l", "A_u", "F_l", "F_u")}
                         | {"seeds": "Seeds"})
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A5 — ER (Retraining) vs PALL ({run.config['benchmark']}, T={run.n_tasks})",
        notes=[f"PALL α = {run.value('alpha'):g}; ER (Retraining) retrains "
               f"{retrain_epochs} epochs on the remaining buffers after each unlearning "
               "request"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
