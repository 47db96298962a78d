"""The batch driver: every (method, seed) record of a configuration, reused when finished,
computed here or in worker processes under its lock otherwise, with progress and waiting for
records other processes compute (:func:`run_experiments`)."""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch

from pall_avalanche.catalog import BENCHMARK_INFO, PAPER_BENCHMARKS, register_benchmark
from pall_avalanche.core import DivergedError
from pall_avalanche.data import build_benchmark, check_benchmark
from pall_avalanche.files import RunWarning, one_line
from pall_avalanche.models import build_model
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.build import build_run
from pall_avalanche.runs.engine import RunOptions, run_and_write
from pall_avalanche.runs.locks import RecordLock
from pall_avalanche.runs.pool import resolve_jobs, run_in_worker, run_threads, start_pool
from pall_avalanche.runs.progress import (
    OverallProgress,
    StageProgress,
    WaitNote,
    distinguishing_keys,
    run_name,
)
from pall_avalanche.runs.spec import RunSpec, plan, probe_modules
from pall_avalanche.runs.store import claim, has_leftovers, peek_record
from pall_avalanche.runs.wandb_logging import WandbSettings, default_group

__all__ = ["LOCK_POLL_SECONDS", "check_builds", "run_experiments", "run_specs"]

#: How often a run waiting for records locked by another process looks again (seconds).
LOCK_POLL_SECONDS = 2.0


def _left_out(name: str, err: DivergedError, left_out: list[str] | None) -> None:
    """Warn (one line) that the diverged run ``name`` is left out (``skip_diverged``), and
    add ``"<name>: <why>"`` to ``left_out``."""
    warnings.warn(f"{name} left out: {err} (no record is written)", RunWarning,
                  stacklevel=4)
    if left_out is not None:
        left_out.append(f"{name}: {err}")


def _failed(spec: RunSpec, err: BaseException) -> Exception:
    """``err`` re-raised with the run named (a ValueError stays a ValueError)."""
    message = f"run of method {spec.method!r} seed {spec.seed} failed: {type(err).__name__}: {err}"
    return ValueError(message) if isinstance(err, ValueError) else RuntimeError(message)


def run_experiments(methods: Sequence[str], seeds: Sequence[int], config: dict,
                    out_dir: str | Path, *, requests: RequestSequence | list | None = None,
                    device: str | torch.device = "cpu", show_progress: bool = True,
                    jobs: int | str = 1, checkpoints: bool = True,
                    wandb: WandbSettings | None = None, probe: Callable[[], Any] | None = None,
                    train_seed_offset: int | None = None,
                    stats: dict[str, int] | None = None, benchmark: Any = None,
                    poll_seconds: float = LOCK_POLL_SECONDS) -> list[dict]:
    """Run every (method, seed) pair not already recorded under ``out_dir``; return all the
    records (loaded or new), in (method, seed) order.

    Other processes may run on the same ``out_dir`` at the same time: each record is computed
    by the process holding its lock (``seed<k>.lock``), the others wait for it and read it;
    stale locks are broken, leftovers of killed runs deleted, corrupt checkpoints and records
    set aside with a :class:`~pall_avalanche.files.RunWarning`, and a record that cannot be
    written is kept in :func:`unsaved_path` (module docstring).

    :param methods: names from ``METHODS``.
    :param seeds: the seeds.
    :param config: a full configuration.
    :param out_dir: the records' root folder (:func:`record_path`).
    :param requests: replay this sequence for every seed instead of generated ones.
    :param device: where to train.
    :param show_progress: progress bars.
    :param jobs: run the missing records in this many parallel processes (spawned; with
        ``device="cuda"`` on a machine with several GPUs, each its own GPU), or ``"auto"``: one
        per core for CPU runs when many records are missing
        (:func:`~pall_avalanche.runs.pool.resolve_jobs`). A CPU run uses
        :data:`~pall_avalanche.config.CPU_RUN_THREADS` torch threads wherever it runs, so
        the records are the same as with 1.
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
        another benchmark), every seed on its fixed class split. Records are found by that
        name, like every record by its configuration: give other data another name, or
        another ``out_dir``, or its records would be taken for this one's. Runs in this process
        (``jobs=1``: a spawned worker would not have it; register a builder with
        :func:`~pall_avalanche.catalog.register_benchmark` to use workers).
    :param poll_seconds: how often a record locked by another process is looked for (and its
        lock's staleness checked) while it is awaited.
    """
    resolve_jobs(jobs, 0, device)                   # a bad value is refused before anything
    if benchmark is not None and jobs == "auto":
        jobs = 1                                    # a benchmark object runs in this process
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ValueError(f"seeds {repeated} are given more than once; give each seed once")
    added = benchmark is not None and _register_given(benchmark, config["benchmark"], jobs)
    try:        # every configuration checked before the first request
        specs = plan(methods, seeds, config, requests=requests,
                     train_seed_offset=train_seed_offset, modules=probe_modules(probe))
    except ValueError:
        if added:                   # nothing ran: the name stays free
            del BENCHMARK_INFO[config["benchmark"]]
        raise
    return run_specs(specs, out_dir, group=default_group(config), device=device,
                     show_progress=show_progress, jobs=jobs, checkpoints=checkpoints,
                     wandb=wandb, probe=probe, stats=stats, poll_seconds=poll_seconds)


def run_specs(specs: Sequence[RunSpec], out_dir: str | Path, *, group: str,
              device: str | torch.device = "cpu", show_progress: bool = True,
              jobs: int | str = 1,
              checkpoints: bool = True, wandb: WandbSettings | None = None,
              probe: Callable[[], Any] | None = None, stats: dict[str, int] | None = None,
              skip_diverged: bool = False, poll_seconds: float = LOCK_POLL_SECONDS,
              overall: OverallProgress | None = None,
              left_out: list[str] | None = None) -> list[dict]:
    """The records of ``specs`` (checked specifications, :func:`~pall_avalanche.runs.spec.plan`),
    in order: reused when finished under ``out_dir``, computed here or in ``jobs`` worker
    processes under their locks otherwise (the arguments as in :func:`run_experiments`;
    ``group``: the W&B group of the runs). A diverged run stops everything, unless
    ``skip_diverged``: then it is left out of the list with a one-line
    :class:`~pall_avalanche.files.RunWarning` (no record is written, so a rerun tries
    it again; the exactness audit's many seeds and shadow runs, and the scripts' grids, go on
    without it), named with its reason in ``left_out`` when given. Before the
    first run, every missing method's strategy is built once on its model
    (:func:`check_builds`): one that refuses it stops the grid
    before anything trains. ``overall``: the script's progress over all its calls (the
    reused records count at once, the computed ones as they finish)."""
    if probe is not None and checkpoints:
        raise ValueError("a probe's state is not checkpointed: use checkpoints=False with probe")
    if len(set(specs)) != len(specs):
        raise ValueError("a run is specified more than once (same method, seed and identity)")
    paths = {spec: spec.record_path(out_dir) for spec in specs}

    def usable(record: dict | None) -> bool:
        return record is not None and (probe is None or "probe" in record)

    records = {}
    for spec, path in paths.items():
        records[spec] = peek_record(path, spec)
        if usable(records[spec]) and has_leftovers(path):
            # delete an orphan checkpoint and temporaries if no live owner holds the lock;
            # best effort: a read-only results folder is still read
            with contextlib.suppress(OSError):
                lock, _ = claim(path, usable, spec)
                if lock is not None:        # the record changed meanwhile: computed below
                    lock.release()
    missing = [spec for spec in specs if not usable(records[spec])]
    if stats is not None:
        stats["ran"] = stats.get("ran", 0) + len(missing)
        stats["reused"] = stats.get("reused", 0) + len(specs) - len(missing)
    if overall is not None:
        overall.count(reused=len(specs) - len(missing))

    keys = distinguishing_keys(specs)      # PALL's three α of Table 1 named apart

    def name(spec: RunSpec) -> str:
        return run_name(spec, keys.get(spec.method, ()))

    def arguments(spec: RunSpec, progress: bool) -> tuple:
        return (spec, paths[spec], RunOptions(str(device), checkpoints, progress, wandb,
                                                   probe, group, name(spec)))

    if missing:
        check_builds(missing)
        _say_if_slow(missing, device)
        records.update(_run_missing(missing, paths, usable, arguments, name, jobs=jobs,
                                    show_progress=show_progress, device=device,
                                    skip_diverged=skip_diverged, poll_seconds=poll_seconds,
                                    left_out=left_out,
                                    overall=overall))
    return [records[spec] for spec in specs if records[spec] is not None]


def _say_if_slow(specs: Sequence[RunSpec], device: str | torch.device) -> None:
    """One line when runs train a paper benchmark whole on the CPU (its configuration's
    epochs of every task's full training set: hours per run there), before they start."""
    if torch.device(device).type != "cpu":
        return
    full = sorted({s.config["benchmark"] for s in specs if s.config["benchmark"] in
                   PAPER_BENCHMARKS and s.config.get("train_per_task") is None})
    if full:
        warnings.warn(
            f"{', '.join(full)} at full size on the CPU: {len(specs)} run(s), each "
            "training its configuration's epochs on every task's whole training set, hours "
            "per run here; use --device cuda, or --train-per-task N and --epochs E for a "
            "reduced run", RunWarning, stacklevel=3)


def check_builds(specs: Iterable[RunSpec]) -> None:
    """Build, without training and on the CPU, the strategy of every distinct method and model
    among ``specs`` (each benchmark built once, with the first seed that names it): a strategy
    that refuses its model (HAT on a ResNet's skip connections, ...) stops a grid in one line
    before any run starts, not when its turn comes hours into it. (Here, not in
    :mod:`pall_avalanche.runs.build`: the records' code fingerprint covers the run's assembly,
    and this check changes no record.)

    :raises ValueError: (or the strategy's own error) the first refusal; a model that refuses
        its ``model_kwargs`` is one line naming them.
    """
    benchmarks: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        config = spec.config
        data = json.dumps([config["benchmark"], config["n_tasks"], config.get("data_root"),
                           config.get("train_per_task")], default=str)
        model = json.dumps([config["model"], config.get("model_kwargs")], sort_keys=True,
                           default=str)
        if (spec.method, data + model) in seen:
            continue
        seen.add((spec.method, data + model))
        if data not in benchmarks:
            benchmarks[data] = build_benchmark(
                config["benchmark"], seed=spec.seed, n_tasks=config["n_tasks"],
                data_root=config.get("data_root"), train_per_task=config.get("train_per_task"))
        kwargs = config.get("model_kwargs") or {}
        if kwargs:
            split = benchmarks[data].split
            try:
                build_model(config["model"], input_shape=split.input_shape,
                            n_tasks=split.n_tasks, classes_per_task=split.classes_per_task,
                            **kwargs)
            except (TypeError, ValueError, RuntimeError) as err:
                raise ValueError(f"model_kwargs {kwargs}: the {config['model']} model refuses "
                                 f"them ({one_line(err)})") from None
        build_run(spec.method, config, seed=spec.seed, benchmark=benchmarks[data],
                  measured=False)


class _Given:
    """The builder of a benchmark object given to :func:`run_experiments`: the object itself,
    whatever the seed."""

    def __init__(self, benchmark: Any) -> None:
        self.benchmark = benchmark

    def __call__(self, **kwargs: Any) -> Any:
        return self.benchmark


def _register_given(benchmark: Any, name: str, jobs: int) -> bool:
    """Register ``benchmark`` (an object) as ``name`` for this process, once; whether this
    call registered it."""
    if jobs != 1:
        raise ValueError(f"jobs={jobs}: a benchmark object runs in this process only; use "
                         "jobs=1, or register a builder with register_benchmark for workers")
    info = BENCHMARK_INFO.get(name)
    if info is not None:
        if isinstance(info.builder, _Given) and info.builder.benchmark is benchmark:
            return False
        raise ValueError(f"config['benchmark'] = {name!r} names a registered benchmark; give "
                         "the benchmark object a name of its own there")
    split = check_benchmark(benchmark, name=name)
    register_benchmark(name, _Given(benchmark), n_classes=split.n_tasks * split.classes_per_task,
                       default_n_tasks=split.n_tasks)
    return True


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes (their runs keep their last checkpoints), so
    that an interrupted batch ends at once instead of waiting for the running records.
    ``ProcessPoolExecutor`` offers this only from Python 3.14 (``terminate_workers``); before
    it, the processes are read from the pool's ``_processes``."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    for process in list(getattr(pool, "_processes", {}).values()):
        process.terminate()


def _run_missing(missing: list[RunSpec], paths: dict[RunSpec, Path],
                 usable: Callable[[dict | None], bool],
                 arguments: Callable[[RunSpec, bool], tuple],
                 name: Callable[[RunSpec], str], *, jobs: int | str,
                 show_progress: bool, device: str | torch.device = "cpu",
                 skip_diverged: bool = False, poll_seconds: float = LOCK_POLL_SECONDS,
                 overall: OverallProgress | None = None,
                 left_out: list[str] | None = None) -> dict[RunSpec, dict]:
    """Compute or collect the ``missing`` records under their locks (module docstring):
    free ones here (``jobs == 1``) or in a pool of ``jobs`` worker processes, locked ones
    once their owner wrote them or their lock went stale."""
    jobs = resolve_jobs(jobs, len(missing), device)
    done: dict[RunSpec, dict] = {}
    todo = list(missing)
    held: dict[RunSpec, RecordLock] = {}
    running: dict[Future, RunSpec] = {}
    workers = min(jobs, len(missing))
    pool: ProcessPoolExecutor | None = None
    note = WaitNote(poll_seconds)
    bar = StageProgress(len(missing), "runs" if jobs == 1 else f"runs ({jobs} jobs)",
                        show_progress, name, overall)
    try:
        while todo or running:
            for spec in list(todo):
                if jobs > 1 and len(running) >= workers:
                    break
                lock, record = claim(paths[spec], usable, spec)
                if lock is None and record is None:
                    continue  # a live other owner computes it: look again later
                todo.remove(spec)
                if record is not None:
                    done[spec] = record
                    bar.update(spec, "written by another process")
                    continue
                held[spec] = lock
                if jobs == 1:
                    bar.set_postfix_str(name(spec))
                    try:
                        with run_threads(device):
                            done[spec] = run_and_write(*arguments(spec, show_progress),
                                                        heartbeat=lock.refresh)
                    except DivergedError as err:
                        if not skip_diverged:
                            raise _failed(spec, err) from err
                        _left_out(name(spec), err, left_out)
                    finally:
                        held.pop(spec).release()
                    bar.update(spec)
                    continue
                if pool is None:
                    pool = start_pool(workers, jobs, device)
                running[pool.submit(run_in_worker, *arguments(spec, False),
                                    heartbeat=lock.refresh)] = spec
            if running:
                finished, _ = wait(list(running), timeout=poll_seconds if todo else None,
                                   return_when=FIRST_COMPLETED)
                for future in finished:
                    spec = running.pop(future)
                    held.pop(spec).release()
                    err = future.exception()
                    if isinstance(err, DivergedError) and skip_diverged:
                        _left_out(name(spec), err, left_out)
                        bar.update(spec, "diverged")
                        continue
                    if err is not None:
                        raise _failed(spec, err) from err
                    done[spec], messages = future.result()
                    for message in messages:
                        warnings.warn(message, RunWarning, stacklevel=3)
                    bar.update(spec)
            elif todo:
                note.show([paths[spec] for spec in todo])
                time.sleep(poll_seconds)
    except KeyboardInterrupt:
        if pool is not None:        # Ctrl-C to this process alone: stop the workers now
            _stop_workers(pool)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for lock in held.values():
            lock.release()
        bar.close()
    return done
