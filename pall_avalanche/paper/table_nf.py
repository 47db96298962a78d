"""Table A1 of the paper: PALL with N_f ∈ {0, 10, 25, 50, 100} retraining iterations.

    python benchmarks/table_nf.py                             # digits
    python benchmarks/table_nf.py --benchmark cifar10 --device cuda

PALL with α = 1/T; columns A_l, F_u, F_u^max. Writes table_nf_<benchmark>.{md,csv,tex} beside
the records (--out) or into --report-dir.
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
from pall_avalanche.reports import format_table, summary_frame

NAME = "table_nf"


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=("pall",))
    parser.add_argument("--nf", type=int, nargs="+", default=[0, 10, 25, 50, 100],
                        help="N_f values (default 0 10 25 50 100)")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint(f"N_f={n}", {"n_retrain_iters": n})
                        for n in run.args.nf], run)
    frame = summary_frame(records, ("point", "method"))
    cells = format_table(frame, {"A_l": "A_l ↑", "F_u": "F_u ↓", "F_u_max": "F_u^max ↓",
                                 "seeds": "Seeds"}, index={"point": "Setting", "label": "Method"})
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A1 — impact of N_f ({run.config['benchmark']}, T={run.n_tasks})",
        notes=[f"PALL α = {run.value('alpha'):g}"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
