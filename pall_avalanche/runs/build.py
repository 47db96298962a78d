"""Assembling a run: benchmark → model → strategy → evaluator, the one way every runner,
check, measurement script and test builds one (:func:`build_run`)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pall_avalanche.core import RequestLog
from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import request_evaluator
from pall_avalanche.models import build_model
from pall_avalanche.strategies.base import UnlearningTemplate
from pall_avalanche.strategies.registry import METHODS, build_strategy

__all__ = ["NondeterministicOperation", "BuiltRun", "build_run", "configure_numerics",
           "seed_everything"]

#: cuBLAS's fixed workspace, which its deterministic mode needs (NVIDIA's documented value).
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"


class NondeterministicOperation(ValueError):
    """A run in deterministic mode reached an operation torch has no deterministic kernel
    for: one line naming it (the run stops; without ``deterministic`` it would have run,
    repeating within floating-point tolerance only).

    :param operation: what torch named.
    """

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"--deterministic: {operation} has no deterministic implementation in torch "
            f"{torch.__version__} on this device, and this run uses it; run without "
            "--deterministic (the record then repeats within floating-point tolerance, not "
            "bit for bit: docs/explanation/performance.md)")


def configure_numerics(config: Mapping[str, Any]) -> None:
    """Set torch's process-wide numerics for a run of ``config``: TensorFloat-32 matrix
    products and convolutions on a GPU unless ``tf32`` is false, deterministic algorithms
    (and cuBLAS's fixed workspace, cuDNN's deterministic choice) when ``deterministic`` is
    true. The CPU's results are the same either way."""
    tf32 = bool(config.get("tf32", True))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    deterministic = bool(config.get("deterministic", False))
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class BuiltRun:
    """A run's parts: its benchmark, its strategy (model inside) and the strategy's request
    log, measured by its evaluator (``None`` when it was built without measurement)."""

    benchmark: Any
    strategy: UnlearningTemplate
    log: RequestLog | None


def build_run(method: str, config: Mapping[str, Any], *, seed: int, benchmark: Any = None,
              device: torch.device | str = "cpu", plugins: Sequence = (),
              measured: bool = True, label: str | None = None) -> BuiltRun:
    """Build ``method``'s run from its resolved ``config``: every random generator seeded
    with ``seed`` (:func:`seed_everything`), then the benchmark (``config["benchmark"]`` split
    by ``seed``, unless ``benchmark`` is given), the model (``config["model"]`` shaped to the
    benchmark's split, with per-task tokens if the method wants them) and the strategy with
    ``plugins`` and, when ``measured``, an evaluator measuring every request on the
    benchmark's test stream (the record's source: :attr:`BuiltRun.log`; its learning check
    warns naming the run ``label``, by default ``"<method> seed <seed>"``).

    :param method: a registered method.
    :param config: its resolved configuration
        (:func:`~pall_avalanche.config.resolve_method_config`).
    :param seed: the run's seed (class split and initial weights).
    :param benchmark: a benchmark object to use instead of building ``config["benchmark"]``.
    :param device: where the strategy trains.
    :param plugins: the strategy's plugins, in order.
    :param measured: give the strategy the request evaluator (else Avalanche's default).
    :param label: the run's name in the learning check's warning.
    """
    configure_numerics(config)
    seed_everything(seed)
    if benchmark is None:
        shadow, canary = config.get("shadow_task"), config.get("canary_task")
        benchmark = build_benchmark(
            config["benchmark"], seed=seed, n_tasks=config["n_tasks"],
            data_root=config.get("data_root"), train_per_task=config.get("train_per_task"),
            shadow=None if shadow is None else (shadow, config["shadow_seed"]),
            canaries=None if canary is None else (canary, config["canaries"]))
    split = benchmark.split
    model = build_model(config["model"], input_shape=split.input_shape, n_tasks=split.n_tasks,
                        classes_per_task=split.classes_per_task,
                        per_task_tokens=METHODS[method].strategy.per_task_tokens,
                        **(config.get("model_kwargs") or {}))
    evaluator = (request_evaluator(benchmark.test_stream, config["eval_batch_size"],
                                   label=label or f"{method} seed {seed}")
                 if measured else None)
    strategy = build_strategy(method, model=model, config=config, device=device,
                              plugins=plugins, evaluator=evaluator)
    return BuiltRun(benchmark, strategy, strategy.request_log if measured else None)
