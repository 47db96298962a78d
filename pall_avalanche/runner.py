"""Run (method, configuration, seed) → result record, and many of them with resume.

:func:`run_record` trains one method over one request sequence and returns the record;
:func:`run_experiments` runs every (method, seed) pair, skipping records already on disk
(the same configuration and requests give the same file name), and writes each record
atomically as soon as it is finished.
"""

from __future__ import annotations

import platform
import random
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pall_avalanche.config import config_hash, resolve_method_config
from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import RequestEvaluationPlugin, compute_metrics
from pall_avalanche.models import build_model
from pall_avalanche.records import read_record, write_json_atomic
from pall_avalanche.requests import RequestSequence, generate_requests
from pall_avalanche.strategies import METHODS, build_strategy
from pall_avalanche.streams import RequestStream

__all__ = ["RECORD_FORMAT", "record_path", "run_experiments", "run_record", "seed_everything"]

RECORD_FORMAT = 1


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("pall-avalanche", "torch", "torchvision", "avalanche-lib", "numpy", "timm"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _device_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device)}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"type": "cpu", "name": cpu, "threads": torch.get_num_threads()}


def _request_sequence(config: dict, seed: int, requests: RequestSequence | list | None
                      ) -> RequestSequence:
    if requests is None:
        return generate_requests(config["n_tasks"], config["n_unlearn"], seed)
    if isinstance(requests, RequestSequence):
        return requests
    return RequestSequence(requests, config["n_tasks"])


def run_record(method: str, seed: int, config: dict, *,
               requests: RequestSequence | list | None = None,
               device: str | torch.device = "cpu", show_progress: bool = False) -> dict:
    """Train ``method`` on the request sequence of ``seed`` and return its result record.

    :param method: a name from ``METHODS``.
    :param seed: seeds the class split, the generated requests, initialisation and training.
    :param config: a full configuration (global keys plus optional ``methods`` section).
    :param requests: replay this sequence instead of generating one from the seed.
    :param device: where to train.
    :param show_progress: show a progress bar over the requests.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid methods are {sorted(METHODS)}")
    resolved = resolve_method_config(config, method)
    device = torch.device(device)
    seed_everything(seed)
    benchmark = build_benchmark(
        resolved["benchmark"], seed=seed, n_tasks=resolved["n_tasks"],
        data_root=resolved.get("data_root"), train_per_task=resolved.get("train_per_task"),
    )
    split = benchmark.split
    sequence = _request_sequence(resolved, seed, requests)
    model = build_model(resolved["model"], input_shape=split.input_shape, n_tasks=split.n_tasks,
                        classes_per_task=split.classes_per_task,
                        **(resolved.get("model_kwargs") or {}))
    evaluation = RequestEvaluationPlugin(benchmark.test_stream,
                                         eval_mb_size=resolved["eval_batch_size"])
    strategy = build_strategy(method, model=model, config=resolved, plugins=[evaluation],
                              device=device)
    stream = RequestStream(benchmark, sequence)
    for exp in tqdm(stream, desc=f"{method} seed {seed}", leave=False,
                    disable=not show_progress):
        strategy.train(exp)

    learn = [t["seconds_per_epoch"] for t in evaluation.timings if t["kind"] == "learn"]
    unlearn = [t["seconds"] for t in evaluation.timings if t["kind"] == "unlearn"]
    return {
        "format": RECORD_FORMAT,
        "method": method,
        "seed": seed,
        "benchmark": resolved["benchmark"],
        "requests": sequence.to_list(),
        "accuracy": evaluation.accuracy,
        "metrics": compute_metrics(evaluation.accuracy, sequence),
        "exact": METHODS[method].exact,
        "timings": {
            "per_request": evaluation.timings,
            "learn_seconds_per_epoch": float(np.mean(learn)) if learn else None,
            "unlearn_seconds": float(np.mean(unlearn)) if unlearn else None,
        },
        "model_size_mb": max(evaluation.model_sizes_mb),
        "model_size_mb_per_request": evaluation.model_sizes_mb,
        "eval_batch_size": resolved["eval_batch_size"],
        "split": split.to_dict(),
        "config": resolved,
        "config_hash": config_hash(resolved),
        "versions": _versions(),
        "device": _device_info(device),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def record_path(out_dir: str | Path, method: str, seed: int, config: dict,
                requests: RequestSequence | list | None = None) -> Path:
    """Where the record of (method, resolved configuration, seed, requests) lives."""
    resolved = resolve_method_config(config, method)
    key = dict(resolved)
    if requests is not None:
        key["requests"] = _request_sequence(resolved, seed, requests).to_list()
    return (Path(out_dir) / resolved["benchmark"] / method / config_hash(key)
            / f"seed{seed}.json")


def run_experiments(methods: Sequence[str], seeds: Sequence[int], config: dict,
                    out_dir: str | Path, *, requests: RequestSequence | list | None = None,
                    device: str | torch.device = "cpu", show_progress: bool = True
                    ) -> list[dict]:
    """Run every (method, seed) pair not already recorded under ``out_dir``; return all the
    records (loaded or new), in (method, seed) order."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; valid methods are {sorted(METHODS)}")
    jobs = [(m, s) for m in methods for s in seeds]
    records = []
    with tqdm(jobs, desc="runs", disable=not show_progress) as bar:
        for method, seed in bar:
            path = record_path(out_dir, method, seed, config, requests)
            record = read_record(path)
            if record is None:
                bar.set_postfix_str(f"{method} seed {seed}")
                record = run_record(method, seed, config, requests=requests, device=device,
                                    show_progress=show_progress)
                write_json_atomic(path, record)
            records.append(record)
    return records
