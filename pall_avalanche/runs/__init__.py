"""Runs: (method, configuration, seed) → result record, and many of them with resume.

The names are loaded on first use: the torch-free modules (:mod:`~pall_avalanche.runs.locks`,
the record locks; :mod:`~pall_avalanche.runs.wandb_logging`) import without torch (record
files themselves: :mod:`pall_avalanche.files`).

The modules: :mod:`~pall_avalanche.runs.spec` (what a run is: :class:`RunSpec`, seeding),
:mod:`~pall_avalanche.runs.build` (assembling one: :func:`build_run`),
:mod:`~pall_avalanche.runs.engine` (the unit of work: build, resume, step, record, write),
:mod:`~pall_avalanche.runs.subscribers` (checkpoint writer, lock heartbeat, W&B logger),
:mod:`~pall_avalanche.runs.store` (the results folder: paths, claims under locks,
leftovers, the unsaved fallback), :mod:`~pall_avalanche.runs.pool` (worker processes) and
:mod:`~pall_avalanche.runs.batch` (:func:`run_experiments`: many records, waiting for
other processes' records) and :mod:`~pall_avalanche.runs.progress` (what a batch prints).

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
  (:func:`pall_avalanche.runs.locks.acquire_lock`: ``O_CREAT | O_EXCL``, JSON with pid, host,
  start time), refreshes its modification time after every request and deletes it when the
  record is written or the run failed. With ``jobs > 1`` the parent process takes the lock
  of each pair when it hands the pair to a worker (at most ``jobs`` at a time, so that other
  processes get the rest). A record locked by a live other owner is deferred; after its own
  work the process polls every :data:`~pall_avalanche.runs.batch.LOCK_POLL_SECONDS` (a note
  on stderr says what it waits for) until the record is written (then reads it) or the lock
  is stale (then breaks it, saying so on stderr, and computes the record). Stale: its owner
  ran on this host and that pid is gone, or it was not refreshed for
  :data:`~pall_avalanche.runs.locks.LOCK_STALE_SECONDS` (6 hours; owners on other hosts). Only
  the lock holder reads or writes a record's checkpoint, so no run resumes from another's
  checkpoint in flight; a checkpoint that vanishes before it is read means "no checkpoint".
* Leftovers. A kill mid-write leaves ``.seed<k>.json.*.tmp`` / ``.seed<k>.ckpt.*.tmp``:
  whoever takes a record's lock deletes them. A kill between the record's rename and the
  checkpoint's deletion leaves ``seed<k>.ckpt`` beside a finished record: it is deleted when
  the finished record is found and no live other owner holds the lock.
* Corrupt files. A checkpoint that does not load (random bytes, truncated, empty) and a
  record file that is not a complete record (truncated JSON) give one
  :class:`~pall_avalanche.files.RunWarning` line naming the file; the file is renamed to
  ``<name>.corrupt`` (or ``.corrupt.N``) and the record is computed afresh. Warnings raised in
  worker processes are re-issued by the parent.
* Write failures. Every file is written atomically
  (:func:`~pall_avalanche.files.write_atomic`): a failed write (disk full, permissions)
  leaves the previous file, and the run fails with one line saying what happened and where
  (:class:`~pall_avalanche.files.WriteError`: ``no space left on device writing <path>``).
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

from pall_avalanche.catalog.registration import lazy_names

#: public name → the submodule defining it
_WHERE = {
    "run_experiments": "batch",
    "run_specs": "batch",
    "run_record": "engine",
    "execute": "engine",
    "worker_device": "pool",
    "RunSpec": "spec",
    "plan": "spec",
    "seed_everything": "build",
    "build_run": "build",
    "BuiltRun": "build",
    "configure_numerics": "build",
    "NondeterministicOperation": "build",
    "RECORD_FORMAT": "store",
    "checkpoint_path": "store",
    "lock_path": "store",
    "record_path": "store",
    "unsaved_path": "store",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
