"""HAT and AmnesiacHAT: gates and the regulariser by hand on a tiny network, the annealing of
s, the gradient rules, no forgetting to the bit, HAT's unlearning, AmnesiacHAT's unlearning
entry by entry as CLArena defines it, and what is refused; real training on digits."""

from __future__ import annotations

import math
import re

import pytest
import torch
from helpers import TINY_VIT, make_strategy, predictions, seq, snapshot
from torch import nn
from torch.nn import functional as F

from pall_avalanche.masks.attention import HATNet, attention_regulariser
from pall_avalanche.models import TaskIncrementalNet, build_model
from pall_avalanche.requests.streams import RequestStream, UnlearnExperience
from pall_avalanche.strategies import UnlearningPlugin, make_optimizer
from pall_avalanche.strategies.hat import HAT, AmnesiacHAT

S_MAX, WD = 400.0, 5e-4


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def layer_units(net: HATNet) -> list[tuple[str, nn.Module]]:
    """The backbone's Linear/Conv2d layers (the head excluded), found here, not by HATNet."""
    return [(name, m) for name, m in net.net.named_modules()
            if isinstance(m, (nn.Linear, nn.Conv2d)) and name != "head"]


def hand_entries(net: HATNet, units: torch.Tensor) -> dict[str, torch.Tensor]:
    """min(a_out, a_in) of a flat unit mask, for a chain whose layers read the previous
    layer's units one to one (the digits mlp and cnn): rows of the first layer, rows × columns
    after it, a bias by its unit."""
    out, start, previous = {}, 0, None
    for name, layer in layer_units(net):
        rows = units[start:start + layer.weight.shape[0]]
        start += layer.weight.shape[0]
        tail = (1,) * (layer.weight.dim() - 2)
        mask = rows.view(-1, 1, *tail).expand_as(layer.weight)
        if previous is not None:
            mask = mask & previous.view(1, -1, *tail)
        out[f"{name}.weight"], out[f"{name}.bias"] = mask, rows
        previous = rows
    return out


# ------------------------------------------------------------------ by hand, tiny
def tiny() -> HATNet:
    """2 → 3 → 2 (ReLU), a 2-task head of 2 units; weights set by hand."""
    backbone = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2), nn.ReLU())
    net = HATNet(TaskIncrementalNet(backbone, 2, 2, 2))
    with torch.no_grad():
        backbone[0].weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 2.0], [-1.0, 1.0]]))
        backbone[0].bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        backbone[2].weight.copy_(torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 1.0]]))
        backbone[2].bias.copy_(torch.tensor([0.0, 0.2]))
        net.net.head.weight.copy_(torch.tensor([[1.0, -1.0], [2.0, 0.5],
                                                [-1.0, 1.0], [0.3, 0.7]]))
    return net


def hand_logits(x: list[float], gates: list[float], task: int) -> list[float]:
    w1, b1 = [[1.0, -1.0], [0.5, 2.0], [-1.0, 1.0]], [0.1, -0.2, 0.3]
    w2, b2 = [[1.0, 2.0, -1.0], [0.5, -0.5, 1.0]], [0.0, 0.2]
    head = [[1.0, -1.0], [2.0, 0.5], [-1.0, 1.0], [0.3, 0.7]][2 * task:2 * task + 2]
    h1 = [max(sum(w * v for w, v in zip(row, x, strict=True)) + b, 0.0) * g
          for row, b, g in zip(w1, b1, gates[:3], strict=True)]
    h2 = [max(sum(w * v for w, v in zip(row, h1, strict=True)) + b, 0.0) * g
          for row, b, g in zip(w2, b2, gates[3:], strict=True)]
    return [sum(w * v for w, v in zip(row, h2, strict=True)) for row in head]


def test_gates_forward_entries_and_regulariser_by_hand():
    net = tiny()
    embedding = [0.01, -0.2, 0.5, -1.0, 0.3]
    with torch.no_grad():
        net.start_learning(0).copy_(torch.tensor(embedding))
    net.scale = 2.0
    x = [[0.3, -0.7], [1.0, 0.4], [-1.0, 1.0]]
    soft = [sigmoid(2.0 * e) for e in embedding]           # a = σ(s·e), s = 2
    binary = [1.0, 0.0, 1.0, 0.0, 1.0]                      # 1[e > 0]
    net.train()
    assert torch.allclose(torch.cat([g for g in net.gates(0)]), torch.tensor(soft))
    assert torch.allclose(net(torch.tensor(x), 0),
                          torch.tensor([hand_logits(v, soft, 0) for v in x]), atol=1e-6)
    net.eval()                                              # test time: the binary mask
    assert torch.allclose(net(torch.tensor(x), 0),
                          torch.tensor([hand_logits(v, binary, 0) for v in x]), atol=1e-6)
    # a task without an embedding runs ungated; a mixed batch gates each sample by its task
    net.train()
    mixed = net(torch.tensor(x), torch.tensor([1, 0, 1]))
    assert torch.allclose(mixed, torch.tensor([hand_logits(x[0], [1.0] * 5, 1),
                                               hand_logits(x[1], soft, 0),
                                               hand_logits(x[2], [1.0] * 5, 1)]), atol=1e-6)
    # Eq. 5 with a^{<t} = [1, 0, 0 | 1, 0]: the free units are 1, 2 and 4
    taken = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0])
    expected = (soft[1] + soft[2] + soft[4]) / 3
    assert attention_regulariser(torch.tensor(soft), taken).item() == pytest.approx(expected)
    assert attention_regulariser(torch.tensor(soft), torch.ones(5)).item() == 0.0
    # min(a_out, a_in) of the units [1, 0, 1 | 1, 0]
    entries = net.entry_masks(torch.tensor([True, False, True, True, False]))
    assert entries["backbone.0.weight"].tolist() == [[True, True], [False, False], [True, True]]
    assert entries["backbone.0.bias"].tolist() == [True, False, True]
    assert entries["backbone.2.weight"].tolist() == [[True, False, True], [False, False, False]]
    assert entries["backbone.2.bias"].tolist() == [True, False]


def test_a_linear_after_a_flattened_convolution_reads_each_channel_per_position():
    backbone = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(),
                             nn.Linear(8, 3), nn.ReLU())           # 2 channels × 2 × 2
    net = HATNet(TaskIncrementalNet(backbone, 3, 1, 2))
    assert net.units == [2, 3] and net.repeats == [0, 4]
    entries = net.entry_masks(torch.tensor([True, False, False, True, True]))
    assert entries["backbone.3.weight"].tolist() == [[False] * 8] + [[True] * 4 + [False] * 4] * 2
    assert entries["backbone.0.weight"][:, 0, 0, 0].tolist() == [True, False]


# ------------------------------------------------------------------ training
class Watch(UnlearningPlugin):
    """Per iteration of the learning request of ``task``: s, the loss against an independent
    CE + c·Eq. 5, and the gradients the step used against the raw ones (frozen entries: 0;
    trainable: raw + wd·w; the embedding: compensated)."""

    def __init__(self, task: int) -> None:
        super().__init__()
        self.task = task
        self.scales: list[list[float]] = []
        self.loss_errors: list[float] = []
        self.checked = 0

    def before_training_epoch(self, strategy, **kwargs):
        if strategy.experience.task_label == self.task:
            self.scales.append([])

    def before_backward(self, strategy, **kwargs):
        if strategy.experience.task_label != self.task:
            return
        net = strategy.model
        s = net.scale
        self.scales[-1].append(s)
        taken = torch.zeros(net.embedding_size)
        for other in strategy.active_tasks:
            taken = torch.maximum(taken, (net.embeddings[str(other)] > 0).float())
        gates = torch.sigmoid(s * net.embeddings[str(self.task)].detach())
        free = 1 - taken
        expected = (F.cross_entropy(strategy.mb_output, strategy.mb_y)
                    + 0.75 * (gates * free).sum() / free.sum())
        self.loss_errors.append(abs(strategy.loss.item() - expected.item()))

    def after_backward(self, strategy, **kwargs):
        if strategy.experience.task_label != self.task:
            return
        params = dict(strategy.model.named_parameters())
        self.raw = {n: (p.grad.clone(), p.detach().clone()) for n, p in params.items()
                    if p.grad is not None}

    def after_update(self, strategy, **kwargs):
        if strategy.experience.task_label != self.task:
            return
        net = strategy.model
        frozen = hand_entries(net, net.cumulative_mask(strategy.active_tasks))
        own = torch.zeros(10, 1, dtype=torch.bool)
        own[2 * self.task:2 * self.task + 2] = True
        frozen["head.weight"] = ~own.expand(10, 256)
        for name, (grad, before) in self.raw.items():
            used = dict(net.named_parameters())[name].grad
            if name.startswith("embeddings."):            # only the learning task's
                assert name == f"embeddings.{self.task}"
                s, e = net.scale, before.double()
                factor = S_MAX / s * (torch.cosh((s * e).clamp(-50, 50)) + 1) / (torch.cosh(e) + 1)
                assert torch.allclose(used.double(), grad.double() * factor, rtol=1e-5,
                                      atol=1e-12), name
                continue
            mask = frozen[name.removeprefix("net.")]
            assert not used[mask].any(), name                         # frozen: exactly 0
            # trainable: as SGD's own weight decay would add it, g + wd·w
            assert torch.equal(used[~mask], grad.add(before, alpha=WD)[~mask]), name
        self.checked += 1


def test_annealing_loss_and_gradients_of_a_learning_request():
    strategy, bm, _ = make_strategy("hat", measured=False)
    strategy.clipgrad = 1e30                     # (the reference's 10000 may clip early steps)
    watch = Watch(task=1)
    strategy.plugins.insert(0, watch)
    strategy.train(bm.train_stream[0])
    strategy.train(bm.train_stream[1])
    batches = math.ceil(120 / 32)                # 4 batches of the 120 training samples
    hand = [1 / S_MAX + (S_MAX - 1 / S_MAX) * b / (batches - 1) for b in range(batches)]
    assert len(watch.scales) == 2 and all(s == pytest.approx(hand, rel=1e-12)
                                          for s in watch.scales)
    assert hand[0] == 1 / S_MAX and hand[-1] == pytest.approx(S_MAX)
    assert max(watch.loss_errors) < 1e-5 and watch.checked == 2 * batches
    assert strategy.model.embeddings["1"].abs().max() <= 6.0       # clamped to ±thres_emb
    assert not strategy.model.embeddings["1"].requires_grad        # final after its request


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_learning_task_1_leaves_task_0_bit_identical(model):
    strategy, bm, _ = make_strategy("hat", model=model, measured=False)
    net = strategy.model
    strategy.train(bm.train_stream[0])
    before, logits = snapshot(net.net), predictions(net, bm, 0)
    frozen = hand_entries(net, net.embeddings["0"].detach() > 0)
    frozen["head.weight"] = torch.zeros_like(before["head.weight"], dtype=torch.bool)
    frozen["head.weight"][0:2] = True
    assert 0 < sum(int(m.sum()) for m in frozen.values()) < sum(m.numel()
                                                              for m in frozen.values())
    strategy.train(bm.train_stream[1])
    after = snapshot(net.net)
    for name, mask in frozen.items():
        assert torch.equal(after[name][mask], before[name][mask]), name
    assert any(not torch.equal(after[n][~m], before[n][~m]) for n, m in frozen.items())
    assert torch.equal(predictions(net, bm, 0), logits)                 # no forgetting


def test_hat_unlearning_releases_the_units_and_redraws_the_head():
    strategy, bm, _ = make_strategy("hat", measured=False)
    net = strategy.model
    for exp in RequestStream(bm, seq("L0 L1")):
        strategy.train(exp)
    before, logits1 = snapshot(net.net), predictions(net, bm, 1)
    size = strategy.inference_size()
    strategy.train(UnlearnExperience(0))
    after = snapshot(net.net)
    assert net.tasks() == [1] and torch.equal(net.cumulative_mask([1]),
                                              net.cumulative_mask(strategy.active_tasks))
    assert strategy.inference_size() == (size[0] - net.embedding_size, 0)
    rows = after["head.weight"][0:2]
    assert not torch.equal(rows, before["head.weight"][0:2]) and rows.abs().max() <= 1 / 16
    for name in before:                      # the rest bit-identical (inexact unlearning)
        keep = slice(2, None) if name == "head.weight" else slice(None)
        assert torch.equal(after[name][keep], before[name][keep]), name
    assert torch.equal(predictions(net, bm, 1), logits1)
    # task 0 runs ungated now: the whole network, its re-drawn head
    assert torch.equal(net(bm.test_stream[0].dataset.eval()[0][0][None], 0),
                       net.net(bm.test_stream[0].dataset.eval()[0][0][None], 0))


# ------------------------------------------------------------------ AmnesiacHAT
class Record(UnlearningPlugin):
    """The network's parameters before and after every learning request, and each live
    backup's tensors before the request's first step and after its last."""

    def __init__(self) -> None:
        super().__init__()
        self.start: dict[int, dict] = {}
        self.end: dict[int, dict] = {}
        self.first: dict[int, dict] = {}
        self.last: dict[int, dict] = {}

    def before_training_exp(self, strategy, **kwargs):
        self.start[strategy.experience.task_label] = snapshot(strategy.model.net)

    def after_training_exp(self, strategy, **kwargs):
        self.end[strategy.experience.task_label] = snapshot(strategy.model.net)

    @staticmethod
    def backups(strategy) -> dict[int, dict[str, torch.Tensor]]:
        """Backup u's tensors, from the request's backups stacked over the tasks u."""
        return {u: {n: w[index].detach().clone() for n, w in strategy._backup_weights.items()}
                for index, u in enumerate(strategy._backup_tasks)}

    def before_training_iteration(self, strategy, **kwargs):
        self.first.setdefault(strategy.experience.task_label, self.backups(strategy))

    def after_training_iteration(self, strategy, **kwargs):
        self.last[strategy.experience.task_label] = self.backups(strategy)


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_amnesiac_hat_unlearning_entry_by_entry(order):
    strategy, bm, _ = make_strategy("amnesiac_hat", measured=False, compensate_order=order,
                                    epochs=1, train_per_task=64)
    net, record = strategy.model, Record()
    strategy.plugins.insert(0, record)
    for exp in RequestStream(bm, seq("L0 L1 L2 L3")):
        strategy.train(exp)
    theta0 = record.start[0]
    delta = {t: {n: record.end[t][n] - record.start[t][n] for n in theta0} for t in range(4)}
    gated = [n for n in theta0 if n.startswith("backbone.")]
    # backups of u while learning t start at θ_0 + Σ_{τ < u} Δθ_τ (CLArena's "before" mode)
    for t in range(4):
        assert sorted(record.first[t]) == list(range(t))
        for u in range(t):
            start = {n: theta0[n].clone() for n in gated}
            for tau in range(u):
                for n in gated:
                    start[n] += delta[tau][n]
            for n in gated:                  # trained from there, stored as backup (u, t)
                assert torch.equal(record.first[t][u][n], start[n]), (t, u, n)
                assert torch.equal(record.last[t][u][n], strategy.backups[u][t][n]), (t, u, n)
                assert not torch.equal(record.last[t][u][n], start[n]), (t, u, n)
    masks = {t: net.embeddings[str(t)].detach() > 0 for t in range(4)}
    backups = {t: strategy.backups[1][t] for t in (2, 3)}
    expected = {n: record.end[3][n] - delta[1][n] for n in theta0}      # θ − Δθ_1
    for t in ((2, 3) if order == "forward" else (3, 2)):
        for n, mask in hand_entries(net, masks[t] & masks[1]).items():
            expected[n] = torch.where(mask, backups[t][n], expected[n])
    strategy.train(UnlearnExperience(1))
    after = snapshot(net.net)
    for n in theta0:
        assert torch.equal(after[n], expected[n]), n
    compensated = sum(int(m.sum()) for t in (2, 3)
                      for m in hand_entries(net, masks[t] & masks[1]).values())
    assert compensated > 0
    assert strategy.request_statistics() == {"compensated_tasks": [2, 3],
                                             "compensated_entries": compensated}
    # what is left of task 1: nothing; the later tasks' backups now start without Δθ_1
    assert net.tasks() == [0, 2, 3] and sorted(strategy.updates) == [0, 2, 3]
    assert sorted(strategy.before) == [0, 2, 3] and sorted(strategy.backups) == [0, 2]
    assert list(strategy.backups[0]) == [2, 3] and list(strategy.backups[2]) == [3]
    for n in gated:
        assert torch.allclose(strategy.before[2][n], theta0[n] + delta[0][n], atol=1e-6)
        assert torch.allclose(strategy.before[3][n], theta0[n] + delta[0][n] + delta[2][n],
                              atol=1e-6)
        assert torch.allclose(strategy.base[n], theta0[n] + delta[0][n] + delta[2][n]
                              + delta[3][n], atol=1e-6)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("name", "kwargs", "line"), [
    ("resnet18", {}, "model CifarResNet is not one: module 'backbone.bn1' is a BatchNorm2d; "),
    ("vit_t8", TINY_VIT, "model VisionTransformer is not one: module 'backbone.cls_tokens' "
                         "(ParameterList) holds parameters ['0'] outside a Linear/Conv2d layer"),
])
def test_backbones_that_are_not_a_chain_are_refused_in_one_line(name, kwargs, line):
    model = build_model(name, input_shape=(3, 32, 32) if name == "resnet18" else (1, 8, 8),
                        n_tasks=5, classes_per_task=2, **kwargs)
    optimizer = make_optimizer({"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                                "weight_decay": 0.0}, model.parameters())
    for cls in (HAT, AmnesiacHAT):
        with pytest.raises(ValueError) as err:
            cls(model=model, optimizer=optimizer)
        message = str(err.value)
        assert message.startswith("HAT gates the units of a chain of Linear/Conv2d layers "
                                  "(such as the digits 'mlp' and 'cnn' or Avalanche's "
                                  "MTSimpleMLP); ") and line in message
        assert "supported between the layers: ReLU, " in message and "\n" not in message


@pytest.mark.parametrize(("key", "value", "what"), [
    ("s_max", 0.5, ">= 1"), ("lamb", -0.1, ">= 0"), ("clipgrad", 0.0, "> 0"),
    ("compensate_order", "sideways", "valid: ('forward', 'reverse')"),
])
def test_bad_hyper_parameters_are_refused(key, value, what):
    model = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with pytest.raises(ValueError, match=rf"{key}={value!r} is invalid.*{re.escape(what)}"):
        AmnesiacHAT(model=model, optimizer=optimizer, **{key: value})


def test_amnesiac_hat_keeps_nothing_for_a_permanent_task():
    strategy, bm, _ = make_strategy("amnesiac_hat", measured=False, epochs=1, train_per_task=64)
    net = strategy.model
    stored = []
    for exp in RequestStream(bm, seq("L0 L1 P2 M1 L3")):
        strategy.train(exp)
        stored.append((sorted(strategy.updates), sorted(strategy.before),
                       {u: list(ts) for u, ts in strategy.backups.items()}))
    assert stored == [
        ([0], [0], {}),
        ([0, 1], [0, 1], {0: [1]}),
        ([0, 1], [0, 1], {0: [1, 2], 1: [2]}),       # 2 learned permanently: no update
        ([0], [0], {0: [1, 2]}),                     # 1 made permanent: its state freed
        ([0, 3], [0, 3], {0: [1, 2, 3]}),
    ]
    strategy.train(UnlearnExperience(0))   # every later task is compensated, permanent or not
    assert strategy.request_statistics()["compensated_tasks"] == [1, 2, 3]
    assert sorted(strategy.updates) == sorted(strategy.before) == [3]
    assert strategy.backups == {} and net.tasks() == [1, 2, 3]


def test_amnesiac_hat_backups_run_in_one_pass_as_one_at_a_time():
    strategy, bm, _ = make_strategy("amnesiac_hat", measured=False, epochs=1,
                                    train_per_task=64)
    captured = {}

    class Capture(UnlearningPlugin):
        def before_backward(self, strategy, **kwargs):
            if strategy.experience.task_label == 2 and not captured:
                captured["x"] = strategy.mb_x.clone()
                captured["routes"] = [tuple(None if t is None else t.detach().clone()
                                            for t in layer) for layer in strategy._routes]

    strategy.plugins.append(Capture())
    for exp in RequestStream(bm, seq("L0 L1 L2")):
        strategy.train(exp)
    net, routes, x = strategy.model, captured["routes"], captured["x"]
    got = net.backup_forwards(x, 2, routes)
    assert got.shape[0] == 2                              # backups of tasks 0 and 1
    for g in range(2):
        one = [tuple(None if t is None else t[g] for t in layer) for layer in routes]
        torch.testing.assert_close(got[g], net.backup_forward(x, 2, one), rtol=1e-5,
                                   atol=1e-6)
