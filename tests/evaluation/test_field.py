"""The field's metrics against reference runs: by hand on small fixed inputs, and the live
Avalanche metric against the same computation from records."""

import math

import numpy as np
import pytest
from helpers import BUILT_IN_METHODS, FAST_CONFIG, seq

from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation.field import (
    accuracy_gain,
    feature_distance,
    field_metrics,
    linear_cka,
    reference_sequences,
    tug_of_war,
)
from pall_avalanche.evaluation.metrics import t_interval
from pall_avalanche.evaluation.references import FieldProbe, ReferenceMetrics
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs import run_record


def test_linear_cka_by_hand():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4))
    assert linear_cka(x, x) == pytest.approx(1.0)
    rotation, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    assert linear_cka(x, 3.0 * x @ rotation + 5.0) == pytest.approx(1.0)   # invariances
    assert linear_cka(x, rng.normal(size=(2000, 4))) < 0.02                 # independent
    # one column each: CKA is the squared correlation of the centred columns
    a, b = np.array([[1.0], [2.0], [3.0], [6.0]]), np.array([[1.0], [0.0], [2.0], [1.0]])
    ac, bc = a[:, 0] - a.mean(), b[:, 0] - b.mean()
    assert linear_cka(a, b) == pytest.approx((ac @ bc) ** 2 / ((ac @ ac) * (bc @ bc)))
    assert linear_cka(a, np.ones((4, 1))) == 0.0


def test_feature_distances_by_hand():
    f = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 0.0]])
    g = np.array([[0.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    assert feature_distance(f, g, "euclidean") == pytest.approx((5 + math.sqrt(5) + math.sqrt(2))
                                                                / 3)
    # rows: a zero row counts as orthogonal (cosine 0), [1, 0]·[0, 2] = 0
    assert feature_distance(f, g, "cosine") == pytest.approx(1.0)
    assert feature_distance(f, 2 * f, "cosine") == pytest.approx(0.0)  # the zero rows agree
    assert feature_distance(f, f, "cka") == pytest.approx(0.0)
    # identical features are at distance 0 where the formulas have no value: zero rows, and
    # constant matrices (CKA 0 by the formula)
    zeros, constant = np.zeros((3, 2)), np.full((3, 2), 4.0)
    assert feature_distance(zeros, zeros, "cosine") == 0.0
    assert feature_distance(constant, constant, "cka") == 0.0
    assert feature_distance(constant, constant + 1, "cka") == 1.0   # CKA of constants is 0
    assert feature_distance(zeros, f, "cosine") == pytest.approx(2 / 3)  # one identical row
    with pytest.raises(ValueError, match="unknown feature distance 'l1'"):
        feature_distance(f, g, "l1")


def gram_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA from the centred Gram matrices (the HSIC form, not the feature form the
    package uses): <HKH, HLH> / (‖HKH‖ ‖HLH‖), K = XXᵀ, L = YYᵀ."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l_ = h @ x @ x.T @ h, h @ y @ y.T @ h
    return float((k * l_).sum() / (np.linalg.norm(k) * np.linalg.norm(l_)))


def test_distances_per_test_batch_averaged_with_equal_weight():
    """The field table's form (CLArena's accumulation over test batches) against the whole-set
    form, both by hand: batches of 3 over 7 inputs are rows 0-2, 3-5 and 6, each weighing a
    third."""
    rng = np.random.default_rng(0)
    f, g = rng.normal(size=(7, 4)), rng.normal(size=(7, 4))
    batches = [slice(0, 3), slice(3, 6), slice(6, 7)]
    euclid = [np.linalg.norm(f[b] - g[b], axis=1).mean() for b in batches]
    assert feature_distance(f, g, "euclidean", batch_size=3) == pytest.approx(np.mean(euclid))
    assert feature_distance(f, g, "euclidean") == pytest.approx(
        np.linalg.norm(f - g, axis=1).mean())
    assert np.mean(euclid) != pytest.approx(np.linalg.norm(f - g, axis=1).mean())
    cosine = [np.mean(1 - (f[b] * g[b]).sum(1) / np.linalg.norm(f[b], axis=1)
                      / np.linalg.norm(g[b], axis=1)) for b in batches]
    assert feature_distance(f, g, "cosine", batch_size=3) == pytest.approx(np.mean(cosine))
    # a batch of one input has no centred variance: CKA 0 by the formula, distance 1
    cka = [1 - gram_cka(f[b], g[b]) for b in batches[:2]] + [1.0]
    assert feature_distance(f, g, "cka", batch_size=3) == pytest.approx(np.mean(cka))
    assert feature_distance(f, g, "cka") == pytest.approx(1 - gram_cka(f, g))
    assert feature_distance(f, f, "cka", batch_size=3) == 0.0
    with pytest.raises(ValueError, match="batch_size=0 must be an integer >= 1 or None"):
        feature_distance(f, g, "cka", batch_size=0)


def test_accuracy_gain_tow_and_interval_by_hand():
    assert accuracy_gain([90, 40, 80], [85, 95, 70], [0, 2]) == pytest.approx(7.5)
    assert accuracy_gain([90], [85], []) is None
    assert tug_of_war({"forget": 0.5, "retain": 0.9, "test": 0.8},
                      {"forget": 0.55, "retain": 1.0, "test": 0.8}) == pytest.approx(0.95 * 0.9)
    mean, low, high = t_interval([1.0, 2.0, 4.0])
    half = 4.302652729911275 * np.std([1, 2, 4], ddof=1) / math.sqrt(3)   # t_{0.975, 2}
    assert (mean, low, high) == pytest.approx((7 / 3, 7 / 3 - half, 7 / 3 + half))


def _probe(features: dict, train: dict, test: dict) -> dict:
    return {"features": {str(t): f for t, f in features.items()},
            "train": {str(t): {"correct": c, "n": 10} for t, c in train.items()},
            "test": {str(t): {"correct": c, "n": 10} for t, c in test.items()}}


def test_field_metrics_of_records_by_hand():
    requests = RequestSequence.parse("L0 L1 L2 U1", 3).to_list()
    record = {"requests": requests, "accuracy": [[0, 0, 0], [90.0, 60.0, 80.0]],
              "eval_batch_size": 1,
              "probe": _probe({1: [[1.0, 0.0], [0.0, 1.0]]}, {0: 9, 1: 6, 2: 8},
                              {0: 9, 1: 5, 2: 8})}
    retrained = {"accuracy": [[0, 0, 0], [88.0, 50.0, 84.0]],
                 "probe": _probe({1: [[1.0, 0.0], [0.0, 3.0]]}, {0: 10, 1: 5, 2: 8},
                                 {0: 9, 1: 5, 2: 7})}
    never = {"accuracy": [[0, 0, 0], [92.0, 95.0, 79.0]]}
    out = field_metrics(record, retrained, never)
    assert out["accuracy_gain"] == pytest.approx(((90 - 92) + (80 - 79)) / 2)
    assert out["dd_euclidean"] == pytest.approx(1.0)         # rows 0 and 2 apart, mean 1
    assert out["dd_cosine"] == pytest.approx(0.0)
    # batches of one input: the equal row at 0, the other at 1 (no centred variance, CKA 0)
    assert out["dd_cka"] == pytest.approx(0.5)
    # forget 6/10 vs 5/10, retain 17/20 vs 18/20, test 22/30 vs 21/30
    assert out["tow"] == pytest.approx(0.9 * 0.95 * (1 - 1 / 30))
    no_unlearning = {**record, "requests": RequestSequence.parse("L0 L1 L2", 3).to_list()}
    assert field_metrics(no_unlearning, retrained, never)["tow"] is None


def test_the_avalanche_metric_reports_what_the_records_give():
    config = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_tasks": 5}
    requests = RequestSequence.parse("L0 L1 L2 U1", 5)
    retrained = run_record("independent", 0, config, requests=requests.without_tasks([1]),
                           probe=FieldProbe)
    never = run_record("independent", 0, config, requests=RequestSequence.parse("L0 L1 L2", 5),
                       probe=FieldProbe)
    benchmark = build_benchmark("digits", seed=0, n_tasks=5, train_per_task=40)
    metric = ReferenceMetrics(benchmark, retrained, never)
    record = run_record("independent", 0, config, requests=requests, probe=FieldProbe,
                        plugins=[metric])
    expected = field_metrics(record, retrained, never)
    assert metric.result() == pytest.approx(expected)
    # Independent deletes task 1's model: task 1 runs through the one never-trained model in
    # both, so its features are those of the retrained reference
    assert expected["dd_euclidean"] == pytest.approx(0.0, abs=1e-4)
    assert expected["dd_cka"] == pytest.approx(0.0, abs=1e-6)


def test_reference_sequences_in_clarenas_form_and_on_the_protocol():
    sequence = seq("L0 L1 U0 L2 M1 L3 U3", 4)        # unlearnable_age 2: M1 before L3
    retrained, never = reference_sequences(sequence)
    assert (str(retrained), str(never)) == ("P1 P2", "P0 P1 P2 P3")
    retrained, never = reference_sequences(sequence, "protocol", 2)
    assert (str(retrained), str(never)) == ("L1 L2 M1", "L0 L1 M0 L2 M1 L3")
    with pytest.raises(ValueError, match="reference form 'oracle' is invalid; valid:"):
        reference_sequences(sequence, "oracle")
    with pytest.raises(ValueError, match="L0 U0: every task it learns is unlearned"):
        reference_sequences(seq("L0 U0", 4))


@pytest.mark.parametrize(("method", "learner"), [("clpu_derpp", "derpp"),
                                                 ("amnesiac_hat", "hat")])
def test_clarenas_references_are_the_method_with_unlearning_off(method, learner):
    """CLArena runs its references with unlearning disabled: CLPU-DER++ is then DER++ (every
    task in the main network, no side network), Amnesiac HAT is HAT (no backups). The
    continual form's run of the method equals its learner's run of the same tasks request by
    request, where the run of the sequence itself (the protocol's form) does not."""
    config = {**FAST_CONFIG, "epochs": 1, "train_per_task": 60}
    sequence = seq("L0 L1 L2 U1")
    retrained, never = reference_sequences(sequence)
    learner_runs = [run_record(learner, 0, config, requests=seq(str(s).replace("P", "L")))
                    for s in (retrained, never)]
    for reference, expected in zip((retrained, never), learner_runs, strict=True):
        record = run_record(method, 0, config, requests=reference)
        assert record["accuracy"] == expected["accuracy"]
        assert record["model_size_mb_per_request"] == expected["model_size_mb_per_request"]
    on_protocol = run_record(method, 0, config,
                             requests=reference_sequences(sequence, "protocol")[1])
    assert on_protocol["accuracy"] != learner_runs[1]["accuracy"]


@pytest.mark.parametrize("method", [m for m in BUILT_IN_METHODS
                                    if m not in ("clpu_derpp", "amnesiac_hat")])
def test_a_permanent_learning_request_trains_as_a_temporary_one(method):
    """CLArena's references learn every task permanently; for every method but CLPU-DER++ and
    Amnesiac HAT that is the run of the same learning requests, record for record."""
    config = {**FAST_CONFIG, "epochs": 1, "train_per_task": 60}
    temporary = run_record(method, 0, config, requests=seq("L0 L1 L2"))
    permanent = run_record(method, 0, config, requests=seq("P0 P1 P2"))
    assert permanent["accuracy"] == temporary["accuracy"]
    assert permanent["model_size_mb_per_request"] == temporary["model_size_mb_per_request"]
