"""No method's training step hands a tensor to the host (a synchronisation on a GPU): every
learning iteration and every step of the unlearning and retraining loops runs under a detector
that makes tensor → Python conversions raise. On CPU, subnetwork methods select thresholds the
way they do on a GPU (``mask_threshold="topk"``), since ``numpy.partition`` is the CPU path."""

from __future__ import annotations

import pytest
import torch
from helpers import BUILT_IN_METHODS, FAST_CONFIG, HostSyncDetector, HostSyncError

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.data import build_benchmark
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.runs.build import build_run
from pall_avalanche.strategies.replay import TaskGEMPlugin

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_retrain_iters": 3,
          "retrain_epochs": 1, "mask_threshold": "topk"}


@pytest.fixture(scope="module")
def digits():
    return build_benchmark("digits", seed=0, train_per_task=CONFIG["train_per_task"])


def watched_strategy(method, digits, detector, plugins=()):
    """``method`` with the detector armed over every training iteration (from the first
    plugin's ``before_training_iteration`` to the last one's ``after_training_iteration``) and
    over every step of the fresh optimizers of its unlearning and retraining loops (from
    ``zero_grad`` to ``step``); returns it and a count of the armed steps."""
    arm, disarm = detector.plugins()
    steps = {"iterations": 0, "loop steps": 0}

    class Count(UnlearningPlugin):
        def after_training_iteration(self, strategy, **kwargs):
            steps["iterations"] += 1

    strategy = build_run(method, CONFIG, seed=0, benchmark=digits,
                         plugins=[*plugins, Count(), disarm]).strategy
    strategy.plugins.insert(0, arm)
    fresh = strategy.fresh_optimizer

    def watched(param_groups):
        optimizer = fresh(param_groups)
        zero_grad, step = optimizer.zero_grad, optimizer.step

        def armed_zero_grad(*args, **kwargs):
            zero_grad(*args, **kwargs)
            detector.armed = True

        def disarmed_step(*args, **kwargs):
            out = step(*args, **kwargs)
            detector.armed = False
            steps["loop steps"] += 1
            return out

        optimizer.zero_grad, optimizer.step = armed_zero_grad, disarmed_step
        return optimizer

    strategy.fresh_optimizer = watched
    return strategy, steps


def exempt_gem_projection(detector, monkeypatch):
    """GEM's projection is the one documented exception (TaskGEMPlugin): it decides on the
    host whether a constraint is violated and solves the QP with quadprog."""
    projection = TaskGEMPlugin.after_backward

    def unwatched(self, strategy, **kwargs):
        armed, detector.armed = detector.armed, False
        try:
            return projection(self, strategy, **kwargs)
        finally:
            detector.armed = armed

    monkeypatch.setattr(TaskGEMPlugin, "after_backward", unwatched)


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_no_step_of_any_method_synchronises(method, digits, monkeypatch):
    with HostSyncDetector() as detector:
        if method == "gem":
            exempt_gem_projection(detector, monkeypatch)
        strategy, steps = watched_strategy(method, digits, detector)
        strategy.train([digits.train_stream[0], digits.train_stream[1],
                        UnlearnExperience(0)])
    assert steps["iterations"] == 2 * -(-40 // CONFIG["batch_size"])   # every iteration
    if method in ("pall", "pall_beta0", "pall_strict", "er", "derpp", "gem", "lsf"):
        assert steps["loop steps"] > 0                    # its unlearning loop was watched


def test_the_detector_catches_a_conversion_inside_a_step(digits):
    class Peek(UnlearningPlugin):
        def before_backward(self, strategy, **kwargs):
            strategy.loss.item()

    with HostSyncDetector() as detector:
        strategy, _ = watched_strategy("sequential", digits, detector, plugins=[Peek()])
        with pytest.raises(HostSyncError, match="item inside a step"):
            strategy.train(digits.train_stream[0])
    assert torch.zeros(()).item() == 0.0                  # patches removed
