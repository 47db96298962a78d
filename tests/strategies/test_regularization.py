"""EWC, LwF and LSF: learning and unlearning with real training on digits, per-task state that
unlearning removes, the head-only warm-up, and a hand-checked EWC penalty."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

import pytest
import torch
from avalanche.training.utils import copy_params_dict
from helpers import make_strategy, seq, snapshot
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import LwF, UnlearningPlugin
from pall_avalanche.strategies.ewc import TaskEWCPlugin
from pall_avalanche.strategies.lwf import task_logits

REQUESTS = "L0 L1 L2 U1 L3"   # request 3 unlearns task 1


@dataclass
class Run:
    """A request sequence run, with what was seen around the unlearning request."""

    strategy: object
    bm: object
    accuracy: list
    before: dict                      # parameters just before U1
    after: dict                       # parameters just after U1
    ewc_state: dict = field(default_factory=dict)   # task -> (snapshot, Fisher) before U1
    lwf_targets: tuple = ()           # distilled tasks (before U1, after U1)
    codes: tuple = ()                 # tasks with mnemonic codes (before U1, after U1)
    penalty_after: float = 0.0        # EWC penalty right after U1
    model_after_l0: nn.Module | None = None
    teacher_after: dict = field(default_factory=dict)


def ewc_state(plugin: TaskEWCPlugin) -> dict:
    return {task: ({k: v.data.clone() for k, v in plugin.saved_params[c].items()},
                   {k: v.data.clone() for k, v in plugin.importances[c].items()})
            for task, c in plugin.counter_of.items()}


@functools.cache
def run(method: str) -> Run:
    strategy, bm, evaluation = make_strategy(method)
    stream = RequestStream(bm, seq(REQUESTS))
    strategy.train(stream[0])
    model_after_l0 = copy.deepcopy(strategy.model)
    for exp in stream[1:3]:
        strategy.train(exp)
    before = snapshot(strategy.model)
    ewc = getattr(strategy, "ewc", None)
    lwf = getattr(strategy, "lwf", None)
    state = ewc_state(ewc) if ewc else {}
    targets = set(lwf.targets) if lwf else None
    codes = set(getattr(strategy, "codes", {}))
    strategy.train(stream[3])
    result = Run(strategy, bm, None, before, snapshot(strategy.model), state,
                 (targets, set(lwf.targets) if lwf else None),
                 (codes, set(getattr(strategy, "codes", {}))),
                 float(ewc.penalty(strategy.model).detach()) if ewc else 0.0, model_after_l0,
                 snapshot(lwf.lwf.prev_model) if lwf else {})
    strategy.train(stream[4])
    result.accuracy = evaluation.accuracy
    return result


# ---------------------------------------------------------------- request sequences
@pytest.mark.parametrize("method", ["ewc", "lwf", "lsf"])
def test_learns_and_unlearns_a_request_sequence_with_all_metrics(method):
    r = run(method)
    requests = seq(REQUESTS)
    assert len(r.accuracy) == len(requests) and all(len(row) == 5 for row in r.accuracy)
    metrics = compute_metrics(r.accuracy, requests)
    assert all(metrics[k] is not None for k in ("A_l", "A_u", "F_l", "F_u", "F_u_max"))
    assert r.strategy.active_tasks == [0, 2, 3]
    # every learned task was learned well when it was learned (2 epochs of 4 steps; after the
    # first task, LwF's and LSF's first epoch trains the head only)
    for i, task in enumerate([0, 1, 2]):
        assert r.accuracy[i][task] >= 85, (method, task, r.accuracy[i][task])
    assert r.accuracy[4][3] >= 75


@pytest.mark.parametrize("method", ["ewc", "lwf"])
def test_unlearning_changes_no_parameter(method):
    r = run(method)
    assert r.before.keys() == r.after.keys()
    for name in r.before:
        assert torch.equal(r.before[name], r.after[name]), name
    assert r.accuracy[3] == r.accuracy[2]
    assert compute_metrics(r.accuracy, seq(REQUESTS))["F_u"] == 0.0


# ------------------------------------------------------------------------- EWC
def hand_penalty(params: dict, state: dict, tasks) -> float:
    total = 0.0
    for task in tasks:
        saved, fisher = state[task]
        for name, value in params.items():
            total += float((fisher[name] * (value - saved[name]) ** 2).sum())
    return total


@pytest.mark.parametrize("method", ["ewc", "lsf"])
def test_ewc_state_of_an_unlearned_task_is_gone(method):
    r = run(method)
    ewc = r.strategy.ewc
    assert sorted(r.ewc_state) == [0, 1, 2]
    assert ewc.tasks == [0, 2, 3]
    assert sorted(ewc.saved_params) == sorted(ewc.importances) == sorted(ewc.counter_of.values())
    assert 1 not in ewc.counter_of and len(ewc.saved_params) == 3
    # the penalty right after U1 is the sum over tasks 0 and 2 only
    remaining = hand_penalty(r.after, r.ewc_state, [0, 2])
    assert r.penalty_after == pytest.approx(remaining, rel=1e-4)
    assert hand_penalty(r.after, r.ewc_state, [1]) > 1e-3 * remaining > 0


def test_ewc_fisher_of_a_task_lives_on_its_own_head_rows():
    r = run("ewc")
    net = r.strategy.model
    for task, (_, fisher) in r.ewc_state.items():
        rows = torch.zeros(net.head.weight.shape[0], dtype=torch.bool)
        rows[net.head_rows(task)] = True
        head = fisher["head.weight"]
        assert head[rows].sum() > 0, task
        assert torch.count_nonzero(head[~rows]) == 0, task


def test_ewc_penalty_on_a_tiny_model_by_hand():
    # features = x (no backbone parameters); head.weight: 2 tasks x 2 classes x 2 features
    net = TaskIncrementalNet(nn.Flatten(), 2, n_tasks=2, classes_per_task=2)
    head = net.head.weight
    plugin = TaskEWCPlugin(ewc_lambda=2.0)
    sgd = torch.optim.SGD(net.parameters(), lr=0.0)

    def fisher(x, y, task):
        data = TensorDataset(torch.tensor(x), torch.tensor(y), torch.full((len(y),), task))
        return plugin.compute_importances(net, nn.CrossEntropyLoss(), sgd, data, "cpu",
                                          batch_size=len(y))

    with torch.no_grad():
        head.zero_()
    # task 0 at W = 0 (p = 1/2), per sample p(y)·g²: sample (1, 2), y=0 gives rows 0, 1
    # (1/8, 1/2); sample (2, 0), y=1 gives (1/2, 0); the Fisher is their mean
    f0 = fisher([[1.0, 2.0], [2.0, 0.0]], [0, 1], task=0)
    assert torch.equal(f0["head.weight"].data, torch.tensor(
        [[0.3125, 0.25], [0.3125, 0.25], [0.0, 0.0], [0.0, 0.0]]))
    # store them as after_training_exp does: Fisher and snapshot under the experience counter
    plugin.importances[0], plugin.saved_params[0] = f0, copy_params_dict(net)
    plugin.counter_of[5] = 0                          # task 5 was the first experience
    # task 1 at W = 0 with x = (1, 1), y = 1: rows 2, 3 get gradients -/+(1/2, 1/2), × p = 1/2
    f1 = fisher([[1.0, 1.0]], [1], task=1)
    assert torch.equal(f1["head.weight"].data[2:], torch.full((2, 2), 0.125))
    assert torch.count_nonzero(f1["head.weight"].data[:2]) == 0
    with torch.no_grad():
        head.fill_(1.0)                               # task 1's snapshot: all ones
    plugin.importances[1], plugin.saved_params[1] = f1, copy_params_dict(net)
    plugin.counter_of[8] = 1
    with torch.no_grad():
        head.copy_(torch.tensor([[1.0, 1.0], [0.0, 2.0], [2.0, 0.0], [1.0, 1.0]]))
    # task 5: .3125*1 + .25*1 + .3125*0 + .25*4 = 1.5625; task 8: .125*1 + .125*1 = 0.25
    assert float(plugin.penalty(net).detach()) == pytest.approx(1.8125)
    assert plugin.tasks == [5, 8]
    plugin.forget(5)
    assert float(plugin.penalty(net).detach()) == pytest.approx(0.25)
    assert list(plugin.saved_params) == list(plugin.importances) == [1]


# ------------------------------------------------------------------------- LwF
def hand_distillation(teacher, student, x, tasks, temperature=2.0) -> float:
    """The mean over ``tasks`` of each task's batch-mean KL(teacher ‖ student)."""
    total = 0.0
    for task in tasks:
        p = F.softmax(teacher(x, task) / temperature, dim=1)
        log_q = F.log_softmax(student(x, task) / temperature, dim=1)
        total += float((torch.xlogy(p, p) - p * log_q).sum(1).mean())   # 0 log 0 = 0
    return total / len(tasks)


@pytest.mark.parametrize("method", ["lwf", "lsf"])
def test_lwf_targets_exclude_an_unlearned_task(method):
    r = run(method)
    before, after = r.lwf_targets
    assert before == {0, 1, 2} and after == {0, 2}
    assert set(r.strategy.lwf.targets) == {0, 2, 3}
    # the regulariser distils exactly the remaining tasks: compare with a hand-computed KL
    # from the teacher to a different student (the model after L0)
    lwf = r.strategy.lwf.lwf
    teacher = lwf.prev_model                        # a frozen copy, not the model itself
    assert teacher is not r.strategy.model and not teacher.training
    assert not any(p.requires_grad or p.grad is not None for p in teacher.parameters())
    data = r.bm.train_stream[4].dataset.eval()
    x = torch.stack([data[i][0] for i in range(16)])
    student = r.model_after_l0
    with torch.no_grad():
        value = float(lwf(x, None, student))
        expected = hand_distillation(lwf.prev_model, student, x, [0, 2, 3])
        with_unlearned = hand_distillation(lwf.prev_model, student, x, [0, 1, 2, 3])
    assert value == pytest.approx(expected, rel=1e-5)
    assert abs(with_unlearned - expected) > 1e-4


def test_task_logits_share_the_features_and_match_the_forward():
    torch.manual_seed(0)
    net = run("lwf").strategy.model
    x = torch.randn(5, 1, 8, 8)
    for got, task in zip(task_logits(net, x, [3, 0, 2]), [3, 0, 2], strict=True):
        assert torch.allclose(got, net(x, task))


class PhaseRecorder(UnlearningPlugin):
    """Parameters at the start of each learning request and after each epoch; the learning
    rate of the first iteration of each epoch."""

    def __init__(self):
        super().__init__()
        self.start, self.epochs, self.lrs = {}, [], []

    def before_training_exp(self, strategy, **kwargs):
        self.start, self.epochs, self.lrs = snapshot(strategy.model), [], []

    def before_training_epoch(self, strategy, **kwargs):
        self.lrs.append(strategy.optimizer.param_groups[0]["lr"])

    def after_training_epoch(self, strategy, **kwargs):
        self.epochs.append(snapshot(strategy.model))


def test_warmup_trains_only_the_new_head_rows_then_everything():
    strategy, bm, _ = make_strategy("lwf", epochs=4, lr_schedule="cosine")
    recorder = PhaseRecorder()
    strategy.plugins.insert(1, recorder)             # after the cosine schedule
    strategy.train(bm.train_stream[0])
    strategy.train(bm.train_stream[1])
    start, (warm1, warm2, full1, _) = recorder.start, recorder.epochs
    rows = strategy.model.head_rows(1)
    for snap in (warm1, warm2):
        for name in start:
            if name != "head.weight":
                assert torch.equal(snap[name], start[name]), name
        moved = snap["head.weight"] != start["head.weight"]
        assert moved[rows].all() and not moved[:rows.start].any() and not moved[rows.stop:].any()
    backbone = [n for n in start if n != "head.weight"]
    assert all(not torch.equal(full1[n], warm2[n]) for n in backbone)
    # the second phase has every parameter, and each phase its own cosine from the base rate
    assert all(p.requires_grad for p in strategy.model.parameters())
    optimised = {id(p) for g in strategy.optimizer.param_groups for p in g["params"]}
    assert optimised == {id(p) for p in strategy.model.parameters()}
    assert recorder.lrs == pytest.approx([0.05, 0.025, 0.05, 0.025])


# ------------------------------------------------------------------------- LSF
def test_lsf_unlearning_forgets_the_task_and_deletes_its_codes():
    r = run("lsf")
    acc = r.accuracy
    assert acc[2][1] >= 90                          # task 1 was known before U1 ...
    assert acc[3][1] <= 65                          # ... and is near chance (50) after it
    assert r.codes == ({0, 1, 2}, {0, 2})
    assert set(r.strategy.codes) == {0, 2, 3}
    assert r.strategy.codes[0].shape == (2, 1, 8, 8)
    assert any(not torch.equal(r.before[n], r.after[n]) for n in r.before)
    # the next request's teacher is the model after unlearning, entry by entry
    for name, value in r.after.items():
        assert torch.equal(r.teacher_after[name], value), name


def test_invalid_hyper_parameters_are_rejected():
    with pytest.raises(ValueError, match=r"ewc_lambda=-1.0 is invalid"):
        make_strategy("ewc", ewc_lambda=-1.0)
    with pytest.raises(ValueError, match=r"lwf_temperature=0 is invalid"):
        make_strategy("lwf", lwf_temperature=0)
    with pytest.raises(ValueError, match=r"lsf_gamma=-2 is invalid"):
        make_strategy("lsf", lsf_gamma=-2)
    net = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="task-incremental: needs task labels and a multi-head "
                       "model; got model Linear"):
        LwF(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), lwf_alpha=1.0,
            lwf_temperature=2.0)


def test_ewc_penalty_gradient_is_the_sum_of_the_tasks_quadratic_terms():
    """The penalty from float64 sums over the stored tasks: value and gradient equal the
    direct Σ_τ Σ_i F_τ,i (θ_i − θ_τ,i)² (autograd of it, in float64 here)."""
    strategy, bm, _ = make_strategy("ewc", epochs=1)
    for exp in RequestStream(bm, seq("L0 L1 L2 L3")):
        strategy.train(exp)
    plugin, model = strategy.ewc, strategy.model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    params = dict(model.named_parameters())
    value = plugin.penalty(model)
    grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
    direct = sum((plugin.importances[c][n].expand(p.shape).double()
                  * (p.double() - plugin.saved_params[c][n].expand(p.shape).double()) ** 2).sum()
                 for c in plugin.counter_of.values() for n, p in params.items()
                 if n in plugin.saved_params[c])
    expected = torch.autograd.grad(direct, list(params.values()), allow_unused=True)
    assert float(value.detach()) == pytest.approx(float(direct.detach()), rel=1e-6)
    for name, got, want in zip(params, grads, expected, strict=True):
        assert (got is None) == (want is None), name
        if got is not None:
            torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-9, msg=name)


def test_lsf_code_loss_is_the_mean_of_each_tasks_code_cross_entropy():
    strategy, bm, _ = make_strategy("lsf", epochs=2)
    for exp in RequestStream(bm, seq("L0 L1 L2")):
        strategy.train(exp)
    model = strategy.model.train()
    tasks = [0, 1, 2]
    loss = strategy.code_loss(tasks)
    expected = sum(F.cross_entropy(model(strategy.codes[t], t), strategy.code_classes[t])
                   for t in tasks) / 3
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
