"""A learning request that leaves its own task at chance is flagged (a warning and a record
entry), because A_l alone would hide it."""

from __future__ import annotations

import pytest
import torch
from helpers import make_strategy

from pall_avalanche.evaluation import LearningWarning, balanced_accuracy, learning_failed


def test_chance_threshold_by_hand():
    # 2 classes, 120 samples: 2·sqrt(.25/120) = 0.0913 < 0.10, so chance + 10 points = 60 %
    assert learning_failed(60.0, 2, 120) and not learning_failed(60.01, 2, 120)
    # 2 classes, 20 samples: 2·sqrt(.25/20) = 0.2236 → 72.36 %
    assert learning_failed(72.3, 2, 20) and not learning_failed(72.4, 2, 20)
    # 10 classes, 5000 samples: 10 % + 10 points
    assert learning_failed(20.0, 10, 5000) and not learning_failed(20.1, 10, 5000)


def test_balanced_accuracy_is_the_mean_of_per_class_accuracies():
    strategy, bm, _ = make_strategy("sequential", epochs=1)
    strategy.train(bm.train_stream[0])
    data = bm.train_stream[0].dataset.eval()
    model = strategy.model.eval()
    hits: dict[int, list[bool]] = {}
    with torch.no_grad():
        for i in range(len(data)):               # one sample at a time, by hand
            x, y = data[i][0], int(data[i][1])
            hits.setdefault(y, []).append(int(model(x[None], 0).argmax()) == y)
    expected = 100 * sum(sum(h) / len(h) for h in hits.values()) / len(hits)
    assert balanced_accuracy(model, data, 0, batch_size=7) == pytest.approx(expected)


def test_a_request_left_at_chance_is_flagged_and_a_good_one_is_not():
    strategy, bm, evaluation = make_strategy("sequential", epochs=1)
    strategy.train(bm.train_stream[0])
    # all-zero weights: every logit is 0, no gradient reaches any weight, the argmax is class 0
    with torch.no_grad():
        for p in strategy.model.parameters():
            p.zero_()
    # the warning names the run (method and seed), the request and the task
    with pytest.warns(LearningWarning, match=r"^sequential seed 0: learning request 1 left task 1 "
                                             r"at chance on its own training data \(balanced "
                                             r"accuracy 50.0 %"):
        strategy.train(bm.train_stream[1])
    first, second = evaluation.learning_checks
    assert first["failed"] is False and first["train_balanced_accuracy"] > 90
    assert second == {"request": 1, "task": 1, "train_balanced_accuracy": 50.0,
                      "failed": True}


def test_the_check_leaves_the_training_randomness_alone():
    # the same run with and without the check's evaluation pass gives the same weights
    runs = []
    for check in (True, False):
        strategy, bm, _ = make_strategy("sequential", epochs=1)
        if not check:
            measurement = strategy.evaluator.metrics[0].measurement
            measurement._check_learning = lambda *args: None
        for exp in bm.train_stream[:2]:
            strategy.train(exp)
        runs.append([p.detach().clone() for p in strategy.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def test_records_carry_the_learning_checks(tmp_path):
    from helpers import FAST_CONFIG, seq

    from pall_avalanche.runs import run_record

    requests = seq("L0 L1 U0 L2")
    record = run_record("sequential", 0, FAST_CONFIG, requests=requests)
    checks = record["learning_checks"]
    assert [(c["request"], c["task"]) for c in checks] == [(0, 0), (1, 1), (3, 2)]
    assert all(c["failed"] is False and c["train_balanced_accuracy"] > 80 for c in checks)



def test_without_a_label_the_warning_names_the_strategy_class():
    """An Avalanche script's own ``unlearning_metrics(test_stream)`` has no label: the
    strategy's class names the run."""
    strategy, bm, _ = make_strategy("sequential", epochs=1)
    strategy.evaluator.metrics[0].measurement.label = None
    with torch.no_grad():
        for p in strategy.model.parameters():
            p.zero_()
    name = type(strategy).__name__
    with pytest.warns(LearningWarning, match=rf"^{name}: learning request 0 left task 0 at "):
        strategy.train(bm.train_stream[0])
