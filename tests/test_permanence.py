"""The CLPU protocol: permanent learning requests, making a task permanent, CLArena's
unlearnable_age, CLPU's and UnCLe's notations, and every refusal, in the request model, the
streams, the template and the runner."""

import numpy as np
import pytest
import torch
from helpers import FAST_CONFIG, make_strategy, seq, snapshot

from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.requests import (
    InvalidRequestSequence,
    Request,
    RequestKind,
    RequestSequence,
    generate_requests,
)
from pall_avalanche.requests.streams import (
    MakePermanentExperience,
    RequestStream,
    UnlearnExperience,
    learn_permanently,
)
from pall_avalanche.runs import run_record

# The default sequence of CLPU's code (data.py): R0 T1 T2 R3 R1 F2 T4 F4
CLPU_DEFAULT = "R0 T1 T2 R3 R1 F2 T4 F4"


def test_string_and_json_forms_round_trip():
    requests = seq("P0 L1 L2 M1 U2")
    assert str(requests) == "P0 L1 L2 M1 U2"
    assert requests.to_list() == [
        {"kind": "learn", "task": 0, "permanent": True}, {"kind": "learn", "task": 1},
        {"kind": "learn", "task": 2}, {"kind": "make_permanent", "task": 1},
        {"kind": "unlearn", "task": 2}]
    assert RequestSequence(requests.to_list(), 5) == requests
    assert requests.permanent_tasks == [0, 1]
    assert requests.active_sets()[-1] == frozenset({0, 1})
    # an all-temporary sequence keeps the JSON form it always had
    assert seq("L0 U0").to_list() == [{"kind": "learn", "task": 0},
                                      {"kind": "unlearn", "task": 0}]


def test_clpu_notation():
    requests = RequestSequence.parse_clpu(CLPU_DEFAULT, 5)
    assert str(requests) == "P0 L1 L2 P3 M1 U2 L4 U4"
    assert requests.to_clpu() == CLPU_DEFAULT
    with pytest.raises(InvalidRequestSequence, match="'X1' is not R<task>"):
        RequestSequence.parse_clpu("R0 X1", 5)


def test_uncle_instruction_strings_are_the_comma_separated_form():
    requests = RequestSequence.parse("L6,L7,L2,U7", 10)
    assert [(r.kind, r.task) for r in requests] == [
        ("learn", 6), ("learn", 7), ("learn", 2), ("unlearn", 7)]


@pytest.mark.parametrize("text, message", [
    ("P0 U0", "request 2 \\(U0\\): task 0 is permanent since request 1; a permanent task "
              "cannot be unlearned"),
    ("L0 M0 U0", "task 0 is permanent since request 2"),
    ("L0 M0 M0", "task 0 is already permanent"),
    ("M0", "task 0 is made permanent before it was learned"),
    ("L0 U0 M0", "task 0 is made permanent after it was unlearned"),
])
def test_permanence_refusals(text, message):
    with pytest.raises(InvalidRequestSequence, match=message):
        seq(text)


def test_only_learning_requests_are_permanent():
    with pytest.raises(InvalidRequestSequence, match="only a learning request can be "
                                                     "permanent"):
        Request("unlearn", 0, permanent=True)
    with pytest.raises(InvalidRequestSequence, match="request 1: permanent=1 must be true or "
                                                     "false"):
        RequestSequence([{"kind": "learn", "task": 0, "permanent": 1}], 2)


@pytest.mark.parametrize("seed", range(20))
def test_unlearnable_age_only_narrows_the_reference_draws(seed):
    # an age no task reaches draws exactly the paper's sequence
    assert generate_requests(5, 3, seed, unlearnable_age=5) == generate_requests(5, 3, seed)
    for age in (1, 2, 3):
        requests = list(generate_requests(5, 3, seed, unlearnable_age=age))
        position = {(r.kind, r.task): i for i, r in enumerate(requests)}
        assert [r.task for r in requests if r.is_learn] == [0, 1, 2, 3, 4]
        for t in range(5):
            if ("unlearn", t) in position:        # unlearned while still temporary: at an
                learned_before = [r.task for r in requests[:position[("unlearn", t)]]
                                  if r.is_learn]  # age (tasks learned after t) below N
                assert t in learned_before and max(learned_before) - t < age
                assert ("make_permanent", t) not in position
            elif t + age < 5:                     # permanent when task t + age starts: right
                at = position[("make_permanent", t)]   # before its learning request, after
                assert requests[at + 1] == Request(RequestKind.LEARN,        # the unlearning
                                                   t + age)                  # ones
                assert not requests[at - 1].is_learn or requests[at - 1].task == t + age - 1
            else:
                assert ("make_permanent", t) not in position
        assert len([r for r in requests if r.is_unlearn]) == 3


def test_unlearnable_age_as_clarenas_experiment_loop_by_hand():
    # CLArena: after learning task k, the tasks u <= k with k - u < N may be unlearned;
    # task u becomes permanent when task u + N starts (before it trains). N = 1: a task can
    # only be unlearned right after its own learning request
    for seed in range(30):
        requests = list(generate_requests(4, 2, seed, unlearnable_age=1))
        for i, r in enumerate(requests):
            if r.is_unlearn:
                last_learned = max(q.task for q in requests[:i] if q.is_learn)
                assert last_learned == r.task
    # seed 0 by hand: the paper draws tasks 0, 3 and 4 to unlearn. N = 2: U0 may follow L0
    # or L1 only, M1 comes before L3 and M2 before L4 (tasks 3 and 4 never reach age 2).
    # N = 1: U0 right after L0, M1 before L2, M2 before L3
    assert str(generate_requests(5, 3, 0)) == "L0 L1 L2 L3 U0 L4 U3 U4"
    assert str(generate_requests(5, 3, 0, unlearnable_age=2)) == (
        "L0 L1 U0 L2 M1 L3 M2 L4 U3 U4")
    assert str(generate_requests(5, 3, 0, unlearnable_age=1)) == (
        "L0 U0 L1 M1 L2 M2 L3 U3 L4 U4")


def test_the_never_unlearned_reference_makes_the_unlearned_tasks_permanent_as_the_others():
    sequence = seq("L0 L1 U0 L2 M1 L3 U3", 4)      # unlearnable_age 2: M1 before L3
    assert str(sequence.without_unlearning()) == "L0 L1 L2 M1 L3"
    assert str(sequence.without_unlearning(2)) == "L0 L1 M0 L2 M1 L3"
    for seed in range(20):
        generated = generate_requests(5, 3, seed, unlearnable_age=2)
        never = generated.without_unlearning(2)
        assert never == generate_requests(5, 0, seed, unlearnable_age=2)


def test_unlearnable_age_zero_learns_everything_permanently():
    assert str(generate_requests(4, 0, 0, unlearnable_age=0)) == "P0 P1 P2 P3"
    with pytest.raises(InvalidRequestSequence, match="unlearnable_age=0"):
        generate_requests(4, 1, 0, unlearnable_age=0)
    with pytest.raises(InvalidRequestSequence, match="unlearnable_age=-1 is invalid"):
        generate_requests(4, 1, 0, unlearnable_age=-1)


def test_forgetting_metrics_charge_making_permanent_as_learning():
    # rows after P0 L1 M1 U0 ... by hand: F_l sums the drop of L1 (over {0}) and of M1 (over
    # {0, 1}) over T - 1 = 1 learning request; F_u the drop of U0 over {1}
    acc = np.array([[90, 50], [80, 95], [70, 85], [50, 80]], dtype=float)
    requests = seq("L0 L1 M1 U0", 2)
    metrics = compute_metrics(acc, requests)
    assert metrics["F_l"] == pytest.approx((90 - 80) + ((80 - 70) + (95 - 85)) / 2)
    assert metrics["F_u"] == pytest.approx(85 - 80)
    assert metrics["A_l"] == 80 and metrics["A_u"] == 50


def test_stream_marks_permanent_learning_without_touching_the_benchmark():
    _, bm, _ = make_strategy("sequential")
    stream = RequestStream(bm, seq("P0 L1 M1 L2 U2"))
    assert stream[0] is not bm.train_stream[0] and stream[0].permanent is True
    assert stream[0].dataset is bm.train_stream[0].dataset
    assert not hasattr(bm.train_stream[0], "permanent") and stream[1] is bm.train_stream[1]
    assert isinstance(stream[2], MakePermanentExperience) and stream[2].task_label == 1
    assert isinstance(stream[4], UnlearnExperience) and stream[4].task_label == 2


class _Events:
    def __init__(self):
        self.seen = []

    def __getattr__(self, name):
        if name.startswith(("before_making", "after_making")):
            return lambda strategy, task, **kwargs: self.seen.append(
                (name, task, list(strategy.permanent_tasks)))
        raise AttributeError(name)


def test_the_template_makes_tasks_permanent_and_refuses_to_unlearn_them():
    strategy, bm, log = make_strategy("sequential")
    events = _Events()
    strategy.plugins.append(events)
    strategy.train([learn_permanently(bm.train_stream[0]), bm.train_stream[1]])
    strategy.train(MakePermanentExperience(1))
    assert strategy.permanent_tasks == [0, 1] and strategy.requests_done() == 3
    assert events.seen == [("before_making_permanent", 1, [0]),
                           ("after_making_permanent", 1, [0, 1])]
    assert [(r["kind"], r["task"]) for r in log.results] == [
        ("learn", 0), ("learn", 1), ("make_permanent", 1)]
    # refused in one line before anything trains: the learning request before it too
    before = snapshot(strategy.model)
    with pytest.raises(ValueError, match="cannot unlearn task 0: it is permanent"):
        strategy.train([bm.train_stream[2], UnlearnExperience(0)])
    assert all(torch.equal(before[k], v) for k, v in strategy.model.state_dict().items())
    assert strategy.active_tasks == [0, 1] and len(log.results) == 3
    with pytest.raises(ValueError, match="cannot make permanent task 3: it is not learned"):
        strategy.make_permanent(3)


def test_a_run_with_unlearnable_age_records_its_permanent_requests():
    config = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "unlearnable_age": 2}
    record = run_record("sequential", 0, config)
    expected = generate_requests(5, 3, 0, unlearnable_age=2)
    assert record["requests"] == expected.to_list()
    assert len(record["accuracy"]) == len(expected) == 10
    assert any(r["kind"] == "make_permanent" for r in record["requests"])
