"""``compile=True``: the backbone runs through ``torch.compile`` (its default backend, as a GPU
user gets it, here on CPU) and training gives the eager parameters to float tolerance, masked
forward included, with no graph break."""

from __future__ import annotations

import pytest
import torch
from avalanche.models import MTSimpleMLP
from helpers import TINY_VIT, make_strategy

from pall_avalanche.models import backbones
from pall_avalanche.strategies import METHODS


def train_both(method: str) -> tuple[dict, dict, object]:
    """The state after L0 L1 of ``method`` trained eagerly and compiled, from one seed."""
    states = {}
    for compiled in (False, True):
        strategy, bm, _ = make_strategy(method, measured=False, epochs=1, train_per_task=64,
                                        mask_threshold="topk", compile=compiled)
        strategy.train([bm.train_stream[0], bm.train_stream[1]])
        states[compiled] = {k: v.detach().clone() for k, v in strategy.model.state_dict().items()
                            if torch.is_tensor(v)}
    return states[False], states[True], strategy


@pytest.mark.parametrize("method", ["pall", pytest.param("sequential", marks=pytest.mark.slow),
                                    pytest.param("independent", marks=pytest.mark.slow)])
def test_compiled_and_eager_training_agree(method):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager, compiled, strategy = train_both(method)
    assert all(getattr(m, "_compiled_call_impl", None) is not None
               for m in backbones(strategy.model))
    assert not torch._dynamo.utils.counters["graph_break"]      # the whole backbone compiled
    assert eager.keys() == compiled.keys()
    for name, value in eager.items():
        if value.is_floating_point():
            assert torch.allclose(compiled[name], value, rtol=1e-4, atol=1e-6), name
        else:                                                    # masks, counters
            assert torch.equal(compiled[name], value), name


def test_a_model_without_a_backbone_is_refused_in_one_line():
    model = MTSimpleMLP(input_size=64, hidden_size=16)
    with pytest.raises(ValueError, match="compile=True: model .* has no module named "
                                         "'backbone'"):
        METHODS["sequential"].strategy(model=model, optimizer=torch.optim.SGD(
            model.parameters(), lr=0.1), n_tasks=5, compile=True)


@pytest.mark.slow
def test_a_task_aware_backbone_compiles_once_for_every_task():
    """The ViT picks its per-task tokens by the task label: its blocks are compiled, not the
    token choice, so a later task reuses the graphs instead of recompiling."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    strategy, bm, _ = make_strategy("pall", measured=False, model="vit_t8", epochs=1,
                                    train_per_task=32, mask_threshold="topk", compile=True,
                                    model_kwargs=TINY_VIT)
    strategy.train(bm.train_stream[0])
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs > 0
    strategy.train([bm.train_stream[1], bm.train_stream[2]])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
