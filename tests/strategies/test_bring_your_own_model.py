"""Bring your own model: Avalanche's multi-head models and BatchNorm running statistics, with
real training on digits.

- Avalanche ``MultiTaskModule`` models built on a ``MultiHeadClassifier`` (``MTSimpleMLP``,
  ``as_multitask(SimpleMLP(...), "classifier")``) run every method; under the subnetwork methods
  each task's head is its own (trained by its task only) and nothing learned is forgotten.
- Running statistics are task state for the subnetwork methods: per task, fresh at its learning
  request, frozen after it, used at evaluation, deleted on unlearning, counted and checkpointed.
- What cannot work is refused at construction, in one line naming the layer and the fix.
"""

from __future__ import annotations

import pytest
import torch
from avalanche.models import (
    MTSimpleMLP,
    MultiHeadClassifier,
    MultiTaskModule,
    SimpleMLP,
    as_multitask,
)
from helpers import BUILT_IN_METHODS, FAST_CONFIG, method_kwargs, predictions, seq
from torch import nn

from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import compute_metrics, request_evaluator
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import METHODS, PALL, PackNet, Sequential, make_optimizer

T = 5


def run_strategy(method: str, model: nn.Module, *, n_tasks: int | None = T, **overrides):
    """(strategy, benchmark, request log) of ``method`` on ``model`` with the reduced digits
    configuration, the strategy built directly from its class (a user's own model)."""
    config = {**FAST_CONFIG, **overrides}
    spec = METHODS[method]
    bm = build_benchmark("digits", seed=0, train_per_task=config["train_per_task"])
    strategy = spec.strategy(
        model=model, optimizer=make_optimizer(config, model.parameters()),
        train_mb_size=config["batch_size"], train_epochs=config["epochs"],
        eval_mb_size=config["eval_batch_size"], n_tasks=n_tasks,
        evaluator=request_evaluator(bm.test_stream, config["eval_batch_size"]),
        **method_kwargs(method, config))
    return strategy, bm, strategy.request_log


def avalanche_model(kind: str) -> MultiTaskModule:
    torch.manual_seed(0)
    if kind == "MTSimpleMLP":
        return MTSimpleMLP(input_size=64, hidden_size=128)
    return as_multitask(SimpleMLP(num_classes=2, input_size=64, hidden_size=128, drop_rate=0.0),
                        "classifier")


def heads(strategy) -> dict[int, list[torch.Tensor]]:
    net = strategy.model.net
    return {t: [p.detach().clone() for p in net.task_parameters(t)] for t in range(T)}


# ------------------------------------------------------------------ Avalanche models
@pytest.mark.parametrize("kind", ["MTSimpleMLP", "as_multitask"])
@pytest.mark.parametrize("method", ["pall", "dynamic_sparse"])
def test_subnetwork_methods_on_avalanche_models_never_forget_and_unlearn_exactly(method, kind):
    strategy, bm, log = run_strategy(method, avalanche_model(kind), alpha=0.3)
    classifier = next(m for m in strategy.model.modules() if isinstance(m, MultiHeadClassifier))
    assert sorted(classifier.classifiers) == [str(t) for t in range(T)]  # every task's head
    requests = seq("L0 L1 L2 L3 L4 U4")
    learned: dict[int, torch.Tensor] = {}
    for request, exp in zip(requests, RequestStream(bm, requests), strict=True):
        before = heads(strategy)
        strategy.train(exp)
        after = heads(strategy)
        for task in range(T):     # a head changes only in its own task's request
            same = all(torch.equal(a, b) for a, b in zip(before[task], after[task], strict=True))
            assert same == (task != request.task), (request, task)
        for task, logits in learned.items():          # learned tasks: logits to the bit
            if task in strategy.active_tasks:
                assert torch.equal(predictions(strategy.model, bm, task), logits), task
        if request.kind == "learn":
            learned[request.task] = predictions(strategy.model, bm, request.task)
    accuracy = [r["accuracy"] for r in log.results]
    assert compute_metrics(accuracy, requests)["F_l"] == 0.0
    assert all(accuracy[4][t] > 75.0 for t in range(4)), accuracy[4]
    # the unlearned task: its head re-drawn (within the initial bound 1/sqrt(fan_in)), its
    # active units cleared, its predictions at chance
    weight, bias = strategy.model.net.task_parameters(4)
    assert not torch.equal(weight, before[4][0])
    assert weight.abs().max() <= 128 ** -0.5 and bias.abs().max() <= 128 ** -0.5
    assert not classifier.active_units_T4.any()
    assert abs(accuracy[5][4] - 50.0) < 5.0 and accuracy[5][:4] == accuracy[4][:4]


@pytest.mark.parametrize("method", sorted(set(BUILT_IN_METHODS) - {
    "pall", "pall_beta0", "pall_strict", "dynamic_sparse"}))
def test_every_other_method_learns_and_unlearns_an_avalanche_model(method):
    strategy, bm, log = run_strategy(method, avalanche_model("MTSimpleMLP"), alpha=0.3)
    for exp in RequestStream(bm, seq("L0 L1 U1")):
        strategy.train(exp)
    accuracy = [r["accuracy"] for r in log.results]
    assert accuracy[0][0] > 75.0 and accuracy[1][1] > 75.0, accuracy
    assert strategy.active_tasks == [0] and len(accuracy) == 3     # the unlearning measured


# ------------------------------------------------------------- running statistics
def bn_mlp() -> TaskIncrementalNet:
    """64 → 32 → 32 with BatchNorm1d (running statistics, no affine parameters)."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32, affine=False),
                             nn.ReLU(), nn.Linear(32, 32), nn.BatchNorm1d(32, affine=False),
                             nn.ReLU())
    return TaskIncrementalNet(backbone, 32, T, 2)


def bn_cnn() -> TaskIncrementalNet:
    """Two bias-free convolutions with BatchNorm2d (running statistics, no affine parameters)."""
    torch.manual_seed(0)
    backbone = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, affine=False), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16, affine=False),
        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return TaskIncrementalNet(backbone, 16, T, 2)


# settings that learn every task (the convolutions need more steps and connections)
SETTINGS = {"bn_mlp": {"alpha": 0.3, "epochs": 2, "train_per_task": 120},
            "bn_cnn": {"alpha": 0.5, "epochs": 5, "train_per_task": 240}}
# hand counts: parameters d and statistics floats per task (mean and variance per channel)
SIZES = {"bn_mlp": (64 * 32 + 32 + 32 * 32 + 32 + 10 * 32, 2 * 32 + 2 * 32),
         "bn_cnn": (8 * 9 + 16 * 8 * 9 + 10 * 16, 2 * 8 + 2 * 16)}


class RunningStatistics:
    """Recomputes, by hand, the running statistics of every BatchNorm layer of a network from
    the inputs of its train-mode forward passes: from mean 0, variance 1 (fresh), per batch
    ``r ← (1 − m)·r + m·batch statistic`` with the unbiased variance, m = 0.1."""

    def __init__(self, net: nn.Module) -> None:
        self.layers = {n: m for n, m in net.named_modules()
                       if isinstance(m, nn.modules.batchnorm._BatchNorm)}
        self.inputs: dict[str, list[torch.Tensor]] = {n: [] for n in self.layers}
        for name, layer in self.layers.items():
            layer.register_forward_pre_hook(
                lambda m, args, name=name: self.inputs[name].append(args[0].detach().double())
                if m.training else None)

    def batch(self, prefix: str) -> dict[str, torch.Tensor]:
        """The statistics of the one forward pass recorded since the last call: each layer's
        input mean and unbiased variance, one batch tracked."""
        out = {}
        for name in self.layers:
            (x,) = self.inputs[name]
            dims = [0, *range(2, x.dim())]
            out[f"{prefix}{name}.running_mean"] = x.mean(dims)
            out[f"{prefix}{name}.running_var"] = x.var(dims, unbiased=True)
            out[f"{prefix}{name}.num_batches_tracked"] = torch.tensor(1)
            self.inputs[name].clear()
        return out

    def expected(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {}
        for name, layer in self.layers.items():
            mean = torch.zeros(layer.num_features, dtype=torch.float64)
            var = torch.ones(layer.num_features, dtype=torch.float64)
            for x in self.inputs[name]:
                dims = [0, *range(2, x.dim())]
                mean = 0.9 * mean + 0.1 * x.mean(dims)
                var = 0.9 * var + 0.1 * x.var(dims, unbiased=True)
            out[f"{prefix}{name}.running_mean"] = mean
            out[f"{prefix}{name}.running_var"] = var
            out[f"{prefix}{name}.num_batches_tracked"] = torch.tensor(len(self.inputs[name]))
            self.inputs[name].clear()
        return out


@pytest.mark.parametrize("backbone", ["bn_mlp", "bn_cnn"])
def test_each_task_keeps_its_own_running_statistics(backbone, tmp_path):
    net = {"bn_mlp": bn_mlp, "bn_cnn": bn_cnn}[backbone]()
    own = {k: v.clone() for k, v in net.state_dict().items() if "running" in k or "num_b" in k}
    settings = SETTINGS[backbone]
    strategy, bm, log = run_strategy("pall", net, n_retrain_iters=10, **settings)
    subnet = strategy.model
    recomputed = RunningStatistics(net.backbone)
    requests = seq("L0 L1 L2 L3 L4 U4 U1")
    stored: dict[int, dict[str, torch.Tensor]] = {}
    learned: dict[int, torch.Tensor] = {}
    refreshed: list[int] = []
    steps = -(-settings["train_per_task"] // FAST_CONFIG["batch_size"]) * settings["epochs"]
    for request, exp in zip(requests, RequestStream(bm, requests), strict=True):
        strategy.train(exp)
        if request.kind == "learn":
            task = request.task
            mine = subnet.statistics[task]
            # the statistics of its training batches alone, from fresh ones, counted by hand
            for name, value in recomputed.expected("backbone.").items():
                if name.endswith("num_batches_tracked"):
                    assert int(mine[name]) == int(value) == steps, name
                else:
                    assert torch.allclose(mine[name].double(), value, rtol=1e-4, atol=1e-6), name
            stored[task] = {n: b.clone() for n, b in mine.items()}
            learned[task] = predictions(subnet, bm, task)
            # they are what evaluation uses: fresh statistics give other logits
            fresh = subnet.statistics[task]
            subnet.statistics[task] = subnet.fresh_statistics()
            assert not torch.equal(predictions(subnet, bm, task), learned[task])
            subnet.statistics[task] = fresh
        else:
            assert request.task not in subnet.statistics                # deleted
        # every active task: its statistics to the bit (only its own learning request changes
        # them) unless U1 retrained entries of its mask: then they are recomputed from its
        # buffer, by hand here: one train-mode pass of its buffer, each layer's batch mean and
        # unbiased variance; its logits to the bit after learning and after unlearning the
        # last-learned task (U1 retrains entries tasks 2 and 3 use)
        assert sorted(subnet.statistics) == sorted(strategy.active_tasks)
        retrained = strategy.ledger.events[-1][0] if request == requests[-1] else None
        for task in strategy.active_tasks:
            if retrained is not None and (subnet.masks[task] & retrained).count():
                refreshed.append(task)
                recomputed.expected("")                              # drop what it saw
                subnet.train()
                subnet(strategy.memory.buffers[task][0], task)
                for name, value in recomputed.batch("backbone.").items():
                    mine = subnet.statistics[task][name]
                    assert torch.allclose(mine.double(), value.double(), rtol=1e-4,
                                          atol=1e-6), (task, name)
                    stored[task][name] = mine.clone()
            for name, value in stored[task].items():
                assert torch.equal(subnet.statistics[task][name], value), (request, task, name)
            if request.task != 1 or request.kind == "learn":
                assert torch.equal(predictions(subnet, bm, task), learned[task]), (request, task)
    accuracy = [r["accuracy"] for r in log.results]
    assert compute_metrics(accuracy, requests)["F_l"] == 0.0
    assert min(accuracy[4]) > 70.0, accuracy[4]                    # every task learned
    assert log.results[-1]["statistics"]["retrained"] > 0          # U1 retrained shared entries
    assert refreshed == [2, 3]
    assert accuracy[5][:4] == accuracy[4][:4]                      # U4: the others unchanged
    # the model's own statistics were never read or written
    for name, value in net.state_dict().items():
        if name in own:
            assert torch.equal(value, own[name]), name
    # model size: d floats plus the statistics of every stored task; 1 bit per maskable entry
    d, per_task = SIZES[backbone]
    # (every parameter is maskable here: Conv2d/Linear weights and the shared head)
    assert strategy.inference_size() == (d + 3 * per_task, 3 * d)
    assert strategy.inference_size(T) == (d + T * per_task, T * d)
    # checkpoint: saved and restored with the masks, entry by entry, through a file
    path = tmp_path / "state.pt"
    torch.save(strategy.checkpoint_state(), path)
    restored, _, _ = run_strategy("pall", {"bn_mlp": bn_mlp, "bn_cnn": bn_cnn}[backbone](),
                                  n_retrain_iters=10, **settings)
    restored.restore_checkpoint_state(torch.load(path, weights_only=True))
    assert sorted(restored.model.statistics) == [0, 2, 3]
    for task in (0, 2, 3):
        for name, value in stored[task].items():
            assert torch.equal(restored.model.statistics[task][name], value), (task, name)
        assert torch.equal(predictions(restored.model, bm, task),
                           predictions(subnet, bm, task)), task


def test_dense_methods_keep_the_models_own_running_statistics():
    net = bn_mlp()
    strategy, bm, _ = run_strategy("sequential", net)
    strategy.train(RequestStream(bm, seq("L0"))[0])
    layer = net.backbone[2]
    steps = -(-FAST_CONFIG["train_per_task"] // FAST_CONFIG["batch_size"]) * FAST_CONFIG["epochs"]
    assert int(layer.num_batches_tracked) == steps and layer.running_mean.abs().sum() > 0


# ------------------------------------------------------------------------ refusals
class NoClassifier(MultiTaskModule):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 2)

    def forward_single_task(self, x, task_label):
        return self.linear(x.flatten(1))


class TwoClassifiers(MultiTaskModule):
    def __init__(self):
        super().__init__()
        self.a, self.b = MultiHeadClassifier(64), MultiHeadClassifier(64)


def test_what_cannot_work_is_refused_at_construction_in_one_line():
    def pall(model, **kwargs):
        return PALL(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                    alpha=0.2, buffer_size=50, **kwargs)

    cases = [
        (lambda: pall(SimpleMLP(input_size=64)), r"task-incremental: needs task labels and a "
         r"multi-head model; got model SimpleMLP"),
        (lambda: Sequential(model=SimpleMLP(input_size=64),
                            optimizer=torch.optim.SGD(MTSimpleMLP().parameters(), lr=0.1)),
         r"task-incremental: needs task labels and a multi-head model; got model SimpleMLP"),
        (lambda: PackNet(model=MTSimpleMLP(input_size=64),
                         optimizer=torch.optim.SGD(MTSimpleMLP().parameters(), lr=0.1)),
         r"PackNet splits every layer over the T tasks a priori.* pass n_tasks=T"),
        (lambda: pall(NoClassifier(), n_tasks=T), r"task-incremental: needs task labels and a "
         r"multi-head model; got model NoClassifier"),
        (lambda: pall(TwoClassifiers(), n_tasks=T), r"model TwoClassifiers has 2 "
         r"MultiHeadClassifier layers \(\['a', 'b'\]\)"),
        (lambda: pall(as_multitask(nn.Sequential(nn.Flatten(), nn.ReLU(), nn.Linear(64, 2)), "2"),
                      n_tasks=T), r"no Conv2d/Linear layer outside its MultiHeadClassifier"),
        (lambda: pall(bn_mlp(), n_tasks=3), r"n_tasks=3, but the model has heads for 5 tasks"),
        (lambda: pall(TaskIncrementalNet(nn.Sequential(nn.Flatten(), nn.Linear(64, 8),
                                                       nn.BatchNorm1d(8)), 8, T, 2)),
         r"parameters \['backbone.2.weight', 'backbone.2.bias'\] are neither Conv2d/Linear "
         r"weights nor per-task parameters"),
    ]
    for build, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            build()
        assert "\n" not in str(err.value)
