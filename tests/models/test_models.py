"""The paper's models: parameter counts, per-task ViT tokens, model size from real models and
stored masks, and mask checkpoints that are as small as the paper's accounting says."""

import pytest
import torch
from helpers import FAST_CONFIG, TINY_VIT
from torch import nn

from pall_avalanche.evaluation import model_size_mb
from pall_avalanche.masks import MaskSet, SubnetworkNet
from pall_avalanche.models import build_model, count_parameters
from pall_avalanche.strategies import PALL, Independent, make_optimizer


@pytest.mark.parametrize("name, shape, n_tasks, cpt, expected", [
    ("resnet18", (3, 32, 32), 5, 2, 11_164_352),
    ("resnet34", (3, 32, 32), 10, 10, 21_311_168),
    ("vit_t8", (3, 64, 64), 20, 10, 5_408_064),
])
def test_dense_parameter_counts(name, shape, n_tasks, cpt, expected):
    net = build_model(name, input_shape=shape, n_tasks=n_tasks, classes_per_task=cpt)
    assert count_parameters(net) == expected


def test_normalisation_carries_nothing_across_tasks():
    """BatchNorm (ResNets) and LayerNorm (ViT) have no affine parameters and no running
    statistics: nothing a task trains can reach another task through normalisation."""
    for name, shape in (("resnet18", (3, 32, 32)), ("vit_t8", (3, 64, 64))):
        net = build_model(name, input_shape=shape, n_tasks=5, classes_per_task=2)
        norms = [m for m in net.modules() if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm))]
        assert norms and list(net.buffers()) == []
        assert not any(getattr(m, "affine", False) or getattr(m, "elementwise_affine", False)
                       or getattr(m, "track_running_stats", False) for m in norms)


def test_vit_per_task_tokens_and_maskable_entries():
    net = build_model("vit_t8", input_shape=(3, 64, 64), n_tasks=20, classes_per_task=10,
                      per_task_tokens=True)
    # 12,672 parameters per task: CLS (192) + positional embedding (65 x 192).
    assert [p.numel() for p in net.task_parameters(7)] == [192, 65 * 192]
    assert count_parameters(net) == 5_408_064 + 19 * 12_672 == 5_648_832
    # Tokens are not masked: the patch convolution, the blocks' Linear layers and the head are.
    assert MaskSet.empty(SubnetworkNet(net, 0.05).shapes).n_entries() == 5_395_392
    dense = build_model("vit_t8", input_shape=(3, 64, 64), n_tasks=20, classes_per_task=10)
    assert dense.task_parameters(7) == []
    # Per-task tokens in a CNN are a no-op.
    assert count_parameters(build_model("resnet18", input_shape=(3, 32, 32), n_tasks=5,
                                        classes_per_task=2, per_task_tokens=True)) == 11_164_352


def test_vit_routes_each_sample_to_its_tasks_tokens():
    torch.manual_seed(0)
    net = build_model("vit_t8", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2,
                      per_task_tokens=True, **TINY_VIT).eval()
    x = torch.randn(4, 1, 8, 8)
    labels = torch.tensor([0, 3, 3, 1])
    mixed = net(x, labels)
    for i, task in enumerate(labels.tolist()):
        torch.testing.assert_close(mixed[i], net(x[i:i + 1], task)[0])
    assert not torch.equal(net(x, 0), net(x, 3))


def _with_random_masks(net, n_masks: int, alpha: float) -> PALL:
    strategy = PALL(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                    alpha=alpha, buffer_size=10 * net.n_tasks * net.classes_per_task)
    subnet = strategy.model
    for task in range(n_masks):
        masks = {name: torch.rand(shape) < alpha for name, shape in subnet.shapes.items()}
        masks.update(subnet.head_masks(task))
        subnet.set_mask(task, MaskSet.from_bool(masks))
    return strategy


@pytest.mark.parametrize("name, shape, n_tasks, cpt, n_masks, alpha, expected", [
    ("resnet18", (3, 32, 32), 5, 2, 5, 0.1, 49.24),
    ("resnet34", (3, 32, 32), 10, 10, 10, 0.2, 106.70),
    ("vit_t8", (3, 64, 64), 20, 10, 20, 0.05, 34.41),
])
def test_model_size_from_real_model_and_stored_masks(tmp_path, name, shape, n_tasks, cpt,
                                                      n_masks, alpha, expected):
    net = build_model(name, input_shape=shape, n_tasks=n_tasks, classes_per_task=cpt,
                      per_task_tokens=PALL.per_task_tokens)
    strategy = _with_random_masks(net, n_masks, alpha)
    assert round(model_size_mb(*strategy.inference_size()), 2) == expected
    # The paper's size is the most the method can reach, |Ω| = T: d floats + T bits per
    # maskable entry, whatever number of masks is stored now.
    d = count_parameters(strategy.model.net)
    entries = MaskSet.empty(strategy.model.shapes).n_entries()
    assert strategy.inference_size(n_tasks) == (d, n_tasks * entries)
    assert _with_random_masks(net, 2, alpha).inference_size(n_tasks) == (d, n_tasks * entries)
    assert strategy.inference_size(3) == (d, 3 * entries)
    # A checkpoint of the masks holds 1 bit per maskable entry per task, plus the file
    # format's headers (well under 1 KiB per task).
    path = tmp_path / "masks.pt"
    torch.save(strategy.model.mask_state_dict(), path)
    mask_bytes = strategy.inference_size()[1] / 8
    assert mask_bytes <= path.stat().st_size <= mask_bytes + 1024 * n_masks
    restored = SubnetworkNet(build_model(name, input_shape=shape, n_tasks=n_tasks,
                                         classes_per_task=cpt), alpha)
    restored.load_mask_state_dict(torch.load(path, weights_only=True))
    assert all(restored.masks[t] == strategy.model.masks[t] for t in range(n_masks))


def test_independent_size_is_one_model_per_active_task():
    net = build_model("resnet18", input_shape=(3, 32, 32), n_tasks=5, classes_per_task=2)
    strategy = Independent(model=net, optimizer=make_optimizer(FAST_CONFIG, net.parameters()))
    # |Ω| = T = 5 copies before any task is learned: T × the per-copy count.
    assert strategy.inference_size() == (0, 0)
    assert strategy.inference_size(5) == (5 * 11_164_352, 0)
    for task in range(5):
        strategy.model.add_task(task)
    # The paper prints 212.95 = 5 x 42.59 (rounded before multiplying); exactly 212.943.
    assert model_size_mb(*strategy.inference_size()) == pytest.approx(212.95, abs=0.01)
    assert strategy.inference_size() == strategy.inference_size(5)
