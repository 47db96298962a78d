"""The measurement behind ``perf_masking.py``: PALL and Sequential train the same batches of
synthetic CIFAR-shaped data in one process, every training step timed (imported only once the
command's input is checked: it needs torch and Avalanche)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from pall_avalanche.config import CONFIG_DIR, load_config
from pall_avalanche.data.tasks import task_incremental_benchmark_from_tensors
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.strategies import METHODS, UnlearningPlugin, build_strategy

__all__ = ["CLOCKS", "StepTimer", "measure_masking", "synthetic_cifar"]

#: The configuration the two methods train with (S-CIFAR10's).
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


def measure_masking(*, batch_size: int, iterations: int, warmup: int, tasks: int, model: str,
                    device_name: str, threads: int, seed: int) -> dict[str, Any]:
    """Median step times of Sequential and PALL (wall and process CPU, the first ``warmup``
    steps of every task skipped), their ratio on ``clock`` (wall on CUDA, else CPU), the time
    of one PALL unlearning request and the mask storage per task (arguments: the command's
    flags)."""
    torch.set_num_threads(threads)
    device = torch.device(device_name)
    clock = "wall" if device.type == "cuda" else "cpu"

    config = {**load_config(CONFIG), "batch_size": batch_size, "epochs": 1, "model": model}
    benchmark = synthetic_cifar(5, batch_size * iterations, seed)
    timers, strategies = {}, {}
    for method in ("sequential", "pall"):
        torch.manual_seed(seed)
        net = build_model(model, input_shape=(3, 32, 32), n_tasks=5, classes_per_task=2,
                          per_task_tokens=METHODS[method].strategy.per_task_tokens)
        timers[method] = StepTimer()
        strategies[method] = build_strategy(method, model=net, config=config,
                                            plugins=[timers[method]], device=device_name)
    for task in range(tasks):
        for strategy in strategies.values():
            strategy.train(benchmark.train_stream[task], shuffle=False)

    medians = {(m, c): t.median(c, warmup) for m, t in timers.items() for c in CLOCKS}
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
    return {"medians": medians, "ratio": ratio, "clock": clock, "where": where,
            "unlearn_seconds": unlearn_seconds, "n_retrain_iters": config["n_retrain_iters"],
            "mask_bytes_per_task": per_task_bytes, "mask_disk_bytes_per_task": disk_per_task}
