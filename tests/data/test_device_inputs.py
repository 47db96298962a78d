"""The device-resident input path: datasets carry their tensors (the image benchmarks' uint8
images, digits' inputs as they are), the loader draws every sample once per pass with its own
label in the order Avalanche's loader would, repeats under a seed, hands nothing to the host,
and strategies train from it; evaluation reads the same batches as the per-sample path."""

from __future__ import annotations

import pytest
import torch
from helpers import FAST_CONFIG, HostSyncDetector

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.data import CIFAR10_STATS, build_benchmark, image_benchmark
from pall_avalanche.data.augment import CropFlip
from pall_avalanche.data.device import (
    BatchPipeline,
    DeviceBatchLoader,
    DeviceImages,
    device_images_of,
)
from pall_avalanche.data.synthetic import write_cifar10
from pall_avalanche.data.tasks import evaluation_loader, half_of_task, unshuffled_batches
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import UnlearnExperience
from pall_avalanche.runs.build import build_run
from pall_avalanche.strategies import METHODS, build_strategy


def numbered_images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Image i is constant, every pixel = i (so a crop of it still says which it is); labels
    0..9 cyclic."""
    x = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 32, 32).contiguous()
    return x, torch.arange(n) % 10


def identity_of(x: torch.Tensor) -> torch.Tensor:
    """The image number of each normalised input, read from its central pixel (inside the
    image whatever the 4-pixel crop offset)."""
    mean, std = CIFAR10_STATS
    pixel = x[:, 0, 16, 16] * std[0] + mean[0]
    return torch.round(pixel * 255).long()


@pytest.fixture(scope="module")
def numbered():
    x, y = numbered_images(200)
    return image_benchmark("cifar10", (x, y), (x[:20], y[:20]), seed=0, n_tasks=5)


def test_train_datasets_carry_their_images_on_every_view(numbered):
    for exp in numbered.train_stream:
        source = device_images_of(exp.dataset)
        assert isinstance(source, DeviceImages) and source.task == exp.task_label
        assert device_images_of(exp.dataset.train()) is source       # Avalanche views keep it
        assert device_images_of(exp.dataset.eval()) is source
        assert source.images.dtype == torch.uint8 and len(source) == len(exp.dataset)
        # the same samples, in the same order, as the per-sample dataset
        plain = exp.dataset.eval()
        for i in (0, len(plain) - 1):
            x, y, _ = plain[i]
            assert int(y) == int(source.targets[i])
            assert int(identity_of(x[None])[0]) == int(source.images[i, 0, 0, 0])
    for exp in numbered.test_stream:               # the test sets: their evaluation view
        source = device_images_of(exp.dataset)
        assert source is not None and len(source) == len(exp.dataset)


@pytest.mark.parametrize("kind", ["cifar10", "digits"])
def test_evaluation_batches_are_the_per_sample_paths(kind, tmp_path):
    """The batches evaluation reads from the tensors equal an unshuffled DataLoader of the
    per-sample evaluation view, value for value (the test sets, and a training set's
    evaluation view for the learning checks; digits' training view too: no augmentation)."""
    if kind == "cifar10":
        write_cifar10(tmp_path, train_per_class=6, test_per_class=3)
        bm = build_benchmark("cifar10", seed=0, data_root=tmp_path, download=False)
    else:
        bm = build_benchmark("digits", seed=0)
    views = [(exp.dataset, "eval") for exp in (bm.test_stream[1], bm.train_stream[2])]
    if kind == "digits":
        views.append((bm.train_stream[2].dataset, "train"))
    for dataset, view in views:
        fast = list(unshuffled_batches(dataset, 7, "cpu", view=view))
        plain = dataset.eval() if view == "eval" else dataset.train()
        slow = [(x, y) for x, y, _ in evaluation_loader(plain, 7)]
        assert len(fast) == len(slow)
        for (a, y_a), (b, y_b) in zip(fast, slow, strict=True):
            assert torch.equal(a, b) and torch.equal(y_a, y_b)


def test_the_training_order_is_avalanches_loaders_sample_for_sample():
    """On CPU a pass draws from torch's generator what Avalanche's task-balanced loader draws
    (the loader's base seed, then the sampler's), so the batches are the same, in the same
    order, and the generator ends in the same state."""
    from avalanche.benchmarks.utils.data_loader import TaskBalancedDataLoader

    bm = build_benchmark("digits", seed=0)
    dataset = bm.train_stream[1].dataset.train()
    torch.manual_seed(11)
    theirs = [[t.clone() for t in batch]
              for batch in TaskBalancedDataLoader(dataset, oversample_small_groups=True,
                                                  batch_size=32, shuffle=True)]
    after = torch.get_rng_state()
    torch.manual_seed(11)
    ours = list(DeviceBatchLoader(device_images_of(dataset), 32, "cpu"))
    assert torch.equal(torch.get_rng_state(), after)
    assert len(ours) == len(theirs) == -(-len(dataset) // 32)
    for mine, other in zip(ours, theirs, strict=True):
        for a, b in zip(mine, other, strict=True):
            assert torch.equal(a, b) and a.dtype == b.dtype


def test_a_pass_draws_every_sample_once_with_its_label(numbered):
    source = device_images_of(numbered.train_stream[1].dataset)
    loader = DeviceBatchLoader(source, 16, "cpu")
    assert len(loader) == -(-len(source) // 16)
    label_of = dict(zip(source.images[:, 0, 0, 0].tolist(), source.targets.tolist(),
                        strict=True))
    seen, sizes = [], []
    for x, y, t in loader:
        ids = identity_of(x)
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 32, 32)
        assert y.tolist() == [label_of[i] for i in ids.tolist()]   # each image keeps its label
        assert torch.equal(t, torch.full_like(y, 1))
        seen += ids.tolist()
        sizes.append(len(y))
    assert sorted(seen) == sorted(source.images[:, 0, 0, 0].long().tolist())
    assert sizes[:-1] == [16] * (len(sizes) - 1)
    unshuffled = [identity_of(x) for x, _, _ in DeviceBatchLoader(source, 16, "cpu",
                                                                   shuffle=False)]
    assert torch.equal(torch.cat(unshuffled), source.images[:, 0, 0, 0].long())
    dropped = DeviceBatchLoader(source, 16, "cpu", drop_last=True)
    assert [len(b[0]) for b in dropped] == [16] * (len(source) // 16)


def test_passes_repeat_under_a_seed_and_differ_between_passes(numbered):
    source = device_images_of(numbered.train_stream[0].dataset)
    loader = DeviceBatchLoader(source, 8, "cpu")

    def one_pass():
        return torch.cat([x for x, _, _ in loader])

    torch.manual_seed(3)
    first, second = one_pass(), one_pass()
    torch.manual_seed(3)
    assert torch.equal(one_pass(), first)
    assert not torch.equal(first, second)


def test_a_pass_hands_nothing_to_the_host(numbered):
    source = device_images_of(numbered.train_stream[0].dataset)
    batches = iter(DeviceBatchLoader(source, 8, "cpu"))     # the pass's one seed drawn here
    with HostSyncDetector() as detector:
        detector.armed = True
        assert sum(len(y) for _, y, _ in batches) == len(source)


def test_a_shadow_half_keeps_its_device_images(numbered):
    halved = half_of_task(numbered, 2, seed=1)
    members = halved.split.shadow["members"]
    whole = device_images_of(numbered.train_stream[2].dataset)
    half = device_images_of(halved.train_stream[2].dataset)
    assert torch.equal(half.images, whole.images[members])
    assert torch.equal(half.targets, whole.targets[members])


class Seen(UnlearningPlugin):
    """The loader of every learning experience and the inputs' dtype and shape."""

    def __init__(self):
        super().__init__()
        self.loaders, self.inputs = [], set()

    def before_training_epoch(self, strategy, **kwargs):
        self.loaders.append(type(strategy.dataloader))

    def before_forward(self, strategy, **kwargs):
        self.inputs.add((strategy.mb_x.dtype, tuple(strategy.mb_x.shape[1:])))


@pytest.mark.parametrize("method", ["sequential", "pall", "derpp"])
def test_strategies_train_from_device_batches_and_keep_the_per_sample_path(tmp_path, method):
    write_cifar10(tmp_path, train_per_class=6, test_per_class=2)
    bm = build_benchmark("cifar10", seed=0, data_root=tmp_path, download=False)
    config = {**FAST_CONFIG, "benchmark": "cifar10", "epochs": 1, "n_retrain_iters": 2,
              "buffer_size": 20}
    seen = Seen()
    strategy = build_run(method, config, seed=0, benchmark=bm, plugins=[seen],
                         measured=False).strategy
    strategy.train([bm.train_stream[0], bm.train_stream[1]])
    assert seen.loaders == [DeviceBatchLoader] * 2
    # each task's images left the training device once it was learned
    assert all(not device_images_of(exp.dataset)._on for exp in bm.train_stream[:2])
    assert seen.inputs == {(torch.float32, (3, 32, 32))}
    if method != "sequential":                           # buffers from the per-sample path
        x, y, _ = strategy.memory.buffers[0]
        assert x.shape == (config["buffer_size"] // 5, 3, 32, 32) and x.dtype == torch.float32
    strategy.train(UnlearnExperience(0))
    strategy.eval(bm.test_stream[1:2])
    per_sample = build_strategy(method, model=build_model(
        "mlp", input_shape=(3, 32, 32), n_tasks=5, classes_per_task=2,
        per_task_tokens=METHODS[method].strategy.per_task_tokens),
        config={**config, "input_pipeline": "per_sample"})
    per_sample.plugins.insert(0, seen)
    per_sample.train(bm.train_stream[0])
    assert seen.loaders[-1] is not DeviceBatchLoader


def test_the_pipeline_normalises_like_the_per_sample_transforms():
    x, _ = numbered_images(4)
    pipeline = BatchPipeline(CropFlip(32, 0), *CIFAR10_STATS)     # no padding: no offset
    out = pipeline(x, torch.Generator().manual_seed(0))
    mean = torch.tensor(CIFAR10_STATS[0]).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STATS[1]).view(3, 1, 1)
    expected = (x.float() / 255 - mean) / std
    assert torch.allclose(out, expected, atol=1e-6)
