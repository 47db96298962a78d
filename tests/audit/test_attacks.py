"""The attack statistics against hand computations: logit-scaled confidences, the
per-example Gaussian likelihood ratio, leave-one-run-out scores, ROC points, bootstrap
summaries and the relearning gap."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from pall_avalanche.audit.attacks import (
    attack_summary,
    confidence_features,
    lira_scores,
    logit_confidence,
    relearning_gap,
    roc_curve,
    steps_to_threshold,
    tpr_at_fpr,
)
from pall_avalanche.audit.permutation import lira_loo_scores

#: Student-t 0.975 quantile with 2 degrees of freedom (tables).
T975_DF2 = 4.302652729911275


def log_pdf(x: float, mean: float, std: float) -> float:
    # log of exp(-(x - mean)² / (2 std²)) / sqrt(2π std²), expanded so it cannot underflow
    return -((x - mean) ** 2) / (2 * std**2) - 0.5 * math.log(2 * math.pi * std**2)


def hand_ratio(x: float, ins: list[float], outs: list[float], min_std: float = 1e-3) -> float:
    s_in = max(statistics.stdev(ins), min_std)
    s_out = max(statistics.stdev(outs), min_std)
    return (log_pdf(x, statistics.mean(ins), s_in) - log_pdf(x, statistics.mean(outs), s_out))


# ------------------------------------------------------------------------- confidences
def test_logit_confidence_two_classes_by_hand():
    logits = np.array([[2.0, -1.0, 0.5, 0.25],
                       [0.0, 1.0, -2.0, 3.0]])
    y = np.array([0, 1])
    # head 0: row 0 → 2 - (-1) = 3; row 1 → 1 - 0 = 1
    assert logit_confidence(logits, y, 0, 2) == pytest.approx([3.0, 1.0])
    # head 1: row 0 → 0.5 - 0.25; row 1 → 3 - (-2) = 5
    assert logit_confidence(logits, y, 1, 2) == pytest.approx([0.25, 5.0])
    # the definition log p - log(1 - p) with p the head's softmax probability
    p = math.exp(2.0) / (math.exp(2.0) + math.exp(-1.0))
    assert logit_confidence(logits, y, 0, 2)[0] == pytest.approx(math.log(p) - math.log(1 - p))
    feats = confidence_features(logits, y, [1, 0], 2)
    assert feats.shape == (2, 2)
    assert feats == pytest.approx(np.array([[0.25, 3.0], [5.0, 1.0]]))


def test_logit_confidence_three_classes_by_hand_and_stable():
    logits = np.array([[1.0, 2.0, 3.0],
                       [1000.0, 0.0, 0.0]])
    y = np.array([2, 0])
    e = [math.exp(v) for v in (1.0, 2.0, 3.0)]
    p = e[2] / sum(e)
    phi = logit_confidence(logits, y, 0, 3)
    assert phi[0] == pytest.approx(math.log(p) - math.log(1 - p))
    assert phi[0] == pytest.approx(3.0 - math.log(math.e + math.e**2))
    assert phi[1] == pytest.approx(1000.0 - math.log(2.0))   # p rounds to 1 in float
    assert phi.dtype == np.float64


def test_logit_confidence_rejects_bad_labels():
    with pytest.raises(ValueError):
        logit_confidence(np.zeros((1, 4)), np.array([2]), 0, 2)


# ------------------------------------------------------------------------- likelihood ratio
def one_example_runs():
    # runs 0-2 IN with values 1, 2, 3; runs 3-5 OUT with 0, 0.5, 1; run 6 is the target
    features = np.array([1.0, 2.0, 3.0, 0.0, 0.5, 1.0, 1.5])[:, None]
    member = np.array([True, True, True, False, False, False, True])[:, None]
    return features, member


def test_lira_one_dimension_by_formula():
    features, member = one_example_runs()
    # IN: mean 2, sample std 1; OUT: mean 0.5, sample std 0.5; x = 1.5
    expected = (-0.5 * math.log(2 * math.pi) - math.log(1.0) - (1.5 - 2.0) ** 2 / (2 * 1.0**2)) - (
        -0.5 * math.log(2 * math.pi) - math.log(0.5) - (1.5 - 0.5) ** 2 / (2 * 0.5**2))
    assert expected == pytest.approx(1.875 + math.log(0.5))
    scores = lira_scores(features, member, [6])
    assert scores.shape == (1, 1)
    assert scores[0, 0] == pytest.approx(expected)
    assert lira_scores(features[:, :, None], member, [6])[0, 0] == pytest.approx(expected)
    # the target's own membership never enters the fit
    flipped = member.copy()
    flipped[6] = False
    assert lira_scores(features, flipped, [6])[0, 0] == pytest.approx(expected)


def test_lira_two_dimensions_sum():
    first, member = one_example_runs()
    second = np.array([10.0, 12.0, 14.0, 9.0, 10.0, 11.0, 11.0])[:, None]
    features = np.stack([first, second], axis=2)        # (7, 1, 2)
    # dim 1: IN mean 12 std 2, OUT mean 10 std 1, x = 11
    dim0 = hand_ratio(1.5, [1, 2, 3], [0, 0.5, 1])
    dim1 = (-math.log(2.0) - 1 / 8) - (-math.log(1.0) - 1 / 2)
    assert dim1 == pytest.approx(hand_ratio(11.0, [10, 12, 14], [9, 10, 11]))
    assert lira_scores(features, member, [6])[0, 0] == pytest.approx(dim0 + dim1)


def test_lira_global_variance_pools_within_example():
    # example 0: IN 1,2,3 / OUT 0,.5,1 (runs 0-2 IN); example 1: IN 5,7 (runs 0,1) /
    # OUT 1,2,3,6 (runs 2-5); run 6 is the target with x = (1.5, 4)
    features = np.array([[1, 5], [2, 7], [3, 1], [0, 2], [0.5, 3], [1, 6], [1.5, 4.0]])
    member = np.array([[1, 1], [1, 1], [1, 0], [0, 0], [0, 0], [0, 0], [1, 1]], dtype=bool)
    var_in = (2.0 + 2.0) / (2 + 1)          # squares 1+0+1 over 2 dof, 1+1 over 1 dof
    var_out = (0.5 + 14.0) / (2 + 3)        # squares .25+0+.25, 4+1+0+9
    std_in, std_out = math.sqrt(var_in), math.sqrt(var_out)
    expected = [log_pdf(1.5, 2.0, std_in) - log_pdf(1.5, 0.5, std_out),
                log_pdf(4.0, 6.0, std_in) - log_pdf(4.0, 3.0, std_out)]
    got = lira_scores(features, member, [6], global_variance=True)
    assert got[0] == pytest.approx(expected)
    per_example = lira_scores(features, member, [6])
    assert per_example[0, 0] == pytest.approx(hand_ratio(1.5, [1, 2, 3], [0, 0.5, 1]))
    assert per_example[0, 1] == pytest.approx(hand_ratio(4.0, [5, 7], [1, 2, 3, 6]))


def test_lira_fallbacks_and_std_floor():
    # example 0: full; example 1: a single IN run → global variances; example 2: no IN → 0
    features = np.array([[1, 4, 2], [2, 1, 2], [3, 2, 2], [0, 3, 2], [0.5, 4, 2], [1, 5, 2],
                         [1.5, 3.5, 7]])
    member = np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0],
                       [1, 1, 1]], dtype=bool)
    std_in = 1.0                                   # example 0 alone (2 / 2 dof)
    std_out = math.sqrt((0.5 + 10.0 + 0.0) / (2 + 4 + 5))
    got = lira_scores(features, member, [6])[0]
    assert got[0] == pytest.approx(hand_ratio(1.5, [1, 2, 3], [0, 0.5, 1]))
    assert got[1] == pytest.approx(log_pdf(3.5, 4.0, std_in) - log_pdf(3.5, 3.0, std_out))
    assert got[2] == 0.0
    # identical OUT values: the std is floored at min_std
    features = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.05])[:, None]
    member = np.array([1, 1, 1, 0, 0, 0, 0], dtype=bool)[:, None]
    got = lira_scores(features, member, [6], min_std=0.1)[0, 0]
    assert got == pytest.approx(log_pdf(0.05, 2.0, 1.0) - log_pdf(0.05, 0.0, 0.1))


def test_lira_leave_one_run_out_by_hand():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(6, 4))
    member = np.array([rng.permutation([1, 1, 1, 0, 0, 0]) for _ in range(4)], dtype=bool).T
    scores = lira_loo_scores(features, member)
    assert scores.shape == (6, 4)
    for r in range(6):
        for n in range(4):
            others = [q for q in range(6) if q != r]
            ins = [features[q, n] for q in others if member[q, n]]
            outs = [features[q, n] for q in others if not member[q, n]]
            assert scores[r, n] == pytest.approx(hand_ratio(features[r, n], ins, outs))


# ------------------------------------------------------------------------- ROC
SCORES = [0.9, 0.8, 0.8, 0.7, 0.5, 0.5, 0.3]
LABELS = [1, 1, 0, 1, 0, 1, 0]          # 4 positives, 3 negatives


def test_roc_curve_by_hand_with_ties():
    fpr, tpr = roc_curve(SCORES, LABELS)
    assert fpr == pytest.approx([0, 0, 1 / 3, 1 / 3, 2 / 3, 1])
    assert tpr == pytest.approx([0, 0.25, 0.5, 0.75, 1, 1])


def test_roc_curve_endpoints():
    rng = np.random.default_rng(0)
    scores, labels = rng.normal(size=50), rng.integers(0, 2, 50)
    fpr, tpr = roc_curve(scores, labels)
    assert (fpr[0], tpr[0]) == (0.0, 0.0)
    assert (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert (np.diff(fpr) >= 0).all() and (np.diff(tpr) >= 0).all()


def test_tpr_at_fpr_by_hand():
    # the tie at 0.8 puts a negative with the second positive, so FPR 0 only reaches 1/4
    assert tpr_at_fpr(SCORES, LABELS, 0.0) == pytest.approx(0.25)
    assert tpr_at_fpr(SCORES, LABELS, 0.3) == pytest.approx(0.25)
    assert tpr_at_fpr(SCORES, LABELS, 0.34) == pytest.approx(0.75)
    assert tpr_at_fpr(SCORES, LABELS, 0.5) == pytest.approx(0.75)
    assert tpr_at_fpr(SCORES, LABELS, 0.7) == pytest.approx(1.0)
    assert tpr_at_fpr(SCORES, LABELS, 1 / 3) == pytest.approx(0.75)   # FPR exactly at the bound
    # few negatives: no rule with a negative has FPR ≤ 1%
    assert tpr_at_fpr([0.9, 0.8, 0.1], [0, 1, 1], 0.01) == 0.0
    assert tpr_at_fpr([0.9, 0.5, 0.1], [1, 0, 1], 0.01) == pytest.approx(0.5)


def test_attack_summary_separable():
    member = np.tile(np.r_[np.ones(10, int), np.zeros(10, int)], (5, 1))    # 5 runs × 20
    scores = member + np.random.default_rng(1).uniform(0, 0.5, member.shape)
    out = attack_summary(scores, member)
    for name in ("auc", "tpr@0.01", "tpr@0.001", "inout_auc"):
        assert out[name] == 1.0
    assert out["n_groups"] == 5 and out["n_scores"] == 100


def test_attack_summary_by_hand():
    scores = np.array([[0.9, 0.2, 0.6], [0.4, 0.8, 0.1]])
    member = np.array([[1, 0, 0], [0, 1, 1]])
    # pooled: IN {0.9, 0.8, 0.1} against OUT {0.2, 0.6, 0.4}: 0.9 and 0.8 beat all 3, 0.1 none
    out = attack_summary(scores, member, fprs=(0.34,))
    assert out["auc"] == pytest.approx(6 / 9)
    # at most 1 of 3 OUT scores above the threshold: the threshold 0.6 passes 0.9 and 0.8
    assert out["tpr@0.34"] == pytest.approx(2 / 3)
    # run 0: 0.9 above both OUT → 1; run 1: IN {0.8, 0.1} vs OUT {0.4} → 1/2
    assert out["inout_auc"] == pytest.approx(0.75)


# ------------------------------------------------------------------------- relearning
def test_steps_to_threshold():
    curve = [10, 40, 60, 60, 90]
    assert steps_to_threshold(curve, 60) == 2
    assert steps_to_threshold(curve, 10) == 0
    assert steps_to_threshold(curve, 59.5) == 2
    assert steps_to_threshold(curve, 95) is None
    assert steps_to_threshold([], 1) is None


def test_relearning_gap_by_hand():
    unlearned = [[10, 55, 70], [20, 40, 52], [60, 80, 90]]
    oracle = [[5, 30, 60], [10, 20, 45], [0, 40, 50]]
    # steps to 50: unlearned 1, 2, 0; oracle 2, never (censored at 3), 2 → gaps 1, 1, 2
    # accuracy at step 1: 55-30, 40-20, 80-40 = 25, 20, 40
    out = relearning_gap(unlearned, oracle, 50, 1)
    steps_mean, steps_sd = 4 / 3, math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)
    acc_mean = 85 / 3
    acc_sd = math.sqrt(((25 - acc_mean) ** 2 + (20 - acc_mean) ** 2 + (40 - acc_mean) ** 2) / 2)
    assert out["n"] == 3
    assert out["steps_gap"] == pytest.approx(steps_mean)
    assert out["steps_gap_low"] == pytest.approx(steps_mean - T975_DF2 * steps_sd / math.sqrt(3))
    assert out["steps_gap_high"] == pytest.approx(steps_mean + T975_DF2 * steps_sd / math.sqrt(3))
    assert out["acc_gap"] == pytest.approx(acc_mean)
    assert out["acc_gap_low"] == pytest.approx(acc_mean - T975_DF2 * acc_sd / math.sqrt(3))
    assert out["acc_gap_high"] == pytest.approx(acc_mean + T975_DF2 * acc_sd / math.sqrt(3))


def test_relearning_gap_two_seeds_and_mismatch():
    # steps to 50: (0 vs 3) and (1 vs 1) → gaps 3, 0; accuracy at 0: 50-0, 10-0
    out = relearning_gap([[50, 60, 70], [10, 50, 60]], [[0, 10, 20], [0, 60, 70]], 50, 0)
    assert out["n"] == 2
    assert out["steps_gap"] == pytest.approx(1.5)
    assert out["acc_gap"] == pytest.approx(30.0)
    with pytest.raises(ValueError):
        relearning_gap([[1, 2]], [[1, 2, 3]], 2, 0)
