"""The audit's calibration instruments (pall_avalanche.strategies.leaky), entry by entry against
PALL on the same seed: the positive control changes nothing and keeps t frozen, the leaky
variants keep exactly what they say, the provenance check catches them, and their oracle runs
are PALL's."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import FAST_CONFIG, make_strategy, seq

from pall_avalanche.audit import AuditProbe
from pall_avalanche.audit.twins import oracle_twin
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs import run_record
from pall_avalanche.runs.spec import RunSpec

CONFIG = {"epochs": 2, "train_per_task": 40, "n_retrain_iters": 10}


def weights(strategy) -> dict[str, torch.Tensor]:
    return {n: w.detach().clone() for n, w in strategy.model.named_weights()}


def tensors(model) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model``."""
    return {k: v.detach().clone() for k, v in (*model.named_parameters(),
                                                *model.named_buffers())}


def learned(method: str, text: str = "L0 L1 L2", **overrides):
    strategy, bm, _ = make_strategy(method, **{**CONFIG, **overrides})
    for exp in RequestStream(bm, seq(text)):
        strategy.train(exp)
    return strategy, bm


def test_no_unlearning_changes_nothing_and_later_tasks_leave_t_alone():
    control, bm = learned("pall_no_unlearning")
    state = tensors(control.model)
    own = control.model.masks[1] - control.model.cumulative_mask([0, 2])
    control.unlearn(1)
    after = tensors(control.model)
    assert state.keys() == after.keys() and all(torch.equal(state[k], after[k]) for k in state)
    assert 1 in control.model.masks and control.active_tasks == [0, 2]
    before = weights(control)
    control.train(RequestStream(bm, seq("L0 L1 L2 U1 L3"))[4])
    for (name, w), mask in zip(weights(control).items(), own.bools().values(), strict=True):
        assert torch.equal(w[mask], before[name][mask]), name
    # PALL, the same way, re-draws t's own entries: the control is what keeps them
    pall, _ = learned("pall")
    own = pall.model.masks[1] - pall.model.cumulative_mask([0, 2])
    kept = weights(pall)
    pall.unlearn(1)
    assert any(not torch.equal(w[m], kept[n][m]) for (n, w), m
               in zip(weights(pall).items(), own.bools().values(), strict=True))


@pytest.mark.parametrize(("method", "fraction"), [("pall_leak_redraw_50", 0.5),
                                                  ("pall_leak_redraw_25", 0.25)])
def test_a_fraction_of_what_t_trained_keeps_its_values_and_t_its_subnetwork(method, fraction):
    leaky, bm = learned(method)
    forget = leaky.forget_set(1)
    mask = leaky.model.masks[1]
    before = weights(leaky)
    leaky.unlearn(1)
    kept = total = 0
    for (name, w), entries in zip(weights(leaky).items(), forget.bools().values(), strict=True):
        kept += int((w[entries] == before[name][entries]).sum())
        total += int(entries.sum())
    assert total > 1000
    assert kept / total == pytest.approx(fraction, abs=0.03)
    # t is still answered through its own subnetwork, frozen for later tasks
    assert leaky.model.masks[1] == mask and leaky.active_tasks == [0, 2]
    frozen = weights(leaky)
    leaky.train(RequestStream(bm, seq("L0 L1 L2 U1 L3"))[4])
    for (name, w), entries in zip(weights(leaky).items(), mask.bools().values(), strict=True):
        assert torch.equal(w[entries], frozen[name][entries]), name


def unlearned_with_head(method: str):
    """The leaky variant learned on L0 L1 L2 and unlearning task 1, with, per maskable tensor,
    (m̄_1 entries, t's head rows among them, values before, values after)."""
    leaky, _ = learned(method)
    forget = leaky.forget_set(1)
    head = leaky.model.head_masks(1)
    before = weights(leaky)
    leaky.unlearn(1)
    after = weights(leaky)
    entries = {name: (mask, head.get(name, torch.zeros_like(mask)), before[name], after[name])
               for name, mask in forget.bools().items()}
    return leaky, head, entries


def test_the_body_leak_keeps_m_bar_t_redraws_t_head_and_drops_its_mask():
    leaky, head, entries = unlearned_with_head("pall_leak_body")
    for name, (mask, rows, before, after) in entries.items():
        body = mask & ~rows
        assert torch.equal(after[body], before[body]), name
        if rows.any():
            assert (after[rows] != before[rows]).float().mean() > 0.99, name
    assert head and 1 not in leaky.model.masks


def test_the_head_leak_keeps_t_head_rows_and_redraws_the_rest():
    _, head, entries = unlearned_with_head("pall_leak_head")
    for name, (mask, rows, before, after) in entries.items():
        assert torch.equal(after[rows], before[rows]), name
        moved = mask & ~rows
        if moved.any():
            assert (after[moved] != before[moved]).float().mean() > 0.99, name
    assert head


def test_the_buffer_leak_replays_t_in_retraining_then_drops_its_buffer():
    leaky, _ = learned("pall_leak_buffer")
    pall, _ = learned("pall")
    assert all(torch.equal(a, b) for a, b in zip(weights(leaky).values(),
                                                 weights(pall).values(), strict=True))
    replayed = []
    step = leaky.replay.replay_loss

    def spy(net, tasks, per_task):
        replayed.append(list(tasks))
        return step(net, tasks, per_task)

    leaky.replay.replay_loss = spy
    leaky.unlearn(1)
    pall.unlearn(1)
    assert replayed and all(tasks == [0, 2, 1] for tasks in replayed)
    assert 1 not in leaky.memory.buffers and 1 not in leaky.model.masks
    assert any(not torch.equal(a, b) for a, b in zip(weights(leaky).values(),
                                                     weights(pall).values(), strict=True))


def test_provenance_catches_the_redraw_leak():
    record = run_record("pall_leak_redraw_25", 0, {**FAST_CONFIG, **CONFIG},
                        requests=seq("L0 L1 L2 U1"), probe=partial(AuditProbe, [1]))
    (check,) = record["probe"]["provenance"]
    assert not check["direct_pass"]


def test_oracle_runs_of_a_leaky_variant_are_pall_s():
    config = {**FAST_CONFIG, **CONFIG}
    oracle = seq("L0 L2 L3")
    leaky = RunSpec.of("pall_leak_redraw_50", 0, config, oracle)
    twin = oracle_twin(leaky)
    assert twin == RunSpec.of("pall", 0, config, oracle) and oracle_twin(twin) is twin
    a = run_record("pall_leak_redraw_50", 0, config, requests=oracle)
    b = run_record("pall", 0, config, requests=oracle)
    assert a["accuracy"] == b["accuracy"] and a["learning_checks"] == b["learning_checks"]


def test_the_per_task_models_control_keeps_the_model_and_shares_independent_s_oracles():
    """independent_no_unlearning keeps the unlearned task's model (its predictions on t are
    those before the request), where Independent deletes it; on a sequence without unlearning
    it is Independent, so its oracle runs are Independent's."""
    config = {**FAST_CONFIG, **CONFIG}
    oracle = seq("L0 L2 L3")
    control = RunSpec.of("independent_no_unlearning", 0, config, oracle)
    assert oracle_twin(control) == RunSpec.of("independent", 0, config, oracle)
    a = run_record("independent_no_unlearning", 0, config, requests=oracle)
    b = run_record("independent", 0, config, requests=oracle)
    assert a["accuracy"] == b["accuracy"] and a["learning_checks"] == b["learning_checks"]
    kept = run_record("independent_no_unlearning", 0, config, requests=seq("L0 L1 U1"))
    deleted = run_record("independent", 0, config, requests=seq("L0 L1 U1"))
    assert kept["accuracy"][2][1] == kept["accuracy"][1][1] > 80         # t still answered
    assert deleted["accuracy"][2][1] != deleted["accuracy"][1][1]


@pytest.mark.parametrize("method", ["sequential_leak_50", "independent_leak_25"])
def test_the_dense_and_per_task_variants_share_their_method_s_oracles(method):
    config = {**FAST_CONFIG, **CONFIG}
    oracle = seq("L0 L2 L3")
    base = "sequential" if method.startswith("sequential") else "independent"
    assert oracle_twin(RunSpec.of(method, 0, config, oracle)) == RunSpec.of(base, 0, config,
                                                                            oracle)
    a = run_record(method, 0, config, requests=oracle)
    b = run_record(base, 0, config, requests=oracle)
    assert a["accuracy"] == b["accuracy"] and a["learning_checks"] == b["learning_checks"]


def test_sequential_keeping_part_of_t_s_update_removes_the_rest_entry_by_entry():
    """Unlearning t subtracts t's own update (its change while t was learned) from the
    entries it does not keep, and only from them; the kept share is about f."""
    leaky, bm = learned("sequential_leak_50", "L0")
    before_t = tensors(leaky.model)
    stream = RequestStream(bm, seq("L0 L1 L2 U1"))
    leaky.train(stream[1])
    after_t = tensors(leaky.model)
    leaky.train(stream[2])
    before_u = tensors(leaky.model)
    leaky.unlearn(1)
    after_u = tensors(leaky.model)
    kept = removed = 0
    for name, value in after_u.items():
        update = after_t[name] - before_t.get(name, after_t[name])
        moved = update != 0
        same = value == before_u[name]
        subtracted = torch.isclose(value, before_u[name] - update, rtol=0, atol=1e-6)
        assert bool((same | subtracted).all()), name
        kept += int((same & moved).sum())
        removed += int((~same & moved).sum())
    assert kept + removed > 1000 and 0.4 < kept / (kept + removed) < 0.6


def test_independent_keeping_part_of_t_s_model_re_draws_the_rest():
    """t's model stays; each entry keeps its learned value with probability f (a quarter), the
    others take values no training produced, and the other tasks' models are untouched."""
    leaky, _ = learned("independent_leak_25", "L0 L1 L2")
    models = {t: tensors(leaky.model.model_for(t)) for t in (0, 1, 2)}
    leaky.unlearn(1)
    assert 1 not in leaky.active_tasks and "1" in leaky.model.task_models
    for t in (0, 2):
        after = tensors(leaky.model.model_for(t))
        assert all(torch.equal(after[k], v) for k, v in models[t].items())
    after = tensors(leaky.model.model_for(1))
    params = dict(leaky.model.model_for(1).named_parameters())
    same = sum(int((after[k] == v).sum()) for k, v in models[1].items() if k in params)
    total = sum(v.numel() for k, v in models[1].items() if k in params)
    assert total > 1000 and 0.2 < same / total < 0.3


def test_leak_options_are_checked():
    with pytest.raises(ValueError, match="leak='nothing' is invalid"):
        make_strategy("pall_leak_head", leak="nothing")
    with pytest.raises(ValueError, match="leak_fraction=0.0 must lie in"):
        make_strategy("pall_leak_head", leak_fraction=0.0)


@pytest.mark.parametrize("method", ["pall_leak_body", "pall_leak_head"])
def test_what_the_body_and_head_leaks_keep_is_re_drawn_by_the_next_learning_request(method):
    # t has no mask after its unlearning, so learning task 3 re-draws every entry no
    # remaining task holds: the kept values of t survive until then only
    leaky, bm = learned(method)
    forget = leaky.forget_set(1)
    leaky.unlearn(1)
    kept = forget - leaky.model.cumulative_mask([0, 2])
    before = weights(leaky)
    leaky.train(RequestStream(bm, seq("L0 L1 L2 U1 L3"))[4])
    moved = total = 0
    for (name, w), entries in zip(weights(leaky).items(), kept.bools().values(), strict=True):
        moved += int((w[entries] != before[name][entries]).sum())
        total += int(entries.sum())
    assert total > 100 and moved / total > 0.99
