"""A fused Q/K/V projection is masked per slice: W_Q, W_K and W_V are three layers.

Every expected mask or count is computed here from its definition (torch.sort per slice,
hand-written share and pruning counts), never by the selection helpers under test.
"""

import pytest
import torch
from helpers import FAST_CONFIG, TINY_VIT, seq

from pall_avalanche.data import build_benchmark
from pall_avalanche.masks import HEAD, MaskSet, SubnetworkNet
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import build_strategy
from pall_avalanche.strategies.sparse import StaticSparse

T = 5
WIDTH = TINY_VIT["width"]                    # qkv weight: (3 * 24, 24) → slices of 576


def tiny_vit(**kwargs):
    return build_model("vit_t8", input_shape=(1, 8, 8), n_tasks=T, classes_per_task=2,
                       per_task_tokens=True, **{**TINY_VIT, **kwargs})


def vit_strategy(method: str):
    """(strategy, benchmark): ``method`` on the tiny ViT, one epoch on 20 digits per task,
    without the per-request evaluation (it would dominate the run time)."""
    config = {**FAST_CONFIG, "model": "vit_t8", "epochs": 1, "train_per_task": 20}
    torch.manual_seed(0)
    bm = build_benchmark("digits", seed=0, train_per_task=config["train_per_task"])
    net = build_model("vit_t8", input_shape=bm.split.input_shape, n_tasks=T,
                      classes_per_task=2, per_task_tokens=True, **TINY_VIT)
    return build_strategy(method, model=net, config=config), bm


def is_qkv(name: str) -> bool:
    return name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias")


def top_fraction(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """|s| >= the k-th smallest |s|, k = 1 + round((1 - alpha)(n - 1)), by a full sort."""
    flat = scores.detach().abs().reshape(-1)
    k = 1 + round((1.0 - alpha) * (flat.numel() - 1))
    return (flat >= torch.sort(flat).values[k - 1]).view(scores.shape)


def expected_mask(name: str, scores: torch.Tensor, alpha: float) -> torch.Tensor:
    """Q, K, V row blocks selected one by one for a qkv tensor; the whole tensor otherwise."""
    if not is_qkv(name):
        return top_fraction(scores, alpha)
    return torch.cat([top_fraction(block, alpha) for block in scores.chunk(3, dim=0)])


def per_slice(mask: torch.Tensor) -> list[int]:
    return [int(block.sum()) for block in mask.chunk(3, dim=0)]


def share(n: int, j: int) -> int:
    return n // T + (j < n % T)


def test_only_the_fused_qkv_projections_have_three_slices():
    net = SubnetworkNet(tiny_vit(), 0.3)
    sliced = sorted(name for name, s in net.slices.items() if s != 1)
    assert sliced == ["backbone.blocks.0.attn.qkv.weight", "backbone.blocks.1.attn.qkv.weight"]
    assert all(net.slices[name] == 3 for name in sliced)
    mlp = SubnetworkNet(build_model("mlp", input_shape=(1, 8, 8), n_tasks=T,
                                    classes_per_task=2), 0.3)
    assert set(mlp.slices.values()) == {1}
    with_bias = SubnetworkNet(tiny_vit(depth=1), 0.3)
    attn = with_bias.net.backbone.blocks[0].attn
    attn.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=True)
    slices = SubnetworkNet(with_bias.net, 0.3).slices
    assert slices["backbone.blocks.0.attn.qkv.bias"] == 3
    assert slices["backbone.blocks.0.attn.qkv.weight"] == 3


def test_training_forward_and_current_mask_take_top_k_per_qkv_slice():
    torch.manual_seed(0)
    alpha = 0.3
    net = SubnetworkNet(tiny_vit(), alpha)
    scores = net.start_learning(0)
    with torch.no_grad():           # the first row third of every tensor dominates: a
        for score in scores:        # whole-tensor top-30% would leave K and V empty
            score[: score.shape[0] // 3] *= 100.0
    net.train()
    masked = net.masked_parameters(0)
    stored = net.current_mask()
    x = torch.randn(4, 1, 8, 8)
    net(x, 0).square().sum().backward()
    for name, score in zip(net.scored_names(), scores, strict=True):
        expected = expected_mask(name, score, alpha)
        weight = net.weight(name)
        assert (weight != 0).all()
        assert torch.equal(masked[name] != 0, expected), name          # forward mask
        assert torch.equal(stored[name], expected), name               # stored mask
        assert (weight.grad[~expected] == 0).all(), name                # STE gradient mask
        if is_qkv(name):
            n = score.numel() // 3
            k_kept = n - round((1.0 - alpha) * (n - 1))        # 174 of 576 (no ties)
            assert per_slice(expected) == [k_kept] * 3
    assert torch.equal(stored[HEAD], net.head_masks(0)[HEAD])


def test_pall_stores_the_per_slice_top_k_of_its_final_scores():
    strategy, bm = vit_strategy("pall")
    net, alpha = strategy.model, FAST_CONFIG["alpha"]
    seen = {}
    masked_parameters, set_mask = net.masked_parameters, net.set_mask

    def recording_forward(task):
        out = masked_parameters(task)
        if net.training and task == net.learning_task and "first" not in seen:
            seen["first"] = ([s.detach().clone() for s in net.scores],
                             {n: (w != 0) for n, w in out.items()})
        return out

    def recording_set_mask(task, mask):
        seen["final"] = [s.detach().clone() for s in net.scores]
        set_mask(task, mask)

    net.masked_parameters, net.set_mask = recording_forward, recording_set_mask
    strategy.train(bm.train_stream[0])
    first_scores, first_masks = seen["first"]
    stored = net.masks[0].bools()
    names = net.scored_names()
    assert sum(map(is_qkv, names)) == TINY_VIT["depth"]
    for name, first, final in zip(names, first_scores, seen["final"], strict=True):
        assert torch.equal(first_masks[name], expected_mask(name, first, alpha)), name
        assert torch.equal(stored[name], expected_mask(name, final, alpha)), name


def test_dynamic_sparse_keeps_one_share_of_every_qkv_slice():
    strategy, bm = vit_strategy("dynamic_sparse")
    net = strategy.model
    for exp in RequestStream(bm, seq("L0 L1")):
        strategy.train(exp)
    m0, m1 = net.masks[0].bools(), net.masks[1].bools()
    for name in net.scored_names():
        assert not (m0[name] & m1[name]).any()
        n = m0[name].numel()
        if is_qkv(name):               # 576 per slice: shares 116, 115, 115, 115, 115
            assert per_slice(m0[name]) == [share(n // 3, 0)] * 3 == [116] * 3
            assert per_slice(m1[name]) == [share(n // 3, 1)] * 3 == [115] * 3
        else:
            assert (int(m0[name].sum()), int(m1[name].sum())) == (share(n, 0), share(n, 1))


def test_static_sparse_partitions_every_qkv_slice_and_keeps_mlp_draws():
    net = SubnetworkNet(tiny_vit(), 1.0)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    strategy = StaticSparse(model=net, optimizer=sgd)
    for name, owner in strategy.owner.items():
        n = owner.numel()
        for task in range(T):
            if is_qkv(name):
                assert per_slice(owner == task) == [share(n // 3, task)] * 3
            else:
                assert int((owner == task).sum()) == share(n, task)
    # a one-slice network draws exactly today's partition: one randperm per tensor
    mlp = SubnetworkNet(build_model("mlp", input_shape=(1, 8, 8), n_tasks=T,
                                    classes_per_task=2), 1.0)
    torch.manual_seed(3)
    owners = StaticSparse(model=mlp, optimizer=sgd).owner
    torch.manual_seed(3)
    for name in mlp.scored_names():
        shape = mlp.shapes[name]
        parts = torch.repeat_interleave(torch.arange(T, dtype=torch.int16), torch.tensor(
            [share(shape.numel(), j) for j in range(T)]))
        assert torch.equal(owners[name], parts[torch.randperm(shape.numel())].view(shape))


def test_packnet_prunes_every_qkv_slice_to_its_own_share():
    strategy, bm = vit_strategy("packnet")
    net = strategy.model
    with torch.no_grad():                  # W_Q dominates: a whole-tensor magnitude pruning
        for block in net.net.backbone.blocks:      # would keep W_Q entries only
            block.attn.qkv.weight[:WIDTH] *= 10.0
    for exp in RequestStream(bm, seq("L0 L1")):
        strategy.train(exp)
    m0, m1 = net.masks[0].bools(), net.masks[1].bools()
    for name in net.scored_names():
        own0, own1 = m0[name], m1[name] & ~m0[name]
        n = own0.numel()
        if is_qkv(name):
            free = n // 3                                  # 576 per slice
            assert per_slice(own0) == [round(free / 5)] * 3 == [115] * 3
            assert per_slice(own1) == [round((free - 115) / 4)] * 3 == [115] * 3
        else:
            assert int(own0.sum()) == round(n / 5)
            assert int(own1.sum()) == round((n - round(n / 5)) / 4)


@pytest.mark.parametrize("keep", [5, [1, 2], [1, 2, 3, 4]])
def test_a_sliced_restriction_needs_one_valid_count_per_slice(keep):
    net = SubnetworkNet(tiny_vit(depth=1), 0.3)
    everything = MaskSet.full(net.shapes)
    counts = {name: 1 for name in net.scored_names()}
    counts["backbone.blocks.0.attn.qkv.weight"] = keep
    with pytest.raises(ValueError, match="one count per slice"):
        net.start_learning(0, eligible=everything, keep=counts)
    counts["backbone.blocks.0.attn.qkv.weight"] = [1, 577, 1]
    with pytest.raises(ValueError, match=r"invalid \(slice 1 of 3\): .* the 576 eligible"):
        net.start_learning(0, eligible=everything, keep=counts)


def test_the_learning_tasks_tokens_get_the_optimizers_weight_decay_by_hand():
    # one request of one SGD step: tokens move by -lr · (g + weight_decay · w), g the raw
    # gradient (captured by a tensor hook, before any decay); the other tasks' tokens stay
    strategy, bm = vit_strategy("pall")
    strategy.train_mb_size = 20                               # one step per epoch
    net = strategy.model.net
    tokens = net.task_parameters(0)
    before = [p.detach().clone() for p in tokens]
    others = [p.detach().clone() for p in net.task_parameters(1)]
    raw: dict[int, torch.Tensor] = {}
    handles = [p.register_hook(lambda g, i=i: raw.setdefault(i, g.detach().clone()))
               for i, p in enumerate(tokens)]
    strategy.train(bm.train_stream[0])
    for handle in handles:
        handle.remove()
    lr, decay = FAST_CONFIG["lr"], FAST_CONFIG["weight_decay"]
    assert sorted(raw) == list(range(len(tokens))) and all(g.abs().sum() > 0
                                                           for g in raw.values())
    for i, (p, w) in enumerate(zip(tokens, before, strict=True)):
        g = raw[i]
        assert torch.allclose(p.detach(), w - lr * (g + decay * w), rtol=0, atol=1e-8)
        if w.any():                                         # (the CLS token starts at 0)
            assert not torch.equal(p.detach(), w - lr * g)  # the decay did act
    assert all(torch.equal(p.detach(), w) for p, w in zip(net.task_parameters(1), others,
                                                          strict=True))
