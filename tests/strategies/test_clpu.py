"""CLPU-DER++: temporary tasks in side networks deleted on unlearning (exact), permanent ones
in the main network by DER++, merging on request — with real training on digits."""

import torch
from helpers import BufferDraws, make_strategy, predictions, snapshot

from pall_avalanche.models import count_parameters
from pall_avalanche.requests.streams import (
    MakePermanentExperience,
    UnlearnExperience,
    learn_permanently,
)


def _main(strategy) -> dict[str, torch.Tensor]:
    return snapshot(strategy.model.main)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_temporary_tasks_never_touch_the_main_network_and_unlearn_exactly():
    strategy, bm, log = make_strategy("clpu_derpp", lr=0.01)
    train = bm.train_stream
    strategy.train(learn_permanently(train[0]))
    main = _main(strategy)
    strategy.train([train[1], train[2]])
    assert _same(main, _main(strategy))           # D^1, D^2 only reached their side networks
    assert sorted(strategy.model.side) == ["1", "2"]
    d = count_parameters(strategy.model.main)
    assert strategy.inference_size() == (3 * d, 0)
    before = {t: predictions(strategy.model, bm, t) for t in (0, 2)}
    strategy.train(UnlearnExperience(1))
    for t in (0, 2):                               # every remaining task bit-identical
        assert torch.equal(before[t], predictions(strategy.model, bm, t))
    assert 1 not in strategy.memory.buffers and "1" not in strategy.model.side
    # task 1 is now answered by the main network's never-trained head 1: its accuracy falls
    # to about chance (2 classes) from what it had
    learned, unlearned = log.accuracy[2][1], log.accuracy[3][1]
    assert learned > 85 and unlearned < 70
    assert strategy.inference_size() == (2 * d, 0)


def test_nothing_of_a_forgotten_temporary_task_stays_in_the_strategy(tmp_path):
    """After CLPU-DER++ forgets a temporary task the user's optimizer holds none of the deleted
    side network's tensors nor any momentum, the task's size is gone, and so is every tensor
    of the side network from the checkpoint state."""
    strategy, bm, _ = make_strategy("clpu_derpp", lr=0.01)
    train = bm.train_stream
    strategy.train([train[0], train[1]])
    side = {id(p) for p in strategy.model.network_of(1).parameters()}
    assert side & {id(p) for g in strategy.optimizer.param_groups for p in g["params"]}
    assert strategy.optimizer.state and 1 in strategy.train_sizes
    lr = strategy.optimizer.param_groups[0]["lr"]
    strategy.train(UnlearnExperience(1))
    assert [g["params"] for g in strategy.optimizer.param_groups] == [[]]
    assert not strategy.optimizer.state and strategy.optimizer.param_groups[0]["lr"] == lr
    assert 1 not in strategy.train_sizes and 0 in strategy.train_sizes
    state = strategy.checkpoint_state()
    assert state["side"] == [0] and not any(k.startswith("side.1.") for k in state["model"])
    assert any(k.startswith("side.0.") for k in state["model"])
    assert state["strategy"]["train_sizes"] == {0: len(train[0].dataset)}
    strategy.train(train[2])                     # the next request trains with fresh state
    assert {id(p) for g in strategy.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in strategy.model.network_of(2).parameters()}


def test_a_merge_runs_as_many_steps_as_its_task_or_as_the_authors_code(monkeypatch):
    """merge_length="task" (CLArena's): epochs × mini-batches of the merged task;
    "last_permanent" (the CLPU authors' n_iters): the last permanent learning request's steps,
    1 before there is one (every task temporary first, as under unlearnable_age)."""
    steps = []
    for length, permanent_first in (("task", False), ("last_permanent", False),
                                    ("last_permanent", True)):
        strategy, bm, _ = make_strategy("clpu_derpp", lr=0.01, epochs=2, merge_length=length)
        train = bm.train_stream
        first = learn_permanently(train[0]) if permanent_first else train[0]
        strategy.train([first, train[1]])
        counted = []
        monkeypatch.setattr(strategy, "optimization_steps",
                            lambda groups, n, loss, counted=counted: counted.append(n))
        strategy.train(MakePermanentExperience(1))
        steps.append(counted[0])
    batches = [-(-len(train[t].dataset) // strategy.train_mb_size) for t in (0, 1)]
    assert steps == [2 * batches[1], 1, 2 * batches[0]]


def test_permanent_learning_rehearses_only_permanent_buffers(monkeypatch):
    strategy, bm, _ = make_strategy("clpu_derpp", lr=0.01, epochs=1)
    train = bm.train_stream
    strategy.train([learn_permanently(train[0]), train[1]])
    draws = BufferDraws(monkeypatch)
    strategy.train(learn_permanently(train[2]))
    assert draws.tasks and set(draws.tasks) == {0}   # never B^1 (temporary)
    assert strategy.permanent_tasks == [0, 2]


def test_making_permanent_merges_the_side_network_by_distillation(monkeypatch):
    strategy, bm, log = make_strategy("clpu_derpp", lr=0.01, epochs=2)
    train = bm.train_stream
    strategy.train([learn_permanently(train[0]), train[1]])
    main, side_accuracy = _main(strategy), log.accuracy[-1][1]
    draws = BufferDraws(monkeypatch)
    strategy.train(MakePermanentExperience(1))
    assert not _same(main, _main(strategy)) and "1" not in strategy.model.side
    assert strategy.permanent_tasks == [0, 1]
    # every step draws B^1 (the distillation) and B^0 (the rehearsal): twice each with β > 0
    steps = strategy.merge_steps(1)
    assert steps == 2 * -(-len(train[1].dataset) // strategy.train_mb_size)
    assert draws.tasks.count(1) == draws.tasks.count(0) == 2 * steps
    # the main network now answers task 1 from what it distilled
    assert log.accuracy[-1][1] > 75 and side_accuracy > 85
    assert log.results[-1]["kind"] == "make_permanent"
