"""The unlearning template, request streams, Sequential and Independent with real training."""

import pytest
import torch
from avalanche.training import Naive
from helpers import FAST_CONFIG, make_strategy, predictions, seq, snapshot

from pall_avalanche.core import DivergedError
from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.models import count_parameters
from pall_avalanche.requests.streams import (
    RequestStream,
    UnlearnExperience,
    UnlearningNotSupportedError,
)
from pall_avalanche.strategies import UnlearningPlugin


class EventLog(UnlearningPlugin):
    def __init__(self):
        super().__init__()
        self.events = []

    def after_training_exp(self, strategy, **kwargs):
        self.events.append(("learned", strategy.experience.task_label,
                            list(strategy.active_tasks)))

    def before_unlearning(self, strategy, task, **kwargs):
        self.events.append(("before_unlearning", task, list(strategy.active_tasks)))

    def after_unlearning(self, strategy, task, **kwargs):
        self.events.append(("after_unlearning", task, list(strategy.active_tasks)))


def test_request_stream_interleaves_experiences_without_mutating_them():
    strategy, bm, _ = make_strategy("sequential")
    before = [(e.current_experience, e.origin_stream.name) for e in bm.train_stream]
    stream = RequestStream(bm, seq("L0 L1 U0 L2"))
    assert [type(e).__name__ for e in stream] == [
        "DatasetExperience", "DatasetExperience", "UnlearnExperience", "DatasetExperience"]
    assert stream[1] is bm.train_stream[1]
    assert stream[2].task_label == 0 and stream[2].current_experience == 2
    assert [(e.current_experience, e.origin_stream.name) for e in bm.train_stream] == before
    with pytest.raises(AttributeError, match="immutable"):
        stream[2].task_label = 1


def test_unlearning_events_and_active_tasks():
    log = EventLog()
    strategy, bm, _ = make_strategy("sequential")
    strategy.plugins.insert(0, log)
    for exp in RequestStream(bm, seq("L0 L1 U0 L2")):
        strategy.train(exp)
    assert log.events == [
        ("learned", 0, [0]), ("learned", 1, [0, 1]),
        ("before_unlearning", 0, [0, 1]), ("after_unlearning", 0, [1]),
        ("learned", 2, [1, 2]),
    ]


def test_inconsistent_requests_to_a_strategy_fail_clearly():
    strategy, bm, _ = make_strategy("sequential", epochs=1)
    with pytest.raises(ValueError, match=r"cannot unlearn task 3: it is not learned"):
        strategy.train(UnlearnExperience(3))
    strategy.train(bm.train_stream[0])
    with pytest.raises(ValueError, match="task 0 is already learned"):
        strategy.train(bm.train_stream[0])


def test_plain_avalanche_strategy_cannot_unlearn():
    strategy, bm, _ = make_strategy("sequential", epochs=1)
    naive = Naive(model=strategy.model, optimizer=torch.optim.SGD(strategy.model.parameters(), 0.1),
                  train_mb_size=32)
    stream = RequestStream(bm, seq("L0 U0"))
    with pytest.raises(UnlearningNotSupportedError, match="cannot unlearn"):
        naive.train(stream[1])
    # a request made on its own, outside a stream: the same error, not Avalanche's assertion
    with pytest.raises(UnlearningNotSupportedError, match="for task 0 was handed to a strategy "
                                                          "that cannot unlearn"):
        naive.train(UnlearnExperience(0))


def test_sequential_unlearning_changes_no_parameter_and_fine_tuning_forgets():
    strategy, bm, evaluation = make_strategy("sequential", epochs=3)
    requests = seq("L0 L1 L2 U1 L3")
    stream = RequestStream(bm, requests)
    for exp in stream[:3]:
        strategy.train(exp)
    before = snapshot(strategy.model)
    strategy.train(stream[3])
    after = snapshot(strategy.model)
    assert before.keys() == after.keys()
    for name in before:
        assert torch.equal(before[name], after[name]), name
    strategy.train(stream[4])
    acc = evaluation.accuracy
    assert acc[3] == acc[2]                          # unlearning: identical accuracies
    metrics = compute_metrics(acc, requests)
    assert metrics["F_u"] == 0.0
    assert strategy.inference_size() == (count_parameters(strategy.model), 0)


def test_independent_is_exact_and_never_forgets():
    strategy, bm, evaluation = make_strategy("independent", epochs=2)
    requests = seq("L0 L1 U0 L2")
    stream = RequestStream(bm, requests)
    strategy.train(stream[0])
    task0 = snapshot(strategy.model.task_models["0"])
    logits0 = predictions(strategy.model, bm, 0)
    strategy.train(stream[1])
    # learning task 1 leaves task 0's model bit-identical
    for name, value in snapshot(strategy.model.task_models["0"]).items():
        assert torch.equal(value, task0[name]), name
    assert torch.equal(predictions(strategy.model, bm, 0), logits0)
    task1 = snapshot(strategy.model.task_models["1"])
    strategy.train(stream[2])
    assert set(strategy.model.task_models) == {"1"}        # task 0's model is gone
    for name, value in snapshot(strategy.model.task_models["1"]).items():
        assert torch.equal(value, task1[name]), name
    # task 0 is now answered by the never-trained model
    untrained = predictions(strategy.model.untrained, bm, 0)
    assert torch.equal(predictions(strategy.model, bm, 0), untrained)
    strategy.train(stream[3])
    metrics = compute_metrics(evaluation.accuracy, requests)
    assert metrics["F_l"] == 0.0 and metrics["F_u"] == 0.0
    per_task = count_parameters(strategy.model.untrained)
    assert strategy.inference_size() == (2 * per_task, 0)   # d × |Ω|
    assert evaluation.model_sizes_mb == pytest.approx(
        [n * 4 * per_task / 2**20 for n in (1, 2, 1, 2)])


@pytest.mark.parametrize("wrap", ["independent", "subnetwork"])
def test_mixed_task_batches_route_each_sample_to_its_task(wrap):
    from pall_avalanche.masks import SubnetworkNet
    from pall_avalanche.models import build_model
    from pall_avalanche.strategies import IndependentModels

    torch.manual_seed(0)
    net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
    net = IndependentModels(net) if wrap == "independent" else SubnetworkNet(net, 0.3)
    x, tasks = torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 0, 2, 1, 0])
    one_by_one = torch.stack([net(x[i:i + 1], int(tasks[i]))[0] for i in range(6)])
    assert torch.allclose(net(x, tasks), one_by_one)


@pytest.mark.parametrize("method", ["sequential", "independent", "pall"])
def test_record_model_size_is_the_most_the_method_can_reach(method):
    """The record's model size is the paper's, at |Ω| = T active tasks, although seed 0's
    sequence (L0 L1 L2 U2 L3 U3 L4 U4) never holds more than 3; the per-request sizes are
    the ones measured along the run."""
    from pall_avalanche.evaluation import model_size_mb
    from pall_avalanche.masks import MaskSet, SubnetworkNet
    from pall_avalanche.models import build_model
    from pall_avalanche.runs import run_record

    record = run_record(method, 0, {**FAST_CONFIG, "epochs": 1, "train_per_task": 40,
                                     "n_retrain_iters": 5})
    d = count_parameters(build_model("mlp", input_shape=(1, 8, 8), n_tasks=5,
                                     classes_per_task=2))
    entries = MaskSet.empty(SubnetworkNet(build_model(
        "mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2), 0.2).shapes).n_entries()
    active, sizes = set(), []
    for request in record["requests"]:
        (active.add if request["kind"] == "learn" else active.discard)(request["task"])
        sizes.append({"sequential": (d, 0), "independent": (len(active) * d, 0),
                      "pall": (d, len(active) * entries)}[method])
    size_at_t = {"sequential": (d, 0), "independent": (5 * d, 0), "pall": (d, 5 * entries)}
    assert record["model_size_mb"] == pytest.approx(model_size_mb(*size_at_t[method]))
    assert record["model_size_mb_per_request"] == pytest.approx(
        [model_size_mb(*size) for size in sizes])
    if method != "sequential":
        assert max(record["model_size_mb_per_request"]) < record["model_size_mb"]


class Results(UnlearningPlugin):
    def __init__(self):
        super().__init__()
        self.results = []

    def after_request(self, strategy, result, **kwargs):
        self.results.append(result)


def test_after_request_fires_without_an_evaluator_and_the_loop_keeps_the_log():
    """A strategy whose evaluator measures nothing (Avalanche's default) still ends every
    request in after_request, with what the loop knows, and logs it; one ``train`` call
    carries out a whole list of requests in order."""
    from pall_avalanche.data import build_benchmark
    from pall_avalanche.models import build_model
    from pall_avalanche.strategies import build_strategy

    bm = build_benchmark("digits", seed=0, train_per_task=40)
    model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5, classes_per_task=2)
    results = Results()
    strategy = build_strategy("sequential", model=model, config={**FAST_CONFIG, "epochs": 1},
                              plugins=[results])
    strategy.train(list(RequestStream(bm, seq("L0 L1 U0 L2"))))
    assert [(r.index, r.kind, r.task, r.active_tasks) for r in results.results] == [
        (0, "learn", 0, (0,)), (1, "learn", 1, (0, 1)), (2, "unlearn", 0, (1,)),
        (3, "learn", 2, (1, 2))]
    assert not any(r.measured for r in results.results)
    assert all(r.seconds > 0 and r.model_size_mb is None for r in results.results)
    assert strategy.request_log.requests == [("learn", 0), ("learn", 1), ("unlearn", 0),
                                             ("learn", 2)]
    assert strategy.request_log.accuracy == [[], [], [], []]


def test_a_finite_run_raises_nothing_and_counts_its_requests():
    """PALL (learning epochs, unlearning with retraining steps) on a sane learning rate: no
    divergence, every request ends in after_request, and the template's request count
    matches the log's."""
    strategy, bm, log = make_strategy("pall", n_retrain_iters=5)
    stream = RequestStream(bm, seq("L0 L1 U0 L2"))
    for index, exp in enumerate(stream):
        strategy.train(exp)
        assert strategy.requests_done() == index + 1 == len(log.results)
    assert [r["kind"] for r in log.results] == ["learn", "learn", "unlearn", "learn"]


def test_a_non_finite_training_loss_stops_the_request_before_it_ends():
    strategy, bm, log = make_strategy("sequential", lr=1e6, epochs=3)
    with pytest.raises(DivergedError) as raised:
        strategy.train(bm.train_stream[0])
    err = raised.value
    assert (err.index, err.kind, err.task, err.what) == (0, "learn", 0, "the training loss")
    assert err.epoch in (1, 2, 3)
    assert str(err) == (f"request 0 (learn task 0) diverged in epoch {err.epoch}: the training "
                        "loss is not finite (NaN or infinite)")
    assert log.results == [] and strategy.active_tasks == []     # task 0 never joined Ω


def test_a_non_finite_parameter_or_unlearning_loss_stops_the_request():
    strategy, bm, log = make_strategy("sequential")
    strategy.train(bm.train_stream[0])
    name, weight = next(iter(strategy.model.named_parameters()))
    with torch.no_grad():
        weight[0, 0] = float("inf")
    with pytest.raises(DivergedError) as raised:
        strategy.unlearn(0)
    assert (raised.value.index, raised.value.kind, raised.value.task, raised.value.epoch) == (
        1, "unlearn", 0, None)
    assert str(raised.value) == (f"request 1 (unlearn task 0) diverged: parameter {name!r} at "
                                 "the end of the request is not finite (NaN or infinite)")
    assert len(log.results) == 1            # the failed request fired no after_request

    strategy, bm, log = make_strategy("er", n_retrain_iters=3)
    stream = RequestStream(bm, seq("L0 L1 U0"))
    strategy.train(stream[0])
    strategy.train(stream[1])
    strategy.memory.buffers[0][0].fill_(float("nan"))   # the forgotten task's stored inputs
    with pytest.raises(DivergedError) as raised:
        strategy.train(stream[2])
    assert (raised.value.index, raised.value.kind, raised.value.task, raised.value.what) == (
        2, "unlearn", 0, "the loss of the unlearning and retraining steps")
    assert len(log.results) == 2
