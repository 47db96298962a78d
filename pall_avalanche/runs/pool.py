"""Worker processes of :func:`~pall_avalanche.runs.run_experiments` with ``jobs > 1``:
spawned, each with the parent's extensions, its own GPU (round-robin), and gone as soon as the
parent is; and the torch threads of a run (:func:`run_threads`)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from pall_avalanche.config import AUTO_MIN_RUNS, CPU_RUN_THREADS
from pall_avalanche.extensions import load_extensions, loaded_extensions
from pall_avalanche.files import RunWarning, write_json_atomic
from pall_avalanche.runs.engine import run_and_write

__all__ = ["ensure_avalanche_config", "init_worker", "resolve_jobs",
           "run_in_worker", "run_threads", "start_pool", "worker_device"]


def _threads_for(device: str | torch.device, jobs: int) -> int:
    """torch threads of one run: :data:`~pall_avalanche.config.CPU_RUN_THREADS` on the CPU;
    for a GPU run (whose CPU work is small) the cores shared among the ``jobs`` processes."""
    if torch.device(device).type == "cpu":
        return CPU_RUN_THREADS
    return max(1, (os.cpu_count() or 1) // jobs)


@contextlib.contextmanager
def run_threads(device: str | torch.device) -> Iterator[None]:
    """torch's threads for a run in this process
    (:data:`~pall_avalanche.config.CPU_RUN_THREADS` on the CPU; a GPU run keeps this
    process's), restored afterwards."""
    before = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(CPU_RUN_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def resolve_jobs(jobs: int | str, missing: int, device: str | torch.device) -> int:
    """The worker processes for ``missing`` records: ``jobs`` itself, or for ``"auto"`` one
    per CPU core the process may use when the runs train on the CPU and at least
    :data:`AUTO_MIN_RUNS` are missing (else 1: in this process; a GPU run uses one process
    unless told otherwise).

    :raises ValueError: ``jobs`` is neither an integer >= 1 nor ``"auto"``.
    """
    if jobs == "auto":
        if torch.device(device).type != "cpu" or missing < AUTO_MIN_RUNS:
            return 1
        affinity = getattr(os, "sched_getaffinity", None)
        return max(1, len(affinity(0)) if affinity else os.cpu_count() or 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} is invalid; it must be an integer >= 1 or 'auto'")
    return jobs


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


def init_worker(threads: int, parent: int | None = None, device: str = "cpu",
                 started=None, extensions: Sequence[str] = ()) -> None:
    """Set up a worker process: torch threads, the parent's extensions, its own GPU
    (:func:`worker_device`: the current CUDA device, so ``"cuda"`` means it), and exit as soon
    as the parent is gone.

    :param threads: torch's intra-op threads.
    :param parent: the pid of the process that started the pool.
    :param device: the run's device.
    :param started: a shared counter of the workers started so far (gives the ordinal).
    :param extensions: the parent's ``--plugin`` values
        (:func:`~pall_avalanche.extensions.loaded_extensions`), loaded here too (a spawned process
        starts with the built-in catalog only).
    """
    torch.set_num_threads(threads)
    load_extensions(extensions)
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
    exit_with_parent(parent)


def exit_with_parent(parent: int | None) -> None:
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


def run_in_worker(*args: Any, **kwargs: Any) -> tuple[dict, list[str]]:
    """:func:`run_and_write` in a worker process: the record, and the messages of the
    :class:`~pall_avalanche.files.RunWarning` it raised, for the parent to re-issue (other
    warnings, and all of them if the run fails, are shown here)."""
    caught: list = []
    record = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunWarning)
            record = run_and_write(*args, **kwargs)
    finally:
        relayed = [w for w in caught
                   if record is not None and issubclass(w.category, RunWarning)]
        for w in caught:
            if not any(w is r for r in relayed):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return record, [str(w.message) for w in relayed]


def ensure_avalanche_config() -> None:
    """Create Avalanche's ``~/.avalanche/config.json`` (atomically) if it is missing, before
    worker processes start: Avalanche writes it non-atomically on its first import, so workers
    importing it at once in a fresh home folder can read it half-written and die."""
    path = Path(os.path.expanduser("~/.avalanche/config.json"))
    if not path.exists():
        write_json_atomic(path, {"dataset_location": os.path.expanduser("~/.avalanche/data")})


def start_pool(workers: int, jobs: int, device: str | torch.device) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes (:func:`init_worker`: torch threads as
    :func:`_threads_for` says, this process's extensions, GPUs round-robin); Avalanche's
    configuration file is created first (:func:`ensure_avalanche_config`)."""
    ensure_avalanche_config()
    context = get_context("spawn")
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=init_worker,
        initargs=(_threads_for(device, jobs), os.getpid(), str(device),
                  context.Value("i", 0), loaded_extensions()))
