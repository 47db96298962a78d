"""The baselines' estimators against independent computations, one test per row of
docs/fidelity.md: EWC's per-sample Fisher, LwF's mean distillation and skipped first warm-up,
LSF's concatenated data term, WSN's carried scores, and the replay baselines' unlearning
mini-batches. Real training on digits throughout."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from avalanche.models import MultiTaskModule
from helpers import FAST_CONFIG, make_strategy, seq, snapshot
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from pall_avalanche.data import build_benchmark
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.rehearsal import class_stratified_indices
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import UnlearningPlugin, build_strategy


# ------------------------------------------------------------------------- EWC
def vmap_fisher(model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: int,
                batch: int) -> dict:
    """(1/N') Σ p(y|x) (∇ log p(y|x))² with N' = ⌈N / batch⌉ · batch (the reference divides
    by its loader's batches times the batch size), per-sample gradients by torch.func (vmap
    over samples), a computation independent of the strategy's loop."""
    params = {n: p.detach() for n, p in model.named_parameters()}

    def log_p_true(p, xi, yi):
        logits = functional_call(model, p, (xi[None], task))
        return F.log_softmax(logits, dim=1)[0].gather(0, yi[None])[0]

    grads = vmap(grad(log_p_true), in_dims=(None, 0, 0))(params, x, y)
    weight = vmap(log_p_true, in_dims=(None, 0, 0))(params, x, y).exp()
    divisor = math.ceil(len(x) / batch) * batch
    return {n: (weight.view(-1, *[1] * (g.dim() - 1)) * g ** 2).sum(0) / divisor
            for n, g in grads.items()}


@pytest.mark.parametrize("method", ["ewc", "lsf"])
def test_ewc_fisher_is_the_per_sample_estimator(method):
    strategy, bm, _ = make_strategy(method)
    stream = RequestStream(bm, seq("L0 L1"))
    for exp in stream:
        strategy.train(exp)                       # the second Fisher is taken mid-sequence
        task = exp.task_label
        data = exp.dataset
        x = torch.stack([data[i][0] for i in range(len(data))])
        y = torch.as_tensor(list(data.targets))
        assert len(x) % FAST_CONFIG["batch_size"]              # N' ≠ N here
        expected = vmap_fisher(strategy.model, x, y, task, FAST_CONFIG["batch_size"])
        stored = strategy.ewc.importances[strategy.ewc.counter_of[task]]
        assert stored.keys() == expected.keys()
        for name, value in expected.items():
            assert torch.allclose(stored[name].data, value, rtol=1e-5, atol=1e-12), name
        # the other tasks' head rows get nothing: the sample's own head only
        rows = torch.zeros(len(stored["head.weight"].data), dtype=torch.bool)
        rows[strategy.model.head_rows(task)] = True
        assert torch.count_nonzero(stored["head.weight"].data[~rows]) == 0


def test_ewc_fisher_by_hand_on_a_linear_head():
    # features = x; head W = 0 so p = (1/2, 1/2); per sample F = p(y) (∂ log p(y)/∂W)²
    from torch.utils.data import TensorDataset

    from pall_avalanche.models import TaskIncrementalNet
    from pall_avalanche.strategies.ewc import fisher_diagonal

    net = TaskIncrementalNet(nn.Flatten(), 2, n_tasks=1, classes_per_task=2)
    with torch.no_grad():
        net.head.weight.zero_()
    data = TensorDataset(torch.tensor([[1.0, 2.0], [2.0, 0.0]]), torch.tensor([0, 1]),
                         torch.tensor([0, 0]))
    # sample 1 (y=0): rows ±(1/2)(1, 2) → squares (1/4, 1), × 1/2 → (1/8, 1/2)
    # sample 2 (y=1): rows ∓(1/2)(2, 0) → squares (1, 0), × 1/2 → (1/2, 0); mean of the two
    fisher = fisher_diagonal(net, data)["head.weight"].data
    assert torch.equal(fisher, torch.tensor([[0.3125, 0.25], [0.3125, 0.25]]))
    # with batches of 3, the reference divides the sum by ⌈2/3⌉·3 = 3, not by 2
    fisher = fisher_diagonal(net, data, batch_size=3)["head.weight"].data
    assert torch.allclose(fisher, torch.tensor([[0.625, 0.5], [0.625, 0.5]]) / 3)


# ------------------------------------------------------------------------- LwF
class EpochSnapshots(UnlearningPlugin):
    """The model at the start of each learning request and after each of its epochs."""

    def __init__(self):
        super().__init__()
        self.requests: list[tuple[dict, list[dict]]] = []

    def before_training_exp(self, strategy, **kwargs):
        self.requests.append((snapshot(strategy.model), []))

    def after_training_epoch(self, strategy, **kwargs):
        self.requests[-1][1].append(snapshot(strategy.model))


@pytest.mark.parametrize("method", ["lwf", "lsf"])
def test_a_request_with_no_earlier_active_task_skips_the_warmup(method):
    strategy, bm, _ = make_strategy(method, epochs=4)
    recorder = EpochSnapshots()
    strategy.plugins.append(recorder)
    for exp in RequestStream(bm, seq("L0 L1 U0 U1 L2")):
        strategy.train(exp)
    backbone = [n for n in recorder.requests[0][0] if n != "head.weight"]
    # L0 (nothing active) and L2 (Ω emptied by U0 U1): every epoch moves the backbone
    for request in (0, 2):
        start, epochs = recorder.requests[request]
        assert len(epochs) == 4
        for before, after in zip([start, *epochs[:-1]], epochs, strict=True):
            assert all(not torch.equal(before[n], after[n]) for n in backbone), request
    # L1 (task 0 active): the first two epochs are the head-only warm-up
    start, epochs = recorder.requests[1]
    assert all(torch.equal(epochs[1][n], start[n]) for n in backbone)
    assert all(not torch.equal(epochs[2][n], epochs[1][n]) for n in backbone)


def test_lwf_distillation_is_the_mean_over_three_active_tasks():
    strategy, bm, _ = make_strategy("lwf")
    for exp in RequestStream(bm, seq("L0 L1 L2 L3")):
        strategy.train(exp)
    lwf = strategy.lwf.lwf
    assert sorted(lwf.prev_classes_by_task) == [0, 1, 2, 3]
    strategy.lwf.forget(1)                                    # three tasks left
    data = bm.train_stream[4].dataset.eval()
    x = torch.stack([data[i][0] for i in range(16)])
    torch.manual_seed(1)
    student = make_strategy("lwf", seed=1)[0].model          # another network
    terms = []
    with torch.no_grad():
        for task in (0, 2, 3):
            p = F.softmax(lwf.prev_model(x, task) / 2.0, dim=1)
            log_q = F.log_softmax(student(x, task) / 2.0, dim=1)
            terms.append(float((torch.xlogy(p, p) - p * log_q).sum(1).mean()))
        value = float(lwf(x, None, student))
    assert value == pytest.approx(sum(terms) / 3, rel=1e-5)
    assert abs(value - sum(terms)) > 1e-3                     # not the sum


# ------------------------------------------------------------------------- LSF
class LossProbe(UnlearningPlugin):
    """Saves the RNG state before each forward pass and the loss the plugins see last."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]] = []
        self._rng = None

    def before_forward(self, strategy, **kwargs):
        self._rng = torch.get_rng_state()

    def before_backward(self, strategy, **kwargs):
        self.seen.append((strategy.mb_x.clone(), strategy.mb_y.clone(), self._rng,
                          float(strategy.loss.detach())))


def batchnorm_net() -> TaskIncrementalNet:
    """A digits CNN with BatchNorm on batch statistics, as the project's ResNets: a
    forward's output depends on what else is in its batch."""
    backbone = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False),
                             nn.BatchNorm2d(4, affine=False, track_running_stats=False),
                             nn.ReLU(), nn.Flatten())
    return TaskIncrementalNet(backbone, 4 * 8 * 8, n_tasks=5, classes_per_task=2)


def batchnorm_lsf(epochs: int):
    torch.manual_seed(0)
    bm = build_benchmark("digits", seed=0, train_per_task=FAST_CONFIG["train_per_task"])
    net = batchnorm_net()
    strategy = build_strategy("lsf", model=net, config={**FAST_CONFIG, "epochs": epochs})
    return strategy, bm


def test_lsf_data_term_is_one_forward_over_clean_and_mixed_on_batchnorm():
    strategy, bm = batchnorm_lsf(epochs=1)
    probe = LossProbe()
    strategy.plugins.append(probe)
    model = copy.deepcopy(strategy.model)        # the model before the first step
    strategy.train(bm.train_stream[0])           # first request: no EWC, LwF or old-code term
    x, y, rng, loss = probe.seen[0]
    state = torch.get_rng_state()
    torch.set_rng_state(rng)
    lam = torch.rand(len(x), 1, 1, 1)
    torch.set_rng_state(state)
    mixed = lam * x + (1 - lam) * strategy.codes[0][y]
    with torch.no_grad():
        concatenated = F.cross_entropy(model(torch.cat([x, mixed]), 0), torch.cat([y, y]))
        separate = F.cross_entropy(torch.cat([model(x, 0), model(mixed, 0)]),
                                   torch.cat([y, y]))
    assert loss == pytest.approx(float(concatenated), rel=1e-5)
    assert abs(float(concatenated) - float(separate)) > 1e-3   # BatchNorm sees the difference


def test_lsf_warmup_trains_on_clean_samples_and_codes_go_through_a_forward_per_task():
    strategy, bm = batchnorm_lsf(epochs=2)
    stream = RequestStream(bm, seq("L0 L1"))
    strategy.train(stream[0])
    probe = LossProbe()
    strategy.plugins.append(probe)
    model = copy.deepcopy(strategy.model)
    strategy.train(stream[1])                    # an earlier task is active: warm-up first
    x, y, _, loss = probe.seen[0]
    with torch.no_grad():
        assert loss == pytest.approx(float(F.cross_entropy(model(x, 1), y)), rel=1e-5)
        codes = strategy.codes
        labels = torch.arange(2)
        per_task = (F.cross_entropy(strategy.model(codes[0], 0), labels)
                    + F.cross_entropy(strategy.model(codes[1], 1), labels)) / 2
        one_forward = F.cross_entropy(
            strategy.model(torch.cat([codes[0], codes[1]]), torch.tensor([0, 0, 1, 1])),
            torch.cat([labels, labels]))
        assert float(strategy.code_loss([0, 1])) == pytest.approx(float(per_task), rel=1e-6)
    assert abs(float(per_task) - float(one_forward)) > 1e-4


# ------------------------------------------------------------------------- WSN
class ScoreProbe(UnlearningPlugin):
    """The scores at the start of each learning request and at the end of its last epoch."""

    def __init__(self):
        super().__init__()
        self.start: list[list[torch.Tensor]] = []
        self.end: list[list[torch.Tensor]] = []

    def before_training_exp(self, strategy, **kwargs):
        self.start.append([s.detach().clone() for s in strategy.model.scores])
        self.end.append([])

    def after_training_epoch(self, strategy, **kwargs):
        self.end[-1] = [s.detach().clone() for s in strategy.model.scores]


@pytest.mark.parametrize("method, carried", [("wsn", True), ("pall", False)])
def test_wsn_carries_its_scores_across_tasks_and_pall_redraws_them(method, carried):
    strategy, bm, _ = make_strategy(method)
    probe = ScoreProbe()
    strategy.plugins.append(probe)
    for exp in RequestStream(bm, seq("L0 L1 U0 L2")):
        strategy.train(exp)
    assert len(probe.start) == len(probe.end) == 3
    for request in (1, 2):                    # the second request, and one after unlearning
        same = [torch.equal(a, b) for a, b in zip(probe.start[request], probe.end[request - 1],
                                                  strict=True)]
        assert all(same) if carried else not any(same)
    # the scores move while a task trains (they are optimised, not fixed)
    assert not torch.equal(probe.start[1][0], probe.end[1][0])


# --------------------------------------------------------------- ER, DER++, GEM
class Recorder(MultiTaskModule):
    """Passes every call to the network and records (inputs, task) of the calls in training
    mode (the unlearning steps; evaluation runs in eval mode)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net
        self.calls: list[tuple[torch.Tensor, int]] = []

    def forward(self, x, task_labels):
        if self.training:
            self.calls.append((x.detach().clone(), int(task_labels)))
        return self.net(x, task_labels)


def buffer_rows(buffer_x: torch.Tensor, x: torch.Tensor) -> list[int]:
    return [int((buffer_x == row).flatten(1).all(1).nonzero()[0]) for row in x]


@pytest.mark.parametrize("method", ["er", "derpp", "gem"])
def test_replay_unlearning_minibatches(method):
    # 250 // 5 = 50 samples per buffer (25 per class) > batch 32
    strategy, bm, _ = make_strategy(method, buffer_size=250, n_retrain_iters=3, epochs=1)
    stream = RequestStream(bm, seq("L0 L1 L2 U1"))
    for exp in stream[:3]:
        strategy.train(exp)
    buffers = {t: (x.clone(), y.clone()) for t, (x, y, _) in strategy.memory.buffers.items()}
    recorder = Recorder(strategy.model)
    strategy.model = recorder
    strategy.train(stream[3])
    draws = 2 if method == "derpp" else 1                  # DER++: MSE and CE mini-batches
    per_step = 1 + 2 * draws                               # B^1, then B^0 and B^2
    assert len(recorder.calls) == 3 * per_step
    for step in range(3):
        calls = recorder.calls[step * per_step:(step + 1) * per_step]
        tasks = [task for _, task in calls]
        assert tasks == [1] + [0] * draws + [2] * draws    # forget, then remaining tasks
        for x, task in calls:
            rows = buffer_rows(buffers[task][0], x)
            assert len(set(rows)) == len(rows)              # without replacement
            counts = torch.bincount(buffers[task][1][rows], minlength=2).tolist()
            size = 32 if task == 1 else 32 // 2            # a full batch for B^t
            assert counts == [size // 2, size // 2], (task, counts)
    assert sorted(strategy.memory.buffers) == [0, 2]


def test_class_stratified_indices_draw_as_the_reference():
    """The reference's rule: n // c from each class (all of a smaller class), the rest
    uniformly from the samples left; fewer draws than classes are uniform."""
    torch.manual_seed(0)
    labels = torch.tensor([0] * 6 + [1] * 6 + [2] * 3)
    # n=11: 3 + 3 + 3, then 2 of the 3 + 3 + 0 left; n=20: all 15
    for n, expected in [(7, [[3, 2, 2], [2, 3, 2], [2, 2, 3]]),
                        (11, [[5, 3, 3], [4, 4, 3], [3, 5, 3]]),
                        (10, [[4, 3, 3], [3, 4, 3]]), (20, [[6, 6, 3]])]:
        seen = set()
        for _ in range(60):
            index = class_stratified_indices(labels, n, 3)
            assert len(index) == min(n, len(labels)) == len(set(index.tolist()))
            counts = torch.bincount(labels[index], minlength=3).tolist()
            assert counts in expected, (n, counts)
            seen.add(tuple(counts))
        assert len(seen) == len(expected)                 # the extra samples' class varies
    # n=7: the seventh sample is uniform over the 9 left (4, 4, 1): class 2 in 1/9 of draws
    extra = torch.stack([torch.bincount(labels[class_stratified_indices(labels, 7, 3)],
                                        minlength=3) for _ in range(3000)]) - 2
    assert extra.sum(1).eq(1).all()
    assert extra.float().mean(0).tolist() == pytest.approx([4 / 9, 4 / 9, 1 / 9], abs=0.03)
    # n=2 < 3 classes: uniform, so both from one class in P = (15+15+3)/105 of draws
    same = sum(int(labels[class_stratified_indices(labels, 2, 3)].unique().numel() == 1)
               for _ in range(3000)) / 3000
    assert same == pytest.approx(33 / 105, abs=0.03)


def test_class_stratified_indices_draw_every_row_of_a_batch_on_its_own():
    """Rows of a ``(..., len)`` batch (the buffers of many tasks, twice each) are drawn by
    the same rule, independently: each row's labels in its own order."""
    torch.manual_seed(1)
    base = torch.tensor([0] * 6 + [1] * 6 + [2] * 3)
    rows = torch.stack([base[torch.randperm(15)] for _ in range(4)]).view(2, 2, 15)
    counts = {r: [] for r in range(4)}
    first_positions = []
    for _ in range(500):
        index = class_stratified_indices(rows, 7, 3)
        assert index.shape == (2, 2, 7)
        flat, labels = index.view(4, 7), rows.view(4, 15)
        for r in range(4):
            assert len(set(flat[r].tolist())) == 7
            drawn = torch.bincount(labels[r][flat[r]], minlength=3) - 2
            assert drawn.min() >= 0 and drawn.sum() == 1          # 2 of each, then one more
            counts[r].append(drawn)
        first_positions.append(flat[:, 0].tolist())
    for r in range(4):     # the seventh sample is uniform over the 9 left in every row
        mean = torch.stack(counts[r]).float().mean(0).tolist()
        assert mean == pytest.approx([4 / 9, 4 / 9, 1 / 9], abs=0.06)
    # rows are independent: two rows with the same labels do not draw alike
    same = torch.stack([base] * 2)
    draws = [class_stratified_indices(same, 7, 3) for _ in range(20)]
    assert sum(torch.equal(d[0], d[1]) for d in draws) < 3
