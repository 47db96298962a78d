"""An Avalanche user's own script with PALL dropped in: their evaluator (Avalanche's accuracy
metric and a TextLogger) shows the paper's metrics after every request, and their scheduler
drives the learning rate."""

from __future__ import annotations

import io

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics
from avalanche.logging import TextLogger
from avalanche.training.plugins import EvaluationPlugin, LRSchedulerPlugin
from helpers import seq

from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import compute_metrics, unlearning_metrics
from pall_avalanche.models import build_model
from pall_avalanche.requests import generate_requests
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.strategies import PALL, DERpp


class Rows(UnlearningPlugin):
    """The request, accuracy row and model size every ``after_request`` carries."""

    def __init__(self) -> None:
        super().__init__()
        self.accuracy: list[list[float]] = []
        self.model_sizes_mb: list[float] = []
        self.requests: list[tuple[str, int]] = []

    def after_request(self, strategy, result, **kwargs) -> None:
        self.requests.append((result.kind, result.task))
        self.accuracy.append(list(result.accuracy))
        self.model_sizes_mb.append(result.model_size_mb)


def test_a_users_evaluator_and_logger_show_the_papers_metrics():
    torch.manual_seed(0)
    bm = build_benchmark("digits", seed=0, train_per_task=60)
    model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5, classes_per_task=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    text = io.StringIO()
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True),
                                 *unlearning_metrics(bm.test_stream, eval_mb_size=64),
                                 loggers=[TextLogger(text)])
    reference = Rows()                     # every after_request's row, kept apart
    strategy = PALL(model=model, optimizer=optimizer, alpha=0.2, buffer_size=50,
                    n_retrain_iters=2, train_mb_size=32, train_epochs=2, eval_mb_size=64,
                    evaluator=evaluator, plugins=[
                        LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)),
                        reference])
    requests = generate_requests(5, 2, seed=1)
    for exp in RequestStream(bm, requests):
        strategy.train(exp)
    strategy.eval(bm.test_stream)
    values = evaluator.get_all_metrics()
    last = len(requests) - 1
    assert strategy.request_log.accuracy == reference.accuracy   # the records' source
    expected = compute_metrics(reference.accuracy, requests)
    for name in ("A_l", "A_u", "F_l", "F_u", "F_u_max"):
        xs, ys = values[f"UnlearningMetrics/{name}"]
        assert xs[-1] == last and ys[-1] == pytest.approx(expected[name]), name
    # relapse by hand: after each unlearning of t, t's largest later rise (0 if it only falls)
    rises = [max(0.0, max(row[r.task] for row in reference.accuracy[i + 1:])
                 - reference.accuracy[i][r.task])
             for i, r in enumerate(requests) if r.kind == "unlearn" and i < last]
    assert rises, "the sequence must unlearn before its last request"
    xs, ys = values["UnlearningMetrics/relapse"]
    assert xs[-1] == last and ys[-1] == pytest.approx(sum(rises) / len(rises))
    assert values["UnlearningMetrics/relapse_max"][1][-1] == pytest.approx(max(rises))
    for task in range(5):                              # the same rows as the runner's plugin
        xs, ys = values[f"UnlearningMetrics/accuracy/task{task}"]
        assert xs == list(range(len(requests)))
        assert ys == [row[task] for row in reference.accuracy]
    assert values["UnlearningMetrics/model_size_mb"][1][-1] == reference.model_sizes_mb[-1]
    # the last row, recomputed by hand: one test sample at a time through its task's head
    model = strategy.model.eval()
    with torch.no_grad():
        for task in range(5):
            data = bm.test_stream[task].dataset.eval()
            hits = [int(model(data[i][0][None], task).argmax()) == int(data[i][1])
                    for i in range(len(data))]
            assert reference.accuracy[-1][task] == pytest.approx(100 * sum(hits) / len(hits))
    # one after_request per request, in order, with the request's kind and task
    assert reference.requests == [
        (r.kind, r.task) for r in requests]
    logged = text.getvalue()
    assert "UnlearningMetrics/A_l = " in logged and "UnlearningMetrics/F_u = " in logged
    assert "Top1_Acc_Exp" in logged                    # Avalanche's own metric beside ours


def test_a_task_learned_again_after_unlearning_is_measured_without_the_papers_metrics():
    # L0 U0 L0 leaves the paper's protocol (a task learned twice): every request still ends
    # in after_request with its row; the paper's metrics stop where they are undefined
    from helpers import make_strategy

    strategy, bm, log = make_strategy("sequential", epochs=1, train_per_task=40)
    strategy.train(bm.train_stream[0])
    strategy.unlearn(0)
    strategy.train(bm.train_stream[0])
    assert [(r["kind"], r["task"]) for r in log.results] == [
        ("learn", 0), ("unlearn", 0), ("learn", 0)]
    values = strategy.evaluator.get_all_metrics()
    assert values["UnlearningMetrics/accuracy/task0"][0] == [0, 1, 2]
    assert values["UnlearningMetrics/accuracy/task0"][1] == [r["accuracy"][0]
                                                             for r in log.results]
    assert values["UnlearningMetrics/A_u"][0] == [1]      # defined after U0, not after L0 again


@pytest.mark.parametrize("method", [PALL, DERpp])
def test_evaluating_never_changes_training(method):
    # the same requests twice: with no metric at all, and with the paper's metrics, Avalanche's
    # accuracy and loss metrics, a logger, periodic evaluation and an eval() after every
    # request; every parameter must be bit-identical after every request
    def run(watched: bool) -> list[list[torch.Tensor]]:
        torch.manual_seed(0)
        bm = build_benchmark("digits", seed=0, train_per_task=60)
        model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5,
                            classes_per_task=2)
        metrics = [accuracy_metrics(minibatch=True, epoch=True, experience=True, stream=True),
                   loss_metrics(epoch=True, experience=True),
                   *unlearning_metrics(bm.test_stream, eval_mb_size=64)] if watched else []
        evaluator = EvaluationPlugin(*metrics, loggers=[TextLogger(io.StringIO())]
                                     if watched else [])
        strategy = method(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                          buffer_size=50, n_retrain_iters=3, train_mb_size=32, train_epochs=2,
                          eval_mb_size=64, evaluator=evaluator, eval_every=1 if watched else -1,
                          **({"alpha": 0.2} if method is PALL else {}))
        states = []
        for exp in RequestStream(bm, seq("L0 L1 U0 L2")):
            strategy.train(exp, eval_streams=[bm.test_stream] if watched else [])
            if watched:
                strategy.eval(bm.test_stream)
            states.append([p.detach().clone() for p in strategy.model.parameters()])
        return states

    plain, watched = run(False), run(True)
    for request, (a, b) in enumerate(zip(plain, watched, strict=True)):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), request


class PerIterationCount(UnlearningPlugin):
    """A logger that acts on every training iteration (as Avalanche's interactive one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.iterations = 0
        self.logged: list[str] = []

    def log_metrics(self, metric_values) -> None:
        self.logged += [f"{v.name}@{v.x_plot}={v.value}" for v in metric_values]

    def after_training_iteration(self, strategy, metric_values, **kwargs) -> None:
        self.iterations += 1


def test_the_request_evaluator_gives_metrics_and_loggers_what_avalanches_gives():
    """Skipping the events nobody acts on changes nothing a metric or logger receives: the
    same values in the same order (wall times aside), a per-iteration metric and a
    per-iteration logger served."""
    from pall_avalanche.evaluation import RequestEvaluator

    seen = {}
    for make in (EvaluationPlugin, RequestEvaluator):
        torch.manual_seed(0)
        bm = build_benchmark("digits", seed=0, train_per_task=60)
        model = build_model("mlp", input_shape=bm.split.input_shape, n_tasks=5,
                            classes_per_task=2)
        logger = PerIterationCount()
        evaluator = make(accuracy_metrics(minibatch=True, experience=True),
                         *unlearning_metrics(bm.test_stream, eval_mb_size=64), loggers=[logger])
        strategy = DERpp(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                         buffer_size=50, n_retrain_iters=2, train_mb_size=32, train_epochs=1,
                         eval_mb_size=64, evaluator=evaluator)
        for exp in RequestStream(bm, seq("L0 L1 U0")):
            strategy.train(exp)
        steps = 2 * -(-60 // 32)
        assert logger.iterations == steps
        assert sum("Top1_Acc_MB" in line for line in logger.logged) == steps
        assert sum("UnlearningMetrics/A_l" in line for line in logger.logged) == 3
        seen[make] = [line for line in logger.logged if "request_seconds" not in line]
    assert seen[EvaluationPlugin] == seen[RequestEvaluator]
