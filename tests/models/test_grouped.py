"""Many forward passes as one batched pass (``forward_groups``): equal, within float32
reduction-order tolerance, to running every mini-batch through its task one after another,
also for what a pass leaves behind (running statistics, gradients of shared and per-task
parameters, the class ids a task's logits are placed at).

Tolerance: rtol 1e-5, atol 1e-6 on logits and gradients (float32; the batched matrix
products sum in another order than the one-by-one ones)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import TINY_VIT
from torch import nn

from pall_avalanche.masks import MaskSet, SubnetworkNet
from pall_avalanche.models import TaskIncrementalNet, build_model
from pall_avalanche.models.grouped import MASK_VALUE, forward_groups, group_losses

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
T = 6


def one_by_one(net, x, tasks):
    """The reference: every mini-batch through ``net`` alone, padded to the widest."""
    outs = [[net(batch, task) for batch in group] for group, task in zip(x, tasks, strict=True)]
    width = max(o.shape[-1] for g in outs for o in g)
    return torch.stack([torch.stack([
        torch.cat([o, o.new_full((*o.shape[:-1], width - o.shape[-1]), MASK_VALUE)], -1)
        for o in g]) for g in outs])


def grads(net, out) -> dict[str, torch.Tensor]:
    net.zero_grad(set_to_none=True)
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    return {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}


def bn_net() -> TaskIncrementalNet:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(),
                             nn.Linear(32, 16), nn.BatchNorm1d(16, momentum=0.3), nn.ReLU())
    return TaskIncrementalNet(backbone, 16, T, 3)


@pytest.mark.parametrize("train", [True, False])
def test_a_dense_network_with_running_statistics_as_one_pass_after_another(train):
    net = bn_net().train(train)
    reference = copy.deepcopy(net)
    torch.manual_seed(1)
    x, tasks = torch.randn(4, 2, 5, 1, 8, 8), [3, 0, 5, 3]
    got, expected = forward_groups(net, x, tasks), one_by_one(reference, x, tasks)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    # the running statistics end as after the eight passes one after another
    for (name, a), (_, b) in zip(net.named_buffers(), reference.named_buffers(), strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE, msg=name)
    assert int(net.backbone[2].num_batches_tracked) == (8 if train else 0)
    got_grads, expected_grads = grads(net, got), grads(reference, expected)
    assert got_grads.keys() == expected_grads.keys()
    for name, value in expected_grads.items():
        torch.testing.assert_close(got_grads[name], value, **TOLERANCE, msg=name)


def test_class_ids_are_placed_as_the_task_places_them():
    net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=T, classes_per_task=4)
    net.set_task_classes(1, [2, 7])               # two classes of four units, at ids 2 and 7
    net.set_task_classes(2, [0, 1, 5, 9])
    net._widths[4] = 6                             # evaluated on ids up to 5: padded
    torch.manual_seed(2)
    x, tasks = torch.randn(4, 1, 3, 1, 8, 8), [1, 2, 4, 0]
    got = forward_groups(net, x, tasks)
    assert got.shape[-1] == 10
    torch.testing.assert_close(got, one_by_one(net, x, tasks), **TOLERANCE)


def test_per_task_tokens_of_a_task_aware_backbone_are_each_groups_own():
    net = build_model("vit_t8", input_shape=(1, 8, 8), n_tasks=T, classes_per_task=2,
                      per_task_tokens=True, **TINY_VIT).eval()
    with torch.no_grad():
        for p in net.backbone.cls_tokens:
            p.normal_()
    torch.manual_seed(3)
    x, tasks = torch.randn(3, 2, 4, 1, 8, 8), [4, 1, 4]
    got, expected = forward_groups(net, x, tasks), one_by_one(net, x, tasks)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    got_grads, expected_grads = grads(net, got), grads(net, expected)
    assert got_grads.keys() == expected_grads.keys()
    assert "backbone.cls_tokens.1" in got_grads and "backbone.cls_tokens.0" not in got_grads
    for name, value in expected_grads.items():
        torch.testing.assert_close(got_grads[name], value, **TOLERANCE, msg=name)


def test_dropout_draws_each_mini_batch_its_own_masks():
    net = build_model("vit_t8", input_shape=(1, 8, 8), n_tasks=T, classes_per_task=2,
                      **TINY_VIT).train()
    x = torch.randn(1, 1, 6, 1, 8, 8).expand(2, 4, 6, 1, 8, 8)       # the same inputs 8 times
    out = forward_groups(net, x, [2, 2]).flatten(0, 1)
    assert all(not torch.equal(out[i], out[j]) for i in range(8) for j in range(i))
    net.eval()
    out = forward_groups(net, x, [2, 2]).flatten(0, 1)
    assert all(torch.allclose(out[0], o, **TOLERANCE) for o in out)


def test_a_network_vmap_cannot_run_takes_the_groups_one_by_one():
    net = bn_net()
    reference = copy.deepcopy(net)
    seen = []
    net.backbone[1].register_forward_hook(lambda m, i, o: seen.append(o.shape))   # a user's
    x, tasks = torch.randn(3, 2, 5, 1, 8, 8), [0, 1, 2]
    torch.testing.assert_close(forward_groups(net, x, tasks), one_by_one(reference, x, tasks),
                               **TOLERANCE)
    assert seen == [torch.Size([5, 32])] * 6        # the hook saw every plain mini-batch


def subnetwork(norm: bool) -> SubnetworkNet:
    torch.manual_seed(4)
    layers = [nn.Flatten(), nn.Linear(64, 32)]
    layers += [nn.BatchNorm1d(32, affine=False)] if norm else []
    layers += [nn.ReLU(), nn.Linear(32, 16), nn.ReLU()]
    net = SubnetworkNet(TaskIncrementalNet(nn.Sequential(*layers), 16, T, 2), alpha=0.4)
    for task in (0, 2, 3):
        masks = {name: torch.rand(shape) < 0.4 for name, shape in net.shapes.items()}
        masks.update(net.head_masks(task))
        net.set_mask(task, MaskSet.from_bool(masks))
        if norm:
            net.statistics[task] = {
                "backbone.2.running_mean": torch.randn(32),
                "backbone.2.running_var": torch.rand(32) + 0.5,
                "backbone.2.num_batches_tracked": torch.tensor(task)}
    return net


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_subnetworks_run_each_group_under_its_tasks_mask_and_statistics(norm, train):
    net = subnetwork(norm).train(train)
    stored = copy.deepcopy(net.statistics)
    torch.manual_seed(5)
    x, tasks = torch.randn(4, 2, 6, 1, 8, 8), [2, 0, 5, 3]        # task 5: no mask (dense)
    with net.stacked(tasks):
        got = forward_groups(net, x, tasks)
    expected = one_by_one(net, x, tasks)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    got_grads, expected_grads = grads(net, got), grads(net, expected)
    for name, value in expected_grads.items():
        torch.testing.assert_close(got_grads[name], value, **TOLERANCE, msg=name)
    # every stored task's statistics are untouched by train-mode passes of other requests
    assert stored.keys() == net.statistics.keys()
    for task, values in stored.items():
        for name, value in values.items():
            assert torch.equal(net.statistics[task][name], value), (task, name)


def test_group_losses_are_each_groups_criterion():
    torch.manual_seed(6)
    logits, labels = torch.randn(3, 7, 4), torch.randint(0, 4, (3, 7))
    plain = group_losses(nn.CrossEntropyLoss(), logits, labels)
    smoothed = nn.CrossEntropyLoss(label_smoothing=0.1)
    expected = [nn.functional.cross_entropy(logits[g], labels[g]) for g in range(3)]
    torch.testing.assert_close(plain, torch.stack(expected), **TOLERANCE)
    torch.testing.assert_close(group_losses(smoothed, logits, labels),
                               torch.stack([smoothed(logits[g], labels[g]) for g in range(3)]))


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet18", "vit_t8"])
@pytest.mark.parametrize("train", [True, False])
def test_no_built_in_model_falls_back_to_one_pass_per_group(model, train, recwarn):
    # vmap runs an operation it has no batching rule for once per mini-batch, with a
    # warning ("There is a performance drop ..."): none may occur, masked or dense
    shape = (3, 32, 32) if model == "resnet18" else (1, 8, 8)
    kwargs = TINY_VIT if model == "vit_t8" else {}
    dense = build_model(model, input_shape=shape, n_tasks=T, classes_per_task=2,
                        per_task_tokens=True, **kwargs).train(train)
    masked = SubnetworkNet(copy.deepcopy(dense), alpha=0.3).train(train)
    for task in (1, 4):
        masks = {name: torch.rand(s) < 0.3 for name, s in masked.shapes.items()}
        masks.update(masked.head_masks(task))
        masked.set_mask(task, MaskSet.from_bool(masks))
        masked.statistics[task] = masked.fresh_statistics()
    x = torch.randn(2, 2, 3, *shape)
    for net in (dense, masked):
        forward_groups(net, x, [4, 1]).sum().backward()
    fallbacks = [str(w.message) for w in recwarn if "performance drop" in str(w.message)]
    assert fallbacks == []
