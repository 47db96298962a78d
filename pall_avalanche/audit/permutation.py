"""The audit's calibrated tests, pure functions of arrays (numpy and scipy only): permutation
nulls that redo the whole fit under each permutation, p-values, one-sided equivalence bounds
and Holm's correction for many tests.

Why permutations. A statistic that is fitted and then evaluated out of fold (a cross-validated
classifier's AUC, a likelihood-ratio attack fitted on the other runs) is biased under the null
(a cross-validated AUC of pure noise sits below 0.5 on average), and resampling its fixed
out-of-fold scores ignores the fit's own variance: the third edition measured such bootstrap
intervals missing 0.5 in 11-22 % of null replicates instead of 5 %. A permutation test
instead exchanges what the null hypothesis says is exchangeable (which model of a seed's pair
learned t; which runs trained on an example) and refits everything, so the observed statistic
is compared with its own null distribution, bias included.

- :func:`eq1_test`: Eq. 1's distinguisher (a ridge classifier on standardised features,
  cross-validated with a seed's pair in one fold) under swaps of the unlearned/oracle labels
  within seed pairs;
- :func:`membership_test`: the per-example likelihood-ratio attack (leave one run out) and the
  task-level IN/OUT AUC under permutations of each example's membership across runs;
- :func:`kl_test`: per example, the Gaussian KL of two sets of paired runs' values (KLoM),
  under swaps within pairs or shuffles of all runs, optionally on each example's IN runs
  only;
- :func:`holm`: Holm's step-down adjustment; :func:`p_value` and :func:`upper_bound`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
from scipy.stats import rankdata

from pall_avalanche.audit.protocol import N_PERMUTATIONS

__all__ = ["N_PERMUTATIONS", "eq1_test", "gaussian_kl", "holm", "lira_loo_scores", "log_normal",
           "kl_test", "lower_bound", "membership_test", "p_value", "ridge_scores",
           "row_aucs", "seed_folds", "upper_bound", "worst_over_times"]

#: Permutations fitted at once (memory: a chunk's arrays are this many times a fit's).
CHUNK = 100

K = TypeVar("K")


# ------------------------------------------------------------------------- p-values
def p_value(observed: float, null: np.ndarray) -> float:
    """One-sided permutation p-value (1 + #{null ≥ observed}) / (1 + n): never 0, valid
    (P(p ≤ a) ≤ a under the null) for any number of permutations; NaN when the statistic is
    (a test that could not be computed is not a detection)."""
    if observed != observed:
        return float("nan")
    null = np.asarray(null, dtype=np.float64)
    return float((1 + np.count_nonzero(null >= observed - 1e-12)) / (1 + len(null)))


def upper_bound(observed: float, null: np.ndarray, center: float, level: float = 0.95
                ) -> float:
    """The one-sided ``level`` upper confidence bound of the statistic's true value by test
    inversion under a shift model (the statistic's spread is the null's, shifted): the
    largest value v for which observed − (v − center) is not below the null's
    (1 − level) quantile; at most 1 (the statistics bounded here, AUCs and their
    differences, are). "AUC ≤ bound at 95 %"."""
    bound = observed + center - np.quantile(np.asarray(null, dtype=np.float64), 1 - level)
    return float(min(1.0, bound))


def lower_bound(observed: float, null: np.ndarray, center: float, level: float = 0.95
                ) -> float:
    """The one-sided ``level`` lower confidence bound by the same inversion as
    :func:`upper_bound`: the smallest value v for which observed − (v − center) is not above
    the null's ``level`` quantile; at least 0. "AUC ≥ bound at 95 %"."""
    bound = observed + center - np.quantile(np.asarray(null, dtype=np.float64), level)
    return float(max(0.0, bound))


def worst_over_times(name: str, found: Mapping[str, tuple[float, np.ndarray]]
                     ) -> dict[str, Any]:
    """A statistic read at several times (``found``: time → (observed, its null), the nulls
    of one set of permutations, so that they pair up): ``<name>``, the largest, at
    ``<name>_time``, with ``<name>_p`` against the largest value under each permutation (a
    max-statistic test over the times), and per time ``<name>[<time>]`` with its own
    ``_p``."""
    worst = max(found, key=lambda time: found[time][0])
    out: dict[str, Any] = {
        name: found[worst][0], f"{name}_time": worst,
        f"{name}_p": p_value(found[worst][0], np.max([null for _, null in found.values()], 0))}
    for time, (value, null) in found.items():
        out[f"{name}[{time}]"] = value
        out[f"{name}[{time}]_p"] = p_value(value, null)
    return out


def holm(pvalues: Mapping[K, float]) -> dict[K, float]:
    """Holm's step-down adjusted p-values (family-wise error ≤ α when every adjusted p < α
    is rejected): the i-th smallest of m becomes max over j ≤ i of min(1, (m − j + 1)·p_(j)).
    NaN p-values (tests not run) stay NaN and do not count in m."""
    finite = {k: float(p) for k, p in pvalues.items() if p == p}
    order = sorted(finite, key=finite.get)
    m, running, out = len(order), 0.0, {k: float("nan") for k in pvalues}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * finite[key]))
        out[key] = running
    return out


# ------------------------------------------------------------------------- AUC rows
def row_aucs(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each row's AUC of ``scores`` against 0/1 ``labels`` (same shape, or labels one row for
    all), Mann-Whitney with ties one half; NaN for a row holding one class only."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.broadcast_to(np.asarray(labels, dtype=np.float64), scores.shape)
    ranks = rankdata(scores, axis=-1)
    n_pos = labels.sum(axis=-1)
    n_neg = labels.shape[-1] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((ranks * labels).sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, n, CHUNK):
        yield slice(start, min(n, start + CHUNK))


# ------------------------------------------------------------------------- Eq. 1
def seed_folds(groups: np.ndarray, n_folds: int, seed: int = 0) -> list[np.ndarray]:
    """Test indices of ``n_folds`` folds that keep every group (seed) whole: the groups in a
    random order fixed by ``seed``, dealt out with ``np.array_split`` (at most one fold per
    group)."""
    groups = np.asarray(groups)
    ids = np.random.default_rng(seed).permutation(np.unique(groups))
    return [np.flatnonzero(np.isin(groups, part))
            for part in np.array_split(ids, min(n_folds, len(ids)))]


def ridge_scores(features: np.ndarray, labels: np.ndarray, folds: list[np.ndarray],
                 ridge: float = 1.0) -> np.ndarray:
    """(P, n) out-of-fold scores of a ridge classifier for P label vectors at once.

    Per fold, the training samples' features are standardised (their mean and standard
    deviation), w = (XᵀX + ridge·I)⁻¹ Xᵀ(y − ȳ), and a held-out sample scores ȳ + x·w (the
    least-squares fit of the 0/1 label, Fisher's discriminant up to the ridge). The fit is
    linear in y, so every label vector shares the fold's one matrix inverse.

    :param features: (n, k).
    :param labels: (P, n) or (n,) 0/1 labels.
    :param folds: test indices per fold (:func:`seed_folds`).
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.atleast_2d(np.asarray(labels, dtype=np.float64))
    out = np.empty(y.shape)
    for test in folds:
        train = np.setdiff1d(np.arange(len(x)), test)
        mean, std = x[train].mean(0), x[train].std(0)
        std = np.where(std > 0, std, 1.0)
        xt, xs = (x[train] - mean) / std, (x[test] - mean) / std
        solve = np.linalg.solve(xt.T @ xt + ridge * np.eye(x.shape[1]), xt.T)   # (k, n_train)
        y_train = y[:, train]
        centre = y_train.mean(1, keepdims=True)
        out[:, test] = centre + (xs @ (solve @ (y_train - centre).T)).T
    return out


def eq1_test(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, *,
             n_folds: int = 5, n_permutations: int = N_PERMUTATIONS, seed: int = 0,
             paired: bool = True) -> dict[str, float]:
    """Eq. 1's distinguisher and its permutation test.

    Paired (the default), the samples of a group (a seed) are one unlearned model's (label 1)
    and its oracle twin's (label 0) summaries; under exact unlearning the two are
    exchangeable within the seed. The statistic is the AUC of :func:`ridge_scores`
    cross-validated over :func:`seed_folds`; its null redoes the cross-validation with the
    labels of each seed swapped (all of a group's labels flipped) with probability 1/2.

    Unpaired, a group is one model (one label) and no two groups share a seed: under exact
    unlearning all are exchangeable, and the null redoes the cross-validation with the
    groups' labels permuted among the groups (as many of each label as observed).

    Keys: ``auc``, ``p`` (one-sided: AUC above its null), ``upper`` (the one-sided 95 % bound,
    :func:`upper_bound`), ``null_mean``, ``null`` (the null's AUCs: the same flips for every
    call with the same groups and seed, so nulls of two sets of features pair up).
    """
    labels = np.asarray(labels, dtype=int)
    groups = np.asarray(groups)
    folds = seed_folds(groups, n_folds, seed)
    auc = float(row_aucs(ridge_scores(features, labels, folds)[0], labels))
    rng = np.random.default_rng(seed + 1)
    ids, index = np.unique(groups, return_inverse=True)
    own = np.zeros(len(ids), dtype=int)
    own[index] = labels
    if not paired and (own[index] != labels).any():
        raise ValueError("unpaired, every group is one model: its samples share one label")
    null = []
    for part in _chunks(n_permutations):
        size = part.stop - part.start
        if paired:
            flips = rng.integers(0, 2, (size, len(ids)))[:, index]
            permuted = np.where(flips == 1, 1 - labels, labels)
        else:
            permuted = rng.permuted(np.broadcast_to(own, (size, len(ids))), axis=1)[:, index]
        null.append(row_aucs(ridge_scores(features, permuted, folds), permuted))
    null_auc = np.concatenate(null)
    return {"auc": auc, "p": p_value(auc, null_auc), "upper": upper_bound(auc, null_auc, 0.5),
            "null_mean": float(null_auc.mean()), "null": null_auc}


# ------------------------------------------------------------------------- IN/OUT attack
def log_normal(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The log density of N(mean, std²) at ``x``, elementwise."""
    return -np.log(std) - 0.5 * np.log(2 * np.pi) - 0.5 * ((x - mean) / std) ** 2


def lira_loo_scores(features: np.ndarray, member: np.ndarray, min_std: float = 1e-3
                    ) -> np.ndarray:
    """(..., R, N) leave-one-run-out likelihood-ratio scores: run r's score of example n is
    :func:`~pall_avalanche.audit.attacks.lira_scores` of target r fitted on the other R − 1
    runs (per example and dimension a Gaussian of the IN runs and one of the OUT runs, own
    sample variances where each side has ≥ 2 runs, else the variances pooled over examples;
    0 where a side has no run), computed for every r at once from the sums over all runs
    minus run r's share. Leading axes (permutations) broadcast over ``member``.

    :param features: (R, N, d) or (R, N).
    :param member: (..., R, N) bool.
    """
    x = np.asarray(features, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, :, None]
    x = x - x.mean(axis=0, keepdims=True)          # centred per example: exact sums of squares
    member = np.asarray(member, dtype=bool)
    sides = []
    for side in (member, ~member):
        m = side[..., None].astype(np.float64)                       # (..., R, N, 1)
        count_all, total, square = m.sum(-3), (m * x).sum(-3), (m * x * x).sum(-3)
        count = count_all[..., None, :, :] - m                       # without run r
        s = total[..., None, :, :] - m * x
        q = square[..., None, :, :] - m * x * x
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = s / count
            squares = np.maximum(q - s * mean, 0.0)
            usable = count >= 2
            pooled = (np.where(usable, squares, 0.0).sum(-2, keepdims=True)
                      / np.where(usable, count - 1, 0.0).sum(-2, keepdims=True))
            var = np.where(usable, squares / (count - 1), np.nan)
        sides.append((count, mean, var, pooled))
    (n_in, mu_in, var_in, pool_in), (n_out, mu_out, var_out, pool_out) = sides
    own = (n_in >= 2) & (n_out >= 2)
    var_in = np.where(own, var_in, pool_in)
    var_out = np.where(own, var_out, pool_out)
    valid = (n_in > 0) & (n_out > 0) & np.isfinite(var_in) & np.isfinite(var_out)
    valid = valid.all(-1)
    std_in = np.maximum(np.sqrt(np.where(np.isfinite(var_in), var_in, 1.0)), min_std)
    std_out = np.maximum(np.sqrt(np.where(np.isfinite(var_out), var_out, 1.0)), min_std)
    with np.errstate(invalid="ignore"):
        ratio = (log_normal(x, np.nan_to_num(mu_in), std_in)
                 - log_normal(x, np.nan_to_num(mu_out), std_out)).sum(-1)
    return np.where(valid, ratio, 0.0)


def _attack_figures(scores: np.ndarray, member: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pooled AUC, mean per-run AUC, largest per-example AUC) over leading axes of (..., R, N)
    scores; an example's AUC ranks its IN runs against its OUT runs."""
    lead = scores.shape[:-2]
    pooled = row_aucs(scores.reshape(*lead, -1), member.reshape(*lead, -1))
    per_example = row_aucs(np.swapaxes(scores, -1, -2), np.swapaxes(member, -1, -2))
    return pooled, np.nanmean(row_aucs(scores, member), axis=-1), np.nanmax(per_example,
                                                                             axis=-1)


def membership_test(features: np.ndarray, member: np.ndarray, *,
                    n_permutations: int = N_PERMUTATIONS, seed: int = 0) -> dict[str, Any]:
    """The per-example attack (:func:`lira_loo_scores`) and its permutation null: each
    example's memberships shuffled across the runs (its IN count kept), the attack refitted.

    Keys: ``auc`` (pooled over runs and examples), ``inout_auc`` (the mean over runs of each
    run's IN-vs-OUT AUC), ``max_example_auc`` (the largest over examples of an example's
    IN-vs-OUT AUC across the runs: the per-example maximum test), ``scores`` (R, N), and
    ``null_auc`` / ``null_inout_auc`` / ``null_max_example_auc``: the statistics under each
    permutation (arrays, for :func:`p_value` and for comparisons with a control).
    """
    member = np.asarray(member, dtype=bool)
    scores = lira_loo_scores(features, member)
    observed = _attack_figures(scores, member)
    rng = np.random.default_rng(seed)
    nulls: list[list[np.ndarray]] = [[], [], []]
    for part in _chunks(n_permutations):
        keys = rng.random((part.stop - part.start, *member.shape))
        permuted = np.take_along_axis(member[None], np.argsort(keys, axis=1), axis=1)
        for null, value in zip(nulls, _attack_figures(lira_loo_scores(features, permuted),
                                                       permuted), strict=True):
            null.append(value)
    names = ("auc", "inout_auc", "max_example_auc")
    return {**{name: float(value) for name, value in zip(names, observed, strict=True)},
            "scores": scores,
            **{f"null_{name}": np.concatenate(null) for name, null in zip(names, nulls,
                                                                          strict=True)}}


# ------------------------------------------------------------------------- KLoM
def gaussian_kl(a: np.ndarray, b: np.ndarray, min_std: float = 1e-3) -> np.ndarray:
    """KL(N(μ_a, σ_a²) ‖ N(μ_b, σ_b²)) per column of (..., R, N) arrays, each side's mean
    and sample standard deviation (ddof = 1, floored at ``min_std``) over the runs axis."""
    return _weighted_kl(np.concatenate([a, b], -2),
                        np.concatenate([np.ones(a.shape), np.zeros(b.shape)], -2),
                        np.concatenate([np.zeros(a.shape), np.ones(b.shape)], -2), min_std)


def _weighted_kl(x: np.ndarray, wa: np.ndarray, wb: np.ndarray, min_std: float = 1e-3
                 ) -> np.ndarray:
    """:func:`gaussian_kl` of the runs of ``x`` (..., R, N) weighted 1 in ``wa`` against those
    weighted 1 in ``wb`` (0/1 weights of ``x``'s shape, per example); NaN for an example with
    fewer than 2 runs on a side."""
    def fit(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = w.sum(-2)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = (w * x).sum(-2) / n
            var = (w * (x - np.expand_dims(mu, -2)) ** 2).sum(-2) / (n - 1)
        return mu, np.where(n >= 2, np.maximum(np.sqrt(np.maximum(var, 0.0)), min_std), np.nan)

    (mu_a, s_a), (mu_b, s_b) = fit(wa), fit(wb)
    return np.log(s_b / s_a) + (s_a ** 2 + (mu_a - mu_b) ** 2) / (2 * s_b ** 2) - 0.5


def kl_test(first: np.ndarray, second: np.ndarray, *, member: np.ndarray | None = None,
            paired: bool = True, quantiles=(0.5, 0.9), n_permutations: int = N_PERMUTATIONS,
            seed: int = 0) -> dict[str, Any]:
    """Per example, the KL of its values in the ``first`` runs from those in the ``second``
    runs (:func:`gaussian_kl`; KLoM when the values are margins of unlearned and oracle
    models), summarised by quantiles over examples (the median and the worst decile), each
    with a permutation p-value.

    :param first: (R, N) values of N examples in R runs.
    :param second: (R, N), run r paired with ``first``'s run r (the same training seed and
        memberships).
    :param member: (R, N) booleans: per example, only the pairs where it was trained on
        (IN) enter its fit (KLoM on IN runs only); ``None``: every run.
    :param paired: the null swaps each pair with probability 1/2 (exchangeable given the
        shared training seed); ``False``: it shuffles all 2R runs between the two sides (an
        unpaired null, which does not lean on the pairing; with ``member`` each run keeps
        its memberships).
    Keys: ``kl`` (N per-example values) and per quantile q ``q<q>``, ``q<q>_p`` and
    ``q<q>_null`` (its null mean), e.g. ``q0.5``.
    """
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if first.shape != second.shape or first.ndim != 2:
        raise ValueError(f"paired values must be two equal (runs, examples) arrays, got "
                         f"{first.shape} and {second.shape}")
    runs = len(first)
    inside = np.ones(first.shape) if member is None else np.asarray(member, dtype=np.float64)
    x, weight = np.concatenate([first, second]), np.concatenate([inside, inside])
    side = np.r_[np.ones(runs), np.zeros(runs)]

    def kl(sides: np.ndarray) -> np.ndarray:      # sides: (..., 2R) 1 = first
        s = sides[..., None]
        return _weighted_kl(x, s * weight, (1 - s) * weight)

    found = kl(side)
    observed = np.nanquantile(found, quantiles)
    rng = np.random.default_rng(seed)
    nulls = []
    for part in _chunks(n_permutations):
        count = part.stop - part.start
        if paired:
            swap = rng.integers(0, 2, (count, runs)).astype(np.float64)
            sides = np.concatenate([1 - swap, swap], axis=1)
        else:
            sides = np.stack([rng.permutation(side) for _ in range(count)])
        nulls.append(np.nanquantile(kl(sides), quantiles, axis=-1).T)
    null = np.concatenate(nulls)
    out: dict[str, Any] = {"kl": found}
    for i, q in enumerate(quantiles):
        out[f"q{q:g}"] = float(observed[i])
        out[f"q{q:g}_p"] = p_value(observed[i], null[:, i])
        out[f"q{q:g}_null"] = float(null[:, i].mean())
    return out
