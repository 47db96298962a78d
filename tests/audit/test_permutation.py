"""The audit's calibrated tests (pall_avalanche.audit.permutation) against independent
computations, and their false-positive rates on simulated label-independent features: within
nominal for the permutation tests, above it for the second edition's bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedGroupKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pall_avalanche.audit.attacks import lira_scores
from pall_avalanche.audit.permutation import (
    eq1_test,
    gaussian_kl,
    holm,
    kl_test,
    lira_loo_scores,
    lower_bound,
    membership_test,
    p_value,
    ridge_scores,
    row_aucs,
    seed_folds,
    upper_bound,
)
from pall_avalanche.audit.statistics import roc_auc

#: Simulated null replicates and the largest false-positive rate accepted at a nominal 5 %.
NOMINAL, ACCEPTED = 0.05, 0.07


# ------------------------------------------------------------------------- small pieces
def test_p_value_holm_and_bound_by_hand():
    null = np.array([0.1, 0.2, 0.3, 0.4])
    assert p_value(0.3, null) == pytest.approx(3 / 5)      # 1 + #{0.3, 0.4}
    assert p_value(0.9, null) == pytest.approx(1 / 5)
    # Holm: sorted 0.01, 0.02, 0.04 of m = 3 → 0.03, max(0.03, 0.04), max(0.04, 0.04); NaN kept
    adjusted = holm({"a": 0.04, "b": 0.01, "c": 0.02, "d": float("nan")})
    assert adjusted["b"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.04)
    assert adjusted["a"] == pytest.approx(0.04) and math.isnan(adjusted["d"])
    assert holm({"a": 0.6, "b": 0.5}) == {"a": 1.0, "b": 1.0}
    # bound: the observed value plus the distance from the centre down to the 5 % quantile
    null = np.linspace(0.4, 0.6, 101)                       # 5 % quantile 0.41
    assert upper_bound(0.52, null, 0.5) == pytest.approx(0.52 + 0.09)
    assert upper_bound(0.99, null, 0.5) == 1.0
    # and the lower one down from the 95 % quantile 0.59; at least 0
    assert lower_bound(0.52, null, 0.5) == pytest.approx(0.52 - 0.09)
    assert lower_bound(0.01, null, 0.5, level=0.975) == 0.0
    # a statistic that could not be computed is no detection
    assert math.isnan(p_value(float("nan"), null))


def test_row_aucs_match_roc_auc_row_by_row():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(5, 12)).round(1)              # ties
    labels = rng.integers(0, 2, (5, 12))
    labels[:, 0], labels[:, 1] = 0, 1
    assert row_aucs(scores, labels) == pytest.approx([roc_auc(s, y) for s, y
                                                      in zip(scores, labels, strict=True)])
    assert math.isnan(row_aucs(scores[:1], np.zeros((1, 12)))[0])


def test_lira_loo_scores_equal_one_fit_per_left_out_run():
    rng = np.random.default_rng(1)
    features = rng.normal(size=(10, 6, 2))
    member = rng.random((10, 6)) < 0.5
    member[:, 3] = False
    member[0, 3] = member[1, 3] = True          # 1 IN run besides each target: pooled variance
    member[:, 4] = False                        # never IN: score 0
    expected = np.concatenate([lira_scores(features, member, [r]) for r in range(10)])
    assert lira_loo_scores(features, member) == pytest.approx(expected, abs=1e-9)
    assert np.all(lira_loo_scores(features, member)[:, 4] == 0)
    # a stack of memberships (permutations) is scored as separate calls
    stack = np.stack([member, member[::-1], ~member])
    for i in range(3):
        assert lira_loo_scores(features, stack)[i] == pytest.approx(
            lira_loo_scores(features, stack[i]), abs=1e-12)


def test_ridge_scores_are_a_regularised_least_squares_fit_per_fold():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(12, 3)) * [1, 10, 0.1]
    y = np.tile([1, 0], 6)
    folds = seed_folds(np.repeat(np.arange(6), 2), 3)
    assert sorted(np.concatenate(folds)) == list(range(12))
    assert all(len(np.unique(f // 2)) * 2 == len(f) for f in folds)   # pairs stay whole
    scores = ridge_scores(x, y, folds, ridge=2.0)[0]
    for test in folds:
        train = np.setdiff1d(np.arange(12), test)
        mean, std = x[train].mean(0), x[train].std(0)
        z = (x[train] - mean) / std
        target = y[train] - y[train].mean()
        # min |z w - target|² + 2 |w|²: least squares on the rows stacked with sqrt(2)·I
        w = np.linalg.lstsq(np.vstack([z, math.sqrt(2.0) * np.eye(3)]),
                            np.r_[target, np.zeros(3)], rcond=None)[0]
        assert scores[test] == pytest.approx(y[train].mean() + ((x[test] - mean) / std) @ w)


def test_gaussian_kl_by_formula():
    a = np.array([[0.0], [2.0]])            # mean 1, sample std sqrt(2)
    b = np.array([[1.0], [2.0], [3.0]])     # mean 2, sample std 1
    expected = math.log(1 / math.sqrt(2)) + (2 + 1) / 2 - 0.5
    assert gaussian_kl(a, b)[0] == pytest.approx(expected)
    assert gaussian_kl(b, b)[0] == pytest.approx(0.0)


# ------------------------------------------------------------------------- power
def test_each_test_finds_a_real_difference():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(16), 2)
    labels = np.tile([1, 0], 16)
    shifted = rng.normal(size=(32, 5)) + labels[:, None]
    found = eq1_test(shifted, labels, groups, n_permutations=200)
    assert found["auc"] > 0.8 and found["p"] == pytest.approx(1 / 201)
    found = eq1_test(shifted, labels, np.arange(32), n_permutations=200, paired=False)
    assert found["auc"] > 0.8 and found["p"] == pytest.approx(1 / 201)
    member = rng.random((16, 20)) < 0.5
    features = rng.normal(size=(16, 20, 2)) + member[:, :, None]
    found = membership_test(features, member, n_permutations=200)
    assert found["auc"] > 0.7 and p_value(found["auc"], found["null_auc"]) == 1 / 201
    found = kl_test(rng.normal(size=(16, 30)) + 2, rng.normal(size=(16, 30)),
                           n_permutations=200)
    assert found["q0.5_p"] == found["q0.9_p"] == pytest.approx(1 / 201)


# ------------------------------------------------------------------------- calibration
def test_eq1_permutation_test_is_calibrated():
    """Features independent of the label, 16 seed pairs: the test rejects at 5 % in at most
    7 % of 400 replicates."""
    rng = np.random.default_rng(4)
    groups, labels = np.repeat(np.arange(16), 2), np.tile([1, 0], 16)
    rejected = [eq1_test(rng.normal(size=(32, 17)), labels, groups, n_permutations=200,
                         seed=i)["p"] < NOMINAL for i in range(400)]
    assert np.mean(rejected) <= ACCEPTED


def test_unpaired_eq1_null_is_every_relabelling_of_the_models():
    """Unpaired, six models (three of each label): every null AUC is the statistic of one of
    the C(6, 3) = 20 relabellings (computed here, each with the same folds), and the null's
    mean is theirs; a model whose samples carry two labels is refused."""
    from itertools import combinations
    rng = np.random.default_rng(11)
    features = rng.normal(size=(6, 4))
    labels, groups = np.array([1, 1, 1, 0, 0, 0]), np.arange(6)
    found = eq1_test(features, labels, groups, n_folds=3, n_permutations=4000, paired=False)
    folds = seed_folds(groups, 3)
    every = []
    for ones in combinations(range(6), 3):
        relabelled = np.isin(np.arange(6), ones).astype(int)
        every.append(float(row_aucs(ridge_scores(features, relabelled, folds)[0],
                                    relabelled)))
    assert all(np.isclose(every, value).any() for value in found["null"])
    assert found["null_mean"] == pytest.approx(np.mean(every), abs=0.02)
    assert found["auc"] == pytest.approx(every[0])          # models 0, 1, 2 labelled 1
    with pytest.raises(ValueError, match="unpaired, every group is one model"):
        eq1_test(features, labels, np.repeat(np.arange(3), 2), paired=False)


def test_unpaired_eq1_is_calibrated():
    """32 models with label-independent features: the unpaired test rejects at 5 % in at most
    7 % of 300 replicates."""
    rng = np.random.default_rng(12)
    labels, groups = np.tile([1, 0], 16), np.arange(32)
    rejected = [eq1_test(rng.normal(size=(32, 17)), labels, groups, n_permutations=100,
                         seed=i, paired=False)["p"] < NOMINAL for i in range(300)]
    assert np.mean(rejected) <= ACCEPTED


def test_membership_permutation_test_is_calibrated():
    rng = np.random.default_rng(5)
    rejected = []
    for i in range(200):
        member = rng.random((16, 20)) < 0.5
        found = membership_test(rng.normal(size=(16, 20, 2)), member, n_permutations=100,
                                seed=i)
        rejected.append(p_value(found["auc"], found["null_auc"]) < NOMINAL)
    assert np.mean(rejected) <= ACCEPTED


def test_kl_test_on_in_runs_fits_each_example_on_its_own_runs():
    """With memberships, each example's KL is gaussian_kl of its IN runs only (computed here
    example by example); with every run IN it is the plain KL; a shift confined to the IN
    runs is found, and both nulls (paired, unpaired) find it."""
    rng = np.random.default_rng(8)
    member = rng.random((16, 12)) < 0.5
    first, second = rng.normal(size=(16, 12)), rng.normal(size=(16, 12))
    found = kl_test(first, second, member=member, n_permutations=20)
    for j in range(12):
        rows = member[:, j]
        expected = gaussian_kl(first[rows, j:j + 1], second[rows, j:j + 1])[0] \
            if rows.sum() >= 2 else np.nan
        assert found["kl"][j] == pytest.approx(expected, nan_ok=True)
    plain = kl_test(first, second, n_permutations=20)["kl"]
    assert plain == pytest.approx(gaussian_kl(first, second))
    shifted = first + 3 * member
    for paired in (True, False):
        found = kl_test(shifted, second, member=member, paired=paired, n_permutations=200)
        assert found["q0.5_p"] == pytest.approx(1 / 201)


@pytest.mark.parametrize("paired", [True, False])
def test_kl_test_on_in_runs_is_calibrated(paired):
    rng = np.random.default_rng(9)
    rejected = []
    for i in range(200):
        member = rng.random((16, 30)) < 0.5
        rejected.append(kl_test(rng.normal(size=(16, 30)), rng.normal(size=(16, 30)),
                                member=member, paired=paired, n_permutations=100,
                                seed=i)["q0.9_p"] < NOMINAL)
    assert np.mean(rejected) <= ACCEPTED


def test_kl_test_is_calibrated():
    rng = np.random.default_rng(6)
    rejected = [kl_test(rng.normal(size=(16, 30)), rng.normal(size=(16, 30)),
                               n_permutations=100, seed=i)["q0.9_p"] < NOMINAL
                for i in range(300)]
    assert np.mean(rejected) <= ACCEPTED


@pytest.mark.slow
def test_the_second_editions_bootstrap_interval_is_not_calibrated():
    """The procedure the permutation test replaces, written out here: a standardised
    logistic regression cross-validated with seeds kept whole, its out-of-fold AUC and a
    percentile bootstrap over seeds of those fixed scores; "leak" when the 95 % interval
    excludes 0.5. On label-independent features it rejects far more often than 5 %."""
    rng = np.random.default_rng(7)
    groups, labels = np.repeat(np.arange(16), 2), np.tile([1, 0], 16)
    rejected = []
    for _ in range(200):
        x = rng.normal(size=(32, 17))
        folds = StratifiedGroupKFold(n_splits=5, shuffle=True, random_state=0)
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        scores = cross_val_predict(model, x, labels, cv=folds, groups=groups,
                                   method="predict_proba")[:, 1]
        boots = []
        for _ in range(500):
            pick = rng.integers(0, 16, 16)
            index = np.concatenate([np.flatnonzero(groups == g) for g in pick])
            boots.append(roc_auc(scores[index], labels[index]))
        low, high = np.percentile(boots, [2.5, 97.5])
        rejected.append(not low <= 0.5 <= high)
    assert np.mean(rejected) > ACCEPTED
