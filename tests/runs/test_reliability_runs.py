"""Many runs on one results folder: record locks (split work, stale and live owners),
leftovers of killed runs, corrupt checkpoints and records, late write failures, file modes,
and worker processes that die with their parent."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch
from helpers import FAST_CONFIG, seq

import pall_avalanche.runs.engine as engine
from pall_avalanche.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.files import RunWarning, load_record, read_record, set_aside, write_json_atomic
from pall_avalanche.reports import load_records, write_report
from pall_avalanche.runs import (
    checkpoint_path,
    lock_path,
    record_path,
    run_experiments,
    unsaved_path,
)
from pall_avalanche.runs.locks import LOCK_STALE_SECONDS, RecordLock, acquire_lock, lock_staleness
from pall_avalanche.runs.progress import WaitNote

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "table1.py"
# A record in well under a second: 3 epochs on 40 samples per task, a 32-unit MLP.
CONFIG = {**FAST_CONFIG, "epochs": 3, "train_per_task": 40, "n_retrain_iters": 2,
          "retrain_epochs": 1, "buffer_size": 50, "eval_batch_size": 512,
          "model_kwargs": {"hidden": [32]}}
REQUESTS = seq("L0 L1 U0")


def run(out: Path, methods=("sequential",), seeds=(0,), **kwargs) -> list[dict]:
    return run_experiments(list(methods), list(seeds), CONFIG, out, requests=REQUESTS,
                           show_progress=False, **kwargs)


def path_of(out: Path, method: str = "sequential", seed: int = 0) -> Path:
    return record_path(out, method, seed, CONFIG, REQUESTS)


def plant_lock(record: Path, pid: int, *, host: str | None = None, age: float = 0.0) -> Path:
    """A lock of another owner beside ``record``: ``pid`` on ``host`` (this one by default),
    last refreshed ``age`` seconds ago."""
    lock = lock_path(record)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                "started": "2024-01-01T00:00:00+00:00", "token": "other"}))
    if age:
        stamp = time.time() - age
        os.utime(lock, (stamp, stamp))
    return lock


def dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def sleeper() -> subprocess.Popen:
    """A live process (no torch import: starts in milliseconds)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def not_called(*args, **kwargs):
    raise AssertionError("the record was computed although another process owns it")


def debris(out: Path) -> list[str]:
    """Lock files, checkpoints and temporaries left under ``out``."""
    return sorted(p.name for p in out.rglob("*")
                  if p.suffix in (".lock", ".ckpt", ".tmp", ".broken"))


@pytest.fixture(autouse=True)
def bounded_waits(monkeypatch):
    """A run that waits for another owner fails after 60 s instead of hanging the tests."""
    show, first = WaitNote.show, []

    def show_or_give_up(note, waiting):
        first.append(time.monotonic())
        if first[-1] - first[0] > 60:
            raise AssertionError(f"still waiting for {waiting} after 60 s")
        show(note, waiting)

    monkeypatch.setattr(WaitNote, "show", show_or_give_up)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict:
    """The record of (sequential, seed 0) from an undisturbed run."""
    record, = run(tmp_path_factory.mktemp("clean"))
    return record


# ------------------------------------------------------------------------- locks
def _compete(out: Path, logs: Path, barrier, results) -> None:
    """One of two processes running the same four records on ``out`` (forked child)."""
    torch.set_num_threads(1)
    real = engine.execute

    def logged(spec, **kwargs):
        with (logs / f"{os.getpid()}.log").open("a") as f:
            f.write(f"{spec.method} {spec.seed}\n")
        time.sleep(0.5)  # a record takes a while: the other process must find work left
        return real(spec, **kwargs)

    engine.execute = logged
    barrier.wait(timeout=60)
    records = run(out, methods=("sequential", "ewc"), seeds=(0, 1), poll_seconds=0.1)
    results.put([(r["method"], r["seed"], r["resumed_after"], r["accuracy"],
                  r["finished_at"]) for r in records])


def test_a_method_that_refuses_its_model_stops_the_grid_before_anything_trains(tmp_path):
    # HAT gates chains of Linear/Conv2d layers only: on a ResNet it is refused when its
    # strategy is built, which the grid does for every method before the first run, so
    # Sequential (first in the grid) never trains
    config = {**FAST_CONFIG, "model": "resnet18", "epochs": 1, "train_per_task": 40}
    with pytest.raises(ValueError, match="HAT gates the units of a chain of Linear/Conv2d"):
        run_experiments(["sequential", "hat"], [0, 1], config, tmp_path, show_progress=False)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_two_processes_on_one_folder_split_the_work(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "logs"
    logs.mkdir()
    context = multiprocessing.get_context("fork")  # no re-import of torch: a fast test
    barrier, results = context.Barrier(2), context.Queue()
    children = [context.Process(target=_compete, args=(out, logs, barrier, results))
                for _ in range(2)]
    for child in children:
        child.start()
    try:
        returned = [results.get(timeout=120) for _ in children]
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    computed = {p.stem: p.read_text().split("\n")[:-1] for p in logs.iterdir()}
    every = Counter(line for lines in computed.values() for line in lines)
    assert every == Counter({"sequential 0": 1, "sequential 1": 1, "ewc 0": 1, "ewc 1": 1})
    assert len(computed) == 2, f"one process computed everything: {computed}"
    # both got all four records, the same ones (read, not recomputed), none resumed
    assert returned[0] == returned[1]
    assert [r[:2] for r in returned[0]] == [("sequential", 0), ("sequential", 1), ("ewc", 0),
                                            ("ewc", 1)]
    assert all(r[2] == [] for r in returned[0])
    assert len(list(out.rglob("seed*.json"))) == 4 and debris(out) == []


def test_stale_locks_are_broken_and_the_record_computed(tmp_path, capfd):
    out = tmp_path / "out"
    dead = plant_lock(path_of(out, seed=0), dead_pid())
    old = plant_lock(path_of(out, seed=1), 4242, host="elsewhere.example",
                     age=LOCK_STALE_SECONDS + 60)
    records = run(out, seeds=(0, 1))
    assert [r["seed"] for r in records] == [0, 1] and all(r["resumed_after"] == []
                                                          for r in records)
    assert read_record(path_of(out, seed=0)) == records[0]
    err = capfd.readouterr().err
    assert f"breaking the stale lock {dead} " in err and "no longer exists" in err
    assert f"breaking the stale lock {old} " in err and "not refreshed for 6.0 h" in err
    assert debris(out) == []


def test_lock_staleness_rules(tmp_path):
    now, host = time.time(), socket.gethostname()
    assert lock_staleness({"pid": os.getpid(), "host": host}, now) is None
    assert "no longer exists" in lock_staleness({"pid": dead_pid(), "host": host}, now)
    # another host's pid cannot be checked: only the age counts
    assert lock_staleness({"pid": dead_pid(), "host": "elsewhere.example"}, now) is None
    assert "not refreshed" in lock_staleness({"pid": os.getpid(), "host": host},
                                             now - LOCK_STALE_SECONDS - 1)
    assert lock_staleness(None, now) is None                    # being written right now
    assert lock_staleness(None, now - 120) == "unreadable"      # its writer was killed
    # a live foreign lock is not taken; release() only deletes the caller's own lock
    lock = plant_lock(tmp_path / "seed0.json", 4242, host="elsewhere.example")
    assert acquire_lock(lock) is None and lock.exists()
    RecordLock(lock, "not-its-token").release()
    assert lock.exists()
    lock.unlink()
    mine = acquire_lock(lock)
    info = json.loads(lock.read_text())
    assert info["pid"] == os.getpid() and info["host"] == host and info["token"] == mine.token
    assert acquire_lock(lock) is None  # this process's own live lock is live too
    mine.release()
    assert not lock.exists()


def test_a_lock_taken_while_a_stale_one_is_broken_is_put_back(tmp_path, monkeypatch, capfd):
    lock = plant_lock(tmp_path / "seed0.json", dead_pid())
    real_rename = os.rename

    def overtaken(src, dst):  # another process broke the stale lock and took it just now
        if Path(src) == lock:
            plant_lock(tmp_path / "seed0.json", os.getpid())
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", overtaken)
    assert acquire_lock(lock) is None
    assert json.loads(lock.read_text())["pid"] == os.getpid()  # the live lock is back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0.lock"]
    assert "breaking" not in capfd.readouterr().err


def test_a_live_lock_defers_the_record_until_its_owner_writes_it(tmp_path, monkeypatch,
                                                                 capfd, clean):
    out = tmp_path / "out"
    path = path_of(out)
    owner = sleeper()
    try:
        lock = plant_lock(path, owner.pid)

        def other_owner_finishes() -> None:
            time.sleep(1.0)
            write_json_atomic(path, {**clean, "computed_by": "the other owner"})
            lock.unlink()

        thread = threading.Thread(target=other_owner_finishes)
        thread.start()
        monkeypatch.setattr(engine, "execute", not_called)
        started = time.monotonic()
        record, = run(out, poll_seconds=0.1)
        waited = time.monotonic() - started
        thread.join()
    finally:
        owner.kill()
        owner.wait()
    assert record["computed_by"] == "the other owner" and waited >= 1.0
    err = capfd.readouterr().err
    assert f"waiting for 1 record(s) that other processes are computing, e.g. {lock} " \
           f"(pid {owner.pid} on host {socket.gethostname()}" in err
    assert debris(out) == []


def test_a_deferred_record_is_taken_over_when_its_owner_dies(tmp_path, monkeypatch, capfd,
                                                             clean):
    out = tmp_path / "out"
    owner = sleeper()
    lock = plant_lock(path_of(out), owner.pid)

    def owner_dies() -> None:
        time.sleep(1.0)
        owner.kill()
        owner.wait()

    thread = threading.Thread(target=owner_dies)
    thread.start()
    record, = run(out, poll_seconds=0.1)
    thread.join()
    assert record["accuracy"] == clean["accuracy"] and "computed_by" not in record
    err = capfd.readouterr().err
    assert "waiting for 1 record(s)" in err
    assert f"breaking the stale lock {lock} (pid {owner.pid}" in err
    assert debris(out) == []


# -------------------------------------------------------------------- leftovers
def test_leftovers_of_killed_runs_are_removed(tmp_path, monkeypatch):
    out = tmp_path / "out"
    run(out, seeds=(0,))
    done = path_of(out, seed=0)
    finished = done.read_bytes()
    planted = [done.parent / ".seed0.json.123.tmp", done.parent / ".seed0.ckpt.456.tmp",
               done.parent / ".seed1.json.789.tmp", done.parent / ".seed1.ckpt.abc.tmp"]
    for leftover in planted:
        leftover.write_bytes(b"partial")
    orphan = checkpoint_path(done)
    orphan.write_bytes(b"a checkpoint left after the record's rename")
    # while a live other owner holds seed 0's lock, its files are not touched
    lock = plant_lock(done, os.getpid())
    records = run(out, seeds=(0, 1))
    assert orphan.exists() and planted[0].exists() and planted[1].exists()
    assert not planted[2].exists() and not planted[3].exists()  # seed 1 was computed
    assert records[0] == json.loads(finished) and records[1]["seed"] == 1
    lock.unlink()
    monkeypatch.setattr(engine, "execute", not_called)
    again = run(out, seeds=(0, 1))
    assert again == records and done.read_bytes() == finished
    assert debris(out) == []


# ---------------------------------------------------------------- corrupt files
def _truncated_checkpoint(path: Path) -> bytes:
    save_checkpoint(path, {"format": CHECKPOINT_FORMAT, "weights": torch.zeros(2000)})
    data = path.read_bytes()
    return data[:len(data) // 2]


def _previous_format(path: Path) -> bytes:
    # a checkpoint of the layout before this one (the request log then kept by a plugin too)
    save_checkpoint(path, {"format": CHECKPOINT_FORMAT - 1, "requests_done": 1})
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["random", "truncated", "empty", "previous format"])
def test_a_corrupt_checkpoint_is_set_aside_and_the_record_starts_afresh(tmp_path, kind, clean):
    out = tmp_path / "out"
    ckpt = checkpoint_path(path_of(out))
    ckpt.parent.mkdir(parents=True)
    content = {"random": os.urandom(3000), "empty": b"",
               "truncated": _truncated_checkpoint(tmp_path / "whole.ckpt"),
               "previous format": _previous_format(tmp_path / "old.ckpt")}[kind]
    ckpt.write_bytes(content)
    with pytest.warns(RunWarning, match=re.escape(str(ckpt))) as caught:
        record, = run(out)
    message = next(str(w.message) for w in caught if w.category is RunWarning)
    assert "\n" not in message and "set aside as seed0.ckpt.corrupt" in message
    aside = ckpt.with_name("seed0.ckpt.corrupt")
    assert aside.read_bytes() == content and not ckpt.exists()
    assert record["accuracy"] == clean["accuracy"] and record["metrics"] == clean["metrics"]
    assert record["resumed_after"] == []


def test_a_checkpoint_that_vanishes_before_loading_means_none(tmp_path, monkeypatch, clean):
    ckpt = tmp_path / "seed0.ckpt"
    ckpt.write_bytes(b"about to be deleted")

    def vanished(path, device=None):  # another process deleted it between a look and the load
        Path(path).unlink()
        return load_checkpoint(path, device)

    monkeypatch.setattr(engine, "load_checkpoint", vanished)
    record = engine.run_record("sequential", 0, CONFIG, requests=REQUESTS, checkpoint=ckpt)
    assert record["accuracy"] == clean["accuracy"] and record["resumed_after"] == []


def test_set_aside_never_overwrites(tmp_path):
    first = tmp_path / "seed0.ckpt"
    names = []
    for n in range(3):
        first.write_text(str(n))
        names.append(set_aside(first).name)
    assert names == ["seed0.ckpt.corrupt", "seed0.ckpt.corrupt.1", "seed0.ckpt.corrupt.2"]
    assert (tmp_path / "seed0.ckpt.corrupt.1").read_text() == "1"


def test_a_truncated_record_is_recomputed_by_the_runner_and_skipped_by_the_report(tmp_path):
    out = tmp_path / "out"
    first = run(out, seeds=(0, 1))
    path = path_of(out, seed=0)
    truncated = path.read_bytes()[:200]
    path.write_bytes(truncated)
    with pytest.warns(RunWarning, match=re.escape(str(path)) + ": not valid JSON") as caught:
        again = run(out, seeds=(0, 1))
    message = next(str(w.message) for w in caught if w.category is RunWarning)
    assert "\n" not in message and "set aside as seed0.json.corrupt" in message
    assert path.with_name("seed0.json.corrupt").read_bytes() == truncated
    assert again[0]["accuracy"] == first[0]["accuracy"] and again[1] == first[1]
    assert read_record(path) == again[0]

    path.write_bytes(truncated)
    incomplete = path_of(out, seed=1)
    incomplete.write_text(json.dumps({"method": "sequential", "seed": 1}))
    with pytest.warns(RunWarning) as caught:
        assert load_records(out) == []
    messages = sorted(str(w.message) for w in caught if w.category is RunWarning)
    assert len(messages) == 2 and messages[0].startswith(f"skipped {path}: not valid JSON (")
    assert messages[1] == (f"skipped {incomplete}: not a complete record (no requests, "
                           "accuracy, metrics, config)")


# ------------------------------------------------------------ late write failure
def test_a_record_that_cannot_be_written_is_kept_elsewhere(tmp_path, monkeypatch, clean):
    out = tmp_path / "out"
    path = path_of(out)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    real_replace = os.replace

    def disk_full(src, dst, **kwargs):
        if Path(dst) == path:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", disk_full)
    fallback = tmp_path / "tmp" / "pall_avalanche_unsaved" / path.relative_to(out)
    assert unsaved_path(path) == fallback
    with pytest.raises(OSError) as raised:
        run(out)
    message = str(raised.value)
    assert message.startswith(f"could not write the record: no space left on device writing "
                              f"{path}; the record was kept in {fallback}")
    kept = load_record(fallback)
    assert kept["accuracy"] == clean["accuracy"] and kept["metrics"] == clean["metrics"]
    assert set(kept) == set(clean)
    # nothing half-done in the results folder; the checkpoint stays for a resume
    assert not path.exists() and debris(out) == ["seed0.ckpt"]
    monkeypatch.setattr(os, "replace", real_replace)
    record, = run(out)
    assert record["resumed_after"] == [len(REQUESTS)] and debris(out) == []


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A folder on a tmpfs of its own (8 MiB, unmounted afterwards): a real file system to
    fill up. Mounting needs root; skipped where it is not permitted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("the full-disk tests fill a real 8 MiB tmpfs and mounting one needs root; "
                    "run the suite as root (as CI does) to cover them")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("the full-disk tests need a real small file system, and mounting a tmpfs "
                    f"is refused on this machine ({done.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def leave_free(folder: Path, pages: int) -> int:
    """Fill the file system of ``folder`` with a file until ``pages`` pages are free; returns
    the page size (tmpfs gives file data whole pages; folders take none)."""
    stats = os.statvfs(folder)
    (folder / "filler").write_bytes(bytes((stats.f_bavail - pages) * stats.f_frsize))
    assert os.statvfs(folder).f_bavail == pages
    return stats.f_frsize


def guarded_run(out: Path, capsys, **kwargs) -> tuple[int, str]:
    """:func:`run` as the scripts run it (:func:`~pall_avalanche.cli.main_guard`): exit code,
    stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main_guard(lambda argv: run(out, **kwargs), prog="table1.py")
    return exit_info.value.code, capsys.readouterr().err


def test_a_full_disk_names_the_checkpoint_and_keeps_the_last_good_one(tmp_path, small_disk,
                                                                      capsys, clean):
    """Room for the lock and the first checkpoint, not for the second beside it: one line
    naming the file, exit code 1, the first checkpoint intact; with room again, the run
    resumes after it."""
    sizes = []
    measured = tmp_path / "measure.ckpt"
    engine.run_record("sequential", 0, CONFIG, requests=REQUESTS, checkpoint=measured,
                      heartbeat=lambda: sizes.append(measured.stat().st_size))
    page = os.statvfs(small_disk).f_frsize
    pages = [-(-size // page) for size in sizes]
    # the lock (1 page) + checkpoint 1 fit; the temporary of checkpoint 2 beside them does not
    leave_free(small_disk, 1 + pages[0] + pages[1] - 1)
    out = small_disk / "out"
    code, err = guarded_run(out, capsys)
    checkpoint = checkpoint_path(path_of(out))
    assert code == 1
    assert err == f"table1.py: error: no space left on device writing {checkpoint}\n"
    assert load_checkpoint(checkpoint)["requests_done"] == 1
    assert debris(out) == ["seed0.ckpt"] and not path_of(out).exists()
    (small_disk / "filler").unlink()
    record, = run(out)
    assert record["resumed_after"] == [1] and record["accuracy"] == clean["accuracy"]


def test_a_full_disk_names_the_lock_and_leaves_none(small_disk, capsys):
    leave_free(small_disk, 0)
    out = small_disk / "out"
    code, err = guarded_run(out, capsys)
    assert code == 1
    assert err == f"table1.py: error: no space left on device writing {lock_path(path_of(out))}\n"
    assert debris(out) == []


def test_a_full_disk_keeps_the_record_elsewhere_and_says_where(tmp_path, small_disk, capsys,
                                                               monkeypatch, clean):
    """Room for the lock only (no checkpoints): the record goes to the unsaved location and
    the one line names both files."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    leave_free(small_disk, 1)
    out = small_disk / "out"
    code, err = guarded_run(out, capsys, checkpoints=False)
    path = path_of(out)
    assert code == 1
    assert err == (f"table1.py: error: could not write the record: no space left on device "
                   f"writing {path}; the record was kept in {unsaved_path(path)}: copy it to "
                   f"{path} once that folder is writable\n")
    assert load_record(unsaved_path(path))["accuracy"] == clean["accuracy"]
    assert debris(out) == [] and not path.exists()


# ----------------------------------------------------------------------- modes
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)],
                         ids=["umask-022", "umask-077"])
def test_written_files_follow_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        run(tmp_path / "out")
        write_report(tmp_path / "rep" / "table", preamble="# t\n",
                     numbers=pd.DataFrame({"a": [1]}), cells=pd.DataFrame({"a": ["1"]}))
        save_checkpoint(tmp_path / "x.ckpt", {"format": CHECKPOINT_FORMAT})
    finally:
        os.umask(previous)
    files = [path_of(tmp_path / "out"), tmp_path / "x.ckpt",
             *(tmp_path / "rep").glob("table.*")]
    assert len(files) == 5
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {
        p.name: oct(mode) for p in files}


# --------------------------------------------------------- slow: real processes
DRIVER = """\
import os, runpy, sys, time
from pathlib import Path

log, barrier, script = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
import pall_avalanche.runs.engine as engine

real = engine.execute


def logged(spec, **kwargs):
    with log.open("a") as f:
        f.write(f"{spec.method} {spec.seed}\\n")
    return real(spec, **kwargs)


engine.execute = logged
(barrier / str(os.getpid())).touch()
while len(list(barrier.iterdir())) < 2:
    time.sleep(0.02)
sys.argv = [script, *sys.argv[4:]]
runpy.run_path(script, run_name="__main__")
"""


def _env(tmp_path: Path) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(home), "WANDB_MODE": "offline"}


@pytest.mark.slow  # two command-line runs: ~10 s of imports each on 2 cores
def test_two_command_line_runs_on_one_out_split_the_work(tmp_path):
    out, barrier = tmp_path / "out", tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "driver.py").write_text(DRIVER)
    args = ["--methods", "sequential,independent", "--seeds", "0", "1", "--out", str(out),
            "--set", "epochs=2", "--quiet"]
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "driver.py"),
                               str(tmp_path / f"computed{n}.log"), str(barrier), str(SCRIPT),
                               *args, "--report-dir", str(tmp_path / f"rep{n}")],
                              cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(2)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert all("| Sequential |" in stdout and "| Independent |" in stdout
               for stdout, _ in outputs)
    logs = [(tmp_path / f"computed{n}.log") for n in range(2)]
    assert all(log.exists() for log in logs), "one process computed everything"
    every = Counter(line for log in logs for line in log.read_text().splitlines())
    assert every == Counter({"sequential 0": 1, "sequential 1": 1, "independent 0": 1,
                             "independent 1": 1})
    records = [json.loads(p.read_text()) for p in out.rglob("seed*.json")]
    assert len(records) == 4 and all(r["resumed_after"] == [] for r in records)
    assert debris(out) == []


@pytest.mark.slow  # a process pool: ~10 s of spawning
def test_jobs_defer_locked_records_and_relay_worker_warnings(tmp_path, monkeypatch, clean):
    out = tmp_path / "out"
    ckpt = checkpoint_path(path_of(out, seed=0))
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"not a checkpoint")
    owner = sleeper()
    try:
        lock = plant_lock(path_of(out, seed=1), owner.pid)
        reference, = run(tmp_path / "reference", seeds=(1,))

        def other_owner_finishes() -> None:
            time.sleep(3.0)
            write_json_atomic(path_of(out, seed=1), {**reference, "computed_by": "other"})
            lock.unlink()

        thread = threading.Thread(target=other_owner_finishes)
        thread.start()
        with pytest.warns(RunWarning, match=re.escape(str(ckpt))):
            records = run(out, seeds=(0, 1), jobs=2, poll_seconds=0.2)
        thread.join()
    finally:
        owner.kill()
        owner.wait()
    assert records[0]["accuracy"] == clean["accuracy"] and records[1]["computed_by"] == "other"
    assert ckpt.with_name("seed0.ckpt.corrupt").exists() and debris(out) == []


def _workers(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "spawn_main" in " ".join(_cmdline(c))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow  # a command-line run with two workers, killed mid-way
def test_workers_exit_when_the_main_process_is_killed(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--methods", "sequential,ewc", "--seeds", "0", "1",
           "2", "3", "--jobs", "2", "--out", str(out), "--report-dir", str(tmp_path / "rep"),
           "--quiet", "--set", "epochs=5"]
    with (tmp_path / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                                stderr=err)
    workers: list[psutil.Process] = []
    try:
        deadline = time.time() + 180
        # both workers started and computing: checkpoints or records of two pairs exist
        while time.time() < deadline:
            workers = _workers(proc.pid) or workers
            started = {p.name.split(".")[0] + str(p.parent) for p in out.rglob("seed*.*")
                       if p.suffix in (".ckpt", ".json")}
            if len(workers) == 2 and len(started) >= 2:
                break
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            time.sleep(0.1)
        assert len(workers) == 2 and len(started) >= 2, "the workers never started"
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        gone_by = time.time() + 10
        while time.time() < gone_by and any(_running(w) for w in workers):
            time.sleep(0.1)
        assert not any(_running(w) for w in workers), "workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for worker in workers:
            if _running(worker):
                worker.kill()


def test_an_owner_whose_lock_was_broken_stops_when_it_notices(tmp_path):
    from pall_avalanche.runs.locks import LockLostError, acquire_lock

    path = tmp_path / "seed0.lock"
    mine = acquire_lock(path)
    mine.refresh()                                   # held: fine
    path.unlink()                                    # broken by another process...
    theirs = acquire_lock(path)                      # ...and taken
    with pytest.raises(LockLostError, match="no longer this process's"):
        mine.refresh()
    mine.release()                                   # never deletes the new owner's lock
    assert theirs.held()


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_diverged_run_can_be_left_out_of_many(tmp_path, jobs):
    # the audit's many seeds: a run whose loss turns NaN (lr = 1e30) is left out with one
    # warning line, the others are computed and returned, and nothing is written for it
    from pall_avalanche.runs.batch import run_specs
    from pall_avalanche.runs.spec import plan

    good = plan(["sequential"], [0], CONFIG, requests=REQUESTS)
    bad = plan(["sequential"], [1], {**CONFIG, "lr": 1e30}, requests=REQUESTS)
    # the run is named by the setting that tells it from the others (lr)
    with pytest.warns(RunWarning, match=r"sequential lr=1e\+30 seed 1 left out: request \d+ "
                                        r"\((learn|unlearn) task \d+\) diverged") as caught:
        records = run_specs([*bad, *good], tmp_path, group="g", jobs=jobs, checkpoints=False,
                            show_progress=False, skip_diverged=True)
    assert [(r["method"], r["seed"]) for r in records] == [("sequential", 0)]
    assert sum("left out" in str(w.message) for w in caught) == 1
    assert [p.name for p in tmp_path.rglob("*.json")] == ["seed0.json"]
    with pytest.raises(RuntimeError, match=r"run of method 'sequential' seed 1 failed: "
                                           r"DivergedError"):
        run_specs(bad, tmp_path, group="g", jobs=jobs, checkpoints=False, show_progress=False)
