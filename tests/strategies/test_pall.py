"""PALL's exactness, entry by entry, on real training (digits MLP and a small conv net)."""

import pytest
import torch
from helpers import (
    TINY_VIT,
    BufferDraws,
    make_strategy,
    predictions,
    seeded_redraw,
    seq,
    snapshot,
    spy_before,
)

from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.masks import MaskSet
from pall_avalanche.requests.streams import RequestStream

PALL = {"alpha": 0.3, "n_retrain_iters": 10, "beta": 0.5, "buffer_size": 50}


def weights(strategy) -> dict[str, torch.Tensor]:
    return {n: w.detach().clone() for n, w in strategy.model.named_weights()}


def changed(before, after) -> MaskSet:
    return MaskSet.from_bool({n: before[n] != after[n] for n in before})


def pall(model="mlp", **overrides):
    return make_strategy("pall", model=model, **{**PALL, **overrides})


@pytest.mark.parametrize("model, amp", [("mlp", None), ("cnn", None), ("cnn", "bf16")])
def test_learning_never_moves_entries_of_learned_tasks(model, amp):
    strategy, bm, evaluation = pall(model, amp=amp, channels_last=amp is not None)
    dtypes = []
    strategy.model.net.backbone[0].register_forward_hook(
        lambda _m, _i, out: dtypes.append(out.dtype) if torch.is_grad_enabled() else None)
    requests = seq("L0 L1 L2")
    stream = RequestStream(bm, requests)
    strategy.train(stream[0])
    logits0 = predictions(strategy.model, bm, 0)
    for exp in stream[1:]:
        frozen = strategy.model.cumulative_mask(strategy.active_tasks)
        before = weights(strategy)
        strategy.train(exp)
        moved = changed(before, weights(strategy))
        assert (moved & frozen).count() == 0            # bit-identical frozen entries
        assert moved.count() > 0
    assert torch.equal(predictions(strategy.model, bm, 0), logits0)
    assert compute_metrics(evaluation.accuracy, requests)["F_l"] == 0.0
    # the training forward passes ran in the precision asked for
    assert set(dtypes) == {torch.bfloat16 if amp else torch.float32}


def test_learning_redraws_everything_outside_the_masks():
    strategy, bm, _ = pall()
    seen = spy_before(strategy.resetting, "after_training_exp", strategy)
    strategy.train(bm.train_stream[0])
    mask = strategy.model.masks[0]
    after = weights(strategy)
    # outside m_0 exactly the seeded re-draw from φ; inside it the trained values, bit for bit
    expected = seeded_redraw(seen["rng"], seen["weights"], mask.complement())
    for name, value in after.items():
        assert torch.equal(value, expected[name]), name
    assert changed(seen["weights"], after) == mask.complement()
    # the stored mask keeps a fraction alpha of every scored tensor, and task 0's head rows
    for name, m in mask.bools().items():
        if name == "head.weight":
            assert m[0:2].all() and not m[2:].any()
        else:
            n = m.numel()
            assert int(m.sum()) == n - round((1 - PALL["alpha"]) * (n - 1))


@pytest.mark.parametrize("model, amp", [("mlp", None), ("cnn", None), ("cnn", "bf16")])
def test_unlearning_redraws_exactly_the_forget_set_and_retrains_only_theta_bar(model, amp):
    strategy, bm, _ = pall(model, amp=amp)
    stream = RequestStream(bm, seq("L0 L1 L2 U0"))
    for exp in stream[:3]:
        strategy.train(exp)
    net = strategy.model
    m0 = net.masks[0]
    forget = m0                                        # task 0 was first: P is empty
    theta_bar = m0 & net.cumulative_mask([1, 2])
    assert theta_bar.count() > 0, "tasks 1 and 2 must reuse some of task 0's entries"
    seen = {}
    original_retrain = strategy.retrain

    def recording_retrain(entries, tasks):
        seen["redrawn"] = weights(strategy)
        seen["entries"], seen["tasks"] = entries, list(tasks)
        original_retrain(entries, tasks)

    strategy.retrain = recording_retrain
    start = spy_before(strategy, "_unlearn", strategy)
    before = weights(strategy)
    strategy.train(stream[3])
    after = weights(strategy)
    assert changed(before, after) == forget            # every entry of m̄_0 moved, no other
    # before retraining: m̄_0 is exactly the seeded re-draw from φ, the rest bit-identical
    expected = seeded_redraw(start["rng"], start["weights"], forget)
    for name, value in seen["redrawn"].items():
        assert torch.equal(value, expected[name]), name
    assert seen["entries"] == theta_bar and seen["tasks"] == [1, 2]
    assert changed(seen["redrawn"], after) == theta_bar   # retraining moved exactly θ̄
    assert 0 not in strategy.memory.buffers and 0 not in net.masks
    assert all(0 not in tasks for _, tasks in strategy.ledger.events)
    # Table A2's two distances, by hand: from the re-drawn values (the paper's) and from the
    # values before unlearning
    bools = theta_bar.bools()
    n = theta_bar.count()
    by_hand = {key: sum(float((after[name] - start[name])[bools[name]].abs().sum())
                        for name in after) / n
               for key, start in (("retrained_mean_abs_change", seen["redrawn"]),
                                  ("retrained_mean_abs_change_from_learned", before))}
    stats = strategy.request_statistics()
    assert stats["retrained"] == n
    for key, value in by_hand.items():
        assert stats[key] == pytest.approx(value, rel=1e-6), key
    assert by_hand["retrained_mean_abs_change"] != pytest.approx(
        by_hand["retrained_mean_abs_change_from_learned"], rel=1e-3)


def test_unlearning_the_latest_task_leaves_other_predictions_unchanged():
    strategy, bm, _ = pall()
    stream = RequestStream(bm, seq("L0 L1 L2 U2"))
    for exp in stream[:3]:
        strategy.train(exp)
    logits = {t: predictions(strategy.model, bm, t) for t in (0, 1)}
    calls = []
    strategy.retrain = lambda *args: calls.append(args)
    strategy.train(stream[3])
    assert calls == []                                 # nothing to retrain
    for t in (0, 1):
        assert torch.equal(predictions(strategy.model, bm, t), logits[t])


def test_second_unlearning_resets_own_entries_and_leaked_retrained_entries():
    strategy, bm, _ = pall()
    stream = RequestStream(bm, seq("L0 L1 L2 L3 U0 U2"))
    for exp in stream[:4]:
        strategy.train(exp)
    net = strategy.model
    m1, m2 = net.masks[1], net.masks[2]
    strategy.train(stream[4])                          # unlearn 0: retrains θ̄_1 with B^1..B^3
    (theta_bar_1, tasks_1), = strategy.ledger.events
    assert tasks_1 == {1, 2, 3}
    expected = (m2 - m1) | (m2 & m1 & theta_bar_1)
    assert (m2 & m1 & theta_bar_1).count() > 0, "the leak channel must be exercised"
    before = weights(strategy)
    strategy.train(stream[5])                          # unlearn 2
    assert changed(before, weights(strategy)) == expected


def test_with_no_retraining_the_redrawn_shared_entries_are_still_booked():
    # N_f = 0 (Table A1's first row): θ̄ is re-drawn, not retrained, and booked as retrained
    # with the remaining buffers all the same, as the paper's reference does
    strategy, bm, _ = pall(n_retrain_iters=0)
    stream = RequestStream(bm, seq("L0 L1 L2 L3 U0 U2"))
    for exp in stream[:4]:
        strategy.train(exp)
    m0, m1, m2, m3 = (strategy.model.masks[t] for t in range(4))
    strategy.train(stream[4])                          # unlearn 0: nothing retrained
    (booked, tasks), = strategy.ledger.events
    assert tasks == {1, 2, 3}
    assert booked == m0 & (m1 | m2 | m3)               # m̄_0 (no earlier task) ∩ M_remaining
    expected = (m2 - m1) | (m2 & m1 & booked)
    assert (m2 & m1 & booked).count() > 0, "the booked entries must matter"
    before = weights(strategy)
    strategy.train(stream[5])                          # unlearn 2 re-draws the booked ones
    assert changed(before, weights(strategy)) == expected


def test_unlearned_tasks_are_at_chance_and_model_size_counts_masks():
    strategy, bm, evaluation = pall(epochs=3)
    requests = seq("L0 L1 L2 U1 L3 U0 L4 U3")
    for exp in RequestStream(bm, requests):
        strategy.train(exp)
    metrics = compute_metrics(evaluation.accuracy, requests)
    assert metrics["F_l"] == 0.0
    assert abs(metrics["A_u"] - 50.0) < 20.0
    assert metrics["A_l"] > 65.0                       # well above chance (50)
    floats, bits = strategy.inference_size()
    n = sum(p.numel() for p in strategy.model.net.parameters())
    assert floats == n and bits == 2 * n               # two masks remain (tasks 2 and 4)
    assert len(evaluation.unlearning_statistics()) == 3


def test_bad_hyper_parameters_fail_clearly():
    with pytest.raises(ValueError, match=r"alpha=1.5 must be in \(0, 1\]"):
        pall(alpha=1.5)
    with pytest.raises(ValueError, match=r"buffer_size=5 gives 1 samples per task .* >= 10"):
        pall(buffer_size=5)


@pytest.mark.parametrize("retrain_tokens", [True, False])
def test_pall_trains_own_tokens_freezes_others_and_redraws_them_on_unlearning(retrain_tokens):
    strategy, bm, _ = pall("vit_t8", epochs=1, model_kwargs=TINY_VIT,
                           retrain_tokens=retrain_tokens)
    net = strategy.model.net
    stream = list(RequestStream(bm, seq("L0 L1 U0")))
    initial = snapshot(net.backbone)
    strategy.train(stream[0])
    after_0 = snapshot(net.backbone)
    for key in ("cls_tokens.0", "pos_embeds.0"):
        assert not torch.equal(after_0[key], initial[key])         # task 0 trained its own
    for key in ("cls_tokens.1", "pos_embeds.1", "cls_tokens.4"):
        assert torch.equal(after_0[key], initial[key])             # nobody else's
    strategy.train(stream[1])
    after_1 = snapshot(net.backbone)
    assert torch.equal(after_1["cls_tokens.0"], after_0["cls_tokens.0"])
    assert not torch.equal(after_1["cls_tokens.1"], after_0["cls_tokens.1"])
    strategy.train(stream[2])                                      # unlearn 0
    after_u = snapshot(net.backbone)
    assert strategy.request_statistics()["retrained"] > 0          # task 1 retrained
    assert (after_u["pos_embeds.0"] != after_1["pos_embeds.0"]).all()
    assert (after_1["cls_tokens.0"] != 0).all() and (after_u["cls_tokens.0"] == 0).all()
    # the remaining task's tokens train with the retraining (the reference), or stay frozen
    for key in ("cls_tokens.1", "pos_embeds.1"):
        assert torch.equal(after_u[key], after_1[key]) != retrain_tokens, key
    for key in ("cls_tokens.2", "pos_embeds.4"):                   # no other task's
        assert torch.equal(after_u[key], after_1[key]), key


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_retraining_loss_and_gradient_equal_one_mini_batch_at_a_time(model, monkeypatch):
    """One retraining step's objective, all remaining tasks in one batched pass, against the
    same draws run one mini-batch at a time through each task's subnetwork (β·MSE on the
    first mini-batch of B^τ, CE on the second, the mean over the tasks): equal within float32
    reduction order (rtol 1e-5), the loss and the gradient of every weight."""
    strategy, bm, _ = pall(model, epochs=1)
    for exp in RequestStream(bm, seq("L0 L1 L2 L3")):
        strategy.train(exp)
    net, tasks = strategy.model, [0, 1, 3]
    net.train()
    draws = BufferDraws(monkeypatch)
    with net.stacked(tasks):
        loss = strategy.replay.replay_loss(strategy, tasks, 10)
    grad = torch.autograd.grad(loss, [w for _, w in net.named_weights()])
    assert sorted((t, j) for t, j, _ in draws.draws) == [(t, j) for t in tasks for j in (0, 1)]
    expected = 0.0
    for task, j, index in draws.draws:
        x, y, z = strategy.memory.buffers[task]
        logits = net(x[index], task)
        expected = expected + (0.5 * torch.nn.functional.mse_loss(logits, z[index]) if j == 0
                               else torch.nn.functional.cross_entropy(logits, y[index]))
    expected = expected / len(tasks)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for got, want in zip(grad, torch.autograd.grad(expected, [w for _, w in net.named_weights()]),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("amp, dtype", [(None, torch.float32), ("bf16", torch.bfloat16)])
def test_retraining_runs_its_forward_passes_under_the_strategys_autocast(amp, dtype,
                                                                          monkeypatch):
    from pall_avalanche.rehearsal import objective

    seen = []
    real = objective.forward_groups

    def recording(net, x, tasks):
        out = real(net, x, tasks)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(objective, "forward_groups", recording)
    strategy, bm, _ = pall("cnn", amp=amp, epochs=1, n_retrain_iters=3)
    for exp in RequestStream(bm, seq("L0 L1 L2 U1")):
        strategy.train(exp)
    assert seen == [dtype] * 3
