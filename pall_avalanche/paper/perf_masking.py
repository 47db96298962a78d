"""What subnetwork masking costs: PALL vs Sequential training steps, side by side.

    python benchmarks/perf_masking.py                   # ResNet-18, CIFAR shape, batch 32, CPU
    python benchmarks/perf_masking.py --device cuda --iterations 100

Both strategies are built from the S-CIFAR10 configuration (ResNet-18, SGD with momentum and
weight decay) and train on the same synthetic CIFAR-shaped tasks, unshuffled, so every step of
one sees exactly the batches of the other; they alternate task by task in one process so drift
of the machine hits both alike. A step is one training iteration as Avalanche runs it (forward,
loss, backward, PALL's gradient masking, optimizer step), timed by a plugin with device
synchronisation; the first ``--warmup`` steps of every task are discarded. On CPU the ratio
uses process CPU time with one torch thread by default, which other processes on a shared
machine barely disturb (wall time is printed beside it); on CUDA it uses synchronised wall
time. Printed: the median step times, their ratio, the time of one PALL unlearning request
(re-draw + N_f retraining iterations), and the mask storage per task (in memory and on disk).
The last line is the ratio alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pall_avalanche.cli import Parser, check_device, main_guard


def main(argv=None) -> None:
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
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default: 1, see the notes below)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.iterations <= args.warmup:
        raise ValueError(f"--iterations={args.iterations} must exceed --warmup={args.warmup}")
    if not 2 <= args.tasks <= 5:
        raise ValueError(f"--tasks={args.tasks} must be in 2..5 (S-CIFAR10 has 5 tasks)")
    check_device(args.device)
    from pall_avalanche.paper.masking_cost import measure_masking  # torch: input is good

    out = measure_masking(batch_size=args.batch_size, iterations=args.iterations,
                          warmup=args.warmup, tasks=args.tasks, model=args.model,
                          device_name=args.device, threads=args.threads, seed=args.seed)
    medians = out["medians"]
    n_steps = args.tasks * (args.iterations - args.warmup)
    print(f"{args.model}, batch {args.batch_size}, {out['where']}; {n_steps} timed steps per "
          f"method over {args.tasks} tasks")
    for method in ("sequential", "pall"):
        print(f"{method:>10} step (median): {medians[method, 'wall'] * 1e3:8.1f} ms wall, "
              f"{medians[method, 'cpu'] * 1e3:8.1f} ms cpu")
    print(f"unlearning request (pall, N_f={out['n_retrain_iters']}): "
          f"{out['unlearn_seconds']:.2f} s")
    print(f"mask storage per task: {out['mask_bytes_per_task'] / 2**20:.3f} MiB in memory, "
          f"{out['mask_disk_bytes_per_task'] / 2**20:.3f} MiB on disk")
    print(f"pall / sequential step-time ratio ({out['clock']} time):")
    print(f"{out['ratio']:.3f}")


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
