"""Run (method, configuration, seed) → result record, and many of them with resume.

:func:`run_record` trains one method over one request sequence and returns the record;
:func:`run_experiments` runs every (method, seed) pair, skipping records already on disk
(the same configuration and requests give the same file name), and writes each record
atomically as soon as it is finished.

Checkpoints: with ``checkpoint=<file>``, :func:`run_record` saves the whole state (strategy,
plugins, evaluation rows, RNG states; :mod:`pall_avalanche.checkpoint`) atomically after every
request and, when the file exists, resumes after its last finished request; the record is the
one an uninterrupted run gives (timings and ``finished_at`` aside) and lists in
``resumed_after`` the request counts it resumed at. :func:`run_experiments` keeps the
checkpoint next to the record (``seed<k>.ckpt``) and deletes it once the record is written;
with ``jobs > 1`` it runs the (method, seed) pairs in parallel processes.
"""

from __future__ import annotations

import os
import platform
import random
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from datetime import datetime, timezone
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pall_avalanche.checkpoint import (
    CHECKPOINT_FORMAT,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from pall_avalanche.config import config_hash, resolve_method_config
from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import RequestEvaluationPlugin, compute_metrics, model_size_mb
from pall_avalanche.models import build_model
from pall_avalanche.records import read_record, write_json_atomic
from pall_avalanche.requests import RequestSequence, generate_requests
from pall_avalanche.strategies import METHODS, build_strategy
from pall_avalanche.streams import RequestStream
from pall_avalanche.wandb_logging import WandbSettings, default_group, wandb_run

__all__ = ["RECORD_FORMAT", "checkpoint_path", "record_path", "run_experiments", "run_record",
           "seed_everything"]

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
               device: str | torch.device = "cpu", show_progress: bool = False,
               checkpoint: str | Path | None = None, plugins: Sequence = (),
               probe: Callable[[], Any] | None = None, train_seed: int | None = None) -> dict:
    """Train ``method`` on the request sequence of ``seed`` and return its result record.

    :param method: a name from ``METHODS``.
    :param seed: seeds the class split, the generated requests, initialisation and training.
    :param config: a full configuration (global keys plus optional ``methods`` section).
    :param requests: replay this sequence instead of generating one from the seed.
    :param device: where to train.
    :param show_progress: show a progress bar over the requests.
    :param checkpoint: a checkpoint file: saved (atomically) after every request, resumed from
        if it exists (it must come from the same method, seed, configuration and requests).
        The caller deletes it once the record is safe. ``None``: no checkpoints.
    :param plugins: further plugins, run after the evaluation plugin.
    :param probe: a factory of a probe object with ``plugins`` (run after ``plugins``) and
        ``finish(strategy, benchmark) -> dict``, stored JSON-ready as the record's ``probe``
        (the exactness audit, :mod:`pall_avalanche.audit`). ``None``: no probe.
    :param train_seed: re-seed the random number generators with this after the benchmark,
        model and strategy are built: same class split and initial weights as ``seed``,
        other training randomness (stored as the record's ``train_seed``).
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
                        per_task_tokens=METHODS[method].strategy.per_task_tokens,
                        **(resolved.get("model_kwargs") or {}))
    evaluation = RequestEvaluationPlugin(benchmark.test_stream,
                                         eval_mb_size=resolved["eval_batch_size"])
    probed = probe() if probe is not None else None
    strategy = build_strategy(method, model=model, config=resolved,
                              plugins=[evaluation, *plugins, *(probed.plugins if probed else ())],
                              device=device)
    if train_seed is not None:
        seed_everything(train_seed)
    stream = RequestStream(benchmark, sequence)
    identity = {"method": method, "seed": seed, "config_hash": config_hash(resolved),
                "requests": sequence.to_list(),
                **({"train_seed": train_seed} if train_seed is not None else {})}
    done, resumed_after = 0, []
    if checkpoint is not None and Path(checkpoint).exists():
        state = load_checkpoint(checkpoint)
        different = [key for key, value in identity.items() if state.get(key) != value]
        if different:
            raise ValueError(f"checkpoint {checkpoint} belongs to another run (its {different} "
                             "differ); delete it to start this run afresh")
        strategy.restore_checkpoint_state(state["strategy"])
        restore_rng_state(state["rng"])
        done = state["requests_done"]
        resumed_after = [*state["resumed_after"], done]
    for index in tqdm(range(done, len(stream)), desc=f"{method} seed {seed}", leave=False,
                      initial=done, total=len(stream), disable=not show_progress):
        strategy.train(stream[index])
        if checkpoint is not None:
            save_checkpoint(checkpoint, {
                "format": CHECKPOINT_FORMAT, **identity, "requests_done": index + 1,
                "resumed_after": resumed_after, "strategy": strategy.checkpoint_state(),
                "rng": capture_rng_state(),
            })

    learn = [t["seconds_per_epoch"] for t in evaluation.timings if t["kind"] == "learn"]
    unlearn = [t["seconds"] for t in evaluation.timings if t["kind"] == "unlearn"]
    extra = {"probe": probed.finish(strategy, benchmark)} if probed is not None else {}
    if train_seed is not None:
        extra["train_seed"] = train_seed
    return {
        **extra,
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
        "model_size_mb": model_size_mb(*strategy.inference_size(resolved["n_tasks"])),
        "model_size_mb_per_request": evaluation.model_sizes_mb,
        "resumed_after": resumed_after,
        # strategy-specific statistics per unlearning request (PALL: Table A2), else None
        "unlearning_stats": getattr(strategy, "unlearning_stats", None),
        "eval_batch_size": resolved["eval_batch_size"],
        "split": split.to_dict(),
        "config": resolved,
        "config_hash": config_hash(resolved),
        "versions": _versions(),
        "device": _device_info(device),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def record_path(out_dir: str | Path, method: str, seed: int, config: dict,
                requests: RequestSequence | list | None = None,
                train_seed: int | None = None) -> Path:
    """Where the record of (method, resolved configuration, seed, requests, training seed)
    lives."""
    resolved = resolve_method_config(config, method)
    key = dict(resolved)
    if requests is not None:
        key["requests"] = _request_sequence(resolved, seed, requests).to_list()
    if train_seed is not None:
        key["train_seed"] = train_seed
    return (Path(out_dir) / resolved["benchmark"] / method / config_hash(key)
            / f"seed{seed}.json")


def checkpoint_path(record_file: str | Path) -> Path:
    """The checkpoint file kept next to a record while it runs (``seed<k>.ckpt``).

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(record_file).with_suffix(".ckpt")


def _run_and_write(method: str, seed: int, config: dict, path: Path,
                   requests: RequestSequence | list | None, device: str | torch.device,
                   checkpoints: bool, show_progress: bool,
                   wandb: WandbSettings | None = None, probe: Callable[[], Any] | None = None,
                   train_seed: int | None = None) -> dict:
    """Run one record (resuming from its checkpoint), write it atomically, then delete the
    checkpoint; the unit of work of :func:`run_experiments`, in or out of process. With
    ``wandb`` settings the run is logged to W&B (live per request, then the record)."""
    checkpoint = checkpoint_path(path) if checkpoints else None
    with wandb_run(wandb, method=method, seed=seed, config=resolve_method_config(config, method),
                   group=default_group(config)) as tracker:
        record = run_record(method, seed, config, requests=requests, device=device,
                            show_progress=show_progress, checkpoint=checkpoint,
                            plugins=tracker.plugins(), probe=probe, train_seed=train_seed)
        write_json_atomic(path, record)
        tracker.log_record(record, path)
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return record


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def _failed(method: str, seed: int, err: BaseException) -> Exception:
    """``err`` re-raised with the run named (a ValueError stays a ValueError)."""
    message = f"run of method {method!r} seed {seed} failed: {type(err).__name__}: {err}"
    return ValueError(message) if isinstance(err, ValueError) else RuntimeError(message)


def run_experiments(methods: Sequence[str], seeds: Sequence[int], config: dict,
                    out_dir: str | Path, *, requests: RequestSequence | list | None = None,
                    device: str | torch.device = "cpu", show_progress: bool = True,
                    jobs: int = 1, checkpoints: bool = True,
                    wandb: WandbSettings | None = None, probe: Callable[[], Any] | None = None,
                    train_seed_offset: int | None = None) -> list[dict]:
    """Run every (method, seed) pair not already recorded under ``out_dir``; return all the
    records (loaded or new), in (method, seed) order.

    :param methods: names from ``METHODS``.
    :param seeds: the seeds.
    :param config: a full configuration.
    :param out_dir: the records' root folder (:func:`record_path`).
    :param requests: replay this sequence for every seed instead of generated ones.
    :param device: where to train.
    :param show_progress: progress bars.
    :param jobs: run the missing records in this many parallel processes (spawned; each uses
        ``max(1, cpu_count // jobs)`` torch threads). The records are the same as with 1.
    :param checkpoints: checkpoint every run after each request next to its record and resume
        from such a checkpoint (:func:`run_record`); ``False``: neither.
    :param wandb: W&B settings: one W&B run per new record (reused records are not logged
        again); ``None``: no W&B.
    :param probe: a picklable probe factory (:func:`run_record`); a stored record without a
        ``probe`` is then run again.
    :param train_seed_offset: train seed ``s`` with training seed ``s + offset``
        (:func:`run_record`'s ``train_seed``; its own records); ``None``: the seed itself.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; valid methods are {sorted(METHODS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} is invalid; it must be an integer >= 1")
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ValueError(f"seeds {repeated} are given more than once; give each seed once")
    if probe is not None and checkpoints:
        raise ValueError("a probe's state is not checkpointed: use checkpoints=False with probe")
    pairs = [(m, s) for m in methods for s in seeds]
    train_seeds = {s: None if train_seed_offset is None else s + train_seed_offset
                   for s in seeds}
    paths = {pair: record_path(out_dir, *pair, config, requests, train_seeds[pair[1]])
             for pair in pairs}
    records = {pair: read_record(path) for pair, path in paths.items()}
    for pair, record in records.items():
        if record is not None and record.get("format") != RECORD_FORMAT:
            raise ValueError(f"{paths[pair]} has record format {record.get('format')!r}; this "
                             f"version writes format {RECORD_FORMAT}: use another --out")
    missing = [pair for pair in pairs if records[pair] is None
               or (probe is not None and "probe" not in records[pair])]
    if jobs == 1:
        with tqdm(missing, desc="runs", disable=not show_progress) as bar:
            for method, seed in bar:
                bar.set_postfix_str(f"{method} seed {seed}")
                records[method, seed] = _run_and_write(
                    method, seed, config, paths[method, seed], requests, device, checkpoints,
                    show_progress, wandb, probe, train_seeds[seed])
    elif missing:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(missing)),
                                   mp_context=get_context("spawn"), initializer=_init_worker,
                                   initargs=(threads,))
        with pool, tqdm(total=len(missing), desc=f"runs ({jobs} jobs)",
                        disable=not show_progress) as bar:
            futures = {pool.submit(_run_and_write, method, seed, config, paths[method, seed],
                                   requests, device, checkpoints, False, wandb, probe,
                                   train_seeds[seed]): (method, seed)
                       for method, seed in missing}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in finished:
                    method, seed = futures[future]
                    if future.exception() is not None:
                        pool.shutdown(wait=True, cancel_futures=True)
                        raise _failed(method, seed, future.exception()) from future.exception()
                    records[method, seed] = future.result()
                    bar.update()
    return [records[pair] for pair in pairs]
