"""The timing table of the paper's Table A7 on the machine at hand, the per-layer threshold
methods compared, and the GPU-hours every paper table would take there (``perf_masking.py
--table``; imported once the command's input is checked: it needs torch and Avalanche).

Every column is one of the paper's settings (S-CIFAR10 with ResNet-18, S-CIFAR100 with
ResNet-34, S-TinyImageNet with ViT-T/8), its configuration file as is (batch size, optimizer,
α = 1/T, N_f = 50), on synthetic ``uint8`` images of the benchmark's shape through its real
input path (:func:`~pall_avalanche.paper.masking_cost.synthetic_images`): no dataset files
needed, the same work per image.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from pall_avalanche.config import for_benchmark, resolve_method_config
from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.masks import (
    HEAD,
    maskable_parameters,
    selection_slices,
    threshold_method,
    topk_mask,
)
from pall_avalanche.models import build_model
from pall_avalanche.options import THRESHOLD_METHODS
from pall_avalanche.paper.masking_cost import IMAGE_SHAPES, synthetic_images
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.runs.build import build_run

__all__ = ["COLUMNS", "TIMED_METHODS", "Column", "EpochTimer", "device_thresholds",
           "measure_column", "selection_milliseconds"]

#: The methods the table times (the rest of Table A7 is estimated from their ratios).
TIMED_METHODS = ("sequential", "wsn", "pall")


@dataclass(frozen=True)
class Column:
    """One column of Table A7: a benchmark, its backbone and its training images per task."""

    benchmark: str
    label: str
    images_per_task: int

    def config(self) -> dict[str, Any]:
        """The benchmark's configuration file."""
        return for_benchmark(self.benchmark)


#: The paper's Table A7 columns (training images per task: the full training set over T).
COLUMNS = {
    "cifar10": Column("cifar10", "S-CIFAR10 (T=5), ResNet-18", 10_000),
    "cifar100": Column("cifar100", "S-CIFAR100 (T=10), ResNet-34", 5_000),
    "tinyimagenet": Column("tinyimagenet", "S-TinyImageNet (T=20), ViT-T/8", 5_000),
}


class EpochTimer(UnlearningPlugin):
    """Seconds of every training epoch (loading, augmenting and training every batch),
    synchronised with the strategy's device."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[float] = []

    def before_training_epoch(self, strategy, **kwargs) -> None:
        strategy.synchronize()
        self._start = time.perf_counter()

    def after_training_epoch(self, strategy, **kwargs) -> None:
        strategy.synchronize()
        self.epochs.append(time.perf_counter() - self._start)


def device_thresholds(device: torch.device) -> list[str]:
    """The threshold methods that run on ``device`` (``partition`` on CPU only), ``auto``
    left out: it is one of them."""
    return [m for m in THRESHOLD_METHODS if m != "auto"
            and (m != "partition" or device.type == "cpu")]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def selection_milliseconds(column: Column, device: torch.device, *, repeats: int,
                           seed: int) -> dict[str, float]:
    """Milliseconds one training step spends selecting the masks of every scored layer of the
    column's backbone (``topk_mask`` at α, per slice), per threshold method: the median of
    ``repeats`` synchronised timings after one warm-up."""
    config = column.config()
    alpha = resolve_method_config(config, "pall")["alpha"]
    shape, n_classes = IMAGE_SHAPES[column.benchmark]
    net = build_model(config["model"], input_shape=shape, n_tasks=config["n_tasks"],
                      classes_per_task=n_classes // config["n_tasks"], per_task_tokens=True)
    slices = selection_slices(net)
    generator = torch.Generator().manual_seed(seed)
    layers = [(torch.randn(module.get_parameter(name.rsplit(".", 1)[-1]).shape,
                           generator=generator).to(device), slices[name])
              for name, module in maskable_parameters(net).items() if name != HEAD]
    out = {}
    for method in device_thresholds(device):
        times = []
        for _ in range(repeats + 1):
            _synchronize(device)
            start = time.perf_counter()
            for scores, n_slices in layers:
                topk_mask(scores, alpha, n_slices, method)
            _synchronize(device)
            times.append(time.perf_counter() - start)
        out[method] = 1e3 * statistics.median(times[1:])
    return out


def _strategy(method: str, config: dict, benchmark: Any, device: torch.device,
              timer: EpochTimer, threshold: str | None = None):
    method_config = {**resolve_method_config(config, method),
                     **({"mask_threshold": threshold} if threshold else {})}
    return build_run(method, method_config, seed=0, benchmark=benchmark, device=device,
                     plugins=[timer], measured=False).strategy


def measure_column(column: Column, device: torch.device, *, images_per_task: int | None = None,
                   retrain_iters: int | None = None, compile: bool = False, seed: int = 0
                   ) -> dict[str, Any]:
    """Table A7's figures of one column on ``device``: seconds per epoch of the second
    learning request (task 1, after task 0) of Sequential, WSN and PALL (``auto``
    thresholds), of PALL with every other threshold method, and seconds of PALL's unlearning
    request of task 0 (re-draw and N_f retraining iterations).

    :param images_per_task: training images per task (default: the column's full task).
    :param retrain_iters: N_f (default: the configuration's, 50).
    :param compile: every strategy with ``compile=True`` (the compilation is paid by the
        first, untimed learning request).
    """
    config = {**column.config(), "epochs": 1, "compile": compile}
    if retrain_iters is not None:
        config["n_retrain_iters"] = retrain_iters
    per_task = images_per_task or column.images_per_task
    benchmark = synthetic_images(column.benchmark, config["n_tasks"], per_task, seed)
    first, second = benchmark.train_stream[0], benchmark.train_stream[1]
    epoch: dict[str, float] = {}
    unlearn = None
    runs = [(m, None) for m in TIMED_METHODS]
    runs += [("pall", t) for t in device_thresholds(device)
             if t != threshold_method("auto", device)]
    for method, threshold in runs:
        timer = EpochTimer()
        strategy = _strategy(method, config, benchmark, device, timer, threshold)
        strategy.train(first)
        strategy.train(second)
        epoch[method if threshold is None else f"pall ({threshold})"] = timer.epochs[-1]
        if method == "pall" and threshold is None:
            strategy.synchronize()
            start = time.perf_counter()
            strategy.train(UnlearnExperience(0))
            strategy.synchronize()
            unlearn = time.perf_counter() - start
    return {"epoch_seconds": epoch, "unlearn_seconds": unlearn, "images_per_task": per_task,
            "full_task": column.images_per_task, "n_retrain_iters": config["n_retrain_iters"],
            "auto": threshold_method("auto", device)}
