"""PackNet, WSN, Static and Dynamic sparse (Ind.): real training on digits, entry by entry."""

import pytest
import torch
from helpers import make_strategy, predictions, seeded_redraw, seq, spy_before

from pall_avalanche.catalog import Method
from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.masks import HEAD, MaskSet, SubnetworkNet, restricted_topk_mask
from pall_avalanche.models import build_model
from pall_avalanche.requests.streams import RequestStream, UnlearnExperience
from pall_avalanche.strategies import METHODS, PALL, WSN, register_method
from pall_avalanche.strategies.sparse import share_sizes

# the digits MLP: 64 → 256 → 256, then the 10-row head; shares of T = 5 (hand-computed)
SHARES = {
    "backbone.1.weight": [3277, 3277, 3277, 3277, 3276],     # 16384 = 5·3276 + 4
    "backbone.1.bias": [52, 51, 51, 51, 51],                  # 256 = 5·51 + 1
    "backbone.3.weight": [13108, 13107, 13107, 13107, 13107],  # 65536 = 5·13107 + 1
    "backbone.3.bias": [52, 51, 51, 51, 51],
}


def weights(strategy) -> dict[str, torch.Tensor]:
    return {n: w.detach().clone() for n, w in strategy.model.named_weights()}


def changed(before, after) -> MaskSet:
    return MaskSet.from_bool({n: before[n] != after[n] for n in before})


def counts(mask: MaskSet) -> dict[str, int]:
    return {n: int(b.sum()) for n, b in mask.bools().items() if n != HEAD}


def test_registry_entries():
    expected = {"packnet": ("PackNet", False, ("mask_threshold",)),
                "wsn": ("WSN", False, ("alpha", "mask_threshold")),
                "static_sparse": ("Static sparse (Ind.)", True, ("mask_threshold",)),
                "dynamic_sparse": ("Dynamic sparse (Ind.)", True, ("mask_threshold",))}
    for name, (label, exact, keys) in expected.items():
        spec = METHODS[name]
        assert (spec.label, spec.exact, tuple(spec.keys)) == (label, exact, keys)
        assert spec.strategy.per_task_tokens


@pytest.mark.parametrize("method", ["packnet", "wsn", "static_sparse", "dynamic_sparse"])
def test_request_sequence_no_forgetting_and_unlearning(method):
    # WSN starts every task after the first from the scores the previous one ended with: its
    # masks begin on frozen entries and need more than 2 short epochs to move
    strategy, bm, evaluation = make_strategy(method, epochs=4 if method == "wsn" else 2)
    net = strategy.model
    unlearning = spy_before(strategy, "_unlearn", strategy)
    if method == "dynamic_sparse":
        storing = spy_before(strategy.resetting, "after_training_exp", strategy)
    requests = seq("L0 L1 L2 U1 L3")
    for exp in RequestStream(bm, requests):
        logits = {t: predictions(net, bm, t) for t in strategy.active_tasks}
        masks = dict(net.masks)
        before = weights(strategy)
        strategy.train(exp)
        after = weights(strategy)
        moved = changed(before, after)
        if isinstance(exp, UnlearnExperience):
            task = exp.task_label
            assert task not in net.masks
            if method in ("packnet", "wsn"):            # the mask goes, no parameter moves
                assert moved.count() == 0
            else:                                       # exactly the task's entries re-drawn
                assert moved == masks[task]
                expected = seeded_redraw(unlearning["rng"], unlearning["weights"], masks[task])
                for name, value in after.items():
                    assert torch.equal(value, expected[name]), name
        else:
            assert (moved & MaskSet.union(masks.values(), net.shapes)).count() == 0
            assert moved.count() > 0
            if method == "static_sparse":               # only its own part trains
                assert (moved - strategy.part(exp.task_label)).count() == 0
            if method == "dynamic_sparse":              # every unused entry is re-drawn
                unused = net.cumulative_mask(strategy.active_tasks).complement()
                expected = seeded_redraw(storing["rng"], storing["weights"], unused)
                for name, value in after.items():
                    assert torch.equal(value, expected[name]), name
        assert {t: net.masks[t] for t in masks if t in net.masks} == {
            t: m for t, m in masks.items() if t in net.masks}
        for task, old in logits.items():                # F_l = F_u = 0, bit for bit
            if task in strategy.active_tasks:
                assert torch.equal(predictions(net, bm, task), old)

    metrics = compute_metrics(evaluation.accuracy, requests)
    assert len(evaluation.accuracy) == 5 and len(evaluation.timings) == 5
    assert metrics["F_l"] == 0.0 and metrics["F_u"] == 0.0 and metrics["F_u_max"] == 0.0
    assert metrics["A_l"] > 75.0 and metrics["A_u"] is not None
    n_params = sum(p.numel() for p in net.net.parameters())
    assert strategy.inference_size() == (n_params, n_params * 3)   # masks of 0, 2, 3

    if method in ("static_sparse", "dynamic_sparse"):
        tasks = [0, 2, 3]
        for i, a in enumerate(tasks):
            for b in tasks[i + 1:]:
                assert (net.masks[a] & net.masks[b]).count() == 0
        # static: share t by task id; dynamic: share j of the j-th learning request (0, 1, 2, 3)
        for task in tasks:
            assert counts(net.masks[task]) == {n: s[task] for n, s in SHARES.items()}


def test_packnet_prunes_to_the_task_share_and_frees_the_pruned_weights():
    strategy, bm, _ = make_strategy("packnet", epochs=2)
    net = strategy.model
    pruned_state = {}
    original_prune = strategy.prune

    def recording_prune():
        original_prune()
        pruned_state[strategy.experience.task_label] = weights(strategy)

    strategy.prune = recording_prune
    strategy.train(bm.train_stream[0])
    strategy.train(bm.train_stream[1])
    m0, m1 = net.masks[0], net.masks[1]
    own0, own1 = counts(m0), counts(m1 - m0)
    # task 0 keeps round(n / 5) of every tensor, task 1 round((n - kept_0) / 4)
    assert own0 == {"backbone.1.weight": 3277, "backbone.1.bias": 51,
                    "backbone.3.weight": 13107, "backbone.3.bias": 51}
    assert own1 == {"backbone.1.weight": 3277, "backbone.1.bias": 51,
                    "backbone.3.weight": 13107, "backbone.3.bias": 51}
    m0_bools, m1_bools = m0.bools(), m1.bools()
    assert m0_bools[HEAD][0:2].all() and not m0_bools[HEAD][2:].any()
    assert m1_bools[HEAD][2:4].all() and not m1_bools[HEAD][[0, 1, *range(4, 10)]].any()
    after_prune_0 = pruned_state[0]
    for name, keep in m0_bools.items():
        if name != HEAD:
            assert (after_prune_0[name][~keep] == 0).all()          # pruned = zero...
            assert (m1_bools[name] | ~keep).all()                    # m_1 ⊇ m_0
    # ...and free: task 1's own entries are task 0's pruned ones, trained to non-zero values
    final = weights(strategy)
    for name, own in (m1 - m0).bools().items():
        if name != HEAD:
            assert (after_prune_0[name][own] == 0).all() and (final[name][own] != 0).all()
    # fine-tuning after the pruning moved only task 1's kept entries
    moved = changed(pruned_state[1], final)
    assert moved.count() > 0 and (moved - (m1 - m0)).count() == 0


def test_share_sizes_and_restricted_selection():
    assert share_sizes(16384, 5) == SHARES["backbone.1.weight"]
    assert share_sizes(3, 5) == [1, 1, 1, 0, 0] and sum(share_sizes(257, 10)) == 257
    scores = torch.tensor([0.5, -0.9, 0.1, 0.7, -0.3])
    eligible = torch.tensor([True, False, True, True, True])
    assert restricted_topk_mask(scores, eligible, 2).tolist() == [True, False, False, True,
                                                                  False]
    assert not restricted_topk_mask(scores, eligible, 0).any()


def test_bad_restriction_fails_clearly():
    net = SubnetworkNet(build_model("mlp", input_shape=(1, 8, 8), n_tasks=5,
                                    classes_per_task=2), 0.2)
    nothing = MaskSet.empty(net.shapes)
    keep = {name: 1 for name in net.scored_names()}
    with pytest.raises(ValueError, match=r"keep\['backbone.1.weight'\]=1 is invalid: .* the 0 "
                                         "eligible entries"):
        net.start_learning(0, eligible=nothing, keep=keep)
    with pytest.raises(ValueError, match="both eligible and keep, or neither"):
        net.start_learning(0, eligible=nothing)


@pytest.mark.parametrize("method", ["packnet", "static_sparse"])
def test_per_task_vit_tokens_train_with_their_task_and_reset_only_when_exact(method):
    tiny_vit = {"patch_size": 4, "depth": 1, "width": 16, "heads": 2, "mlp_dim": 32}
    strategy, bm, _ = make_strategy(method, model="vit_t8", model_kwargs=tiny_vit, epochs=1)
    backbone = strategy.model.net.backbone

    def moved_token_sets(exp) -> list[int]:
        before = [p.detach().clone() for p in (*backbone.cls_tokens, *backbone.pos_embeds)]
        strategy.train(exp)
        after = (*backbone.cls_tokens, *backbone.pos_embeds)
        return sorted({i % 5 for i, (b, a) in enumerate(zip(before, after, strict=True))
                       if not torch.equal(a, b)})

    stream = RequestStream(bm, seq("L0 L1 U0"))
    assert moved_token_sets(stream[0]) == [0]
    assert moved_token_sets(stream[1]) == [1]
    assert moved_token_sets(stream[2]) == ([0] if METHODS[method].exact else [])


def test_subnetwork_strategies_refuse_what_they_would_silently_get_wrong():
    net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"has alpha=0.5, the strategy alpha=0.1"):
        WSN(model=SubnetworkNet(net, 0.5), optimizer=sgd, alpha=0.1)
    shared_tokens = build_model("vit_t8", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2,
                                patch_size=4, width=8, depth=1, heads=2, mlp_dim=8)
    with pytest.raises(ValueError, match=r"\['backbone.cls_tokens.0', 'backbone.pos_embeds.0'\]"
                                         r" are neither Conv2d/Linear weights"):
        PALL(model=shared_tokens, optimizer=sgd, alpha=0.2, buffer_size=10)
    with pytest.raises(ValueError, match=r"method 'pall' is already registered "
                                         r"\(pall_avalanche.strategies.pall:PALL\)"):
        register_method(Method("pall", PALL, exact=True))


def test_dynamic_sparse_refuses_a_sixth_learning_request():
    strategy, bm, _ = make_strategy("dynamic_sparse", epochs=1, train_per_task=20)
    for exp in RequestStream(bm, seq("L0 L1 L2 L3 L4 U2")):
        strategy.train(exp)
    with pytest.raises(ValueError, match=r"learning request 6 \(task 2\): dynamic sparse"):
        strategy.train(bm.train_stream[2])


def test_only_the_most_recently_used_masks_stay_unpacked():
    strategy, bm, _ = make_strategy("wsn", epochs=1)
    for exp in bm.train_stream[:4]:
        strategy.train(exp)
    net = strategy.model
    assert net.unpacked_cache == 2
    for task in (0, 1, 2, 3, 1):
        masks = net.bool_mask(task)
        expected = {name: net.masks[task].to_bool(name) for name in net.shapes}
        assert all(torch.equal(masks[n], expected[n]) for n in expected)
        assert len(net._cache) <= 2
    assert list(net._cache) == [3, 1]            # least recently used first


def test_masks_in_use_stay_stacked_for_a_block_then_are_dropped():
    strategy, bm, _ = make_strategy("wsn", epochs=1)
    for exp in bm.train_stream[:4]:
        strategy.train(exp)
    net = strategy.model
    tasks = [2, 0, 3]
    with net.stacked(tasks):
        held = net._stack
        assert held[0] == (2, 0, 3)
        for name in net.scored_names():          # row g is task tasks[g]'s stored mask
            for g, task in enumerate(tasks):
                assert torch.equal(held[1][name][g], net.masks[task].to_bool(name).float())
        x = torch.rand(3, 1, 4, 1, 8, 8)
        net.forward_groups(x, tasks)
        assert net._stack is held                # not stacked again
    assert net._stack is None
