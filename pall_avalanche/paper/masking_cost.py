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

from pall_avalanche.catalog import BENCHMARK_INFO
from pall_avalanche.config import for_benchmark, resolve_method_config
from pall_avalanche.data import image_benchmark
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.runs.build import build_run
from pall_avalanche.strategies import UnlearningPlugin, build_strategy

__all__ = ["CLOCKS", "IMAGE_SHAPES", "StepTimer", "measure_masking", "measure_pipeline",
           "synthetic_images"]

#: The clocks every step is timed with.
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


#: The image benchmarks' input shape and number of classes (what synthetic data imitates).
IMAGE_SHAPES = {name: (shape, BENCHMARK_INFO[name].n_classes)
                for name, shape in (("cifar10", (3, 32, 32)), ("cifar100", (3, 32, 32)),
                                    ("tinyimagenet", (3, 64, 64)))}


def synthetic_images(name: str, n_tasks: int, per_task: int, seed: int):
    """Random ``uint8`` images shaped like image benchmark ``name``'s, ``per_task`` training
    images per task over its classes, through that benchmark's own transforms and batch
    pipeline (:func:`~pall_avalanche.data.image_benchmark`): the real input path, without
    the dataset files."""
    shape, n_classes = IMAGE_SHAPES[name]
    generator = torch.Generator().manual_seed(seed)
    n = n_tasks * per_task
    x = torch.randint(0, 256, (n, *shape), generator=generator, dtype=torch.uint8)
    y = torch.arange(n) % n_classes
    return image_benchmark(name, (x, y), (x[:n_classes], y[:n_classes]), seed=seed,
                           n_tasks=n_tasks)


def measure_pipeline(*, per_task: int, batch_size: int, repeats: int, threads: int,
                     device_name: str, seed: int) -> dict[str, float]:
    """Training images per second of the two input pipelines on one synthetic S-CIFAR10 task
    (``per_task`` images, batch ``batch_size``): the loader a strategy builds with
    ``input_pipeline="per_sample"`` (Avalanche's ``DataLoader``, torchvision transforms per
    sample, on the host) and with ``"batched"``
    (:class:`~pall_avalanche.data.device.DeviceBatchLoader`, on the device), alternating,
    ``repeats`` passes each; the median pass (process CPU time on CPU, synchronised wall time
    on CUDA)."""
    torch.set_num_threads(threads)
    device = torch.device(device_name)
    clock = CLOCKS["wall" if device.type == "cuda" else "cpu"]
    benchmark = synthetic_images("cifar10", 5, per_task, seed)
    config = {**for_benchmark("cifar10"), "batch_size": batch_size, "model": "resnet18"}
    net = build_model("resnet18", input_shape=(3, 32, 32), n_tasks=5, classes_per_task=2)
    seconds: dict[str, list[float]] = {"per_sample": [], "batched": []}
    for _ in range(repeats):
        for pipeline in seconds:
            strategy = build_strategy("sequential", model=net, device=device_name,
                                      config={**config, "input_pipeline": pipeline})
            strategy.experience = benchmark.train_stream[0]
            strategy.adapted_dataset = strategy.experience.dataset.train()
            strategy.make_train_dataloader()
            strategy.synchronize()
            start = clock()
            images = sum(len(batch[0]) for batch in strategy.dataloader)
            strategy.synchronize()
            seconds[pipeline].append(clock() - start)
    return {pipeline: images / statistics.median(times) for pipeline, times in seconds.items()}


def measure_masking(*, batch_size: int, iterations: int, warmup: int, tasks: int, model: str,
                    device_name: str, threads: int, seed: int) -> dict[str, Any]:
    """Median step times of Sequential and PALL (wall and process CPU, the first ``warmup``
    steps of every task skipped), their ratio on ``clock`` (wall on CUDA, else CPU), the time
    of one PALL unlearning request and the mask storage per task (arguments: the command's
    flags)."""
    torch.set_num_threads(threads)
    device = torch.device(device_name)
    clock = "wall" if device.type == "cuda" else "cpu"

    config = {**for_benchmark("cifar10"), "batch_size": batch_size, "epochs": 1, "model": model}
    benchmark = synthetic_images("cifar10", 5, batch_size * iterations, seed)
    timers, strategies = {}, {}
    for method in ("sequential", "pall"):
        timers[method] = StepTimer()
        strategies[method] = build_run(method, config, seed=seed, benchmark=benchmark,
                                       device=device_name, plugins=[timers[method]],
                                       measured=False).strategy
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
            "unlearn_seconds": unlearn_seconds,
            "n_retrain_iters": resolve_method_config(config, "pall")["n_retrain_iters"],
            "mask_bytes_per_task": per_task_bytes, "mask_disk_bytes_per_task": disk_per_task}
