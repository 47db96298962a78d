"""Table A6 of the paper: a longer sequence with many unlearning requests.

    python benchmarks/table_scalability.py                    # digits: T=5, N_u = 1..4
    python benchmarks/table_scalability.py --benchmark tinyimagenet --set n_tasks=100 \
        --alphas 0.01 0.025 0.05 --device cuda                # the paper: N_u 3 5 10 20 50

Columns A_l, F_l, F_u per N_u; PALL with α = 1/T unless --alphas is given and N_f = 10 (the
paper's Table 2 caption; its T = 100 PALL cells are Table A6's N_u = 3 column; the paper does
not state DER++'s N_f here: the configuration's). Writes
table_scalability_<benchmark>.{md,csv,tex,png} beside the records (--out) or into --report-dir.
"""

from __future__ import annotations

from pathlib import Path

from pall_avalanche.config import resolve_method_config
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.reports import (
    format_table,
    label_rows,
    plot_metrics_vs,
    summary_frame,
    wide_table,
)

NAME = "table_scalability"
METHODS = ("sequential", "ewc", "derpp", "packnet", "wsn", "pall", "independent")
PAPER_GRID = (3, 5, 10, 20, 50)


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=METHODS)
    parser.add_argument("--n-unlearn-grid", type=int, nargs="+",
                        help=f"N_u values (default {PAPER_GRID} below T; 1..T-1 for T < 10)")
    parser.add_argument("--alphas", type=float, nargs="+", help="PALL's α values (default 1/T)")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default_for("pall", "n_retrain_iters", 10)
    t = run.n_tasks
    grid = run.args.n_unlearn_grid or (
        [n for n in PAPER_GRID if n < t] if t >= 10 else list(range(1, t)))
    alphas = run.args.alphas or [1 / t]
    points = []
    for n in grid:
        points.append(GridPoint(f"N_u={n}", {"n_unlearn": n},
                                methods=[m for m in METHODS if m != "pall"]))
        points += [GridPoint(f"N_u={n} α={a:g}", {"n_unlearn": n, "alpha": a},
                             methods=("pall",)) for a in alphas]
    records = run_grid(points, run)
    frame = label_rows(summary_frame(records, ("point", "method", "n_unlearn", "alpha")),
                       "alpha", "α")
    frame["N_u"] = [f"N_u={n}" for n in frame["n_unlearn"]]
    cells = format_table(frame, {"exact": "Exact", "A_l": "A_l", "F_l": "F_l", "F_u": "F_u"},
                         index={"row": "Method", "N_u": "N_u"})
    notes = [f"T = {t}; N_u grid {grid}; PALL α = {', '.join(f'{a:g}' for a in alphas)}, "
             f"N_f = {resolve_method_config(run.config, 'pall')['n_retrain_iters']}"]
    if t < 100:
        notes.append(f"Scaled down: the paper runs tinyimagenet with T=100 and N_u up to 50; "
                     f"here T={t} (run --benchmark tinyimagenet --set n_tasks=100 for the "
                     "paper's setting)")
    return finish_report(
        run, records, name=NAME, numbers=frame, notes=notes,
        cells=wide_table(cells, row="Method", column="N_u"),
        title=f"Table A6 — scalability ({run.config['benchmark']}, T={t})",
        figures={"": lambda path: plot_metrics_vs(
            frame, "n_unlearn", ("A_l", "F_u"), path, xlabel="N_u",
            title=f"Table A6 — A_l and F_u vs N_u ({run.config['benchmark']}, T={t})")})


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
