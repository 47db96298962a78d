"""Per-request checkpoints and resume (every method), and parallel runs (--jobs)."""

from __future__ import annotations

import argparse
import os
import random

import numpy as np
import pytest
import torch
from helpers import BUILT_IN_METHODS, FAST_CONFIG, default_suite_subset, make_strategy, seq

from pall_avalanche.checkpoint import (
    CHECKPOINT_FORMAT,
    Stateful,
    capture_rng_state,
    decode_state,
    encode_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from pall_avalanche.cli import add_run_arguments, run_options
from pall_avalanche.config import AUTO_MIN_RUNS, CONFIG_KEYS, CPU_RUN_THREADS
from pall_avalanche.files import RunWarning, read_record
from pall_avalanche.masks import MaskSet
from pall_avalanche.runs import checkpoint_path, record_path, run_experiments, run_record
from pall_avalanche.runs.pool import resolve_jobs
from pall_avalanche.strategies import UnlearningPlugin

# 1 epoch on 40 samples per task, short retraining: every method in a few seconds.
CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_retrain_iters": 5,
          "retrain_epochs": 1, "buffer_size": 50}
REQUESTS = seq("L0 L1 U0 L2 U1")
# Everything in a record that is not wall-clock time.
SAME = ("method", "seed", "requests", "accuracy", "metrics", "model_size_mb",
        "model_size_mb_per_request", "unlearning_stats", "split", "config", "config_hash")


class Interrupted(Exception):
    """Stands for the kill of a run."""


class KillAfter(UnlearningPlugin):
    """Raises at the end of the ``n``-th request this run processes (after its evaluation row,
    before the runner checkpoints it): the run dies mid-request."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.seen = 0

    def _count(self) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise Interrupted(f"killed in request {self.n}")

    def after_training_exp(self, strategy, **kwargs) -> None:
        self._count()

    def after_unlearning(self, strategy, task: int, **kwargs) -> None:
        self._count()


def same_numbers(a: dict, b: dict) -> None:
    for key in SAME:
        assert a.get(key) == b.get(key), key


@pytest.mark.parametrize("method", default_suite_subset(BUILT_IN_METHODS))
def test_killed_run_resumes_to_the_identical_record(method, tmp_path):
    ckpt = tmp_path / "seed0.ckpt"
    uninterrupted = run_record(method, 0, CONFIG, requests=REQUESTS)
    with pytest.raises(Interrupted):
        run_record(method, 0, CONFIG, requests=REQUESTS, checkpoint=ckpt, plugins=[KillAfter(4)])
    state = load_checkpoint(ckpt)  # weights_only=True
    assert state["requests_done"] == 3 and state["resumed_after"] == []
    assert len(state["strategy"]["strategy"]["request_log.results"]) == 3
    resumed = run_record(method, 0, CONFIG, requests=REQUESTS, checkpoint=ckpt)
    same_numbers(resumed, uninterrupted)
    assert uninterrupted["resumed_after"] == [] and resumed["resumed_after"] == [3]
    # the timings of the first three requests come from the killed run
    assert len(resumed["timings"]["per_request"]) == len(REQUESTS)


def test_twice_killed_run_and_checkpoint_contents(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    reference = run_record("pall", 1, CONFIG, requests=REQUESTS)
    with pytest.raises(Interrupted):
        run_record("pall", 1, CONFIG, requests=REQUESTS, checkpoint=ckpt, plugins=[KillAfter(2)])
    with pytest.raises(Interrupted):  # resumes after 1 request, dies in the 3rd of the run
        run_record("pall", 1, CONFIG, requests=REQUESTS, checkpoint=ckpt, plugins=[KillAfter(3)])
    state = torch.load(ckpt, weights_only=True)
    assert state["requests_done"] == 3 and state["resumed_after"] == [1]
    strategy = state["strategy"]["strategy"]
    assert strategy["active_tasks"] == [1] and strategy["clock.train_exp_counter"] == 2
    results = strategy["request_log.results"]
    assert [(r["kind"], r["task"]) for r in results] == [("learn", 0), ("learn", 1),
                                                         ("unlearn", 0)]
    assert results[2]["statistics"]["redrawn"] > 0 and results[0]["statistics"] == {}
    (entries, tasks), = strategy["ledger.events"]  # U0 retrained entries with B^1
    assert tasks == {1} and entries["__kind__"] == "mask_set"
    buffers = next(v["buffers"] for k, v in state["strategy"]["plugins"].items()
                   if k.endswith(".EpisodicMemory"))
    assert sorted(buffers) == [1] and len(buffers[1][0]) == CONFIG["buffer_size"] // 5
    assert list(state["strategy"]["model"]["_extra_state"]) == ["1"]  # packed mask of task 1
    resumed = run_record("pall", 1, CONFIG, requests=REQUESTS, checkpoint=ckpt)
    same_numbers(resumed, reference)
    assert resumed["resumed_after"] == [1, 3]


def test_checkpoint_of_another_run_is_set_aside_and_the_run_starts_afresh(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted):
        run_record("sequential", 0, CONFIG, requests=REQUESTS, checkpoint=ckpt,
                   plugins=[KillAfter(2)])
    with pytest.warns(RunWarning, match=r"run.ckpt: the checkpoint of another run \(its seed "
                                        r"differ\); set aside as run.ckpt.corrupt, the run "
                                        r"starts afresh"):
        record = run_record("sequential", 1, CONFIG, requests=REQUESTS, checkpoint=ckpt)
    same_numbers(record, run_record("sequential", 1, CONFIG, requests=REQUESTS))
    assert record["resumed_after"] == [] and (tmp_path / "run.ckpt.corrupt").is_file()


def _unfit(state: dict, how: str) -> str:
    """Change a sequential run's checkpoint ``state`` so that it loads but cannot serve the
    run; return the reason the warning must give."""
    if how == "done_outside":
        state["requests_done"] = 99
        return r"99 requests done, outside this run's 1 to 5"
    if how == "done_not_int":
        state["requests_done"] = "2"
        return r"'2' requests done"
    strategy = make_strategy("pall", epochs=1)[0]       # PALL's state in Sequential's run
    state["strategy"] = strategy.checkpoint_state()
    return r"a state sequential's strategy cannot take \("


@pytest.mark.parametrize("how", ["done_outside", "done_not_int", "other_strategy"])
def test_a_checkpoint_that_cannot_serve_the_run_is_set_aside(tmp_path, how):
    """It loads, names this run, but does not fit it: set aside with one warning, and the run
    starts afresh (its record as a fresh run's), on this run and on every rerun."""
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted):
        run_record("sequential", 0, CONFIG, requests=REQUESTS, checkpoint=ckpt,
                   plugins=[KillAfter(2)])
    state = torch.load(ckpt, weights_only=True)
    reason = _unfit(state, how)
    torch.save(state, ckpt)
    with pytest.warns(RunWarning, match=rf"run.ckpt: {reason}.*; set aside as run.ckpt.corrupt, "
                                        r"the run starts afresh"):
        record = run_record("sequential", 0, CONFIG, requests=REQUESTS, checkpoint=ckpt)
    same_numbers(record, run_record("sequential", 0, CONFIG, requests=REQUESTS))
    assert (tmp_path / "run.ckpt.corrupt").is_file()


def test_encode_decode_round_trip_and_refusal():
    mask = MaskSet.from_bool({"w": torch.tensor([[True, False, True]])})
    value = {3: (torch.arange(3), None), "s": {1, 2}, "m": [mask, 1.5, "x"]}
    decoded = decode_state(encode_state(value))
    assert torch.equal(decoded[3][0], torch.arange(3)) and decoded[3][1] is None
    assert decoded["s"] == {1, 2} and decoded["m"][0] == mask and decoded["m"][1:] == [1.5, "x"]
    with pytest.raises(TypeError, match=r"value\['bad'\] of type object cannot be checkpointed"):
        encode_state({"bad": object()})


def test_stateful_restores_in_place_and_checks_keys():
    class Holder(Stateful):
        checkpoint_attributes = ("items", "table")

    class Child(Holder):
        checkpoint_attributes = ("count",)

    a = Child()
    a.items, a.table, a.count = [1, 2], {"k": torch.ones(2)}, 7
    assert Child.all_checkpoint_attributes() == ["items", "table", "count"]
    b = Child()
    b.items, b.table, b.count = [], {}, 0
    items = b.items
    b.load_state_dict(a.state_dict())
    assert items is b.items and b.items == [1, 2] and b.count == 7
    assert torch.equal(b.table["k"], torch.ones(2))
    with pytest.raises(ValueError, match="expected"):
        b.load_state_dict({"items": []})


def test_rng_state_round_trip(tmp_path):
    state = capture_rng_state()
    save_checkpoint(tmp_path / "rng.ckpt", {"format": CHECKPOINT_FORMAT, "rng": state})
    first = (random.random(), float(np.random.rand()), float(torch.rand(())))
    restore_rng_state(load_checkpoint(tmp_path / "rng.ckpt")["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == first


def test_jobs_give_the_same_records_and_checkpoints_are_removed(tmp_path):
    """Two workers give the records of one process, whatever this process's torch threads
    (every CPU run uses CPU_RUN_THREADS: the thread count changes how reductions round), and
    this process's threads are as before."""
    methods, seeds = ["sequential", "pall"], [0, 1]
    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_RUN_THREADS + 1)
    try:
        serial = run_experiments(methods, seeds, CONFIG, tmp_path / "serial",
                                 requests=REQUESTS, show_progress=False)
        assert torch.get_num_threads() == CPU_RUN_THREADS + 1
        assert [r["device"]["threads"] for r in serial] == [CPU_RUN_THREADS] * len(serial)
    finally:
        torch.set_num_threads(threads)
    parallel = run_experiments(methods, seeds, CONFIG, tmp_path / "parallel", requests=REQUESTS,
                               show_progress=False, jobs=2)
    assert [(r["method"], r["seed"]) for r in parallel] == [(m, s) for m in methods
                                                            for s in seeds]
    for a, b in zip(serial, parallel, strict=True):
        same_numbers(a, b)
        path = record_path(tmp_path / "parallel", a["method"], a["seed"], CONFIG, REQUESTS)
        same_numbers(read_record(path), a)
        assert not checkpoint_path(path).exists()
    assert not list((tmp_path / "serial").rglob("*.ckpt"))


def test_run_experiments_resumes_a_left_checkpoint(tmp_path):
    out = tmp_path / "out"
    path = record_path(out, "wsn", 0, CONFIG, REQUESTS)
    with pytest.raises(Interrupted):
        run_record("wsn", 0, CONFIG, requests=REQUESTS, checkpoint=checkpoint_path(path),
                   plugins=[KillAfter(3)])
    record, = run_experiments(["wsn"], [0], CONFIG, out, requests=REQUESTS, show_progress=False)
    assert record["resumed_after"] == [2] and read_record(path) == record
    assert not checkpoint_path(path).exists()


@pytest.mark.slow  # a second process pool: ~10 s of spawning on 2 cores
def test_worker_error_names_method_and_seed(tmp_path):
    # what only the run finds (its loss diverging) is named with the method and the seed
    with pytest.raises(RuntimeError, match=r"run of method 'pall' seed 1 failed: DivergedError: "
                                           r"request 0 \(learn task 0\) diverged"):
        run_experiments(["pall"], [1], {**CONFIG, "lr": 1e30}, tmp_path, requests=REQUESTS,
                        show_progress=False, jobs=2)
    # a configuration error is found before any worker starts
    with pytest.raises(ValueError, match=r"model_kwargs \{'bogus': 1\}: the mlp model refuses"):
        run_experiments(["pall"], [1], {**CONFIG, "model_kwargs": {"bogus": 1}}, tmp_path,
                        requests=REQUESTS, show_progress=False, jobs=2)
    with pytest.raises(ValueError, match=r"buffer_size=3 is invalid for 'pall'"):
        run_experiments(["pall"], [1], {**CONFIG, "buffer_size": 3}, tmp_path,
                        requests=REQUESTS, show_progress=False, jobs=2)
    with pytest.raises(ValueError, match="jobs=0 is invalid"):
        run_experiments(["sequential"], [0], CONFIG, tmp_path, jobs=0)


def test_cli_jobs_and_no_checkpoint_flags():
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, default_out="out")
    options = run_options(parser.parse_args(["--jobs", "3", "--no-checkpoint", "--quiet"]))
    assert {k: options[k] for k in ("device", "show_progress", "jobs", "checkpoints")} == {
        "device": "cpu", "show_progress": False, "jobs": 3, "checkpoints": False}
    assert run_options(parser.parse_args([]))["jobs"] == "auto"
    for bad in ("0", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--jobs", bad])


def test_auto_jobs_start_a_worker_per_core_only_for_many_cpu_runs():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert resolve_jobs("auto", AUTO_MIN_RUNS, "cpu") == cores
    assert resolve_jobs("auto", AUTO_MIN_RUNS - 1, "cpu") == 1      # start-up would not pay
    assert resolve_jobs("auto", 10 * AUTO_MIN_RUNS, "cuda") == 1     # a GPU: one process
    assert resolve_jobs(3, 1, "cpu") == 3
    for bad in (0, "many", True):
        with pytest.raises(ValueError, match=r"jobs=.* must be an integer >= 1 or 'auto'"):
            resolve_jobs(bad, 1, "cpu")


def test_workers_take_the_visible_gpus_round_robin():
    from pall_avalanche.runs import worker_device

    assert [worker_device("cuda", k, 4) for k in range(6)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert [worker_device("cuda", k, 1) for k in range(3)] == ["cuda"] * 3   # one GPU: shared
    assert worker_device("cuda:2", 5, 4) == "cuda:2"                          # pinned by user
    assert worker_device("cpu", 3, 4) == "cpu"


def test_the_same_seed_threads_and_hardware_give_bit_identical_records():
    first = run_record("pall", 3, CONFIG, requests=REQUESTS)
    second = run_record("pall", 3, CONFIG, requests=REQUESTS)
    for key in ("accuracy", "metrics", "unlearning_stats", "learning_checks"):
        assert first[key] == second[key], key


def test_a_records_hash_is_its_folder_also_with_replayed_requests_and_training_seeds(tmp_path):
    import hashlib
    import json

    config = {**CONFIG, "methods": {"sequential": {"epochs": 1}}}
    # Sequential declares no key of its own: its configuration is the run keys
    resolved = {k: v for k, v in config.items()
                if k in CONFIG_KEYS and k not in ("methods", "seeds")}
    runs = [({}, {}), ({"requests": REQUESTS}, {"requests": REQUESTS.to_list()}),
            ({"train_seed_offset": 100}, {"train_seed": 100})]
    for kwargs, extra in runs:
        record, = run_experiments(["sequential"], [0], config, tmp_path, show_progress=False,
                                  checkpoints=False, **kwargs)
        # the hash written by hand: sha1 of the sorted JSON of the resolved configuration, with
        # the requests or the training seed when they were given, and the code's fingerprint
        # (tests/runs/test_fingerprint.py)
        key = {**resolved, **extra, "code": record["code"]}
        by_hand = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()
                               ).hexdigest()[:10]
        path = tmp_path / "digits" / "sequential" / by_hand / "seed0.json"
        assert record["config_hash"] == by_hand and read_record(path) == record


class Tally(UnlearningPlugin):
    """A user's stateful plugin: the tasks learned so far."""

    checkpoint_attributes = ("learned",)

    def __init__(self) -> None:
        super().__init__()
        self.learned: list[int] = []

    def after_training_exp(self, strategy, **kwargs) -> None:
        self.learned.append(int(strategy.experience.task_label))


def test_plugin_state_is_keyed_by_class_so_reordered_plugins_still_restore():
    # PALL's own plugins plus a user's stateful one; the copy lists the user's plugins in
    # another order with a stateless one in front: the state still goes to the right owner
    from pall_avalanche.requests.streams import RequestStream

    strategy, bm, _ = make_strategy("pall", epochs=1, measured=False)
    strategy.plugins.append(Tally())
    for exp in RequestStream(bm, seq("L0 L1")):
        strategy.train(exp)
    state = strategy.checkpoint_state()
    keys = sorted(state["plugins"])
    assert "pall_avalanche.rehearsal.memory.EpisodicMemory" in keys
    assert f"{__name__}.Tally" in keys
    copy, _, _ = make_strategy("pall", epochs=1, measured=False)
    copy.plugins.insert(0, UnlearningPlugin())           # stateless: not part of the state
    tally = Tally()
    copy.plugins.insert(0, tally)
    copy.restore_checkpoint_state(state)
    for task in (0, 1):
        for a, b in zip(strategy.memory.buffers[task], copy.memory.buffers[task], strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
    assert copy.active_tasks == [0, 1]
    assert tally.learned == [0, 1]                      # the user's plugin got its own state
