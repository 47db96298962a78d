"""Table A7 and Fig. A1 of the paper: time per learning epoch and per unlearning request.

    python benchmarks/table_timing.py                         # digits, CPU
    python benchmarks/table_timing.py --benchmark cifar10 --device cuda

Every method runs the fixed sequence L0, L1, U0, L2, …, L_{T-1}; the table gives the second
learning request's seconds per epoch and the unlearning request's total seconds, and both as
ratios to Sequential measured in the same run (absolute seconds depend on the hardware). The
figure gives seconds per epoch of every learning request against the number of tasks. PALL with
α = 1/T, N_f = 50. Writes table_timing_<benchmark>.{md,csv,tex,png} beside the records (--out)
or into --report-dir.
"""

from __future__ import annotations

from pathlib import Path

from pall_avalanche.catalog import TABLE1_METHODS
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
    plot_timing_vs_tasks,
    request_timings,
    summary_frame,
)
from pall_avalanche.requests import Request, RequestKind, RequestSequence

NAME = "table_timing"


def timing_sequence(n_tasks: int) -> RequestSequence:
    """L0, L1, U0, L2, …, L_{T-1}: the fixed sequence of the paper's timing table."""
    if n_tasks < 2:
        raise ValueError(f"the timing sequence needs n_tasks >= 2, got {n_tasks}")
    requests = [Request(RequestKind.LEARN, 0), Request(RequestKind.LEARN, 1),
                Request(RequestKind.UNLEARN, 0)]
    requests += [Request(RequestKind.LEARN, t) for t in range(2, n_tasks)]
    return RequestSequence(requests, n_tasks)


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME, default_methods=TABLE1_METHODS)
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    run.default("alpha", 1 / run.n_tasks)
    run.default("n_retrain_iters", 50)
    sequence = timing_sequence(run.n_tasks)
    records = run_grid([GridPoint("L0 L1 U0 …", {"n_unlearn": 1}, requests=sequence)], run)
    frame = summary_frame(records, ("method",), extra={
        "learn_s": lambda r: request_timings(r, 1, 2)[0],
        "unlearn_s": lambda r: request_timings(r, 1, 2)[1]})
    reference = frame[frame["method"] == "sequential"]
    for name in ("learn_s", "unlearn_s"):
        base = float(reference[f"{name}_mean"].iloc[0]) if len(reference) else None
        frame[f"{name}_ratio"] = [m / base if base else None for m in frame[f"{name}_mean"]]
    cells = format_table(frame, {"learn_s": "Learning (s/epoch)",
                                 "learn_s_ratio": "× Sequential",
                                 "unlearn_s": "Unlearning (s)",
                                 "unlearn_s_ratio": "× Sequential ", "seeds": "Seeds"},
                         digits=4)
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=cells,
        title=f"Table A7 — training time per request ({run.config['benchmark']}, "
              f"T={run.n_tasks})",
        notes=["Sequence L0, L1, U0, L2, …; learning = request L1 (seconds per epoch), "
               "unlearning = request U0 (total seconds); ratios to Sequential in the same run",
               f"PALL α = {run.value('alpha'):g}, N_f = {run.value('n_retrain_iters')}"],
        figures={"": lambda path: plot_timing_vs_tasks(records, path)})


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
