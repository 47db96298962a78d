"""Fig. 3 of the paper: A_l and F_u against the number of unlearning requests N_u.

    python benchmarks/fig3.py                                 # digits, N_u = 1..T-1
    python benchmarks/fig3.py --benchmark cifar100 --n-unlearn-grid 1 3 5 7 9 --device cuda

Methods that retrain or fine-tune on unlearning (the paper leaves out GEM, "similar to ER"),
PALL with α = 1/T (override with --alpha). Writes fig3_<benchmark>.{md,csv,tex,png} beside the
records (--out) or into --report-dir.
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
from pall_avalanche.reports import format_table, plot_metrics_vs, summary_frame, wide_table

NAME = "fig3"
METHODS = ("lsf", "er", "derpp", "pall", "independent")


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=METHODS)
    parser.add_argument("--n-unlearn-grid", type=int, nargs="+",
                        help="the N_u values (default 1 .. T-1)")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    grid = run.args.n_unlearn_grid or list(range(1, run.n_tasks))
    records = run_grid([GridPoint(f"N_u={n}", {"n_unlearn": n}) for n in grid], run)
    frame = summary_frame(records, ("point", "method", "n_unlearn"))
    cells = format_table(frame, {"A_l": "A_l ↑", "F_u": "F_u ↓"},
                         index={"label": "Method", "point": "N_u"})
    title = f"Fig. 3 — A_l and F_u vs N_u ({run.config['benchmark']}, T={run.n_tasks})"
    return finish_report(
        run, records, name=NAME, numbers=frame, title=title,
        cells=wide_table(cells, row="Method", column="N_u"),
        notes=[f"PALL α = {run.value('alpha'):g}; N_u grid {grid}"],
        figures={"": lambda path: plot_metrics_vs(frame, "n_unlearn", ("A_l", "F_u"), path,
                                                  xlabel="N_u", title=title)})


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
