"""Table 1 of the paper: every method on one benchmark, mean ± std over seeds.

    python benchmarks/table1.py                       # digits, Table 1's methods, CPU preset
    python benchmarks/table1.py --methods all,ablations   # + ER (Retraining), sparse (Ind.)
    python benchmarks/table1.py --methods sequential,independent --seeds 0 1 2
    python benchmarks/table1.py --benchmark cifar10 --data-root ~/data --device cuda
    python benchmarks/table1.py --alpha 0.1            # one PALL row, at α = 0.1

As in the paper, PALL runs once per α ∈ {0.05, 0.1, 0.2} (rows "PALL (α=0.05)" ...) and
every other method once with the configuration (WSN with its α, 1/T); --alpha or
--set alpha=... (or methods.pall.alpha=...) runs PALL at that α only. Records go to
``--out`` (one JSON per method, α and seed, reused on reruns); the table is printed and
written to ``<report-dir>/table1_<benchmark>.{md,csv,tex}``, with the figure
``table1_<benchmark>.png`` (A_l against A_u per row, exact methods marked, chance dashed).
Several benchmarks side by side, as the paper prints Table 1:
``python -m pall_avalanche.reports --table1 DIR ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pall_avalanche.catalog import TABLE1_ALPHAS
from pall_avalanche.cli import Parser, add_run_arguments
from pall_avalanche.config import resolve_method_config
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import GridPoint, finish, left_out_notes, run_grid, start_script
from pall_avalanche.reports import (
    chance_by_benchmark,
    epochs_per_task,
    plot_table1,
    provenance,
    table1_cells,
    table1_frame,
    write_report,
)
from pall_avalanche.runs.wandb_logging import WandbSettings, default_group, log_table

#: Command-line keys that fix PALL's α: Table 1 then has one PALL row, at that α.
ALPHA_KEYS = {"alpha", "methods.pall.alpha"}


def main(argv=None) -> None:
    parser = Parser(prog="table1.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out="results/table1")
    run = start_script(parser, argv, script="benchmarks/table1.py")
    config = run.config
    if ALPHA_KEYS & run.explicit:
        points = [GridPoint("Table 1")]
        alphas = [resolve_method_config(config, "pall")["alpha"]]
    else:   # methods.pall.alpha: PALL's α alone, whatever the configuration file sets for it
        points = [GridPoint("Table 1", methods=[m for m in run.methods if m != "pall"]),
                  *(GridPoint(f"α={a:g}", {"methods.pall.alpha": a}, methods=("pall",))
                    for a in TABLE1_ALPHAS)]
        alphas = TABLE1_ALPHAS
    records = run_grid(points, run)
    frame = table1_frame(records, run.methods)
    title = (f"Table 1 — {config['benchmark']} (T={config['n_tasks']}, N_u="
             f"{config['n_unlearn']}, model {config['model']}, {epochs_per_task(records)})")
    stem = f"table1_{config['benchmark']}"
    figure = Path(run.args.report_dir) / f"{stem}.png"
    notes = [f"Records: `{run.args.out}`", f"Figure: {figure.name} (A_l against A_u per row, "
             "exact methods filled, chance dashed)", *left_out_notes(run)]
    if "pall" in run.methods:
        notes.insert(0, f"PALL α = {', '.join(f'{a:g}' for a in alphas)}; the other methods "
                        f"with the configuration (WSN: α = {run.value('alpha', 'wsn'):g})")
    preamble = provenance(records, title=title, command=run.command, notes=notes,
                          changed=run.explicit)
    markdown = write_report(Path(run.args.report_dir) / stem, preamble=preamble, numbers=frame,
                            cells=table1_cells(frame), caption=title)
    plot_table1(frame, chance_by_benchmark(records), figure, title)   # after: see write_report
    log_table(WandbSettings.from_args(run.args), stem, frame, config=config,
              markdown=markdown, group=default_group(config))
    print(markdown)
    finish(run, records)


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
