"""The optimizer the user passes is the one that trains: a scheduler on it (Avalanche's
LRSchedulerPlugin with a StepLR, CosineAnnealingLR or LambdaLR) drives the learning rate of every
parameter group of every learning request, for a dense baseline and for PALL, while each request
still starts from fresh optimizer state; the cosine preset is that same plugin."""

from __future__ import annotations

import math

import pytest
import torch
from avalanche.training.plugins import LRSchedulerPlugin
from helpers import make_strategy

from pall_avalanche.data import build_benchmark
from pall_avalanche.models import build_model
from pall_avalanche.strategies import PALL, Sequential, UnlearningPlugin


class LearningRates(UnlearningPlugin):
    """Per learning request, per epoch: the learning rate of every parameter group of the
    optimizer that steps, and that optimizer's identity and state size at the epoch's start."""

    def __init__(self):
        super().__init__()
        self.requests: list[list[list[float]]] = []
        self.optimizers: set[int] = set()
        self.states_at_start: list[int] = []

    def before_training_exp(self, strategy, **kwargs):
        self.requests.append([])
        self.states_at_start.append(len(strategy.optimizer.state))

    def before_training_iteration(self, strategy, **kwargs):
        if strategy.clock.train_epoch_iterations == 0:
            self.requests[-1].append([g["lr"] for g in strategy.optimizer.param_groups])
        self.optimizers.add(id(strategy.optimizer))


SCHEDULES = {   # scheduler of the user's optimizer → the rate of epochs 0, 1, 2 by hand
    "step": (lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.5), [0.04, 0.02, 0.01]),
    "cosine": (lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3),
               [0.04 * 0.5 * (1 + math.cos(math.pi * e / 3)) for e in range(3)]),
    # LambdaLR computes from the base rates it saw at construction (one group)
    "lambda": (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** e),
               [0.04, 0.02, 0.01]),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("method", [Sequential, PALL])
def test_a_users_scheduler_drives_the_learning_rate_that_trains(method, schedule):
    # the scheduler knows the one group the user's optimizer had; PALL's requests train one
    # group too (weights, scores, task tokens), so every parameter follows the schedule
    torch.manual_seed(0)
    bm = build_benchmark("digits", seed=0, train_per_task=60)
    model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5, classes_per_task=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9)
    rates = LearningRates()
    extra = {"alpha": 0.2, "buffer_size": 50, "n_retrain_iters": 2} if method is PALL else {}
    make, by_hand = SCHEDULES[schedule]
    strategy = method(model=model, optimizer=optimizer, train_mb_size=32, train_epochs=3,
                      eval_mb_size=64, plugins=[LRSchedulerPlugin(make(optimizer)), rates],
                      **extra)
    for exp in bm.train_stream[:2]:
        strategy.train(exp)
    assert strategy.optimizer is optimizer and rates.optimizers == {id(optimizer)}
    for request in rates.requests:                 # epoch by epoch, in every request
        assert request == [pytest.approx([rate]) for rate in by_hand]
    assert rates.states_at_start == [0, 0]         # fresh momentum at every request
    assert len(strategy.optimizer.param_groups) == 1    # PALL: weights, scores, tokens in one


def test_the_cosine_preset_is_avalanches_scheduler_plugin():
    strategy, bm, _ = make_strategy("pall", epochs=3, lr_schedule="cosine")
    schedulers = [p for p in strategy.plugins if isinstance(p, LRSchedulerPlugin)]
    assert len(schedulers) == 1
    assert isinstance(schedulers[0].scheduler, torch.optim.lr_scheduler.CosineAnnealingLR)
    rates = LearningRates()
    strategy.plugins.insert(1, rates)
    for exp in bm.train_stream[:2]:
        strategy.train(exp)
    by_hand = [0.05 * 0.5 * (1 + math.cos(math.pi * e / 3)) for e in range(3)]
    for request in rates.requests:              # reset to 0.05 at every request
        assert request == [pytest.approx([rate]) for rate in by_hand]


def test_without_a_scheduler_the_records_train_as_before():
    # the constructor's optimizer renewed in place equals a new one of its class: two runs, one
    # given an optimizer whose state was dirtied beforehand, train to the same weights
    runs = []
    for dirty in (False, True):
        strategy, bm, _ = make_strategy("sequential", epochs=1)
        if dirty:
            p = next(strategy.model.parameters())
            strategy.optimizer.state[p]["momentum_buffer"] = torch.ones_like(p)
        for exp in bm.train_stream[:2]:
            strategy.train(exp)
        runs.append([p.detach().clone() for p in strategy.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def cosine(base: float, epoch: int, length: int) -> float:
    """The cosine schedule's rate at ``epoch`` of a phase of ``length`` epochs, by hand."""
    return base * 0.5 * (1 + math.cos(math.pi * epoch / length))


@pytest.mark.parametrize("method, first_request_phases", [
    ("lwf", [4]),           # no earlier task: no warm-up, one phase of all epochs
    ("lsf", [4]),
    ("packnet", [2, 2]),    # training, then fine-tuning after pruning, in every request
])
def test_the_cosine_preset_anneals_each_training_phase_from_the_base_rate(
        method, first_request_phases):
    strategy, bm, _ = make_strategy(method, epochs=4, lr_schedule="cosine", lr=0.05)
    rates = LearningRates()
    strategy.plugins.append(rates)
    for exp in bm.train_stream[:2]:
        strategy.train(exp)

    def by_hand(phases: list[int]) -> list:
        return [pytest.approx([cosine(0.05, e, length)], rel=1e-12)
                for length in phases for e in range(length)]

    assert rates.requests[0] == by_hand(first_request_phases)
    assert rates.requests[1] == by_hand([2, 2])    # warm-up / fine-tuning: its own cosine


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_the_configurations_optimizers_step_every_parameter_at_once(name):
    """foreach on the CPU (the values of torch's per-parameter loop bit for bit: checked here
    on 20 steps), fused kernels on a GPU."""
    from pall_avalanche.strategies import make_optimizer

    config = {"optimizer": name, "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
    torch.manual_seed(0)
    start = [torch.randn(30, 20), torch.randn(20), torch.randn(7, 3, 3, 3)]
    runs = []
    for foreach in (True, False):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        optimizer = make_optimizer(config, params)
        assert optimizer.defaults["foreach"] is True
        if not foreach:              # the same optimizer, stepping one parameter at a time
            optimizer = type(optimizer)(params, **{**optimizer.defaults, "foreach": False})
        generator = torch.Generator().manual_seed(1)
        for _ in range(20):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator)
            optimizer.step()
        runs.append(params)
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    on_gpu = make_optimizer(config, [torch.nn.Parameter(torch.zeros(2))], "cuda")
    assert on_gpu.defaults["fused"] is True and not on_gpu.defaults["foreach"]


@pytest.mark.parametrize("granularity", ["epoch", "iteration"])
def test_retraining_runs_at_the_constructors_rate_whatever_scheduler_is_attached(
        granularity, monkeypatch):
    """PALL's retraining after an unlearning request is N_f steps of a fresh optimizer at the
    rate the optimizer was built with (the paper's reference: a fresh optimizer at its base
    rate), no scheduler stepping inside: unlearning from one state with a StepLR attached (per
    epoch or per iteration) and without one gives the same weights bit for bit."""
    from pall_avalanche.strategies.template.optimization import Optimization

    def build(with_scheduler):
        torch.manual_seed(0)
        bm = build_benchmark("digits", seed=0, train_per_task=60)
        model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5,
                            classes_per_task=2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.04, momentum=0.9)
        plugins = ([LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5),
                                      step_granularity=granularity)]
                   if with_scheduler else [])
        strategy = PALL(model=model, optimizer=optimizer, alpha=0.3, buffer_size=50,
                        n_retrain_iters=20, train_mb_size=32, train_epochs=3,
                        eval_mb_size=64, plugins=plugins)
        return strategy, bm

    scheduled, bm = build(True)
    for exp in bm.train_stream[:3]:
        scheduled.train(exp)
    state, rng = scheduled.checkpoint_state(), torch.get_rng_state()
    rates = []
    fresh = Optimization.fresh_optimizer

    def recording(self, param_groups):
        optimizer = fresh(self, param_groups)
        rates.append([group["lr"] for group in optimizer.param_groups])
        return optimizer

    from pall_avalanche.requests.streams import UnlearnExperience

    monkeypatch.setattr(Optimization, "fresh_optimizer", recording)
    weights = []
    for strategy in (scheduled, build(False)[0]):
        strategy.restore_checkpoint_state(state)
        torch.set_rng_state(rng)
        strategy.train(UnlearnExperience(1))
        weights.append([w.detach().clone() for _, w in strategy.model.named_weights()])
    assert rates == [[0.04]] * 2                     # one retraining each, at the built rate
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))
