"""Table 1 of the paper: every method on one benchmark, mean ± std over seeds.

    python benchmarks/table1.py                       # digits, Table 1's methods, CPU preset
    python benchmarks/table1.py --methods all,ablations   # + ER (Retraining), sparse (Ind.)
    python benchmarks/table1.py --methods sequential,independent --seeds 0 1 2
    python benchmarks/table1.py --benchmark cifar10 --data-root ~/data --device cuda

Records go to ``--out`` (one JSON per method and seed, reused on reruns); the table is
printed and written to ``<report-dir>/table1_<benchmark>.{md,csv,tex}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pall_avalanche.cli import add_run_arguments, main_guard, run_options
from pall_avalanche.experiments import start_script
from pall_avalanche.report import provenance, table1_cells, table1_frame, write_report
from pall_avalanche.runner import run_experiments
from pall_avalanche.wandb_logging import WandbSettings, default_group, log_table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="table1.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out="results/table1")
    run = start_script(parser, argv, script="benchmarks/table1.py")
    config = run.config
    records = run_experiments(run.methods, run.seeds, config, run.args.out,
                              requests=run.requests, **run_options(run.args))
    frame = table1_frame(records, run.methods)
    title = (f"Table 1 — {config['benchmark']} (T={config['n_tasks']}, N_u="
             f"{config['n_unlearn']}, model {config['model']}, {config['epochs']} epochs/task)")
    preamble = provenance(records, title=title, command=run.command,
                          notes=[f"Records: `{run.args.out}`"], changed=run.explicit)
    stem = f"table1_{config['benchmark']}"
    markdown = write_report(Path(run.args.report_dir) / stem, preamble=preamble, numbers=frame,
                            cells=table1_cells(frame), caption=title)
    log_table(WandbSettings.from_args(run.args), stem, frame, config=config,
              markdown=markdown, group=default_group(config))
    print(markdown)


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
