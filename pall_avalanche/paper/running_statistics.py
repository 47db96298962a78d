"""PALL on a user's model with BatchNorm running statistics: F_u with and without BatchNorm,
and with the statistics a retraining made stale refreshed from the buffers or kept, side by
side on the same seeds and request sequences.

    python benchmarks/running_statistics.py                       # seeds 0-4, N_f = 10
    python benchmarks/running_statistics.py --seeds 0 1 --epochs 3 --report-dir reports

The model is a 64-256-256 MLP on scikit-learn's digits (the default benchmark), with or
without a BatchNorm1d (running statistics, no affine parameters) after each hidden layer; PALL
keeps one set of statistics per task. Unlearning re-draws and retrains entries the remaining
tasks use; their statistics were taken with the weights that are gone, unless PALL recomputes
them from each task's buffer (``refresh_statistics``, the default). Every variant drops an
epoch's incomplete last batch (BatchNorm cannot train on a batch of one). Runs with one torch
thread by default (``--threads``), one after another.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

from pall_avalanche.cli import Parser
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.requests import RequestSequence, generate_requests

__all__ = ["VARIANTS", "cli", "main", "run_variant"]

#: name → (BatchNorm after each hidden layer, refresh the statistics after retraining)
VARIANTS = {"no BatchNorm": (False, True),
            "BatchNorm, statistics refreshed from the buffers (default)": (True, True),
            "BatchNorm, statistics kept from learning": (True, False)}
METRICS = ("A_l", "F_l", "F_u", "F_u_max")


def mlp(batch_norm: bool, n_tasks: int = 5, classes_per_task: int = 2):
    """64 → 256 → 256 (ReLU), a BatchNorm1d without affine parameters after each hidden layer
    if asked, and the multi-head output (a ``TaskIncrementalNet``)."""
    from torch import nn

    from pall_avalanche.models import TaskIncrementalNet

    layers: list[nn.Module] = [nn.Flatten()]
    for width_in, width in ((64, 256), (256, 256)):
        layers.append(nn.Linear(width_in, width))
        if batch_norm:
            layers.append(nn.BatchNorm1d(width, affine=False))
        layers.append(nn.ReLU())
    return TaskIncrementalNet(nn.Sequential(*layers), 256, n_tasks, classes_per_task)


def run_variant(batch_norm: bool, refresh: bool, *, seed: int, epochs: int,
                n_retrain_iters: int, requests: RequestSequence | None = None
                ) -> dict[str, float]:
    """A_l, F_l, F_u and F_u^max of PALL (the digits configuration's hyper-parameters, α 0.2,
    buffer 100, β 0.5) on :func:`mlp` over ``requests`` (default: the paper's request
    sequence of ``seed``)."""
    import torch

    from pall_avalanche.data import build_benchmark
    from pall_avalanche.evaluation import compute_metrics, request_evaluator
    from pall_avalanche.requests.streams import RequestStream
    from pall_avalanche.strategies import PALL

    torch.manual_seed(seed)
    benchmark = build_benchmark("digits", seed=seed)
    if requests is None:
        requests = generate_requests(n_tasks=5, n_unlearn=3, seed=seed)
    model = mlp(batch_norm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    strategy = PALL(model=model, optimizer=optimizer, alpha=0.2, n_retrain_iters=n_retrain_iters,
                    beta=0.5, buffer_size=100, train_mb_size=32, train_epochs=epochs,
                    eval_mb_size=32, refresh_statistics=refresh,
                    evaluator=request_evaluator(benchmark.test_stream, 32))
    for exp in RequestStream(benchmark, requests):
        strategy.train(exp, drop_last=True)     # BatchNorm cannot train on a last batch of 1
    rows = strategy.request_log.accuracy
    metrics = compute_metrics(rows, requests)
    return {name: metrics[name] for name in METRICS}


def _cell(values: list[float]) -> str:
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.2f}{spread}"


def main(argv=None) -> None:
    parser = Parser(prog="running_statistics.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="seeds (each: its class split and request sequence; default 0-4)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs per task (default 10)")
    parser.add_argument("--n-retrain-iters", type=int, default=10,
                        help="N_f, retraining steps per unlearning request (default 10)")
    parser.add_argument("--requests", default="L0 L1 L2 L3 L4 U1",
                        help="a fixed request sequence run beside the paper's sequences, "
                             "e.g. 'L0 L1 L2 L3 L4 U1' (the default: a task whose entries "
                             "every later task uses is unlearned; 'none' to skip)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--report-dir", type=Path,
                        help="write running_statistics_digits.md there (default: print only)")
    args = parser.parse_args(argv)
    for name, value, low in (("--epochs", args.epochs, 1), ("--threads", args.threads, 1),
                             ("--n-retrain-iters", args.n_retrain_iters, 0)):
        if value < low:
            raise ValueError(f"{name} {value}: give an integer >= {low}")
    if any(seed < 0 for seed in args.seeds):
        raise ValueError(f"--seeds {args.seeds}: seeds are integers >= 0")
    fixed = None if args.requests == "none" else RequestSequence.parse(args.requests, 5)
    import torch  # after the arguments are checked: --help and refusals stay fast

    from pall_avalanche.reports import preamble
    from pall_avalanche.runs.engine import device_info, versions

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    tables = {"the paper's request sequence of each seed": None}
    if fixed is not None:
        tables[f"the sequence {fixed}"] = fixed
    results = {(table, name): [run_variant(*flags, seed=seed, epochs=args.epochs,
                                           n_retrain_iters=args.n_retrain_iters,
                                           requests=requests) for seed in args.seeds]
               for table, requests in tables.items() for name, flags in VARIANTS.items()}
    minutes = (time.perf_counter() - start) / 60
    info = device_info(torch.device("cpu"))
    lines = [*preamble("PALL with BatchNorm running statistics (digits, reduced CPU run)",
                       f"python benchmarks/running_statistics.py {shlex.join(sys.argv[1:])}",
                       hardware=f"cpu, {info['name']}, {args.threads} torch thread(s); "
                                f"{minutes:.1f} min in all", versions=versions(),
                       lines=[f"Scale: REDUCED (digits MLP, {args.epochs} epochs per task, N_f "
                              f"= {args.n_retrain_iters}, seeds "
                              f"{' '.join(map(str, args.seeds))})"]), ""]
    for table in tables:
        lines += [f"On {table}:", "", "| Model | A_l ↑ | F_l ↓ | F_u ↓ | F_u^max ↓ |",
                  "|---|---|---|---|---|"]
        for name in VARIANTS:
            cells = [_cell([run[m] for run in results[table, name]]) for m in METRICS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Mean ± standard deviation over seeds (percentage points). F_u is the "
              "accuracy the remaining tasks lose per unlearning request; F_u^max the worst "
              "single loss. With running statistics kept from learning, a remaining task is "
              "normalised with statistics of weights that the retraining replaced."]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if args.report_dir is not None:
        args.report_dir.mkdir(parents=True, exist_ok=True)
        (args.report_dir / "running_statistics_digits.md").write_text(markdown)


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
