"""Amnesiac update deletion over Sequential, EWC, LwF, DER and DER++, with real training on
digits: the update subtracted entry by entry, the last task's deletion, the oracle, DER's loss,
the learner's own state, permanence and resume."""

import copy

import pytest
import torch
from helpers import FAST_CONFIG, BufferDraws, make_strategy, seq
from torch.nn import functional as F

from pall_avalanche.checkpoint import (
    CHECKPOINT_FORMAT,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from pall_avalanche.rehearsal import EpisodicMemory, ReplayObjective
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs.build import build_run
from pall_avalanche.strategies import UnlearningPlugin

AMNESIAC = ("amnesiac_sequential", "amnesiac_ewc", "amnesiac_lwf", "amnesiac_der",
            "amnesiac_derpp")
#: Each Amnesiac method and the learner it learns as.
BASES = {"amnesiac_sequential": "sequential", "amnesiac_ewc": "ewc", "amnesiac_lwf": "lwf",
         "amnesiac_derpp": "derpp"}
SMALL = {"epochs": 2, "train_per_task": 60}


class StateAfterRequests(UnlearningPlugin):
    """The model's whole state after every request (its ``state_dict``, cloned)."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[dict[str, torch.Tensor]] = []

    def after_request(self, strategy, result, **kwargs) -> None:
        self.states.append({k: v.detach().clone() for k, v in strategy.model.state_dict().items()})


def run(method: str, requests: str):
    """(strategy, the state after every request) of ``method`` on ``requests``, seed 0."""
    states = StateAfterRequests()
    built = build_run(method, {**FAST_CONFIG, **SMALL}, seed=0, plugins=[states])
    for exp in RequestStream(built.benchmark, seq(requests)):
        built.strategy.train(exp)
    return built.strategy, states.states


def norm(tensors: dict[str, torch.Tensor]) -> float:
    """The L2 norm of a state's float entries together."""
    return float(sum((t.double() ** 2).sum() for t in tensors.values()) ** 0.5)


@pytest.mark.parametrize("method", AMNESIAC)
def test_unlearning_subtracts_the_tasks_update_entry_by_entry(method):
    strategy, (after_0, after_1, after_2, unlearned) = run(method, "L0 L1 L2 U1")
    assert after_0.keys() == unlearned.keys()
    for name, value in unlearned.items():
        # θ_final − (θ after learning 1 − θ before learning 1), in the tensors' float32
        expected = after_2[name] - (after_1[name] - after_0[name])
        assert torch.equal(value, expected), name
    assert sorted(strategy.amnesiac.updates) == [0, 2]
    # task 1 learned something, and its deletion changed the model
    assert not torch.equal(unlearned["head.weight"], after_2["head.weight"])


@pytest.mark.parametrize("method", ["amnesiac_sequential", "amnesiac_derpp"])
def test_unlearning_the_last_task_restores_the_state_before_it_up_to_one_rounding(method):
    """θ_a − fl(θ_a − θ_b) is not θ_b bit for bit in float32: the difference is rounded where
    θ_a and θ_b are far apart. Where θ_b/2 <= θ_a <= 2θ_b (Sterbenz), fl(θ_a − θ_b) is exact
    and so is the restore; elsewhere the error is at most one or two roundings of the larger
    magnitude."""
    _, (before, after, unlearned) = run(method, "L0 L1 U1")
    eps = torch.finfo(torch.float32).eps
    sterbenz_entries = 0
    for name, restored in unlearned.items():
        a, b = after[name], before[name]
        sterbenz = ((b / 2 <= a) & (a <= 2 * b)) | ((2 * b <= a) & (a <= b / 2)) | (a == b)
        assert torch.equal(restored[sterbenz], b[sterbenz]), name
        bound = 2 * eps * torch.maximum(a.abs(), b.abs())
        assert ((restored - b).abs() <= bound).all(), name
        sterbenz_entries += int(sterbenz.sum())
    assert sterbenz_entries > 0


@pytest.mark.parametrize("method", AMNESIAC)
def test_the_unlearned_model_is_not_the_oracle_retrained_without_the_task(method):
    requests = seq("L0 L1 L2 U1")
    _, states = run(method, str(requests))
    _, oracle = run(method, str(requests.without_tasks([1])))
    # the same start: task 0 learned identically by both runs
    for name, value in oracle[0].items():
        assert torch.equal(value, states[0][name]), name
    # task 2 was learned on top of task 1's update, which deletion does not undo: the gap to
    # the oracle is a sizeable part of what task 1 changed, far above rounding
    gap = norm({n: states[-1][n] - oracle[-1][n] for n in oracle[-1]})
    assert gap > 0.05 * norm({n: states[1][n] - states[0][n] for n in oracle[-1]})


@pytest.mark.parametrize("method", sorted(BASES))
def test_an_amnesiac_method_learns_exactly_as_its_learner(method):
    _, amnesiac = run(method, "L0 L1")
    _, base = run(BASES[method], "L0 L1")
    for name, value in base[-1].items():
        assert torch.equal(amnesiac[-1][name], value), name


class ReplayLossSpy(UnlearningPlugin):
    """Every learning step's total loss (after the method's replay term), its mini-batch's
    logits and labels, the active tasks, the model's state and the step's buffer draws (from
    a :class:`~helpers.BufferDraws`)."""

    def __init__(self, draws: BufferDraws) -> None:
        super().__init__()
        self.steps: list[dict] = []
        self.draws = draws

    def before_training_iteration(self, strategy, **kwargs) -> None:
        self.draws.clear()

    def before_backward(self, strategy, **kwargs) -> None:
        self.steps.append({"loss": strategy.loss.detach().clone(),
                           "output": strategy.mb_output.detach(), "y": strategy.mb_y,
                           "active": list(strategy.active_tasks),
                           "draws": list(self.draws.draws),
                           "state": {k: v.detach().clone()
                                     for k, v in strategy.model.state_dict().items()}})


def test_der_replays_stored_logits_with_no_cross_entropy_on_buffer_samples(monkeypatch):
    spy = ReplayLossSpy(BufferDraws(monkeypatch))
    built = build_run("amnesiac_der", {**FAST_CONFIG, **SMALL, "epochs": 1, "beta": 0.5},
                      seed=0, plugins=[spy])
    strategy = built.strategy
    for exp in RequestStream(built.benchmark, seq("L0 L1 L2")):
        strategy.train(exp)
    replayed = [s for s in spy.steps if s["active"]]
    assert replayed and all(not s["draws"] for s in spy.steps if not s["active"])
    model = copy.deepcopy(strategy.model).train()
    for step in replayed:
        # one draw per active task, for the MSE term (DER++ draws a CE mini-batch too)
        assert [task for task, _, _ in step["draws"]] == step["active"]
        model.load_state_dict(step["state"])
        with torch.no_grad():
            replay = sum(0.5 * ((model(x[index], task) - z[index]) ** 2).mean()
                         for task, _, index in step["draws"]
                         for x, _, z in [strategy.memory.buffers[task]])
            expected = F.cross_entropy(step["output"], step["y"]) + replay / len(step["draws"])
        torch.testing.assert_close(step["loss"], expected.reshape(step["loss"].shape),
                                   rtol=1e-6, atol=1e-7)


def test_der_and_the_replay_objective_refuse_an_objective_without_a_term():
    with pytest.raises(ValueError, match=r"beta=0.0 is invalid for DER"):
        make_strategy("amnesiac_der", beta=0.0)
    memory = EpisodicMemory(buffer_size=10, n_tasks=5, store_logits=True)
    with pytest.raises(ValueError, match=r"ce_weight=0.0 is invalid with beta=0"):
        ReplayObjective(memory, 0.0, ce_weight=0.0)
    with pytest.raises(ValueError, match=r"ce_weight=-1.0 is invalid"):
        ReplayObjective(memory, 0.5, ce_weight=-1.0)


@pytest.mark.parametrize("method", ["amnesiac_ewc", "amnesiac_lwf", "amnesiac_der",
                                    "amnesiac_derpp"])
def test_the_learners_own_state_of_the_task_is_deleted(method):
    strategy, _ = run(method, "L0 L1 U0")
    if method == "amnesiac_ewc":
        assert strategy.ewc.tasks == [1]
    elif method == "amnesiac_lwf":
        assert list(strategy.lwf.targets) == [1]
        teacher = strategy.lwf.lwf.prev_model.state_dict()
        # the teacher is the model after the deletion, not the one that held task 0's update
        for name, value in strategy.model.state_dict().items():
            assert torch.equal(teacher[name], value), name
    else:
        assert sorted(strategy.memory.buffers) == [1]


class UpdatesAfterRequests(UnlearningPlugin):
    """The tasks with a stored update after every request."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[list[int]] = []

    def after_request(self, strategy, result, **kwargs) -> None:
        self.tasks.append(sorted(strategy.amnesiac.updates))


def test_a_permanent_task_stores_no_update_or_frees_it_and_changes_no_parameter():
    updates, states = UpdatesAfterRequests(), StateAfterRequests()
    built = build_run("amnesiac_sequential", {**FAST_CONFIG, **SMALL}, seed=0,
                      plugins=[updates, states])
    strategy = built.strategy
    assert isinstance(strategy.permanence, str) and "freed" in strategy.permanence
    for exp in RequestStream(built.benchmark, seq("P0 L1 L2 M1")):
        strategy.train(exp)
    # learned permanently: nothing stored; made permanent: freed
    assert updates.tasks == [[], [1], [1, 2], [2]]
    for name, value in states.states[3].items():
        assert torch.equal(value, states.states[2][name]), name
    with pytest.raises(KeyError, match="no stored update of task 1"):
        strategy.amnesiac.delete_update(strategy.model, 1)


@pytest.mark.parametrize("method", ["amnesiac_lwf", "amnesiac_der"])
def test_a_resumed_run_is_bit_identical(method, tmp_path):
    config = {**FAST_CONFIG, **SMALL, "epochs": 1}
    built = build_run(method, config, seed=0, measured=False)
    stream = RequestStream(built.benchmark, seq("L0 L1 U0 L2"))
    for exp in stream[:2]:
        built.strategy.train(exp)
    save_checkpoint(tmp_path / "run.ckpt", {"format": CHECKPOINT_FORMAT,
                                            "rng": capture_rng_state(),
                                            "state": built.strategy.checkpoint_state()})
    for exp in stream[2:]:
        built.strategy.train(exp)

    resumed = build_run(method, config, seed=1, measured=False)   # another start, overwritten
    saved = load_checkpoint(tmp_path / "run.ckpt")
    resumed.strategy.restore_checkpoint_state(saved["state"])
    restore_rng_state(saved["rng"])
    assert sorted(resumed.strategy.amnesiac.updates) == [0, 1]
    for exp in RequestStream(built.benchmark, seq("L0 L1 U0 L2"))[2:]:
        resumed.strategy.train(exp)
    final = built.strategy.model.state_dict()
    for name, value in resumed.strategy.model.state_dict().items():
        assert torch.equal(value, final[name]), name
    assert sorted(resumed.strategy.amnesiac.updates) == [1, 2]
