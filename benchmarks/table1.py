"""Table 1 of the paper: every method on one benchmark, mean ± std over seeds.

    python benchmarks/table1.py                       # digits, Table 1's methods, CPU preset
    python benchmarks/table1.py --methods all,ablations   # + ER (Retraining), sparse (Ind.)
    python benchmarks/table1.py --methods sequential,independent --seeds 0 1 2
    python benchmarks/table1.py --benchmark cifar10 --data-root ~/data --device cuda

Records go to ``--out`` (one JSON per method and seed, reused on reruns); the table is
printed and written to ``<report-dir>/table1_<benchmark>.{md,csv}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from pall_avalanche.cli import add_run_arguments, config_from_args, main_guard, parse_methods
from pall_avalanche.report import table1_frame, write_table
from pall_avalanche.runner import run_experiments
from pall_avalanche.wandb_logging import WandbSettings, default_group, log_table

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out="results/table1")
    args = parser.parse_args(argv)
    methods = parse_methods(args.methods)
    config, seeds, requests = config_from_args(args, CONFIG_DIR)
    wandb = WandbSettings.from_args(args)
    records = run_experiments(methods, seeds, config, args.out, requests=requests,
                              device=args.device, show_progress=not args.quiet, wandb=wandb)
    frame = table1_frame(records, methods)
    command = "python benchmarks/table1.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    device = records[0]["device"]
    scale = ("embedded digits with a CPU preset: a reduced run, not the paper's protocol"
             if config["benchmark"] == "digits" else "the paper's protocol")
    if config.get("train_per_task"):
        scale = f"reduced: {config['train_per_task']} training samples per task, {scale}"
    preamble = (
        f"# Table 1 — {config['benchmark']} (T={config['n_tasks']}, N_u="
        f"{config['n_unlearn']}, model {config['model']}, {config['epochs']} epochs/task)\n\n"
        f"Command: `{command.strip()}`  \nScale: {scale}  \nSeeds: {seeds}  \n"
        f"Hardware: {device['type']} ({device['name']})  \n"
        f"Records: `{args.out}`\n\n"
    )
    markdown = write_table(frame, args.report_dir / f"table1_{config['benchmark']}", preamble)
    log_table(wandb, f"table1_{config['benchmark']}", frame, config=config,
              markdown=preamble + markdown, group=default_group(config))
    print(markdown)


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
