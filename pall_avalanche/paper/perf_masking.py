"""What subnetwork masking and the input pipeline cost: PALL vs Sequential steps, per-sample vs
batched input, side by side; with --table, the paper's Table A7 on this machine.

    python benchmarks/perf_masking.py                   # ResNet-18, CIFAR shape, batch 32, CPU
    python benchmarks/perf_masking.py --report-dir reports        # also writes perf_masking.md
    python benchmarks/perf_masking.py --device cuda --table       # the GPU table (A7 + hours)

Default mode. Both strategies are built from the S-CIFAR10 configuration (ResNet-18, SGD with
momentum and weight decay) and train on the same synthetic CIFAR-shaped tasks (uint8 images
through the benchmark's real input path), unshuffled, so every step of one sees the images of
the other's (their random crops and flips differ); they alternate task by task in one process
so drift of the machine hits both alike. A step is one training iteration as Avalanche runs it
(forward, loss, backward, PALL's gradient masking, optimizer step), timed by a plugin with
device synchronisation; the first ``--warmup`` steps of every task are discarded. On CPU the
ratio uses process CPU time with one torch thread by default, which other processes on a shared
machine barely disturb (wall time is printed beside it); on CUDA it uses synchronised wall
time. Printed: the median step times, their ratio, the time of one PALL unlearning request
(re-draw + N_f retraining iterations), the mask storage per task, and the training images per
second of the two input pipelines (Avalanche's DataLoader with per-sample torchvision
transforms, and the batched device-resident one) on one S-CIFAR10 task, alternating. The last
line is the step ratio alone.

--table. For each column of the paper's Table A7 (S-CIFAR10/ResNet-18, S-CIFAR100/ResNet-34,
S-TinyImageNet/ViT-T/8, each with its configuration's batch size, optimizer, α = 1/T and
N_f = 50): seconds per epoch of Sequential, WSN and PALL (the second learning request, input
pipeline included) and of PALL with every per-layer threshold method, one PALL unlearning
request, and the milliseconds a step spends selecting masks per threshold method; then the
estimated device-hours of every paper table from those timings. Printed and written to
``<report-dir>/perf_masking_table_<device>.md`` (default report dir results/perf_masking).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pall_avalanche.cli import Parser, check_device
from pall_avalanche.exit_codes import main_guard

COLUMN_NAMES = ("cifar10", "cifar100", "tinyimagenet")


def main(argv=None) -> str:
    parser = Parser(prog="perf_masking.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=12,
                        help="training iterations per task and method (default: 12)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="iterations discarded at the start of every task (default: 2)")
    parser.add_argument("--tasks", type=int, default=3,
                        help="tasks learned by each method, alternating (default: 3)")
    parser.add_argument("--model", default="resnet18", help="model name (default: resnet18)")
    parser.add_argument("--pipeline-images", type=int, default=2000,
                        help="images of the task the input pipelines pass over (default: 2000)")
    parser.add_argument("--pipeline-repeats", type=int, default=3,
                        help="passes of each input pipeline, alternating (default: 3)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default: 1, see the notes below)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-dir", type=Path,
                        help="write the figures as Markdown there (default mode: "
                             "perf_masking.md, only when given; --table: "
                             "perf_masking_table_<device>.md, default results/perf_masking)")
    table = parser.add_argument_group("--table: the paper's Table A7 on this machine")
    table.add_argument("--table", action="store_true", help="measure the Table A7 columns")
    table.add_argument("--columns", nargs="+", default=list(COLUMN_NAMES),
                       help=f"columns to measure (default: all of {', '.join(COLUMN_NAMES)})")
    table.add_argument("--table-images", type=int,
                       help="training images per task (default: the full task, 10,000 or "
                            "5,000); fewer for a quick look, the seconds per epoch are then "
                            "scaled to the full task")
    table.add_argument("--retrain-iters", type=int,
                       help="N_f of the timed unlearning request (default: 50, the paper's)")
    table.add_argument("--compile", action="store_true",
                       help="torch.compile every timed strategy's backbone")
    table.add_argument("--repeats", type=int, default=20,
                       help="timings of the mask selection per threshold method (default: 20)")
    args = parser.parse_args(argv)
    check_arguments(args)
    check_device(args.device)
    if args.table:
        from pall_avalanche.paper.perf_report import run_table  # torch: input is good

        return run_table(args)
    from pall_avalanche.paper.perf_report import run_default

    return run_default(args)


def check_arguments(args: argparse.Namespace) -> None:
    """One line per bad option, before anything is measured."""
    if args.iterations <= args.warmup:
        raise ValueError(f"--iterations={args.iterations} must exceed --warmup={args.warmup}")
    if not 2 <= args.tasks <= 5:
        raise ValueError(f"--tasks={args.tasks} must be in 2..5 (S-CIFAR10 has 5 tasks)")
    unknown = [c for c in args.columns if c not in COLUMN_NAMES]
    if unknown:
        raise ValueError(f"--columns {' '.join(unknown)}: unknown; valid: "
                         f"{', '.join(COLUMN_NAMES)}")
    for option in ("batch_size", "pipeline_images", "pipeline_repeats", "threads", "repeats",
                   "table_images"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise ValueError(f"--{option.replace('_', '-')}={value} must be >= 1")
    if args.retrain_iters is not None and args.retrain_iters < 1:
        raise ValueError(f"--retrain-iters={args.retrain_iters} must be >= 1 (the estimate "
                         "scales one timed request to every table's N_f)")


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
