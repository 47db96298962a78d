"""Table A3 of the paper: how PALL's buffer samples are chosen.

    python benchmarks/table_buffer_selection.py               # digits
    python benchmarks/table_buffer_selection.py --benchmark cifar10 --device cuda

Random (default), herding, entropy, confidence, logit distance (config key
``buffer_selection``; :data:`pall_avalanche.options.SELECTION_NAMES`), PALL with α = 1/T.
Writes table_buffer_selection_<benchmark>.{md,csv,tex} beside the records (--out) or into
--report-dir.
"""

from __future__ import annotations

from pathlib import Path

from pall_avalanche.exit_codes import main_guard
from pall_avalanche.options import SELECTION_NAMES
from pall_avalanche.paper.kit import (
    GridPoint,
    finish_report,
    run_grid,
    script_parser,
    start_script,
)
from pall_avalanche.reports import format_table, summary_frame

NAME = "table_buffer_selection"
LABELS = {"random": "Random selection", "herding": "Herding algorithm",
          "entropy": "Entropy-based", "confidence": "Confidence-based",
          "logit_distance": "Logit distance"}


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=("pall",))
    parser.add_argument("--selections", nargs="+", default=list(SELECTION_NAMES),
                        help=f"selection strategies (default all: {', '.join(SELECTION_NAMES)})")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    unknown = [s for s in run.args.selections if s not in SELECTION_NAMES]
    if unknown:
        raise ValueError(f"unknown selection(s) {unknown}; valid: {', '.join(SELECTION_NAMES)}")
    run.default("alpha", 1 / run.n_tasks)
    records = run_grid([GridPoint(LABELS[s], {"buffer_selection": s})
                        for s in run.args.selections], run)
    frame = summary_frame(records, ("point", "method"))
    cells = format_table(frame, {"A_l": "A_l ↑", "F_u": "F_u ↓", "F_u_max": "F_u^max ↓",
                                 "seeds": "Seeds"}, index={"point": "Selection"})
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A3 — buffer selection for PALL ({run.config['benchmark']}, "
              f"T={run.n_tasks})",
        notes=[f"PALL α = {run.value('alpha'):g}, buffer {run.value('buffer_size')}"])


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
