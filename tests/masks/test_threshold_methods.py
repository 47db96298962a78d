"""Every way of finding a layer's mask threshold gives the same masks, bit for bit: the device
paths (``topk``, ``sort``, ``kthvalue``), run here on CPU tensors, against the CPU path
(``numpy.partition``), on every layer shape of ResNet-18 and ViT-T/8, ties included."""

from __future__ import annotations

import pytest
import torch

from pall_avalanche.masks import (
    THRESHOLD_METHODS,
    SubnetworkNet,
    kth_smallest,
    maskable_parameters,
    restricted_topk_mask,
    selection_slices,
    subnetwork_mask,
    threshold_method,
    topk_mask,
)
from pall_avalanche.models import build_model

DEVICE_METHODS = ("topk", "sort", "kthvalue")


def layer_shapes(model: str, input_shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], int]]:
    """(shape, selection slices) of every distinct maskable tensor of ``model``."""
    net = build_model(model, input_shape=input_shape, n_tasks=5, classes_per_task=2,
                      per_task_tokens=True)
    params = dict(net.named_parameters())
    slices = selection_slices(net)
    shapes = {(tuple(params[name].shape), slices[name]) for name in maskable_parameters(net)}
    return sorted(shapes)


SHAPES = {"resnet18": layer_shapes("resnet18", (3, 32, 32)),
          "vit_t8": layer_shapes("vit_t8", (3, 64, 64))}


def scores_with_ties(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Scores whose |values| take few distinct levels (massive ties, ±0 included) in one half
    of the tensor and are continuous in the other."""
    scores = torch.randn(shape, generator=generator)
    flat = scores.view(-1)
    half = flat.numel() // 2
    flat[:half] = torch.round(flat[:half] * 3) / 3           # levels 0, ±1/3, ±2/3, ...
    return scores


def test_the_shapes_cover_the_paper_backbones():
    resnet = SHAPES["resnet18"]
    assert ((512, 512, 3, 3), 1) in resnet                   # 2.4 M entries in one slice
    assert any(len(shape) == 2 for shape, _ in resnet)       # the shared head
    vit = SHAPES["vit_t8"]
    assert ((3 * 192, 192), 3) in vit                         # fused Q/K/V, per slice
    assert any(len(shape) == 1 for shape, _ in vit)          # biases


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_device_paths_give_the_cpu_masks_bit_for_bit(model):
    generator = torch.Generator().manual_seed(0)
    for shape, slices in SHAPES[model]:
        scores = scores_with_ties(shape, generator)
        for alpha in (0.1, 0.5, 0.9):
            expected = topk_mask(scores, alpha, slices, "partition")
            # at least n − k + 1 entries of each slice, k = 1 + round((1 − α)(n − 1))
            n = scores.numel() // slices
            kept = expected.reshape(slices, -1).sum(1)
            assert (kept >= n - round((1 - alpha) * (n - 1))).all()
            for method in DEVICE_METHODS:
                got = topk_mask(scores, alpha, slices, method)
                assert torch.equal(got, expected), (model, shape, alpha, method)


@pytest.mark.parametrize("model", sorted(SHAPES))
def test_restricted_selection_is_the_same_on_every_path(model):
    generator = torch.Generator().manual_seed(1)
    for shape, slices in SHAPES[model]:
        scores = scores_with_ties(shape, generator)
        eligible = torch.rand(shape, generator=generator) < 0.6
        available = eligible.reshape(slices, -1).sum(1).tolist()
        keep = [max(0, a // 3) for a in available]
        expected = restricted_topk_mask(scores, eligible, keep, slices, "partition")
        assert not (expected & ~eligible).any()
        for method in DEVICE_METHODS:
            got = subnetwork_mask(scores, 0.5, slices, eligible, keep, method)
            assert torch.equal(got, expected), (model, shape, method)


@pytest.mark.parametrize("method", DEVICE_METHODS)
def test_kth_smallest_against_a_sorted_list(method):
    generator = torch.Generator().manual_seed(2)
    values = torch.randint(-3, 4, (257,), generator=generator).float()   # ties everywhere
    ordered = sorted(values.tolist())
    for k in (1, 2, 100, 128, 129, 130, 256, 257):
        assert kth_smallest(values, k, method).item() == ordered[k - 1], (method, k)


def test_auto_picks_partition_on_cpu_and_topk_elsewhere():
    assert threshold_method("auto", torch.device("cpu")) == "partition"
    assert threshold_method("auto", torch.device("cuda")) == "topk"
    assert set(THRESHOLD_METHODS) == {"auto", "partition", *DEVICE_METHODS}
    with pytest.raises(ValueError, match="partition.*needs CPU"):
        threshold_method("partition", torch.device("cuda"))
    with pytest.raises(ValueError, match="mask_threshold='median' is invalid"):
        threshold_method("median", torch.device("cpu"))


def test_the_network_and_the_strategy_take_the_method():
    from helpers import make_strategy

    strategy, _, _ = make_strategy("pall", measured=False, mask_threshold="sort")
    assert strategy.model.threshold == "sort"
    assert strategy.model.selection(strategy.model.scored_names()[0])[-1] == "sort"
    net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
    with pytest.raises(ValueError, match="mask_threshold='fast' is invalid"):
        SubnetworkNet(net, 0.5, threshold="fast")
