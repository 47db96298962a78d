"""The attack statistics, pure functions of arrays (numpy and scipy only): per-example
logit-scaled confidences, a per-example Gaussian likelihood-ratio membership attack against
given target runs in the style of LiRA / U-LiRA (Carlini et al. 2022, "Membership inference
attacks from first principles"; Hayes et al. 2025, "Inexact unlearning needs more careful
evaluations"; every run left out in turn, all at once and under permutations:
:func:`pall_avalanche.audit.permutation.lira_loo_scores`), ROC summaries, and a relearning
attack's steps-to-threshold gap."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

from pall_avalanche.audit.permutation import log_normal, row_aucs
from pall_avalanche.audit.statistics import roc_auc
from pall_avalanche.evaluation.metrics import t_interval

__all__ = ["attack_summary", "confidence_features", "lira_scores", "logit_confidence",
           "relearning_gap", "roc_curve", "steps_to_threshold", "tpr_at_fpr"]


# ------------------------------------------------------------------------- confidences
def logit_confidence(logits: np.ndarray, y: np.ndarray, head: int, classes_per_task: int
                     ) -> np.ndarray:
    """Per example, the logit-scaled confidence of label ``y`` under head ``head``:
    φ = log p_y − log(1 − p_y) with p the softmax of that head's block, computed stably as
    z_y − logsumexp(z_j, j ≠ y) (float64).

    :param logits: (n, T·cpt) logits of every head; head h is columns h·cpt .. (h+1)·cpt − 1.
    :param y: (n,) labels in 0 .. cpt − 1.
    :param head: the head whose block is read.
    :param classes_per_task: cpt, the classes of one head (at least 2).
    """
    logits = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y).astype(int).reshape(-1)
    cpt = int(classes_per_task)
    if cpt < 2:
        raise ValueError(f"classes_per_task must be at least 2, got {classes_per_task}")
    if logits.ndim != 2 or logits.shape[1] % cpt:
        raise ValueError(f"logits of shape {logits.shape} are not (n, T·{cpt})")
    n_heads = logits.shape[1] // cpt
    if not 0 <= head < n_heads:
        raise ValueError(f"head {head} out of range 0..{n_heads - 1}")
    if len(y) != len(logits):
        raise ValueError(f"{len(y)} labels for {len(logits)} logit rows")
    if len(y) and (y.min() < 0 or y.max() >= cpt):
        raise ValueError(f"labels must lie in 0..{cpt - 1}")
    block = logits[:, head * cpt:(head + 1) * cpt]
    rows = np.arange(len(y))
    true = block[rows, y]
    others = block.copy()
    others[rows, y] = -np.inf
    return true - logsumexp(others, axis=1)


def confidence_features(logits: np.ndarray, y: np.ndarray, heads: Sequence[int],
                        classes_per_task: int) -> np.ndarray:
    """(n, len(heads)): :func:`logit_confidence` of label ``y`` under each head in ``heads``,
    one column per head in the given order."""
    columns = [logit_confidence(logits, y, h, classes_per_task) for h in heads]
    if not columns:
        return np.zeros((len(np.asarray(logits)), 0))
    return np.column_stack(columns)


# ------------------------------------------------------------------------- likelihood ratio
def _as_runs(features: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    features = np.asarray(features, dtype=np.float64)
    if features.ndim == 2:
        features = features[:, :, None]
    if features.ndim != 3:
        raise ValueError(f"features must be (R, N, d) or (R, N), got shape {features.shape}")
    member = np.asarray(member, dtype=bool)
    if member.shape != features.shape[:2]:
        raise ValueError(f"member has shape {member.shape}; expected {features.shape[:2]}")
    return features, member


def _gaussians(values: np.ndarray, mask: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per example and dimension: (count, mean, per-example sample variance (NaN below 2
    values), pooled within-example variance per dimension (NaN where undefined))."""
    weights = mask[:, :, None].astype(np.float64)                  # (R, N, 1)
    count = mask.sum(axis=0)                                       # (N,)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (weights * values).sum(axis=0) / count[:, None]     # (N, d)
        squares = (weights * (values - np.nan_to_num(mean)) ** 2).sum(axis=0)  # (N, d)
        var = np.where(count[:, None] >= 2, squares / (count[:, None] - 1), np.nan)
        usable = count >= 2
        dof = (count[usable] - 1).sum()
        pooled = squares[usable].sum(axis=0) / dof if dof > 0 else np.full(values.shape[2],
                                                                            np.nan)
    return count, mean, var, pooled


def lira_scores(features: np.ndarray, member: np.ndarray, targets: Sequence[int], *,
                global_variance: bool = False, min_std: float = 1e-3) -> np.ndarray:
    """(len(targets), N) likelihood-ratio membership scores of the target runs.

    Per example n and feature dimension k, one Gaussian is fit to the values of the
    non-target ("shadow") runs where n was IN the training data and another to those where
    it was OUT: the mean, and the sample variance (ddof = 1). Dimensions are independent
    (diagonal covariance). A target run's vector x scores
    Σ_k [log N(x_k; μ_in, σ_in) − log N(x_k; μ_out, σ_out)]; higher = more likely IN.

    With ``global_variance`` every example uses, per dimension, one pooled within-example
    variance Σ_n Σ_r (x − μ_n)² / Σ_n (k_n − 1) over the examples with k_n ≥ 2 shadow values
    (separately for IN and OUT), LiRA's choice for few shadow models. An example with fewer
    than 2 IN or fewer than 2 OUT shadow runs uses these global variances for both sides; one
    with 0 IN or 0 OUT shadow runs, or whose variance cannot be estimated at all, scores 0.
    Standard deviations are floored at ``min_std``. The target runs' own features and
    memberships never enter the fit.

    :param features: (R, N, d) statistics of R runs on N examples ((R, N) means d = 1).
    :param member: (R, N) bool, whether example n was in run r's training data.
    :param targets: distinct indices of the runs to score.
    :param global_variance: pool the variances over examples.
    :param min_std: floor of every standard deviation.
    """
    features, member = _as_runs(features, member)
    n_runs = features.shape[0]
    targets = np.asarray(targets, dtype=int).reshape(-1)
    if len(np.unique(targets)) != len(targets) or (
            len(targets) and (targets.min() < 0 or targets.max() >= n_runs)):
        raise ValueError(f"targets must be distinct run indices in 0..{n_runs - 1}")
    shadow = np.setdiff1d(np.arange(n_runs), targets)
    values, mask = features[shadow], member[shadow]

    n_in, mu_in, var_in, pool_in = _gaussians(values, mask)
    n_out, mu_out, var_out, pool_out = _gaussians(values, ~mask)
    own = (n_in >= 2) & (n_out >= 2) & (not global_variance)
    var_in = np.where(own[:, None], var_in, pool_in[None, :])
    var_out = np.where(own[:, None], var_out, pool_out[None, :])
    valid = ((n_in > 0) & (n_out > 0) & np.isfinite(var_in).all(axis=1)
             & np.isfinite(var_out).all(axis=1))                    # (N,)
    std_in = np.maximum(np.sqrt(np.where(valid[:, None], var_in, 1.0)), min_std)
    std_out = np.maximum(np.sqrt(np.where(valid[:, None], var_out, 1.0)), min_std)
    mu_in = np.where(valid[:, None], mu_in, 0.0)
    mu_out = np.where(valid[:, None], mu_out, 0.0)

    x = features[targets]                                           # (K, N, d)
    ratio = (log_normal(x, mu_in, std_in) - log_normal(x, mu_out, std_out)).sum(axis=2)
    return np.where(valid[None, :], ratio, 0.0)


# ------------------------------------------------------------------------- ROC
def _binary(scores: Sequence[float], labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    n_pos, n_neg = int((labels == 1).sum()), int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0 or n_pos + n_neg != len(labels):
        raise ValueError("labels must be 0/1 with both classes present")
    return scores, labels.astype(int)


def roc_curve(scores: Sequence[float], labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of the rules "score ≥ c" for every distinct score c, from the highest down,
    preceded by (0, 0) (no example called positive); the last point is (1, 1). Tied scores
    are always on the same side.

    :param scores: higher = more likely positive.
    :param labels: 1 (positive) or 0 (negative); both must occur.
    """
    scores, labels = _binary(scores, labels)
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], labels[order]
    tp, fp = np.cumsum(hits), np.cumsum(1 - hits)
    ends = np.r_[np.flatnonzero(np.diff(ranked) != 0), len(ranked) - 1]
    return np.r_[0.0, fp[ends] / fp[-1]], np.r_[0.0, tp[ends] / tp[-1]]


def tpr_at_fpr(scores: Sequence[float], labels: Sequence[int], fpr: float) -> float:
    """The largest TPR over the rules "score ≥ c" whose FPR is at most ``fpr`` (ties on the
    same side). When no rule calling some example positive has FPR ≤ ``fpr`` (few
    negatives), this is the TPR at FPR 0, possibly 0."""
    return _tpr_at(roc_curve(scores, labels), fpr)


def _tpr_at(curve: tuple[np.ndarray, np.ndarray], fpr: float) -> float:
    fprs, tprs = curve
    return float(tprs[fprs <= fpr + 1e-12].max())


def _fpr_key(fpr: float) -> str:
    return f"tpr@{fpr:g}"


def attack_summary(scores: np.ndarray, member: np.ndarray, *,
                   fprs: Sequence[float] = (0.01, 0.001)) -> dict[str, float | int]:
    """AUC and TPR at each FPR in ``fprs`` of an attack's scores on runs × target examples,
    and the task-level attack (their intervals and p-values come from the permutation nulls:
    :func:`~pall_avalanche.audit.permutation.membership_test`).

    Keys: ``auc``, per FPR f ``tpr@f`` (f written with ``:g``, e.g. ``tpr@0.01``),
    ``inout_auc`` (the mean over runs of each run's own AUC: its IN examples against its OUT
    examples), ``n_groups`` (runs) and ``n_scores``.

    :param scores: (runs, examples) scores, higher = more likely IN.
    :param member: (runs, examples) whether the example was IN for the run (0/1).
    """
    scores, member = np.asarray(scores, dtype=float), np.asarray(member).astype(int)
    if scores.ndim != 2 or scores.shape != member.shape:
        raise ValueError(f"scores {scores.shape} and member {member.shape} must be equal "
                         "(runs, examples) matrices")
    per_run = row_aucs(scores, member)
    flat, labels = _binary(scores.ravel(), member.ravel())
    curve = roc_curve(flat, labels)
    out: dict[str, float | int] = {"auc": roc_auc(flat, labels)}
    out.update({_fpr_key(f): _tpr_at(curve, f) for f in fprs})
    out["inout_auc"] = (float(np.nanmean(per_run)) if np.isfinite(per_run).any()
                        else float("nan"))
    out["n_groups"], out["n_scores"] = scores.shape[0], scores.size
    return out


# ------------------------------------------------------------------------- relearning
def steps_to_threshold(curve: Sequence[float], threshold: float) -> int | None:
    """The first index i with ``curve[i] ≥ threshold`` (``curve[0]`` is before any
    relearning step), or None if the curve never reaches it."""
    for i, value in enumerate(curve):
        if value >= threshold:
            return i
    return None


def relearning_gap(unlearned_curves: Sequence[Sequence[float]],
                   oracle_curves: Sequence[Sequence[float]], threshold: float, at_step: int,
                   level: float = 0.95) -> dict[str, float | int]:
    """The relearning attack's gaps over seeds, each a mean with a Student-t interval:

    - ``steps_gap``: oracle steps − unlearned steps to reach ``threshold`` (positive = the
      unlearned model relearns faster). A curve that never reaches the threshold counts as
      ``len(curve)`` steps, i.e. censored at its end, so the gap is then a bound, not exact.
    - ``acc_gap``: unlearned accuracy − oracle accuracy at index ``at_step``.

    Keys ``steps_gap``, ``steps_gap_low``, ``steps_gap_high``, ``acc_gap``, ``acc_gap_low``,
    ``acc_gap_high`` and ``n`` (seeds).

    :param unlearned_curves: per seed, the accuracy curve of the unlearned model while
        relearning (index 0 = before any step).
    :param oracle_curves: per seed, the oracle's curve, the same length as its pair.
    :param at_step: the index at which the accuracies are compared.
    :param level: confidence level of the intervals (at least 2 seeds are needed).
    """
    if len(unlearned_curves) != len(oracle_curves):
        raise ValueError(f"{len(unlearned_curves)} unlearned curves for {len(oracle_curves)} "
                         f"oracle curves")
    steps, accs = [], []
    for u, o in zip(unlearned_curves, oracle_curves, strict=True):
        if len(u) != len(o):
            raise ValueError(f"paired curves have lengths {len(u)} and {len(o)}")
        if not 0 <= at_step < len(u):
            raise ValueError(f"at_step {at_step} outside a curve of length {len(u)}")
        s_u, s_o = steps_to_threshold(u, threshold), steps_to_threshold(o, threshold)
        steps.append((len(o) if s_o is None else s_o) - (len(u) if s_u is None else s_u))
        accs.append(float(u[at_step]) - float(o[at_step]))
    out: dict[str, float | int] = {}
    for name, values in (("steps_gap", steps), ("acc_gap", accs)):
        mean, low, high = t_interval(values, level)
        out[name], out[f"{name}_low"], out[f"{name}_high"] = mean, low, high
    out["n"] = len(steps)
    return out
