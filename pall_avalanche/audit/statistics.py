"""The audit's statistics, pure functions of arrays: divergences, AUCs, Student-t intervals,
the summary features of a model's outputs (Eq. 1) and the membership attacks of one model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from pall_avalanche.audit.protocol import N_FOLDS

__all__ = ["N_FOLDS", "distinguisher_scores", "head_probabilities", "js_divergence", "mean_js",
           "membership_aucs", "model_features", "roc_auc"]


def js_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen–Shannon divergence in bits between the distributions on the last axis
    (0 ≤ JS ≤ 1); one value per leading index.

    :param p: probabilities, shape (..., k), rows summing to 1.
    :param q: probabilities of the same shape.
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != q.shape:
        raise ValueError(f"p and q have different shapes {p.shape} and {q.shape}")
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(a > 0, a * np.log2(a / m), 0.0)
        return terms.sum(axis=-1)

    return 0.5 * kl(p) + 0.5 * kl(q)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve: the probability that a random positive scores above a random
    negative (ties count one half), by the Mann–Whitney rank sum.

    :param scores: higher = more likely positive.
    :param labels: 1 (positive) or 0 (negative); both must occur.
    """
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels)
    n_pos, n_neg = int((labels == 1).sum()), int((labels == 0).sum())
    if n_pos == 0 or n_neg == 0 or n_pos + n_neg != len(labels):
        raise ValueError(f"labels must be 0/1 with both classes present, got {labels.tolist()}")
    ranks = stats.rankdata(scores)
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ------------------------------------------------------------------------- features
def head_probabilities(logits: np.ndarray, classes_per_task: int) -> np.ndarray:
    """(n, T·cpt) logits of every head → (n, T, cpt) per-head softmax probabilities."""
    logits = np.asarray(logits, dtype=float)
    blocks = logits.reshape(len(logits), -1, classes_per_task)
    blocks = blocks - blocks.max(axis=-1, keepdims=True)
    exp = np.exp(blocks)
    return exp / exp.sum(axis=-1, keepdims=True)


def _entropy(probs: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(probs > 0, probs * np.log2(probs), 0.0).sum(axis=-1)


def _per_sample(logits: np.ndarray, y: np.ndarray, task: int, cpt: int) -> np.ndarray:
    """Per-sample features: each head's max probability and entropy, then t's head's CE loss
    and true-class probability."""
    probs = head_probabilities(logits, cpt)
    true = probs[np.arange(len(y)), task, y]
    return np.column_stack([probs.max(-1), _entropy(probs), -np.log(np.clip(true, 1e-12, 1)),
                            true])


def model_features(output: Mapping[str, Any], task: int, classes_per_task: int,
                   head_only: bool = False) -> np.ndarray:
    """Summary features of one final model's behaviour on task ``task``'s training inputs:
    per head, the mean max probability, mean entropy and mean logit norm; for t's head also
    the accuracy and the mean CE loss. ``head_only`` keeps t's head's five features.

    :param output: a probe output of the task (``{"train": {"logits", "y"}, ...}``).
    """
    logits = np.asarray(output["train"]["logits"], dtype=float)
    y = np.asarray(output["train"]["y"])
    probs = head_probabilities(logits, classes_per_task)
    blocks = logits.reshape(len(logits), -1, classes_per_task)
    per_head = np.stack([probs.max(-1).mean(0), _entropy(probs).mean(0),
                         np.linalg.norm(blocks, axis=-1).mean(0)], axis=1)  # (T, 3)
    true = probs[np.arange(len(y)), task, y]
    own = [float((probs[:, task].argmax(-1) == y).mean()),
           float(-np.log(np.clip(true, 1e-12, 1)).mean())]
    if head_only:
        return np.concatenate([per_head[task], own])
    return np.concatenate([per_head.reshape(-1), own])


def _classifier():
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))


def distinguisher_scores(features: np.ndarray, labels: np.ndarray, n_folds: int = N_FOLDS
                         ) -> np.ndarray:
    """Out-of-fold probabilities of label 1 from a standardised logistic regression,
    stratified ``n_folds``-fold cross-validation (shuffled, fixed seed): the feature attack
    of :func:`membership_aucs`.

    :param features: (n, k) features.
    :param labels: 0/1 per sample.
    """
    labels = np.asarray(labels)
    splits = min(n_folds, int(np.bincount(labels).min()))
    folds = StratifiedKFold(n_splits=splits, shuffle=True, random_state=0)
    return cross_val_predict(_classifier(), features, labels, cv=folds,
                             method="predict_proba")[:, 1]


def membership_aucs(output: Mapping[str, Any], task: int, classes_per_task: int
                    ) -> tuple[float, float]:
    """(loss attack AUC, feature attack AUC) of membership inference on one model: members
    are t's training inputs, non-members its held-out inputs of the same classes."""
    train, test = output["train"], output["test"]
    feats = np.concatenate([
        _per_sample(np.asarray(train["logits"]), np.asarray(train["y"]), task, classes_per_task),
        _per_sample(np.asarray(test["logits"]), np.asarray(test["y"]), task, classes_per_task)])
    labels = np.r_[np.ones(len(train["y"]), int), np.zeros(len(test["y"]), int)]
    loss_auc = roc_auc(-feats[:, -2], labels)
    return loss_auc, roc_auc(distinguisher_scores(feats, labels), labels)


def mean_js(a: Mapping[str, Any], b: Mapping[str, Any], classes_per_task: int) -> float:
    """The mean Jensen-Shannon divergence between two models' head probabilities on the same
    inputs (``a`` and ``b``: probe outputs with ``"logits"`` for ``"train"`` and ``"test"``)."""
    logits_a = np.concatenate([np.asarray(a[s]["logits"]) for s in ("train", "test")])
    logits_b = np.concatenate([np.asarray(b[s]["logits"]) for s in ("train", "test")])
    return float(js_divergence(head_probabilities(logits_a, classes_per_task),
                               head_probabilities(logits_b, classes_per_task)).mean())

