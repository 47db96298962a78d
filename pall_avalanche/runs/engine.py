"""The unit of work: one run built (benchmark, model, strategy, subscribers), resumed from its
checkpoint, stepped through its requests and turned into its record (:func:`execute`,
:func:`run_record`); :func:`run_and_write` also writes the record and removes the checkpoint.

Every request is measured by the evaluator's metric, whose request log is the record's
source, and ends in the strategy's ``after_request`` event; its subscribers here are the
caller's plugins, the audit's probe, the :class:`CheckpointWriter` and the
:class:`LockHeartbeat`, in this order.
"""

from __future__ import annotations

import platform
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pall_avalanche.checkpoint import (
    load_checkpoint,
    restore_rng_state,
)
from pall_avalanche.core import RequestLog
from pall_avalanche.evaluation import compute_metrics, model_size_mb
from pall_avalanche.extensions import provenance as extension_provenance
from pall_avalanche.files import (
    CorruptFileError,
    Record,
    RunWarning,
    one_line,
    set_aside,
    write_record,
)
from pall_avalanche.requests import RequestKind, RequestSequence
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs.build import NondeterministicOperation, build_run, seed_everything
from pall_avalanche.runs.spec import RunSpec, probe_modules
from pall_avalanche.runs.store import RECORD_FORMAT, checkpoint_path, unsaved_error
from pall_avalanche.runs.subscribers import CheckpointWriter, LockHeartbeat, WandbRequestLogger
from pall_avalanche.runs.wandb_logging import WandbSettings, wandb_run
from pall_avalanche.strategies.base import UnlearningTemplate
from pall_avalanche.strategies.registry import METHODS

__all__ = ["RunOptions", "device_info", "execute", "run_and_write", "run_record", "versions"]


@dataclass
class _Run:
    """A run's parts once built: the specification, benchmark, strategy, the log of its
    requests' results, the audit probe if any, and where it resumed."""

    spec: RunSpec
    benchmark: Any
    strategy: UnlearningTemplate
    log: RequestLog
    probe: Any
    device: torch.device
    resumed_after: list[int]
    done: int = 0


def _build(spec: RunSpec, device: torch.device, plugins: Sequence,
           probe: Callable[[], Any] | None, checkpoint: Path | None,
           heartbeat: Callable[[], Any] | None, label: str | None) -> _Run:
    """``spec``'s run (:func:`~pall_avalanche.runs.build.build_run`, seeded by its seed; then
    re-seeded by its training seed if it has one), with the evaluator measuring every request
    (its metric keeps the request log, the record's source) and, subscribed to
    ``after_request`` in this order, ``plugins``, the probe's plugins, the checkpoint writer
    (it saves what the others recorded) and the lock heartbeat; ``label`` names the run in
    the learning check's warning (default: method and seed)."""
    probed = probe() if probe is not None else None
    resumed_after: list[int] = []
    last = [*([CheckpointWriter(checkpoint, spec.identity(), resumed_after)]
              if checkpoint is not None else []),
            *([LockHeartbeat(heartbeat)] if heartbeat is not None else [])]
    built = build_run(spec.method, spec.config, seed=spec.seed, device=device,
                      plugins=[*plugins, *(probed.plugins if probed else ()), *last],
                      label=label)
    if probed is not None and hasattr(probed, "start"):
        probed.start(built.benchmark)
    if spec.train_seed is not None:
        seed_everything(spec.train_seed)
    return _Run(spec, built.benchmark, built.strategy, built.log, probed, device, resumed_after)


def _resume(run: _Run, checkpoint: Path | None) -> None:
    """Restore ``run`` from ``checkpoint`` if there is one.

    :raises CorruptFileError: the checkpoint loads but cannot serve this run: another run's
        (its identity differs), a count of requests done outside the sequence, or a state
        the strategy cannot take (the strategy may be partly restored: build it again).
    """
    state = _resumable_checkpoint(checkpoint, run.device) if checkpoint is not None else None
    if state is None:
        return
    different = sorted(key for key, value in run.spec.identity().items()
                       if state.get(key) != value)
    if different:
        raise CorruptFileError(checkpoint, f"the checkpoint of another run (its "
                                           f"{', '.join(different)} differ)")
    done, after = state.get("requests_done"), state.get("resumed_after")
    total = len(run.spec.sequence)
    if type(done) is not int or not 0 < done <= total or not isinstance(after, list):
        raise CorruptFileError(checkpoint, f"{done!r} requests done, outside this run's "
                                           f"1 to {total}")
    try:
        run.strategy.restore_checkpoint_state(state["strategy"])
        restore_rng_state(state["rng"])
    except torch.OutOfMemoryError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as err:
        raise CorruptFileError(checkpoint, f"a state {run.spec.method}'s strategy cannot take "
                                           f"({type(err).__name__}: {one_line(err)})") from None
    run.done = done
    run.resumed_after[:] = [*after, run.done]   # the writer's list too


def _step(run: _Run, show_progress: bool) -> None:
    """Process the requests not done yet (each ends in ``after_request``: logged, and
    checkpointed by :class:`CheckpointWriter`)."""
    stream = RequestStream(run.benchmark, run.spec.sequence)
    for index in tqdm(range(run.done, len(stream)), desc=f"{run.spec.method} seed "
                      f"{run.spec.seed}", leave=False, initial=run.done, total=len(stream),
                      disable=not (show_progress and sys.stderr.isatty())):
        run.strategy.train(stream[index])


def _record(run: _Run) -> Record:
    """The record of a finished run (:data:`RECORD_FORMAT`)."""
    spec, log, strategy = run.spec, run.log, run.strategy
    sequence = spec.sequence
    learn = [t["seconds_per_epoch"] for t in log.timings if t["kind"] == RequestKind.LEARN]
    unlearn = [t["seconds"] for t in log.timings if t["kind"] == RequestKind.UNLEARN]
    extra = {"probe": run.probe.finish(strategy, run.benchmark)} if run.probe else {}
    if spec.train_seed is not None:
        extra["train_seed"] = spec.train_seed
    config = dict(spec.config)
    record: Record = {
        **extra,
        "format": RECORD_FORMAT,
        "method": spec.method,
        "seed": spec.seed,
        "benchmark": config["benchmark"],
        "requests": sequence.to_list(),
        "accuracy": log.accuracy,
        "metrics": compute_metrics(log.accuracy, sequence),
        "exact": METHODS[spec.method].exact,
        "timings": {
            "per_request": log.timings,
            "learn_seconds_per_epoch": float(np.mean(learn)) if learn else None,
            "unlearn_seconds": float(np.mean(unlearn)) if unlearn else None,
        },
        "model_size_mb": model_size_mb(*strategy.inference_size(config["n_tasks"])),
        "model_size_mb_per_request": log.model_sizes_mb,
        "resumed_after": list(run.resumed_after),
        # the method's statistics per unlearning request (PALL: Table A2), else None
        "unlearning_stats": log.unlearning_statistics(),
        # per learning request: the task's balanced training accuracy and whether it stayed
        # at chance (a failed request, also warned about)
        "learning_checks": log.learning_checks,
        "eval_batch_size": config["eval_batch_size"],
        "split": run.benchmark.split.to_dict(),
        "config": config,
        "config_hash": spec.hash,
        # the fingerprint of this package's code the run imports (part of config_hash)
        "code": spec.code,
        "versions": versions(),
        # the extensions loaded (file SHA-256 or package version): what code made the record
        "extensions": extension_provenance(),
        "device": device_info(run.device),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return record


def run_record(method: str, seed: int, config: dict, *,
               requests: RequestSequence | list | None = None,
               device: str | torch.device = "cpu", show_progress: bool = False,
               checkpoint: str | Path | None = None, plugins: Sequence = (),
               probe: Callable[[], Any] | None = None, train_seed: int | None = None,
               heartbeat: Callable[[], Any] | None = None) -> dict:
    """Train ``method`` on the request sequence of ``seed`` and return its result record:
    build, resume, step, record.

    :param method: a name from ``METHODS``.
    :param seed: seeds the class split, the generated requests, initialisation and training.
    :param config: a full configuration (global keys plus optional ``methods`` section).
    :param requests: replay this sequence instead of generating one from the seed.
    :param device: where to train.
    :param show_progress: show a progress bar over the requests.
    :param checkpoint: a checkpoint file: saved (atomically) after every request, resumed from
        if it exists (it must come from the same method, seed, configuration and requests).
        One that does not load is renamed ``<name>.corrupt`` with a
        :class:`~pall_avalanche.files.RunWarning` and the run starts afresh; one that
        vanishes before it is read counts as none. The caller deletes it once the record is
        safe. ``None``: no checkpoints.
    :param plugins: further plugins (e.g. loggers subscribing to ``after_request``).
    :param probe: a factory of a probe object with ``plugins`` (run after ``plugins``),
        optionally ``start(benchmark)`` (called once the benchmark is built, before any
        request; it must draw no random number), and ``finish(strategy, benchmark) -> dict``,
        stored JSON-ready as the record's ``probe`` (the exactness audit,
        :mod:`pall_avalanche.audit`). ``None``: no probe.
    :param train_seed: re-seed the random number generators with this after the benchmark,
        model and strategy are built: same class split and initial weights as ``seed``,
        other training randomness (stored as the record's ``train_seed``).
    :param heartbeat: called after every finished request (the runner refreshes the record's
        lock with it). ``None``: nothing.
    """
    spec = RunSpec.of(method, seed, config, requests, train_seed, probe_modules(probe))
    return execute(spec, device=device,
                    show_progress=show_progress, checkpoint=checkpoint, plugins=plugins,
                    probe=probe, heartbeat=heartbeat)


def execute(spec: RunSpec, *, device: str | torch.device = "cpu", show_progress: bool = False,
            checkpoint: str | Path | None = None, plugins: Sequence = (),
            probe: Callable[[], Any] | None = None,
            heartbeat: Callable[[], Any] | None = None, label: str | None = None) -> dict:
    """The record of ``spec``: build, resume, step, record (the arguments as in
    :func:`run_record`; ``label`` names the run in warnings, as its progress line does)."""
    checkpoint = None if checkpoint is None else Path(checkpoint)
    run = _build(spec, torch.device(device), plugins, probe, checkpoint, heartbeat, label)
    try:
        _resume(run, checkpoint)
    except CorruptFileError as err:     # it cannot serve the run: aside, and start afresh
        aside = set_aside(checkpoint)
        warnings.warn(f"{err}; set aside as {aside.name}, the run starts afresh", RunWarning,
                      stacklevel=2)
        run = _build(spec, torch.device(device), plugins, probe, checkpoint, heartbeat, label)
    try:
        _step(run, show_progress)
    except RuntimeError as err:
        operation = str(err).partition(" does not have a deterministic implementation")
        if operation[1] and torch.are_deterministic_algorithms_enabled():
            raise NondeterministicOperation(operation[0].strip()) from None
        raise
    return _record(run)


def _resumable_checkpoint(checkpoint: str | Path, device: torch.device) -> dict | None:
    """The checkpoint to resume from: ``None`` if there is none (also if it vanished just
    now); a corrupt one is set aside (``.corrupt``) with a one-line warning, ``None``."""
    try:
        return load_checkpoint(checkpoint, device)
    except FileNotFoundError:
        return None
    except CorruptFileError as err:
        aside = set_aside(checkpoint)
        warnings.warn(f"{err}; set aside as {aside.name}, the run starts afresh", RunWarning,
                      stacklevel=2)
        return None


@dataclass(frozen=True)
class RunOptions:
    """How :func:`run_experiments` runs each record (the same for all of its records)."""

    device: str
    checkpoints: bool
    show_progress: bool
    wandb: WandbSettings | None
    probe: Callable[[], Any] | None
    group: str
    #: The run's name in warnings (its progress line's: ``"pall alpha=0.2 seed 3"``).
    label: str | None = None


def run_and_write(spec: RunSpec, path: Path, options: RunOptions,
                   heartbeat: Callable[[], Any] | None = None) -> dict:
    """Run one record (resuming from its checkpoint), write it atomically, then delete the
    checkpoint; the unit of work of :func:`run_experiments`, in or out of process (the caller
    holds the record's lock; ``heartbeat`` refreshes it after every request). With W&B
    settings the run is logged to W&B (live per request, then the record).

    If writing the record fails (``OSError``), it is kept in :func:`unsaved_path` and an
    ``OSError`` naming both files is raised; the checkpoint stays."""
    checkpoint = checkpoint_path(path) if options.checkpoints else None
    with wandb_run(options.wandb, method=spec.method, seed=spec.seed, config=spec.described(),
                   group=options.group, identity=spec.hash) as tracker:
        record = execute(spec, device=options.device, show_progress=options.show_progress,
                          checkpoint=checkpoint,
                          plugins=[WandbRequestLogger(tracker)] if tracker.active else [],
                          probe=options.probe, heartbeat=heartbeat, label=options.label)
        try:
            write_record(path, record)
        except OSError as err:
            raise unsaved_error(path, record, err) from err
        tracker.log_record(record, path)
    # the record is safe: its checkpoint (this run's, or an orphan one) is of no further use
    checkpoint_path(path).unlink(missing_ok=True)
    return record


def versions() -> dict[str, str]:
    """Python, platform and the versions of the packages a record's numbers depend on."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("pall-avalanche", "torch", "torchvision", "avalanche-lib", "numpy", "timm"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def device_info(device: torch.device) -> dict[str, Any]:
    """The device a run trained on: the GPU's name, or the CPU model and torch's threads."""
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device),
                "tf32": torch.backends.cuda.matmul.allow_tf32,
                "deterministic": torch.are_deterministic_algorithms_enabled()}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"type": "cpu", "name": cpu, "threads": torch.get_num_threads()}
