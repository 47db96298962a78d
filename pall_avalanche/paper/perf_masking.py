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
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pall_avalanche.cli import main_guard
from pall_avalanche.config import CONFIG_DIR, load_config
from pall_avalanche.data.tasks import task_incremental_benchmark_from_tensors
from pall_avalanche.models import build_model
from pall_avalanche.strategies import METHODS, UnlearningPlugin, build_strategy
from pall_avalanche.streams import UnlearnExperience

CONFIG = CONFIG_DIR / "cifar10.yaml"


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class StepTimer(UnlearningPlugin):
    """Wall and process CPU time of every training iteration, synchronised on the strategy's
    device."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: dict[str, list[list[float]]] = {clock: [] for clock in CLOCKS}

    def before_training_exp(self, strategy, **kwargs) -> None:
        for steps in self.steps.values():
            steps.append([])

    def before_training_iteration(self, strategy, **kwargs) -> None:
        strategy.synchronize()
        self._start = {clock: now() for clock, now in CLOCKS.items()}

    def after_training_iteration(self, strategy, **kwargs) -> None:
        strategy.synchronize()
        for clock, now in CLOCKS.items():
            self.steps[clock][-1].append(now() - self._start[clock])

    def median(self, clock: str, warmup: int) -> float:
        """Median step time, skipping the first ``warmup`` steps of every task."""
        return statistics.median(t for task in self.steps[clock] for t in task[warmup:])


def synthetic_cifar(n_tasks: int, per_task: int, seed: int):
    """Random CIFAR-shaped images (3×32×32), two classes per task."""
    generator = torch.Generator().manual_seed(seed)
    n = n_tasks * per_task
    x = torch.randn(n, 3, 32, 32, generator=generator)
    y = torch.arange(n) % (2 * n_tasks)
    return task_incremental_benchmark_from_tensors(
        "synthetic-cifar10", (x, y), (x[:2 * n_tasks], y[:2 * n_tasks]), n_tasks=n_tasks,
        seed=seed)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    clock = "wall" if device.type == "cuda" else "cpu"

    config = {**load_config(CONFIG), "batch_size": args.batch_size, "epochs": 1,
              "model": args.model}
    benchmark = synthetic_cifar(5, args.batch_size * args.iterations, args.seed)
    timers, strategies = {}, {}
    for method in ("sequential", "pall"):
        torch.manual_seed(args.seed)
        model = build_model(args.model, input_shape=(3, 32, 32), n_tasks=5, classes_per_task=2,
                            per_task_tokens=METHODS[method].strategy.per_task_tokens)
        timers[method] = StepTimer()
        strategies[method] = build_strategy(method, model=model, config=config,
                                            plugins=[timers[method]], device=args.device)
    for task in range(args.tasks):
        for strategy in strategies.values():
            strategy.train(benchmark.train_stream[task], shuffle=False)

    medians = {(m, c): t.median(c, args.warmup) for m, t in timers.items() for c in CLOCKS}
    ratio = medians["pall", clock] / medians["sequential", clock]
    pall = strategies["pall"]
    pall.synchronize()
    start = time.perf_counter()
    pall.train(UnlearnExperience(0))
    pall.synchronize()
    unlearn_seconds = time.perf_counter() - start
    masks = pall.model.mask_state_dict()
    per_task_bytes = next(iter(masks.values())).numel()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "masks.pt"
        torch.save(masks, path)
        disk_per_task = path.stat().st_size / len(masks)

    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"cpu, {torch.get_num_threads()} thread(s)")
    n_steps = args.tasks * (args.iterations - args.warmup)
    print(f"{args.model}, batch {args.batch_size}, {where}; {n_steps} timed steps per method "
          f"over {args.tasks} tasks")
    for method in timers:
        print(f"{method:>10} step (median): {medians[method, 'wall'] * 1e3:8.1f} ms wall, "
              f"{medians[method, 'cpu'] * 1e3:8.1f} ms cpu")
    print(f"unlearning request (pall, N_f={config['n_retrain_iters']}): "
          f"{unlearn_seconds:.2f} s")
    print(f"mask storage per task: {per_task_bytes / 2**20:.3f} MiB in memory, "
          f"{disk_per_task / 2**20:.3f} MiB on disk")
    print(f"pall / sequential step-time ratio ({clock} time):")
    print(f"{ratio:.3f}")


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
