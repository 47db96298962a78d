"""Everything a strategy keeps follows its device, also after a checkpoint is restored onto
another device than the one it was saved from. Without a second real device here, the
``meta`` device stands for the GPU: a strategy built for ``meta`` restores a CPU checkpoint
(and a checkpoint file loaded onto ``meta``), and no tensor of its state may stay behind."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import BUILT_IN_METHODS, FAST_CONFIG, seq

from pall_avalanche.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from pall_avalanche.masks import MaskSet
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs.build import build_run

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_retrain_iters": 2,
          "retrain_epochs": 1}
META = torch.device("meta")


def tensors(value, where="state"):
    """(where, tensor) of every tensor inside nested dicts, lists, tuples and sets."""
    if isinstance(value, torch.Tensor):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensors(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            yield from tensors(item, f"{where}[{i}]")


def trained(method: str, requests: str):
    built = build_run(method, CONFIG, seed=0, measured=False)
    for exp in RequestStream(built.benchmark, seq(requests)):
        built.strategy.train(exp)
    return built


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_a_restored_strategy_keeps_all_its_state_on_its_device(method):
    saved = trained(method, "L0 L1 U0 L2").strategy.checkpoint_state()
    restored = build_run(method, CONFIG, seed=0, device=META, measured=False).strategy
    restored.restore_checkpoint_state(saved)
    state = restored.checkpoint_state()
    elsewhere = [where for where, t in tensors(state) if t.device != META]
    assert not elsewhere, elsewhere[:5]
    assert {p.device for p in restored.model.parameters()} == {META}
    assert {b.device for b in restored.model.buffers()} <= {META}


def test_pall_resumed_from_a_file_on_another_device_builds_its_masks_there(tmp_path):
    # the ledger holds entries retrained while B^1 was in the loss (U0); unlearning task 1
    # next combines them with masks built after the resume: all on the strategy's device
    built = trained("pall", "L0 L1 L2 U0")
    assert built.strategy.ledger.events
    save_checkpoint(tmp_path / "run.pt", {"format": CHECKPOINT_FORMAT,
                                          "strategy": built.strategy.checkpoint_state()})
    loaded = load_checkpoint(tmp_path / "run.pt", META)           # as the runner resumes
    strategy = build_run("pall", CONFIG, seed=0, device=META, measured=False).strategy
    strategy.restore_checkpoint_state(loaded["strategy"])
    net = strategy.model
    for task in (1, 2):
        for entries in (strategy.forget_set(task), strategy.cascade_set(task),
                        strategy.redraw_set(task), net.cumulative_mask(strategy.active_tasks)):
            assert entries.device == META
            assert {p.device for p in entries.packed.values()} == {META}
    assert net.cumulative_mask([]).device == META                  # the empty set too


def test_a_subnetwork_network_takes_its_masks_and_statistics_along():
    net = trained("pall", "L0 L1").strategy.model
    net.statistics = {0: {"backbone.2.running_mean": torch.zeros(4)}}   # a norm layer's
    net.to(META)
    assert sorted(net.masks) == [0, 1]
    assert {m.device for m in net.masks.values()} == {META}
    assert all(t.device == META for s in net.statistics.values() for t in s.values())


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (9,), (3, 5), (4, 6, 2)])
def test_mask_sets_pack_as_numpy_packbits_on_their_own_device(shape):
    torch.manual_seed(sum(shape))
    bools = torch.rand(shape) < 0.3
    mask = MaskSet.from_bool({"w": bools})
    expected = np.packbits(bools.reshape(-1).numpy())
    assert mask.packed["w"].tolist() == expected.tolist()                # checkpoint bytes
    assert torch.equal(mask.to_bool("w"), bools)
    assert mask.complement().packed["w"].tolist() == np.packbits(
        (~bools).reshape(-1).numpy()).tolist()                           # padding bits clear
    assert MaskSet.full({"w": torch.Size(shape)}) == MaskSet.from_bool(
        {"w": torch.ones(shape, dtype=torch.bool)})
    assert mask.count() == int(bools.sum())
    on_meta = MaskSet.from_bool({"w": bools.to(META)})
    assert on_meta.device == META and on_meta.complement().device == META
    assert MaskSet.empty({"w": torch.Size(shape)}, META).device == META
    assert MaskSet.full({"w": torch.Size(shape)}, META).device == META
    assert (on_meta | MaskSet.empty({"w": torch.Size(shape)}, META)).device == META
