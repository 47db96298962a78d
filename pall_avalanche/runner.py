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
with ``jobs > 1`` it runs the (method, seed) pairs in parallel processes; with
``device="cuda"`` and several visible GPUs each worker takes its own, round-robin
(:func:`worker_device`).

Several processes on one results folder (W&B sweep agents, shells, hosts sharing a file
system) split the work instead of each computing everything:

* Locks. Before computing a record, :func:`run_experiments` takes ``seed<k>.lock`` beside it
  (:func:`pall_avalanche.records.acquire_lock`: ``O_CREAT | O_EXCL``, JSON with pid, host,
  start time), refreshes its modification time after every request and deletes it when the
  record is written or the run failed. With ``jobs > 1`` the parent process takes the lock
  of each pair when it hands the pair to a worker (at most ``jobs`` at a time, so that other
  processes get the rest). A record locked by a live other owner is deferred; after its own
  work the process polls every :data:`LOCK_POLL_SECONDS` (a note on stderr says what it
  waits for) until the record is written (then reads it) or the lock is stale (then breaks
  it, saying so on stderr, and computes the record). Stale: its owner ran on this host and
  that pid is gone, or it was not refreshed for
  :data:`~pall_avalanche.records.LOCK_STALE_SECONDS` (6 hours; owners on other hosts). Only
  the lock holder reads or writes a record's checkpoint, so no run resumes from another's
  checkpoint in flight; a checkpoint that vanishes before it is read means "no checkpoint".
* Leftovers. A kill mid-write leaves ``.seed<k>.json.*.tmp`` / ``.seed<k>.ckpt.*.tmp``:
  whoever takes a record's lock deletes them. A kill between the record's rename and the
  checkpoint's deletion leaves ``seed<k>.ckpt`` beside a finished record: it is deleted when
  the finished record is found and no live other owner holds the lock.
* Corrupt files. A checkpoint that does not load (random bytes, truncated, empty) and a
  record file that is not a complete record (truncated JSON) give one
  :class:`~pall_avalanche.records.RunWarning` line naming the file; the file is renamed to
  ``<name>.corrupt`` (or ``.corrupt.N``) and the record is computed afresh. Warnings raised in
  worker processes are re-issued by the parent.
* Write failures. Every file is written atomically
  (:func:`~pall_avalanche.records.write_atomic`): a failed write (disk full, permissions)
  leaves the previous file, and the run fails with one line saying what happened and where
  (:class:`~pall_avalanche.records.WriteError`: ``no space left on device writing <path>``).
  A checkpoint that cannot be written ends the run with the previous checkpoint kept. If
  writing a finished record fails, the record is written to
  ``<tempdir>/pall_avalanche_unsaved/<benchmark>/<method>/<hash>/seed<k>.json`` and the error
  names both files; the checkpoint stays, so a rerun resumes.
* Diverged runs. A request whose training loss or parameters are not finite raises
  :class:`~pall_avalanche.core.DivergedError` before its checkpoint is saved: no record is
  written, the checkpoint of the last finished request stays (a rerun resumes from it), and
  the run fails with one line naming method, seed, request and epoch (with ``jobs > 1`` too).
* Workers die with their parent. Each worker process exits as soon as the process that
  started it is gone (a watcher thread; on Linux also ``PR_SET_PDEATHSIG``), so a killed run
  leaves no worker computing its queue or waiting forever.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import random
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pall_avalanche.catalog import BENCHMARK_INFO, register_benchmark
from pall_avalanche.checkpoint import (
    CHECKPOINT_FORMAT,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from pall_avalanche.config import check_run_config, config_hash, resolve_method_config
from pall_avalanche.core import DivergedError, RequestResult, UnlearningPlugin
from pall_avalanche.data import build_benchmark, check_benchmark
from pall_avalanche.evaluation import (
    RequestLog,
    compute_metrics,
    model_size_mb,
    request_evaluator,
)
from pall_avalanche.extensions import load_plugins, loaded_plugins
from pall_avalanche.extensions import provenance as extension_provenance
from pall_avalanche.models import build_model
from pall_avalanche.records import (
    CorruptFileError,
    RecordLock,
    RunWarning,
    acquire_lock,
    describe_lock,
    load_record,
    set_aside,
    write_json_atomic,
)
from pall_avalanche.requests import Request, RequestSequence, generate_requests
from pall_avalanche.strategies import METHODS, UnlearningTemplate, build_strategy
from pall_avalanche.streams import RequestStream
from pall_avalanche.wandb_logging import WandbRun, WandbSettings, default_group, wandb_run

__all__ = ["LOCK_POLL_SECONDS", "RECORD_FORMAT", "CheckpointWriter", "RunSpec",
           "WandbRequestLogger", "checkpoint_path", "lock_path", "record_path",
           "run_experiments", "run_record", "run_spec", "seed_everything", "worker_device"]

#: The record layout (2: evaluation draws nothing from the training's random stream, the
#: record lists its plugins); a results folder holding another format is refused.
RECORD_FORMAT = 2
#: How often a run waiting for records locked by another process looks again (seconds).
LOCK_POLL_SECONDS = 2.0
#: How often the waiting note is repeated while nothing changes (seconds).
WAIT_NOTE_SECONDS = 300.0


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


@dataclass(frozen=True)
class RunSpec:
    """What a record is the result of: method, seed, resolved configuration, request
    sequence (``None``: the one the seed generates) and training seed (``None``: the seed).
    Its :attr:`hash` names its folder (:meth:`record_path`) and is stored in its record and
    checkpoints as ``config_hash``: the configuration's hash, with the requests and the
    training seed included when they are given explicitly (so a default run keeps the
    configuration's hash).

    Build one with :meth:`of`.
    """

    method: str
    seed: int
    config: Mapping[str, Any]
    requests: tuple[Request, ...] | None = None
    train_seed: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def __reduce__(self) -> tuple:      # a mapping proxy does not pickle: rebuild from a dict
        return (type(self), (self.method, self.seed, dict(self.config), self.requests,
                             self.train_seed))

    def __hash__(self) -> int:          # equal specifications have equal identities
        return hash((self.method, self.seed, self.hash))

    @classmethod
    def of(cls, method: str, seed: int, config: Mapping[str, Any],
           requests: RequestSequence | Sequence | None = None,
           train_seed: int | None = None) -> RunSpec:
        """The specification of ``method`` with ``config`` (resolved for the method here).

        :param requests: a :class:`RequestSequence` or a list of requests or of
            ``{"kind", "task"}`` dicts; ``None``: generated from the seed.
        """
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; valid methods are {sorted(METHODS)}")
        resolved = resolve_method_config(config, method)
        if requests is not None and not isinstance(requests, RequestSequence):
            requests = RequestSequence(requests, resolved["n_tasks"])
        return cls(method, seed, resolved, None if requests is None else tuple(requests),
                   train_seed)

    @property
    def sequence(self) -> RequestSequence:
        """The request sequence the run replays."""
        if self.requests is None:
            return generate_requests(self.config["n_tasks"], self.config["n_unlearn"],
                                     self.seed)
        return RequestSequence(self.requests, self.config["n_tasks"])

    def described(self) -> dict[str, Any]:
        """The resolved configuration, plus the replayed requests and the training seed when
        they are given: everything the record is the result of, besides method and seed."""
        out = dict(self.config)
        if self.requests is not None:
            out["requests"] = self.sequence.to_list()
        if self.train_seed is not None:
            out["train_seed"] = self.train_seed
        return out

    @property
    def hash(self) -> str:
        """The run's identity (class docstring)."""
        return config_hash(self.described())

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed by this run."""
        return {"method": self.method, "seed": self.seed, "config_hash": self.hash,
                "requests": self.sequence.to_list(),
                **({"train_seed": self.train_seed} if self.train_seed is not None else {})}

    def record_path(self, out_dir: str | Path) -> Path:
        """``<out_dir>/<benchmark>/<method>/<hash>/seed<k>.json``."""
        return (Path(out_dir) / self.config["benchmark"] / self.method / self.hash
                / f"seed{self.seed}.json")


class CheckpointWriter(UnlearningPlugin):
    """Saves the run's whole state atomically after every request (a subscriber to
    ``after_request``), then calls ``heartbeat``.

    :param path: the checkpoint file (``None``: none is written).
    :param identity: :meth:`RunSpec.identity`.
    :param resumed_after: the request counts the run resumed at (the caller's list, filled
        when the run resumes).
    :param heartbeat: called after every request (``None``: nothing).
    """

    def __init__(self, path: Path | None, identity: Mapping[str, Any],
                 resumed_after: list[int], heartbeat: Callable[[], Any] | None) -> None:
        super().__init__()
        self.path, self.identity = path, dict(identity)
        self.resumed_after, self.heartbeat = resumed_after, heartbeat

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        if self.path is not None:
            save_checkpoint(self.path, {
                "format": CHECKPOINT_FORMAT, **self.identity, "requests_done": result.index + 1,
                "resumed_after": self.resumed_after, "strategy": strategy.checkpoint_state(),
                "rng": capture_rng_state(),
            })
        if self.heartbeat is not None:
            self.heartbeat()


class WandbRequestLogger(UnlearningPlugin):
    """Logs each request to a :class:`~pall_avalanche.wandb_logging.WandbRun` as it ends (a
    subscriber to ``after_request``).

    :param run: the W&B run of the record.
    """

    def __init__(self, run: WandbRun) -> None:
        super().__init__()
        self.run = run

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        self.run.log_request(result)


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
           heartbeat: Callable[[], Any] | None) -> _Run:
    """Benchmark, model and strategy of ``spec`` (seeded by its seed; then re-seeded by its
    training seed if it has one), with the evaluator measuring every request and, subscribed
    to ``after_request`` in this order, the request log, ``plugins``, the probe's plugins and
    the checkpoint writer (last: it saves what the others recorded)."""
    config = spec.config
    seed_everything(spec.seed)
    benchmark = build_benchmark(
        config["benchmark"], seed=spec.seed, n_tasks=config["n_tasks"],
        data_root=config.get("data_root"), train_per_task=config.get("train_per_task"),
    )
    split = benchmark.split
    model = build_model(config["model"], input_shape=split.input_shape, n_tasks=split.n_tasks,
                        classes_per_task=split.classes_per_task,
                        per_task_tokens=METHODS[spec.method].strategy.per_task_tokens,
                        **(config.get("model_kwargs") or {}))
    log = RequestLog()
    probed = probe() if probe is not None else None
    resumed_after: list[int] = []
    writer = CheckpointWriter(checkpoint, spec.identity(), resumed_after, heartbeat)
    strategy = build_strategy(
        spec.method, model=model, config=config, device=device,
        plugins=[log, *plugins, *(probed.plugins if probed else ()), writer],
        evaluator=request_evaluator(benchmark.test_stream, config["eval_batch_size"]))
    if spec.train_seed is not None:
        seed_everything(spec.train_seed)
    return _Run(spec, benchmark, strategy, log, probed, device, resumed_after)


def _resume(run: _Run, checkpoint: Path | None) -> None:
    """Restore ``run`` from ``checkpoint`` if there is a usable one (same identity)."""
    state = _resumable_checkpoint(checkpoint, run.device) if checkpoint is not None else None
    if state is None:
        return
    different = [key for key, value in run.spec.identity().items() if state.get(key) != value]
    if different:
        raise ValueError(f"checkpoint {checkpoint} belongs to another run (its {different} "
                         "differ); delete it to start this run afresh")
    run.strategy.restore_checkpoint_state(state["strategy"])
    restore_rng_state(state["rng"])
    run.done = state["requests_done"]
    run.resumed_after[:] = [*state["resumed_after"], run.done]   # the writer's list too


def _step(run: _Run, show_progress: bool) -> None:
    """Process the requests not done yet (each ends in ``after_request``: logged, and
    checkpointed by :class:`CheckpointWriter`)."""
    stream = RequestStream(run.benchmark, run.spec.sequence)
    for index in tqdm(range(run.done, len(stream)), desc=f"{run.spec.method} seed "
                      f"{run.spec.seed}", leave=False, initial=run.done, total=len(stream),
                      disable=not (show_progress and sys.stderr.isatty())):
        run.strategy.train(stream[index])


def _record(run: _Run) -> dict:
    """The record of a finished run (:data:`RECORD_FORMAT`)."""
    spec, log, strategy = run.spec, run.log, run.strategy
    sequence = spec.sequence
    learn = [t["seconds_per_epoch"] for t in log.timings if t["kind"] == "learn"]
    unlearn = [t["seconds"] for t in log.timings if t["kind"] == "unlearn"]
    extra = {"probe": run.probe.finish(strategy, run.benchmark)} if run.probe else {}
    if spec.train_seed is not None:
        extra["train_seed"] = spec.train_seed
    config = dict(spec.config)
    return {
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
        "versions": _versions(),
        # the plugins loaded (file SHA-256 or package version): what code made the record
        "plugins": extension_provenance(),
        "device": _device_info(run.device),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


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
        :class:`~pall_avalanche.records.RunWarning` and the run starts afresh; one that
        vanishes before it is read counts as none. The caller deletes it once the record is
        safe. ``None``: no checkpoints.
    :param plugins: further plugins (e.g. loggers subscribing to ``after_request``).
    :param probe: a factory of a probe object with ``plugins`` (run after ``plugins``) and
        ``finish(strategy, benchmark) -> dict``, stored JSON-ready as the record's ``probe``
        (the exactness audit, :mod:`pall_avalanche.audit`). ``None``: no probe.
    :param train_seed: re-seed the random number generators with this after the benchmark,
        model and strategy are built: same class split and initial weights as ``seed``,
        other training randomness (stored as the record's ``train_seed``).
    :param heartbeat: called after every finished request (the runner refreshes the record's
        lock with it). ``None``: nothing.
    """
    return run_spec(RunSpec.of(method, seed, config, requests, train_seed), device=device,
                    show_progress=show_progress, checkpoint=checkpoint, plugins=plugins,
                    probe=probe, heartbeat=heartbeat)


def run_spec(spec: RunSpec, *, device: str | torch.device = "cpu", show_progress: bool = False,
             checkpoint: str | Path | None = None, plugins: Sequence = (),
             probe: Callable[[], Any] | None = None,
             heartbeat: Callable[[], Any] | None = None) -> dict:
    """The record of ``spec``: build, resume, step, record (the arguments as in
    :func:`run_record`)."""
    checkpoint = None if checkpoint is None else Path(checkpoint)
    run = _build(spec, torch.device(device), plugins, probe, checkpoint, heartbeat)
    _resume(run, checkpoint)
    _step(run, show_progress)
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


def record_path(out_dir: str | Path, method: str, seed: int, config: dict,
                requests: RequestSequence | list | None = None,
                train_seed: int | None = None) -> Path:
    """Where the record of (method, resolved configuration, seed, requests, training seed)
    lives (:meth:`RunSpec.record_path`)."""
    return RunSpec.of(method, seed, config, requests, train_seed).record_path(out_dir)


def checkpoint_path(record_file: str | Path) -> Path:
    """The checkpoint file kept next to a record while it runs (``seed<k>.ckpt``).

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(record_file).with_suffix(".ckpt")


def lock_path(record_file: str | Path) -> Path:
    """The lock file of a record while a process computes it (``seed<k>.lock``; module
    docstring).

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(record_file).with_suffix(".lock")


def unsaved_path(record_file: str | Path) -> Path:
    """Where a record that could not be written to ``record_file`` is kept:
    ``<tempdir>/pall_avalanche_unsaved/<benchmark>/<method>/<hash>/seed<k>.json``.

    :param record_file: the record's path (:func:`record_path`).
    """
    return Path(tempfile.gettempdir(), "pall_avalanche_unsaved", *Path(record_file).parts[-4:])


@dataclass(frozen=True)
class _Options:
    """How :func:`run_experiments` runs each record (the same for all of its records)."""

    device: str
    checkpoints: bool
    show_progress: bool
    wandb: WandbSettings | None
    probe: Callable[[], Any] | None
    group: str


def _run_and_write(spec: RunSpec, path: Path, options: _Options,
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
        record = run_spec(spec, device=options.device, show_progress=options.show_progress,
                          checkpoint=checkpoint,
                          plugins=[WandbRequestLogger(tracker)] if tracker.active else [],
                          probe=options.probe, heartbeat=heartbeat)
        try:
            write_json_atomic(path, record)
        except OSError as err:
            raise _unsaved(path, record, err) from err
        tracker.log_record(record, path)
    # the record is safe: its checkpoint (this run's, or an orphan one) is of no further use
    checkpoint_path(path).unlink(missing_ok=True)
    return record


def _unsaved(path: Path, record: dict, err: OSError) -> OSError:
    """Keep a record that could not be written to ``path`` in :func:`unsaved_path`; the error
    to raise, naming both files."""
    fallback = unsaved_path(path)
    try:
        write_json_atomic(fallback, record)
        kept = (f"the record was kept in {fallback}: copy it to {path} once that folder is "
                "writable")
    except OSError as again:
        kept = f"keeping it failed too: {again}"
    return OSError(f"could not write the record: {err}; {kept}")


def worker_device(device: str | torch.device, ordinal: int, n_visible: int) -> str:
    """The device of the ``ordinal``-th worker of a pool: with ``device`` ``"cuda"`` (no
    index) and several visible GPUs, the workers take them round-robin (``cuda:<ordinal mod
    n_visible>``); any other device is used as given.

    :param device: the run's device (``--device``).
    :param ordinal: the worker's number, 0, 1, ... in start order.
    :param n_visible: the number of visible CUDA devices.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and n_visible > 1:
        return f"cuda:{ordinal % n_visible}"
    return str(device)


def _init_worker(threads: int, parent: int | None = None, device: str = "cpu",
                 started=None, plugins: Sequence[str] = ()) -> None:
    """Set up a worker process: torch threads, the parent's plugins, its own GPU
    (:func:`worker_device`: the current CUDA device, so ``"cuda"`` means it), and exit as soon
    as the parent is gone.

    :param threads: torch's intra-op threads.
    :param parent: the pid of the process that started the pool.
    :param device: the run's device.
    :param started: a shared counter of the workers started so far (gives the ordinal).
    :param plugins: the parent's ``--plugin`` values
        (:func:`~pall_avalanche.extensions.loaded_plugins`), loaded here too (a spawned process
        starts with the built-in catalog only).
    """
    torch.set_num_threads(threads)
    load_plugins(plugins)
    # a worker's own warnings (e.g. a failed learning request) print as one line, as the
    # parent's do
    warnings.formatwarning = lambda message, *args, **kwargs: f"warning: {message}\n"
    if started is not None and torch.device(device).type == "cuda":
        with started.get_lock():
            ordinal = started.value
            started.value += 1
        mine = torch.device(worker_device(device, ordinal, torch.cuda.device_count()))
        if mine.index is not None:
            torch.cuda.set_device(mine)
    _exit_with_parent(parent)


def _exit_with_parent(parent: int | None) -> None:
    """End this process as soon as its parent is gone: on Linux the kernel's parent-death
    signal (``PR_SET_PDEATHSIG``, SIGKILL), and everywhere a daemon thread that polls
    ``os.getppid()`` every 0.5 s and calls ``os._exit`` when it changes."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # 1: PR_SET_PDEATHSIG
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
    start = os.getppid()
    if parent is not None and start != parent:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:  # the parent died before this worker got here
            os._exit(1)
        except OSError:
            pass

    def watch() -> None:
        while True:
            if os.getppid() != start:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _run_in_worker(*args: Any, **kwargs: Any) -> tuple[dict, list[str]]:
    """:func:`_run_and_write` in a worker process: the record, and the messages of the
    :class:`~pall_avalanche.records.RunWarning` it raised, for the parent to re-issue (other
    warnings, and all of them if the run fails, are shown here)."""
    caught: list = []
    record = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunWarning)
            record = _run_and_write(*args, **kwargs)
    finally:
        relayed = [w for w in caught
                   if record is not None and issubclass(w.category, RunWarning)]
        for w in caught:
            if not any(w is r for r in relayed):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return record, [str(w.message) for w in relayed]


def _failed(method: str, seed: int, err: BaseException) -> Exception:
    """``err`` re-raised with the run named (a ValueError stays a ValueError)."""
    message = f"run of method {method!r} seed {seed} failed: {type(err).__name__}: {err}"
    return ValueError(message) if isinstance(err, ValueError) else RuntimeError(message)


def run_experiments(methods: Sequence[str], seeds: Sequence[int], config: dict,
                    out_dir: str | Path, *, requests: RequestSequence | list | None = None,
                    device: str | torch.device = "cpu", show_progress: bool = True,
                    jobs: int = 1, checkpoints: bool = True,
                    wandb: WandbSettings | None = None, probe: Callable[[], Any] | None = None,
                    train_seed_offset: int | None = None,
                    stats: dict[str, int] | None = None, benchmark: Any = None) -> list[dict]:
    """Run every (method, seed) pair not already recorded under ``out_dir``; return all the
    records (loaded or new), in (method, seed) order.

    Other processes may run on the same ``out_dir`` at the same time: each record is computed
    by the process holding its lock (``seed<k>.lock``), the others wait for it and read it;
    stale locks are broken, leftovers of killed runs deleted, corrupt checkpoints and records
    set aside with a :class:`~pall_avalanche.records.RunWarning`, and a record that cannot be
    written is kept in :func:`unsaved_path` (module docstring).

    :param methods: names from ``METHODS``.
    :param seeds: the seeds.
    :param config: a full configuration.
    :param out_dir: the records' root folder (:func:`record_path`).
    :param requests: replay this sequence for every seed instead of generated ones.
    :param device: where to train.
    :param show_progress: progress bars.
    :param jobs: run the missing records in this many parallel processes (spawned; each uses
        ``max(1, cpu_count // jobs)`` torch threads and, with ``device="cuda"`` on a machine
        with several GPUs, its own GPU). The records are the same as with 1.
    :param checkpoints: checkpoint every run after each request next to its record and resume
        from such a checkpoint (:func:`run_record`); ``False``: neither.
    :param wandb: W&B settings: one W&B run per new record (reused records are not logged
        again); ``None``: no W&B.
    :param probe: a picklable probe factory (:func:`run_record`); a stored record without a
        ``probe`` is then run again.
    :param train_seed_offset: train seed ``s`` with training seed ``s + offset``
        (:func:`run_record`'s ``train_seed``; its own records); ``None``: the seed itself.
    :param stats: counts added to (``ran``: records computed or waited for here, ``reused``:
        records found finished), for a closing summary.
    :param benchmark: an Avalanche benchmark object to run instead of building
        ``config["benchmark"]``: checked (:func:`~pall_avalanche.data.check_benchmark`) and
        registered in this process under the name ``config["benchmark"]`` (which must not name
        another benchmark), every seed on its fixed class split; runs in this process
        (``jobs=1``: a spawned worker would not have it; register a builder with
        :func:`~pall_avalanche.catalog.register_benchmark` to use workers).
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
    if benchmark is not None:
        _register_given(benchmark, config["benchmark"], jobs)
    for method in methods:      # every configuration checked before the first request
        check_run_config(config, method)
    pairs = [(m, s) for m in methods for s in seeds]
    train_seeds = {s: None if train_seed_offset is None else s + train_seed_offset
                   for s in seeds}
    specs = {pair: RunSpec.of(*pair, config, requests, train_seeds[pair[1]]) for pair in pairs}
    paths = {pair: spec.record_path(out_dir) for pair, spec in specs.items()}

    def usable(record: dict | None) -> bool:
        return record is not None and (probe is None or "probe" in record)

    records = {}
    for pair, path in paths.items():
        records[pair] = _peek_record(path)
        if usable(records[pair]) and _has_leftovers(path):
            # delete an orphan checkpoint and temporaries if no live owner holds the lock;
            # best effort: a read-only results folder is still read
            with contextlib.suppress(OSError):
                lock, _ = _claim(path, usable)
                if lock is not None:        # the record changed meanwhile: computed below
                    lock.release()
    missing = [pair for pair in pairs if not usable(records[pair])]
    if stats is not None:
        stats["ran"] = stats.get("ran", 0) + len(missing)
        stats["reused"] = stats.get("reused", 0) + len(pairs) - len(missing)

    def arguments(pair: tuple[str, int], progress: bool) -> tuple:
        return (specs[pair], paths[pair], _Options(str(device), checkpoints, progress, wandb,
                                                   probe, default_group(config)))

    if missing:
        records.update(_run_missing(missing, paths, usable, arguments, jobs=jobs,
                                    show_progress=show_progress, device=device))
    return [records[pair] for pair in pairs]


class _Given:
    """The builder of a benchmark object given to :func:`run_experiments`: the object itself,
    whatever the seed."""

    def __init__(self, benchmark: Any) -> None:
        self.benchmark = benchmark

    def __call__(self, **kwargs: Any) -> Any:
        return self.benchmark


def _register_given(benchmark: Any, name: str, jobs: int) -> None:
    """Register ``benchmark`` (an object) as ``name`` for this process (once)."""
    if jobs != 1:
        raise ValueError(f"jobs={jobs}: a benchmark object runs in this process only; use "
                         "jobs=1, or register a builder with register_benchmark for workers")
    info = BENCHMARK_INFO.get(name)
    if info is not None:
        if isinstance(info.builder, _Given) and info.builder.benchmark is benchmark:
            return
        raise ValueError(f"config['benchmark'] = {name!r} names a registered benchmark; give "
                         "the benchmark object a name of its own there")
    split = check_benchmark(benchmark, name=name)
    register_benchmark(name, _Given(benchmark), n_classes=split.n_tasks * split.classes_per_task,
                       default_n_tasks=split.n_tasks)


def _check_format(path: Path, record: dict | None) -> None:
    if record is not None and record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{path} has record format {record.get('format')!r}; this "
                         f"version writes format {RECORD_FORMAT}: use another --out")


def _peek_record(path: Path) -> dict | None:
    """The record at ``path`` read without its lock: ``None`` if missing or corrupt (a
    corrupt record is reported and set aside by whoever takes the lock)."""
    try:
        record = load_record(path)
    except CorruptFileError:
        return None
    _check_format(path, record)
    return record


def _leftovers(path: Path) -> list[Path]:
    """The temporaries a kill during :func:`~pall_avalanche.records.write_atomic` left for
    the record ``path`` and its checkpoint (``.seed<k>.json.*.tmp``, ``.seed<k>.ckpt.*.tmp``),
    and lock files of a lock breaker killed mid-way older than an hour."""
    found = [*path.parent.glob(f".{path.name}.*.tmp"),
             *path.parent.glob(f".{checkpoint_path(path).name}.*.tmp")]
    now = time.time()
    for broken in path.parent.glob(f".{lock_path(path).name}.*.broken"):
        try:
            if now - broken.stat().st_mtime > 3600:
                found.append(broken)
        except OSError:
            pass
    return found


def _has_leftovers(path: Path) -> bool:
    return checkpoint_path(path).exists() or bool(_leftovers(path))


def _claim(path: Path, usable: Callable[[dict | None], bool]
           ) -> tuple[RecordLock | None, dict | None]:
    """Try to take the lock of the record ``path``.

    Returns ``(lock, None)``: the record is ours to compute (its temporaries are deleted, a
    corrupt record file is set aside with a warning); ``(None, record)``: the record is
    finished (an orphan checkpoint beside it is deleted if we got the lock); ``(None, None)``:
    a live other owner holds the lock and the record is not finished.
    """
    lock = acquire_lock(lock_path(path))
    if lock is None:
        record = _peek_record(path)
        return None, record if usable(record) else None
    try:
        for leftover in _leftovers(path):
            leftover.unlink(missing_ok=True)
        try:
            record = load_record(path)
        except CorruptFileError as err:
            aside = set_aside(path)
            warnings.warn(f"{err}; set aside as {aside.name}, computing the record again",
                          RunWarning, stacklevel=2)
            record = None
        _check_format(path, record)
        if usable(record):
            checkpoint_path(path).unlink(missing_ok=True)  # orphan of a kill after the rename
    except BaseException:
        lock.release()
        raise
    if usable(record):
        lock.release()
        return None, record
    return lock, None


class _WaitNote:
    """The note on stderr while records locked by other processes are awaited: when the set
    of awaited records changes, else every :data:`WAIT_NOTE_SECONDS`."""

    def __init__(self) -> None:
        self.last: tuple[frozenset, float] | None = None

    def show(self, waiting: Sequence[Path]) -> None:
        key, now = frozenset(waiting), time.monotonic()
        if self.last is not None and self.last[0] == key and \
                now - self.last[1] < WAIT_NOTE_SECONDS:
            return
        self.last = (key, now)
        first = lock_path(waiting[0])
        print(f"pall_avalanche: waiting for {len(waiting)} record(s) that other processes are "
              f"computing, e.g. {first} ({describe_lock(first)}); checking every "
              f"{LOCK_POLL_SECONDS:g} s", file=sys.stderr, flush=True)


def _ensure_avalanche_config() -> None:
    """Create Avalanche's ``~/.avalanche/config.json`` (atomically) if it is missing, before
    worker processes start: Avalanche writes it non-atomically on its first import, so workers
    importing it at once in a fresh home folder can read it half-written and die."""
    path = Path(os.path.expanduser("~/.avalanche/config.json"))
    if not path.exists():
        write_json_atomic(path, {"dataset_location": os.path.expanduser("~/.avalanche/data")})


class _Progress:
    """Progress over records: a tqdm bar on a terminal; in a log (stderr not a terminal) one
    plain line per finished record, without escape codes or carriage returns."""

    def __init__(self, total: int, desc: str, show: bool) -> None:
        self.total, self.desc, self.count = total, desc, 0
        self.show, self.tty = show, sys.stderr.isatty()
        self.start = time.perf_counter()
        self.bar = tqdm(total=total, desc=desc, disable=not (show and self.tty))

    def set_postfix_str(self, text: str) -> None:
        self.bar.set_postfix_str(text)

    def update(self, pair: tuple[str, int], how: str = "done") -> None:
        self.count += 1
        self.bar.update()
        if self.show and not self.tty:
            print(f"{self.desc}: {self.count}/{self.total} {pair[0]} seed {pair[1]} {how} "
                  f"({time.perf_counter() - self.start:.0f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


def _run_missing(missing: list[tuple[str, int]], paths: dict[tuple[str, int], Path],
                 usable: Callable[[dict | None], bool],
                 arguments: Callable[[tuple[str, int], bool], tuple], *, jobs: int,
                 show_progress: bool, device: str | torch.device = "cpu"
                 ) -> dict[tuple[str, int], dict]:
    """Compute or collect the ``missing`` records under their locks (module docstring):
    free ones here (``jobs == 1``) or in a pool of ``jobs`` worker processes, locked ones
    once their owner wrote them or their lock went stale."""
    done: dict[tuple[str, int], dict] = {}
    todo = list(missing)
    held: dict[tuple[str, int], RecordLock] = {}
    running: dict[Future, tuple[str, int]] = {}
    workers = min(jobs, len(missing))
    pool: ProcessPoolExecutor | None = None
    note = _WaitNote()
    bar = _Progress(len(missing), "runs" if jobs == 1 else f"runs ({jobs} jobs)",
                    show_progress)
    try:
        while todo or running:
            for pair in list(todo):
                if jobs > 1 and len(running) >= workers:
                    break
                lock, record = _claim(paths[pair], usable)
                if lock is None and record is None:
                    continue  # a live other owner computes it: look again later
                todo.remove(pair)
                if record is not None:
                    done[pair] = record
                    bar.update(pair, "written by another process")
                    continue
                held[pair] = lock
                if jobs == 1:
                    bar.set_postfix_str(f"{pair[0]} seed {pair[1]}")
                    try:
                        done[pair] = _run_and_write(*arguments(pair, show_progress),
                                                    heartbeat=lock.refresh)
                    except DivergedError as err:
                        raise _failed(*pair, err) from err
                    finally:
                        held.pop(pair).release()
                    bar.update(pair)
                    continue
                if pool is None:
                    _ensure_avalanche_config()
                    context = get_context("spawn")
                    pool = ProcessPoolExecutor(
                        max_workers=workers, mp_context=context, initializer=_init_worker,
                        initargs=(max(1, (os.cpu_count() or 1) // jobs), os.getpid(),
                                  str(device), context.Value("i", 0), loaded_plugins()))
                running[pool.submit(_run_in_worker, *arguments(pair, False),
                                    heartbeat=lock.refresh)] = pair
            if running:
                finished, _ = wait(list(running), timeout=LOCK_POLL_SECONDS if todo else None,
                                   return_when=FIRST_COMPLETED)
                for future in finished:
                    pair = running.pop(future)
                    held.pop(pair).release()
                    if future.exception() is not None:
                        raise _failed(*pair, future.exception()) from future.exception()
                    done[pair], messages = future.result()
                    for message in messages:
                        warnings.warn(message, RunWarning, stacklevel=3)
                    bar.update(pair)
            elif todo:
                note.show([paths[pair] for pair in todo])
                time.sleep(LOCK_POLL_SECONDS)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for lock in held.values():
            lock.release()
        bar.close()
    return done
