"""ER, DER++, GEM and ER (Retraining): buffers, replay, GEM's projection and unlearning, with
real training on digits."""

import math

import numpy as np
import pytest
import torch
from avalanche.training.plugins import GEMPlugin
from helpers import FAST_CONFIG, TINY_VIT, BufferDraws, make_strategy, seq, snapshot
from sklearn.datasets import load_digits
from torch import nn
from torchvision.transforms import v2

from pall_avalanche.config import CONFIG_DIR, for_benchmark, load_config, resolve_method_config
from pall_avalanche.data import build_benchmark
from pall_avalanche.data.tasks import task_incremental_benchmark_from_tensors
from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import METHODS, UnlearningPlugin, build_strategy

CONFIGS = CONFIG_DIR
REPLAY = ("er", "derpp", "gem", "er_retrain")


@torch.no_grad()
def uniform_ce(model, x, task) -> float:
    """Mean CE of the task's predictions on ``x`` towards the uniform distribution (eval)."""
    model.eval()
    log_p = torch.log_softmax(model(x, task), dim=1)
    model.train()
    return float(-log_p.mean())


def test_registry_and_config_files():
    labels = {m: (METHODS[m].label, METHODS[m].exact) for m in REPLAY}
    assert labels == {"er": ("ER", False), "derpp": ("DER++", False), "gem": ("GEM", False),
                      "er_retrain": ("ER (Retraining)", True)}
    for path in sorted(CONFIGS.glob("*.yaml")):
        for method in REPLAY:
            config = resolve_method_config(load_config(path), method)
            assert all(k in config for k in METHODS[method].keys), (path.name, method)
            if path.stem.startswith("cifar"):
                assert config["lr"] == 0.001                  # paper appendix
    gem = resolve_method_config(for_benchmark("cifar10"), "gem")
    assert gem["memory_strength"] == 0.5 and gem["buffer_size"] == 500


def test_buffer_is_class_balanced_and_holds_real_samples_of_its_task():
    strategy, bm, _ = make_strategy("er", buffer_size=55, epochs=1)   # 55 // 5 = 11 per task
    for exp in bm.train_stream[:2]:
        strategy.train(exp)
    assert sorted(strategy.memory.buffers) == [0, 1]
    for task in (0, 1):
        x, y, z = strategy.memory.buffers[task]
        assert z is None                                   # ER stores no logits
        assert torch.bincount(y).tolist() == [6, 5]        # remainder to the first class
        data = bm.train_stream[task].dataset.eval()
        pool = torch.stack([data[i][0] for i in range(len(data))])
        labels = torch.as_tensor(list(data.targets))
        rows = [int((pool == row).flatten(1).all(1).nonzero()[0]) for row in x]
        assert len(set(rows)) == 11                        # distinct training samples
        assert torch.equal(labels[rows], y)


def crop_flip_digits():
    """Digits with a training augmentation (2-pixel padded random crop and horizontal flip,
    CIFAR's at 8×8): 50 possible versions of every training image."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    augment = v2.Compose([v2.RandomCrop(8, padding=2), v2.RandomHorizontalFlip()])
    return task_incremental_benchmark_from_tensors(
        "digits-crop-flip", (x, y), (x, y), n_tasks=5, seed=0, train_transform=augment,
        train_per_task=40)


def every_augmentation(image: torch.Tensor) -> torch.Tensor:
    """All 50 crop-and-flip versions of a (1, 8, 8) image, enumerated by hand."""
    padded = torch.nn.functional.pad(image, (2, 2, 2, 2))
    crops = [padded[:, i:i + 8, j:j + 8] for i in range(5) for j in range(5)]
    return torch.stack([*crops, *(c.flip(-1) for c in crops)])


@pytest.mark.parametrize("method", ["derpp", "pall"])
def test_buffer_stores_one_augmentation_with_the_logits_of_another(method):
    torch.manual_seed(0)
    bm = crop_flip_digits()
    net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
    strategy = build_strategy(method, model=net, config={**FAST_CONFIG, "epochs": 1})
    strategy.train(bm.train_stream[0])
    x, y, z = strategy.memory.buffers[0]
    data = bm.train_stream[0].dataset.eval()               # the un-augmented images
    model = strategy.model.eval()
    augmented = same_logits = 0
    with torch.no_grad():
        for row, label, logits in zip(x, y, z, strict=True):
            matches = [(i, versions) for i in range(len(data))
                       if (versions := every_augmentation(data[i][0])).eq(row).flatten(1)
                       .all(1).any()]
            assert matches, "a stored sample is no augmentation of a training image"
            i, versions = matches[0]
            assert data[i][1] == label
            augmented += not torch.equal(row, data[i][0])
            outputs = model(versions, 0)                  # the logits of every version
            assert (outputs - logits).abs().amax(1).min() < 1e-5   # of one version ...
            same_logits += bool(torch.allclose(model(row[None], 0)[0], logits, atol=1e-5))
    assert augmented > len(x) // 2                     # stored as a training augmentation
    assert same_logits < len(x) // 2                    # ... another one than the stored


@pytest.mark.parametrize("method", ["derpp", "pall"])
def test_buffer_logits_come_from_one_pass_over_the_task_in_training_batches(method):
    """A backbone normalising with batch statistics also in eval mode (BatchNorm without
    running statistics, as the paper's ResNets): the stored logits are those of one
    unshuffled pass over the task's whole training set in batches of the training batch size,
    not of the stored samples batched on their own (where the last few would be normalised
    by themselves)."""
    from pall_avalanche.models import TaskIncrementalNet

    torch.manual_seed(0)
    bm = build_benchmark("digits", seed=0)
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 32),
                             nn.BatchNorm1d(32, affine=False, track_running_stats=False),
                             nn.ReLU())
    net = TaskIncrementalNet(backbone, 32, 5, 2)
    strategy = build_strategy(method, model=net, config={**FAST_CONFIG, "epochs": 1,
                                                         "buffer_size": 175})
    strategy.train(bm.train_stream[0])
    x, _, z = strategy.memory.buffers[0]
    data = bm.train_stream[0].dataset.train()            # digits: no augmentation
    every = torch.stack([data[i][0] for i in range(len(data))])
    batch = FAST_CONFIG["batch_size"]
    model = strategy.model.eval()
    with torch.no_grad():
        full = torch.cat([model(every[i:i + batch], 0) for i in range(0, len(every), batch)])
        own = torch.cat([model(x[i:i + batch], 0) for i in range(0, len(x), batch)])
    rows = [int((every == row).flatten(1).all(1).nonzero()[0]) for row in x]
    assert len(x) % batch == 3                           # a last batch of 3 on its own
    assert torch.allclose(z, full[rows], atol=1e-6)
    assert not torch.allclose(z, own, atol=1e-2)


@pytest.mark.parametrize("method", REPLAY)
def test_request_sequence_learns_unlearns_and_deletes_the_buffer(method):
    strategy, bm, evaluation = make_strategy(method)
    requests = seq("L0 L1 L2 U1 L3")
    stream = RequestStream(bm, requests)
    for exp in stream[:3]:
        strategy.train(exp)
    x1 = strategy.memory.buffers[1][0].clone()
    before = uniform_ce(strategy.model, x1, 1)
    for exp in stream[3:]:
        strategy.train(exp)
    acc = np.asarray(evaluation.accuracy)
    assert acc.shape == (5, 5) and len(evaluation.timings) == 5
    assert [t["kind"] for t in evaluation.timings] == ["learn"] * 3 + ["unlearn", "learn"]
    assert len(evaluation.model_sizes_mb) == 5
    metrics = compute_metrics(acc, requests)
    assert all(metrics[k] is not None for k in ("A_l", "A_u", "F_l", "F_u", "F_u_max"))
    assert metrics["A_l"] > 85.0
    assert sorted(strategy.memory.buffers) == [0, 2, 3] == sorted(strategy.active_tasks)
    assert acc[2, 1] > 90.0
    if method == "gem":
        assert sorted(strategy.gem.memory_x) == [0, 2, 3]
        assert all(strategy.gem.memory_x[t] is strategy.memory.buffers[t][0]
                   for t in (0, 2, 3))
    if method != "er_retrain":
        # fine-tuning pushed t's buffer to uniform predictions: CE → log 2, accuracy → chance
        assert before > math.log(2) + 0.3
        assert uniform_ce(strategy.model, x1, 1) < math.log(2) + 0.05
        assert acc[3, 1] < 65.0
    assert acc[3, 0] > 85.0 and acc[3, 2] > 85.0           # remaining tasks stay learned


class LossRecorder(UnlearningPlugin):
    """Runs first at ``before_backward``: records the plain CE loss and the RNG state."""

    def before_backward(self, strategy, **kwargs):
        self.loss = strategy.loss.detach().clone()
        self.rng = torch.get_rng_state()


class ReplayChecker(UnlearningPlugin):
    """Runs last at ``before_backward``: the loss grew by exactly the replay loss recomputed
    with the same random minibatches."""

    def __init__(self, first: LossRecorder):
        super().__init__()
        self.first, self.checked = first, []

    @torch.no_grad()
    def before_backward(self, strategy, **kwargs):
        added = strategy.loss.detach() - self.first.loss
        tasks = list(strategy.active_tasks)
        if not tasks:
            assert added == 0
            return
        after = torch.get_rng_state()
        torch.set_rng_state(self.first.rng)
        expected = strategy.replay.replay_loss(strategy, tasks, 32 // len(tasks))
        torch.set_rng_state(after)
        assert torch.allclose(added, expected, rtol=1e-5, atol=1e-6)
        self.checked.append(len(tasks))


def test_derpp_replays_every_learning_minibatch_with_its_own_heads_logits():
    strategy, bm, _ = make_strategy("derpp", epochs=1, lr=0.01)
    first = LossRecorder()
    checker = ReplayChecker(first)
    strategy.plugins.insert(0, first)
    strategy.plugins.append(checker)
    stored = {}
    for task in (0, 1, 2):
        strategy.train(bm.train_stream[task])
        x, _, z = strategy.memory.buffers[task]
        stored[task] = z.clone()
        strategy.model.eval()
        with torch.no_grad():            # z is task t's head block, in eval mode (#1657 fix)
            assert torch.equal(z, strategy.model(x, task))
        strategy.model.train()
        assert z.shape == (20, 2)
    for task in (0, 1, 2):               # stored once, never recomputed
        assert torch.equal(strategy.memory.buffers[task][2], stored[task])
    n_batches = math.ceil(120 / 32)
    assert checker.checked == [1] * n_batches + [2] * n_batches


def test_derpp_replay_loss_by_hand(monkeypatch):
    """β·MSE on a class-stratified mini-batch, then CE on another, per task, each mini-batch
    its own forward pass through its task, averaged over tasks (computed here one mini-batch
    at a time from the recorded draws)."""
    strategy, bm, _ = make_strategy("derpp", epochs=1, lr=0.01)
    for exp in bm.train_stream[:2]:
        strategy.train(exp)
    net, replay, memory = strategy.model, strategy.replay, strategy.memory
    draws = BufferDraws(monkeypatch)
    loss = replay.replay_loss(strategy, [0, 1], 5)
    assert [(task, j) for task, j, _ in draws.draws] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    expected = 0.0
    for task, j, index in draws.draws:
        x, y, z = memory.buffers[task]
        assert sorted(torch.bincount(y[index]).tolist()) == [2, 3]   # 2 + 2, then 1 more
        if j == 0:
            expected = expected + 0.5 * ((net(x[index], task) - z[index]) ** 2).mean()
        else:
            log_p = torch.log_softmax(net(x[index], task), dim=1)
            expected = expected - log_p[torch.arange(5), y[index]].mean()
    torch.testing.assert_close(loss, expected / 2, rtol=1e-6, atol=1e-7)


def test_gem_projection_by_hand_and_as_upstream():
    strategy, _, _ = make_strategy("gem")
    gem = strategy.gem
    a = torch.tensor([1.0, 2.0, 0.0, -1.0])
    g = torch.tensor([-1.0, 0.5, 3.0, 2.0])                   # a·g = -2 < 0
    gem.G = a[None]
    for gamma, v in ((0.0, 2 / 6.001), (0.5, 0.5)):          # v = max(γ, -a·g / (|a|² + 1e-3))
        gem.memory_strength = gamma
        assert torch.allclose(gem.solve_quadprog(g), g + v * a, atol=1e-6)
    torch.manual_seed(0)
    gem.G, g = torch.randn(3, 50), torch.randn(50)
    upstream = GEMPlugin(patterns_per_experience=1, memory_strength=0.5)
    upstream.G = gem.G
    assert torch.allclose(gem.solve_quadprog(g), upstream.solve_quadprog(g), atol=1e-5)


def test_er_retraining_redraws_every_parameter_and_keeps_remaining_tasks():
    strategy, bm, evaluation = make_strategy("er_retrain")
    stream = RequestStream(bm, seq("L0 L1 L2 U1"))
    for exp in stream[:3]:
        strategy.train(exp)
    before = snapshot(strategy.model)
    strategy.train(stream[3])
    after = snapshot(strategy.model)
    assert before.keys() == after.keys()
    for name in before:                                   # no entry survives
        assert (before[name] != after[name]).all(), name
    assert sorted(strategy.memory.buffers) == [0, 2]
    assert strategy.retrain_steps() == 10 * math.ceil(40 / 32)
    assert evaluation.accuracy[-1][0] > 85.0 and evaluation.accuracy[-1][2] > 85.0


@pytest.mark.parametrize("model", ["mlp", "vit_t8"])
def test_er_retraining_depends_only_on_the_remaining_buffers(model):
    """Same RNG state, different pre-unlearning weights: a bit-identical result, so nothing
    of the model that saw D^t survives unlearning."""
    kwargs = {"model_kwargs": TINY_VIT} if model == "vit_t8" else {}
    strategy, bm, _ = make_strategy("er_retrain", model=model, epochs=1, measured=False,
                                    **kwargs)
    stream = RequestStream(bm, seq("L0 L1 U1"))
    for exp in stream[:2]:
        strategy.train(exp)
    before, memory, rng = snapshot(strategy.model), strategy.memory.state_dict(), \
        torch.get_rng_state()
    strategy.train(stream[2])
    after = snapshot(strategy.model)
    strategy.model.load_state_dict({k: torch.randn_like(v) for k, v in before.items()})
    strategy.memory.load_state_dict(memory)
    strategy.active_tasks = [0, 1]
    torch.set_rng_state(rng)
    strategy.train(stream[2])
    for name, value in snapshot(strategy.model).items():
        assert torch.equal(value, after[name]), name


def test_er_retraining_with_no_task_left_only_redraws():
    strategy, bm, _ = make_strategy("er_retrain", epochs=1)
    stream = RequestStream(bm, seq("L0 U0 L1"))
    strategy.train(stream[0])
    before = snapshot(strategy.model)
    strategy.train(stream[1])
    for name, value in snapshot(strategy.model).items():
        assert (value != before[name]).all(), name
    assert strategy.memory.buffers == {}
    strategy.train(stream[2])
    assert sorted(strategy.memory.buffers) == [1]


def test_bad_hyper_parameters_fail_clearly():
    with pytest.raises(ValueError, match=r"memory_strength=-1 must be >= 0"):
        make_strategy("gem", memory_strength=-1)
    with pytest.raises(ValueError, match=r"retrain_epochs=-1 must be an integer >= 0"):
        make_strategy("er_retrain", retrain_epochs=-1)
    with pytest.raises(ValueError, match=r"buffer_size=5 gives 1 samples per task .* >= 10"):
        make_strategy("derpp", buffer_size=5)
    with pytest.raises(ValueError, match=r"beta=-1 and n_retrain_iters=50 must be >= 0"):
        make_strategy("derpp", beta=-1)


def test_gem_reference_gradients_are_each_tasks_memory_gradient():
    """Row k of G: the gradient of task k's whole memory's CE through task k, here one task
    at a time with plain backward passes (GEM's and upstream's loop)."""
    strategy, bm, _ = make_strategy("gem", epochs=1)
    for exp in RequestStream(bm, seq("L0 L1 L2 U1 L3")):
        strategy.train(exp)
    gem, model = strategy.gem, strategy.model
    gem.before_training_iteration(strategy)
    rows = []
    for task in sorted(gem.memory_x):
        model.zero_grad(set_to_none=True)
        F_ce = nn.functional.cross_entropy(model(gem.memory_x[task], task), gem.memory_y[task])
        F_ce.backward()
        rows.append(torch.cat([p.grad.flatten() if p.grad is not None
                               else torch.zeros(p.numel()) for p in model.parameters()]))
    assert sorted(gem.memory_x) == [0, 2, 3]
    torch.testing.assert_close(gem.G, torch.stack(rows), rtol=1e-5, atol=1e-7)
