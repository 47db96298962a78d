"""Test session set-up: Avalanche writes ~/.avalanche/config.json on import and W&B must never
reach the network, so HOME points at a temporary folder and W&B runs offline; each
pytest-xdist worker (one per core, the default) computes with one torch thread."""

import json
import os
import sys
import tempfile

#: Whether avalanche was imported before this file set HOME (it would have written the real
#: ~/.avalanche/config.json); tests/test_startup.py checks that it was not.
AVALANCHE_BEFORE_HOME = "avalanche" in sys.modules

# a worker's torch threads would only compete with the other workers for the cores (and spin
# while they wait: several times slower, not just shared). The variable reaches the processes
# a test starts and torch, if nothing imported it before this file; the count is set in torch
# too, for the case something did.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
os.environ["HOME"] = tempfile.mkdtemp(prefix="pall-avalanche-home-")
# Avalanche writes this file non-atomically on its first import; written here, processes that
# start together (--jobs workers, subprocess tests) only ever read it
_config = os.path.join(os.environ["HOME"], ".avalanche", "config.json")
os.makedirs(os.path.dirname(_config), exist_ok=True)
with open(_config, "w") as f:
    json.dump({"dataset_location": os.path.join(os.environ["HOME"], ".avalanche", "data")}, f)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def pytest_configure(config):
    # tests train for a few steps: a task may stay at chance (tests of the flag use
    # pytest.warns). Added here, after HOME: pytest imports a warning category to resolve it
    config.addinivalue_line("filterwarnings",
                            "ignore::pall_avalanche.evaluation.measurement.LearningWarning")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core this process may use. pytest-xdist's own count is the
    machine's physical cores, which in a container limited by a CPU quota (a CI runner) can be
    many times the cores it gets, and as many workers only slow each other down. Its
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None        # pytest-xdist's own hook reads it
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    quota = _cpu_quota()
    return min(cores, quota) if quota else cores


def _cpu_quota() -> int | None:
    """The CPUs a cgroup quota grants (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), rounded up;
    ``None`` without one."""
    for quota_file, period_file in (("cpu.max", None),
                                    ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            with open(f"/sys/fs/cgroup/{quota_file}") as f:
                fields = f.read().split()
            if period_file:
                with open(f"/sys/fs/cgroup/{period_file}") as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        quota, period = fields[0], fields[1]
        if quota in ("max", "-1"):
            return None
        return -(-int(quota) // int(period))
    return None
