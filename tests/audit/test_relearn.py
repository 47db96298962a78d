"""The relearning attack's fine-tuning (pall_avalanche.audit.relearn): the run's model is never
changed, the head-only attack moves t's head rows alone, and the curves are t's accuracies
counted by hand."""

from __future__ import annotations

import pytest
import torch
from helpers import make_strategy, seq

from pall_avalanche.audit.relearn import fine_tune, head_rows, relearning_curves
from pall_avalanche.requests.streams import RequestStream


def _trained(method: str):
    strategy, bm, _ = make_strategy(method, epochs=2, measured=False)
    for exp in RequestStream(bm, seq("L0 L1 U1")):
        strategy.train(exp)
    return strategy, bm


def _parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _by_hand(model, data, task: int) -> float:
    model.eval()
    with torch.no_grad():
        hits = [int(model(data[i][0][None], task).argmax()) == int(data[i][1])
                for i in range(len(data))]
    return 100 * sum(hits) / len(hits)


def test_head_only_fine_tuning_moves_only_the_tasks_head_rows():
    strategy, bm = _trained("sequential")
    model, before = strategy.model, _parameters(strategy.model)
    data = bm.train_stream[1].dataset.eval()
    x = torch.stack([data[i][0] for i in range(10)])
    y = torch.tensor([int(data[i][1]) for i in range(10)])
    test = bm.test_stream[1].dataset.eval()
    x_test = torch.stack([test[i][0] for i in range(len(test))])
    y_test = torch.tensor([int(test[i][1]) for i in range(len(test))])
    rows = head_rows(model, 1)
    features = model.head.in_features
    assert list(rows) == ["head.weight"] and int(rows["head.weight"].sum()) == 2 * features
    assert rows["head.weight"][2:4].all()                # task 1's block: rows 2 and 3
    tuned, curve = fine_tune(model, x, y, 1, rows, lr=0.5, steps=3, test=(x_test, y_test))
    after = dict(tuned.named_parameters())
    for name, value in before.items():               # the run's model is untouched
        assert torch.equal(dict(model.named_parameters())[name], value), name
        if name in after:
            changed = after[name].detach() != value
            allowed = rows.get(name, torch.zeros_like(changed))
            assert not (changed & ~allowed).any(), name
    assert (after["head.weight"].detach() != before["head.weight"])[rows["head.weight"]].any()
    assert len(curve) == 4 and curve[0] == pytest.approx(_by_hand(model, test, 1), abs=1e-4)
    assert curve[-1] == pytest.approx(_by_hand(tuned, test, 1), abs=1e-4)


def test_relearning_curves_of_every_attack():
    strategy, bm = _trained("pall")
    before = _parameters(strategy.model)
    curves = relearning_curves(strategy.model, bm.train_stream[1].dataset,
                               bm.test_stream[1].dataset, 1, shots=(3,), steps=4)
    assert sorted(curves) == ["k3_all", "k3_head"]
    test = bm.test_stream[1].dataset.eval()
    for curve in curves.values():                    # before any step: the model as it is
        assert len(curve) == 5 and curve[0] == pytest.approx(
            _by_hand(strategy.model, test, 1), abs=1e-4)
    for name, value in before.items():
        assert torch.equal(dict(strategy.model.named_parameters())[name], value), name


def test_a_model_whose_heads_are_generated_is_attacked_through_all_its_parameters():
    # UnCLe's heads are the hypernetwork's output, not parameters: no head-only attack, the
    # every-parameter attack fine-tunes the hypernetwork and embeddings
    strategy, bm = _trained("uncle")
    assert head_rows(strategy.model, 1) == {}
    assert head_rows(make_strategy("pall", measured=False)[0].model, 1)
    curves = relearning_curves(strategy.model, bm.train_stream[1].dataset,
                               bm.test_stream[1].dataset, 1, shots=(2,), steps=2)
    assert sorted(curves) == ["k2_all"] and len(curves["k2_all"]) == 3
