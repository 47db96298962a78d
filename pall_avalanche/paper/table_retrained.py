"""Table A2 of the paper: PALL's retrained parameters θ̄ per unlearning request.

    python benchmarks/table_retrained.py                      # digits
    python benchmarks/table_retrained.py --benchmark cifar10 --device cuda

PALL with α = 1/T; rows d, d/T, |θ̄|, |θ̄|/d and the paper's mean absolute difference of θ̄
before and after retraining (|θ̄ after retraining − θ̄ as re-drawn|), averaged over the
unlearning requests of every seed (``unlearning_stats`` of the records). The CSV also holds
|θ̄ after retraining − θ̄ before unlearning| (``retrained_mean_abs_change_from_learned``).
Writes table_retrained_<benchmark>.{md,csv,tex} beside the records (--out) or into
--report-dir.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.reports import format_mean_std, summary_frame

NAME = "table_retrained"


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=("pall",))
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint("default")], run)
    frame = summary_frame(records, ("method",))
    row = frame.iloc[0]
    if row["retrained_mean"] is None or pd.isna(row["retrained_mean"]):
        raise ValueError(f"the records of {list(frame['method'])} carry no unlearning_stats "
                         "with retrained parameters; run PALL with n_unlearn > 0")
    split = records[0]["split"]
    from pall_avalanche.models import build_model, count_parameters  # torch: after the runs

    d = count_parameters(build_model(run.config["model"], input_shape=tuple(split["input_shape"]),
                                     n_tasks=split["n_tasks"],
                                     classes_per_task=split["classes_per_task"],
                                     **(run.config.get("model_kwargs") or {})))
    column = f"{run.config['benchmark']} w/ {run.config['model']}"
    fraction_std = row["retrained_fraction_std"]
    cells = pd.DataFrame({"": ["# total params: d", "# subnetwork params: d/T",
                               "# retrained params: |θ̄|", "ratio of retrained params (%)",
                               "mean absolute difference (retraining) ↑"],
                          column: [f"{d:,.0f}", f"{d / run.n_tasks:,.0f}",
                                   format_mean_std(row["retrained_mean"], row["retrained_std"], 1),
                                   format_mean_std(100 * row["retrained_fraction_mean"],
                                                   None if pd.isna(fraction_std)
                                                   else 100 * fraction_std),
                                   format_mean_std(row["retrained_mean_abs_change_mean"],
                                                   row["retrained_mean_abs_change_std"], 4)]})
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A2 — retrained parameters ({run.config['benchmark']}, T={run.n_tasks})",
        notes=[f"PALL α = {run.value('alpha'):g}; mean ± std over every unlearning request of "
               "every seed"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
